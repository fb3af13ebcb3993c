"""Errors users hit: each names the subject, the place and the fix."""

from __future__ import annotations

import os
import socket
import stat
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from sandbox import artifacts
from sandbox.errors import ArtifactFetchError, PortBusyError, ServiceStartError, ToolMissingError
from sandbox.services.local import SANDBOX_MARK, LocalBackend, sandbox_processes
from sandbox.settings import Ports, Settings
from tests.ports import free_port_offset


def _settings(tmp_path: Path, **kw) -> Settings:
    # ports nothing listens on now (tests/ports.py): a fixed offset once put MinIO's port at
    # 39000, inside Linux's ephemeral range, where a client connection of an earlier test held it
    return Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", ports=Ports().shifted(free_port_offset()), **kw)


def _fake_tool(tmp_path: Path, name: str, script: str) -> Path:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    tool = bindir / name
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(tool.stat().st_mode | stat.S_IEXEC)
    return bindir


def test_missing_java_names_the_package_and_java_home(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match=r"Java 17\+ is required \(not found\).*openjdk-17-jre-headless.*JAVA_HOME"):
        artifacts.java_executable()


def test_old_java_is_rejected_with_its_version(tmp_path, monkeypatch):
    bindir = _fake_tool(tmp_path, "java", "echo 'openjdk version \"11.0.2\" 2019-01-15' >&2\n")
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setenv("PATH", str(bindir))
    with pytest.raises(ToolMissingError, match=r"found Java 11"):
        artifacts.java_executable()


def test_missing_go_says_it_is_needed_once_for_minio(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ToolMissingError, match=r"Go 1\.24\+ is required \(not found\).*build MinIO.*minio"):
        artifacts.minio_binary(_settings(tmp_path))


def test_unreachable_maven_repo_names_the_artifact_and_registry(tmp_path):
    # a closed port on loopback: the resolver fails fast, nothing leaves the machine
    settings = _settings(tmp_path, maven_repo="http://127.0.0.1:9/maven2")
    with pytest.raises(ArtifactFetchError) as info:
        artifacts.kafka_jars(settings, progress=lambda _m: None)
    message = str(info.value)
    assert "org.apache.kafka:kafka_2.13" in message
    assert "http://127.0.0.1:9/maven2" in message
    assert not (settings.cache_dir / "jars" / "kafka-4.1.1").exists(), "a failed fetch leaves no half cache"


def test_busy_port_names_port_and_owning_process(tmp_path):
    settings = _settings(tmp_path)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", settings.ports.minio))
        sock.listen()
        with pytest.raises(PortBusyError) as info:
            LocalBackend(settings)._check_port("minio", settings.ports.minio)
    message = str(info.value)
    assert f"127.0.0.1:{settings.ports.minio}" in message
    assert f"pid {os.getpid()}" in message
    assert "OSL_PORT_OFFSET" in message


def test_service_exiting_during_start_shows_its_log_tail(tmp_path, monkeypatch):
    bindir = _fake_tool(tmp_path, "minio", "echo 'FATAL: unable to use the drive /nowhere' >&2\nexit 1\n")
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    backend = LocalBackend(replace(_settings(tmp_path), start_timeout_s=20), progress=lambda _m: None)
    backend._artifacts = {"java": artifacts.java_executable(), "kafka_jars": [], "minio": bindir / "minio"}
    backend._start("minio")
    with pytest.raises(ServiceStartError, match=r"(?s)minio exited during start.*FATAL: unable to use the drive"):
        backend._wait_healthy(backend._spec("minio"))


def test_down_leaves_a_process_that_only_sits_in_the_state_directory(tmp_path):
    # a user's shell in <state>/logs: the sandbox did not start it, so `down` must not kill it
    settings = _settings(tmp_path)
    logs = settings.state_dir / "logs"
    logs.mkdir(parents=True)
    bystander = subprocess.Popen(["sleep", "60"], cwd=logs)
    try:
        LocalBackend(settings, progress=lambda _m: None).down()
        assert bystander.poll() is None, "down killed a process it did not start"
    finally:
        bystander.kill()
        bystander.wait()


def test_down_sweeps_a_leftover_the_sandbox_started(tmp_path):
    # an executor orphaned by a killed worker carries the sandbox's mark in its environment
    settings = _settings(tmp_path)
    env = {**os.environ, SANDBOX_MARK: str(settings.state_dir)}
    leftover = subprocess.Popen(["sleep", "60"], env=env)
    try:
        assert [p.pid for p in sandbox_processes(settings)] == [leftover.pid]
        LocalBackend(settings, progress=lambda _m: None).down()
        assert leftover.wait(timeout=10) == -9
    finally:
        leftover.kill()
        leftover.wait()


def test_smoke_reports_every_failed_proof_instead_of_an_empty_list(tmp_path, monkeypatch):
    from sandbox.checks import smoke

    def broken(*_a, **_k):
        raise ConnectionRefusedError("connection refused")

    for name in ("kafka_round_trip", "s3_round_trip", "spark_kafka_to_parquet"):
        monkeypatch.setattr(smoke, name, broken)
    proofs = smoke.run_all(_settings(tmp_path), progress=lambda _m: None)
    assert [(p.name, p.ok) for p in proofs] == [("kafka", False), ("minio", False), ("spark", False)]
    assert all("ConnectionRefusedError: connection refused" in p.detail for p in proofs)
