"""Producers against the sandbox's real Kafka and MinIO: the ledger matches the topics exactly.

Each test writes to topics under its own random prefix, so reruns and other tests never
share a topic.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from producers.contract import ContractError, decode
from producers.expected_output import expected_sessions
from producers.kafka import TOPIC_MAX_MESSAGE_BYTES, end_offsets, ensure_topics, read_partition
from producers.ledger import S3Target, read_ledger
from tests.kafka_runs import produce

pytestmark = [pytest.mark.integration, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]

FAULTS = [
    "drop:0.01",
    "duplicate:0.01",
    "reorder:0.01:k=3",
    "corrupt:0.005",
    "schema-drift:0.005",
    "silent-divergence:0.005",
    "clock-skew:0.005",
    "oversized:sessions=0:at=15",
    "orphan-update:sessions=1",
    "epoch-reset:sites=weather-1:at=300",
    "crash:sites=fleet-2:sessions=0:at=250",
    "burst:sites=warehouse-0:at=100:size=200",
]


def read_all(bootstrap: str, prefix: str, deadline_s: float = 60.0) -> list[tuple[str, int, int, bytes, bytes]]:
    """Every record of every topic starting with ``prefix``, read until the high watermarks."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=10)
    parts = [
        TopicPartition(t, p, OFFSET_BEGINNING) for t, tm in meta.topics.items() if t.startswith(prefix) for p in tm.partitions
    ]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"itest-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
        }
    )
    try:
        high = {(tp.topic, tp.partition): consumer.get_watermark_offsets(tp, timeout=10)[1] for tp in parts}
        consumer.assign(parts)
        got: list[tuple[str, int, int, bytes, bytes]] = []
        done = {k for k, h in high.items() if h == 0}
        end = time.monotonic() + deadline_s
        while len(done) < len(high):
            assert time.monotonic() < end, f"consumer stuck: {len(done)}/{len(high)} partitions read to their end"
            m = consumer.poll(1.0)
            if m is None:
                continue
            assert m.error() is None, m.error()
            got.append((m.topic(), m.partition(), m.offset(), m.key(), m.value()))
            if m.offset() + 1 >= high[(m.topic(), m.partition())]:
                done.add((m.topic(), m.partition()))
        return got
    finally:
        consumer.close()


def test_a_faulty_run_lands_in_kafka_exactly_as_the_ledger_says(bootstrap: str, tmp_path: Path) -> None:
    cfg, summary = produce(
        bootstrap,
        tmp_path / "ledger",
        faults=FAULTS,
        sites=2,
        join=1,
        sessions=2,
        rate=1500.0,
        duration=20.0,
        session_length=400,
        snapshot_every=100,
        seed=7,
    )
    prefix = cfg.topic_prefix
    assert summary.stopped == "completed", summary.text()
    df = read_ledger(cfg.ledger)
    assert set(df["outcome"]) == {"ok", "not-sent"}, df["error"].dropna().unique()

    records = read_all(bootstrap, prefix)
    ok = df[df["outcome"] == "ok"]
    in_ledger = [(r.topic, int(r.partition), int(r.offset), r.session.encode(), r.sent) for r in ok.itertuples()]
    assert len(set(in_ledger)) == len(in_ledger)  # one ledger row per offset
    assert sorted(records) == sorted(in_ledger)  # ...and one offset per ledger row
    assert {t for t, *_ in records} == {f"{prefix}warehouse-0", f"{prefix}weather-1", f"{prefix}fleet-2"}
    # How the transport places a record Kafka acknowledged without an offset: it reads the same log.
    topic, partition = records[0][:2]
    mine = sorted((o, k, v) for t, p, o, k, v in records if (t, p) == (topic, partition))
    assert list(read_partition(bootstrap, topic, partition)) == mine

    # The faults really reached the topics: bad records fail to parse with the recorded reason.
    by_offset = {(r.topic, int(r.partition), int(r.offset)): r for r in ok.itertuples()}
    reasons = set()
    for topic, p, off, _key, value in records:
        row = by_offset[(topic, p, off)]
        try:
            decode(value)
            assert row.fault not in ("corrupt", "schema-drift", "oversized")
        except ContractError as exc:
            assert row.fault in ("corrupt", "schema-drift", "oversized"), (row.fault, exc)
            assert f'"reason": "{exc.reason}"' in row.fault_detail
            reasons.add(exc.reason)
    assert "too-large" in reasons
    faults = set(df["fault"].dropna())
    assert {"oversized", "orphan-update", "epoch-reset", "crash", "burst", "drop", "duplicate", "reorder"} <= faults
    expected = expected_sessions(df)
    assert len(expected) == 6
    [crashed] = df.loc[df["fault"] == "crash", "session"].tolist()
    assert crashed.startswith("fleet-2-") and crashed.endswith("-s0000") and not expected[crashed].ended


