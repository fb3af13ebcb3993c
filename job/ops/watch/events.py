"""Spark's streaming events turned into the watchdog's events, and an event log on disk.

:class:`EventListener` is a ``StreamingQueryListener``: registered in a job's
SparkSession it turns every start, progress and termination into a
:mod:`job.ops.watch.rules` event and hands it to a sink (a :class:`~job.ops.watch.supervisor.Watchdog`
in the same process, an :class:`EventLog` file for a watchdog in another process, or
both). ``python -m job run`` always writes the log (``<checkpoint>/events.jsonl``), so
``python -m job watch`` can follow a job it did not start.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Any

from job.ops.watch.rules import BatchCompleted, Event, LagSample, QueryStarted, QueryTerminated, Tick
from job.spark.query_progress import reached

__all__ = ["EventListener", "EventLog", "batch_from_progress", "event_from_dict", "event_to_dict"]

_TYPES: dict[str, type] = {cls.__name__: cls for cls in (QueryStarted, BatchCompleted, QueryTerminated, LagSample, Tick)}


def event_to_dict(event: Event) -> dict[str, Any]:
    """A JSON-ready dict with the event's fields and its ``type``."""
    return {"type": type(event).__name__, **dataclasses.asdict(event)}


def event_from_dict(record: dict[str, Any]) -> Event:
    """The inverse of :func:`event_to_dict`; unknown types and fields raise ValueError."""
    fields = dict(record)
    kind = _TYPES.get(str(fields.pop("type", "")))
    if kind is None:
        raise ValueError(f"unknown event type {record.get('type')!r}")
    return kind(**fields)


def batch_from_progress(progress: dict[str, Any], *, at: float, query: str | None = None) -> BatchCompleted:
    """A :class:`BatchCompleted` from a query progress (its JSON as a dict): the end offsets
    of every Kafka source merged (:func:`job.spark.query_progress.reached`), and the trigger's
    start from its ``timestamp`` (ISO 8601, UTC)."""
    return BatchCompleted(
        query=query or progress.get("name") or str(progress.get("id")),
        at=at,
        batch_id=int(progress["batchId"]),
        input_rows=int(progress.get("numInputRows") or 0),
        end_offsets=reached(progress),
        started_at=_epoch(progress.get("timestamp")),
    )


def _epoch(timestamp: object) -> float | None:
    """``2026-11-24T05:00:00.123Z`` as epoch seconds; None for anything else."""
    if not isinstance(timestamp, str):
        return None
    try:
        return datetime.fromisoformat(timestamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


class EventLog:
    """An append-only JSON-lines file of events, safe to append from several threads and to
    follow from another process (:meth:`read_from` returns whole lines only)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()

    def append(self, event: Event) -> None:
        line = json.dumps(event_to_dict(event), sort_keys=True)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock, self.path.open("a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    def read_from(self, position: int = 0) -> tuple[list[Event], int]:
        """Events after byte ``position``, and the position after the last whole line."""
        try:
            with self.path.open("rb") as fh:
                fh.seek(position)
                data = fh.read()
        except FileNotFoundError:
            return [], position
        end = data.rfind(b"\n") + 1
        events = []
        for raw in data[:end].splitlines():
            if raw.strip():
                try:
                    events.append(event_from_dict(json.loads(raw)))
                except (ValueError, TypeError) as exc:
                    print(f"[watch] {self.path}: skipping a line that is not an event ({exc})", file=sys.stderr)
        return events, position + end


class EventListener:
    """Build with :meth:`create` (the base class is imported lazily so this module loads
    without Spark). Every callback converts and forwards; none raises into Spark."""

    @staticmethod
    def create(sink: Callable[[Event], None] | Iterable[Callable[[Event], None]], *, clock: Callable[[], float] = time.time):
        """A ``StreamingQueryListener`` feeding ``sink`` (one callable or several)."""
        from pyspark.sql.streaming.listener import StreamingQueryListener

        sinks = [sink] if callable(sink) else list(sink)

        class _Listener(StreamingQueryListener):
            def __init__(self) -> None:
                self.names: dict[str, str] = {}
                self.pid = os.getpid()

            def _emit(self, event: Event) -> None:
                for target in sinks:
                    try:
                        target(event)
                    except Exception as exc:  # noqa: BLE001 -- a listener must never fail Spark's bus
                        print(f"[watch] event sink failed on {type(event).__name__}: {exc}", file=sys.stderr)

            def onQueryStarted(self, event) -> None:
                name = event.name or str(event.id)
                self.names[str(event.id)] = name
                self._emit(QueryStarted(query=name, at=clock(), run_id=str(event.runId), pid=self.pid))

            @property
            def _jlistener(self):
                # what spark.streams.addListener registers: the bridge below instead of PySpark's
                if not hasattr(self, "_jlistenerobj"):
                    from pyspark import SparkContext

                    wrapper = SparkContext._jvm.PythonStreamingQueryListenerWrapper  # noqa: SLF001
                    self._jlistenerobj = wrapper(_JsonBridge(self))
                return self._jlistenerobj

            def onQueryProgress(self, event) -> None:
                self.progress_json(lambda: event.progress.json)

            def progress_json(self, read: Callable[[], str]) -> None:
                """One progress event, its JSON from ``read`` (this listener's event or the
                bridge's); whatever fails is printed, never raised into Spark's listener bus."""
                try:
                    progress = json.loads(read())
                    name = progress.get("name") or self.names.get(str(progress.get("id")))
                    self._emit(batch_from_progress(progress, at=clock(), query=name))
                except Exception as exc:  # noqa: BLE001
                    print(f"[watch] cannot read a progress event: {exc}", file=sys.stderr)

            def onQueryIdle(self, event) -> None:
                pass  # an idle trigger is neither progress nor a fault

            def onQueryTerminated(self, event) -> None:
                name = self.names.get(str(event.id), str(event.id))
                self._emit(QueryTerminated(query=name, at=clock(), error=event.exception))

        return _Listener()


class _JsonBridge:
    """The Java side of the listener (Py4J's ``PythonStreamingQueryListener``), which hands on a
    progress event as its JSON alone. PySpark's own bridge builds a ``StreamingQueryProgress``
    field by field, and each ``dict()`` of its six Java maps ends in a Java exception that PySpark
    converts by looking classes up by name through every jar: 28 % of an idle job's driver CPU,
    for fields this listener never reads (docs/performance.md, "The listener's progress events")."""

    def __init__(self, listener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent) -> None:  # noqa: N802 - the Java interface's names
        from pyspark.sql.streaming.listener import QueryStartedEvent

        self.listener.onQueryStarted(QueryStartedEvent.fromJObject(jevent))

    def onQueryProgress(self, jevent) -> None:  # noqa: N802
        self.listener.progress_json(lambda: jevent.progress().json())

    def onQueryIdle(self, jevent) -> None:  # noqa: N802
        pass  # an idle trigger is neither progress nor a fault (the listener's onQueryIdle)

    def onQueryTerminated(self, jevent) -> None:  # noqa: N802
        from pyspark.sql.streaming.listener import QueryTerminatedEvent

        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJObject(jevent))

    class Java:
        implements = ["org.apache.spark.sql.streaming.PythonStreamingQueryListener"]
