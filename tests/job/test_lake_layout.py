"""The lake's layout: one sink ``out`` partitioned by output. A lake an older version of the job
wrote (its sink in ``sessions-out``, topic folders under each output, the raw archive in its own
folder ``raw``) is refused with one error that says how to start a new lake."""

from __future__ import annotations

import glob
from pathlib import Path
from types import SimpleNamespace

import pytest

from job.engine.errors import LakeError
from job.spark import lake
from job.verify.lake_check import check_lake, listed_sink_log


def _sink(root, folder: str) -> None:
    (root / folder / "_spark_metadata").mkdir(parents=True)


def _refusal(root, found: str, what: str) -> str:
    return (
        f"lake {root}: {root}/{found} is {what}, a layout an older version of the job wrote; "
        f"this version reads and writes only {root}/out, partitioned by output; "
        "this lake was written by an older version of the job: start the job on a new --output and a new "
        "--checkpoint (it reads again what Kafka still holds; docs/lake-layout.md#older-lakes)"
    )


class _Path:
    """Hadoop's Path and file system on the local disk: what :func:`lake.open_lake` asks of them."""

    def __init__(self, path: str) -> None:
        self.local = path.removeprefix("file:")

    def getFileSystem(self, _conf):  # noqa: N802 - Hadoop's name
        return self

    def exists(self, path: _Path) -> bool:
        return Path(path.local).exists()

    def globStatus(self, pattern: _Path):  # noqa: N802 - Hadoop's name
        return glob.glob(pattern.local) or None


_HADOOP = SimpleNamespace(fs=SimpleNamespace(Path=_Path))
LOCAL_SPARK = SimpleNamespace(
    sparkContext=SimpleNamespace(
        _jvm=SimpleNamespace(org=SimpleNamespace(apache=SimpleNamespace(hadoop=_HADOOP))),
        _jsc=SimpleNamespace(hadoopConfiguration=lambda: None),
    )
)


def test_check_lake_accepts_out_refuses_sessions_out_with_the_fix_and_names_out_when_neither(tmp_path):
    new, old, empty = tmp_path / "new", tmp_path / "old", tmp_path / "empty"
    _sink(new, lake.SINK_DIR)
    _sink(old, lake.OLD_SINK_DIR)
    empty.mkdir()
    check_lake(str(new))
    with pytest.raises(LakeError) as refused:
        check_lake(str(old))
    assert str(refused.value) == _refusal(old, "sessions-out", "the sink's folder before it was named out")
    with pytest.raises(LakeError, match=r"/out/_spark_metadata is missing"):
        check_lake(str(empty))


def test_open_lake_refuses_each_older_layout_where_it_matters_and_gives_a_current_lake_its_sink(tmp_path):
    current, sessions_out, topics, archive = (tmp_path / n for n in ("current", "sessions-out", "topics", "archive"))
    _sink(current, lake.SINK_DIR)
    (current / "out" / "output=rows").mkdir()
    _sink(sessions_out, lake.OLD_SINK_DIR)
    (topics / "out" / "output=rows" / "topic=site-a").mkdir(parents=True)
    _sink(archive, lake.SINK_DIR)
    _sink(archive, lake.OLD_RAW_DIR)
    for writing, reading_archive in ((False, False), (True, True)):
        assert lake.open_lake(LOCAL_SPARK, str(current), writing=writing, archive=reading_archive) == f"{current}/out"
    cases = [
        (sessions_out, {}, "sessions-out", "the sink's folder before it was named out"),
        (
            topics,
            {"writing": True},
            "out/output=*/topic=*",
            "a folder per topic under each output, from before topic became a column",
        ),
        (
            archive,
            {"archive": True},
            "raw",
            "a raw archive written by its own query, from before the archive joined the sink as output=raw",
        ),
    ]
    for root, how, found, what in cases:
        with pytest.raises(LakeError) as refused:
            lake.open_lake(LOCAL_SPARK, str(root), **how)
        assert str(refused.value) == _refusal(root, found, what), root
    # a reader of the outputs reads topic folders (topic becomes a partition column) and ignores `raw`
    assert lake.open_lake(LOCAL_SPARK, str(topics)) == f"{topics}/out"
    assert lake.open_lake(LOCAL_SPARK, str(archive)) == f"{archive}/out"


