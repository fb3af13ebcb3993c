"""The metadata trap on the sandbox's cluster, then the repair: the verifier goes from lost records to clean."""

from __future__ import annotations

import dataclasses

import pytest

from job.drills.trap import reproduce_metadata_trap
from job.engine.errors import RepairError
from job.ops.repair import apply_repair, make_plan
from job.spark import lake, pipeline
from job.verify.lake_check import verify_archive, verify_lake

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_trap_loses_rows_silently_and_the_repair_makes_the_verifier_clean(sandbox, spark, tmp_path):
    settings = sandbox.settings
    trap = reproduce_metadata_trap(spark, settings, workdir=tmp_path, progress=lambda m: None)
    cfg = trap.cfg
    assert len(trap.skipped) >= 1, trap.batches
    before = verify_lake(spark, ledger=trap.ledger, lake=cfg.output, policy="resync")
    assert not before.ok and before.lost > 0, before.summary()

    # a query of the job still running is refused, naming it (found by its name: this one
    # writes elsewhere, so that it cannot touch the damaged checkpoint and output)
    elsewhere = dataclasses.replace(cfg, raw_archive=False, checkpoint=tmp_path / "other", output=cfg.output + "-other")
    queries = pipeline.start(spark, elsewhere, bootstrap=settings.endpoints().kafka_bootstrap)
    try:
        with pytest.raises(RepairError, match="a query still runs on it"):
            make_plan(spark, settings, cfg, progress=lambda m: None)
    finally:
        for q in queries:
            q.stop()
    with pytest.raises(RepairError, match="does not exist"):
        make_plan(spark, settings, dataclasses.replace(cfg, output=cfg.output + "-nothing"), progress=lambda m: None)

    plan = make_plan(spark, settings, cfg, progress=lambda m: None)
    assert plan.needed
    damaged = [p for p in plan.partitions if p.damaged]
    assert damaged and all(p.restart <= p.damage <= p.checkpoint_end for p in plan.partitions)
    folder = apply_repair(spark, settings, cfg, plan, progress=lambda m: None)
    assert (folder / "checkpoint" / "sessions" / "commits").is_dir()  # the backup is kept
    assert lake.path_exists(spark, lake.kept_path(cfg.sink_path))

    after = verify_lake(spark, ledger=trap.ledger, lake=cfg.output, policy="resync")
    assert after.ok and after.lost == 0, after.summary()
    # the raw archive, the sink's fourth output, was cut where the restarted job archives from:
    # every delivered record is in it, and once (read_raw drops no duplicate)
    assert verify_archive(spark, ledger=trap.ledger, lake=cfg.output).ok
    archive = lake.read_raw(spark, cfg.output)
    assert archive.count() == archive.dropDuplicates(["topic", "partition", "offset"]).count() > 0

    # idempotent: the finished repair is not run again, and a new plan finds nothing to do
    log: list[str] = []
    apply_repair(spark, settings, cfg, plan, progress=log.append)
    assert sum("already done" in line for line in log) == 6, log
    assert not make_plan(spark, settings, cfg, progress=lambda m: None).needed
