"""Backfill from the lake: rebuild the job's output from its raw archive, without the broker.

The streaming job archives every input record (the sink's ``raw`` output;
:func:`job.spark.lake.read_raw` reads it as topic/partition/offset/key/value/timestamp). Kafka keeps records only for
its retention; the archive keeps them as long as the lake does, in a columnar format that
is cheap to scan. :func:`backfill` replays a time range of the archive through the *same*
session core the streaming job runs (:func:`job.spark.pipeline.apply_records`, i.e.
:func:`job.engine.session.step`, records in (partition, offset) order per session) as one Spark
batch job, into a separate, versioned output ``<lake>/backfill/<version>/out`` in
the job's union schema (:mod:`job.spark.lake`). Nothing the readers see changes until that
output is merged or switched to.

How a time range is replayed
    ``[T1, T2)`` selects records by their Kafka timestamp. A session's table at T1 is the
    result of everything before it, so each session touched by the range is replayed from
    its *warm-up*: its freshest snapshot (highest ``(epoch, seq)``) timestamped before T1,
    with the session state primed as if everything before that snapshot had been seen (no
    false gap). A snapshot is the whole table: nothing before it still matters. A session
    with no snapshot before T1 is replayed from its first archived record. Records from
    T2 on are not replayed; records a ``window`` policy still holds at T2 are left to the
    next range (they are not flushed to quarantine).

Why Spark groups by session and runs ``applyInPandas``
    Sessions are independent and order matters only within one, so the replay is a
    ``groupBy(session).applyInPandas``: the same partitioning the streaming operator uses,
    spread over every executor, with only one session's range in a Python worker's memory
    at a time. Collecting per session on the driver would funnel the whole archive through
    one process. The warm-up start is found in Spark (an aggregate over the archive's
    snapshot records), so the history before it never reaches Python.

The duplicates a range creates at its boundaries, and the merge rule
    The warm-up re-emits the output of records before T1 (from the snapshot to T1), which
    the previous range (or the live job) also wrote; two overlapping ranges write the
    records in the overlap twice. Every output row carries the topic, partition and offset
    of the record that made it, so the duplicates are found exactly: :func:`merge` keeps,
    for each record ``(topic, partition, offset)`` (and each session's status row at that
    record), the output of *one* source only, the first in precedence order, then drops any
    repeated ``(output, topic, partition, offset, row_id)``. Precedence: the source whose
    replay started earliest wins, because it decided the record with the most history
    behind it (the live job, which started at the beginning, before any backfill; then
    backfills by their ``T1``). So a merge fills holes and never rewrites what is there.

Swap instead of merge: a bug in the session logic
    When a job version was wrong, its output is wrong everywhere, and merging keeps the
    wrong rows. :func:`reprocess` replays the *whole* archive with the fixed job version
    into a new output, verifies it against the ledger and only then points readers at it
    (:func:`switch`, a small pointer object ``<lake>/current``; :func:`read_current`
    reads through it). The old output stays where it was until someone deletes it.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import pandas as pd

from job.engine.errors import JobError
from job.engine.session import DEFAULT_POLICY, DEFAULT_WINDOW
from job.spark import lake

__all__ = [
    "CURRENT_JOB_VERSION",
    "JOB_VERSIONS",
    "BackfillError",
    "BackfillResult",
    "JobVersion",
    "ReprocessResult",
    "TimeRange",
    "archive_bounds",
    "backfills_by_start",
    "backfill",
    "current_path",
    "delete_topics",
    "keep_first_source",
    "merge",
    "parse_time",
    "read_current",
    "reprocess",
    "resolve_range",
    "switch",
    "version_root",
]

Bound = int | Literal["earliest", "latest"]


class BackfillError(JobError):
    """A backfill that cannot run; names the subject, the place and the fix."""

    def __init__(self, subject: str, place: str, fix: str) -> None:
        self.subject, self.place, self.fix = subject, place, fix
        super().__init__(f"backfill {subject} at {place}: {fix}")


# -- time ranges ----------------------------------------------------------------------------

_EPOCH_MS = re.compile(r"^\d{10,16}$")


def parse_time(text: str, *, flag: str = "--from") -> Bound:
    """A range bound: ``earliest``/``latest`` (the archive's first record / just past its last),
    epoch milliseconds (10 to 16 digits), or an ISO 8601 time (``2026-11-22T21:00:00Z``;
    without a zone it is UTC). Returns epoch milliseconds or the keyword; raises
    :class:`BackfillError` naming ``flag`` for anything else."""
    value = text.strip()
    if value in ("earliest", "latest"):
        return value  # type: ignore[return-value]
    if _EPOCH_MS.match(value):
        return int(value)
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise BackfillError(
            f"time {text!r}",
            flag,
            "give an ISO 8601 time such as 2026-11-22T21:00:00Z, epoch milliseconds, 'earliest' or 'latest'",
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


@dataclass(frozen=True)
class TimeRange:
    """A half-open range ``[start_ms, end_ms)`` of Kafka record timestamps (epoch ms)."""

    start_ms: int
    end_ms: int

    def __post_init__(self) -> None:
        if self.start_ms >= self.end_ms:
            raise BackfillError(
                f"time range {_iso(self.start_ms)} .. {_iso(self.end_ms)}",
                "--from/--to",
                "--from must be before --to (the range is [from, to): from included, to excluded)",
            )

    def __str__(self) -> str:
        return f"[{_iso(self.start_ms)}, {_iso(self.end_ms)})"


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def resolve_range(start: Bound, end: Bound, bounds: tuple[int, int] | None = None) -> TimeRange:
    """The range ``[start, end)`` with ``earliest``/``latest`` replaced by the archive's
    ``bounds`` (its first and last record timestamps, ms); raises when start >= end."""

    def value(bound: Bound, flag: str) -> int:
        if isinstance(bound, int):
            return bound
        if bounds is None:
            raise BackfillError(f"bound {bound!r}", flag, "an empty archive has no earliest or latest: give times")
        return bounds[0] if bound == "earliest" else bounds[1] + 1

    return TimeRange(value(start, "--from"), value(end, "--to"))


# -- job versions: the session logic a replay runs ------------------------------------------


@dataclass(frozen=True)
class JobVersion:
    """One version of the session logic: ``core(frame, policy, window, now_ms, primed)``
    turns one session's records (the archive's columns, in any order) into union-schema
    rows, starting from the ``primed`` state (JSON) or from nothing."""

    name: str
    description: str
    core: Callable[..., pd.DataFrame]


def _core_current(frame: pd.DataFrame, *, policy: str, window: int, now_ms: int, primed: str | None) -> pd.DataFrame:
    from job.spark.pipeline import apply_batch

    return apply_batch(primed, [frame], policy=policy, window=window, now_ms=now_ms)[1]


def _core_skips_deletes(frame: pd.DataFrame, *, policy: str, window: int, now_ms: int, primed: str | None) -> pd.DataFrame:
    # The deliberate bug of chapter 09, after the source's fallacy of a release that
    # "silently ignored a small part of the processed events": deletes never reach the lake.
    out = _core_current(frame, policy=policy, window=window, now_ms=now_ms, primed=primed)
    return out[~((out["output"] == "rows") & (out["op"] == "delete"))].reset_index(drop=True)


#: The job versions a backfill can run, by name. ``v1`` is the job's session logic as it is;
#: ``v0-skips-deletes`` is a release with a bug (deletes are dropped), kept to show reprocessing.
JOB_VERSIONS: dict[str, JobVersion] = {
    v.name: v
    for v in (
        JobVersion("v1", "the session logic of job.engine.session, as the streaming job runs it", _core_current),
        JobVersion("v0-skips-deletes", "a buggy release: row deletes are silently dropped from the output", _core_skips_deletes),
    )
}
CURRENT_JOB_VERSION = "v1"


def _job_version(name: str) -> JobVersion:
    if name not in JOB_VERSIONS:
        raise BackfillError(f"job version {name!r}", "--job-version", f"choose one of {', '.join(JOB_VERSIONS)}")
    return JOB_VERSIONS[name]


def _primed_state(session: str, first_value: bytes | None) -> str | None:
    """The state of ``session`` just before its warm-up snapshot, as if everything before that
    snapshot had been applied: epoch and next seq are the snapshot's, so it applies in
    sequence (no false gap). None when the first record is not a readable snapshot."""
    from job.engine.session import SessionState
    from producers.contract import ContractError, Kind, decode

    try:
        message = decode(None if first_value is None else bytes(first_value))
    except ContractError:
        return None
    if message.kind is not Kind.SNAPSHOT or message.session != session:
        return None
    return SessionState(session=session, site=message.site, epoch=message.epoch, next_seq=message.seq).to_json()


def _replay_session(job_version: str, policy: str, window: int, now_ms: int) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The per-session function Spark's ``applyInPandas`` calls (one group = one session)."""
    core = JOB_VERSIONS[job_version].core

    def replay(frame: pd.DataFrame) -> pd.DataFrame:
        # the archive's file sink commits each record once, but a record archived twice
        # (two jobs on one archive) must not be applied twice
        frame = frame.drop_duplicates(["topic", "partition", "offset"]).sort_values(["partition", "offset"])
        primed = None
        first = frame.iloc[0]
        if not bool(first.key_missing) and pd.notna(first.warm_from) and int(first.offset) == int(first.warm_from):
            primed = _primed_state(str(first.session_key), first.value)
        columns = ["session_key", "key_missing", "value", "topic", "partition", "offset", "kafka_ts_ms"]
        return core(frame[columns], policy=policy, window=window, now_ms=now_ms, primed=primed)

    return replay


