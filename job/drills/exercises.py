"""The workbook's "Your turn" tasks: one check per task, saying right, or what is wrong and a hint.

A chapter ends with ``answer = None`` and a call to its check. Unanswered, the check states the
task and does not fail; answered, it returns a :class:`Verdict` that says right, or what the
answer gets wrong, computed by the job's own code where the task allows (the session engine
for the policy task, the catch-up arithmetic of :mod:`job.drills.backlog`), never a traceback.
The reference answers are in ``notebooks/solutions/``; ``tests/job/test_exercises.py`` feeds each
check its reference answer and the plausible wrong ones.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from job.drills.backlog import catch_up_time_s

__all__ = [
    "Verdict",
    "catch_up_cap",
    "catch_up_hours",
    "failure_spacing",
    "fault_behaviour",
    "lost_checkpoint_command",
    "merge_rule",
    "policy_for",
    "reorder_policy",
    "replayed_batch",
    "unappliable_records",
]


@dataclass(frozen=True)
class Verdict:
    """A check's answer: ``ok`` None while the task is unanswered (``message`` is then the task)."""

    ok: bool | None
    message: str

    def __repr__(self) -> str:
        head = {None: "Your turn", True: "Right", False: "Not yet"}[self.ok]
        return f"{head}: {self.message}"

    __str__ = __repr__


def _task(text: str) -> Verdict:
    return Verdict(None, text + " Set `answer` and run the cell again.")


# --- 01: what the ledger says the job can never apply --------------------------------------------


def unappliable_records(answer: int | None, *, ledger) -> Verdict:
    """Chapter 01: records that reached Kafka but that no policy can apply (the registry's
    ``bad_record`` faults, delivered), counted from the producers' ledger."""
    from producers.faults import FAULTS

    if answer is None:
        return _task(
            "count, from this run's `ledger`, the records that reached Kafka but that no job can ever apply to a "
            "table: the ledger's `outcome` says whether Kafka has a record, its `fault` what was done to it, and "
            "`producers.faults.FAULTS[name].info.bad_record` which faults leave a record no parser accepts."
        )
    bad = [name for name, cls in FAULTS.items() if cls.info.bad_record]
    delivered = ledger["outcome"] == "ok"
    faulted = ledger["fault"].notna() & (ledger["fault"] != "")
    reference = int((delivered & ledger["fault"].isin(bad)).sum())
    try:
        value = int(answer)
    except (TypeError, ValueError):
        return Verdict(False, f"give a count of records; got {answer!r}")
    if value == reference:
        return Verdict(
            True,
            f"{reference}: delivered ({int(delivered.sum())} rows with outcome ok) and carrying a fault that "
            f"leaves a bad record ({', '.join(sorted(set(ledger.loc[delivered, 'fault']) & set(bad)))}).",
        )
    if value == int((ledger["fault"].isin(bad)).sum()) and value != reference:
        return Verdict(False, f"{value} counts bad records that never reached Kafka too: keep the rows whose outcome is ok.")
    if value == int((delivered & faulted).sum()):
        return Verdict(
            False,
            f"{value} counts every delivered record with a fault; a duplicate or a reordered record is a "
            f"good record the job can apply: keep the faults whose info.bad_record is true.",
        )
    return Verdict(False, f"{value} is not it. Hint: rows with outcome 'ok' whose fault is one of {', '.join(bad)}.")


# --- 04: which faults the job works through ------------------------------------------------------