@pytest.mark.integration
def test_open_lake_refuses_an_old_layout_through_hadoop_s_file_system(spark, tmp_path):
    frame = spark.createDataFrame([("rows", "t1", 1), ("sessions", "t2", 3)], "output string, topic string, offset bigint")
    frame.write.partitionBy("output", "topic").parquet(f"file:{tmp_path}/topics/out")
    frame.write.partitionBy(*lake.SINK_PARTITIONS).parquet(f"file:{tmp_path}/current/out")
    _sink(tmp_path / "old", lake.OLD_SINK_DIR)
    with pytest.raises(LakeError, match=r"topic=\* is a folder per topic"):
        lake.open_lake(spark, f"file:{tmp_path}/topics", writing=True)
    with pytest.raises(LakeError, match=r"/sessions-out is the sink's folder before it was named out"):
        lake.open_lake(spark, f"file:{tmp_path}/old")
    assert lake.open_lake(spark, f"file:{tmp_path}/current", writing=True, archive=True) == f"file:{tmp_path}/current/out"
    # why the job cannot add to topic folders: a folder whose files sit at two depths cannot be read
    frame.write.mode("append").partitionBy(*lake.SINK_PARTITIONS).parquet(f"file:{tmp_path}/topics/out")
    with pytest.raises(Exception, match="(?i)conflicting"):
        spark.read.parquet(f"file:{tmp_path}/topics/out").collect()


def test_the_sink_log_warning_names_the_log_its_size_and_the_fix_past_the_threshold_only():
    sink = "s3a://lake/job/out"
    files = lake.SINK_LOG_WARN_FILES
    assert lake.sink_log_warning(sink, None) is None
    assert lake.sink_log_warning(sink, (99, (files - 1) * lake.SINK_LOG_ENTRY_BYTES)) is None
    warning = lake.sink_log_warning(sink, (6249, files * lake.SINK_LOG_ENTRY_BYTES))
    assert warning is not None
    assert "s3a://lake/job/out/_spark_metadata" in warning and "6249.compact" in warning
    assert f"about {files:,} files" in warning and "--output, --checkpoint" in warning


def test_the_sink_log_listed_without_spark_is_its_batch_ids_sorted_or_none_where_it_cannot_be_listed(tmp_path):
    log = tmp_path / "out" / "_spark_metadata"
    assert listed_sink_log(str(tmp_path)) == []  # no log yet
    log.mkdir(parents=True)
    for name in ("10", "9.compact", "2", ".10.crc", ".11.0c1d.tmp"):
        (log / name).write_text("v1")
    assert listed_sink_log(str(tmp_path)) == [2, 9, 10]
    assert listed_sink_log(f"file:{tmp_path}") == [2, 9, 10]
    assert listed_sink_log("s3a://lake/job") is None  # no S3 endpoint given: Spark lists it
    from producers.ledger import S3Target

    nowhere = S3Target(endpoint="http://127.0.0.1:1", access_key="a", secret_key="b")
    assert listed_sink_log("s3a:///job", s3=nowhere) is None  # no bucket: pyarrow refuses the path


@pytest.mark.integration
def test_sink_log_compact_reads_the_newest_compact_file_spark_itself_wrote(spark, tmp_path):
    """Spark's own sink log class writes 25 batches (compacting at batches 9 and 19); the job's
    check finds 19.compact, with its size, and warns on it at a low enough threshold."""
    jvm = spark._jvm
    status = jvm.org.apache.spark.sql.execution.streaming.sinks.SinkFileStatus
    sink = f"file:{tmp_path}/out"
    assert lake.sink_log_compact(spark, sink) is None  # no log yet
    log = jvm.org.apache.spark.sql.execution.streaming.sinks.FileStreamSinkLog(
        1, spark._jsparkSession, f"{sink}/_spark_metadata", getattr(getattr(jvm.scala, "None$"), "MODULE$")
    )
    for batch in range(25):
        files = spark.sparkContext._gateway.new_array(status, 4)
        for i in range(4):
            files[i] = status(f"{sink}/output=rows/part-{i:05d}-{batch:04d}.zstd.parquet", 3100, False, 0, 1, 1, "add")
        assert log.add(batch, files)
    compacts = sorted(p.name for p in (tmp_path / "out" / "_spark_metadata").glob("*.compact"))
    assert compacts == ["19.compact", "9.compact"]
    size = (tmp_path / "out" / "_spark_metadata" / "19.compact").stat().st_size
    assert lake.sink_log_compact(spark, sink) == (19, size)
    # the command line's listing before Spark starts (job/cli.py) finds the batches Spark's finds
    assert listed_sink_log(f"file:{tmp_path}") == lake.sink_log_batches(spark, sink) == list(range(25))
    assert size // lake.SINK_LOG_ENTRY_BYTES < 80  # 80 files listed, each entry shorter than the lake's
    warning = lake.sink_log_warning(sink, (19, size), warn_files=size // lake.SINK_LOG_ENTRY_BYTES)
    assert warning is not None and "19.compact" in warning
