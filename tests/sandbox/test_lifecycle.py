"""A second, short-lived sandbox: idempotent up, no stray process after down, and the guard
against two sandboxes on the same ports."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sandbox.checks.health import wait_for
from sandbox.errors import AnotherSandboxRunningError
from sandbox.services.local import LocalBackend, sandbox_processes
from sandbox.settings import Ports
from tests.ports import free_port_offset

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_up_is_idempotent_down_leaves_nothing_and_a_second_sandbox_is_refused(tmp_path, sandbox_settings):
    settings = replace(sandbox_settings, state_dir=tmp_path / "one", ports=Ports().shifted(free_port_offset()), spark_workers=1)
    first = LocalBackend(settings, progress=lambda _m: None)
    try:
        first.up()
        pids = {s.name: s.pid for s in first.status()}
        assert all(pids.values())
        first.up()
        assert {s.name: s.pid for s in first.status()} == pids

        other = LocalBackend(replace(settings, state_dir=tmp_path / "two"), progress=lambda _m: None)
        with pytest.raises(AnotherSandboxRunningError, match=str(tmp_path / "one")):
            other.up()
        assert not sandbox_processes(other.settings), "the refused sandbox started nothing"
    finally:
        first.down()
    assert sandbox_processes(settings) == []
    assert all(s.state == "stopped" for s in first.status())


def test_a_cold_up_starts_the_workers_once_the_master_is_alive(tmp_path, sandbox_settings, monkeypatch):
    """A worker that registers while the master is still starting is told "standby" and retries
    only 5-15 s later (Spark's fixed, random interval): `up` starts the workers after the
    master's check passes, while Kafka and MinIO go on starting (pure unit: stand-ins for the
    processes)."""
    backend = LocalBackend(replace(sandbox_settings, state_dir=tmp_path / "order"), progress=lambda _m: None)
    events: list[str] = []
    monkeypatch.setattr(backend, "_check_other_sandboxes", lambda: None)
    monkeypatch.setattr(backend, "_pid", lambda _name: None)
    monkeypatch.setattr(backend, "_spec", lambda name, **_k: name)
    monkeypatch.setattr(backend, "_start", lambda name: events.append(f"start {name}"))
    monkeypatch.setattr(backend, "_wait_healthy", lambda name: events.append(f"healthy {name}"))
    monkeypatch.setattr(backend, "_register", lambda: None)
    monkeypatch.setattr("sandbox.services.local.class_data_sharing.ensure", lambda *_a, **_k: None)
    backend.up()
    first_worker = events.index("start spark-worker-1")
    assert events[:first_worker] == ["start kafka", "start minio", "start spark-master", "healthy spark-master"]
    assert events[first_worker : first_worker + 2] == ["start spark-worker-1", "start spark-worker-2"]


def test_a_cold_up_leaves_no_worker_retrying_its_registration(tmp_path, sandbox_settings):
    """For real: after a cold `up`, no worker's log (since its start) says it had to retry.

    `up` returns once the master lists each worker ALIVE; the worker logs its registration
    when the master's answer reaches it, a moment later, so the test waits for that line."""
    settings = replace(sandbox_settings, state_dir=tmp_path / "cold", ports=Ports().shifted(free_port_offset()))
    backend = LocalBackend(settings, progress=lambda _m: None)

    def since_start(n: int) -> str:
        return (settings.state_dir / "logs" / f"spark-worker-{n}.log").read_text().rsplit("sandbox starts", 1)[-1]

    try:
        backend.up()
        for n in range(1, settings.spark_workers + 1):
            log = wait_for(
                lambda n=n: "Successfully registered with master" in (text := since_start(n)) and text,
                timeout_s=30,
                what=f"spark-worker-{n}'s log to record its registration",
            )
            assert "Retrying connection to master" not in log, log[-2000:]
    finally:
        backend.down()


@pytest.mark.integration
def test_with_docker_answering_the_cli_acts_on_the_local_sandbox_running_from_its_state_dir(
    sandbox, monkeypatch, capsys, tmp_path
):
    from sandbox import cli

    monkeypatch.setattr(cli, "detect_backend", lambda: "compose")  # as where a Docker engine answers
    monkeypatch.delenv("OSL_BACKEND", raising=False)
    state, offset = str(sandbox.settings.state_dir), str(sandbox.settings.ports.offset)
    assert cli.main(["--state-dir", state, "--port-offset", offset, "status", "--json"]) == 0
    out, err = capsys.readouterr()
    assert f"note: a local sandbox runs from {state} (kafka, minio, spark-master" in err
    assert "/logs/kafka.log" in out  # the local backend's status: its services' log files
    # an empty state dir: compose, as detected
    assert cli._local_if_running(replace(sandbox.settings, backend="compose", state_dir=tmp_path)).backend == "compose"
