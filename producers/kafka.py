"""The Kafka side of the producers: topic creation and an idempotent, never-silently-blocking sender.

:class:`Transport` is what the run loop needs from a broker; :class:`KafkaTransport`
implements it with confluent-kafka (librdkafka). Every send ends in exactly one
:class:`Delivery` passed to its callback, during :meth:`Transport.poll` or
:meth:`Transport.flush`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

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
    "ensure_topics",
    "producer_config",
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


@dataclass(frozen=True, slots=True)
class Delivery:
    """The outcome of one send, as the ledger records it."""

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
    return created


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
            raise ProducerError(
                f"the Kafka producer for {self.bootstrap} hit a fatal error ({self._fatal}); restart the run"
            )

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                on_delivery(Delivery("ok", msg.partition(), msg.offset()))
            elif err.code() in _MAYBE_WRITTEN:
                on_delivery(Delivery("indeterminate", error=str(err)))
            else:
                on_delivery(Delivery("failed", error=str(err)))

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

    def poll(self, timeout: float) -> None:
        self._producer.poll(timeout)

    def flush(self, timeout: float) -> int:
        return int(self._producer.flush(timeout))

    def close(self) -> None:
        # Flushing is the caller's decision. Dropping the producer breaks the cycle through
        # error_cb, so librdkafka's threads stop now rather than at some later GC.
        self._producer = _Closed()  # type: ignore[assignment]


class _Closed:
    def __getattr__(self, name: str) -> Any:
        raise ProducerError("this Kafka transport is closed; build a new one for a new run")
