"""What each local service runs, and the files it needs before it starts.

The local backend (:mod:`sandbox.services.local`) supervises processes; this module only describes
them: for every service its command line, environment, working directory, ports,
endpoint, UI and health probe (:class:`ServiceSpec`), where the sandbox keeps its files
(:class:`Layout`), and the preparation a service needs before its first start (Kafka's
configuration and storage format). Nothing here starts or stops anything.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sandbox import artifacts
from sandbox.artifacts import Progress
from sandbox.checks import health
from sandbox.errors import ServiceStartError
from sandbox.settings import JIT_OPTIONS, Settings

#: Workers delete the work directory (executor logs, fetched files) of an application that
#: ended a day ago, checking every 30 minutes. Compose passes the same to its workers.
SPARK_WORKER_OPTS = (
    "-Dspark.worker.cleanup.enabled=true -Dspark.worker.cleanup.interval=1800 -Dspark.worker.cleanup.appDataTtl=86400"
)

#: The JVM options of the Spark master and workers (not the applications' driver and executors):
#: C1 only and the serial collector. The daemons pass messages and serve a UI; on two cores,
#: with every JVM of the sandbox starting at once, C2's compiler threads and G1's made their
#: start the slowest part of `up` (compose: 16 s to 11-12 s). Compose passes the same.
SPARK_DAEMON_JAVA_OPTS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def spark_master_opts(recovery_dir: str) -> str:
    """The master's options, here and in Compose: workers are declared lost after 20 s of
    silence, and the master writes its workers and applications to ``recovery_dir``, so a
    master that is killed and started again takes them back (chapter 04). Without a recovery
    mode, the new master knows no application: when the workers register again, it has
    them kill the running job's executors as unknown, and the job stalls with no executor
    until someone restarts it."""
    return f"-Dspark.worker.timeout=20 -Dspark.deploy.recoveryMode=FILESYSTEM -Dspark.deploy.recoveryDirectory={recovery_dir}"


#: Every service (and so every process it starts: executors, Python workers) carries this
#: variable set to the sandbox's state directory; ``down`` sweeps by it, so it never touches
#: a process the sandbox did not start (a shell that merely sits in the state directory).
SANDBOX_MARK = "OSL_SANDBOX_OF"


@dataclass(frozen=True)
class ServiceSpec:
    """How to run one service and how to tell that it is healthy."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    ports: tuple[int, ...]
    endpoint: str
    ui: str | None
    probe: Callable[[], health.Health]


@dataclass(frozen=True)
class Layout:
    """Where one sandbox keeps its files, under its state directory."""

    state_dir: Path

    @property
    def run_dir(self) -> Path:
        """Pid records of the running services."""
        return self.state_dir / "run"

    @property
    def config_dir(self) -> Path:
        return self.state_dir / "config"

    @property
    def recovery_dir(self) -> Path:
        """The Spark master's recovery state (see :func:`spark_master_opts`)."""
        return self.data_dir("spark-master") / "recovery"

    def log_path(self, name: str) -> Path:
        return self.state_dir / "logs" / f"{name}.log"

    def data_dir(self, name: str) -> Path:
        return self.state_dir / "data" / name


def spark_conf_dir(settings: Settings) -> Path:
    """The Spark daemons' ``SPARK_CONF_DIR``: an empty folder, so that no ``spark-defaults.conf``
    or ``spark-env.sh`` of pyspark's install applies. One for every sandbox sharing this cache,
    not one per sandbox: ``spark-class`` puts it on every executor's classpath, and the JVM
    refuses a class-data archive (:mod:`sandbox.jvm.class_data_sharing`) recorded with another
    classpath, so with a folder per sandbox the archive the bench's sandbox recorded was refused
    by the test sandbox's executors."""
    return settings.cache_dir / "spark-conf"


def service_names(settings: Settings) -> list[str]:
    return ["kafka", "minio", "spark-master"] + [f"spark-worker-{n}" for n in range(1, settings.spark_workers + 1)]


