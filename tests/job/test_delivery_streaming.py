"""Delivery semantics on the sandbox: the driver killed between the offsets and commit logs.

The foreachBatch replay (a crash before the commit, then the append sink's duplicates and
the idempotent sink's none) is checked by chapter 03 under nbval, with the same command
(`python -m job.drills.delivery --die-after-batch 1`, then the re-run) and the same assertions;
a second copy here cost two job runs of CI time for nothing new."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from job.drills.delivery import kill_between_logs
from job.spark import checkpoints, lake
from job.verify.lake_check import verify_lake
from producers.ledger import S3Target
from producers.run import Runner, new_run_id
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def backlog(sandbox, tmp_path):
    """A clean run of about 800 records in fresh topics; returns (prefix, ledger)."""
    cfg = kafka_runs.run_config(sandbox.settings.endpoints().kafka_bootstrap, tmp_path / "ledger", sites=2, sessions=1,
                                session_length=400, rate=3000, duration=60, snapshot_every=40, seed=4, run_id=new_run_id())  # fmt: skip
    assert Runner(cfg).run().error is None
    return cfg.topic_prefix, cfg.ledger


def _fs(settings):
    return S3Target(endpoint=settings.endpoints().s3_endpoint, access_key=settings.s3_access_key,
                    secret_key=settings.s3_secret_key).filesystem()  # fmt: skip


def test_driver_killed_between_offsets_and_commit_reruns_the_batch_exactly_once(sandbox, spark, backlog, tmp_path):
    prefix, ledger = backlog
    settings = sandbox.settings
    output = f"s3a://{settings.bucket}/itest/kill-{uuid.uuid4().hex[:8]}"
    checkpoint = tmp_path / "ckpt"
    argv = [sys.executable, "-m", "job", "run", "--prefix", prefix, "--output", output, "--checkpoint", str(checkpoint),
            "--trigger", "1 second", "--max-offsets-per-trigger", "150", "--state-partitions", "6"]  # fmt: skip
    fs, sink = _fs(settings), lake.sink_path(output)
    kill = kill_between_logs(argv, query_checkpoint=checkpoint / "sessions", fs=fs, sink_path=sink, min_batch=1,
                             env=dict(os.environ), log=tmp_path / "first.log")  # fmt: skip
    n = kill.batch
    assert kill.offsets[-1] == n and n not in kill.commits and n not in kill.sink_log_batches and kill.uncommitted_files
    planned = (checkpoint / "sessions" / "offsets" / str(n)).read_text()

    done = subprocess.run([*argv, "--until-drained"], env=dict(os.environ), capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (checkpoint / "sessions" / "offsets" / str(n)).read_text() == planned  # re-run with the same offsets
    assert n in checkpoints.log_state(checkpoint / "sessions").commits
    rows = lake.read_output(spark, sink, "rows").toPandas()
    assert not rows.duplicated(["session", "topic", "partition", "offset", "row_id"]).any()
    assert set(kill.uncommitted_files) <= set(checkpoints.uncommitted_files(fs, sink))  # still in the bucket, unread
    report = verify_lake(settings, ledger=ledger, lake=output, policy="resync", spark=spark)
    assert report.ok, report.summary()