def fault_behaviour(answer: Mapping[str, str] | None, *, outcomes: Sequence) -> Verdict:
    """Chapter 04: for each fault of the drill, did the job keep going, wait, or fail and restart?
    Judged against what this run's job did (:class:`job.drills.environment.FaultOutcome`)."""
    if answer is None:
        return _task(
            "for each fault of the drill, say what the job does while it lasts: 'kept going', 'waited', or "
            "'failed, restarted from the checkpoint'. answer = {'worker-kill': ..., 'broker-kill': ..., ...}; "
            "reason from what each fault takes away, then check against this run."
        )
    if not isinstance(answer, Mapping):
        return Verdict(False, f"give a dict of fault -> behaviour; got {answer!r}")
    ran = {o.kind: o for o in outcomes}
    missing = sorted(set(ran) - set(answer))
    if missing:
        return Verdict(False, f"say something for every fault of the drill; missing: {', '.join(missing)}")
    wrong = []
    for kind, o in ran.items():
        if str(answer[kind]).strip().lower() != o.behaviour:
            evidence = (
                f"{o.batches_during} batch(es) with input began and committed while it lasted"
                if o.behaviour != "failed, restarted from the checkpoint"
                else "its driver process died"
            )
            wrong.append(f"{kind}: the job {o.behaviour} ({evidence}), not {answer[kind]!r}")
    if wrong:
        return Verdict(False, "; ".join(wrong) + ". Hint: which service does each batch need to read, run and commit?")
    return Verdict(
        True, "every behaviour as this run showed it: " + ", ".join(f"{k} {o.behaviour}" for k, o in ran.items()) + "."
    )


# --- 02: the integrity policy for a reordering network ----------------------------------------


#: The session of the policy task: 60 messages, snapshots at these seqs, the lost one at LOST.
_SNAPSHOTS, _LATE, _LOST, _LENGTH = (0, 30, 50), (10, 40), 45, 60


def _task_session(depth: int) -> list[bytes]:
    """One session as a network delivers it: ``_LATE`` messages ``depth`` places late and
    ``_LOST`` (the only change to row ``b``) never. The other upserts set row ``a`` to their seq."""
    from producers.contract import Message, encode

    table = {"a": {"id": "a", "v": 0}, "b": {"id": "b", "v": 0}}
    msgs = []
    for seq in range(_LENGTH):
        if seq in _SNAPSHOTS:
            msgs.append(Message(kind="snapshot", site="x", session="s", seq=seq, epoch=0, ts=seq, rows=tuple(table.values())))
            continue
        row = {"id": "b" if seq == _LOST else "a", "v": seq}
        table[row["id"]] = row
        msgs.append(Message(kind="upsert", site="x", session="s", seq=seq, epoch=0, ts=seq, row=row))
    sent = [m for m in msgs if m.seq != _LOST]
    for seq in _LATE:
        message = sent.pop(next(i for i, m in enumerate(sent) if m.seq == seq))
        after = next(i for i, m in enumerate(sent) if m.seq == seq + depth + (seq + depth >= _LOST))
        sent.insert(after + 1, message)
    return [encode(m) for m in sent]


def _quarantined(policy: str, window: int, depth: int):
    from job.engine.session import Record, step

    values = _task_session(depth)
    records = [Record("t", 0, offset, "s", value, offset) for offset, value in enumerate(values)]
    return step(None, records, policy=policy, window=window).quarantine  # type: ignore[arg-type]


