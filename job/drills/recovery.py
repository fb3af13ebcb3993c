"""Recovery-time detection over per-second series: where a failure hit, and when it was over.

A pure function (no Spark, no I/O) after the method of the fault-recovery study in
``002_4dc09791356e2623.txt``: a moving average and standard deviation of the normal
behaviour form a band; a failure's *impact* is when the metric leaves the band after the
failure was injected, its *recovery* is when the metric is back inside and stays there.

The contract, for each metric (throughput, p90 latency) and each failure at time ``f``:

1. **Smoothing.** The series is replaced by its trailing moving average over
   ``smooth_s`` seconds (samples in ``(t - smooth_s, t]``, missing values ignored; a
   second whose window holds no value stays missing). Micro-batch engines commit in
   bursts, so per-second counts alternate between zero and a batch; the average is what
   is compared.
2. **Band.** From the smoothed samples in the reference window ``[f - baseline_s, f)``,
   minus the seconds an earlier failure had disturbed (its failure time up to its
   recovery, or to the end when it never recovered): mean ``m`` and standard deviation
   ``s``; the band is ``m ± max(k·s, rel_floor·|m|, abs_floor)``, and for p90 latency
   at least ``± latency_floor_ms``. The floors keep a perfectly flat series from having a
   zero-width band. The latency floor is for micro-batch engines: a record waits for the
   next trigger and then for its batch, so a system whose batches take a trigger interval
   has latencies that move by up to that interval with the phase of the batches, whatever
   a 20 s reference window happened to catch; a band narrower than that reads the batching
   as a symptom (``bench/recovery_bench.py`` sets it to the trigger interval). When fewer than
   ``min_baseline_samples`` clean samples remain (back-to-back failures), the previous
   failure's band is reused; the first failure must have them. For p90 latency only the
   upper edge counts: a failure cannot make records visible sooner, and a reference window
   that caught a slow stretch would otherwise call a return to faster-than-before "not
   recovered".
3. **Impact.** The first second ``t >= f`` before the horizon (the next failure, or the
   end of the series) whose smoothed value is outside the band or missing. None: the
   failure had no visible impact, its recovery time is 0.
4. **Recovery.** The first second ``r >= impact`` from which every smoothed value in
   ``[r, r + hold_s)`` is present and inside the band, that whole stretch lying before
   the horizon. Recovery time = ``r - f`` (from the injection, as the study measures it).
   None: it did not recover before the horizon.

The run is **stable** when every impacted failure recovered and recovery times do not
grow from failure to failure: for each metric, the least-squares slope of recovery time
against failure number, times the number of steps, stays within
``max(growth_abs_s, growth_rel · median)``. One failure alone cannot show a trend:
``stable`` is then None.

The lag peak of a failure is the largest total lag in ``[f, horizon)``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from job.engine.errors import JobError

__all__ = [
    "Band",
    "DetectorConfig",
    "DetectorError",
    "FailureRecovery",
    "MetricRecovery",
    "RecoveryReport",
    "detect",
    "detector_for",
    "moving_average",
    "recovered_so_far",
]


class DetectorError(JobError):
    """Series or failure times the detector cannot work on; the message says which and how to fix it."""


@dataclass(frozen=True, kw_only=True)
class DetectorConfig:
    """The detector's knobs, one set for every run compared (the study keeps its threshold
    equal for all frameworks). Times are in seconds; see the module docstring for how each
    one is used."""

    smooth_s: int = 5
    baseline_s: int = 20
    min_baseline_samples: int = 8
    k: float = 3.0
    rel_floor: float = 0.15
    abs_floor: float = 1e-9
    latency_floor_ms: float = 0.0
    hold_s: int = 10
    growth_abs_s: float = 10.0
    growth_rel: float = 0.5

    def __post_init__(self) -> None:
        for name in ("smooth_s", "baseline_s", "min_baseline_samples", "hold_s"):
            if getattr(self, name) < 1:
                raise DetectorError(f"detector setting {name}={getattr(self, name)!r}: use a whole number of at least 1")
        for name in ("k", "rel_floor", "abs_floor", "latency_floor_ms", "growth_abs_s", "growth_rel"):
            if not getattr(self, name) >= 0:
                raise DetectorError(f"detector setting {name}={getattr(self, name)!r}: use a number of at least 0")
        if self.min_baseline_samples > self.baseline_s:
            raise DetectorError(
                f"detector setting min_baseline_samples={self.min_baseline_samples} exceeds baseline_s={self.baseline_s}: "
                "a 1 Hz window cannot hold more samples than seconds; lower it"
            )


def detector_for(trigger: str, *, latency_floor_ms: float | None = None, **knobs: Any) -> DetectorConfig:
    """The detector for a job that runs at ``trigger`` ("1 second", "500 ms"): its latency band
    at least one trigger interval wide, since a micro-batch job's latency moves by up to one
    trigger with the phase of its batches (``latency_floor_ms`` overrides that); ``knobs`` are
    the other :class:`DetectorConfig` settings."""
    from job.spark.config import trigger_ms

    if latency_floor_ms is None:
        latency_floor_ms = trigger_ms(trigger)
        if latency_floor_ms is None:
            raise DetectorError(
                f"trigger {trigger!r} has no interval to widen the latency band by: "
                "use one such as '1 second' or '500 ms', or give latency_floor_ms"
            )
    return DetectorConfig(latency_floor_ms=latency_floor_ms, **knobs)


@dataclass(frozen=True, kw_only=True)
class Band:
    """The normal range of a smoothed metric: ``low <= value <= high``."""

    mean: float
    std: float
    low: float
    high: float
    samples: int
    reused: bool = False  # taken over from the previous failure (too few clean samples)
    upper_only: bool = False  # below ``low`` counts as inside too (latency: lower is never a symptom)

    def contains(self, value: float) -> bool:
        return not math.isnan(value) and (self.upper_only or self.low <= value) and value <= self.high


@dataclass(frozen=True, kw_only=True)
class MetricRecovery:
    """One metric's view of one failure. Times are on the series' own clock.

    ``recovery_time_s`` is ``recovery_s - failure_s``; 0.0 when the failure had no
    visible impact; None when the metric never came back before the horizon.
    """

    metric: str
    band: Band
    impact_s: float | None
    recovery_s: float | None
    recovery_time_s: float | None

    @property
    def impacted(self) -> bool:
        return self.impact_s is not None

    @property
    def recovered(self) -> bool:
        return self.recovery_time_s is not None


@dataclass(frozen=True, kw_only=True)
class FailureRecovery:
    """What one injected failure did: per metric, and the consumer-lag peak."""

    index: int
    failure_s: float
    horizon_s: float
    throughput: MetricRecovery
    latency: MetricRecovery
    lag_peak: float | None
    lag_peak_s: float | None

    @property
    def detected(self) -> bool:
        """The failure left a mark on at least one metric."""
        return self.throughput.impacted or self.latency.impacted

    @property
    def recovered(self) -> bool:
        return self.throughput.recovered and self.latency.recovered


@dataclass(frozen=True, kw_only=True)
class RecoveryReport:
    """The detector's answer for one run."""

    failures: tuple[FailureRecovery, ...]
    stable: bool | None
    verdict: str
    config: DetectorConfig = field(repr=False)

    @property
    def all_detected(self) -> bool:
        """Every failure was detected; False for a run without failures (nothing was shown)."""
        return bool(self.failures) and all(f.detected for f in self.failures)

    @property
    def all_recovered(self) -> bool:
        """Every failure recovered; False for a run without failures (nothing was shown)."""
        return bool(self.failures) and all(f.recovered for f in self.failures)

    def recovery_times(self, metric: str) -> list[float | None]:
        """Recovery time per failure for ``"throughput"`` or ``"latency"``."""
        return [getattr(f, metric).recovery_time_s for f in self.failures]

    def describe(self) -> str:
        """One line per failure and metric: the band, the impact and the recovery, relative to
        the failure (what an assertion on the report should print when it fails)."""
        lines = [self.verdict]
        for f in self.failures:
            for m in (f.throughput, f.latency):
                b = m.band
                band = f"<= {b.high:,.0f}" if b.upper_only else f"{b.low:,.0f}..{b.high:,.0f}"
                at = lambda x: "none" if x is None else f"+{x - f.failure_s:.0f}s"  # noqa: E731
                lines.append(
                    f"failure {f.index} at {f.failure_s:.0f}s, {m.metric}: band {band} (mean {b.mean:,.0f}, "
                    f"{b.samples} samples{', reused' if b.reused else ''}), impact {at(m.impact_s)}, "
                    f"recovered {at(m.recovery_s)} (horizon +{f.horizon_s - f.failure_s:.0f}s)"
                )
        return "\n".join(lines)

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: one entry per failure, the verdict and the settings."""
        from dataclasses import asdict

        out = []
        for f in self.failures:
            entry: dict[str, Any] = {
                "index": f.index,
                "failure_s": f.failure_s,
                "horizon_s": f.horizon_s,
                "lag_peak": f.lag_peak,
                "lag_peak_s": f.lag_peak_s,
            }
            for m in (f.throughput, f.latency):
                entry[m.metric] = {
                    "impact_s": m.impact_s,
                    "recovery_s": m.recovery_s,
                    "recovery_time_s": m.recovery_time_s,
                    "band": asdict(m.band),
                }
            out.append(entry)
        return {"failures": out, "stable": self.stable, "verdict": self.verdict, "config": asdict(self.config)}


def moving_average(times: np.ndarray, values: np.ndarray, window_s: float) -> np.ndarray:
    """Trailing mean over ``(t - window_s, t]`` at every sample, ignoring NaN; NaN when the window holds none."""
    out = np.full(len(values), np.nan)
    start = 0
    for i, t in enumerate(times):
        while times[start] <= t - window_s:
            start += 1
        chunk = values[start : i + 1]
        chunk = chunk[~np.isnan(chunk)]
        if len(chunk):
            out[i] = chunk.mean()
    return out


def detect(
    series: Any,
    failures: Sequence[float],
    *,
    time: str = "t",
    throughput: str = "throughput",
    latency: str = "latency_p90_ms",
    lag: str | None = "lag",
    config: DetectorConfig | None = None,
) -> RecoveryReport:
    """Find each failure's impact and recovery in per-second series (see the module docstring).

    ``series`` is a pandas DataFrame or a mapping of column name to list, one row per
    second, with the ``time`` column in seconds (sorted, on the same clock as
    ``failures``). ``lag`` may be None or absent (no lag peaks then). Missing values are
    NaN or None.
    """
    cfg = config or DetectorConfig()
    columns = _columns(series, [time, throughput, latency] + ([lag] if lag else []))
    t = columns[time]
    if len(t) == 0:
        raise DetectorError("detector: the series is empty; record at least baseline_s seconds before the first failure")
    if np.isnan(t).any() or (np.diff(t) <= 0).any():
        raise DetectorError(f"detector: column {time!r} must be strictly increasing seconds without gaps of NaN; sort the series")
    fails = [float(f) for f in failures]
    if any(b <= a for a, b in zip(fails, fails[1:])):
        raise DetectorError(f"detector: failure times {fails} must be strictly increasing; sort them")
    for f in fails:
        if not t[0] <= f <= t[-1]:
            raise DetectorError(
                f"detector: failure at {f}s lies outside the series ({t[0]}s to {t[-1]}s); pass times on the series' clock"
            )
    horizons = _horizons(t, fails)

    per_metric: dict[str, list[MetricRecovery]] = {}
    for name, column in (("throughput", throughput), ("latency", latency)):
        smooth = moving_average(t, columns[column], cfg.smooth_s)
        per_metric[name] = _metric_recoveries(name, t, smooth, fails, horizons, cfg)

    results = []
    for i, (f, h) in enumerate(zip(fails, horizons)):
        peak = peak_s = None
        if lag and lag in columns:
            window = (t >= f) & (t < h) & ~np.isnan(columns[lag])
            if window.any():
                j = int(np.argmax(np.where(window, columns[lag], -np.inf)))
                peak, peak_s = float(columns[lag][j]), float(t[j])
        results.append(
            FailureRecovery(
                index=i + 1,
                failure_s=f,
                horizon_s=h,
                throughput=per_metric["throughput"][i],
                latency=per_metric["latency"][i],
                lag_peak=peak,
                lag_peak_s=peak_s,
            )
        )
    stable, verdict = _stability(results, cfg)
    return RecoveryReport(failures=tuple(results), stable=stable, verdict=verdict, config=cfg)


def recovered_so_far(
    times: Sequence[float],
    values: Sequence[float],
    failures: Sequence[float],
    config: DetectorConfig,
    *,
    metric: str = "throughput",
    calm_after: float | None = None,
) -> bool:
    """Whether the last of ``failures`` has recovered on one metric, judged on the series
    recorded so far: the question a schedule asks before it injects the next failure, or
    stops the run after the last one. The same band, impact and hold as :func:`detect`, the
    end of the series as the horizon; ``times`` must hold only seconds that later samples
    cannot change. A failure whose impact has not shown yet counts as recovered only once
    the series reaches three holds past it: a quiet second right after an injection is not
    a recovery.

    ``calm_after``: a second from which the system is whole again (the bench: its executors
    back); then the metric must also have stayed in its band for the last ``hold_s`` seconds,
    all of them at or after it. A dip after an earlier recovery (a replacement executor's
    first batch loading the state) is then waited out too."""
    t = np.asarray(times, dtype=float)
    fails = [float(f) for f in failures]
    if not fails or len(t) == 0 or t[-1] < fails[-1]:
        return False
    smooth = moving_average(t, _floats(values), config.smooth_s)
    try:
        last = _metric_recoveries(metric, t, smooth, fails, _horizons(t, fails), config)[-1]
    except DetectorError:  # too few samples before the first failure: nothing to judge against
        return False
    if calm_after is not None:
        start = float(t[-1]) + 1.0 - config.hold_s
        held = (t >= start) & ~np.isnan(smooth)
        if start < calm_after or not all(last.band.contains(v) for v in smooth[held]) or not held.any():
            return False
    if last.impacted:
        return last.recovered
    return float(t[-1]) + 1.0 >= fails[-1] + 3 * config.hold_s


def _columns(series: Any, names: list[str]) -> dict[str, np.ndarray]:
    if hasattr(series, "columns"):
        available = list(series.columns)
        get = lambda n: series[n].to_numpy()  # noqa: E731
    elif isinstance(series, Mapping):
        available = list(series)
        get = lambda n: series[n]  # noqa: E731
    else:
        raise DetectorError(f"detector: series is a {type(series).__name__}; pass a pandas DataFrame or a dict of lists")
    out = {}
    for i, name in enumerate(names):
        if name not in available:
            if i == 3:  # the lag column is optional
                continue
            raise DetectorError(f"detector: the series has no column {name!r} (it has {available}); name the right one")
        out[name] = _floats(get(name))
    return out


def _floats(values: Any) -> np.ndarray:
    """A series as floats, a missing value (None) as NaN."""
    return np.array([np.nan if v is None else v for v in values], dtype=float)


def _horizons(t: np.ndarray, fails: list[float]) -> list[float]:
    """Each failure's horizon: the next failure, or one second past the series' end."""
    return fails[1:] + [float(t[-1]) + 1.0]


def _metric_recoveries(
    name: str, t: np.ndarray, smooth: np.ndarray, fails: list[float], horizons: list[float], cfg: DetectorConfig
) -> list[MetricRecovery]:
    out: list[MetricRecovery] = []
    disturbed: list[tuple[float, float]] = []
    band: Band | None = None
    for i, (f, h) in enumerate(zip(fails, horizons)):
        ref = (t >= f - cfg.baseline_s) & (t < f) & ~np.isnan(smooth)
        for a, b in disturbed:
            ref &= ~((t >= a) & (t < b))
        if ref.sum() >= cfg.min_baseline_samples:
            m, s = float(smooth[ref].mean()), float(smooth[ref].std())
            half = max(cfg.k * s, cfg.rel_floor * abs(m), cfg.abs_floor, cfg.latency_floor_ms if name == "latency" else 0.0)
            band = Band(mean=m, std=s, low=m - half, high=m + half, samples=int(ref.sum()), upper_only=name == "latency")
        elif band is not None:
            band = Band(**{**band.__dict__, "reused": True})
        else:
            raise DetectorError(
                f"detector: failure {i + 1} at {f}s has {int(ref.sum())} clean {name} samples before it, "
                f"fewer than min_baseline_samples={cfg.min_baseline_samples}; warm up longer before the first failure"
            )
        inside = np.array([band.contains(v) for v in smooth])
        window = (t >= f) & (t < h)
        impact = next((float(x) for x, ok, w in zip(t, inside, window) if w and not ok), None)
        recovery = None
        if impact is not None:
            for j in np.flatnonzero(window & (t >= impact)):
                stretch = (t >= t[j]) & (t < t[j] + cfg.hold_s)
                if t[j] + cfg.hold_s > h or t[stretch][-1] < t[j] + cfg.hold_s - 1:
                    break  # the hold no longer fits before the horizon
                if inside[stretch].all():
                    recovery = float(t[j])
                    break
        if impact is None:
            rt: float | None = 0.0
        else:
            rt = None if recovery is None else recovery - f
            disturbed.append((f, recovery if recovery is not None else math.inf))
        out.append(MetricRecovery(metric=name, band=band, impact_s=impact, recovery_s=recovery, recovery_time_s=rt))
    return out


def _stability(results: list[FailureRecovery], cfg: DetectorConfig) -> tuple[bool | None, str]:
    lost = [f"failure {r.index} ({m.metric})" for r in results for m in (r.throughput, r.latency) if not m.recovered]
    if lost:
        return False, "unstable: never recovered before the next failure or the end: " + ", ".join(lost)
    if len(results) < 2:
        return None, "not judged: one failure cannot show a trend"
    growing = []
    for metric in ("throughput", "latency"):
        times = np.array([getattr(r, metric).recovery_time_s for r in results], dtype=float)
        slope = float(np.polyfit(np.arange(len(times)), times, 1)[0])
        growth = slope * (len(times) - 1)
        allowed = max(cfg.growth_abs_s, cfg.growth_rel * float(np.median(times)))
        if growth > allowed:
            growing.append(f"{metric} recovery grows by {growth:.0f}s over {len(times)} failures (allowed {allowed:.0f}s)")
    if growing:
        return False, "unstable: " + "; ".join(growing)
    return True, "stable: every failure recovered and recovery times do not grow"