def test_topics_are_created_with_the_partitions_and_the_size_limit_asked_for(bootstrap: str, tmp_path: Path) -> None:
    cfg, _ = produce(bootstrap, tmp_path / "l", sites=1, sessions=1, session_length=5, partitions=4, rows=5)
    prefix = cfg.topic_prefix
    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"{prefix}warehouse-0"
    assert len(admin.list_topics(topic, timeout=10).topics[topic].partitions) == 4
    from confluent_kafka.admin import ConfigResource

    [future] = admin.describe_configs([ConfigResource(ConfigResource.Type.TOPIC, topic)]).values()
    assert future.result(timeout=10)["max.message.bytes"].value == str(TOPIC_MAX_MESSAGE_BYTES)


def test_end_offsets_read_while_the_topics_are_being_created_are_answered_not_refused(bootstrap: str) -> None:
    """A reader polling the end offsets while a producer creates its topics (chapter 05 waits
    for its backlog that way): for a moment the broker lists a partition's leader before that
    leader serves it, and answers NOT_LEADER_FOR_PARTITION. The read asks again instead of
    failing the chapter; the race shows on most creations here, so five are enough to see it."""
    reads_during_creation = 0
    for _ in range(5):
        prefix = f"t-{uuid.uuid4().hex[:8]}-"
        topics = [f"{prefix}{name}" for name in ("a", "b", "c")]
        created: dict[str, object] = {}
        creating = threading.Thread(target=lambda: created.setdefault("topics", ensure_topics(bootstrap, topics)))
        creating.start()
        while creating.is_alive():
            end_offsets(bootstrap, prefix, timeout_s=10)
            reads_during_creation += 1
        creating.join()
        assert sorted(created["topics"]) == topics
        assert end_offsets(bootstrap, prefix) == {(t, p): 0 for t in topics for p in range(3)}
    assert reads_during_creation >= 5, "the creations finished before any read: the race was not exercised"


def test_a_ledger_can_live_in_the_sandboxs_object_storage(sandbox, bootstrap: str) -> None:
    st = sandbox.settings
    s3 = S3Target(endpoint=st.endpoints().s3_endpoint, access_key=st.s3_access_key, secret_key=st.s3_secret_key)
    location = f"s3a://{st.bucket}/itest-ledgers/{uuid.uuid4().hex[:8]}"
    _, summary = produce(bootstrap, location, faults=["drop:at=5"], s3=s3, sites=1, sessions=1, session_length=50, rows=10)
    df = read_ledger(location, s3=s3)
    assert len(df) == summary.rows == 51
    assert df.attrs["run"]["faults"] == ["drop:1.0:at=5"]
    assert df.loc[df["seq"] == 5, "outcome"].tolist() == ["not-sent"]


def test_ctrl_c_ends_the_sessions_and_flushes_the_ledger(bootstrap: str, tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    env = {**os.environ, "OSL_KAFKA_BOOTSTRAP": bootstrap, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "producers",
            "run",
            "--sites",
            "2",
            "--sessions",
            "1",
            "--rate",
            "300",
            "--duration",
            "600",
            "--seed",
            "3",
            "--ledger",
            str(ledger),
            "--topic-prefix",
            f"itest-{uuid.uuid4().hex[:8]}-",
            "--fault",
            "drop:0.01",
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        # Wait for the first flushed part: then sessions are certainly open.
        end = time.monotonic() + 60
        while not list(ledger.glob("part-*.parquet")):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < end, "no ledger part written within 60 s"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "stopping: ending open sessions" in err and ": stopped after" in out
    df = read_ledger(str(ledger))
    last = df.groupby("session").tail(1)
    assert len(last) == 2 and set(last["kind"]) == {"end"}
    assert set(df["outcome"]) <= {"ok", "not-sent"}
