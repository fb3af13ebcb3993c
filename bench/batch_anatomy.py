"""Where a micro-batch's time goes: Spark's own parts per batch, then each batch's stages and
tasks from the driver's REST API, on a fresh application.

    .venv/bin/python bench/batch_anatomy.py                          # 4 sites x 2 sessions, 2,000 records, 500 a batch
    .venv/bin/python bench/batch_anatomy.py --warm-up python        # the executors' Python workers started first
    .venv/bin/python bench/batch_anatomy.py --warm-up s3a           # ... and a Parquet file written to s3a:// first
    .venv/bin/python bench/batch_anatomy.py --fleet --messages 200000 --cap 100000   # 50 x 20 sessions
    .venv/bin/python bench/batch_anatomy.py --queries 2             # a second query: a warm application's first batch
    .venv/bin/python bench/batch_anatomy.py --fleet --messages 200000 --cap 100000 --input-tasks 2   # Kafka read in 2 tasks
    .venv/bin/python bench/batch_anatomy.py --fleet --fetch-wait-ms 1 --conf spark.kafka.consumer.cache.capacity=256

Per batch: ``durationMs`` (``addBatch``, ``queryPlanning``, ``latestOffset``, ``walCommit``,
``commitOffsets``), the state operator's ``allUpdatesTimeMs`` and ``commitTimeMs``; per stage:
its span and each task's executor, duration, deserialisation and run time. A stage's first
task on an executor that never ran one pays that JVM's (and its Python worker's) first-time
costs; comparing batch 0's stages with batch 1's shows how much. ``--warm-up`` runs a small
batch job before the query to tell those costs apart: ``python`` starts a Python worker on
each executor and imports the job's modules in it; ``s3a`` also writes its output as zstd
Parquet to the bucket (the S3A client, the Parquet writer and the codec on each executor).
Uses the bench sandbox (``.sandbox-bench``, ports +20000), like the other benches.
"""

from __future__ import annotations

import argparse
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# bench.job_bench points OSL_STATE_DIR, OSL_PORT_OFFSET and OSL_BACKEND at the bench sandbox
from bench.job_bench import FEW, FLEET, job_config, produce, say  # noqa: E402
from job.spark.driver_rest import get  # noqa: E402


def _touch_job_modules(frames):
    from job.engine import session
    from job.spark import pipeline

    del session, pipeline  # imported for their cost: what the stateful operator's function imports

    yield from frames


def warm_up(spark, settings, kind: str) -> float:
    """A small batch job on every executor (4 tasks): the seconds it took."""
    started = time.monotonic()
    frame = spark.range(0, 4, 1, 4).mapInPandas(_touch_job_modules, "id long")
    if kind == "s3a":
        frame.write.mode("overwrite").option("compression", "zstd").parquet(
            f"s3a://{settings.bucket}/_warm-up/{uuid.uuid4().hex[:8]}"
        )
    else:
        frame.collect()
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=2000, help="records in the backlog (default 2,000)")
    parser.add_argument("--cap", type=int, default=500, help="maxOffsetsPerTrigger (default 500)")
    parser.add_argument("--fleet", action="store_true", help="50 sites x 20 sessions instead of 4 x 2")
    parser.add_argument("--warm-up", choices=("none", "python", "s3a"), default="none")
    parser.add_argument(
        "--queries",
        type=int,
        default=1,
        help="queries run one after another on the same application and backlog (default 1): "
        "the second one's first batch is a warm application's",
    )
    parser.add_argument(
        "--input-tasks",
        type=int,
        default=None,
        help="JobConfig.input_tasks: Kafka read in this many tasks, 0 for one per Kafka partition (default: the job's)",
    )
    parser.add_argument(
        "--fetch-wait-ms",
        type=int,
        default=None,
        help="JobConfig.fetch_max_wait_ms: the executors' Kafka fetch.max.wait.ms (default: the job's)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the application (repeatable), e.g. spark.kafka.consumer.cache.capacity=256",
    )
    args = parser.parse_args()
    extra = dict(item.partition("=")[::2] for item in args.conf)
    if any(not key or not value for key, value in extra.items()):
        parser.error(f"--conf takes KEY=VALUE, got {args.conf}")
    if args.messages < 100 or args.cap < 1 or args.queries < 1:
        parser.error("--messages >= 100, --cap >= 1 and --queries >= 1")

    from job.spark import pipeline
    from sandbox import Settings, open_sandbox
    from sandbox.jvm.spark_session import spark_session

    settings = Settings.from_env()
    open_sandbox(settings).up()
    work = settings.scratch_dir("anatomy-")
    ledger = produce(
        settings, work, f"an{uuid.uuid4().hex[:6]}-", seed=3, messages=args.messages, shape=FLEET if args.fleet else FEW
    )
    started = time.monotonic()
    spark = spark_session(settings, "batch-anatomy", extra=extra, progress=lambda _line: None)
    say(f"session {time.monotonic() - started:.1f}s")
    if args.warm_up != "none":
        say(f"warm-up ({args.warm_up}) {warm_up(spark, settings, args.warm_up):.1f}s")
    for n in range(1, args.queries + 1):
        # each query starts afresh (new checkpoint and lake) on the same backlog and application:
        # query 2's first batch is the first batch of a warm application
        cfg = job_config(
            settings,
            f"anatomy-{uuid.uuid4().hex[:6]}",
            Path(ledger).parent.name + "-",
            trigger="available-now",
            max_offsets_per_trigger=args.cap,
            input_tasks=args.input_tasks,
            fetch_max_wait_ms=args.fetch_wait_ms,
        )
        started = time.monotonic()
        queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
        pipeline.await_all(queries, timeout_s=1800)
        say(f"query {n} {time.monotonic() - started:.1f}s")
        print(
            f"\n{'batch':>5} {'rows':>7} {'trigger':>8} {'addBatch':>8} {'planning':>8} {'latestOff':>9} {'wal':>5} "
            f"{'commitOff':>9} {'updates':>8} {'stCommit':>8}   (ms)"
        )
        for p in queries[0].recentProgress:
            d, state = p["durationMs"], (p.get("stateOperators") or [{}])[0]
            print(
                f"{p['batchId']:>5} {p['numInputRows']:>7} {d.get('triggerExecution', 0):>8} {d.get('addBatch', 0):>8} "
                f"{d.get('queryPlanning', 0):>8} {d.get('latestOffset', 0):>9} {d.get('walCommit', 0):>5} "
                f"{d.get('commitOffsets', 0):>9} {state.get('allUpdatesTimeMs', 0):>8} {state.get('commitTimeMs', 0):>8}"
            )
    base = f"http://127.0.0.1:{spark.conf.get('spark.ui.port')}/api/v1/applications"
    app = get(base)[0]["id"]
    print("\nstages: span, then per task (executor, duration, deserialise, run) in ms")
    for stage in sorted(get(f"{base}/{app}/stages?details=true"), key=lambda s: s["stageId"]):
        tasks = sorted(
            (t["executorId"], t["duration"], t["taskMetrics"]["executorDeserializeTime"], t["taskMetrics"]["executorRunTime"])
            for t in (stage.get("tasks") or {}).values()
        )
        span = f"{stage.get('submissionTime', '')[11:23]}..{stage.get('completionTime', '')[11:23]}"
        print(f"stage {stage['stageId']:>3} {span} {stage['name'][:40]:40} {tasks}")
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
