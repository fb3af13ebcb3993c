"""The verifier's ``check`` on hand-built ledgers and outputs: what passes, what fails, and why.

The base session is the one of ``tests/producers/test_expected_state.py``:
    0 snapshot {a:1, b:1}   1 upsert a=2   2 upsert b=2   3 upsert c=1 (insert)
    4 snapshot {a:2, b:2, c:1}   5 delete a   6 end
Outputs are made by the state machine and then damaged on purpose where a test says so.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from typing import Any

import pandas as pd
import pytest

from job.engine.errors import ConfigError, IntegrityError, UsageError
from job.engine.session import QuarantineRecord, Record, RowChange, SessionStatus, step
from job.verify.compare import Report, check, output_frames
from producers.contract import Message, encode
from producers.ledger import ledger_frame
from tests.streams import base_session, ledger_entry, message, r

SID = "fleet-2-s0000"
TOPIC = "collection-fleet-2"


def msg(kind: str, seq: int, epoch: int = 0, session: str = SID, **payload: Any) -> Message:
    return message(kind, seq, epoch=epoch, session=session, **payload)


BASE = base_session(msg)
NOT_SENT = {"drop", "orphan-update", "crash"}


def ledger(*items: Message | tuple[Message, dict[str, Any]]) -> pd.DataFrame:
    """Ledger rows in send order; a tuple sets fault / outcome / detail / sent bytes of one row.

    Delivered rows get consecutive offsets in partition 0, in send order.
    """
    entries, offset = [], 0
    for i, item in enumerate(items):
        m, opts = (item, {}) if isinstance(item, Message) else item
        fault = opts.get("fault")
        outcome = opts.get("outcome", "not-sent" if fault in NOT_SENT else "ok")
        sent = opts.get("sent", encode(m)) if outcome != "not-sent" else None
        entries.append(
            ledger_entry(
                m,
                i,
                topic=TOPIC,
                outcome=outcome,
                sent=sent,
                fault=fault,
                detail=opts.get("detail"),
                offset=offset if outcome == "ok" else None,
            )
        )
        offset += opts.get("arrives", outcome == "ok")
    return ledger_frame(entries)


def arrivals(df: pd.DataFrame) -> list[Record]:
    ok = df[df["outcome"] == "ok"].sort_values("offset")
    return [Record(TOPIC, 0, int(x.offset), x.session, x.sent, 0) for x in ok.itertuples()]


def outputs(df: pd.DataFrame, policy: str = "resync") -> tuple[list, list, list]:
    """What the state machine writes for the ledger's delivered records, session by session."""
    changes, quarantine, statuses = [], [], []
    recs = arrivals(df)
    for sid in dict.fromkeys(x.key for x in recs):
        s = step(None, [x for x in recs if x.key == sid], policy=policy)  # type: ignore[arg-type]
        changes += s.changes
        quarantine += s.quarantine
        statuses.append(s.status)
    return changes, quarantine, statuses


def verify(df: pd.DataFrame, changes: list, quarantine: list, statuses: list, policy: str = "resync") -> Report:
    return check(df, *output_frames(changes, quarantine, statuses), policy=policy)  # type: ignore[arg-type]


def bad(report: Report) -> list[tuple[str, int | None, int | None]]:
    return [(f.kind, f.seq, f.offset) for f in report.disallowed]


def with_fault(seq: int, fault: str, **opts: Any) -> list:
    return [(m, {"fault": fault, **opts}) if m.seq == seq else m for m in BASE]


# -- clean runs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["strict", "resync", "window", "none"])
def test_a_clean_run_passes_under_every_policy(policy: str) -> None:
    df = ledger(*BASE)
    report = verify(df, *outputs(df, policy), policy=policy)
    assert report.ok and report.anomalies == ()
    assert (report.sessions, report.delivered, report.applied, report.quarantined, report.lost) == (1, 7, 7, 0, 0)


# -- lost records -----------------------------------------------------------------------------------


def test_a_record_lost_outside_any_window_fails() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    changes = [c for c in changes if c.seq != 5]  # the delete of a never made it to the output
    report = verify(df, changes, quarantine, statuses)
    assert not report.ok and report.lost == 1
    assert bad(report) == [("lost", 5, 5), ("unexpected", 5, 5)]  # the record, then the row it left behind
    [lost] = report.disallowed[:1]
    assert (lost.session, lost.epoch, lost.topic, lost.partition, lost.fault) == (SID, 0, TOPIC, 0, None)
    assert "row 'a' is in the output table but not in the intended one" in report.disallowed[1].detail


