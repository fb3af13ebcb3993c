"""JIT benchmark: Spark's application JVMs with C1 only against the JVM's own tiered C1-then-C2.

``OSL_SPARK_JIT`` (sandbox/settings.py) picks the JVM options of every Spark driver and
executor the sandbox starts. This bench times both choices on the same input, alternating
them (``--rounds`` times each, a fresh application per run, since the options are fixed when a
JVM starts):

  start    the application's session, then the job on a small backlog (4 sites x 2 sessions,
           ``--small`` records, 500 per micro-batch): its first stateful batch (Python
           workers, state stores, the first Parquet write: what every chapter and test pays)
           and the median of the batches after it;
  fleet    on the same application, ``--fleet-runs`` runs over one backlog of ``--messages``
           records from a fleet of 50 sites x 20 sessions (cap 100,000, the job's default),
           each on a fresh checkpoint: how the throughput develops as the JIT warms up, next to
           the single-process baseline on the same records.

    .venv/bin/python bench/jit_bench.py                  # about 9 minutes on 2 cores
    .venv/bin/python bench/jit_bench.py --rounds 1 --fleet-runs 2 --messages 50000   # a quick look

It uses the bench sandbox (``.sandbox-bench``, ports +20000) like the other benches, and
writes ``bench/results/jit-<run>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# bench.job_bench points OSL_STATE_DIR, OSL_PORT_OFFSET and OSL_BACKEND at the bench sandbox
from bench.job_bench import FEW, FLEET, RESULTS, produce, run_baseline_backlog, run_job_backlog, say  # noqa: E402

OPERATOR = "applyInPandasWithState"  # the job's default
MODES = ("c1", "tiered")


def one_application(args: argparse.Namespace) -> dict:
    """In a child process whose OSL_SPARK_JIT is set: one application, timed."""
    from sandbox import Settings
    from sandbox.jvm.spark_session import spark_session

    settings = Settings.from_env()
    work = Path(args.work)
    small = produce(settings, work, f"{args.prefix}s{uuid.uuid4().hex[:6]}-", seed=3, messages=args.small, shape=FEW)
    started = time.monotonic()
    spark = spark_session(settings, f"jit-{settings.spark_jit}", progress=lambda _line: None)
    session_s = time.monotonic() - started
    start = run_job_backlog(
        spark,
        settings,
        OPERATOR,
        Path(small).parent.name + "-",
        small,
        max_offsets=500,
        tag=f"jit-{uuid.uuid4().hex[:8]}",
        verify=False,
    )
    out = {
        "mode": settings.spark_jit,
        "session_s": round(session_s, 2),
        "first_batch_ms": start.first_batch_ms,
        "later_batch_median_ms": start.steady_median_ms,
        "fleet_s": [],
    }
    for _run in range(args.fleet_runs):
        t = run_job_backlog(
            spark,
            settings,
            OPERATOR,
            args.fleet_prefix,
            args.fleet_ledger,
            max_offsets=100_000,
            tag=f"jit-{uuid.uuid4().hex[:8]}",
            verify=False,
        )
        out["fleet_s"].append(round(t.wall_s, 1))
    spark.stop()
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of c1 and tiered (default 2)")
    parser.add_argument("--fleet-runs", type=int, default=4, help="fleet backlog runs per application (default 4)")
    parser.add_argument("--messages", type=int, default=200_000, help="the fleet backlog (default 200,000)")
    parser.add_argument("--small", type=int, default=4_000, help="the small backlog of the start-up figures")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    parser.add_argument("--prefix", help=argparse.SUPPRESS)
    parser.add_argument("--fleet-prefix", help=argparse.SUPPRESS)
    parser.add_argument("--fleet-ledger", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print("JIT-RESULT " + json.dumps(one_application(args)), flush=True)
        return 0
    if args.rounds < 1 or args.fleet_runs < 0 or args.messages < 1000 or args.small < 1000:
        parser.error("--rounds >= 1, --fleet-runs >= 0, --messages and --small >= 1000")

    from sandbox import Settings, open_sandbox

    settings = Settings.from_env()
    open_sandbox(settings).up()
    run = uuid.uuid4().hex[:6]
    work = settings.scratch_dir(f"jit-{run}-")
    fleet_prefix = f"jit{run}-fleet-"
    fleet_ledger = produce(settings, work, fleet_prefix, seed=4, messages=args.messages, shape=FLEET)
    baseline = run_baseline_backlog(settings, fleet_prefix, fleet_ledger)
    say(f"baseline: {baseline.records:,} records in {baseline.wall_s:.1f}s ({baseline.per_s:,.0f}/s)")
    results = []
    for round_ in range(args.rounds):
        for mode in MODES:
            argv = [
                sys.executable,
                __file__,
                "--child",
                "--work",
                str(work),
                "--prefix",
                f"jit{run}-",
                "--fleet-prefix",
                fleet_prefix,
                "--fleet-ledger",
                fleet_ledger,
                "--fleet-runs",
                str(args.fleet_runs),
                "--small",
                str(args.small),
            ]
            done = subprocess.run(argv, env={**os.environ, "OSL_SPARK_JIT": mode}, capture_output=True, text=True, timeout=1800)
            line = next((x for x in done.stdout.splitlines() if x.startswith("JIT-RESULT ")), None)
            if done.returncode != 0 or line is None:
                print(
                    f"jit bench: the {mode} application failed (exit {done.returncode}):\n{done.stderr[-3000:]}", file=sys.stderr
                )
                return 1
            result = json.loads(line.removeprefix("JIT-RESULT ")) | {"round": round_ + 1}
            results.append(result)
            say(
                f"round {round_ + 1}, {mode}: session {result['session_s']:.1f}s, first batch {result['first_batch_ms'] / 1000:.1f}s, "
                f"later batches {result['later_batch_median_ms'] / 1000:.2f}s; fleet runs "
                + ", ".join(f"{s:.1f}s ({baseline.wall_s / s:.2f}x)" for s in result["fleet_s"])
            )
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"jit-r{run}.json"
    path.write_text(
        json.dumps(
            {"baseline_s": baseline.wall_s, "baseline_per_s": baseline.per_s, "messages": args.messages, "results": results},
            indent=1,
        )
    )
    print(f"\n{'mode':8} {'round':>5} {'session s':>10} {'1st batch s':>12} {'later s':>8}  fleet runs (s, x baseline)")
    for r in results:
        fleet = ", ".join(f"{s:.1f} ({baseline.wall_s / s:.2f}x)" for s in r["fleet_s"])
        print(
            f"{r['mode']:8} {r['round']:>5} {r['session_s']:>10.1f} {r['first_batch_ms'] / 1000:>12.1f} "
            f"{(r['later_batch_median_ms'] or 0) / 1000:>8.2f}  {fleet}"
        )
    print(f"baseline: {baseline.per_s:,.0f} records/s; results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
