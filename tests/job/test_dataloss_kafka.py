"""Kafka data loss on the real sandbox: retention deletes records a stopped job has not read,
and delete_records moves a log start exactly.

The job's side (it refuses to go on by default and names the loss, skips it when told, and the
verifier accepts exactly the deleted records as lost, from the CLI too) is chapter 07, which CI
runs under nbval with those asserts; the error's wording per Kafka reason is unit-tested in
test_dataloss_units.py. A copy here cost 54 s of every CI run for nothing new."""

from __future__ import annotations

import pytest

from job.drills import kafka_loss
from job.ops import dataloss
from producers.sites import site_name, topic_for
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SITES, SNAPSHOT_EVERY = 2, 20


def _producers(bootstrap, ledger):
    cfg = kafka_runs.run_config(
        bootstrap, ledger, sites=SITES, sessions=1, rate=120.0, duration=600.0, snapshot_every=SNAPSHOT_EVERY, seed=11
    )
    return cfg, kafka_loss.BackgroundRun(cfg), [topic_for(site_name(i), cfg.topic_prefix) for i in range(SITES)]


def test_retention_deletes_past_a_checkpoint_and_the_overrides_go_away(bootstrap, tmp_path):
    cfg, run, topics = _producers(bootstrap, tmp_path / "ledger")
    try:
        run.wait_acked(200)
        default = kafka_loss.topic_configs(bootstrap, topics)
        marks = dataloss.watermarks(bootstrap, topics)
        read = {k: high for k, (_, high) in marks.items()}  # as if a job had read everything so far
        outage = kafka_loss.retention_outage(bootstrap, topics, read, timeout_s=90)
        busy = {k for k, o in read.items() if o > 0}
        assert busy and {(d.topic, d.partition) for d in outage.deleted} == busy
        later = dataloss.watermarks(bootstrap, topics)
        for d in outage.deleted:
            assert d.start == read[(d.topic, d.partition)] and d.end > d.start
            assert later[(d.topic, d.partition)][0] >= d.end  # gone for good
        assert kafka_loss.topic_configs(bootstrap, topics) == default  # the broker's defaults again
    finally:
        run.finish()


def test_delete_records_moves_the_log_start_exactly_and_unread_deleted_sees_it(bootstrap, tmp_path):
    cfg, run, topics = _producers(bootstrap, tmp_path / "ledger")
    try:
        run.wait_acked(200)
    finally:
        run.finish()
    marks = dataloss.watermarks(bootstrap, topics)
    key, (low, high) = next((k, m) for k, m in sorted(marks.items()) if m[1] > 20)
    kafka_loss.delete_unread(bootstrap, {key: high - 10})
    after = dataloss.watermarks(bootstrap, topics)
    assert after[key] == (high - 10, high)
    assert dataloss.unread_deleted({key: 5}, {key: after[key][0]}) == [
        dataloss.DeletedRange(topic=key[0], partition=key[1], start=5, end=high - 10)
    ]
    assert dataloss.rewound_partitions({key: high}, {key: after[key][1]}) == []
