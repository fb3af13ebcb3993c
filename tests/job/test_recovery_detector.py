"""The recovery detector on synthetic per-second series whose answers are known by construction.

Unless a test says otherwise: 1 sample per second, throughput 100/s, p90 latency 1000 ms,
``smooth_s=1`` (no smoothing, so the answers are exact), band floor 15 % of the mean.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from job.drills.recovery import DetectorConfig, DetectorError, detect, detector_for, moving_average, recovered_so_far

EXACT = DetectorConfig(smooth_s=1)


def series(n: int = 180, *, outages=(), latency_spikes=(), catch_up=(), lag=None) -> dict[str, list[float]]:
    """Flat series with throughput 0 in each ``outages`` [start, end), 200 in each ``catch_up``
    [start, end), and p90 latency 5000 ms in each ``latency_spikes`` [start, end)."""
    t = np.arange(n, dtype=float)
    thr = np.full(n, 100.0)
    lat = np.full(n, 1000.0)
    for a, b in outages:
        thr[(t >= a) & (t < b)] = 0.0
    for a, b in catch_up:
        thr[(t >= a) & (t < b)] = 200.0
    for a, b in latency_spikes:
        lat[(t >= a) & (t < b)] = 5000.0
    out = {"t": t.tolist(), "throughput": thr.tolist(), "latency_p90_ms": lat.tolist()}
    if lag is not None:
        out["lag"] = list(lag)
    return out


def test_outage_then_catch_up_recovers_when_back_in_band_for_hold_seconds():
    s = series(outages=[(60, 70)], catch_up=[(70, 80)], latency_spikes=[(60, 75)])
    (f,) = detect(s, [60], config=EXACT).failures
    assert (f.throughput.impact_s, f.throughput.recovery_s, f.throughput.recovery_time_s) == (60, 80, 20)
    assert (f.latency.impact_s, f.latency.recovery_s, f.latency.recovery_time_s) == (60, 75, 15)
    assert f.throughput.band.mean == pytest.approx(100) and f.throughput.band.low == pytest.approx(85)
    assert f.detected and f.recovered


def test_brief_return_to_band_shorter_than_hold_is_not_a_recovery():
    # back inside for 5 s at 70..74, down again 75..79, inside from 80 for good
    s = series(outages=[(60, 70), (75, 80)])
    (f,) = detect(s, [60], config=DetectorConfig(smooth_s=1, hold_s=10)).failures
    assert f.throughput.recovery_s == 80


def test_series_that_never_recovers_reports_no_recovery_and_an_unstable_run():
    s = series(n=120, outages=[(60, 120)])
    report = detect(s, [60], config=EXACT)
    (f,) = report.failures
    assert f.throughput.impact_s == 60
    assert f.throughput.recovery_s is None and f.throughput.recovery_time_s is None
    assert not f.recovered and not report.all_recovered
    assert report.stable is False and "failure 1 (throughput)" in report.verdict


def test_recovery_whose_hold_does_not_fit_before_the_next_failure_is_not_found():
    s = series(outages=[(60, 95)])  # back at 95, but the next failure comes at 100 (hold 10 s)
    report = detect(s, [60, 100], config=EXACT)
    assert report.failures[0].throughput.recovery_s is None


def test_failure_without_visible_impact_has_zero_recovery_time_and_is_not_detected():
    report = detect(series(), [60], config=EXACT)
    (f,) = report.failures
    assert f.throughput.impact_s is None and f.latency.impact_s is None
    assert f.throughput.recovery_time_s == 0.0 and f.latency.recovery_time_s == 0.0
    assert not f.detected and not report.all_detected


def test_noise_inside_the_band_is_no_impact_but_a_real_outage_is_found_with_default_smoothing():
    rng = np.random.default_rng(7)
    s = series(n=200, outages=[(60, 70)], latency_spikes=[(60, 70)])
    s["throughput"] = (np.array(s["throughput"]) + rng.normal(0, 5, 200) * (np.array(s["throughput"]) > 0)).tolist()
    s["latency_p90_ms"] = (np.array(s["latency_p90_ms"]) + rng.normal(0, 40, 200)).tolist()
    report = detect(s, [60, 140])  # default: 5 s trailing average, k = 3
    first, second = report.failures
    assert first.throughput.impact_s == 60
    # the 5 s average is clean again once its window holds no outage second: 70 + 5 - 1
    assert first.throughput.recovery_s == 74 and first.throughput.recovery_time_s == 14
    assert first.latency.recovery_s == 74
    assert second.throughput.impact_s is None and second.latency.impact_s is None


def test_back_to_back_failures_reuse_the_earlier_band_and_the_first_never_recovers():
    s = series(outages=[(60, 90)])
    report = detect(s, [60, 75], config=EXACT)
    first, second = report.failures
    assert first.throughput.recovery_s is None
    # [55, 75) minus the disturbed [60, ...) leaves 5 samples < 8: the first band is reused
    assert second.throughput.band.reused and second.throughput.band.mean == pytest.approx(100)
    assert (second.throughput.impact_s, second.throughput.recovery_s, second.throughput.recovery_time_s) == (75, 90, 15)
    assert report.stable is False


def test_equal_outages_make_a_stable_run_and_growing_outages_an_unstable_one():
    fails = [40, 100, 160, 220, 280]
    steady = series(n=340, outages=[(f, f + 10) for f in fails], latency_spikes=[(f, f + 10) for f in fails])
    report = detect(steady, fails, config=EXACT)
    assert report.recovery_times("throughput") == [10, 10, 10, 10, 10]
    assert report.stable is True and report.all_detected and report.all_recovered

    lengths = [5, 15, 25, 35, 45]
    growing = series(n=340, outages=[(f, f + d) for f, d in zip(fails, lengths)], latency_spikes=[(f, f + 10) for f in fails])
    report = detect(growing, fails, config=EXACT)
    assert report.recovery_times("throughput") == lengths
    assert report.stable is False and "throughput recovery grows by 40s" in report.verdict


def test_single_failure_is_not_judged_for_stability():
    report = detect(series(outages=[(60, 70)]), [60], config=EXACT)
    assert report.stable is None and report.verdict.startswith("not judged")


def test_a_run_without_failures_shows_no_detection_and_no_recovery():
    report = detect(series(outages=[]), [], config=EXACT)
    assert report.failures == () and not report.all_detected and not report.all_recovered


def test_lag_peak_is_the_largest_lag_between_failure_and_next_failure():
    lag = [10.0] * 180
    lag[65], lag[130] = 500.0, 900.0
    report = detect(series(lag=lag, outages=[(60, 70)]), [60, 120], config=EXACT)
    assert (report.failures[0].lag_peak, report.failures[0].lag_peak_s) == (500, 65)
    assert (report.failures[1].lag_peak, report.failures[1].lag_peak_s) == (900, 130)


def test_missing_seconds_after_a_failure_count_as_impact_and_block_recovery():
    s = series()
    for i in range(60, 66):
        s["latency_p90_ms"][i] = None  # nothing produced in those seconds became visible
    (f,) = detect(s, [60], config=EXACT).failures
    assert (f.latency.impact_s, f.latency.recovery_s) == (60, 66)


def test_a_pandas_frame_works_like_a_dict_of_lists():
    s = series(outages=[(60, 70)])
    from_frame = detect(pd.DataFrame(s), [60], config=EXACT)
    assert from_frame.failures == detect(s, [60], config=EXACT).failures


def test_report_as_dict_carries_per_failure_times_and_the_verdict():
    d = detect(series(outages=[(60, 70)]), [60], config=EXACT).as_dict()
    assert d["failures"][0]["throughput"]["recovery_time_s"] == 10
    assert d["verdict"].startswith("not judged") and d["config"]["smooth_s"] == 1


def test_moving_average_is_trailing_and_skips_missing_values():
    t = np.arange(6, dtype=float)
    v = np.array([0, 10, np.nan, 30, np.nan, np.nan])
    assert moving_average(t, v, 2).tolist()[:5] == [0, 5, 10, 30, 30]
    assert np.isnan(moving_average(t, v, 2)[5])


@pytest.mark.parametrize(
    ("failures", "kwargs", "needle"),
    [
        ([500], {}, "outside the series"),
        ([60, 50], {}, "strictly increasing"),
        ([5], {}, "warm up longer"),
        ([60], {"throughput": "rate"}, "no column 'rate'"),
    ],
)
def test_unusable_input_is_a_detector_error_that_says_the_fix(failures, kwargs, needle):
    with pytest.raises(DetectorError, match=needle):
        detect(series(), failures, config=EXACT, **kwargs)


def test_settings_out_of_range_are_rejected():
    with pytest.raises(DetectorError, match="hold_s"):
        DetectorConfig(hold_s=0)


def test_latency_back_below_a_slow_reference_is_recovered_but_throughput_above_its_band_is_not():
    """Latency lower than the reference window's is no symptom (a failure cannot make records
    visible sooner); throughput above its band is the catch-up, still not normal."""
    s = series(n=150, outages=[(60, 70)], latency_spikes=[(40, 60), (60, 70)])
    s["latency_p90_ms"] = [v if i < 70 else 500.0 for i, v in enumerate(s["latency_p90_ms"])]  # faster than ever after
    (f,) = detect(s, [60], config=EXACT).failures
    assert f.latency.band.mean == pytest.approx(5000)  # the reference caught a slow stretch
    assert (f.latency.impact_s, f.latency.recovery_s) == (None, None)  # 5000 is inside, 500 is under: no symptom at all
    s2 = series(n=150, outages=[(60, 70)], catch_up=[(70, 145)])
    (g,) = detect(s2, [60], config=EXACT).failures
    assert g.throughput.impact_s == 60 and g.throughput.recovery_s is None  # the catch-up lasts to the end: not recovered


def test_the_latency_floor_reads_a_shift_smaller_than_a_trigger_as_batching_not_a_failure():
    """A micro-batch job's latency moves by up to a trigger interval with the phase of its
    batches. Flat at 2000 ms before, a spike, then flat at 2400 ms (20 % up, less than a 1 s
    trigger): with the floor the spike is the failure and 2400 is back to normal; without it
    the job "never recovers". The throughput band keeps its own floors."""
    s = series(n=150, outages=[(60, 70)], latency_spikes=[(60, 75)])
    s["latency_p90_ms"] = [2000.0 if i < 60 else (8000.0 if i < 75 else 2400.0) for i in range(150)]
    (tight,) = detect(s, [60], config=EXACT).failures
    assert tight.latency.band.high == pytest.approx(2300) and tight.latency.recovery_s is None
    floored = DetectorConfig(smooth_s=1, latency_floor_ms=1000)
    (f,) = detect(s, [60], config=floored).failures
    assert f.latency.band.high == pytest.approx(3000)
    assert (f.latency.impact_s, f.latency.recovery_s) == (60, 75)
    assert f.throughput.band.low == pytest.approx(85)  # not widened by the latency floor
    with pytest.raises(DetectorError, match="latency_floor_ms"):
        DetectorConfig(latency_floor_ms=-1)


def test_a_job_s_detector_takes_its_latency_floor_from_the_trigger_unless_told():
    assert detector_for("1 second", smooth_s=10) == DetectorConfig(smooth_s=10, latency_floor_ms=1000)
    assert detector_for("500 ms").latency_floor_ms == 500
    assert detector_for("2 seconds", latency_floor_ms=0).latency_floor_ms == 0
    with pytest.raises(DetectorError, match="trigger 'available-now' has no interval"):
        detector_for("available-now")


def test_describe_names_each_failure_s_band_impact_and_recovery_relative_to_it():
    s = series(n=120, outages=[(60, 120)], latency_spikes=[(60, 75)])
    text = detect(s, [60], config=EXACT).describe()
    assert text.splitlines()[0].startswith("unstable: never recovered")
    assert "failure 1 at 60s, throughput: band 85..115 (mean 100, 20 samples), impact +0s, recovered none (horizon +60s)" in text
    assert "failure 1 at 60s, latency: band <= 1,150 (mean 1,000, 20 samples), impact +0s, recovered +15s" in text


def test_recovered_so_far_answers_on_the_seconds_logged_and_agrees_with_the_detector_once_the_series_is_complete():
    s = series(outages=[(60, 70)], catch_up=[(70, 80)])
    t, thr = s["t"], s["throughput"]
    answers = {n: recovered_so_far(t[:n], thr[:n], [60], EXACT) for n in (60, 65, 80, 89, 90, 180)}
    # recovered at 80 and held for 10 s: known once second 89 is logged (90 seconds), not before
    assert answers == {60: False, 65: False, 80: False, 89: False, 90: True, 180: True}
    # the detector, given the next failure right there, finds that same recovery
    (f, _) = detect(s, [60, 90], config=EXACT).failures
    assert f.throughput.recovery_s == 80


def test_recovered_so_far_waits_for_a_failure_whose_impact_has_not_shown_and_judges_the_last_failure():
    flat = series()
    # no impact yet: a quiet second right after an injection is not a recovery, three holds of calm are
    assert not recovered_so_far(flat["t"][:75], flat["throughput"][:75], [60], EXACT)
    assert recovered_so_far(flat["t"][:90], flat["throughput"][:90], [60], EXACT)
    # the second failure's outage is still going on: the first one's recovery does not count for it
    s = series(outages=[(60, 70), (120, 180)])
    assert not recovered_so_far(s["t"][:150], s["throughput"][:150], [60, 120], EXACT)
    # too little before the first failure to build a band, or nothing logged after it: not recovered
    assert not recovered_so_far(flat["t"][:40], flat["throughput"][:40], [5], EXACT)
    assert not recovered_so_far(flat["t"][:50], flat["throughput"][:50], [60], EXACT)


def test_recovered_so_far_with_calm_after_waits_out_a_dip_after_the_recovery_and_holds_from_that_second_on():
    s = series(outages=[(60, 70), (100, 105)], catch_up=[(70, 80)])
    t, thr = s["t"], s["throughput"]
    assert recovered_so_far(t[:110], thr[:110], [60], EXACT)  # the first recovery held: the dip is not seen
    answers = {n: recovered_so_far(t[:n], thr[:n], [60], EXACT, calm_after=95) for n in (90, 104, 110, 114, 115, 150)}
    # whole from 95: the hold must lie after it and after the dip at 100-104, so from 105 to 114
    assert answers == {90: False, 104: False, 110: False, 114: False, 115: True, 150: True}
