"""The Kafka side of the producers: topic creation and an idempotent, never-silently-blocking sender.

:class:`Transport` is what the run loop needs from a broker; :class:`KafkaTransport`
implements it with confluent-kafka (librdkafka). Every send ends in exactly one
:class:`Delivery` passed to its callback, during :meth:`Transport.poll` or
:meth:`Transport.flush`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from producers.errors import ProducerError, QueueFullError, TopicError
from producers.faults import OVERSIZED_MAX_BYTES
from producers.ledger import Outcome

__all__ = [
    "TOPIC_MAX_MESSAGE_BYTES",
    "Delivery",
    "KafkaTransport",
    "Transport",
    "Unplaced",
    "ensure_topics",
    "place",
    "producer_config",
    "read_partition",
]

#: ``max.message.bytes`` of the collection topics (and the producer's limit): room for an
#: ``oversized`` record, which must reach the reader to be rejected there.
TOPIC_MAX_MESSAGE_BYTES = OVERSIZED_MAX_BYTES + 1_000_000

# Errors after which the record may or may not be in the log.
_MAYBE_WRITTEN = frozenset(
    {
        KafkaError._MSG_TIMED_OUT,
        KafkaError._TIMED_OUT,
        KafkaError.REQUEST_TIMED_OUT,
        KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
    }
)


class Delivery(NamedTuple):
    """The outcome of one send, as the ledger records it (immutable; one per record sent,
    so a tuple: a frozen dataclass costs several times more to build)."""

    outcome: Outcome  # ok | failed | indeterminate
    partition: int | None = None
    offset: int | None = None
    error: str | None = None


class Transport(Protocol):
    """What the run loop needs from a broker (Kafka, or a stand-in in unit tests)."""

    queue_full_waits: int  # times a send found the local queue full and waited
    errors: int  # client-level errors reported (broker down, auth...)
    last_error: str | None

    def ensure_topics(self, topics: Sequence[str]) -> list[str]:
        """Create missing topics; returns the ones it created."""

    def send(self, topic: str, key: bytes, value: bytes, on_delivery: Callable[[Delivery], None]) -> None:
        """Queue one record. ``on_delivery`` is called exactly once: from poll/flush, or at
        once (outcome ``failed``) when the client refuses the record before queueing it."""

    def poll(self, timeout: float) -> None:
        """Serve delivery reports, waiting up to ``timeout`` seconds for the first."""

    def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for every queued record; returns how many are still unreported."""

    def close(self) -> None: ...


