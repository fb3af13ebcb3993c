"""The job's errors on the real sandbox: a failed strict run, Ctrl-C, a drain that cannot
finish, a lake that is not there. Each ends in one paragraph and a documented exit status."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from job.cli import INTERRUPTED
from job.engine.errors import DrainTimeoutError, QueryFailedError
from job.spark import pipeline
from job.spark.config import job_config
from producers.runner import new_run_id
from sandbox.checks.health import wait_for
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def produced(sandbox, tmp_path):
    """Factory: producers into fresh topics; returns (prefix, ledger)."""

    def run(*, faults=(), sites=1, sessions=1, duration=3.0, rate=300.0):
        run_id = new_run_id()
        cfg, summary = kafka_runs.produce(
            sandbox.settings.endpoints().kafka_bootstrap,
            tmp_path / f"ledger-{run_id}",
            faults=faults,
            sites=sites,
            sessions=sessions,
            rate=rate,
            duration=duration,
            snapshot_every=25,
            seed=5,
            run_id=run_id,
        )
        assert summary.error is None, summary.error
        return cfg.topic_prefix, cfg.ledger

    return run


def _job_argv(settings, prefix: str, tmp_path: Path, *extra: str) -> list[str]:
    output = f"s3a://{settings.bucket}/itest/errors-{uuid.uuid4().hex[:8]}"
    return [
        sys.executable,
        "-m",
        "job",
        "run",
        "--topic-prefix",
        prefix,
        "--output",
        output,
        "--checkpoint",
        str(tmp_path / f"ckpt-{uuid.uuid4().hex[:6]}"),
        *extra,
    ]


def _no_traceback(stderr: str) -> None:
    for noise in ("Traceback", "Py4J", "py4j", "reentrant"):
        assert noise not in stderr, stderr[-4000:]


def test_strict_run_that_hits_a_fault_prints_the_integrity_error_and_exits_1(sandbox, produced, tmp_path):
    prefix, _ = produced(faults=("drop:sessions=0:at=30",))
    argv = _job_argv(sandbox.settings, prefix, tmp_path, "--policy", "strict", "--trigger", "available-now")
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1, done.stderr[-4000:]
    _no_traceback(done.stderr)
    # the JVM's and the driver-side Python worker's chatter went to the driver log
    assert "Python worker" not in done.stderr and "WARNING" not in done.stderr, done.stderr
    error = done.stderr.strip().splitlines()[-1]
    assert error.startswith('error: session "') and f"topic {prefix}" in error, error
    assert "gap of 1" in error and "policy strict stops here" in error, error


def test_ctrl_c_on_a_running_job_stops_it_with_one_line(sandbox, produced, tmp_path):
    prefix, _ = produced(duration=4.0)
    argv = _job_argv(sandbox.settings, prefix, tmp_path, "--trigger", "2 seconds", "--max-offsets-per-trigger", "200")
    checkpoint = Path(argv[argv.index("--checkpoint") + 1])
    # its own process group, signalled as a whole: what a terminal does on Ctrl-C
    job = subprocess.Popen(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        commits = checkpoint / "sessions" / "commits"
        wait_for(
            lambda: commits.exists() and any(commits.glob("[0-9]*")),
            timeout_s=300,
            what="the job's first commit",
            abort=lambda: job.poll() is not None and "the job exited",
        )
        os.killpg(job.pid, signal.SIGINT)
        _, stderr = job.communicate(timeout=120)
    finally:
        if job.poll() is None:
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert job.returncode == 130, stderr[-4000:]
    _no_traceback(stderr)
    assert stderr.strip().splitlines()[-1] == INTERRUPTED


def test_drain_that_runs_out_of_time_says_how_many_records_are_left(sandbox, spark, produced, tmp_path):
    prefix, _ = produced()
    settings = sandbox.settings
    # one record per batch, one batch an hour: this drain cannot finish
    cfg = job_config(
        settings,
        output=f"s3a://{settings.bucket}/itest/drain-{uuid.uuid4().hex[:8]}",
        checkpoint=tmp_path / "ckpt",
        topic_prefix=prefix,
        trigger="60 minutes",
        max_offsets_per_trigger=1,
        raw_archive=False,
    )
    queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
    try:
        with pytest.raises(DrainTimeoutError) as info:
            pipeline.drain(
                queries,
                bootstrap=settings.endpoints().kafka_bootstrap,
                topic_prefix=prefix,
                timeout_s=5.0,
                progress=lambda _m: None,
            )
    finally:
        for q in queries:
            q.stop()
    error = info.value
    assert error.exit_status == 1 and 0 < error.left <= error.total
    assert f"still had {error.left} of {error.total} records to process after 5s" in str(error)
    # the tests' session has its executors, so the diagnosis is "slow", not "starved of cores"
    assert error.executors and error.executors >= 1 and "alive but slower" in str(error)


def test_drain_of_a_query_that_was_stopped_says_so_instead_of_returning(sandbox, spark, produced, tmp_path):
    prefix, _ = produced()
    settings = sandbox.settings
    cfg = job_config(
        settings,
        output=f"s3a://{settings.bucket}/itest/drain-{uuid.uuid4().hex[:8]}",
        checkpoint=tmp_path / "ckpt",
        topic_prefix=prefix,
        trigger="30 seconds",
        raw_archive=False,
    )
    queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
    queries[0].stop()
    with pytest.raises(QueryFailedError, match=rf"{cfg.name}-sessions: was stopped before it processed everything"):
        pipeline.drain(queries, bootstrap=settings.endpoints().kafka_bootstrap, topic_prefix=prefix, progress=lambda _m: None)


def test_verify_against_a_lake_that_holds_no_output_names_it_and_exits_2(sandbox, produced):
    _, ledger = produced(duration=1.0)
    lake = f"s3a://{sandbox.settings.bucket}/itest/nothing-{uuid.uuid4().hex[:8]}"
    done = subprocess.run(
        [sys.executable, "-m", "job", "verify", "--ledger", str(ledger), "--lake", lake],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    _no_traceback(done.stderr)
    assert done.stderr.startswith(f"error: lake {lake}: no job output here") and "--output" in done.stderr
    assert f"/browser/{sandbox.settings.bucket}" in done.stderr, "the fix should say where to browse the bucket"
