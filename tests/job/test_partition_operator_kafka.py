"""The operator keyed by Kafka partition gives, on the cluster and for the same Kafka input, exactly
what the per-session operator gives: the same row changes, quarantine records and session status
rows (compared row by row; only ``processed_ms``, the time a batch ran, may differ) and the same
verdict from the verifier, under each policy that goes on past a fault. The input is a fault mix,
several sessions per partition, and key-less records in two partitions of one topic (which the
per-session operators hold in one per-topic pseudo-session)."""

from __future__ import annotations

import uuid

import pytest

from job.spark import checkpoints, lake, pipeline
from job.spark.config import job_config
from job.verify.lake_check import verify_lake
from producers.runner import new_run_id
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULTS = ("drop:0.02", "duplicate:0.02", "corrupt:0.01", "reorder:0.02:k=3", "orphan-update:0.02", "epoch-reset:0.01")
COMPARED = [name for name, _ in lake.UNION_COLUMNS if name != "processed_ms"]


@pytest.fixture(scope="module")
def fault_mix(sandbox, tmp_path_factory):
    """A producer run of 2 sites x 6 sessions with :data:`FAULTS`, then four key-less records
    in two partitions of its first topic; returns (topic prefix, ledger)."""
    from confluent_kafka import Producer

    bootstrap = sandbox.settings.endpoints().kafka_bootstrap
    run_id = new_run_id()
    cfg, summary = kafka_runs.produce(
        bootstrap,
        tmp_path_factory.mktemp("ledger") / run_id,
        faults=FAULTS,
        sites=2,
        sessions=6,
        rate=600.0,
        duration=4.0,
        snapshot_every=25,
        seed=23,
        run_id=run_id,
        topic_prefix=kafka_runs.fresh_prefix(),
    )
    assert summary.error is None, summary.error
    assert sum(summary.faults.values()) > 0, "the run must inject faults for the comparison to mean anything"
    from producers.sites import site_name, topic_for

    producer = Producer({"bootstrap.servers": bootstrap})
    topic = topic_for(site_name(0), cfg.topic_prefix)
    for i in range(4):
        producer.produce(topic, value=b'{"not": "keyed"}', partition=i % 2)
    assert producer.flush(30) == 0, "the key-less records were not acknowledged"
    return cfg.topic_prefix, cfg.ledger


def _lake(spark, cfg):
    """Every output row of the job's sink but the raw archive, as sorted tuples of :data:`COMPARED`."""
    frame = lake.read_sink(spark, lake.open_lake(spark, cfg.output))
    rows = frame.where(frame.output != lake.RAW_OUTPUT).select(*COMPARED).collect()
    return sorted((tuple(bytes(v) if isinstance(v, bytearray) else v for v in r) for r in rows), key=repr)


@pytest.mark.parametrize("policy", ["resync", "window", "none"])
def test_keyed_by_partition_writes_what_keyed_by_session_writes(policy, sandbox, spark, fault_mix, tmp_path):
    prefix, ledger = fault_mix
    settings = sandbox.settings
    outputs, verdicts, states = {}, {}, {}
    for operator in ("applyInPandasWithState", pipeline.BY_PARTITION):
        cfg = job_config(
            settings,
            output=f"s3a://{settings.bucket}/itest/{uuid.uuid4().hex[:8]}",
            checkpoint=tmp_path / operator,
            topic_prefix=prefix,
            policy=policy,
            trigger="available-now",
            operator=operator,
            max_offsets_per_trigger=700,
        )
        queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
        pipeline.await_all(queries, timeout_s=300)
        outputs[operator] = _lake(spark, cfg)
        # the state store's sessions, read back one row per session whichever the key
        states[operator] = sorted(
            (r.session_key, bytes(r.state)) for r in checkpoints.session_states(spark, cfg.checkpoint / "sessions").collect()
        )
        report = verify_lake(spark, ledger=ledger, lake=cfg.output, policy=policy)
        verdicts[operator] = (report.ok, sorted(map(repr, report.anomalies)))
    by_session, by_partition = outputs["applyInPandasWithState"], outputs[pipeline.BY_PARTITION]
    kinds = {r[0] for r in by_session}
    assert kinds == {"rows", "quarantine", "sessions"}, f"the run should write every output: {kinds}"
    keyless = [r for r in by_session if r[0] == "quarantine" and r[COMPARED.index("reason")] == "missing-key"]
    assert len(keyless) == 4, f"the four key-less records should be quarantined: {keyless}"
    only_session = sorted(set(by_session) - set(by_partition), key=repr)[:5]
    only_partition = sorted(set(by_partition) - set(by_session), key=repr)[:5]
    assert by_session == by_partition, (
        f"{len(by_session)} rows keyed by session, {len(by_partition)} keyed by partition; only by session: "
        f"{only_session}; only by partition: {only_partition}"
    )
    assert verdicts["applyInPandasWithState"] == verdicts[pipeline.BY_PARTITION]
    assert states["applyInPandasWithState"] and states["applyInPandasWithState"] == states[pipeline.BY_PARTITION]


def test_idle_sessions_expire_keyed_by_partition_as_they_expire_keyed_by_session(sandbox, spark, fault_mix, tmp_path):
    """Spark's timeout path, live: a processing-time trigger and a 2 s idle timeout; every session
    (and, keyed by partition, every partition) leaves the state store, and the expiry's status
    rows and quarantined held records are the per-session operator's."""
    from sandbox.checks.health import wait_for

    prefix, _ = fault_mix
    settings = sandbox.settings
    outputs = {}
    for operator in ("applyInPandasWithState", pipeline.BY_PARTITION):
        cfg = job_config(
            settings,
            output=f"s3a://{settings.bucket}/itest/{uuid.uuid4().hex[:8]}",
            checkpoint=tmp_path / operator,
            topic_prefix=prefix,
            policy="window",
            trigger="1 second",
            operator=operator,
            idle_timeout_s=2,
        )
        queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
        try:

            def state_gone():
                pipeline.raise_if_dead(queries[0])
                done = [p for p in queries[0].recentProgress if p["numInputRows"] > 0]
                last = queries[0].lastProgress
                return bool(done) and last is not None and last["stateOperators"][0]["numRowsTotal"] == 0

            wait_for(state_gone, timeout_s=180, what=f"{operator}: every session expired from the state store")
        finally:
            for q in queries:
                q.stop()
        outputs[operator] = _lake(spark, cfg)
    by_session, by_partition = outputs["applyInPandasWithState"], outputs[pipeline.BY_PARTITION]
    status = [r for r in by_session if r[0] == "sessions"]
    sessions = {r[1] for r in status}
    assert len(status) >= 2 * len(sessions) > 0, f"each session should have a batch's status row and its expiry's: {status[:4]}"
    assert by_session == by_partition, (
        f"only by session: {sorted(set(by_session) - set(by_partition), key=repr)[:5]}; "
        f"only by partition: {sorted(set(by_partition) - set(by_session), key=repr)[:5]}"
    )
