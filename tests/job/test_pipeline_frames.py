"""The operator's output frames convert to Arrow the way PySpark converts them (no Spark needed)."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest
from pyspark.sql.conversion import PandasToArrowConversion
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from job.engine.errors import ConfigError
from job.spark import lake
from job.spark.config import JobConfig, trigger_ms
from job.spark.pipeline import _frame, apply_batch, expire_session, step_columns
from producers.contract import encode
from tests.streams import SID, base_session

_TYPES = {"string": StringType(), "bigint": LongType(), "int": IntegerType(), "binary": BinaryType()}


def _schema():
    return StructType([StructField(name, _TYPES[kind], True) for name, kind in lake.UNION_COLUMNS])


def _arrow(frame):
    """The conversion PySpark 4.2 applies to a pandas operator's output frames."""
    return PandasToArrowConversion.convert(frame, _schema(), timezone="UTC", arrow_cast=True, assign_cols_by_name=True)


def _rows_by_dicts(step, processed_ms):
    """The obvious construction (the operator's before it built columns): a dict per output row."""
    import dataclasses

    out = [{"output": "rows", **dataclasses.asdict(c)} for c in step.changes]
    for q in step.quarantine:
        record = dataclasses.asdict(q)
        if isinstance(record["key"], bytes):
            record["key"] = record["key"].decode("utf-8", "replace")
        out.append({"output": "quarantine", **record, "processed_ms": processed_ms})
    status = {lake.STATUS_COLUMNS.get(k, k): v for k, v in dataclasses.asdict(step.status).items()}
    return out + [{"output": "sessions", **status, "processed_ms": processed_ms}]


def _frame_by_pandas(rows):
    """Rows as the typed frame the operator built before (nullable Int64/Int32 columns): the oracle."""
    import pandas as pd

    frame = pd.DataFrame(rows, columns=[name for name, _ in lake.UNION_COLUMNS])
    for name, kind in lake.UNION_COLUMNS:
        if kind in ("bigint", "int"):
            frame[name] = frame[name].astype("Int64" if kind == "bigint" else "Int32")
        else:
            column = frame[name].astype(object)
            frame[name] = column.where(column.notna(), None)
    return frame


def _a_step_with_every_output():
    """One session's step with row changes, quarantined records (one undecodable, one with a
    key in bytes) and its status."""
    from job.engine import session as sm

    messages = base_session()
    records = [sm.Record("t", 0, i, SID, encode(m), 1000 + i) for i, m in enumerate(messages)]
    records.insert(3, sm.Record("t", 0, 99, SID, b"\xff{", 1099))
    step = sm.step(None, records, policy="resync")
    assert step.changes and step.quarantine, "the step should have changes and quarantined records"
    bytes_key = dataclasses.replace(step.quarantine[0], key=SID.encode())
    return dataclasses.replace(step, quarantine=[*step.quarantine, bytes_key])


def test_step_columns_hold_what_a_dict_per_output_row_holds():
    step = _a_step_with_every_output()
    columns = step_columns(step.changes, step.quarantine, [step.status], 1_732_233_600_123)
    assert list(columns) == [name for name, _ in lake.UNION_COLUMNS]
    rows = _rows_by_dicts(step, 1_732_233_600_123)
    assert [dict(zip(columns, values)) for values in zip(*columns.values())] == [
        {name: row.get(name) for name, _ in lake.UNION_COLUMNS} for row in rows
    ]
    assert columns["key"][-3:-1] == [step.quarantine[0].key, SID]  # the bytes key decoded


def test_the_operators_frame_converts_to_the_arrow_arrays_of_the_typed_frame():
    step = _a_step_with_every_output()
    rows = _rows_by_dicts(step, 7)
    frame = _frame(step_columns(step.changes, step.quarantine, [step.status], 7))
    for subset in (slice(None), slice(0, 1), slice(-1, None), slice(0, 0)):
        ours, theirs = _arrow(frame.iloc[subset].reset_index(drop=True)), _arrow(_frame_by_pandas(rows[subset]))
        for name, _ in lake.UNION_COLUMNS:
            assert isinstance(ours.column(name), pa.Array), f"{name} became {type(ours.column(name)).__name__}"
            assert ours.column(name).equals(theirs.column(name)), name
    assert step.quarantine[0].value == b"\xff{" and frame["value"].tolist()[len(step.changes)] == b"\xff{"
    assert frame["offset"].tolist()[-1] == step.status.last_offset


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
        ("output", "lake/job", "s3a://bucket/prefix"),
        ("output", "s3a:///job", "s3a://bucket/prefix"),  # no bucket: Spark's S3A said only "bucket is null/empty"
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
        {
            "session_key": SID,
            "key_missing": False,
            "value": encode(m),
            "topic": "t",
            "partition": 0,
            "offset": i,
            "kafka_ts_ms": 1000 + i,
        }
        for i, m in enumerate(messages)
    ]
    shuffled = pd.DataFrame([rows[i] for i in order])
    return [shuffled.iloc[:3], shuffled.iloc[3:]]  # Spark may hand a group over in several frames


@pytest.mark.parametrize(
    ("trigger", "ms"),
    [
        ("1 second", 1000),
        ("500 ms", 500),
        ("250 milliseconds", 250),
        ("2 seconds", 2000),
        ("5s", 5000),
        ("1 minute", 60_000),
        ("3 m", 180_000),
        ("available-now", None),
        ("soon", None),
    ],
)
def test_trigger_ms_reads_every_interval_the_job_accepts(trigger, ms):
    assert trigger_ms(trigger) == ms


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


def test_the_worker_heap_is_frozen_once_per_process(monkeypatch):
    import gc

    from job.spark import pipeline

    collections = []
    monkeypatch.setattr(pipeline, "_worker_heap_frozen", False)
    monkeypatch.setattr(gc, "collect", lambda *a: collections.append(a) or 0)
    try:
        pipeline.freeze_worker_heap()
        frozen = gc.get_freeze_count()
        assert frozen > 1000, f"only {frozen} objects frozen: the heap was not frozen"
        pipeline.freeze_worker_heap()
        pipeline.freeze_worker_heap()
        assert len(collections) == 1, f"{len(collections)} collections: once per worker, not once per call"
    finally:
        gc.unfreeze()
