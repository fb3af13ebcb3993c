"""Prove each service does real work: a Kafka round trip, an S3 round trip, and a Spark job on
the standalone cluster that reads a Kafka topic and writes Parquet to ``s3a://``."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from sandbox.artifacts import Progress, say
from sandbox.checks.health import librdkafka_logger, s3_client
from sandbox.settings import Settings


@dataclass(frozen=True)
class Proof:
    name: str
    ok: bool
    detail: str
    seconds: float


def kafka_round_trip(settings: Settings, *, messages: int = 100, timeout_s: float = 30.0) -> str:
    """Create a topic, produce ``messages`` keyed records, consume them all back in order."""
    from confluent_kafka import Consumer, KafkaException, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    bootstrap = settings.endpoints().kafka_bootstrap
    topic = f"_smoke-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(timeout_s)
    # A broker that has just started answers the idempotent producer's first PID request
    # with "coordinator load in progress" and librdkafka retries; its own warning about it
    # stays out of the terminal; the round trip's outcome is checked below.
    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, "logger": librdkafka_logger("sandbox.checks.smoke")}
    )
    sent = [f"message-{i}".encode() for i in range(messages)]
    errors: list[str] = []
    for value in sent:
        producer.produce(topic, value, key=b"smoke", on_delivery=lambda err, _m: err and errors.append(str(err)))
    if producer.flush(timeout_s) or errors:
        raise RuntimeError(f"Kafka {bootstrap}: {len(errors)} delivery errors, e.g. {errors[:1]}")
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + timeout_s
    try:
        while len(got) < messages and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise KafkaException(msg.error())
            got.append(msg.value())
    finally:
        consumer.close()
        admin.delete_topics([topic])[topic].result(timeout_s)
    if got != sent:
        raise RuntimeError(f"Kafka {bootstrap}: sent {messages} messages to {topic}, read back {len(got)} (or out of order)")
    return f"{messages} messages through {topic} and back, in order"


def s3_round_trip(settings: Settings) -> str:
    """Put an object, find it by listing, get it back byte for byte, delete it."""
    client = s3_client(settings)
    key = f"_smoke/{uuid.uuid4().hex}.bin"
    body = uuid.uuid4().bytes * 1024
    client.put_object(Bucket=settings.bucket, Key=key, Body=body)
    try:
        listed = [o["Key"] for o in client.list_objects_v2(Bucket=settings.bucket, Prefix="_smoke/").get("Contents", [])]
        if key not in listed:
            raise RuntimeError(f"s3://{settings.bucket}/{key} was put but is not listed")
        got = client.get_object(Bucket=settings.bucket, Key=key)["Body"].read()
        if got != body:
            raise RuntimeError(f"s3://{settings.bucket}/{key}: read {len(got)} bytes back, wrote {len(body)}")
    finally:
        client.delete_object(Bucket=settings.bucket, Key=key)
    return f"put, list, get and delete of a {len(body) // 1024} KiB object in s3://{settings.bucket}"


def spark_kafka_to_parquet(settings: Settings, *, messages: int = 1000, progress: Progress = say) -> str:
    """On the standalone cluster: read a Kafka topic (batch), write Parquet to s3a://, read it back."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from sandbox.jvm.spark_session import spark_session

    bootstrap = settings.endpoints().kafka_bootstrap
    topic = f"_smoke-spark-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(messages):
        producer.produce(topic, str(i).encode(), key=str(i % 7).encode())
    producer.flush(30)
    spark = spark_session(settings, "sandbox-smoke", progress=progress)
    try:
        master = spark.sparkContext.master
        if not master.startswith("spark://"):
            raise RuntimeError(f"the smoke job ran on {master}, not on the standalone cluster")
        path = f"s3a://{settings.bucket}/_smoke/{topic}"
        (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("CAST(value AS STRING) AS value", "partition", "offset")
            .write.mode("overwrite")
            .parquet(path)
        )
        back = spark.read.parquet(path)
        count = back.count()
        total = back.selectExpr("sum(CAST(value AS BIGINT))").first()[0]
        executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    finally:
        admin.delete_topics([topic])[topic].result(30)
    if count != messages or total != messages * (messages - 1) // 2:
        raise RuntimeError(f"Spark read {count} rows (sum {total}) back from {path}, expected {messages}")
    return f"{count} Kafka records -> Parquet at {path} -> read back on {master} ({executors} executors)"


def run_all(settings: Settings, *, progress: Progress = say) -> list[Proof]:
    """Run every proof, print one line each, and return every proof, failed ones included
    (each failed :class:`Proof` says what went wrong); check ``all(p.ok for p in proofs)``."""
    checks: list[tuple[str, Callable[[], str]]] = [
        ("kafka", lambda: kafka_round_trip(settings)),
        ("minio", lambda: s3_round_trip(settings)),
        ("spark", lambda: spark_kafka_to_parquet(settings, progress=progress)),
    ]
    proofs = []
    for name, check in checks:
        started = time.monotonic()
        try:
            proof = Proof(name, True, check(), time.monotonic() - started)
        except Exception as exc:  # noqa: BLE001 - every proof is reported, then the verdict
            proof = Proof(name, False, f"{type(exc).__name__}: {exc}", time.monotonic() - started)
        progress(f"[smoke] {'ok  ' if proof.ok else 'FAIL'} {name:<6} {proof.detail} ({proof.seconds:.1f}s)")
        proofs.append(proof)
    return proofs
