"""Each environmental fault of job.environment injected for real on the sandbox while
producers send and `python -m job run` streams: the job's documented reaction, output
flowing again, the alert a human would get, and a clean verdict after the drain."""

from __future__ import annotations

import uuid

import pytest

from job.environment import FAULTS, run_faults

pytestmark = [pytest.mark.integration, pytest.mark.slow]

#: fault -> (what the job must have done, an alert kind the watchdog must have raised or None)
EXPECTED = {
    # the other executor carries on; a kill may cost a batch but no alert is owed
    "worker-kill": ({"kept going"}, None),
    # no offsets, no batch: the job waits for the broker and the watchdog sees a stall
    "broker-kill": ({"waited"}, "stall"),
    # the batch in flight cannot write its files: nothing commits while MinIO is frozen
    "minio-pause": ({"waited"}, "stall"),
    # the driver's pid vanishes without a termination event: an error, then recovered
    "driver-kill": ({"failed, restarted from the checkpoint"}, "error"),
}


@pytest.mark.parametrize("kind", sorted(FAULTS))
def test_the_job_recovers_from_each_environmental_fault_with_a_clean_verdict(sandbox, tmp_path, kind):
    prefix = f"itest-env-{uuid.uuid4().hex[:6]}-"
    run = run_faults(sandbox, [kind], work=tmp_path, topic_prefix=prefix,
                     output=f"s3a://{sandbox.settings.bucket}/itest/{prefix}", warmup_s=8, gap_s=15)  # fmt: skip
    (judged,) = run.outcomes
    behaviours, alert = EXPECTED[kind]
    assert judged.behaviour in behaviours, run.table()
    assert judged.time_to_flow_s is not None and judged.time_to_flow_s > 0, run.table()
    if alert is not None:
        assert alert in judged.alerts, run.alerts
    assert run.clean, run.verdict.get("summary")
    assert all(str(s.state) == "running" for s in sandbox.status())
