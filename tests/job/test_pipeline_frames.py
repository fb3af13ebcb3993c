"""The operator's output frames convert to Arrow the way PySpark converts them (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.conversion import PandasToArrowConversion
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from job.engine.errors import ConfigError
from job.spark import lake
from job.spark.config import JobConfig
from job.spark.pipeline import _union_frame, apply_batch, expire_session
from producers.contract import encode
from tests.streams import SID, base_session

_TYPES = {"string": StringType(), "bigint": LongType(), "int": IntegerType(), "binary": BinaryType()}


def test_union_frame_with_columns_no_row_filled_converts_to_plain_arrow_arrays():
    frame = _union_frame(
        [
            {"output": "rows", "session": "s", "epoch": 0, "seq": 2, "partition": 1, "offset": 5, "data": "{}"},
            {"output": "sessions", "session": "s", "rows": 3, "status": None},
        ]
    )
    schema = StructType([StructField(name, _TYPES[kind], True) for name, kind in lake.UNION_COLUMNS])
    # the conversion PySpark 4.2 applies to a pandas operator's output frames
    batch = PandasToArrowConversion.convert(frame, schema, timezone="UTC", arrow_cast=True, assign_cols_by_name=True)
    for name, kind in lake.UNION_COLUMNS:
        array = batch.column(name)
        assert isinstance(array, pa.Array), f"{name} became {type(array).__name__}"
    assert frame["offset"].tolist()[0] == 5 and frame["reason"].tolist() == [None, None]


def _union_frame_by_pandas(rows):
    """The obvious construction (the operator's before it cost 4.5 ms a session): the oracle."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=[name for name, _ in lake.UNION_COLUMNS])
    for name, kind in lake.UNION_COLUMNS:
        if kind in ("bigint", "int"):
            frame[name] = frame[name].astype("Int64" if kind == "bigint" else "Int32")
        else:
            column = frame[name].astype(object)
            frame[name] = column.where(column.notna(), None)
    return frame


def test_union_frame_equals_the_obvious_pandas_construction_cell_for_cell():
    import pandas as pd

    rows = [
        {"output": "rows", "session": "s", "epoch": 0, "seq": 2, "partition": 1, "offset": 5, "data": '{"a": 1}', "op": "upsert"},
        {"output": "quarantine", "session": "s", "topic": "t", "partition": 0, "offset": 2**40, "value": b"\xff{",
         "key": None, "reason": "invalid-json", "processed_ms": 1_732_233_600_123},
        {"output": "sessions", "session": "s", "rows": 3, "status": "open", "last_seq": -1, "gaps": 0},
    ]
    for subset in (rows, rows[:1], rows[2:], []):
        pd.testing.assert_frame_equal(_union_frame(subset), _union_frame_by_pandas(subset))
    frame = _union_frame(rows)
    assert frame["value"].tolist() == [None, b"\xff{", None] and frame["offset"].tolist() == [5, 2**40, pd.NA]


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("policy", "lenient", "strict, resync, window, none"),
        ("checkpoint", "s3a://lake/ckpt", "atomic rename"),
        ("trigger", "soon", "5 seconds"),
        ("topic_prefix", "bad prefix!", "Kafka topic prefix"),
        ("window", 0, "between 1 and 10000"),
        ("operator", "flatMapGroupsWithState", "transformWithStateInPandas, applyInPandasWithState"),
        ("fetch_max_wait_ms", -1, "Kafka's default is 500"),
        ("input_tasks", -1, "0 for one task per Kafka partition"),
        ("sink_writers", -1, "0: sort by output"),
    ],
)
def test_bad_job_config_names_field_value_and_fix_before_spark_starts(field, value, fix, tmp_path):
    kwargs = {"output": "s3a://lake/job", "checkpoint": tmp_path, field: value}
    with pytest.raises(ConfigError) as info:
        JobConfig(**kwargs)
    assert field in str(info.value) and repr(value) in str(info.value) and fix in str(info.value)


def _input_frames(messages, order):
    """The operator's input columns for ``messages`` at offsets 0.., delivered in ``order``."""
    import pandas as pd

    rows = [
        {"session_key": SID, "key_missing": False, "value": encode(m), "topic": "t", "partition": 0,
         "offset": i, "kafka_ts_ms": 1000 + i}
        for i, m in enumerate(messages)
    ]  # fmt: skip
    shuffled = pd.DataFrame([rows[i] for i in order])
    return [shuffled.iloc[:3], shuffled.iloc[3:]]  # Spark may hand a group over in several frames


def test_apply_batch_sorts_a_shuffled_group_by_offset_before_applying():
    messages = base_session()
    in_order, _ = apply_batch(None, _input_frames(messages, range(len(messages))), policy="strict", window=8, now_ms=1)
    state, frame = apply_batch(None, _input_frames(messages, [6, 2, 0, 5, 1, 4, 3]), policy="strict", window=8, now_ms=1)
    assert state == in_order
    status = frame[frame["output"] == "sessions"].iloc[0]
    assert status["status"] == "ended" and status["offset"] == 6
    assert frame[frame["output"] == "quarantine"].empty


def test_an_expired_session_quarantines_what_it_still_holds():
    messages = base_session()[:4]
    held = [messages[0], messages[1], messages[3]]  # seq 2 never comes: policy window holds seq 3
    state, _ = apply_batch(None, _input_frames(held, range(3)), policy="window", window=8, now_ms=1)
    frame = expire_session(state, now_ms=2)
    quarantined = frame[frame["output"] == "quarantine"]
    assert quarantined["offset"].tolist() == [2] and quarantined["reason"].notna().all()
    assert frame[frame["output"] == "sessions"]["processed_ms"].tolist() == [2]
    assert expire_session(None, now_ms=2) is None


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--operator", "flatMapGroupsWithState"], "operator='flatMapGroupsWithState'"),
        (["--policy", "lenient"], "policy='lenient'"),
        (["--trigger", "soon"], "trigger='soon'"),
    ],
)
def test_job_cli_refuses_bad_flags_with_exit_2_before_any_spark(argv, named, capsys, tmp_path):
    from job.cli import main

    assert main(["run", "--checkpoint", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: job config ") and named in err
    assert "[job]" not in err  # nothing started