def service_spec(settings: Settings, layout: Layout, name: str, arts: dict[str, object]) -> ServiceSpec:
    """``name``'s spec; ``arts`` are the fetched artifacts (:func:`sandbox.artifacts.fetch_all`),
    or ``{}`` where only the endpoints and probe are needed (status)."""
    s, p, e = settings, settings.ports, settings.endpoints()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
    base_env[SANDBOX_MARK] = str(s.state_dir)
    if name == "kafka":
        jars = arts.get("kafka_jars", [])
        classpath = os.pathsep.join(str(j) for j in jars)  # type: ignore[union-attr]
        return ServiceSpec(
            name=name,
            argv=[
                str(arts.get("java", "java")),
                f"-Xmx{s.kafka_heap}",
                f"-Xms{s.kafka_heap}",
                "-XX:+UseG1GC",
                *JIT_OPTIONS[s.kafka_jit].split(),  # C1 only by default: decision 0026
                "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={layout.config_dir / 'kafka-log4j2.properties'}",
                "-cp",
                classpath,
                "kafka.Kafka",
                str(layout.config_dir / "kafka.properties"),
            ],
            env=base_env,
            cwd=layout.data_dir("kafka"),
            ports=(p.kafka, p.kafka_controller),
            endpoint=e.kafka_bootstrap,
            ui=None,
            probe=lambda: health.check_kafka(s, timeout_s=3.0),
        )
    if name == "minio":
        env = dict(base_env, MINIO_ROOT_USER=s.s3_access_key, MINIO_ROOT_PASSWORD=s.s3_secret_key)
        env["MINIO_UPDATE"] = "off"
        return ServiceSpec(
            name=name,
            argv=[
                str(arts.get("minio", "minio")),
                "server",
                "--address",
                f"{s.host}:{p.minio}",
                "--console-address",
                f"{s.host}:{p.minio_console}",
                str(layout.data_dir("minio")),
            ],
            env=env,
            cwd=layout.data_dir("minio"),
            ports=(p.minio, p.minio_console),
            endpoint=e.s3_endpoint,
            ui=e.s3_console,
            probe=lambda: health.check_minio(s, timeout_s=3.0),
        )
    spark_home = artifacts.spark_runtime_home(s)  # one path for every checkout: the archive's
    spark_class = str(spark_home / "bin" / "spark-class")
    spark_env = dict(
        base_env,
        SPARK_HOME=str(spark_home),
        SPARK_CONF_DIR=str(spark_conf_dir(s)),
        SPARK_LOCAL_IP=s.host,
        SPARK_DAEMON_MEMORY="512m",
        SPARK_DAEMON_JAVA_OPTS=SPARK_DAEMON_JAVA_OPTS,
        PYSPARK_PYTHON=sys.executable,
    )
    if "java" in arts:
        spark_env["JAVA_HOME"] = str(Path(str(arts["java"])).resolve().parent.parent)
    if name == "spark-master":
        spark_env["SPARK_MASTER_OPTS"] = spark_master_opts(str(layout.recovery_dir))
        return ServiceSpec(
            name=name,
            argv=[
                spark_class,
                "org.apache.spark.deploy.master.Master",
                "--host",
                s.host,
                "--port",
                str(p.spark_master),
                "--webui-port",
                str(p.spark_master_ui),
            ],
            env=spark_env,
            cwd=layout.data_dir("spark-master"),
            ports=(p.spark_master, p.spark_master_ui),
            endpoint=e.spark_master,
            ui=e.spark_master_ui,
            probe=lambda: _spark_master_alive(s),
        )
    n = int(name.rsplit("-", 1)[1])
    work = layout.data_dir(name)
    spark_env["SPARK_LOCAL_DIRS"] = str(work / "tmp")
    spark_env["SPARK_WORKER_OPTS"] = SPARK_WORKER_OPTS
    return ServiceSpec(
        name=name,
        argv=[
            spark_class,
            "org.apache.spark.deploy.worker.Worker",
            "--host",
            s.host,
            "--cores",
            str(s.spark_worker_cores),
            "--memory",
            s.spark_worker_memory,
            "--webui-port",
            str(p.worker_ui(n)),
            "--work-dir",
            str(work / "work"),
            e.spark_master,
        ],
        env=spark_env,
        cwd=work,
        ports=(p.worker_ui(n),),
        endpoint=f"{s.host} (registers with {e.spark_master})",
        ui=e.spark_worker_uis[n - 1],
        probe=lambda: health.check_spark_worker(s, n, timeout_s=3.0),
    )


def prepare(settings: Settings, layout: Layout, name: str, arts: dict[str, object], *, progress: Progress) -> None:
    """Create ``name``'s directories and, for Kafka, its configuration and (once) its storage."""
    layout.data_dir(name).mkdir(parents=True, exist_ok=True)
    layout.log_path(name).parent.mkdir(parents=True, exist_ok=True)
    layout.config_dir.mkdir(parents=True, exist_ok=True)
    spark_conf_dir(settings).mkdir(parents=True, exist_ok=True)
    if name == "kafka":
        _prepare_kafka(settings, layout, arts, progress=progress)
    if name.startswith("spark-worker-"):
        (layout.data_dir(name) / "tmp").mkdir(exist_ok=True)


