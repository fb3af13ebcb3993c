"""A fetch or build keeps its whole output in a log and shows counts, not a wall of lines."""

from __future__ import annotations

import sys
import threading

import pytest

from sandbox import artifacts
from sandbox.artifacts import _ivy_download, _ivy_step, _run_streaming


def _script(*lines: str, status: int = 0) -> list[str]:
    body = "".join(f"print({line!r})\n" for line in lines) + f"raise SystemExit({status})"
    return [sys.executable, "-c", body]


def test_output_goes_to_the_log_and_only_the_count_comes_back(tmp_path):
    shown: list[str] = []
    log = tmp_path / "resolve.log"
    lines = ("downloading https://repo/x/a-1.0.jar ...", "found b#c;2", "downloading https://repo/y/d-2.0.jar ...")
    count, tail = _run_streaming(_script(*lines), shown.append, _ivy_download, label="g:a:1", unit="jars", log=log)
    assert (count, tail, shown) == (2, None, [])
    assert log.read_text().splitlines() == list(lines)


def test_the_resolver_counts_as_moving_while_it_finds_dependencies_before_any_download():
    assert _ivy_step("\tfound org.apache.kafka#kafka-clients;4.1.1 in central")
    assert _ivy_step("downloading https://repo1.maven.org/x/kafka-clients-4.1.1.jar ...")
    assert not _ivy_step(":: resolving dependencies :: org.apache.kafka#kafka_2.13-caller;working")
    assert not _ivy_download("\tfound org.apache.kafka#kafka-clients;4.1.1 in central")


def test_a_failure_returns_the_last_lines_for_the_error_message(tmp_path):
    count, tail = _run_streaming(
        _script("UNRESOLVED DEPENDENCIES", status=1),
        lambda _: None,
        _ivy_download,
        label="g:a:1",
        unit="jars",
        log=tmp_path / "x.log",
    )
    assert count == 0 and tail == ["UNRESOLVED DEPENDENCIES"]


def test_a_long_step_says_how_far_it_got_on_each_heartbeat(tmp_path):
    # the child runs until the test has seen a heartbeat that counts its one download (or 60 s)
    seen = tmp_path / "seen"
    child = [
        sys.executable,
        "-c",
        "import pathlib, sys, time\nprint('downloading r/a.jar', flush=True)\n"
        f"deadline = time.monotonic() + 60\nwhile not pathlib.Path({str(seen)!r}).exists():\n"
        "    if time.monotonic() > deadline: sys.exit(3)\n    time.sleep(0.05)",
    ]
    shown: list[str] = []

    def progress(line: str) -> None:
        shown.append(line)
        if "1 jars downloaded so far" in line:
            seen.touch()

    _, tail = _run_streaming(
        child, progress, _ivy_download, label="g:a:1", unit="jars downloaded", log=tmp_path / "x.log", heartbeat_s=0.2
    )
    assert tail is None, "no heartbeat counted the download within 60 s"
    assert shown and all(line.startswith("[artifacts]   g:a:1: ") for line in shown)


def test_the_minio_build_runs_beside_the_jar_downloads_and_its_error_still_surfaces(monkeypatch, tmp_path):
    # the build waits until the jar resolution has started: run one after the other, it would
    # time out and report that it ran alone
    from sandbox.errors import ArtifactFetchError
    from sandbox.settings import Settings

    jars_started = threading.Event()

    def jars(_settings, *, progress):
        jars_started.set()
        return ["a.jar"]

    def minio(_settings, *, progress):
        return "beside the jars" if jars_started.wait(10) else "alone"

    monkeypatch.setattr(artifacts, "java_executable", lambda _home: "java")
    monkeypatch.setattr(artifacts, "kafka_jars", jars)
    monkeypatch.setattr(artifacts, "spark_job_jars", jars)
    monkeypatch.setattr(artifacts, "minio_binary", minio)
    settings = Settings.from_env()
    got = artifacts.fetch_all(settings, progress=lambda _line: None)
    assert got == {"java": "java", "kafka_jars": ["a.jar"], "spark_job_jars": ["a.jar"], "minio": "beside the jars"}

    def broken(_settings, *, progress):
        raise ArtifactFetchError("minio", "the Go module proxy", "the build failed")

    monkeypatch.setattr(artifacts, "minio_binary", broken)
    with pytest.raises(ArtifactFetchError, match="the build failed"):
        artifacts.fetch_all(settings, progress=lambda _line: None)


