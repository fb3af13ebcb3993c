"""The pure parts of chapter 06's integrity matrix: the fault set, the tidy frame built from
the verifier's reports, the loss bound and the resync model (no services)."""

from __future__ import annotations

import pytest

from job.drills.integrity import MATRIX_COLUMNS, every_fault, expected_fraction, matrix_frame, window_bound
from producers.faults import FAULTS, Burst, ClockSkew, Corrupt, Crash, Drop
from tests.job.test_verify_check import BASE, ledger, outputs, strict_outputs, verify, with_fault


def test_every_fault_has_one_instance_of_each_registered_fault_in_registry_order() -> None:
    faults = every_fault(0.02, burst_size=7)
    assert [f.name for f in faults] == list(FAULTS)
    assert all(0 < f.probability <= 1 for f in faults)
    assert next(f for f in faults if f.name == Drop.name).probability == 0.02
    assert next(f for f in faults if f.name == Crash.name).probability < 0.02  # rarer: it ends the session
    assert next(f for f in faults if isinstance(f, Burst)).size == 7


def test_the_frame_has_a_row_per_fault_and_policy_with_what_the_verifier_attributed() -> None:
    df = ledger(*with_fault(2, Drop.name))
    reports = {
        "strict": verify(df, *strict_outputs(df), policy="strict"),
        "resync": verify(df, *outputs(df, "resync"), policy="resync"),
    }
    frame = matrix_frame(reports, df)
    assert tuple(frame.columns) == MATRIX_COLUMNS
    assert len(frame) == len(FAULTS) * 2 and set(frame.policy) == {"strict", "resync"}
    drop = frame[frame.fault == Drop.name].set_index("policy")
    # a dropped record is never delivered: nothing carries the fault, nothing of it is applied
    assert drop.loc["resync", "faulted"] == 0 and drop.loc["resync", "applied"] == 0
    # resync sets seq 3 aside until the snapshot at seq 4 and counts the gap; strict stops and loses the rest
    assert drop.loc["resync", "quarantined"] == 1 and drop.loc["resync", "lost"] == 0
    assert drop.loc["resync", "other_kinds"] == "gap"
    assert drop.loc["strict", "lost"] == 3 and drop.loc["strict", "other_kinds"] == "unterminated"
    assert drop.allowed.all()
    untouched = frame[frame.fault == Corrupt.name]
    assert (untouched[["faulted", "applied", "quarantined", "lost", "other"]] == 0).all().all()


def test_faulted_records_count_as_applied_only_when_neither_quarantined_nor_lost() -> None:
    bad = ledger(*with_fault(2, Corrupt.name, sent=b'{"v": 1, "kind": '))
    skewed = ledger(*with_fault(2, ClockSkew.name))
    corrupt = matrix_frame({"resync": verify(bad, *outputs(bad))}, bad).set_index("fault").loc[Corrupt.name]
    skew = matrix_frame({"resync": verify(skewed, *outputs(skewed))}, skewed).set_index("fault").loc[ClockSkew.name]
    assert (corrupt.faulted, corrupt.applied, corrupt.quarantined) == (1, 0, 2)  # itself, and seq 3 after the gap
    assert (skew.faulted, skew.applied, skew.quarantined, skew.lost) == (1, 1, 0, 0)


def test_a_finding_no_fault_explains_gets_its_own_row_and_is_not_allowed() -> None:
    df = ledger(*BASE)
    changes, quarantine, statuses = outputs(df)
    report = verify(df, changes[:-1], quarantine, statuses)  # the last row change never reached the lake
    frame = matrix_frame({"resync": report}, df)
    nobody = frame[frame.fault == "-"].iloc[0]
    assert not report.ok and not nobody.allowed and nobody.lost + nobody.other >= 1
    assert frame[frame.fault != "-"].allowed.all()  # no finding: vacuously allowed


def test_the_window_bound_counts_delivered_records_up_to_the_next_snapshot() -> None:
    assert window_bound(ledger(*BASE)) == 0
    # a drop at seq 2: seq 3 may be set aside (the dropped seq 2 was never delivered); the snapshot at 4 closes it
    assert window_bound(ledger(*with_fault(2, Drop.name))) == 1
    # a corrupt record at seq 1: seq 1, 2 and 3 are inside its window
    assert window_bound(ledger(*with_fault(1, Corrupt.name, sent=b"{"))) == 3


def test_the_resync_model_grows_with_the_interval_and_the_fault_rate() -> None:
    assert expected_fraction(0.0, 50) == 0.0 and expected_fraction(0.3, 1) == 0.0
    assert expected_fraction(1.0, 10) == pytest.approx(0.9)  # everything after each snapshot
    # small p * n: about p * (n - 1) / 2 (the snapshot itself is never set aside)
    assert expected_fraction(0.001, 20) == pytest.approx(0.001 * 19 / 2, rel=0.01)
    shares = [expected_fraction(0.02, n) for n in (10, 25, 50, 200)]
    assert shares == sorted(shares) and 0.35 < shares[2] < 0.4 and shares[-1] > 0.75
    with pytest.raises(ValueError, match="interval 0"):
        expected_fraction(0.1, 0)
