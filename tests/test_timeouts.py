"""A per-test timeout fails that test and the run goes on; a hang the signal cannot break ends the run
with a line naming it (tests/timeout_backstop.py, and pyproject.toml's timeout settings)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# A stand-in for pyspark's gateway, enough for the plugin's release after a timeout.
_FAKE_PYSPARK = """
import sys, types

EVENTS = []

class _Connection:
    def close(self, reset=False):
        EVENTS.append(f"closed reset={reset}")

class _Client:
    def get_thread_connection(self):
        return _Connection()

class _Context:
    def cancelAllJobs(self):
        EVENTS.append("cancelled")

class SparkContext:
    _gateway = types.SimpleNamespace(_gateway_client=_Client())
    _active_spark_context = _Context()

sys.modules["pyspark"] = types.SimpleNamespace(SparkContext=SparkContext)
"""

_HANG_THEN_FAIL = """
import time

import pytest

from fake_pyspark import EVENTS


@pytest.mark.timeout(1)
def test_hangs():
    time.sleep(1000)


def test_after_the_timeout_the_gateway_connection_was_released():
    assert EVENTS == ["closed reset=True", "cancelled"]


def test_fails():
    assert 1 == 2


def test_passes():
    pass
"""

_UNBREAKABLE = """
import signal
import time

import pytest


def test_passes_first():
    pass


@pytest.mark.timeout(1)
def test_hangs_where_sigalrm_cannot_reach():
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})  # as C code that blocks it would
    time.sleep(1000)


def test_never_runs():
    pass
"""


def _run(tmp_path: Path, tests: str, **env: str) -> subprocess.CompletedProcess[str]:
    """pytest over ``tests`` with this repository's timeout settings and the backstop plugin."""
    ini = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    (tmp_path / "pytest.ini").write_text(f"[pytest]\ntimeout = {ini['timeout']}\ntimeout_method = {ini['timeout_method']}\n")
    (tmp_path / "fake_pyspark.py").write_text(_FAKE_PYSPARK)
    (tmp_path / "test_it.py").write_text(textwrap.dedent(tests))
    clean = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "OSL_TIMEOUT"))}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-p",
            "pytest_timeout",
            "-p",
            "tests.timeout_backstop",
            "-rA",
            "test_it.py",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        # only the plugins under test: the others' start-up would double this test's time
        env={**clean, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}", **env},
    )


def test_a_hung_test_fails_with_its_name_and_the_tests_after_it_still_run_and_report(tmp_path):
    run = _run(tmp_path, _HANG_THEN_FAIL)
    out = run.stdout
    assert run.returncode == 1, out + run.stderr
    assert "FAILED test_it.py::test_hangs - Failed: Timeout (>1.0s) from pytest-timeout." in out, out
    assert "PASSED test_it.py::test_after_the_timeout_the_gateway_connection_was_released" in out, out
    assert "FAILED test_it.py::test_fails - assert 1 == 2" in out, out
    assert "PASSED test_it.py::test_passes" in out, out
    assert "2 failed, 2 passed" in out.splitlines()[-1], out
    assert "after the timeout: closed this thread's Py4J connection; cancelled the SparkContext's jobs" in out, out


@pytest.mark.skipif(not hasattr(signal, "pthread_sigmask"), reason="no pthread_sigmask on this platform")
def test_a_hang_the_signal_cannot_break_ends_the_run_naming_the_test(tmp_path):
    started = time.monotonic()
    run = _run(tmp_path, _UNBREAKABLE, OSL_TIMEOUT_BACKSTOP_S="1")
    assert run.returncode == 1, run.stdout + run.stderr
    assert time.monotonic() - started < 60
    assert "in test_hangs_where_sigalrm_cannot_reach" in run.stderr, run.stderr  # its stack
    [line] = [ln for ln in run.stderr.splitlines() if ln.startswith("TIMEOUT BACKSTOP:")]
    assert line.startswith(
        "TIMEOUT BACKSTOP: test_it.py::test_hangs_where_sigalrm_cannot_reach is still running 2 s after it "
        "started, 1 s past its 1 s timeout, which did not stop it"
    ), line
    assert line.endswith("ending the run (exit 1), so the tests after it did not run; 1 passed, 0 failed before it"), line
    assert "test_never_runs" not in run.stdout + run.stderr


def test_the_backstop_margin_is_read_from_the_environment(monkeypatch):
    from tests.timeout_backstop import BACKSTOP_MARGIN_S, backstop_margin

    monkeypatch.delenv("OSL_TIMEOUT_BACKSTOP_S", raising=False)
    assert backstop_margin() == BACKSTOP_MARGIN_S == 120
    monkeypatch.setenv("OSL_TIMEOUT_BACKSTOP_S", "2.5")
    assert backstop_margin() == 2.5
    monkeypatch.setenv("OSL_TIMEOUT_BACKSTOP_S", "soon")
    with pytest.raises(pytest.UsageError, match="OSL_TIMEOUT_BACKSTOP_S='soon' is not a number"):
        backstop_margin()


@pytest.mark.integration
def test_after_a_timeout_mid_py4j_call_the_shared_session_answers_at_once_and_right(spark):
    # What pytest-timeout's signal method does to a test stuck in a JVM call, with the traceback
    # kept alive as pytest keeps it (sys.last_traceback): without the release, the next call on
    # this thread would wait out the sleep and then read the sleep's answer as its own.
    from tests.timeout_backstop import release_spark_gateway

    def fail(signum, frame):
        pytest.fail("Timeout (>1.0s) from pytest-timeout.")

    old = signal.signal(signal.SIGALRM, fail)
    own_timeout, _ = signal.setitimer(signal.ITIMER_REAL, 1.0)  # this test's own (pytest-timeout's) alarm
    started = time.monotonic()
    kept = None
    try:
        spark._jvm.java.lang.Thread.sleep(30_000)
    except pytest.fail.Exception as exc:
        kept = exc
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if own_timeout:  # re-arm what is left of it
            signal.setitimer(signal.ITIMER_REAL, max(own_timeout - (time.monotonic() - started), 0.1))
    assert kept is not None, "the alarm did not interrupt the JVM call"
    assert release_spark_gateway() == "closed this thread's Py4J connection; cancelled the SparkContext's jobs"
    started = time.monotonic()
    assert spark._jvm.java.lang.Math.addExact(2, 3) == 5
    assert time.monotonic() - started < 10
    assert spark.range(10).count() == 10
