"""The streaming job: Kafka -> ordered, per-session state machine -> Parquet on object storage.

source   readStream.format("kafka") with subscribePattern ^<prefix>.* (new sites are found
         every ``topic_discovery_ms`` without a restart)
group    by session id (the Kafka key; keyless records go to a per-topic pseudo-session
         that quarantines them), or by Kafka partition (``BY_PARTITION``), each call then
         running every session of its partition
operator transformWithState (Row-based), transformWithStateInPandas or applyInPandasWithState
         (``JobConfig.operator``; the same per-session function under each), RocksDB
         state store, processing-time timers that expire idle sessions. Spark does not order rows within a group, so each batch's
         rows are sorted by (partition, offset) before the pure state machine sees them.
sink     one Parquet file sink partitioned by output (``lake.SINK_PARTITIONS``; topic is a
         column): the three outputs of the operator and, as a fourth, ``raw``, the archive
         of every input record, from the same Kafka read, trigger and commit. Checkpoints
         live on local disk.
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import operator
import time
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd

from job.engine.errors import KafkaOffsetsError
from job.spark import lake
from job.spark.config import JobConfig
from job.spark.query_progress import offset_total, reached, records_between

_SESSION_KEY = "session_key"


def _frame(columns: dict[str, list[Any]]) -> pd.DataFrame:
    """Columns of the union schema as one frame of object columns, None where a row has no value.

    PySpark converts each column to its Arrow type (``bigint`` from Python ints and None);
    nullable ``Int64`` columns convert to the same Arrow arrays, but PySpark concatenates
    the frames of many sessions before converting them, and pandas checks every cell of an
    extension column against the all-None columns of the other outputs: that check was a tenth
    of the Python worker's time on the fleet (py-spy, ``bench/batch_anatomy.py --fleet``).
    """
    n = len(columns["output"])
    # fromiter, not np.array: a bytes value stays one cell
    return pd.DataFrame({name: np.fromiter(values, dtype=object, count=n) for name, values in columns.items()}, copy=False)


@functools.cache
def _field_names(kind: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclasses.fields(kind))


#: Not a field of an output's dataclass: when the batch was processed, on quarantined records and statuses.
_PROCESSED = "processed_ms"


@functools.cache
def _sources() -> list[tuple[str, str | None, str | None, str | None]]:
    """Per union column after ``output``: the field its value comes from in a row change, a
    quarantined record and a session status (None: that output has no such column)."""
    from job.engine import session as sm

    change = set(_field_names(sm.RowChange))
    quarantined = {*_field_names(sm.QuarantineRecord), _PROCESSED}
    status = {lake.STATUS_COLUMNS.get(k, k): k for k in _field_names(sm.SessionStatus)} | {_PROCESSED: _PROCESSED}
    return [
        (name, name if name in change else None, name if name in quarantined else None, status.get(name))
        for name, _ in lake.UNION_COLUMNS[1:]
    ]


def step_columns(changes: list[Any], quarantine: list[Any], statuses: list[Any], processed_ms: int) -> dict[str, list[Any]]:
    """One session's outputs as the union schema's columns: lists, with the row changes first,
    then the quarantined records, then the statuses.

    Built a column at a time from the dataclasses: the operator runs this for every session
    of every batch, and a dict per output row, read back a column at a time, cost about as
    much as the state machine itself (``tests/job/test_pipeline_frames.py`` keeps that
    construction as the oracle).
    """
    quarantine = [
        dataclasses.replace(q, key=q.key.decode("utf-8", "replace")) if isinstance(q.key, bytes) else q for q in quarantine
    ]

    def part(items: list[Any], field: str | None) -> list[Any]:
        if field is None:
            return [None] * len(items)
        if field == _PROCESSED:
            return [processed_ms] * len(items)
        return list(map(operator.attrgetter(field), items))

    columns = {"output": ["rows"] * len(changes) + ["quarantine"] * len(quarantine) + ["sessions"] * len(statuses)}
    for name, from_change, from_quarantine, from_status in _sources():
        columns[name] = part(changes, from_change) + part(quarantine, from_quarantine) + part(statuses, from_status)
    return columns


#: The operator's input columns, in the order :func:`_records` reads them.
_INPUT = ("topic", "partition", "offset", "key_missing", _SESSION_KEY, "value", "kafka_ts_ms")


def _records(rows: Iterable[tuple]):
    """``job.engine.session.Record`` values in (partition, offset) order, from tuples of the
    source's columns in the order of :data:`_INPUT`."""
    from job.engine import session as sm

    Record = sm.Record
    records = [
        Record(topic, int(partition), int(offset), None if missing else key, value, int(ts))
        for topic, partition, offset, missing, key, value, ts in rows
    ]
    records.sort(key=lambda rec: (rec.partition, rec.offset))
    return records


