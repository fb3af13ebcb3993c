"""What a streaming checkpoint holds, read from the real files (no Spark needed), and the
file sink's ``_spark_metadata`` log next to the data it commits.

A query's checkpoint directory::

    metadata            the query id (one JSON line); the same id across restarts
    offsets/<N>         written *before* batch N runs: the Kafka offsets batch N will read up to
    commits/<N>         written *after* batch N's output is committed: batch N is done
    sources/0/0         the source's initial offsets
    state/<op>/<part>/  the stateful operator's store (RocksDB: <v>.changelog / <v>.zip per batch)
    state/<op>/_stateSchema, _metadata   the state's schema and operator metadata

On restart Spark reads the last ``offsets`` entry; when its ``commits`` entry is missing,
that batch is run again with exactly the same offsets. The file sink keeps its own log in
``<sink>/_spark_metadata/<N>`` listing the files batch N added; a reader through Spark sees
only those files, so a re-run batch never shows twice, even though the files an
interrupted attempt wrote are still in the bucket.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from job.engine.errors import UsageError

__all__ = [
    "LogState",
    "checkpoint_end_offsets",
    "checkpoint_files",
    "committed_files",
    "count_kinds",
    "log_state",
    "raw_sink_frame",
    "session_states",
    "read_commit",
    "read_offsets",
    "sink_data_files",
    "sink_log",
    "state_metadata",
    "state_rows",
    "uncommitted_files",
]

_BATCH = re.compile(r"^\d+$")


def _batches(directory: Path) -> list[int]:
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if _BATCH.match(p.name))


@dataclass(frozen=True, kw_only=True)
class LogState:
    """The two logs of a query checkpoint: the last planned batch and the last committed one."""

    offsets: tuple[int, ...]
    commits: tuple[int, ...]

    @property
    def last_planned(self) -> int | None:
        return self.offsets[-1] if self.offsets else None

    @property
    def last_committed(self) -> int | None:
        return self.commits[-1] if self.commits else None

    @property
    def pending(self) -> int | None:
        """The batch planned but not committed (what a restart re-runs), or None."""
        if self.last_planned is not None and self.last_planned not in self.commits:
            return self.last_planned
        return None


def _query_dir(checkpoint: str | Path) -> Path:
    path = Path(checkpoint)
    if not path.is_dir():
        raise UsageError(f"checkpoint {path} does not exist", "pass a query's checkpoint dir, e.g. <checkpoint>/sessions")
    return path


def log_state(checkpoint: str | Path) -> LogState:
    """Batch ids present in ``offsets/`` and ``commits/`` of one query's checkpoint."""
    path = Path(checkpoint)
    return LogState(offsets=tuple(_batches(path / "offsets")), commits=tuple(_batches(path / "commits")))


def _log_entry(path: Path) -> list[str]:
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist", "list the log's batches with log_state() first") from None
    if not lines or not lines[0].startswith("v"):
        raise UsageError(f"{path} is not a Spark metadata log entry (no version line)", "point at offsets/<N> or commits/<N>")
    return lines


def read_offsets(checkpoint: str | Path, batch: int) -> dict[str, Any]:
    """``offsets/<batch>``: the batch's metadata (timestamp, watermark, the confs it keeps)
    and, per source, the offsets it reads up to ({topic: {partition: offset}} for Kafka)."""
    lines = _log_entry(_query_dir(checkpoint) / "offsets" / str(batch))
    sources = [None if line.strip() == "-" else json.loads(line) for line in lines[2:]]
    return {"version": lines[0], "metadata": json.loads(lines[1]), "sources": sources}


def checkpoint_end_offsets(query_checkpoint: Path) -> dict[tuple[str, int], int]:
    """The Kafka offsets up to which the query's last *committed* batch read.

    Reads ``offsets/<n>`` for the latest ``n`` that also has ``commits/<n>``: a file of three
    lines or more (version, batch metadata, then one JSON line per source).
    """
    commits = sorted((int(f.name) for f in (query_checkpoint / "commits").glob("[0-9]*") if f.name.isdigit()), reverse=True)
    for n in commits:
        offsets = query_checkpoint / "offsets" / str(n)
        if offsets.exists():
            lines = offsets.read_text().splitlines()
            out: dict[tuple[str, int], int] = {}
            for line in lines[2:]:
                if line.strip().startswith("{"):
                    for topic, parts in json.loads(line).items():
                        out.update({(topic, int(p)): int(o) for p, o in parts.items()})
            return out
    return {}


