"""The lake's layout and schemas: one union schema for the stateful operator's output, split
into the ``rows``, ``sessions`` and ``quarantine`` outputs by the ``output`` partition column,
and the raw archive of the input beside them as a fourth output, ``raw``.

One file sink (not four) keeps the outputs of a micro-batch in one atomic commit of the
sink's ``_spark_metadata`` log; read them through Spark (or :func:`read_output`,
:func:`read_raw`) so that files of uncommitted batches are ignored.

After a repair (:mod:`job.ops.repair`) an output has two parts: the file sink's directory,
with a fresh ``_spark_metadata`` log that only the restarted job writes to, and beside it
``<sink>-kept``, the output the repair kept (everything before its cut), written once as
plain Parquet. The readers here return both; see :mod:`job.ops.repair` for why the kept part
cannot live under the sink's log.
"""

from __future__ import annotations

from typing import Literal

Output = Literal["rows", "sessions", "quarantine"]
#: The ``output`` of the raw archive's rows: every input record, written by the same query and
#: commit as the outputs it produced (:func:`job.spark.pipeline.raw_rows`).
RAW_OUTPUT = "raw"
#: The archive's columns as :func:`read_raw` returns them (``timestamp``: Kafka's, as a timestamp).
RAW_COLUMNS = ["topic", "partition", "offset", "key", "value", "timestamp"]
#: The file sink's folder under a lake root; it holds all four outputs.
SINK_DIR = "out"


def sink_path(lake_root: str) -> str:
    """Where the job's file sink writes under ``lake_root``."""
    return lake_root.rstrip("/") + "/" + SINK_DIR


#: The file sink's partition columns: one folder per output. Each stateful task writes one
#: file per folder and batch, so a batch of a fleet writes a few files a task, not one per
#: topic and output (see docs/decisions/0008-lake-partitioned-by-output.md). ``topic`` stays a
#: column of the files.
SINK_PARTITIONS: tuple[str, ...] = ("output",)

#: The folders of a lake that an older version of the job wrote, and what each one was. The job,
#: repair, backfill and verify read and write only the current layout and refuse these
#: (:func:`open_lake`); the sandbox's lakes are disposable (docs/lake-layout.md#older-lakes).
OLD_SINK_DIR = "sessions-out"
OLD_TOPIC_FOLDERS = SINK_DIR + "/output=*/topic=*"
OLD_RAW_DIR = "raw"


def old_layout_error(lake_root: str, found: str):
    """The :class:`~job.engine.errors.LakeError` for a lake holding ``found``, one of the folders
    an older version of the job wrote (:data:`OLD_SINK_DIR`, :data:`OLD_TOPIC_FOLDERS`,
    :data:`OLD_RAW_DIR`)."""
    from job.engine.errors import LakeError

    what = {
        OLD_SINK_DIR: "the sink's folder before it was named out",
        OLD_TOPIC_FOLDERS: "a folder per topic under each output, from before topic became a column",
        OLD_RAW_DIR: "a raw archive written by its own query, from before the archive joined the sink as output=raw",
    }[found]
    return LakeError(
        lake_root,
        f"{lake_root.rstrip('/')}/{found} is {what}, a layout an older version of the job wrote; "
        f"this version reads and writes only {sink_path(lake_root)}, partitioned by output",
        "this lake was written by an older version of the job: start the job on a new --output and a new "
        "--checkpoint (it reads again what Kafka still holds; docs/lake-layout.md#older-lakes)",
    )


