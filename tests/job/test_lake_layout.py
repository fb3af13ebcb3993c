"""The lake's sink folder: ``out`` for a new lake, ``sessions-out`` kept for one an older version
wrote (its ``_spark_metadata`` names every file by its full path, so the folder cannot move)."""

from __future__ import annotations

import pytest

from job.engine.errors import LakeError
from job.spark import lake
from job.verify.lake_check import check_lake


def _sink(root, folder: str) -> None:
    (root / folder / "_spark_metadata").mkdir(parents=True)


def test_check_lake_accepts_a_lake_written_under_either_name_and_names_the_new_one_when_neither(tmp_path, sandbox_settings):
    new, old, empty = tmp_path / "new", tmp_path / "old", tmp_path / "empty"
    _sink(new, lake.SINK_DIR)
    _sink(old, lake.LEGACY_SINK_DIR)
    empty.mkdir()
    check_lake(sandbox_settings, str(new))
    check_lake(sandbox_settings, str(old))
    with pytest.raises(LakeError, match=r"/out/_spark_metadata is missing"):
        check_lake(sandbox_settings, str(empty))


@pytest.mark.integration
def test_find_sink_keeps_an_old_lake_s_folder_and_gives_a_new_lake_out(spark, tmp_path):
    old, both, new = tmp_path / "old", tmp_path / "both", tmp_path / "new"
    _sink(old, lake.LEGACY_SINK_DIR)
    _sink(both, lake.LEGACY_SINK_DIR)
    _sink(both, lake.SINK_DIR)
    new.mkdir()
    assert lake.find_sink(spark, f"file:{old}") == f"file:{old}/sessions-out"
    assert lake.find_sink(spark, f"file:{both}") == f"file:{both}/out"
    assert lake.find_sink(spark, f"file:{new}") == f"file:{new}/out"


@pytest.mark.integration
def test_a_new_sink_has_a_folder_per_output_and_an_old_one_keeps_its_topic_folders(spark, tmp_path):
    frame = spark.createDataFrame([("rows", "t1", 1), ("rows", "t2", 2), ("sessions", "t2", 3)],
                                  "output string, topic string, offset bigint")  # fmt: skip
    new, old = f"file:{tmp_path}/new", f"file:{tmp_path}/old"
    frame.write.partitionBy(*lake.SINK_PARTITIONS).parquet(new)
    frame.write.partitionBy(*lake.LEGACY_SINK_PARTITIONS).parquet(old)
    assert lake.sink_partitions(spark, new) == ("output",)
    assert lake.sink_partitions(spark, old) == ("output", "topic")
    assert lake.sink_partitions(spark, f"file:{tmp_path}/none") == lake.SINK_PARTITIONS  # a new lake
    for root in (new, old):  # readers select topic as a column in either layout
        got = sorted(tuple(r) for r in spark.read.parquet(root).select("output", "topic", "offset").collect())
        assert got == [("rows", "t1", 1), ("rows", "t2", 2), ("sessions", "t2", 3)], root
    # why an old lake keeps its layout: a folder whose files sit at two depths cannot be read
    frame.write.mode("append").partitionBy(*lake.SINK_PARTITIONS).parquet(old)
    with pytest.raises(Exception, match="(?i)conflicting"):
        spark.read.parquet(old).collect()


def test_the_sink_log_warning_names_the_log_its_size_and_the_fix_past_the_threshold_only():
    sink = "s3a://lake/job/out"
    files = lake.SINK_LOG_WARN_FILES
    assert lake.sink_log_warning(sink, None) is None
    assert lake.sink_log_warning(sink, (99, (files - 1) * lake.SINK_LOG_ENTRY_BYTES)) is None
    warning = lake.sink_log_warning(sink, (6249, files * lake.SINK_LOG_ENTRY_BYTES))
    assert warning is not None
    assert "s3a://lake/job/out/_spark_metadata" in warning and "6249.compact" in warning
    assert f"about {files:,} files" in warning and "--output, --checkpoint" in warning


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
    assert size // lake.SINK_LOG_ENTRY_BYTES < 80  # 80 files listed, each entry shorter than the lake's
    warning = lake.sink_log_warning(sink, (19, size), warn_files=size // lake.SINK_LOG_ENTRY_BYTES)
    assert warning is not None and "19.compact" in warning
