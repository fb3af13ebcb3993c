"""Health checks that do real work, shared by every backend.

Kafka must answer metadata and create a topic; MinIO must report ready and hold the
bucket; the Spark master must report every worker alive.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal, TypeVar

from sandbox.settings import Settings

HEALTH_TOPIC = "_sandbox_health"

T = TypeVar("T")


@dataclass(frozen=True)
class Health:
    ok: bool
    detail: str

    def __bool__(self) -> bool:
        return self.ok


def check_kafka(settings: Settings, *, timeout_s: float = 5.0) -> Health:
    """Kafka answers a metadata request and can create (or already has) a topic."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(
        {
            "bootstrap.servers": settings.endpoints().kafka_bootstrap,
            "socket.timeout.ms": int(timeout_s * 1000),
            "log_level": 0,
            "logger": librdkafka_logger(),
        }
    )
    try:
        meta = admin.list_topics(timeout=timeout_s)
        if HEALTH_TOPIC not in meta.topics:
            futures = admin.create_topics([NewTopic(HEALTH_TOPIC, 1, 1)], operation_timeout=timeout_s)
            try:
                futures[HEALTH_TOPIC].result(timeout=timeout_s)
            except KafkaException as exc:
                if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                    raise
    except KafkaException as exc:
        return Health(False, f"Kafka at {settings.endpoints().kafka_bootstrap}: {exc.args[0].str()}")
    except Exception as exc:  # noqa: BLE001 - a health check reports, it does not raise
        return Health(False, f"Kafka at {settings.endpoints().kafka_bootstrap}: {exc}")
    return Health(True, f"{len(meta.brokers)} broker(s), {len(meta.topics)} topic(s)")


def check_minio(settings: Settings, *, timeout_s: float = 5.0) -> Health:
    """MinIO's readiness endpoint answers 200 and the sandbox bucket exists."""
    url = settings.endpoints().s3_endpoint + "/minio/health/ready"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            if resp.status != 200:
                return Health(False, f"{url} answered {resp.status}")
    except (urllib.error.URLError, OSError) as exc:
        return Health(False, f"{url}: {exc}")
    try:
        s3_client(settings).head_bucket(Bucket=settings.bucket)
    except Exception as exc:  # noqa: BLE001
        return Health(False, f"bucket s3://{settings.bucket} at {settings.endpoints().s3_endpoint}: {exc}")
    return Health(True, f"ready, bucket s3://{settings.bucket} present")


def check_spark(settings: Settings, *, timeout_s: float = 5.0, workers: int | None = None) -> Health:
    """The master's JSON status lists ``workers`` (default: all configured) ALIVE workers."""
    want = settings.spark_workers if workers is None else workers
    try:
        status = spark_master_status(settings, timeout_s=timeout_s)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Health(False, f"Spark master UI {settings.endpoints().spark_master_ui}: {exc}")
    alive = alive_workers(status)
    if status.get("status") != "ALIVE":
        return Health(False, f"master status is {status.get('status')}")
    if len(alive) < want:
        return Health(False, f"{len(alive)} of {want} workers alive")
    return Health(True, f"master ALIVE, {len(alive)} worker(s) alive")


ServiceName = Literal["kafka", "minio", "spark"]


def require(settings: Settings, *services: ServiceName) -> None:
    """Raise :class:`~sandbox.errors.NotRunningError` naming the first of ``services`` that
    does not answer, where it was looked for, and how to start it; ``spark`` needs the
    master and at least one worker. Call it before work that would otherwise hang on, or
    fail deep inside, a client library."""
    from sandbox.errors import NotRunningError

    probes: dict[str, tuple[str, Callable[[], Health]]] = {
        "kafka": (settings.endpoints().kafka_bootstrap, lambda: check_kafka(settings, timeout_s=3.0)),
        "minio": (settings.endpoints().s3_endpoint, lambda: check_minio(settings, timeout_s=3.0)),
        "spark": (settings.endpoints().spark_master, lambda: check_spark(settings, timeout_s=3.0, workers=1)),
    }
    for name in services:
        where, probe = probes[name]
        result = probe()
        if not result.ok:
            raise NotRunningError(
                f"the sandbox's {name} at {where} does not answer ({result.detail}); start the sandbox with "
                f"`python -m sandbox up` (state {settings.state_dir}, ports moved by OSL_PORT_OFFSET="
                f"{settings.ports.offset}), or point OSL_STATE_DIR / OSL_PORT_OFFSET at the one that runs"
            )


