"""``python -m job``: run the streaming job, verify a lake against a ledger."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import re
import sys
import time
from pathlib import Path

from job.engine.errors import DataLossError, JobError, UsageError
from job.spark import saved
from job.spark.config import OPERATORS, JobConfig


def _cap(text: str) -> int | None:
    """``--max-offsets-per-trigger``: a positive number, or ``none`` for no cap (JobConfig's None)."""
    if text.strip().lower() == "none":
        return None
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


_cap.__name__ = "cap (a positive number or none)"  # what argparse names in its error

#: The options that set a JobConfig field: flag, field, type, help. Defaults come from JobConfig,
#: so each is written once; a flag left out is not in the namespace (argparse.SUPPRESS), which
#: tells job.spark.saved.resolve what the user set over the run's saved configuration.
_JOB_OPTIONS: tuple[tuple[str, str, object, str], ...] = (
    ("--policy", "policy", str, "integrity policy: strict | resync | window | none"),
    ("--window", "window", int, "reorder window in messages, for --policy window"),
    ("--topic-prefix", "topic_prefix", str, "topic prefix to subscribe to"),
    ("--output", "output", str, "lake root"),
    ("--starting-offsets", "starting_offsets", str, "earliest | latest | JSON offsets; read by a new checkpoint only"),
    (
        "--max-offsets-per-trigger",
        "max_offsets_per_trigger",
        _cap,
        "records per micro-batch at most, all partitions together; none for no cap",
    ),
    ("--state-partitions", "state_partitions", int, "partitions of the session state, fixed by the checkpoint's first run"),
    (
        "--input-tasks",
        "input_tasks",
        int,
        "tasks that read Kafka per micro-batch, 0 for one per Kafka partition with new records",
    ),
    ("--sink-writers", "sink_writers", int, "Parquet files a sink task keeps open, 0 to sort by output (Spark's default)"),
    ("--trigger", "trigger", str, "micro-batch interval, or available-now"),
    ("--idle-timeout", "idle_timeout_s", int, "seconds before an idle session expires"),
    ("--operator", "operator", str, " | ".join(OPERATORS)),
    (
        "--fail-on-data-loss",
        "fail_on_data_loss",
        bool,
        "stop when Kafka deleted records the checkpoint says come next; --no-fail-on-data-loss skips to the oldest record Kafka still has",
    ),
    (
        "--raw-archive",
        "raw_archive",
        bool,
        "archive every input record in the lake (output=raw); --no-raw-archive: the job ran without it",
    ),
)
_RUN_FIELDS = tuple(name for _, name, _, _ in _JOB_OPTIONS)
_CHECKPOINT_HELP = "the job's checkpoint dir, whose job.json holds the run's settings (default: <state>/checkpoints/job)"


def _job_options(parser: argparse.ArgumentParser, fields: tuple[str, ...], *, what: str = "") -> None:
    """Add the options of ``fields`` to ``parser``, each with JobConfig's default in its help."""
    defaults = {f.name: f.default for f in dataclasses.fields(JobConfig)}
    defaults["output"] = "s3a://<bucket>/job"
    defaults["max_offsets_per_trigger"] = JobConfig.max_offsets_per_trigger or "none"
    for flag, name, kind, text in _JOB_OPTIONS:
        if name not in fields:
            continue
        shown_default = {True: "on", False: "off"}.get(defaults[name], defaults[name])  # type: ignore[call-overload]
        help_text = f"{text}{what} (default: the run's saved setting, else {shown_default})"
        if kind is bool:
            parser.add_argument(flag, dest=name, action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS, help=help_text)
        else:
            parser.add_argument(flag, dest=name, type=kind, default=argparse.SUPPRESS, help=help_text)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m job", description="The ordered, stateful session job and its verifier.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    run = sub.add_parser(
        "run",
        help="run the streaming job on the sandbox's Spark cluster",
        description="Runs the job; its settings are saved beside the checkpoint (job.json) and a "
        "later run on the same checkpoint starts from them (docs/job-config.md).",
    )
    _job_options(run, _RUN_FIELDS)
    run.add_argument("--prefix", dest="deprecated_prefix", help=argparse.SUPPRESS)  # before --topic-prefix existed
    run.add_argument("--checkpoint", type=Path, help="checkpoint dir (default: <state>/checkpoints/job)")
    run.add_argument(
        "--allow-sink-ahead",
        action="store_true",
        help="start even where the output's sink log is ahead of the checkpoint: the metadata trap, on purpose (chapter 08)",
    )
    run.add_argument("--until-drained", action="store_true", help="stop once everything now in Kafka is processed")
    run.add_argument("--duration", type=float, help="stop after this many seconds")
    run.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE", help="an extra Spark setting; repeatable")
    run.add_argument("--events", type=Path, help="event log for `job watch` (default: <checkpoint>/events.jsonl)")
    run.add_argument("--watch", action="store_true", help="carry the watchdog in this process (see `job watch`)")
    _watch_options(run)
    watch = sub.add_parser("watch", help="follow a running job's event log; alert on error, stall or lag")
    watch.add_argument("--events", type=Path, help="the job's event log (default: <checkpoint>/events.jsonl)")
    watch.add_argument("--checkpoint", type=Path, help=_CHECKPOINT_HELP)
    _job_options(watch, ("topic_prefix",), what=", for the lag")
    watch.add_argument("--duration", type=float, help="stop watching after this many seconds (default: until interrupted)")
    _watch_options(watch)
    verify = sub.add_parser("verify", help="compare the lake with the producers' ledger")
    verify.add_argument(
        "--ledger",
        required=True,
        action="append",
        help="ledger directory or s3a:// prefix; repeat it when several producer runs fed the job",
    )
    verify.add_argument(
        "--lake", dest="output", default=argparse.SUPPRESS, help="lake root (default: the run's, else s3a://<bucket>/job)"
    )
    verify.add_argument("--checkpoint", type=Path, help=_CHECKPOINT_HELP)
    _job_options(verify, ("policy",), what=" the job ran with")
    verify.add_argument("--json", type=Path, help="also write the machine-readable report here")
    verify.add_argument(
        "--driver-memory",
        metavar="SIZE",
        help="heap of the verifier's Spark driver, e.g. 2g (default: OSL_VERIFY_DRIVER_MEMORY, else 1g)",
    )
    verify.add_argument(
        "--kafka-deleted",
        type=Path,
        metavar="FILE",
        help="offsets Kafka deleted before the job read them (JSON, job.verify.compare.save_deleted): "
        "their records count as lost to Kafka, not as the job's fault",
    )
    repair = sub.add_parser(
        "repair",
        help="repair a job whose checkpoint and file-sink output disagree (dry run unless --apply)",
        description="The six-step repair of docs in job/ops/repair.py: find the damage, cut the output "
        "after each session's last complete snapshot, back up and remove the checkpoint, "
        "restart from explicit offsets. Prints the plan; --apply carries it out.",
    )
    repair.add_argument("--apply", action="store_true", help="carry the plan out (default: print it only)")
    repair.add_argument("--partitions", help="topic:p,... : search only these partitions for damage, and repair them")
    repair.add_argument("--checkpoint", type=Path, help=_CHECKPOINT_HELP)
    _job_options(repair, _RUN_FIELDS, what=", for the restart")
    repair.add_argument(
        "--prefix", dest="topic_prefix", default=argparse.SUPPRESS, help=argparse.SUPPRESS
    )  # the old name, as for `run`
    repair.add_argument("--plan", type=Path, help="also write the plan as JSON here (RepairPlan.from_json reads it back)")
    backfill = sub.add_parser(
        "backfill",
        help="replay the raw archive for a time range into a versioned output (no broker needed)",
        description="Replay the job's raw archive for [--from, --to) through the same session core into "
        "<lake>/backfill/<version>/out; readers are untouched until --merge or --switch. Times are ISO 8601 "
        "(UTC when no zone), epoch milliseconds, 'earliest' or 'latest'. See job/ops/backfill.py for the merge rule.",
    )
    backfill.add_argument("--from", dest="start", required=True, help="range start, included (e.g. 2026-11-22T21:00:00Z)")
    backfill.add_argument("--to", dest="end", required=True, help="range end, excluded")
    backfill.add_argument(
        "--lake",
        dest="output",
        default=argparse.SUPPRESS,
        help="lake root the job writes (default: the run's, else s3a://<bucket>/job)",
    )
    backfill.add_argument("--checkpoint", type=Path, help=_CHECKPOINT_HELP)
    backfill.add_argument("--raw", help="the lake whose raw archive to replay (default: --lake)")
    backfill.add_argument("--version", help="output version name (default: derived from the range)")
    backfill.add_argument("--overwrite", action="store_true", help="replace an existing output version")
    _job_options(backfill, ("policy", "window"))
    backfill.add_argument("--job-version", default="v1", help="session logic to run: v1 (current) or v0-skips-deletes")
    backfill.add_argument(
        "--merge",
        action="store_true",
        help="also merge with the output readers see now into <version>+merged (the live output wins)",
    )
    backfill.add_argument("--ledger", help="verify the result (and the archive) against this ledger")
    backfill.add_argument("--switch", action="store_true", help="point readers at the result if --ledger verifies it clean")
    package = sub.add_parser(
        "package",
        help="build the job for spark-submit: a --py-files zip, a driver script, a properties file",
        description="See job/ops/submit_bundle.py. Prints the spark-submit line for this sandbox.",
    )
    package.add_argument(
        "--out", type=Path, default=Path("build/spark-submit"), help="folder to write (default: build/spark-submit)"
    )
    return parser


def _watch_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--notify",
        action="append",
        metavar="CHANNEL",
        help="stderr | jsonl:PATH | webhook:URL; repeat for several (default: stderr)",
    )
    parser.add_argument(
        "--stall-after", type=float, default=120.0, help="seconds without a batch while input waits (default: 120)"
    )
    parser.add_argument(
        "--lag-threshold", type=int, default=50_000, help="records behind Kafka before a lag alert (default: 50000)"
    )
    parser.add_argument("--lag-for", type=float, default=0.0, help="seconds the lag must stay above the threshold (default: 0)")
    parser.add_argument("--lag-every", type=float, default=5.0, help="seconds between Kafka lag samples (default: 5)")
    parser.add_argument("--webhook-timeout", type=float, default=5.0, help="seconds a webhook may take (default: 5)")


