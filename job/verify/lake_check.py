"""The verifier on a lake: find the ledger and the lake, read both through Spark (so the file
sink's ``_spark_metadata`` decides which files count) and judge them there
(:mod:`job.verify.spark_check`), in the caller's Spark or in the verifier's own, whose end (out of
memory included) is one line, never a hang."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

from job.engine.errors import LakeError, VerifierResourceError
from job.spark import lake as lake_layout  # `lake` is verify_lake's parameter, the lake root

#: The verifier's own Spark, when the caller has none: a one-shot read of the lake, judged in
#: this machine's cores, with nothing for the cluster's executors to do that this process cannot
#: (faster than a session on the sandbox cluster: docs/verifier.md, "Measurements").
#: The driver exits on an out-of-memory error instead of living on with a dead thread: a JVM
#: whose task-result thread died waited for ever on a result that would never come
#: (docs/verifier.md); :func:`fatal_errors` turns the exit into a message.
VERIFY_SPARK = {
    "spark.master": "local[2]",
    # Parquet's vectorized reader fills a batch of 4,096 rows per column: a ledger row carries a
    # message twice (intended and sent), a fleet's snapshot of ~7,000 rows about 0.8 MB, and a
    # batch of those took more than a 1g heap (docs/verifier.md). 64 rows bound a batch to ~130 MB.
    "spark.sql.parquet.columnarReaderBatchSize": "64",
}
EXIT_ON_OOM = "-XX:+ExitOnOutOfMemoryError"
_log_start: dict[Path, int] = {}  # the driver log's size when the verifier's JVM started


def verifier_session(settings):
    """The verifier's Spark session (:data:`VERIFY_SPARK`), its driver's heap
    ``settings.verify_driver_memory``."""
    from sandbox.jvm.spark_session import driver_log, spark_conf, spark_session

    java = f"{spark_conf(settings)['spark.driver.extraJavaOptions']} {EXIT_ON_OOM}"
    extra = {**VERIFY_SPARK, "spark.driver.memory": settings.verify_driver_memory, "spark.driver.extraJavaOptions": java}
    log = driver_log(settings)
    _log_start[log] = log.stat().st_size if log.exists() else 0  # an older run's OOM in it is not this one's
    with fatal_errors(settings):
        return spark_session(settings, "verify", extra=extra)


@contextlib.contextmanager
def fatal_errors(settings):
    """Turn the end of the verifier's JVM (out of memory, or a heap too small to start) into
    one :class:`~job.engine.errors.VerifierResourceError` line instead of a Py4J traceback."""
    try:
        yield
    except Exception as exc:  # noqa: BLE001 - Py4J's, PySpark's and the socket's errors have no common root
        error = _resource_error(settings, exc)
        if error is None:
            raise
        raise error from None


def _resource_error(settings, exc: BaseException):
    from pyspark import SparkContext

    from sandbox.jvm.spark_session import driver_log

    text = str(exc)
    memory = settings.verify_driver_memory
    fix = (f"give it more with --driver-memory (or OSL_VERIFY_DRIVER_MEMORY), e.g. --driver-memory "
           f"{_doubled(memory)}; this machine has {_free_memory()} available")  # fmt: skip
    if "System memory" in text and "must be at least" in text:
        return VerifierResourceError(
            f"the verifier's Spark driver cannot start with {memory} of heap (Spark needs about 512m)", fix
        )
    proc = getattr(SparkContext._gateway, "proc", None)  # noqa: SLF001 - the JVM pyspark launched
    if proc is None:
        return None
    try:
        status = proc.wait(timeout=10)
    except Exception:  # noqa: BLE001 - still running: the error was not the JVM's end
        return None
    log = driver_log(settings)
    tail = log.read_bytes()[_log_start.get(log, 0) :][-200_000:].decode("utf-8", "replace") if log.exists() else ""
    SparkContext._gateway = None  # noqa: SLF001 - the next session in this process needs a new JVM
    SparkContext._jvm = None  # noqa: SLF001
    SparkContext._active_spark_context = None  # noqa: SLF001
    if "OutOfMemoryError" in tail:
        what = tail[tail.rindex("OutOfMemoryError") :].splitlines()[0].removeprefix("OutOfMemoryError").strip(": ")
        return VerifierResourceError(
            f"the verifier's Spark driver ran out of memory ({what or 'java.lang.OutOfMemoryError'}) with "
            f"{memory} of heap, and exited (status {status}; log {log})", fix)  # fmt: skip
    return VerifierResourceError(f"the verifier's Spark driver exited with status {status} (log {log})", fix)


def _doubled(memory: str) -> str:
    units = {"k": 1 / 1024, "m": 1, "g": 1024, "t": 1024 * 1024}
    number, unit = memory[:-1], memory[-1:].lower()
    try:
        mib = float(number) * units[unit] if unit in units else float(memory) / (1 << 20)
    except ValueError:
        return "4g"
    mib = max(mib * 2, 1024)
    return f"{mib / 1024:g}g" if mib >= 1024 else f"{mib:.0f}m"


def _free_memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except OSError:
        pass
    return "an unknown amount"


def lake_frames(spark, lake_root: str) -> dict[str, object]:
    """The ``rows``, ``quarantine`` and ``sessions`` outputs as pandas DataFrames."""
    path = lake_layout.open_lake(spark, lake_root)
    return {name: lake_layout.read_output(spark, path, name).toPandas() for name in ("rows", "quarantine", "sessions")}


def _s3_target(settings):
    from producers.ledger import S3Target

    return S3Target(
        endpoint=settings.endpoints().s3_endpoint, access_key=settings.s3_access_key, secret_key=settings.s3_secret_key
    )


def load_ledger(settings, ledger: str):
    """The ledger at ``ledger`` (a folder, or an ``s3a://`` prefix on the sandbox's MinIO) as a DataFrame."""
    from producers.ledger import read_ledger

    return read_ledger(ledger, s3=_s3_target(settings) if ledger.startswith(("s3a://", "s3://")) else None)


def check_lake(settings, lake_root: str) -> None:
    """Raise :class:`~job.engine.errors.LakeError` unless ``lake_root`` holds the job's committed
    output (the file sink's ``_spark_metadata`` log), before any Spark starts; a lake whose sink is
    in an older version's folder is refused (:func:`job.spark.lake.old_layout_error`)."""
    metadata = lake_layout.sink_path(lake_root) + "/_spark_metadata"
    fix = "pass the --output the job ran with (its first line says where it writes)"
    folders = (lake_layout.SINK_DIR, lake_layout.OLD_SINK_DIR)
    if lake_root.startswith(("s3a://", "s3://")):
        from sandbox.checks.health import s3_client

        bucket, _, key = lake_root.split("://", 1)[1].partition("/")
        found = []
        for folder in folders:
            prefix = (key.rstrip("/") + "/" if key else "") + f"{folder}/_spark_metadata/"
            try:
                if s3_client(settings).list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount", 0):
                    found.append(folder)
            except Exception as exc:  # noqa: BLE001 - botocore's errors have no common root worth importing here
                raise LakeError(lake_root, f"cannot list {metadata} ({exc})", fix) from None
        fix += f"; browse {settings.endpoints().s3_console}/browser/{bucket}"
    else:
        found = [f for f in folders if Path(lake_root.removeprefix("file:")).joinpath(f, "_spark_metadata").is_dir()]
    if lake_layout.OLD_SINK_DIR in found:
        raise lake_layout.old_layout_error(lake_root, lake_layout.OLD_SINK_DIR)
    if not found:
        raise LakeError(lake_root, f"no job output here ({metadata} is missing)", fix)


def verify_lake(settings, *, ledger: str | Sequence[str], lake: str, policy: str, spark=None, preflight: bool = False,
                deleted=()):  # fmt: skip
    """The report of :func:`job.verify.compare.check` for the ledger at ``ledger`` (or the
    ledgers, one per producer run, when several runs fed one job) and the lake
    root ``lake`` (``deleted``: the offset ranges Kafka deleted before the job read them), judged
    inside Spark on groups of whole sessions (:mod:`job.verify.spark_check`): the driver's memory
    follows the anomalies and sessions, not the lake's rows.

    With ``preflight`` (the command line), a local ledger is listed first, then the sandbox's
    MinIO is required to answer and the lake to hold job output, so that a wrong path or a
    stopped sandbox is reported in one line before any Spark starts. Without ``spark``, the
    verifier runs its own local one (:func:`verifier_session`): the cluster need not be up.
    """
    from job.verify.spark_check import check_frames, ledger_dataframe
    from producers.ledger import ledger_parts

    # A local ledger's wrong path is said first; an s3a:// one once MinIO is known to answer.
    ledgers = [ledger] if isinstance(ledger, str) else list(ledger)
    local = [ledger_parts(one) for one in ledgers if not one.startswith(("s3a://", "s3://"))]
    if preflight:
        from sandbox.checks.health import require

        require(settings, "minio")
        check_lake(settings, lake)
    remote = [ledger_parts(one, s3=_s3_target(settings)) for one in ledgers if one.startswith(("s3a://", "s3://"))]
    parts = [part for found in (*local, *remote) for part in found]
    own = spark is None
    spark = spark or verifier_session(settings)
    with fatal_errors(settings) if own else contextlib.nullcontext():
        sink = lake_layout.open_lake(spark, lake)
        outputs = lake_layout.read_sink(spark, sink)
        return check_frames(spark, ledger_dataframe(spark, parts), outputs, policy=policy, deleted=deleted)


def verify_archive(settings, *, ledger: str, lake: str, spark=None, raw_path: str | None = None):
    """Check that every record the ledger says Kafka acknowledged is in the raw archive of the
    lake root ``lake`` (or of ``raw_path``: another lake root);
    returns :class:`job.verify.archive_check.ArchiveReport`. Only the ledger's topics are read."""
    from pyspark.sql import functions as F

    from job.spark.lake import read_raw
    from job.verify.archive_check import check_archive

    spark = spark or verifier_session(settings)
    frame = load_ledger(settings, ledger)
    topics = sorted(set(frame["topic"].dropna()))
    raw = read_raw(spark, raw_path or lake)
    if raw is None:
        raise LakeError(
            raw_path or lake, "no sink and no raw archive here", "pass the lake root the job wrote (--lake, or --raw)"
        )
    archived = raw.where(F.col("topic").isin(topics)).select("topic", "partition", "offset").toPandas()
    return check_archive(frame, archived)
