"""Repair a job whose checkpoint and file-sink output disagree: the source's six steps.

The trap. The file sink keeps its own log, ``<sink>/_spark_metadata/<batch id>``, next to
the data on object storage, and skips any batch whose id is not above the log's latest:
``Skipping already committed batch``. Batch ids only count micro-batches since the
checkpoint was created, so once a checkpoint is lost, or restored from an older backup,
while the output keeps its log, the restarted job reuses ids the log has seen, and every
such batch is committed to the checkpoint but skipped by the sink without being run: its
records are neither applied to the state nor written.
Nothing fails; the rows are simply not in the lake (:mod:`job.drills.trap` shows it for real).

The six steps, as :func:`plan_repair` and :func:`apply_repair` carry them out:

1. every output row carries topic, partition and offset (:mod:`job.spark.lake`);
2. per partition, find the damage point (the first record the checkpoint says was
   processed whose output is missing: neither a row change nor a quarantine entry, an
   ``end`` excepted as it writes no row) and, per session, the offset of its last
   *complete* snapshot before it (all its row changes present: one per row, or the single
   ``row_id ""`` change of an empty snapshot); the partition restarts at the earliest of
   these, each session at its own;
3. cut the output after those offsets (see below);
4. compute the Kafka source's ``startingOffsets`` JSON, every partition listed;
5. back up, then remove, the checkpoint (the ``sessions`` query's, and the archive query's
   ``raw`` where an older job ran one);
6. start the job from those offsets, dropping each session's records before its own cut
   (:attr:`job.spark.config.JobConfig.session_cuts`): they are in the kept output already, and a
   session state that starts empty would otherwise quarantine them as orphans. A session
   state that starts empty and meets a snapshot first opens there without counting a gap
   (:mod:`job.engine.session`): the snapshot is the whole table.

Why step 3 rewrites the output with a fresh log instead of deleting through Spark. A
delete that keeps ``_spark_metadata`` consistent (a Spark job that drops the files after
the cut and logs the change) leaves the log's batch ids in place, 0 to N. The restarted
job has a fresh checkpoint, so its batches are numbered from 0 again, and the sink skips
all of them up to N: the repair would re-arm the very trap it repairs. Nor can the kept
rows be written under a fresh log in the sink's directory, since any entry there, even
batch 0, again makes the new job skip its first batch. So the kept output is rewritten,
through Spark (reading the old output through its log, so files of uncommitted batches
stay out), as plain Parquet in ``<sink>-kept``; the sink's directory is removed so that
the restarted job starts a log of its own; :mod:`job.spark.lake`'s readers return both parts.

A partition whose output is intact still restarts at its sessions' last snapshots, since
removing the checkpoint removes every session's state; ``--partitions`` only limits
which partitions are searched for damage (and repairs those even where no damage is
found, e.g. after Kafka lost some of their records). ``window`` sessions holding records
at the checkpoint look damaged from where they hold; the repair then replays them too.

Every step is logged, recorded in a journal next to the backup, and safe to run again:
``--apply`` resumes an unfinished repair at its first step not done, and a second
``--apply`` after a finished one finds nothing damaged and changes nothing.
"""

from __future__ import annotations

import json
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from job.engine.errors import RepairError
from job.spark.checkpoints import checkpoint_end_offsets, log_state
from sandbox.settings import shown

__all__ = [
    "PartitionPlan",
    "RepairPlan",
    "apply_repair",
    "find_damage",
    "parse_partitions",
    "plan_repair",
    "restart_points",
    "starting_offsets",
]

Partition = tuple[str, int]
#: The grouping key of records without a Kafka key (:mod:`job.spark.pipeline`).
_NO_KEY = "__no-key__/"
_STEPS = ("backup-output", "cut-output", "replace-output", "starting-offsets", "remove-checkpoint", "restart")


@dataclass(frozen=True, kw_only=True)
class PartitionPlan:
    """One Kafka partition's repair: where the output broke and where the job restarts.

    ``damage`` is the first offset whose output is missing (``damaged``) or, for a partition
    only restarted because the checkpoint goes, the checkpoint's end offset; ``restart`` the
    earliest session cut; the ``*_to_delete`` counts are the output rows at or after their
    session's cut, which the restarted job writes again.
    """

    topic: str
    partition: int
    checkpoint_end: int
    damage: int
    damaged: bool
    restart: int
    sessions: int
    rows_to_delete: int
    quarantine_to_delete: int
    raw_to_delete: int = 0


