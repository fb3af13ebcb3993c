"""Chapter 07's drill: Kafka gives up records a stopped job has not read, for real.

Shorten a topic's retention until the broker deletes past the job's checkpoint
(:func:`retention_outage`), or move a partition's log start by hand (:func:`delete_unread`),
while producers keep sending in a thread (:class:`BackgroundRun`); :func:`query_run`
summarises what the job's query did before and after, from its event log. The operator's
side (what was lost, which partitions rewound, how long retention must be) is
:mod:`job.ops.dataloss`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from job.ops.dataloss import DeletedRange, Partition, RetentionError, admin_client, unread_deleted, watermarks

__all__ = [
    "BackgroundRun",
    "Outage",
    "QueryRun",
    "delete_unread",
    "query_run",
    "reset_retention",
    "retention_outage",
    "set_retention",
    "topic_configs",
    "wait_for_deletion",
    "wait_for_growth",
]


def _alter(bootstrap: str, topics: Sequence[str], entries: Mapping[str, str | None], timeout_s: float) -> None:
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    ops = [
        ConfigEntry(name, value or "", incremental_operation=AlterConfigOpType.DELETE if value is None else AlterConfigOpType.SET)
        for name, value in entries.items()
    ]
    resources = [ConfigResource(ResourceType.TOPIC, t, incremental_configs=ops) for t in topics]
    admin = admin_client(bootstrap)  # held until every future is done: a collected client cancels them
    for resource, future in admin.incremental_alter_configs(resources, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001 - KafkaException or a timeout: both mean the same here
            raise RetentionError(
                f"topic {resource.name}",
                f"Kafka refused the config change {dict(entries)} ({exc})",
                "check the topic exists and the broker answers",
            ) from None


def set_retention(bootstrap: str, topics: Sequence[str], *, retention_ms: int, segment_ms: int, timeout_s: float = 15.0) -> None:
    """Give ``topics`` a short ``retention.ms`` and ``segment.ms`` (topic-level overrides).

    Retention deletes whole *closed* segments, and a segment closes when a record arrives
    after ``segment.ms``: records keep arriving, so segments close and age out.
    """
    _alter(bootstrap, topics, {"retention.ms": str(retention_ms), "segment.ms": str(segment_ms)}, timeout_s)


def reset_retention(bootstrap: str, topics: Sequence[str], *, timeout_s: float = 15.0) -> None:
    """Remove the overrides :func:`set_retention` made: the broker's defaults apply again."""
    _alter(bootstrap, topics, {"retention.ms": None, "segment.ms": None}, timeout_s)


def topic_configs(
    bootstrap: str, topics: Sequence[str], names: Sequence[str] = ("retention.ms", "segment.ms"), *, timeout_s: float = 15.0
) -> dict[str, dict[str, str]]:
    """The current value of each config in ``names`` for each topic."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    out: dict[str, dict[str, str]] = {}
    resources = [ConfigResource(ResourceType.TOPIC, t) for t in topics]
    admin = admin_client(bootstrap)  # held until every future is done: a collected client cancels them
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
                names,
                f"Kafka has not deleted past the checkpoint's offsets after {timeout_s:.0f}s",
                "check log.retention.check.interval.ms on the broker (the sandbox sets 5000) and that records still "
                "arrive (a segment only closes when the next record comes), or use delete_unread()",
            )
        if progress is not None:
            progress(f"[dataloss] waiting for retention on {len(waiting)} partition(s)")
        time.sleep(poll_s)


def delete_unread(bootstrap: str, upto: Mapping[Partition, int], *, timeout_s: float = 15.0) -> None:
    """Move each partition's log start offset to ``upto`` with ``AdminClient.delete_records``:
    what retention does to old segments, at an exact offset (the fallback when waiting for
    retention is not an option)."""
    from confluent_kafka import TopicPartition

    wanted = [TopicPartition(t, p, int(o)) for (t, p), o in sorted(upto.items())]
    admin = admin_client(bootstrap)  # held until every future is done: a collected client cancels them
    for tp, future in admin.delete_records(wanted, request_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001
            raise RetentionError(
                f"{tp.topic}[{tp.partition}]",
                f"delete_records to offset {tp.offset} failed ({exc})",
                "check the offset is within the partition's log",
            ) from None


def wait_for_growth(
    bootstrap: str, since: Mapping[Partition, int], records: int, *, timeout_s: float = 120.0, poll_s: float = 0.5
) -> dict[Partition, int]:
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
            raise RetentionError(
                names, f"fewer than {records} new records after {timeout_s:.0f}s", "check that the producers still run"
            )
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
                raise RetentionError(
                    "the producer run",
                    f"ended after {self.acked} records ({self.error})",
                    "look at the broker's health (python -m sandbox status)",
                )
            if time.monotonic() > deadline:
                raise RetentionError(
                    "the producer run",
                    f"only {self.acked} of {records} records acknowledged after {timeout_s:.0f}s",
                    "look at the broker's health",
                )
            time.sleep(0.1)

    def finish(self, timeout_s: float = 120.0):
        """Stop the run, wait for its ledger, and return its :class:`~producers.runner.RunSummary`."""
        self.runner.stop()
        self._thread.join(timeout_s)
        if self.error is not None:
            raise self.error
        if self._thread.is_alive() or self.summary is None:
            raise RetentionError(
                "the producer run",
                f"did not finish within {timeout_s:.0f}s of being stopped",
                "look at the broker's health (python -m sandbox status)",
            )
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
    return QueryRun(
        query=query,
        started=started,
        ended=ended,
        batches=len(batches),
        rows=sum(b.input_rows for b in batches),
        error=ends[-1].error if ends else None,  # type: ignore[attr-defined]
        busy_s=sum(timed) if all_timed else None,
        steady_rows=sum(b.input_rows for b in batches[1:]),  # type: ignore[attr-defined]
        steady_busy_s=sum(timed[1:]) if all_timed and len(timed) > 1 else None,
    )