# -- paths, the pointer and the Hadoop file system -----------------------------------------


def version_root(lake_root: str, version: str) -> str:
    """Where backfill ``version`` lives: a lake root of its own, ``out`` under it."""
    return f"{lake_root.rstrip('/')}/backfill/{version}"


def _hadoop(spark, path: str):
    jvm = spark._jvm
    p = jvm.org.apache.hadoop.fs.Path(path)
    return p.getFileSystem(spark._jsc.hadoopConfiguration()), p


def _write_text(spark, path: str, text: str) -> None:
    # one object PUT on S3 when the stream closes: readers see the old or the new pointer
    fs, p = _hadoop(spark, path)
    out = fs.create(p, True)
    try:
        out.write(bytearray(text.encode("utf-8")))
    finally:
        out.close()


def _read_text(spark, path: str) -> str | None:
    fs, p = _hadoop(spark, path)
    if not fs.exists(p):
        return None
    stream = fs.open(p)
    try:
        return spark._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8")
    finally:
        stream.close()


def _pointer(lake_root: str) -> str:
    return f"{lake_root.rstrip('/')}/current"


def current_path(spark, lake_root: str) -> str:
    """The lake root readers should use: the one ``<lake>/current`` names, else ``lake_root``
    itself (the streaming job's own output, before any switch)."""
    text = _read_text(spark, _pointer(lake_root))
    return lake_root.rstrip("/") if text is None else json.loads(text)["root"]


