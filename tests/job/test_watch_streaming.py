"""The watchdog against real queries on the sandbox: one test per trigger (error, stall, lag)
and one for `python -m job watch` following a job in another process whose driver is killed.
Alerts go to a real HTTP endpoint on 127.0.0.1 and a JSON-lines file."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import uuid

import pytest

from job.ops.watch import JsonLinesChannel, Thresholds, WebhookChannel, kafka_high_watermarks, watch_spark
from job.spark import pipeline
from job.spark.config import job_config
from producers.runner import Runner, new_run_id
from sandbox import paused
from sandbox.checks.health import wait_for
from tests import kafka_runs
from tests.job.test_watch_channels import http_endpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _produce(settings, tmp_path, *, faults=(), duration=3.0, rate=300.0, sessions=2, prefix=None, seed=5):
    cfg = kafka_runs.run_config(
        settings.endpoints().kafka_bootstrap,
        tmp_path / f"ledger-{uuid.uuid4().hex[:6]}",
        faults=faults,
        sites=1,
        sessions=sessions,
        rate=rate,
        duration=duration,
        snapshot_every=25,
        seed=seed,
        run_id=new_run_id(),
        **({"topic_prefix": prefix} if prefix else {}),
    )
    return cfg, Runner(cfg)


def _job(settings, tmp_path, prefix, **kw):
    kw.setdefault("raw_archive", False)
    return job_config(
        settings,
        output=f"s3a://{settings.bucket}/itest/watch-{uuid.uuid4().hex[:8]}",
        checkpoint=tmp_path / f"ckpt-{uuid.uuid4().hex[:6]}",
        topic_prefix=prefix,
        **kw,
    )


def _dog(settings, prefix, tmp_path, url, **thresholds):
    return {
        "channels": [WebhookChannel(url, timeout_s=5), JsonLinesChannel(tmp_path / "alerts.jsonl")],
        "thresholds": Thresholds(**thresholds),
        "high_watermarks": kafka_high_watermarks(settings.endpoints().kafka_bootstrap, prefix),
        "lag_every_s": 1.0,
        "tick_s": 0.5,
    }


def test_strict_policy_fault_raises_an_error_alert_at_the_webhook(sandbox, spark, tmp_path):
    settings = sandbox.settings
    producer, runner = _produce(settings, tmp_path, faults=("drop:sessions=0:at=30",), sessions=1)
    assert runner.run().faults.get("drop") == 1
    cfg = _job(settings, tmp_path, producer.topic_prefix, policy="strict", trigger="1 second")
    with http_endpoint() as (url, received):
        with watch_spark(spark, **_dog(settings, producer.topic_prefix, tmp_path, url, stall_after_s=600)) as dog:
            query = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)[0]
            alert = dog.wait_for("error", query=query.name, timeout_s=240)
            assert query.exception() is not None
    assert "gap" in alert.figures["error"] and producer.topic_prefix in alert.figures["error"], alert.figures["error"][:2000]
    assert [r["kind"] for r in received] == ["error"] and received[0]["query"] == query.name
    assert json.loads((tmp_path / "alerts.jsonl").read_text().splitlines()[0])["kind"] == "error"
    assert dog.failures == []


def test_paused_object_store_raises_a_stall_then_recovered(sandbox, spark, tmp_path):
    settings = sandbox.settings
    producer, runner = _produce(settings, tmp_path, duration=90.0, rate=50.0)
    feeding = threading.Thread(target=runner.run, daemon=True)
    feeding.start()
    cfg = _job(settings, tmp_path, producer.topic_prefix, trigger="1 second")
    with http_endpoint() as (url, received):
        with watch_spark(
            spark, **_dog(settings, producer.topic_prefix, tmp_path, url, stall_after_s=10, lag_records=10**9)
        ) as dog:
            query = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)[0]
            try:
                wait_for(lambda: pipeline.rows_read(query) > 0, timeout_s=180, what="a first batch with input")
                with paused(sandbox, "minio"):  # the sink's object store freezes: writes hang, nothing commits
                    stall = dog.wait_for("stall", query=query.name, timeout_s=60)
                recovered = dog.wait_for("recovered", query=query.name, timeout_s=120)
                assert query.exception() is None
            finally:
                query.stop()
                runner.stop()
    assert stall.figures["no_progress_s"] >= 10 and stall.figures["lag_records"] > 0
    assert recovered.figures["cleared"] == "stall" and recovered.figures["stalled_s"] >= 10
    assert [r["kind"] for r in received][:2] == ["stall", "recovered"]


def test_producers_faster_than_a_throttled_query_raise_a_lag_alert(sandbox, spark, tmp_path):
    settings = sandbox.settings
    producer, runner = _produce(settings, tmp_path, duration=40.0, rate=400.0)
    feeding = threading.Thread(target=runner.run, daemon=True)
    feeding.start()
    # 40 records a second at most: the producers send ten times that
    cfg = _job(settings, tmp_path, producer.topic_prefix, trigger="1 second", max_offsets_per_trigger=40)
    with http_endpoint() as (url, received):
        with watch_spark(
            spark, **_dog(settings, producer.topic_prefix, tmp_path, url, stall_after_s=600, lag_records=1000)
        ) as dog:
            query = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)[0]
            try:
                alert = dog.wait_for("lag", query=query.name, timeout_s=240)
            finally:
                query.stop()
                runner.stop()
    assert alert.figures["lag_records"] > 1000 and alert.figures["threshold"] == 1000
    assert alert.figures["worst_partition"].startswith(producer.topic_prefix)
    assert "lag" in [r["kind"] for r in received]


def test_job_watch_cli_reports_a_killed_driver(sandbox, tmp_path):
    settings = sandbox.settings
    producer, runner = _produce(settings, tmp_path, duration=3.0)
    runner.run()
    checkpoint = tmp_path / "ckpt-cli"
    events = checkpoint / "events.jsonl"
    env = dict(os.environ)
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "job",
            "run",
            "--topic-prefix",
            producer.topic_prefix,
            "--checkpoint",
            str(checkpoint),
            "--output",
            f"s3a://{settings.bucket}/itest/watch-cli-{uuid.uuid4().hex[:8]}",
            "--trigger",
            "1 second",
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    alerts = tmp_path / "cli-alerts.jsonl"
    with http_endpoint() as (url, received):
        watcher = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "job",
                "watch",
                "--events",
                str(events),
                "--topic-prefix",
                producer.topic_prefix,
                "--notify",
                f"jsonl:{alerts}",
                "--notify",
                f"webhook:{url}",
                "--notify",
                "stderr",
                "--stall-after",
                "600",
            ],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            wait_for(
                lambda: events.exists() and '"BatchCompleted"' in events.read_text(),
                timeout_s=240,
                what="the job's first batch in its event log",
                abort=lambda: job.poll() is not None and "the job exited",
            )
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
            wait_for(lambda: alerts.exists() and alerts.read_text().strip(), timeout_s=60, what="an alert from job watch")
        finally:
            if job.poll() is None:
                os.killpg(job.pid, signal.SIGKILL)
            watcher.send_signal(signal.SIGINT)
            _, stderr = watcher.communicate(timeout=30)
    first = json.loads(alerts.read_text().splitlines()[0])
    assert first["kind"] == "error" and f"driver process {job.pid} is gone" in first["message"], first
    assert [r["kind"] for r in received][:1] == ["error"]
    assert "ALERT error" in stderr and watcher.returncode == 0
