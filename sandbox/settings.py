"""One settings object for the sandbox, built once at the edge and passed down.

Read the environment only in :meth:`Settings.from_env` (the CLI, notebooks and test
fixtures call it); everything below takes a ``Settings``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

BackendKind = Literal["local", "compose"]

PROJECT = "ordered-stream-lab"

#: MinIO's credentials in the sandbox (the compose file passes the same).
S3_ACCESS_KEY = "sandbox"
S3_SECRET_KEY = "sandbox-secret"


@dataclass(frozen=True, kw_only=True)
class Ports:
    """Host ports; every one moves together with ``offset`` so two sandboxes can coexist."""

    kafka: int = 9092
    kafka_controller: int = 9093
    minio: int = 9000
    minio_console: int = 9001
    spark_master: int = 7077
    spark_master_ui: int = 8080
    spark_worker_ui_base: int = 8081  # worker N listens on base + N - 1
    jupyter: int = 8888
    spark_driver_ui: int = 4040  # the job's driver (Spark tries the next 16 ports when it is taken)

    def shifted(self, offset: int) -> Ports:
        return Ports(**{name: value + offset for name, value in self.__dict__.items()})

    def worker_ui(self, n: int) -> int:
        return self.spark_worker_ui_base + n - 1

    @property
    def offset(self) -> int:
        """How far these ports are moved from the defaults (``OSL_PORT_OFFSET``)."""
        return self.kafka - Ports().kafka


#: Where a client finds the sandbox's Kafka when nothing says otherwise.
KAFKA_BOOTSTRAP = f"127.0.0.1:{Ports().kafka}"


@dataclass(frozen=True, kw_only=True)
class Endpoints:
    """Where each service answers, as seen from this machine."""

    kafka_bootstrap: str
    s3_endpoint: str
    s3_console: str
    spark_master: str
    spark_master_ui: str
    spark_worker_uis: tuple[str, ...]
    jupyter: str | None = None


@dataclass(frozen=True, kw_only=True)
class Settings:
    """Everything the sandbox needs to know; immutable, so derive variants with ``replace``."""

    state_dir: Path
    cache_dir: Path
    backend: BackendKind = "local"
    host: str = "127.0.0.1"
    ports: Ports = field(default_factory=Ports)
    s3_access_key: str = S3_ACCESS_KEY
    s3_secret_key: str = S3_SECRET_KEY
    bucket: str = "lake"
    spark_workers: int = 2
    #: Two cores per worker on purpose (more than a laptop may have): two applications, e.g. a
    #: streaming job and a notebook, each get executors instead of one starving in the queue.
    spark_worker_cores: int = 2
    spark_worker_memory: str = "2g"
    #: Cores one application may take (spark.cores.max): half the cluster.
    spark_app_cores: int = 2
    kafka_heap: str = "512m"
    kafka_partitions: int = 3
    maven_repo: str | None = None  # a Maven mirror root; None means Maven Central
    #: Addresses as seen from inside the compose network (the jupyter container); when set
    #: they replace the host:port endpoints derived from ``host`` and ``ports``.
    kafka_bootstrap: str | None = None
    s3_endpoint: str | None = None
    spark_master: str | None = None
    driver_host: str | None = None
    checkpoint_dir: Path | None = None
    #: A Java installation to use instead of the ``java`` on PATH (``JAVA_HOME``).
    java_home: Path | None = None
    #: The Spark master's UI as reached from inside the compose network (health checks only;
    #: ``endpoints().spark_master_ui`` stays the link a browser on this machine opens).
    spark_master_ui_internal: str | None = None
    #: Inside the jupyter container: the stack runs already and this code only attaches to it
    #: (``OSL_ATTACHED=1``; see :mod:`sandbox.services.inside_compose`).
    attached: bool = False
    #: Inside the compose network: the stack's fault service (``OSL_FAULTS_URL``), through which
    #: an attached sandbox kills, pauses and restarts services (:mod:`sandbox.services.fault_service`).
    faults_url: str | None = None
    #: An extra CA bundle image builds trust (a TLS-inspecting proxy's CA), passed as a build
    #: secret; from ``OSL_BUILD_CA_BUNDLE``, else ``SSL_CERT_FILE`` when that file exists.
    build_ca_bundle: Path | None = None
    #: Start Spark's JVMs from class-data archives (:mod:`sandbox.jvm.class_data_sharing`: this
    #: machine's on the local backend, the Spark image's under compose); ``OSL_CDS=0`` turns them off.
    cds: bool = True
    #: How Spark's application JVMs (driver and executors) compile Java: ``c1`` (the default)
    #: stops at the quick C1 compiler, ``tiered`` is the JVM's own default (C1, then C2).
    #: From ``OSL_SPARK_JIT``. On two cores C2's compiler threads take CPU from the work for
    #: the whole life of a short application (docs/decisions/0015-jit-c1-only.md).
    spark_jit: str = "c1"
    #: How the Kafka broker's JVM compiles Java, from ``OSL_KAFKA_JIT``, the same choices: with
    #: C1 only it took 44 % less CPU over a run of integration tests and 30 % less while taking
    #: records as fast as a producer sent them (docs/decisions/0026-kafka-broker-c1.md).
    kafka_jit: str = "c1"
    #: The executors' garbage collector, from ``OSL_SPARK_EXECUTOR_GC``: ``parallel`` (the
    #: default) or ``g1`` (the JVM's own choice on this machine). See :data:`GC_OPTIONS`.
    executor_gc: str = "parallel"
    #: The driver's garbage collector, from ``OSL_SPARK_DRIVER_GC``, the same choices: G1 by
    #: default, the parallel one measured no cheaper for a driver (docs/decisions/0027-driver-gc.md).
    driver_gc: str = "g1"
    start_timeout_s: float = 120.0
    #: The heap of the verifier's own Spark driver (``python -m job verify``), from
    #: ``OSL_VERIFY_DRIVER_MEMORY``; ``--driver-memory`` overrides it. It judges in the driver's
    #: JVM (local mode): docs/verifier.md has what a fleet's lake needed.
    verify_driver_memory: str = "1g"

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None, **overrides: object) -> Settings:
        """Build settings from ``OSL_*`` variables, then apply keyword overrides.

        ``OSL_STATE_DIR`` (default: ``.sandbox`` in the project root), ``OSL_CACHE_DIR``
        (default: ``~/.cache/ordered-stream-lab``), ``OSL_BACKEND`` (``local`` or
        ``compose``; default ``local``: this reads variables and nothing else, so the
        command lines pass ``backend=detect_backend()`` to pick compose where Docker answers),
        ``JAVA_HOME`` (the Java the local backend runs),
        ``OSL_PORT_OFFSET`` (add to every port), ``OSL_MAVEN_REPO`` (a mirror); inside the
        compose network also ``OSL_KAFKA_BOOTSTRAP``, ``OSL_S3_ENDPOINT``, ``OSL_SPARK_MASTER``,
        ``OSL_CHECKPOINT_ROOT``, ``OSL_S3_ACCESS_KEY``, ``OSL_S3_SECRET_KEY``, ``OSL_BUCKET``,
        ``OSL_SPARK_MASTER_UI_INTERNAL``, ``OSL_ATTACHED``, ``OSL_FAULTS_URL`` and ``SPARK_LOCAL_HOSTNAME`` (the
        driver's address for executors); for image builds ``OSL_BUILD_CA_BUNDLE``; ``OSL_CDS=0``
        starts Spark without class-data archives; ``OSL_SPARK_JIT`` and ``OSL_KAFKA_JIT`` (``c1`` or ``tiered``)
        pick how the Spark applications' JVMs and the Kafka broker's compile, ``OSL_SPARK_EXECUTOR_GC`` and
        ``OSL_SPARK_DRIVER_GC`` (``parallel`` or ``g1``) their executors' and driver's garbage collector; ``OSL_VERIFY_DRIVER_MEMORY`` the verifier's heap.
        """
        env = os.environ if environ is None else environ
        offset_text = env.get("OSL_PORT_OFFSET", "0")
        try:
            offset = int(offset_text)
        except ValueError:
            from sandbox.errors import SandboxError

            raise SandboxError(f"OSL_PORT_OFFSET={offset_text!r} is not an integer; set it to e.g. 10000") from None
        values: dict[str, object] = {
            "state_dir": Path(env["OSL_STATE_DIR"]) if env.get("OSL_STATE_DIR") else _default_state_dir(),
            "cache_dir": Path(env["OSL_CACHE_DIR"]) if env.get("OSL_CACHE_DIR") else _default_cache_dir(env),
            "ports": Ports().shifted(offset),
            "maven_repo": env.get("OSL_MAVEN_REPO") or None,
            "kafka_bootstrap": env.get("OSL_KAFKA_BOOTSTRAP") or None,
            "s3_endpoint": env.get("OSL_S3_ENDPOINT") or None,
            "spark_master": env.get("OSL_SPARK_MASTER") or None,
            "driver_host": env.get("SPARK_LOCAL_HOSTNAME") or None,
            "checkpoint_dir": Path(env["OSL_CHECKPOINT_ROOT"]) if env.get("OSL_CHECKPOINT_ROOT") else None,
            "java_home": Path(env["JAVA_HOME"]) if env.get("JAVA_HOME") else None,
            "spark_master_ui_internal": env.get("OSL_SPARK_MASTER_UI_INTERNAL") or None,
            "attached": env.get("OSL_ATTACHED", "").lower() in ("1", "true", "yes"),
            "faults_url": env.get("OSL_FAULTS_URL") or None,
            "build_ca_bundle": _build_ca_bundle(env),
            "cds": env.get("OSL_CDS", "1") != "0",
            **({"verify_driver_memory": env["OSL_VERIFY_DRIVER_MEMORY"]} if env.get("OSL_VERIFY_DRIVER_MEMORY") else {}),
            **{
                field: _choice(
                    variable, env.get(variable) or getattr(cls, field), options, fix.format(default=getattr(cls, field))
                )
                for field, variable, options, fix in _CHOICES
            },
        }
        for key, name in (
            ("s3_access_key", "OSL_S3_ACCESS_KEY"),
            ("s3_secret_key", "OSL_S3_SECRET_KEY"),
            ("bucket", "OSL_BUCKET"),
        ):
            if env.get(name):
                values[key] = env[name]
        if "backend" in overrides:
            values["backend"] = _backend_kind(str(overrides["backend"]))
        elif env.get("OSL_BACKEND"):
            values["backend"] = _backend_kind(env["OSL_BACKEND"])
        values.update(overrides)
        settings = cls(**values)  # type: ignore[arg-type]
        return replace(settings, state_dir=settings.state_dir.resolve(), cache_dir=settings.cache_dir.resolve())

    def endpoints(self) -> Endpoints:
        h, p = self.host, self.ports
        return Endpoints(
            kafka_bootstrap=self.kafka_bootstrap or f"{h}:{p.kafka}",
            s3_endpoint=self.s3_endpoint or f"http://{h}:{p.minio}",
            s3_console=f"http://{h}:{p.minio_console}",
            spark_master=self.spark_master or f"spark://{h}:{p.spark_master}",
            spark_master_ui=f"http://{h}:{p.spark_master_ui}",
            spark_worker_uis=tuple(f"http://{h}:{p.worker_ui(n)}" for n in range(1, self.spark_workers + 1)),
            jupyter=f"http://{h}:{p.jupyter}" if self.backend == "compose" else None,
        )

    def spark_status_url(self) -> str:
        """Where this process reaches the master's UI (inside the compose network: by name)."""
        return self.spark_master_ui_internal or self.endpoints().spark_master_ui

    @property
    def checkpoint_root(self) -> Path:
        """Streaming checkpoints live on local disk (a shared volume under compose), never in S3."""
        return self.checkpoint_dir or self.state_dir / "checkpoints"

    def scratch_dir(self, prefix: str) -> Path:
        """A fresh folder for one run's files (a chapter's ledger, checkpoint, logs), under
        ``<checkpoint_root>/scratch``: where the driver and, under compose, every executor can
        read it, and where ``python -m sandbox down --reset`` removes it with the sandbox's data."""
        import tempfile

        base = self.checkpoint_root / "scratch"
        base.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=base))