def read_current(spark, lake_root: str, output: lake.Output):
    """One output (``rows``, ``sessions``, ``quarantine``) of the live version, through the pointer."""
    return lake.read_output(spark, lake.open_lake(spark, current_path(spark, lake_root)), output)


def switch(spark, lake_root: str, root: str, *, reason: str) -> str | None:
    """Point readers at ``root`` (a lake root holding ``out``); returns the previous one.
    Nothing is deleted: the previous output stays for comparison or a switch back."""
    if not lake.path_exists(spark, lake.open_lake(spark, root)):
        raise BackfillError(f"switch target {root}", lake.SINK_DIR, "backfill or merge into it first")
    previous = current_path(spark, lake_root)
    record = {"root": root.rstrip("/"), "previous": previous, "reason": reason, "switched_at": _iso(_now_ms())}
    _write_text(spark, _pointer(lake_root), json.dumps(record))
    return previous


def _now_ms() -> int:
    return int(time.time() * 1000)


# -- the archive ----------------------------------------------------------------------------


def _read_archive(spark, where: str):
    """The raw archive of the lake root ``where``."""
    archive = lake.read_raw(spark, where)
    if archive is None:
        raise BackfillError(
            "archive",
            where,
            "no lake and no raw archive there: pass --lake (or --raw) naming the lake root the job wrote",
        )
    return archive


