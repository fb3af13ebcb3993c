"""The watchdog's decisions, as a pure function over events: no Spark, no clock, no I/O.

:func:`decide` takes the state so far, one event and the thresholds, and returns the new
state and the alerts this event raises. Time only enters through the events' ``at``
(seconds since the epoch), so a test can replay any history in microseconds, and the
supervisor (:mod:`job.ops.watch.supervisor`) feeds it :class:`Tick` events to let time pass.

The rules, per query name:

- **error**: the query terminated with an exception (or its driver vanished without a
  termination event). Raised once per termination.
- **stall**: input has been waiting (Kafka's high watermarks are past the query's end
  offsets, or Kafka cannot be asked) for ``stall_after_s`` seconds and no batch completed
  meanwhile. The clock starts at the later of the last completed batch and the first lag
  sample that saw input waiting, so an idle query that gets new input is not "stalled
  since its last batch an hour ago".
- **lag**: the records between the query's end offsets and the high watermarks exceed
  ``lag_records`` in every sample for ``lag_for_s`` seconds.
- **recovered**: a batch completed after a stall, the lag fell to ``lag_records *
  clear_ratio`` or below after a lag alert, or a restarted query completed its first
  batch after an error. ``figures["cleared"]`` names what cleared.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Union

from job.engine.errors import UsageError

__all__ = [
    "Alert",
    "AlertKind",
    "BatchCompleted",
    "Event",
    "LagSample",
    "QueryStarted",
    "QueryTerminated",
    "QueryWatch",
    "Thresholds",
    "Tick",
    "WatchState",
    "decide",
    "lag_of",
]

#: {topic: {partition (as str): offset}}, the shape of the Kafka source's progress offsets.
Offsets = Mapping[str, Mapping[str, int]]


class AlertKind(StrEnum):
    """What an alert says happened."""

    ERROR = "error"
    STALL = "stall"
    LAG = "lag"
    RECOVERED = "recovered"


@dataclass(frozen=True, kw_only=True)
class Alert:
    """One notification for a human: what happened, to which query, when, and the figures
    that made the rule fire (thresholds included, so the alert explains itself)."""

    kind: AlertKind
    query: str
    at: float
    figures: Mapping[str, object]
    message: str

    @property
    def when(self) -> datetime:
        return datetime.fromtimestamp(self.at, UTC)

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict: kind, query, at (epoch s), when (ISO 8601 UTC), message, figures."""
        return {
            "kind": str(self.kind),
            "query": self.query,
            "at": self.at,
            "when": self.when.isoformat(timespec="milliseconds"),
            "message": self.message,
            "figures": dict(self.figures),
        }

    def line(self) -> str:
        """One human-readable line."""
        return f"{self.when:%Y-%m-%dT%H:%M:%SZ} ALERT {self.kind} {self.query}: {self.message}"


@dataclass(frozen=True, kw_only=True)
class Thresholds:
    """When the rules fire. ``stall_after_s`` must exceed the trigger interval plus a normal
    batch's duration (and the first batch's start-up), or healthy queries look stalled."""

    stall_after_s: float = 120.0
    lag_records: int = 50_000
    lag_for_s: float = 0.0
    clear_ratio: float = 0.5

    def __post_init__(self) -> None:
        if self.stall_after_s <= 0:
            raise UsageError(f"stall_after_s={self.stall_after_s}", "use a positive number of seconds")
        if self.lag_records < 0:
            raise UsageError(f"lag_records={self.lag_records}", "use a number of records >= 0")
        if self.lag_for_s < 0:
            raise UsageError(f"lag_for_s={self.lag_for_s}", "use a number of seconds >= 0")
        if not 0 <= self.clear_ratio <= 1:
            raise UsageError(f"clear_ratio={self.clear_ratio}", "use a fraction between 0 and 1")


# --- events --------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class QueryStarted:
    """A query (re)started; ``pid`` is its driver's process id when known."""

    query: str
    at: float
    run_id: str = ""
    pid: int | None = None


@dataclass(frozen=True, kw_only=True)
class BatchCompleted:
    """A micro-batch committed (a progress event); ``end_offsets`` as the Kafka source reports them.
    ``at`` is when its progress was reported (its output committed), ``started_at`` when its
    trigger fired (the progress's ``timestamp``), None where the progress did not say."""

    query: str
    at: float
    batch_id: int
    input_rows: int
    end_offsets: Offsets = field(default_factory=dict)
    started_at: float | None = None