@dataclass(frozen=True, kw_only=True)
class RepairPlan:
    """What a repair will do; ``partitions`` empty means nothing to repair."""

    checkpoint: str
    output: str
    backup: str
    partitions: tuple[PartitionPlan, ...]
    #: (topic, partition, session key) -> first offset the restarted job processes
    cuts: dict[tuple[str, int, str], int] = field(default_factory=dict)
    #: the Kafka source's startingOffsets, every partition of every subscribed topic
    offsets: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def needed(self) -> bool:
        return any(p.damaged for p in self.partitions)

    def describe(self) -> str:
        """The plan as the dry run prints it."""
        if not self.needed:
            return f"nothing to repair: every record the checkpoint {shown(self.checkpoint)} processed is in {self.output}"
        lines = [
            f"repair plan for {self.output} (checkpoint {shown(self.checkpoint)})",
            f"  {'partition':<40} {'ckpt end':>9} {'damage':>9} {'restart':>9} {'sessions':>8} {'rows del':>9} {'quar del':>9} {'raw del':>8}",
        ]
        for p in self.partitions:
            flag = "" if p.damaged else "  (intact: restarts for its state only)"
            lines.append(
                f"  {p.topic + '[' + str(p.partition) + ']':<40} {p.checkpoint_end:>9} {p.damage:>9} {p.restart:>9} "
                f"{p.sessions:>8} {p.rows_to_delete:>9} {p.quarantine_to_delete:>9} {p.raw_to_delete:>8}{flag}"
            )
        lines.append(f"  backup: {shown(self.backup)}")
        lines.append(f"  startingOffsets: {json.dumps(self.offsets, sort_keys=True)}")
        return "\n".join(lines)

    def to_json(self) -> str:
        data = asdict(self)
        data["cuts"] = [[t, p, k, o] for (t, p, k), o in sorted(self.cuts.items())]
        return json.dumps(data, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RepairPlan:
        data = json.loads(text)
        data["partitions"] = tuple(PartitionPlan(**p) for p in data["partitions"])
        data["cuts"] = {(t, int(p), k): int(o) for t, p, k, o in data["cuts"]}
        return cls(**data)


# --- the pure planning logic --------------------------------------------------------------


def parse_partitions(text: str | None) -> set[Partition] | None:
    """``topic:p,topic:p`` -> {(topic, p)}; None or "" -> None (all partitions)."""
    if not text:
        return None
    out: set[Partition] = set()
    for item in text.split(","):
        topic, sep, part = item.strip().rpartition(":")
        if not sep or not topic or not part.isdigit():
            raise RepairError(
                f"--partitions {text!r}",
                f"{item.strip()!r} is not topic:partition",
                "list partitions as topic:p,topic:p, e.g. collection-site-1:0,collection-site-1:2",
            )
        out.add((topic, int(part)))
    return out


def group_key(value: Any, topic: str) -> str:
    """The job's grouping key: a row's session, or a quarantine entry's Kafka key; the
    keyless pseudo-session when there is none (see :mod:`job.spark.pipeline`)."""
    if value is None or (isinstance(value, float) and pd.isna(value)) or str(value) == "":
        return _NO_KEY + topic
    return str(value)


def find_damage(inputs: pd.DataFrame, present: pd.DataFrame, checkpoint_end: Mapping[Partition, int]) -> dict[Partition, int]:
    """Per partition, the first offset below the checkpoint's end whose output is missing.

    ``inputs`` has one row per Kafka record (``topic, partition, offset, kind``; kind None
    when the value does not decode); ``present`` the ``topic, partition, offset`` of every
    row change and quarantine entry in the lake. An ``end`` writes no row, so it is never
    missing. Partitions without damage are left out.
    """
    if inputs.empty:
        return {}
    seen = {(str(t), int(p), int(o)) for t, p, o in present[["topic", "partition", "offset"]].itertuples(index=False)}
    out: dict[Partition, int] = {}
    for t, p, o, kind in inputs[["topic", "partition", "offset", "kind"]].itertuples(index=False):
        where = (str(t), int(p))
        if int(o) >= checkpoint_end.get(where, 0) or kind == "end" or (where[0], where[1], int(o)) in seen:
            continue
        if where not in out or int(o) < out[where]:
            out[where] = int(o)
    return out


def restart_points(
    rows: pd.DataFrame,
    quarantine: pd.DataFrame,
    sessions: pd.DataFrame,
    damage: Mapping[Partition, int],
    snapshot_sizes: Mapping[tuple[str, int, int], int] | None = None,
) -> dict[tuple[str, int, str], int]:
    """Each session's cut: the offset of its last complete snapshot before its partition's damage.

    ``rows`` (``session, op, row_id, topic, partition, offset``) is the lake's ``rows``
    output. A snapshot at an offset is complete when all its changes are there: as many as
    ``snapshot_sizes[(topic, partition, offset)]`` says the message had (at least one: an
    empty snapshot writes a single ``row_id ""`` change); without a size, when the empty
    marker does not sit beside real rows. A session without a complete snapshot before the
    damage, or whose last status there is ``ended``, is cut at the damage itself: replaying
    it from an empty state changes nothing it had. Every session (and keyless group) with
    output in a damaged partition gets a cut.
    """
    sizes = snapshot_sizes or {}
    cuts: dict[tuple[str, int, str], int] = {}

    def before(df: pd.DataFrame) -> pd.DataFrame:
        if df.empty:
            return df
        d = df.apply(lambda r: damage.get((str(r["topic"]), int(r["partition"]))), axis=1)
        return df[d.notna() & (df["offset"].astype("int64") < d.fillna(0).astype("int64"))]

    for frame, key_col in ((rows, None), (quarantine, "key"), (sessions, None)):
        for r in before(frame).itertuples(index=False):
            k = group_key(getattr(r, key_col or "session"), str(r.topic))
            where = (str(r.topic), int(r.partition))
            cuts.setdefault((*where, k), damage[where])
    snaps = before(rows[rows["op"] == "snapshot"]) if not rows.empty else rows
    if not snaps.empty:
        counted = snaps.groupby(["topic", "partition", "session", "offset"], sort=False)["row_id"].agg(list)
        best: dict[tuple[str, int, str], int] = {}
        for (t, p, s, o), ids in counted.items():
            want = max(1, int(sizes.get((str(t), int(p), int(o)), 0)))
            complete = len(ids) == want if (str(t), int(p), int(o)) in sizes else ("" not in ids or len(ids) == 1)
            key = (str(t), int(p), str(s))
            if complete and int(o) > best.get(key, -1):
                best[key] = int(o)
        cuts.update(best)
    if not sessions.empty:
        last = before(sessions).sort_values("offset").groupby(["topic", "partition", "session"], sort=False).tail(1)
        for r in last.itertuples(index=False):
            key = (str(r.topic), int(r.partition), group_key(r.session, str(r.topic)))
            if r.status == "ended" and key in cuts:
                cuts[key] = damage[key[:2]]
    return cuts


def starting_offsets(restart: Mapping[Partition, int], kafka_partitions: Iterable[Partition]) -> dict[str, dict[str, int]]:
    """The Kafka source's ``startingOffsets``: the restart offset of each planned partition,
    earliest (-2) for a partition the checkpoint never saw. The source wants every partition."""
    out: dict[str, dict[str, int]] = {}
    for t, p in sorted(set(kafka_partitions) | set(restart)):
        out.setdefault(t, {})[str(p)] = int(restart.get((t, p), -2))
    return out


def plan_repair(
    *,
    checkpoint: str,
    output: str,
    backup: str,
    checkpoint_end: Mapping[Partition, int],
    inputs: pd.DataFrame,
    rows: pd.DataFrame,
    quarantine: pd.DataFrame,
    sessions: pd.DataFrame,
    raw: pd.DataFrame | None = None,
    kafka_partitions: Iterable[Partition] = (),
    only: set[Partition] | None = None,
) -> RepairPlan:
    """Steps 2 and 4 on plain tables: damage, session cuts, restart offsets, what to delete.

    ``inputs`` carries ``topic, partition, offset, kind, snapshot_rows`` for the records
    up to the checkpoint's end (``snapshot_rows`` the row count of a snapshot message);
    ``raw`` (``topic, partition, offset``) the raw archive. ``only`` limits the damage search
    to those partitions and repairs them even when no damage shows. When any partition is
    repaired, every partition of the checkpoint is planned: the checkpoint goes, and with it
    every session's state.
    """
    if only is not None:
        unknown = sorted(only - set(checkpoint_end))
        if unknown:
            known = ", ".join(f"{t}:{p}" for t, p in sorted(checkpoint_end)) or "none"
            raise RepairError(
                f"--partitions {', '.join(f'{t}:{p}' for t, p in unknown)}",
                f"not in the checkpoint {checkpoint}",
                f"choose among the partitions it has read: {known}",
            )
    present = pd.concat([rows[["topic", "partition", "offset"]], quarantine[["topic", "partition", "offset"]]])
    damage = find_damage(inputs, present, checkpoint_end)
    if only is not None:
        damage = {where: damage.get(where, checkpoint_end[where]) for where in only}
    damaged = set(damage)
    if not damaged:
        return RepairPlan(checkpoint=checkpoint, output=output, backup=backup, partitions=())
    all_damage = {where: damage.get(where, end) for where, end in checkpoint_end.items()}
    sizes = {}
    if "snapshot_rows" in inputs.columns and not inputs.empty:
        snaps = inputs[inputs["kind"] == "snapshot"]
        sizes = {
            (str(t), int(p), int(o)): int(n)
            for t, p, o, n in snaps[["topic", "partition", "offset", "snapshot_rows"]].fillna(0).itertuples(index=False)
        }
    cuts = restart_points(rows, quarantine, sessions, all_damage, sizes)
    restart = {where: min([o for (t, p, _), o in cuts.items() if (t, p) == where] + [d]) for where, d in all_damage.items()}

    def doomed(df: pd.DataFrame, key_col: str | None) -> dict[Partition, int]:
        counts: dict[Partition, int] = {}
        for r in df.itertuples(index=False):
            where = (str(r.topic), int(r.partition))
            if where not in restart:
                continue
            k = group_key(getattr(r, key_col or "session"), where[0])
            if int(r.offset) >= cuts.get((*where, k), restart[where]):
                counts[where] = counts.get(where, 0) + 1
        return counts

    rows_del, quar_del = doomed(rows, None), doomed(quarantine, "key")
    raw_del: dict[Partition, int] = {}
    if raw is not None and not raw.empty:
        for t, p, o in raw[["topic", "partition", "offset"]].itertuples(index=False):
            where = (str(t), int(p))
            if where in restart and int(o) >= restart[where]:
                raw_del[where] = raw_del.get(where, 0) + 1
    parts = tuple(
        PartitionPlan(
            topic=t,
            partition=p,
            checkpoint_end=int(checkpoint_end[(t, p)]),
            damage=int(all_damage[(t, p)]),
            damaged=(t, p) in damaged,
            restart=int(restart[(t, p)]),
            sessions=sum(1 for (ct, cp, _) in cuts if (ct, cp) == (t, p)),
            rows_to_delete=rows_del.get((t, p), 0),
            quarantine_to_delete=quar_del.get((t, p), 0),
            raw_to_delete=raw_del.get((t, p), 0),
        )
        for t, p in sorted(all_damage)
    )
    return RepairPlan(
        checkpoint=checkpoint,
        output=output,
        backup=backup,
        partitions=parts,
        cuts=cuts,
        offsets=starting_offsets(restart, kafka_partitions),
    )


# --- reading the checkpoint, the lake and Kafka -------------------------------------------


def _read_inputs(spark, bootstrap: str, ends: Mapping[Partition, int]) -> pd.DataFrame:
    """The Kafka records up to ``ends``, as ``topic, partition, offset, kind, snapshot_rows``."""
    from pyspark.sql import functions as F

    wanted = {t: {str(p): int(o) for (tt, p), o in ends.items() if tt == t} for t, _ in ends}
    starting = {t: {p: -2 for p in parts} for t, parts in wanted.items()}
    value = F.col("value").cast("string")
    df = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", ",".join(sorted(wanted)))
        .option("startingOffsets", json.dumps(starting))
        .option("endingOffsets", json.dumps(wanted))
        .option("failOnDataLoss", "false")
        .load()
        .select(
            "topic",
            "partition",
            "offset",
            F.get_json_object(value, "$.kind").alias("kind"),
            F.json_array_length(F.get_json_object(value, "$.rows")).alias("snapshot_rows"),
        )
    )
    return df.toPandas()


