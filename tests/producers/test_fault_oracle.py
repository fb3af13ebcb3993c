"""What each fault excuses, written out by hand from its definition (the docstring of
``producers.faults``: what it does, the damage, what a correct pipeline must do).

An independent oracle: nothing here is read from the registry, so a registry change that
widens what a fault excuses (or moves it in or out of the strict, bad-record or resync
sets) fails this test, and must be made here too, on purpose.
"""

from __future__ import annotations

import pytest

from producers.expected_output import CLEAN_FAULTS, DELIVERY_ALLOWED
from producers.faults import BAD_RECORD, CLEAN_SNAPSHOT, FAULT_NAMES, FAULTS, STRICT_STOPPING

#: A bad record (the contract rejects it): set aside, its session broken to the next snapshot.
_BAD = {"quarantined", "gap", "lost", "orphan", "unterminated"}

#: name -> (allowed anomalies, window shape, stops strict, bad record, clean snapshot)
ORACLE: dict[str, tuple[set[str], str, bool, bool, bool]] = {
    "drop": ({"gap", "lost", "quarantined", "orphan", "unterminated"}, "to-next-snapshot", True, False, False),
    "duplicate": ({"duplicated", "quarantined", "lost"}, "to-next-snapshot", True, False, False),
    "reorder": ({"reordered", "gap", "lost", "quarantined"}, "to-next-snapshot", True, False, False),
    "corrupt": (_BAD, "to-next-snapshot", True, True, False),
    "schema-drift": (_BAD, "to-next-snapshot", True, True, False),
    "orphan-update": ({"orphan", "quarantined", "lost", "gap"}, "to-next-snapshot", True, False, False),
    "epoch-reset": ({"epoch-change"}, "message", False, False, True),
    "silent-divergence": ({"wrong-value", "divergence"}, "to-next-snapshot", True, False, False),
    "oversized": (_BAD, "to-next-snapshot", True, True, False),
    "clock-skew": ({"late"}, "message", False, False, True),
    "crash": ({"unterminated"}, "to-end", False, False, False),
    "burst": (set(), "none", False, False, True),
}


def test_the_oracle_names_every_fault_once():
    assert sorted(ORACLE) == sorted(FAULT_NAMES)


@pytest.mark.parametrize("name", sorted(ORACLE))
def test_a_fault_excuses_exactly_what_its_definition_says(name):
    allowed, window, strict, bad, clean = ORACLE[name]
    info = FAULTS[name].info
    assert {str(a) for a in info.allowed} == allowed, f"{name}: allowed anomalies changed"
    assert (info.window, info.stops_strict, info.bad_record, info.clean_snapshot) == (window, strict, bad, clean), name


def test_the_derived_sets_hold_exactly_these_faults():
    assert set(STRICT_STOPPING) == {
        "drop",
        "duplicate",
        "reorder",
        "corrupt",
        "schema-drift",
        "orphan-update",
        "silent-divergence",
        "oversized",
    }
    assert set(BAD_RECORD) == {"corrupt", "schema-drift", "oversized"}
    assert set(CLEAN_SNAPSHOT) == {"epoch-reset", "clock-skew", "burst"}
    assert set(CLEAN_FAULTS) == {None, "epoch-reset", "clock-skew", "burst"}


def test_an_undelivered_message_excuses_what_a_drop_does_and_an_indeterminate_one_a_duplicate_too():
    assert {k: {str(a) for a in v} for k, v in DELIVERY_ALLOWED.items()} == {
        "delivery-failed": {"gap", "lost", "quarantined", "orphan", "unterminated"},
        "delivery-indeterminate": {"gap", "lost", "quarantined", "orphan", "unterminated", "duplicated"},
    }