def apply_records(previous: bytes | None, rows: Iterable[Any], *, policy: str, window: int, now_ms: int):
    """One session's micro-batch, whichever Spark operator calls it.

    ``previous`` is the session's state as stored (bytes, see
    :meth:`~job.engine.session.SessionState.to_stored`) or None; ``rows`` are tuples of the
    source's columns in the order of :data:`_INPUT`, the rows in any order (Spark does not
    order rows within a group), so they are sorted by (partition, offset) here. Returns the new state (bytes) and the outputs as the union
    schema's columns (:func:`step_columns`).
    """
    from job.engine import session as sm

    state = None if previous is None else sm.SessionState.from_stored(previous)
    step = sm.step(state, _records(rows), policy=policy, window=window)
    return step.state.to_stored(), step_columns(step.changes, step.quarantine, [step.status], now_ms)


def apply_batch(previous: bytes | None, frames: Iterable[pd.DataFrame], *, policy: str, window: int, now_ms: int):
    """:func:`apply_records` for the pandas operators: frames in, one union-schema frame out."""
    parts = list(frames)
    batch = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    rows = zip(*(batch[name].tolist() for name in _INPUT))  # itertuples cost a sixth of the call
    state, columns = apply_records(previous, rows, policy=policy, window=window, now_ms=now_ms)
    return state, _frame(columns)


def expire_columns(previous: bytes | None, *, now_ms: int) -> dict[str, list[Any]] | None:
    """An idle session's timer fired: records still held for reordering are quarantined,
    never dropped silently, and the session's last status row says ``expired``. None when
    there was no state."""
    from job.engine import session as sm

    if previous is None:
        return None
    flushed = sm.flush(sm.SessionState.from_stored(previous))
    return step_columns(flushed.changes, flushed.quarantine, [sm.expire(flushed.state)], now_ms)


def expire_session(previous: bytes | None, *, now_ms: int) -> pd.DataFrame | None:
    """:func:`expire_columns` as a union-schema frame."""
    columns = expire_columns(previous, now_ms=now_ms)
    return None if columns is None else _frame(columns)


_worker_heap_frozen = False


def freeze_worker_heap() -> None:
    """Once per Python worker process: move every object alive now out of the cyclic garbage
    collector's reach (``gc.freeze``).

    PySpark's daemon runs a full ``gc.collect()`` after every task a reused worker finishes,
    over everything pandas, Arrow, PySpark and the job allocated at import (some 75,000
    objects, 10-25 ms on two busy cores), and the stateful operator's second Python call of a
    task (the timeout pass) waits for the first call's collection; Python's own collections,
    as the operator allocates, walk the same heap. Frozen, those objects are still freed by
    reference counting; a collection only walks what was allocated since: a steady live batch
    is about a sixth shorter (docs/decisions/0012-python-worker-heap-freeze.md).
    The operators call this first thing, so it runs on the executors, once per worker.
    """
    global _worker_heap_frozen
    if not _worker_heap_frozen:
        _worker_heap_frozen = True
        gc.collect()
        gc.freeze()


