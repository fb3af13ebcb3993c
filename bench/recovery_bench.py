"""Recovery benchmark: recurrent failures while producers send at a constant rate, the job next to the baseline.

After the fault-recovery study in ``002_4dc09791356e2623.txt``: a warm-up, then
``--failures`` failures every ``--interval`` seconds (with ``--after-recovery``: each next one
once the previous one recovered, ``--interval`` being the longest wait), each one a ``--action`` (kill or
pause) of ``--target``; a killed target is brought back ``--down`` seconds later as an
operator would (``sandbox restart``, or the supervisor starting the process again), a
paused one resumed. Producers run at ``--rate`` msg/s throughout (no data faults, fixed
seed). Per second it records, for each system:

  input_rate       records produced that second (the ledger's event time ``ts``)
  processed_rate   records the system processed that second (the job: each micro-batch's
                   input rows from query progress, spread over the seconds from its start
                   to its commit, see spread_rows; the baseline: its micro-batches, at
                   their commit)
  latency p50/p90  of the records produced that second: output visible - event time, as
                   bench/job_bench.py defines "visible" (the job: the ``_spark_metadata``
                   entry listing the file; the baseline: its batch kept in memory)
  lag              per partition: the broker's high watermark (sampled every second)
                   minus the offset the system had committed then, the largest in the
                   second (a restarted baseline's first read counts: see lag_table);
                   ``lag`` is the sum

and hands the series to the detector (:func:`job.drills.recovery.detect`): recovery time per
failure for throughput and p90 latency, the lag peak, and whether the run was stable.

The job runs in a supervised subprocess (so ``--target driver`` kills a real driver,
which restarts from its checkpoint); the baseline (job/baseline.py) too: it keeps no
checkpoint, so a restarted baseline reads every topic again from the earliest offset.
For the baseline, a Spark target (``spark-worker-N``, ``driver``) means its one process;
``kafka`` means the broker for both. The two systems run one after the other on fresh
topics with the same seed and the same schedule. After each run the outputs are
verified against the ledger (the job's lake with job/verify/compare.py through Spark).

    .venv/bin/python bench/recovery_bench.py          # 5 kills of spark-worker-1, 60 s apart: ~20 min
    .venv/bin/python bench/recovery_bench.py --failures 2 --interval 30 --warmup 40 --rate 100   # a quick look

It uses the sandbox of ``OSL_STATE_DIR`` / ``OSL_PORT_OFFSET`` (default ``.sandbox-bench``,
ports +20000), starts it if needed and leaves it running. Results go to
``bench/results/recovery-<run>.{csv,json}``, ``-lag.csv`` and ``-*.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import RESULTS, own_sandbox  # noqa: E402  (after sys.path above)

own_sandbox()

from bench.job_bench import (  # noqa: E402
    job_config,
    ledger_ok,
    produce,
    record_latencies,
    run_job_backlog,
    say,
    sink_visibility,
)
from job.drills.recovery import DetectorConfig, RecoveryReport, detect, detector_for, recovered_so_far  # noqa: E402
from job.spark.config import trigger_ms  # noqa: E402
from job.spark.query_progress import reached  # noqa: E402
from sandbox.settings import Settings, shown  # noqa: E402

SYSTEMS = ("job", "baseline")
ACTIONS = ("kill", "pause")
PROCESS_TARGETS = ("driver",)
EXECUTOR_MEMORY = "1100m"
#: A worker's exit code for "this cluster cannot give a fair measurement": not a crash, so its
#: supervisor does not start it again (a restart would skip the first start's checks).
REFUSED = 3
#: The capacity measurement: a backlog this big, drained in batches of this many records; the
#: capacity is the rate over every batch but the first (the first opens the query's state).
CAPACITY_RECORDS = 20_000
CAPACITY_CAP = 5_000


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """When and what to break: ``failures`` times ``action`` of ``target``, the first after
    ``warmup_s``, then every ``interval_s``; each is undone ``down_s`` later. Producers
    run for ``warmup_s + failures * interval_s`` seconds at ``rate`` msg/s, or, with
    ``load``, at that fraction of the job's capacity as its worker measures it before the
    clock starts (:data:`CAPACITY_RECORDS` drained in batches of :data:`CAPACITY_CAP`); the
    systems after the job get the same rate.

    With ``after_recovery``, each failure after the first comes as soon as the previous one
    has recovered, and the producers stop as soon as the last one has: the detector on the
    system's throughput as it is logged, with the run's settings
    (:func:`job.drills.recovery.recovered_so_far`). ``interval_s`` is then the longest wait
    for a recovery, the failure bound: past it the next failure (or the end) comes anyway,
    and the detector's report says which recovery was not found. A fixed spacing has to be
    as long as the slowest recovery of the machine's worst day; this one waits for the
    recovery the run actually had, so a slow restart is measured instead of cut off."""

    target: str = "spark-worker-1"
    #: the target of each failure in turn, when they differ (cycled): ("driver", "spark-worker")
    #: kills the job's driver first, then a worker; empty: ``target`` every time
    targets: tuple[str, ...] = ()
    action: str = "kill"
    failures: int = 5
    interval_s: float = 60.0
    warmup_s: float = 60.0
    down_s: float = 5.0
    rate: float = 200.0
    load: float | None = None
    after_recovery: bool = False

    @property
    def duration_s(self) -> float:
        """The producers' run: the whole of it, or with ``after_recovery`` its longest."""
        return self.warmup_s + self.failures * self.interval_s

    def times(self) -> list[float]:
        """Failure times in seconds after the producers started: known in advance for a fixed
        spacing; with ``after_recovery`` only the first is (the others come once the previous
        one recovered, and may come up to a few seconds past these when every wait ran to its bound)."""
        return [self.warmup_s + i * self.interval_s for i in range(self.failures)]

    def fixed_times(self) -> list[float]:
        """The failure times set before the run (all of them, or only the first with ``after_recovery``)."""
        return self.times()[:1] if self.after_recovery else self.times()

    def __post_init__(self) -> None:
        if self.targets:  # the summary shows ``target``: the first failure's, not the default
            object.__setattr__(self, "target", self.targets[0])

    def target_at(self, i: int) -> str:
        """The target of failure ``i`` (from 0)."""
        return self.targets[i % len(self.targets)] if self.targets else self.target


@dataclass
class SystemRun:
    """What one system's run left behind: the raw observations, on wall-clock milliseconds."""

    system: str
    t0_ms: int
    failures_ms: list[int]
    ledger: str
    events: list[dict]  # processed batches (and process starts) from the worker
    highs: pd.DataFrame  # ms, topic, partition, high
    visible: pd.DataFrame  # topic, partition, offset, visible_ms
    verdict: dict = field(default_factory=dict)
    rate: float = 0.0  # msg/s the producers were asked for
    capacity: dict | None = None  # the job's measured capacity (records/s, records, batches), when measured
    undone_ms: list[int] = field(default_factory=list)  # when each failure was undone
    hit_cores: list[int | None] = field(
        default_factory=list
    )  # per failure: executor cores on a killed Spark worker (the master's count; None: no worker)
    labels: list[str] = field(default_factory=list)  # per failure: what it did to the system (failure_label)
    restarts: int = 0  # brought back after a scheduled kill
    crashes: int = 0  # exited on its own and started again by the supervisor
    duration_s: float = 0.0  # how long the producers ran (shorter than the schedule's with after_recovery)


# ----------------------------------------------------------------------------- the series


