"""The pure parts of job.drills.backlog: the catch-up arithmetic, batches from a query's progress,
and what a run's batches say (caught up, full, forecast); the high-watermark sampler with
Kafka stubbed out. No services."""

from __future__ import annotations

import dataclasses
import math
import threading
from datetime import datetime, timezone

import pytest

from job.drills.backlog import (
    BacklogError,
    Batch,
    CatchUp,
    HighWatermarks,
    batches,
    catch_up_time_s,
    commit_forecast,
    forecast,
    pace,
    throughput,
)


def test_catch_up_time_is_the_backlog_over_the_throughput_left_after_the_input():
    assert catch_up_time_s(60_000, 1000, 3000) == 30.0
    assert catch_up_time_s(120_000, 1000, 3000) == 60.0  # twice the downtime, twice the time


def test_a_job_no_faster_than_its_input_never_catches_up():
    assert catch_up_time_s(30_000, 1000, 1000) == math.inf
    assert catch_up_time_s(30_000, 1000, 800) == math.inf


def test_no_backlog_takes_no_time_even_for_a_slow_job():
    assert catch_up_time_s(0, 1000, 10) == 0.0


def _at(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def _progress(batch_id, start, duration_ms, rows, ends, state_rows=0):
    return {
        "batchId": batch_id,
        "timestamp": _at(start),
        "numInputRows": rows,
        "durationMs": {"triggerExecution": duration_ms},
        "stateOperators": [{"numRowsTotal": state_rows, "memoryUsedBytes": 100 * state_rows}],
        "sources": [{"endOffset": '{"t-a": {"0": %d, "1": %d}}' % ends}],
    }


def test_batches_come_in_batch_order_with_the_lag_left_behind_each_commit():
    progress = [_progress(1, 1010.0, 2000, 40, (50, 50), state_rows=3), _progress(0, 1000.0, 4000, 60, (30, 30))]
    # end offsets sampled over time: 100 at 1001, 130 at 1011 (after batch 1's start, before its commit)
    samples = [(1001.0, 100), (1011.0, 130), (1013.0, 150)]
    got = batches(progress, samples)
    assert [b.batch_id for b in got] == [0, 1]
    assert got[0] == Batch(batch_id=0, start=1000.0, end=1004.0, input_rows=60, state_rows=0, state_bytes=0, committed=60, lag=40)
    assert got[1].end == 1012.0 and got[1].committed == 100 and got[1].lag == 30
    assert got[1].state_rows == 3 and got[1].state_bytes == 300 and got[1].duration_s == 2.0


def test_a_batch_before_any_sample_has_no_lag_and_the_lag_is_never_negative():
    got = batches([_progress(0, 1000.0, 1000, 10, (5, 5)), _progress(1, 1002.0, 1000, 10, (10, 10))], [(1002.5, 12)])
    assert got[0].lag is None
    assert got[1].lag == 0  # the sample (12) is older than what the batch reached (20)


def _batch(batch_id, start, end, rows, lag):
    return Batch(batch_id=batch_id, start=start, end=end, input_rows=rows, state_rows=0, state_bytes=0, committed=0, lag=lag)


def _run(batches_, cap=1000, backlog=5000, input_rate=100.0):
    return CatchUp(label="t", cap=cap, started=0.0, backlog=backlog, input_rate=input_rate, batches=batches_, high_watermarks=[])


def test_a_capped_run_has_caught_up_at_its_first_batch_below_the_cap():
    run = _run([_batch(0, 0, 5, 1000, 4000), _batch(1, 5, 7, 950, 3100), _batch(2, 7, 9, 400, 30)])
    assert run.full(run.batches[1]) and not run.full(run.batches[2])  # 950 counts as full: shares round down
    assert run.caught_up_s == 9.0


def test_an_uncapped_run_has_caught_up_when_no_lag_is_left_and_a_batch_without_input_does_not_count():
    run = _run([_batch(0, 0, 1, 0, 0), _batch(1, 1, 20, 6000, 500), _batch(2, 20, 22, 500, 0)], cap=None)
    assert not run.full(run.batches[1])
    assert run.caught_up_s == 22.0
    assert _run([_batch(0, 0, 20, 6000, 500)], cap=None).caught_up_s is None


def test_the_summary_sets_a_run_s_first_commit_largest_batch_and_peak_memory_side_by_side():
    run = _run([_batch(0, 0, 1, 0, 5000), _batch(1, 1, 4, 1000, 4100), _batch(2, 4, 6, 1000, 3200)])
    run.memory = {
        1: {"peak_execution_bytes": 3 * 2**20, "spilled_bytes": 2**20},
        2: {"peak_execution_bytes": 5 * 2**20, "spilled_bytes": 0},
    }
    assert run.first_commit_s == 4.0  # batch 0 read nothing: the first records waited for batch 1
    assert run.peak_memory_bytes == 5 * 2**20
    assert run.summary() == {
        "run": "t",
        "backlog": 5000,
        "batches with input": 2,
        "largest batch (rows)": 1000,
        "first commit (s)": 4.0,
        "caught up (s)": None,
        "peak execution memory (MB)": 5.0,
        "spilled (MB)": 1.0,
    }
    assert _run([_batch(0, 0, 1, 0, 0)]).first_commit_s is None and _run([]).peak_memory_bytes == 0


def test_the_forecast_uses_the_first_full_batches_after_the_querys_first():
    # the first batch is slow (it opens the state stores) and must not count
    full = [
        _batch(0, 0, 30, 1000, 9000),
        _batch(1, 30, 32, 1000, 8000),
        _batch(2, 32, 34, 1000, 7000),
        _batch(3, 34, 36, 1000, 6000),
        _batch(4, 36, 37, 200, 0),
    ]
    # batches 1-3, start to start: the 2000 rows of batches 1 and 2 from 30 to 34 -> 500 records/s; 5000 / (500 - 100)
    assert forecast(_run(full)) == pytest.approx(12.5)


def test_the_rate_is_taken_start_to_start_so_a_trigger_bound_job_is_not_credited_with_its_idle_time():
    # each batch takes 0.5 s of its 2 s trigger: the backlog goes down 1000 rows per 2 s, not per 0.5 s
    ticks = [
        _batch(0, 0, 30, 1000, 9000),
        _batch(1, 30, 30.5, 1000, 8000),
        _batch(2, 32, 32.5, 1000, 7000),
        _batch(3, 34, 34.5, 1000, 6000),
        _batch(4, 36, 36.2, 200, 0),
    ]
    assert throughput(_run(ticks)) == pytest.approx(500.0)
    assert forecast(_run(ticks)) == pytest.approx(12.5)  # 5000 / (500 - 100)


def test_the_whole_catch_ups_pace_counts_every_full_batch_so_a_slowdown_after_the_first_three_is_in_it():
    # batches 1-3 go one per 2 s tick; then the machine gets busy and batches 4-5 take 4 s each
    slowing = [
        _batch(0, 0, 30, 1000, 9000),
        _batch(1, 30, 31, 1000, 8000),
        _batch(2, 32, 33, 1000, 7000),
        _batch(3, 34, 38, 1000, 6000),
        _batch(4, 38, 42, 1000, 5000),
        _batch(5, 42, 43, 200, 0),
    ]
    assert throughput(_run(slowing)) == pytest.approx(500.0)  # 2000 rows, 30 -> 34
    # every full batch: the 3000 rows of batches 1-3, from batch 1's start to batch 4's (30 -> 38)
    assert throughput(_run(slowing), first=None) == pytest.approx(375.0)
    assert forecast(_run(slowing), first=None) == pytest.approx(5000 / 275)
    # the lake sees it when the batch that read the rest commits: the first batch's start (0 here)
    # + the backlog gone at that pace + that batch's own second
    assert commit_forecast(_run(slowing)) == pytest.approx(5000 / 275 + 1)
    started_late = _run([dataclasses.replace(b, start=b.start + 2, end=b.end + 2) for b in slowing])
    assert commit_forecast(started_late) == pytest.approx(2 + 5000 / 275 + 1)
    with pytest.raises(BacklogError, match="t: never caught up; no commit to forecast"):
        commit_forecast(_run(slowing[:5]))
    with pytest.raises(BacklogError, match="only 1 full batches of 1000 rows; a forecast needs 2"):
        forecast(_run([_batch(0, 0, 30, 1000, 9000), _batch(1, 30, 32, 1000, 0), _batch(2, 32, 33, 10, 0)]), first=None)


def test_the_pace_says_whether_the_trigger_the_cap_or_the_job_s_own_speed_set_the_rate():
    on_the_grid = [
        _batch(0, 0, 30, 1000, 9000),
        _batch(1, 30, 30.5, 1000, 8000),
        _batch(2, 32, 32.5, 1000, 7000),
        _batch(3, 34, 34.5, 1000, 6000),
    ]
    assert pace(_run(on_the_grid), 2) == (
        "start to start: batch 2 2.0 s, batch 3 2.0 s after the one before: one 2 s trigger each, so the cap over the "
        "trigger set the rate"
    )
    # batch 0 ran past its tick: batch 1 starts late, at 31.4; its next tick is 32, which comes while it runs, so
    # batch 2 starts as soon as it ends (32.4), and batch 3 on the tick after that (34)
    late = [
        _batch(0, 0, 31.4, 1000, 9000),
        _batch(1, 31.4, 32.4, 1000, 8000),
        _batch(2, 32.4, 33, 1000, 7000),
        _batch(3, 34, 34.5, 1000, 6000),
    ]
    assert pace(_run(late), 2).startswith(
        "start to start: batch 2 1.0 s, batch 3 1.6 s after the one before. Batch 2 started 1.0 s after the one before, "
        "less than the 2 s trigger"
    )
    slow = [
        _batch(0, 0, 30, 1000, 9000),
        _batch(1, 30, 33, 1000, 8000),
        _batch(2, 33, 36, 1000, 7000),
        _batch(3, 36, 39, 1000, 6000),
    ]
    assert "the job's own speed, not the cap over the trigger, set the rate" in pace(_run(slow), 2)
    with pytest.raises(BacklogError, match="only 1 full batches of 1000 rows; a forecast needs 2"):
        pace(_run(on_the_grid[:2]), 2, first=1)


def test_a_forecast_without_enough_full_batches_says_how_many_it_had():
    with pytest.raises(BacklogError, match="only 1 full batches of 1000 rows; a forecast needs 3"):
        forecast(_run([_batch(0, 0, 30, 1000, 9000), _batch(1, 30, 32, 1000, 0), _batch(2, 32, 33, 10, 0)]))


class _Kafka:
    """Stands in for producers.kafka.end_offsets: answers with ``ends`` or raises when down,
    and says (``asked``) once the sampler asked it ``n`` times."""

    def __init__(self, ends=None, *, n=2):
        self.ends, self.n, self.calls, self.timeouts = ends, n, 0, []
        self.asked = threading.Event()

    def __call__(self, bootstrap, topic_prefix, *, timeout_s):
        self.calls += 1
        self.timeouts.append(timeout_s)
        if self.calls >= self.n:
            self.asked.set()
        if self.ends is None:
            raise RuntimeError("broker down")
        return self.ends


@pytest.mark.parametrize("gaps", [True, False])
def test_a_failed_high_watermark_read_is_a_gap_only_when_gaps_are_asked_for(monkeypatch, gaps):
    import producers.kafka

    kafka = _Kafka()
    monkeypatch.setattr(producers.kafka, "end_offsets", kafka)
    hw = HighWatermarks("b:9092", "t-", interval_s=0.01, timeout_s=2.0, gaps=gaps)
    hw.start()
    try:
        assert kafka.asked.wait(10), "the sampler never asked Kafka twice"
    finally:
        hw.stop()
    assert kafka.calls >= 2 and set(kafka.timeouts) == {2.0}
    if gaps:
        assert len(hw.samples) == kafka.calls and all(total is None for _, total in hw.samples)
        assert [t for t, _ in hw.samples] == sorted(t for t, _ in hw.samples)
    else:
        assert hw.samples == []  # skipped: batches() needs every total to be an int


def test_high_watermarks_sum_every_partition_and_stop_is_harmless_before_start(monkeypatch):
    import producers.kafka

    ends = {("t-a", 0): 5, ("t-a", 1): 7, ("t-b", 0): 1}
    monkeypatch.setattr(producers.kafka, "end_offsets", _Kafka(ends))
    hw = HighWatermarks("b:9092", "t-", gaps=True)
    hw.stop()  # never started: nothing to wait for
    assert hw.sample() == 13 and [total for _, total in hw.samples] == [13]
    kafka = _Kafka(ends, n=2)
    monkeypatch.setattr(producers.kafka, "end_offsets", kafka)
    with HighWatermarks("b:9092", "t-", interval_s=0.01) as running:
        assert kafka.asked.wait(10), "the sampler never asked Kafka twice"
    assert len(running.samples) == kafka.calls and {total for _, total in running.samples} == {13}
