"""The warm-up whose JVMs ``sandbox.jvm.class_data_sharing`` archives: run by
:func:`sandbox.jvm.class_data_sharing.ensure` in a process of its own
(``python -m sandbox.jvm.class_data_warmup``), since its JVMs are started with
``-XX:+RecordDynamicDumpInfo`` and a process has one Spark driver.

``python -m sandbox.jvm.class_data_warmup --image DIR`` records the Spark image's archives
while the image is built (docker/Dockerfile), where no Kafka or MinIO runs: the same
stateful shape on a rate source and a local Parquet sink, on a ``local-cluster`` master
whose executor is a JVM launched as a standalone worker launches one."""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from sandbox.checks.health import s3_client
from sandbox.jvm.class_data_sharing import Archives, archive_key, archives, executor_pids, java_home, prune
from sandbox.jvm.spark_session import spark_conf, spark_session
from sandbox.settings import Settings


def _dump(pid: int, target: Path, jcmd: Path) -> None:
    """Ask JVM ``pid`` (started with -XX:+RecordDynamicDumpInfo) to write its archive to
    ``target``; written under a temporary name first, so a reader never sees half a file."""
    partial = target.with_name(f".{target.name}.{uuid.uuid4().hex[:6]}")
    done = subprocess.run(
        [str(jcmd), str(pid), "VM.cds", "dynamic_dump", str(partial)], capture_output=True, text=True, timeout=180
    )
    if done.returncode != 0 or not partial.exists():
        raise RuntimeError(f"jcmd {pid} VM.cds dynamic_dump: {done.stdout[-500:]} {done.stderr[-500:]}")
    partial.replace(target)


def _count(key, frames, state):
    import pandas as pd

    total = state.get[0] if state.exists else 0
    for frame in frames:
        total += len(frame)
    state.update((total,))
    yield pd.DataFrame({"k": [key[0]], "n": [total]})


def _workload(spark, settings: Settings) -> None:
    """What the job does to its JVMs, small: a Kafka source, applyInPandasWithState on
    RocksDB, a Parquet file sink on s3a://, two micro-batches, and a read back."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from pyspark.sql.streaming.state import GroupStateTimeout

    bootstrap = settings.endpoints().kafka_bootstrap
    topic = f"_cds-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(30)
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(2000):
        producer.produce(topic, f'{{"n":{i}}}'.encode(), key=f"k{i % 20}".encode())
    producer.flush(30)
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass", "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    )

    path = f"s3a://{settings.bucket}/_cds/{topic}"
    checkpoint = settings.state_dir / "checkpoints" / "_cds" / topic
    try:
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", 1000)
            .load()
        )
        out = (
            source.selectExpr("CAST(key AS STRING) AS k", "get_json_object(CAST(value AS STRING), '$.n') AS n")
            .groupBy("k")
            .applyInPandasWithState(_count, "k string, n long", "n long", "append", GroupStateTimeout.NoTimeout)
        )
        query = (
            out.writeStream.format("parquet")
            .option("path", path)
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        if not query.awaitTermination(240):
            query.stop()
            raise RuntimeError("the warm-up query did not finish within 240 s")
        if query.exception():
            raise RuntimeError(f"the warm-up query failed: {query.exception()}")
        spark.read.parquet(path).count()
    finally:
        admin.delete_topics([topic])[topic].result(30)
        shutil.rmtree(checkpoint, ignore_errors=True)
        client = s3_client(settings)
        for listed in client.list_objects_v2(Bucket=settings.bucket, Prefix=f"_cds/{topic}").get("Contents", []):
            client.delete_object(Bucket=settings.bucket, Key=listed["Key"])


def _offline_workload(spark, *, batches: int = 3, timeout_s: float = 240.0) -> None:
    """The job's shape without its services, for an image build: a rate source,
    applyInPandasWithState on RocksDB, a local Parquet file sink, ``batches`` micro-batches with
    rows, and a read back. Waits on the query's progress, ``timeout_s`` bounding it."""
    from pyspark.sql.streaming.state import GroupStateTimeout

    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass", "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    )
    scratch = Path(tempfile.mkdtemp(prefix="osl-cds-"))
    try:
        out = (
            spark.readStream.format("rate")
            .option("rowsPerSecond", 1000)
            .load()
            .selectExpr("CAST(value % 20 AS STRING) AS k", "value AS n")
            .groupBy("k")
            .applyInPandasWithState(_count, "k string, n long", "n long", "append", GroupStateTimeout.NoTimeout)
        )
        query = (
            out.writeStream.format("parquet")
            .option("path", str(scratch / "out"))
            .option("checkpointLocation", str(scratch / "checkpoint"))
            .trigger(processingTime="1 second")
            .start()
        )
        deadline = time.monotonic() + timeout_s
        try:
            while sum(1 for p in query.recentProgress if p["numInputRows"]) < batches:
                if query.exception():
                    raise RuntimeError(f"the warm-up query failed: {query.exception()}")
                if time.monotonic() > deadline:
                    raise RuntimeError(f"the warm-up query did not run {batches} batches within {timeout_s:g} s")
                query.awaitTermination(0.5)
        finally:
            query.stop()
        spark.read.parquet(str(scratch / "out")).count()
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _image_key(settings: Settings, conf: dict[str, str]) -> str:
    """What the image's archives depend on: the classpath's jars (:func:`archive_key`), the JVM
    options and extra class path entries they are recorded with (the JVM checks the class path in
    order), and this module's workload (its source)."""
    workload = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]
    settings_of = [
        conf.get(f"spark.{role}.{key}", "") for role in ("driver", "executor") for key in ("extraJavaOptions", "extraClassPath")
    ]
    return archive_key(settings, "image", workload, *settings_of)


