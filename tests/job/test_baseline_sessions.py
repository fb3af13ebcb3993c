"""The baseline's consumer-independent part: micro-batches in, the three outputs out (no Kafka here;
``test_baseline_kafka.py`` runs it against the sandbox's broker)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from job.baseline import BaselineConfig, BaselineResult, Sessions
from job.engine.errors import ConfigError, IntegrityError
from job.engine.session import Record
from job.verify.compare import check
from producers.contract import Message, encode


def r(rid: str, v: int) -> dict[str, Any]:
    return {"id": rid, "v": v}


def stream(sid: str, partition: int, *, skip: int | None = None) -> list[Record]:
    common = {"site": "fleet-2", "session": sid, "epoch": 0}
    msgs = [
        Message.snapshot(seq=0, ts=0, rows=[r("a", 1)], **common),
        Message.upsert(seq=1, ts=1, row=r("a", 2), **common),
        Message.upsert(seq=2, ts=2, row=r("b", 1), **common),
        Message.snapshot(seq=3, ts=3, rows=[r("a", 2), r("b", 1)], **common),
        Message.end(seq=4, ts=4, **common),
    ]
    return [Record("collection-fleet-2", partition, i, sid, encode(m), 0) for i, m in enumerate(msgs) if i != skip]


def test_records_are_grouped_by_key_and_each_session_writes_one_status_row_per_batch() -> None:
    one, two = stream("s1", 0), stream("s2", 1)
    s = Sessions(policy="resync")
    # Interleaved partitions, each in offset order, cut into two micro-batches.
    s.batch([one[0], two[0], one[1], two[1]])
    s.batch([*one[2:], *two[2:]])
    rows, quarantine, sessions = s.frames()
    assert s.batches == 2 and quarantine.empty
    by_session = sessions.groupby("session")["status"].apply(list).to_dict()
    assert by_session == {"s1": ["open", "ended"], "s2": ["open", "ended"]}
    final = {"a": r("a", 2), "b": r("b", 1)}
    assert {k: v.table for k, v in s.states.items()} == {"s1": final, "s2": final}
    assert set(rows["session"]) == {"s1", "s2"} and set(rows.loc[rows["session"] == "s2", "partition"]) == {1}


def test_a_batch_is_applied_in_offset_order_whatever_order_it_arrives_in() -> None:
    s = Sessions(policy="strict")
    s.batch(list(reversed(stream("s1", 0))))
    assert s.statuses[-1].status == "ended" and s.statuses[-1].gaps == 0


def test_under_strict_a_failing_batch_writes_nothing_of_any_session() -> None:
    s = Sessions(policy="strict")
    s.batch(stream("s1", 0)[:2])
    before = (list(s.changes), list(s.statuses), dict(s.states))
    with pytest.raises(IntegrityError):
        s.batch([*stream("s2", 1), *stream("s1", 0, skip=2)[2:]])  # s2 is fine, s1 skips seq 2
    assert (s.changes, s.statuses, s.states) == before and s.batches == 1


def test_settle_gives_up_on_held_records_and_writes_their_status() -> None:
    s = Sessions(policy="window", window=2)
    s.batch(stream("s1", 0, skip=1)[:2])  # seq 2 waits for seq 1
    assert s.states["s1"].pending
    s.settle()
    assert [(q.reason, q.seq) for q in s.quarantine] == [("window-overflow", 2)]
    assert s.states["s1"].pending == () and s.statuses[-1].quarantined == 1


def test_the_outputs_round_trip_through_parquet_and_still_verify(tmp_path: Path) -> None:
    from producers.ledger import LedgerEntry, ledger_frame

    records = stream("s1", 0)
    s = Sessions(policy="resync")
    s.batch([*records[:2], Record("collection-fleet-2", 0, 99, "s1", b"{bad", 0)])
    s.batch(records[2:])
    rows, quarantine, sessions = s.frames()
    result = BaselineResult(
        rows=rows, quarantine=quarantine, sessions=sessions, records=6, batches=2, elapsed_s=1.0, stopped="idle"
    )
    paths = result.write_parquet(tmp_path / "out")
    back = {name: pd.read_parquet(path) for name, path in paths.items()}
    assert back["quarantine"][["value", "reason"]].values.tolist() == [[b"{bad", "invalid-json"]]
    assert len(back["rows"]) == len(rows) and back["sessions"]["status"].tolist() == ["open", "ended"]
    entries = [
        LedgerEntry(
            run_id="r",
            send_index=i,
            site="fleet-2",
            session="s1",
            topic=x.topic,
            kind="?",
            seq=i,
            epoch=0,
            ts=i,
            intended=x.value.decode(),
            sent=x.value,
            fault=None,
            fault_detail=None,
            outcome="ok",
            partition=0,
            offset=i,
        )
        for i, x in enumerate(records)
    ]
    ledger = ledger_frame(entries).assign(kind=["snapshot", "upsert", "upsert", "snapshot", "end"])
    report = check(ledger, back["rows"], back["quarantine"], back["sessions"], policy="resync")
    assert report.applied == 5 and report.foreign_sessions == 0
    # Everything checks out but the stray record at offset 99, which the ledger never sent.
    assert [(f.kind, f.offset) for f in report.disallowed] == [("unexpected", 99)]


def test_the_config_refuses_an_unknown_policy_and_builds_the_topic_pattern() -> None:
    with pytest.raises(ConfigError, match="policy='lenient': choose one of strict, resync, window, none"):
        BaselineConfig(bootstrap="x:1", policy="lenient")  # type: ignore[arg-type]
    assert BaselineConfig(bootstrap="x:1", topic_prefix="it-a.b-").pattern == r"^it\-a\.b\-.*"
