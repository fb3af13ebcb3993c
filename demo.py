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

from sandbox import SandboxError, Settings, open_sandbox
from sandbox.cli import _print_status
from sandbox.smoke import kafka_round_trip, s3_round_trip

DEMO_FAULTS = ("drop:0.01", "duplicate:0.01", "corrupt:0.005", "reorder:0.01:k=3")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--policy", default="resync", help="integrity policy of the job (default: resync)")
    parser.add_argument("--duration", type=float, default=30.0, help="seconds the producers run")
    parser.add_argument("--rate", type=float, default=200.0, help="messages per second, all sites together")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    started = time.monotonic()

    from job.errors import JobError
    from producers.errors import ProducerError

    try:
        settings = _choose_backend(Settings.from_env())
        if settings.backend == "compose" and not settings.attached:
            return _demo_in_compose(settings, argv)
        sb = open_sandbox(settings)
        print(f"== 1. starting the {settings.backend} sandbox (state: {settings.state_dir})", flush=True)
        sb.up()
        print(f"   kafka: {kafka_round_trip(settings, messages=20)}")
        print(f"   minio: {s3_round_trip(settings)}")
        verdict = _pipeline(settings, args)
    except (SandboxError, JobError, ProducerError) as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        return 2
    print()
    _print_status(sb.status())
    e = settings.endpoints()
    print(
        f"\n== where to look next ({time.monotonic() - started:.0f}s in all)\n"
        f"  lake (MinIO console) {e.s3_console}/browser/{settings.bucket}  (user {settings.s3_access_key} / {settings.s3_secret_key})\n"
        f"  Spark master UI      {e.spark_master_ui}\n"
        f"  logs                 {settings.state_dir / 'logs'}\n"
        f"  the workbook         jupyter lab notebooks/   (00-tour, 01-producers, 02-the-stateful-job)\n"
        f"  break things         .venv/bin/python -m sandbox kill spark-worker-1   (then: restart spark-worker-1)\n"
        f"  stop                 make down"
    )
    return 0 if verdict else 1


def _choose_backend(settings: Settings) -> Settings:
    """Compose where Docker answers (unless OSL_BACKEND says otherwise); the local backend, with
    one line saying why, where Docker answers but compose cannot run."""
    import os
    from dataclasses import replace

    if settings.backend != "compose" or settings.attached or os.environ.get("OSL_BACKEND"):
        return settings
    from sandbox.compose import compose_unavailable

    reason = compose_unavailable()
    if reason is None:
        return settings
    print(f"demo: {reason}; using the local backend instead (OSL_BACKEND=compose forces compose)", flush=True)
    return replace(settings, backend="local")


def _demo_in_compose(settings: Settings, argv: list[str] | None) -> int:
    """Start the compose stack here, then run this same demo inside the jupyter container, where
    the Spark driver must live (executors connect back to it by name) and the stack is attached."""
    from sandbox.compose import ComposeBackend

    sb = ComposeBackend(settings)
    print(f"== 1. starting the compose sandbox ({sb.project_name}; the first run builds the images)", flush=True)
    sb.up()
    print("   the pipeline runs inside the jupyter container (its driver must be in the compose network)", flush=True)
    rc = sb.run_in("jupyter", ["python", "/opt/osl/demo.py", *(sys.argv[1:] if argv is None else argv)]).returncode
    e = settings.endpoints()
    print(
        f"\n  JupyterLab           {e.jupyter}/lab?token=sandbox   (the workbook, attached to this stack)\n"
        f"  logs                 docker compose -p {sb.project_name} logs SERVICE\n"
        f"  stop                 make down   (data kept in named volumes; `python -m sandbox reset --yes` deletes it)"
    )
    return rc


def _pipeline(settings: Settings, args) -> bool:
    from job import pipeline
    from job.cli import job_config
    from job.verify_spark import verify_lake
    from producers.faults import parse_fault
    from producers.ledger import S3Target
    from producers.run import RunConfig, Runner, new_run_id
    from sandbox.spark import driver_log, spark_session

    run_id = new_run_id()
    prefix = f"demo-{run_id}-"
    ledger = f"s3a://{settings.bucket}/demo/{run_id}/ledger"
    lake = f"s3a://{settings.bucket}/demo/{run_id}"
    s3 = S3Target(endpoint=settings.endpoints().s3_endpoint, access_key=settings.s3_access_key, secret_key=settings.s3_secret_key)
    run_cfg = RunConfig(
        ledger=ledger, bootstrap=settings.endpoints().kafka_bootstrap, sites=3, join=1, sessions=2,
        rate=args.rate, duration=args.duration, snapshot_every=50, faults=tuple(parse_fault(f) for f in DEMO_FAULTS),
        seed=args.seed, run_id=run_id, topic_prefix=prefix, s3=s3,
    )  # fmt: skip
    cfg = job_config(settings, output=lake, checkpoint=settings.checkpoint_root / "demo" / run_id, topic_prefix=prefix,
                     policy=args.policy, trigger="3 seconds")  # fmt: skip

    print(f"\n== 2. producers: run {run_id}, {run_cfg.sites} sites (+{run_cfg.join} joining), faults {', '.join(DEMO_FAULTS)}")
    print(f"   topics {prefix}*, ledger {ledger}")
    summary: dict[str, object] = {}

    def produce() -> None:
        summary["result"] = Runner(run_cfg).run()

    producer = threading.Thread(target=produce, name="producers", daemon=True)
    print(f"\n== 3. the job: policy {cfg.policy}, Spark master {settings.endpoints().spark_master} (driver log {driver_log(settings)})")
    spark = spark_session(settings, "demo-job")
    producer.start()
    queries = pipeline.start(spark, cfg, bootstrap=settings.endpoints().kafka_bootstrap)
    last = -1
    while producer.is_alive():
        producer.join(3.0)
        p = queries[0].lastProgress
        if p and p["batchId"] != last:
            last = p["batchId"]
            print(f"   batch {p['batchId']:>3}: {p['numInputRows']:>5} records in, {p.get('processedRowsPerSecond', 0):>6.0f} records/s")
        if queries[0].exception() is not None:
            raise queries[0].exception()
    result = summary.get("result")
    if result is None:
        raise RuntimeError("the producers stopped without a summary; see the messages above")
    print("   producers done:\n" + "\n".join("     " + line for line in result.text().splitlines()))
    pipeline.drain(queries, bootstrap=settings.endpoints().kafka_bootstrap, topic_prefix=prefix,
                   progress=lambda m: print("   " + m))  # fmt: skip

    print(f"\n== 4. verifying {lake} against the ledger")
    report = verify_lake(settings, ledger=ledger, lake=lake, policy=cfg.policy, spark=spark)
    print("\n".join("   " + line for line in report.summary().splitlines()))
    spark.stop()
    print(f"\n   outputs: {cfg.sessions_path} (rows, sessions, quarantine) and {cfg.raw_path}")
    return bool(report.ok)


if __name__ == "__main__":
    raise SystemExit(main())
