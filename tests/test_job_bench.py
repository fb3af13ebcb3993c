"""The job benchmark's latency arithmetic (pure pandas; the benchmark itself is bench/job_bench.py)."""

from __future__ import annotations

import sys

import pandas as pd
import pytest

from tests.bench_scripts import loaded


@pytest.fixture(scope="module")
def job_bench():
    yield from loaded("job_bench")


def test_latency_is_the_earliest_visible_output_minus_event_time(job_bench):
    ledger = pd.DataFrame({"topic": ["t", "t", "t"], "partition": [0, 0, 1], "offset": [0, 1, 0], "ts": [1000, 1000, 5000]})
    visible = pd.DataFrame(
        {
            # offset 0 has two output rows (a snapshot's row changes) in files visible at 1500 and 1900
            "topic": ["t", "t", "t", "t"],
            "partition": [0, 0, 0, 1],
            "offset": [0, 0, 1, 0],
            "visible_ms": [1900, 1500, 3000, 5100],
        }
    )
    lat = job_bench.latencies("job", ledger, visible)
    assert sorted(lat.values_ms) == [100.0, 500.0, 2000.0]
    assert (lat.records, lat.measured, lat.max_ms, lat.p50_ms) == (3, 3, 2000.0, 500.0)


def test_records_without_output_are_counted_but_not_measured(job_bench):
    ledger = pd.DataFrame({"topic": ["t", "t"], "partition": [0, 0], "offset": [0, 1], "ts": [0, 0]})
    visible = pd.DataFrame({"topic": ["t"], "partition": [0], "offset": [1], "visible_ms": [40]})
    lat = job_bench.latencies("job", ledger, visible)
    assert (lat.records, lat.measured, lat.values_ms) == (2, 1, [40.0])
    with pytest.raises(RuntimeError, match="no record of the ledger has a visible output"):
        job_bench.latencies("job", ledger, visible.iloc[0:0])


def test_the_steady_p99_leaves_out_the_records_of_the_query_s_first_seconds(job_bench):
    # 1,000 records a second for 40 s: the first 20 s wait 3 s each (a new query's slow batches), the rest 1 s
    ts = [i for i in range(0, 40_000, 40)]
    ledger = pd.DataFrame({"topic": "t", "partition": 0, "offset": range(len(ts)), "ts": ts})
    waits = [3000 if t < job_bench.STEADY_AFTER_S * 1000 else 1000 for t in ts]
    visible = pd.DataFrame(
        {"topic": "t", "partition": 0, "offset": range(len(ts)), "visible_ms": [t + w for t, w in zip(ts, waits)]}
    )
    lat = job_bench.latencies("job", ledger, visible)
    assert lat.p99_ms == 3000.0 and lat.p99_steady_ms == 1000.0
    # no record after the warm-up: no steady figure rather than a made-up one
    early = job_bench.latencies("job", ledger.iloc[:10], visible.iloc[:10])
    assert early.p99_steady_ms is None


def test_the_latency_table_shows_the_job_s_batch_durations_beside_its_tail(job_bench, capsys):
    import argparse

    job = job_bench.Latency(
        "job, applyInPandasWithState", 10, 10, 1200.0, 1600.0, 1900.0, 2100.0, batch_ms=[700.0, 800.0, 750.0, 1300.0, 720.0]
    )
    baseline = job_bench.Latency("baseline (1 Python process)", 10, 10, 20.0, 30.0, 40.0, 50.0)
    assert job.batch_percentile(50) == 750.0 and baseline.batch_percentile(50) is None
    job_bench.print_latency([job, baseline], argparse.Namespace(rate=200.0, duration=60.0, trigger="1 second"))
    out = capsys.readouterr().out.splitlines()
    [job_line] = [line for line in out if line.strip().startswith("job, applyInPandasWithState")]
    [base_line] = [line for line in out if line.strip().startswith("baseline")]
    assert job_line.split()[-1] == "750/1100/1300" and base_line.split()[-1] == "-"
    assert any("batch p50/p90/max ms" in line for line in out)


def test_executor_gc_is_the_settings_collector_unless_the_flag_names_one(job_bench, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["job_bench.py", "--skip-live"])
    assert job_bench.parse_args()[0].executor_gc is None  # Settings decides: OSL_SPARK_EXECUTOR_GC, else parallel
    monkeypatch.setattr(sys, "argv", ["job_bench.py", "--skip-live", "--executor-gc", "g1"])
    assert job_bench.parse_args()[0].executor_gc == "g1"