@dataclass(frozen=True, kw_only=True)
class QueryTerminated:
    """The query stopped; ``error`` is None for a clean stop, else what killed it."""

    query: str
    at: float
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class LagSample:
    """Kafka's high watermarks for the query's topics, or ``failure`` when Kafka did not answer."""

    query: str
    at: float
    high_watermarks: Offsets = field(default_factory=dict)
    failure: str | None = None


@dataclass(frozen=True, kw_only=True)
class Tick:
    """Time passed (the supervisor sends one every second or so)."""

    at: float


Event = Union[QueryStarted, BatchCompleted, QueryTerminated, LagSample, Tick]


# --- state ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class QueryWatch:
    """What the rules remember about one query."""

    started_at: float
    active: bool = True
    last_batch_id: int | None = None
    last_batch_at: float | None = None
    end_offsets: Offsets | None = None
    high_watermarks: Offsets | None = None
    lag: int | None = None
    lag_failure: str | None = None
    waiting_since: float | None = None
    lag_above_since: float | None = None
    stalled_since: float | None = None  # when the input started waiting, once a stall was raised
    lagging: bool = False
    failed: bool = False


@dataclass(frozen=True)
class WatchState:
    """Every watched query by name (treat as immutable: :func:`decide` returns a new one)."""

    queries: Mapping[str, QueryWatch] = field(default_factory=dict)

    def with_query(self, name: str, watch: QueryWatch) -> WatchState:
        return WatchState({**self.queries, name: watch})


def lag_of(end_offsets: Offsets | None, high_watermarks: Offsets) -> tuple[int, str | None, int]:
    """Records between the query's end offsets and Kafka's high watermarks.

    Returns (total, worst partition as ``topic[p]``, its lag). A partition the query has not
    reported yet counts from offset 0: Spark's Kafka source reads a partition it discovers
    after the start from the earliest offset.
    """
    total, worst, worst_lag = 0, None, 0
    ends = end_offsets or {}
    for topic, parts in sorted(high_watermarks.items()):
        for part, high in sorted(parts.items()):
            behind = max(0, int(high) - int(ends.get(topic, {}).get(str(part), 0)))
            total += behind
            if behind > worst_lag:
                worst, worst_lag = f"{topic}[{part}]", behind
    return total, worst, worst_lag


def decide(state: WatchState, event: Event, thresholds: Thresholds) -> tuple[WatchState, tuple[Alert, ...]]:
    """Apply one event: the new state and the alerts it raises (often none)."""
    if isinstance(event, Tick):
        alerts: list[Alert] = []
        for name, watch in state.queries.items():
            watch, raised = _check_stall(name, watch, event.at, thresholds)
            state = state.with_query(name, watch)
            alerts.extend(raised)
        return state, tuple(alerts)
    watch = state.queries.get(event.query)
    if isinstance(event, QueryStarted):
        # a restart keeps the memory of a failure, so the first batch can say "recovered"
        failed = watch.failed if watch is not None else False
        return state.with_query(event.query, QueryWatch(started_at=event.at, failed=failed)), ()
    if watch is None:  # the watchdog joined after the start: the first event stands for it
        watch = QueryWatch(started_at=event.at)
    if isinstance(event, BatchCompleted):
        return _on_batch(state, event, watch, thresholds)
    if isinstance(event, LagSample):
        return _on_lag(state, event, watch, thresholds)
    if isinstance(event, QueryTerminated):
        return _on_terminated(state, event, watch)
    raise UsageError(f"decide() got {type(event).__name__}", "pass one of the event classes of job.ops.watch.rules")


def _on_batch(state: WatchState, event: BatchCompleted, watch: QueryWatch, th: Thresholds):
    alerts: list[Alert] = []
    if watch.stalled_since is not None:
        stalled = event.at - watch.stalled_since
        alerts.append(
            _alert(
                AlertKind.RECOVERED,
                event,
                f"batch {event.batch_id} completed after a stall of {stalled:.0f} s",
                cleared="stall",
                batch_id=event.batch_id,
                stalled_s=round(stalled, 1),
            )
        )
    if watch.failed:
        alerts.append(
            _alert(
                AlertKind.RECOVERED,
                event,
                f"restarted query completed batch {event.batch_id}",
                cleared="error",
                batch_id=event.batch_id,
            )
        )
    ends = event.end_offsets or watch.end_offsets
    waiting_since = None
    lag = watch.lag
    if watch.high_watermarks is not None:
        lag = lag_of(ends, watch.high_watermarks)[0]
        waiting_since = event.at if lag > 0 else None
    new = dataclasses.replace(
        watch,
        active=True,
        last_batch_id=event.batch_id,
        last_batch_at=event.at,
        end_offsets=ends,
        lag=lag,
        waiting_since=waiting_since,
        stalled_since=None,
        failed=False,
    )
    return state.with_query(event.query, new), tuple(alerts)


