"""Fixtures for the producers' tests: factory closures, no services.

``memory_transport`` is a stand-in broker for unit tests of the run loop only; the
integration tests in ``test_producers_kafka_integration.py`` use the sandbox's real Kafka.
"""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Sequence

import pytest

from producers.kafka import Delivery


class MemoryTransport:
    """Keeps records per (topic, partition) and reports deliveries on poll/flush.

    ``verdict(topic, key, value)`` may return "failed" or "indeterminate" to simulate a
    broker refusing or timing out on a record; by default every record is acknowledged.
    """

    def __init__(self, *, partitions: int = 3, verdict: Callable[[str, bytes, bytes], str] | None = None) -> None:
        self.partitions = partitions
        self.verdict = verdict or (lambda t, k, v: "ok")
        self.topics: dict[str, int] = {}
        self.log: dict[tuple[str, int], list[tuple[bytes, bytes]]] = {}
        self.queue: list[tuple[Callable[[Delivery], None], Delivery]] = []
        self.queue_full_waits = 0
        self.errors = 0
        self.last_error: str | None = None
        self.closed = False
        self.hold = False  # when True, poll/flush report nothing (a broker that never answers)

    def ensure_topics(self, topics: Sequence[str]) -> list[str]:
        new = [t for t in topics if t not in self.topics]
        for t in new:
            self.topics[t] = self.partitions
        return new

    def send(self, topic: str, key: bytes, value: bytes, on_delivery: Callable[[Delivery], None]) -> None:
        assert topic in self.topics, f"send to {topic} before ensure_topics"
        verdict = self.verdict(topic, key, value)
        if verdict == "ok":
            p = zlib.crc32(key) % self.topics[topic]
            log = self.log.setdefault((topic, p), [])
            log.append((key, value))
            self.queue.append((on_delivery, Delivery("ok", p, len(log) - 1)))
        else:
            self.queue.append((on_delivery, Delivery(verdict, error=f"simulated {verdict}")))  # type: ignore[arg-type]

    def poll(self, timeout: float) -> None:
        if self.hold:
            return
        queue, self.queue = self.queue, []
        for cb, d in queue:
            cb(d)

    def flush(self, timeout: float) -> int:
        self.poll(0)
        return len(self.queue)

    def close(self) -> None:
        self.closed = True


class StepClock:
    """A clock that advances by ``step`` seconds each time it is read."""

    def __init__(self, start: float = 1_700_000_000.0, step: float = 0.001) -> None:
        self._counter = itertools.count()
        self.start, self.step = start, step

    def __call__(self) -> float:
        return self.start + next(self._counter) * self.step


@pytest.fixture
def memory_transport() -> Callable[..., MemoryTransport]:
    return MemoryTransport


@pytest.fixture
def step_clock() -> Callable[..., StepClock]:
    return StepClock