def reorder_policy(answer: tuple[str, int] | None, *, depth: int = 3) -> Verdict:
    """Chapter 02: the ``(policy, window)`` that, on a network delivering messages up to
    ``depth`` places late and losing one now and then, puts the late ones back in order, notices
    the lost one, and quarantines the fewest messages. Judged by replaying such a session through
    the job's own session engine."""
    from job.engine.errors import ConfigError, IntegrityError
    from job.engine.session import POLICIES

    if answer is None:
        return _task(
            f"a collection point's network delivers some messages up to {depth} places late and now and then "
            f"loses one. Which integrity policy and window put the late ones back in order, notice a lost one, "
            f"and quarantine the fewest messages? answer = (policy, window), e.g. ('resync', 8); the check replays "
            f"such a session through the job's own session engine."
        )
    try:
        policy, window = answer
        window = int(window)
    except (TypeError, ValueError):
        return Verdict(False, f"give a pair (policy, window), e.g. ('window', 4); got {answer!r}")
    if policy not in POLICIES:
        return Verdict(False, f"{policy!r} is not a policy; choose one of {', '.join(POLICIES)}")
    try:
        quarantine = _quarantined(policy, window, depth)
    except IntegrityError as exc:
        return Verdict(
            False,
            f"strict stopped the job at the first late message ({exc.detail}): to strict a reorder is "
            f"a gap. Which policy waits for a late message?",
        )
    except ConfigError as exc:
        return Verdict(False, f"the engine refused it: {exc}")
    reasons = Counter(q.reason for q in quarantine)
    said = ", ".join(f"{n} {reason}" for reason, n in reasons.most_common()) or "nothing"
    if not {"gap", "window-overflow"} & set(reasons):
        return Verdict(
            False,
            f"{policy} quarantined {said} and never noticed that message {_LOST} was lost: row b kept "
            f"its old value until the next snapshot restated it, with nothing to say the table was "
            f"incomplete. Which policy notices a gap?",
        )
    fewest = len(_quarantined("window", depth, depth))
    if len(quarantine) > fewest:
        hint = (
            f"a message {depth} places late does not fit a window of {window}"
            if policy == "window"
            else "this policy takes a late message for a lost one: which one waits for it?"
        )
        return Verdict(
            False,
            f"{policy} quarantined {len(quarantine)} messages ({said}) where {fewest} is possible; their "
            f"rows never reach the table. Hint: {hint}",
        )
    extra = (
        f" Any window of at least {depth} does as well; a much larger one waits longer for a message that is really lost."
        if window > 4 * depth
        else ""
    )
    return Verdict(
        True,
        f"policy {policy} with window {window} put the late messages back in order, noticed the lost one "
        f"({said}) and quarantined only the {len(quarantine)} messages until the next snapshot.{extra}",
    )


# --- 03: which batch a restart runs first -------------------------------------------------------


def replayed_batch(answer: int | None, *, offsets: Iterable[int], commits: Iterable[int]) -> Verdict:
    """Chapter 03: the batch a restarted query runs first, read from its two logs."""
    offsets, commits = sorted(set(offsets)), set(commits)
    if answer is None:
        return _task(
            "the driver was killed between the two logs. Which batch id does the restarted query run first? "
            "Read it from the checkpoint (`kill.offsets`, `kill.commits`, or "
            "`job.spark.checkpoints.log_state`)."
        )
    pending = [b for b in offsets if b not in commits]
    first = pending[0] if pending else (max(offsets) + 1 if offsets else 0)
    if answer == first:
        why = (
            f"offsets/{first} is logged and commits/{first} is not, so the restart runs batch {first} again with the "
            f"offsets it planned"
            if pending
            else f"every planned batch is committed, so batch {first} is a new one"
        )
        return Verdict(True, f"batch {first}: {why}.")
    if answer in commits:
        return Verdict(False, f"batch {answer} is committed (commits/{answer} exists): a committed batch never runs again.")
    if pending and answer == first + 1:
        return Verdict(
            False,
            f"batch {answer} would be the first new batch; before it the restart re-runs the batch whose "
            f"offsets were logged but whose commit is missing.",
        )
    return Verdict(False, f"batch {answer} is in neither log's reach; look for the batch with offsets/<n> and no commits/<n>.")


# --- 05: a cap that catches up in time --------------------------------------------------------