def _make_processor(policy: str, window: int, idle_timeout_ms: int | None, *, row_based: bool):
    """The operator for ``transformWithState`` (``row_based``: Spark Rows in and out, no
    Arrow-to-pandas conversion, Spark 4.1+) or ``transformWithStateInPandas`` (frames)."""
    from pyspark.sql import Row
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, StructField, StructType

    state_schema = StructType([StructField("state", BinaryType(), True)])
    union_row = Row(*(name for name, _ in lake.UNION_COLUMNS))
    input_of = operator.attrgetter(*_INPUT)

    def as_rows(columns: dict[str, list[Any]] | None) -> list[Any]:
        return [] if columns is None else [union_row(*values) for values in zip(*columns.values())]

    def apply(stored: bytes | None, batch, now: int) -> tuple[bytes, list[Any]]:
        freeze_worker_heap()
        if row_based:
            state, columns = apply_records(stored, map(input_of, batch), policy=policy, window=window, now_ms=now)
            return state, as_rows(columns)
        state, frame = apply_batch(stored, batch, policy=policy, window=window, now_ms=now)
        return state, [frame]

    def expired(stored: bytes | None, now: int) -> list[Any]:
        freeze_worker_heap()
        if row_based:
            return as_rows(expire_columns(stored, now_ms=now))
        frame = expire_session(stored, now_ms=now)
        return [] if frame is None else [frame]

    class SessionProcessor(StatefulProcessor):
        """Feeds one session's records, in offset order, to the pure state machine."""

        def init(self, handle) -> None:
            self.handle = handle
            self.state = handle.getValueState("session", state_schema)

        def _stored(self) -> bytes | None:
            return self.state.get()[0] if self.state.exists() else None

        def handleInputRows(self, key, rows, timerValues) -> Iterator[Any]:
            now = timerValues.getCurrentProcessingTimeInMs()
            state, out = apply(self._stored(), rows, now)
            self.state.update((state,))
            if idle_timeout_ms is not None:
                for timer in list(self.handle.listTimers()):
                    self.handle.deleteTimer(timer)
                self.handle.registerTimer(now + idle_timeout_ms)
            yield from out

        def handleExpiredTimer(self, key, timerValues, expiredTimerInfo) -> Iterator[Any]:
            out = expired(self._stored(), timerValues.getCurrentProcessingTimeInMs())
            self.state.clear()
            yield from out

        def close(self) -> None:
            pass

    return SessionProcessor()


def _make_group_function(policy: str, window: int, idle_timeout_ms: int | None):
    """The operator for ``applyInPandasWithState`` (Spark 3.4+), the job's default: of the three
    APIs it ran fastest here (docs/decisions/0001-operator.md)."""

    def on_group(key, frames, state) -> Iterator[pd.DataFrame]:
        freeze_worker_heap()
        now = state.getCurrentProcessingTimeMs()
        stored = state.get[0] if state.exists else None
        if state.hasTimedOut:
            state.remove()
            frame = expire_session(stored, now_ms=now)
            if frame is not None:
                yield frame
            return
        new_state, frame = apply_batch(stored, frames, policy=policy, window=window, now_ms=now)
        state.update((new_state,))
        if idle_timeout_ms is not None:
            state.setTimeoutDuration(idle_timeout_ms)
        yield frame

    return on_group


#: The group of :data:`BY_PARTITION`: a keyed record's Kafka partition; -1 for a record without a
#: key, so that a topic's key-less records meet in one group, as under the per-session operators.
_GROUP_PARTITION = "group_partition"
#: The operator keyed by Kafka partition instead of by session (JobConfig.operator).
BY_PARTITION = "applyInPandasWithState-by-partition"


def _merged(parts: list[dict[str, list[Any]]]) -> dict[str, list[Any]]:
    out = {name: [] for name in parts[0]}
    for columns in parts:
        for name, values in columns.items():
            out[name] += values
    return out


