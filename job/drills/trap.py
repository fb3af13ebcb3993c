"""The metadata trap, reproduced for real: the checkpoint goes back in time, the output's log does not.

:func:`reproduce_metadata_trap` produces a ledgered stream into fresh topics, then runs the
job three times on the sandbox's cluster:

1. a few batches (capped by ``maxOffsetsPerTrigger``), after which the checkpoint is
   copied away: the "older backup";
2. a few more batches, each written by the file sink and listed in its ``_spark_metadata``;
3. the damage: the checkpoint is restored from the older backup while the output keeps its
   log, and the job restarts without the cap, so the first batch after the backup now
   covers everything left in Kafka. Its batch id is one the sink's log already holds: the
   sink skips it (and the empty batches after it), the checkpoint commits it, and the
   records past what run 2 wrote never reach the lake. Nothing fails: the skipped batch is
   not even executed (its ``numInputRows`` is 0), so the state does not see its records.

The returned :class:`TrapRun` has each run's batches (id, records read, whether the sink
wrote them), for the chapter's plot; the verifier then reports the lost records.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from job.spark.config import JobConfig
from job.spark.lake import sink_log_batches
from job.spark.query_progress import reached, records_between, started

__all__ = ["TrapRun", "reproduce_metadata_trap", "sink_log_batches"]


@dataclass(frozen=True)
class TrapRun:
    """What the trap left behind: the config to repair, the ledger to verify against, and
    per batch of each run (``run``, ``batch``, ``records``: Kafka records in its offset range, ``written``) what happened."""

    cfg: JobConfig
    ledger: str
    backup: Path
    restored_from: int  # the last batch id the older backup had committed
    log_latest: int  # the sink log's latest batch id when the restored job started
    batches: pd.DataFrame

    @property
    def skipped(self) -> pd.DataFrame:
        """The restored run's batches with records that the sink skipped."""
        b = self.batches
        return b[(b["run"] == "3 restored") & ~b["written"] & (b["records"] > 0)]


def _commits(cfg: JobConfig) -> int:
    folder = cfg.checkpoint / "sessions" / "commits"
    return len([f for f in folder.glob("[0-9]*") if f.name.isdigit()]) if folder.exists() else 0


def _batch_records(progress: dict) -> int:
    """Kafka records a batch covered, from its offset range: a batch the sink skips is never
    executed, so its ``numInputRows`` is 0 although the checkpoint moves past its records."""
    return records_between(started(progress), reached(progress))


def _progress_frame(query, run: str, log_latest: int) -> pd.DataFrame:
    rows = [
        {"run": run, "batch": int(p["batchId"]), "records": _batch_records(p), "written": int(p["batchId"]) > log_latest}
        for p in query.recentProgress
    ]
    return pd.DataFrame(rows, columns=["run", "batch", "records", "written"]).drop_duplicates("batch", keep="last")


def reproduce_metadata_trap(
    spark,
    settings,
    *,
    workdir: Path,
    prefix: str | None = None,
    sites: int = 2,
    sessions: int = 2,
    duration: float = 6.0,
    rate: float = 300.0,
    seed: int = 8,
    cap: int = 150,
    progress: Callable[[str], None] = print,
) -> TrapRun:
    """Produce, run, back up, run, restore the old checkpoint, run: see the module docstring.

    Everything lives under fresh names: topics ``<prefix>*``, the lake ``s3a://<bucket>/trap/<id>``,
    the checkpoint and ledger under ``workdir``. The job runs with policy ``resync``.
    """
    from job.spark import pipeline
    from producers.runner import RunConfig, Runner, new_run_id
    from sandbox.checks.health import wait_for

    run_id = new_run_id()
    prefix = prefix or f"trap-{run_id}-"
    workdir.mkdir(parents=True, exist_ok=True)
    bootstrap = settings.endpoints().kafka_bootstrap
    ledger = str(workdir / f"ledger-{run_id}")
    progress(f"[trap] producing {duration:.0f}s at {rate:.0f} msg/s into {prefix}*")
    summary = Runner(
        RunConfig(
            ledger=ledger,
            bootstrap=bootstrap,
            sites=sites,
            sessions=sessions,
            rate=rate,
            duration=duration,
            snapshot_every=25,
            rows=12,
            seed=seed,
            run_id=run_id,
            topic_prefix=prefix,
        )
    ).run()
    if summary.error is not None:
        raise RuntimeError(f"the producers failed: {summary.error}")
    cfg = JobConfig(
        output=f"s3a://{settings.bucket}/trap/{run_id}-{uuid.uuid4().hex[:4]}",
        checkpoint=workdir / f"ckpt-{run_id}",
        topic_prefix=prefix,
        policy="resync",
        trigger="1 second",
        max_offsets_per_trigger=cap,
    )

    def run_until(config: JobConfig, commits: int, label: str) -> pd.DataFrame:
        log_latest = max(sink_log_batches(spark, config.sink_path), default=-1)
        queries = pipeline.start(spark, config, bootstrap=bootstrap)
        try:
            wait_for(
                lambda: _commits(config) >= commits,
                timeout_s=300,
                what=f"{label}: {commits} committed batches",
                abort=lambda: None if queries[0].isActive else f"the query stopped: {queries[0].exception()}",
            )
        finally:
            for q in queries:
                q.stop()
        frame = _progress_frame(queries[0], label, log_latest)
        progress(f"[trap] {label}: batches {frame['batch'].min()}..{frame['batch'].max()}, {frame['records'].sum()} records read")
        return frame

    first = run_until(cfg, 2, "1 first")
    backup = workdir / f"ckpt-{run_id}.older-backup"
    shutil.copytree(cfg.checkpoint, backup)
    restored_from = _commits(cfg) - 1
    progress(f"[trap] checkpoint backed up at batch {restored_from} -> {backup}")
    second = run_until(cfg, _commits(cfg) + 3, "2 second")
    log_latest = max(sink_log_batches(spark, cfg.sink_path))
    shutil.rmtree(cfg.checkpoint)
    shutil.copytree(backup, cfg.checkpoint)
    progress(f"[trap] damage: checkpoint restored to batch {restored_from}; the sink's log still ends at batch {log_latest}")
    uncapped = replace(cfg, max_offsets_per_trigger=None)
    # `job run` refuses a sink log ahead of its checkpoint (pipeline.sink_ahead); this drill walks into the trap on purpose
    queries = pipeline.start(spark, uncapped, bootstrap=bootstrap, allow_sink_ahead=True)
    pipeline.drain(queries, bootstrap=bootstrap, topic_prefix=prefix, progress=progress)
    third = _progress_frame(queries[0], "3 restored", log_latest)
    batches = pd.concat([first, second, third], ignore_index=True)
    run = TrapRun(cfg=cfg, ledger=ledger, backup=backup, restored_from=restored_from, log_latest=log_latest, batches=batches)
    progress(
        f"[trap] restored run: {len(run.skipped)} batch(es) with {int(run.skipped['records'].sum())} records skipped by the sink"
    )
    return run
