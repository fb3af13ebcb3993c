"""Class-data sharing for the sandbox's Spark JVMs: start every application warm.

A Spark application on this sandbox starts two cold JVMs of its own (the driver and one
executor per worker), and on two cores the first micro-batch of a streaming query pays for
it: on a 300-record stateful batch 11-12 s, against under 2 s for the same batch once the
JVMs are warm (measured while writing this module). Much of that is class loading and
verification from some 800 MB of jars. The workbook and the tests start a fresh application
dozens of times.

JDK 17 can map the classes a JVM has loaded from an archive instead of reading them from the
jars again (class-data sharing; a *dynamic* archive sits on top of the JDK's own). This
module makes one archive for the driver and one for the executors, once per machine and
classpath, by running a small workload shaped like the job (Kafka source, a Python stateful
operator on RocksDB, a Parquet file sink on ``s3a://``) and asking both JVMs to dump what
they loaded (``jcmd <pid> VM.cds dynamic_dump``). :func:`java_options` then adds
``-XX:SharedArchiveFile`` to every later application. A JVM whose classpath does not match
an archive prints a warning and starts the ordinary way, so an archive can make a start
faster but never break it.

Under compose the archives are the Spark image's own, recorded while it is built
(``IMAGE_ARCHIVES``; ``python -m sandbox.jvm.class_data_warmup --image``): in an image every
jar's path and modification time are fixed, so they always match it. A driver inside the
image (a notebook's kernel in the ``jupyter`` container) maps them and has its executors map
theirs; a driver on the host under compose maps none. The measurements:
docs/decisions/0017-class-data-archives.md, docs/decisions/0029-class-data-archives-in-the-image.md.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from sandbox.artifacts import Progress, java_candidate, prune_folders, say
from sandbox.settings import Settings

#: Bumped when the workload changes what the archives should hold.
_FORMAT = 2
_FLAG = "-XX:SharedArchiveFile="


@dataclass(frozen=True)
class Archives:
    driver: Path
    executor: Path

    def exist(self) -> bool:
        return self.driver.is_file() and self.executor.is_file()


#: Where the Spark image keeps the archives its build recorded (docker/Dockerfile).
IMAGE_ARCHIVES = Archives(driver=Path("/opt/osl-cds/driver.jsa"), executor=Path("/opt/osl-cds/executor.jsa"))


def java_home(settings: Settings) -> Path | None:
    """The JDK the sandbox's ``java`` belongs to (symlinks resolved: ``jcmd`` sits beside it)."""
    java = java_candidate(settings.java_home)
    return java.resolve().parent.parent if java else None


def classpath_jars(settings: Settings) -> list[Path]:
    """The jars a Spark JVM here loads classes from: pyspark's own (as its SPARK_HOME names
    them) and the job's."""
    from sandbox.artifacts import spark_job_jars, spark_runtime_home

    own = sorted((spark_runtime_home(settings) / "jars").glob("*.jar"))
    return own + sorted(Path(j) for j in spark_job_jars(settings, progress=lambda _line: None))


def archive_key(settings: Settings, *extra: str) -> str:
    """What an archive recorded here is valid for, as a short hash: the JDK, pyspark, the Spark
    daemons' conf folder and every classpath jar's path, size and modification time, and
    ``extra`` (what else the caller's archive depends on). The JVM refuses an archive when a jar
    on its classpath changed size or modification time ("The top archive failed to load"), as
    when a virtualenv is made again at the same path, so each jar's size and mtime are part of
    the key, not only its path; the executors' classpath also holds the conf folder's path."""
    import pyspark

    from sandbox.services.local_processes import spark_conf_dir

    home = java_home(settings)
    java = home / "bin" / "java" if home else None
    parts = [
        str(_FORMAT),
        str(java),
        str(java.stat().st_mtime_ns) if java and java.exists() else "-",
        pyspark.__version__,
        str(spark_conf_dir(settings)),
        *(f"{jar} {st.st_size} {st.st_mtime_ns}" for jar in classpath_jars(settings) for st in [jar.stat()]),
        *extra,
    ]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:16]


