"""The compose lane: the stack users get from ``docker compose up``, driven by the project's own
compose backend (``sandbox.services.compose.ComposeBackend``), the one code path ``python -m sandbox``,
``make demo`` and these tests share. (testcontainers' DockerCompose would be a second way to run
the same file, with its own waiting and port logic, so the lane would not test what users run.)

Every test here is marked ``compose`` (and ``integration``, ``slow``); ``make test-compose`` runs
them on ports moved by ``OSL_PORT_OFFSET``. Where no Docker engine, compose plugin or base image
is available, each test is skipped with the reason and the command that fixes it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sandbox import Settings
from sandbox.errors import SandboxError

ROOT = Path(__file__).resolve().parents[2]


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.compose)
            item.add_marker(pytest.mark.integration)
            item.add_marker(pytest.mark.slow)
            # the first test pays for the image build (about 4 min from an empty build cache)
            item.add_marker(pytest.mark.timeout(1200))


def why_no_compose() -> str | None:
    """The reason the lane cannot run here, with the fix; None when it can."""
    from sandbox import versions
    from sandbox.services.compose import compose_unavailable

    reason = compose_unavailable()
    if reason is not None:
        return f"{reason}: run scripts/ensure-docker.sh (as root on Debian it installs and starts one)"
    for image in (versions.DEBIAN_IMAGE, versions.GO_IMAGE):
        if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode != 0:
            return f"base image {image} is missing: run scripts/ensure-docker.sh (pulls it, or builds it here)"
    return None


@pytest.fixture(scope="session")
def compose_settings() -> Settings:
    reason = why_no_compose()
    if reason is not None:
        if os.environ.get("OSL_COMPOSE_REQUIRED"):  # .ci/run, once ensure-docker.sh said the engine is ready
            pytest.fail(f"compose lane required (OSL_COMPOSE_REQUIRED) but cannot run: {reason}")
        pytest.skip(f"compose lane skipped: {reason}")
    return Settings.from_env(backend="compose")


@pytest.fixture(scope="session")
def stack(compose_settings):
    """The compose stack, up and healthy (built first; Docker's cache makes later builds quick)."""
    from sandbox.services.compose import LEARNER_VOLUME, ComposeBackend

    sb = ComposeBackend(compose_settings)
    # The lane starts from a fresh learner's working copy (docker/jupyter_start.py fills it from
    # the recorded chapters): the browser test saves into it. Only the lane's own project's
    # volume, and only when no container holds it (with OSL_KEEP_STACK the stack may be up).
    subprocess.run(["docker", "volume", "rm", f"{sb.project_name}_{LEARNER_VOLUME}"], capture_output=True)
    try:
        sb.up()
    except SandboxError as exc:
        pytest.fail(f"docker compose up failed: {exc}")
    yield sb
    if not os.environ.get("OSL_KEEP_STACK"):
        sb.down()


@pytest.fixture(scope="session")
def sandbox_cli(compose_settings):
    """``python -m sandbox --backend compose ARGS`` as a user types it, on the lane's ports."""

    def run(*args: str, timeout_s: float = 600) -> subprocess.CompletedProcess:
        env = dict(os.environ, OSL_STATE_DIR=str(compose_settings.state_dir), PYTHONPATH=str(ROOT))
        return subprocess.run(
            [sys.executable, "-m", "sandbox", "--backend", "compose", *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            cwd=ROOT,
        )

    return run