def open_lake(spark, lake_root: str, *, writing: bool = False, archive: bool = False) -> str:
    """The file sink's folder of ``lake_root`` (:func:`sink_path`), after refusing a lake an older
    version of the job wrote (:func:`old_layout_error`): its ``sessions-out`` sink always; with
    ``writing``, topic folders (Spark cannot read a folder whose files sit at two depths, so the job
    and repair cannot add to them; readers read them, ``topic`` becoming a partition column); with
    ``archive``, an archive folder ``raw`` (reading only ``output=raw`` would silently miss it)."""
    sink = sink_path(lake_root)
    if path_exists(spark, lake_root.rstrip("/") + "/" + OLD_SINK_DIR):
        raise old_layout_error(lake_root, OLD_SINK_DIR)
    if writing:
        fs, pattern = _hadoop_path(spark, lake_root.rstrip("/") + "/" + OLD_TOPIC_FOLDERS)
        if fs.globStatus(pattern):
            raise old_layout_error(lake_root, OLD_TOPIC_FOLDERS)
    if archive and held(spark, lake_root.rstrip("/") + "/" + OLD_RAW_DIR):
        raise old_layout_error(lake_root, OLD_RAW_DIR)
    return sink


#: (column, Spark SQL type) of the operator's output, in order.
UNION_COLUMNS: list[tuple[str, str]] = [
    ("output", "string"),
    ("session", "string"),
    ("site", "string"),
    ("epoch", "bigint"),
    ("seq", "bigint"),
    ("op", "string"),
    ("row_id", "string"),
    ("data", "string"),
    ("event_ts_ms", "bigint"),
    ("topic", "string"),
    ("partition", "int"),
    ("offset", "bigint"),
    ("reason", "string"),
    ("detail", "string"),
    ("key", "string"),
    ("value", "binary"),
    ("status", "string"),
    ("last_seq", "bigint"),
    ("rows", "bigint"),
    ("applied", "bigint"),
    ("gaps", "bigint"),
    ("duplicates", "bigint"),
    ("quarantined", "bigint"),
    ("divergences", "bigint"),
    ("epoch_changes", "bigint"),
    ("processed_ms", "bigint"),
]

#: SessionStatus fields the ``sessions`` output stores under the names the ``rows`` output
#: uses (the job writes them so, the verifier reads them back): field -> lake column.
STATUS_COLUMNS: dict[str, str] = {
    "last_topic": "topic",
    "last_partition": "partition",
    "last_offset": "offset",
    "last_event_ts_ms": "event_ts_ms",
}

#: The columns that belong to each output.
COLUMNS: dict[str, list[str]] = {
    "rows": ["session", "site", "epoch", "seq", "op", "row_id", "data", "event_ts_ms", "topic", "partition", "offset"],
    "quarantine": ["topic", "partition", "offset", "key", "value", "reason", "detail", "session", "seq", "processed_ms"],
    "sessions": [
        "session",
        "site",
        "epoch",
        "status",
        "last_seq",
        "rows",
        "applied",
        "gaps",
        "duplicates",
        "quarantined",
        "divergences",
        "epoch_changes",
        "topic",
        "partition",
        "offset",
        "event_ts_ms",
        "processed_ms",
    ],
}


def union_ddl() -> str:
    return ", ".join(f"`{name}` {kind}" for name, kind in UNION_COLUMNS)


def kept_path(sink_path: str) -> str:
    """Where a repair keeps the part of a sink's output that precedes its cut."""
    return sink_path.rstrip("/") + "-kept"


def _hadoop_path(spark, path: str):
    """``path`` as a Hadoop Path, with its file system (s3a:// or local)."""
    hpath = spark.sparkContext._jvm.org.apache.hadoop.fs.Path(path)
    return hpath.getFileSystem(spark.sparkContext._jsc.hadoopConfiguration()), hpath


def path_exists(spark, path: str) -> bool:
    """True when ``path`` exists on its Hadoop file system (s3a:// or local)."""
    fs, hpath = _hadoop_path(spark, path)
    return bool(fs.exists(hpath))


#: Bytes per file in the sink log's compact file, in the job's lake (full s3a:// paths of the
#: outputs' files, as measured on the recovery bench's lake; docs/decisions/0020-sink-log-bound.md).
SINK_LOG_ENTRY_BYTES = 282
#: Files listed in the sink's log past which the job warns at its start. Every tenth batch
#: Spark rewrites the whole list and every reader of the lake reads it, so the rewrite grows
#: with the lake; about 50,000 files is where the job's 1 s trigger starts to feel it
#: (docs/decisions/0020-sink-log-bound.md).
SINK_LOG_WARN_FILES = 50_000