def archive_bounds(spark, where: str) -> tuple[int, int] | None:
    """The first and last record timestamps (epoch ms) in the raw archive of the lake root
    ``where``, None when it is empty (the job ran without the archive, or read nothing yet)."""
    from pyspark.sql import functions as F

    row = (
        _read_archive(spark, where)
        .agg(F.min(F.unix_millis("timestamp")).alias("lo"), F.max(F.unix_millis("timestamp")).alias("hi"))
        .first()
    )
    return None if row is None or row.lo is None else (int(row.lo), int(row.hi))


def _replay_frame(archive, span: TimeRange):
    """The archive's records to replay for ``span``: per session, from its warm-up snapshot
    (or its first record) to T2, for sessions with at least one record in the range."""
    from pyspark.sql import functions as F

    ts = F.unix_millis("timestamp")
    text = F.col("value").cast("string")
    records = archive.where(ts < span.end_ms).select(
        F.coalesce(F.col("key"), F.concat(F.lit("__no-key__/"), F.col("topic"))).alias("session_key"),
        F.col("key").isNull().alias("key_missing"),
        "value",
        "topic",
        "partition",
        "offset",
        ts.alias("kafka_ts_ms"),
        (F.get_json_object(text, "$.kind") == "snapshot").alias("is_snapshot"),
        F.get_json_object(text, "$.epoch").cast("long").alias("msg_epoch"),
        F.get_json_object(text, "$.seq").cast("long").alias("msg_seq"),
    )
    keys = ["session_key", "topic", "partition"]
    touched = records.where(F.col("kafka_ts_ms") >= span.start_ms).select(*keys).distinct()
    freshest = (
        records.where(F.col("is_snapshot") & (F.col("kafka_ts_ms") < span.start_ms) & F.col("msg_seq").isNotNull())
        .groupBy(*keys)
        .agg(F.max(F.struct("msg_epoch", "msg_seq", (-F.col("offset")).alias("neg_offset"))).alias("best"))
        .select(*keys, (-F.col("best.neg_offset")).alias("warm_from"))
    )
    return (
        records.join(touched, keys, "left_semi")
        .join(freshest, keys, "left")
        .where(F.col("warm_from").isNull() | (F.col("offset") >= F.col("warm_from")))
        .select("session_key", "key_missing", "value", "topic", "partition", "offset", "kafka_ts_ms", "warm_from")
    )


# -- backfill ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class BackfillResult:
    """What one backfill wrote, from which range, and how long it took.

    ``records`` counts the archived records replayed, ``in_range`` those timestamped in
    ``[T1, T2)`` and ``warm_up`` the ones before T1 replayed to rebuild state (their output
    duplicates what earlier output already holds; :func:`merge` removes it).
    """

    version: str
    root: str
    start_ms: int
    end_ms: int
    job_version: str
    policy: str
    records: int
    in_range: int
    warm_up: int
    sessions: int
    seconds: float

    def summary(self) -> str:
        span = TimeRange(self.start_ms, self.end_ms)
        return (
            f"backfill {self.version}: {span} replayed {self.records} records ({self.in_range} in range, "
            f"{self.warm_up} warm-up) of {self.sessions} sessions with job {self.job_version}, policy {self.policy}, "
            f"in {self.seconds:.1f}s -> {lake.sink_path(self.root)}"
        )


def _manifest(root: str) -> str:
    return f"{root}/_backfill.json"