def step_partition(
    stored: bytes | None, rows: Iterable[tuple], *, policy: str, window: int, now_ms: int, idle_timeout_ms: int | None
) -> tuple[bytes | None, dict[str, list[Any]] | None, int | None]:
    """One Kafka partition's micro-batch under :data:`BY_PARTITION`: each session's rows (tuples
    of :data:`_INPUT`) go to :func:`apply_records` with that session's state, and the sessions
    idle for longer than ``idle_timeout_ms`` expire as their own timeout would have expired them
    (Spark times a group out once its timeout is *before* the batch's time). ``stored`` holds
    ``{session: [its stored state, the batch time it last had records]}``.

    Returns the partition's new stored value (None: no session left), the outputs as the union
    schema's columns (None: none), and the timeout to set, relative to ``now_ms``, for the
    session that goes idle first (None: none).
    """
    from job.spark.checkpoints import decode_partition_sessions, encode_partition_sessions

    sessions = {} if stored is None else decode_partition_sessions(stored)
    grouped: dict[str, list[tuple]] = {}
    for row in rows:
        grouped.setdefault(row[4], []).append(row)
    out = []
    for session, its_rows in grouped.items():
        previous = sessions.get(session)
        state, columns = apply_records(previous[0] if previous else None, its_rows, policy=policy, window=window, now_ms=now_ms)
        sessions[session] = [state, now_ms]
        out.append(columns)
    if idle_timeout_ms is not None:
        for session in [s for s, (_, last) in sessions.items() if last + idle_timeout_ms < now_ms]:
            columns = expire_columns(sessions.pop(session)[0], now_ms=now_ms)
            if columns is not None:
                out.append(columns)
    timeout = None
    if idle_timeout_ms is not None and sessions:
        # the first to go idle: its own timeout would be at last + idle; Spark wants a positive duration
        timeout = max(min(last for _, last in sessions.values()) + idle_timeout_ms - now_ms, 1)
    return (encode_partition_sessions(sessions) if sessions else None), (_merged(out) if out else None), timeout


def _make_partition_function(policy: str, window: int, idle_timeout_ms: int | None):
    """The operator for :data:`BY_PARTITION`: ``applyInPandasWithState`` on (topic, Kafka
    partition), one Python call per partition and batch instead of one per session."""

    def on_group(key, frames, state) -> Iterator[pd.DataFrame]:
        freeze_worker_heap()
        now = state.getCurrentProcessingTimeMs()
        stored = state.get[0] if state.exists else None
        if state.hasTimedOut:
            rows: Iterable[tuple] = ()
        else:
            parts = list(frames)
            batch = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
            rows = zip(*(batch[name].tolist() for name in _INPUT))
        new, columns, timeout = step_partition(
            stored, rows, policy=policy, window=window, now_ms=now, idle_timeout_ms=idle_timeout_ms
        )
        if new is None:
            state.remove()
        else:
            state.update((new,))
            if timeout is not None:
                state.setTimeoutDuration(timeout)
        if columns is not None:
            yield _frame(columns)

    return on_group


def kafka_stream(spark, cfg: JobConfig, bootstrap: str):
    """The Kafka source as configured (one per query: each query tracks its own offsets)."""
    reader = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribePattern", cfg.topic_pattern)
        .option("startingOffsets", cfg.starting_offsets)
        .option("failOnDataLoss", str(cfg.fail_on_data_loss).lower())
        # the consumer refreshes topic metadata this often: how fast a new site is picked up
        .option("kafka.metadata.max.age.ms", str(cfg.topic_discovery_ms))
        .option("kafka.fetch.max.wait.ms", str(cfg.fetch_max_wait_ms))
    )
    if cfg.max_offsets_per_trigger:
        reader = reader.option("maxOffsetsPerTrigger", str(cfg.max_offsets_per_trigger))
    for key, value in cfg.extra_kafka_options.items():
        reader = reader.option(key, value)
    frame = reader.load()
    return frame.coalesce(cfg.input_tasks) if cfg.input_tasks else frame


def _cut_of_record(cuts):
    """The first offset to process for each record's session (0 for sessions without a cut).

    After a repair the lake already holds a session's output up to its cut, and the restarted
    job reads the partition from the earliest cut of all its sessions: the records of a
    session before its own cut are dropped here, so they are neither applied twice nor
    quarantined as orphans by a session state that starts empty. A literal map is fine for
    the hundreds of sessions a partition holds; far more would want a broadcast join.
    """
    from pyspark.sql import functions as F

    entries = [x for (t, p, k), o in sorted(cuts.items()) for x in (F.lit(f"{t}\x00{p}\x00{k}"), F.lit(int(o)))]
    where = F.concat_ws("\x00", F.col("topic"), F.col("partition").cast("string"), F.col(_SESSION_KEY))
    return F.coalesce(F.create_map(*entries)[where], F.lit(0))


