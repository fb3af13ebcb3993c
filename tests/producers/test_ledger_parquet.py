"""The ledger: Parquet parts written as the run goes, read back whole, runs never mixed."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from producers.contract import s3_parts
from producers.errors import LedgerError
from producers.ledger import (
    LEDGER_SCHEMA,
    LedgerEntry,
    LedgerWriter,
    RunInfo,
    S3Target,
    ledger_frame,
    read_ledger,
    read_run_info,
)

RUN = RunInfo(run_id="rtest", seed=7, faults=("drop:0.01",), settings={"sites": 3}, started_at="2026-01-01T00:00:00+00:00")


def entry(i: int, **kw: object) -> LedgerEntry:
    base = dict(
        run_id="rtest",
        send_index=i,
        site="fleet-2",
        session="fleet-2-s0000",
        topic="collection-fleet-2",
        kind="upsert",
        seq=i,
        epoch=0,
        ts=1000 + i,
        intended=f'{{"seq":{i}}}',
        sent=f'{{"seq":{i}}}'.encode(),
        fault=None,
        fault_detail=None,
        outcome="ok",
        partition=1,
        offset=100 + i,
        produced_ms=5000 + i,
        acked_ms=5001 + i,
    )
    base.update(kw)
    return LedgerEntry(**base)  # type: ignore[arg-type]


class Tick:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_rows_and_run_info_round_trip_with_nullable_types(tmp_path: Path) -> None:
    entries = [
        entry(0),
        entry(
            1,
            fault="drop",
            fault_detail="{}",
            outcome="not-sent",
            sent=None,
            partition=None,
            offset=None,
            acked_ms=None,
        ),
        entry(2, outcome="failed", partition=None, offset=None, error="Broker: Message size too large"),
    ]
    with LedgerWriter(str(tmp_path / "l"), run=RUN) as w:
        for e in reversed(entries):  # delivery reports arrive in any order
            w.add(e)
    df = read_ledger(str(tmp_path / "l"))
    assert list(df.columns) == LEDGER_SCHEMA.names
    assert df["send_index"].tolist() == [0, 1, 2]
    assert df["outcome"].tolist() == ["ok", "not-sent", "failed"]
    assert df["sent"].tolist() == [b'{"seq":0}', None, b'{"seq":2}']
    assert str(df["offset"].dtype) == "Int64" and df["offset"].isna().tolist() == [False, True, True]
    assert df.loc[2, "error"] == "Broker: Message size too large"
    assert df.attrs["run"]["seed"] == 7 and df.attrs["run"]["faults"] == ["drop:0.01"]
    assert read_run_info(str(tmp_path / "l")) == RUN
    pd.testing.assert_frame_equal(df, ledger_frame(entries), check_like=False)


def test_flushed_parts_survive_a_writer_that_never_closes(tmp_path: Path) -> None:
    w = LedgerWriter(str(tmp_path / "l"), run=RUN, flush_rows=3, flush_interval_s=1e9)
    for i in range(7):
        w.add(entry(i))
    # A crash now loses only the unflushed tail.
    assert sorted(p.name for p in (tmp_path / "l").glob("*.parquet")) == ["part-00000.parquet", "part-00001.parquet"]
    assert read_ledger(str(tmp_path / "l"))["send_index"].tolist() == list(range(6))
    assert w.pending == 1
    w.close()
    assert read_ledger(str(tmp_path / "l"))["send_index"].tolist() == list(range(7))


def test_a_flush_happens_when_the_interval_passes(tmp_path: Path) -> None:
    tick = Tick()
    w = LedgerWriter(str(tmp_path / "l"), run=RUN, flush_rows=10**6, flush_interval_s=2.0, clock=tick)
    w.add(entry(0))
    assert w.pending == 1
    tick.now = 2.5
    w.add(entry(1))
    assert w.pending == 0 and w.rows_written == 2


def test_parts_carry_the_run_in_their_metadata_and_half_written_parts_are_ignored(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    with LedgerWriter(str(tmp_path / "l"), run=RUN) as w:
        w.add(entry(0))
    meta = pq.read_schema(tmp_path / "l" / "part-00000.parquet").metadata
    assert json.loads(meta[b"producers.run"])["run_id"] == "rtest"
    (tmp_path / "l" / "part-00001.parquet.tmp").write_bytes(b"PAR1 half")
    assert len(read_ledger(str(tmp_path / "l"))) == 1


def test_a_location_that_holds_a_ledger_is_refused(tmp_path: Path) -> None:
    LedgerWriter(str(tmp_path / "l"), run=RUN).close()
    with pytest.raises(LedgerError, match="already holds a ledger.*choose a new path"):
        LedgerWriter(str(tmp_path / "l"), run=RUN)


def test_bad_locations_name_the_problem_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(LedgerError, match="needs an S3 endpoint"):
        LedgerWriter("s3a://lake/ledgers/x", run=RUN)
    with pytest.raises(LedgerError, match="no _run.json"):
        read_ledger(str(tmp_path / "nothing"))
    (tmp_path / "file").write_text("x")
    with pytest.raises(LedgerError, match="cannot write there"):
        LedgerWriter(str(tmp_path / "file" / "l"), run=RUN)


def test_an_s3_location_splits_into_its_bucket_and_a_prefix_without_slashes_and_a_local_one_does_not():
    assert s3_parts("s3a://lake/runs/a/") == ("lake", "runs/a")
    assert s3_parts("s3://lake") == ("lake", "")
    assert s3_parts("s3a:///runs") == ("", "runs")
    assert s3_parts("/tmp/lake") is None and s3_parts("file:/tmp/lake") is None


def test_an_s3_ledger_without_a_key_prefix_is_refused_with_the_fix():
    with pytest.raises(LedgerError, match="no key prefix after the bucket"):
        read_ledger("s3a://lake/", s3=S3Target(endpoint="http://127.0.0.1:1", access_key="k", secret_key="s"))
