"""One configuration, kept with the run (job/spark/saved.py), on the sandbox's cluster: a restart on
an output whose sink log is ahead of its checkpoint is refused with the repair named, and the
repair, given only the checkpoint, the topics and the output, restarts the job the user ran."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid

import pytest

from job.spark import pipeline, saved
from job.spark.checkpoints import kept_state_partitions, log_state, read_offsets
from job.spark.config import JobConfig
from job.spark.lake import sink_log_batches
from job.verify.lake_check import verify_lake
from producers.runner import RunConfig, Runner, new_run_id
from sandbox.checks.health import wait_for
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _job(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "job", *args], env=dict(os.environ), capture_output=True, text=True, timeout=600)


def _batch_sizes(query_checkpoint) -> list[int]:
    """Records each batch of a checkpoint's offsets log planned, from consecutive offset entries."""
    ends = []
    for batch in log_state(query_checkpoint).offsets:
        source = read_offsets(query_checkpoint, batch)["sources"][0] or {}
        ends.append(sum(int(o) for parts in source.values() for o in parts.values()))
    return [b - a for a, b in zip(ends, ends[1:])]


def test_the_trap_is_refused_and_the_repair_restarts_the_job_the_user_ran(sandbox, spark, tmp_path):
    settings = sandbox.settings
    bootstrap = settings.endpoints().kafka_bootstrap
    prefix, run_id = kafka_runs.fresh_prefix(), new_run_id()
    ledger = str(tmp_path / f"ledger-{run_id}")
    summary = Runner(
        RunConfig(
            ledger=ledger,
            bootstrap=bootstrap,
            sites=2,
            sessions=2,
            rate=400.0,
            duration=5.0,
            snapshot_every=25,
            rows=8,
            seed=44,
            run_id=run_id,
            topic_prefix=prefix,
        )
    ).run()
    assert summary.error is None and summary.outcomes.get("ok", 0) >= 1_500, summary
    ckpt = tmp_path / "ckpt"
    output = f"s3a://{settings.bucket}/itest/kept-{uuid.uuid4().hex[:8]}"
    # the user's run: not the defaults (2 partitions, 100,000 a batch, 5 s)
    cfg = JobConfig(
        output=output, checkpoint=ckpt, topic_prefix=prefix, state_partitions=4, max_offsets_per_trigger=200, trigger="3 seconds"
    )
    queries = pipeline.start(spark, cfg, bootstrap=bootstrap)
    try:
        wait_for(
            lambda: len(log_state(ckpt / "sessions").commits) >= 2,
            timeout_s=180,
            what="two committed batches",
            abort=lambda: None if queries[0].isActive else f"the query stopped: {queries[0].exception()}",
        )
    finally:
        for q in queries:
            q.stop()
    assert saved.load(ckpt) == cfg  # written beside the checkpoint before the first batch
    assert sink_log_batches(spark, cfg.sink_path)

    # the checkpoint is lost, the lake keeps its sink log: a restart is refused, naming the trap and the repair
    shutil.rmtree(ckpt)
    common = ("--checkpoint", str(ckpt), "--topic-prefix", prefix, "--output", output)
    refused = _job(
        "run", *common, "--state-partitions", "4", "--max-offsets-per-trigger", "200", "--trigger", "3 seconds", "--until-drained"
    )
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr and "error: the metadata trap" in refused.stderr, refused.stderr[-3000:]
    assert f"python -m job repair --checkpoint {ckpt} --output {output} --apply" in refused.stderr
    assert not (ckpt / "sessions").exists()  # refused before anything was written
    assert "[job] Spark UI" not in refused.stderr, "the refusal should come before a Spark application starts"
    # the advice holds without a checkpoint: the repair plans from the lake
    planned = _job("repair", *common)
    assert planned.returncode == 0 and "no committed batch" in planned.stderr, planned.stderr[:4000]
    assert "dry run" in planned.stdout, planned.stdout

    # sprung on purpose (chapter 08), with a larger cap than the lost checkpoint's first batches had
    sprung = _job(
        "run",
        *common,
        "--allow-sink-ahead",
        "--state-partitions",
        "4",
        "--max-offsets-per-trigger",
        "500",
        "--trigger",
        "3 seconds",
        "--until-drained",
    )
    assert "warning: --allow-sink-ahead" in sprung.stderr, sprung.stderr[-3000:]
    # its skipped batches wrote no state, so the first batch it runs cannot load any: said as such
    assert sprung.returncode == 1 and "Traceback" not in sprung.stderr, sprung.stderr[-3000:]
    assert "CANNOT_LOAD_STATE_STORE" in sprung.stderr and "python -m job repair" in sprung.stderr, sprung.stderr[-3000:]
    assert saved.load(ckpt).max_offsets_per_trigger == 500 and log_state(ckpt / "sessions").commits

    # the repair is given the checkpoint, the topics and the output, nothing else
    repaired = _job("repair", *common, "--apply")
    assert repaired.returncode == 0, repaired.stderr[-3000:]
    report = verify_lake(spark, ledger=ledger, lake=output, policy="resync")
    assert report.ok and report.lost == 0, report.summary()
    assert kept_state_partitions(ckpt / "sessions") == 4
    sizes = _batch_sizes(ckpt / "sessions")
    assert sizes and max(sizes) <= 500, sizes
    assert f"the run's settings from {ckpt / 'job.json'}" in repaired.stderr
    assert f"continue with: python -m job run --checkpoint {ckpt}" in repaired.stderr
    kept = saved.load(ckpt)
    assert (kept.state_partitions, kept.max_offsets_per_trigger, kept.trigger) == (4, 500, "3 seconds")
    assert json.loads(kept.starting_offsets)  # the repair's restart offsets, kept with the run


def test_a_run_asking_for_other_state_partitions_than_its_job_json_is_refused_before_spark(sandbox, tmp_path):
    ckpt = tmp_path / "ckpt"
    saved.save(JobConfig(output=f"s3a://{sandbox.settings.bucket}/itest/fixed", checkpoint=ckpt, state_partitions=4))
    done = _job("run", "--checkpoint", str(ckpt), "--state-partitions", "8")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert "state_partitions=4 and keeps it for good; this run asks for 8" in done.stderr
    assert "Drop --state-partitions" in done.stderr and f"--checkpoint {ckpt}-new" in done.stderr
