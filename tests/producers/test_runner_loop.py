"""The run loop, against an in-memory broker stand-in (the real Kafka is in the integration test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from producers.errors import QueueFullError, RunConfigError
from producers.expected_output import expected_sessions
from producers.faults import parse_fault
from producers.ledger import read_ledger
from producers.runner import RunConfig, Runner

FAULTS = tuple(
    parse_fault(s)
    for s in ["drop:0.02", "duplicate:0.02", "corrupt:0.02", "reorder:0.02", "crash:sites=fleet-2:sessions=0:at=30"]
)


def config(tmp_path: Path, **kw) -> RunConfig:
    base = dict(
        ledger=str(tmp_path / "ledger"),
        sites=3,
        sessions=2,
        rate=2000.0,
        duration=5.0,
        session_length=120,
        snapshot_every=40,
        rows=30,
        seed=7,
        run_id="rtest",
        faults=FAULTS,
    )
    base.update(kw)
    return RunConfig(**base)  # type: ignore[arg-type]


def fake_clocks(step_clock):
    """Event-time and pacing clocks that advance a little on every read (no real waiting)."""
    return {"wall": step_clock(step=0.0001), "monotonic": step_clock(start=0.0, step=0.0001)}


def test_every_ok_row_matches_one_record_in_the_broker_and_back(tmp_path, memory_transport, step_clock) -> None:
    t = memory_transport()
    summary = Runner(config(tmp_path), transport=t, **fake_clocks(step_clock)).run()
    df = read_ledger(str(tmp_path / "ledger"))
    assert summary.stopped == "completed" and len(df) == summary.rows
    ok = df[df["outcome"] == "ok"]
    from_ledger = {(r.topic, r.partition, r.offset, r.session.encode(), r.sent) for r in ok.itertuples()}
    in_broker = {(topic, p, off, k, v) for (topic, p), log in t.log.items() for off, (k, v) in enumerate(log)}
    assert from_ledger == in_broker and len(ok) == len(in_broker)
    assert df.loc[df["outcome"] == "not-sent", "sent"].isna().all()
    assert set(df["outcome"]) == {"ok", "not-sent"}
    assert {"drop", "duplicate", "corrupt", "reorder", "crash"} <= set(df["fault"].dropna())
    assert summary.faults == df["fault"].value_counts().to_dict()


def test_sessions_of_a_site_follow_each_other_and_each_opens_with_a_snapshot(tmp_path, memory_transport, step_clock) -> None:
    Runner(config(tmp_path, faults=()), transport=memory_transport(), **fake_clocks(step_clock)).run()
    df = read_ledger(str(tmp_path / "ledger"))
    assert sorted(df["session"].unique()) == [
        f"{site}-rtest-s{n:04d}" for site in ("fleet-2", "warehouse-0", "weather-1") for n in range(2)
    ]
    for _, rows in df.groupby("session"):
        assert rows.iloc[0]["kind"] == "snapshot" and rows.iloc[0]["seq"] == 0
        assert rows.iloc[-1]["kind"] == "end" and rows["seq"].tolist() == list(range(121))
    for _site, rows in df.groupby("site"):
        first_end = rows[rows["session"].str.endswith("s0000") & (rows["kind"] == "end")]["send_index"].iloc[0]
        assert rows[rows["session"].str.endswith("s0001")]["send_index"].min() > first_end


def test_the_rate_paces_the_run(tmp_path, memory_transport, step_clock) -> None:
    s = Runner(
        config(tmp_path, rate=200.0, duration=2.0, session_length=10_000, faults=()),
        transport=memory_transport(),
        **fake_clocks(step_clock),
    ).run()
    assert s.stopped == "duration"
    assert 380 <= s.rows <= 420 + 3  # 2 s at 200 msg/s, plus one `end` per open session


def test_joining_sites_get_their_topics_while_the_run_goes(tmp_path, memory_transport, step_clock) -> None:
    t = memory_transport()
    calls: list[tuple[int, list[str]]] = []
    ensure = t.ensure_topics
    runner = Runner(
        config(tmp_path, sites=1, join=2, duration=3.0, rate=300.0, session_length=10_000, faults=()),
        transport=t,
        **fake_clocks(step_clock),
    )
    t.ensure_topics = lambda topics: calls.append((runner._send_index, list(topics))) or ensure(topics)  # type: ignore[method-assign]
    summary = runner.run()
    assert [topics for _, topics in calls] == [
        ["collection-warehouse-0"],
        ["collection-weather-1"],
        ["collection-fleet-2"],
    ]
    assert 0 == calls[0][0] < calls[1][0] < calls[2][0]  # the later topics appear mid-run
    assert summary.topics == ("collection-warehouse-0", "collection-weather-1", "collection-fleet-2")
    df = read_ledger(str(tmp_path / "ledger"))
    first = df.groupby("site")["send_index"].min().to_dict()
    assert first["warehouse-0"] == 0
    # a joining site sends from its next round-robin turn on
    assert calls[1][0] <= first["weather-1"] < calls[1][0] + 2
    assert calls[2][0] <= first["fleet-2"] < calls[2][0] + 3


def test_stop_ends_every_open_session_and_writes_the_ledger(tmp_path, memory_transport, step_clock) -> None:
    runner: Runner
    reports = []

    def on_progress(p) -> None:
        reports.append(p)
        runner.stop()

    runner = Runner(
        config(tmp_path, session_length=100_000, faults=()),
        transport=memory_transport(),
        on_progress=on_progress,
        progress_every_s=0.05,
        **fake_clocks(step_clock),
    )
    summary = runner.run()
    assert summary.stopped == "stopped" and reports
    df = read_ledger(str(tmp_path / "ledger"))
    assert len(df) == summary.rows and set(df["outcome"]) == {"ok"}
    last = df.groupby("session").tail(1)
    assert len(last) == 3 and set(last["kind"]) == {"end"}
    assert all(s.ended for s in expected_sessions(df).values())
    assert "msg/s" in reports[0].line() and "faults: none" in reports[0].line()


def test_records_without_a_delivery_report_are_indeterminate(tmp_path, memory_transport, step_clock) -> None:
    t = memory_transport()
    t.hold = True
    s = Runner(config(tmp_path, flush_timeout_s=0.01, faults=()), transport=t, **fake_clocks(step_clock)).run()
    df = read_ledger(str(tmp_path / "ledger"))
    assert set(df["outcome"]) == {"indeterminate"} and s.outcomes == {"indeterminate": len(df)}
    assert df["error"].str.contains("no delivery report within 0.01s").all()
    assert t.closed


def test_refused_records_are_failed_and_open_delivery_windows(tmp_path, memory_transport, step_clock) -> None:
    refused = {"n": 0}

    def verdict(topic: str, key: bytes, value: bytes) -> str:
        refused["n"] += 1
        return "failed" if refused["n"] % 25 == 0 else "ok"

    Runner(config(tmp_path, faults=()), transport=memory_transport(verdict=verdict), **fake_clocks(step_clock)).run()
    df = read_ledger(str(tmp_path / "ledger"))
    failed = df[df["outcome"] == "failed"]
    assert len(failed) == len(df) // 25 and failed["partition"].isna().all()
    sessions = expected_sessions(df)
    for row in failed.itertuples():
        assert any(w.fault == "delivery-failed" and w.covers(row.epoch, row.seq) for w in sessions[row.session].windows)


def test_a_full_queue_stops_the_run_with_the_reason_and_keeps_the_ledger(tmp_path, memory_transport, step_clock) -> None:
    t = memory_transport()
    t.hold = True
    send = t.send
    sent = {"n": 0}

    def send_until_full(*args):
        sent["n"] += 1
        if sent["n"] > 50:
            raise QueueFullError("collection-x", 30.0, "mem")
        send(*args)

    t.send = send_until_full  # type: ignore[method-assign]
    s = Runner(config(tmp_path, faults=(), flush_timeout_s=0.01), transport=t, **fake_clocks(step_clock)).run()
    assert s.stopped == "error" and "queue stayed full" in (s.error or "")
    df = read_ledger(str(tmp_path / "ledger"))
    assert df["outcome"].value_counts().to_dict() == {"indeterminate": 50, "failed": 1}
    assert "queue stayed full" in df.loc[df["outcome"] == "failed", "error"].iloc[0]


def test_the_same_seed_gives_the_same_ledger(tmp_path, memory_transport, step_clock) -> None:
    frames = []
    for n in range(2):
        Runner(config(tmp_path, ledger=str(tmp_path / f"l{n}")), transport=memory_transport(), **fake_clocks(step_clock)).run()
        frames.append(read_ledger(str(tmp_path / f"l{n}")))
    cols = [
        "session",
        "kind",
        "seq",
        "epoch",
        "ts",
        "intended",
        "sent",
        "fault",
        "fault_detail",
        "outcome",
        "partition",
        "offset",
    ]
    assert frames[0][cols].equals(frames[1][cols])


def test_the_summary_names_sites_outcomes_and_the_ledger(tmp_path, memory_transport, step_clock) -> None:
    s = Runner(config(tmp_path), transport=memory_transport(), **fake_clocks(step_clock)).run()
    text = s.text()
    for word in (
        "run rtest: completed",
        "outcomes: not-sent",
        "faults:",
        "warehouse-0",
        "fleet-2",
        str(tmp_path / "ledger"),
    ):
        assert word in text
    assert s.sites["fleet-2"]["sessions"] == 2


@pytest.mark.parametrize(
    ("kw", "flag"),
    [
        ({"sites": 0}, "--sites"),
        ({"rate": 0}, "--rate"),
        ({"duration": -1}, "--duration"),
        ({"sessions": 0}, "--sessions"),
        ({"snapshot_every": 0}, "--snapshot-every"),
        ({"partitions": 0}, "--partitions"),
        ({"join": -1}, "--join"),
        ({"run_id": "a b"}, "--run-id"),
        ({"topic_prefix": "bad prefix "}, "topic"),
    ],
)
def test_bad_settings_are_refused_naming_the_flag(tmp_path, kw, flag) -> None:
    with pytest.raises(RunConfigError, match=flag):
        config(tmp_path, **kw)