def session_input(spark, cfg: JobConfig, bootstrap: str, kafka=None):
    """The Kafka records (``kafka``, default a new :func:`kafka_stream`) as the stateful
    operator's input columns, hash-partitioned by its group (the session, or the topic and
    partition under :data:`BY_PARTITION`): the exchange the operator needs,
    made explicit so that the raw archive (:func:`raw_rows`) reads the same one. Spark plans
    the second use as a ``ReusedExchange``, so Kafka is read once per batch; a union of two
    projections of the source scanned it twice (docs/decisions/0007-raw-archive-in-sink.md).
    Without a count the exchange takes ``spark.sql.shuffle.partitions``, which a checkpoint
    restores as its own."""
    from pyspark.sql import functions as F

    kafka = kafka_stream(spark, cfg, bootstrap) if kafka is None else kafka
    columns = [
        F.coalesce(F.col("key").cast("string"), F.concat(F.lit("__no-key__/"), F.col("topic"))).alias(_SESSION_KEY),
        F.col("key").isNull().alias("key_missing"),
        "value",
        "topic",
        "partition",
        "offset",
        F.unix_millis("timestamp").alias("kafka_ts_ms"),
    ]
    if cfg.operator == BY_PARTITION:
        group = F.when(F.col("key").isNull(), F.lit(-1)).otherwise(F.col("partition")).alias(_GROUP_PARTITION)
        return kafka.select(*columns, group).repartition(F.col("topic"), F.col(_GROUP_PARTITION))
    return kafka.select(*columns).repartition(F.col(_SESSION_KEY))


def raw_rows(source):
    """The raw archive as rows of the union schema (``output=raw``, :data:`lake.RAW_OUTPUT`),
    from :func:`session_input`'s columns: a record's Kafka coordinates, its key (None when
    Kafka's was) and value, and its Kafka timestamp in ``event_ts_ms``."""
    from pyspark.sql import functions as F

    fields = {
        "output": F.lit(lake.RAW_OUTPUT),
        "topic": F.col("topic"),
        "partition": F.col("partition"),
        "offset": F.col("offset"),
        "key": F.when(~F.col("key_missing"), F.col(_SESSION_KEY)),
        "value": F.col("value"),
        "event_ts_ms": F.col("kafka_ts_ms"),
    }
    return source.select(*[(fields[n] if n in fields else F.lit(None)).cast(kind).alias(n) for n, kind in lake.UNION_COLUMNS])


def sessions_stream(spark, cfg: JobConfig, bootstrap: str, source=None):
    """The stateful part: Kafka records in, union-schema rows out (not started). ``source``:
    :func:`session_input`'s records (default: from a new Kafka source)."""
    from pyspark.sql import functions as F

    source = session_input(spark, cfg, bootstrap) if source is None else source
    if cfg.session_cuts:
        source = source.where(F.col("offset") >= _cut_of_record(cfg.session_cuts))
    # Spark 4.0 runs a no-data batch after every batch while processing-time timers are on,
    # so an available-now run would never finish: it runs without timers (no idle expiry).
    timers = cfg.trigger != "available-now"
    idle_ms = cfg.idle_timeout_s * 1000 if timers else None
    if cfg.operator == BY_PARTITION:
        from pyspark.sql.streaming.state import GroupStateTimeout

        return source.groupBy("topic", _GROUP_PARTITION).applyInPandasWithState(
            _make_partition_function(cfg.policy, cfg.window, idle_ms),
            outputStructType=lake.union_ddl(),
            stateStructType="sessions BINARY",
            outputMode="append",
            timeoutConf=GroupStateTimeout.ProcessingTimeTimeout if timers else GroupStateTimeout.NoTimeout,
        )
    grouped = source.groupBy(_SESSION_KEY)
    if cfg.operator == "transformWithState":
        return grouped.transformWithState(
            statefulProcessor=_make_processor(cfg.policy, cfg.window, idle_ms, row_based=True),
            outputStructType=lake.union_ddl(),
            outputMode="Append",
            timeMode="ProcessingTime" if timers else "None",
        )
    if cfg.operator == "applyInPandasWithState":
        from pyspark.sql.streaming.state import GroupStateTimeout

        return grouped.applyInPandasWithState(
            _make_group_function(cfg.policy, cfg.window, idle_ms),
            outputStructType=lake.union_ddl(),
            stateStructType="state BINARY",
            outputMode="append",
            timeoutConf=GroupStateTimeout.ProcessingTimeTimeout if timers else GroupStateTimeout.NoTimeout,
        )
    return grouped.transformWithStateInPandas(
        statefulProcessor=_make_processor(cfg.policy, cfg.window, idle_ms, row_based=False),
        outputStructType=lake.union_ddl(),
        outputMode="Append",
        timeMode="ProcessingTime" if timers else "None",
    )