def _read_lake(spark, sink: str, lake_root: str | None) -> dict[str, pd.DataFrame]:
    """The three outputs of ``sink``, and the raw archive of ``lake_root`` (None: none)."""
    from job.spark import lake

    out = {
        "rows": lake.read_output(spark, sink, "rows").select("session", "op", "row_id", "topic", "partition", "offset"),
        "quarantine": lake.read_output(spark, sink, "quarantine").select("key", "session", "topic", "partition", "offset"),
        "sessions": lake.read_output(spark, sink, "sessions").select("session", "status", "topic", "partition", "offset"),
    }
    frames = {name: df.toPandas() for name, df in out.items()}
    raw = lake.read_raw(spark, lake_root) if lake_root else None
    if raw is not None:
        frames["raw"] = raw.select("topic", "partition", "offset").toPandas()
    return frames


def running_queries(settings, cfg, spark=None) -> list[str]:
    """Where a query of this job still runs: this driver's active streams with the job's
    query names, and applications of the job's name on the Spark master (other than ours)."""
    names = {f"{cfg.name}-sessions", f"{cfg.name}-raw"}
    found = [f"query {q.name} ({q.id}) in this driver" for q in (spark.streams.active if spark else []) if q.name in names]
    own = spark.sparkContext.applicationId if spark else None
    try:
        with urllib.request.urlopen(settings.spark_status_url() + "/json/", timeout=5) as reply:
            master = json.loads(reply.read())
    except OSError:
        return found
    for app in master.get("activeapps", []):
        if app.get("name") == cfg.name and app.get("id") != own:
            found.append(f"application {app.get('id')} ({cfg.name}) on {settings.endpoints().spark_master_ui}")
    return found