def per_second(run: SystemRun, duration_s: float, ledger: pd.DataFrame | None = None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy tables of one run: one row per second, and one per second and partition (lag).

    ``t`` counts seconds from the producers' start; rows cover ``[0, duration_s)``.
    ``ledger`` is the run's ledger as ``bench.job_bench.ledger_ok`` returns it (read from
    ``run.ledger`` when not given).
    """
    seconds = np.arange(int(duration_s))
    sec = lambda ms: np.floor((np.asarray(ms, dtype=float) - run.t0_ms) / 1000).astype(int)  # noqa: E731
    table = pd.DataFrame({"system": run.system, "t": seconds})

    ledger = ledger_ok(run.ledger) if ledger is None else ledger
    table["input_rate"] = pd.Series(sec(ledger["ts"])).value_counts().reindex(seconds, fill_value=0).to_numpy()

    batches = [e for e in run.events if "rows" in e]
    table["processed_rate"] = spread_rows(batches, run.t0_ms, len(seconds))

    lat = record_latencies(ledger, run.visible)
    lat["t"] = sec(lat["ts"])
    grouped = lat.groupby("t")["latency_ms"]
    for q in (50, 90):
        table[f"latency_p{q}_ms"] = grouped.quantile(q / 100).reindex(seconds).to_numpy()

    lag = lag_table(run)
    lag = lag[(lag["t"] >= 0) & (lag["t"] < len(seconds))]
    total = lag.groupby("t")["lag"].sum(min_count=1)
    table["lag"] = total.reindex(seconds).to_numpy()
    return table, lag


def spread_rows(batches: list[dict], t0_ms: int, n: int) -> np.ndarray:
    """Records processed per second over ``n`` seconds from ``t0_ms``: a batch that logged
    when it started (``start_ms``, the job's micro-batches) counts its ``rows`` over the
    seconds it ran, in proportion to the time it spent in each; one that did not (the
    baseline's small batches) counts them in the second it committed (``ms``).

    Counting a micro-batch only where it commits turns a steady input into a comb: a 2-s
    batch puts 2 s of input into one second and none into the next, so even a 10-s average
    swings by a batch's worth as batches fall on either side of its edge, and a recovery
    detector reads the swing as instability. Spread over their run time, back-to-back batches
    give the rate the job processed at, and a stalled batch (its executor lost) shows the
    stall as a low rate for as long as it lasted.
    """
    out = np.zeros(n, dtype=float)
    for e in batches:
        end = (float(e["ms"]) - t0_ms) / 1000
        start = (float(e["start_ms"]) - t0_ms) / 1000 if e.get("start_ms") is not None else end
        rows = float(e["rows"])
        if end - start <= 0:
            i = math.floor(end)
            if 0 <= i < n:
                out[i] += rows
            continue
        for i in range(max(math.floor(start), 0), min(math.floor(end), n - 1) + 1):
            overlap = min(end, i + 1) - max(start, i)
            if overlap > 0:
                out[i] += rows * overlap / (end - start)
    return out


def _executor_counts(events: list[dict]) -> list[tuple[int, int]]:
    """``(ms, executors)`` of every logged batch that counted its application's executors."""
    return [(e["ms"], e["executors"]) for e in events if e.get("executors") is not None]


def _executors_split(
    counts: list[tuple[int, int]], failure_ms: float, until_ms: float = float("inf")
) -> tuple[int | None, list[tuple[int, int]]]:
    """The executors at the last batch before a failure (None: no batch logged them) and
    ``(ms, executors)`` of each batch from the failure until ``until_ms``, in order."""
    before = [x for ms, x in counts if ms < failure_ms]
    return (before[-1] if before else None), [(ms, x) for ms, x in counts if failure_ms <= ms < until_ms]


def executors_around(run: SystemRun) -> list[dict]:
    """Per failure, Spark's own view of it: the executors the job's application had at the
    last batch before the failure and the fewest at any batch until the next one (None: the
    system has no executors, or no batch in that window). A kill of a worker that landed
    shows as ``lowest < before``. ``state_on``: how many executors ran the state partitions
    of the last batch before the next failure (or the end), from the placement the job's
    worker logged (None: none logged): 1 means they still ran one after the other on the
    survivor of the kill."""
    batches = _executor_counts(run.events)
    placement: dict[str, list[str]] = {}
    for e in run.events:
        placement.update(e.get("placement") or {})
    committed = [(e["ms"], str(e["batch"])) for e in run.events if "batch" in e and e.get("rows")]
    out = []
    for n, f in enumerate(run.failures_ms):
        until = run.failures_ms[n + 1] if n + 1 < len(run.failures_ms) else float("inf")
        before, during = _executors_split(batches, f, until)
        placed = [placement[b] for ms, b in committed if f <= ms < until and b in placement]
        out.append(
            {
                "before": before,
                "lowest": min(x for _, x in during) if during else None,
                "state_on": len(set(placed[-1])) if placed else None,
            }
        )
    return out


def resumed_at(run: SystemRun) -> list[dict]:
    """Per restart of the system's process (every ``start`` its worker logged after the
    first): the last batch it logged before (``before``), the first after (``after``) and
    the seconds from the process's start to that batch's commit (``first_commit_s``). A job
    that resumed from its checkpoint goes on from there: the batch that was planned and not
    committed runs again, or the next one (or the one after, when the last commit fell
    between two of the worker's polls); one that started over would begin at batch 0."""
    out: list[dict] = []
    last, starts, started = None, 0, 0
    for e in run.events:
        if e.get("start"):
            starts += 1
            if starts > 1:
                out.append({"before": last, "after": None, "first_commit_s": None})
                started = e["ms"]
        elif "batch" in e:
            if out and out[-1]["after"] is None:
                out[-1].update(after=e["batch"], first_commit_s=(e["ms"] - started) / 1000)
            last = e["batch"]
    return out


def warmup_batch_s(run: SystemRun) -> float | None:
    """The median duration (s) of the job's batches with input that ran wholly between the
    producers' start and the first failure: how busy the job was at this rate before any
    kill. A batch longer than the trigger means the job worked without a pause (None: no
    such batch, or the system logs no batch start)."""
    until = run.failures_ms[0] if run.failures_ms else float("inf")
    spans = [
        (e["ms"] - e["start_ms"]) / 1000
        for e in run.events
        if e.get("rows") and "start_ms" in e and e["start_ms"] >= run.t0_ms and e["ms"] < until
    ]
    return float(np.median(spans)) if spans else None


def lag_table(run: SystemRun) -> pd.DataFrame:
    """Per second and partition: high watermark, committed offset, lag, at the moment of
    the second with the largest lag.

    The moments are the watermark samples (about one a second) and, for a worker that
    starts with ``reset`` (the baseline: it drops what it had committed and reads from
    the earliest offset again), the instant before its first batch: its whole history is
    lag then. A re-read can finish between two samples, so without that moment the peak
    would depend on where the sampler's ticks happen to fall.
    """
    rows = []
    committed: dict[tuple[str, int], int] = {}
    high: dict[tuple[str, int], int] = {}
    fresh = False  # a reset happened and no batch has been read since
    events = sorted(run.events, key=lambda e: e["ms"])
    i = 0
    highs = run.highs.sort_values("ms")
    for sample in highs.itertuples(index=False):
        while i < len(events) and events[i]["ms"] <= sample.ms:
            e = events[i]
            if e.get("reset"):
                committed.clear()
                fresh = True
            if fresh and "rows" in e:
                # the moment the new process starts reading: nothing committed, all is lag
                rows.extend((e["ms"], topic, p, h, 0, h) for (topic, p), h in high.items())
                fresh = False
            for topic, parts in (e.get("offsets") or {}).items():
                for p, off in parts.items():
                    committed[(topic, int(p))] = max(committed.get((topic, int(p)), 0), int(off))
            i += 1
        key = (sample.topic, int(sample.partition))
        high[key] = int(sample.high)
        done = committed.get(key, 0)
        rows.append((sample.ms, key[0], key[1], high[key], done, max(0, high[key] - done)))
    frame = pd.DataFrame(rows, columns=["ms", "topic", "partition", "high", "committed", "lag"])
    frame.insert(0, "system", run.system)
    frame["t"] = np.floor((frame["ms"] - run.t0_ms) / 1000).astype(int)
    frame = frame.sort_values(["t", "topic", "partition", "lag", "ms"])
    return frame.groupby(["t", "topic", "partition"], as_index=False).last()


def analyse(table: pd.DataFrame, failure_s: list[float], config: DetectorConfig) -> RecoveryReport:
    """The detector on one system's per-second table."""
    return detect(table, failure_s, time="t", throughput="processed_rate", latency="latency_p90_ms", lag="lag", config=config)


# ----------------------------------------------------------------------------- processes


class Supervised:
    """A worker subprocess in its own process group, started again whenever it dies
    unexpectedly; :meth:`kill` holds it down until :meth:`restart` (the operator's move)."""

    def __init__(self, name: str, argv: list[str], log: Path, *, max_crashes: int = 3, env: dict[str, str] | None = None) -> None:
        self.name, self.argv, self.log, self.env = name, argv, log, env
        self.proc: subprocess.Popen | None = None
        self.held = False
        self.done = False
        self.restarts = 0
        self.crashes = 0
        self.max_crashes = max_crashes
        self.failed: str | None = None  # set when it keeps crashing: restarting more would only hide why
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name=f"supervise-{name}", daemon=True)

    def start(self) -> None:
        with self._lock:
            with self.log.open("ab") as out:
                self.proc = subprocess.Popen(
                    self.argv,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    cwd=ROOT,
                    env=self.env,
                )
        if not self._thread.is_alive():
            self._thread.start()

    def _signal(self, sig: signal.Signals) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)  # the worker and its JVM
            except ProcessLookupError:
                pass

    def kill(self) -> None:
        with self._lock:
            self.held = True
            self._signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(30)

    def restart(self) -> None:
        self.restarts += 1
        self.start()
        self.held = False

    def pause(self) -> None:
        self._signal(signal.SIGSTOP)

    def resume(self) -> None:
        self._signal(signal.SIGCONT)

    def _watch(self) -> None:
        while not self._stop.wait(0.5):
            with self._lock:
                proc = self.proc
            if proc is None or proc.poll() is None or self.held:
                continue
            if proc.returncode == 0:
                self.done = True
                return
            if proc.returncode == REFUSED:
                self.failed = f"the {self.name} worker refused to start the run (exit code {REFUSED}); see {self.log}"
                return
            self.crashes += 1
            if self.crashes > self.max_crashes:
                self.failed = (
                    f"the {self.name} worker crashed {self.crashes} times (last exit code {proc.returncode}); see {self.log}"
                )
                say(f"  {self.failed}")
                return
            say(f"  {self.name} exited with code {proc.returncode}; the supervisor starts it again")
            self.start()

    def wait(self, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while not self.done and self.failed is None and time.monotonic() < deadline:
            time.sleep(0.5)
        return self.done

    def stop(self) -> None:
        self._stop.set()
        self.held = True
        self._signal(signal.SIGCONT)
        self._signal(signal.SIGKILL)


class WatermarkSampler(threading.Thread):
    """Samples every partition's high watermark once a second (a failed sample is skipped:
    the broker may be the one that is down)."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        super().__init__(name="watermarks", daemon=True)
        self.bootstrap, self.prefix = bootstrap, prefix
        self.rows: list[tuple[int, str, int, int]] = []
        self._halt = threading.Event()  # not _stop: threading.Thread has a method of that name

    def run(self) -> None:
        from producers.kafka import end_offsets

        while not self._halt.is_set():
            started = time.monotonic()
            try:
                ms = int(time.time() * 1000)
                self.rows += [(ms, t, p, h) for (t, p), h in end_offsets(self.bootstrap, self.prefix, timeout_s=2.0).items()]
            except Exception:  # noqa: BLE001 - a down broker is part of the experiment
                pass
            self._halt.wait(max(0.0, 1.0 - (time.monotonic() - started)))

    def stop(self) -> pd.DataFrame:
        self._halt.set()
        self.join(10)
        return pd.DataFrame(self.rows, columns=["ms", "topic", "partition", "high"])


def _append(path: Path, entry: dict) -> None:
    with path.open("a") as fh:
        fh.write(json.dumps(entry) + "\n")
        fh.flush()


def _read_events(path: Path) -> list[dict]:
    """The worker's log lines; a line cut short by a SIGKILL is skipped."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def _read_visible(path: Path) -> pd.DataFrame:
    """The baseline's (topic, partition, offset, visible_ms) lines; a line cut short by a SIGKILL is dropped."""
    frame = pd.read_csv(path, names=["topic", "partition", "offset", "visible_ms"], on_bad_lines="skip")
    for col in ("partition", "offset", "visible_ms"):
        frame[col] = pd.to_numeric(frame[col], errors="coerce")
    frame = frame.dropna()
    return frame[frame["visible_ms"] >= 1e12].astype({"partition": "int64", "offset": "int64", "visible_ms": "int64"})


def _stop_request(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (FileNotFoundError, ValueError):
        return None


# ----------------------------------------------------------------------------- workers


def job_worker(args) -> int:
    """The job in its own process: starts (or resumes from its checkpoint), logs every
    committed batch to ``--events``, and once ``--stop`` names the ledger, drains, verifies
    the lake and writes the verdict to ``--verdict``."""
    from job.spark import pipeline
    from job.spark.driver_rest import stateful_executors
    from job.verify.lake_check import verify_lake
    from sandbox import Settings
    from sandbox.jvm.spark_session import spark_session

    events, stop = Path(args.events), Path(args.stop)
    first = not any(e.get("start") for e in _read_events(events))
    _append(events, {"ms": int(time.time() * 1000), "start": True, "pid": os.getpid()})
    settings = Settings.from_env()
    bootstrap = settings.endpoints().kafka_bootstrap
    # A worker has 2 GiB: executors of 1100 MiB fit one per worker, like one pod per node, so
    # a killed worker's executor comes back on that worker once it restarts instead of
    # doubling up on the survivor (where the next kill would take both).
    spark = spark_session(settings, "recovery-bench", extra={"spark.executor.memory": EXECUTOR_MEMORY})
    cfg = job_config(settings, args.name, args.prefix, trigger=args.trigger)
    if first and (error := wait_for_executors(settings, spark)):
        _append(events, {"ms": int(time.time() * 1000), "error": error})
        spark.stop()
        return REFUSED
    if first:
        # The first stateful batch of a fresh application starts Python workers and state
        # stores (tens of seconds on 2 cores); prime them on other topics, outside the series.
        prime = "prime-" + args.prefix
        ledger = produce(settings, events.parent, prime, seed=1, messages=400)
        run_job_backlog(spark, settings, cfg.operator, prime, ledger, max_offsets=5000, tag=f"{args.name}-prime", verify=False)
        if args.measure:
            measure = "cap-" + args.prefix
            ledger = produce(settings, events.parent, measure, seed=2, messages=args.measure)
            cap = run_job_backlog(
                spark, settings, cfg.operator, measure, ledger, max_offsets=CAPACITY_CAP, tag=f"{args.name}-cap", verify=False
            )
            if not cap.steady_per_s:
                print(f"job worker: the capacity run made {cap.batches} batch(es); it needs two", file=sys.stderr)
                return 1
            _append(
                events,
                {
                    "ms": int(time.time() * 1000),
                    "capacity": cap.steady_per_s,
                    "capacity_records": cap.steady_records,
                    "capacity_batches": cap.batches - 1,
                },
            )
    queries = pipeline.start(spark, cfg, bootstrap=bootstrap)
    seen: set[int] = set()

    def record() -> None:
        for p in queries[0].recentProgress:
            if p["batchId"] in seen:
                continue
            seen.add(p["batchId"])
            started = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp() * 1000
            _append(
                events,
                {
                    "ms": int(started + p["durationMs"].get("triggerExecution", 0)),
                    "start_ms": int(started),
                    "batch": p["batchId"],
                    "rows": int(p["numInputRows"]),
                    "offsets": reached(p),
                    "executors": pipeline.executor_count(queries[0]),
                },
            )

    while (request := _stop_request(stop)) is None:
        if queries[0].exception() is not None:
            print(f"job worker: the query failed: {queries[0].exception()}", file=sys.stderr)
            return 1
        record()
        queries[0].awaitTermination(0.25)
    pipeline.drain(queries, bootstrap=bootstrap, topic_prefix=args.prefix, timeout_s=900, progress=print)
    record()
    # where each batch's state partitions ran (the UI forgets a killed driver's batches)
    placed = stateful_executors(spark, queries[0].name, str(queries[0].id))
    _append(events, {"ms": int(time.time() * 1000), "placement": {str(b): ids for b, ids in sorted(placed.items())}})
    report = verify_lake(spark, ledger=request["ledger"], lake=cfg.output, policy=cfg.policy)
    Path(args.verdict).write_text(json.dumps({"ok": bool(report.ok), "summary": report.summary(), "sink_path": cfg.sink_path}))
    spark.stop()
    return 0


def wait_for_executors(settings, spark, *, timeout_s: float = 120.0) -> str | None:
    """Wait until the application has an executor on every ALIVE worker: the capacity is measured
    on all of them, and the worker kill must leave the job a survivor. Counting is enough, as
    only one executor of EXECUTOR_MEMORY fits on a worker. None when it has; else what the
    master shows, after ``timeout_s``."""
    from sandbox.checks.health import alive_workers, spark_master_status

    deadline, status, want, have = time.monotonic() + timeout_s, None, None, 0
    while True:
        try:
            status = spark_master_status(settings)
        except (OSError, ValueError) as exc:  # a master that does not answer for a moment: ask again until the deadline
            status, want = {"error": str(exc)}, None
        else:
            want = len(alive_workers(status))
        have = int(spark.sparkContext._jsc.sc().getExecutorIds().size())  # noqa: SLF001
        if want is not None and have >= want:
            return None
        if time.monotonic() > deadline:
            seen = (
                f"the master at {settings.endpoints().spark_master_ui} did not answer: {status['error']}"
                if want is None
                else f"the cluster has {want} alive worker(s), each with room for one: {describe_cluster(status)}"
            )
            return f"the job's application has {have} executor(s) after {timeout_s:.0f} s; {seen}"
        time.sleep(1.0)


def baseline_worker(args) -> int:
    """The baseline in its own process: reads from the earliest offset (it keeps no
    checkpoint), logs every batch and when its records became visible; once ``--stop``
    names the ledger (the producers are done), reads up to the topics' end offsets of that
    moment and verifies its outputs."""
    from job.baseline import BaselineConfig, end_offsets, run_baseline
    from job.verify.compare import check
    from producers.ledger import read_ledger
    from sandbox import Settings

    events, stop, visible = Path(args.events), Path(args.stop), Path(args.visible)
    _append(events, {"ms": int(time.time() * 1000), "start": True, "reset": True, "pid": os.getpid()})
    settings = Settings.from_env()

    ends: dict = {}

    def after_stop() -> dict | None:  # the end offsets, once the producers are done
        if not ends and _stop_request(stop) is not None:
            ends.update(end_offsets(settings.endpoints().kafka_bootstrap, args.prefix))
        return ends or None

    def on_batch(records) -> None:
        now = int(time.time() * 1000)
        offsets: dict[str, dict[str, int]] = {}
        lines = []
        for r in records:
            lines.append(f"{r.topic},{r.partition},{r.offset},{now}\n")
            part = offsets.setdefault(r.topic, {})
            part[str(r.partition)] = max(part.get(str(r.partition), 0), r.offset + 1)
        with visible.open("a") as fh:  # one write per batch: a kill cuts at most its last line
            fh.write("".join(lines))
        _append(events, {"ms": now, "rows": len(records), "offsets": offsets})

    while True:
        config = BaselineConfig(bootstrap=settings.endpoints().kafka_bootstrap, topic_prefix=args.prefix, idle_s=args.idle)
        result = run_baseline(config, on_batch=on_batch, end_offsets_later=after_stop)
        request = _stop_request(stop)
        if request is not None:
            break
        # idle before the producers finished (a long broker outage): keep consuming, from scratch
        _append(events, {"ms": int(time.time() * 1000), "start": True, "reset": True, "pid": os.getpid()})
    report = check(read_ledger(request["ledger"]), result.rows, result.quarantine, result.sessions, policy="resync")
    Path(args.verdict).write_text(json.dumps({"ok": bool(report.ok), "summary": report.summary()}))
    return 0


# ----------------------------------------------------------------------------- one run


def run_system(
    system: str,
    schedule: Schedule,
    *,
    settings,
    sandbox,
    work: Path,
    prefix: str,
    seed: int,
    trigger: str,
    idle_s: float,
    measure: int = 0,
    detector: DetectorConfig | None = None,
) -> SystemRun:
    """Start ``system``'s worker, produce while failures are injected (for the schedule's
    duration, or until the last failure recovered), stop the worker, and collect the observations."""
    files = {k: work / f"{system}-{k}" for k in ("events.jsonl", "stop.json", "verdict.json", "visible.csv", "worker.log")}
    for path in files.values():
        path.unlink(missing_ok=True)
    script = str(Path(__file__).resolve())
    common = [
        "--prefix",
        prefix,
        "--events",
        str(files["events.jsonl"]),
        "--stop",
        str(files["stop.json"]),
        "--verdict",
        str(files["verdict.json"]),
    ]
    if system == "job":
        argv = [
            sys.executable,
            script,
            "job-worker",
            *common,
            "--name",
            f"recovery-{prefix.strip('-')}",
            "--trigger",
            trigger,
            "--measure",
            str(measure),
        ]
    else:
        argv = [sys.executable, script, "baseline-worker", *common, "--visible", str(files["visible.csv"]), "--idle", str(idle_s)]
    # the worker runs on the caller's sandbox, whatever the environment would default to
    env = {
        **os.environ,
        "OSL_STATE_DIR": str(settings.state_dir),
        "OSL_PORT_OFFSET": str(settings.ports.offset),
        "OSL_BACKEND": settings.backend,
    }
    worker = Supervised(system, argv, files["worker.log"], env=env)
    if system == "job":
        wait_for_idle_cluster(settings)
    say(f"{system}: starting the worker (log {shown(files['worker.log'])})")
    worker.start()
    try:
        return _drive(
            system,
            schedule,
            worker,
            files,
            settings=settings,
            sandbox=sandbox,
            work=work,
            prefix=prefix,
            seed=seed,
            detector=detector or detector_for(trigger),
        )
    finally:
        worker.stop()  # whatever happened, no worker outlives the run


def _drive(
    system: str,
    schedule: Schedule,
    worker: Supervised,
    files: dict[str, Path],
    *,
    settings,
    sandbox,
    work: Path,
    prefix: str,
    seed: int,
    detector: DetectorConfig,
) -> SystemRun:
    deadline = time.monotonic() + 300
    if system == "job":  # producing before the query is up would bill the application's start to the warm-up
        while not any("batch" in e for e in _read_events(files["events.jsonl"])):
            if time.monotonic() > deadline or worker.failed:
                worker.stop()
                raise RuntimeError(worker.failed or f"the job worker made no progress in 300 s; see {files['worker.log']}")
            if error := next((e["error"] for e in _read_events(files["events.jsonl"]) if "error" in e), None):
                worker.stop()
                raise RuntimeError(error)
            time.sleep(1.0)
    capacity = next((e for e in _read_events(files["events.jsonl"]) if "capacity" in e), None)
    rate = schedule.rate
    if schedule.load is not None and system == "job":  # the systems after it get the rate it gave (bench)
        if capacity is None:
            raise RuntimeError(
                f"a load of {schedule.load:.0%} needs the job's capacity, and its worker measured none; see {files['worker.log']}"
            )
        rate = round(schedule.load * capacity["capacity"])
        say(
            f"{system}: capacity {capacity['capacity']:,.0f} records/s ({capacity['capacity_records']:,} records in "
            f"{capacity['capacity_batches']} batches of at most {CAPACITY_CAP:,}); input at {schedule.load:.0%} of it: {rate} msg/s"
        )
    sampler = WatermarkSampler(settings.endpoints().kafka_bootstrap, prefix)
    ledger: dict[str, str] = {}
    enough = threading.Event()  # set: the producers end now (after_recovery, or an error), not at their deadline
    # after_recovery: the waits' bounds end the run; the producers' own deadline is only a backstop past them
    backstop = schedule.duration_s + (60.0 if schedule.after_recovery else 0.0)
    producer = threading.Thread(
        target=lambda: ledger.update(path=produce(settings, work, prefix, seed=seed, rate=rate, duration=backstop, stop=enough)),
        name="producers",
        daemon=True,
    )
    t0_ms = int(time.time() * 1000)
    producer.start()
    sampler.start()
    try:
        hit_cores: list[int | None] = []
        failures_ms, undone_ms, ledger_path, ended_ms = _schedule(
            system,
            schedule,
            rate,
            worker,
            sandbox,
            producer,
            ledger,
            t0_ms,
            hit_cores,
            recovered=lambda failures_ms: _recovered_live(files["events.jsonl"], t0_ms, failures_ms, detector),
            enough=enough,
        )
        duration_s = (ended_ms - t0_ms) / 1000 if ended_ms else schedule.duration_s
        _append(files["stop.json"], {"ledger": ledger_path})
        say(f"{system}: producers done; draining and verifying")
        finished = worker.wait(1200)
    finally:
        enough.set()  # on an error too: no producers go on sending in the background
        highs = sampler.stop()
    if not finished:
        raise RuntimeError(worker.failed or f"the {system} worker did not finish within 20 minutes; see {files['worker.log']}")
    verdict = json.loads(files["verdict.json"].read_text())
    visible = sink_visibility(settings, verdict["sink_path"]) if system == "job" else _read_visible(files["visible.csv"])
    return SystemRun(
        system=system,
        t0_ms=t0_ms,
        failures_ms=failures_ms,
        ledger=ledger_path,
        events=_read_events(files["events.jsonl"]),
        highs=highs,
        visible=visible,
        verdict=verdict,
        rate=rate,
        capacity=capacity,
        undone_ms=undone_ms,
        hit_cores=hit_cores,
        restarts=worker.restarts,
        crashes=worker.crashes,
        labels=[failure_label(system, schedule, i) for i in range(schedule.failures)],
        duration_s=duration_s,
    )


def _schedule(
    system: str,
    schedule: Schedule,
    rate: float,
    worker: Supervised,
    sandbox,
    producer: threading.Thread,
    ledger: dict[str, str],
    t0_ms: int,
    hit_cores: list[int | None],
    *,
    recovered: Callable[[list[int]], bool],
    enough: threading.Event,
) -> tuple[list[int], list[int], str, int | None]:
    """Inject the failures while the producers run: on time, or with ``after_recovery``
    each once ``recovered(failures_ms)`` says the previous one is over (at the latest ``interval_s``
    after it), the producers told to stop (``enough``) once the last one is. Return when
    each failure was injected and undone, the ledger, and when the producers were told to
    stop (None: they ran to their deadline). ``hit_cores`` gets, per failure,
    the executor cores the master counted on a killed Spark worker the instant before the
    kill (None: no worker)."""
    labels = [failure_label(system, schedule, i) for i in range(schedule.failures)]
    what = labels[0] if len(set(labels)) == 1 else " / ".join(dict.fromkeys(labels))
    if schedule.after_recovery:
        say(
            f"{system}: producing {rate:.0f} msg/s; {schedule.failures} x {what} from {schedule.warmup_s:.0f}s, each next "
            f"one (and the end) once the previous has recovered, at most {schedule.interval_s:.0f}s after it"
        )
    else:
        say(
            f"{system}: producing {rate:.0f} msg/s for {schedule.duration_s:.0f}s; "
            f"{schedule.failures} x {what} every {schedule.interval_s:.0f}s from {schedule.warmup_s:.0f}s"
        )
    failures_ms: list[int] = []
    undone_ms: list[int] = []

    def producing(n: int) -> None:
        if not producer.is_alive():
            raise RuntimeError(
                f"{system}: the producers stopped before failure {n} was due (at t={time.time() - t0_ms / 1000:.0f}s); "
                "see the producers' messages above"
            )

    def wait_for_recovery(n: int) -> None:
        """After failure ``n`` (from 1): return once it recovered or ``interval_s`` after it."""
        bound = failures_ms[-1] / 1000 + schedule.interval_s
        while time.time() < bound:
            producing(n + 1)
            if recovered(failures_ms):
                say(f"  failure {n}: recovered at t={time.time() - t0_ms / 1000:.0f}s (throughput back in its band)")
                return
            if worker.failed:
                raise RuntimeError(f"{system}: {worker.failed}")
            time.sleep(1.0)  # a poll of the worker's log; the bound above is the deadline
        say(f"  failure {n}: no recovery within {schedule.interval_s:.0f}s of it; going on (the report will say which)")

    for n, at in enumerate(schedule.times(), 1):
        if schedule.after_recovery and n > 1:
            wait_for_recovery(n - 1)
        else:
            time.sleep(max(0.0, t0_ms / 1000 + at - time.time()))
        producing(n)
        service, target = None, schedule.target_at(n - 1)
        if not _own_process(system, target) and target.startswith("spark-worker"):
            cores = worker_cores(sandbox.settings)  # the master's view, the instant before the kill
            service = busiest_worker(sandbox.settings, cores) if target == "spark-worker" else target
        hit_cores.append(cores.get(service, 0) if service else None)
        failures_ms.append(int(time.time() * 1000))
        undo = inject(system, schedule, sandbox, worker, service, n - 1)
        say(f"  failure {n}: {labels[n - 1]} at t={(failures_ms[-1] - t0_ms) / 1000:.0f}s")
        time.sleep(schedule.down_s)
        undo()
        undone_ms.append(int(time.time() * 1000))
        say(f"  failure {n}: undone at t={(time.time() * 1000 - t0_ms) / 1000:.0f}s")
    ended_ms = None
    if schedule.after_recovery:
        wait_for_recovery(schedule.failures)
        ended_ms = int(time.time() * 1000)
        enough.set()
    producer.join()
    if "path" not in ledger:
        raise RuntimeError("the producers stopped without a ledger; see the messages above")
    return failures_ms, undone_ms, ledger["path"], ended_ms


def _recovered_live(events: Path, t0_ms: int, failures_ms: list[int], config: DetectorConfig) -> bool:
    """Whether the last failure so far is over, on what the worker has logged: its throughput
    over the seconds before its last logged batch (which later batches cannot change: one
    query's batches run one after the other), counted as :func:`per_second` counts them, back
    in its band for the hold plus one smoothing window; and, for a system that logs its
    executors, as many as at the last batch before the failure, the hold counted only from the
    first batch on them (a replacement executor's first stateful batch comes later and is slow).

    The extra window is the latency's margin: latency is judged only afterwards (it needs the
    outputs), by the records' production second, and the records of the seconds just before
    the next failure wait through it; their p90 must not fall inside this failure's hold."""
    batches = [e for e in _read_events(events) if "rows" in e]
    if not batches or not failures_ms:
        return False
    n = math.floor((max(e["ms"] for e in batches) - t0_ms) / 1000)
    if n <= 0:
        return False
    counts = _executor_counts(batches)
    before, since = _executors_split(counts, failures_ms[-1])
    if before is not None and (not since or since[-1][1] < before):
        return False  # no batch since the failure, or its replacement executor has not joined yet (state load to come)
    # whole again from the first batch on as many executors as before: the calm must come after
    # it, as a later batch moves a state partition to the new executor and loads it there
    back = [ms for ms, x in since if x >= before] if before is not None else []
    failures = [(ms - t0_ms) / 1000 for ms in failures_ms]
    margin = replace(config, hold_s=config.hold_s + config.smooth_s)
    calm_after = (back[0] - t0_ms) / 1000 if back else None
    return recovered_so_far(np.arange(n), spread_rows(batches, t0_ms, n), failures, margin, calm_after=calm_after)


def worker_cores(settings) -> dict[str, int]:
    """Executor cores in use now on each ALIVE Spark worker (``spark-worker-N``), from the
    master's JSON status; a worker that is down is absent."""
    from urllib.parse import urlparse

    status = master_status(settings)
    ports = [urlparse(u).port for u in settings.endpoints().spark_worker_uis]
    used = {urlparse(w["webuiaddress"]).port: w["coresused"] for w in status["workers"] if w["state"] == "ALIVE"}
    return {f"spark-worker-{i + 1}": used[port] for i, port in enumerate(ports) if port in used}


def master_status(settings) -> dict:
    """The Spark master's JSON status, or an error that names the master and the fix."""
    from sandbox.checks.health import spark_master_status

    try:
        return spark_master_status(settings)
    except (OSError, ValueError) as exc:
        raise RuntimeError(
            f"the Spark master at {settings.endpoints().spark_master_ui} did not answer ({exc}); is the sandbox up? "
            "`python -m sandbox status` shows it, `python -m sandbox up` starts it"
        ) from exc


def _own_application() -> str | None:
    """The Spark application this process drives, if it runs one (a notebook's kernel may)."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    active = SparkContext._active_spark_context  # noqa: SLF001 - no public "is one running?"
    return active.applicationId if active is not None else None


def describe_cluster(status: dict) -> str:
    """The master's view in one line: each worker's state and use, each running application."""
    workers = ", ".join(
        f"worker {w.get('host')}:{w.get('port')} {w.get('state')} ({w.get('coresused')}/{w.get('cores')} cores, "
        f"{w.get('memoryused')}/{w.get('memory')} MiB used)"
        for w in status.get("workers", [])
    )
    apps = ", ".join(f"{a.get('id')} '{a.get('name')}' ({a.get('cores')} cores)" for a in status.get("activeapps", []))
    return f"{workers or 'no workers'}; running applications: {apps or 'none'}"


def wait_for_idle_cluster(settings, *, timeout_s: float = 120.0, poll_s: float = 1.0) -> None:
    """Wait until the Spark master runs no application but this process's own. The bench
    measures the job's capacity and kills the worker with its executors: an application left
    running elsewhere holds a worker's memory, so the job gets one executor instead of one
    per worker and both figures are wrong. Fails after ``timeout_s``, naming what runs."""
    own, deadline = _own_application(), time.monotonic() + timeout_s
    while True:
        status = master_status(settings)
        others = [a for a in status.get("activeapps", []) if a.get("id") != own]
        if not others:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"the recovery bench needs the Spark cluster to itself, and after {timeout_s:.0f} s other applications still run "
                f"on {settings.endpoints().spark_master_ui}: {describe_cluster(status)}. Stop them (a notebook's kernel holds its "
                "session until it is shut down; a job started elsewhere holds its executors until it is stopped) and run again"
            )
        time.sleep(poll_s)


def busiest_worker(settings, cores: dict[str, int] | None = None) -> str:
    """The Spark worker running the most executor cores (ties: the lowest number), from
    ``cores`` (:func:`worker_cores` now when None). An application does not always get an
    executor on every worker (one started while a worker was still busy may not), so a
    fixed worker may hold none of the job's executors."""
    cores = worker_cores(settings) if cores is None else cores
    names = [f"spark-worker-{i + 1}" for i in range(len(settings.endpoints().spark_worker_uis))]
    return max(names, key=lambda n: (cores.get(n, -1), -names.index(n)))


def _own_process(system: str, target: str) -> bool:
    # the baseline has no Spark: a Spark target means its one process
    return target in PROCESS_TARGETS or (system == "baseline" and target.startswith("spark-"))


def failure_label(system: str, schedule: Schedule, i: int = 0) -> str:
    """What failure ``i`` does to ``system``, in words: the log and the report say this, not
    the schedule's target, which the baseline does not have."""
    target = schedule.target_at(i)
    if _own_process(system, target):
        restart = ", restarted by its supervisor" if schedule.action == "kill" else ""
        return f"{schedule.action} the {system}'s process{restart}"
    return f"{schedule.action} {target}"


def inject(
    system: str, schedule: Schedule, sandbox, worker: Supervised, service: str | None = None, i: int = 0
) -> Callable[[], None]:
    """Break failure ``i``'s target now; return what brings it back. A Spark target means the
    baseline's one process when the baseline runs; ``driver`` the job's process; a sandbox
    service otherwise: ``service`` when the caller has chosen one (for ``spark-worker``, the
    worker :func:`busiest_worker` names), else the target."""
    target = schedule.target_at(i)
    if _own_process(system, target):
        if schedule.action == "kill":
            worker.kill()
            return worker.restart
        worker.pause()
        return worker.resume
    service = service or target
    if service != target:
        say(f"  the busiest worker is {service}")
    if schedule.action == "kill":
        sandbox.kill(service)
        return lambda: sandbox.restart(service)
    sandbox.pause(service)
    return lambda: sandbox.resume(service)


# ----------------------------------------------------------------------------- report


def plot_series(path: Path, tables: dict[str, pd.DataFrame], reports: dict[str, RecoveryReport]) -> Path | None:
    """Throughput, p90 latency and lag against time, one column per system, failures in red,
    detected recoveries (throughput) as green dotted lines."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(3, len(tables), figsize=(6 * len(tables), 8), sharex=True, squeeze=False)
    for col, (system, table) in enumerate(tables.items()):
        ax = axes[:, col]
        ax[0].plot(table["t"], table["input_rate"], color="0.6", lw=1, label="input")
        smooth = reports[system].config.smooth_s  # what the detector compared
        ax[0].plot(
            table["t"], table["processed_rate"].rolling(smooth, min_periods=1).mean(), lw=1.2, label=f"processed ({smooth} s avg)"
        )
        ax[0].set_ylabel("records/s")
        ax[0].set_title(system)
        ax[1].plot(table["t"], table["latency_p90_ms"] / 1000, lw=1.2, label="p90")
        ax[1].plot(table["t"], table["latency_p50_ms"] / 1000, lw=1, color="0.5", label="p50")
        ax[1].set_ylabel("latency (s)")
        ax[2].plot(table["t"], table["lag"], lw=1.2)
        ax[2].set_ylabel("consumer lag (records)")
        ax[2].set_xlabel("seconds since producers started")
        for a in ax:
            for f in reports[system].failures:
                a.axvline(f.failure_s, color="red", lw=1)
            a.grid(alpha=0.3)
        for f in reports[system].failures:
            for a, m in ((ax[0], f.throughput), (ax[1], f.latency)):
                if m.recovery_s is not None:
                    a.axvline(m.recovery_s, color="green", lw=1, ls=":")
        ax[0].legend(fontsize="small")
        ax[1].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def plot_recovery_times(path: Path, reports: dict[str, RecoveryReport]) -> Path | None:
    """Recovery time per failure, throughput and p90 latency, systems side by side (a
    failure that never recovered is drawn as a hatched bar up to the next failure)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8), sharey=True)
    width = 0.8 / len(reports)
    for ax, metric in zip(axes, ("throughput", "latency")):
        for k, (system, report) in enumerate(reports.items()):
            xs = np.arange(1, len(report.failures) + 1) + (k - (len(reports) - 1) / 2) * width
            for x, f in zip(xs, report.failures):
                m = getattr(f, metric)
                height = m.recovery_time_s if m.recovered else f.horizon_s - f.failure_s
                ax.bar(
                    x, height, width, color=f"C{k}", hatch=None if m.recovered else "//", label=system if f.index == 1 else None
                )
        ax.set_title(f"{'p90 latency' if metric == 'latency' else metric} recovery time")
        ax.set_xlabel("failure")
        ax.set_xticks(range(1, max(len(r.failures) for r in reports.values()) + 1))
        ax.grid(axis="y", alpha=0.3)
    axes[0].set_ylabel("seconds after the failure")
    axes[0].legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def fmt_s(value: float | None) -> str:
    return "never" if value is None else f"{value:.0f}s"