def sink_ahead(spark, cfg: JobConfig, sink: str):
    """The :class:`~job.engine.errors.SinkAheadError` for starting ``cfg`` on ``sink``, or None.

    The sink's log may hold one batch past the checkpoint's commits, a batch planned in
    ``offsets/`` whose commit the job did not get to write: the restart runs it again and the
    sink rightly skips it. A log past the last *planned* batch means the checkpoint is new,
    deleted, or older than the output: the trap (job/ops/repair.py)."""
    return sink_ahead_of(cfg, sink, lake.sink_log_batches(spark, sink))


def sink_ahead_of(cfg: JobConfig, sink: str, log: list[int]):
    """:func:`sink_ahead` on the sink log's batch ids ``log`` (sorted), however they were listed:
    the command line lists them before its Spark application starts (job/cli.py)."""
    from job.engine.errors import SinkAheadError
    from job.spark.checkpoints import log_state

    planned = log_state(cfg.checkpoint / "sessions").last_planned
    if not log or (planned is not None and log[-1] <= planned):
        return None
    fix = (
        f"Repair it (the output is cut back to each session's last snapshot and the job restarts from there): "
        f"python -m job repair --checkpoint {cfg.checkpoint} --output {cfg.output} --apply; or start on a new lake "
        f"(--output); --allow-sink-ahead runs into the trap on purpose (chapter 08)"
    )
    return SinkAheadError(sink, str(cfg.checkpoint), (log[0], log[-1]), planned, fix)


def start(
    spark,
    cfg: JobConfig,
    *,
    bootstrap: str,
    raw_in_sink: bool = True,
    partition_by: tuple[str, ...] | None = None,
    allow_sink_ahead: bool = False,
) -> list:
    """Start the sessions query (and, with ``raw_in_sink=False``, the raw archive's own query)
    and return the StreamingQuery handles.

    ``raw_in_sink`` (the job's way): write the raw archive as the sink's fourth output
    (``output=raw``) from the sessions query, one query instead of two. False: the measured
    alternative of docs/decisions/0007-raw-archive-in-sink.md, a second query writing
    ``<lake>/raw`` (:data:`lake.OLD_RAW_DIR`), which only the bench runs; the readers do not
    read it (:func:`lake.read_raw` refuses it).
    ``partition_by`` writes a new sink in another layout than :data:`lake.SINK_PARTITIONS`
    (``--layout-rounds`` of the bench compares them).

    A lake in an older layout is refused (:func:`lake.open_lake`).

    Before the first batch it refuses a setting the checkpoint keeps for good
    (:func:`job.spark.saved.check_fixed`) and an output whose sink log is ahead of the
    checkpoint (:func:`sink_ahead`; ``allow_sink_ahead`` springs that trap on purpose), then
    writes ``cfg`` beside the checkpoint (:mod:`job.spark.saved`).
    """
    from job.spark import saved

    saved.check_fixed(cfg)
    sink = lake.open_lake(spark, cfg.output, writing=partition_by is None, archive=cfg.raw_archive and raw_in_sink)
    if not allow_sink_ahead and (trap := sink_ahead(spark, cfg, sink)) is not None:
        raise trap
    # read by a new checkpoint only; an existing one keeps its own (saved.check_fixed refuses another)
    spark.conf.set("spark.sql.shuffle.partitions", str(cfg.state_partitions))
    # read when a batch writes the sink (the query's session keeps what was set at its start)
    spark.conf.set("spark.sql.maxConcurrentOutputFileWriters", str(cfg.sink_writers))
    # (sandbox/jvm/class_data_warmup.py mirrors this provider and operator; change both, and bump
    # sandbox.jvm.class_data_sharing._FORMAT)
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    cfg.checkpoint.mkdir(parents=True, exist_ok=True)
    saved.save(cfg)  # every tool that acts on this run reads it (docs/job-config.md)
    queries = []
    source = session_input(spark, cfg, bootstrap)
    out = sessions_stream(spark, cfg, bootstrap, source)
    if cfg.raw_archive and raw_in_sink:  # one Kafka read, one trigger and one commit for all four outputs
        out = out.unionByName(raw_rows(source))  # every record: the session cuts filter only the operator's input
    sessions = (
        out.writeStream.format("parquet")
        .option("path", sink)
        .option("checkpointLocation", str(cfg.checkpoint / "sessions"))
        .option("compression", "zstd")
        .partitionBy(*(partition_by or lake.SINK_PARTITIONS))
        .outputMode("append")
        .queryName(f"{cfg.name}-sessions")
        .trigger(**cfg.trigger_kwargs())
    )
    queries.append(sessions.start())
    if cfg.raw_archive and not raw_in_sink:
        raw = (
            kafka_stream(spark, cfg, bootstrap)
            .selectExpr("topic", "partition", "offset", "CAST(key AS STRING) AS key", "value", "timestamp")
            .writeStream.format("parquet")
            .option("path", cfg.output.rstrip("/") + "/" + lake.OLD_RAW_DIR)
            .option("checkpointLocation", str(cfg.checkpoint / "raw"))
            .option("compression", "zstd")
            .partitionBy("topic")
            .queryName(f"{cfg.name}-raw")
            .trigger(**cfg.trigger_kwargs())
        )
        queries.append(raw.start())
    return queries