def catch_up_cap(answer: int | None, *, trigger_s: float, input_rate: float, outage_s: float, within_s: float) -> Verdict:
    """Chapter 05: the smallest ``maxOffsetsPerTrigger`` that works off ``outage_s`` of input
    within ``within_s`` of the restart, when each batch finishes within its trigger interval."""
    backlog = input_rate * outage_s
    needed = input_rate + backlog / within_s  # records/s the job must reach
    smallest = math.ceil(needed * trigger_s)
    if answer is None:
        return _task(
            f"the job was down {outage_s / 3600:g} h while {input_rate:,.0f} records/s kept arriving; it must catch "
            f"up within {within_s / 3600:g} h of the restart, on a {trigger_s:g} s trigger, with batches no larger "
            f"than they need to be (a batch's memory grows with it: section 1). Which maxOffsetsPerTrigger? Assume "
            f"each batch finishes within its trigger interval."
        )
    if not isinstance(answer, int) or answer < 1:
        return Verdict(
            False,
            f"give a positive whole number of records per batch; got {answer!r}. Without a cap the first "
            f"batch reads all {backlog:,.0f} records at once: the danger of section 1.",
        )
    rate = answer / trigger_s
    took = catch_up_time_s(backlog, input_rate, rate)
    if took > within_s:
        when = "never: it is not faster than its input" if math.isinf(took) else f"in {took / 3600:.2f} h"
        return Verdict(
            False,
            f"at {answer:,} a batch every {trigger_s:g} s the job reads {rate:,.0f} records/s and catches "
            f"up {when}. Hint: catch-up = backlog / (throughput - input rate); solve for the throughput.",
        )
    if answer > 1.5 * smallest:
        return Verdict(
            False,
            f"it catches up in {took / 3600:.2f} h, but batches of {answer:,} are larger than the "
            f"{smallest:,} that would do: each costs memory in proportion.",
        )
    return Verdict(
        True,
        f"{answer:,} a batch is {rate:,.0f} records/s, {rate - input_rate:,.0f} more than the input: the "
        f"{backlog:,.0f}-record backlog is gone {took / 3600:.2f} h after the restart.",
    )


# --- 06: the policy the fault matrix recommends -------------------------------------------------


def _policy_table(frame, reports: Mapping[str, object], errors: Mapping[str, str | None]):
    """Per policy: stopped, delivered records lost, bad records applied, records set aside."""
    import pandas as pd

    from producers.faults import FAULTS

    bad = [f for f in FAULTS if FAULTS[f].info.bad_record]
    rows = []
    for policy, report in reports.items():
        mine = frame[frame.policy == policy]
        rows.append(
            {
                "policy": policy,
                "stopped": errors.get(policy) is not None,
                "lost": int(report.lost),  # type: ignore[attr-defined]
                "bad applied": int(mine[mine.fault.isin(bad)].applied.sum()),
                "set aside": int(mine.quarantined.sum()),
            }
        )
    return pd.DataFrame(rows).set_index("policy")


def policy_for(answer: str | None, *, frame, reports: Mapping[str, object], errors: Mapping[str, str | None]) -> Verdict:
    """Chapter 06: from this run's matrix, the policy that runs to the end, loses no delivered
    record, applies no bad record, and sets aside the fewest records."""
    if answer is None:
        return _task(
            "a downstream team wants every table complete and correct, or else marked: the job must run to the "
            "end, lose no delivered record, apply no bad record, and set aside as few records as it can. Which "
            "policy does this run's matrix recommend? answer = 'strict', 'resync', 'window' or 'none'."
        )
    table = _policy_table(frame, reports, errors)
    if answer not in table.index:
        return Verdict(False, f"{answer!r} was not in this run's matrix; choose one of {', '.join(table.index)}")
    fit = table[~table.stopped & (table.lost == 0) & (table["bad applied"] == 0)]
    row = table.loc[answer]
    if row.stopped:
        return Verdict(False, f"{answer} stopped at the first fault: the job did not run to the end.")
    if row.lost:
        return Verdict(False, f"{answer} lost {row.lost} delivered records in this run.")
    if row["bad applied"]:
        return Verdict(False, f"{answer} applied {row['bad applied']} bad records (corrupt, drifted or foreign) to the tables.")
    best = fit["set aside"].idxmin()
    if answer != best:
        return Verdict(
            False,
            f"{answer} qualifies, but set aside {row['set aside']} records where {best} set aside "
            f"{fit.loc[best, 'set aside']}: compare them on the reorders.",
        )
    return Verdict(
        True,
        f"{answer}: it ran to the end, lost nothing, applied no bad record, and set aside "
        f"{row['set aside']} records, the fewest of {', '.join(fit.index)}.",
    )


