"""Session-scoped services: one local sandbox (on its own ports and state dir) for the run.

The test sandbox lives in ``.sandbox-test`` with every port moved by ``OSL_PORT_OFFSET``
(default 10000), so a demo sandbox on the default ports can stay up while tests run.
The variables are exported so notebook kernels started by nbval find the same sandbox.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
os.environ.setdefault("OSL_STATE_DIR", str(ROOT / ".sandbox-test"))
os.environ.setdefault("OSL_PORT_OFFSET", "10000")
os.environ.setdefault("OSL_BACKEND", "local")

from sandbox import Settings, open_sandbox  # noqa: E402


def _settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def sandbox_settings() -> Settings:
    return _settings()


@pytest.fixture(scope="session")
def sandbox(sandbox_settings):
    """The running local sandbox (started once per test session, stopped at the end)."""
    sb = open_sandbox(sandbox_settings)
    sb.up()
    yield sb


@pytest.fixture(scope="session")
def spark(sandbox):
    """A SparkSession on the sandbox's standalone cluster, shared by the session."""
    from sandbox.spark import spark_session

    session = spark_session(sandbox.settings, "tests")
    yield session
    session.stop()


def _any_service_up(settings: Settings) -> bool:
    return any(s.state != "stopped" for s in open_sandbox(settings).status())


def pytest_sessionstart(session):
    session.config._sandbox_was_up = _any_service_up(_settings())


def pytest_sessionfinish(session, exitstatus):
    # Leave the test sandbox as this run found it: notebook cells (nbval) may have started
    # it without the fixture, so decide from the state, not from who started it.
    settings = _settings()
    if not getattr(session.config, "_sandbox_was_up", True) and _any_service_up(settings):
        open_sandbox(settings).down()