#: ``OSL_SPARK_JIT`` and ``OSL_KAFKA_JIT`` values and the JVM options each adds to Spark's driver
#: and executors, and to the Kafka broker.
JIT_OPTIONS = {"c1": "-XX:TieredStopAtLevel=1", "tiered": ""}

#: ``OSL_SPARK_EXECUTOR_GC`` and ``OSL_SPARK_DRIVER_GC`` values and the option each adds to
#: Spark's executors or driver. The JVM picks G1 on a machine of two cores, and G1's concurrent
#: threads took a sixth of the executors' CPU beside every task; the parallel collector has no
#: concurrent phase (docs/decisions/0016-executor-gc.md; ``bench/job_bench.py --executor-gc``
#: compares them).
GC_OPTIONS = {"parallel": "-XX:+UseParallelGC", "g1": "-XX:+UseG1GC"}


_JIT_FIX = "set c1 (C1 only, quick to start) or tiered (the JVM's own C1-then-C2), or unset it for {default}"
_GC_FIX = "set parallel or g1 (the JVM's own choice), or unset it for {default}"

#: The settings chosen from a table of JVM options: (field, variable, table, the fix a refusal
#: gives, ``{default}`` standing for the field's default).
_CHOICES = (
    ("spark_jit", "OSL_SPARK_JIT", JIT_OPTIONS, _JIT_FIX),
    ("kafka_jit", "OSL_KAFKA_JIT", JIT_OPTIONS, _JIT_FIX),
    ("executor_gc", "OSL_SPARK_EXECUTOR_GC", GC_OPTIONS, _GC_FIX),
    ("driver_gc", "OSL_SPARK_DRIVER_GC", GC_OPTIONS, _GC_FIX),
)


