"""Class-data sharing (sandbox/jvm/class_data_sharing.py): the archives exist after ``up`` and a
new application's JVMs really map them; where they cannot apply, nothing is passed."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from sandbox.artifacts import spark_runtime_home
from sandbox.errors import SandboxError
from sandbox.jvm import class_data_sharing
from sandbox.jvm.spark_session import _check_same_conf, driver_env, spark_conf


def test_compose_and_the_off_switch_get_no_archive(tmp_path):
    from sandbox import Settings

    local = Settings(state_dir=tmp_path, cache_dir=tmp_path, backend="local")
    assert class_data_sharing.enabled(local)
    assert not class_data_sharing.enabled(dataclasses.replace(local, backend="compose"))
    assert not class_data_sharing.enabled(dataclasses.replace(local, driver_host="jupyter"))
    # a driver outside the Spark image (this machine) under compose: the image's archives are not here
    assert not class_data_sharing.IMAGE_ARCHIVES.exist()
    assert class_data_sharing.java_options(dataclasses.replace(local, backend="compose")) == ("", "")
    assert not class_data_sharing.enabled(dataclasses.replace(local, cds=False))
    assert Settings.from_env({"OSL_STATE_DIR": str(tmp_path)}).cds
    assert not class_data_sharing.enabled(Settings.from_env({"OSL_STATE_DIR": str(tmp_path), "OSL_CDS": "0"}))


def test_a_driver_inside_the_spark_image_maps_the_image_s_archives_unless_turned_off(tmp_path, monkeypatch):
    from sandbox import Settings

    image = class_data_sharing.Archives(driver=tmp_path / "driver.jsa", executor=tmp_path / "executor.jsa")
    image.driver.write_bytes(b"archive")
    image.executor.write_bytes(b"archive")
    monkeypatch.setattr(class_data_sharing, "IMAGE_ARCHIVES", image)
    compose = Settings(state_dir=tmp_path, cache_dir=tmp_path, backend="compose", driver_host="jupyter")
    assert class_data_sharing.java_options(compose) == (
        f"-XX:SharedArchiveFile={tmp_path}/driver.jsa -Xshare:auto",
        f"-XX:SharedArchiveFile={tmp_path}/executor.jsa -Xshare:auto",
    )
    assert class_data_sharing.java_options(dataclasses.replace(compose, cds=False)) == ("", "")
    image.executor.unlink()  # an image built without them (a failed recording): nothing passed
    assert class_data_sharing.java_options(compose) == ("", "")


def test_a_jar_made_again_at_the_same_path_names_a_new_archive(tmp_path, monkeypatch):
    """The JVM refuses an archive once a classpath jar's size or mtime changed (a virtualenv
    made again at the same path, as every CI clone does): such an archive must not be named."""
    import os

    from sandbox import Settings

    jar = tmp_path / "spark-core.jar"
    jar.write_bytes(b"classes")
    monkeypatch.setattr(class_data_sharing, "classpath_jars", lambda _settings: [jar])
    settings = Settings(state_dir=tmp_path, cache_dir=tmp_path, backend="local")
    first = class_data_sharing.archives(settings)
    assert class_data_sharing.archives(settings) == first, "the same jars must name the same archive"
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    assert class_data_sharing.archives(settings) != first, "a jar written again must name a new archive"


def test_an_image_build_copies_the_archives_an_earlier_build_recorded_for_the_same_jars_and_options(tmp_path, monkeypatch):
    """A rebuild for a change in sandbox/ runs the warm-up step again: with the jars and the JVM
    options unchanged, it copies the archives from the build cache instead of recording."""
    import os

    from sandbox import Settings
    from sandbox.jvm import class_data_warmup as warmup

    monkeypatch.setenv("OSL_STATE_DIR", str(tmp_path / "state"))  # the driver's log config is written there
    jar = tmp_path / "spark-core.jar"
    jar.write_bytes(b"classes")
    monkeypatch.setattr(class_data_sharing, "classpath_jars", lambda _settings: [jar])
    monkeypatch.setattr(warmup, "spark_session", lambda *_a, **_k: pytest.fail("recorded, though a build recorded these"))
    settings = Settings.from_env()
    conf = spark_conf(settings)
    key = warmup._image_key(settings, conf)
    kept = tmp_path / "build-cache" / key
    kept.mkdir(parents=True)
    (kept / "driver.jsa").write_bytes(b"driver archive")
    (kept / "executor.jsa").write_bytes(b"executor archive")
    image = tmp_path / "image"
    assert warmup.main(["--image", str(image), "--reuse", str(tmp_path / "build-cache")]) == 0
    assert (image / "driver.jsa").read_bytes() == b"driver archive"
    assert (image / "executor.jsa").read_bytes() == b"executor archive"
    # what the archives depend on, changed: another key, so a recording
    other = {**conf, "spark.executor.extraJavaOptions": f"{conf.get('spark.executor.extraJavaOptions', '')} -XX:+UseParallelGC"}
    assert warmup._image_key(settings, other) != key
    other = {**conf, "spark.driver.extraClassPath": "/opt/first.jar"}  # the JVM checks the class path in order
    assert warmup._image_key(settings, other) != key
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns + 1_000_000_000))
    assert warmup._image_key(settings, conf) != key

    # a match that cannot be copied (pruned by another build meanwhile, a full disk): it records
    os.utime(jar, ns=(jar.stat().st_atime_ns, jar.stat().st_mtime_ns - 1_000_000_000))
    assert warmup._image_key(settings, conf) == key

    def unusable(*_args):
        raise OSError("No space left on device")

    class Recording(Exception):
        pass

    def record(*_args, **_kwargs):
        raise Recording

    monkeypatch.setattr(warmup, "_copy", unusable)
    monkeypatch.setattr(warmup, "spark_session", record)
    with pytest.raises(Recording):
        warmup.main(["--image", str(tmp_path / "image2"), "--reuse", str(tmp_path / "build-cache")])


def test_recording_an_archive_keeps_it_and_the_two_newest_others(tmp_path):
    """Every virtualenv made again names a new archive of some 260 MB: the older ones go."""
    import os

    for i, name in enumerate(["oldest", "old", "newer", "newest"]):
        folder = tmp_path / name
        folder.mkdir()
        (folder / "driver.jsa").write_bytes(b"x")
        os.utime(folder, (1_000 + i, 1_000 + i))
    current = tmp_path / "current"
    current.mkdir()
    removed = class_data_sharing.prune(tmp_path, keep=current)
    assert sorted(p.name for p in removed) == ["old", "oldest"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["current", "newer", "newest"]
    assert class_data_sharing.prune(tmp_path, keep=current) == []


def test_every_sandbox_on_a_cache_gives_its_executors_one_classpath_and_one_archive(tmp_path, monkeypatch):
    """``spark-class`` puts the workers' SPARK_CONF_DIR on every executor's classpath, and the JVM
    refuses an archive recorded with another classpath: with a conf folder per sandbox, the
    archive the bench's sandbox recorded was refused by the test sandbox's executors."""
    from sandbox import Settings
    from sandbox.services.local_processes import Layout, service_spec

    jar = tmp_path / "spark-core.jar"
    jar.write_bytes(b"classes")
    monkeypatch.setattr(class_data_sharing, "classpath_jars", lambda _settings: [jar])
    bench = Settings(state_dir=tmp_path / ".sandbox-bench", cache_dir=tmp_path / "cache", backend="local")
    tests = dataclasses.replace(bench, state_dir=tmp_path / ".sandbox-test")
    conf_dirs = {service_spec(s, Layout(s.state_dir), "spark-worker-1", {}).env["SPARK_CONF_DIR"] for s in (bench, tests)}
    assert len(conf_dirs) == 1, f"the executors' classpaths differ by sandbox: {sorted(conf_dirs)}"
    assert class_data_sharing.archives(bench) == class_data_sharing.archives(tests)
    # the workers (so the executors) and the drivers run from one SPARK_HOME, the archive's
    homes = {service_spec(s, Layout(s.state_dir), "spark-worker-1", {}).env["SPARK_HOME"] for s in (bench, tests)}
    homes |= {driver_env(s)["SPARK_HOME"] for s in (bench, tests)}
    assert homes == {str(spark_runtime_home(bench))}, homes


def _install(root: Path, jar_bytes: bytes = b"classes") -> Path:
    """A pyspark-shaped install: launch scripts, a jar with its content's time, the workers' zip."""
    from sandbox.jvm.jar_times import pin

    (root / "bin").mkdir(parents=True)
    (root / "bin" / "spark-class").write_text("#!/bin/sh\n")
    (root / "bin" / "spark-class").chmod(0o755)
    (root / "jars").mkdir()
    (root / "jars" / "spark-core.jar").write_bytes(jar_bytes)
    pin(root / "jars")
    (root / "jars" / "connect-repl").mkdir()  # the Connect shell's jars: on no JVM's classpath
    (root / "jars" / "connect-repl" / "repl.jar").write_bytes(b"repl")
    (root / "python" / "lib").mkdir(parents=True)
    (root / "python" / "lib" / "pyspark.zip").write_bytes(b"zip")
    (root / "sql").mkdir()  # Python sources: not what a JVM reads
    (root / "sql" / "x.py").write_text("x = 1\n")
    return root


def test_every_checkout_with_the_same_pyspark_runs_its_jvms_from_one_spark_home(tmp_path, monkeypatch):
    """A class-data archive names its jars by path: with SPARK_HOME inside each virtualenv, every
    fresh clone recorded a new one. Two installs with the same bytes at two paths (two clones'
    virtualenvs, each file written at its own time) name one mirror in the cache, whose files are
    the first install's; another jar names another; compose keeps the install."""
    import os

    from sandbox import Settings, artifacts

    first, second = _install(tmp_path / "clone-a" / "pyspark"), _install(tmp_path / "clone-b" / "pyspark")
    os.utime(second / "bin" / "spark-class", (1, 1))  # pip writes files with the install's time
    os.utime(second / "jars" / "connect-repl" / "repl.jar", (1, 1))
    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", backend="local")
    monkeypatch.setattr(artifacts, "_runtime_homes", {})
    monkeypatch.setattr(artifacts, "spark_home", lambda: first)
    home = artifacts.spark_runtime_home(settings)
    assert home.parent == settings.cache_dir / "spark-home", home
    assert (home / "jars" / "spark-core.jar").samefile(first / "jars" / "spark-core.jar")
    assert os.access(home / "bin" / "spark-class", os.X_OK) and (home / "python" / "lib" / "pyspark.zip").exists()
    assert not (home / "sql").exists() and not (home / "jars" / "connect-repl").exists()
    monkeypatch.setattr(artifacts, "spark_home", lambda: second)
    assert artifacts.spark_runtime_home(settings) == home, "the same pyspark in another checkout must name the same mirror"
    third = _install(tmp_path / "clone-c" / "pyspark", jar_bytes=b"other classes")
    monkeypatch.setattr(artifacts, "spark_home", lambda: third)
    other = artifacts.spark_runtime_home(settings)
    assert other != home and (other / "jars" / "spark-core.jar").read_bytes() == b"other classes"
    assert sorted(p.name for p in (settings.cache_dir / "spark-home").iterdir()) == sorted([home.name, other.name])
    compose = dataclasses.replace(settings, backend="compose")
    assert artifacts.spark_runtime_home(compose) == third
    # pyspark imported from a zip (a driver under spark-submit): no distribution to mirror
    zipped = tmp_path / "pkg" / "pyspark.zip" / "pyspark"
    monkeypatch.setattr(artifacts, "spark_home", lambda: zipped)
    assert artifacts.spark_runtime_home(settings) == zipped


