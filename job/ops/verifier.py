"""The verifier on the sandbox: its own Spark session (a local one whose end, out of memory
included, is one line, never a hang), the sandbox's S3 keys, and the command line's preflight.
:mod:`job.verify.lake_check` judges with whatever session and S3 target it is handed; this
module opens them from the sandbox ``Settings`` for ``python -m job verify``, the drills and the
benches."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from job.engine.errors import VerifierResourceError
from job.verify.lake_check import check_lake, verify_lake
from producers.contract import s3_parts
from producers.ledger import S3Target

#: The verifier's own Spark: a one-shot read of the lake, judged in
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
    fix = (
        f"give it more with --driver-memory (or OSL_VERIFY_DRIVER_MEMORY), e.g. --driver-memory "
        f"{_doubled(memory)}; this machine has {_free_memory()} available"
    )
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
            f"{memory} of heap, and exited (status {status}; log {log})",
            fix,
        )
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


def s3_target(settings) -> S3Target:
    """The sandbox's MinIO as the verifier reads ``s3a://`` ledgers and lakes from it."""
    endpoints = settings.endpoints()
    return S3Target(endpoint=endpoints.s3_endpoint, access_key=settings.s3_access_key, secret_key=settings.s3_secret_key)


@contextlib.contextmanager
def own_verifier(settings) -> Iterator[object]:
    """The verifier's own Spark session (:func:`verifier_session`) for the ``with`` block, whose
    JVM's end inside it is one :class:`~job.engine.errors.VerifierResourceError` line."""
    spark = verifier_session(settings)
    with fatal_errors(settings):
        yield spark


def preflight(settings, *, ledgers: Sequence[str], lake: str) -> None:
    """What ``python -m job verify`` checks before any Spark starts, each in one line: a local
    ledger's path first, then that the sandbox's MinIO answers, then that ``lake`` holds job
    output (with where to browse the bucket), then an ``s3a://`` ledger's path."""
    from job.engine.errors import LakeError
    from producers.ledger import ledger_parts
    from sandbox.checks.health import require

    remote = [one for one in ledgers if one.startswith(("s3a://", "s3://"))]
    for one in ledgers:
        if one not in remote:
            ledger_parts(one)
    require(settings, "minio")
    s3 = s3_target(settings)
    try:
        check_lake(lake, s3=s3)
    except LakeError as exc:
        if not (parts := s3_parts(lake)):
            raise
        bucket = parts[0]
        raise LakeError(exc.lake, exc.problem, f"{exc.fix}; browse {settings.endpoints().s3_console}/browser/{bucket}") from None
    for one in remote:
        ledger_parts(one, s3=s3)


def verify_on_sandbox(settings, *, ledger: str | Sequence[str], lake: str, policy: str, deleted=()):
    """:func:`preflight`, then :func:`~job.verify.lake_check.verify_lake` in the verifier's own
    Spark: what ``python -m job verify`` runs."""
    ledgers = [ledger] if isinstance(ledger, str) else list(ledger)
    preflight(settings, ledgers=ledgers, lake=lake)
    s3 = s3_target(settings)
    with own_verifier(settings) as spark:
        return verify_lake(spark, ledger=ledgers, lake=lake, policy=policy, s3=s3, deleted=deleted)
