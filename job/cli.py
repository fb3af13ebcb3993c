"""``python -m job``: run the streaming job, verify a lake against a ledger."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from job.config import OPERATORS, JobConfig, Policy
from job.errors import JobError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m job", description="The ordered, stateful session job and its verifier.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser("run", help="run the streaming job on the sandbox's Spark cluster")
    run.add_argument("--policy", default="resync", help="strict | resync | window | none (default: resync)")
    run.add_argument("--window", type=int, default=8, help="reorder window in messages, for --policy window")
    run.add_argument("--prefix", default="collection-", help="topic prefix to subscribe to (default: collection-)")
    run.add_argument("--output", help="lake root (default: s3a://<bucket>/job)")
    run.add_argument("--checkpoint", type=Path, help="checkpoint dir (default: <state>/checkpoints/job)")
    run.add_argument("--starting-offsets", default="earliest", help="earliest | latest")
    run.add_argument("--max-offsets-per-trigger", type=int, default=20_000)
    run.add_argument("--no-fail-on-data-loss", action="store_true", help="continue when Kafka lost offsets")
    run.add_argument("--trigger", default="5 seconds", help="micro-batch interval, or available-now")
    run.add_argument("--idle-timeout", type=int, default=600, help="seconds before an idle session expires")
    run.add_argument("--operator", default=JobConfig.operator,
                     help=f"{' | '.join(OPERATORS)} (default: {JobConfig.operator})")  # fmt: skip
    run.add_argument("--until-drained", action="store_true", help="stop once everything now in Kafka is processed")
    run.add_argument("--duration", type=float, help="stop after this many seconds")
    verify = sub.add_parser("verify", help="compare the lake with the producers' ledger")
    verify.add_argument("--ledger", required=True, help="ledger directory or s3a:// prefix")
    verify.add_argument("--lake", help="lake root (default: s3a://<bucket>/job)")
    verify.add_argument("--policy", default="resync")
    verify.add_argument("--json", type=Path, help="also write the machine-readable report here")
    backfill = sub.add_parser(
        "backfill", help="replay the raw archive for a time range into a versioned output (no broker needed)",
        description="Replay the job's raw archive for [--from, --to) through the same session core into "
        "<lake>/backfill/<version>/sessions-out; readers are untouched until --merge or --switch. Times are ISO 8601 "
        "(UTC when no zone), epoch milliseconds, 'earliest' or 'latest'. See job/backfill.py for the merge rule.",
    )  # fmt: skip
    backfill.add_argument("--from", dest="start", required=True, help="range start, included (e.g. 2026-11-22T21:00:00Z)")
    backfill.add_argument("--to", dest="end", required=True, help="range end, excluded")
    backfill.add_argument("--lake", help="lake root the job writes (default: s3a://<bucket>/job)")
    backfill.add_argument("--raw", help="raw archive (default: <lake>/raw)")
    backfill.add_argument("--version", help="output version name (default: derived from the range)")
    backfill.add_argument("--overwrite", action="store_true", help="replace an existing output version")
    backfill.add_argument("--policy", default="resync", help="strict | resync | window | none (default: resync)")
    backfill.add_argument("--window", type=int, default=8, help="reorder window in messages, for --policy window")
    backfill.add_argument("--job-version", default="v1", help="session logic to run: v1 (current) or v0-skips-deletes")
    backfill.add_argument("--merge", action="store_true",
                          help="also merge with the output readers see now into <version>+merged (the live output wins)")  # fmt: skip
    backfill.add_argument("--ledger", help="verify the result (and the archive) against this ledger")
    backfill.add_argument("--switch", action="store_true", help="point readers at the result if --ledger verifies it clean")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    from sandbox import SandboxError, Settings

    try:
        settings = Settings.from_env()
        if args.command == "backfill":
            from job.backfill import run_cli

            return run_cli(args, settings)
        if args.command == "run":
            return _run(args, settings)
        return _verify(args, settings)
    except (JobError, SandboxError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; the checkpoint lets the next run continue where this one stopped", file=sys.stderr)
        return 130


def job_config(settings, **overrides) -> JobConfig:
    """A JobConfig with the sandbox's defaults for output and checkpoint."""
    values = {
        "output": f"s3a://{settings.bucket}/job",
        "checkpoint": settings.checkpoint_root / "job",
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    return JobConfig(**values)


def _run(args, settings) -> int:
    policy: Policy = args.policy
    cfg = job_config(
        settings,
        policy=policy, window=args.window, topic_prefix=args.prefix, output=args.output,
        checkpoint=args.checkpoint.resolve() if args.checkpoint else None,
        starting_offsets=args.starting_offsets, max_offsets_per_trigger=args.max_offsets_per_trigger,
        fail_on_data_loss=not args.no_fail_on_data_loss, trigger=args.trigger, idle_timeout_s=args.idle_timeout,
        operator=args.operator,
    )  # fmt: skip
    from job import pipeline
    from sandbox.spark import driver_log, spark_session

    print(f"[job] policy={cfg.policy} operator={cfg.operator} topics={cfg.topic_pattern} -> {cfg.output} (checkpoint {cfg.checkpoint})", file=sys.stderr)
    spark = spark_session(settings, cfg.name)
    print(f"[job] Spark UI {spark.sparkContext.uiWebUrl}; driver log {driver_log(settings)}", file=sys.stderr)
    queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
    try:
        if args.until_drained:
            pipeline.drain(queries, bootstrap=settings.endpoints().kafka_bootstrap, topic_prefix=cfg.topic_prefix,
                           progress=lambda m: print(m, file=sys.stderr))  # fmt: skip
        else:
            deadline = time.monotonic() + args.duration if args.duration else None
            while all(q.isActive for q in queries) and (deadline is None or time.monotonic() < deadline):
                queries[0].awaitTermination(5.0)
                p = queries[0].lastProgress
                if p:
                    print(f"[job] batch {p['batchId']}: {p['numInputRows']} rows, {p.get('processedRowsPerSecond', 0):.0f} rows/s", file=sys.stderr)
            for q in queries:
                if q.exception() is not None:
                    raise q.exception()
    finally:
        for q in queries:
            q.stop()
    return 0


def _verify(args, settings) -> int:
    from job.verify_spark import verify_lake

    report = verify_lake(settings, ledger=args.ledger, lake=args.lake or f"s3a://{settings.bucket}/job", policy=args.policy)
    print(report.summary())
    if args.json:
        args.json.write_text(report.to_json())
        print(f"report: {args.json}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