def job_capacity(runs: dict[str, SystemRun]) -> dict | None:
    """The job's capacity measurement of this run, if the job ran."""
    return runs["job"].capacity if "job" in runs else None


def like_for_like(schedules: Mapping[str, Schedule], reports: dict[str, RecoveryReport]) -> list[dict]:
    """The failures every system took alike: at the same time, each system's own process
    killed (or paused) and brought back by its supervisor. Per such failure, each system's
    recovery times and the job's over the baseline's. A worker kill and a process kill are
    different faults: no ratio is drawn between them."""
    if not set(SYSTEMS) <= set(reports):
        return []
    out = []
    for i, at in enumerate(schedules["job"].fixed_times()):
        j = next((k for k, t in enumerate(schedules["baseline"].fixed_times()) if t == at), None)
        if j is None or not (
            _own_process("job", schedules["job"].target_at(i)) and _own_process("baseline", schedules["baseline"].target_at(j))
        ):
            continue
        if i >= len(reports["job"].failures) or j >= len(reports["baseline"].failures):
            continue
        entry: dict[str, Any] = {
            "at_s": at,
            "labels": {s: failure_label(s, schedules[s], k) for s, k in (("job", i), ("baseline", j))},
        }
        for metric in ("throughput", "latency"):
            job, base = (getattr(reports[s].failures[k], metric).recovery_time_s for s, k in (("job", i), ("baseline", j)))
            entry[metric] = {"job": job, "baseline": base, "ratio": job / base if job is not None and base else None}
        out.append(entry)
    return out