def kept_state_partitions(query_checkpoint: Path) -> int | None:
    """The state partitions a query's checkpoint was started with (Spark keeps
    ``spark.sql.shuffle.partitions`` in every ``offsets/<n>``'s metadata and uses that value on
    every restart, whatever the session says), or None for a checkpoint with no batch yet."""
    batches = _batches(Path(query_checkpoint) / "offsets")
    if not batches:
        return None
    conf = read_offsets(query_checkpoint, batches[-1])["metadata"].get("conf", {})
    value = conf.get("spark.sql.shuffle.partitions")
    return int(value) if value is not None else None


def read_commit(checkpoint: str | Path, batch: int) -> dict[str, Any]:
    """``commits/<batch>``: the marker that the batch finished (with the next watermark)."""
    lines = _log_entry(_query_dir(checkpoint) / "commits" / str(batch))
    return {"version": lines[0], **(json.loads(lines[1]) if len(lines) > 1 else {})}


def _kind(relative: Path) -> str:
    top = relative.parts[0]
    if top in ("offsets", "commits", "sources", "metadata"):
        return top
    if top == "state":
        name = relative.name
        if "_metadata" in relative.parts or "_stateSchema" in relative.parts:
            return "state-schema"
        if name.endswith(".changelog"):
            return "state-changelog"
        if name.endswith(".zip"):
            return "state-snapshot"
        return "state-other"
    return "other"


def checkpoint_files(checkpoint: str | Path) -> list[dict[str, Any]]:
    """Every file of one query's checkpoint: relative path, kind, size in bytes. Hidden
    ``.crc`` checksum files and temp files are left out."""
    root = _query_dir(checkpoint)
    out = []
    for path in sorted(root.rglob("*")):
        if path.is_file() and not path.name.startswith(".") and not path.name.endswith(".crc"):
            relative = path.relative_to(root)
            out.append({"path": str(relative), "kind": _kind(relative), "bytes": path.stat().st_size})
    return out


# --- the file sink's log, on object storage ------------------------------------------------


def _split(url: str) -> str:
    """``s3a://bucket/key`` as ``bucket/key`` (the form pyarrow filesystems take)."""
    for scheme in ("s3a://", "s3://"):
        if url.startswith(scheme):
            return url[len(scheme) :].rstrip("/")
    raise UsageError(f"sink path {url!r}", "use an s3a://bucket/prefix URL")


def sink_log(fs, sink_path: str) -> dict[int, list[str]]:
    """The file sink's ``_spark_metadata`` log: {batch: [files it added]}, compacted
    entries (``<N>.compact``, which repeat everything up to N) included.

    ``fs`` is a pyarrow filesystem for the bucket (``S3Target.filesystem()``)."""
    from pyarrow import fs as pafs

    base = _split(sink_path) + "/_spark_metadata"
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    except OSError as exc:
        raise UsageError(f"cannot list {base}: {exc}", "check that the object store answers") from exc
    out: dict[int, list[str]] = {}
    for info in infos:
        name = info.base_name
        match = re.fullmatch(r"(\d+)(\.compact)?", name)
        if info.type != pafs.FileType.File or not match:
            continue
        with fs.open_input_stream(info.path) as fh:
            lines = fh.read().decode("utf-8").splitlines()
        files = [json.loads(line)["path"] for line in lines[1:] if line.strip()]
        out[int(match.group(1))] = files
    return dict(sorted(out.items()))


def committed_files(log: dict[int, list[str]]) -> set[str]:
    """Every data file the sink log commits, as bucket/key paths."""
    return {_split(f) if f.startswith(("s3a://", "s3://")) else f for files in log.values() for f in files}


def sink_data_files(fs, sink_path: str) -> list[str]:
    """Every Parquet file under the sink path as bucket/key, committed or not."""
    from pyarrow import fs as pafs

    infos = fs.get_file_info(pafs.FileSelector(_split(sink_path), recursive=True, allow_not_found=True))
    return sorted(
        i.path for i in infos if i.type == pafs.FileType.File and i.path.endswith(".parquet") and "/_spark_metadata" not in i.path
    )


def uncommitted_files(fs, sink_path: str) -> list[str]:
    """Data files in the bucket that no ``_spark_metadata`` entry lists: written by a batch
    attempt that never committed. Spark readers ignore them; a plain listing does not."""
    committed = committed_files(sink_log(fs, sink_path))
    return [f for f in sink_data_files(fs, sink_path) if f not in committed]


