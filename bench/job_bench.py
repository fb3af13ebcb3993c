"""Job benchmark: the ordered stateful job on the embedded sandbox next to the single-process baseline.

With no arguments it measures what users run: a fleet (``--shape``, default 50 sites x 20
sessions: 1,000 sessions on 150 Kafka partitions), the job's own batch cap and raw archive (in
its sink), every operator the job offers, the baseline three times; and it ends with one
``summary:`` line, the one the README's figures are copied from. On the same machine and input:

  backlog  ``--messages`` records (no faults, fixed seed) are produced first. Then the
           baseline consumer (job/baseline.py) and the Spark job, once per stateful
           operator (``--rounds`` times, alternating, on the warm application), each read all
           of them from the earliest offset (available-now, ``--max-offsets`` per
           micro-batch). Figures: records/s end to end (query start to last batch committed)
           and in steady state (batches after the first), the ratio to the baseline's median
           run, every round's ratio, and the first batch's seconds. Every output is checked
           against the ledger; a run that does not verify is reported as such.
  live     producers send ``--rate`` msg/s for ``--duration`` s while the job runs with a
           processing-time trigger (once per operator); then the same input (same seed,
           fresh topics) while the baseline runs. Latency of a record = output visible - event time (the
           ledger's ``ts``). For the job, "visible" is when the file sink wrote the
           ``_spark_metadata/<batch>`` entry that lists the record's output file: a Spark
           reader sees the record from then on. For the baseline it is when its
           micro-batch's outputs were kept in memory: a lower bound, it writes no files.
  cold     the warm-up's runs are the first queries of a fresh application: their first batch
           is the fixed cost a new job pays; the backlog runs' first batch is a warm one's.

  sweep    (``--sweep``, instead of the backlog phase) per input shape (``--shapes``, default
           4x2 and a fleet of 50x20): the baseline, then
           the job in stages, each keeping the fastest of the one before: every operator, the
           batch caps (``--caps``), the state partitions (``--partitions``); then the winner with
           Kafka's default fetch wait, with the raw archive's second query, and with RocksDB's
           row count off (``trackTotalNumberOfRows``). One table with
           Spark's per-batch durations; docs/performance.md explains it, and each setting's
           page under docs/decisions/ quotes its rows.

    .venv/bin/python bench/job_bench.py                       # the defaults users get
    .venv/bin/python bench/job_bench.py --rounds 3 --operators applyInPandasWithState,applyInPandasWithState-by-partition
    .venv/bin/python bench/job_bench.py --sweep --skip-live   # the settings, stage by stage
    .venv/bin/python bench/job_bench.py --shape 4x2 --messages 5000 --duration 20 --skip-warmup   # a quick look

It uses its own sandbox (state ``.sandbox-bench``, ports +20000) unless ``OSL_STATE_DIR`` /
``OSL_PORT_OFFSET`` say otherwise, and leaves it running (``python -m sandbox down``).
Figures go to stdout, ``bench/results/job-<run>.json`` and, with matplotlib, a latency
plot ``bench/results/job-<run>-latency.png``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from urllib.parse import urlparse

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import RESULTS, own_sandbox  # noqa: E402  (after sys.path above)

own_sandbox()

from job.spark import lake  # noqa: E402  (after the sandbox variables above)
from job.spark.config import OPERATORS, JobConfig  # noqa: E402
from sandbox.settings import GC_OPTIONS  # noqa: E402

#: The job's own batch cap: the backlog phase's default, so that it measures what users run.
JOB_CAP = JobConfig.max_offsets_per_trigger


def say(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


@dataclass
class Throughput:
    name: str
    records: int
    wall_s: float
    batches: int = 1
    steady_records: int = 0
    steady_s: float = 0.0
    verified: bool | None = None
    verdict: str = ""
    #: the setup, for the sweep's table: shape, operator, cap (None: uncapped), partitions, raw
    setup: dict = field(default_factory=dict)
    #: median over the steady batches of Spark's durationMs parts and the state store's commit
    parts_ms: dict = field(default_factory=dict)
    #: the sessions query's first batch with input, and the median of the batches after it
    first_batch_ms: int | None = None
    steady_median_ms: int | None = None

    @property
    def per_s(self) -> float:
        return self.records / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def steady_per_s(self) -> float | None:
        return self.steady_records / self.steady_s if self.steady_s > 0 else None


@dataclass
class Latency:
    name: str
    records: int
    measured: int
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    values_ms: list[float] = field(default_factory=list, repr=False)
    #: p99 of the records sent after the first STEADY_AFTER_S seconds: a new query's first
    #: batches run 2-3x slower (JIT, state stores opening), which the whole-run p99 mixes in
    p99_steady_ms: float | None = None
    #: the job's batches with input, in order: each one's ``triggerExecution`` (empty for the baseline)
    batch_ms: list[float] = field(default_factory=list, repr=False)

    def batch_percentile(self, q: float) -> float | None:
        """The ``q``-th percentile of :attr:`batch_ms`; None without batches."""
        return float(np.percentile(self.batch_ms, q)) if self.batch_ms else None


#: Seconds of a live run's input counted as the query's warm-up in ``Latency.p99_steady_ms``.
STEADY_AFTER_S = 20.0


# ----------------------------------------------------------------------------- input


@dataclass(frozen=True)
class Shape:
    """An input shape: ``sites`` collection points (one topic each, 3 partitions) with
    ``sessions`` live sessions each. The job's per-batch cost grows with the keys (sessions)
    and the Kafka partitions (sites) a batch touches, so a few sessions hide what a fleet pays."""

    sites: int
    sessions: int

    @property
    def name(self) -> str:
        return f"{self.sites}x{self.sessions}"

    @classmethod
    def parse(cls, text: str) -> Shape:
        sites, _, sessions = text.strip().partition("x")
        if not (sites.isdigit() and sessions.isdigit() and int(sites) >= 1 and int(sessions) >= 1):
            raise ValueError(f"shape {text!r}: write SITESxSESSIONS, e.g. 4x2 or 50x20")
        return cls(int(sites), int(sessions))


FEW = Shape(4, 2)
#: a collection-point fleet: 50 sites x 20 sessions (1,000 sessions, 150 Kafka partitions)
FLEET = Shape(50, 20)


def produce(
    settings,
    work: Path,
    prefix: str,
    *,
    seed: int,
    messages: int | None = None,
    rate: float = 50_000.0,
    duration: float = 3600.0,
    shape: Shape = FEW,
    stop: threading.Event | None = None,
) -> str:
    """Run the producers without faults; ``messages`` fixes the total, otherwise rate x duration
    (or until ``stop`` is set: the open sessions then end as at the deadline)."""
    from producers.runner import RunConfig, Runner

    sites, sessions = shape.sites, shape.sessions
    ledger = str(work / prefix.strip("-") / "ledger")
    length = max(10, messages // (sites * sessions) - 1) if messages else None
    cfg = RunConfig(
        ledger=ledger,
        bootstrap=settings.endpoints().kafka_bootstrap,
        sites=sites,
        sessions=sessions,
        rate=rate,
        duration=duration,
        session_length=length,
        seed=seed,
        topic_prefix=prefix,
    )
    runner = Runner(cfg)
    if stop is not None:
        threading.Thread(target=lambda: stop.wait() and runner.stop(), name="producers-stop", daemon=True).start()
    summary = runner.run()
    if summary.stopped not in ("completed", "duration", "stopped") or summary.outcomes.get("ok", 0) == 0:
        raise RuntimeError(f"the producers did not finish cleanly: {summary.text()}")
    say(f"produced {summary.outcomes.get('ok', 0)} records to {prefix}* in {summary.elapsed_s:.1f}s")
    return ledger


def ledger_ok(ledger: str) -> pd.DataFrame:
    from producers.ledger import read_ledger

    frame = read_ledger(ledger)
    frame = frame[frame["outcome"] == "ok"]
    return pd.DataFrame(
        {
            "topic": frame["topic"].astype(str),
            "partition": frame["partition"].astype("int64"),
            "offset": frame["offset"].astype("int64"),
            "ts": frame["ts"].astype("int64"),
        }
    )


# ----------------------------------------------------------------------------- runs


def run_baseline_backlog(settings, prefix: str, ledger: str) -> Throughput:
    from job.baseline import BaselineConfig, end_offsets, run_baseline
    from job.verify.compare import check
    from producers.ledger import read_ledger

    bootstrap = settings.endpoints().kafka_bootstrap
    result = run_baseline(BaselineConfig(bootstrap=bootstrap, topic_prefix=prefix, end_offsets=end_offsets(bootstrap, prefix)))
    report = check(read_ledger(ledger), result.rows, result.quarantine, result.sessions, policy="resync")
    return Throughput(
        "baseline (1 Python process)",
        result.records,
        result.elapsed_s,
        result.batches,
        verified=report.ok,
        verdict=_verdict(report),
    )


def run_baseline_median(settings, prefix: str, ledger: str, runs: int) -> Throughput:
    """The baseline ``runs`` times on the same input: the run of median records/s, with every
    run's records/s in its ``setup["runs_per_s"]``. Every ratio divides by it, and one run moved
    by up to 12 % between the runs of one day (the fleet's 200,000 records in 6.4-7.2 s);
    ``verified`` only when every run verified."""
    results = [run_baseline_backlog(settings, prefix, ledger) for _ in range(runs)]  # parse_args: runs >= 1
    return median_run(results, key="runs_per_s")


def _verdict(report) -> str:
    return report.summary().splitlines()[0].split(": ", 1)[-1]


def job_config(settings, name: str, prefix: str, **overrides):
    """The sandbox's job config for a bench run: an override of None keeps the job's default (a
    bench flag left out), except ``max_offsets_per_trigger=None``, which is the job's "no cap"."""
    from job.spark.config import job_config as sandbox_job_config

    given = {k: v for k, v in overrides.items() if v is not None or k == "max_offsets_per_trigger"}
    return sandbox_job_config(
        settings,
        output=f"s3a://{settings.bucket}/bench/{name}",
        checkpoint=settings.checkpoint_root / "bench" / name,
        topic_prefix=prefix,
        name=name,
        **{"raw_archive": False, **given},
    )


#: Spark's per-batch durations the sweep reports (``StreamingQueryProgress.durationMs``), and
#: the state store's commit (``stateOperators[0].commitTimeMs``).
PARTS = ("triggerExecution", "latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")


def batch_parts(progress: list[dict]) -> dict[str, float]:
    """Median ms per batch of each of :data:`PARTS` and of the state commit, over ``progress``."""
    out = {}
    for part in PARTS:
        values = [p["durationMs"].get(part) for p in progress if p["durationMs"].get(part) is not None]
        if values:
            out[part] = float(np.median(values))
    commits = [p["stateOperators"][0].get("commitTimeMs", 0) for p in progress if p.get("stateOperators")]
    if commits:
        out["stateCommit"] = float(np.median(commits))
    return out


#: RocksDB's count of the rows in each state store (``numRowsTotal`` in the query's progress):
#: keeping it costs a read per write (apache/spark PR #41122). The job keeps it on: chapter 05's
#: state curve and idle-expiry check read it.
TRACK_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"


def run_job_backlog(
    spark,
    settings,
    operator: str,
    prefix: str,
    ledger: str,
    *,
    max_offsets: int | None,
    tag: str,
    verify: bool = True,
    partitions: int | None = None,
    raw: bool = False,
    fetch_wait_ms: int | None = None,
    track_rows: bool = True,
    raw_in_sink: bool = False,
    input_tasks: int | None = None,
    layout: tuple[str, ...] | None = None,
    sink_writers: int | None = None,
) -> Throughput:
    """The job on the backlog from the earliest offset, available-now; ``partitions`` is the job's
    ``state_partitions`` (None: its default; a fresh checkpoint keeps it), ``raw`` runs the raw
    archive too, ``track_rows=False`` sets :data:`TRACK_ROWS` off for this run's queries,
    ``input_tasks`` is the job's ``input_tasks`` (None: its default; 0: one task per Kafka partition),
    ``layout`` the sink's partition columns (None: the job's, ``lake.SINK_PARTITIONS``)."""
    from job.spark import pipeline
    from job.verify.lake_check import verify_lake

    cfg = job_config(
        settings,
        f"{tag}-{operator}",
        prefix,
        operator=operator,
        trigger="available-now",
        max_offsets_per_trigger=max_offsets,
        raw_archive=raw,
        fetch_max_wait_ms=fetch_wait_ms,
        state_partitions=partitions,
        input_tasks=input_tasks,
        sink_writers=sink_writers,
    )
    started = time.monotonic()
    if not track_rows:
        spark.conf.set(TRACK_ROWS, "false")  # read when the query's state stores open
    try:
        queries = pipeline.start(
            spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap, raw_in_sink=raw_in_sink, partition_by=layout
        )
        for query in queries:
            query.awaitTermination()
    finally:
        spark.conf.unset(TRACK_ROWS)
    wall = time.monotonic() - started
    query = queries[0]
    for q in queries:
        if q.exception() is not None:
            raise RuntimeError(f"{operator}: the query {q.name} failed: {q.exception()}")
    batches = batches_with_input(query)
    steady = batches[1:]
    steady_ms = sorted(p["durationMs"]["triggerExecution"] for p in steady)
    out = Throughput(
        f"job, {operator}",
        sum(p["numInputRows"] for p in batches),
        wall,
        len(batches),
        sum(p["numInputRows"] for p in steady),
        sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000,
        setup={
            "operator": operator,
            "cap": max_offsets,
            "partitions": cfg.state_partitions,
            "raw": ("in sink" if raw_in_sink else "query") if raw else False,
            "fetch_wait_ms": cfg.fetch_max_wait_ms,
            "track_rows": track_rows,
            "input_tasks": cfg.input_tasks,
            "layout": list(layout or lake.SINK_PARTITIONS),
            "sink_writers": cfg.sink_writers,
        },
        parts_ms=batch_parts(steady or batches),
        first_batch_ms=batches[0]["durationMs"]["triggerExecution"] if batches else None,
        steady_median_ms=steady_ms[len(steady_ms) // 2] if steady_ms else None,
    )
    if verify:
        report = verify_lake(spark, ledger=ledger, lake=cfg.output, policy=cfg.policy)
        out.verified, out.verdict = report.ok, _verdict(report)
    return out


def batches_with_input(query) -> list[dict]:
    """The query's recent progress entries (Spark keeps the last 100) of batches that read records."""
    return [p for p in query.recentProgress if p["numInputRows"] > 0]


def run_job_live(
    spark,
    settings,
    work: Path,
    prefix: str,
    *,
    operator: str,
    seed: int,
    rate: float,
    duration: float,
    trigger: str,
    tag: str,
    input_tasks: int | None = None,
    archive: bool = False,
    shape: Shape = FEW,
) -> Latency:
    """The job live at ``rate``; ``archive``: with the raw archive in the sink, as the job runs by default."""
    from job.spark import pipeline

    cfg = job_config(
        settings,
        f"{tag}-live-{operator}",
        prefix,
        trigger=trigger,
        operator=operator,
        input_tasks=input_tasks,
        raw_archive=archive,
    )
    bootstrap = settings.endpoints().kafka_bootstrap
    queries = pipeline.start(spark, cfg, bootstrap=bootstrap)
    deadline = time.monotonic() + 120
    while queries[0].lastProgress is None:  # the first (empty) batch: the query is up
        if queries[0].exception() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"the live query did not start: {queries[0].exception() or 'no progress in 120 s'}")
        queries[0].awaitTermination(0.5)
    say(f"job query up; producing {rate:.0f} msg/s for {duration:.0f}s")
    started = time.monotonic()
    ledger = produce(settings, work, prefix, seed=seed, rate=rate, duration=duration, shape=shape)
    pipeline.drain(queries, bootstrap=bootstrap, topic_prefix=prefix, timeout_s=900, progress=say)
    wall = time.monotonic() - started
    visible = sink_visibility(settings, cfg.sink_path)
    say(f"  drained {wall:.0f}s after the producers started")
    name = (
        f"job, {operator}"
        + ("" if input_tasks is None else f", input tasks {input_tasks or 'per partition'}")
        + (", archive" if archive else "")
    )
    out = latencies(name, ledger_ok(ledger), visible)
    out.batch_ms = [float(p["durationMs"]["triggerExecution"]) for p in batches_with_input(queries[0])]
    return out


def run_baseline_live(
    settings, work: Path, prefix: str, *, seed: int, rate: float, duration: float, shape: Shape = FEW
) -> Latency:
    from job.baseline import BaselineConfig, run_baseline

    seen: list[tuple[str, int, int, int]] = []

    def on_batch(records) -> None:
        now = int(time.time() * 1000)
        seen.extend((r.topic, r.partition, r.offset, now) for r in records)

    result: dict[str, object] = {}
    config = BaselineConfig(
        bootstrap=settings.endpoints().kafka_bootstrap, topic_prefix=prefix, idle_s=10.0, deadline_s=duration + 300
    )
    consumer = threading.Thread(target=lambda: result.update(r=run_baseline(config, on_batch=on_batch)), daemon=True)
    consumer.start()
    say(f"baseline consuming; producing {rate:.0f} msg/s for {duration:.0f}s")
    ledger = produce(settings, work, prefix, seed=seed, rate=rate, duration=duration, shape=shape)
    consumer.join()
    if "r" not in result:
        raise RuntimeError("the baseline consumer stopped without a result; see the messages above")
    visible = pd.DataFrame(seen, columns=["topic", "partition", "offset", "visible_ms"])
    return latencies("baseline (1 Python process)", ledger_ok(ledger), visible)


# ----------------------------------------------------------------------------- measuring


def sink_visibility(settings, sink_path: str) -> pd.DataFrame:
    """(topic, partition, offset, visible_ms) for every record with a row in the file sink's output.

    A file becomes visible when the first ``_spark_metadata`` log entry listing it is
    written (compacted entries repeat earlier files; the earliest entry counts).
    """
    import pyarrow.parquet as pq

    from sandbox.checks.health import s3_client

    s3 = s3_client(settings)
    url = urlparse(sink_path)
    bucket, root = url.netloc, url.path.lstrip("/").rstrip("/")
    first_seen: dict[str, int] = {}
    paginator = s3.get_paginator("list_objects_v2")
    for page in paginator.paginate(Bucket=bucket, Prefix=f"{root}/_spark_metadata/"):
        for obj in page.get("Contents", []):
            if not re.fullmatch(r"\d+(\.compact)?", obj["Key"].rsplit("/", 1)[-1]):
                continue
            written = int(obj["LastModified"].timestamp() * 1000)
            for line in s3.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read().decode().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("action", "add") == "add":
                    first_seen[entry["path"]] = min(written, first_seen.get(entry["path"], written))
    parts = []
    for path, written in first_seen.items():
        key = urlparse(path).path.lstrip("/")
        file = pq.ParquetFile(io.BytesIO(s3.get_object(Bucket=bucket, Key=key)["Body"].read()))
        frame = file.read(columns=["topic", "partition", "offset"]).to_pandas().dropna()
        frame["visible_ms"] = written
        parts.append(frame)
    if not parts:
        return pd.DataFrame(columns=["topic", "partition", "offset", "visible_ms"])
    return pd.concat(parts, ignore_index=True)


def record_latencies(ledger: pd.DataFrame, visible: pd.DataFrame) -> pd.DataFrame:
    """The ledger's records that have a visible output, with ``visible_ms`` (the earliest
    moment one of their outputs was visible) and ``latency_ms`` (that minus the event time ``ts``)."""
    visible = visible.astype({"partition": "int64", "offset": "int64", "visible_ms": "int64"})
    first = visible.groupby(["topic", "partition", "offset"], as_index=False)["visible_ms"].min()
    joined = ledger.merge(first, on=["topic", "partition", "offset"], how="inner")
    joined["latency_ms"] = (joined["visible_ms"] - joined["ts"]).astype(float)
    return joined


def latencies(name: str, ledger: pd.DataFrame, visible: pd.DataFrame) -> Latency:
    """Per record: the earliest moment one of its outputs was visible, minus its event time."""
    joined = record_latencies(ledger, visible)
    values = joined["latency_ms"].to_numpy(dtype=float)
    if len(values) == 0:
        raise RuntimeError(f"{name}: no record of the ledger has a visible output; nothing to measure")
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    steady = joined.loc[joined["ts"] >= joined["ts"].min() + STEADY_AFTER_S * 1000, "latency_ms"].to_numpy(dtype=float)
    p99_steady = float(np.percentile(steady, 99)) if len(steady) else None
    return Latency(name, len(ledger), len(values), p50, p90, p99, float(values.max()), values.tolist(), p99_steady)


# ----------------------------------------------------------------------------- report


def plot(path: Path, curves: list[Latency]) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, ax = plt.subplots(figsize=(7, 4.8))
    for curve in curves:
        values = np.sort(np.asarray(curve.values_ms)) / 1000
        ax.plot(values, np.arange(1, len(values) + 1) / len(values), label=f"{curve.name} (p99 {curve.p99_ms / 1000:.1f}s)")
    ax.set_xscale("log")
    ax.set_xlabel("event time -> output visible (s, log)")
    ax.set_ylabel("fraction of records")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), fontsize="small")  # below: curves span the plot
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------- main