# --- applying it ---------------------------------------------------------------------------


class _Journal:
    """Which steps of one repair are done; kept next to its backup, rewritten atomically."""

    def __init__(self, folder: Path) -> None:
        self.path = folder / "journal.json"
        self.done: dict[str, float] = json.loads(self.path.read_text()) if self.path.exists() else {}

    def mark(self, step: str) -> None:
        self.done[step] = time.time()
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.done, indent=1))
        tmp.replace(self.path)

    @property
    def finished(self) -> bool:
        return all(s in self.done for s in _STEPS)


def repair_folders(checkpoint: Path) -> list[Path]:
    """The backup folders of earlier repairs of this checkpoint, oldest first."""
    return sorted(checkpoint.parent.glob(f"{checkpoint.name}.repair-*"))


def unfinished_repair(checkpoint: Path) -> Path | None:
    """The folder of a repair of this checkpoint that stopped before its last step, if any."""
    for folder in reversed(repair_folders(checkpoint)):
        if (folder / "plan.json").exists() and not _Journal(folder).finished:
            return folder
    return None


def _committed(cfg) -> bool:
    """Whether the sessions query's checkpoint has a committed batch."""
    return log_state(cfg.checkpoint / "sessions").last_committed is not None


def _sink_log_listed(settings, output: str) -> bool:
    """Whether the lake's file sink has a ``_spark_metadata`` log, asked of S3 without a Spark
    application (a local lake: True, and Spark looks); False when S3 cannot be asked."""
    from job.spark import lake
    from producers.contract import s3_parts
    from sandbox.checks.health import s3_client

    if not output.startswith("s3a://"):
        return True
    bucket, prefix = s3_parts(output)
    try:
        client = s3_client(settings)
        key = f"{prefix}/{lake.SINK_DIR}/_spark_metadata/".lstrip("/")
        if client.list_objects_v2(Bucket=bucket, Prefix=key, MaxKeys=1).get("KeyCount"):
            return True
    except Exception:  # noqa: BLE001 - unreachable or no bucket: no log to repair from
        return False
    return False


