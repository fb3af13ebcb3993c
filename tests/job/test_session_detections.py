"""The session state machine, one detection at a time, on hand-built streams.

The base session (seq: message), as in ``tests/producers/test_expected_state.py``:
    0 snapshot {a:1, b:1}   1 upsert a=2   2 upsert b=2   3 upsert c=1 (insert)
    4 snapshot {a:2, b:2, c:1}   5 delete a   6 end
so the intended final table is {b:2, c:1}.
"""

from __future__ import annotations

import json
import pickle
from typing import Any

import pytest

from job.engine.errors import IntegrityError, StateError, UsageError
from job.engine.session import (
    POLICIES,
    REASONS,
    Record,
    SessionState,
    Step,
    expire,
    flush,
    rebuild,
    step,
)
from producers.contract import Message, encode
from producers.errors import CONTRACT_REASONS
from tests.streams import FINAL, base_session, message, r

SID = "fleet-2-s0000"
TOPIC = "collection-fleet-2"


def msg(kind: str, seq: int, epoch: int = 0, **payload: Any) -> Message:
    return message(kind, seq, epoch=epoch, ts=1000 + 100 * epoch + seq, **payload)


BASE = base_session(msg)


def records(*items: Message | bytes | None, key: str | None = SID, start: int = 0) -> list[Record]:
    """One record per item, at consecutive offsets of partition 1; bytes are sent as they are."""
    out = []
    for i, item in enumerate(items):
        value = encode(item) if isinstance(item, Message) else item
        out.append(Record(TOPIC, 1, start + i, key, value, 5000 + i))
    return out


def run(items: list, policy: str, **kw: Any) -> Step:
    return step(None, records(*items), policy=policy, **kw)  # type: ignore[arg-type]


def reasons(s: Step) -> list[tuple[str, int | None]]:
    return [(q.reason, q.seq) for q in s.quarantine]


# -- a clean session ---------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_a_clean_session_rebuilds_the_intended_table_under_every_policy(policy: str) -> None:
    s = run(BASE, policy)
    assert s.state.table == FINAL and s.quarantine == []
    assert rebuild(s.changes) == {SID: FINAL}
    st = s.status
    assert (st.status, st.epoch, st.last_seq, st.rows, st.applied) == ("ended", 0, 6, 2, 7)
    assert (st.gaps, st.duplicates, st.quarantined, st.divergences, st.epoch_changes) == (0, 0, 0, 0, 0)
    assert (st.last_topic, st.last_partition, st.last_offset, st.last_event_ts_ms) == (TOPIC, 1, 6, 1006)
    assert st.site == "fleet-2" and st.session == SID


def test_a_snapshot_writes_one_change_per_row_with_its_record_coordinates() -> None:
    s = run(BASE[:2], "resync")
    snap = [c for c in s.changes if c.op == "snapshot"]
    assert [(c.row_id, json.loads(c.data or "")) for c in snap] == [("a", r("a", 1)), ("b", r("b", 1))]
    where = {(c.topic, c.partition, c.offset, c.epoch, c.seq, c.event_ts_ms) for c in snap}
    assert where == {(TOPIC, 1, 0, 0, 0, 1000)}
    [up] = [c for c in s.changes if c.op == "upsert"]
    assert (up.row_id, up.offset, up.seq, up.site, up.session) == ("a", 1, 1, "fleet-2", SID)


def test_an_empty_snapshot_is_written_as_a_marker_and_rebuilds_to_an_empty_table() -> None:
    s = run([*BASE[:4], msg("snapshot", 4, rows=[]), msg("upsert", 5, row=r("z", 1))], "resync")
    markers = [c for c in s.changes if c.seq == 4]
    assert [(c.op, c.row_id, c.data) for c in markers] == [("snapshot", "", None)]
    assert rebuild(s.changes) == {SID: {"z": r("z", 1)}} and s.state.table == {"z": r("z", 1)}


# -- gaps ----------------------------------------------------------------------------------


def test_strict_policy_raises_on_a_gap_naming_topic_partition_offset_and_session() -> None:
    items = [m for m in BASE if m.seq != 2]
    with pytest.raises(IntegrityError) as info:
        run(items, "strict")
    err = info.value
    assert (err.session, err.topic, err.partition, err.offset, err.epoch, err.seq) == (SID, TOPIC, 1, 2, 0, 3)
    assert err.problem == "gap"
    assert str(err).startswith(f'session "{SID}" topic {TOPIC}[1] offset 2: seq 3 after 1 (gap of 1)')


