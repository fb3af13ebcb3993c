"""Per-test timeouts that fail the test and let the run go on, with a backstop for hangs they cannot break.

A pytest plugin (the root conftest.py loads it; ``-p tests.timeout_backstop`` loads it alone).

pytest-timeout runs with ``timeout_method = "signal"`` (pyproject.toml): at a test's timeout
(its ``@pytest.mark.timeout(N)``, else the ini's ``timeout``) SIGALRM raises in the test on the
main thread, so that test fails with its name and the run goes on to the rest and the summary.
Two things that method leaves open are handled here:

* A signal cannot break a hang in C code that never returns to the interpreter (a blocked
  signal, a native wait that retries on EINTR). The backstop is a thread timer armed for each
  test at its timeout plus ``BACKSTOP_MARGIN_S`` (``OSL_TIMEOUT_BACKSTOP_S`` overrides it):
  if the test is still running then, it dumps every thread's stack, prints one line naming
  the test and why the run ends, and ends the process (exit 1), as ``timeout_method =
  "thread"`` would have at the timeout itself.
* A timeout that interrupts a Py4J call leaves that thread's gateway connection mid-call:
  pytest keeps the failure's traceback (``sys.last_traceback``), which keeps the connection
  alive, so the next call on it waits for the interrupted call's answer and then reads every
  answer one call late. After a timeout this plugin closes the connection (the next call
  opens a fresh one) and cancels the SparkContext's jobs, so the shared session stays usable.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading

import pytest

#: Seconds past a test's own timeout before the backstop ends the run.
BACKSTOP_MARGIN_S = 120.0
_MARGIN_ENV = "OSL_TIMEOUT_BACKSTOP_S"


def backstop_margin() -> float:
    """``BACKSTOP_MARGIN_S``, or ``OSL_TIMEOUT_BACKSTOP_S`` when set (a test of the backstop sets it small)."""
    text = os.environ.get(_MARGIN_ENV, "").strip()
    if not text:
        return BACKSTOP_MARGIN_S
    try:
        margin = float(text)
    except ValueError:
        raise pytest.UsageError(f"{_MARGIN_ENV}={text!r} is not a number of seconds; unset it or write e.g. 120") from None
    if margin < 0:
        raise pytest.UsageError(f"{_MARGIN_ENV}={text!r} is negative; write e.g. 120")
    return margin


def item_timeout(item: pytest.Item) -> float | None:
    """The item's pytest-timeout timeout in seconds (its marker, else --timeout, PYTEST_TIMEOUT or
    the ini's ``timeout``), or None when it has none. pytest-timeout's own reader, so both agree."""
    from pytest_timeout import _get_item_settings  # noqa: PLC2701 - the one place that rule lives

    timeout = _get_item_settings(item).timeout
    return float(timeout) if timeout else None


def _end_the_run(item: pytest.Item, timeout: float, margin: float) -> None:
    from pytest_timeout import is_debugging

    if is_debugging():  # a debugger is stopped in the test: pytest-timeout waits too
        return
    captured = ("", "")
    try:  # the output is being captured: give the terminal back so what follows is seen
        capman = item.config.pluginmanager.getplugin("capturemanager")
        if capman is not None:
            capman.suspend_global_capture(in_=True)
            captured = capman.read_global_capture()
    except Exception:  # noqa: BLE001 - the run ends either way
        pass
    err = sys.__stderr__
    try:
        for name, text in zip(("stdout", "stderr"), captured):
            if text:
                err.write(f"\n{'~' * 30} the test's captured {name} (its end) {'~' * 30}\n{text[-4000:]}\n")
        err.write(f"\n{'+' * 30} timeout backstop: every thread's stack {'+' * 30}\n")
        err.flush()
        faulthandler.dump_traceback(file=err, all_threads=True)
        reporter = item.config.pluginmanager.getplugin("terminalreporter")
        stats = getattr(reporter, "stats", {}) if reporter is not None else {}
        # pytest's reports so far: one per phase; count each test once, by its worst phase
        failed = sorted({r.nodeid for k in ("failed", "error") for r in stats.get(k, [])})
        passed = {r.nodeid for r in stats.get("passed", []) if r.when == "call"} - set(failed)
        named = ", ".join(failed[:10]) + (f" and {len(failed) - 10} more" if len(failed) > 10 else "")
        done = f"{len(passed)} passed, {len(failed)} failed before it" + (f" ({named})" if failed else "")
        err.write(
            f"TIMEOUT BACKSTOP: {item.nodeid} is still running {timeout + margin:.0f} s after it started, "
            f"{margin:.0f} s past its {timeout:.0f} s timeout, which did not stop it (stuck where SIGALRM cannot "
            f"reach: a blocked signal or a wait in C code); ending the run (exit 1), so the tests after it "
            f"did not run; {done}\n"
        )
        err.flush()
    finally:
        os._exit(1)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    timeout = item_timeout(item)
    timer = None
    if timeout is not None and threading.current_thread() is threading.main_thread():
        margin = backstop_margin()
        timer = threading.Timer(timeout + margin, _end_the_run, (item, timeout, margin))
        timer.name = f"timeout backstop {item.nodeid}"
        timer.daemon = True
        timer.start()
    try:
        return (yield)
    finally:
        if timer is not None:
            timer.cancel()


def _is_timeout(call: pytest.CallInfo) -> bool:
    # pytest-timeout's signal method fails the test with pytest.fail("Timeout (>Ns) from pytest-timeout.")
    excinfo = call.excinfo
    return excinfo is not None and excinfo.errisinstance(pytest.fail.Exception) and "from pytest-timeout" in str(excinfo.value)


def release_spark_gateway() -> str | None:
    """Close this thread's Py4J connection if a timeout left it mid-call, and cancel the
    SparkContext's jobs; returns what it did (None: no SparkContext in this process)."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    gateway = SparkContext._gateway  # noqa: SLF001 - no public handle on the gateway
    if gateway is None:
        return None
    done = []
    client = gateway._gateway_client  # noqa: SLF001
    connection = client.get_thread_connection() if hasattr(client, "get_thread_connection") else None
    if connection is not None:  # ClientServer (pinned threads, PySpark's default): one connection a thread
        connection.close(reset=True)  # the next call on this thread opens a fresh connection
        done.append("closed this thread's Py4J connection")
    sc = SparkContext._active_spark_context  # noqa: SLF001
    if sc is not None:
        try:
            sc.cancelAllJobs()  # the interrupted call's job would hold the cluster's cores
            done.append("cancelled the SparkContext's jobs")
        except Exception as exc:  # noqa: BLE001 - reported; the tests that need Spark will say more
            done.append(f"could not cancel the SparkContext's jobs ({type(exc).__name__}: {exc})")
    return "; ".join(done) or None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    if _is_timeout(call):
        done = release_spark_gateway()
        if done:
            report.sections.append(("timeout", f"after the timeout: {done}"))
    return report