def test_the_baseline_is_the_median_of_its_runs_and_unverified_if_one_run_was(job_bench, monkeypatch):
    runs = iter([(7.2, True), (6.4, True), (6.9, False)])

    def one(*_a):
        wall, ok = next(runs)
        return job_bench.Throughput("baseline", 200_000, wall, verified=ok, verdict="OK" if ok else "2 lost")

    monkeypatch.setattr(job_bench, "run_baseline_backlog", one)
    base = job_bench.run_baseline_median(None, "p-", "ledger", 3)
    assert base.wall_s == 6.9 and base.setup["runs_per_s"] == [27778, 31250, 28986]
    assert base.verified is False and base.verdict == "2 lost"


def test_cap_rounds_alternate_both_caps_with_the_archive_in_the_sink(job_bench, monkeypatch):
    """``--cap-rounds 2`` runs the two caps in turn after the stages, each with the archive in
    the sink; the Spark runs are stubbed (this is the sweep's bookkeeping, not a measurement)."""
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "job_bench.py",
            "--sweep",
            "--shapes",
            "50x20",
            "--operators",
            "applyInPandasWithState",
            "--caps",
            "100000",
            "--partitions",
            "2",
            "--no-side-stages",
            "--cap-rounds",
            "2",
            "--skip-live",
        ],
    )
    args, operators = job_bench.parse_args()
    runs = []

    def job(_spark, _settings, operator, _prefix, _ledger, *, max_offsets, tag, **kw):
        runs.append((max_offsets, kw.get("raw", False), kw.get("raw_in_sink", False)))
        setup = {
            "operator": operator,
            "cap": max_offsets,
            "partitions": kw["partitions"],
            "fetch_wait_ms": 1,
            "raw": "in sink" if kw.get("raw_in_sink", False) else False,
            "input_tasks": 2,
        }
        return job_bench.Throughput(operator, 200_000, 10.0, 3, setup=setup)

    monkeypatch.setattr(job_bench, "produce", lambda *a, **k: "ledger")
    monkeypatch.setattr(
        job_bench,
        "run_baseline_median",
        lambda *a: job_bench.Throughput("baseline", 200_000, 5.0, setup={"runs_per_s": [40_000]}),
    )
    monkeypatch.setattr(job_bench, "run_job_backlog", job)
    rows = job_bench.sweep_phase(None, None, None, "r1", args, operators)
    assert runs == [(100_000, False, False)] + [(100_000, True, True), (200_000, True, True)] * 2
    assert [r.setup["stage"] for r in rows[2:]] == ["cap 100k 1", "cap 200k 1", "cap 100k 2", "cap 200k 2"]


def test_the_summary_line_takes_the_default_operators_median_round_and_its_worst_live_p99_only(job_bench):
    import argparse

    args = argparse.Namespace(
        shape=job_bench.FLEET, rounds=3, max_offsets=100_000, raw_archive="in-sink", rate=200.0, trigger="1 second"
    )
    rounds = [
        job_bench.Throughput("job, applyInPandasWithState", 100, s, setup={"operator": "applyInPandasWithState"})
        for s in (2.0, 4.0, 2.5)
    ]
    other = job_bench.Throughput("job, x", 100, 0.5, setup={"operator": "applyInPandasWithState-by-partition"})
    live = [
        job_bench.Latency(name, 1, 1, 1, 1, p99, 1, p99_steady_ms=steady, batch_ms=batches)
        for name, p99, steady, batches in (
            ("job, applyInPandasWithState, archive", 2_400.0, 2_200.0, [900.0, 2_500.0]),
            ("job, applyInPandasWithState, archive", 3_100.0, 1_900.0, [4_000.0, 800.0]),
            ("job, applyInPandasWithState-by-partition, archive", 9_000.0, 8_000.0, [9_500.0]),
            ("baseline (1 Python process)", 600.0, 500.0, []),
        )
    ]
    base = job_bench.Throughput("baseline (1 Python process)", 100, 1.0)
    line = job_bench.summary_line([base, job_bench.median_run(rounds), other], live, args)
    assert line == (
        "applyInPandasWithState: 50x20 backlog: 0.40x the baseline (median of 3 round(s), cap 100000, raw archive "
        "in-sink); live p99 3.1 s at 200 msg/s, trigger 1 second (worst of 2 runs; 2.2 s after the first 20 s; "
        "longest batch 4.0 s)"
    )
    assert job_bench.summary_line([base], [], args) is None