def lake_end_offsets(frames: Mapping[str, pd.DataFrame]) -> dict[Partition, int]:
    """Per partition, one past the highest offset any output of the lake holds: where a job whose
    checkpoint is gone had got to (the raw archive holds every record read, when there is one)."""
    ends: dict[Partition, int] = {}
    for frame in frames.values():
        if frame is None or frame.empty:
            continue
        highest = frame.groupby(["topic", "partition"])["offset"].max()
        for (t, p), o in highest.items():
            ends[(str(t), int(p))] = max(ends.get((str(t), int(p)), 0), int(o) + 1)
    return ends


def require_checkpoint(cfg) -> Path:
    """The sessions query's checkpoint, or RepairError when it has no committed batch."""
    if not _committed(cfg):
        raise RepairError(
            f"checkpoint {cfg.checkpoint}",
            "has no committed batch of the sessions query (sessions/commits)",
            "point --checkpoint at the job's checkpoint (default <state>/checkpoints/job)",
        )
    return cfg.checkpoint / "sessions"


def make_plan(spark, settings, cfg, *, only: set[Partition] | None = None, progress: Callable[[str], None] = print) -> RepairPlan:
    """Check the preconditions, read checkpoint, Kafka and lake, and plan (steps 1, 2 and 4).

    Raises :class:`RepairError` when there is no checkpoint, no lake output, or a query
    still runs on the checkpoint.
    """
    from job.spark import lake

    sink = lake.open_lake(spark, cfg.output, writing=True, archive=cfg.raw_archive)
    from_lake = not _committed(cfg) and bool(lake.sink_log_batches(spark, sink))
    sessions_ckpt = cfg.checkpoint / "sessions" if from_lake else require_checkpoint(cfg)
    if not lake.held(spark, sink):
        raise RepairError(
            f"lake output {sink}", "does not exist", "point --output at the lake root the job wrote (default s3a://<bucket>/job)"
        )
    running = running_queries(settings, cfg, spark)
    if running:
        raise RepairError(
            f"checkpoint {cfg.checkpoint}",
            "a query still runs on it: " + "; ".join(running),
            "stop the job first (Ctrl-C, or kill its application in the Spark master UI), then repair",
        )
    frames = _read_lake(spark, sink, cfg.output if cfg.raw_archive else None)
    bootstrap = settings.endpoints().kafka_bootstrap
    from job.spark.pipeline import source_end_offsets

    kafka = [(t, int(p)) for t, parts in source_end_offsets(bootstrap, cfg.topic_prefix).items() for p in parts]
    if not from_lake:
        ends = checkpoint_end_offsets(sessions_ckpt)
        progress(
            f"[repair] step 1: rows carry topic/partition/offset; checkpoint read up to {sum(ends.values())} offsets in {len(ends)} partition(s)"
        )
    else:
        # the checkpoint is gone while the sink keeps its log (the trap's other door): the lake says
        # how far the job got, and every partition restarts, as no session state is left
        ends = {**{where: 0 for where in kafka}, **lake_end_offsets(frames)}  # the Kafka source wants every partition
        only = set(ends) if only is None else only
        progress(
            f"[repair] step 1: no committed batch in {shown(cfg.checkpoint)}; the lake's records reach "
            f"{sum(ends.values())} offsets in {len(ends)} partition(s), and every one restarts"
        )
    inputs = _read_inputs(spark, bootstrap, ends)
    backup = cfg.checkpoint.parent / f"{cfg.checkpoint.name}.repair-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}"
    plan = plan_repair(
        checkpoint=str(cfg.checkpoint),
        output=cfg.output,
        backup=str(backup),
        checkpoint_end=ends,
        inputs=inputs,
        rows=frames["rows"],
        quarantine=frames["quarantine"],
        sessions=frames["sessions"],
        raw=frames.get("raw"),
        kafka_partitions=kafka,
        only=only,
    )
    progress(f"[repair] step 2: {sum(p.damaged for p in plan.partitions)} damaged partition(s), {len(plan.cuts)} session cut(s)")
    return plan


