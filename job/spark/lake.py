"""The lake's layout and schemas: one union schema for the stateful operator's output, split
into the ``rows``, ``sessions`` and ``quarantine`` outputs by the ``output`` partition column.

One file sink (not three) keeps the three outputs of a micro-batch in one atomic commit of
the sink's ``_spark_metadata`` log; read them through Spark (or :func:`read_output`) so that
files of uncommitted batches are ignored.

After a repair (:mod:`job.ops.repair`) an output has two parts: the file sink's directory,
with a fresh ``_spark_metadata`` log that only the restarted job writes to, and beside it
``<sink>-kept``, the output the repair kept (everything before its cut), written once as
plain Parquet. The readers here return both; see :mod:`job.ops.repair` for why the kept part
cannot live under the sink's log.
"""

from __future__ import annotations

from typing import Literal

Output = Literal["rows", "sessions", "quarantine"]

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
#: topic and output (about a hundred a task on 50 topics, and a quarter of the batch's time:
#: README, Known limits). ``topic`` stays a column of the files; readers select it either way.
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


def read_raw(spark, raw_path: str):
    """The raw archive: every input record with topic, partition, offset, key, value, timestamp."""
    return read_sink(spark, raw_path)
