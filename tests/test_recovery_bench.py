"""The recovery benchmark's bookkeeping (pure pandas; the benchmark itself is bench/recovery_bench.py).

The benchmark end to end on the sandbox (both systems killed, detected, recovered and verified;
the baseline's lag peaks growing as each restart re-reads everything) is chapter 10, which CI
runs under nbval with those asserts: a copy here cost 78 s of every CI run for nothing new."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tests.bench_scripts import loaded

T0 = 1_700_000_000_000  # ms


@pytest.fixture(scope="module")
def rb():
    yield from loaded("recovery_bench")


def make_run(rb, system="job", events=(), highs=(), visible=()):
    return rb.SystemRun(
        system=system,
        t0_ms=T0,
        failures_ms=[],
        ledger="unused",
        events=list(events),
        highs=pd.DataFrame(list(highs), columns=["ms", "topic", "partition", "high"]),
        visible=pd.DataFrame(list(visible), columns=["topic", "partition", "offset", "visible_ms"]),
    )


def test_per_second_counts_input_by_event_time_processed_by_commit_and_latency_by_event_second(rb):
    ledger = pd.DataFrame({"topic": ["a"] * 3, "partition": [0] * 3, "offset": [0, 1, 2], "ts": [T0 + 100, T0 + 1100, T0 + 1900]})
    run = make_run(
        rb,
        events=[
            {"ms": T0 + 1500, "rows": 1, "offsets": {"a": {"0": 1}}},
            {"ms": T0 + 2500, "rows": 2, "offsets": {"a": {"0": 3}}},
        ],
        highs=[(T0 + 500, "a", 0, 1), (T0 + 1600, "a", 0, 3), (T0 + 2600, "a", 0, 3)],
        visible=[("a", 0, 0, T0 + 1500), ("a", 0, 1, T0 + 2500), ("a", 0, 2, T0 + 2500), ("a", 0, 2, T0 + 2900)],
    )
    table, lag = rb.per_second(run, 3, ledger=ledger)
    assert table["input_rate"].tolist() == [1, 2, 0]
    assert table["processed_rate"].tolist() == [0, 1, 2]
    # second 1 holds the records with latencies 1400 and 600 (the earliest visible copy counts)
    assert table["latency_p90_ms"].iloc[0] == 1400 and table["latency_p90_ms"].iloc[1] == pytest.approx(1320)
    assert np.isnan(table["latency_p90_ms"].iloc[2])
    assert table["lag"].tolist() == [1, 2, 0]
    assert lag[["t", "high", "committed", "lag"]].values.tolist() == [[0, 1, 0, 1], [1, 3, 1, 2], [2, 3, 3, 0]]


def test_a_batch_that_logged_its_start_counts_its_rows_over_the_seconds_it_ran(rb):
    batches = [
        {"ms": T0 + 2500, "start_ms": T0 + 500, "rows": 200},  # 2 s long: 0.5 s in second 0, 1 s in 1, 0.5 s in 2
        {"ms": T0 + 3200, "rows": 7},
    ]  # no start: counted where it committed
    assert rb.spread_rows(batches, T0, 4).tolist() == [50, 100, 50, 7]
    # a batch with no duration, and one running past the end, lose nothing inside the window
    assert rb.spread_rows(
        [{"ms": T0 + 1000, "start_ms": T0 + 1000, "rows": 3}, {"ms": T0 + 4000, "start_ms": T0 + 2000, "rows": 10}], T0, 3
    ).tolist() == [0, 3, 5]


def test_spread_batches_of_a_steady_input_give_a_steady_rate_where_commit_seconds_give_a_comb(rb):
    # 100 records/s processed by back-to-back batches of 1 s and 2.5 s: each holds the input of
    # the one before, so the rate is always 100/s, but only some seconds see a commit
    batches, t, rows = [], 0.0, 100.0
    for i in range(40):
        length = 1.0 if i % 2 == 0 else 2.5
        batches.append({"ms": T0 + (t + length) * 1000, "start_ms": T0 + t * 1000, "rows": rows * length})
        t += length
    spread = rb.spread_rows(batches, T0, 60)
    at_commit = rb.spread_rows([{k: v for k, v in b.items() if k != "start_ms"} for b in batches], T0, 60)
    window = pd.Series(spread).rolling(10).mean().iloc[10:]
    assert window.min() == pytest.approx(100) and window.max() == pytest.approx(100)
    comb = pd.Series(at_commit).rolling(10).mean().iloc[10:]
    assert comb.max() - comb.min() >= 20, "a 10-s average of commit seconds still swings by a batch"


def test_a_restarted_baseline_loses_what_it_had_committed_so_its_lag_jumps_back(rb):
    run = make_run(
        rb,
        system="baseline",
        events=[
            {"ms": T0 + 100, "rows": 5, "offsets": {"a": {"0": 5}}},
            {"ms": T0 + 1200, "start": True, "reset": True},
            {"ms": T0 + 2200, "rows": 2, "offsets": {"a": {"0": 2}}},
        ],
        highs=[(T0 + 900, "a", 0, 5), (T0 + 1900, "a", 0, 6), (T0 + 2900, "a", 0, 6)],
    )
    # second 2: the instant before the new process's first batch (all 6 are lag) beats the
    # later sample (4 left)
    assert rb.lag_table(run)["lag"].tolist() == [0, 6, 6]


def test_a_re_read_that_ends_between_two_samples_still_shows_its_peak(rb):
    run = make_run(
        rb,
        system="baseline",
        events=[
            {"ms": T0 + 100, "rows": 5, "offsets": {"a": {"0": 5}}},
            {"ms": T0 + 1200, "start": True, "reset": True},
            {"ms": T0 + 1300, "rows": 5, "offsets": {"a": {"0": 5}}},
        ],
        highs=[(T0 + 900, "a", 0, 5), (T0 + 1900, "a", 0, 5)],
    )
    lag = rb.lag_table(run)
    assert lag["lag"].tolist() == [0, 5]
    assert lag[["high", "committed"]].values.tolist() == [[5, 5], [5, 0]]


def test_a_second_without_watermark_sample_has_no_lag_value(rb):
    ledger = pd.DataFrame({"topic": ["a"], "partition": [0], "offset": [0], "ts": [T0 + 100]})
    run = make_run(rb, highs=[(T0 + 500, "a", 0, 1)], visible=[("a", 0, 0, T0 + 900)])
    table, _ = rb.per_second(run, 2, ledger=ledger)
    assert table["lag"].iloc[0] == 1 and np.isnan(table["lag"].iloc[1])


def test_schedule_places_failures_after_the_warm_up_and_produces_until_the_last_interval_ends(rb):
    s = rb.Schedule(failures=3, interval_s=30, warmup_s=40)
    assert s.times() == [40, 70, 100] and s.duration_s == 130 and s.fixed_times() == s.times()
    # after_recovery: only the first time is set in advance; the others, and the run's end, are bounds
    waits = rb.Schedule(failures=3, interval_s=30, warmup_s=40, after_recovery=True)
    assert waits.fixed_times() == [40] and waits.duration_s == 130


def test_the_live_recovery_reads_only_the_seconds_before_the_last_logged_batch(rb, tmp_path):
    from job.drills.recovery import DetectorConfig

    events = tmp_path / "events.jsonl"
    cfg = DetectorConfig(smooth_s=1, hold_s=10)
    # one 100-row batch a second for 60 s, an outage of 10 s from 30 s, then batches again
    batch = lambda s: {"ms": T0 + s * 1000 + 999, "start_ms": T0 + s * 1000, "rows": 100}  # noqa: E731
    for s in [*range(30), *range(40, 60)]:
        rb._append(events, batch(s))
    # back in band from 40 s, held for 10 s by second 49: known once a batch logged after it
    assert rb._recovered_live(events, T0, [T0 + 30_000], cfg)
    assert not rb._recovered_live(events, T0, [T0 + 45_000], cfg)  # a failure whose impact has not shown yet
    events.write_text("")
    for s in [*range(30), *range(40, 50)]:
        rb._append(events, batch(s))
    # held for the hold, not yet for the hold plus one smoothing window (the latency's margin)
    assert not rb._recovered_live(events, T0, [T0 + 30_000], cfg)
    # a job that logs its executors: not over while it runs on fewer than before the failure
    events.write_text("")
    for s in [*range(30), *range(40, 60)]:
        rb._append(events, {**batch(s), "executors": 2 if s < 30 else 1})
    assert not rb._recovered_live(events, T0, [T0 + 30_000], cfg)
    # back on two executors at 60 s: the calm (hold plus margin, 11 s) must come after that
    rb._append(events, {**batch(60), "executors": 2})
    assert not rb._recovered_live(events, T0, [T0 + 30_000], cfg)
    # the next batch moves a state partition to the new executor: 16 s for its 100 rows
    rb._append(events, {"ms": T0 + 77_999, "start_ms": T0 + 62_000, "rows": 100, "executors": 2})
    for s in range(78, 88):
        rb._append(events, {**batch(s), "executors": 2})
    assert not rb._recovered_live(events, T0, [T0 + 30_000], cfg)  # in band again from 78 s, not yet for 11 s
    for s in range(88, 90):
        rb._append(events, {**batch(s), "executors": 2})
    assert rb._recovered_live(events, T0, [T0 + 30_000], cfg)


class FakeSandbox:
    def __init__(self):
        self.calls = []

    def __getattr__(self, name):
        return lambda service: self.calls.append((name, service))


class FakeWorker:
    def __init__(self):
        self.calls = []

    def kill(self):
        self.calls.append("kill")

    def restart(self):
        self.calls.append("restart")

    def pause(self):
        self.calls.append("pause")

    def resume(self):
        self.calls.append("resume")


@pytest.mark.parametrize(
    ("system", "target", "action", "sandbox_calls", "worker_calls"),
    [
        ("job", "spark-worker-1", "kill", [("kill", "spark-worker-1"), ("restart", "spark-worker-1")], []),
        ("job", "kafka", "pause", [("pause", "kafka"), ("resume", "kafka")], []),
        ("job", "driver", "kill", [], ["kill", "restart"]),
        ("baseline", "spark-worker-1", "kill", [], ["kill", "restart"]),
        ("baseline", "spark-worker-1", "pause", [], ["pause", "resume"]),
        ("baseline", "kafka", "kill", [("kill", "kafka"), ("restart", "kafka")], []),
    ],
)
def test_a_failure_hits_the_service_or_the_systems_own_process_and_is_undone_as_an_operator_would(
    rb, system, target, action, sandbox_calls, worker_calls
):
    sb, worker = FakeSandbox(), FakeWorker()
    undo = rb.inject(system, rb.Schedule(target=target, action=action), sb, worker)
    undo()
    assert sb.calls == sandbox_calls and worker.calls == worker_calls


def test_the_log_names_what_each_system_loses_not_a_target_the_baseline_does_not_have(rb):
    kill_worker = rb.Schedule(target="spark-worker-1", action="kill")
    assert rb.failure_label("job", kill_worker) == "kill spark-worker-1"
    assert rb.failure_label("baseline", kill_worker) == "kill the baseline's process, restarted by its supervisor"
    assert rb.failure_label("baseline", rb.Schedule(target="spark-worker-1", action="pause")) == "pause the baseline's process"


def test_failures_can_take_their_targets_in_turn_and_the_log_names_each(rb):
    mixed = rb.Schedule(targets=("driver", "spark-worker"), failures=3)
    assert [mixed.target_at(i) for i in range(3)] == ["driver", "spark-worker", "driver"]
    assert [rb.failure_label("job", mixed, i) for i in range(2)] == [
        "kill the job's process, restarted by its supervisor",
        "kill spark-worker",
    ]
    sb, worker = FakeSandbox(), FakeWorker()
    rb.inject("job", mixed, sb, worker, "spark-worker-2", 1)()
    assert sb.calls == [("kill", "spark-worker-2"), ("restart", "spark-worker-2")] and worker.calls == []


def _recovering(*times):
    """A detector report whose failures recovered in ``times`` (s), throughput and latency alike."""
    from types import SimpleNamespace as ns

    return ns(failures=[ns(throughput=ns(recovery_time_s=t), latency=ns(recovery_time_s=t)) for t in times])


def test_only_failures_that_hit_each_system_s_own_process_at_the_same_time_are_compared(rb):
    job = rb.Schedule(targets=("driver", "spark-worker"), failures=2, warmup_s=30, interval_s=65)
    baseline = rb.Schedule(target="driver", failures=1, warmup_s=30, interval_s=65)
    pairs = rb.like_for_like({"job": job, "baseline": baseline}, {"job": _recovering(44.0, 31.0), "baseline": _recovering(16.0)})
    assert [p["at_s"] for p in pairs] == [30.0]  # the worker kill at 95 s has no counterpart
    assert pairs[0]["throughput"] == {"job": 44.0, "baseline": 16.0, "ratio": 2.75}
    # a worker kill against a process kill at the same time: no ratio
    workers = rb.Schedule(target="spark-worker", failures=2, warmup_s=30, interval_s=65)
    assert (
        rb.like_for_like(
            {"job": workers, "baseline": workers}, {"job": _recovering(30.0, 34.0), "baseline": _recovering(16.0, 18.0)}
        )
        == []
    )


def test_a_trend_is_not_read_across_failures_of_different_kinds(rb):
    from job.drills.recovery import detect

    t = np.arange(200)
    thr = np.where(((t >= 60) & (t < 70)) | ((t >= 120) & (t < 130)), 0, 100)
    report = detect({"t": t, "throughput": thr, "latency_p90_ms": np.full(200, 1000)}, [60, 120])
    assert report.stable is True
    assert rb.mixed(report, ["kill spark-worker", "kill spark-worker"]) is report
    mixed = rb.mixed(report, ["kill the job's process, restarted by its supervisor", "kill spark-worker"])
    assert mixed.stable is None and mixed.all_recovered
    assert mixed.verdict == (
        "every failure recovered; the failures were of different kinds (kill the job's process, "
        "restarted by its supervisor, kill spark-worker), so no trend is read from them"
    )


def test_a_restart_says_where_the_job_went_on_from(rb):
    events = [
        {"ms": 1, "start": True},
        *({"ms": 2 + b, "batch": b, "rows": 5} for b in range(4)),
        {"ms": 9, "start": True},
        {"ms": 10, "batch": 3, "rows": 5},
        {"ms": 11, "batch": 4, "rows": 5},
        {"ms": 12, "start": True},
        {"ms": 13, "batch": 0, "rows": 5},
    ]
    assert rb.resumed_at(make_run(rb, events=events)) == [
        {"before": 3, "after": 3, "first_commit_s": 0.001},
        {"before": 4, "after": 0, "first_commit_s": 0.001},
    ]


def test_the_warm_up_batch_time_is_the_median_of_the_batches_with_input_before_the_first_failure(rb):
    run = make_run(
        rb,
        events=[
            {"ms": T0 - 500, "start_ms": T0 - 2000, "batch": 1, "rows": 5},  # began before the producers: not counted
            {"ms": T0 + 1500, "start_ms": T0 + 0, "batch": 2, "rows": 5},
            {"ms": T0 + 2600, "start_ms": T0 + 1500, "batch": 3, "rows": 0},  # no input
            {"ms": T0 + 4000, "start_ms": T0 + 2000, "batch": 4, "rows": 5},
            {"ms": T0 + 4500, "start_ms": T0 + 4000, "batch": 5, "rows": 5},
            {"ms": T0 + 9000, "start_ms": T0 + 4500, "batch": 6, "rows": 5},  # ends after the failure
        ],
    )
    run.failures_ms = [T0 + 5000]
    assert rb.warmup_batch_s(run) == 1.5
    assert rb.warmup_batch_s(make_run(rb, system="baseline", events=[{"ms": T0 + 10, "rows": 1}])) is None


def test_spark_s_own_view_tells_whether_each_kill_took_an_executor_and_where_the_state_ran_after(rb):
    run = make_run(
        rb,
        events=[
            {"ms": T0 + 1000, "batch": 1, "rows": 5, "executors": 2},
            {"ms": T0 + 2500, "batch": 2, "rows": 5, "executors": 1},  # failure 1 at +2000 took one
            {"ms": T0 + 3500, "batch": 3, "rows": 5, "executors": 2},
            {"ms": T0 + 4500, "batch": 4, "rows": 0, "executors": 2},  # an empty batch says nothing of the state
            {"ms": T0 + 5500, "batch": 5, "rows": 5, "executors": 2},  # failure 2 at +5000 took none
            {"ms": T0 + 6500, "start": True},
            {"ms": T0 + 8000, "placement": {"1": ["0", "1"], "2": ["0", "0"], "3": ["0", "2"], "4": ["0", "0"], "5": ["0", "0"]}},
        ],
    )
    run.failures_ms = [T0 + 2000, T0 + 5000, T0 + 9000]
    assert rb.executors_around(run) == [
        {"before": 2, "lowest": 1, "state_on": 2},  # spread back to two executors by batch 3
        {"before": 2, "lowest": 2, "state_on": 1},  # both partitions on executor 0 in the last batch
        {"before": 2, "lowest": None, "state_on": None},
    ]
    assert rb.executors_around(make_run(rb, system="baseline", events=[{"ms": T0, "rows": 1}])) == []


def test_a_load_is_a_fraction_of_the_job_s_capacity_so_the_job_must_run_first(rb, capsys):
    with pytest.raises(SystemExit, match="run the job first"):
        rb.bench(rb.Schedule(load=0.25), systems=("baseline",))
    with pytest.raises(SystemExit):
        rb.main(["--load", "1.5"])
    assert "--load is a fraction of the job's capacity: between 0 and 1" in capsys.readouterr().err


def test_the_detector_s_latency_band_is_one_trigger_wide_unless_told_and_a_bad_trigger_is_refused(rb, monkeypatch, capsys):
    seen = {}
    monkeypatch.setattr(rb, "bench", lambda schedule, **kw: seen.update(kw) or {"runs": {}})
    rb.main(["--trigger", "2 seconds", "--rate", "100"])
    assert seen["detector"].latency_floor_ms == 2000 and seen["trigger"] == "2 seconds"
    rb.main(["--latency-floor", "0", "--rate", "100"])
    assert seen["detector"].latency_floor_ms == 0
    with pytest.raises(SystemExit):
        rb.main(["--trigger", "soon", "--rate", "100"])
    assert "--trigger 'soon': use an interval such as '1 second'" in capsys.readouterr().err


def test_the_busiest_worker_is_the_one_with_the_most_executor_cores_ties_to_the_lowest_number(rb):
    class Endpoints:
        spark_worker_uis = ["http://127.0.0.1:18081", "http://127.0.0.1:18082"]

    class Settings:
        def endpoints(self):
            return Endpoints()

    assert rb.busiest_worker(Settings(), {"spark-worker-1": 0, "spark-worker-2": 1}) == "spark-worker-2"
    assert rb.busiest_worker(Settings(), {"spark-worker-1": 1, "spark-worker-2": 1}) == "spark-worker-1"
    assert rb.busiest_worker(Settings(), {"spark-worker-2": 0}) == "spark-worker-2"  # worker 1 is down


def test_the_cluster_in_one_line_names_each_worker_s_use_and_each_running_application(rb):
    status = {
        "workers": [
            {"host": "127.0.0.1", "port": 4001, "state": "ALIVE", "cores": 2, "coresused": 1, "memory": 2048, "memoryused": 1100},
            {"host": "127.0.0.1", "port": 4002, "state": "DEAD", "cores": 2, "coresused": 0, "memory": 2048, "memoryused": 0},
        ],
        "activeapps": [{"id": "app-1", "name": "nb09-backfill", "cores": 2}],
    }
    assert rb.describe_cluster(status) == (
        "worker 127.0.0.1:4001 ALIVE (1/2 cores, 1100/2048 MiB used), worker 127.0.0.1:4002 DEAD (0/2 cores, 0/2048 MiB used); "
        "running applications: app-1 'nb09-backfill' (2 cores)"
    )
    assert rb.describe_cluster({}) == "no workers; running applications: none"


@pytest.mark.integration
def test_the_bench_refuses_a_cluster_another_application_holds_and_names_it(rb, spark, sandbox, monkeypatch):
    # this process's own application does not count (30 s: the master may still be removing an earlier test's)
    rb.wait_for_idle_cluster(sandbox.settings, timeout_s=30)
    monkeypatch.setattr(rb, "_own_application", lambda: None)  # ...seen from another process, it does
    app = spark.sparkContext.applicationId
    with pytest.raises(RuntimeError, match=rf"needs the Spark cluster to itself.*{app} 'tests'"):
        rb.wait_for_idle_cluster(sandbox.settings, timeout_s=0)


def test_an_empty_target_is_refused_and_a_schedule_of_targets_shows_the_first(rb, capsys):
    with pytest.raises(SystemExit):
        rb.main(["--target", " , ", "--rate", "100"])
    assert "--target names at least one target" in capsys.readouterr().err
    assert rb.Schedule(targets=("driver", "spark-worker")).target == "driver"
    assert rb.Schedule().target == "spark-worker-1"
