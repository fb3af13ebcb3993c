"""Verifier benchmark: `python -m job verify` on fleets' lakes of growing size, as a user runs it.

For each shape (``--sessions``: a few sessions, a fleet of 1,000) and size (``--sizes``: row
changes in the lake), a fleet is produced with a fault mix and snapshots and run through the job
(job/drills/fleet.py), then verified twice with the default settings, each in its own process:

  spark  ``python -m job verify`` (job/verify/spark_check.py: judged in Spark, session by
         session; only the findings come back);
  pure   the pure verifier on the whole lake collected into pandas (job/verify/compare.py
         ``check`` on ``lake_frames``), what ``job verify`` did before: the baseline.

Figures: seconds, the peak resident memory of the Spark driver's JVM and of the Python driver,
the verdict, and the time per million row changes. The pure verifier gets ``--pure-timeout``
seconds; a run past it, or out of memory, is reported as such.

    .venv/bin/python bench/verify_bench.py                                   # 10k, 100k, 1M x 8 and 1,000 sessions
    .venv/bin/python bench/verify_bench.py --sizes 10000 --sessions 8        # a quick look

It uses its own sandbox (state ``.sandbox-bench``, ports +20000) unless ``OSL_STATE_DIR`` /
``OSL_PORT_OFFSET`` say otherwise, and leaves it running (``python -m sandbox down``).
Figures go to stdout and ``bench/results/verify-<run>.json``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import RESULTS, own_sandbox  # noqa: E402  (after sys.path above)

own_sandbox()

#: The pure baseline in a process of its own, as ``job verify`` ran before the Spark verifier.
_PURE = """
import sys, time
from sandbox import Settings
from job.ops.verifier import fatal_errors, verifier_session
from job.verify.lake_check import lake_frames, load_ledger
from job.verify.compare import check
settings = Settings.from_env()
spark = verifier_session(settings)
with fatal_errors(settings):
    frames = lake_frames(spark, sys.argv[2])
report = check(load_ledger(sys.argv[1]), frames["rows"], frames["quarantine"], frames["sessions"], policy=sys.argv[3])
print(report.summary().splitlines()[0])
sys.exit(0 if report.ok else 1)
"""


def say(message: str) -> None:
    print(message, flush=True)


@dataclass
class Verified:
    """One verifier run on one lake."""

    shape: str
    how: str
    rows: int
    seconds: float
    jvm_peak_mb: float
    python_peak_mb: float
    status: int
    verdict: str

    @property
    def per_million_s(self) -> float:
        return self.seconds / max(self.rows, 1) * 1e6


def run_measured(argv: list[str], *, timeout: float) -> tuple[float, float, float, int, str]:
    """Run ``argv``; (seconds, peak JVM RSS MB, peak Python RSS MB, exit status, last output line).
    Memory is sampled every 0.2 s over the process and its children (the JVM, Python workers)."""
    import psutil

    started = time.monotonic()
    with tempfile.TemporaryFile("w+") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, text=True)
        parent = psutil.Process(proc.pid)
        jvm = python = 0.0
        status = None
        while status is None:
            try:
                python = max(python, parent.memory_info().rss / 1e6)
                for child in parent.children(recursive=True):
                    rss = child.memory_info().rss / 1e6
                    if child.name() == "java":
                        jvm = max(jvm, rss)
            except psutil.Error:
                pass
            try:
                status = proc.wait(timeout=0.2)
            except subprocess.TimeoutExpired:
                if time.monotonic() - started > timeout:
                    for child in parent.children(recursive=True):
                        child.kill()
                    proc.kill()
                    status = proc.wait()
                    out.seek(0)
                    return time.monotonic() - started, jvm, python, -9, f"killed after {timeout:.0f} s"
        out.seek(0)
        lines = [line for line in out.read().splitlines() if line.strip()]
    verdict = next((line for line in lines if line.startswith(("verify", "error"))), lines[-1] if lines else "")
    return time.monotonic() - started, jvm, python, status, verdict


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="row changes per lake, comma-separated")
    parser.add_argument("--sessions", default="8,1000", help="sessions per lake, comma-separated")
    parser.add_argument("--snapshot-every", type=int, default=40, help="messages between snapshots (default: 40)")
    parser.add_argument("--skip-pure", action="store_true", help="leave out the pure baseline")
    parser.add_argument("--pure-timeout", type=float, default=600.0, help="seconds the pure baseline may take (default: 600)")
    return parser.parse_args()


def main() -> int:
    from job.drills.fleet import FleetShape, fleet_lake
    from sandbox import Settings, open_sandbox
    from sandbox.jvm.spark_session import spark_session

    args = parse_args()
    settings = Settings.from_env()
    run = uuid.uuid4().hex[:7]
    sb = open_sandbox(settings)
    sb.up()
    spark = spark_session(settings, "verify-bench")
    work = settings.scratch_dir("verify-bench-")
    results: list[Verified] = []
    lakes = []
    try:
        for sessions in (int(s) for s in args.sessions.split(",")):
            for size in (int(s) for s in args.sizes.split(",")):
                shape = FleetShape.of(sessions, size, snapshot_every=args.snapshot_every)
                built = fleet_lake(spark, settings, shape, workdir=work, progress=say)
                lakes.append({**asdict(shape), **asdict(built)})
                results += verify_both(built, f"{shape.sessions} x {built.rows:,}", args)
    finally:
        spark.stop()
    print_table(results)
    out = RESULTS / f"verify-{run}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"run": run, "lakes": lakes, "verified": [asdict(r) for r in results]}, indent=1))
    say(f"\nresults: {out}")
    spark_ok = all(r.status == 0 for r in results if r.how == "spark")
    return 0 if spark_ok else 1


def verify_both(built, label: str, args: argparse.Namespace) -> list[Verified]:
    out = []
    argv = [sys.executable, "-m", "job", "verify", "--ledger", built.ledger, "--lake", built.output, "--policy", built.policy]
    seconds, jvm, python, status, verdict = run_measured(argv, timeout=1800)
    out.append(Verified(label, "spark", built.rows, seconds, jvm, python, status, verdict))
    say(f"[verify] spark on {label}: {seconds:.1f} s, JVM {jvm:.0f} MB, Python {python:.0f} MB: {verdict}")
    if not args.skip_pure:
        argv = [sys.executable, "-c", _PURE, built.ledger, built.output, built.policy]
        seconds, jvm, python, status, verdict = run_measured(argv, timeout=args.pure_timeout)
        out.append(Verified(label, "pure", built.rows, seconds, jvm, python, status, verdict))
        say(f"[verify] pure on {label}: {seconds:.1f} s, JVM {jvm:.0f} MB, Python {python:.0f} MB: {verdict}")
    return out


def print_table(results: list[Verified]) -> None:
    say("\n| sessions x row changes | verifier | seconds | s per 1M rows | JVM peak MB | Python peak MB | verdict |")
    say("|---|---|---|---|---|---|---|")
    for r in results:
        verdict = r.verdict if len(r.verdict) < 90 else r.verdict[:87] + "..."
        say(
            f"| {r.shape} | {r.how} | {r.seconds:.1f} | {r.per_million_s:.0f} | {r.jvm_peak_mb:.0f} | {r.python_peak_mb:.0f} | {verdict} |"
        )


if __name__ == "__main__":
    raise SystemExit(main())
