"""Where a drained run's stop lands: in a batch, or at a boundary (decision 0033).

Runs chapter 07's first section ``--runs`` times on the sandbox of ``OSL_STATE_DIR`` (started
if it is down): two producer runs sending 150 records/s into fresh topics, a 1,800-record head
start, then ``python -m job run --until-drained`` with a 1 s trigger and 1,000 records a batch
while they keep sending. For each run it prints the job's seconds, its batches, the error its
event log's ``QueryTerminated`` carries, and the batch the stop left planned but not committed
(``pending``: None when the stop came at a boundary).

    .venv/bin/python bench/drain_stop.py --runs 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from job.drills import kafka_loss  # noqa: E402
from job.ops.watch.events import EventLog  # noqa: E402
from job.spark.checkpoints import log_state  # noqa: E402
from producers.runner import RunConfig  # noqa: E402
from sandbox import Settings, open_sandbox  # noqa: E402

QUERY = "ordered-sessions-sessions"


def one_run(settings: Settings, bootstrap: str, n: int) -> dict:
    prefix = f"drainstop-{uuid.uuid4().hex[:6]}-"
    work = settings.scratch_dir("drainstop-")
    runs = [
        kafka_loss.BackgroundRun(
            RunConfig(
                ledger=str(settings.scratch_dir("drainstop-ledger-")),
                bootstrap=bootstrap,
                sites=sites,
                sessions=1,
                rate=rate,
                duration=900,
                snapshot_every=30,
                seed=seed,
                run_id=f"drainstop{seed}",
                topic_prefix=prefix,
            )
        )
        for sites, rate, seed in ((3, 90, 7), (2, 60, 8))
    ]
    try:
        runs[0].wait_acked(1_800, timeout_s=120)
        checkpoint = work / "checkpoint"
        flags = {
            "--topic-prefix": prefix,
            "--output": f"s3a://{settings.bucket}/bench/{prefix}",
            "--checkpoint": str(checkpoint),
            "--trigger": "1 seconds",  # chapter 07's trigger and cap
            "--max-offsets-per-trigger": "1000",
        }
        argv = [sys.executable, "-m", "job", "run", "--until-drained", *(part for flag in flags.items() for part in flag)]
        started = time.monotonic()
        job = subprocess.run(argv, env=dict(os.environ), capture_output=True, text=True, timeout=900)
        seconds = time.monotonic() - started
    finally:
        for run in runs:
            run.finish()
    if job.returncode != 0:
        raise SystemExit(f"drain_stop: run {n}: the job exited {job.returncode}:\n{job.stderr[-3000:]}")
    run = kafka_loss.query_run(EventLog(checkpoint / "events.jsonl").read_from(0)[0], QUERY)
    return {
        "run": n,
        "seconds": round(seconds, 1),
        "batches": run.batches,
        "error": run.error,
        "pending": log_state(checkpoint / "sessions").pending,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10, help="drained runs, one after the other (default 10)")
    args = parser.parse_args(argv)
    settings = Settings.from_env()
    open_sandbox(settings, progress=lambda line: None).up()
    bootstrap = settings.endpoints().kafka_bootstrap
    results = []
    for n in range(args.runs):
        results.append(one_run(settings, bootstrap, n))
        print(json.dumps(results[-1]), flush=True)
    mid = sum(r["pending"] is not None for r in results)
    failed = sum(r["error"] is not None for r in results)
    seconds = [r["seconds"] for r in results]
    print(
        f"{args.runs} runs: {mid} stopped in a batch (planned, not committed), {failed} with an error in the event log; "
        f"job {statistics.median(seconds):.0f} s median ({min(seconds):.0f}-{max(seconds):.0f})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