def test_a_record_lost_inside_a_drop_window_passes() -> None:
    df = ledger(*with_fault(2, "drop"))
    changes, quarantine, statuses = outputs(df)
    assert [(q.reason, q.seq) for q in quarantine] == [("gap", 3)]
    report = verify(df, changes, [], statuses)  # ...and the quarantined seq 3 is not even written
    assert report.ok, report.summary()
    assert report.counts == {"drop": {"lost": 1, "gap": 1}}
    [lost] = [f for f in report.anomalies if f.kind == "lost"]
    assert (lost.seq, lost.offset, lost.fault, lost.allowed) == (3, 2, "drop", True)


def test_a_record_lost_just_after_the_closing_snapshot_fails() -> None:
    df = ledger(*with_fault(2, "drop"))
    changes, quarantine, statuses = outputs(df)
    report = verify(df, [c for c in changes if c.seq != 5], quarantine, statuses)
    assert ("lost", 5, 4) in bad(report)


# -- quarantine ---------------------------------------------------------------------------------------


def test_quarantined_records_inside_a_window_pass_and_are_counted_per_fault() -> None:
    df = ledger(*with_fault(1, "drop"))
    report = verify(df, *outputs(df))
    assert report.ok and report.quarantined == 2  # seq 2 (gap) and 3 (broken session)
    assert report.counts == {"drop": {"quarantined": 2, "gap": 1}}
    assert {f.detail.split(":")[0] for f in report.anomalies if f.kind == "quarantined"} == {
        "quarantined as gap",
        "quarantined as broken-session",
    }


def test_a_clean_record_in_quarantine_fails() -> None:
    df = ledger(*BASE)
    changes, _, statuses = outputs(df)
    rec = arrivals(df)[1]
    q = QuarantineRecord(
        topic=TOPIC, partition=0, offset=1, key=SID, value=rec.value, reason="duplicate", detail="made up", session=SID, seq=1
    )
    report = verify(df, changes, [q], statuses)
    assert ("quarantined", 1, 1) in bad(report) and ("unexpected", 1, 1) in bad(report)  # and applied as well


def test_a_quarantine_reason_that_contradicts_the_contract_fails() -> None:
    garbage = encode(BASE[2])[:20]
    df = ledger(*with_fault(2, "corrupt", sent=garbage, detail={"reason": "invalid-json"}))
    changes, quarantine, statuses = outputs(df)
    assert verify(df, changes, quarantine, statuses).ok
    relabelled = [dataclasses.replace(q, reason="gap") if q.offset == 2 else q for q in quarantine]
    assert bad(verify(df, changes, relabelled, statuses)) == [("unexpected", 2, 2)]


def test_strict_must_never_quarantine() -> None:
    df = ledger(*with_fault(2, "drop"))
    report = verify(df, *outputs(df, "resync"), policy="strict")
    assert ("quarantined", 3, 2) in bad(report)
    assert "policy strict must never show it" in report.disallowed[0].detail


# -- extra, duplicated and wrong output -----------------------------------------------------------------


def test_an_unexpected_extra_row_fails() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    ghost = dataclasses.replace(changes[-1], op="upsert", row_id="ghost", data=json.dumps(r("ghost", 1)))
    report = verify(df, [*changes, ghost], quarantine, statuses)
    assert {(f.kind, f.seq, f.detail) for f in report.disallowed} == {
        ("unexpected", None, "row 'ghost' is in the output table but not in the intended one"),
        ("unexpected", 5, "the changes do not match the delete that was sent"),
    }


def test_output_from_a_record_the_ledger_never_delivered_fails() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    stray = dataclasses.replace(changes[-1], offset=99, seq=3)
    report = verify(df, [*changes, stray], quarantine, statuses)
    assert ("unexpected", 3, 99) in bad(report)


def test_an_indeterminate_record_that_arrived_is_not_unexpected() -> None:
    df = ledger(*[(m, {"outcome": "indeterminate", "arrives": True}) if m.seq == 3 else m for m in BASE])
    # It reached Kafka after all: the reader sees it at the offset the ledger does not know.
    recs = [Record(TOPIC, 0, i, SID, encode(m), 0) for i, m in enumerate(BASE)]
    s = step(None, recs, policy="resync")
    report = verify(df, s.changes, s.quarantine, [s.status])
    assert report.ok and report.delivered == 6 and report.applied == 6


def test_a_message_applied_twice_fails_under_resync() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    again = [c for c in changes if c.seq == 1]  # e.g. a micro-batch written twice after a restart
    report = verify(df, [*changes, *again], quarantine, statuses)
    assert bad(report) == [("duplicated", 1, 1)]


