"""``python -m sandbox``: start, inspect and break the sandbox."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict, replace
from pathlib import Path

from sandbox.errors import SandboxError
from sandbox.services.backend import format_status
from sandbox.settings import Settings, detect_backend

_FAULTS = {
    "kill": "SIGKILL a service (a crashed node: no shutdown hook runs)",
    "pause": "freeze a service with SIGSTOP (connections stay open, nothing answers)",
    "resume": "unfreeze a paused service",
    "restart": "stop a service and start it again, waiting until it is healthy",
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox",
        description="Kafka, MinIO and a Spark standalone cluster for the ordered-streaming workbook.",
    )
    parser.add_argument("--state-dir", type=Path, help="where logs, data and pids live (default: .sandbox in the project)")
    parser.add_argument("--backend", choices=["local", "compose"], help="default: compose if a Docker engine answers, else local")
    parser.add_argument("--port-offset", type=int, help="add this to every port (run two sandboxes side by side)")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    sub.add_parser("up", help="start every service and wait until all are healthy (idempotent)")
    sub.add_parser("down", help="stop every service; data stays")
    reset = sub.add_parser(
        "reset",
        help="stop everything and delete all data (topics, objects, checkpoints); the compose workbook's working copy is kept",
    )
    reset.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    prune = sub.add_parser(
        "prune",
        help="delete the topics past runs left on the broker (they pile up and slow a broker restart); "
        "the lake, checkpoints and ledgers stay",
    )
    prune.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    prune.add_argument("--prefix", default="", help="only the topics whose name starts with this (default: every run's)")
    status = sub.add_parser("status", help="every service, its state, endpoint, UI and log")
    status.add_argument("--json", action="store_true", help="machine-readable output")
    logs = sub.add_parser("logs", help="the last lines of one service's log")
    logs.add_argument("service")
    logs.add_argument("-n", "--lines", type=int, default=50)
    for name, text in _FAULTS.items():
        sub.add_parser(name, help=text).add_argument("service")
    fetch = sub.add_parser("fetch", help="download and build every artifact into the cache, start nothing")
    fetch.add_argument(
        "--no-wait-for-minio",
        action="store_true",
        help="leave a MinIO build another process runs to finish on its own (scripts/bootstrap.sh); `up` waits for it",
    )
    sub.add_parser("smoke", help="prove each service works: Kafka round trip, S3 round trip, a Spark job")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        overrides: dict[str, object] = {}
        if args.state_dir:
            overrides["state_dir"] = args.state_dir
        overrides["backend"] = args.backend or detect_backend()
        settings = Settings.from_env(**overrides)
        if args.port_offset is not None:
            from sandbox.settings import Ports

            settings = replace(settings, ports=Ports().shifted(args.port_offset))
        if settings.backend == "compose" and not args.backend and not os.environ.get("OSL_BACKEND"):
            settings = _local_if_running(settings)
        return _run(args, settings)
    except SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _local_if_running(settings: Settings) -> Settings:
    """Docker answers, so compose is the default; but a local sandbox already running from this
    state dir (`make demo` without Docker, the tests) is what `down`, `status` or a fault means."""
    from sandbox.services.local import running_here

    running = running_here(settings)
    if not running:
        return settings
    print(
        f"note: a local sandbox runs from {settings.state_dir} ({', '.join(running)}): acting on it; "
        "--backend compose for the compose stack",
        file=sys.stderr,
    )
    return replace(settings, backend="local")


def _confirm(what: str, question: str) -> int:
    """0 when the user typed y to ``question``; 2 (with an error naming ``what`` and ``--yes``)
    without a terminal to ask on; 1 for any other answer."""
    if not sys.stdin.isatty():
        print(f"error: {what}; pass --yes to confirm", file=sys.stderr)
        return 2
    return 0 if input(f"{question} [y/N] ").strip().lower() == "y" else 1


def _prune(settings: Settings, *, prefix: str, yes: bool) -> int:
    """``prune``: every run's topics deleted, after a confirmation that says how many."""
    from sandbox.topics import TopicError, delete_topics, run_topics

    bootstrap = settings.endpoints().kafka_bootstrap
    try:
        topics = run_topics(bootstrap, prefix)
        if not topics.names:
            print(f"no run's topics{f' named {prefix}*' if prefix else ''} at {bootstrap}: nothing to prune")
            return 0
        what = f"{len(topics.names)} topic(s), {topics.partitions} partition(s), at {bootstrap}"
        if not yes and (refused := _confirm(f"prune deletes {what}", f"delete {what}? A job still reading one of them fails.")):
            return refused
        delete_topics(bootstrap, topics.names, timeout_s=max(30.0, len(topics.names) / 10))
    except TopicError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"deleted {what}")
    return 0


def _run(args: argparse.Namespace, settings: Settings) -> int:
    from sandbox import open_sandbox

    if args.command == "fetch":
        from sandbox.artifacts import fetch_all

        for key, value in fetch_all(settings, wait_for_minio=not args.no_wait_for_minio).items():
            shown = f"{len(value)} jars" if isinstance(value, list) else value or "still building (another process)"
            print(f"{key}: {shown}")
        return 0
    sb = open_sandbox(settings)
    if args.command == "up":
        sb.up()
        print(format_status(sb.status()))
        return 0
    if args.command == "down":
        sb.down()
        print("sandbox stopped (data kept; `python -m sandbox reset` deletes it)")
        return 0
    if args.command == "reset":
        if not args.yes and (
            refused := _confirm(
                f"reset deletes all data under {settings.state_dir}", f"delete all sandbox data under {settings.state_dir}?"
            )
        ):
            return refused
        sb.reset()
        print("sandbox stopped and its data deleted")
        return 0
    if args.command == "prune":
        return _prune(settings, prefix=args.prefix, yes=args.yes)
    if args.command == "status":
        statuses = sb.status()
        if args.json:
            print(json.dumps([asdict(s) for s in statuses], indent=2))
        else:
            print(format_status(statuses))
        return 0 if all(s.state == "running" for s in statuses) else 1
    if args.command == "logs":
        print(sb.logs(args.service, args.lines))
        return 0
    if args.command in _FAULTS:
        getattr(sb, args.command)(args.service)
        print(f"{args.command} {args.service}: done")
        return 0
    if args.command == "smoke":
        from sandbox.checks.smoke import run_all

        return 0 if all(proof.ok for proof in run_all(settings)) else 1
    raise AssertionError(args.command)
