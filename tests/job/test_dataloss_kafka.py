"""Kafka data loss on the real sandbox: retention deletes records a stopped job has not read,
the job refuses to go on by default and names the loss, skips it when told, and the verifier
accepts exactly the deleted records as lost."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from job.ops import dataloss
from job.verify.lake_check import verify_lake
from producers.sites import site_name, topic_for
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SITES, SNAPSHOT_EVERY = 2, 20


def _producers(bootstrap, ledger):
    cfg = kafka_runs.run_config(bootstrap, ledger, sites=SITES, sessions=1, rate=120.0, duration=600.0,
                                snapshot_every=SNAPSHOT_EVERY, seed=11)  # fmt: skip
    return cfg, dataloss.BackgroundRun(cfg), [topic_for(site_name(i), cfg.topic_prefix) for i in range(SITES)]


def test_retention_deletes_past_a_checkpoint_and_the_overrides_go_away(bootstrap, tmp_path):
    cfg, run, topics = _producers(bootstrap, tmp_path / "ledger")
    try:
        run.wait_acked(200)
        default = dataloss.topic_configs(bootstrap, topics)
        marks = dataloss.watermarks(bootstrap, topics)
        read = {k: high for k, (_, high) in marks.items()}  # as if a job had read everything so far
        outage = dataloss.retention_outage(bootstrap, topics, read, timeout_s=90)
        busy = {k for k, o in read.items() if o > 0}
        assert busy and {(d.topic, d.partition) for d in outage.deleted} == busy
        later = dataloss.watermarks(bootstrap, topics)
        for d in outage.deleted:
            assert d.start == read[(d.topic, d.partition)] and d.end > d.start
            assert later[(d.topic, d.partition)][0] >= d.end  # gone for good
        assert dataloss.topic_configs(bootstrap, topics) == default  # the broker's defaults again
    finally:
        run.finish()


def test_delete_records_moves_the_log_start_exactly_and_unread_deleted_sees_it(bootstrap, tmp_path):
    cfg, run, topics = _producers(bootstrap, tmp_path / "ledger")
    try:
        run.wait_acked(200)
    finally:
        run.finish()
    marks = dataloss.watermarks(bootstrap, topics)
    key, (low, high) = next((k, m) for k, m in sorted(marks.items()) if m[1] > 20)
    dataloss.delete_unread(bootstrap, {key: high - 10})
    after = dataloss.watermarks(bootstrap, topics)
    assert after[key] == (high - 10, high)
    assert dataloss.unread_deleted({key: 5}, {key: after[key][0]}) == [
        dataloss.DeletedRange(topic=key[0], partition=key[1], start=5, end=high - 10)
    ]
    assert dataloss.rewound_partitions({key: high}, {key: after[key][1]}) == []


def test_a_job_stopped_past_retention_fails_by_default_then_skips_and_verifies_with_the_deleted_ranges(sandbox, spark, tmp_path):
    settings = sandbox.settings
    bootstrap = settings.endpoints().kafka_bootstrap
    cfg, run, topics = _producers(bootstrap, tmp_path / "ledger")
    output = f"s3a://{settings.bucket}/itest/dataloss-{uuid.uuid4().hex[:8]}"
    ckpt = tmp_path / "ckpt"
    argv = [sys.executable, "-m", "job", "run", "--topic-prefix", cfg.topic_prefix, "--output", output,
            "--checkpoint", str(ckpt), "--trigger", "2 seconds", "--until-drained"]  # fmt: skip
    try:
        run.wait_acked(200)
        first = subprocess.run(argv, env=dict(os.environ), capture_output=True, text=True, timeout=900)
        assert first.returncode == 0, first.stderr[-3000:]
        read = dataloss.committed_offsets(ckpt / "sessions", ckpt / "raw")
        outage = dataloss.retention_outage(bootstrap, topics, read, timeout_s=90)
        assert outage.records > 0
        dataloss.wait_for_growth(bootstrap, {(d.topic, d.partition): d.end for d in outage.deleted}, 3 * SNAPSHOT_EVERY)
    finally:
        summary = run.finish()
    assert summary.error is None, summary.error

    failed = subprocess.run(argv, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert "Traceback" not in failed.stderr
    error = next(line for line in failed.stderr.splitlines() if line.startswith("error: "))
    assert "KAFKA_DATA_LOSS" in error and "--no-fail-on-data-loss" in error
    assert any(f"{d.topic}[{d.partition}]" in error for d in outage.deleted) or "PARTITIONS" in error, error

    # what the sessions query will miss, from its checkpoint *before* the skipping run moves
    # it past the deletion (afterwards every committed offset is above the log start)
    lows = {k: low for k, (low, _) in dataloss.watermarks(bootstrap, topics).items()}
    deleted = dataloss.unread_deleted(dataloss.committed_offsets(ckpt / "sessions"), lows)
    assert {(d.topic, d.partition) for d in deleted} == {(d.topic, d.partition) for d in outage.deleted}
    skipped = subprocess.run([*argv, "--no-fail-on-data-loss"], env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert skipped.returncode == 0, skipped.stderr[-3000:]
    report = verify_lake(settings, ledger=cfg.ledger, lake=output, policy="resync", spark=spark, deleted=deleted)
    assert report.ok, report.summary()
    assert report.lost == sum(d.count for d in deleted) > 0
    assert not verify_lake(settings, ledger=cfg.ledger, lake=output, policy="resync", spark=spark).ok
