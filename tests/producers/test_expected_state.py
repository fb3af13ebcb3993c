"""Expected state from the ledger: hand-built ledgers, one per fault, with hand-computed answers.

The base session (seq: message):
    0 snapshot {a:1, b:1}   1 upsert a=2   2 upsert b=2   3 upsert c=1 (insert)
    4 snapshot {a:2, b:2, c:1}   5 delete a   6 end
so the intended final table is {b:2, c:1}.
"""

from __future__ import annotations

import itertools
from typing import Any

import pandas as pd
import pytest

from producers.contract import Message, encode
from producers.expected_output import expected_sessions, loss_windows
from producers.faults import Anomaly, parse_fault
from producers.ledger import ledger_frame
from producers.sessions import SessionDriver, SessionPlan
from producers.sites import Site
from tests.producers.fault_literals import DAMAGING
from tests.streams import FINAL, base_session, ledger_entry, message, r

SID = "fleet-2-s0000"


def msg(kind: str, seq: int, epoch: int = 0, **payload: Any) -> Message:
    return message(kind, seq, epoch=epoch, **payload)


BASE = base_session(msg)
NOT_SENT = {"drop", "orphan-update", "crash"}
# Written from each fault's definition (producers/faults.py), not read from the registry, so a
# registry change shows here. Loss windows that last until the next clean snapshot:
TO_NEXT_SNAPSHOT = DAMAGING  # their loss window runs to the next clean snapshot
# What a drop may leave behind: a gap, its change lost, a record set aside, later updates
# orphaned (a dropped snapshot), a session that never ends cleanly (a dropped end).
DROP_ALLOWED = {"gap", "lost", "quarantined", "orphan", "unterminated"}


def ledger(*rows: Message | tuple[Message, dict[str, Any]]) -> pd.DataFrame:
    """Ledger rows in send order; a tuple adds fault / outcome / detail to one row."""
    entries = []
    for i, item in enumerate(rows):
        m, opts = (item, {}) if isinstance(item, Message) else item
        fault = opts.get("fault")
        outcome = opts.get("outcome", "not-sent" if fault in NOT_SENT else "ok")
        entries.append(
            ledger_entry(
                m,
                i,
                topic="collection-fleet-2",
                outcome=outcome,
                sent=None if outcome == "not-sent" else encode(m),
                fault=fault,
                detail=opts.get("detail"),
                offset=i if outcome == "ok" else None,
            )
        )
    return ledger_frame(entries)


def with_fault(seq: int, fault: str | None = None, **opts: Any) -> list:
    return [(m, {"fault": fault, **opts}) if m.seq == seq else m for m in BASE]


def windows(df: pd.DataFrame) -> list[tuple]:
    s = expected_sessions(df)[SID]
    return [(w.fault, w.epoch, w.from_seq, w.to_seq, w.restored) for w in s.windows]


def test_a_clean_session_has_no_windows_and_an_exact_final_table() -> None:
    s = expected_sessions(ledger(*BASE))[SID]
    assert s.final_rows == FINAL and s.exact and s.ended and s.windows == ()
    assert (s.site, s.topic, s.last_epoch, s.last_seq) == ("fleet-2", "collection-fleet-2", 0, 6)


def test_drop_opens_a_window_to_the_next_snapshot() -> None:
    df = ledger(*with_fault(2, "drop"))
    assert windows(df) == [("drop", 0, 2, 4, True)]
    s = expected_sessions(df)[SID]
    assert s.final_rows == FINAL and s.exact and s.ended
    assert s.windows[0].allowed == DROP_ALLOWED
    assert s.allows(Anomaly.GAP, 0, 3) and s.allows("lost", 0, 2)
    assert not s.allows("gap", 0, 4)  # the snapshot itself must be applied
    assert not s.allows("duplicated", 0, 2)


def test_drop_after_the_last_snapshot_leaves_the_rows_it_touched_uncertain() -> None:
    s = expected_sessions(ledger(*with_fault(5, "drop")))[SID]
    assert [(w.from_seq, w.to_seq, w.restored) for w in s.windows] == [(5, None, False)]
    assert s.final_rows == FINAL and s.uncertain_ids == {"a"}
    assert s.checked_rows() == FINAL  # a is deleted in the intended table, so nothing else is at risk


