"""The supervisor: feeds events to :func:`job.ops.watch.rules.decide` and alerts to channels.

Three threads, so that no slow part delays another: the *loop* applies queued events and
a :class:`Tick` every ``tick_s`` (reading the ``source`` first, when there is one); the *sampler* asks Kafka for high watermarks every
``lag_every_s`` (a paused broker blocks only it); the *dispatcher* sends alerts to the
channels (a webhook that hangs until its timeout blocks only it). Channel failures are
reported through ``report`` and kept in :attr:`Watchdog.failures`.

Use it as a context manager::

    with watch_spark(spark, high_watermarks=..., channels=[StderrChannel()]) as dog:
        queries = pipeline.start(spark, cfg, bootstrap=...)
        ...
    dog.alerts

or follow the event log a job writes, from another process (``python -m job watch``).
"""

from __future__ import annotations

import contextlib
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from job.ops.watch.channels import Channel, ChannelError
from job.ops.watch.events import EventListener, EventLog
from job.ops.watch.rules import (
    Alert,
    AlertKind,
    Event,
    LagSample,
    Offsets,
    QueryStarted,
    QueryTerminated,
    Thresholds,
    Tick,
    WatchState,
    decide,
)

__all__ = ["Watchdog", "follow_log", "kafka_high_watermarks", "watch_spark"]


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def kafka_high_watermarks(bootstrap: str, topic_prefix: str, *, timeout_s: float = 5.0) -> Callable[[], Offsets]:
    """A lag source: the high watermark of every partition of the topics ``topic_prefix*``."""

    def sample() -> Offsets:
        from job.spark.pipeline import source_end_offsets

        return source_end_offsets(bootstrap, topic_prefix, timeout_s=timeout_s)

    return sample