def test_a_duplicate_applied_twice_passes_under_none_but_not_under_resync() -> None:
    df = ledger(*BASE[:3], (BASE[2], {"fault": "duplicate"}), *BASE[3:])
    report = verify(df, *outputs(df, "none"), policy="none")
    assert report.ok and report.counts == {"duplicate": {"duplicated": 1}}
    assert bad(verify(df, *outputs(df, "none"), policy="resync")) == [("duplicated", 2, 3)]
    assert verify(df, *outputs(df, "resync")).ok  # resync quarantines the copy instead


def test_a_duplicate_is_blamed_on_its_last_copy_in_offset_order_whatever_order_the_lake_is_read_in() -> None:
    """The lake's rows come back in no fixed order: the finding must not depend on it (two
    reads of one lake once blamed offsets 234 and 235 for the same duplicate)."""
    df = ledger(*BASE[:3], (BASE[2], {"fault": "duplicate"}), *BASE[3:])
    changes, quarantine, statuses = outputs(df, "none")
    for order in (changes, changes[::-1]):
        assert bad(verify(df, order, quarantine, statuses, policy="resync")) == [("duplicated", 2, 3)]


def test_a_wrong_value_after_the_closing_snapshot_fails() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    changes = [dataclasses.replace(c, data=json.dumps(r("b", 3))) if c.seq == 4 and c.row_id == "b" else c for c in changes]
    report = verify(df, changes, quarantine, statuses)
    [wrong] = [f for f in report.disallowed if f.kind == "wrong-value"]
    assert (wrong.seq, wrong.offset) == (4, 4) and "differs in v: {v=3} instead of {v=2}" in wrong.detail


def test_a_wrong_value_in_a_window_that_is_never_restored_is_not_checked() -> None:
    wrong = encode(msg("upsert", 5, row=r("b", 99)))
    faulty = (msg("upsert", 5, row=r("b", 3)), {"fault": "silent-divergence", "sent": wrong})
    df = ledger(*BASE[:5], faulty, msg("end", 6))
    changes, quarantine, statuses = outputs(df)
    report = verify(df, changes, quarantine, statuses)
    assert report.ok and report.anomalies == (), report.summary()  # b is uncertain: nothing after seq 5 restates it
    fixed = [dataclasses.replace(c, data=json.dumps(r("a", 7))) if c.seq == 1 else c for c in changes]
    assert ("unexpected", 1, 1) in bad(verify(df, fixed, quarantine, statuses))  # the rest is still checked


# -- status ------------------------------------------------------------------------------------------


def test_an_unterminated_session_fails_unless_a_fault_allows_it() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    still_open = [dataclasses.replace(statuses[0], status="open", last_seq=5)]
    assert bad(verify(df, changes, quarantine, still_open)) == [("unterminated", 6, 6)]
    crashed = ledger(*BASE[:6], (BASE[6], {"fault": "crash"}))
    report = verify(crashed, *outputs(crashed))
    assert report.ok and report.anomalies == ()  # a crash withholds the end: expected stays open


def test_divergence_is_allowed_only_with_a_silent_divergence() -> None:
    wrong = encode(msg("upsert", 2, row=r("b", 99)))
    df = ledger(*with_fault(2, "silent-divergence", sent=wrong))
    changes, quarantine, statuses = outputs(df)
    assert statuses[0].divergences == 1
    report = verify(df, changes, quarantine, statuses)
    assert report.ok and report.counts == {"silent-divergence": {"divergence": 1}}
    clean = ledger(*BASE)
    c2, q2, s2 = outputs(clean)
    assert bad(verify(clean, c2, q2, [dataclasses.replace(s2[0], divergences=2)])) == [("divergence", None, 6)]


def test_an_anomaly_is_blamed_on_the_latest_window_that_allows_it_not_the_latest_that_covers_it() -> None:
    """seq 2 sits in two windows: the drop's at seq 1 and its own silent divergence's, which
    opened later but allows no quarantine. Its quarantine (the gap after the drop) is the drop's."""
    wrong = encode(msg("upsert", 2, row=r("b", 99)))
    df = ledger(BASE[0], (BASE[1], {"fault": "drop"}), (BASE[2], {"fault": "silent-divergence", "sent": wrong}), *BASE[3:])
    report = verify(df, *outputs(df))
    assert report.ok, report.summary()
    assert [(f.kind, f.seq, f.fault) for f in report.anomalies if f.kind == "quarantined"] == [
        ("quarantined", 2, "drop"),
        ("quarantined", 3, "drop"),
    ]


