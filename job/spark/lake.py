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
#: Where a job before the archive joined the sink archived the input: a second query's file
#: sink ``<lake>/raw``, partitioned by topic, with its own checkpoint ``<checkpoint>/raw``. A
#: job whose checkpoint has that query keeps it (:func:`job.spark.pipeline.start`), since a
#: switch would leave out the records between the two queries' offsets; :func:`read_raw`
#: reads both places.
LEGACY_RAW_DIR = "raw"

#: The file sink's folder under a lake root; it holds all three outputs.
SINK_DIR = "out"
#: Its name before it held all three outputs under one name (``sessions-out``). A lake written
#: then keeps it: the sink's ``_spark_metadata`` log names every file by its full path, so the
#: folder cannot be renamed without rewriting the log. :func:`find_sink` reads and the job
#: keeps writing such a lake where it is.
LEGACY_SINK_DIR = "sessions-out"


def sink_path(lake_root: str, folder: str = SINK_DIR) -> str:
    """Where the job's file sink writes under a new ``lake_root``."""
    return lake_root.rstrip("/") + "/" + folder


def find_sink(spark, lake_root: str) -> str:
    """The file sink's folder of an existing ``lake_root``: ``out``, or ``sessions-out`` in a
    lake an older version of the job wrote (and that has no ``out``)."""
    new, old = sink_path(lake_root), sink_path(lake_root, LEGACY_SINK_DIR)
    if not path_exists(spark, new) and path_exists(spark, old):
        return old
    return new


#: The file sink's partition columns: one folder per output. Each stateful task writes one
#: file per folder and batch, so a batch of a fleet writes a few files a task, not one per
#: topic and output (see docs/decisions/0008-lake-partitioned-by-output.md). ``topic`` stays a
#: column of the files; readers select it either way.
SINK_PARTITIONS: tuple[str, ...] = ("output",)
#: The partition columns of a lake an older version of the job wrote: a folder per topic under
#: each output. Spark refuses to read a folder whose files sit at two depths, so such a lake
#: is continued in its own layout (:func:`sink_partitions`).
LEGACY_SINK_PARTITIONS: tuple[str, ...] = ("output", "topic")


def sink_partitions(spark, sink: str) -> tuple[str, ...]:
    """The partition columns to write ``sink`` with: :data:`SINK_PARTITIONS`, or the topic
    folders of an existing sink written before them (:data:`LEGACY_SINK_PARTITIONS`)."""
    fs, pattern = _hadoop_path(spark, sink.rstrip("/") + "/output=*/topic=*")
    found = fs.globStatus(pattern)
    return LEGACY_SINK_PARTITIONS if found is not None and len(found) > 0 else SINK_PARTITIONS


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
        "session", "site", "epoch", "status", "last_seq", "rows", "applied", "gaps", "duplicates",
        "quarantined", "divergences", "epoch_changes", "topic", "partition", "offset", "event_ts_ms", "processed_ms",
    ],
}  # fmt: skip


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
    the sink's folder, :func:`find_sink` of a lake root)."""
    from pyspark.sql import functions as F

    df = read_sink(spark, sink)
    return df.where(F.col("output") == output).select(*COLUMNS[output])


def legacy_raw_path(lake_root: str) -> str:
    """The folder of a lake's archive as its own query wrote it (:data:`LEGACY_RAW_DIR`)."""
    return lake_root.rstrip("/") + "/" + LEGACY_RAW_DIR


def held(spark, path: str) -> bool:
    """True when a sink folder, or what a repair kept beside it (:func:`kept_path`), exists."""
    return path_exists(spark, path) or path_exists(spark, kept_path(path))


def raw_parts(spark, where: str) -> list[tuple[str, bool]]:
    """The folders holding the raw archive of the lake root ``where``, as (folder, in the sink):
    the sink (its ``raw`` output) and an archive query's folder (:data:`LEGACY_RAW_DIR`).
    ``where`` may also name such a folder itself (``--raw`` of an older job's archive)."""
    sink, legacy = find_sink(spark, where), legacy_raw_path(where)
    found = [(path, in_sink) for path, in_sink in ((sink, True), (legacy, False)) if held(spark, path)]
    if not found and held(spark, where):
        found.append((where, False))
    return found


def read_raw(spark, where: str):
    """The raw archive of the lake root ``where``: every input record with the
    :data:`RAW_COLUMNS`, read through the sinks' metadata logs (plus what a repair kept).
    None when there is no sink or archive folder there. A lake whose archive moved into the
    sink after a repair has both parts; a record in both is returned once."""
    from functools import reduce

    from pyspark.sql import functions as F

    frames = []
    for path, in_sink in raw_parts(spark, where):
        df = read_sink(spark, path)
        if in_sink:
            df = df.where(F.col("output") == RAW_OUTPUT).withColumn("timestamp", F.timestamp_millis("event_ts_ms"))
        frames.append(df.select(*RAW_COLUMNS))
    if not frames:
        return None
    if len(frames) == 1:
        return frames[0]
    return reduce(lambda a, b: a.unionByName(b), frames).dropDuplicates(["topic", "partition", "offset"])