def test_duplicate_window_starts_at_the_copy() -> None:
    rows = BASE[:3] + [(BASE[2], {"fault": "duplicate", "detail": {"copy": 2}})] + BASE[3:]
    assert windows(ledger(*rows)) == [("duplicate", 0, 2, 4, True)]
    s = expected_sessions(ledger(*rows))[SID]
    assert s.final_rows == FINAL
    # a second copy: applied twice, or set aside as a duplicate, or its change counted lost
    assert s.windows[0].allowed == {"duplicated", "quarantined", "lost"}


def test_reorder_window_spans_both_swapped_messages() -> None:
    rows = [
        BASE[0],
        BASE[1],
        (BASE[3], {"fault": "reorder", "detail": {"partner_seq": 2, "distance": 1, "moved": "earlier"}}),
        (BASE[2], {"fault": "reorder", "detail": {"partner_seq": 3, "distance": 1, "moved": "later"}}),
        *BASE[4:],
    ]
    assert windows(ledger(*rows)) == [("reorder", 0, 2, 4, True), ("reorder", 0, 2, 4, True)]
    s = expected_sessions(ledger(*rows))[SID]
    assert s.final_rows == FINAL  # replayed by seq, not send order
    # the later seq first looks like a gap, the earlier one then arrives late: reordered or lost
    assert [w.allowed for w in s.windows] == [{"reordered", "gap", "lost", "quarantined"}] * 2


def test_reorder_with_a_snapshot_partner_closes_only_at_a_later_snapshot() -> None:
    rows = [
        BASE[0],
        BASE[1],
        BASE[2],
        (BASE[4], {"fault": "reorder", "detail": {"partner_seq": 3, "moved": "earlier"}}),
        (BASE[3], {"fault": "reorder", "detail": {"partner_seq": 4, "moved": "later"}}),
        *BASE[5:],
    ]
    s = expected_sessions(ledger(*rows))[SID]
    assert [(w.from_seq, w.to_seq, w.restored) for w in s.windows] == [(3, None, False), (3, None, False)]
    assert s.uncertain_ids == {"a", "c"}  # touched at seq 3 (c) and 5 (a)


@pytest.mark.parametrize("fault", ["corrupt", "schema-drift", "oversized"])
def test_bad_records_open_windows_like_a_drop(fault: str) -> None:
    df = ledger(*with_fault(1, fault, detail={"reason": "x"}))
    assert windows(df) == [(fault, 0, 1, 4, True)]
    assert expected_sessions(df)[SID].windows[0].allowed == {"quarantined", "gap", "lost", "orphan", "unterminated"}


def test_a_damaged_snapshot_does_not_close_a_window() -> None:
    rows = with_fault(2, "drop")
    rows[4] = (BASE[4], {"fault": "corrupt", "detail": {"reason": "invalid-json"}})
    s = expected_sessions(ledger(*rows))[SID]
    assert [(w.fault, w.from_seq, w.to_seq, w.restored) for w in s.windows] == [
        ("drop", 2, None, False),
        ("corrupt", 4, None, False),
    ]
    assert s.uncertain_ids == {"a", "b", "c"}  # touched at 2 (b), 3 (c), 5 (a)
    # ...and a later clean snapshot closes both
    more = [msg("snapshot", 6, rows=[r("b", 2), r("c", 1)]), msg("end", 7)]
    s = expected_sessions(ledger(*rows[:-1], *more))[SID]
    assert [(w.from_seq, w.to_seq) for w in s.windows] == [(2, 6), (4, 6)] and s.exact


def test_a_duplicated_snapshot_still_closes_earlier_windows() -> None:
    rows = with_fault(2, "drop")
    rows = rows[:5] + [(BASE[4], {"fault": "duplicate"})] + rows[5:]
    s = expected_sessions(ledger(*rows))[SID]
    assert [(w.fault, w.from_seq, w.to_seq, w.restored) for w in s.windows] == [
        ("drop", 2, 4, True),
        ("duplicate", 4, None, False),
    ]
    assert s.uncertain_ids == {"a"}


def test_orphan_update_window_starts_at_seq_zero() -> None:
    s = expected_sessions(ledger(*with_fault(0, "orphan-update")))[SID]
    assert [(w.fault, w.from_seq, w.to_seq, w.restored) for w in s.windows] == [("orphan-update", 0, 4, True)]
    assert s.exact and s.final_rows == FINAL
    # no opening snapshot: its updates are orphans, may be set aside or lost, and seq 0 is missing
    assert s.windows[0].allowed == {"orphan", "quarantined", "lost", "gap"}