def print_report(schedules: Mapping[str, Schedule], reports: dict[str, RecoveryReport], runs: dict[str, SystemRun]) -> None:
    first = schedules[next(iter(reports))]
    spacing = (
        f"each after the previous recovered (at most {first.interval_s:.0f}s)"
        if first.after_recovery
        else f"every {first.interval_s:.0f}s"
    )
    print(
        f"\nrecovery benchmark: failures {spacing} (back after {first.down_s:.0f}s), "
        f"{first.rate:.0f} msg/s, warm-up {first.warmup_s:.0f}s"
    )
    for system, report in reports.items():
        sc = schedules[system]
        print(
            f"  {system}: "
            + ", ".join(f"{failure_label(system, sc, f.index - 1)} at {f.failure_s:.0f}s" for f in report.failures)
        )
    if (capacity := job_capacity(runs)) is not None:
        print(f"  the job's capacity: {capacity['capacity']:,.0f} records/s; input {first.rate / capacity['capacity']:.0%} of it")
    print(
        f"  {'':<10}{'failure':>8}{'at':>6}{'thr impact':>11}{'thr recov':>10}{'p90 impact':>11}{'p90 recov':>10}{'lag peak':>10}"
    )
    for system, report in reports.items():
        for f in report.failures:
            imp = lambda m: "-" if m.impact_s is None else f"+{m.impact_s - f.failure_s:.0f}s"  # noqa: E731
            peak = "-" if f.lag_peak is None else f"{f.lag_peak:.0f}"
            print(
                f"  {system:<10}{f.index:>8}{f.failure_s:>5.0f}s{imp(f.throughput):>11}{fmt_s(f.throughput.recovery_time_s):>10}"
                f"{imp(f.latency):>11}{fmt_s(f.latency.recovery_time_s):>10}{peak:>10}"
            )
    for system, report in reports.items():
        run = runs[system]
        print(
            f"  {system}: {report.verdict}; restarts after kills {run.restarts}, after crashes {run.crashes}; "
            f"verifier: {'clean' if run.verdict.get('ok') else 'NOT CLEAN'} ({run.verdict.get('summary', '').splitlines()[0]})"
        )
        around = executors_around(run)
        if system == "job" and any(e["state_on"] for e in around):
            print(
                f"  job: executors that ran the state partitions in the last batch before each next failure (or the end): "
                f"{[e['state_on'] for e in around]} (1: both on one executor, one after the other)"
            )
    if not set(SYSTEMS) <= set(reports):
        return
    pairs = like_for_like(schedules, reports)
    for pair in pairs:
        print(f"  like for like at {pair['at_s']:.0f}s (each system's process killed, restarted by its supervisor):")
        for metric in ("throughput", "latency"):
            x = pair[metric]
            ratio = "-" if x["ratio"] is None else f"{x['ratio']:.2f}x"
            print(f"    {metric} recovery: job {fmt_s(x['job'])}, baseline {fmt_s(x['baseline'])} (job/baseline {ratio})")
    if not pairs:
        print(
            "  the systems took different faults at each failure: their recovery times are not compared; "
            "--target driver kills each system's process, restarted by its supervisor"
        )