def source_end_offsets(bootstrap: str, topic_prefix: str, *, timeout_s: float = 10.0) -> dict[str, dict[str, int]]:
    """High watermarks of every topic with the prefix (:func:`producers.kafka.end_offsets`), as
    ``{topic: {partition: offset}}``: the shape of the Kafka source's progress offsets."""
    from confluent_kafka import KafkaException

    from producers.kafka import end_offsets

    try:
        highs = end_offsets(bootstrap, topic_prefix, timeout_s=timeout_s)
    except KafkaException as exc:
        raise KafkaOffsetsError(
            bootstrap,
            f"cannot read the end offsets of {topic_prefix}* ({exc})",
            "check that Kafka answers there (python -m sandbox status)",
        ) from exc
    out: dict[str, dict[str, int]] = {}
    for (topic, partition), high in highs.items():
        out.setdefault(topic, {})[str(partition)] = high
    return out


def caught_up(query, targets: dict[str, dict[str, int]]) -> bool:
    """True when the query's last committed batch reached every target offset."""
    return query.lastProgress is not None and records_left(query, targets) == 0


def rows_read(query) -> int:
    """Input rows over the query's recent batches (``recentProgress``, the last 100 by default).

    ``lastProgress`` alone is not enough to ask "has a batch with input run yet": a stateful
    query runs a no-data batch for its timeouts right after a data batch, and that progress
    (``numInputRows`` 0) replaces the one a poller was waiting to see.
    """
    return sum(int(p.get("numInputRows") or 0) for p in (query.recentProgress or []))


def records_left(query, targets: dict[str, dict[str, int]]) -> int:
    """Records between the query's last committed batch and the target offsets."""
    return records_between(reached(query.lastProgress), targets)


