"""Spark configuration that points a driver at the sandbox's cluster, Kafka jars and MinIO."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sandbox import artifacts
from sandbox.artifacts import Progress, say
from sandbox.jvm import class_data_sharing
from sandbox.settings import GC_OPTIONS, JIT_OPTIONS, Settings


def spark_conf(settings: Settings, *, progress: Progress = say) -> dict[str, str]:
    """Conf for a driver on this machine: the standalone master, the job's jars from the cache
    (never a fetch at query time), and s3a pointed at MinIO with path-style access.

    The jars go on the class path of the driver and the executors, read where they lie in
    the cache (every sandbox process sees the cache at the same path: this machine, or the
    shared image in compose). ``spark.jars`` would have each executor copy the 600 MB of
    them into its work directory for every application (notebook kernel, test run, demo),
    which filled a 90 GB disk in a day. None of them duplicates a jar pyspark ships
    (``artifacts.spark_job_jars``), so nothing shadows Spark's own libraries.
    """
    jars = artifacts.spark_job_jars(settings, progress=progress)
    e = settings.endpoints()
    classpath = os.pathsep.join(str(j) for j in jars)
    driver_cds, executor_cds = class_data_sharing.java_options(settings)
    # C1 only (Settings.spark_jit): C2's compiler threads compete with the work on two cores
    jit = JIT_OPTIONS[settings.spark_jit]
    # the parallel collector by default (Settings.executor_gc: G1's concurrent threads cost CPU)
    executor_options = " ".join(o for o in (jit, GC_OPTIONS[settings.executor_gc], executor_cds) if o)
    return {
        "spark.master": e.spark_master,
        "spark.driver.extraClassPath": classpath,
        "spark.executor.extraClassPath": classpath,
        # executors connect back to the driver: on this machine at host, in compose by name
        "spark.driver.host": settings.driver_host or settings.host,
        "spark.driver.bindAddress": "0.0.0.0" if settings.driver_host else settings.host,
        "spark.driver.extraJavaOptions": " ".join(
            o
            for o in (
                f"-Dlog4j2.configurationFile=file:{_driver_log_config(settings)}",
                jit,
                GC_OPTIONS[settings.driver_gc],
                driver_cds,
            )
            if o
        ),
        # class-data sharing (sandbox/jvm/class_data_sharing.py): the JVMs map their classes
        # instead of loading them
        **({"spark.executor.extraJavaOptions": executor_options} if executor_options else {}),
        "spark.ui.port": str(settings.ports.spark_driver_ui),
        "spark.executor.memory": "1g",
        "spark.executor.cores": "1",
        "spark.cores.max": str(settings.spark_app_cores),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        # One shuffle partition per core the application gets: each stateful task pays a
        # Python worker and a state-store commit, so more partitions than cores only add
        # that overhead (docs/decisions/0004-state-partitions.md).
        # A streaming query keeps the number its checkpoint was created with.
        "spark.sql.shuffle.partitions": str(settings.spark_app_cores),
        # Executors keep one Kafka consumer per (query, topic partition) between batches, in a
        # pool Spark sizes at 64: past that it closes the oldest idle consumer on every borrow,
        # and a fleet's 150 partitions rebuilt consumers every batch
        # (docs/decisions/0009-kafka-consumer-cache.md).
        "spark.kafka.consumer.cache.capacity": "1024",
        # A stateful task prefers the executor that holds its state store, and Spark's delay
        # scheduling waits spark.locality.wait (3 s) for it. A task that takes less than that
        # never leaves: after an executor loss the survivor kept both state partitions for the
        # rest of the application, the replacement executor idle (SPARK-18886). With no wait a
        # partition moves to a free executor and pays one state load there
        # (docs/decisions/0010-locality-wait.md).
        "spark.locality.wait": "0s",
        # A shuffle fetch from an executor whose host vanished opens a connection to an address
        # nobody answers: it waited 23-39 s to fail on the compose network (120 s allowed by
        # default), and the batch with it; chapter 04's worker kill waited 80 s once in CI. A live
        # peer answers in milliseconds, and a failed connect asks the driver whether the executor
        # is alive before it retries (docs/decisions/0030-shuffle-connection-timeout.md).
        "spark.shuffle.io.connectionCreationTimeout": "10s",
        # An executor reaches its Python workers over a Unix domain socket, not loopback TCP:
        # Spark opens that TCP connection without TCP_NODELAY, and the end of each Python call
        # (small writes both ways) waited out a delayed acknowledgement, about 40 ms
        # (docs/decisions/0011-python-worker-unix-socket.md; tests/job/test_python_worker_socket.py).
        "spark.python.unix.domain.socket.enabled": "true",
        # RocksDB commits upload a small changelog, not a snapshot, per batch.
        "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
        # Checkpoints are local (JobConfig refuses object stores), and Spark writes every
        # checkpoint file through Hadoop's FileContext, whose local default (ChecksumFs) writes a
        # .crc file beside each one: a second file written and renamed for the offset log, the
        # commit log and each state partition's changelog, every batch. The raw local file
        # system writes the file alone (docs/decisions/0013-raw-local-file-system.md).
        # Only FileContext's binding: FileSystem.getLocal() must stay a LocalFileSystem.
        "spark.hadoop.fs.AbstractFileSystem.file.impl": "org.apache.hadoop.fs.local.RawLocalFs",
        # Every checkpoint and sink-log file through the project's own manager
        # (sandbox/jvm/java/osl/FastCheckpointFileManager.java, on the class path from
        # artifacts.project_jar). Without Hadoop's native library the local file system forks
        # a `chmod` for each file it creates and a `readlink` for both paths of each rename, on
        # every batch's critical path; it writes and renames with java.nio instead. On MinIO the
        # sink log's entry is one PUT, not a temporary object, a copy and a delete
        # (docs/decisions/0014-checkpoint-file-manager.md; tests/sandbox/test_checkpoint_file_manager.py).
        "spark.sql.streaming.checkpointFileManagerClass": "osl.FastCheckpointFileManager",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.session.timeZone": "UTC",
        "spark.hadoop.fs.s3a.endpoint": e.s3_endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": settings.s3_access_key,
        "spark.hadoop.fs.s3a.secret.key": settings.s3_secret_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        # AWS SDK v2 >= 2.30 sends new default checksums (CRC32/CRC64 trailers) that MinIO's
        # multi-object delete refused; Hadoop 3.4.2+ keeps the old behaviour by default, and
        # we say so explicitly so that a Hadoop upgrade cannot change it silently
        # (tests/sandbox/test_local_backend.py deletes many objects through S3A).
        "spark.hadoop.fs.s3a.checksum.generation": "false",
        "spark.hadoop.fs.s3a.request.md5.header": "true",
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "15s",
        "spark.hadoop.fs.s3a.connection.timeout": "30s",
    }


def driver_log(settings: Settings) -> Path:
    """Where drivers started through :func:`spark_session` write their log."""
    return settings.state_dir / "logs" / "spark-driver.log"


def _driver_log_config(settings: Settings) -> Path:
    # The driver logs to a file, not to the console: notebooks and CLIs stay readable, and
    # the log keeps everything (WARN and up) for when something does go wrong.
    config = settings.state_dir / "config" / "driver-log4j2.properties"
    config.parent.mkdir(parents=True, exist_ok=True)
    driver_log(settings).parent.mkdir(parents=True, exist_ok=True)
    config.write_text(
        "status = error\n"
        "appender.file.type = File\n"
        "appender.file.name = FILE\n"
        f"appender.file.fileName = {driver_log(settings)}\n"
        "appender.file.append = true\n"
        "appender.file.layout.type = PatternLayout\n"
        "appender.file.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex\n"
        "rootLogger.level = WARN\n"
        "rootLogger.appenderRef.file.ref = FILE\n"
    )
    return config


def driver_env(settings: Settings) -> dict[str, str]:
    """Environment the driver's JVM must be launched with (Spark reads these from the process
    environment, not from the conf).

    ``PYSPARK_PYTHON``: the interpreter for Python workers, driver-side ones included (the
    transformWithStateInPandas pre-init worker); it must be the one that has the project.
    ``SPARK_LOCAL_IP``: the address the driver's web UI binds to; without it Jetty listens on
    every interface (``*:4040``), whatever ``spark.driver.bindAddress`` says. Under compose
    (``driver_host`` set) the driver must be reachable from other containers, so it is left out.
    ``SPARK_HOME`` (local backend): the workers' one, :func:`sandbox.artifacts.spark_runtime_home`,
    so the driver's classpath is the one its class-data archive was recorded with, in any checkout.
    """
    env = {"PYSPARK_PYTHON": sys.executable}
    if not settings.driver_host:
        env["SPARK_LOCAL_IP"] = settings.host
        if settings.backend == "local":
            env["SPARK_HOME"] = str(artifacts.spark_runtime_home(settings))
    return env


@contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {key: os.environ.get(key) for key in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def spark_session(settings: Settings, app_name: str, *, extra: dict[str, str] | None = None, progress: Progress = say):
    """A SparkSession on the sandbox cluster. A session already running in this process is
    reused when it was built with the same conf, else this raises SandboxError naming the
    setting that differs (``getOrCreate`` would silently hand back the old one).

    The variables of :func:`driver_env` are set in ``os.environ`` only while the session is
    created (that is when PySpark launches the JVM) and restored afterwards. The JVM's own
    output (its start-up warnings, SLF4J notices, what driver-side Python workers print)
    goes to :func:`driver_log`, like its log, not to the caller's terminal or notebook.
    """

    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    conf = {**spark_conf(settings, progress=progress), **(extra or {})}
    active = SparkContext._active_spark_context  # noqa: SLF001 - getOrCreate would hide it
    if active is not None:
        _check_same_conf(active.getConf(), conf)
    with _environment(driver_env(settings)):
        if SparkContext._gateway is None:  # noqa: SLF001 - the one way to give the JVM an output
            from pyspark.java_gateway import launch_gateway

            spark_conf_ = SparkConf(loadDefaults=False).setAll(conf.items()).setAppName(app_name)
            log = driver_log(settings)
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("ab") as out:
                gateway = launch_gateway(spark_conf_, popen_kwargs={"stdout": out, "stderr": out})
            SparkContext._ensure_initialized(gateway=gateway)  # noqa: SLF001
        builder = SparkSession.builder.appName(app_name)
        for key, value in conf.items():
            builder = builder.config(key, value)
        return builder.getOrCreate()


def _check_same_conf(running, wanted: dict[str, str]) -> None:
    from sandbox.errors import SandboxError

    def same(key: str, have: str | None, want: str) -> bool:
        # Spark adds its own JVM flags (--add-opens ...) to the extraJavaOptions it was given
        # the class-data archive may appear between two calls; it changes start-up time only
        if key.endswith("extraJavaOptions"):
            have, want = class_data_sharing.without_archive(have or ""), class_data_sharing.without_archive(want)
            return want in have
        return have == want

    differ = [
        (key, running.get(key, None), value) for key, value in wanted.items() if not same(key, running.get(key, None), value)
    ]
    if differ:
        key, have, want = differ[0]
        raise SandboxError(
            f"a SparkSession is already running in this process with other settings ({key} is {have!r}, this call "
            f"wants {want!r}{f', and {len(differ) - 1} more' if len(differ) > 1 else ''}); call spark.stop() on it "
            f"first, or reuse it instead of asking for a new one"
        )
