"""The "Your turn" checks (job/drills/exercises.py): unanswered they state the task, the reference
answer (notebooks/solutions/answers.py) is called right, and each plausible wrong answer is
called wrong with the hint a learner needs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from job.drills import exercises

_spec = importlib.util.spec_from_file_location("answers", Path(__file__).resolve().parents[2] / "notebooks/solutions/answers.py")
answers = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(answers)  # type: ignore[union-attr]

CAP = {"trigger_s": 2.0, "input_rate": 1000.0, "outage_s": 4 * 3600.0, "within_s": 3600.0}
WEEKEND = {"outage_h": 62.0, "input_rate": 350.0, "throughput": 480.0}
KILL = {"offsets": [0, 1, 2, 3, 4, 5], "commits": [0, 1, 2, 3, 4]}


@pytest.mark.parametrize(
    "check",
    [
        lambda a: exercises.reorder_policy(a),
        lambda a: exercises.replayed_batch(a, **KILL),
        lambda a: exercises.catch_up_cap(a, **CAP),
        lambda a: exercises.catch_up_hours(a, **WEEKEND),
        lambda a: exercises.failure_spacing(a, recovery_times_s=[16.0, 22.0]),
        lambda a: exercises.policy_for(a, frame=None, reports={}, errors={}),
    ],
)
def test_unanswered_a_check_states_the_task_and_does_not_fail(check):
    verdict = check(None)
    assert verdict.ok is None and repr(verdict).startswith("Your turn: ") and "Set `answer`" in repr(verdict)


@pytest.mark.parametrize("depth", [2, 3, 5])
def test_ch02_the_reference_policy_is_right_and_the_others_say_what_they_lose(depth):
    assert exercises.reorder_policy(answers.ch02(depth), depth=depth).ok
    wrong = {
        ("strict", 8): "strict stopped the job",
        ("resync", 8): "takes a late message for a lost one",
        ("none", 8): "never noticed that message 45 was lost",
        ("window", depth - 1): f"does not fit a window of {depth - 1}",
        ("often", 8): "is not a policy",
    }
    for answer, said in wrong.items():
        verdict = exercises.reorder_policy(answer, depth=depth)
        assert verdict.ok is False and said in verdict.message, (answer, verdict)
    assert exercises.reorder_policy("window").ok is False


def test_ch03_the_pending_batch_is_right_a_committed_or_the_next_one_is_not():
    assert exercises.replayed_batch(answers.ch03(**KILL), **KILL).ok
    assert "never runs again" in exercises.replayed_batch(4, **KILL).message
    assert "first new batch" in exercises.replayed_batch(6, **KILL).message
    assert exercises.replayed_batch(6, offsets=[0, 1, 2], commits=[0, 1, 2]).ok is False  # nothing pending: batch 3 is next
    assert exercises.replayed_batch(3, offsets=[0, 1, 2], commits=[0, 1, 2]).ok


def test_ch05_the_smallest_cap_is_right_too_small_or_too_large_is_not():
    cap = answers.ch05(**CAP)
    assert cap == 10_000 and exercises.catch_up_cap(cap, **CAP).ok
    short = exercises.catch_up_cap(cap - 1_000, **CAP)
    assert short.ok is False and "catches up in 1.14 h" in short.message and "solve for the throughput" in short.message
    assert "never" in exercises.catch_up_cap(2_000, **CAP).message  # 1,000 records/s: no faster than the input
    assert "larger than the 10,000" in exercises.catch_up_cap(30_000, **CAP).message
    assert "positive whole number" in exercises.catch_up_cap(0, **CAP).message and exercises.catch_up_cap(0, **CAP).ok is False


def test_ch07_the_catch_up_time_is_right_forgetting_the_input_is_named():
    assert exercises.catch_up_hours(answers.ch07(**WEEKEND), **WEEKEND).ok
    naive = WEEKEND["outage_h"] * WEEKEND["input_rate"] / WEEKEND["throughput"]
    assert "forgets that the input keeps arriving" in exercises.catch_up_hours(naive, **WEEKEND).message
    assert "off by more than a tenth" in exercises.catch_up_hours(5, **WEEKEND).message
    slow = {**WEEKEND, "throughput": 300.0}
    assert exercises.catch_up_hours(float("inf"), **slow).ok and exercises.catch_up_hours(40, **slow).ok is False


def test_ch10_a_spacing_longer_than_every_recovery_is_right():
    times = [16.0, 22.0]
    assert exercises.failure_spacing(answers.ch10(times), recovery_times_s=times).ok
    assert "lands before it ends" in exercises.failure_spacing(20, recovery_times_s=times).message
    # with the detector's hold: longer than the recovery is not enough, the hold must fit too
    assert exercises.failure_spacing(answers.ch10(times, 10), recovery_times_s=times, hold_s=10).ok
    late = exercises.failure_spacing(30, recovery_times_s=times, hold_s=10)
    assert late.ok is False and "10 s back in the band" in late.message and "more than 32 s" in late.message
    assert exercises.failure_spacing(30, recovery_times_s=[]).ok is False


def test_ch06_the_matrix_s_choice_is_right_and_each_other_policy_is_told_its_failing():
    import pandas as pd

    from producers.faults import FAULTS

    bad = next(f for f in FAULTS if FAULTS[f].info.bad_record)
    rows = [
        ("strict", "reorder", 0, 0),
        ("resync", "reorder", 0, 40),
        ("window", "reorder", 0, 6),
        ("none", bad, 3, 0),
        ("resync", bad, 0, 5),
        ("window", bad, 0, 5),
    ]
    frame = pd.DataFrame(rows, columns=["policy", "fault", "applied", "quarantined"])
    reports = {p: type("R", (), {"lost": 0})() for p in ("strict", "resync", "window", "none")}
    errors = {"strict": "policy strict stops here", "resync": None, "window": None, "none": None}
    table = exercises._policy_table(frame, reports, errors)
    best = answers.ch06(table)
    assert best == "window" and exercises.policy_for(best, frame=frame, reports=reports, errors=errors).ok
    said = {
        "strict": "stopped at the first fault",
        "none": "applied 3 bad records",
        "resync": "where window set aside 11",
        "often": "was not in this run's matrix",
    }
    for answer, text in said.items():
        verdict = exercises.policy_for(answer, frame=frame, reports=reports, errors=errors)
        assert verdict.ok is False and text in verdict.message, (answer, verdict)
    lossy = {**reports, "window": type("R", (), {"lost": 2})()}
    assert "lost 2 delivered records" in exercises.policy_for("window", frame=frame, reports=lossy, errors=errors).message


def test_ch01_delivered_bad_records_are_right_undelivered_or_good_faulted_ones_are_named():
    import pandas as pd

    from producers.faults import FAULTS

    bad = next(f for f in FAULTS if FAULTS[f].info.bad_record)
    good = next(f for f in FAULTS if not FAULTS[f].info.bad_record and f != "drop")
    ledger = pd.DataFrame({"outcome": ["ok", "ok", "dropped", "ok", "ok"], "fault": [bad, bad, bad, good, None]})
    assert answers.ch01(ledger) == 2 and exercises.unappliable_records(2, ledger=ledger).ok
    assert "never reached Kafka" in exercises.unappliable_records(3, ledger=ledger).message
    all_delivered = ledger.assign(outcome=["ok"] * 5, fault=[bad, bad, None, good, None])
    assert "a good record the job can apply" in exercises.unappliable_records(3, ledger=all_delivered).message
    assert exercises.unappliable_records("two", ledger=ledger).ok is False
    assert exercises.unappliable_records(None, ledger=ledger).ok is None


def test_ch04_the_run_s_behaviours_are_right_and_a_wrong_one_shows_the_run_s_evidence():
    from types import SimpleNamespace as ns

    outcomes = [ns(kind=k, behaviour=b, batches_during=3 if b == "kept going" else 0) for k, b in answers.CH04.items()]
    assert exercises.fault_behaviour(dict(answers.CH04), outcomes=outcomes).ok
    guess = {**answers.CH04, "master-kill": "waited"}
    verdict = exercises.fault_behaviour(guess, outcomes=outcomes)
    assert verdict.ok is False and "master-kill: the job kept going (3 batch(es) with input" in verdict.message
    assert "missing: broker-kill" in exercises.fault_behaviour({"worker-kill": "kept going"}, outcomes=outcomes).message


def test_ch08_the_repair_is_right_and_each_way_into_the_trap_is_named():
    assert exercises.lost_checkpoint_command(answers.CH08).ok
    said = {
        "python -m job run --checkpoint /c": "refuses to start there",
        "python -m job run --allow-sink-ahead": "walks into the trap",
        "python -m job run --output s3a://lake/new": "readers of the old one lose",
        "python -m job repair --checkpoint /c": "a dry run",
        "python -m job verify --ledger l": "does not restart the job",
        "python -m job rerun": "takes one of run, watch",
    }
    for answer, text in said.items():
        verdict = exercises.lost_checkpoint_command(answer)
        assert verdict.ok is False and text in verdict.message, (answer, verdict)
    assert exercises.lost_checkpoint_command(None).ok is None


def test_ch09_the_merge_rule_and_the_reprocess_are_right_each_slip_is_explained():
    assert exercises.merge_rule(answers.CH09).ok
    assert "started earliest" in exercises.merge_rule(("second", "reprocess")).message
    assert "never rewrites what is there" in exercises.merge_rule(("first", "merge")).message
    both = exercises.merge_rule(("second", "merge"))
    assert both.ok is False and "started earliest" in both.message and "never rewrites" in both.message
    assert exercises.merge_rule("first").ok is False and exercises.merge_rule(None).ok is None


def test_the_ch08_check_knows_the_command_line_s_subcommands():
    import argparse

    from job.cli import _parser

    sub = next(a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert set(exercises._JOB_COMMANDS) == set(sub.choices)