def test_resync_policy_quarantines_until_next_snapshot() -> None:
    # seq 2 is lost; 3 and an extra update at 4 wait for a snapshot, which now comes at seq 5
    items = [
        BASE[0],
        BASE[1],
        BASE[3],
        msg("upsert", 4, row=r("a", 9)),
        msg("snapshot", 5, rows=[r("a", 9), r("b", 2), r("c", 1)]),
        msg("end", 6),
    ]
    s = run(items, "resync")
    assert reasons(s) == [("gap", 3), ("broken-session", 4)]
    assert s.state.table == {"a": r("a", 9), "b": r("b", 2), "c": r("c", 1)}
    assert (s.status.status, s.status.gaps, s.status.quarantined, s.status.applied) == ("ended", 1, 2, 4)
    assert s.quarantine[0].value == encode(BASE[3]) and s.quarantine[0].offset == 2
    assert "gap of 1" in s.quarantine[0].detail


def test_resync_marks_the_session_broken_between_the_gap_and_the_snapshot() -> None:
    broken = run([BASE[0], BASE[1], BASE[3]], "resync")
    assert broken.status.status == "broken" and broken.state.table == {"a": r("a", 2), "b": r("b", 1)}
    healed = step(broken.state, records(BASE[4], start=3), policy="resync")
    assert healed.status.status == "open" and healed.state.table == {"a": r("a", 2), "b": r("b", 2), "c": r("c", 1)}
    assert healed.status.divergences == 0  # a broken session's table is not compared, it is replaced


def test_a_snapshot_after_a_gap_is_applied_at_once() -> None:
    s = run([BASE[0], BASE[1], BASE[4], BASE[5], BASE[6]], "resync")
    assert s.quarantine == [] and s.state.table == FINAL and s.status.gaps == 1


def test_an_end_after_a_gap_still_closes_the_session() -> None:
    s = run([BASE[0], BASE[1], BASE[6]], "resync")
    assert s.status.status == "ended" and s.status.gaps == 1 and s.status.last_seq == 6


# -- duplicates and disorder --------------------------------------------------------------


def test_duplicate_is_quarantined_and_counted() -> None:
    s = run([BASE[0], BASE[1], BASE[1], *BASE[2:]], "resync")
    assert reasons(s) == [("duplicate", 1)] and s.status.duplicates == 1
    assert s.state.table == FINAL and s.quarantine[0].offset == 2


def test_strict_policy_raises_on_a_duplicate() -> None:
    with pytest.raises(IntegrityError) as info:
        run([BASE[0], BASE[1], BASE[1]], "strict")
    assert (info.value.problem, info.value.offset, info.value.seq) == ("duplicate", 2, 1)
    assert "seq 1 after 1" in str(info.value)


def test_resync_treats_disorder_as_a_gap_then_a_late_record() -> None:
    s = run([BASE[0], BASE[1], BASE[3], BASE[2], *BASE[4:]], "resync")
    assert reasons(s) == [("gap", 3), ("duplicate", 2)]
    assert s.state.table == FINAL and (s.status.gaps, s.status.duplicates) == (1, 1)


def test_window_policy_reorders_within_the_window() -> None:
    s = run([BASE[0], BASE[3], BASE[1], BASE[2], *BASE[4:]], "window", window=2)
    assert s.quarantine == [] and s.state.table == FINAL
    assert (s.status.gaps, s.status.applied) == (0, 7)
    assert [c.seq for c in s.changes if c.op != "snapshot"] == [1, 2, 3, 5]  # applied in seq order
    assert [c.offset for c in s.changes if c.op == "upsert"] == [2, 3, 1]  # ...each from its own record


def test_window_policy_holds_records_across_micro_batches_in_the_state() -> None:
    first = step(None, records(BASE[0], BASE[2]), policy="window")
    assert first.changes and [c.seq for c in first.changes] == [0, 0]
    assert [p.offset for p in first.state.pending] == [1]
    kept = SessionState.from_json(first.state.to_json())
    second = step(kept, records(BASE[1], start=2), policy="window")
    assert [c.seq for c in second.changes] == [1, 2] and second.state.pending == ()


