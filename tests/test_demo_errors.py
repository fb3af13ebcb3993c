"""demo.py turns client errors into one paragraph and an exit status, and never leaves Spark
or the producers running when a step fails (pure units: stand-ins for Spark and the run)."""

from __future__ import annotations

import argparse
import sys
import threading
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import demo  # noqa: E402
from job.engine.errors import IntegrityError  # noqa: E402
from producers.errors import ProducerError  # noqa: E402
from sandbox.settings import Ports, Settings  # noqa: E402
from tests.ports import free_port_offset  # noqa: E402


@pytest.fixture
def settings(tmp_path) -> Settings:
    return Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", ports=Ports().shifted(free_port_offset()))


def test_kafka_error_names_the_broker_and_how_to_check_it(settings):
    message, status = demo.explain(KafkaException(KafkaError(KafkaError._TRANSPORT, "broker down")), settings)
    assert status == 2
    assert f"Kafka at {settings.endpoints().kafka_bootstrap}: broker down" in message
    assert "python -m sandbox status" in message and str(settings.state_dir / "logs") in message


def test_s3_error_names_minio_and_exits_2(settings):
    from botocore.exceptions import EndpointConnectionError

    message, status = demo.explain(EndpointConnectionError(endpoint_url="http://127.0.0.1:55700/lake"), settings)
    assert status == 2 and f"MinIO at {settings.endpoints().s3_endpoint}" in message


def test_a_timeout_is_a_failed_step_with_where_to_look(settings):
    message, status = demo.explain(TimeoutError("minio not ready after 120s"), settings)
    assert status == 1 and message.startswith("minio not ready after 120s;") and "logs" in message


def test_a_bug_is_not_explained_away(settings):
    assert demo.explain(KeyError("x"), settings) is None


class _Spark:
    stopped = False

    def stop(self) -> None:
        self.stopped = True


class _Runner:
    """Sends nothing; runs until stopped, or returns ``summary`` at once."""

    def __init__(self, summary=None) -> None:
        self.summary, self.stopped = summary, threading.Event()

    def run(self):
        if self.summary is None:
            self.stopped.wait(30)
        return self.summary

    def stop(self) -> None:
        self.stopped.set()


def _run_pipeline(monkeypatch, settings, runner, start):
    import job.spark.pipeline
    import producers.runner
    import sandbox.jvm.spark_session

    spark = _Spark()
    monkeypatch.setattr(sandbox.jvm.spark_session, "spark_session", lambda *_a, **_k: spark)
    monkeypatch.setattr(producers.runner, "Runner", lambda _cfg: runner)
    monkeypatch.setattr(job.spark.pipeline, "start", start)
    args = argparse.Namespace(policy="resync", duration=1.0, rate=10.0, seed=1)
    return spark, lambda: demo._pipeline(settings, args)


def test_a_failing_job_stops_spark_and_the_producers(monkeypatch, settings):
    def start(*_a, **_k):
        raise IntegrityError(session="s", topic="t", partition=0, offset=1, problem="gap", detail="seq 3 after 1")

    runner = _Runner()
    spark, pipeline = _run_pipeline(monkeypatch, settings, runner, start)
    with pytest.raises(IntegrityError):
        pipeline()
    assert spark.stopped and runner.stopped.is_set()


def test_an_error_the_producers_stored_in_their_summary_fails_the_demo(monkeypatch, settings):
    class Summary:
        stopped, error = "error", "the Kafka producer for 127.0.0.1:9 hit a fatal error (boom); restart the run"

    class Query:
        name, lastProgress, isActive = "q", None, True

        def exception(self):
            return None

    spark, pipeline = _run_pipeline(monkeypatch, settings, _Runner(Summary()), lambda *_a, **_k: [Query()])
    with pytest.raises(ProducerError, match=r"stopped early \(error\): the Kafka producer .* hit a fatal error"):
        pipeline()
    assert spark.stopped


def test_a_spark_start_that_fails_stops_the_producers_already_sending(monkeypatch, settings):
    """The producers start before the Spark application (the job reads their backlog), so a
    Spark session that cannot start must stop them, not leave them sending."""
    import sandbox.jvm.spark_session

    runner = _Runner()
    _spark, pipeline = _run_pipeline(monkeypatch, settings, runner, lambda *_a, **_k: [])

    def no_session(*_a, **_k):
        assert not runner.stopped.is_set(), "the producers should be running while Spark starts"
        raise TimeoutError("spark master not ready after 120s")

    monkeypatch.setattr(sandbox.jvm.spark_session, "spark_session", no_session)
    with pytest.raises(TimeoutError, match="spark master not ready"):
        pipeline()
    assert runner.stopped.is_set()
