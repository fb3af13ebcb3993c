"""Fetch and cache the stack's artifacts: Kafka and Spark-job jars, and a MinIO binary.

Jars are resolved with dependencies by the Apache Ivy that ships inside pyspark (the same
resolver ``spark.jars.packages`` uses), from Maven Central or the mirror in
``Settings.maven_repo``. MinIO is built once from its Go module. Everything lands under
``Settings.cache_dir``; a second call fetches nothing.
"""

from __future__ import annotations

import contextlib
import importlib.resources
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


_ONE_LINE_AT_A_TIME = threading.RLock()


def _whole_lines(progress: Progress) -> Progress:
    """``progress`` for callers on several threads (the resolvers, the MinIO build): one line at
    a time, never two run into one."""

    def line(message: str) -> None:
        with _ONE_LINE_AT_A_TIME:
            progress(message)

    return line


def spark_home() -> Path:
    """The Spark distribution inside the installed pyspark package."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


#: Mirrors kept beside the current one (another checkout's sandbox may run from one).
_RUNTIME_KEPT = 2


def _runtime_files(install: Path) -> list[Path]:
    """What Spark's JVMs and scripts read from SPARK_HOME: the launch scripts, the jars of the
    classpath (``jars/*``: spark-class does not descend into ``jars/connect-repl/``, the Connect
    shell's), and the zips the Python workers import pyspark from."""
    scripts = [p for part in ("bin", "python/lib") for p in (install / part).rglob("*") if p.is_file()]
    return sorted([*(install / "jars").glob("*.jar"), *scripts])


def _runtime_key(install: Path, files: list[Path]) -> str:
    """Names the mirror by content: each jar by its size and modification time (given from its
    bytes by sandbox/jvm/jar_times.py, as the JVM checks them), every other file by its bytes."""
    import hashlib

    digest = hashlib.sha256(versions.PYSPARK.encode())
    for path in files:
        st = path.stat()
        digest.update(f"\n{path.relative_to(install)} {st.st_size} {st.st_mode & 0o777:o} ".encode())
        digest.update(str(st.st_mtime_ns).encode() if path.suffix == ".jar" else hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def spark_runtime_home(settings: Settings) -> Path:
    """The SPARK_HOME of the JVMs this machine runs for the local backend (master, workers, and
    so executors, and drivers): pyspark's distribution mirrored into the cache, at a path its
    content names, made on first use (hard links, or copies across file systems).

    A class-data archive holds the path of every jar it was recorded with, and the JVM maps it
    only where the classpath names the same files (sandbox/jvm/class_data_sharing.py). Inside a
    virtualenv those paths change with every checkout, so each fresh clone (CI's) recorded a new
    archive, about 60 s of two cores before its first application; every virtualenv with the same
    pyspark names the same mirror. Under compose the image's own SPARK_HOME serves; this is
    the install itself there (docs/decisions/0017-class-data-archives.md)."""
    install = spark_home()
    if settings.backend != "local" or settings.driver_host:
        return install
    known = _runtime_homes.get((install, settings.cache_dir))
    if known is not None and (known / _COMPLETE).exists():
        return known
    files = _runtime_files(install)
    if not any(path.suffix == ".jar" for path in files):
        # not a distribution: pyspark imported from a zip (a driver under spark-submit, whose
        # SPARK_HOME is the caller's); nothing to mirror, and no archive of ours will match
        return install
    root = settings.cache_dir / "spark-home"
    home = root / f"{versions.PYSPARK}-{_runtime_key(install, files)}"
    if not (home / _COMPLETE).exists():
        _mirror(install, files, home)
    _runtime_homes[(install, settings.cache_dir)] = home
    return home


#: (install, cache) -> mirror, for this process: service specs ask for it on every status call.
_runtime_homes: dict[tuple[Path, Path], Path] = {}


def _mirror(install: Path, files: list[Path], home: Path) -> None:
    root = home.parent
    # staged outside ``root``: prune() below must not see another process's half-made mirror
    staging = root.with_name(f"{root.name}.partial") / f"{home.name}-{os.getpid()}-{threading.get_ident()}"
    shutil.rmtree(staging, ignore_errors=True)
    for path in files:
        target = staging / path.relative_to(install)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)  # the same inode: its size and time are the install's
        except OSError:
            shutil.copy2(path, target)
    (staging / _COMPLETE).write_text(str(install))
    root.mkdir(parents=True, exist_ok=True)
    try:
        staging.rename(home)
    except OSError:  # another process made it first
        shutil.rmtree(staging, ignore_errors=True)
        return
    prune_folders(root, keep=home, kept=_RUNTIME_KEPT)


def prune_folders(root: Path, *, keep: Path, kept: int) -> list[Path]:
    """Remove the folders under ``root`` but ``keep`` and the ``kept`` newest others (by their
    modification time); returns those removed. For cache entries named by a key, where another
    checkout may still use one of the newest."""
    others = sorted((d for d in root.iterdir() if d.is_dir() and d != keep), key=lambda d: d.stat().st_mtime, reverse=True)
    removed = others[kept:]
    for folder in removed:
        shutil.rmtree(folder, ignore_errors=True)
    return removed


def java_candidate(java_home: Path | None = None) -> Path | None:
    """The ``java`` launcher ``java_home`` (``Settings.java_home``, read from JAVA_HOME at the
    edge) or PATH names, unchecked; None when there is none."""
    candidate = Path(java_home) / "bin" / "java" if java_home else shutil.which("java")
    return Path(candidate) if candidate and Path(candidate).exists() else None


def java_executable(java_home: Path | None = None) -> Path:
    """A Java >= 17 launcher from :func:`java_candidate`, or a ToolMissingError that says how
    to get one."""
    fix = "install it (Debian/Ubuntu: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    candidate = java_candidate(java_home)
    if not candidate:
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


def _ivy_settings(settings: Settings, path: Path, cache_dir: Path) -> Path:
    root = f" root={quoteattr(settings.maven_repo.rstrip('/') + '/')}" if settings.maven_repo else ""
    cache = quoteattr(str(cache_dir))
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
    registry = _registry_name(settings)
    progress = _whole_lines(progress)
    plan = [(c, True) for c in coordinates] + [(c, False) for c in intransitive]
    # One resolver per coordinate, at once: each mostly waits on the registry's round trips, one
    # POM after another (on an empty cache 116 s one after the other, about 50 s side by side).
    # Each has its own folder and Ivy cache, as Ivy's cache takes no lock between processes.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=min(len(plan), RESOLVERS_AT_ONCE), thread_name_prefix=f"resolve-{name}") as pool:
        parts = [staging / f"part-{i}" for i in range(len(plan))]
        runs = [
            pool.submit(_resolve_one, settings, java, coord, transitive, part, registry, progress)
            for (coord, transitive), part in zip(plan, parts, strict=True)
        ]
        errors = [run.exception() for run in runs]  # every resolver ends before one error is raised
    for error in errors:
        if error is not None:
            raise error
    for part in parts:  # their union, as one resolver retrieving into one folder gave
        for jar in part.iterdir():
            if not (staging / jar.name).exists():
                jar.rename(staging / jar.name)
        shutil.rmtree(part)
    if drop_provided_by_spark:
        provided = {_artifact_name(j.name) for j in (spark_home() / "jars").glob("*.jar")}
        for jar in staging.glob("*.jar"):
            if _artifact_name(jar.name) in provided:
                jar.unlink()
    jars = sorted(p.name for p in staging.glob("*.jar"))
    if not jars:
        raise ArtifactFetchError(name, registry, "the resolver finished but retrieved no jar")
    (staging / _COMPLETE).write_text(json.dumps({"coordinates": wanted, "jars": jars}, indent=1))
    shutil.rmtree(dest, ignore_errors=True)
    staging.rename(dest)
    size = sum((dest / j).stat().st_size for j in jars) / 2**20
    progress(f"[artifacts] {len(jars)} jars ({size:.0f} MiB) cached in {dest}")
    return [dest / j for j in jars]


#: Resolvers (one JVM each) run at once per jar set: the spark-job set has five coordinates.
RESOLVERS_AT_ONCE = 5


def _resolve_one(
    settings: Settings,
    java: Path,
    coordinate: tuple[str, str, str],
    transitive: bool,
    folder: Path,
    registry: str,
    progress: Progress,
) -> None:
    """Resolve one coordinate (with its runtime dependencies when ``transitive``) into ``folder``."""
    group, artifact, version = coordinate
    coord = f"{group}:{artifact}:{version}"
    folder.mkdir(parents=True)
    log = _log_path(settings, f"resolve-{coord}")
    cache = settings.cache_dir / "ivy" / "per-resolution" / log.stem
    ivy_settings = _ivy_settings(settings, folder.with_name(folder.name + ".ivysettings.xml"), cache)
    progress(f"[artifacts] resolving {coord} and its dependencies from {registry} (log: {log}) ...")
    cmd = [
        str(java),
        "-jar",
        str(_ivy_jar()),
        "-settings",
        str(ivy_settings),
        "-dependency",
        group,
        artifact,
        version,
        "-confs",
        "default",
        "-types",
        "jar",
        "bundle",
        "-retrieve",
        str(folder / "[artifact]-[revision](-[classifier]).[ext]"),
        *([] if transitive else ["-notransitive"]),
    ]
    started = time.monotonic()
    _, tail = _run_streaming(cmd, progress, _ivy_step, label=coord, unit="dependencies found or jars downloaded", log=log)
    ivy_settings.unlink()
    if tail is not None:
        raise ArtifactFetchError(coord, registry, _ivy_failure(tail) + f" (whole output: {log})")
    downloaded = sum(_ivy_download(line) for line in log.read_text(encoding="utf-8").splitlines())
    progress(f"[artifacts]   {coord}: {downloaded} jars downloaded in {time.monotonic() - started:.0f}s")


def _artifact_name(jar: str) -> str:
    """``netty-codec-http-4.1.126.Final.jar`` -> ``netty-codec-http`` (the name before the version)."""
    return re.sub(r"-\d[^-]*(-[A-Za-z][\w.-]*)?\.jar$", "", jar)


def _ivy_download(line: str) -> bool:
    return re.search(r"downloading \S+\.jar", line) is not None


def _ivy_step(line: str) -> bool:
    """A line that shows the resolver moving: a dependency found (it resolves them all before
    downloading any), or a jar downloaded."""
    return _ivy_download(line) or re.match(r"\s*found \S+ in ", line) is not None


def _ivy_failure(tail: list[str]) -> str:
    interesting = [
        line.strip()
        for line in tail
        if any(k in line for k in ("UNRESOLVED", "not found", "Server access error", "unresolved", "FAILED", "Exception"))
    ]
    return "; ".join(dict.fromkeys(interesting[:6])) or " / ".join(line.strip() for line in tail[-5:])


def _log_path(settings: Settings, label: str) -> Path:
    """Where a fetch or build keeps its whole output (the terminal gets one line per step)."""
    path = settings.cache_dir / "logs" / (re.sub(r"[^A-Za-z0-9._-]+", "_", label) + ".log")
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def _run_streaming(
    cmd: list[str],
    progress: Progress,
    count: Callable[[str], bool],
    *,
    label: str,
    unit: str,
    log: Path,
    env: dict[str, str] | None = None,
    heartbeat_s: float = 15.0,
) -> tuple[int, list[str] | None]:
    """Run ``cmd`` with its whole output in ``log``; while it runs, a line every ``heartbeat_s``
    says how many output lines ``count`` matched so far (jars downloaded, modules fetched).

    Returns (that count, None) on success, else (the count, the last lines of output).
    """
    started = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    done = threading.Event()
    seen = [0]

    def beat() -> None:
        while not done.wait(heartbeat_s):
            progress(f"[artifacts]   {label}: {seen[0]} {unit} so far ({time.monotonic() - started:.0f}s)")

    threading.Thread(target=beat, daemon=True).start()
    tail: list[str] = []
    assert proc.stdout is not None
    try:
        with log.open("w", encoding="utf-8") as out:
            for line in proc.stdout:
                out.write(line)
                tail = (tail + [line.rstrip()])[-40:]
                seen[0] += count(line)
        rc = proc.wait()
    finally:
        done.set()
        if proc.poll() is None:
            proc.kill()
    return seen[0], (None if rc == 0 else tail)


def kafka_jars(settings: Settings, *, progress: Progress = say) -> list[Path]:
    """The Kafka broker and its dependencies (KRaft mode needs nothing else)."""
    return resolve_jars(settings, f"kafka-{versions.KAFKA}", versions.kafka_broker(), progress=progress)


def spark_job_jars(settings: Settings, *, progress: Progress = say) -> list[Path]:
    """Jars the streaming job puts on the class path: the Kafka source and the S3A connector
    with the AWS SDK modules it uses, less what pyspark already ships; then the project's own
    classes (:func:`project_jar`)."""
    return resolve_jars(
        settings,
        f"spark-job-{versions.PYSPARK}",
        versions.spark_job_packages(),
        intransitive=versions.spark_job_intransitive(),
        drop_provided_by_spark=True,
        progress=progress,
    ) + [project_jar(settings, progress=progress)]


#: The project's own JVM classes (one today: osl.FastCheckpointFileManager, see
#: sandbox/jvm/spark_session.py), as package data (sandbox/jvm/java): a folder, or a folder inside
#: the zip ``spark-submit`` runs the project from (job/ops/submit_bundle.py), where the driver
#: finds the jar the packaging machine compiled.
JAVA_SOURCES = importlib.resources.files("sandbox").joinpath("jvm").joinpath("java")


def _java_sources(root) -> dict[str, bytes]:
    """Every ``.java`` file under ``root`` (a Traversable), by path relative to it."""
    found: dict[str, bytes] = {}
    if not root.is_dir():
        return found
    for child in root.iterdir():
        if child.is_dir():
            found.update({f"{child.name}/{k}": v for k, v in _java_sources(child).items()})
        elif child.name.endswith(".java"):
            found[child.name] = child.read_bytes()
    return found


def ecj_jar(settings: Settings, *, progress: Progress = say) -> Path:
    """The Eclipse compiler's jar (``versions.ECJ``; it has no dependencies), resolved once."""
    (jar,) = resolve_jars(settings, f"ecj-{versions.ECJ}", [("org.eclipse.jdt", "ecj", versions.ECJ)], progress=progress)
    return jar


def project_jar(settings: Settings, *, progress: Progress = say) -> Path:
    """:data:`JAVA_SOURCES` compiled against the pyspark wheel's jars into one jar, cached
    under a digest of the sources and both versions (a second call compiles nothing).

    The compiler is the Eclipse compiler (``versions.ECJ``, from the same registry as every
    other jar): it runs on a JRE, and the images carry no javac. A compile error is a bug of
    this project, reported with the compiler's own lines and its log.
    """
    import hashlib
    import zipfile

    sources = _java_sources(JAVA_SOURCES)
    if not sources:
        raise SandboxError(
            f"no Java sources in {JAVA_SOURCES}: the sandbox package is incomplete; reinstall it "
            "(pip install -e . in the checkout)"
        )
    digest = hashlib.sha256(f"{versions.PYSPARK} {versions.ECJ}".encode())
    for name, text in sorted(sources.items()):
        digest.update(name.encode() + b"\0" + text)
    dest = settings.cache_dir / "jars" / f"osl-java-{digest.hexdigest()[:12]}" / "osl-java.jar"
    if dest.exists():
        return dest
    ecj = ecj_jar(settings, progress=progress)
    staging = dest.parent.with_name(f"{dest.parent.name}.partial-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    (staging / "classes").mkdir(parents=True)
    files = []
    for name, text in sorted(sources.items()):
        files.append(staging / "src" / name)
        files[-1].parent.mkdir(parents=True, exist_ok=True)
        files[-1].write_bytes(text)
    log = _log_path(settings, "compile-osl-java")
    progress(f"[artifacts] compiling {len(files)} Java source(s) from {JAVA_SOURCES} with ecj {versions.ECJ} ...")
    spark_jars = sorted((spark_home() / "jars").glob("*.jar"))
    cmd = [
        str(java_executable(settings.java_home)),
        "-jar",
        str(ecj),
        "--release",
        str(versions.JAVA_MIN),
        "-encoding",
        "UTF-8",
        "-nowarn",
        "-d",
        str(staging / "classes"),
        "-cp",
        os.pathsep.join(map(str, spark_jars)),
        *map(str, files),
    ]
    _, tail = _run_streaming(cmd, progress, lambda _line: True, label="the Java compile", unit="compiler output lines", log=log)
    if tail is not None:
        shutil.rmtree(staging, ignore_errors=True)
        detail = "\n".join("    " + line for line in tail[-20:])
        raise SandboxError(f"the project's Java sources in {JAVA_SOURCES} did not compile (whole output: {log}):\n{detail}")

    # entries dated 1980-01-01, not at the compile: the same sources give the same bytes, so the
    # image's class-data archive, keyed by its jars' contents, outlives a rebuild (decision 0029)
    def entry(name: str) -> zipfile.ZipInfo:
        info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
        info.compress_type, info.external_attr = zipfile.ZIP_DEFLATED, 0o644 << 16
        return info

    with zipfile.ZipFile(staging / dest.name, "w", zipfile.ZIP_DEFLATED) as jar:
        jar.writestr(entry("META-INF/MANIFEST.MF"), "Manifest-Version: 1.0\nCreated-By: ordered-stream-lab (ecj)\n\n")
        for cls in sorted((staging / "classes").rglob("*.class")):
            jar.writestr(entry(str(cls.relative_to(staging / "classes"))), cls.read_bytes())
    shutil.rmtree(staging / "classes")
    shutil.rmtree(staging / "src")
    try:
        staging.rename(dest.parent)
    except OSError:  # another process finished the same jar first
        shutil.rmtree(staging, ignore_errors=True)
    progress(f"[artifacts] compiled {dest}")
    return dest


def _minio_folder(settings: Settings) -> Path:
    """Where the pinned MinIO is built, with its build's lock (:func:`_build_lock`)."""
    return settings.cache_dir / "minio" / versions.MINIO_VERSION


def built_minio(settings: Settings) -> Path | None:
    """The MinIO binary :func:`minio_binary` built from the pinned module, if it did (no build)."""
    binary = _minio_folder(settings) / "minio"
    return binary if binary.exists() else None


def minio_binary(settings: Settings, *, progress: Progress = say) -> Path:
    """A MinIO server binary: one on PATH, else one built (once) from the pinned Go module."""
    on_path = shutil.which("minio")
    if on_path:
        return Path(on_path)
    bin_dir = _minio_folder(settings)
    binary = bin_dir / "minio"
    if binary.exists():
        return binary
    with _build_lock(bin_dir, "the MinIO build", progress):
        if binary.exists():  # another process built it while this one waited
            return binary
        return _build_minio(settings, bin_dir, binary, progress)


@contextlib.contextmanager
def _build_lock(folder: Path, what: str, progress: Progress):
    """One build at a time per folder, across processes: scripts/bootstrap.sh starts MinIO's
    build before pip and its ``fetch`` call then waits for it instead of building it twice."""
    import fcntl

    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".build.lock").open("w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            progress(f"[artifacts] waiting for {what} another process runs ({folder})")
            fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def minio_build_running(settings: Settings) -> bool:
    """Whether another process holds the MinIO build's lock (:func:`_build_lock`) now."""
    import fcntl

    lock_path = _minio_folder(settings) / ".build.lock"
    if not lock_path.exists():
        return False
    with lock_path.open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(lock, fcntl.LOCK_UN)
        return False


def wait_for_minio_build(settings: Settings, *, progress: Progress = say) -> Path | None:
    """:func:`built_minio`, once a MinIO build another process runs has ended (none: at once).
    For a caller that would otherwise build MinIO a second time (the compose image build)."""
    if minio_build_running(settings):
        with _build_lock(_minio_folder(settings), "the MinIO build", progress):
            pass
    return built_minio(settings)


def _build_minio(settings: Settings, bin_dir: Path, binary: Path, progress: Progress) -> Path:
    go = _go_executable()
    module = f"{versions.MINIO_MODULE}@{versions.MINIO_VERSION}"
    log = _log_path(settings, f"build-minio-{versions.MINIO_VERSION}")
    progress(f"[artifacts] building MinIO from {module} with {go} (once; a few minutes; log: {log}) ...")
    # the image's build settings (docker/Dockerfile, minio-build), so the image can reuse this binary
    env = dict(os.environ, GOBIN=str(bin_dir), CGO_ENABLED="0", GOFLAGS="-buildvcs=false")
    bin_dir.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    _, tail = _run_streaming(
        [str(go), "install", "-trimpath", module],
        progress,
        lambda line: line.startswith("go: downloading "),
        label="the MinIO build",
        unit="Go modules downloaded",
        log=log,
        env=env,
        heartbeat_s=30.0,
    )
    if tail is not None or not binary.exists():
        joined = " / ".join(line for line in (tail or [])[-6:]) + f" (whole output: {log})"
        if any(k in joined for k in ("dial tcp", "proxy", "403", "404", "no such host", "i/o timeout")):
            raise ArtifactFetchError(module, "the Go module proxy", joined)
        raise SandboxError(f"building MinIO ({module}) failed: {joined}")
    progress(f"[artifacts] MinIO built in {time.monotonic() - started:.0f}s: {binary}")
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


def fetch_all(settings: Settings, *, wait_for_minio: bool = True, progress: Progress = say) -> dict[str, object]:
    """Everything the local backend and the job need; cheap when the cache is warm.

    On an empty cache MinIO's Go build (about 200 s here) runs beside the two jar sets' resolutions
    (each mostly waiting on Maven Central), not after them. With ``wait_for_minio=False`` a MinIO
    build another process runs is left to finish (``minio`` is then None): scripts/bootstrap.sh
    ends without it, and ``sandbox up`` waits for it (docs/decisions/0032-bootstrap-leaves-the-minio-build-running.md).
    """
    from concurrent.futures import ThreadPoolExecutor

    java = java_executable(settings.java_home)
    progress = _whole_lines(progress)
    with ThreadPoolExecutor(max_workers=3, thread_name_prefix="fetch") as pool:
        minio = None
        if wait_for_minio or not minio_build_running(settings):
            minio = pool.submit(minio_binary, settings, progress=progress)
        else:
            progress(
                f"[artifacts] MinIO is still being built by another process ({settings.cache_dir / 'minio'}); "
                "`sandbox up` waits for it"
            )
        kafka = pool.submit(kafka_jars, settings, progress=progress)
        spark_job = pool.submit(spark_job_jars, settings, progress=progress)
        return {
            "java": java,
            "kafka_jars": kafka.result(),
            "spark_job_jars": spark_job.result(),
            "minio": minio.result() if minio is not None else None,
        }