def test_window_policy_gives_up_when_the_gap_does_not_close() -> None:
    # seq 1 is lost; 2 and 3 are held (window 2); 4 lands beyond it
    s = run([BASE[0], BASE[2], BASE[3], BASE[4], BASE[5], BASE[6]], "window", window=2)
    assert reasons(s) == [("window-overflow", 2), ("window-overflow", 3)]
    assert s.state.table == FINAL and s.status.gaps == 1 and s.status.status == "ended"


def test_window_policy_does_not_wait_for_a_gap_past_an_end() -> None:
    s = run([BASE[0], BASE[1], BASE[3], BASE[6]], "window", window=8)
    assert reasons(s) == [("window-overflow", 3)] and s.status.status == "ended"


def test_window_policy_applies_a_snapshot_after_a_gap_instead_of_holding_it() -> None:
    # seqs 2 and 3 are lost; the snapshot at 4 is the whole table, so nothing before it is
    # worth waiting for: it is applied at once and the delete at 5 follows it
    s = run([BASE[0], BASE[1], BASE[4], BASE[5]], "window", window=3)
    assert s.state.pending == () and s.quarantine == []
    assert s.state.table == FINAL and s.status.gaps == 1 and s.status.status == "open"


def test_window_policy_settles_what_a_snapshot_supersedes_and_keeps_holding_what_follows() -> None:
    # seq 1 is lost; 2 and the delete at 5 are held; the snapshot at 4 supersedes 2
    # (quarantined, not dropped), and the held 5 follows the snapshot before the end at 6
    s = run([BASE[0], BASE[2], BASE[5], BASE[4], BASE[6]], "window", window=8)
    assert reasons(s) == [("window-overflow", 2)]
    assert s.state.pending == () and s.state.table == FINAL and s.status.status == "ended"


def test_flush_quarantines_held_updates_as_window_overflow() -> None:
    s = run([BASE[0], BASE[2], BASE[3]], "window")
    flushed = flush(s.state)
    assert reasons(flushed) == [("window-overflow", 2), ("window-overflow", 3)]
    assert flushed.status.status == "broken" and flushed.status.quarantined == 2


# -- epochs ----------------------------------------------------------------------------------


EPOCH_1 = [
    msg("snapshot", 0, epoch=1, rows=[r("a", 2), r("b", 7)]),
    msg("upsert", 1, epoch=1, row=r("c", 1)),
    msg("end", 2, epoch=1),
]


def test_a_higher_epoch_restarts_the_sequence_at_its_snapshot() -> None:
    s = run([*BASE[:3], *EPOCH_1], "strict")
    assert s.state.table == {"a": r("a", 2), "b": r("b", 7), "c": r("c", 1)}
    assert (s.status.epoch, s.status.last_seq, s.status.epoch_changes, s.status.status) == (1, 2, 1, "ended")


def test_stale_epoch_record_is_quarantined() -> None:
    s = run([*BASE[:2], EPOCH_1[0], BASE[2], EPOCH_1[1]], "resync")
    assert reasons(s) == [("stale-epoch", 2)] and s.status.duplicates == 1
    assert s.state.table == {"a": r("a", 2), "b": r("b", 7), "c": r("c", 1)}
    with pytest.raises(IntegrityError) as info:
        run([*BASE[:2], EPOCH_1[0], BASE[2]], "strict")
    assert (info.value.problem, info.value.offset) == ("stale-epoch", 3)


def test_a_new_epoch_must_open_with_a_snapshot() -> None:
    s = run([*BASE[:3], EPOCH_1[1], msg("snapshot", 2, epoch=1, rows=[r("q", 1)])], "resync")
    assert reasons(s) == [("orphan", 1)] and s.state.table == {"q": r("q", 1)}
    assert (s.status.epoch_changes, s.status.gaps, s.status.status) == (1, 1, "open")
    with pytest.raises(IntegrityError) as info:
        run([*BASE[:3], EPOCH_1[1]], "strict")
    assert (info.value.problem, info.value.epoch, info.value.seq) == ("orphan", 1, 1)


# -- orphans --------------------------------------------------------------------------------


def test_orphan_updates_are_quarantined_until_the_first_snapshot() -> None:
    s = run(BASE[1:], "resync")
    assert reasons(s) == [("orphan", 1), ("orphan", 2), ("orphan", 3)]
    assert s.state.table == FINAL and s.status.status == "ended"
    assert rebuild(s.changes) == {SID: FINAL}


def test_window_policy_waits_for_a_late_opening_snapshot() -> None:
    s = run([BASE[1], BASE[0], *BASE[2:]], "window")
    assert s.quarantine == [] and s.state.table == FINAL and s.status.gaps == 0