def parse_args() -> tuple[argparse.Namespace, list[str]]:
    """The command line, checked, and the operators it names (exits with status 2 on bad input)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=200_000, help="backlog size (default 200000)")
    parser.add_argument(
        "--shape",
        default=FLEET.name,
        help=f"backlog and live phases: the input shape SITESxSESSIONS (default {FLEET.name}, a fleet: 1,000 sessions "
        f"on 150 Kafka partitions; {FEW.name} for a quick look)",
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="backlog phase: run the operators this many times, alternating, on the warm application; each "
        "operator's figure is the median of its rounds (default 1)",
    )
    parser.add_argument(
        "--raw-archive",
        choices=("in-sink", "off"),
        default="in-sink",
        help="backlog phase: the raw archive as the job writes it, in its one sink (default), or off",
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="instead of the backlog phase: per shape, every operator, then batch caps, then state "
        "partitions, then the raw archive on, each stage keeping the fastest of the one before",
    )
    parser.add_argument("--shapes", default="4x2,50x20", help="sweep: input shapes SITESxSESSIONS (default 4x2,50x20)")
    parser.add_argument("--caps", default="5000,20000,100000,0", help="sweep: maxOffsetsPerTrigger values, 0 = uncapped")
    parser.add_argument("--partitions", default="2,4,8", help="sweep: state (shuffle) partitions")
    parser.add_argument(
        "--max-offsets",
        type=int,
        default=JOB_CAP,
        help=f"maxOffsetsPerTrigger for the backlog runs (default the job's, {JOB_CAP})",
    )
    parser.add_argument("--rate", type=float, default=200.0, help="live phase: messages per second (default 200)")
    parser.add_argument("--duration", type=float, default=60.0, help="live phase: seconds of producing (default 60)")
    parser.add_argument("--trigger", default="1 second", help="live phase: the job's trigger interval")
    parser.add_argument("--operators", default=",".join(OPERATORS), help="backlog phase: operators to run")
    parser.add_argument("--skip-backlog", action="store_true")
    parser.add_argument("--skip-live", action="store_true")
    parser.add_argument("--skip-warmup", action="store_true", help="no untimed warm-up run of the Spark application")
    for flag, (what, _) in ROUNDS.items():
        parser.add_argument(
            f"--{flag}-rounds",
            type=int,
            default=0,
            help=f"sweep: then this many rounds of {what}, alternating on the warm application (the "
            "stages' order drifts: each run is faster than the last)",
        )
    parser.add_argument(
        "--no-side-stages",
        action="store_true",
        help="sweep: skip the side stages (Kafka's fetch wait, the raw archive, RocksDB's row count); "
        f"with {' or '.join(f'--{flag}-rounds' for flag in ROUNDS)}, for the rounds alone",
    )
    parser.add_argument(
        "--live-input-tasks",
        default="",
        help="live phase: run the job once per value of JobConfig.input_tasks, 0 = one task per Kafka "
        "partition (default: the job's default only)",
    )
    parser.add_argument(
        "--live-archive",
        default="on",
        help="live phase: the raw archive off, on (in the sink, the job's default) or off,on to alternate (default on)",
    )
    parser.add_argument("--live-rounds", type=int, default=1, help="live phase: repeat the job's runs, alternating")
    parser.add_argument(
        "--baseline-runs",
        type=int,
        default=3,
        help="backlog and sweep: run the baseline this many times on each input and divide by the "
        "median run (default 3: one run's time varies by up to 12 %%)",
    )
    parser.add_argument(
        "--executor-gc",
        choices=sorted(GC_OPTIONS),
        help="the executors' garbage collector for this run's application (default: OSL_SPARK_EXECUTOR_GC, "
        "else parallel, the sandbox's; g1 is the JVM's own choice): an application's setting, so "
        "compare by alternating whole runs",
    )
    parser.add_argument("--seed", type=int, default=11)
    args = parser.parse_args()
    try:
        args.shape = Shape.parse(args.shape)
        args.shapes = [Shape.parse(x) for x in args.shapes.split(",") if x.strip()]
        args.caps = [int(x) or None for x in args.caps.split(",") if x.strip()]
        args.partitions = [int(x) for x in args.partitions.split(",") if x.strip()]
        args.live_input_tasks = [int(x) for x in args.live_input_tasks.split(",") if x.strip()] or [None]
    except ValueError as exc:
        parser.error(f"--shape, --shapes, --caps, --partitions, --live-input-tasks: {exc}")
    archive = {"off": False, "on": True}
    if any(x.strip() not in archive for x in args.live_archive.split(",")):
        parser.error(f"--live-archive {args.live_archive!r}: use off, on or off,on")
    args.live_archive = [archive[x.strip()] for x in args.live_archive.split(",")]
    if args.live_rounds < 1 or any(t is not None and t < 0 for t in args.live_input_tasks):
        parser.error("--live-rounds >= 1; --live-input-tasks values >= 0")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: run each operator at least once")
    if args.baseline_runs < 1:
        parser.error(f"--baseline-runs {args.baseline_runs}: run the baseline at least once")
    if not args.shapes or not args.caps or not args.partitions or min(args.partitions) < 1 or any(c and c < 1 for c in args.caps):
        parser.error("--shapes, --caps and --partitions each need at least one value; caps >= 0, partitions >= 1")
    operators = [o.strip() for o in args.operators.split(",") if o.strip()]
    unknown = sorted(set(operators) - set(OPERATORS))
    if unknown or args.messages < 100 or args.rate <= 0 or args.duration <= 0:
        parser.error(
            f"--operators takes {', '.join(OPERATORS)}; --messages >= 100; --rate, --duration > 0 (got {unknown or args})"
        )
    return args, operators


#: The warm-up's batch cap: its 800 records in 8 batches.
WARM_UP_CAP = 100


def warm_up(spark, settings, work: Path, run: str, args: argparse.Namespace, operators: list[str]) -> list[Throughput]:
    """The untimed warm-up: each operator on a small backlog (its figures are the cold start), as
    the job runs by default (the raw archive in the sink) and in batches of 100 records: a code
    path's first batches on a JVM pay its compilation, and a warm-up of one batch without the
    archive left the archive's path to the live run, whose first 15 batches then took 1.1-2.5 s
    against a 1 s trigger."""
    say("warm-up: an untimed small run, so that JVM start-up and JIT are not billed to the first operator")
    cold: list[Throughput] = []
    prefix = f"bench-{run}-w-"
    ledger = produce(settings, work, prefix, seed=args.seed, messages=800)
    for operator in operators:
        cold.append(
            run_job_backlog(
                spark,
                settings,
                operator,
                prefix,
                ledger,
                max_offsets=WARM_UP_CAP,
                tag=f"{run}-warm",
                verify=False,
                raw=True,
                raw_in_sink=True,
            )
        )
        say(f"  {operator}: {cold[-1].wall_s:.1f}s")
    return cold


def backlog_phase(spark, settings, work: Path, run: str, args: argparse.Namespace, operators: list[str]) -> list[Throughput]:
    """The backlog phase: the baseline first (the ratios' reference, the median of its runs), then
    the job once per operator, ``--rounds`` times alternating; each operator's row is its median
    round, with every round's records/s in ``setup["rounds_per_s"]``."""
    prefix = f"bench-{run}-b-"
    say(f"backlog: producing {args.messages} records, shape {args.shape.name}")
    ledger = produce(settings, work, prefix, seed=args.seed, messages=args.messages, shape=args.shape)
    say("backlog: baseline")
    base = run_baseline_median(settings, prefix, ledger, args.baseline_runs)
    say(f"  {base.per_s:,.0f} records/s (median of {base.setup['runs_per_s']}); {base.verdict}")
    raw = args.raw_archive == "in-sink"
    runs: dict[str, list[Throughput]] = {o: [] for o in operators}
    for n in range(1, args.rounds + 1):
        for operator in operators:
            say(f"backlog: job with {operator}" + (f", round {n} of {args.rounds}" if args.rounds > 1 else ""))
            t = run_job_backlog(
                spark,
                settings,
                operator,
                prefix,
                ledger,
                max_offsets=args.max_offsets,
                tag=f"{run}-r{n}",
                raw=raw,
                raw_in_sink=raw,
            )
            runs[operator].append(t)
            say(
                f"  {t.per_s:,.0f} records/s ({t.per_s / base.per_s:.2f}x baseline), first batch "
                f"{(t.first_batch_ms or 0) / 1000:.1f} s; {t.verdict}"
            )
    return [base, *(median_run(r) for r in runs.values())]


def median_run(runs: list[Throughput], key: str = "rounds_per_s") -> Throughput:
    """The run of median records/s, with every run's in ``setup[key]``; not verified when one run
    did not verify."""
    middle = sorted(runs, key=lambda t: t.per_s)[len(runs) // 2]
    middle.setup[key] = [round(t.per_s) for t in runs]
    failed = [t for t in runs if not t.verified]
    if failed:
        middle.verified, middle.verdict = False, failed[0].verdict
    return middle


def sweep_phase(spark, settings, work: Path, run: str, args: argparse.Namespace, operators: list[str]) -> list[Throughput]:
    """The sweep, per input shape: the baseline, then the job in stages, each keeping the fastest
    (records/s end to end) of the one before: every operator (the job's default cap, 2 partitions),
    then the batch caps, then the state partitions; then the winner with Kafka's default
    ``fetch.max.wait.ms`` (500 ms) instead of the job's, with the raw archive's second query on,
    and with RocksDB's row count off (:data:`TRACK_ROWS`). One backlog per shape, every output
    verified against its ledger."""
    out: list[Throughput] = []
    for s_index, shape in enumerate(args.shapes):
        prefix = f"bench-{run}-s{s_index}-"
        say(f"sweep {shape.name} ({shape.sites} sites x {shape.sessions} sessions): producing {args.messages} records")
        ledger = produce(settings, work, prefix, seed=args.seed, messages=args.messages, shape=shape)
        base = run_baseline_median(settings, prefix, ledger, args.baseline_runs)
        base.setup.update(shape=shape.name, stage="baseline")
        out.append(base)
        say(f"  baseline: {base.per_s:,.0f} records/s (median of {base.setup['runs_per_s']}); {base.verdict}")
        done: dict[tuple, Throughput] = {}

        def one(stage: str, operator: str, cap: int | None, partitions: int, **knobs) -> Throughput:
            """:func:`run_job_backlog` with ``knobs`` (its keyword arguments), run once per setup: a
            later stage's setup that an earlier stage ran is that run (a round's never is)."""
            key = (stage if stage.startswith(ROUND_LABELS) else "", operator, cap, partitions, tuple(sorted(knobs.items())))
            if key not in done:
                t = run_job_backlog(
                    spark,
                    settings,
                    operator,
                    prefix,
                    ledger,
                    max_offsets=cap,
                    partitions=partitions,
                    tag=f"{run}-s{s_index}-{len(done)}",
                    **knobs,
                )
                t.setup.update(shape=shape.name, stage=stage)
                done[key] = t
                out.append(t)
                say(
                    f"  {stage:<10} {operator:<27} cap {cap or 'none':>6} partitions {partitions} raw {t.setup['raw'] or 'off'} "
                    f"fetch wait {t.setup['fetch_wait_ms']} ms input tasks {t.setup['input_tasks'] or 'one per partition'}: "
                    f"{t.per_s:,.0f} records/s ({t.per_s / base.per_s:.2f}x baseline), {t.batches} batches, "
                    f"{t.parts_ms.get('triggerExecution', 0) / 1000:.1f} s/batch; {t.verdict}"
                )
            return done[key]

        def best(runs: list[Throughput]) -> Throughput:
            return max(runs, key=lambda t: t.per_s)

        from job.spark.config import JobConfig

        start_cap, start_partitions = JobConfig.max_offsets_per_trigger, 2
        op = best([one("operator", o, start_cap, start_partitions) for o in operators]).setup["operator"]
        cap = best([one("cap", op, c, start_partitions) for c in args.caps]).setup["cap"]
        parts = best([one("partitions", op, cap, n) for n in args.partitions]).setup["partitions"]
        if not args.no_side_stages:
            one("kafka wait", op, cap, parts, fetch_wait_ms=500)
            one("raw", op, cap, parts, raw=True)
            one("raw, 1 query", op, cap, parts, raw=True, raw_in_sink=True)
            one("rows off", op, cap, parts, track_rows=False)
        for flag, (_, variants) in ROUNDS.items():
            for n in range(1, getattr(args, f"{flag}_rounds") + 1):
                for label, settings_of in variants:
                    one(f"{label} {n}", op, **{"cap": cap, "partitions": parts, **settings_of(parts)})
    return out


#: The sink's partition columns before ``lake.SINK_PARTITIONS``, a folder per topic under each output:
#: the measured alternative of docs/decisions/0008-lake-partitioned-by-output.md (the job refuses a lake
#: written so, ``lake.open_lake``; the bench writes it on a new lake and verifies it, which reads it).
TOPIC_FOLDERS: tuple[str, ...] = ("output", "topic")

#: The raw archive as rows of the one query's sink (the job's default), in a run's arguments.
IN_SINK = {"raw": True, "raw_in_sink": True}

#: The sweep's alternating rounds, after its stages, on the warm application: ``--<flag>-rounds``
#: -> (what a round alternates, for --help; each variant's stage label and its arguments of the
#: sweep's run, from the state partitions the stages chose).
ROUNDS: dict[str, tuple[str, list[tuple[str, Callable[[int], dict]]]]] = {
    "raw": (
        "the raw archive off / as a second query / in the sink",
        [("round", lambda _: {}), ("round", lambda _: {"raw": True}), ("round", lambda _: IN_SINK)],
    ),
    "input": (
        "the Kafka read in one task per partition / coalesced to the state partitions' count (JobConfig.input_tasks)",
        [("input", lambda _: {"input_tasks": 0}), ("input", lambda parts: {"input_tasks": parts})],
    ),
    "layout": (
        "the lake with a folder per topic under each output (the layout before lake.SINK_PARTITIONS) / a folder per output",
        [("topic dirs", lambda _: {"layout": TOPIC_FOLDERS}), ("output dirs", lambda _: {"layout": lake.SINK_PARTITIONS})],
    ),
    "writers": (
        "the sink's rows sorted by output before they are written / written as they come, one open file "
        "per output folder (JobConfig.sink_writers 0 / 4), the raw archive in the sink",
        [("open files", lambda _: {**IN_SINK, "sink_writers": 4}), ("sorted", lambda _: {**IN_SINK, "sink_writers": 0})],
    ),
    "wait": (
        "the executors' Kafka fetch.max.wait.ms at 10 ms / 1 ms (JobConfig.fetch_max_wait_ms), the raw archive in the sink",
        [("wait 10", lambda _: {**IN_SINK, "fetch_wait_ms": 10}), ("wait 1", lambda _: {**IN_SINK, "fetch_wait_ms": 1})],
    ),
    "cap": (
        "the batch cap at 100,000 / 200,000 records (JobConfig.max_offsets_per_trigger), the raw archive in the "
        "sink; a backlog of 400,000 (--messages) gives both caps more than one batch",
        [("cap 100k", lambda _: {**IN_SINK, "cap": 100_000}), ("cap 200k", lambda _: {**IN_SINK, "cap": 200_000})],
    ),
}
#: Their stage labels: a round's run is never taken for an earlier stage's run of the same setup.
ROUND_LABELS = tuple(label for _, variants in ROUNDS.values() for label, _ in variants)


def print_sweep(rows: list[Throughput]) -> None:
    """The sweep's one table: every run against its shape's baseline, with the per-batch parts."""
    print(
        "\nsweep: backlog from the earliest offset, available-now; median ms per steady batch; "
        "x = records/s against the baseline on the same input"
    )
    head = (
        f"  {'shape':<7}{'stage':<15}{'operator':<27}{'cap':>7}{'parts':>6}{'raw':>8}{'wait':>5}{'in':>4}{'batches':>8}{'wall s':>8}"
        f"{'rec/s':>8}{'x':>6}{'batch':>7}{'latest':>7}{'plan':>6}{'addBatch':>9}{'wal':>6}{'commit':>7}{'state':>7}  verified"
    )
    print(head)
    base = None
    for t in rows:
        if t.setup.get("stage") == "baseline":
            base = t
            print(
                f"  {t.setup['shape']:<7}{'baseline':<15}{'1 Python process':<27}{'':>7}{'':>6}{'':>8}{'':>5}{'':>4}{t.batches:>8}"
                f"{t.wall_s:>8.1f}{t.per_s:>8,.0f}{1:>6.2f}{'':>7}{'':>7}{'':>6}{'':>9}{'':>6}{'':>7}{'':>7}  "
                f"{'yes' if t.verified else 'NO'}"
            )
            if len(t.setup.get("runs_per_s", [])) > 1:
                print(
                    f"  {'':<7}{'':<15}(the median of {len(t.setup['runs_per_s'])} runs: "
                    f"{', '.join(f'{r:,}' for r in t.setup['runs_per_s'])} records/s)"
                )
            continue
        m = t.parts_ms
        ratio = t.per_s / base.per_s if base else float("nan")
        print(
            f"  {t.setup['shape']:<7}{t.setup['stage']:<15}{t.setup['operator']:<27}{t.setup['cap'] or 'none':>7}"
            f"{t.setup['partitions']:>6}{t.setup['raw'] or 'off':>8}{t.setup['fetch_wait_ms']:>5}{t.setup.get('input_tasks') or 'p':>4}{t.batches:>8}"
            f"{t.wall_s:>8.1f}{t.per_s:>8,.0f}"
            f"{ratio:>6.2f}{m.get('triggerExecution', 0):>7.0f}{m.get('latestOffset', 0):>7.0f}{m.get('queryPlanning', 0):>6.0f}"
            f"{m.get('addBatch', 0):>9.0f}{m.get('walCommit', 0):>6.0f}{m.get('commitOffsets', 0):>7.0f}{m.get('stateCommit', 0):>7.0f}"
            f"  {'yes' if t.verified else 'NO'}"
        )


def live_phase(spark, settings, work: Path, run: str, args: argparse.Namespace, operators: list[str]) -> list[Latency]:
    """The live phase: the job once per operator, then the baseline last (the ratios' reference)."""
    live: list[Latency] = []
    runs = [
        (o, tasks, archive)
        for _ in range(args.live_rounds)
        for o in operators
        for tasks in args.live_input_tasks
        for archive in args.live_archive
    ]
    for n, (operator, tasks, archive) in enumerate(runs):
        say(
            f"live: job with {operator}, trigger {args.trigger}"
            + ("" if tasks is None else f", input tasks {tasks}")
            + (", the raw archive in the sink" if archive else "")
        )
        live.append(
            run_job_live(
                spark,
                settings,
                work,
                f"bench-{run}-l{n}-",
                operator=operator,
                seed=args.seed + 1,
                rate=args.rate,
                duration=args.duration,
                trigger=args.trigger,
                tag=f"{run}-{n}",
                input_tasks=tasks,
                archive=archive,
                shape=args.shape,
            )
        )
    say("live: baseline")
    live.append(
        run_baseline_live(
            settings, work, f"bench-{run}-lb-", seed=args.seed + 1, rate=args.rate, duration=args.duration, shape=args.shape
        )
    )
    return live


def print_throughput(throughput: list[Throughput], args: argparse.Namespace) -> None:
    """The backlog table: each run against the first (the baseline), each round's ratio, the first
    batch, and the verifier's verdicts."""
    base = throughput[0]
    print(
        f"\nthroughput, backlog of {base.records} records, shape {args.shape.name} (maxOffsetsPerTrigger "
        f"{args.max_offsets}, raw archive {args.raw_archive}); the job's row is its median of {args.rounds} round(s)"
    )
    print(
        f"  {'':<46}{'records':>8}{'batches':>8}{'wall s':>8}{'rec/s':>9}{'steady rec/s':>14}{'vs baseline':>13}"
        f"{'rounds x':>18}{'1st batch s':>12}  verified"
    )
    for t in throughput:
        steady = f"{t.steady_per_s:,.0f}" if t.steady_per_s else "-"
        rounds = "/".join(f"{r / base.per_s:.2f}" for r in t.setup.get("rounds_per_s", [])) or "-"
        first = "-" if t.first_batch_ms is None else f"{t.first_batch_ms / 1000:.1f}"
        print(
            f"  {t.name:<46}{t.records:>8}{t.batches:>8}{t.wall_s:>8.1f}{t.per_s:>9,.0f}{steady:>14}"
            f"{t.per_s / base.per_s:>12.3f}x{rounds:>18}{first:>12}  {'yes' if t.verified else 'NO'}"
        )
    print("  verifier: " + "; ".join(f"{t.name}: {t.verdict}" for t in throughput))


def summary_line(throughput: list[Throughput], live: list[Latency], args: argparse.Namespace) -> str | None:
    """The one line the README's figures are copied from: the job's default operator on the
    backlog against the baseline, and its p99 live, at the defaults the run used."""
    default = JobConfig.operator
    parts = []
    job = [t for t in throughput[1:] if t.setup.get("operator") == default]
    if job:
        parts.append(
            f"{args.shape.name} backlog: {job[0].per_s / throughput[0].per_s:.2f}x the baseline "
            f"(median of {args.rounds} round(s), cap {args.max_offsets}, raw archive {args.raw_archive})"
        )
    lat = [x for x in live if x.name.split(", ")[1:2] == [default]]  # "job, <operator>[, archive...]"
    if lat:
        worst = max(lat, key=lambda x: x.p99_ms)
        # The whole minute's p99 counts the query's first batches; what the steady state gives and
        # the longest batch say whether it is the start or every batch (docs/performance.md).
        after = [x.p99_steady_ms for x in lat if x.p99_steady_ms is not None]
        detail = [f"worst of {len(lat)} runs"] if len(lat) > 1 else []
        if after:
            detail.append(f"{max(after) / 1000:.1f} s after the first {STEADY_AFTER_S:.0f} s")
        if worst.batch_ms:
            detail.append(f"longest batch {max(worst.batch_ms) / 1000:.1f} s")
        parts.append(
            f"live p99 {worst.p99_ms / 1000:.1f} s at {args.rate:.0f} msg/s, trigger {args.trigger}"
            + (f" ({'; '.join(detail)})" if detail else "")
        )
    return f"{default}: " + "; ".join(parts) if parts else None


def print_latency(live: list[Latency], args: argparse.Namespace) -> None:
    """The latency table: each run's percentiles, p50 against the last (the baseline), and the
    job's batch durations, which with the trigger set its tail (see the note printed under it)."""
    print(f"\nlatency, event time -> output visible, {args.rate:.0f} msg/s for {args.duration:.0f}s (job trigger {args.trigger})")
    steady_head = f"p99 after {STEADY_AFTER_S:.0f}s"
    print(
        f"  {'':<38}{'records':>8}{'measured':>9}{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}{steady_head:>16}"
        f"{'p50 vs baseline':>17}{'batch p50/p90/max ms':>23}"
    )
    base_p50 = live[-1].p50_ms
    for lat in live:
        steady = "-" if lat.p99_steady_ms is None else f"{lat.p99_steady_ms:.0f}"
        batches = "-" if not lat.batch_ms else "/".join(f"{lat.batch_percentile(q):.0f}" for q in (50, 90, 100))
        print(
            f"  {lat.name:<38}{lat.records:>8}{lat.measured:>9}{lat.p50_ms:>9.0f}{lat.p90_ms:>9.0f}{lat.p99_ms:>9.0f}"
            f"{lat.max_ms:>9.0f}{steady:>16}{lat.p50_ms / max(base_p50, 1e-9):>16.1f}x{batches:>23}"
        )
    print("  (job: when the _spark_metadata entry listing the output file was written; baseline: in memory, a lower bound;")
    print(f"   'after {STEADY_AFTER_S:.0f}s': records sent once the query's first, slower batches were behind it;")
    print("   a record that arrives just after a batch began waits one trigger for the next and then that whole batch:")
    print("   the job's p99 is about the trigger plus its slower batches, whatever the per-record cost)")


def save_report(report: dict, run: str, live: list[Latency]) -> None:
    """Write ``job-<run>.json`` and, with matplotlib and a live phase, the latency plot; print their paths."""
    out = RESULTS / f"job-{run}.json"
    out.write_text(json.dumps(report, indent=2))
    print(f"\nreport: {out}")
    if live and (png := plot(RESULTS / f"job-{run}-latency.png", live)):
        print(f"plot:   {png}")


#: ``--executor-gc``: the collector option the executors run with instead of the sandbox's.
def main() -> int:
    """Run the phases the flags ask for and print the figures; 0, 1 when an output did not verify,
    2 when the sandbox did not start."""
    args, operators = parse_args()

    from producers.runner import new_run_id
    from sandbox import SandboxError, Settings, open_sandbox
    from sandbox.jvm.spark_session import driver_log, spark_session

    settings = Settings.from_env(**({"executor_gc": args.executor_gc} if args.executor_gc else {}))
    run = new_run_id()
    work = RESULTS / f"job-{run}"
    work.mkdir(parents=True, exist_ok=True)
    try:
        say(f"sandbox: {settings.state_dir} (ports +{os.environ['OSL_PORT_OFFSET']})")
        open_sandbox(settings).up()
    except SandboxError as exc:
        print(f"bench: the sandbox did not start: {exc}", file=sys.stderr)
        return 2
    say(f"Spark application job-bench (driver log {driver_log(settings)})")
    spark = spark_session(settings, "job-bench")
    cores = os.cpu_count()
    cold = [] if args.skip_warmup else warm_up(spark, settings, work, run, args, operators)
    sweep = sweep_phase(spark, settings, work, run, args, operators) if args.sweep else []
    throughput = [] if args.skip_backlog or args.sweep else backlog_phase(spark, settings, work, run, args, operators)
    live = [] if args.skip_live else live_phase(spark, settings, work, run, args, operators)
    spark.stop()

    import pyspark

    print(
        f"\njob benchmark {run}: {cores} cores, PySpark {pyspark.__version__}, Spark standalone with "
        f"{settings.spark_workers} workers, RocksDB state store, policy resync, no faults"
    )
    if sweep:
        print_sweep(sweep)
    if throughput:
        print_throughput(throughput, args)
    if cold:
        print("\ncold start, the first queries of a fresh Spark application (the warm-up; JVM, JIT, Python workers):")
        for t in cold:
            first = "-" if t.first_batch_ms is None else f"{t.first_batch_ms / 1000:.1f}"
            print(f"  {t.name:<46}{t.records:>8} records in {t.wall_s:.1f}s; first batch {first} s")
    if live:
        print_latency(live, args)
    line = summary_line(throughput, live, args)
    if line:
        print(f"\nsummary: {line}")
    report = {
        "run": run,
        "cores": cores,
        "pyspark": pyspark.__version__,
        "args": {**vars(args), "shapes": [x.name for x in args.shapes], "shape": args.shape.name},
        "summary": line,
        "sweep": [{**asdict(t), "per_s": t.per_s, "steady_per_s": t.steady_per_s} for t in sweep],
        "throughput": [{**asdict(t), "per_s": t.per_s, "steady_per_s": t.steady_per_s} for t in throughput],
        "cold_start": [asdict(t) for t in cold],
        "latency": [{k: v for k, v in asdict(lat).items() if k != "values_ms"} for lat in live],
    }
    save_report(report, run, live)
    unverified = [t for t in throughput + sweep if t.verified is False]
    if unverified:
        print("\nsome outputs did not verify: " + "; ".join(f"{t.name}: {t.verdict}" for t in unverified), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