def test_fetch_without_waiting_leaves_a_running_minio_build_alone_and_builds_one_none_runs(monkeypatch):
    from sandbox.settings import Settings

    built: list[str] = []
    monkeypatch.setattr(artifacts, "java_executable", lambda _home: "java")
    monkeypatch.setattr(artifacts, "kafka_jars", lambda _s, *, progress: ["k.jar"])
    monkeypatch.setattr(artifacts, "spark_job_jars", lambda _s, *, progress: ["s.jar"])
    monkeypatch.setattr(artifacts, "minio_binary", lambda _s, *, progress: built.append("minio") or "minio")
    monkeypatch.setattr(artifacts, "minio_build_running", lambda _s: True)
    lines: list[str] = []
    got = artifacts.fetch_all(Settings.from_env(), wait_for_minio=False, progress=lines.append)
    assert got["minio"] is None and got["kafka_jars"] == ["k.jar"] and built == []
    assert any("MinIO is still being built by another process" in line for line in lines), lines
    # no build running (the background one failed, or never started): fetch builds it itself
    monkeypatch.setattr(artifacts, "minio_build_running", lambda _s: False)
    assert artifacts.fetch_all(Settings.from_env(), wait_for_minio=False, progress=lines.append)["minio"] == "minio"
    assert built == ["minio"]


def _project_jar_settings(tmp_path):
    """Settings whose cache is empty except for the ecj jar the real cache already resolved
    (linked, so the compile runs without a download)."""
    from sandbox.settings import Settings

    resolved = artifacts.ecj_jar(Settings.from_env(), progress=lambda _l: None).parent
    (tmp_path / "jars").mkdir(parents=True)
    (tmp_path / "jars" / resolved.name).symlink_to(resolved)
    return Settings.from_env(cache_dir=tmp_path)


def test_the_project_jar_is_compiled_once_and_holds_the_checkpoint_manager(tmp_path):
    import zipfile

    settings = _project_jar_settings(tmp_path)
    lines: list[str] = []
    jar = artifacts.project_jar(settings, progress=lines.append)
    assert "osl/FastCheckpointFileManager.class" in zipfile.ZipFile(jar).namelist()
    assert any("compiling" in line for line in lines)
    assert artifacts.project_jar(settings, progress=lambda line: pytest.fail(f"compiled again: {line}")) == jar


def test_the_project_jar_compiled_again_has_the_same_bytes(tmp_path):
    """Every image build compiles it anew: the same sources must give the same jar, or the
    image's class-data archive, keyed by its jars' contents, is recorded again every build."""
    import time

    first = artifacts.project_jar(_project_jar_settings(tmp_path / "a"), progress=lambda _l: None).read_bytes()
    time.sleep(2.1)  # zip entries hold two-second times: a compile later than the first one's second
    second = artifacts.project_jar(_project_jar_settings(tmp_path / "b"), progress=lambda _l: None).read_bytes()
    assert first == second


def test_a_java_source_that_does_not_compile_is_named_with_the_compiler_s_lines(tmp_path, monkeypatch):
    from sandbox.errors import SandboxError

    settings = _project_jar_settings(tmp_path / "cache")
    sources = tmp_path / "java" / "osl"
    sources.mkdir(parents=True)
    (sources / "Broken.java").write_text("package osl;\npublic class Broken { int x = ; }\n")
    monkeypatch.setattr(artifacts, "JAVA_SOURCES", tmp_path / "java")
    with pytest.raises(SandboxError) as failed:
        artifacts.project_jar(settings, progress=lambda _l: None)
    message = str(failed.value)
    assert str(tmp_path / "java") in message and "did not compile" in message
    assert "Broken.java" in message and "Syntax error" in message, message
    assert not list((tmp_path / "cache" / "jars").glob("osl-java-*")), "a failed compile left a jar or its staging"


def test_a_second_minio_build_waits_for_the_first_and_builds_nothing(monkeypatch, tmp_path):
    """scripts/bootstrap.sh starts MinIO's build beside pip, then its fetch asks for MinIO again:
    the second caller waits for the first (a lock on the build folder) and gets its binary."""
    import time
    from concurrent.futures import ThreadPoolExecutor

    from sandbox import Settings

    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache")
    builds: list[float] = []
    first_running = threading.Event()

    def build(_settings, _bin_dir, binary, _progress):
        builds.append(time.monotonic())
        first_running.set()
        time.sleep(0.5)
        binary.write_text("minio")
        return binary

    monkeypatch.setattr(artifacts, "_build_minio", build)
    monkeypatch.setattr(artifacts.shutil, "which", lambda _name: None)  # no minio on PATH
    said: list[str] = []
    with ThreadPoolExecutor(max_workers=2) as pool:
        first = pool.submit(artifacts.minio_binary, settings, progress=said.append)
        assert first_running.wait(10)
        second = pool.submit(artifacts.minio_binary, settings, progress=said.append)
        assert first.result(timeout=10) == second.result(timeout=10)
    assert len(builds) == 1, builds
    assert any("waiting for the MinIO build another process runs" in line for line in said), said
