"""`make demo`: the embedded sandbox end to end.

1. start (or find) the sandbox and prove Kafka and MinIO answer;
2. run collection-point producers with a few injected faults, writing a ledger;
3. run the ordered stateful job on the Spark cluster while they produce, then drain it;
4. verify the lake against the ledger and print the verdict and where to look.

Each demo run uses its own topic prefix, lake prefix and checkpoint, so runs never mix.
It leaves the sandbox running for exploration; `make down` stops it.
"""

from __future__ import annotations

import argparse
import sys
import threading
import time

from job.engine.session import DEFAULT_POLICY
from sandbox import SandboxError, Settings, open_sandbox
from sandbox.checks.smoke import kafka_round_trip, s3_round_trip
from sandbox.settings import detect_backend

DEMO_FAULTS = ("drop:0.01", "duplicate:0.01", "corrupt:0.005", "reorder:0.01:k=3")


WORKBOOK = "(00 tour to 10 recovery benchmark: the job, its failures, their repair)"
BREAK_THINGS = "break things         .venv/bin/python -m sandbox kill spark-worker-1   (then: restart spark-worker-1)"


def main(argv: list[str] | None = None) -> int:
    """Run the demo; 0 when the lake verifies, 1 when it does not or a step failed, 2 when
    the sandbox or its services cannot be used. Every failure is one paragraph on stderr."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default=DEFAULT_POLICY, help=f"integrity policy of the job (default: {DEFAULT_POLICY})")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds the producers run")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second, all sites together")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    started = time.monotonic()
    settings = None
    try:
        settings = _choose_backend(Settings.from_env(backend=detect_backend()))
        if settings.backend == "compose" and not settings.attached:
            return _demo_in_compose(settings, argv)
        sb = open_sandbox(settings, progress=_sandbox_line)
        if settings.attached:
            print("== 1. the compose stack, seen from inside the jupyter container", flush=True)
        else:
            print(f"== 1. starting the {settings.backend} sandbox (state: {settings.state_dir}, logs in logs/)", flush=True)
        sb.up()
        print(f"   kafka: {kafka_round_trip(settings, messages=20)}; minio: {s3_round_trip(settings)}")
        verdict = _pipeline(settings, args)
    except KeyboardInterrupt:
        print("\ndemo interrupted; the sandbox keeps running (`make down` stops it)", file=sys.stderr)
        return 130
    except Exception as exc:
        failure = explain(exc, settings)
        if failure is None:
            raise
        message, status = failure
        print(f"\ndemo failed: {message}", file=sys.stderr)
        return status
    states = [f"{s.name} {s.state}" for s in sb.status()]
    print(f"\n   sandbox: {', '.join(states)}  (`make status`: endpoints and logs)")
    e = settings.endpoints()
    print(
        f"\n== where to look next ({time.monotonic() - started:.0f}s in all)\n"
        f"  lake (MinIO console) {e.s3_console}/browser/{settings.bucket}  (user {settings.s3_access_key} / {settings.s3_secret_key})\n"
        f"  Spark master UI      {e.spark_master_ui}"
    )
    if not settings.attached:  # inside the jupyter container, the host's side prints the rest (_demo_in_compose)
        print(
            f"  logs                 {settings.state_dir / 'logs'}\n"
            f"  the workbook         jupyter lab notebooks/   {WORKBOOK}\n"
            f"  {BREAK_THINGS}\n"
            f"  stop                 make down"
        )
    return 0 if verdict else 1


def explain(exc: BaseException, settings: Settings | None) -> tuple[str, int] | None:
    """(one-paragraph message, exit status) for an error the demo knows how to explain, or
    None for a bug (which should show its traceback)."""
    from confluent_kafka import KafkaException

    from job.engine.errors import JobError
    from job.spark.errors import query_error
    from producers.errors import ProducerError

    logs = f"{settings.state_dir / 'logs'}" if settings else "the sandbox's logs folder"
    check = f"check the sandbox with `python -m sandbox status` (logs in {logs}) and run `make demo` again"
    if isinstance(exc, (SandboxError, JobError, ProducerError)):
        return str(exc), getattr(exc, "exit_status", 2)
    if isinstance(exc, KafkaException):
        where = settings.endpoints().kafka_bootstrap if settings else "the sandbox"
        error = exc.args[0]
        return f"Kafka at {where}: {error.str() if hasattr(error, 'str') else error}; {check}", 2
    try:
        from botocore.exceptions import BotoCoreError, ClientError
    except ImportError:  # pragma: no cover - boto3 is a dependency
        BotoCoreError = ClientError = ()  # type: ignore[assignment,misc]
    if isinstance(exc, (BotoCoreError, ClientError)):
        where = settings.endpoints().s3_endpoint if settings else "the sandbox"
        return f"MinIO at {where}: {exc}; {check}", 2
    if isinstance(exc, TimeoutError):
        return f"{exc}; the machine may be overloaded or a service stuck: {check}", 1
    from py4j.protocol import Py4JError
    from pyspark.errors import PySparkException

    if isinstance(exc, (PySparkException, Py4JError)):
        from sandbox.jvm.spark_session import driver_log

        error = query_error("of the demo job", exc, log=driver_log(settings) if settings else None)
        return str(error), error.exit_status
    return None


def _choose_backend(settings: Settings) -> Settings:
    """Compose where Docker answers (unless OSL_BACKEND says otherwise); the local backend, with
    one line saying why, where Docker answers but compose cannot run."""
    import os
    from dataclasses import replace

    if settings.backend != "compose" or settings.attached or os.environ.get("OSL_BACKEND"):
        return settings
    from sandbox.services.compose import compose_unavailable

    reason = compose_unavailable()
    if reason is None:
        return settings
    print(f"demo: {reason}; using the local backend instead (OSL_BACKEND=compose forces compose)", flush=True)
    return replace(settings, backend="local")


def _demo_in_compose(settings: Settings, argv: list[str] | None) -> int:
    """Start the compose stack here, then run this same demo inside the jupyter container, where
    the Spark driver must live (executors connect back to it by name) and the stack is attached."""
    from sandbox.services.compose import ComposeBackend

    sb = ComposeBackend(settings)
    print(f"== 1. starting the compose sandbox ({sb.project_name}; the first run builds the images)", flush=True)
    sb.up()
    print("   the pipeline runs inside the jupyter container (its driver must be in the compose network)", flush=True)
    rc = sb.run_in("jupyter", ["python", "/opt/osl/demo.py", *(sys.argv[1:] if argv is None else argv)]).returncode
    e = settings.endpoints()
    print(
        f"  the workbook         {e.jupyter}/lab/tree/notebooks/00-tour.ipynb?token=sandbox   {WORKBOOK}; attached to this stack\n"
        f"  {BREAK_THINGS}\n"
        f"  logs                 docker compose -p {sb.project_name} logs SERVICE\n"
        f"  stop                 make down   (data kept in named volumes; `python -m sandbox reset --yes` deletes it)"
    )
    return rc


def _pipeline(settings: Settings, args) -> bool:
    from job.ops.verifier import s3_target
    from job.spark import interrupts, pipeline
    from job.spark.config import job_config
    from job.verify.lake_check import verify_lake
    from producers.errors import ProducerError
    from producers.faults import parse_fault
    from producers.runner import RunConfig, Runner, new_run_id
    from sandbox.jvm.spark_session import driver_log, spark_session
    from sandbox.progress import Ticker

    run_id = new_run_id()
    prefix = f"demo-{run_id}-"
    ledger = f"s3a://{settings.bucket}/demo/{run_id}/ledger"
    lake = f"s3a://{settings.bucket}/demo/{run_id}"
    s3 = s3_target(settings)
    run_cfg = RunConfig(
        ledger=ledger,
        bootstrap=settings.endpoints().kafka_bootstrap,
        sites=3,
        join=1,
        sessions=2,
        rate=args.rate,
        duration=args.duration,
        snapshot_every=50,
        faults=tuple(parse_fault(f) for f in DEMO_FAULTS),
        seed=args.seed,
        run_id=run_id,
        topic_prefix=prefix,
        s3=s3,
    )
    cfg = job_config(
        settings,
        output=lake,
        checkpoint=settings.checkpoint_root / "demo" / run_id,
        topic_prefix=prefix,
        policy=args.policy,
        trigger="3 seconds",
    )

    print(f"\n== 2. producers: run {run_id}, {run_cfg.sites} sites (+{run_cfg.join} joining), faults {', '.join(DEMO_FAULTS)}")
    print(f"   topics {prefix}*, ledger {ledger}")
    runner = Runner(run_cfg)
    summary: dict[str, object] = {}

    def produce() -> None:
        try:
            summary["result"] = runner.run()
        except Exception as exc:  # noqa: BLE001 - handed to the main thread, which explains it
            summary["exception"] = exc

    producer = threading.Thread(target=produce, name="producers", daemon=True)
    print(
        f"\n== 3. the job: policy {cfg.policy}, Spark master {settings.endpoints().spark_master} (driver log {driver_log(settings)})"
    )
    # The producers start first and send while the Spark application starts (10-15 s): the job
    # reads its topics from their first offset, so what it finds waiting is a backlog, not a loss.
    producing_since = time.monotonic()
    producer.start()
    spark = None
    try:
        spark = spark_session(settings, "demo-job")
        with interrupts.deferred_interrupts():
            queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
            ticker = Ticker(lambda line: print("   " + line, flush=True))
            while producer.is_alive():
                producer.join(1.0)
                interrupts.check()
                for query in queries:
                    pipeline.raise_if_dead(query)
                ticker(lambda: _batch_line(queries[0].lastProgress, time.monotonic() - producing_since, args.duration))
            ticker.close()
            if "exception" in summary:
                raise summary["exception"]  # type: ignore[misc]
            result = summary["result"]
            if result.error:  # type: ignore[attr-defined]
                raise ProducerError(f"the producers of run {run_id} stopped early ({result.stopped}): {result.error}")  # type: ignore[attr-defined]
            print("   producers done:\n" + "\n".join("     " + line for line in result.text(sites=False).splitlines()))  # type: ignore[attr-defined]
            pipeline.drain(
                queries, bootstrap=settings.endpoints().kafka_bootstrap, topic_prefix=prefix, progress=lambda m: print("   " + m)
            )

            print(f"\n== 4. verifying {lake} against the ledger")
            report = verify_lake(spark, ledger=ledger, lake=lake, policy=cfg.policy, s3=s3)
    finally:
        runner.stop()  # a failed job must not leave the producers sending
        if producer.is_alive():
            producer.join(30.0)
        if spark is not None:
            spark.stop()
    print("\n".join("   " + line for line in report.summary().splitlines()))
    print(f"\n   outputs: {cfg.sink_path} (rows, sessions, quarantine, and the raw archive of the input)")
    return bool(report.ok)


def _sandbox_line(line: str) -> None:
    """The sandbox's progress, one screen's worth: its waits and its verdict, not every
    service's start and probe (those are in its logs, and a failure names them)."""
    fetching = line.startswith("[artifacts]") and not line.startswith("[artifacts]   ")  # a first run's downloads
    if fetching or line.startswith("[sandbox] waiting for") or "all services healthy" in line or "resuming" in line:
        print("   " + line, flush=True)


def _batch_line(progress: dict | None, elapsed_s: float, duration_s: float) -> str:
    head = f"producing: {elapsed_s:.0f}s of {duration_s:.0f}s"
    if not progress:
        return f"{head}; the job is starting"
    return f"{head}; job batch {progress['batchId']}: {progress['numInputRows']} records, {progress.get('processedRowsPerSecond', 0):.0f} records/s"


if __name__ == "__main__":
    raise SystemExit(main())
