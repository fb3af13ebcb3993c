"""Session-scoped services: one local sandbox for the whole run (see the root conftest.py)."""

from __future__ import annotations

import pytest

from sandbox import Settings, open_sandbox


@pytest.fixture(scope="session")
def sandbox_settings() -> Settings:
    return Settings.from_env()


@pytest.fixture(scope="session")
def sandbox(sandbox_settings):
    """The running local sandbox (started once per test run if it is not up already)."""
    sb = open_sandbox(sandbox_settings)
    sb.up()
    yield sb


@pytest.fixture(scope="session")
def bootstrap(sandbox) -> str:
    """The sandbox's Kafka bootstrap address."""
    return sandbox.settings.endpoints().kafka_bootstrap


@pytest.fixture(scope="session")
def spark(sandbox):
    """A SparkSession on the sandbox's standalone cluster, shared by the session.

    The root conftest stops it before the first notebook runs (testpaths puts the notebooks
    last): the cluster has cores for two applications, and a chapter's kernel plus the job
    it starts are already two.
    """
    from sandbox.jvm.spark_session import spark_session

    session = spark_session(sandbox.settings, "tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def browser():
    """A headless Chromium (tests/browser.py), shared by the run's browser tests."""
    from tests.browser import launch

    pw, chromium = launch()
    yield chromium
    chromium.close()
    pw.stop()