def _on_lag(state: WatchState, event: LagSample, watch: QueryWatch, th: Thresholds):
    if event.failure is not None:
        # Kafka did not answer: input may be waiting, so the stall clock runs (a paused
        # broker stops the query too), and the lag rule keeps its last figure.
        waiting = watch.waiting_since if watch.waiting_since is not None else event.at
        return state.with_query(event.query, dataclasses.replace(watch, lag_failure=event.failure, waiting_since=waiting)), ()
    lag, worst, worst_lag = lag_of(watch.end_offsets, event.high_watermarks)
    waiting = (watch.waiting_since if watch.waiting_since is not None else event.at) if lag > 0 else None
    above_since = watch.lag_above_since
    if lag > th.lag_records:
        above_since = above_since if above_since is not None else event.at
    else:
        above_since = None
    alerts: list[Alert] = []
    lagging = watch.lagging
    if not lagging and above_since is not None and event.at - above_since >= th.lag_for_s and watch.active:
        lagging = True
        alerts.append(
            _alert(
                AlertKind.LAG,
                event,
                f"{lag} records behind Kafka (threshold {th.lag_records}); worst {worst} {worst_lag} behind",
                lag_records=lag,
                threshold=th.lag_records,
                worst_partition=worst,
                worst_lag=worst_lag,
                last_batch_id=watch.last_batch_id,
            )
        )
    elif lagging and lag <= th.lag_records * th.clear_ratio:
        lagging = False
        alerts.append(
            _alert(
                AlertKind.RECOVERED,
                event,
                f"lag down to {lag} records (threshold {th.lag_records})",
                cleared="lag",
                lag_records=lag,
                threshold=th.lag_records,
            )
        )
    new = dataclasses.replace(
        watch,
        high_watermarks=event.high_watermarks,
        lag=lag,
        lag_failure=None,
        waiting_since=waiting,
        lag_above_since=above_since,
        lagging=lagging,
    )
    return state.with_query(event.query, new), tuple(alerts)


def _on_terminated(state: WatchState, event: QueryTerminated, watch: QueryWatch):
    if not watch.active:
        return state, ()
    new = dataclasses.replace(watch, active=False, waiting_since=None, stalled_since=None, failed=event.error is not None)
    if event.error is None:
        return state.with_query(event.query, new), ()
    first_line = event.error.strip().splitlines()[0] if event.error.strip() else "(no message)"
    alert = _alert(
        AlertKind.ERROR,
        event,
        f"query terminated: {first_line[:500]}",
        error=event.error[:4000],
        last_batch_id=watch.last_batch_id,
        lag_records=watch.lag,
    )
    return state.with_query(event.query, new), (alert,)


def _check_stall(name: str, watch: QueryWatch, now: float, th: Thresholds) -> tuple[QueryWatch, tuple[Alert, ...]]:
    if not watch.active or watch.stalled_since is not None or watch.waiting_since is None:
        return watch, ()
    since = max(watch.waiting_since, watch.last_batch_at or watch.started_at)
    if now - since < th.stall_after_s:
        return watch, ()
    waited = now - since
    lag = "unknown" if watch.lag_failure else watch.lag
    why = f"Kafka did not answer ({watch.lag_failure})" if watch.lag_failure else f"{watch.lag} records waiting"
    last = "no batch yet" if watch.last_batch_id is None else f"last batch {watch.last_batch_id}"
    alert = Alert(
        kind=AlertKind.STALL,
        query=name,
        at=now,
        message=f"no batch completed for {waited:.0f} s while input waits: {why}; {last} (threshold {th.stall_after_s:g} s)",
        figures={
            "no_progress_s": round(waited, 1),
            "threshold_s": th.stall_after_s,
            "lag_records": lag,
            "last_batch_id": watch.last_batch_id,
            "kafka_failure": watch.lag_failure,
        },
    )
    return dataclasses.replace(watch, stalled_since=since), (alert,)


def _alert(kind: AlertKind, event, message: str, **figures: object) -> Alert:
    return Alert(kind=kind, query=event.query, at=event.at, figures=figures, message=message)
