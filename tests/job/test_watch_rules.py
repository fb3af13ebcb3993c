"""The watchdog's pure rules: histories of events in, alerts out; no Spark, no clock."""

from __future__ import annotations

import pytest

from job.engine.errors import UsageError
from job.ops.watch.rules import (
    AlertKind,
    BatchCompleted,
    LagSample,
    QueryStarted,
    QueryTerminated,
    Thresholds,
    Tick,
    WatchState,
    decide,
    lag_of,
)

Q = "ordered-sessions-sessions"
TH = Thresholds(stall_after_s=30, lag_records=1000, lag_for_s=0, clear_ratio=0.5)


def run(events, thresholds=TH):
    """Replay ``events``; return the final state and every alert in order."""
    state, alerts = WatchState(), []
    for event in events:
        state, raised = decide(state, event, thresholds)
        alerts.extend(raised)
    return state, alerts


def batch(at, batch_id, end=100, rows=10):
    return BatchCompleted(query=Q, at=at, batch_id=batch_id, input_rows=rows, end_offsets={"t": {"0": end}})


def lag(at, high):
    return LagSample(query=Q, at=at, high_watermarks={"t": {"0": high}})


def kinds(alerts):
    return [(a.kind, a.figures.get("cleared")) for a in alerts]


def test_lag_counts_unreported_partitions_from_zero_and_names_the_worst():
    total, worst, worst_lag = lag_of({"t": {"0": 90}}, {"t": {"0": 100, "1": 40}, "u": {"0": 5}})
    assert (total, worst, worst_lag) == (10 + 40 + 5, "t[1]", 40)


def test_query_terminated_with_an_exception_raises_one_error_alert_with_its_first_line():
    _, alerts = run(
        [
            QueryStarted(query=Q, at=0),
            batch(5, 0),
            QueryTerminated(query=Q, at=9, error='IntegrityError: session "s1" topic t[0] offset 3: gap\n\tat org.apache...'),
            QueryTerminated(query=Q, at=9.5, error="the same termination reported twice"),
        ]
    )
    assert kinds(alerts) == [(AlertKind.ERROR, None)]
    assert alerts[0].message == 'query terminated: IntegrityError: session "s1" topic t[0] offset 3: gap'
    assert alerts[0].figures["last_batch_id"] == 0 and alerts[0].at == 9


def test_clean_stop_raises_nothing_and_ends_stall_watching():
    _, alerts = run([QueryStarted(query=Q, at=0), batch(5, 0), lag(6, 500), QueryTerminated(query=Q, at=7), Tick(at=100)])
    assert alerts == []


def test_stall_fires_once_when_input_waits_longer_than_the_threshold_without_a_batch():
    history = [QueryStarted(query=Q, at=0), batch(5, 0, end=100), lag(10, 150), Tick(at=39.9), Tick(at=40), Tick(at=41)]
    _, alerts = run(history)
    assert kinds(alerts) == [(AlertKind.STALL, None)]
    stall = alerts[0]
    assert stall.at == 40 and stall.figures["no_progress_s"] == 30 and stall.figures["lag_records"] == 50


def test_an_idle_query_that_gets_new_input_is_timed_from_when_the_input_arrived():
    # the last batch is an hour old, but input only started waiting at t=3600
    history = [QueryStarted(query=Q, at=0), batch(5, 0, end=100), lag(3600, 100), lag(3605, 120), Tick(at=3620)]
    assert run(history)[1] == []
    assert kinds(run([*history, Tick(at=3635)])[1]) == [(AlertKind.STALL, None)]


def test_no_input_waiting_is_never_a_stall():
    assert run([QueryStarted(query=Q, at=0), batch(5, 0, end=100), lag(10, 100), Tick(at=1000)])[1] == []


def test_kafka_not_answering_counts_as_input_waiting_and_says_so():
    history = [QueryStarted(query=Q, at=0), batch(5, 0), LagSample(query=Q, at=10, failure="timed out"), Tick(at=41)]
    _, alerts = run(history)
    assert kinds(alerts) == [(AlertKind.STALL, None)]
    assert alerts[0].figures["lag_records"] == "unknown" and "Kafka did not answer (timed out)" in alerts[0].message