def backfill(
    spark,
    *,
    lake_root: str,
    start: Bound,
    end: Bound,
    version: str | None = None,
    raw_path: str | None = None,
    policy: str = DEFAULT_POLICY,
    window: int = DEFAULT_WINDOW,
    job_version: str = CURRENT_JOB_VERSION,
    overwrite: bool = False,
) -> BackfillResult:
    """Replay the archive's records in ``[start, end)`` into ``<lake_root>/backfill/<version>``.

    ``raw_path``: the lake root whose archive to replay, by default ``lake_root``. ``version``
    defaults to the range (``<T1>--<T2>``). Raises :class:`BackfillError` when the range is
    bad or empty, the archive is missing, or the version exists and ``overwrite`` is False.
    Readers are not affected: see :func:`merge` and :func:`switch`.
    """
    from pyspark.sql import functions as F

    from job.engine.session import POLICIES

    began = time.monotonic()
    if policy not in POLICIES:
        raise BackfillError(f"policy {policy!r}", "--policy", f"choose one of {', '.join(POLICIES)}")
    _job_version(job_version)
    if isinstance(start, int) and isinstance(end, int):
        TimeRange(start, end)  # a bad range fails before Spark reads anything
    raw_path = raw_path or lake_root
    archive = _read_archive(spark, raw_path)
    bounds = archive_bounds(spark, raw_path)
    span = resolve_range(start, end, bounds)
    if bounds is None or span.end_ms <= bounds[0] or span.start_ms > bounds[1]:
        held = (
            "it is empty: did the job run with --no-raw-archive?"
            if bounds is None
            else f"it holds {TimeRange(bounds[0], bounds[1] + 1)}"
        )
        raise BackfillError(f"time range {span}", raw_path, f"no archived record in it ({held}); pick a range inside")
    version = version or f"{_compact(span.start_ms)}--{_compact(span.end_ms)}"
    if not re.fullmatch(r"[A-Za-z0-9._+-]+", version):
        raise BackfillError(f"version {version!r}", "--version", "use letters, digits, '.', '_', '+' or '-'")
    root = version_root(lake_root, version)
    if lake.path_exists(spark, root) and not overwrite:
        raise BackfillError(f"output version {version!r}", root, "it exists already: pick another --version or pass --overwrite")

    replay = _replay_frame(archive, span)
    counts = replay.agg(
        F.count(F.lit(1)).alias("records"),
        F.sum((F.col("kafka_ts_ms") >= span.start_ms).cast("long")).alias("in_range"),
        F.countDistinct("session_key").alias("sessions"),
    ).first()
    if not counts.in_range:
        raise BackfillError(f"time range {span}", raw_path, "no archived record in it; pick a range with records")
    out = replay.groupBy("session_key").applyInPandas(
        _replay_session(job_version, policy, window, _now_ms()), schema=lake.union_ddl()
    )
    try:
        (
            out.write.mode("overwrite" if overwrite else "errorifexists")
            .option("compression", "zstd")
            .partitionBy(*lake.SINK_PARTITIONS)
            .parquet(lake.sink_path(root))
        )
    except Exception as exc:  # a Python worker's error comes back wrapped in a Py4J/Spark one
        stopped = _integrity_line(str(exc))
        if stopped is None:
            raise
        raise BackfillError(f"replay under policy {policy}", root, f"{stopped}") from None
    result = BackfillResult(
        version=version,
        root=root,
        start_ms=span.start_ms,
        end_ms=span.end_ms,
        job_version=job_version,
        policy=policy,
        records=int(counts.records),
        in_range=int(counts.in_range),
        warm_up=int(counts.records) - int(counts.in_range),
        sessions=int(counts.sessions),
        seconds=round(time.monotonic() - began, 3),
    )
    _write_text(spark, _manifest(root), json.dumps(asdict(result)))
    return result


def _integrity_line(text: str) -> str | None:
    """The :class:`~job.engine.errors.IntegrityError` message inside a Spark task failure, if any."""
    match = re.search(r"IntegrityError: (.+)", text)
    return match.group(1).strip() if match else None