def sink_log_batches(spark, sink: str) -> list[int]:
    """The batch ids in a file sink's ``_spark_metadata`` log (compacted ones included), sorted."""
    fs, hpath = _hadoop_path(spark, sink.rstrip("/") + "/_spark_metadata")
    if not fs.exists(hpath):
        return []
    names = [status.getPath().getName().split(".")[0] for status in fs.listStatus(hpath)]
    return sorted(int(n) for n in names if n.isdigit())


def sink_log_compact(spark, sink: str) -> tuple[int, int] | None:
    """(batch, bytes) of the newest compact file in ``sink``'s ``_spark_metadata`` log, the
    list of every file the sink ever committed; None while the log has none (or no log)."""
    fs, pattern = _hadoop_path(spark, sink.rstrip("/") + "/_spark_metadata/*.compact")
    found = [(int(s.getPath().getName().split(".")[0]), int(s.getLen())) for s in (fs.globStatus(pattern) or [])]
    return max(found) if found else None


def sink_log_warning(sink: str, compact: tuple[int, int] | None, *, warn_files: int = SINK_LOG_WARN_FILES) -> str | None:
    """What to tell the user when ``sink``'s log (:func:`sink_log_compact`) lists about
    ``warn_files`` files or more, else None. The file sink has no bound on it that keeps the lake
    readable: its ``retention`` option hides old files from every reader of the log."""
    if compact is None:
        return None
    batch, size = compact
    files = size // SINK_LOG_ENTRY_BYTES
    if files < warn_files:
        return None
    return (
        f"the lake's sink log {sink.rstrip('/')}/_spark_metadata lists about {files:,} files "
        f"({size / 1e6:.0f} MB in {batch}.compact): Spark rewrites that list every tenth batch and "
        f"every reader of the lake reads it, so both slow down as it grows (3.2-3.5 s a rewrite at "
        f"80,000 files on the sandbox; docs/decisions/0020-sink-log-bound.md). Start the next run on a new lake and "
        f"checkpoint (--output, --checkpoint) to begin a small log; this lake stays readable as it is"
    )


def read_sink(spark, sink_path: str):
    """A file sink's output, read through its metadata log, plus what a repair kept beside it."""
    kept = kept_path(sink_path)
    if not path_exists(spark, kept):
        return spark.read.parquet(sink_path)
    frames = [spark.read.parquet(p) for p in (sink_path, kept) if path_exists(spark, p)]
    out = frames[0]
    for frame in frames[1:]:
        out = out.unionByName(frame, allowMissingColumns=True)
    return out


def read_output(spark, sink: str, output: Output):
    """One output as a Spark DataFrame, read through the file sink's metadata log (``sink``:
    the sink's folder, :func:`open_lake` of a lake root)."""
    from pyspark.sql import functions as F

    df = read_sink(spark, sink)
    return df.where(F.col("output") == output).select(*COLUMNS[output])


def held(spark, path: str) -> bool:
    """True when a sink folder, or what a repair kept beside it (:func:`kept_path`), exists."""
    return path_exists(spark, path) or path_exists(spark, kept_path(path))


def read_raw(spark, lake_root: str):
    """The raw archive of ``lake_root`` (the sink's ``raw`` output): every input record with the
    :data:`RAW_COLUMNS`, read through the sink's metadata log (plus what a repair kept). None when
    the lake has no sink; an archive folder of an older job is refused (:func:`open_lake`)."""
    from pyspark.sql import functions as F

    sink = open_lake(spark, lake_root, archive=True)
    if not held(spark, sink):
        return None
    df = read_sink(spark, sink).where(F.col("output") == RAW_OUTPUT)
    return df.withColumn("timestamp", F.timestamp_millis("event_ts_ms")).select(*RAW_COLUMNS)
