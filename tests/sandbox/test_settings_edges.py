"""Settings read variables and nothing else; what costs time or changes the world happens at the edge."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox import settings as settings_module
from sandbox.errors import SandboxError
from sandbox.jvm.spark_session import _check_same_conf, driver_env
from sandbox.settings import Settings, detect_backend


def test_from_env_runs_no_docker_and_defaults_to_local(monkeypatch):
    def no_docker(*_a, **_k):
        raise AssertionError("Settings.from_env ran docker info")

    monkeypatch.setattr(settings_module, "docker_engine_answers", no_docker)
    assert Settings.from_env({"OSL_STATE_DIR": "/tmp/x"}).backend == "local"
    assert Settings.from_env({"OSL_STATE_DIR": "/tmp/x", "OSL_BACKEND": "compose"}).backend == "compose"


def test_backend_detection_is_an_explicit_call(monkeypatch):
    monkeypatch.setattr(settings_module, "docker_engine_answers", lambda *_a, **_k: True)
    assert detect_backend({}) == "compose"
    assert detect_backend({"OSL_BACKEND": "local"}) == "local"


def test_java_home_is_read_at_the_edge():
    assert Settings.from_env({"JAVA_HOME": "/opt/jdk-21"}).java_home.as_posix() == "/opt/jdk-21"
    assert Settings.from_env({}).java_home is None


def test_a_running_session_with_other_conf_is_refused_naming_the_setting():
    with pytest.raises(
        SandboxError, match=r"spark.master is 'spark://127.0.0.1:7077', this call wants 'spark://127.0.0.1:17077'.*spark.stop\(\)"
    ):
        _check_same_conf({"spark.master": "spark://127.0.0.1:7077"}, {"spark.master": "spark://127.0.0.1:17077"})
    _check_same_conf({"spark.master": "spark://a"}, {"spark.master": "spark://a"})


def test_the_driver_ui_binds_to_the_sandbox_host_unless_compose_needs_every_interface(tmp_path):
    local = Settings(state_dir=tmp_path, cache_dir=tmp_path)
    assert driver_env(local)["SPARK_LOCAL_IP"] == "127.0.0.1"
    compose = Settings(state_dir=tmp_path, cache_dir=tmp_path, driver_host="jupyter")
    assert "SPARK_LOCAL_IP" not in driver_env(compose)


def test_shown_prints_paths_under_the_working_directory_or_checkout_relative_and_others_as_given(tmp_path, monkeypatch):
    from sandbox.settings import project_root, shown

    monkeypatch.chdir(tmp_path)
    assert shown(tmp_path / "ledger" / "run") == "ledger/run"
    assert shown("s3a://lake/out") == "s3a://lake/out"
    assert shown("already/relative") == "already/relative"
    assert shown("/var/lib/elsewhere") == "/var/lib/elsewhere"
    root = project_root()
    assert root is not None, "the tests run from a checkout"
    monkeypatch.chdir(root / "notebooks")
    assert shown(root / ".sandbox-test" / "logs" / "kafka.log") == "../.sandbox-test/logs/kafka.log"


def test_scratch_dir_is_fresh_per_call_and_lives_under_the_checkpoint_root(tmp_path):
    settings = Settings.from_env({"OSL_STATE_DIR": str(tmp_path)})
    first, second = settings.scratch_dir("nb08-"), settings.scratch_dir("nb08-")
    assert first != second and first.is_dir() and second.is_dir()
    assert first.parent == settings.checkpoint_root / "scratch" and first.name.startswith("nb08-")


def test_spark_s_jvms_compile_with_c1_only_unless_told_otherwise(tmp_path, monkeypatch):
    """C1 only by default (docs/decisions/0015-jit-c1-only.md: C2's compiler threads slowed every short
    application on two cores); ``OSL_SPARK_JIT=tiered`` gives the JVM's own default; anything
    else is refused naming the variable."""
    from sandbox import artifacts
    from sandbox.jvm import class_data_sharing
    from sandbox.jvm.spark_session import spark_conf

    monkeypatch.setattr(artifacts, "spark_job_jars", lambda *_a, **_k: [])
    monkeypatch.setattr(class_data_sharing, "java_options", lambda _s: ("", ""))
    default = spark_conf(Settings.from_env({"OSL_STATE_DIR": str(tmp_path)}), progress=lambda _l: None)
    for role in ("driver", "executor"):
        assert "-XX:TieredStopAtLevel=1" in default[f"spark.{role}.extraJavaOptions"].split(), role
    tiered = spark_conf(Settings.from_env({"OSL_STATE_DIR": str(tmp_path), "OSL_SPARK_JIT": "tiered"}), progress=lambda _l: None)
    assert "TieredStopAtLevel" not in tiered["spark.driver.extraJavaOptions"]
    assert tiered["spark.executor.extraJavaOptions"] == "-XX:+UseParallelGC"  # the collector is not a JIT option
    with pytest.raises(SandboxError, match=r"OSL_SPARK_JIT='c2' is not one of c1, tiered: .*, or unset it for c1$"):
        Settings.from_env({"OSL_SPARK_JIT": "c2"})


def test_the_kafka_broker_compiles_with_c1_only_unless_told_otherwise_on_both_backends(tmp_path):
    """C1 only by default (docs/decisions/0026-kafka-broker-c1.md: 44 % less broker CPU over a run of
    integration tests); ``OSL_KAFKA_JIT=tiered`` gives the JVM's own default, on the local broker's
    command line and in the variable docker-compose.yml hands the broker; anything else is refused."""
    from sandbox.services.compose import compose_environment
    from sandbox.services.local_processes import Layout, service_spec

    def both(environ):
        s = Settings.from_env({"OSL_STATE_DIR": str(tmp_path), **environ})
        return service_spec(s, Layout(s.state_dir), "kafka", {}).argv, compose_environment(s)["OSL_KAFKA_JIT_OPTS"]

    argv, opts = both({})
    assert "-XX:TieredStopAtLevel=1" in argv[: argv.index("-cp")] and opts == "-XX:TieredStopAtLevel=1"
    argv, opts = both({"OSL_KAFKA_JIT": "tiered"})
    assert not any("Tiered" in a for a in argv) and opts == ""
    assert "-XX:+UseG1GC" in argv  # the collector stays
    compose_file = (Path(__file__).resolve().parents[2] / "docker-compose.yml").read_text()
    assert "${OSL_KAFKA_JIT_OPTS--XX:TieredStopAtLevel=1}" in compose_file  # "-": an empty value means tiered
    with pytest.raises(SandboxError, match=r"OSL_KAFKA_JIT='c2' is not one of c1, tiered"):
        Settings.from_env({"OSL_KAFKA_JIT": "c2"})


def test_the_executors_collect_with_the_parallel_collector_unless_told_otherwise(tmp_path, monkeypatch):
    """Parallel by default (docs/decisions/0016-executor-gc.md: G1's concurrent threads took a sixth of the
    executors' CPU); ``OSL_SPARK_EXECUTOR_GC=g1`` swaps it and keeps the JIT and CDS options;
    the driver keeps the JVM's own; anything else is refused naming the variable."""
    from sandbox import artifacts
    from sandbox.jvm import class_data_sharing
    from sandbox.jvm.spark_session import spark_conf

    monkeypatch.setattr(artifacts, "spark_job_jars", lambda *_a, **_k: [])
    monkeypatch.setattr(class_data_sharing, "java_options", lambda _s: ("", "-XX:SharedArchiveFile=/x.jsa -Xshare:auto"))
    conf = lambda env: spark_conf(Settings.from_env({"OSL_STATE_DIR": str(tmp_path), **env}), progress=lambda _l: None)  # noqa: E731
    default = conf({})["spark.executor.extraJavaOptions"].split()
    assert default == ["-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC", "-XX:SharedArchiveFile=/x.jsa", "-Xshare:auto"]
    g1 = conf({"OSL_SPARK_EXECUTOR_GC": "g1"})
    assert g1["spark.executor.extraJavaOptions"].split() == [
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseG1GC",
        "-XX:SharedArchiveFile=/x.jsa",
        "-Xshare:auto",
    ]
    assert "-XX:+UseG1GC" in conf({})["spark.driver.extraJavaOptions"].split()  # the driver's own setting
    with pytest.raises(SandboxError, match=r"OSL_SPARK_EXECUTOR_GC='zgc' is not one of parallel, g1"):
        Settings.from_env({"OSL_SPARK_EXECUTOR_GC": "zgc"})


def test_the_driver_s_collector_is_its_own_setting(tmp_path, monkeypatch):
    """``OSL_SPARK_DRIVER_GC`` sets the driver's collector alone, beside the JIT and CDS options;
    the executors keep theirs; anything else is refused naming the variable."""
    from sandbox import artifacts
    from sandbox.jvm import class_data_sharing
    from sandbox.jvm.spark_session import spark_conf

    monkeypatch.setattr(artifacts, "spark_job_jars", lambda *_a, **_k: [])
    monkeypatch.setattr(class_data_sharing, "java_options", lambda _s: ("-XX:SharedArchiveFile=/d.jsa", ""))
    conf = lambda env: spark_conf(Settings.from_env({"OSL_STATE_DIR": str(tmp_path), **env}), progress=lambda _l: None)  # noqa: E731
    parallel = conf({"OSL_SPARK_DRIVER_GC": "parallel"})
    assert parallel["spark.driver.extraJavaOptions"].split()[1:] == [
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseParallelGC",
        "-XX:SharedArchiveFile=/d.jsa",
    ]
    assert parallel["spark.executor.extraJavaOptions"].split() == ["-XX:TieredStopAtLevel=1", "-XX:+UseParallelGC"]
    g1 = conf({"OSL_SPARK_DRIVER_GC": "g1", "OSL_SPARK_EXECUTOR_GC": "g1"})
    assert "-XX:+UseG1GC" in g1["spark.driver.extraJavaOptions"].split()
    assert "-XX:+UseParallelGC" not in g1["spark.driver.extraJavaOptions"]
    with pytest.raises(SandboxError, match=r"OSL_SPARK_DRIVER_GC='shenandoah' is not one of parallel, g1"):
        Settings.from_env({"OSL_SPARK_DRIVER_GC": "shenandoah"})
