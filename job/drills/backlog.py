"""The job comes back to a backlog: batch sizes, catch-up, memory and state (chapter 05).

The source material (``003_d81869c621161182.txt``, ``001_0c84e1be95b055b8.txt``) warns that a
streaming job restarted after downtime reads everything that piled up in its first batch
unless ``maxOffsetsPerTrigger`` caps it, and that how long catch-up takes is arithmetic:
the backlog is ``downtime x input rate``, and the job works it off at its throughput *minus*
the input that keeps arriving. This module runs that on the sandbox and measures it.

- :func:`catch_up_time_s` -- the arithmetic, pure.
- :class:`HighWatermarks` -- a thread sampling the topics' end offsets, for the lag curve.
- :func:`batches` -- one :class:`Batch` per micro-batch from a query's progress: rows,
  duration, the state operator's rows and memory, and the lag when it committed.
- :func:`batch_memory` -- per batch, the execution memory its tasks took and what they
  spilled, from the driver's REST API (:mod:`job.spark.driver_rest`).
- :func:`run_catch_up` -- start the job on a prefix, wait until it has caught up (and,
  with ``wait_state_empty``, until idle sessions expired), stop it, return a :class:`CatchUp`.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from job.engine.errors import JobError
from job.spark.config import JobConfig
from job.spark.driver_rest import batch_memory, memory_pool_bytes
from job.spark.query_progress import offset_total, reached

__all__ = [
    "BacklogError",
    "Batch",
    "CatchUp",
    "HighWatermarks",
    "batch_memory",
    "batches",
    "catch_up_time_s",
    "forecast",
    "memory_pool_bytes",
    "pace",
    "run_catch_up",
    "throughput",
    "without_cap",
]


class BacklogError(JobError):
    """A catch-up run could not be measured (the job failed, or never caught up in time)."""


def catch_up_time_s(backlog: float, input_rate: float, throughput: float) -> float:
    """Seconds to work off ``backlog`` records at ``throughput`` records/s while ``input_rate``
    more arrive each second: ``backlog / (throughput - input_rate)``; ``inf`` when the job is
    not faster than its input (then it never catches up, and the lag only grows)."""
    if backlog <= 0:
        return 0.0
    spare = throughput - input_rate
    return math.inf if spare <= 0 else backlog / spare


@dataclass(frozen=True)
class Batch:
    """One micro-batch: ``start``/``end`` in epoch seconds (trigger start, commit), the rows it
    read, the state operator's row count and memory after it, and the lag when it committed
    (the topics' end offsets then, minus the offsets it reached; None without samples)."""

    batch_id: int
    start: float
    end: float
    input_rows: int
    state_rows: int
    state_bytes: int
    committed: int
    lag: int | None

    @property
    def duration_s(self) -> float:
        return self.end - self.start


def _epoch(timestamp: str) -> float:
    return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()


def batches(progress: Sequence[Mapping[str, Any]], high_watermarks: Sequence[tuple[float, int]] = ()) -> list[Batch]:
    """One :class:`Batch` per progress event (a query's ``recentProgress``), in batch order.
    ``high_watermarks`` are ``(epoch s, total end offsets)`` samples; a batch's lag is the
    last sample at or before its commit minus the offsets it reached."""
    out = []
    for p in sorted(progress, key=lambda p: int(p["batchId"])):
        start = _epoch(p["timestamp"])
        end = start + (p.get("durationMs") or {}).get("triggerExecution", 0) / 1000
        state = (p.get("stateOperators") or [{}])[0]
        committed = offset_total(reached(p))
        seen = [hw for t, hw in high_watermarks if t <= end]
        out.append(
            Batch(
                batch_id=int(p["batchId"]),
                start=start,
                end=end,
                input_rows=int(p.get("numInputRows") or 0),
                state_rows=int(state.get("numRowsTotal") or 0),
                state_bytes=int(state.get("memoryUsedBytes") or 0),
                committed=committed,
                lag=max(0, seen[-1] - committed) if seen else None,
            )
        )
    return out


def throughput(run: CatchUp, *, first: int | None = 3) -> float:
    """Records/s the first ``first`` full batches went at (every full batch with ``first=None``:
    the pace of the whole catch-up, known only once it is over): the rows of all but the last
    over the time from the first one's start to the last one's start. Start to start, because a
    triggered query starts a batch on each trigger tick (or at once, when the last one ran
    past it): this is the rate the backlog went down, bound by the cap over the trigger
    interval or by the batches' own time, whichever is slower. The query's very first batch is
    left out: it also opens the state stores, which later batches do not pay for."""
    full = run.early_full_batches(first)
    return sum(b.input_rows for b in full[:-1]) / (full[-1].start - full[0].start)


def pace(run: CatchUp, trigger_s: float, *, first: int = 3) -> str:
    """Why the first ``first`` full batches went at the rate :func:`throughput` measured, in a
    sentence: their starts against the trigger. Spark starts the next batch at the first
    multiple of the interval after the last one's start (``ProcessingTimeExecutor``), so a
    batch that started late, after one ran past its tick, is followed sooner than one
    interval, and early batches can go faster than the cap over the trigger."""
    full = run.early_full_batches(first)
    gaps = [(b.batch_id, b.start - a.start) for a, b in zip(full, full[1:])]
    shown = ", ".join(f"batch {i} {gap:.1f} s" for i, gap in gaps)
    short = [(i, gap) for i, gap in gaps if gap < 0.95 * trigger_s]
    if short:
        i, gap = short[0]
        return (
            f"start to start: {shown} after the one before. Batch {i} started {gap:.1f} s after the one before, less "
            f"than the {trigger_s:g} s trigger: Spark starts the next batch at the first multiple of the interval after "
            f"a batch's start, so a batch that started late (after one that ran past its tick) is followed sooner, and "
            f"these batches went faster than the cap over the trigger"
        )
    slow = [(i, gap) for i, gap in gaps if gap > 1.05 * trigger_s]
    if slow:
        return (
            f"start to start: {shown} after the one before: longer than the {trigger_s:g} s trigger, so the job's own "
            f"speed, not the cap over the trigger, set the rate"
        )
    return f"start to start: {shown} after the one before: one {trigger_s:g} s trigger each, so the cap over the trigger set the rate"


def forecast(run: CatchUp, *, first: int | None = 3) -> float:
    """The catch-up time the first ``first`` full batches predict (every full batch with
    ``first=None``: the arithmetic in hindsight): their :func:`throughput` in
    :func:`catch_up_time_s` with the run's backlog and input rate."""
    return catch_up_time_s(run.backlog, run.input_rate, throughput(run, first=first))


def commit_forecast(run: CatchUp, *, first: int | None = None) -> float:
    """When the lake sees the catch-up, by the arithmetic, in seconds from the query's start:
    the first batch starts some time after the query, :func:`forecast` later the backlog is
    gone, and the batch that reads the rest commits its own duration after it starts. The
    arithmetic says nothing of the two ends (a start, a commit), so they are taken from the
    run; the rate is every full batch's by default (``first=None``)."""
    reading = run.caught_up_batch
    if reading is None or not run.batches:
        raise BacklogError(f"{run.label}: never caught up; no commit to forecast")
    return run.first_start_s + forecast(run, first=first) + reading.duration_s


class HighWatermarks:
    """Samples the total end offset of every topic with a prefix (the records in them, for
    topics that start at 0), every ``interval_s``, in a daemon thread, into ``samples``:
    ``(epoch s, total)``. ``with HighWatermarks(...) as hw: ...`` then ``hw.samples``, or
    :meth:`start` and :meth:`stop` when the sampling starts and ends in different places.

    ``timeout_s`` bounds each read. A read that fails (the broker is down) is skipped, so
    every total is an int (what :func:`batches` needs); with ``gaps``, it is recorded as
    ``(t, None)`` instead, stamped when it was asked, so a plot shows the outage as a gap.
    A total is stamped when it was read.
    """

    def __init__(
        self, bootstrap: str, topic_prefix: str, *, interval_s: float = 0.5, timeout_s: float = 5.0, gaps: bool = False
    ) -> None:
        self.bootstrap, self.topic_prefix, self.interval_s = bootstrap, topic_prefix, interval_s
        self.timeout_s, self.gaps = timeout_s, gaps
        self.samples: list[tuple[float, int | None]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="high-watermarks", daemon=True)

    def sample(self) -> int:
        """Read the total now, record it and return it; raises when Kafka does not answer."""
        from producers.kafka import end_offsets

        total = sum(end_offsets(self.bootstrap, self.topic_prefix, timeout_s=self.timeout_s).values())
        self.samples.append((time.time(), total))
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            asked = time.time()
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a missed sample is a gap in a plot, not a crash
                if self.gaps:
                    self.samples.append((asked, None))
            self._stop.wait(self.interval_s)

    def start(self) -> HighWatermarks:
        """Start sampling (once)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and wait for a read in flight; harmless if it never started."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(self.timeout_s + 5)

    def __enter__(self) -> HighWatermarks:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass(kw_only=True)
class CatchUp:
    """What one run of the job over a backlog did. ``started`` is when the query started;
    ``backlog`` the records in Kafka then; ``input_rate`` the records/s that kept arriving
    while producers ran (measured from the high watermarks; 0 when none ran); ``caught_up_s`` the time from ``started`` to the
    commit of the first batch with no lag left behind it (None if it never got there)."""

    label: str
    cap: int | None
    started: float
    backlog: int
    input_rate: float
    batches: list[Batch]
    high_watermarks: list[tuple[float, int]]
    memory: dict[int, dict[str, int]] = field(default_factory=dict)

    @property
    def caught_up_batch(self) -> Batch | None:
        """The first batch with no lag left behind it (or, capped, the first that read less than
        the cap: it read everything there was): the one that reads the rest of the backlog."""
        return next((b for b in self.batches if b.input_rows and (b.lag == 0 or (self.cap and not self.full(b)))), None)

    @property
    def caught_up_s(self) -> float | None:
        reading = self.caught_up_batch
        return None if reading is None else reading.end - self.started

    @property
    def first_start_s(self) -> float:
        """Seconds from ``started`` to the start of the query's first batch."""
        return self.batches[0].start - self.started

    @property
    def first_commit_s(self) -> float | None:
        """Seconds from ``started`` to the commit of the first batch that read anything: how
        long the first records of the backlog waited, on top of the downtime."""
        return next((b.end - self.started for b in self.batches if b.input_rows), None)

    @property
    def peak_memory_bytes(self) -> int:
        """The largest batch's peak execution memory (see :func:`batch_memory`)."""
        return max((m.get("peak_execution_bytes", 0) for m in self.memory.values()), default=0)

    def summary(self) -> dict[str, Any]:
        """One row for the whole run, for a DataFrame that sets runs side by side."""
        with_input = [b for b in self.batches if b.input_rows]
        return {
            "run": self.label,
            "backlog": self.backlog,
            "batches with input": len(with_input),
            "largest batch (rows)": max((b.input_rows for b in with_input), default=0),
            "first commit (s)": None if self.first_commit_s is None else round(self.first_commit_s, 1),
            "caught up (s)": None if self.caught_up_s is None else round(self.caught_up_s, 1),
            "peak execution memory (MB)": round(self.peak_memory_bytes / 2**20, 1),
            "spilled (MB)": round(sum(m.get("spilled_bytes", 0) for m in self.memory.values()) / 2**20, 1),
        }

    def full(self, batch: Batch) -> bool:
        """Whether the cap limited ``batch``: Spark splits ``maxOffsetsPerTrigger`` over the
        partitions in proportion to their backlog and rounds each share down, so a capped
        batch reads a little less than the cap; 90 % of it counts as full."""
        return bool(self.cap) and batch.input_rows >= 0.9 * self.cap

    @property
    def full_batches(self) -> list[Batch]:
        """The batches the cap limited, after the query's very first (which also opens the state
        stores, a cost later batches do not pay)."""
        return [b for b in self.batches[1:] if self.full(b)]

    def early_full_batches(self, first: int | None) -> list[Batch]:
        """The first ``first`` of :attr:`full_batches`, or all of them with ``None`` (at least
        two: a rate needs two starts); :class:`BacklogError` when the run had fewer."""
        need = max(first or 0, 2)
        full = self.full_batches if first is None else self.full_batches[:need]
        if len(full) < need:
            raise BacklogError(f"{self.label}: only {len(full)} full batches of {self.cap} rows; a forecast needs {need}")
        return full

    def table(self) -> list[dict[str, Any]]:
        """One row per batch, for a DataFrame: times relative to ``started``."""
        return [
            {
                "batch": b.batch_id,
                "committed at (s)": round(b.end - self.started, 1),
                "rows": b.input_rows,
                "duration (s)": round(b.duration_s, 1),
                "lag after": b.lag,
                "state rows": b.state_rows,
                "execution memory (MB)": round(self.memory.get(b.batch_id, {}).get("peak_execution_bytes", 0) / 2**20, 1),
                "spilled (MB)": round(self.memory.get(b.batch_id, {}).get("spilled_bytes", 0) / 2**20, 1),
            }
            for b in self.batches
        ]


def run_catch_up(
    spark,
    cfg: JobConfig,
    *,
    bootstrap: str,
    label: str,
    input_running: Callable[[], bool] = lambda: False,
    wait_state_empty_s: float | None = None,
    timeout_s: float = 300.0,
) -> CatchUp:
    """Start the job (``cfg``) on a backlog, wait until it caught up, stop it, return what it did.

    ``input_running`` says whether producers are still sending: the run waits for them to
    finish, then for the job to reach the end offsets. With ``wait_state_empty_s``, it then
    waits (up to that long) for idle-session expiry to empty the state store, batch after
    no-data batch. The lag curve needs the query's progress, so a run longer than
    ``spark.sql.streaming.numRecentProgressUpdates`` batches (100) loses its start.
    """
    from job.spark import pipeline

    name = cfg.name + "-sessions"
    with HighWatermarks(bootstrap, cfg.topic_prefix) as hw:
        backlog, started = hw.sample(), time.time()
        queries = pipeline.start(spark, cfg, bootstrap=bootstrap)
        query = next(q for q in queries if q.name == name)
        deadline = started + timeout_s
        try:
            while input_running() and time.time() < deadline:
                pipeline.raise_if_dead(query)
                pipeline.wait(query, 1.0)
            input_until = time.time()
            targets = pipeline.source_end_offsets(bootstrap, cfg.topic_prefix)
            while not pipeline.caught_up(query, targets):
                pipeline.raise_if_dead(query)
                if time.time() > deadline:
                    raise BacklogError(
                        f"{name}: {pipeline.records_left(query, targets)} records still unread after {timeout_s:.0f}s"
                    )
                pipeline.wait(query, 1.0)
            if wait_state_empty_s is not None:
                _wait_state_empty(query, timeout_s=wait_state_empty_s)
        finally:
            for q in queries:
                q.stop()
    samples = [(t, total) for t, total in hw.samples if total is not None]  # no gaps: a failed read was skipped
    arrived = [(t, v) for t, v in samples if started <= t <= input_until]
    span = arrived[-1][0] - arrived[0][0] if len(arrived) > 1 else 0.0
    rate = (arrived[-1][1] - arrived[0][1]) / span if span > 0 else 0.0
    return CatchUp(
        label=label,
        cap=cfg.max_offsets_per_trigger,
        started=started,
        backlog=backlog,
        input_rate=rate,
        batches=batches(query.recentProgress, samples),
        high_watermarks=samples,
        memory=batch_memory(spark, name, str(query.id)),
    )


def _wait_state_empty(query, *, timeout_s: float) -> None:
    from job.spark import pipeline

    deadline = time.monotonic() + timeout_s
    while True:
        pipeline.raise_if_dead(query)
        last = query.lastProgress or {}
        state = (last.get("stateOperators") or [{}])[0]
        if last and int(state.get("numRowsTotal") or 0) == 0 and int(last.get("numInputRows") or 0) == 0:
            return
        if time.monotonic() > deadline:
            raise BacklogError(
                # a row per session, or per Kafka partition under the step keyed by partition
                f"{query.name}: the state store still holds {state.get('numRowsTotal')} rows (sessions, or "
                f"partitions when keyed by partition) after "
                f"{timeout_s:.0f}s; idle expiry needs idle_timeout_s of silence and a no-data batch"
            )
        pipeline.wait(query, 1.0)


def without_cap(cfg: JobConfig) -> JobConfig:
    """``cfg`` with no ``maxOffsetsPerTrigger``: the first batch reads the whole backlog."""
    return dataclasses.replace(cfg, max_offsets_per_trigger=None)