def _copy(source: Archives, target: Archives) -> None:
    for a, b in ((source.driver, target.driver), (source.executor, target.executor)):
        b.parent.mkdir(parents=True, exist_ok=True)
        partial = b.with_name(f".{b.name}.{uuid.uuid4().hex[:6]}")
        try:
            shutil.copy2(a, partial)
            partial.replace(b)
        finally:
            partial.unlink(missing_ok=True)  # nothing half-copied left in the image or the cache


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sandbox.jvm.class_data_warmup")
    parser.add_argument("--image", type=Path, help="record the Spark image's archives into this folder (image build)")
    parser.add_argument(
        "--reuse",
        type=Path,
        help="with --image: a build cache of archives by what they depend on; a match is copied instead of recorded",
    )
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    found = archives(settings) if args.image is None else Archives(args.image / "driver.jsa", args.image / "executor.jsa")
    jcmd = (java_home(settings) or Path("/")) / "bin" / "jcmd"
    record = "-XX:+RecordDynamicDumpInfo"  # what lets jcmd dump a running JVM's classes
    conf = spark_conf(settings)
    kept = folder = None
    if args.image is not None and args.reuse is not None:
        folder = args.reuse / _image_key(settings, conf)
        kept = Archives(folder / "driver.jsa", folder / "executor.jsa")
        if kept.exist():
            try:
                _copy(kept, found)
                os.utime(folder)  # the cache keeps the most recently used keys (prune)
            except OSError as exc:  # pruned by another build meanwhile, a full disk: record instead
                print(f"archives in the build cache not usable ({exc}); recording them")
                for target in (found.driver, found.executor):
                    target.unlink(missing_ok=True)
            else:
                print(
                    f"archives reused: {found.driver}, {found.executor} (recorded by an earlier build for the same jars, {folder.name})"
                )
                return 0
    extra = {
        "spark.executor.extraJavaOptions": f"{conf.get('spark.executor.extraJavaOptions', '')} {record}".strip(),
        "spark.driver.extraJavaOptions": f"{conf['spark.driver.extraJavaOptions']} {record}",
    }
    if args.image is not None:
        # one worker with one executor, launched as a standalone worker launches it, in this container
        extra |= {
            "spark.master": "local-cluster[1,1,1024]",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
        }
    spark = spark_session(settings, "sandbox-cds-warmup", extra=extra)
    try:
        if args.image is None:
            _workload(spark, settings)
        else:
            _offline_workload(spark)
        found.driver.parent.mkdir(parents=True, exist_ok=True)
        app = spark.sparkContext.applicationId
        pids = executor_pids(app)
        if not pids:
            raise RuntimeError(f"no executor process of {app} on this machine")
        _dump(pids[0], found.executor, jcmd)
        _dump(int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid()), found.driver, jcmd)  # noqa: SLF001
    finally:
        spark.stop()
    print(f"archives written: {found.driver}, {found.executor}")
    if kept is not None:
        try:
            _copy(found, kept)
            prune(args.reuse, keep=folder)
        except OSError as exc:  # the image has its archives; only the next build's reuse is lost
            print(f"warning: the archives were not kept in the build cache {args.reuse}: {exc}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