#: the controller's broker session (``broker.session.timeout.ms``); heartbeats every quarter of it
KAFKA_SESSION_TIMEOUT_MS = 4000


def _prepare_kafka(settings: Settings, layout: Layout, arts: dict[str, object], *, progress: Progress) -> None:
    s, p = settings, settings.ports
    logs = layout.data_dir("kafka") / "logs"
    props = layout.config_dir / "kafka.properties"
    props.write_text(
        "\n".join(
            [
                "process.roles=broker,controller",
                "node.id=1",
                f"controller.quorum.voters=1@{s.host}:{p.kafka_controller}",
                f"listeners=PLAINTEXT://{s.host}:{p.kafka},CONTROLLER://{s.host}:{p.kafka_controller}",
                f"advertised.listeners=PLAINTEXT://{s.host}:{p.kafka}",
                "controller.listener.names=CONTROLLER",
                "inter.broker.listener.name=PLAINTEXT",
                "listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
                f"log.dirs={logs}",
                # after a kill every partition is recovered; one thread per core, not one in all
                f"num.recovery.threads.per.data.dir={max(1, min(4, os.cpu_count() or 1))}",
                # a restarted single-node broker cannot register again until the controller
                # ends its previous session (default 9 s, KAFKA-19130); keep that short here
                f"broker.session.timeout.ms={KAFKA_SESSION_TIMEOUT_MS}",
                f"broker.heartbeat.interval.ms={KAFKA_SESSION_TIMEOUT_MS // 4}",
                f"num.partitions={s.kafka_partitions}",
                "offsets.topic.replication.factor=1",
                "offsets.topic.num.partitions=3",
                "transaction.state.log.replication.factor=1",
                "transaction.state.log.min.isr=1",
                "share.coordinator.state.topic.replication.factor=1",
                "share.coordinator.state.topic.min.isr=1",
                "group.initial.rebalance.delay.ms=0",
                "auto.create.topics.enable=false",
                # a teaching sandbox keeps a week: long enough to replay a whole workbook
                "log.retention.hours=168",
                # the broker enforces retention only on this tick (default 5 minutes); chapter 07
                # shortens a topic's retention.ms and must see records go within seconds
                "log.retention.check.interval.ms=5000",
                "message.max.bytes=2097152",
                "",
            ]
        )
    )
    (layout.config_dir / "kafka-log4j2.properties").write_text(
        "status = warn\n"
        "appender.console.type = Console\n"
        "appender.console.name = STDOUT\n"
        "appender.console.layout.type = PatternLayout\n"
        "appender.console.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = INFO\n"
        "rootLogger.appenderRef.stdout.ref = STDOUT\n"
        "logger.kafka.name = kafka\nlogger.kafka.level = INFO\n"
        "logger.state.name = state.change.logger\nlogger.state.level = WARN\n"
    )
    if (logs / "meta.properties").exists():
        return
    cluster_id = kafka_cluster_id()
    spec = service_spec(settings, layout, "kafka", arts)
    classpath = spec.argv[spec.argv.index("-cp") + 1]
    progress(f"[sandbox] formatting Kafka storage in {logs} (cluster id {cluster_id})")
    proc = subprocess.run(
        [
            spec.argv[0],
            f"-Dlog4j2.configurationFile={layout.config_dir / 'kafka-log4j2.properties'}",
            "-cp",
            classpath,
            "kafka.tools.StorageTool",
            "format",
            f"--cluster-id={cluster_id}",
            "-c",
            str(props),
        ],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise ServiceStartError("kafka", "storage format failed", str(props), (proc.stdout + proc.stderr)[-3000:])


def kafka_cluster_id(new_uuid=uuid.uuid4) -> str:
    """A KRaft cluster id as Kafka's own ``Uuid.randomUuid`` makes one: URL-safe base64 of a
    random UUID, drawn again while it starts with ``-`` (1 time in 64), which a command line
    would read as an option (``kafka-storage format -t -HKW...`` fails with "expected one
    argument"). The caller also passes it as ``--cluster-id=<id>``, which no leading
    character can split."""
    while True:
        cluster_id = base64.urlsafe_b64encode(new_uuid().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def _spark_master_alive(settings: Settings) -> health.Health:
    try:
        status = health.spark_master_status(settings, timeout_s=3.0)
    except (OSError, ValueError) as exc:
        return health.Health(False, str(exc))
    return health.Health(
        status.get("status") == "ALIVE", f"master {status.get('status')}, {len(health.alive_workers(status))} worker(s) alive"
    )
