"""Kafka data loss: which records the broker gave up before the job read them, and how long
retention must be for that not to happen.

Kafka keeps a partition's records from its *log start offset* (the low watermark) to its
end (the high watermark). Two things move the start past records a stopped job has not
read yet:

- **retention**: a topic's ``retention.ms`` deletes whole segments whose newest record is
  older than that (checked every ``log.retention.check.interval.ms``); the log start jumps
  to the oldest segment left. ``AdminClient.delete_records`` moves it the same way, by hand.
- **storage loss**: a partition's log directory is gone; the broker starts that partition
  again, empty, so its *end* offset drops below what the checkpoint already read.

The job's checkpoint says up to where each query read (``offsets/<n>`` of its last
committed batch). :func:`unread_deleted` compares that with Kafka's log start offsets and
returns the deleted, unread ranges as :class:`DeletedRange` (the verifier takes them:
``job.verify.compare.check(..., deleted=...)`` allows exactly those records as ``lost`` and the
resync each loss causes up to its session's next snapshot). :func:`rewound_partitions`
finds the partitions whose end went backwards, the ones ``python -m job repair
--partitions`` must repair. :func:`retention_table` does the sources' arithmetic: time to
detect plus time to fix must stay under retention.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from job.engine.errors import JobError
from job.verify.compare import KAFKA_DELETED, DeletedRange

__all__ = [
    "KAFKA_DELETED",
    "BackgroundRun",
    "DeletedRange",
    "Outage",
    "QueryRun",
    "RetentionError",
    "Rewound",
    "committed_offsets",
    "delete_unread",
    "query_run",
    "retention_outage",
    "rewound_partitions",
    "reset_retention",
    "retention_table",
    "session_losses",
    "set_retention",
    "topic_configs",
    "unread_deleted",
    "wait_for_deletion",
    "wait_for_growth",
    "watermarks",
]

Partition = tuple[str, int]


class RetentionError(JobError):
    """Kafka did not delete (or could not be told to keep) what a data-loss run asked for."""

    def __init__(self, subject: str, problem: str, fix: str) -> None:
        self.subject, self.problem, self.fix = subject, problem, fix
        super().__init__(f"{subject}: {problem}; {fix}")


@dataclass(frozen=True, kw_only=True, order=True)
class Rewound:
    """A partition whose end offset is now below what the job's checkpoint read: its log was
    lost (or the topic recreated). ``read`` is the checkpoint's offset, ``end`` Kafka's now."""

    topic: str
    partition: int
    read: int
    end: int

    @property
    def spec(self) -> str:
        """As ``python -m job repair --partitions`` takes it."""
        return f"{self.topic}:{self.partition}"


# -- pure comparisons ------------------------------------------------------------------------


def unread_deleted(read: Mapping[Partition, int], low: Mapping[Partition, int]) -> list[DeletedRange]:
    """The ranges Kafka deleted that the job had not read: per partition of ``read`` (the
    checkpoint's next offset to read), ``[read, low)`` where the log start ``low`` is past it.

    A partition Kafka no longer has at all is not here (:func:`rewound_partitions` and the
    query's own error name it); partitions the checkpoint never read are not either.
    """
    out = [
        DeletedRange(topic=t, partition=p, start=int(r), end=int(low[(t, p)]))
        for (t, p), r in read.items()
        if (t, p) in low and low[(t, p)] > r
    ]
    return sorted(out)


def rewound_partitions(read: Mapping[Partition, int], high: Mapping[Partition, int]) -> list[Rewound]:
    """Partitions whose end offset (``high``) is below what the checkpoint read (``read``),
    and those Kafka does not list at all (end taken as 0): the partitions that lost their log."""
    out = [Rewound(topic=t, partition=p, read=int(r), end=int(high.get((t, p), 0))) for (t, p), r in read.items()]
    return sorted(x for x in out if x.end < x.read)


def committed_offsets(*query_checkpoints: str | Path) -> dict[Partition, int]:
    """Per partition, the offset up to which the given queries' last committed batches read
    (the largest, when several queries read the same partition: a wait for Kafka to delete
    past it then covers them all)."""
    from job.spark.checkpoints import checkpoint_end_offsets

    out: dict[Partition, int] = {}
    for ckpt in query_checkpoints:
        for key, offset in checkpoint_end_offsets(Path(ckpt)).items():
            out[key] = max(offset, out.get(key, offset))
    return out


# -- Kafka -----------------------------------------------------------------------------------


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})


def watermarks(bootstrap: str, topics: Iterable[str], *, timeout_s: float = 10.0) -> dict[Partition, tuple[int, int]]:
    """``(log start, end)`` of every partition of ``topics`` as Kafka reports them now."""
    from confluent_kafka import KafkaException

    from producers.kafka import partition_watermarks

    wanted = set(topics)
    try:
        return partition_watermarks(bootstrap, wanted.__contains__, timeout_s=timeout_s)
    except KafkaException as exc:
        raise RetentionError(f"Kafka at {bootstrap}", f"cannot read the partitions' offsets ({exc})",
                             "check that the broker answers (python -m sandbox status)") from None  # fmt: skip


def _alter(bootstrap: str, topics: Sequence[str], entries: Mapping[str, str | None], timeout_s: float) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    ops = [
        ConfigEntry(name, value or "", incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET)
        for name, value in entries.items()
    ]  # fmt: skip
    resources = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=ops) for t in topics]
    admin = _admin(bootstrap)  # held until every future is done: a collected client cancels them
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout: both mean the same here
            raise RetentionError(f"topic {resource.name}", f"Kafka refused the config change {dict(entries)} ({exc})",
                                 "check the topic exists and the broker answers") from None  # fmt: skip


def set_retention(bootstrap: str, topics: Sequence[str], *, retention_ms: int, segment_ms: int, timeout_s: float = 15.0) -> None:
    """Give ``topics`` a short ``retention.ms`` and ``segment.ms`` (topic-level overrides).

    Retention deletes whole *closed* segments, and a segment closes when a record arrives
    after ``segment.ms``: records keep arriving, so segments close and age out.
    """
    _alter(bootstrap, topics, {"retention.ms": str(retention_ms), "segment.ms": str(segment_ms)}, timeout_s)


def reset_retention(bootstrap: str, topics: Sequence[str], *, timeout_s: float = 15.0) -> None:
    """Remove the overrides :func:`set_retention` made: the broker's defaults apply again."""
    _alter(bootstrap, topics, {"retention.ms": None, "segment.ms": None}, timeout_s)


def topic_configs(bootstrap: str, topics: Sequence[str], names: Sequence[str] = ("retention.ms", "segment.ms"),
                  *, timeout_s: float = 15.0) -> dict[str, dict[str, str]]:  # fmt: skip
    """The current value of each config in ``names`` for each topic."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    out: dict[str, dict[str, str]] = {}
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    admin = _admin(bootstrap)  # held until every future is done: a collected client cancels them
    for resource, future in admin.describe_configs(resources, request_timeout=timeout_s).items():
        entries = future.result(timeout=timeout_s)
        out[resource.name] = {n: entries[n].value for n in names if n in entries}
    return out


def wait_for_deletion(
    bootstrap: str,
    read: Mapping[Partition, int],
    *,
    timeout_s: float = 120.0,
    poll_s: float = 0.5,
    progress: Callable[[str], None] | None = None,
) -> list[DeletedRange]:
    """Poll Kafka until, on every partition with records the job has not read, the log start
    offset has passed ``read`` (retention deleted unread records there); return the ranges.

    Raises :class:`RetentionError` after ``timeout_s``, naming the partitions still waiting.
    """
    topics = sorted({t for t, _ in read})
    deadline = time.monotonic() + timeout_s
    while True:
        marks = watermarks(bootstrap, topics)
        waiting = [k for k, r in read.items() if k in marks and marks[k][1] > r and marks[k][0] <= r]
        if not waiting:
            return unread_deleted(read, {k: low for k, (low, _) in marks.items()})
        if time.monotonic() > deadline:
            names = ", ".join(f"{t}[{p}] (log start {marks[(t, p)][0]}, read up to {read[(t, p)]})" for t, p in sorted(waiting))
            raise RetentionError(
                names, f"Kafka has not deleted past the checkpoint's offsets after {timeout_s:.0f}s",
                "check log.retention.check.interval.ms on the broker (the sandbox sets 5000) and that records still "
                "arrive (a segment only closes when the next record comes), or use delete_unread()",
            )  # fmt: skip
        if progress is not None:
            progress(f"[dataloss] waiting for retention on {len(waiting)} partition(s)")
        time.sleep(poll_s)


def delete_unread(bootstrap: str, upto: Mapping[Partition, int], *, timeout_s: float = 15.0) -> None:
    """Move each partition's log start offset to ``upto`` with ``AdminClient.delete_records``:
    what retention does to old segments, at an exact offset (the fallback when waiting for
    retention is not an option)."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(t, p, int(o)) for (t, p), o in sorted(upto.items())]
    admin = _admin(bootstrap)  # held until every future is done: a collected client cancels them
    for tp, future in admin.delete_records(wanted, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001
            raise RetentionError(f"{tp.topic}[{tp.partition}]", f"delete_records to offset {tp.offset} failed ({exc})",
                                 "check the offset is within the partition's log") from None  # fmt: skip


def wait_for_growth(bootstrap: str, since: Mapping[Partition, int], records: int, *, timeout_s: float = 120.0,
                    poll_s: float = 0.5) -> dict[Partition, int]:  # fmt: skip
    """Poll until every partition of ``since`` holds at least ``records`` records past its
    offset there (e.g. enough for every session to send a snapshot again); returns the ends."""
    deadline = time.monotonic() + timeout_s
    topics = sorted({t for t, _ in since})
    while True:
        ends = {k: high for k, (_, high) in watermarks(bootstrap, topics).items()}
        short = sorted(k for k, o in since.items() if ends.get(k, 0) < o + records)
        if not short:
            return ends
        if time.monotonic() > deadline:
            names = ", ".join(f"{t}[{p}] (end {ends.get((t, p), 0)}, waiting for {since[(t, p)] + records})" for t, p in short)
            raise RetentionError(names, f"fewer than {records} new records after {timeout_s:.0f}s",
                                 "check that the producers still run")  # fmt: skip
        time.sleep(poll_s)


@dataclass(frozen=True, kw_only=True)
class Outage:
    """What retention did while the job was down: the unread ranges it deleted, how long
    Kafka took to do it, and the partitions' ``(log start, end)`` right after."""

    deleted: tuple[DeletedRange, ...]
    seconds: float
    marks: Mapping[Partition, tuple[int, int]]

    @property
    def records(self) -> int:
        return sum(d.count for d in self.deleted)


def retention_outage(
    bootstrap: str,
    topics: Sequence[str],
    read: Mapping[Partition, int],
    *,
    retention_ms: int = 1000,
    segment_ms: int = 1000,
    timeout_s: float = 120.0,
    progress: Callable[[str], None] | None = None,
) -> Outage:
    """Shorten ``topics``' retention until Kafka has deleted past ``read`` (the stopped
    job's checkpoint) on every partition with unread records, then restore the broker's
    defaults (even when the wait fails), so that what arrives next is kept. Records must
    keep arriving meanwhile: only closed segments are deleted."""
    started = time.monotonic()
    set_retention(bootstrap, topics, retention_ms=retention_ms, segment_ms=segment_ms)
    try:
        wait_for_deletion(bootstrap, read, timeout_s=timeout_s, progress=progress)
    finally:
        reset_retention(bootstrap, topics)
    seconds = time.monotonic() - started
    # read after the reset: a retention check between the last poll and the reset may have
    # deleted one more segment, and the ranges must say what is really gone
    marks = watermarks(bootstrap, topics)
    deleted = unread_deleted(read, {k: low for k, (low, _) in marks.items()})
    return Outage(deleted=tuple(deleted), seconds=seconds, marks=marks)


class BackgroundRun:
    """A producer run in a thread: the sessions keep going while the job is stopped and
    restarted. :meth:`finish` asks the run to end (open sessions send ``end``) and waits."""

    def __init__(self, config) -> None:
        import threading

        from producers.runner import Runner

        self.runner = Runner(config, on_progress=self._on_progress, progress_every_s=0.2)
        self.acked = 0  # records Kafka acknowledged so far
        self.summary = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="producers", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self.summary = self.runner.run()
        except BaseException as exc:  # noqa: BLE001 - handed to finish()
            self.error = exc

    def _on_progress(self, progress) -> None:
        self.acked = progress.ok

    def wait_acked(self, records: int, *, timeout_s: float = 60.0) -> None:
        """Return once Kafka acknowledged ``records`` records of this run (the topics exist and
        hold data), or raise :class:`RetentionError`."""
        deadline = time.monotonic() + timeout_s
        while self.acked < records:
            if self.error is not None or not self._thread.is_alive():
                raise RetentionError("the producer run", f"ended after {self.acked} records ({self.error})",
                                     "look at the broker's health (python -m sandbox status)")  # fmt: skip
            if time.monotonic() > deadline:
                raise RetentionError("the producer run", f"only {self.acked} of {records} records acknowledged "
                                     f"after {timeout_s:.0f}s", "look at the broker's health")  # fmt: skip
            time.sleep(0.1)

    def finish(self, timeout_s: float = 120.0):
        """Stop the run, wait for its ledger, and return its :class:`~producers.runner.RunSummary`."""
        self.runner.stop()
        self._thread.join(timeout_s)
        if self.error is not None:
            raise self.error
        if self._thread.is_alive() or self.summary is None:
            raise RetentionError("the producer run", f"did not finish within {timeout_s:.0f}s of being stopped",
                                 "look at the broker's health (python -m sandbox status)")  # fmt: skip
        return self.summary


@dataclass(frozen=True, kw_only=True)
class QueryRun:
    """One query's run, from its event log: when it started, its batches, how it ended."""

    query: str
    started: float | None
    ended: float | None
    batches: int
    rows: int
    error: str | None
    #: seconds its batches ran, each from its trigger to its commit: the query's start-up
    #: (Spark's application, Python workers) and the waits between triggers left out
    busy_s: float | None = None
    #: the same two for the batches after the first, which still pays for the query's start
    #: (its Python workers and state stores start in it: seconds to tens of seconds)
    steady_rows: int = 0
    steady_busy_s: float | None = None

    @property
    def seconds(self) -> float | None:
        """From the query's start to its end (or its last batch when it did not end)."""
        return None if self.started is None or self.ended is None else self.ended - self.started

    @property
    def records_per_s(self) -> float | None:
        """Records over :attr:`seconds`: what a run got done, start-up included."""
        s = self.seconds
        return None if not s else self.rows / s

    @property
    def processing_records_per_s(self) -> float | None:
        """Records over :attr:`busy_s`: the rate while batches ran, the first one included."""
        return None if not self.busy_s else self.rows / self.busy_s

    @property
    def steady_records_per_s(self) -> float | None:
        """Records over the time the batches after the first ran: the rate at which a running
        job works off a backlog (a catch-up is a run of such batches)."""
        return None if not self.steady_busy_s else self.steady_rows / self.steady_busy_s


def query_run(events: Sequence[object], query: str) -> QueryRun:
    """Summarise the events (:class:`job.ops.watch.events.EventLog` records of one ``job run``)
    of the query named ``query``: only the last start and what follows it counts."""
    mine = [e for e in events if getattr(e, "query", None) == query]
    starts = [i for i, e in enumerate(mine) if type(e).__name__ == "QueryStarted"]
    mine = mine[starts[-1] :] if starts else mine
    batches = [e for e in mine if type(e).__name__ == "BatchCompleted"]
    ends = [e for e in mine if type(e).__name__ == "QueryTerminated"]
    started = mine[0].at if mine and type(mine[0]).__name__ == "QueryStarted" else None  # type: ignore[attr-defined]
    ended = ends[-1].at if ends else (batches[-1].at if batches else None)  # type: ignore[attr-defined]
    timed = [b.at - b.started_at for b in batches if b.started_at is not None]  # type: ignore[attr-defined]
    all_timed = bool(timed) and len(timed) == len(batches)
    return QueryRun(query=query, started=started, ended=ended, batches=len(batches),
                    rows=sum(b.input_rows for b in batches), error=ends[-1].error if ends else None,  # type: ignore[attr-defined]
                    busy_s=sum(timed) if all_timed else None,
                    steady_rows=sum(b.input_rows for b in batches[1:]),  # type: ignore[attr-defined]
                    steady_busy_s=sum(timed[1:]) if all_timed and len(timed) > 1 else None)  # fmt: skip


# -- what the loss did to the sessions -------------------------------------------------------


def session_losses(report, ledger: pd.DataFrame, deleted: Sequence[DeletedRange]) -> pd.DataFrame:
    """One row per session that lost records to Kafka, from the verifier's ``report`` (run
    with ``deleted``) and the ledger: where its records were lost, how many of its later
    updates were quarantined until the session resynchronised, the seq of the snapshot that
    did it, and ``whole_again``: such a snapshot came and the verifier found nothing
    wrong with the session (its final table is the intended one).
    """
    columns = ["session", "partition", "lost", "lost_seqs", "quarantined", "resync_seq", "whole_again"]
    findings = [f for f in report.anomalies if f.fault == KAFKA_DELETED]
    if not findings:
        return pd.DataFrame(columns=columns)
    bad = {f.session for f in report.anomalies if not f.allowed}
    frame = pd.DataFrame([{"session": f.session, "kind": f.kind, "seq": f.seq, "epoch": f.epoch,
                           "where": f"{f.topic}[{f.partition}]" if f.topic else None} for f in findings])  # fmt: skip
    ok = ledger[ledger["outcome"] == "ok"]
    gone = {(r.topic, int(r.partition), int(r.offset)) for r in ok.itertuples(index=False)
            if any(d.contains(r.topic, int(r.partition), int(r.offset)) for d in deleted)}  # fmt: skip
    rows = []
    for session, group in frame.groupby("session", sort=True):
        lost = group[group["kind"] == "lost"]
        last_lost = int(lost["seq"].max()) if len(lost) else None
        mine = ok[(ok["session"] == session) & (ok["kind"] == "snapshot")]
        resync = [int(r.seq) for r in mine.itertuples(index=False)
                  if last_lost is not None and int(r.seq) > last_lost
                  and (r.topic, int(r.partition), int(r.offset)) not in gone]  # fmt: skip
        rows.append({
            "session": session,
            "partition": lost["where"].dropna().iloc[0] if len(lost) else None,
            "lost": len(lost),
            "lost_seqs": f"{int(lost['seq'].min())}..{last_lost}" if len(lost) else "",
            "quarantined": int((group["kind"] == "quarantined").sum()),
            "resync_seq": min(resync) if resync else None,
            "whole_again": bool(resync) and session not in bad,
        })  # fmt: skip
    return pd.DataFrame(rows, columns=columns)


# -- the sources' arithmetic -----------------------------------------------------------------


def retention_table(
    scenarios: Mapping[str, tuple[float, float]],
    retentions_h: Sequence[float],
    *,
    input_rate: float,
    throughput: float,
) -> pd.DataFrame:
    """For each outage scenario ``name -> (hours to detect, hours to fix)`` and each retention
    in hours: the margin ``retention - detect - fix`` (negative: the oldest unread records
    are deleted before the job is back, so data is lost), the backlog the restarted job
    finds at ``input_rate`` records/s, and the hours it needs to catch up at ``throughput``
    records/s while input keeps arriving (infinite when it cannot keep up).

    The oldest unread record is the first the restarted job reads, so ``detect + fix <
    retention`` is the whole condition; catching up only needs ``throughput > input_rate``.
    """
    rows = []
    for name, (detect_h, fix_h) in scenarios.items():
        down_h = detect_h + fix_h
        backlog = input_rate * down_h * 3600
        spare = throughput - input_rate
        catch_up_h = backlog / spare / 3600 if spare > 0 else float("inf")
        for retention in retentions_h:
            margin = retention - down_h
            rows.append({
                "scenario": name, "detect_h": detect_h, "fix_h": fix_h, "retention_h": retention,
                "margin_h": margin, "backlog_records": int(backlog), "catch_up_h": catch_up_h,
                "data_lost": margin <= 0,
            })  # fmt: skip
    return pd.DataFrame(rows)
