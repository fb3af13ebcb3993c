"""Producer throughput: the producers package next to a bare confluent-kafka producer.

Both send the same bytes in the same run, into the sandbox's Kafka:

1. ``producers``: a full run (sites, sessions, snapshots every 200 messages, the default
   message mix, ledger written as Parquet) with no rate limit and no faults, from the
   first send to the last delivery report.
2. ``bare``: a plain ``confluent_kafka.Producer`` with the same settings sending exactly
   the keys and values the first run sent (read back from its ledger), to topics of its
   own, from the first ``produce`` to the end of ``flush``.

The ratio says what generation, encoding, fault checks and the ledger cost on top of
librdkafka. Run the sandbox first (``python -m sandbox up``), then::

    python bench/producer_bench.py --messages 30000 [--bootstrap HOST:PORT] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Producer  # noqa: E402

from producers.kafka import ensure_topics, producer_config  # noqa: E402
from producers.ledger import read_ledger  # noqa: E402
from producers.runner import RunConfig, Runner  # noqa: E402


def bench_producers(bootstrap: str, messages: int, sites: int, ledger: str, prefix: str) -> dict:
    cfg = RunConfig(
        ledger=ledger,
        bootstrap=bootstrap,
        sites=sites,
        sessions=1,
        rate=1e9,
        duration=3600.0,
        session_length=max(1, messages // sites - 1),
        snapshot_every=200,
        seed=1,
        topic_prefix=prefix,
    )
    runner = Runner(cfg)
    started = time.perf_counter()
    summary = runner.run()
    elapsed = time.perf_counter() - started
    if summary.stopped != "completed" or set(summary.outcomes) != {"ok"}:
        raise SystemExit(f"the producers run did not complete cleanly:\n{summary.text()}")
    # Site construction (Faker) happens before the first send; it is not throughput.
    df = read_ledger(ledger)
    first_send = df["produced_ms"].min() / 1000
    last_ack = df["acked_ms"].max() / 1000
    return {
        "name": "producers",
        "messages": summary.rows,
        "bytes": summary.bytes_sent,
        "seconds": max(last_ack - first_send, 1e-9),
        "wall_seconds_including_setup": elapsed,
    }


def bench_bare(bootstrap: str, records: list[tuple[str, bytes, bytes]]) -> dict:
    topics = sorted({t for t, _, _ in records})
    ensure_topics(bootstrap, topics)
    producer = Producer(producer_config(bootstrap))
    errors: list[str] = []

    def report(err, msg) -> None:  # noqa: ANN001
        if err is not None:
            errors.append(str(err))

    # Warm the connection and metadata outside the timed part, as the producers run does.
    for t in topics:
        producer.produce(t, value=b"{}", key=b"warm-up", on_delivery=report)
    producer.flush(30)
    started = time.perf_counter()
    for topic, key, value in records:
        while True:
            try:
                producer.produce(topic, value=value, key=key, on_delivery=report)
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    left = producer.flush(120)
    seconds = time.perf_counter() - started
    if left or errors:
        raise SystemExit(f"the bare producer lost messages: {left} unflushed, errors {errors[:3]}")
    return {"name": "bare", "messages": len(records), "bytes": sum(len(v) for _, _, v in records), "seconds": seconds}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap", default=os.environ.get("OSL_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    p.add_argument("--messages", type=int, default=30_000, help="messages in total (default %(default)s)")
    p.add_argument("--sites", type=int, default=3)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of a table")
    args = p.parse_args(argv)

    run = uuid.uuid4().hex[:8]
    with tempfile.TemporaryDirectory() as tmp:
        ledger = str(Path(tmp) / "ledger")
        ours = bench_producers(args.bootstrap, args.messages, args.sites, ledger, f"bench-{run}-")
        df = read_ledger(ledger)
        records = [
            (f"bench-{run}-bare-{t.split('-', 2)[2]}", s.encode(), v)
            for t, s, v in zip(df["topic"], df["session"], df["sent"], strict=True)
        ]
    bare = bench_bare(args.bootstrap, records)

    rows = []
    for r in (ours, bare):
        r["messages_per_s"] = r["messages"] / r["seconds"]
        r["mb_per_s"] = r["bytes"] / r["seconds"] / 1e6
        rows.append(r)
    ratio = ours["messages_per_s"] / bare["messages_per_s"]
    result = {
        "bootstrap": args.bootstrap,
        "results": rows,
        "ratio_producers_to_bare": ratio,
        "mean_message_bytes": ours["bytes"] / ours["messages"],
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"into Kafka at {args.bootstrap}: {ours['messages']} messages, mean {result['mean_message_bytes']:.0f} bytes "
        f"(snapshot every 200, default mix)"
    )
    print(f"{'producer':<12}{'messages':>10}{'MB':>9}{'seconds':>9}{'msg/s':>10}{'MB/s':>8}")
    for r in rows:
        print(
            f"{r['name']:<12}{r['messages']:>10}{r['bytes'] / 1e6:>9.2f}{r['seconds']:>9.2f}"
            f"{r['messages_per_s']:>10.0f}{r['mb_per_s']:>8.2f}"
        )
    print(f"ratio producers/bare: {ratio:.2f} (1.0 would mean the package adds nothing on top of librdkafka)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
