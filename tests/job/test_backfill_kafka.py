"""Backfill end to end: produce with a ledger, run the job with its archive, delete Kafka's
copy, rebuild from the archive, and verify against the ledger."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest

from job.ops import backfill as bf
from job.spark import lake, pipeline
from job.spark.config import job_config
from job.verify.lake_check import verify_archive, verify_lake
from producers.runner import new_run_id
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULTS = ("drop:0.02", "duplicate:0.02", "corrupt:0.01")


@pytest.fixture(scope="module")
def archived(sandbox, spark, tmp_path_factory):
    """A faulty run produced, processed by the job with its archive on, then its topics
    deleted: (job config, ledger path). Shared: each test backfills into its own versions."""
    tmp = tmp_path_factory.mktemp("backfill")
    settings = sandbox.settings
    bootstrap = settings.endpoints().kafka_bootstrap
    run_id = new_run_id()
    cfg_run, summary = kafka_runs.produce(
        bootstrap,
        tmp / f"ledger-{run_id}",
        faults=FAULTS,
        sites=2,
        sessions=2,
        rate=400.0,
        duration=4.0,
        snapshot_every=25,
        seed=5,
        run_id=run_id,
    )
    assert summary.error is None, summary.error
    assert sum(summary.faults.values()) > 0
    cfg = job_config(
        settings,
        output=f"s3a://{settings.bucket}/itest/backfill-{uuid.uuid4().hex[:8]}",
        checkpoint=tmp / "ckpt",
        topic_prefix=cfg_run.topic_prefix,
        policy="resync",
        trigger="available-now",
    )
    pipeline.await_all(pipeline.start(spark, cfg, bootstrap=bootstrap), timeout_s=300)
    deleted = bf.delete_topics(bootstrap, cfg.topic_prefix)
    assert sorted(deleted) == sorted(summary.topics)
    return cfg, cfg_run.ledger


def _row_keys(spark, root):
    rows = lake.read_output(spark, lake.sink_path(root), "rows")
    return rows.select("topic", "partition", "offset", "row_id")


def test_whole_archive_backfill_after_kafka_lost_its_copy_verifies_clean_and_switches_readers(sandbox, spark, archived):
    cfg, ledger = archived
    settings = sandbox.settings
    assert pipeline.source_end_offsets(settings.endpoints().kafka_bootstrap, cfg.topic_prefix) == {}, "Kafka's copy must be gone"
    assert verify_archive(spark, ledger=ledger, lake=cfg.output).ok
    argv = [
        sys.executable,
        "-m",
        "job",
        "backfill",
        "--lake",
        cfg.output,
        "--from",
        "earliest",
        "--to",
        "latest",
        "--version",
        "whole",
        "--ledger",
        ledger,
        "--switch",
    ]
    done = subprocess.run(argv, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "verify (policy resync): OK" in done.stdout and "archive check: OK" in done.stdout, done.stdout
    root = bf.version_root(cfg.output, "whole")
    assert bf.current_path(spark, cfg.output) == root
    rebuilt, live = _row_keys(spark, root), _row_keys(spark, cfg.output)
    assert rebuilt.count() == live.count() > 0
    assert rebuilt.subtract(live).count() == 0
    assert bf.read_current(spark, cfg.output, "rows").count() == live.count()
    again = subprocess.run(argv, env=dict(os.environ), capture_output=True, text=True, timeout=900)
    assert again.returncode == 2 and "already" in again.stderr and "--overwrite" in again.stderr, again.stderr[-2000:]


def test_overlapping_ranges_merge_without_duplicates_and_verify_clean(sandbox, spark, archived):
    cfg, ledger = archived
    lo, hi = bf.archive_bounds(spark, cfg.output)
    mid, overlap = (lo + hi) // 2, (hi - lo) // 10
    first = bf.backfill(spark, lake_root=cfg.output, start="earliest", end=mid + overlap, version="first-half")
    second = bf.backfill(spark, lake_root=cfg.output, start=mid - overlap, end="latest", version="second-half")
    print(first.summary(), second.summary(), sep="\n")
    assert second.warm_up > 0, "the second range must replay records before its start"
    roots = bf.backfills_by_start(spark, cfg.output, ["second-half", "first-half"])
    assert roots == [first.root, second.root]
    overlapping = _row_keys(spark, first.root).intersect(_row_keys(spark, second.root)).count()
    assert overlapping > 0, "the ranges must both write some records for this test to mean anything"
    merged = bf.merge(spark, lake_root=cfg.output, sources=roots, version="halves-merged")
    keys = _row_keys(spark, merged)
    assert keys.count() == keys.distinct().count()
    assert keys.count() == _row_keys(spark, cfg.output).count()
    report = verify_lake(spark, ledger=ledger, lake=merged, policy="resync")
    assert report.ok, report.summary()


def test_reprocessing_after_a_buggy_release_switches_readers_only_once_verified(sandbox, spark, archived):
    cfg, ledger = archived
    settings = sandbox.settings
    buggy = bf.backfill(
        spark, lake_root=cfg.output, start="earliest", end="latest", version="release-v0", job_version="v0-skips-deletes"
    )
    bf.switch(spark, cfg.output, buggy.root, reason="the buggy release went live")
    assert not verify_lake(spark, ledger=ledger, lake=bf.current_path(spark, cfg.output), policy="resync").ok
    refused = bf.reprocess(
        spark, settings, lake_root=cfg.output, ledger=ledger, version="still-buggy", job_version="v0-skips-deletes"
    )
    assert not refused.switched and refused.current == buggy.root
    fixed = bf.reprocess(spark, settings, lake_root=cfg.output, ledger=ledger, version="release-v1")
    assert fixed.switched and fixed.report.ok, fixed.report.summary()
    assert fixed.previous == buggy.root and fixed.current == fixed.backfill.root
    assert lake.read_output(spark, lake.sink_path(buggy.root), "rows").count() > 0, "the old output stays"


def test_backfill_refuses_a_missing_archive_and_an_empty_range(spark, archived):
    cfg, _ = archived
    with pytest.raises(bf.BackfillError, match="no lake and no raw archive there"):
        bf.backfill(spark, lake_root=cfg.output + "-nowhere", start="earliest", end="latest")
    _, hi = bf.archive_bounds(spark, cfg.output)
    with pytest.raises(bf.BackfillError, match="no archived record in it"):
        bf.backfill(spark, lake_root=cfg.output, start=hi + 60_000, end=hi + 120_000)
