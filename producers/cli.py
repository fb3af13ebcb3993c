"""``python -m producers``: run collection points, list faults, summarise a ledger.

The environment is read here and nowhere else, as ``python -m sandbox`` and ``python -m job``
read it (:meth:`sandbox.settings.Settings.from_env`): the sandbox's Kafka and MinIO, with
``OSL_PORT_OFFSET`` moving their ports, or ``OSL_KAFKA_BOOTSTRAP`` / ``OSL_S3_ENDPOINT`` naming
them, and ``OSL_S3_ACCESS_KEY`` / ``OSL_S3_SECRET_KEY``; flags override them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from producers.contract import TOPIC_PREFIX
from producers.errors import ProducerError
from producers.faults import FAULT_NAMES, describe_faults, parse_fault
from producers.ledger import S3Target

__all__ = ["main"]


def _parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    from sandbox.settings import Settings

    settings = Settings.from_env(env)  # the same sandbox `python -m sandbox` and `python -m job` reach
    kafka, s3 = settings.endpoints().kafka_bootstrap, settings.endpoints().s3_endpoint
    p = argparse.ArgumentParser(prog="python -m producers", description="Collection-point producers for the ordered-stream lab.")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run",
        help="run sites and sessions into Kafka, writing a ledger",
        description=(
            "Run collection points into Kafka: each site gets topic <prefix><site>, each session opens with a "
            "snapshot, sends upserts/deletes, repeats snapshots and ends. Ctrl-C ends the sessions and flushes "
            "the ledger; a second Ctrl-C aborts (the ledger is still written)."
        ),
    )
    r.add_argument(
        "--bootstrap",
        default=kafka,
        help="Kafka bootstrap servers (default: the sandbox's, %(default)s, from OSL_PORT_OFFSET or OSL_KAFKA_BOOTSTRAP)",
    )
    r.add_argument("--sites", type=int, default=3, help="sites at the start (default %(default)s)")
    r.add_argument("--join", type=int, default=0, help="more sites that join during the run, evenly spaced (default %(default)s)")
    r.add_argument("--sessions", type=int, default=4, help="sessions per site, one after another (default %(default)s)")
    r.add_argument("--rate", type=float, default=500.0, help="messages per second, all sites together (default %(default)s)")
    r.add_argument("--duration", type=float, default=60.0, help="seconds before open sessions are ended (default %(default)s)")
    r.add_argument(
        "--session-length", type=int, default=None, help="messages per session before end (default: fill the duration)"
    )
    r.add_argument("--snapshot-every", type=int, default=200, help="a full snapshot every N messages (default %(default)s)")
    r.add_argument(
        "--snapshot-interval",
        type=float,
        default=None,
        metavar="SECONDS",
        help="also a snapshot after this many seconds",
    )
    r.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="NAME[:PROB][:knob=value...], repeatable; see 'faults'",
    )
    r.add_argument("--seed", type=int, default=0, help="seed for tables, changes and faults (default %(default)s)")
    r.add_argument(
        "--ledger", default=None, help="ledger location: a directory or s3a://bucket/prefix (default ledgers/<run id>)"
    )
    r.add_argument("--run-id", default=None, help="run id embedded in session ids (default: random)")
    r.add_argument("--topic-prefix", default=TOPIC_PREFIX, help="topic = prefix + site (default %(default)s)")
    r.add_argument("--partitions", type=int, default=3, help="partitions of new topics (default %(default)s)")
    r.add_argument("--rows", type=int, default=None, help="initial rows per site (default 200-400 from the seed)")
    r.add_argument(
        "--s3-endpoint",
        default=s3,
        help="for s3a:// ledgers (default: the sandbox's MinIO, %(default)s)",
    )
    r.add_argument("--s3-access-key", default=settings.s3_access_key, help="(env OSL_S3_ACCESS_KEY)")
    r.add_argument("--s3-secret-key", default=settings.s3_secret_key, help="(env OSL_S3_SECRET_KEY)")
    r.add_argument("--no-progress", action="store_true", help="no live progress line")

    f = sub.add_parser("faults", help="list the data faults and what each allows")
    f.add_argument("names", nargs="*", metavar="NAME", help="only these faults")

    led = sub.add_parser("ledger", help="summarise a ledger and its loss windows")
    led.add_argument("location", help="a ledger directory or s3a:// prefix")
    led.add_argument("--windows", action="store_true", help="list every loss window")
    led.add_argument("--s3-endpoint", default=s3)
    led.add_argument("--s3-access-key", default=settings.s3_access_key)
    led.add_argument("--s3-secret-key", default=settings.s3_secret_key)
    return p


def main(
    argv: Sequence[str] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """Run the CLI; returns the exit status (0 ok, 1 run error, 2 bad usage, 130 aborted)."""
    env = os.environ if env is None else env
    out = out or sys.stdout
    err = err or sys.stderr
    from sandbox.errors import SandboxError

    try:
        parser = _parser(env)
    except SandboxError as exc:  # e.g. OSL_PORT_OFFSET that is not a number
        print(f"error: {exc}", file=err)
        return 2
    args = parser.parse_args(argv)
    try:
        if args.command == "faults":
            unknown = [n for n in args.names if n not in FAULT_NAMES]
            if unknown:
                parser.error(f"no fault is named {unknown[0]!r}; use one of {', '.join(FAULT_NAMES)}")
            print(describe_faults(args.names or None), file=out)
            return 0
        if args.command == "ledger":
            return _ledger(args, out)
        return _run(args, out, err)
    except ProducerError as exc:
        print(f"error: {exc}", file=err)
        return 2 if isinstance(exc, ValueError) else 1


def _s3(args: argparse.Namespace) -> S3Target:
    return S3Target(endpoint=args.s3_endpoint, access_key=args.s3_access_key, secret_key=args.s3_secret_key)


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    from producers.runner import RunConfig, Runner, new_run_id

    faults = tuple(parse_fault(s) for s in args.fault)
    run_id = args.run_id or new_run_id()
    config = RunConfig(
        ledger=args.ledger or os.path.join("ledgers", run_id),
        bootstrap=args.bootstrap,
        sites=args.sites,
        join=args.join,
        sessions=args.sessions,
        rate=args.rate,
        duration=args.duration,
        session_length=args.session_length,
        snapshot_every=args.snapshot_every,
        snapshot_interval_s=args.snapshot_interval,
        faults=faults,
        seed=args.seed,
        run_id=run_id,
        topic_prefix=args.topic_prefix,
        partitions=args.partitions,
        rows=args.rows,
        s3=_s3(args),
    )
    tty = err.isatty()
    last_line = [0.0]

    def progress(p: Any) -> None:
        if args.no_progress:
            return
        if tty:
            # Cut to the terminal width: a wrapped line cannot be redrawn in place.
            width = shutil.get_terminal_size().columns
            err.write("\r\x1b[2K" + p.line()[: max(20, width - 1)])
            err.flush()
        elif time.monotonic() - last_line[0] >= 5.0:
            last_line[0] = time.monotonic()
            print(p.line(), file=err, flush=True)

    runner = Runner(config, on_progress=progress)
    interrupts = [0]

    def on_sigint(signum: int, frame: Any) -> None:
        interrupts[0] += 1
        if interrupts[0] == 1:
            print("\nstopping: ending open sessions and flushing the ledger (Ctrl-C again to abort)", file=err, flush=True)
            runner.stop()
        else:
            raise KeyboardInterrupt

    print(
        f"run {run_id}: {config.sites} sites (+{config.join} joining), {config.sessions} sessions each of "
        f"{config.plan.length} messages, {config.rate:g} msg/s for up to {config.duration:g}s into {config.bootstrap}; "
        f"ledger {config.ledger}",
        file=err,
    )
    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        summary = runner.run()
    finally:
        signal.signal(signal.SIGINT, previous)
    if tty and not args.no_progress:
        err.write("\n")
    print(summary.text(), file=out)
    return {"error": 1, "aborted": 130}.get(summary.stopped, 0)


def _ledger(args: argparse.Namespace, out: TextIO) -> int:
    from producers.expected_output import expected_sessions
    from producers.ledger import read_ledger

    df = read_ledger(args.location, s3=_s3(args))
    run = df.attrs.get("run", {})
    print(f"run {run.get('run_id')} seed {run.get('seed')} faults {', '.join(run.get('faults', [])) or 'none'}", file=out)
    print(
        f"{len(df)} rows; outcomes: " + ", ".join(f"{k} {v}" for k, v in df["outcome"].value_counts().sort_index().items()),
        file=out,
    )
    faults = df["fault"].dropna().value_counts().sort_index()
    print("faulted rows: " + (", ".join(f"{k} {v}" for k, v in faults.items()) or "none"), file=out)
    sessions = expected_sessions(df)
    print(f"{'session':<34}{'rows':>6}{'final':>7}{'windows':>9}{'ended':>7}{'uncertain':>11}", file=out)
    for sid, s in sessions.items():
        n = int((df["session"] == sid).sum())
        ended = "yes" if s.ended else "no"
        print(f"{sid:<34}{n:>6}{len(s.final_rows):>7}{len(s.windows):>9}{ended:>7}{len(s.uncertain_ids):>11}", file=out)
        if args.windows:
            for w in s.windows:
                to = "end of epoch" if w.to_seq is None else str(w.to_seq)
                restored = "restored" if w.restored else "NOT restored"
                allows = ", ".join(sorted(w.allowed)) or "nothing"
                print(f"    {w.fault:<22} epoch {w.epoch} seq {w.from_seq}..{to} {restored}; allows {allows}", file=out)
    return 0