# --- 07: how long a weekend's backlog takes -----------------------------------------------------


def catch_up_hours(answer: float | None, *, outage_h: float, input_rate: float, throughput: float) -> Verdict:
    """Chapter 07: hours a job needs after an ``outage_h`` outage to reach the head of Kafka."""
    if answer is None:
        return _task(
            f"the job stops on Friday evening and is restarted {outage_h:g} h later; the input keeps arriving at "
            f"`input_rate` and the job reads at `throughput` (both measured in section 6). How many hours after "
            f"the restart is it caught up?"
        )
    reference = catch_up_time_s(outage_h * input_rate, input_rate, throughput)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return Verdict(False, f"give a number of hours; got {answer!r}")
    if math.isinf(reference):
        ok = math.isinf(value)
        return Verdict(
            ok,
            "never: the job is not faster than its input"
            if ok
            else f"the job reads {throughput:,.0f} records/s against {input_rate:,.0f} arriving: it never catches up.",
        )
    if abs(value - reference) <= 0.1 * reference:
        return Verdict(
            True,
            f"{reference:.1f} h: {outage_h:g} h x {input_rate:,.0f} records/s = "
            f"{outage_h * input_rate:,.0f} hour-records, worked off at {throughput - input_rate:,.0f} records/s "
            f"to spare.",
        )
    naive = outage_h * input_rate / throughput
    if abs(value - naive) <= 0.1 * naive:
        return Verdict(
            False,
            f"{value:g} h forgets that the input keeps arriving while the job catches up: only "
            f"throughput - input rate works the backlog off.",
        )
    return Verdict(False, f"{value:g} h is off by more than a tenth. Hint: backlog / (throughput - input rate).")


# --- 08: what to run when the checkpoint is gone -------------------------------------------------


#: The subcommands of ``python -m job`` (job/cli.py; drills sit below the command line and do not import it).
_JOB_COMMANDS = ("run", "watch", "verify", "repair", "backfill", "package")


def lost_checkpoint_command(answer: str | None) -> Verdict:
    """Chapter 08: the command that gets a job going again, losing no row, after its checkpoint's
    disk was lost while the lake kept its sink log."""
    import shlex

    if answer is None:
        return _task(
            "a teammate's disk died and took the job's checkpoint with it; the lake on MinIO is intact, sink log "
            "and all. Write the one command (python -m job ...) that gets the job going again on the same lake "
            "without losing a row."
        )
    try:
        words = shlex.split(str(answer))
    except ValueError as exc:
        return Verdict(False, f"that is not a command line ({exc})")
    if words[:3] == ["python", "-m", "job"]:
        words = words[3:]
    if not words or words[0] not in _JOB_COMMANDS:
        return Verdict(
            False, f"`python -m job` takes one of {', '.join(_JOB_COMMANDS)} first; got {' '.join(words) or 'nothing'}"
        )
    command, flags = words[0], {w.split("=", 1)[0] for w in words[1:] if w.startswith("--")}
    if command == "run":
        if "--allow-sink-ahead" in flags:
            return Verdict(
                False,
                "--allow-sink-ahead walks into the trap: the new checkpoint's batches reuse ids the sink's "
                "log holds, and their rows are thrown away (section 1).",
            )
        if "--output" in flags:
            return Verdict(
                False,
                "a new lake starts clean, but readers of the old one lose its history and the sessions "
                "in it; the repair keeps the lake.",
            )
        return Verdict(
            False,
            "job run refuses to start there: the sink's log is ahead of the (empty) checkpoint, the "
            "trap (the guard of section 1). What plans from the lake instead?",
        )
    if command != "repair":
        return Verdict(False, f"`job {command}` does not restart the job. Which command cuts the lake and restarts it?")
    if "--apply" not in flags:
        return Verdict(False, "that prints the plan and changes nothing (a dry run); add the flag that carries it out.")
    return Verdict(
        True,
        "job repair plans from the lake when the checkpoint has no batch (how far the job got, per "
        "partition), cuts each session back to its last complete snapshot and restarts the job from "
        "there, with the run's settings.",
    )