def _watchdog_kwargs(args, settings, topic_prefix: str) -> dict:
    """The Watchdog's settings from the command line (channels, thresholds, Kafka lag source)."""
    from job.ops.watch import Thresholds, kafka_high_watermarks, parse_channel

    specs = args.notify or ["stderr"]
    return {
        "channels": [parse_channel(spec, webhook_timeout_s=args.webhook_timeout) for spec in specs],
        "thresholds": Thresholds(stall_after_s=args.stall_after, lag_records=args.lag_threshold, lag_for_s=args.lag_for),
        "high_watermarks": kafka_high_watermarks(settings.endpoints().kafka_bootstrap, topic_prefix),
        "lag_every_s": args.lag_every,
    }


def main(argv: list[str] | None = None) -> int:
    """Run one command; exit status 0 on success, 1 when a check failed (verification,
    policy strict, a query that died or did not drain), 2 for input or an environment the
    command cannot work with, 130 on Ctrl-C. Errors are one paragraph on stderr."""
    args = _parser().parse_args(argv)
    from producers.errors import ProducerError
    from sandbox import SandboxError, Settings

    try:
        settings = Settings.from_env()
        if args.command == "backfill":
            from job.ops.backfill import run_cli

            return run_cli(args, settings)
        if args.command == "run":
            return _run(args, settings)
        if args.command == "watch":
            return _watch(args, settings)
        if args.command == "repair":
            from job.ops.repair import run_cli

            return run_cli(args, settings)
        if args.command == "package":
            return _package(args, settings)
        return _verify(args, settings)
    except (JobError, SandboxError, ProducerError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_status", 2)
    except KeyboardInterrupt:
        print(INTERRUPTED, file=sys.stderr)
        return 130


#: What ``python -m job run`` says on Ctrl-C.
INTERRUPTED = "interrupted; the checkpoint lets the next run continue where this one stopped"


def _package(args, settings) -> int:
    from job.ops.submit_bundle import build
    from sandbox.settings import shown

    pkg = build(args.out, settings)
    print(f"packaged {pkg.modules} modules of job, producers and sandbox -> {shown(pkg.zip)}")
    print(f"driver script -> {shown(pkg.driver)}; properties for {settings.endpoints().spark_master} -> {shown(pkg.properties)}")
    print("submit from an environment with the project's dependencies (not its source), in client mode:")
    print(f"  PYSPARK_PYTHON=$(command -v python3) {pkg.submit_line('run', '--until-drained')}")
    return 0


def _run(args, settings) -> int:
    if args.deprecated_prefix is not None:
        print(
            "warning: --prefix is deprecated and will go away; use --topic-prefix (the producers' name for it)", file=sys.stderr
        )
        args.topic_prefix = args.deprecated_prefix
    cfg = saved.from_args(args, settings, _RUN_FIELDS)
    from job.spark import interrupts, lake
    from sandbox.checks.health import require
    from sandbox.jvm.spark_session import driver_log, spark_session

    extra = {}
    for item in args.conf:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise UsageError(f"--conf {item!r}", "write it as KEY=VALUE, e.g. spark.sql.adaptive.enabled=false")
        if key.strip() == "spark.sql.shuffle.partitions":
            raise UsageError(f"--conf {item!r}", f"the job's state partitions are --state-partitions {value.strip() or 'N'}")
        extra[key.strip()] = value
    require(settings, "kafka", "minio", "spark")
    print(
        f"[job] policy={cfg.policy} operator={cfg.operator} failOnDataLoss={str(cfg.fail_on_data_loss).lower()} topics={cfg.topic_pattern} -> {cfg.output} (checkpoint {cfg.checkpoint})",
        file=sys.stderr,
    )
    saved.check_fixed(cfg)  # before a Spark application starts; pipeline.start checks it again
    if not args.allow_sink_ahead:
        _refuse_sink_ahead(cfg, settings)  # the same: a refusal in seconds, no cluster cores taken
    spark = spark_session(settings, cfg.name, extra=extra)
    print(f"[job] Spark UI {spark.sparkContext.uiWebUrl}; driver log {driver_log(settings)}", file=sys.stderr)
    sink = lake.open_lake(spark, cfg.output)  # for the sink-log warning; pipeline.start refuses older layouts
    if (warning := lake.sink_log_warning(sink, lake.sink_log_compact(spark, sink))) is not None:
        print(f"warning: {warning}", file=sys.stderr)
    events = (args.events or cfg.checkpoint / "events.jsonl").resolve()
    with contextlib.ExitStack() as stack:
        if args.watch:
            from job.ops.watch import watch_spark

            stack.enter_context(watch_spark(spark, event_log=events, **_watchdog_kwargs(args, settings, cfg.topic_prefix)))
        else:
            _log_events(spark, events)
        print(f"[job] events -> {events} (follow with `python -m job watch --events {events}`)", file=sys.stderr)
        with interrupts.deferred_interrupts():
            try:
                return _run_queries(args, spark, cfg, settings)
            except DataLossError as exc:  # Spark names the first range it failed on: say all Kafka deleted
                raise _naming_deleted(exc, cfg, settings) from None


def _refuse_sink_ahead(cfg, settings) -> None:
    """Raise the metadata trap's :class:`~job.engine.errors.SinkAheadError` before Spark starts,
    when the output's sink log, listed directly, is ahead of the checkpoint."""
    from job.ops.verifier import s3_target
    from job.spark import lake, pipeline
    from job.verify.lake_check import listed_sink_log

    log = listed_sink_log(cfg.output, s3=s3_target(settings))
    if log and (trap := pipeline.sink_ahead_of(cfg, lake.sink_path(cfg.output), log)) is not None:
        raise trap


def _naming_deleted(exc: DataLossError, cfg, settings) -> DataLossError:
    """``exc`` naming, per partition, the checkpoint's next offset to Kafka's log start offset."""
    from job.ops import dataloss

    try:
        read = dataloss.committed_offsets(cfg.checkpoint / "sessions")
        marks = dataloss.watermarks(settings.endpoints().kafka_bootstrap, sorted({t for t, _ in read}))
    except Exception:  # noqa: BLE001 (Kafka or the checkpoint unreadable now: Spark's own words stand)
        return exc
    deleted = dataloss.unread_deleted(read, {k: low for k, (low, _) in marks.items()})
    return exc.naming([(d.line(), d.count) for d in deleted]) if deleted else exc


def _log_events(spark, path: Path) -> None:
    from job.ops.watch.events import EventListener, EventLog

    spark.streams.addListener(EventListener.create(EventLog(path).append))


def _run_queries(args, spark, cfg, settings) -> int:
    from job.spark import pipeline

    queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap, allow_sink_ahead=args.allow_sink_ahead)
    if args.allow_sink_ahead:
        print(
            "warning: --allow-sink-ahead: a sink log ahead of the checkpoint skips this run's batches up to its latest id "
            "(the metadata trap, chapter 08)",
            file=sys.stderr,
        )
    try:
        if args.until_drained:
            pipeline.drain(
                queries,
                bootstrap=settings.endpoints().kafka_bootstrap,
                topic_prefix=cfg.topic_prefix,
                progress=lambda m: print(m, file=sys.stderr),
            )
        else:
            _follow(queries, args.duration)
    finally:
        for q in queries:
            q.stop()
        spark.stop()
    return 0


