"""The pure parts of job.drills.environment: judging a fault from the job's event log, and the
per-second series for the plot. No services."""

from __future__ import annotations

import pytest

from job.drills.environment import (
    FAULTS,
    EnvironmentFaultError,
    FaultOutcome,
    FaultRun,
    Injected,
    outcome,
    sessions_only,
    timeline,
)


def _batch(at, rows, batch_id=0, ends=None, query="job-sessions", started_at=None):
    return {
        "type": "BatchCompleted",
        "at": at,
        "batch_id": batch_id,
        "input_rows": rows,
        "query": query,
        "end_offsets": ends or {},
        "started_at": started_at,
    }


def test_only_batches_begun_after_the_fault_count_as_kept_going():
    # begun at 99, committed at 110: in flight when the fault struck, re-run on the survivor; it
    # proves nothing about working *through* the fault. Begun at 111 and 113: they do.
    events = [
        _batch(110, 10, started_at=99.0),
        _batch(112, 10, started_at=111.0),
        _batch(114, 10, started_at=113.0),
        _batch(125, 10, started_at=121.0),
    ]
    judged = outcome(Injected(kind="worker-kill", injected_at=100, undone_at=120), events, horizon=200)
    assert judged.behaviour == "kept going" and judged.batches_during == 2
    only_in_flight = outcome(Injected(kind="worker-kill", injected_at=100, undone_at=120), events[:1], horizon=200)
    assert only_in_flight.behaviour == "waited" and only_in_flight.batches_during == 0


def test_a_blocking_fault_counts_time_to_flow_from_the_injection_to_the_first_batch_after_the_undo():
    # the batch at 101 was in flight when the fault struck; the one at 131 carried no input
    events = [_batch(95, 10), _batch(101, 10), _batch(131, 0), _batch(133, 40), _batch(134, 20)]
    fault = Injected(kind="minio-pause", injected_at=100, undone_at=125)
    judged = outcome(fault, events, horizon=200)
    assert judged.behaviour == "waited" and judged.batches_during == 0
    assert judged.time_to_flow_s == 33.0 and judged.longest_gap_s == 32.0  # from 101 to 133


def test_a_blocking_fault_with_no_batch_while_it_lasts_waited():
    events = [_batch(95, 10), _batch(127, 50)]
    judged = outcome(Injected(kind="broker-kill", injected_at=100, undone_at=120), events, horizon=200)
    assert judged.behaviour == "waited" and judged.batches_during == 0 and judged.time_to_flow_s == 27.0


def test_an_absorbed_worker_kill_counts_from_the_injection():
    events = [_batch(99, 10), _batch(104, 10), _batch(106, 10)]
    judged = outcome(Injected(kind="worker-kill", injected_at=100, undone_at=120), events, horizon=200)
    assert judged.behaviour == "kept going" and judged.batches_during == 1 and judged.time_to_flow_s == 4.0
    assert judged.longest_gap_s == 5.0  # 99 -> 104: the batch re-run on the surviving executor


def test_a_dead_job_process_is_reported_as_failed_and_batches_after_the_horizon_do_not_count():
    events = [_batch(99, 10), _batch(250, 10)]
    judged = outcome(Injected(kind="driver-kill", injected_at=100, undone_at=105, job_died=True), events, horizon=200)
    assert judged.behaviour == "failed, restarted from the checkpoint" and judged.time_to_flow_s is None
    assert judged.longest_gap_s is None


def test_alerts_are_attributed_to_the_fault_whose_window_they_fall_in():
    alerts = [{"kind": "stall", "at": 90}, {"kind": "recovered", "at": 130}, {"kind": "error", "at": 101}]
    judged = outcome(Injected(kind="driver-kill", injected_at=100, undone_at=105), [], horizon=200, alerts=alerts)
    assert judged.alerts == ("error", "recovered")


def test_an_unknown_fault_kind_is_named_with_the_known_ones():
    with pytest.raises(EnvironmentFaultError, match="'disk-full' is unknown; use one of"):
        outcome(Injected(kind="disk-full", injected_at=1, undone_at=2), [], horizon=3)  # type: ignore[arg-type]


def test_timeline_bins_rows_per_second_and_subtracts_committed_offsets_from_high_watermarks():
    events = [_batch(1000.5, 10, ends={"t": {"0": 10}}), _batch(1002.2, 30, ends={"t": {"0": 30, "1": 10}})]
    highs = [(1000.1, 40), (1001.1, None), (1002.5, 60)]
    series = timeline(events, highs, start=1000, end=1004, smooth_s=1)
    assert series["t"] == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert series["records_per_s"] == [10.0, 0.0, 30.0, 0.0, 0.0]
    # second 0 ends at 1001: high 40, committed 10; second 1: Kafka did not answer; then 60 - 40
    assert series["lag"] == [30.0, None, 20.0, 20.0, 20.0]


def test_timeline_smooths_over_a_trailing_window():
    series = timeline([_batch(10.0, 30)], [], start=10, end=13, smooth_s=3)
    assert series["records_per_s"] == [30.0, 15.0, 10.0, 0.0]
    assert series["lag"] == [None] * 4


def test_every_fault_says_what_it_breaks_and_what_a_correct_job_does():
    for kind, spec in FAULTS.items():
        assert spec.kind == kind and spec.hold_s > 0 and spec.damage and spec.expected


def test_a_fault_run_survives_its_json_round_trip(tmp_path):
    run = FaultRun(
        start=1.0,
        end=2.0,
        faults=[Injected(kind="broker-kill", injected_at=1.0, undone_at=1.5)],
        outcomes=[
            FaultOutcome(
                kind="broker-kill",
                injected_at=1.0,
                undone_at=1.5,
                behaviour="waited",
                batches_during=0,
                time_to_flow_s=3.0,
                longest_gap_s=4.0,
                alerts=("stall",),
            )
        ],
        events=[],
        alerts=[],
        high_watermarks=[(1.0, None)],
        verdict={"ok": True},
        job_starts=1,
        ledger="l",
        output="o",
        files={"events": tmp_path / "e"},
    )
    back = FaultRun.from_json(run.to_json())
    assert back == run and back.clean and back.table()[0]["alerts"] == "stall"


def test_only_the_sessions_query_is_judged_not_the_raw_archive_beside_it():
    records = [_batch(1, 5, query="job-raw"), _batch(2, 5), {"kind": "stall", "at": 3, "query": "job-raw"}]
    assert sessions_only(records) == [_batch(2, 5)]
