"""The local backend against real Kafka, MinIO and a Spark standalone cluster."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from sandbox import ServiceState, paused
from sandbox.checks.health import alive_workers, check_spark, spark_master_status, wait_for
from sandbox.checks.smoke import kafka_round_trip, s3_round_trip, spark_kafka_to_parquet

pytestmark = pytest.mark.integration


def test_kafka_produce_consume_round_trip(sandbox):
    assert "100 messages" in kafka_round_trip(sandbox.settings, messages=100)


def test_s3_put_list_get_round_trip(sandbox):
    assert "put, list, get" in s3_round_trip(sandbox.settings)


@pytest.mark.slow
def test_spark_job_on_standalone_cluster_reads_kafka_writes_parquet_to_s3a(sandbox, spark):
    detail = spark_kafka_to_parquet(sandbox.settings, messages=500)
    assert "500 Kafka records" in detail
    assert spark.sparkContext.master == sandbox.settings.endpoints().spark_master


def test_status_reports_every_service_running_with_endpoint_and_log(sandbox):
    statuses = {s.name: s for s in sandbox.status()}
    assert list(statuses) == ["kafka", "minio", "spark-master", "spark-worker-1", "spark-worker-2"]
    for status in statuses.values():
        assert status.state == ServiceState.RUNNING, status
        assert status.pid and status.log.endswith(f"{status.name}.log")
    assert statuses["spark-master"].ui == sandbox.settings.endpoints().spark_master_ui


def test_up_twice_is_a_no_op(sandbox):
    before = {s.name: s.pid for s in sandbox.status()}
    sandbox.up()
    assert {s.name: s.pid for s in sandbox.status()} == before


@pytest.mark.slow
def test_kill_worker_leaves_one_alive_and_restart_brings_back_two(sandbox):
    settings = sandbox.settings
    try:
        sandbox.kill("spark-worker-1")  # inside: it signals first, then waits, and the wait can fail
        wait_for(
            lambda: len(alive_workers(spark_master_status(settings))) == 1,
            timeout_s=60,
            what="the master noticing the killed worker",
        )
        assert {s.name: s.state for s in sandbox.status()}["spark-worker-1"] == ServiceState.STOPPED
    finally:  # the sandbox is shared: a failure here must not leave the next tests one worker short
        sandbox.restart("spark-worker-1")
    assert check_spark(settings).ok
    assert len(alive_workers(spark_master_status(settings))) == 2


@pytest.mark.slow
def test_a_killed_master_takes_the_running_application_and_its_executors_back(sandbox, spark):
    # Without a recovery mode the new master would know no application, and would have the
    # re-registering workers kill this one's executors as unknown (chapter 04).
    import json
    import urllib.request

    sc = spark.sparkContext

    def executors() -> set[str]:
        url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/executors"
        with urllib.request.urlopen(url, timeout=10) as response:
            return {e["id"] for e in json.load(response) if e["id"] != "driver" and e.get("isActive", True)}

    assert spark.range(1000).count() == 1000
    before = executors()
    assert before
    try:
        sandbox.kill("spark-master")
    finally:  # the sandbox is shared: whatever the kill did, the master comes back
        sandbox.restart("spark-master")  # returns once the master is ALIVE: its recovery is complete
    status = spark_master_status(sandbox.settings)
    assert sc.applicationId in [app["id"] for app in status["activeapps"]], status["activeapps"]
    assert len(alive_workers(status)) == 2
    assert spark.range(1000).count() == 1000
    assert executors() == before


@pytest.mark.slow
def test_paused_kafka_times_a_client_out_and_resume_lets_it_finish(sandbox):
    bootstrap = sandbox.settings.endpoints().kafka_bootstrap
    topic = f"_pause-test-{uuid.uuid4().hex[:8]}"
    kafka_round_trip(sandbox.settings, messages=1)  # the broker answers before the pause
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 60000})
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    delivered: list[object] = []
    with paused(sandbox, "kafka"):
        assert {s.name: s.state for s in sandbox.status()}["kafka"] == ServiceState.PAUSED
        consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "pause-test"})
        with pytest.raises(KafkaException):
            consumer.committed([TopicPartition(topic, 0)], timeout=3.0)
        consumer.close()
        producer.produce(topic, b"sent while paused", on_delivery=lambda err, msg: delivered.append(err or msg.offset()))
        assert producer.flush(2.0) == 1, "a paused broker must not acknowledge"
        assert delivered == []
    assert producer.flush(60.0) == 0
    assert delivered == [0]


def test_fault_on_unknown_service_names_the_choices(sandbox):
    from sandbox.errors import UnknownServiceError

    with pytest.raises(UnknownServiceError, match="spark-worker-1"):
        sandbox.kill("spark-worker-9")


@pytest.mark.slow
def test_s3a_multipart_upload_and_bulk_delete_work_against_minio(sandbox, spark):
    # The AWS SDK v2 that S3A brings (2.35) changed its default checksums; MinIO refused
    # its multi-object delete until S3A was told to send Content-MD5 (sandbox/jvm/spark_session.py).
    jvm = spark._jvm
    conf = jvm.org.apache.hadoop.conf.Configuration(spark._jsc.hadoopConfiguration())
    conf.set("fs.s3a.multipart.size", "5M")
    conf.set("fs.s3a.multipart.threshold", "5M")
    conf.setBoolean("fs.s3a.impl.disable.cache", True)
    base = f"s3a://{sandbox.settings.bucket}/itest-s3a/{uuid.uuid4().hex[:8]}"
    root = jvm.org.apache.hadoop.fs.Path(base)
    fs = root.getFileSystem(conf)

    big = jvm.org.apache.hadoop.fs.Path(base + "/big.bin")
    out = fs.create(big)
    for _ in range(12):  # 12 MiB in 5 MiB parts: a multipart upload
        out.write(bytearray(1 << 20))
    out.close()
    assert fs.getFileStatus(big).getLen() == 12 << 20

    spark.range(0, 600, 1, 60).write.parquet(base + "/many")  # 60 objects, the batch committer's path
    assert spark.read.parquet(base + "/many").count() == 600
    assert fs.delete(root, True)  # a recursive delete of 60+ keys goes through DeleteObjects
    assert not fs.exists(root)
    fs.close()