def test_strict_policy_raises_on_an_orphan_update() -> None:
    with pytest.raises(IntegrityError) as info:
        run(BASE[1:], "strict")
    assert (info.value.problem, info.value.offset) == ("orphan", 0)


# -- bad records ------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["resync", "window", "none"])
@pytest.mark.parametrize(
    ("value", "reason"),
    [
        (b"", "empty"),
        (None, "empty"),
        (b'{"v":1,"kind":"upsert"', "invalid-json"),
        (b"\xff\xfe", "not-utf8"),
        (b"[1]", "not-an-object"),
        (encode(BASE[2]).replace(b'"v":1', b'"v":2'), "unsupported-version"),
        (encode(BASE[2]).replace(b'"seq":2', b'"seq":"2"'), "wrong-type"),
    ],
)
def test_unparseable_record_is_quarantined_with_the_contract_reason(policy: str, value: bytes | None, reason: str) -> None:
    s = run([BASE[0], BASE[1], value, *BASE[3:]], policy)
    bad = [q for q in s.quarantine if q.offset == 2]
    assert [(q.reason, q.seq, q.value, q.session, q.key) for q in bad] == [
        (reason, None, None if value is None else bytes(value), SID, SID)
    ]
    assert s.state.table == FINAL  # the snapshot at seq 4 restates what seq 2 would have said


def test_strict_policy_raises_on_an_unparseable_record() -> None:
    with pytest.raises(IntegrityError) as info:
        run([BASE[0], b"{oops"], "strict")
    assert (info.value.problem, info.value.offset, info.value.seq) == ("invalid-json", 1, None)


def test_an_oversized_record_is_refused_by_size() -> None:
    big = msg("upsert", 2, row={"id": "b", "v": 2, "pad": "x" * 1_000_001})
    s = run([BASE[0], BASE[1], big, *BASE[3:]], "resync")
    assert reasons(s)[0] == ("too-large", None)


@pytest.mark.parametrize("policy", ["resync", "window", "none"])
def test_key_mismatch_and_missing_key_are_quarantined(policy: str) -> None:
    other = Message.upsert(site="fleet-2", session="someone-else", seq=2, epoch=0, ts=1, row=r("x", 1))
    s = run([BASE[0], BASE[1], other, *BASE[2:]], policy)
    assert reasons(s)[0] == ("key-mismatch", 2) and s.state.table == FINAL
    keyless = step(None, records(BASE[0], key=None), policy=policy)  # type: ignore[arg-type]
    assert [(q.reason, q.session, q.key) for q in keyless.quarantine] == [("missing-key", "", None)]
    assert keyless.status.status == "new" and keyless.state.table == {}


def test_spark_bytearray_values_are_read_like_bytes() -> None:
    s = step(None, [Record(TOPIC, 0, i, SID, bytearray(encode(m)), 0) for i, m in enumerate(BASE)], policy="strict")
    assert s.state.table == FINAL


# -- divergence ---------------------------------------------------------------------------------


WRONG = [BASE[0], BASE[1], msg("upsert", 2, row=r("b", 99)), *BASE[3:]]


@pytest.mark.parametrize("policy", ["resync", "window", "none"])
def test_silent_divergence_is_counted_and_healed_by_the_snapshot(policy: str) -> None:
    before = run(WRONG[:4], policy)
    assert before.state.table["b"] == r("b", 99)  # nothing looks wrong yet
    s = run(WRONG, policy)
    assert s.status.divergences == 1 and s.state.table == FINAL and s.quarantine == []
    assert rebuild(s.changes) == {SID: FINAL}


def test_strict_policy_raises_on_a_divergent_snapshot() -> None:
    with pytest.raises(IntegrityError) as info:
        run(WRONG, "strict")
    assert (info.value.problem, info.value.offset, info.value.seq) == ("divergence", 4, 4)
    assert "snapshot seq 4 disagrees with the table rebuilt from updates: 1 row differ (b)" in str(info.value)


# -- end ------------------------------------------------------------------------------------


def test_end_closes_the_session_and_later_records_are_refused() -> None:
    s = run([*BASE, BASE[6], msg("upsert", 7, row=r("late", 1))], "resync")
    assert reasons(s) == [("duplicate", 6), ("broken-session", 7)]
    assert s.state.table == FINAL and s.status.status == "ended" and s.status.last_seq == 6