def _compact(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y%m%dT%H%M%S") + f".{ms % 1000:03d}Z"


# -- merge --------------------------------------------------------------------------------------


def keep_first_source(frame: pd.DataFrame) -> pd.DataFrame:
    """The merge rule on union-schema rows from several sources, ``_rank`` saying each row's
    source (0 first): for every record ``(topic, partition, offset)`` (and every session's
    status row at a record) keep the rows of the lowest-ranked source that has it, then drop
    repeated ``(output, topic, partition, offset, row_id)``. Returns the union columns only.
    Pure; :func:`merge` runs it on Spark over buckets of offsets."""
    columns = [name for name, _ in lake.UNION_COLUMNS]
    if frame.empty:
        return frame.reindex(columns=columns)
    frame = frame.assign(_status_of=frame["session"].where(frame["output"] == "sessions", "").fillna(""))
    key = ["topic", "partition", "offset", "_status_of"]
    first = frame.groupby(key, dropna=False)["_rank"].transform("min")
    kept = frame[frame["_rank"] == first]
    kept = kept.drop_duplicates(["output", "topic", "partition", "offset", "row_id", "_status_of"])
    out = kept[columns].reset_index(drop=True)
    for name, kind in lake.UNION_COLUMNS:
        if kind in ("bigint", "int"):
            out[name] = out[name].astype("Int64" if kind == "bigint" else "Int32")
    return out


#: Offsets per merge task: a record's rows all share its offset, so a bucket of offsets of
#: one partition holds every copy of each record in it.
_MERGE_BUCKET = 100_000


def merge(spark, *, lake_root: str, sources: Sequence[str], version: str, overwrite: bool = False) -> str:
    """Merge ``sources`` (lake roots holding ``out``, in precedence order: the one
    whose replay started earliest first, e.g. the live output, then backfills by T1) into
    ``<lake_root>/backfill/<version>`` by :func:`keep_first_source`; returns that root.
    See the module docstring for why the first source wins."""
    from functools import reduce

    from pyspark.sql import functions as F

    if not sources:
        raise BackfillError("merge", lake_root, "give at least one source to merge")
    root = version_root(lake_root, version)
    if lake.path_exists(spark, root) and not overwrite:
        raise BackfillError(f"output version {version!r}", root, "it exists already: pick another version or overwrite")
    columns = [name for name, _ in lake.UNION_COLUMNS]
    frames = []
    for rank, source in enumerate(sources):
        path = lake.open_lake(spark, source)
        if not lake.path_exists(spark, path):
            raise BackfillError(f"merge source {source}", path, f"no {lake.SINK_DIR} there: check the version name")
        # the live lake's raw archive is input, not output: merged, it would claim every record
        outputs = spark.read.parquet(path).where(F.col("output") != lake.RAW_OUTPUT)
        frames.append(outputs.select(*columns).withColumn("_rank", F.lit(rank)))
    union = reduce(lambda a, b: a.unionByName(b), frames)
    bucket = F.floor(F.col("offset") / _MERGE_BUCKET)
    merged = union.groupBy("topic", "partition", bucket.alias("_bucket")).applyInPandas(
        keep_first_source, schema=lake.union_ddl()
    )
    (
        merged.write.mode("overwrite" if overwrite else "errorifexists")
        .option("compression", "zstd")
        .partitionBy(*lake.SINK_PARTITIONS)
        .parquet(lake.sink_path(root))
    )
    _write_text(spark, f"{root}/_merge.json", json.dumps({"sources": list(sources), "merged_at": _iso(_now_ms())}))
    return root


def backfills_by_start(spark, lake_root: str, versions: Sequence[str]) -> list[str]:
    """The roots of backfill ``versions`` in merge precedence order (earliest T1 first)."""
    found: list[tuple[int, str]] = []
    for v in versions:
        root = version_root(lake_root, v)
        text = _read_text(spark, _manifest(root))
        if text is None:
            raise BackfillError(f"backfill version {v!r}", root, "no _backfill.json there: it is not a finished backfill")
        found.append((int(json.loads(text)["start_ms"]), root))
    return [root for _, root in sorted(found)]


# -- reprocessing with a fixed job version ------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ReprocessResult:
    """A full reprocessing: the backfill it ran, the verifier's report, and whether readers
    were switched to it (only when the report is clean)."""

    backfill: BackfillResult
    report: Any  # job.verify.compare.Report
    switched: bool
    previous: str | None
    current: str


def reprocess(
    spark,
    settings,
    *,
    lake_root: str,
    ledger: str,
    version: str,
    job_version: str = CURRENT_JOB_VERSION,
    policy: str = DEFAULT_POLICY,
    window: int = DEFAULT_WINDOW,
    raw_path: str | None = None,
    overwrite: bool = False,
) -> ReprocessResult:
    """Replay the whole archive with ``job_version`` into ``version``, verify it against
    ``ledger`` and switch readers to it only if the verdict is clean. The output readers saw
    before is left in place either way."""
    from job.ops.verifier import s3_target
    from job.verify.lake_check import verify_lake

    result = backfill(
        spark,
        lake_root=lake_root,
        start="earliest",
        end="latest",
        version=version,
        raw_path=raw_path,
        policy=policy,
        window=window,
        job_version=job_version,
        overwrite=overwrite,
    )
    report = verify_lake(spark, ledger=ledger, lake=result.root, policy=policy, s3=s3_target(settings))
    previous = None
    if report.ok:
        previous = switch(spark, lake_root, result.root, reason=f"reprocessed with job {job_version}, verified clean")
    return ReprocessResult(
        backfill=result, report=report, switched=report.ok, previous=previous, current=current_path(spark, lake_root)
    )


# -- Kafka's copy ------------------------------------------------------------------------------


def delete_topics(bootstrap: str, topic_prefix: str, *, timeout_s: float = 30.0) -> list[str]:
    """Delete every topic whose name starts with ``topic_prefix`` (Kafka's copy of the input);
    returns their names. What chapter 09 does to show the archive is the only copy left."""
    from sandbox.topics import TopicError, run_topics
    from sandbox.topics import delete_topics as delete

    try:
        return delete(bootstrap, run_topics(bootstrap, topic_prefix, timeout_s=timeout_s).names, timeout_s=timeout_s)
    except TopicError as exc:
        raise BackfillError(f"topics {topic_prefix}*", bootstrap, str(exc)) from None


# -- the command line ---------------------------------------------------------------------------


def run_cli(args, settings) -> int:
    """``python -m job backfill``: the arguments of :mod:`job.cli`'s ``backfill`` parser.
    Returns 0 when done (and, with ``--ledger``, verified clean), 1 when the verifier found
    a problem; bad input raises :class:`BackfillError` (the CLI prints it, exit 2)."""
    import sys

    start, end = parse_time(args.start, flag="--from"), parse_time(args.end, flag="--to")
    if isinstance(start, int) and isinstance(end, int):
        TimeRange(start, end)
    if args.switch and not args.ledger:
        raise BackfillError("--switch", "the command line", "give --ledger too: readers are switched only to verified output")
    _job_version(args.job_version)
    from job.ops.verifier import s3_target
    from job.spark.saved import from_args
    from job.verify.lake_check import verify_archive, verify_lake
    from sandbox.jvm.spark_session import spark_session

    run = from_args(args, settings, ("output", "policy", "window"))
    lake_root = run.output.rstrip("/")
    spark = spark_session(settings, "backfill")
    result = backfill(
        spark,
        lake_root=lake_root,
        start=start,
        end=end,
        version=args.version,
        raw_path=args.raw,
        policy=run.policy,
        window=run.window,
        job_version=args.job_version,
        overwrite=args.overwrite,
    )
    print(result.summary())
    target = result.root
    if args.merge:
        began = time.monotonic()
        sources = [current_path(spark, lake_root), result.root]
        target = merge(spark, lake_root=lake_root, sources=sources, version=f"{result.version}+merged", overwrite=args.overwrite)
        print(f"merged {' + '.join(sources)} -> {lake.sink_path(target)} in {time.monotonic() - began:.1f}s")
    if not args.ledger:
        print(f"readers still see {current_path(spark, lake_root)}; verify with --ledger, then --switch", file=sys.stderr)
        return 0
    report = verify_lake(spark, ledger=args.ledger, lake=target, policy=run.policy, s3=s3_target(settings))
    print(report.summary())
    archive = verify_archive(spark, ledger=args.ledger, lake=lake_root, raw_path=args.raw, s3=s3_target(settings))
    print(archive.summary())
    if args.switch and report.ok:
        previous = switch(spark, lake_root, target, reason=f"backfill {result.version} verified clean")
        print(f"readers switched: {previous} -> {target}")
    return 0 if report.ok and archive.ok else 1