def test_an_epoch_change_without_a_restart_fails() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    report = verify(df, changes, quarantine, [dataclasses.replace(statuses[0], epoch_changes=1)])
    assert [f.kind for f in report.disallowed] == ["epoch-change"]


def test_a_missing_status_row_fails() -> None:
    df = ledger(*BASE)
    changes, quarantine, _ = outputs(df)
    report = verify(df, changes, quarantine, [])
    assert [(f.kind, f.detail) for f in report.disallowed] == [("unexpected", "the output has no status row for this session")]


def test_the_latest_status_row_of_a_session_wins() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    early = dataclasses.replace(statuses[0], status="open", last_seq=3, last_offset=3, applied=4)
    assert verify(df, changes, quarantine, [statuses[0], early]).ok
    assert not verify(df, changes, quarantine, [early]).ok


def test_the_lakes_status_column_names_are_accepted() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    rows, quar, sessions = output_frames(changes, quarantine, statuses)
    lake_sessions = sessions.rename(
        columns={
            "last_topic": "topic",
            "last_partition": "partition",
            "last_offset": "offset",
            "last_event_ts_ms": "event_ts_ms",
        }
    ).assign(processed_ms=1)
    assert check(df, rows, quar.assign(processed_ms=1), lake_sessions, policy="resync").ok
    with pytest.raises(UsageError, match="lacks the columns"):
        check(df, rows.drop(columns=["row_id"]), quar, sessions, policy="resync")


def test_sessions_unknown_to_the_ledger_are_counted_not_judged() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    other = [Record(TOPIC, 1, 0, "other-run-s0000", encode(msg("snapshot", 0, session="other-run-s0000", rows=[])), 0)]
    s = step(None, other, policy="resync")
    report = verify(df, [*changes, *s.changes], quarantine, [*statuses, s.status])
    assert report.ok and report.foreign_sessions == 1


# -- strict ------------------------------------------------------------------------------------------


def strict_outputs(df: pd.DataFrame) -> tuple[list, list, list]:
    """What a strict query commits: one micro-batch per record until the first raises."""
    changes, statuses, state = [], [], None
    for rec in arrivals(df):
        try:
            s = step(state, [rec], policy="strict")
        except IntegrityError:
            break
        state, changes, statuses = s.state, changes + s.changes, [*statuses, s.status]
    return changes, [], statuses


def test_strict_may_stop_at_a_fault_and_lose_everything_after_it() -> None:
    df = ledger(*with_fault(2, "drop"))
    changes, quarantine, statuses = strict_outputs(df)
    assert max(c.seq for c in changes) == 1
    report = verify(df, changes, quarantine, statuses, policy="strict")
    assert report.ok, report.summary()
    assert report.lost == 4 and report.counts["drop"] == {"lost": 3, "unterminated": 1}  # the end counts once


def test_strict_must_not_write_past_a_missing_record() -> None:
    df = ledger(*with_fault(2, "drop"))
    report = verify(df, *outputs(df, "resync"), policy="strict")
    assert ("unexpected", 4, 3) in bad(report)  # seq 4 was written although seq 2 never came


def test_a_strict_run_without_faults_must_be_complete() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df, "strict")
    truncated = [c for c in changes if c.seq < 4]
    report = verify(df, truncated, quarantine, [dataclasses.replace(statuses[0], status="open")], policy="strict")
    assert {k for k, _, _ in bad(report)} == {"lost", "unterminated"}


def test_what_strict_wrote_before_the_stop_must_be_the_intended_table() -> None:
    df = ledger(*with_fault(3, "drop"))
    changes, quarantine, statuses = strict_outputs(df)
    changes = [dataclasses.replace(c, data=json.dumps(r("a", 5))) if c.seq == 1 else c for c in changes]
    report = verify(df, changes, quarantine, statuses, policy="strict")
    assert ("wrong-value", 1, 1) in bad(report)


# -- the report --------------------------------------------------------------------------------------


def test_the_summary_names_the_verdict_the_faults_and_the_first_disallowed_anomalies() -> None:
    df = ledger(*with_fault(2, "drop"))
    changes, quarantine, statuses = outputs(df)
    report = verify(df, [c for c in changes if c.seq != 5], quarantine, statuses)
    text = report.summary(limit=1)
    lines = text.splitlines()
    assert lines[0].startswith("verify (policy resync): FAILED: 1 sessions, 6 records delivered: 4 applied")
    assert "  drop: 1 gap, 1 quarantined" in lines
    assert "first 1 of 2 anomalies no fault allows:" in lines
    assert lines[-1].startswith(f"  lost session {SID} epoch 0 seq 5 {TOPIC}[0]@4:")
    assert lines[-1].endswith("[NOT allowed, no fault explains it]")
    data = json.loads(report.to_json())
    assert data["ok"] is False and len(data["anomalies"]) == len(report.anomalies)
    assert Report.from_json(report.to_json()) == report  # what `job verify --json` wrote, read back
    assert list(report.frame()["kind"]) == [f.kind for f in report.anomalies]