def producer_config(bootstrap: str, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The librdkafka settings the producers use; ``extra`` overrides any of them.

    Idempotence is on (acks=all, ordered retries without duplicates within a run). The
    partitioner is the Java client's (murmur2), so Spark and Kafka's own tools agree on
    which partition a session id lands in.
    """
    cfg: dict[str, Any] = {
        "bootstrap.servers": bootstrap,
        "client.id": "osl-producers",
        "enable.idempotence": True,
        "acks": "all",
        # One request in flight per connection. With more, a request that fails retriably
        # (NOT_LEADER, UNKNOWN_TOPIC_OR_PART: typical of a partition just created) can be
        # followed by a later one that succeeds, and librdkafka then "implicitly acks" the
        # failed one's records (success, offset -1001) although the broker never wrote them
        # (KAFKA-15591; librdkafka rd_kafka_handle_idempotent_Produce_success). The ledger
        # would still be right (the read-back finds them missing), but the run would have
        # lost records no fault asked for.
        "max.in.flight.requests.per.connection": 1,
        "partitioner": "murmur2_random",
        "linger.ms": 5,
        "compression.type": "lz4",
        "message.max.bytes": TOPIC_MAX_MESSAGE_BYTES,
        "queue.buffering.max.messages": 200_000,
        "queue.buffering.max.kbytes": 256 * 1024,
        "delivery.timeout.ms": 120_000,
        # Connection trouble reaches the run through error_cb (counted, shown in the
        # progress line); librdkafka's own log lines would tear that line apart.
        "log_level": 2,
    }
    cfg.update(extra or {})
    return cfg


def ensure_topics(
    bootstrap: str,
    topics: Sequence[str],
    *,
    partitions: int = 3,
    admin_config: Mapping[str, Any] | None = None,
    timeout_s: float = 30.0,
) -> list[str]:
    """Create each missing topic with ``partitions`` partitions, replication 1 and room for
    ``oversized`` records; existing topics are left as they are. Returns the created ones.
    """
    if not topics:
        return []
    # log_level 4: librdkafka's info chatter on teardown would land in the progress line.
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 4, **(admin_config or {})})
    new = [
        NewTopic(
            t,
            num_partitions=partitions,
            replication_factor=1,
            config={"max.message.bytes": str(TOPIC_MAX_MESSAGE_BYTES)},
        )
        for t in topics
    ]
    created = []
    futures = admin.create_topics(new, operation_timeout=timeout_s, request_timeout=timeout_s)
    for topic, future in futures.items():
        try:
            future.result(timeout=timeout_s)
            created.append(topic)
        except KafkaException as exc:
            err = exc.args[0] if exc.args else None
            if isinstance(err, KafkaError) and err.code() == KafkaError.TOPIC_ALREADY_EXISTS:
                continue
            raise TopicError(topic, bootstrap, f"could not be created ({exc})") from exc
        except Exception as exc:  # concurrent.futures.TimeoutError and friends
            raise TopicError(topic, bootstrap, f"no answer from the admin API ({exc!r})") from exc
    _wait_for_leaders(admin, bootstrap, topics, timeout_s)
    return created


def _wait_for_leaders(admin: AdminClient, bootstrap: str, topics: Sequence[str], timeout_s: float) -> None:
    """Return once the broker's metadata shows a leader for every partition of ``topics``.

    A create call returns when the controller has the topic, not when the broker serves it:
    the first produce requests to a partition it has not loaded yet fail retriably, and
    retries are where an idempotent producer's trouble starts (see :func:`producer_config`).
    """
    deadline = time.monotonic() + timeout_s
    waiting: list[str] = list(topics)
    while True:
        try:
            meta = admin.list_topics(timeout=max(0.1, min(5.0, deadline - time.monotonic())))
        except KafkaException as exc:
            meta, last = None, str(exc)
        if meta is not None:
            waiting = []
            for topic in topics:
                tm = meta.topics.get(topic)
                if (
                    tm is None
                    or tm.error is not None
                    or not tm.partitions
                    or any(pm.leader < 0 or pm.error is not None for pm in tm.partitions.values())
                ):
                    waiting.append(topic)
            if not waiting:
                return
            last = f"no leader yet for {', '.join(waiting)}"
        if time.monotonic() > deadline:
            raise TopicError(
                waiting[0] if waiting else topics[0], bootstrap, f"has no partition leader after {timeout_s:g}s ({last})"
            )
        time.sleep(0.1)


@dataclass(frozen=True, slots=True)
class Unplaced:
    """A record reported delivered without an offset (-1001). librdkafka does that when it
    infers success instead of reading it from the broker: a later request of the same
    idempotent producer succeeded, so it "implicitly acks" the earlier records too. That
    inference can be wrong (KAFKA-15591): the record may be in the log, or lost."""

    topic: str
    partition: int
    key: bytes
    value: bytes
    on_delivery: Callable[[Delivery], None]


def place(
    unplaced: Sequence[Unplaced],
    log: Callable[[str, int], Iterable[tuple[int, bytes | None, bytes | None]]],
    claimed: Mapping[tuple[str, int], set[int]],
) -> None:
    """Find each unplaced record's offset by reading its partition back, and report it.

    ``log(topic, partition)`` yields (offset, key, value) of the partition's records. A
    record is placed at the first offset with its exact key and value that no other ledger
    row claims (a ``duplicate`` fault sends the same bytes twice). One not in the partition
    after the flush is ``failed`` (it was lost, whatever the report said); one whose
    partition cannot be read back is ``indeterminate``. Nothing is guessed.
    """
    by_partition: dict[tuple[str, int], list[Unplaced]] = {}
    for u in unplaced:
        by_partition.setdefault((u.topic, u.partition), []).append(u)
    for (topic, partition), waiting in by_partition.items():
        try:
            records = list(log(topic, partition))
        except Exception as exc:  # noqa: BLE001 - any failure to read back leaves the outcome open
            for u in waiting:
                u.on_delivery(
                    Delivery(
                        "indeterminate",
                        error=f"Kafka acknowledged it without an offset and {topic}/{partition} could not be read back ({exc})",
                    )
                )
            continue
        taken = set(claimed.get((topic, partition), ()))
        candidates: dict[tuple[bytes | None, bytes | None], list[int]] = {}
        for offset, key, value in records:
            if offset not in taken:
                candidates.setdefault((key, value), []).append(offset)
        for u in waiting:
            found = candidates.get((u.key, u.value))
            if found:
                offset = found.pop(0)
                taken.add(offset)
                u.on_delivery(Delivery("ok", partition, offset))
            else:
                u.on_delivery(
                    Delivery(
                        "failed",
                        error=f"Kafka acknowledged it without an offset, but it is not in {topic}/{partition}: lost",
                    )
                )


class KafkaTransport:
    """An idempotent confluent-kafka producer behind the :class:`Transport` protocol.

    A full local queue never blocks silently: :meth:`send` serves delivery reports while it
    waits, counts the wait in ``queue_full_waits``, and raises
    :class:`~producers.errors.QueueFullError` after ``queue_full_timeout_s``. A fatal
    producer error (the idempotence guarantee is lost) raises
    :class:`~producers.errors.ProducerError` from the next send.
    """

    def __init__(
        self,
        bootstrap: str,
        *,
        partitions: int = 3,
        config: Mapping[str, Any] | None = None,
        queue_full_timeout_s: float = 30.0,
    ) -> None:
        self.bootstrap = bootstrap
        self.partitions = partitions
        self.queue_full_waits = 0
        self.errors = 0
        self.last_error: str | None = None
        self._fatal: KafkaError | None = None
        self._timeout = queue_full_timeout_s
        self._unplaced: list[Unplaced] = []
        self._claimed: dict[tuple[str, int], set[int]] = {}
        self._producer = Producer(producer_config(bootstrap, {"error_cb": self._on_error, **(config or {})}))

    def _on_error(self, err: KafkaError) -> None:
        self.errors += 1
        self.last_error = str(err)
        if err.fatal():
            self._fatal = err

    def ensure_topics(self, topics: Sequence[str]) -> list[str]:
        return ensure_topics(self.bootstrap, topics, partitions=self.partitions)

    def send(self, topic: str, key: bytes, value: bytes, on_delivery: Callable[[Delivery], None]) -> None:
        if self._fatal is not None:
            raise ProducerError(f"the Kafka producer for {self.bootstrap} hit a fatal error ({self._fatal}); restart the run")

        report = functools.partial(self._report, on_delivery)
        started = None
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=report)
                return
            except BufferError:
                now = time.monotonic()
                if started is None:
                    started = now
                    self.queue_full_waits += 1
                elif now - started > self._timeout:
                    raise QueueFullError(topic, now - started, self.bootstrap) from None
                self._producer.poll(0.05)
            except KafkaException as exc:
                # Refused before queueing (e.g. too large for the client): never sent.
                on_delivery(Delivery("failed", error=str(exc)))
                return

    def _report(self, on_delivery: Callable[[Delivery], None], err: KafkaError | None, msg: Any) -> None:
        if err is None:
            offset = msg.offset()
            if offset is None or offset < 0:
                # in the log, at an offset librdkafka does not know: found by flush()
                self._unplaced.append(Unplaced(msg.topic(), msg.partition(), msg.key(), msg.value(), on_delivery))
                return
            partition = msg.partition()
            key = (msg.topic(), partition)
            claimed = self._claimed.get(key)
            if claimed is None:
                claimed = self._claimed[key] = set()
            claimed.add(offset)
            on_delivery(Delivery("ok", partition, offset))
        elif err.code() in _MAYBE_WRITTEN:
            on_delivery(Delivery("indeterminate", error=str(err)))
        else:
            on_delivery(Delivery("failed", error=str(err)))

    def poll(self, timeout: float) -> None:
        self._producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        left = int(self._producer.flush(timeout))
        if self._unplaced:
            unplaced, self._unplaced = self._unplaced, []
            place(unplaced, lambda t, p: read_partition(self.bootstrap, t, p, timeout_s=timeout), self._claimed)
        return left

    def close(self) -> None:
        # Flushing is the caller's decision. Dropping the producer breaks the cycle through
        # error_cb, so librdkafka's threads stop now rather than at some later GC.
        self._producer = _Closed()  # type: ignore[assignment]


# What a broker answers about a partition it is still loading: a topic just created is in the
# metadata (with its leader) a moment before that leader serves offset requests for it, and a
# reader that asks in that moment gets one of these. They pass on their own; the deadline bounds them.
_NOT_READY = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_PARTITION,
    }
)


def partition_watermarks(
    bootstrap: str, select: Callable[[str], bool], *, timeout_s: float = 10.0
) -> dict[tuple[str, int], tuple[int, int]]:
    """``(log start, end)`` of every partition of every topic ``select`` accepts, as Kafka
    reports them now: the one reader behind the end offsets (:func:`end_offsets`) and
    the data-loss checks. A partition still being loaded (a topic created a moment ago,
    :data:`_NOT_READY`) is asked again until ``timeout_s``. Raises
    ``confluent_kafka.KafkaException`` when Kafka does not answer, or names such a partition
    past the deadline; callers turn it into their own error that names the fix."""
    import uuid

    from confluent_kafka import Consumer

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"osl-watermarks-{uuid.uuid4().hex[:8]}", "log_level": 2})
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                return _read_watermarks(consumer, select, max(0.5, deadline - time.monotonic()))
            except KafkaException as exc:
                err = exc.args[0] if exc.args else None
                if not isinstance(err, KafkaError) or err.code() not in _NOT_READY or time.monotonic() >= deadline:
                    raise
            time.sleep(0.1)
    finally:
        consumer.close()


def _read_watermarks(consumer: Any, select: Callable[[str], bool], timeout_s: float) -> dict[tuple[str, int], tuple[int, int]]:
    from confluent_kafka import TopicPartition

    meta = consumer.list_topics(timeout=timeout_s)
    out: dict[tuple[str, int], tuple[int, int]] = {}
    for topic in sorted(meta.topics):
        tm = meta.topics[topic]
        if not select(topic):
            continue
        if tm.error is not None:
            if tm.error.code() in _NOT_READY:
                raise KafkaException(tm.error)  # being created: ask again rather than leave it out
            continue
        for p in sorted(tm.partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout_s, cached=False)
            out[(topic, p)] = (int(low), int(high))
    return out


def end_offsets(bootstrap: str, topic_prefix: str, *, timeout_s: float = 10.0) -> dict[tuple[str, int], int]:
    """The current end (high watermark) of every partition of every topic named
    ``topic_prefix*``: what the job drains to and the baseline reads up to. Raises
    ``confluent_kafka.KafkaException`` when Kafka does not answer, as
    :func:`partition_watermarks` does."""
    marks = partition_watermarks(bootstrap, lambda topic: topic.startswith(topic_prefix), timeout_s=timeout_s)
    return {key: high for key, (_, high) in marks.items()}


def read_partition(bootstrap: str, topic: str, partition: int, *, timeout_s: float = 30.0):
    """Yield (offset, key, value) of every record now in one partition; raise TimeoutError
    when the partition cannot be read to its end within ``timeout_s`` (naming the last
    retriable consumer error), and ProducerError on any other consumer error."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "osl-producers-place",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "log_level": 2,
        }
    )
    try:
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=timeout_s)
        if high <= low:
            return
        consumer.assign([TopicPartition(topic, partition, low)])
        deadline = time.monotonic() + timeout_s
        last_error = None
        while time.monotonic() < deadline:
            for msg in consumer.consume(500, timeout=1.0):
                if msg.error() is not None:
                    err = msg.error()
                    if err.code() == KafkaError._PARTITION_EOF:
                        return
                    if err.retriable() and not err.fatal():
                        last_error = err.str()  # librdkafka retries it; the deadline bounds the wait
                        continue
                    raise ProducerError(
                        f"reading {topic}[{partition}] back from {bootstrap} (to place records whose delivery "
                        f"report had no offset) failed: {err.str()}; check the broker with `python -m sandbox status` "
                        f"and run again"
                    )
                yield msg.offset(), msg.key(), msg.value()
                if msg.offset() >= high - 1:
                    return
        also = f" (last consumer error: {last_error})" if last_error else ""
        raise TimeoutError(f"{topic}/{partition} not read to offset {high} within {timeout_s:g}s{also}")
    finally:
        consumer.close()


class _Closed:
    def __getattr__(self, name: str) -> Any:
        raise ProducerError("this Kafka transport is closed; build a new one for a new run")