# --- 09: which copy a merge keeps, and when not to merge -------------------------------------------


def merge_rule(answer: tuple[str, str] | None) -> Verdict:
    """Chapter 09: of two overlapping backfills, whose output a merge keeps for a record in the
    overlap ('first' or 'second', by start); and how to repair a release whose session logic was
    wrong ('merge' or 'reprocess'). The rule is :func:`job.ops.backfill.keep_first_source`'s."""
    if answer is None:
        return _task(
            "section 3 backfilled two ranges that overlap, `first` (from the start) and `second` (from later); "
            "section 4 shipped a release with wrong session logic. answer = (whose rows the merge keeps for a "
            "record both wrote: 'first' or 'second', how to fix the bad release: 'merge' or 'reprocess')."
        )
    try:
        kept, fix = (str(x).strip().lower() for x in answer)
    except (TypeError, ValueError):
        return Verdict(False, f"give a pair, e.g. ('second', 'merge'); got {answer!r}")
    wrong = []
    if kept != "first":
        wrong.append(
            "the merge keeps the source whose replay started earliest: it decided the record with the most "
            "history behind it, while the later range began from an empty state (or a warm-up) at its start"
        )
    if fix != "reprocess":
        wrong.append(
            "a merge fills holes and never rewrites what is there, so wrong rows from a bad release stay; the "
            "whole archive is replayed with the fixed version and readers are switched to it once it verifies"
        )
    if wrong:
        return Verdict(False, "; ".join(wrong) + ".")
    return Verdict(
        True,
        "the first range wins in the overlap (the most history behind each record), and a wrong release "
        "is replaced, not merged: reprocess, verify, switch.",
    )


# --- 10: a failure spacing every recovery fits in ------------------------------------------------


def failure_spacing(answer: float | None, *, recovery_times_s: Sequence[float], hold_s: float = 0.0) -> Verdict:
    """Chapter 10: the seconds between failures that let every recovery this run measured end
    before the next failure, the detector's ``hold_s`` (the seconds back in the band that make
    a recovery) included."""
    if answer is None:
        return _task(
            "choose the spacing between failures, in seconds, at which every recovery this run measured would end "
            "before the next failure. Use the recovery times of the table in section 4, and remember what the "
            "detector needs before it calls a recovery done."
        )
    times = [float(t) for t in recovery_times_s if t is not None]
    if not times:
        return Verdict(False, "this run measured no recovery time; run the benchmark's cell first")
    longest = max(times)
    try:
        value = float(answer)
    except (TypeError, ValueError):
        return Verdict(False, f"give a number of seconds; got {answer!r}")
    if value <= longest:
        return Verdict(
            False,
            f"the longest recovery took {longest:.0f} s: a failure every {value:g} s lands before it ends, "
            f"and failures that overlap compound (the source's recurrent-failure question).",
        )
    if value <= longest + hold_s:
        return Verdict(
            False,
            f"{value:g} s is longer than the longest recovery ({longest:.0f} s), but the detector calls a recovery done "
            f"only after {hold_s:g} s back in the band, and that stretch must end before the next failure: "
            f"more than {longest + hold_s:.0f} s.",
        )
    note = " (a much longer spacing fits them too, but tests fewer failures an hour)" if value > 3 * longest else ""
    return Verdict(True, f"{value:g} s is longer than the longest recovery and its hold, {longest:.0f} + {hold_s:g} s{note}.")