def test_check_refuses_an_unknown_policy() -> None:
    df = ledger(*BASE)
    with pytest.raises(ConfigError, match="policy='lenient': choose one of"):
        verify(df, [], [], [], policy="lenient")


def test_output_frames_have_exactly_the_dataclass_fields_as_columns() -> None:
    rows, quarantine, sessions = output_frames([], [], [])
    assert list(rows.columns) == [f.name for f in dataclasses.fields(RowChange)]
    assert list(quarantine.columns) == [f.name for f in dataclasses.fields(QuarantineRecord)]
    assert list(sessions.columns) == [f.name for f in dataclasses.fields(SessionStatus)]


def test_strict_may_miss_the_tail_of_an_older_epoch_it_never_saw() -> None:
    restart = [
        (BASE[0], {"fault": "orphan-update"}),
        (BASE[1], {"outcome": "failed"}),
        (msg("snapshot", 0, epoch=1, rows=[r("a", 2), r("b", 1)]), {"fault": "epoch-reset"}),
        msg("end", 1, epoch=1),
    ]
    df = ledger(*restart)
    changes, quarantine, statuses = strict_outputs(df)
    assert statuses[-1].status == "ended"  # strict saw nothing wrong: epoch 1 opened with its snapshot
    report = verify(df, changes, quarantine, statuses, policy="strict")
    assert report.ok, report.summary()


def test_the_findings_frame_has_the_same_column_types_with_and_without_findings() -> None:
    # chapter 08 groups the findings by partition and looks partitions up by label; an
    # untyped empty frame turned that lookup positional and printed a pandas FutureWarning
    # into the notebook (seen once in CI, when the repaired lake had no findings at all)
    base = ledger(*BASE)
    clean = verify(base, *outputs(base)).frame()
    df = ledger(*with_fault(2, "drop"))
    changes, quarantine, statuses = outputs(df)
    dirty = verify(df, [c for c in changes if c.seq != 5], quarantine, statuses).frame()
    assert clean.empty and not dirty.empty
    assert dict(clean.dtypes) == dict(dirty.dtypes)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for frame in (clean, dirty):
            lost = frame[frame["kind"] == "lost"].groupby("partition").size()
            assert lost.get(7, 0) == 0


# -- judged in parts (job/verify/spark_check.py judges one session at a time) ------------------------


@pytest.mark.parametrize("policy", ["strict", "resync"])
def test_sessions_judged_apart_give_the_report_of_the_whole(policy: str) -> None:
    """One session carries a drop (where a strict query stops, so the clean session after it in
    Kafka loses everything), and a third session of the outputs is unknown to the ledger: judged one
    session at a time with the stop found over the whole ledger first, the report is the one
    ``check`` gives on everything at once."""
    from job.verify.compare import expected_for, judge_part, report, strict_candidates, strict_stop

    other = "fleet-2-s0001"
    df = ledger(*with_fault(2, "drop"), *base_session(lambda *a, **k: msg(*a, session=other, **k)))
    changes, quarantine, statuses = strict_outputs(df) if policy == "strict" else outputs(df, "resync")
    stray = step(
        None,
        [Record(TOPIC, 1, 0, "other-run-s0000", encode(msg("snapshot", 0, session="other-run-s0000", rows=[])), 0)],
        policy="resync",
    )
    rows, quar, stats = output_frames([*changes, *stray.changes], quarantine, [*statuses, stray.status])
    whole = check(df, rows, quar, stats, policy=policy)  # type: ignore[arg-type]
    stop = strict_stop(strict_candidates(expected_for(df))) if policy == "strict" else None
    parts = [
        judge_part(
            df[df["session"] == sid],
            rows[rows["session"] == sid],
            quar[quar["session"] == sid],
            stats[stats["session"] == sid],
            policy=policy,
            stop=stop,
        )  # type: ignore[arg-type]
        for sid in (other, "other-run-s0000", SID)
    ]
    assert whole.ok and whole.anomalies and whole.foreign_sessions == 1, whole.summary()
    assert report(policy, *parts) == whole  # type: ignore[arg-type]