class Watchdog:
    """Watches streaming queries by the events fed to it and notifies through ``channels``.

    ``high_watermarks`` (optional) returns Kafka's high watermarks for the watched queries'
    topics; without it the lag rule never fires and the stall rule has no input to wait on.
    ``watch_pids``: when an event came from another process (the event log), a driver pid
    that disappears without a termination event becomes an error ("driver gone").
    ``source`` (optional) returns the events written since its last call (the event log's
    new lines). The loop reads it on every tick, *after* it looked for vanished drivers and
    took the tick's time, so that everything a dead driver wrote before it died, and every
    batch that completed before the tick, is applied before the death and before time passes.
    Read on its own clock, a killed driver's last batch could arrive after its death was
    declared and pass for the restarted query's recovery, and a batch already in the log
    could be missed by a stall check.
    """

    def __init__(
        self,
        *,
        channels: Iterable[Channel] = (),
        thresholds: Thresholds | None = None,
        high_watermarks: Callable[[], Offsets] | None = None,
        tick_s: float = 1.0,
        lag_every_s: float = 5.0,
        watch_pids: bool = False,
        source: Callable[[], Iterable[Event]] | None = None,
        clock: Callable[[], float] = time.time,
        report: Callable[[str], None] = _say,
    ) -> None:
        self.channels = list(channels)
        self.thresholds = thresholds or Thresholds()
        self._high_watermarks = high_watermarks
        self._tick_s, self._lag_every_s = tick_s, lag_every_s
        self._watch_pids, self._source, self._clock, self._report = watch_pids, source, clock, report
        self._events: queue.Queue[Event] = queue.Queue()
        self._outbox: queue.Queue[Alert | None] = queue.Queue()
        self._state = WatchState()
        self._pids: dict[str, int] = {}
        self._alerts: list[Alert] = []
        self.failures: list[ChannelError] = []
        self._changed = threading.Condition()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # --- feeding -------------------------------------------------------------------------

    def feed(self, event: Event) -> None:
        """Queue one event (thread-safe; the listener calls this from Spark's callback thread)."""
        self._events.put(event)

    def replay(self, events: Iterable[Event]) -> None:
        """Apply past events without alerting: the state a late-starting watchdog catches up on."""
        for event in events:
            self._apply(event, alert=False)

    # --- reading -------------------------------------------------------------------------

    @property
    def alerts(self) -> list[Alert]:
        """Every alert raised so far, oldest first."""
        with self._changed:
            return list(self._alerts)

    @property
    def state(self) -> WatchState:
        return self._state

    def wait_for(self, kind: AlertKind | str, *, query: str | None = None, timeout_s: float = 60.0, after: int = 0) -> Alert:
        """Block until an alert of ``kind`` (for ``query``, if given) is raised, the
        ``after``-th alert or later; raise TimeoutError naming what was seen instead."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while True:
                for alert in self._alerts[after:]:
                    if alert.kind == kind and (query is None or alert.query == query):
                        return alert
                left = deadline - time.monotonic()
                if left <= 0:
                    seen = ", ".join(f"{a.kind}:{a.query}" for a in self._alerts) or "none"
                    raise TimeoutError(
                        f"no {kind} alert{f' for {query}' if query else ''} within {timeout_s:g} s (alerts so far: {seen})"
                    )
                self._changed.wait(min(left, 0.5))

    def wait_settled(self, *, timeout_s: float = 10.0) -> bool:
        """Wait until every watched query has terminated (its termination event applied);
        False if some are still active after ``timeout_s``. Spark delivers listener events
        asynchronously, so a query stopped a moment ago may not have reported yet."""
        deadline = time.monotonic() + timeout_s
        with self._changed:
            while any(w.active for w in self._state.queries.values()):
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.5))
        return True

    # --- running -------------------------------------------------------------------------

    def start(self) -> Watchdog:
        if self._threads:
            return self
        self._stop.clear()
        targets = [("loop", self._loop), ("dispatch", self._dispatch)]
        if self._high_watermarks is not None:
            targets.append(("sampler", self._sample))
        for name, target in targets:
            thread = threading.Thread(target=target, name=f"watchdog-{name}", daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self) -> None:
        """Apply what is queued, deliver every pending alert, then stop the threads."""
        self._stop.set()
        for thread in self._threads:
            if thread.name != "watchdog-dispatch":
                thread.join()
        self._read_source()
        self._drain_events()
        self._outbox.put(None)
        for thread in self._threads:
            thread.join()
        self._threads.clear()

    def __enter__(self) -> Watchdog:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- internals -----------------------------------------------------------------------

    def _apply(self, event: Event, *, alert: bool = True) -> None:
        if isinstance(event, QueryTerminated):
            self._pids.pop(event.query, None)
        elif getattr(event, "pid", None) is not None:
            self._pids[event.query] = event.pid  # type: ignore[union-attr]
        with self._changed:
            self._state, raised = decide(self._state, event, self.thresholds)
            if alert:
                self._alerts.extend(raised)
            self._changed.notify_all()
        for item in raised if alert else ():
            self._outbox.put(item)

    def _drain_events(self, *, gone: dict[str, int] | None = None, at: float = 0.0) -> None:
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                return
            if gone and isinstance(event, QueryStarted) and event.query in gone:
                # restarted before its old driver's death was applied: the death comes first
                self._vanished(event.query, gone[event.query], at=min(at, event.at))
            self._apply(event)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._step()
            self._stop.wait(self._tick_s)

    def _step(self) -> None:
        """One tick: note the time and the drivers that are gone, then read and apply what
        happened before (the source's new events, the queue), then the deaths, then time."""
        now = self._clock()
        gone = {query: pid for query, pid in self._pids.items() if not _alive(pid)} if self._watch_pids else {}
        self._read_source()
        self._drain_events(gone=gone, at=now)
        for query, pid in gone.items():
            self._vanished(query, pid, at=now)
        self._apply(Tick(at=now))

    def _read_source(self) -> None:
        for event in self._source() if self._source is not None else ():
            self._events.put(event)

    def _vanished(self, query: str, pid: int, *, at: float) -> None:
        watch = self._state.queries.get(query)
        if self._pids.get(query) == pid and watch is not None and watch.active:
            self._apply(
                QueryTerminated(
                    query=query, at=at, error=f"driver process {pid} is gone without a termination event (killed, or crashed)"
                )
            )

    def _sample(self) -> None:
        assert self._high_watermarks is not None
        while not self._stop.is_set():
            at = self._clock()
            try:
                highs, failure = self._high_watermarks(), None
            except Exception as exc:  # noqa: BLE001 -- an unreachable Kafka is a figure, not a crash
                highs, failure = {}, str(exc).splitlines()[0][:300]
            for name, watch in list(self._state.queries.items()):
                if watch.active:
                    self.feed(LagSample(query=name, at=at, high_watermarks=highs, failure=failure))
            self._stop.wait(self._lag_every_s)

    def _dispatch(self) -> None:
        while True:
            alert = self._outbox.get()
            if alert is None:
                return
            for channel in self.channels:
                try:
                    channel.send(alert)
                except ChannelError as exc:
                    self.failures.append(exc)
                    self._report(f"[watch] {exc} (alert {alert.kind} for {alert.query} not delivered there)")
                except Exception as exc:  # noqa: BLE001 -- a buggy channel must not stop the others
                    failure = ChannelError(
                        getattr(channel, "name", type(channel).__name__), f"{type(exc).__name__}: {exc}", "fix the channel"
                    )
                    self.failures.append(failure)
                    self._report(f"[watch] {failure}")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie (killed, not yet reaped by its parent) is gone for our purposes
        import psutil

        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except Exception:  # noqa: BLE001
        return True


@contextlib.contextmanager
def watch_spark(spark, *, event_log: str | Path | None = None, settle_s: float = 10.0, **kwargs) -> Iterator[Watchdog]:
    """A running :class:`Watchdog` fed by a listener on ``spark`` for the block.

    Queries already active when the block starts are watched from their next event on.
    ``event_log``: also append every event to this file (what ``python -m job watch`` follows).
    The listener is removed and every pending alert delivered when the block ends (after
    up to ``settle_s`` for the termination events of queries stopped inside the block).
    """
    dog = Watchdog(**kwargs)
    sinks: list[Callable[[Event], None]] = [dog.feed]
    if event_log is not None:
        sinks.append(EventLog(event_log).append)
    listener = EventListener.create(sinks)
    spark.streams.addListener(listener)
    dog.start()
    try:
        yield dog
    finally:
        try:
            if not spark.streams.active:  # the queries were stopped: let their last events arrive
                dog.wait_settled(timeout_s=settle_s)
            spark.streams.removeListener(listener)
        finally:
            dog.stop()


def follow_log(path: str | Path, *, until: Callable[[], bool], poll_s: float = 0.5, **kwargs) -> Watchdog:
    """Watch the job that writes the event log ``path`` (from another process) until
    ``until()`` is true or Ctrl-C. Past events are replayed silently; pid watching is on;
    the log is read on the watchdog's own tick (``tick_s``), see :class:`Watchdog`'s
    ``source``. Every pending alert is delivered before this returns the stopped watchdog."""
    log = EventLog(path)
    history, position = log.read_from(0)

    def new_lines() -> list[Event]:
        nonlocal position
        events, position = log.read_from(position)
        return events

    dog = Watchdog(watch_pids=True, source=new_lines, **kwargs)
    dog.replay(history)
    with dog, contextlib.suppress(KeyboardInterrupt):
        while not until():
            time.sleep(poll_s)
    return dog