def test_an_orphan_session_without_any_later_snapshot_is_wholly_uncertain() -> None:
    rows = [(BASE[0], {"fault": "orphan-update"}), BASE[1], BASE[2], BASE[3], msg("end", 4)]
    s = expected_sessions(ledger(*rows))[SID]
    assert s.uncertain_ids == {"a", "b", "c"} and s.checked_rows() == {}


def test_epoch_reset_is_ordered_by_epoch_then_seq_and_restores_an_open_window() -> None:
    rows = [
        msg("snapshot", 0, rows=[r("a", 1), r("b", 1)]),
        msg("upsert", 1, row=r("a", 2)),
        (msg("upsert", 2, row=r("b", 2)), {"fault": "drop"}),
        (
            msg("snapshot", 0, epoch=1, rows=[r("a", 2), r("b", 2)]),
            {"fault": "epoch-reset", "detail": {"previous_epoch": 0}},
        ),
        msg("upsert", 1, epoch=1, row=r("c", 1)),
        msg("end", 2, epoch=1),
    ]
    s = expected_sessions(ledger(*rows))[SID]
    assert [(w.fault, w.epoch, w.from_seq, w.to_seq, w.restored) for w in s.windows] == [
        ("drop", 0, 2, None, True),
        ("epoch-reset", 1, 0, 1, True),
    ]
    assert s.windows[1].allowed == {Anomaly.EPOCH_CHANGE}
    assert s.final_rows == {"a": r("a", 2), "b": r("b", 2), "c": r("c", 1)} and s.exact and s.ended
    assert (s.last_epoch, s.last_seq) == (1, 2)
    assert s.allows("gap", 0, 99) and not s.allows("gap", 1, 1)


def test_silent_divergence_allows_a_wrong_value_until_the_next_snapshot() -> None:
    df = ledger(*with_fault(1, "silent-divergence", detail={"column": "v", "intended": 2, "sent": 9}))
    assert windows(df) == [("silent-divergence", 0, 1, 4, True)]
    s = expected_sessions(df)[SID]
    assert s.windows[0].allowed == {Anomaly.WRONG_VALUE, Anomaly.DIVERGENCE}
    assert s.final_rows == FINAL  # the intended value, not the one sent


def test_a_faulted_message_that_also_failed_delivery_opens_both_windows() -> None:
    # the divergence window allows wrong values, not the gap the lost message leaves
    rows = with_fault(1, "silent-divergence", detail={"column": "v", "intended": 2, "sent": 9})
    rows[1] = (rows[1][0], {**rows[1][1], "outcome": "failed"})
    assert windows(ledger(*rows)) == [("silent-divergence", 0, 1, 4, True), ("delivery-failed", 0, 1, 4, True)]
    # a drop's window already allows everything a failed delivery can cause
    rows = with_fault(2, "drop")
    rows[2] = (rows[2][0], {**rows[2][1], "outcome": "failed"})
    assert [w[0] for w in windows(ledger(*rows))] == ["drop"]


def test_clock_skew_covers_one_message_and_a_skewed_snapshot_still_resyncs() -> None:
    df = ledger(*with_fault(3, "clock-skew", detail={"skew_ms": 60000}))
    assert windows(df) == [("clock-skew", 0, 3, 4, True)]
    assert expected_sessions(df)[SID].windows[0].allowed == {"late"}  # flagged late, never dropped
    rows = with_fault(2, "drop")
    rows[4] = (BASE[4], {"fault": "clock-skew", "detail": {"skew_ms": -1}})
    assert windows(ledger(*rows)) == [("drop", 0, 2, 4, True), ("clock-skew", 0, 4, 5, True)]


def test_crash_leaves_the_session_unterminated_with_the_table_as_last_sent() -> None:
    rows = BASE[:4] + [(msg("end", 4), {"fault": "crash", "detail": {"at_index": 4}})]
    s = expected_sessions(ledger(*rows))[SID]
    assert [(w.fault, w.from_seq, w.to_seq, w.restored) for w in s.windows] == [("crash", 4, None, True)]
    assert s.windows[0].allowed == {Anomaly.UNTERMINATED}
    assert not s.ended and s.exact
    assert s.final_rows == {"a": r("a", 2), "b": r("b", 2), "c": r("c", 1)}


