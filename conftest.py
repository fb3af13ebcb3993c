"""Root of the test run: pick the test sandbox and mark notebook cells.

The test sandbox lives in ``.sandbox-test`` with every port moved by ``OSL_PORT_OFFSET``
(default 10000), so a demo sandbox on the default ports can stay up while tests run. The
variables are exported here, before anything is collected, so notebook kernels started by
nbval find the same sandbox as the fixtures in ``tests/conftest.py``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.sandbox_defaults import KEEP_SANDBOX, TEST_SANDBOX

ROOT = Path(__file__).resolve().parent
for _name, _value in TEST_SANDBOX.items():
    os.environ.setdefault(_name, _value)
os.environ.setdefault("IPYTHONDIR", str(ROOT / "tests" / "ipython"))

# A per-test timeout fails that test and the run goes on; a hang it cannot break ends the run.
pytest_plugins = ["tests.timeout_backstop"]


def _hypothesis_profiles() -> None:
    """``ci`` (when CI is set): derandomized, so a CI failure reproduces on any machine with the
    same code, and every failure prints the blob that replays it (``@reproduce_failure``).
    ``dev`` (otherwise): random, so local runs keep exploring; failures print their blob too.
    ``HYPOTHESIS_PROFILE`` picks one by name."""
    from hypothesis import HealthCheck, settings

    settings.register_profile(
        "ci", derandomize=True, print_blob=True, deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.register_profile("dev", print_blob=True, deadline=None)  # two cores: timing is no verdict
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE") or ("ci" if os.environ.get("CI") else "dev"))


_hypothesis_profiles()


def pytest_report_header(config):
    from hypothesis import settings

    profile = settings._current_profile  # noqa: SLF001 - the name is only kept there
    from tests.timeout_backstop import backstop_margin

    return (
        f"hypothesis profile: {profile} (derandomize={settings.default.derandomize}); timeout: "
        f"{config.getini('timeout')} s per test ({config.getini('timeout_method')}; the run ends "
        f"{backstop_margin():.0f} s past a test's timeout if it is still running)"
    )


def _test_sandbox():
    from sandbox import Settings, open_sandbox

    return open_sandbox(Settings.from_env(), progress=lambda _m: None)


def _any_service_up() -> bool:
    from sandbox import any_service_up

    return any_service_up(_test_sandbox())


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.path.suffix == ".ipynb":
            item.add_marker(pytest.mark.notebook)
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)
            # one item per cell; nbval's own --nbval-cell-timeout is 900 s too
            item.add_marker(pytest.mark.timeout(900))
    from tests.order import units_first

    items[:] = units_first(items)


def stop_test_spark() -> None:
    """Stop the SparkSession the tests share, if this process runs one (it holds cluster cores)."""
    import sys

    if "pyspark" not in sys.modules:
        return
    from pyspark import SparkContext

    active = SparkContext._active_spark_context  # noqa: SLF001 - no public "is one running?"
    if active is not None:
        active.stop()


def pytest_runtest_setup(item):
    # A chapter runs its own driver (the kernel) and starts jobs beside it; with the tests'
    # shared session still holding its cores, the cluster has none left for the job, which
    # then waits for executors that never come.
    if item.path.suffix == ".ipynb":
        stop_test_spark()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    # nbval names the output fields that differ ("Unexpected output fields: {'stderr'}") but
    # not what the kernel wrote there; attach the cell's streams to the failure report so a
    # one-off CI failure explains itself.
    outcome = yield
    report = outcome.get_result()
    outputs = getattr(item, "test_outputs", None)
    if call.when != "call" or not report.failed or not outputs:
        return
    for out in outputs:
        if out.get("output_type") == "stream":
            report.sections.append((f"cell {out.get('name')} (as run)", str(out.get("text", ""))[-4000:]))


def pytest_sessionstart(session):
    session.config._sandbox_was_up = _any_service_up()


def _fail_on_skips(session) -> None:
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    skipped = reporter.stats.get("skipped", []) if reporter is not None else []
    from tests.ci_skips import ALLOWED_SKIPS, allowed_skip_rules, skips_not_allowed

    bad = skips_not_allowed(skipped, allowed_skip_rules(ALLOWED_SKIPS.read_text()))
    if not bad:
        return
    reporter.write_sep("!", f"CI: {len(bad)} test(s) skipped for a reason not in tests/allowed_skips.txt", red=True)
    for nodeid, reason in bad:
        reporter.write_line(f"CI: SKIPPED {nodeid}: {reason}")
    reporter.write_line("CI: a skip is a test that did not run; make it run here, or allow its reason in that file, saying why")
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_sessionfinish(session, exitstatus):
    if os.environ.get("CI"):
        _fail_on_skips(session)
    # Leave the test sandbox as this run found it: notebook cells may have started it without
    # a fixture, so decide from its state, not from who started it. Under `make test` the
    # runner does that once, after its last part (scripts/test_side_by_side.py).
    if os.environ.get(KEEP_SANDBOX) == "1":
        return
    if not getattr(session.config, "_sandbox_was_up", True) and _any_service_up():
        _test_sandbox().down()