def _hadoop(spark):
    jvm = spark.sparkContext._jvm
    conf = spark.sparkContext._jsc.hadoopConfiguration()

    def fs_of(path: str):
        p = jvm.org.apache.hadoop.fs.Path(path)
        return p, p.getFileSystem(conf)

    def copy(src: str, dst: str) -> None:
        sp, sfs = fs_of(src)
        dp, dfs = fs_of(dst)
        if dfs.exists(dp):
            dfs.delete(dp, True)
        if sfs.exists(sp):
            jvm.org.apache.hadoop.fs.FileUtil.copy(sfs, sp, dfs, dp, False, conf)

    def delete(path: str) -> None:
        p, fs = fs_of(path)
        if fs.exists(p):
            fs.delete(p, True)

    return copy, delete


def _cut_frame(spark, df, plan: RepairPlan):
    """Keep the rows before their session's cut (or, for the sink's raw archive, the partition's
    restart: the restarted job archives from there)."""
    from pyspark.sql import functions as F

    from job.spark import lake

    restart = {(p.topic, p.partition): p.restart for p in plan.partitions}
    part_key = F.concat_ws("\x00", F.col("topic"), F.col("partition").cast("string"))
    entries = [x for (t, p), o in restart.items() for x in (F.lit(f"{t}\x00{p}"), F.lit(o))]
    limit = F.create_map(*entries)[part_key] if entries else F.lit(None)
    if plan.cuts:
        value = F.when(F.col("output") == "quarantine", F.col("key")).otherwise(F.col("session"))
        gk = F.when(value.isNull() | (value == ""), F.concat(F.lit(_NO_KEY), F.col("topic"))).otherwise(value)
        cut_entries = [x for (t, p, k), o in plan.cuts.items() for x in (F.lit(f"{t}\x00{p}\x00{k}"), F.lit(o))]
        by_cut = F.coalesce(F.create_map(*cut_entries)[F.concat_ws("\x00", part_key, gk)], limit)
        limit = F.when(F.col("output") == lake.RAW_OUTPUT, limit).otherwise(by_cut)
    return df.where(limit.isNull() | (F.col("offset") < limit))


