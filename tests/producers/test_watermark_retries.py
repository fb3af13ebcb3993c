"""partition_watermarks asks again while a partition is still being loaded, and only then
(pure unit: a stand-in consumer; the real broker's race is in
test_producers_kafka_integration.py)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException

from producers import kafka


class _Consumer:
    """Answers each watermark request with the next of ``answers`` (an error code or offsets)."""

    def __init__(self, answers, topic_error=None) -> None:
        self.answers, self.topic_error, self.calls = list(answers), topic_error, 0

    def list_topics(self, timeout):
        errors = list(self.topic_error or [])
        error = KafkaError(errors.pop(0)) if errors else None
        self.topic_error = errors
        return SimpleNamespace(
            topics={
                "fleet-a": SimpleNamespace(error=error, partitions={0: None}),
                "other": SimpleNamespace(error=None, partitions={0: None}),
            }
        )

    def get_watermark_offsets(self, tp, timeout, cached):
        assert tp.topic == "fleet-a"
        answer = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        if isinstance(answer, int):
            raise KafkaException(KafkaError(answer))
        return answer

    def close(self) -> None:
        pass


def _marks(monkeypatch, consumer, timeout_s=5.0):
    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Consumer", lambda _conf: consumer)
    return kafka.partition_watermarks("k:9092", lambda t: t.startswith("fleet-"), timeout_s=timeout_s)


def test_a_partition_not_led_yet_is_asked_again_until_it_answers(monkeypatch):
    consumer = _Consumer([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.NOT_LEADER_FOR_PARTITION, (0, 42)])
    assert _marks(monkeypatch, consumer) == {("fleet-a", 0): (0, 42)}
    assert consumer.calls == 3


def test_a_topic_whose_leader_is_not_elected_yet_is_not_left_out(monkeypatch):
    consumer = _Consumer([(3, 7)], topic_error=[KafkaError.LEADER_NOT_AVAILABLE])
    assert _marks(monkeypatch, consumer) == {("fleet-a", 0): (3, 7)}


def test_a_partition_still_not_led_at_the_deadline_is_raised(monkeypatch):
    consumer = _Consumer([KafkaError.NOT_LEADER_FOR_PARTITION])
    with pytest.raises(KafkaException, match="NOT_LEADER_FOR_PARTITION"):
        _marks(monkeypatch, consumer, timeout_s=0.3)
    assert consumer.calls >= 2


def test_any_other_error_is_raised_at_once(monkeypatch):
    consumer = _Consumer([KafkaError.TOPIC_AUTHORIZATION_FAILED, (0, 1)])
    with pytest.raises(KafkaException, match="TOPIC_AUTHORIZATION_FAILED"):
        _marks(monkeypatch, consumer)
    assert consumer.calls == 1