# --- the state, through Spark's state data source -------------------------------------------


def state_metadata(spark, checkpoint: str | Path):
    """``format("state-metadata")``: one row per stateful operator and store (name,
    partitions, the batch range the checkpoint holds)."""
    return spark.read.format("state-metadata").load(str(_query_dir(checkpoint)))


def state_rows(spark, checkpoint: str | Path, *, state_var: str | None = None, batch: int | None = None, operator: int = 0):
    """``format("statestore")``: the stored key/value rows of one stateful operator, as of
    ``batch`` (default: the last committed). A ``transformWithState`` operator keeps one
    store per state variable: name it with ``state_var`` (the job's is ``session``)."""
    # The reader's executors ask the driver's StateStoreCoordinator about the store (Spark
    # 4.2: auto snapshot repair); that endpoint exists only once the session's streaming
    # query manager does, so a fresh session (a notebook) must create it first.
    spark.streams.active  # noqa: B018
    reader = spark.read.format("statestore").option("operatorId", str(operator))
    if state_var is not None:
        reader = reader.option("stateVarName", state_var)
    if batch is not None:
        reader = reader.option("batchId", str(batch))
    return reader.load(str(_query_dir(checkpoint)))


def encode_partition_sessions(sessions: dict[str, list[Any]]) -> bytes:
    """The state value of a partition under the operator keyed by Kafka partition
    (``pipeline.BY_PARTITION``): ``{session: [its stored state, the batch time it last had records]}``."""
    import msgspec

    return msgspec.msgpack.encode(sessions)


def decode_partition_sessions(stored: bytes) -> dict[str, list[Any]]:
    """:func:`encode_partition_sessions` read back."""
    import msgspec

    return msgspec.msgpack.decode(bytes(stored))


def session_states(spark, checkpoint: str | Path, *, batch: int | None = None):
    """The job's stored sessions as of ``batch`` (default: the last committed), whichever
    stateful operator wrote them: columns ``partition_id``, ``session_key`` and ``state``
    (the bytes :meth:`job.engine.session.SessionState.from_stored` reads).

    The operators keep the same bytes in different places: ``transformWithState*`` in a
    store per state variable (the job's is ``session``), its value a struct ``{state}``;
    ``applyInPandasWithState`` in one store whose value nests it as ``groupState`` (next to
    the timeout timestamp), depending on Spark's state format version; keyed by Kafka
    partition, that value holds the partition's sessions (:func:`decode_partition_sessions`),
    one row each here.
    """
    from pyspark.sql import functions as F

    name = state_metadata(spark, checkpoint).select("operatorName").first()["operatorName"]
    keyed_by_var = "transformwithstate" in name.lower()
    rows = state_rows(spark, checkpoint, state_var="session" if keyed_by_var else None, batch=batch)
    value = rows.schema["value"].dataType
    if "state" in value.fieldNames():
        state = F.col("value.state")
    elif "groupState" in value.fieldNames() and "sessions" in value["groupState"].dataType.fieldNames():
        held = rows.select("partition_id", F.col("value.groupState.sessions").alias("sessions")).collect()
        out = [(r.partition_id, k, v[0]) for r in held for k, v in decode_partition_sessions(r.sessions).items()]
        return spark.createDataFrame(out, "partition_id int, session_key string, state binary")
    elif "groupState" in value.fieldNames():
        state = F.col("value.groupState.state")
    else:  # pragma: no cover - a Spark whose state layout this code does not know yet
        raise ValueError(f"state store of {name} in {checkpoint}: no state column in value schema {value.simpleString()}")
    return rows.select("partition_id", "key.session_key", state.alias("state"))


def count_kinds(files: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Count of files per kind, for a summary line."""
    counts: dict[str, int] = {}
    for f in files:
        counts[f["kind"]] = counts.get(f["kind"], 0) + 1
    return dict(sorted(counts.items()))


def raw_sink_frame(fs, sink_path: str):
    """Every data file under the sink path read straight from the bucket, committed or not,
    with the partition columns from the directory names: what a tool that lists the
    directory instead of following ``_spark_metadata`` would see (a pandas DataFrame)."""
    import pyarrow.dataset as ds

    files = sink_data_files(fs, sink_path)
    if not files:
        return None
    return (
        ds.dataset(files, filesystem=fs, format="parquet", partitioning="hive", partition_base_dir=_split(sink_path))
        .to_table()
        .to_pandas()
    )