def spark_master_status(settings: Settings, *, timeout_s: float = 5.0) -> dict:
    with urllib.request.urlopen(settings.spark_status_url() + "/json/", timeout=timeout_s) as resp:
        return json.loads(resp.read())


def alive_workers(status: dict) -> list[dict]:
    return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]


def check_spark_worker(settings: Settings, n: int, *, timeout_s: float = 5.0) -> Health:
    """Worker ``n``'s web UI answers and the master lists it (by UI port) as ALIVE."""
    port = settings.ports.worker_ui(n)
    try:
        status = spark_master_status(settings, timeout_s=timeout_s)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return Health(False, f"Spark master UI: {exc}")
    for worker in alive_workers(status):
        if str(worker.get("webuiaddress", "")).endswith(f":{port}"):
            return Health(True, f"registered as {worker.get('id')}")
    return Health(False, f"no ALIVE worker with UI port {port} registered at the master")


def s3_client(settings: Settings):  # -> botocore client; typed loosely to keep boto3 import lazy
    import boto3
    from botocore.config import Config

    return boto3.client(
        "s3",
        endpoint_url=settings.endpoints().s3_endpoint,
        aws_access_key_id=settings.s3_access_key,
        aws_secret_access_key=settings.s3_secret_key,
        region_name="us-east-1",
        config=Config(
            s3={"addressing_style": "path"},
            connect_timeout=5,
            read_timeout=30,
            retries={"max_attempts": 2},
        ),
    )


def ensure_bucket(settings: Settings) -> None:
    """Create the sandbox bucket unless it exists; never deletes anything."""
    client = s3_client(settings)
    existing = {b["Name"] for b in client.list_buckets().get("Buckets", [])}
    if settings.bucket not in existing:
        client.create_bucket(Bucket=settings.bucket)


def wait_for(
    probe: Callable[[], T],
    *,
    timeout_s: float,
    what: str,
    interval_s: float = 0.5,
    abort: Callable[[], str | None] | None = None,
    progress: Callable[[str], None] | None = None,
) -> T:
    """Poll ``probe`` until it returns something truthy; raise TimeoutError naming ``what``.

    ``abort`` is asked between polls; a non-None answer stops the wait early with that reason
    (for example: the process being waited on has exited). With ``progress``, a wait longer
    than a few seconds says what it waits for, for how long, and the last check's answer
    (:class:`~sandbox.progress.Ticker`).
    """
    from sandbox.progress import Ticker

    deadline = time.monotonic() + timeout_s
    ticker = Ticker(progress) if progress is not None else None
    last: T = probe()
    try:
        while not last:
            if abort is not None and (reason := abort()):
                raise _Aborted(reason)
            if time.monotonic() >= deadline:
                raise TimeoutError(f"{what} not ready after {timeout_s:.0f}s (last check: {_detail(last)})")
            if ticker is not None:
                ticker(
                    lambda: (
                        f"[sandbox] waiting for {what}: {ticker.elapsed_s:.0f}s of at most {timeout_s:.0f}s (last check: {_detail(last)})"
                    )
                )
            time.sleep(interval_s)
            last = probe()
    finally:
        if ticker is not None:
            ticker.close()
    return last


def _detail(result: object) -> str:
    return str(getattr(result, "detail", result))


class _Aborted(Exception):
    pass


def librdkafka_logger(name: str = "sandbox.kafka-health"):
    """A logger for librdkafka's own lines (its retries while a broker starts): out of the
    terminal, no handler and no propagation. Callers check the outcome themselves and
    name the failure in their own error."""
    import logging

    logger = logging.getLogger(name)
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())
    logger.propagate = False
    return logger