def test_sessions_that_differ_only_in_the_archive_are_alike():
    flag = "-XX:SharedArchiveFile=/c/driver.jsa -Xshare:auto"
    log = "-Dlog4j2.configurationFile=file:/s/driver-log4j2.properties"
    assert class_data_sharing.without_archive(f"{log} {flag}") == log
    # a session started before the archive existed is reused by a call that now names it
    _check_same_conf(
        {"spark.driver.extraJavaOptions": f"{log} --add-opens=x"}, {"spark.driver.extraJavaOptions": f"{log} {flag}"}
    )
    with pytest.raises(SandboxError, match="extraJavaOptions"):
        _check_same_conf(
            {"spark.driver.extraJavaOptions": f"{log} {flag}"},
            {"spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:/other {flag}"},
        )


def _maps(pid: int) -> str:
    return Path(f"/proc/{pid}/maps").read_text()


@pytest.mark.integration
def test_a_new_application_maps_both_archives(sandbox, spark):
    """The archive is recorded by ``up`` (the ``sandbox`` fixture), and the shared session's
    driver and executors were started with it: each JVM has the file mapped in memory (a
    classpath mismatch would make the JVM drop it with a warning, and this fails)."""
    settings = sandbox.settings
    home = class_data_sharing.java_home(settings)
    if not home or not (home / "bin" / "jcmd").exists():
        pytest.skip(f"no jcmd in {home}: a JRE cannot record class-data archives (.ci/run installs a JDK)")
    found = class_data_sharing.archives(settings)
    assert found.exist(), f"no class-data archive in {found.driver.parent} after up (see logs/cds-warmup.log)"
    conf = spark_conf(settings)
    assert str(found.executor) in conf["spark.executor.extraJavaOptions"]
    driver_pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # noqa: SLF001
    assert str(found.driver) in _maps(driver_pid), f"the driver JVM {driver_pid} did not map {found.driver}"
    app = spark.sparkContext.applicationId
    spark.range(4).repartition(2).count()  # executors are up
    executors = class_data_sharing.executor_pids(app)
    assert executors, f"no executor process of {app}"
    for pid in executors:
        assert str(found.executor) in _maps(pid), f"executor JVM {pid} of {app} did not map {found.executor}"


def test_without_jcmd_up_says_so_and_goes_on(tmp_path):
    from sandbox import Settings

    (tmp_path / "jre" / "bin").mkdir(parents=True)
    said: list[str] = []
    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", java_home=tmp_path / "jre")
    assert class_data_sharing.ensure(settings, progress=said.append) is False
    assert said and "no jcmd in" in said[0] and "openjdk-17-jdk-headless" in said[0], said
