"""The executors keep their Kafka consumers between batches: Spark's pool holds 64 by default
and past that closes the oldest idle one on every borrow, so a fleet's 150 partitions built new
consumers each batch (``spark.kafka.consumer.cache.capacity`` in ``sandbox.jvm.spark_session.spark_conf``)."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer

from producers.kafka import ensure_topics

#: What Spark's consumer pool logs when it is past its capacity and closes idle consumers.
EVICTING = "Pool exceeds its soft max size"
PARTITIONS = 100  # > 64, Spark's default capacity, on one topic; two reads borrow 200 consumers


@pytest.mark.integration
def test_two_reads_of_a_fleet_s_partitions_evict_no_consumer(sandbox, spark, bootstrap):
    if sandbox.settings.backend != "local":
        pytest.skip("reads the executors' logs in the local backend's work folders")
    topic = f"pool-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [topic], partitions=PARTITIONS)
    producer = Producer({"bootstrap.servers": bootstrap})
    for p in range(PARTITIONS):
        producer.produce(topic, value=b"x", partition=p)
    assert producer.flush(30) == 0, "the records were not delivered"
    for _ in range(2):  # each read is a new query: its own consumer group, so its own pooled consumers
        read = spark.read.format("kafka").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load()
        assert read.count() == PARTITIONS
    app = spark.sparkContext.applicationId
    logs = sorted((sandbox.settings.state_dir / "data").glob(f"spark-worker-*/work/{app}/*/stderr"))
    text = {str(log): log.read_text(errors="replace") for log in logs}
    assert text and any("ConsumerConfig values" in t for t in text.values()), f"no executor log of {app} shows a consumer: {logs}"
    evicting = {log: t.count(EVICTING) for log, t in text.items() if EVICTING in t}
    assert not evicting, f"the executors closed pooled Kafka consumers ('{EVICTING}'): {evicting}"