def archives(settings: Settings) -> Archives:
    """Where this machine's archives for the current JDK, Spark and job jars live (they may
    not exist yet), named by :func:`archive_key`, so a stale archive is never named."""
    folder = settings.cache_dir / "cds" / archive_key(settings)
    return Archives(driver=folder / "driver.jsa", executor=folder / "executor.jsa")


def executor_pids(app_id: str) -> list[int]:
    """The executor JVMs of application ``app_id`` running on this machine."""
    import psutil

    return [
        proc.pid
        for proc in psutil.process_iter(["cmdline"])
        if any("CoarseGrainedExecutorBackend" in part for part in proc.info["cmdline"] or [])
        and app_id in (proc.info["cmdline"] or [])
    ]


def enabled(settings: Settings) -> bool:
    """Archives are for the local backend, whose executors read this machine's cache."""
    return settings.backend == "local" and not settings.driver_host and settings.cds


def java_options(settings: Settings) -> tuple[str, str]:
    """Extra JVM options for (driver, executor): the archives when they exist, else nothing:
    this machine's on the local backend, the image's for a driver inside the Spark image."""
    if settings.backend == "compose" and settings.cds:
        found = IMAGE_ARCHIVES
    elif enabled(settings):
        found = archives(settings)
    else:
        return "", ""
    if not found.exist():
        return "", ""
    return f"{_FLAG}{found.driver} -Xshare:auto", f"{_FLAG}{found.executor} -Xshare:auto"


def without_archive(options: str) -> str:
    """``options`` without the archive flags: two sessions that differ only in them are alike."""
    return " ".join(o for o in options.split() if not o.startswith(_FLAG) and o != "-Xshare:auto")


def ensure(settings: Settings, *, progress: Progress = say, timeout_s: float = 300.0) -> bool:
    """Make the archives if this machine has none for the current classpath. A failure is
    reported and leaves applications to start without archives; it never fails the caller.
    True when archives exist afterwards."""
    if not enabled(settings):
        return False
    home = java_home(settings)
    if not home or not (home / "bin" / "jcmd").exists():
        progress(
            f"[sandbox] no jcmd in {home or 'a JDK on PATH'}: Spark applications start without a class-data "
            f"archive (install a JDK, e.g. apt-get install openjdk-17-jdk-headless, to make one)"
        )
        return False
    found = archives(settings)
    if found.exist():
        return True
    progress(
        "[sandbox] warming Spark once to record a class-data archive (about 60 s; later applications "
        "start several seconds faster)"
    )
    started = time.monotonic()
    log = settings.state_dir / "logs" / "cds-warmup.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "OSL_STATE_DIR": str(settings.state_dir), "OSL_CACHE_DIR": str(settings.cache_dir)}
    try:
        with log.open("w") as out:
            done = subprocess.run(
                [sys.executable, "-m", "sandbox.jvm.class_data_warmup"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=timeout_s,
            )
        failed = None if done.returncode == 0 else f"exit status {done.returncode}"
    except subprocess.TimeoutExpired:
        failed = f"not done within {timeout_s:g} s"
    if failed or not found.exist():
        progress(
            f"[sandbox] no class-data archive ({failed or 'the dump wrote nothing'}; see {log}); "
            f"Spark applications start without one"
        )
        return False
    progress(f"[sandbox] class-data archive recorded in {found.driver.parent} ({time.monotonic() - started:.0f}s)")
    if removed := prune(found.driver.parent.parent, keep=found.driver.parent):
        progress(
            f"[sandbox] removed {len(removed)} older class-data archive(s) ({_KEPT} kept): {', '.join(p.name for p in removed)}"
        )
    return True


#: Archives kept beside the current one: another checkout on this machine (a CI clone) may use it.
_KEPT = 2


def prune(root: Path, *, keep: Path, kept: int = _KEPT) -> list[Path]:
    """Remove the archive folders under ``root`` but ``keep`` and the ``kept`` newest others.
    Each archive is some 260 MB; without this they piled up in the cache. A JVM already running
    keeps its mapped archive."""
    return prune_folders(root, keep=keep, kept=kept)