def test_a_batch_after_a_stall_raises_recovered_with_the_stall_duration():
    _, alerts = run([QueryStarted(query=Q, at=0), batch(5, 0), lag(10, 150), Tick(at=45), batch(70, 1, end=150)])
    assert kinds(alerts) == [(AlertKind.STALL, None), (AlertKind.RECOVERED, "stall")]
    assert alerts[1].figures["stalled_s"] == 60


def test_lag_over_the_threshold_alerts_once_and_clears_below_the_clear_ratio():
    history = [
        QueryStarted(query=Q, at=0),
        batch(1, 0, end=0),
        lag(2, 1500),
        lag(3, 2000),  # alert once
        batch(4, 1, end=1400),
        lag(5, 2000),  # 600 behind: under the threshold, above threshold * 0.5
        batch(6, 2, end=1800),
        lag(7, 2000),  # 200 behind: cleared
    ]
    _, alerts = run(history)
    assert kinds(alerts) == [(AlertKind.LAG, None), (AlertKind.RECOVERED, "lag")]
    assert alerts[0].figures["lag_records"] == 1500 and alerts[0].figures["worst_partition"] == "t[0]"
    assert alerts[1].figures["lag_records"] == 200


def test_lag_must_persist_for_lag_for_s_before_alerting():
    th = Thresholds(stall_after_s=300, lag_records=1000, lag_for_s=10)
    spike = [QueryStarted(query=Q, at=0), batch(1, 0, end=0), lag(2, 1500), batch(3, 1, end=1500), lag(4, 1500)]
    assert run(spike, th)[1] == []
    steady = [QueryStarted(query=Q, at=0), batch(1, 0, end=0), lag(2, 1500), lag(7, 1600), lag(12, 1700)]
    _, alerts = run(steady, th)
    assert kinds(alerts) == [(AlertKind.LAG, None)] and alerts[0].at == 12


def test_restart_after_an_error_raises_recovered_on_its_first_batch():
    history = [
        QueryStarted(query=Q, at=0),
        batch(5, 0),
        QueryTerminated(query=Q, at=9, error="boom"),
        QueryStarted(query=Q, at=20, run_id="second"),
        batch(30, 1),
    ]
    _, alerts = run(history)
    assert kinds(alerts) == [(AlertKind.ERROR, None), (AlertKind.RECOVERED, "error")]


def test_queries_are_watched_separately():
    other = "ordered-sessions-raw"
    history = [
        QueryStarted(query=Q, at=0),
        QueryStarted(query=other, at=0),
        batch(5, 0),
        BatchCompleted(query=other, at=5, batch_id=0, input_rows=1, end_offsets={"t": {"0": 100}}),
        lag(10, 150),
        LagSample(query=other, at=10, high_watermarks={"t": {"0": 150}}),
        BatchCompleted(query=other, at=20, batch_id=1, input_rows=50, end_offsets={"t": {"0": 150}}),
        Tick(at=45),
    ]
    _, alerts = run(history)
    assert [(a.kind, a.query) for a in alerts] == [(AlertKind.STALL, Q)]


def test_alert_serialises_with_iso_time_and_reads_as_one_line():
    _, alerts = run([QueryStarted(query=Q, at=0), QueryTerminated(query=Q, at=1_700_000_000.5, error="boom")])
    record = alerts[0].to_dict()
    assert record["kind"] == "error" and record["when"] == "2023-11-14T22:13:20.500+00:00"
    assert alerts[0].line() == f"2023-11-14T22:13:20Z ALERT error {Q}: query terminated: boom"


@pytest.mark.parametrize("bad", [{"stall_after_s": 0}, {"lag_records": -1}, {"clear_ratio": 2}, {"lag_for_s": -1}])
def test_thresholds_that_cannot_work_are_refused_with_the_fix(bad):
    with pytest.raises(UsageError, match="use "):
        Thresholds(**bad)
