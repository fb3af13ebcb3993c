"""The streaming job on the sandbox's Spark cluster, verified against the producers' ledger."""

from __future__ import annotations

import uuid

import pytest

from job.spark import lake, pipeline
from job.spark.config import job_config
from job.verify.lake_check import verify_lake
from producers.runner import new_run_id
from sandbox.checks.health import wait_for
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULTS = ("drop:0.02", "duplicate:0.02", "corrupt:0.01", "reorder:0.02:k=3")


@pytest.fixture
def produce(sandbox, tmp_path):
    """Factory: run producers into fresh topics; returns (prefix, ledger path, summary)."""

    def run(*, faults=FAULTS, sites=2, join=0, sessions=2, duration=4.0, rate=400.0, prefix=None, seed=11):
        run_id = new_run_id()
        cfg, summary = kafka_runs.produce(
            sandbox.settings.endpoints().kafka_bootstrap,
            tmp_path / f"ledger-{run_id}",
            faults=faults,
            sites=sites,
            join=join,
            sessions=sessions,
            rate=rate,
            duration=duration,
            snapshot_every=25,
            seed=seed,
            run_id=run_id,
            topic_prefix=prefix or kafka_runs.fresh_prefix(),
        )
        assert summary.error is None, summary.error
        return cfg.topic_prefix, cfg.ledger, summary

    return run


def _config(settings, tmp_path, prefix, policy, **kw):
    return job_config(
        settings,
        output=f"s3a://{settings.bucket}/itest/{uuid.uuid4().hex[:8]}",
        checkpoint=tmp_path / f"ckpt-{policy}",
        topic_prefix=prefix,
        policy=policy,
        **kw,
    )


def _run_available_now(spark, settings, cfg):
    queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
    pipeline.await_all(queries, timeout_s=300)
    return queries


@pytest.mark.parametrize(
    ("policy", "operator", "input_tasks"),
    [
        ("resync", "applyInPandasWithState", 2),
        # the Kafka read coalesced into one task (JobConfig.input_tasks): every partition's
        # records in one task, one after another, and still exactly once; and Spark's one task
        # per partition (0)
        ("window", "applyInPandasWithState", 1),
        ("none", "applyInPandasWithState", 0),
        # the other APIs the benchmark compares run the same state machine
        ("window", "transformWithStateInPandas", 2),
        ("window", "transformWithState", 2),
    ],
)
def test_policy_output_is_verified_against_the_ledger(policy, operator, input_tasks, sandbox, spark, produce, tmp_path, capsys):
    prefix, ledger, summary = produce()
    assert sum(summary.faults.values()) > 0, "the run must inject faults for this test to mean anything"
    cfg = _config(sandbox.settings, tmp_path, prefix, policy, trigger="available-now", operator=operator, input_tasks=input_tasks)
    queries = _run_available_now(spark, sandbox.settings, cfg)
    capsys.readouterr()
    queries[0].explain()  # the last batch's physical plan
    plan = capsys.readouterr().out
    assert (f"Coalesce {input_tasks}" in plan) if input_tasks else ("Coalesce" not in plan), plan
    report = verify_lake(spark, ledger=ledger, lake=cfg.output, policy=policy)
    assert report.ok, report.summary()
    rows = lake.read_output(spark, cfg.sink_path, "rows")
    assert rows.count() > 0
    # what Spark writes through FileContext (the logs, the state changelogs and snapshots) goes
    # through the raw local file system (sandbox/jvm/spark_session.py): no .crc beside it. RocksDB copies its
    # SST files with Hadoop's FileSystem API, which keeps its checksums (SSTs/.*.sst.crc).
    written = [p.relative_to(cfg.checkpoint).as_posix() for p in cfg.checkpoint.rglob("*") if p.is_file()]
    assert any("/commits/" in f"/{f}" for f in written) and any(f.endswith(".changelog") for f in written), written
    crc = [f for f in written if f.endswith(".crc") and "/SSTs/" not in f]
    assert not crc, crc
    assert rows.where("topic IS NULL OR partition IS NULL OR offset IS NULL").count() == 0


def test_strict_policy_fails_on_first_fault_naming_topic_partition_offset_and_session(sandbox, spark, produce, tmp_path):
    prefix, ledger, summary = produce(faults=("drop:sessions=0:at=30",), sites=1, sessions=1, duration=3.0)
    assert summary.faults.get("drop") == 1
    cfg = _config(sandbox.settings, tmp_path, prefix, "strict", trigger="available-now", raw_archive=False)
    queries = pipeline.start(spark, cfg, bootstrap=sandbox.settings.endpoints().kafka_bootstrap)
    with pytest.raises(Exception) as info:
        pipeline.await_all(queries, timeout_s=300)
    message = str(info.value)
    topic = f"{prefix}"
    assert topic in message and "offset" in message and "session" in message, message
    assert "gap" in message, message


def test_site_that_starts_after_the_job_appears_in_the_output(sandbox, spark, produce, tmp_path):
    prefix = f"disc-{uuid.uuid4().hex[:6]}-"
    produce(faults=(), sites=1, sessions=1, duration=2.0, prefix=prefix, seed=1)
    cfg = _config(sandbox.settings, tmp_path, prefix, "resync", trigger="2 seconds", topic_discovery_ms=2000, raw_archive=False)
    queries = pipeline.start(spark, cfg, bootstrap=sandbox.settings.endpoints().kafka_bootstrap)
    try:
        wait_for(lambda: pipeline.rows_read(queries[0]) > 0, timeout_s=180, what="the job's first batch")
        before = {r.topic for r in lake.read_output(spark, cfg.sink_path, "rows").select("topic").distinct().collect()}
        _, _, late = produce(faults=(), sites=2, sessions=1, duration=2.0, prefix=prefix, seed=2)
        new_topics = set(late.topics) - before
        assert new_topics, "the second run must create a topic the job has not seen"
        pipeline.drain(queries, bootstrap=sandbox.settings.endpoints().kafka_bootstrap, topic_prefix=prefix, timeout_s=240)
    finally:
        for q in queries:
            q.stop()
    after = {r.topic for r in lake.read_output(spark, cfg.sink_path, "rows").select("topic").distinct().collect()}
    assert new_topics <= after
