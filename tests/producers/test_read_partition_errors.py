"""read_partition stops on a consumer error instead of skipping it (pure unit: a stand-in consumer)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError

from producers import kafka
from producers.errors import ProducerError


class _Message:
    def __init__(self, error: KafkaError) -> None:
        self._error = error

    def error(self) -> KafkaError:
        return self._error


class _Consumer:
    def __init__(self, error: KafkaError) -> None:
        self._error = error

    def get_watermark_offsets(self, _tp, timeout):
        return 0, 10

    def assign(self, _parts) -> None:
        pass

    def consume(self, _n, timeout):
        return [_Message(self._error)]

    def close(self) -> None:
        pass


def _read(monkeypatch, error: KafkaError, timeout_s: float = 30.0) -> list:
    import confluent_kafka

    monkeypatch.setattr(confluent_kafka, "Consumer", lambda _conf: _Consumer(error))
    return list(kafka.read_partition("127.0.0.1:9", "collection-fleet-2", 1, timeout_s=timeout_s))


def test_a_consumer_error_other_than_the_partition_end_stops_the_read_naming_topic_and_broker(monkeypatch):
    with pytest.raises(ProducerError) as info:
        _read(monkeypatch, KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    message = str(info.value)
    assert "collection-fleet-2[1]" in message and "127.0.0.1:9" in message and "sandbox status" in message


def test_a_retriable_error_is_named_when_the_read_times_out(monkeypatch):
    error = KafkaError(KafkaError.REQUEST_TIMED_OUT, "request timed out", retriable=True)
    with pytest.raises(TimeoutError, match=r"not read to offset 10 within 1s \(last consumer error: request timed out\)"):
        _read(monkeypatch, error, timeout_s=1.0)