def drain(queries: list, *, bootstrap: str, topic_prefix: str, timeout_s: float = 300.0, progress=print) -> None:
    """Wait until every query has processed everything in Kafka now, then stop them.

    Raises :class:`~job.engine.errors.IntegrityError` or :class:`~job.engine.errors.QueryFailedError`
    when a query dies or is stopped before it got there, and
    :class:`~job.engine.errors.DrainTimeoutError` (with the records left) after ``timeout_s``.
    """
    from job.engine.errors import DrainTimeoutError
    from job.spark import interrupts
    from sandbox.progress import Ticker

    targets = source_end_offsets(bootstrap, topic_prefix)
    total = offset_total(targets)
    progress(f"[job] draining {total} records from {len(targets)} topic(s)")
    deadline = time.monotonic() + timeout_s
    ticker = Ticker(progress)
    try:
        for query in queries:
            first_left, since = records_left(query, targets), time.monotonic()
            while not caught_up(query, targets):
                interrupts.check()
                raise_if_dead(query)
                if time.monotonic() > deadline:
                    raise DrainTimeoutError(
                        query.name, records_left(query, targets), total, timeout_s, executors=executor_count(query)
                    )
                left = records_left(query, targets)
                ticker(
                    lambda: (
                        f"[job] draining {query.name}: {left} of {total} records left, "
                        f"{(first_left - left) / max(time.monotonic() - since, 1e-9):.0f} records/s, {ticker.elapsed_s:.0f}s"
                        + ("" if executor_count(query) != 0 else " (no executors yet: the cluster's cores are taken)")
                    )
                )
                wait(query, 1.0)
            # the batch that reached the targets is committed once lastProgress reports it
    finally:
        ticker.close()
    for query in queries:
        if not stop_between_batches(query):
            progress(
                f"[job] {query.name}: no batch ended within {STOP_WITHIN_S:g}s of the drain's end; stopped in the middle of one"
            )


#: how long a drain waits for a batch boundary to stop its query at (decision 0033)
STOP_WITHIN_S = 10.0


def stop_between_batches(query, *, within_s: float = STOP_WITHIN_S, poll_s: float = 0.02, clock=time.monotonic) -> bool:
    """Stop ``query`` at a batch boundary: while it waits for its next trigger, or the moment a
    batch commits, whichever comes first.

    A drained job's input keeps arriving, so a stop usually lands in a batch, and Spark reports
    some interruptions of a batch as the query's failure instead of the stop (decision 0033).
    Right after a commit the next batch has only begun, far from its end, where it writes its
    output. True when the stop came at a boundary; False when none came within ``within_s``.
    """
    deadline = clock() + within_s
    committed = _batch_id(query)
    while clock() < deadline:
        if not query.status.get("isTriggerActive") or _batch_id(query) != committed:
            query.stop()
            return True
        time.sleep(poll_s)
    query.stop()
    return False


def _batch_id(query) -> int | None:
    progress = query.lastProgress
    return None if progress is None else int(progress["batchId"])


def executor_count(query) -> int | None:
    """How many executors the query's application has now (the driver not counted); None when
    it cannot be told (a Spark Connect session has no JVM here)."""
    try:
        return int(query._jsq.sparkSession().sparkContext().getExecutorIds().size())  # noqa: SLF001
    except Exception:  # noqa: BLE001 - a diagnosis only; never fail a drain over it
        return None


def wait(query, seconds: float) -> None:
    """``awaitTermination(seconds)``, with a query's failure raised as the error a user can
    act on (:func:`~job.spark.errors.query_error`) instead of a Py4J-wrapped one."""
    from job.spark.errors import query_error

    try:
        query.awaitTermination(seconds)
    except Exception as exc:  # noqa: BLE001 - whatever PySpark wraps the failure in
        raise query_error(query.name, exc) from None


def await_all(queries: list, *, timeout_s: float) -> None:
    """Wait for queries that end by themselves (``available-now``) to terminate, all within
    ``timeout_s``. A query's failure raises as ``awaitTermination`` raises it; one still running
    at the deadline is stopped, with the others, and reported as a
    :class:`~job.engine.errors.QueryFailedError` naming it: a wedged executor fails the caller
    with a name instead of hanging it."""
    from job.engine.errors import QueryFailedError

    deadline = time.monotonic() + timeout_s
    for query in queries:
        if not query.awaitTermination(max(0.001, deadline - time.monotonic())):
            for q in queries:
                q.stop()
            raise QueryFailedError(
                query.name,
                f"had not finished after {timeout_s:.0f}s (trigger available-now)",
                "look at its batches in the Spark UI and the driver log: an executor lost or a batch stuck",
            )


def raise_if_dead(query) -> None:
    """Raise the error a user can act on when ``query`` failed or was stopped."""
    from job.engine.errors import QueryFailedError
    from job.spark.errors import query_error

    exc = query.exception()
    if exc is not None:
        raise query_error(query.name, exc) from None
    if not query.isActive:
        raise QueryFailedError(
            query.name,
            "was stopped before it processed everything in Kafka",
            "something called stop() on it or its SparkSession (another cell, a second drain); start it again",
        )
