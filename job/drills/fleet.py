"""A fleet's lake on purpose: many sites and sessions with a fault mix and snapshots, produced into
fresh topics and run through the job with its default settings until drained. The verifier's
benchmark (``bench/verify_bench.py``) and its scale test build their lakes with it."""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from producers.faults import Drop, Duplicate, Fault, Reorder

__all__ = ["FLEET_FAULTS", "FleetLake", "FleetShape", "fleet_lake"]

#: The faults a fleet carries in the verifier's benchmark: what an afternoon of collection points
#: does (1 % duplicates and reorders, 0.5 % drops), every one a finding the verifier must place.
FLEET_FAULTS: tuple[Fault, ...] = (Duplicate(probability=0.01), Reorder(probability=0.01), Drop(probability=0.005))


@dataclass(frozen=True)
class FleetShape:
    """How to get about ``size`` row changes from ``sessions`` sessions: sites, sessions per site,
    messages per session and rows per table (a snapshot writes the table, an update one row)."""

    sessions: int
    size: int
    sites: int
    per_site: int
    session_length: int
    rows: int
    snapshot_every: int

    @classmethod
    def of(cls, sessions: int, size: int, *, snapshot_every: int = 40) -> FleetShape:
        per_session = size / sessions
        length = max(8, min(2000, int(2 * math.sqrt(per_session))))  # longer sessions as they grow, tables too
        snapshots = math.ceil(length / snapshot_every)
        rows = max(1, round((per_session - (length - snapshots)) / snapshots))
        sites = 40 if sessions % 40 == 0 else max(1, min(4, sessions))  # a fleet: 40 sites of 25 sessions
        return cls(sessions, size, sites, sessions // sites, length, rows, snapshot_every)


@dataclass(frozen=True, kw_only=True)
class FleetLake:
    """What :func:`fleet_lake` built: the ledger, the lake root, and its sizes."""

    ledger: str
    output: str
    policy: str
    sessions: int
    messages: int  # records Kafka acknowledged
    rows: int  # row changes in the lake's ``rows`` output
    produce_s: float
    job_s: float


def fleet_lake(
    spark,
    settings,
    shape: FleetShape,
    *,
    workdir: Path,
    faults: tuple[Fault, ...] = FLEET_FAULTS,
    rate: float = 50_000.0,
    seed: int = 7,
    progress: Callable[[str], None] = print,
) -> FleetLake:
    """Produce the sessions of ``shape`` with ``faults`` into fresh topics and run the job on them
    with its defaults (available-now) into a fresh lake."""
    from job.spark import lake, pipeline
    from job.spark.config import job_config
    from producers.runner import RunConfig, Runner, new_run_id

    run_id = new_run_id()
    tag = uuid.uuid4().hex[:8]
    prefix = f"fleet-{tag}-"
    ledger = str(workdir / f"ledger-{run_id}")
    messages = shape.sites * shape.per_site * shape.session_length
    progress(
        f"[fleet] producing {shape.sites} sites x {shape.per_site} sessions, {messages:,} messages, "
        f"tables of {shape.rows} rows ..."
    )
    started = time.monotonic()
    summary = Runner(
        RunConfig(
            ledger=ledger,
            bootstrap=settings.endpoints().kafka_bootstrap,
            sites=shape.sites,
            sessions=shape.per_site,
            rate=rate,
            duration=max(120.0, 10 * messages / rate),
            session_length=shape.session_length,
            rows=shape.rows,
            snapshot_every=shape.snapshot_every,
            faults=faults,
            seed=seed,
            run_id=run_id,
            topic_prefix=prefix,
        )
    ).run()
    if summary.error is not None or summary.stopped != "completed":
        raise RuntimeError(f"the producers did not complete the fleet ({summary.stopped}): {summary.error}")
    produced = time.monotonic() - started
    cfg = job_config(
        settings,
        output=f"s3a://{settings.bucket}/fleet/{tag}",
        checkpoint=workdir / f"ckpt-{tag}",
        topic_prefix=prefix,
        trigger="available-now",
    )
    progress(f"[fleet] produced in {produced:.0f} s; running the job into {cfg.output} ...")
    started = time.monotonic()
    queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
    try:
        pipeline.await_all(queries, timeout_s=1800)
    finally:
        for q in queries:
            q.stop()
    ran = time.monotonic() - started
    count = lake.read_output(spark, cfg.sink_path, "rows").count()
    progress(f"[fleet] the job wrote {count:,} row changes in {ran:.0f} s")
    return FleetLake(
        ledger=ledger,
        output=cfg.output,
        policy=cfg.policy,
        sessions=shape.sites * shape.per_site,
        messages=int(summary.outcomes.get("ok", 0)),
        rows=count,
        produce_s=produced,
        job_s=ran,
    )
