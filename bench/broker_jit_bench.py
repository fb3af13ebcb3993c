"""Broker JIT benchmark: the Kafka broker's JVM with C1 only against the JVM's tiered C1-then-C2.

``OSL_KAFKA_JIT`` (sandbox/settings.py) picks the broker's JIT. This bench restarts the bench
sandbox's broker (the local backend's) with each choice in turn (``--rounds`` times each, alternated) and measures the
broker process's CPU seconds (``/proc/<pid>/stat``) and the rates on the same work:

  start    from the JVM's launch to a broker that answers (it loads the partitions it holds);
  produce  ``--records`` keyed records of 300 bytes into a fresh topic of 150 partitions (a
           fleet's), as fast as one idempotent librdkafka producer sends them;
  consume  all of them read back by one consumer.

    .venv/bin/python bench/broker_jit_bench.py                 # about 4 minutes on 2 cores
    .venv/bin/python bench/broker_jit_bench.py --rounds 1 --records 500000

It uses the bench sandbox (``.sandbox-bench``, ports +20000) like the other benches, leaves its
broker running with the default, deletes each round's topic, and writes ``bench/results/broker-jit-<run>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# bench.job_bench points OSL_STATE_DIR, OSL_PORT_OFFSET and OSL_BACKEND at the bench sandbox
from bench.job_bench import RESULTS, say  # noqa: E402

MODES = ("c1", "tiered")
PARTITIONS = 150
VALUE = b"x" * 300


def broker_cpu_s(state_dir: Path) -> float:
    """The CPU seconds (user + system) of the broker this sandbox runs (its config file is in
    ``state_dir``)."""
    tick = os.sysconf("SC_CLK_TCK")
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
            if "kafka.Kafka" in cmd and f"{state_dir}{os.sep}" in cmd:
                fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                return (int(fields[11]) + int(fields[12])) / tick
        except OSError:
            continue
    raise RuntimeError(f"no Kafka broker of the sandbox in {state_dir} is running")


def one_round(mode: str, records: int) -> dict:
    from confluent_kafka.admin import AdminClient, NewTopic

    from sandbox import Settings, open_sandbox

    settings = Settings.from_env({**os.environ, "OSL_KAFKA_JIT": mode})
    open_sandbox(settings, progress=lambda _line: None).restart("kafka")  # the JIT is fixed when the JVM starts
    started = broker_cpu_s(settings.state_dir)
    bootstrap = settings.endpoints().kafka_bootstrap
    topic = f"broker-jit-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # kept: its futures die with it
    for future in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        future.result(timeout=60)
    try:
        return {"mode": mode, "start_cpu_s": started, **_load(settings, bootstrap, topic, mode, records)}
    finally:  # 1.2 GB and 150 partitions a round: a later round's start would load them
        for future in admin.delete_topics([topic]).values():
            future.result(timeout=60)


def _load(settings, bootstrap: str, topic: str, mode: str, records: int) -> dict:
    from confluent_kafka import Consumer, Producer

    cpu0, t0 = broker_cpu_s(settings.state_dir), time.monotonic()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True})
    for i in range(records):
        while True:
            try:
                producer.produce(topic, VALUE, key=str(i % 1000).encode())
                break
            except BufferError:  # the local queue is full: let it drain
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise RuntimeError(f"{mode}: records still unsent after 120 s")
    cpu1, t1 = broker_cpu_s(settings.state_dir), time.monotonic()
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": topic, "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got, deadline = 0, time.monotonic() + 600
    while got < records:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{mode}: read {got:,} of {records:,} records in 600 s")
        got += sum(1 for m in consumer.consume(10_000, 1.0) if m.error() is None)
    consumer.close()
    cpu2, t2 = broker_cpu_s(settings.state_dir), time.monotonic()
    return {
        "produce_s": t1 - t0,
        "produce_cpu_s": cpu1 - cpu0,
        "consume_s": t2 - t1,
        "consume_cpu_s": cpu2 - cpu1,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=2, help="rounds of both modes, alternated (default 2)")
    parser.add_argument("--records", type=int, default=4_000_000, help="records per round (default 4,000,000)")
    args = parser.parse_args()
    if args.rounds < 1 or args.records < 10_000:
        parser.error("--rounds >= 1 and --records >= 10000")
    from sandbox import Settings, open_sandbox

    settings = Settings.from_env()
    if settings.backend != "local":
        parser.error(
            f"the bench reads the broker's CPU from this machine's /proc: run it on the local backend, not {settings.backend}"
        )
    sandbox = open_sandbox(settings, progress=lambda _line: None)
    results, step = [], "starting the bench sandbox"
    try:
        sandbox.up()
        for round_ in range(args.rounds):
            for mode in MODES:
                step = f"round {round_ + 1}, {mode}"
                r = one_round(mode, args.records) | {"round": round_ + 1}
                results.append(r)
                say(
                    f"{step}: start {r['start_cpu_s']:.1f} CPU-s; produce {r['produce_cpu_s']:.1f} CPU-s in {r['produce_s']:.1f}s "
                    f"({args.records / r['produce_s']:,.0f}/s); consume {r['consume_cpu_s']:.1f} CPU-s in {r['consume_s']:.1f}s"
                )
        step = "restarting the broker with the default JIT"
        sandbox.restart("kafka")
    except Exception as exc:  # a broker that did not start or answer: say where, no traceback
        print(f"broker jit bench: {step}: {type(exc).__name__}: {exc}", file=sys.stderr)
        if step != "restarting the broker with the default JIT":
            try:
                sandbox.restart("kafka")  # leave the default running, as the other benches do
            except Exception as again:
                print(f"broker jit bench: and the broker did not restart with the default JIT: {again}", file=sys.stderr)
        return 1
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"broker-jit-r{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps({"records": args.records, "partitions": PARTITIONS, "results": results}, indent=1))
    print(f"\n{'mode':8} {'round':>5} {'start CPU-s':>12} {'produce CPU-s':>14} {'records/s':>10} {'consume CPU-s':>14}")
    for r in results:
        print(
            f"{r['mode']:8} {r['round']:>5} {r['start_cpu_s']:>12.1f} {r['produce_cpu_s']:>14.1f} "
            f"{args.records / r['produce_s']:>10,.0f} {r['consume_cpu_s']:>14.1f}"
        )
    print(f"results in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
