"""Spark configuration that points a driver at the sandbox's cluster, Kafka jars and MinIO."""

from __future__ import annotations

import sys

from sandbox import artifacts
from sandbox.artifacts import Progress, say
from sandbox.settings import Settings


def spark_conf(settings: Settings, *, progress: Progress = say) -> dict[str, str]:
    """Conf for a driver on this machine: the standalone master, ``spark.jars`` from the cache
    (never a fetch at query time), and s3a pointed at MinIO with path-style access."""
    jars = artifacts.spark_job_jars(settings, progress=progress)
    e = settings.endpoints()
    return {
        "spark.master": e.spark_master,
        "spark.jars": ",".join(str(j) for j in jars),
        "spark.driver.host": settings.host,
        "spark.driver.bindAddress": settings.host,
        "spark.ui.port": str(4040 + settings.ports.kafka - 9092),
        "spark.executor.memory": "1g",
        "spark.executor.cores": str(settings.spark_worker_cores),
        "spark.cores.max": str(settings.spark_worker_cores * settings.spark_workers),
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.sql.shuffle.partitions": "4",
        "spark.ui.showConsoleProgress": "false",
        "spark.log.level": "WARN",
        "spark.sql.session.timeZone": "UTC",
        "spark.hadoop.fs.s3a.endpoint": e.s3_endpoint,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": settings.s3_access_key,
        "spark.hadoop.fs.s3a.secret.key": settings.s3_secret_key,
        "spark.hadoop.fs.s3a.aws.credentials.provider": "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider",
        "spark.hadoop.fs.s3a.endpoint.region": "us-east-1",
        "spark.hadoop.fs.s3a.attempts.maximum": "3",
        "spark.hadoop.fs.s3a.connection.establish.timeout": "15s",
        "spark.hadoop.fs.s3a.connection.timeout": "30s",
    }


def spark_session(settings: Settings, app_name: str, *, extra: dict[str, str] | None = None, progress: Progress = say):
    """A SparkSession on the sandbox cluster (``getOrCreate``: an existing session is reused)."""
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.appName(app_name)
    for key, value in {**spark_conf(settings, progress=progress), **(extra or {})}.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