def _follow(queries: list, duration: float | None) -> None:
    """Print each new batch until ``duration`` is up or a query ends (an available-now run
    ends by itself); a query that failed raises the error a user can act on."""
    from job.spark import interrupts, pipeline
    from job.spark.errors import query_error

    deadline = time.monotonic() + duration if duration else None
    last = None
    while deadline is None or time.monotonic() < deadline:
        interrupts.check()
        for q in queries:
            if (exc := q.exception()) is not None:
                raise query_error(q.name, exc) from None
        active = [q for q in queries if q.isActive]
        if not active:
            return
        pipeline.wait(active[0], 1.0)
        p = queries[0].lastProgress
        if p and p["batchId"] != last:
            last = p["batchId"]
            print(
                f"[job] batch {p['batchId']}: {p['numInputRows']} rows, {p.get('processedRowsPerSecond', 0):.0f} rows/s",
                file=sys.stderr,
            )


def _watch(args, settings) -> int:
    from job.ops.watch import follow_log

    cfg = saved.from_args(args, settings, ("topic_prefix",))
    events = args.events or cfg.checkpoint / "events.jsonl"
    kwargs = _watchdog_kwargs(args, settings, cfg.topic_prefix)
    deadline = time.monotonic() + args.duration if args.duration else None
    names = ", ".join(channel.name for channel in kwargs["channels"])
    print(
        f"[watch] following {events}; alerts -> {names}; stall after {args.stall_after:g} s, lag over {args.lag_threshold} records",
        file=sys.stderr,
    )
    dog = follow_log(events, until=lambda: deadline is not None and time.monotonic() >= deadline, **kwargs)
    print(f"[watch] {len(dog.alerts)} alert(s), {len(dog.failures)} channel failure(s)", file=sys.stderr)
    return 0


def _verify(args, settings) -> int:
    from job.ops.verifier import verify_on_sandbox
    from job.verify.compare import load_deleted

    deleted = load_deleted(args.kafka_deleted) if args.kafka_deleted else ()
    if args.driver_memory:
        if not re.fullmatch(r"\d+[kmgt]?", args.driver_memory.lower()):
            raise UsageError(
                f"--driver-memory {args.driver_memory!r} is not a size", "give a number with a unit, e.g. 2g or 1536m"
            )
        settings = dataclasses.replace(settings, verify_driver_memory=args.driver_memory)
    cfg = saved.from_args(args, settings, ("output", "policy"))
    report = verify_on_sandbox(settings, ledger=args.ledger, lake=cfg.output, policy=cfg.policy, deleted=deleted)
    print(report.summary())
    if args.json:
        args.json.write_text(report.to_json())
        print(f"report: {args.json}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
