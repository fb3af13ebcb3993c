"""Fetch and cache the stack's artifacts: Kafka and Spark-job jars, and a MinIO binary.

Jars are resolved with dependencies by the Apache Ivy that ships inside pyspark (the same
resolver ``spark.jars.packages`` uses), from Maven Central or the mirror in
``Settings.maven_repo``. MinIO is built once from its Go module. Everything lands under
``Settings.cache_dir``; a second call fetches nothing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from xml.sax.saxutils import quoteattr

from sandbox import versions
from sandbox.errors import ArtifactFetchError, SandboxError, ToolMissingError
from sandbox.settings import Settings

Progress = Callable[[str], None]

_COMPLETE = ".complete"


def say(message: str) -> None:
    """Default progress sink: one line on stderr, so stdout stays machine-readable."""
    print(message, file=sys.stderr, flush=True)


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def java_executable(java_home: Path | None = None) -> Path:
    """A Java >= 17 launcher from ``java_home`` (``Settings.java_home``, read from JAVA_HOME
    at the edge) or PATH, or a ToolMissingError that says how to get one."""
    fix = "install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    candidate = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    if not candidate or not Path(candidate).exists():
        raise ToolMissingError("Java", f"{versions.JAVA_MIN}+", fix)
    out = subprocess.run([str(candidate), "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not match:
        raise ToolMissingError("Java", f"{versions.JAVA_MIN}+", fix, found=f"unreadable version from {candidate}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8" style
        major = int(match.group(2))
    if major < versions.JAVA_MIN:
        raise ToolMissingError("Java", f"{versions.JAVA_MIN}+", fix, found=f"Java {major} at {candidate}")
    return Path(candidate)


def _ivy_jar() -> Path:
    jars = sorted((spark_home() / "jars").glob("ivy-*.jar"))
    if not jars:
        raise SandboxError(
            f"no ivy-*.jar in {spark_home() / 'jars'}: the pyspark install is incomplete; "
            f"reinstall it with `pip install --force-reinstall pyspark=={versions.PYSPARK}`"
        )
    return jars[0]


def _ivy_settings(settings: Settings, path: Path) -> Path:
    root = f" root={quoteattr(settings.maven_repo.rstrip('/') + '/')}" if settings.maven_repo else ""
    cache = quoteattr(str(settings.cache_dir / "ivy"))
    path.write_text(
        "<ivysettings>\n"
        '  <settings defaultResolver="central"/>\n'
        f"  <caches defaultCacheDir={cache}/>\n"
        f'  <resolvers><ibiblio name="central" m2compatible="true"{root}/></resolvers>\n'
        "</ivysettings>\n"
    )
    return path


def _registry_name(settings: Settings) -> str:
    return f"the Maven mirror {settings.maven_repo}" if settings.maven_repo else "Maven Central"


def resolve_jars(
    settings: Settings,
    name: str,
    coordinates: list[tuple[str, str, str]],
    *,
    intransitive: list[tuple[str, str, str]] = [],  # noqa: B006 (never mutated)
    drop_provided_by_spark: bool = False,
    progress: Progress = say,
) -> list[Path]:
    """Resolve ``coordinates`` with their runtime dependencies, and ``intransitive`` alone,
    into ``cache/jars/<name>``. With ``drop_provided_by_spark``, jars whose artifact the
    pyspark distribution already ships (any version) are left out, so the class path never
    holds two copies of a library (e.g. the SDK's netty 4.1 next to Spark's 4.2).

    Returns the jar paths. A directory that was completed before is reused as is.
    """
    dest = settings.cache_dir / "jars" / name
    marker = dest / _COMPLETE
    wanted = [":".join(c) for c in coordinates] + [":".join(c) + "@intransitive" for c in intransitive]
    if drop_provided_by_spark:
        wanted.append("drop-provided-by-spark")
    if marker.exists():
        try:
            record = json.loads(marker.read_text())
        except ValueError:  # an older cache layout
            record = {}
        if record.get("coordinates") == wanted:
            return [dest / jar for jar in record["jars"]]
        progress(f"[artifacts] {dest} was resolved for other coordinates; resolving again")
    java = java_executable(settings.java_home)
    staging = dest.with_name(name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    ivy_settings = _ivy_settings(settings, staging / "ivysettings.xml")
    registry = _registry_name(settings)
    plan = [(c, True) for c in coordinates] + [(c, False) for c in intransitive]
    for (group, artifact, version), transitive in plan:
        coord = f"{group}:{artifact}:{version}"
        progress(f"[artifacts] resolving {coord} and its dependencies from {registry} ...")
        cmd = [
            str(java), "-jar", str(_ivy_jar()),
            "-settings", str(ivy_settings),
            "-dependency", group, artifact, version,
            "-confs", "default",
            "-types", "jar", "bundle",
            "-retrieve", str(staging / "[artifact]-[revision](-[classifier]).[ext]"),
            *([] if transitive else ["-notransitive"]),
        ]  # fmt: skip
        tail = _run_streaming(cmd, progress, _ivy_progress_line, label=coord)
        if tail is not None:
            raise ArtifactFetchError(coord, registry, _ivy_failure(tail))
    if drop_provided_by_spark:
        provided = {_artifact_name(j.name) for j in (spark_home() / "jars").glob("*.jar")}
        for jar in staging.glob("*.jar"):
            if _artifact_name(jar.name) in provided:
                jar.unlink()
    jars = sorted(p.name for p in staging.glob("*.jar"))
    if not jars:
        raise ArtifactFetchError(name, registry, "the resolver finished but retrieved no jar")
    (staging / "ivysettings.xml").unlink()
    (staging / _COMPLETE).write_text(json.dumps({"coordinates": wanted, "jars": jars}, indent=1))
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    size = sum((dest / j).stat().st_size for j in jars) / 2**20
    progress(f"[artifacts] {len(jars)} jars ({size:.0f} MiB) cached in {dest}")
    return [dest / j for j in jars]


def _artifact_name(jar: str) -> str:
    """``netty-codec-http-4.1.126.Final.jar`` -> ``netty-codec-http`` (the name before the version)."""
    return re.sub(r"-\d[^-]*(-[A-Za-z][\w.-]*)?\.jar$", "", jar)


def _ivy_progress_line(line: str) -> str | None:
    match = re.search(r"downloading \S+/([^/\s]+\.jar)", line)
    return f"[artifacts]   downloading {match.group(1)}" if match else None


def _ivy_failure(tail: list[str]) -> str:
    interesting = [
        line.strip() for line in tail
        if any(k in line for k in ("UNRESOLVED", "not found", "Server access error", "unresolved", "FAILED", "Exception"))
    ]  # fmt: skip
    return "; ".join(dict.fromkeys(interesting[:6])) or " / ".join(line.strip() for line in tail[-5:])


def _run_streaming(
    cmd: list[str],
    progress: Progress,
    pick: Callable[[str], str | None],
    *,
    label: str,
    env: dict[str, str] | None = None,
    heartbeat_s: float = 20.0,
) -> list[str] | None:
    """Run ``cmd``, turning chosen output lines into progress, with a heartbeat while it is quiet.

    Returns None on success, else the last lines of output.
    """
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(heartbeat_s):
            progress(f"[artifacts]   still working on {label} ({time.monotonic() - started:.0f}s)")

    threading.Thread(target=beat, daemon=True).start()
    tail: list[str] = []
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            tail = (tail + [line.rstrip()])[-40:]
            shown = pick(line)
            if shown:
                progress(shown)
        rc = proc.wait()
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
    return None if rc == 0 else tail


def kafka_jars(settings: Settings, *, progress: Progress = say) -> list[Path]:
    """The Kafka broker and its dependencies (KRaft mode needs nothing else)."""
    return resolve_jars(settings, f"kafka-{versions.KAFKA}", versions.kafka_broker(), progress=progress)


def spark_job_jars(settings: Settings, *, progress: Progress = say) -> list[Path]:
    """Jars the streaming job puts on the class path: the Kafka source and the S3A connector
    with the AWS SDK modules it uses, less what pyspark already ships."""
    return resolve_jars(
        settings, f"spark-job-{versions.PYSPARK}", versions.spark_job_packages(),
        intransitive=versions.spark_job_intransitive(), drop_provided_by_spark=True, progress=progress,
    )  # fmt: skip


def minio_binary(settings: Settings, *, progress: Progress = say) -> Path:
    """A MinIO server binary: one on PATH, else one built (once) from the pinned Go module."""
    on_path = shutil.which("minio")
    if on_path:
        return Path(on_path)
    bin_dir = settings.cache_dir / "minio" / versions.MINIO_VERSION
    binary = bin_dir / "minio"
    if binary.exists():
        return binary
    go = _go_executable()
    module = f"{versions.MINIO_MODULE}@{versions.MINIO_VERSION}"
    progress(f"[artifacts] building MinIO from {module} with {go} (once; a few minutes) ...")
    env = dict(os.environ, GOBIN=str(bin_dir), CGO_ENABLED="0")
    bin_dir.mkdir(parents=True, exist_ok=True)
    tail = _run_streaming(
        [str(go), "install", module],
        progress,
        lambda line: f"[artifacts]   {line.strip()}" if line.startswith("go: downloading github.com/minio/") else None,
        label="the MinIO build",
        env=env,
        heartbeat_s=30.0,
    )
    if tail is not None or not binary.exists():
        joined = " / ".join(line for line in (tail or [])[-6:])
        if any(k in joined for k in ("dial tcp", "proxy", "403", "404", "no such host", "i/o timeout")):
            raise ArtifactFetchError(module, "the Go module proxy", joined)
        raise SandboxError(f"building MinIO ({module}) failed: {joined}")
    progress(f"[artifacts] MinIO built: {binary}")
    return binary


def _go_executable() -> Path:
    need = ".".join(map(str, versions.GO_MIN)) + "+"
    fix = (
        "it is needed once, to build MinIO; install Go (https://go.dev/doc/install, or "
        "apt-get install golang-go if your distribution ships 1.24+), or put a `minio` "
        "server binary on PATH"
    )
    go = shutil.which("go")
    if not go:
        raise ToolMissingError("Go", need, fix)
    out = subprocess.run([go, "version"], capture_output=True, text=True).stdout
    match = re.search(r"go(\d+)\.(\d+)", out)
    if not match:
        raise ToolMissingError("Go", need, fix, found=out.strip() or "unreadable `go version`")
    found = (int(match.group(1)), int(match.group(2)))
    if found < versions.GO_MIN:
        raise ToolMissingError("Go", need, fix, found=f"go{found[0]}.{found[1]}")
    return Path(go)


def fetch_all(settings: Settings, *, progress: Progress = say) -> dict[str, object]:
    """Everything the local backend and the job need; cheap when the cache is warm."""
    return {
        "java": java_executable(settings.java_home),
        "kafka_jars": kafka_jars(settings, progress=progress),
        "spark_job_jars": spark_job_jars(settings, progress=progress),
        "minio": minio_binary(settings, progress=progress),
    }
