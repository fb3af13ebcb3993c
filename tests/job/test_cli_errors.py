"""Errors of ``python -m job`` a user can act on: one paragraph naming subject, place and fix,
exit status 2 for input or environment, 1 for a failed check; never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from job.engine.errors import IntegrityError, QueryFailedError
from job.spark.errors import query_error
from tests.ports import free_port_offset

ROOT = Path(__file__).resolve().parents[2]

#: The text a StreamingQueryException carries when the session operator's Python worker
#: raised IntegrityError (shape as PySpark prints it, JVM frames trimmed).
WORKER_FAILURE = """[STREAM_FAILED] Query [id = 1f0c, runId = 9a2b] terminated with exception: Job aborted.
org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/job/pipeline.py", line 140, in handleInputRows
    state, frame = apply_batch(self._stored(), rows, policy=policy, window=window, now_ms=now)
job.engine.errors.IntegrityError: session "fleet-2-r1-s0000" topic itest-ab-fleet-0[1] offset 30: seq 31 after 29 (gap of 1); policy strict stops here: run with policy resync to quarantine and go on, or repair the input from this offset
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:600)
"""


def _job(*args: str, env: dict[str, str] | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "job", *args],
        cwd=ROOT,
        env={**os.environ, **(env or {})},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def _one_paragraph(stderr: str) -> str:
    assert "Traceback" not in stderr, stderr
    assert stderr.startswith("error: "), stderr
    return stderr


def test_integrity_error_from_a_spark_worker_is_rebuilt_with_its_coordinates():
    error = query_error("ordered-sessions-sessions", Exception(WORKER_FAILURE))
    assert isinstance(error, IntegrityError) and error.exit_status == 1
    assert (error.session, error.topic, error.partition, error.offset) == ("fleet-2-r1-s0000", "itest-ab-fleet-0", 1, 30)
    assert error.detail == "seq 31 after 29 (gap of 1)"
    assert str(error).startswith('session "fleet-2-r1-s0000" topic itest-ab-fleet-0[1] offset 30: seq 31 after 29')


def test_any_other_query_failure_names_the_query_its_cause_and_the_log():
    text = "[STREAM_FAILED] Query terminated with exception\norg.apache.kafka.common.errors.TimeoutException: Timeout of 60000ms expired"
    error = query_error("ordered-sessions-raw", Exception(text), log="/state/logs/spark-driver.log")
    assert isinstance(error, QueryFailedError) and error.exit_status == 1
    message = str(error)
    assert "ordered-sessions-raw" in message and "TimeoutException: Timeout of 60000ms expired" in message
    assert "/state/logs/spark-driver.log" in message


def test_verify_with_a_missing_ledger_names_it_and_exits_2(tmp_path):
    missing = tmp_path / "no-ledger-here"
    done = _job("verify", "--ledger", str(missing))
    assert done.returncode == 2, done.stderr
    message = _one_paragraph(done.stderr)
    assert f"ledger {missing}" in message and "--ledger" in message


@pytest.mark.parametrize("command", [["verify", "--ledger", "s3a://lake/some-ledger"], ["run", "--until-drained"]])
def test_a_stopped_sandbox_is_named_with_where_it_was_looked_for_and_exits_2(command, tmp_path):
    # a sandbox nobody started: its own state directory, ports moved to where nothing listens
    offset = free_port_offset()
    env = {"OSL_STATE_DIR": str(tmp_path / "state"), "OSL_PORT_OFFSET": str(offset), "OSL_BACKEND": "local"}
    done = _job(*command, env=env)
    assert done.returncode == 2, done.stderr
    message = _one_paragraph(done.stderr)
    assert "does not answer" in message and "python -m sandbox up" in message
    assert str(tmp_path / "state") in message and f"OSL_PORT_OFFSET={offset}" in message


def test_the_old_prefix_flag_still_works_and_says_it_is_deprecated(tmp_path):
    env = {"OSL_STATE_DIR": str(tmp_path / "state"), "OSL_PORT_OFFSET": str(free_port_offset()), "OSL_BACKEND": "local"}
    done = _job("run", "--prefix", "collection-", env=env)
    assert done.stderr.startswith("warning: --prefix is deprecated") and "--topic-prefix" in done.stderr
    assert done.returncode == 2  # then the stopped sandbox, as with --topic-prefix


def test_a_drain_timeout_without_executors_says_the_cluster_has_no_cores_left():
    from job.engine.errors import DrainTimeoutError

    starved = str(DrainTimeoutError("q-sessions", 1604, 1604, 300, executors=0))
    slow = str(DrainTimeoutError("q-sessions", 10, 1604, 300, executors=2))
    assert "has no executors" in starved and "Spark master's UI" in starved and "slower" not in starved
    assert "alive but slower" in slow and "no executors" not in slow


def test_state_partitions_through_conf_are_refused_before_anything_starts_and_name_the_flag(tmp_path):
    # the job sets spark.sql.shuffle.partitions from --state-partitions; a --conf would be overridden
    env = {"OSL_STATE_DIR": str(tmp_path / "state"), "OSL_PORT_OFFSET": str(free_port_offset()), "OSL_BACKEND": "local"}
    done = _job("run", "--conf", "spark.sql.shuffle.partitions=4", env=env)
    assert done.returncode == 2, done.stderr
    message = _one_paragraph(done.stderr)
    assert "--state-partitions 4" in message and "does not answer" not in message


def test_kafka_deleted_ranges_round_trip_and_a_bad_file_is_named_with_the_fix(tmp_path):
    from job.engine.errors import UsageError
    from job.verify.compare import DeletedRange, load_deleted, save_deleted

    ranges = [DeletedRange(topic="t", partition=1, start=812, end=2075)]
    assert load_deleted(save_deleted(ranges, tmp_path / "deleted.json")) == ranges
    (tmp_path / "bad.json").write_text('[{"topic": "t", "partition": 1, "start": 9}]')
    with pytest.raises(UsageError, match=r"bad.json: not a list of deleted ranges .*save_deleted"):
        load_deleted(tmp_path / "bad.json")
    done = _job("verify", "--ledger", str(tmp_path), "--kafka-deleted", str(tmp_path / "missing.json"))
    assert done.returncode == 2 and "--kafka-deleted" in _one_paragraph(done.stderr) and "no such file" in done.stderr


def test_a_state_store_that_cannot_load_says_it_is_the_checkpoint_and_names_the_repair():
    text = (
        "org.apache.spark.SparkException: [CANNOT_LOAD_STATE_STORE.CANNOT_READ_STREAMING_STATE_FILE] An error occurred "
        "during loading state. Error reading streaming state file of file:/tmp/ckpt/sessions/state/0/3/1.changelog "
        "does not exist. If the stream job is restarted with a new or altered state operation, please create a new "
        "checkpoint location or clear the existing checkpoint location. SQLSTATE: 58030"
    )
    error = str(query_error("ordered-sessions-sessions", Exception(text)))
    assert "CANNOT_LOAD_STATE_STORE" in error and "state/0/3/1.changelog" in error, error
    assert "python -m job repair" in error and "run again (the checkpoint resumes)" not in error, error
    other = str(query_error("q", Exception("java.lang.IllegalStateException: boom")))
    assert "python -m job repair" not in other and "run again" in other