def test_burst_allows_nothing() -> None:
    s = expected_sessions(ledger(*with_fault(1, "burst", detail={"size": 3})))[SID]
    assert s.windows == () and s.exact and s.ended and s.final_rows == FINAL


@pytest.mark.parametrize("outcome", ["failed", "indeterminate"])
def test_an_undelivered_message_opens_a_delivery_window(outcome: str) -> None:
    df = ledger(*[(m, {"outcome": outcome}) if m.seq == 2 else m for m in BASE])
    assert windows(df) == [(f"delivery-{outcome}", 0, 2, 4, True)]
    # failed: as if dropped; indeterminate: it may also have arrived, and then again on a retry
    expected = {
        "failed": {"gap", "lost", "quarantined", "orphan", "unterminated"},
        "indeterminate": {"gap", "lost", "quarantined", "orphan", "unterminated", "duplicated"},
    }[outcome]
    assert expected_sessions(df)[SID].windows[0].allowed == expected


def test_a_failed_snapshot_does_not_resync_and_a_lost_end_leaves_it_open() -> None:
    rows = with_fault(2, "drop")
    rows[4] = (BASE[4], {"outcome": "failed"})
    rows[6] = (BASE[6], {"outcome": "failed"})
    s = expected_sessions(ledger(*rows))[SID]
    assert [(w.fault, w.from_seq, w.to_seq) for w in s.windows] == [
        ("drop", 2, None),
        ("delivery-failed", 4, None),
        ("delivery-failed", 6, None),
    ]
    assert not s.ended and s.allows("unterminated", 0, 6)


def test_loss_windows_table_has_one_row_per_window() -> None:
    df = loss_windows(ledger(*with_fault(5, "drop")))
    [record] = df.to_dict("records")
    assert pd.isna(record.pop("to_seq"))
    assert record == {
        "session": SID,
        "epoch": 0,
        "from_seq": 5,
        "fault": "drop",
        "allowed": ["gap", "lost", "orphan", "quarantined", "unterminated"],  # a drop's, sorted
        "send_index": 5,
        "restored": False,
    }
    assert str(df["to_seq"].dtype) == "Int64"
    closed = loss_windows(ledger(*with_fault(2, "drop")))
    assert closed["to_seq"].tolist() == [4]


def test_every_session_is_reported_separately() -> None:
    other = [Message.end(site="fleet-2", session="other", seq=0, epoch=0, ts=1)]
    out = expected_sessions(ledger(*BASE, *other))
    assert set(out) == {SID, "other"} and out["other"].final_rows == {}


def test_on_a_generated_session_every_fault_is_covered_and_the_final_table_is_the_sites() -> None:
    faults = [
        parse_fault(s)
        for s in [
            "drop:0.02",
            "duplicate:0.02",
            "reorder:0.02",
            "corrupt:0.02",
            "schema-drift:0.02",
            "silent-divergence:0.02",
            "clock-skew:0.02",
            "epoch-reset:0.005",
            "oversized:at=33",
            "burst:0.005:size=4",
        ]
    ]
    site = Site("fleet-2", "fleet", seed=11, rows=40)
    clock = itertools.count()
    d = SessionDriver(
        site,
        ordinal=0,
        plan=SessionPlan(length=800, snapshot_every=100),
        faults=faults,
        seed=11,
        clock=lambda: 1.7e9 + next(clock),
    )
    entries = []
    while not d.done:
        for t in d.step():
            m = t.message
            entries.append(
                ledger_entry(
                    m,
                    len(entries),
                    topic="t",
                    outcome="ok" if t.value is not None else "not-sent",
                    sent=t.value,
                    fault=t.fault,
                    detail=t.detail,
                )
            )
    s = expected_sessions(ledger_frame(entries))[d.id]
    assert s.final_rows == site.table
    faulted = [e for e in entries if e.fault and e.fault != "burst"]
    assert len({e.fault for e in faulted}) >= 7
    for e in faulted:
        assert any(w.fault == e.fault and w.covers(e.epoch, e.seq) for w in s.windows), e
    for w in s.windows:
        if w.to_seq is not None and w.fault in TO_NEXT_SNAPSHOT:
            closing = [e for e in entries if (e.epoch, e.seq) == (w.epoch, w.to_seq)]
            assert any(
                e.kind == "snapshot" and e.outcome == "ok" and e.fault in (None, "clock-skew", "burst", "epoch-reset")
                for e in closing
            )
