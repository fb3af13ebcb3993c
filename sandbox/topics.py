"""The broker's topics: list them, delete them and wait until the controller has.

Every producer run writes into fresh topics, and nothing deletes them when the run is over; a
sandbox whose chapters and tests were rerun for a while holds thousands of partitions, and a
broker restart (chapter 04's fault) reloads every one of them. ``python -m sandbox prune``
deletes them; ``job backfill`` deletes one run's topics to show the archive is the only copy.
"""

from __future__ import annotations

from dataclasses import dataclass

from sandbox.checks.health import HEALTH_TOPIC, librdkafka_logger, wait_for


class TopicError(RuntimeError):
    """A topic could not be listed or deleted: names the topics, the broker and the fix."""


@dataclass(frozen=True)
class Topics:
    """The broker's topics of past runs (internal ones, ``__*`` and the health probe's, left out)."""

    names: tuple[str, ...]
    partitions: int


def run_topics(bootstrap: str, prefix: str = "", *, timeout_s: float = 10.0) -> Topics:
    """The topics whose name starts with ``prefix`` that a run wrote, and their partition count."""
    admin = _admin(bootstrap)
    try:
        meta = admin.list_topics(timeout=timeout_s)
    except Exception as exc:  # the admin API's KafkaException or a timeout
        raise TopicError(
            f"the topics at {bootstrap} could not be listed ({exc}); is the broker up? (python -m sandbox status)"
        ) from None
    names = tuple(sorted(t for t in meta.topics if t.startswith(prefix) and not t.startswith("__") and t != HEALTH_TOPIC))
    return Topics(names, sum(len(meta.topics[t].partitions) for t in names))


def delete_topics(bootstrap: str, topics: tuple[str, ...] | list[str], *, timeout_s: float = 30.0) -> list[str]:
    """Delete ``topics`` and wait until the broker's metadata no longer lists any of them (the
    controller removes them asynchronously); returns their names."""
    if not topics:
        return []
    admin = _admin(bootstrap)
    for topic, future in admin.delete_topics(list(topics), operation_timeout=timeout_s).items():
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:  # the admin API's KafkaException or a timeout
            raise TopicError(f"topic {topic} at {bootstrap} could not be deleted ({exc}); is the broker up?") from None
    gone = lambda: not any(t in admin.list_topics(timeout=timeout_s).topics for t in topics)  # noqa: E731
    try:
        wait_for(gone, timeout_s=timeout_s, what=f"deletion of {len(topics)} topic(s) at {bootstrap}")
    except TimeoutError as exc:
        raise TopicError(f"{exc}; check the broker's log (python -m sandbox logs kafka)") from None
    return sorted(topics)


def _admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    # librdkafka's own retry lines stay out of the terminal: a failure is named in TopicError
    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 0, "logger": librdkafka_logger("sandbox.topics")})