def test_expire_reports_an_unterminated_session_as_it_stands() -> None:
    s = run(BASE[:3], "resync")
    st = expire(s.state)
    assert st == s.status and st.status == "open" and st.last_seq == 2


# -- policy none ---------------------------------------------------------------------------------


def test_none_policy_applies_duplicates_and_late_records() -> None:
    s = run([BASE[0], BASE[1], BASE[3], BASE[2], BASE[2], msg("upsert", 1, row=r("a", 7))], "none")
    assert s.quarantine == []
    assert [c.seq for c in s.changes if c.op != "snapshot"] == [1, 3, 2, 2, 1]
    assert s.state.table == {"a": r("a", 7), "b": r("b", 2), "c": r("c", 1)}  # arrival order wins
    assert (s.status.gaps, s.status.duplicates, s.status.applied, s.status.status) == (1, 3, 6, "broken")


def test_none_policy_applies_orphan_updates_to_an_empty_table() -> None:
    s = run(BASE[1:3], "none")
    assert s.state.table == {"a": r("a", 2), "b": r("b", 2)} and s.status.status == "new"


# -- state ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", POLICIES)
def test_state_round_trips_through_json_between_every_record(policy: str) -> None:
    items = [BASE[0], BASE[2], BASE[1], b"junk", BASE[3], *EPOCH_1] if policy != "strict" else [*BASE[:3], *EPOCH_1]
    whole = run(items, policy)
    state, changes, quarantine = None, [], []
    for i, rec in enumerate(records(*items)):
        s = step(state, [rec], policy=policy)  # type: ignore[arg-type]
        state = SessionState.from_json(s.state.to_json())
        assert state == s.state, f"after record {i}"
        changes += s.changes
        quarantine += s.quarantine
    assert state == whole.state and changes == whole.changes and quarantine == whole.quarantine


def test_from_json_refuses_a_state_written_by_another_version() -> None:
    text = json.loads(run(BASE[:2], "resync").state.to_json())
    text["v"] = 99
    with pytest.raises(StateError, match="version 99"):
        SessionState.from_json(json.dumps(text))
    with pytest.raises(StateError):
        SessionState.from_json("not json")


@pytest.mark.parametrize("policy", POLICIES)
def test_state_round_trips_through_the_stored_form_between_every_record(policy: str) -> None:
    items = [BASE[0], BASE[2], BASE[1], b"junk", BASE[3], *EPOCH_1] if policy != "strict" else [*BASE[:3], *EPOCH_1]
    whole = run(items, policy)
    state, changes, quarantine = None, [], []
    for i, rec in enumerate(records(*items)):
        s = step(state, [rec], policy=policy)  # type: ignore[arg-type]
        stored = s.state.to_stored()
        assert isinstance(stored, bytes)
        state = SessionState.from_stored(bytearray(stored))  # Spark hands binary state back as a bytearray
        assert state == s.state, f"after record {i}"
        changes += s.changes
        quarantine += s.quarantine
    assert state == whole.state and changes == whole.changes and quarantine == whole.quarantine


def test_the_stored_form_still_reads_version_1_json_and_writes_version_2() -> None:
    held = run([BASE[0], BASE[2]], "window").state  # holds seq 2: the pending records are kept too
    v1 = held.to_json()
    assert json.loads(v1)["v"] == 1
    for old in (v1, v1.encode()):
        assert SessionState.from_stored(old) == held
    assert SessionState.from_stored(held.to_stored()) == held
    second = step(SessionState.from_stored(v1), records(BASE[1], start=2), policy="window")
    assert [c.seq for c in second.changes] == [1, 2] and second.state.pending == ()


def test_from_stored_refuses_another_version_and_bytes_that_are_no_state() -> None:
    import msgspec

    fields = msgspec.msgpack.decode(run(BASE[:2], "resync").state.to_stored())
    assert fields[0] == 2
    fields[0] = 99
    with pytest.raises(StateError, match="version 99"):
        SessionState.from_stored(msgspec.msgpack.encode(fields))
    for junk in (b"\x00junk", msgspec.msgpack.encode([2, "too short"]), b""):
        with pytest.raises(StateError, match="not a stored session state"):
            SessionState.from_stored(junk)


def test_the_stored_form_has_a_place_for_every_field_of_the_state() -> None:
    from dataclasses import fields

    from job.engine.session import _StoredV2

    assert set(_StoredV2.__struct_fields__) == {"v"} | {f.name for f in fields(SessionState)}