def _choice(variable: str, value: str, options: Mapping[str, str], fix: str) -> str:
    if value not in options:
        from sandbox.errors import SandboxError

        raise SandboxError(f"{variable}={value!r} is not one of {', '.join(options)}: {fix}")
    return value


def detect_backend(environ: Mapping[str, str] | None = None) -> BackendKind:
    """``OSL_BACKEND`` if set, else ``compose`` when a Docker engine answers, else ``local``.

    It runs ``docker info`` (up to a few seconds): call it once at the edge, e.g.
    ``Settings.from_env(backend=detect_backend())``.
    """
    env = os.environ if environ is None else environ
    if env.get("OSL_BACKEND"):
        return _backend_kind(env["OSL_BACKEND"])
    return "compose" if docker_engine_answers() else "local"


def docker_engine_answers(timeout_s: float = 3.0) -> bool:
    """True when a docker CLI is on PATH and a Docker engine answers it within ``timeout_s``."""
    import shutil
    import subprocess

    docker = shutil.which("docker")
    if docker is None:
        return False
    try:
        proc = subprocess.run(
            [docker, "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            stdin=subprocess.DEVNULL,
        )
    except (subprocess.TimeoutExpired, OSError):
        return False
    return proc.returncode == 0 and proc.stdout.strip() not in ("", "<no value>")


def _build_ca_bundle(env: Mapping[str, str]) -> Path | None:
    for name in ("OSL_BUILD_CA_BUNDLE", "SSL_CERT_FILE"):
        if env.get(name) and Path(env[name]).is_file():
            return Path(env[name])
    return None


def _backend_kind(text: str) -> BackendKind:
    if text not in ("local", "compose"):
        from sandbox.errors import SandboxError

        raise SandboxError(f"OSL_BACKEND={text!r} is not a backend; use 'local' or 'compose'")
    return text  # type: ignore[return-value]


def _default_cache_dir(env: Mapping[str, str]) -> Path:
    base = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / PROJECT


def project_root() -> Path | None:
    """The checkout this package runs from, when it runs from one (editable install)."""
    here = Path(__file__).resolve().parent.parent
    return here if (here / "docker-compose.yml").exists() else None


def _default_state_dir() -> Path:
    root = project_root()
    return (root if root is not None else Path.cwd()) / ".sandbox"


def shown(path: str | os.PathLike[str]) -> str:
    """A local path as messages print it: relative to the working directory when it lies under it
    or under this checkout (so ``../.sandbox/logs/kafka.log`` from ``notebooks/``), else as given.

    Still a path that works from where the reader stands, but one that does not spell out the
    machine's folders in a chapter's output or a log line. URLs (``s3a://…``) pass unchanged.
    """
    text = os.fspath(path)
    if "://" in text or not os.path.isabs(text):
        return text
    here = Path.cwd().resolve()
    target = Path(text).resolve()
    root = project_root()
    for base in (here, root):
        if base is not None and target.is_relative_to(base):
            return os.path.relpath(target, here)
    return text