def apply_repair(
    spark,
    settings,
    cfg,
    plan: RepairPlan,
    *,
    restart: Callable[[Any], None] | None = None,
    progress: Callable[[str], None] = print,
) -> Path:
    """Carry out a plan (steps 3, 5 and 6), resuming after the last step its journal records.

    ``restart`` runs the job (step 6) with the repaired config; by default the job's queries
    start and run until what Kafka holds now is processed, then stop. Returns the backup
    folder. Running it again after it finished does nothing.
    """
    from job.spark import lake, pipeline

    folder = Path(plan.backup)
    folder.mkdir(parents=True, exist_ok=True)
    if not (folder / "plan.json").exists():
        (folder / "plan.json").write_text(plan.to_json())
    journal = _Journal(folder)
    copy, delete = _hadoop(spark)
    # the sink (cut by session; its raw output by partition)
    sink = lake.open_lake(spark, cfg.output, writing=True, archive=cfg.raw_archive)
    name = sink.rstrip("/").rsplit("/", 1)[-1]
    store = cfg.output.rstrip("/") + f"/_repair/{folder.name}"

    def step(name: str, number: int, what: str, action: Callable[[], None]) -> None:
        if name in journal.done:
            progress(f"[repair] step {number} ({name}) already done, skipped")
            return
        started = time.monotonic()
        action()
        journal.mark(name)
        progress(f"[repair] step {number} ({name}): {what} [{time.monotonic() - started:.1f}s]")

    def backup_output() -> None:
        copy(sink, f"{store}/original/{name}")
        copy(lake.kept_path(sink), f"{store}/original/{name}-kept")

    def cut_output() -> None:
        kept = _cut_frame(spark, lake.read_sink(spark, sink), plan)
        kept.write.mode("overwrite").option("compression", "zstd").partitionBy(*lake.SINK_PARTITIONS).parquet(
            f"{store}/cut/{name}"
        )

    def replace_output() -> None:
        delete(sink)  # with it goes the old _spark_metadata: the restarted job starts its own log
        copy(f"{store}/cut/{name}", lake.kept_path(sink))

    def write_offsets() -> None:
        (folder / "starting-offsets.json").write_text(json.dumps(plan.offsets, indent=1, sort_keys=True))

    def remove_checkpoint() -> None:
        target = folder / "checkpoint"
        if cfg.checkpoint.exists():
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(cfg.checkpoint, target)
            shutil.rmtree(cfg.checkpoint)

    repaired = restarted_config(cfg, plan)

    def start_again() -> None:
        if restart is not None:
            restart(repaired)
            return
        queries = pipeline.start(spark, repaired, bootstrap=settings.endpoints().kafka_bootstrap)
        pipeline.drain(queries, bootstrap=settings.endpoints().kafka_bootstrap, topic_prefix=cfg.topic_prefix, progress=progress)

    progress(f"[repair] backup and journal in {shown(folder)}; output copies in {store}")
    step("backup-output", 3, f"output copied to {store}/original", backup_output)
    step("cut-output", 3, f"kept output (before each session's cut) written to {store}/cut", cut_output)
    step("replace-output", 3, "sink directories and their _spark_metadata removed; kept output in <sink>-kept", replace_output)
    step("starting-offsets", 4, f"startingOffsets written to {shown(folder / 'starting-offsets.json')}", write_offsets)
    step(
        "remove-checkpoint",
        5,
        f"checkpoint {shown(cfg.checkpoint)} copied to {shown(folder / 'checkpoint')} and removed",
        remove_checkpoint,
    )
    step("restart", 6, "job started from the repaired offsets", start_again)
    return folder


