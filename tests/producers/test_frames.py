"""producers.frames: the same rows as pandas' itertuples and to_dict("records"), values and types."""

from __future__ import annotations

import numpy as np
import pandas as pd

from producers.frames import records, tuples


def _frame() -> pd.DataFrame:
    df = pd.DataFrame(
        {
            "session": ["a", "b", None],
            "offset": pd.Series([1, None, 3], dtype="Int64"),
            "seq": [0, 1, 2],
            "sent": [b"x", None, b"z"],
            "score": [0.5, float("nan"), 2.0],
            "at": pd.to_datetime(["2026-01-01", "2026-01-02", None]),
            "partition": pd.Series([0, 1, 2], dtype="int32"),
        }
    )
    df.attrs["run"] = {"seed": 7}
    return df


def _typed(rows):
    return [[(type(v), v) for v in (row.values() if isinstance(row, dict) else row)] for row in rows]


def test_tuples_are_itertuples_field_for_field_and_type_for_type_but_python_ints():
    df = _frame()
    mine, theirs = tuples(df), list(df.itertuples(index=False))
    assert [r._fields for r in mine] == [r._fields for r in theirs]
    python_ints = [[(int, int(v)) if isinstance(v, np.integer) else (type(v), v) for v in row] for row in theirs]
    assert repr(_typed(mine)) == repr(python_ints)  # repr: NaN and NA compare unequal to themselves
    assert [r.offset for r in mine[::2]] == [1, 3] and {type(r.offset) for r in mine[::2]} == {int} and mine[1].offset is pd.NA


def test_records_are_to_dict_records_key_for_key_and_type_for_type():
    df = _frame()
    assert [list(r) for r in records(df)] == [list(r) for r in df.to_dict("records")]
    assert repr(_typed(records(df))) == repr(_typed(df.to_dict("records")))


def test_an_empty_frame_gives_no_rows():
    df = _frame().iloc[0:0]
    assert tuples(df) == [] and records(df) == []