def test_a_stored_table_reads_as_the_same_rows_and_compares_them_as_dicts() -> None:
    s = run(BASE[:4], "resync")
    table = SessionState.from_stored(s.state.to_stored()).table
    assert table == s.state.table == {"a": r("a", 2), "b": r("b", 2), "c": r("c", 1)}
    assert list(table) == ["a", "b", "c"] and len(table) == 3 and "c" in table and "z" not in table
    assert table["b"] == r("b", 2) and table.get("z") is None
    # 1 and 1.0 are equal rows to Python (and always were to the divergence check), though
    # their JSON text differs: a snapshot restating a row that way is no divergence.
    floats = [msg("snapshot", 0, rows=[{"id": "a", "v": 1.0}]), msg("snapshot", 1, rows=[{"id": "a", "v": 1}])]
    first = run(floats[:1], "strict")
    again = step(SessionState.from_stored(first.state.to_stored()), records(floats[1], start=1), policy="strict")
    assert again.status.divergences == 0 and again.state.table == {"a": {"id": "a", "v": 1}}


def test_a_hand_built_table_is_kept_as_it_reads() -> None:
    state = SessionState(session=SID, epoch=0, next_seq=1, status="open", table={"a": {"id": "a", "v": "\ud800"}})
    assert SessionState.from_stored(state.to_stored()).table == state.table
    with pytest.raises(ValueError):
        SessionState(session=SID, table={"a": {"id": "a", "v": float("nan")}}).to_stored()


def test_row_changes_built_for_speed_equal_the_dataclass_built_ones() -> None:
    from dataclasses import FrozenInstanceError, fields

    from job.engine.session import RowChange, _row_change

    values = ("s", "fleet-2", 0, 3, "upsert", "a", '{"id":"a"}', 1003, TOPIC, 1, 7)
    fast = _row_change(*values)
    names = ("session", "site", "epoch", "seq", "op", "row_id", "data", "event_ts_ms", "topic", "partition", "offset")
    assert fast == RowChange(**dict(zip(names, values, strict=True)))
    assert {f.name for f in fields(RowChange)} == set(names)
    with pytest.raises(FrozenInstanceError):
        fast.seq = 4  # type: ignore[misc]


def test_step_refuses_records_of_another_key() -> None:
    first = run(BASE[:1], "resync")
    with pytest.raises(UsageError, match="group records by key"):
        step(first.state, records(BASE[1], key="other"), policy="resync")
    with pytest.raises(UsageError, match="policy 'lenient' is unknown"):
        step(None, [], policy="lenient")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="window=0"):
        step(None, [], policy="window", window=0)


def test_integrity_error_pickles_with_its_coordinates() -> None:
    with pytest.raises(IntegrityError) as info:
        run([BASE[0], BASE[2]], "strict")
    back = pickle.loads(pickle.dumps(info.value))
    fields = (back.session, back.topic, back.partition, back.offset, back.problem, back.seq)
    assert fields == (SID, TOPIC, 1, 1, "gap", 2)
    assert str(back) == str(info.value)


def test_the_reason_vocabulary_extends_the_contract_reasons() -> None:
    assert set(CONTRACT_REASONS) < set(REASONS)
    assert set(REASONS) - set(CONTRACT_REASONS) == {
        "gap",
        "duplicate",
        "stale-epoch",
        "orphan",
        "broken-session",
        "key-mismatch",
        "missing-key",
        "window-overflow",
    }


def test_resync_applies_a_snapshot_that_was_overtaken_but_stays_broken() -> None:
    # seq 4 (a snapshot) and 5 swap places; seq 5 reveals a gap, so 4 arrives behind next_seq.
    s = run([*BASE[:4], BASE[5], BASE[4], msg("upsert", 6, row=r("d", 1))], "resync")
    assert reasons(s) == [("gap", 5), ("broken-session", 6)]
    assert s.state.table == {"a": r("a", 2), "b": r("b", 2), "c": r("c", 1)}  # as of the snapshot
    assert s.status.status == "broken" and s.status.duplicates == 0 and s.status.applied == 5
    assert rebuild(s.changes) == {SID: s.state.table}


def test_a_snapshot_older_than_the_table_is_still_a_duplicate() -> None:
    s = run([*BASE[:3], BASE[4], BASE[5], BASE[0]], "resync")  # 4 fills the gap at 3; 0 comes again
    assert reasons(s) == [("duplicate", 0)] and s.state.table == FINAL