def restarted_config(cfg, plan: RepairPlan):
    """The job's config after a repair: the plan's offsets and session cuts, else unchanged."""
    import dataclasses

    return dataclasses.replace(cfg, starting_offsets=json.dumps(plan.offsets, sort_keys=True), session_cuts=dict(plan.cuts))


def load_plan(folder: Path) -> RepairPlan:
    """The plan an earlier (possibly unfinished) repair recorded."""
    return RepairPlan.from_json((folder / "plan.json").read_text())


def run_cli(args, settings) -> int:
    """``python -m job repair``: print the plan; with ``--apply``, carry it out."""
    import sys

    from job.spark.saved import from_args
    from sandbox.jvm.spark_session import spark_session

    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    only = parse_partitions(args.partitions)
    from job.spark.config import job_config

    unfinished = unfinished_repair(job_config(settings, checkpoint=args.checkpoint and args.checkpoint.resolve()).checkpoint)
    # step 5 moved the checkpoint, and its job.json, into the backup: read the run's settings there
    kept_in = unfinished / "checkpoint" if unfinished is not None and (unfinished / "checkpoint").is_dir() else None
    cfg = from_args(args, settings, kept_in=kept_in if kept_in and (kept_in / "job.json").exists() else None)
    started = time.monotonic()
    if unfinished is None and not _committed(cfg) and not _sink_log_listed(settings, cfg.output):
        require_checkpoint(cfg)  # no batch in the checkpoint, none in the lake: nothing to repair from
    spark = spark_session(settings, "job-repair")
    if unfinished is not None:
        plan = load_plan(unfinished)
        say(f"[repair] resuming the unfinished repair in {shown(unfinished)}")
    else:
        plan = make_plan(spark, settings, cfg, only=only, progress=say)
    print(plan.describe())
    if args.plan is not None:
        args.plan.write_text(plan.to_json())
    if not args.apply or not plan.needed:
        if plan.needed:
            print("dry run: nothing changed; run again with --apply to carry the plan out")
        say(f"[repair] planned in {time.monotonic() - started:.1f}s")
        return 0
    folder = apply_repair(spark, settings, cfg, plan, progress=say)
    say(
        f"[repair] done in {time.monotonic() - started:.1f}s; backup in {shown(folder)}; "
        f"continue with: python -m job run --checkpoint {shown(cfg.checkpoint)} (its job.json holds the run's settings)"
    )
    return 0
