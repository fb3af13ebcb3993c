"""Rows of a small DataFrame as Python values, without pandas' cost per call.

The verifier and its oracle walk one session's frames at a time, thousands of them for a fleet:
``itertuples`` and ``to_dict("records")`` build a Series per column on every call and box each
value, and on a lake of a million row changes that was 40 % of the verifier's time
(docs/verifier.md). Both give the values pandas gives (``Series.tolist``: Python scalars,
``Timestamp``, ``pd.NA``), but for one improvement: a nullable integer column's values are
Python ``int`` where ``itertuples`` gives numpy's.
"""

from __future__ import annotations

import functools
from collections import namedtuple
from typing import Any

import pandas as pd

__all__ = ["records", "tuples"]


@functools.lru_cache(maxsize=64)
def _row_type(columns: tuple[str, ...]) -> Any:
    return namedtuple("Row", columns, rename=True)  # noqa: PYI024 - fields known only at run time


def tuples(df: pd.DataFrame) -> list[Any]:
    """``list(df.itertuples(index=False))``: one namedtuple per row, fields named by the columns."""
    kind = _row_type(tuple(map(str, df.columns)))
    return list(map(kind._make, zip(*(df[c].tolist() for c in df.columns), strict=True)))


def records(df: pd.DataFrame) -> list[dict[str, Any]]:
    """``df.to_dict("records")``: one dict per row, keyed by the columns (a nullable column's
    missing values are None there, as ``to_dict`` gives them)."""
    columns = list(df.columns)
    values = zip(*(_none_for_na(df[c]) for c in columns), strict=True)
    return [dict(zip(columns, row, strict=True)) for row in values]


def _none_for_na(column: pd.Series) -> list[Any]:
    values = column.tolist()
    if isinstance(column.dtype, pd.api.extensions.ExtensionDtype):
        return [None if v is pd.NA else v for v in values]
    return values