def mixed(report: RecoveryReport, labels: list[str]) -> RecoveryReport:
    """``report`` with no stability verdict when its failures were of different kinds: a
    trend across a worker kill and a driver kill would compare two different faults."""
    if len(set(labels)) <= 1 or len(report.failures) < 2:
        return report
    done = "every failure recovered" if report.all_recovered else "not every failure recovered"
    return replace(
        report,
        stable=None,
        verdict=f"{done}; the failures were of different kinds ({', '.join(dict.fromkeys(labels))}), "
        "so no trend is read from them",
    )


def bench(
    schedule: Schedule | Mapping[str, Schedule],
    *,
    systems: tuple[str, ...] | None = None,
    trigger: str = "1 second",
    seed: int = 21,
    detector: DetectorConfig | None = None,
    idle_s: float | None = None,
    out: Path = RESULTS,
    settings: Settings | None = None,
) -> dict:
    """Run the schedule on each system, write the tables, plots and summary; return the summary
    (with ``reports``: the detector's :class:`~job.drills.recovery.RecoveryReport` per system and
    ``tables``: the per-second tables). ``schedule`` may be one per system (``{"job": ...,
    "baseline": ...}``, run in that order): the failures both take at the same time, each
    system's process killed, are compared (:func:`like_for_like`). ``settings``: the sandbox to
    run on (a chapter passes its own); by default the one the environment names."""
    from producers.runner import new_run_id
    from sandbox import open_sandbox

    if isinstance(schedule, Mapping):
        schedules, systems = dict(schedule), tuple(systems or schedule)
    else:
        systems = systems or SYSTEMS
        schedules = {s: schedule for s in systems}
    if any(schedules[s].load is not None for s in systems) and systems[0] != "job":
        raise SystemExit(
            f"a load of {next(schedules[s].load for s in systems if schedules[s].load is not None):.0%} is a fraction of the job's "
            "capacity: run the job first (--systems job,...), or give --rate"
        )
    settings = settings or Settings.from_env()
    sb = open_sandbox(settings)
    say(f"sandbox: {shown(settings.state_dir)} (ports +{settings.ports.offset})")
    sb.up()
    for target in {t for s in systems for t in (schedules[s].targets or (schedules[s].target,))}:
        if target not in (*PROCESS_TARGETS, "spark-worker") and target not in sb.services():
            raise SystemExit(f"--target {target!r}: use driver, spark-worker (the busiest) or one of {', '.join(sb.services())}")
    run_id = new_run_id()
    work = out / f"recovery-{run_id}"
    work.mkdir(parents=True, exist_ok=True)
    cfg = detector or detector_for(trigger)  # the latency band at least one trigger interval wide
    runs, tables, lags, reports = {}, {}, [], {}
    for system in systems:
        sc = schedules[system]
        targets = sc.targets or (sc.target,)
        idle = idle_s or max(30.0, sc.down_s + (60.0 if "kafka" in targets else 20.0))
        prefix = f"rec-{run_id}-{system[0]}-"
        measure = CAPACITY_RECORDS if system == "job" and sc.load is not None else 0
        runs[system] = run_system(
            system,
            sc,
            settings=settings,
            sandbox=sb,
            work=work,
            prefix=prefix,
            seed=seed,
            trigger=trigger,
            idle_s=idle,
            measure=measure,
            detector=cfg,
        )
        if measure:  # the systems after the job get the rate its capacity gave
            schedules = {s: replace(x, rate=runs[system].rate) for s, x in schedules.items()}
        tables[system], lag = per_second(runs[system], runs[system].duration_s)
        lags.append(lag)
        failure_s = [(ms - runs[system].t0_ms) / 1000 for ms in runs[system].failures_ms]
        reports[system] = mixed(analyse(tables[system], failure_s, cfg), runs[system].labels)
    table = pd.concat(tables.values(), ignore_index=True)
    files = {
        "table": out / f"recovery-{run_id}.csv",
        "lag": out / f"recovery-{run_id}-lag.csv",
        "summary": out / f"recovery-{run_id}.json",
    }
    table.to_csv(files["table"], index=False)
    pd.concat(lags, ignore_index=True).to_csv(files["lag"], index=False)
    if png := plot_series(out / f"recovery-{run_id}-series.png", tables, reports):
        files["series_plot"] = png
    if png := plot_recovery_times(out / f"recovery-{run_id}-recovery.png", reports):
        files["recovery_plot"] = png
    summary = {
        "run": run_id,
        "schedule": asdict(schedules[systems[0]]),
        "schedules": {s: asdict(schedules[s]) for s in systems},
        "trigger": trigger,
        "seed": seed,
        "cores": os.cpu_count(),
        "capacity": job_capacity(runs),
        "systems": {
            s: {
                "detector": reports[s].as_dict(),
                "verifier": runs[s].verdict,
                "restarts": runs[s].restarts,
                "crashes": runs[s].crashes,
                "failures_s": [f.failure_s for f in reports[s].failures],
                "duration_s": runs[s].duration_s,
                "labels": runs[s].labels,
                "undone_s": [(ms - runs[s].t0_ms) / 1000 for ms in runs[s].undone_ms],
                "executors": executors_around(runs[s]),
                "hit_cores": runs[s].hit_cores,
                "resumed": resumed_at(runs[s]),
                "warmup_batch_s": warmup_batch_s(runs[s]),
            }
            for s in systems
        },
        "like_for_like": like_for_like(schedules, reports),
        "files": {k: str(v) for k, v in files.items()},
    }
    files["summary"].write_text(json.dumps(summary, indent=2, default=str))
    print_report(schedules, reports, runs)
    print("\n" + "\n".join(f"{k + ':':<15}{shown(v)}" for k, v in files.items()))
    return {
        **summary,
        "schedule": schedules[systems[0]],
        "schedules": schedules,
        "reports": reports,
        "tables": tables,
        "runs": runs,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command")
    for name in ("job-worker", "baseline-worker"):  # internal: the supervised processes
        w = sub.add_parser(name)
        for opt in ("--prefix", "--events", "--stop", "--verdict"):
            w.add_argument(opt, required=True)
        w.add_argument("--name", default="recovery-bench")
        w.add_argument("--trigger", default="1 second")
        w.add_argument("--visible")
        w.add_argument("--idle", type=float, default=30.0)
        w.add_argument("--measure", type=int, default=0, help="records of the capacity measurement (0: none)")
    parser.add_argument(
        "--target",
        default=Schedule.target,
        help="spark-worker-N, spark-worker (the one running most executors), driver, kafka (default spark-worker-1); "
        "several, comma-separated, are taken in turn (driver,spark-worker)",
    )
    parser.add_argument("--action", choices=ACTIONS, default=Schedule.action)
    parser.add_argument("--failures", type=int, default=Schedule.failures, help="(default %(default)s)")
    parser.add_argument(
        "--interval",
        type=float,
        default=Schedule.interval_s,
        help="seconds between failures; with --after-recovery the longest wait for a recovery (default %(default)s)",
    )
    parser.add_argument(
        "--after-recovery",
        action="store_true",
        help="each next failure (and the end) once the previous one recovered; --interval is then the longest wait "
        "(docs/decisions/0028-recovery-after-recovery.md)",
    )
    parser.add_argument("--warmup", type=float, default=Schedule.warmup_s, help="seconds of producing before the first failure")
    parser.add_argument(
        "--down",
        type=float,
        default=Schedule.down_s,
        help="seconds before a killed target is restarted / a paused one resumed (default %(default)s)",
    )
    parser.add_argument("--rate", type=float, default=Schedule.rate, help="producer messages per second (default %(default)s)")
    parser.add_argument(
        "--load", type=float, help="instead of --rate: this fraction of the job's capacity, measured first (e.g. 0.25)"
    )
    parser.add_argument("--trigger", default="1 second", help="the job's micro-batch interval")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="job,baseline (default both)")
    # a window over several of the job's batches, not one or two: docs/decisions/0018-recovery-latency-band.md
    parser.add_argument("--smooth", type=int, default=10, help="detector: moving-average window, seconds (default 10)")
    parser.add_argument("--hold", type=int, default=10, help="detector: seconds back in band that count as recovered")
    parser.add_argument(
        "--latency-floor", type=float, help="detector: the latency band's half-width at least, ms (default: the trigger interval)"
    )
    parser.add_argument("--seed", type=int, default=21)
    args = parser.parse_args(argv)
    if args.command == "job-worker":
        return job_worker(args)
    if args.command == "baseline-worker":
        return baseline_worker(args)
    systems = tuple(s.strip() for s in args.systems.split(",") if s.strip())
    targets = tuple(t.strip() for t in args.target.split(",") if t.strip())
    problems = [
        m
        for ok, m in [
            (targets, "--target names at least one target, e.g. spark-worker-1 or driver,spark-worker"),
            (set(systems) <= set(SYSTEMS) and systems, f"--systems takes {', '.join(SYSTEMS)}"),
            (args.failures >= 1, "--failures must be at least 1"),
            (args.warmup >= 20, "--warmup must be at least 20 s (the detector's reference window)"),
            (args.interval > args.down + args.hold, "--interval must exceed --down plus --hold"),
            (args.rate > 0, "--rate must be positive"),
            (trigger_ms(args.trigger) is not None, f"--trigger {args.trigger!r}: use an interval such as '1 second' or '500 ms'"),
            (args.latency_floor is None or args.latency_floor >= 0, "--latency-floor is in ms: 0 or more"),
            (args.load is None or 0 < args.load < 1, "--load is a fraction of the job's capacity: between 0 and 1, e.g. 0.25"),
            (args.load is None or (systems and systems[0] == "job"), "--load needs the job to run first: --systems job,baseline"),
        ]
        if not ok
    ]
    if problems:
        parser.error("; ".join(problems))
    schedule = Schedule(
        target=targets[0],
        targets=targets if len(targets) > 1 else (),
        action=args.action,
        failures=args.failures,
        interval_s=args.interval,
        warmup_s=args.warmup,
        down_s=args.down,
        rate=args.rate,
        load=args.load,
        after_recovery=args.after_recovery,
    )
    result = bench(
        schedule,
        systems=systems,
        trigger=args.trigger,
        seed=args.seed,
        detector=detector_for(args.trigger, latency_floor_ms=args.latency_floor, smooth_s=args.smooth, hold_s=args.hold),
    )
    clean = all(r.verdict.get("ok") for r in result["runs"].values())
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())
