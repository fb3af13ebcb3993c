"""The verifier's Spark side: read the lake through Spark (so the file sink's ``_spark_metadata``
decides which files count), read the ledger, and hand both to the pure :func:`job.verify.check`."""

from __future__ import annotations

from job import lake


def lake_frames(spark, lake_root: str) -> dict[str, object]:
    """The ``rows``, ``quarantine`` and ``sessions`` outputs as pandas DataFrames."""
    path = lake_root.rstrip("/") + "/sessions-out"
    return {name: lake.read_output(spark, path, name).toPandas() for name in ("rows", "quarantine", "sessions")}


def ledger_frame(settings, ledger: str):
    from producers.ledger import S3Target, read_ledger

    s3 = S3Target(
        endpoint=settings.endpoints().s3_endpoint, access_key=settings.s3_access_key, secret_key=settings.s3_secret_key
    )
    return read_ledger(ledger, s3=s3 if ledger.startswith(("s3a://", "s3://")) else None)


def verify_lake(settings, *, ledger: str, lake: str, policy: str, spark=None):
    """Read ledger and lake, return ``job.verify.check``'s report."""
    from job.verify import check
    from sandbox.spark import spark_session

    spark = spark or spark_session(settings, "verify")
    frames = lake_frames(spark, lake)
    return check(ledger_frame(settings, ledger), frames["rows"], frames["quarantine"], frames["sessions"], policy=policy)


def verify_archive(settings, *, ledger: str, lake: str, spark=None, raw_path: str | None = None):
    """Check that every record the ledger says Kafka acknowledged is in the raw archive
    (``<lake>/raw`` unless ``raw_path``); returns :class:`job.archive_check.ArchiveReport`.
    Only the ledger's topics are read."""
    from pyspark.sql import functions as F

    from job.archive_check import check_archive
    from job.lake import read_raw
    from sandbox.spark import spark_session

    spark = spark or spark_session(settings, "verify")
    frame = ledger_frame(settings, ledger)
    topics = sorted(set(frame["topic"].dropna()))
    raw = read_raw(spark, raw_path or lake.rstrip("/") + "/raw")
    archived = raw.where(F.col("topic").isin(topics)).select("topic", "partition", "offset").toPandas()
    return check_archive(frame, archived)
