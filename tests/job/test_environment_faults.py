"""Environmental faults of job.drills.environment injected for real on the sandbox while
producers send and `python -m job run` streams: the job's documented reaction, output
flowing again, the alert a human would get, and a clean verdict after the drain."""

from __future__ import annotations

import uuid

import pytest

from job.drills.environment import run_faults

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: fault -> (what the job must have done, an alert kind the watchdog must have raised or None)
EXPECTED = {
    # no offsets, no batch: the job waits for the broker and the watchdog sees a stall
    "broker-kill": ({"waited"}, "stall"),
    # the batch in flight cannot write its files: nothing commits while MinIO is frozen
    "minio-pause": ({"waited"}, "stall"),
}


def test_the_job_waits_out_a_broker_kill_and_a_frozen_minio_with_a_clean_verdict(sandbox, tmp_path):
    """The two faults the job must wait out, in one run, a gap of normal running between
    them, each judged on its own. (Chapter 04 runs all four in one run under nbval; the
    driver kill has its own tests in test_job_streaming and test_delivery_streaming, so
    this run keeps to the two that no other test outside the notebooks covers.)"""
    prefix = f"itest-env-{uuid.uuid4().hex[:6]}-"
    kinds = ["broker-kill", "minio-pause"]
    run = run_faults(sandbox, kinds, work=tmp_path, topic_prefix=prefix,
                     output=f"s3a://{sandbox.settings.bucket}/itest/{prefix}", warmup_s=8, gap_s=15)  # fmt: skip
    assert [o.kind for o in run.outcomes] == kinds, run.table()
    for judged in run.outcomes:
        behaviours, alert = EXPECTED[judged.kind]
        assert judged.behaviour in behaviours, (judged.kind, run.table())
        assert judged.time_to_flow_s is not None and judged.time_to_flow_s > 0, (judged.kind, run.table())
        if alert is not None:
            assert alert in judged.alerts, (judged.kind, run.alerts)
    assert run.job_starts == 1, "neither fault may end the job's process"
    assert run.clean, run.verdict.get("summary")
    assert all(str(s.state) == "running" for s in sandbox.status())
