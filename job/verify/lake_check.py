"""The verifier on a lake: find the ledger and the lake, read both through Spark (so the file
sink's ``_spark_metadata`` decides which files count) and judge them there
(:mod:`job.verify.spark_check`).

It knows no sandbox: the caller hands it a Spark session and, for ``s3a://`` ledgers and lakes,
an :class:`~producers.ledger.S3Target` (the command line and the chapters open both;
:mod:`job.ops.verifier` does it on the sandbox, with the verifier's own Spark)."""

from __future__ import annotations

from collections.abc import Sequence

from job.engine.errors import LakeError
from job.spark import lake as lake_layout  # `lake` is verify_lake's parameter, the lake root
from producers.contract import s3_parts
from producers.ledger import S3Target


def lake_frames(spark, lake_root: str) -> dict[str, object]:
    """The ``rows``, ``quarantine`` and ``sessions`` outputs as pandas DataFrames."""
    path = lake_layout.open_lake(spark, lake_root)
    return {name: lake_layout.read_output(spark, path, name).toPandas() for name in ("rows", "quarantine", "sessions")}


def load_ledger(ledger: str, *, s3: S3Target | None = None):
    """The ledger at ``ledger`` (a folder, or an ``s3a://`` prefix on ``s3``) as a DataFrame."""
    from producers.ledger import read_ledger

    return read_ledger(ledger, s3=s3)


def _lake_filesystem(lake_root: str, s3: S3Target | None):
    """pyarrow's file system for ``lake_root`` and the lake's path on it; None for an
    ``s3a://`` lake without ``s3``. Raises what pyarrow raises for a path it refuses."""
    import pyarrow.fs as pafs

    if parts := s3_parts(lake_root):
        return None if s3 is None else (s3.filesystem(), "/".join(p for p in parts if p))
    return pafs.LocalFileSystem(), lake_root.removeprefix("file:").rstrip("/")


def check_lake(lake_root: str, *, s3: S3Target | None = None) -> None:
    """Raise :class:`~job.engine.errors.LakeError` unless ``lake_root`` holds the job's committed
    output (the file sink's ``_spark_metadata`` log), before any Spark starts; a lake whose sink is
    in an older version's folder is refused (:func:`job.spark.lake.old_layout_error`)."""
    import pyarrow.fs as pafs

    metadata = lake_layout.sink_path(lake_root) + "/_spark_metadata"
    fix = "pass the --output the job ran with (its first line says where it writes)"
    folders = (lake_layout.SINK_DIR, lake_layout.OLD_SINK_DIR)
    try:
        lake = _lake_filesystem(lake_root, s3)
        if lake is None:
            raise LakeError(lake_root, "an s3a:// lake needs an S3 endpoint and keys to be listed", "pass s3=S3Target(...)")
        fs, base = lake
        found = [f for f in folders if fs.get_file_info(f"{base}/{f}/_spark_metadata").type != pafs.FileType.NotFound]
    except (OSError, ValueError) as exc:  # pyarrow's S3 errors, or a path it refuses
        raise LakeError(lake_root, f"cannot list {metadata} ({exc})", fix) from None
    if lake_layout.OLD_SINK_DIR in found:
        raise lake_layout.old_layout_error(lake_root, lake_layout.OLD_SINK_DIR)
    if not found:
        raise LakeError(lake_root, f"no job output here ({metadata} is missing)", fix)


def listed_sink_log(lake_root: str, *, s3: S3Target | None = None) -> list[int] | None:
    """The batch ids in ``lake_root``'s sink log (:func:`job.spark.lake.sink_log_batches`),
    listed without Spark, sorted; [] without a log; None when it cannot be listed here (no
    ``s3`` for an ``s3a://`` lake, or the listing failed): then Spark lists it."""
    import pyarrow.fs as pafs

    try:
        lake = _lake_filesystem(lake_root, s3)
        if lake is None:
            return None
        fs, base = lake
        folder = f"{base}/{lake_layout.SINK_DIR}/_spark_metadata"
        if fs.get_file_info(folder).type == pafs.FileType.NotFound:
            return []
        names = [info.base_name.split(".")[0] for info in fs.get_file_info(pafs.FileSelector(folder))]
    except (OSError, ValueError):  # pyarrow's S3 errors, or a path it refuses: Spark's listing will say what is wrong
        return None
    return sorted(int(n) for n in names if n.isdigit())


def verify_lake(spark, *, ledger: str | Sequence[str], lake: str, policy: str, s3: S3Target | None = None, deleted=()):
    """The report of :func:`job.verify.compare.check` for the ledger at ``ledger`` (or the
    ledgers, one per producer run, when several runs fed one job) and the lake
    root ``lake`` (``deleted``: the offset ranges Kafka deleted before the job read them), judged
    inside ``spark`` on groups of whole sessions (:mod:`job.verify.spark_check`): the driver's
    memory follows the anomalies and sessions, not the lake's rows. ``s3`` is where ``s3a://``
    ledgers are read from.
    """
    from job.verify.spark_check import check_frames, ledger_dataframe
    from producers.ledger import ledger_parts

    ledgers = [ledger] if isinstance(ledger, str) else list(ledger)
    parts = [part for one in ledgers for part in ledger_parts(one, s3=s3)]
    sink = lake_layout.open_lake(spark, lake)
    outputs = lake_layout.read_sink(spark, sink)
    return check_frames(spark, ledger_dataframe(spark, parts), outputs, policy=policy, deleted=deleted)


def verify_archive(spark, *, ledger: str, lake: str, s3: S3Target | None = None, raw_path: str | None = None):
    """Check that every record the ledger says Kafka acknowledged is in the raw archive of the
    lake root ``lake`` (or of ``raw_path``: another lake root);
    returns :class:`job.verify.archive_check.ArchiveReport`. Only the ledger's topics are read."""
    from pyspark.sql import functions as F

    from job.spark.lake import read_raw
    from job.verify.archive_check import check_archive

    frame = load_ledger(ledger, s3=s3)
    topics = sorted(set(frame["topic"].dropna()))
    raw = read_raw(spark, raw_path or lake)
    if raw is None:
        raise LakeError(
            raw_path or lake, "no sink and no raw archive here", "pass the lake root the job wrote (--lake, or --raw)"
        )
    archived = raw.where(F.col("topic").isin(topics)).select("topic", "partition", "offset").toPandas()
    return check_archive(frame, archived)
