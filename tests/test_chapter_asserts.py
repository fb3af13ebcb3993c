"""Every assert in the workbook can fail, and says something a learner can read when it does.

A chapter's verdict is an ``assert`` on its own run. An assert that holds whatever the run did
(a check on a constant, a comparison of a value with itself, an ``all`` over nothing) would
print a verdict the run never earned. For every assert in every chapter, :data:`BROKEN` gives
one broken input or a list of them: the values the chapter's names would hold had that part of
the run gone wrong, written down as the values themselves (the package's own types where they
are cheap to build), never computed by the chapter's own code, which would copy a bug in that
code into its test. The tests check that

- the assert's condition is false on each of its broken inputs (the check can fail), and its
  message, where it has one, formats there (a learner sees what went wrong, not a
  ``NameError`` or ``KeyError`` raised while Python builds the message);
- every part of a condition can be the reason it fails: for an ``and`` of parts (a chained
  comparison ``a == b > 0`` counts as its pairs, ``a == b`` and ``b > 0``), each part is the
  first false one, the parts before it holding, on one of the broken inputs, so no part is
  left unevaluated by a failure before it;
- an ``all(...)`` or ``X.all()`` over a collection (not a literal tuple or list) cannot pass
  on an empty one: on one of the broken inputs that collection is empty and the assert is
  false, so the assert carries its own non-empty check (``xs and all(...)``,
  ``len(frame) > 0 and frame.ok.all()``), but where :data:`ALL_MAY_BE_EMPTY` says why nothing
  to check is a good run;

and that every assert in the chapters has broken inputs here, and no entry is left over: a
new assert, or a changed condition, fails until someone writes down how it fails.

An assert is named ``"<chapter>: <its condition>"``, the condition as ``ast.unparse`` prints
it (with `` #2`` when a chapter repeats a condition), so that moving cells changes nothing
and changing a condition asks for its broken inputs again.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace as ns

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parent.parent
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))

#: a broken input: the chapter's names as a broken run would leave them (called with a tmp dir)
Broken = Callable[[Path], dict]


def chapter_asserts() -> dict[str, ast.Assert]:
    """Every ``assert`` statement in the chapters' code cells, by name (see the module's doc)."""
    found: dict[str, ast.Assert] = {}
    for path in CHAPTERS:
        chapter = path.name[:2]
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] != "code":
                continue
            # IPython's magics and shell escapes are not Python; the chapters' asserts never sit on them
            source = "\n".join(line for line in "".join(cell["source"]).splitlines() if not line.lstrip().startswith(("%", "!")))
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Assert):
                    name, n = f"{chapter}: {ast.unparse(node.test)}", 1
                    while name + (f" #{n}" if n > 1 else "") in found:
                        n += 1
                    found[name + (f" #{n}" if n > 1 else "")] = node
    return found


def conjuncts(test: ast.expr) -> list[ast.expr]:
    """The parts of a condition that must each hold, in the order Python tries them: the operands
    of an ``and``, and a chained comparison's pairs (``a == b > 0``: ``a == b``, ``b > 0``)."""
    if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And):
        return [part for value in test.values for part in conjuncts(value)]
    if isinstance(test, ast.Compare) and len(test.ops) > 1:
        sides = [test.left, *test.comparators]
        return [ast.Compare(left, [op], [right]) for left, op, right in zip(sides, test.ops, sides[1:])]
    return [test]


def all_iterables(test: ast.expr) -> list[ast.expr]:
    """What each ``all(...)`` and ``X.all()`` in a condition runs over (``all(gen)``: its first
    ``for``'s iterable), but a literal tuple or list, which no run can leave empty."""
    found = []
    for node in ast.walk(test):
        if not isinstance(node, ast.Call):
            continue
        if isinstance(node.func, ast.Name) and node.func.id == "all" and len(node.args) == 1:
            arg = node.args[0]
            found.append(arg.generators[0].iter if isinstance(arg, ast.GeneratorExp) else arg)
        elif isinstance(node.func, ast.Attribute) and node.func.attr == "all" and not node.args:
            found.append(node.func.value)
    return [it for it in found if not isinstance(it, (ast.Tuple, ast.List))]


def evaluate(expr: ast.expr, namespace: dict, name: str):
    """``expr`` (the chapter's own code) evaluated on a broken input."""
    return eval(compile(ast.fix_missing_locations(ast.Expression(expr)), name, "eval"), namespace)  # noqa: S307


def first_false(parts: list[ast.expr], namespace: dict, name: str) -> int | None:
    """The index of the first part false on this input, as ``and`` tries them (None: all hold)."""
    return next((i for i, part in enumerate(parts) if not evaluate(part, namespace, name)), None)


def is_empty(expr: ast.expr, namespace: dict, name: str) -> bool:
    """Whether ``expr`` is an empty collection on this input (no, where it cannot be evaluated:
    a part before it failed, and the input leaves its names out)."""
    try:
        found = evaluate(expr, namespace, name)
    except Exception:  # noqa: BLE001
        return False
    if hasattr(found, "__len__"):
        return len(found) == 0
    end = object()
    return next(iter(found), end) is end


# --- small stand-ins for what a run hands back ------------------------------------------


def proc(returncode: int, stdout: str = "", stderr: str = "") -> ns:
    """A finished ``subprocess.run``."""
    return ns(returncode=returncode, stdout=stdout, stderr=stderr)


def report(ok: bool = True, lost: int = 0, applied: int = 0, quarantined: int = 0) -> ns:
    """A verifier's report (``job.verify``): its verdict and counts."""
    return ns(
        ok=ok,
        lost=lost,
        applied=applied,
        quarantined=quarantined,
        summary=lambda: f"FAILED: {lost} lost, {applied} applied, {quarantined} quarantined",
    )


def runner_summary(error: str | None = "KafkaError: broker down", outcomes: dict | None = None) -> ns:
    """A producers run's summary."""
    return ns(error=error, outcomes=outcomes or {"ok": 10}, text=lambda: f"error: {error}")


def spark_frame(rows: list) -> ns:
    """A Spark DataFrame's ``count`` and ``distinct().count()``."""
    return ns(count=lambda: len(rows), distinct=lambda: ns(count=lambda: len(set(rows))))


def _checkpoint(tmp: Path, offsets: list[int], commits: list[int]) -> Path:
    """A query checkpoint's two logs with these batch ids (content: the batch id)."""
    for log, ids in (("offsets", offsets), ("commits", commits)):
        (tmp / log).mkdir(parents=True, exist_ok=True)
        for i in ids:
            (tmp / log / str(i)).write_text(f"v1\n{{}}\n{log} {i}\n")
    return tmp


def _ch01_decode(_tmp: Path) -> dict:
    from producers import Message, decode

    msg = Message.upsert(site="fleet-2", session="fleet-2-demo-s0000", seq=17, epoch=0, ts=1, row={"id": "veh-1", "speed": 0.0})
    # the bytes of the next update of the session: they parse, into a different message
    value = b'{"v":1,"kind":"upsert","site":"fleet-2","session":"fleet-2-demo-s0000","seq":18,"epoch":0,"ts":1,"row":{"id":"veh-1","speed":0.0}}'
    return {"decode": decode, "value": value, "msg": msg}


def _ch02_step(_tmp: Path) -> dict:
    """Chapter 02's window runs with the window too wide to give up: window 2 held like window 8."""
    return {"reasons_of": {"window 8": ["broken-session"], "window 2": ["duplicate"], "none": ["corrupt"]}}


def _ch03_kill(offsets: int, commits: set[int], sink_log: set[int], files: list[str]) -> Broken:
    """Where chapter 03's kill fell (N = 5): offsets up to this batch, these commits and batches in
    the sink's log, these files in the bucket that no log lists."""
    return lambda _tmp: {
        "N": 5,
        "kill": ns(
            offsets=list(range(offsets + 1)), commits=commits, sink_log_batches=tuple(sorted(sink_log)), uncommitted_files=files
        ),
    }


def _ch03_rerun(tmp: Path) -> dict:
    """The re-run rewrote offsets/5 and stopped before committing it."""
    from job.spark import checkpoints

    query_ckpt = _checkpoint(tmp, [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4])
    return {
        "N": 5,
        "query_ckpt": query_ckpt,
        "before": "v1\n{}\noffsets 5 as first planned\n",
        "checkpoints": checkpoints,
        "done": proc(1, stderr="Py4JJavaError: ..."),
        "first_batch": ns(batch_id=6),
    }


def _ch03_state(_tmp: Path) -> dict:
    from job.engine.session import SessionState

    return {"stored": pd.DataFrame({"session_key": [], "state": []}), "session_state": None, "SessionState": SessionState}


def _ch03_sinks(_tmp: Path) -> dict:
    append = {"rows written": 300, "distinct records": 300, "rows of batch 1": 100}  # no replay after the crash
    idem = {"rows written": 350, "distinct records": 300, "rows of batch 1": 100}  # a replay written twice
    return {
        "append": append,
        "idem": idem,
        "foreach": {"append": append, "idempotent": idem},
        "spark_dupes": 3,
        "raw_dupes": 0,
        "orphans": [],
    }


def _ch04_run(_tmp: Path) -> dict:
    """Every fault the other way round: a stalled job, a job that ignored Kafka, a restart too many."""

    def outcome(behaviour, batches=0, alerts=()):
        return ns(behaviour=behaviour, batches_during=batches, alerts=alerts, time_to_flow_s=None)

    by_kind = {
        "worker-kill": outcome("waited", 0),
        "broker-kill": outcome("kept going", 3, ("recovered",)),
        "minio-pause": outcome("kept going", 3, ()),
        "master-kill": outcome("waited", 0),
        "driver-kill": outcome("kept going", 4, ("stall", "recovered", "stall")),
    }
    from job.drills import environment

    return {
        "by_kind": by_kind,
        "table": "fault | behaviour\n...",
        "environment": environment,
        "run": ns(
            outcomes=list(by_kind.values()), job_starts=3, alerts=["stall"], clean=False, verdict={"summary": "FAILED: 12 lost"}
        ),
        "recovery": ["Starting Spark master", "I have been elected leader! New state: RECOVERING"],
    }


def _ch05_backlog(_tmp: Path) -> dict:
    batch = lambda rows, end, state=0: ns(input_rows=rows, end=end, state_rows=state)  # noqa: E731
    # uncapped, yet it committed a small batch first and read only part of the backlog at once
    big = batch(20_000, 30.0)
    a = ns(backlog=30_000, batches=[batch(500, 10.0), big], first_commit_s=12.0, caught_up_s=30.0, peak_memory_bytes=32 << 20)
    # "capped" at 4,000 yet one batch took 6,000; first records as late as the uncapped run's, caught up as early
    a4 = ns(
        backlog=29_000,
        batches=[batch(6_000, 5.0), batch(4_000, 9.0)],
        first_commit_s=20.0,
        caught_up_s=30.0,
        peak_memory_bytes=32 << 20,
    )  # the same pages as the whole backlog's batch
    # a batch above the cap, state that never expired, and no catch-up
    b = ns(batches=[batch(6_000, 5.0, 9), batch(0, 6.0, 3)], caught_up_s=None, table=lambda: "batch | rows\n...")
    produce = lambda *args, **kw: ns(run=lambda: runner_summary())  # noqa: E731  (the priming run failed)
    return {
        "a": a,
        "a4": a4,
        "big": big,
        "b": b,
        "produce": produce,
        "prime": "nb05-prime-",
        "CAP": 4000,
        "TRIGGER_S": 2,
        "summary": runner_summary(None, {"ok": 12_000}),
        "result": {"summary": runner_summary()},
        "explained": 90.0,
        "peak_state": 3,
        "report": report(ok=False, lost=40),
    }


def _ch06_matrix(_tmp: Path) -> dict:
    from producers.faults import Reorder

    frame = pd.DataFrame(
        [
            {"policy": "window", "fault": "reorder", "quarantined": 9, "applied": 0, "other_kinds": "", "allowed": True},
            {"policy": "resync", "fault": "reorder", "quarantined": 4, "applied": 0, "other_kinds": "", "allowed": True},
            {"policy": "resync", "fault": "corrupt", "quarantined": 0, "applied": 2, "other_kinds": "", "allowed": False},
            {"policy": "none", "fault": "duplicate", "quarantined": 0, "applied": 1, "other_kinds": "", "allowed": True},
        ]
    )
    by = pd.DataFrame(
        {"quarantined": [9, 4, 0, 0], "applied": [0, 0, 2, 1]},
        index=pd.MultiIndex.from_tuples(
            [("window", "reorder"), ("resync", "reorder"), ("resync", "corrupt"), ("none", "duplicate")],
            names=["policy", "fault"],
        ),
    )
    reports = {
        "strict": report(ok=False, quarantined=2),
        "resync": report(lost=3, applied=50),
        "window": report(lost=1),
        "none": report(applied=40),
    }
    matrix = ns(
        summary=ns(faults={"reorder": 3}),
        runs={"resync": ns(error="KafkaError"), "window": ns(error=None), "none": ns(error=None)},
    )
    sweep = pd.DataFrame({"ok": [True, False], "set_aside": [10, 90], "bound": [20, 60], "set_aside_per_fault": [5.0, 4.0]})
    sp = ns(run=ns(error=None, report=report(ok=False, lost=7)), gap_free=False, applied_seqs=[0, 1, 2, 4])
    return {
        "Reorder": Reorder,
        "frame": frame,
        "by": by,
        "bad_record_faults": ["corrupt"],
        "reports": reports,
        "matrix": matrix,
        "sweep": sweep,
        "strict": ns(error=None),
        "sp": sp,
        "gap": "seq 41 after 39",
        "last_clean": 29,
        "missing": ["crash", "reorder"],
        "failed": ["window sets aside fewer records around reorders than resync"],
    }


def _ch07_loss(_tmp: Path) -> dict:
    # a job slower than its input: no backlog is ever worked off
    table = pd.DataFrame(
        {
            "scenario": ["weekend (Fri 18:00 to Mon 08:00)"] * 2,
            "retention_h": [24, 72],
            "catch_up_h": [float("inf"), float("inf")],
        }
    )
    found = [ns(topic="t1", partition=0, start=10, end=20, count=10), ns(topic="t2", partition=1, start=0, end=5, count=5)]
    deleted = [ns(topic="t1", partition=0, start=5, end=20, count=15)]
    return {
        "table": table,
        "throughput": 109.0,
        "input_rate": 150.0,
        "found": found,
        "deleted": deleted,
        "first": proc(1, stderr="UsageError"),
        "skipped": proc(1, stderr="..."),
        "first_run": ns(error=None, rows=0, batches=1),
        "read": {("t1", 0): 0},
        "outage": ns(records=0),
        "before": {"retention.ms": "604800000"},
        "after": {"retention.ms": "1000"},
        "gone_partitions": {("t1", 0), ("t3", 2), ("t2", 0), ("t2", 1)},
        "shortened": "t1",
        "by_hand": "t2",
        "hit": ("t2", 0),
        "marks": {("t1", 0): (0, 50), ("t3", 2): (7, 50), ("t2", 0): (9, 40), ("t2", 1): (9, 40)},
        "topics": ["t1", "t2", "t3"],
        "kept": [("t2", 1)],
        "ends": {("t2", 0): (0, 40), ("t2", 1): (0, 40)},
        "summary": runner_summary(),
        "summary_b": runner_summary(),
        "failed": proc(0, stderr="Traceback (most recent call last): ..."),
        "error_line": None,
        "stopped": ns(rows=120),
        "report": report(ok=True, lost=12),
        "losses": pd.DataFrame({"session": ["s1"], "whole_again": [False]}),
        "cli": proc(2, stdout="FAILED: 12 lost", stderr="error: --kafka-deleted: no such file"),
    }


def _ch08_repair(tmp: Path) -> dict:
    # the plan restarts t1[2] after its damage: records 30..39 are never read again
    bad = [ns(topic="t1", partition=2, damaged=True, restart=40, damage=30, checkpoint_end=80)]
    return {
        "damaged": {("t1", 2)},
        "lost_where": {("t1", 2), ("t2", 2)},
        "bad": bad,
        "cfg": ns(checkpoint=tmp / "deleted-by-the-dry-run"),
        "dry": proc(2, stderr="error: --plan: ..."),
        "applied": proc(1, stderr="[repair] ..."),
        "after": report(ok=False, lost=4),
    }


def _ch08_guard(tmp: Path) -> dict:
    """The guard let a checkpoint behind the sink's log run: its next batch was committed, and the
    error (had there been one) named a checkpoint as far as the log."""
    commits = tmp / "again" / "sessions" / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    (commits / "6").write_text("v1\n{}")
    return {"refused": ns(planned=5, log=(0, 5)), "trap": ns(log_latest=5), "again": ns(checkpoint=tmp / "again")}


def _ch09_backfill(_tmp: Path) -> dict:
    merged = spark_frame([("t", 0, 1, "a"), ("t", 0, 1, "a")])  # the merge kept a boundary row twice
    # the two ranges met without overlap: no row written twice
    return {
        "boundary_duplicates": 0,
        "merged_duplicates": 1,
        "same_as_stream": False,
        "merged_keys": merged,
        "archive_report": report(ok=False, lost=3),
        "merged_report": report(ok=False, lost=1),
        "live_report": report(ok=True),
        "deleted": [],
        "bootstrap": "localhost:9092",
        "prefix": "nb09-",
        "pipeline": ns(source_end_offsets=lambda bootstrap, prefix: {("nb09-collection-fleet-0", 0): 120}),
        "summary": runner_summary(),
        "fixed": ns(report=report(), switched=False, previous="s3a://lake/v1"),
        "buggy": ns(root="s3a://lake/v1"),
    }


def _ch10_bench(_tmp: Path) -> dict:
    return {
        "LOAD": 0.15,
        "capacity": {"capacity": 4880.0},
        "schedule": ns(rate=2440.0, failures=3),
        "verdicts": {"job": True, "baseline": False},
        "result": {"runs": {"job": ns(verdict={"summary": "OK"}), "baseline": ns(verdict={"summary": "FAILED: 9 lost"})}},
        "hit": [2, 0],
        "job": ns(all_recovered=False, describe=lambda: "unstable: never recovered from failure 2"),
        "baseline": ns(all_detected=True, all_recovered=False, describe=lambda: "unstable"),
        "peaks": [42_731, None, 97_586],
        "state_on": [2, 1, None],
    }


#: name of an assert -> its broken input, or a list of them: one for each part of an ``and`` (see the module's doc)
BROKEN: dict[str, Broken | list[Broken]] = {
    # 00: the tour
    "00: producer.flush(30) == 0": lambda _: {"producer": ns(flush=lambda timeout: 2)},  # two messages still queued
    "00: services and all((s.state == 'running' for s in services))": [
        lambda _: {"services": []},  # the sandbox reported no service at all
        lambda _: {"services": [ns(state="running"), ns(state="stopped")]},
    ],
    "00: sorted((k for k, *_ in received)) == ['session-a'] * 3 + ['session-b'] * 3": lambda _: {
        "received": [("session-a", 0, 0, "m"), ("session-b", 1, 0, "m")]
    },  # four of six never arrived
    "00: body == b'hello, lake' and listed == [key]": [
        lambda _: {"body": b"", "listed": ["tour/hello.txt"], "key": "tour/hello.txt"},  # an empty object
        lambda _: {"body": b"hello, lake", "listed": [], "key": "tour/hello.txt"},  # the listing missed it
    ],
    "00: lake.count() == 6": lambda _: {"lake": ns(count=lambda: 5)},
    "00: alive() == 2": lambda _: {"alive": lambda: 1},  # one worker lost
    "00: len(parts) == 1": lambda _: {"parts": {0, 2}, "session": "session-a"},  # a key hashed to two partitions
    # 01: producers and the ledger
    "01: decode(value) == msg": _ch01_decode,
    "01: summary.error is None": lambda _: {"summary": runner_summary()},
    "01: key.decode() == snapshot.session and value == first['sent']": [
        lambda _: {"key": b"fleet-0-s0001", "snapshot": ns(session="fleet-0-s0000"), "value": b"x", "first": {"sent": b"x"}},
        lambda _: {"key": b"fleet-0-s0000", "snapshot": ns(session="fleet-0-s0000"), "value": b"x", "first": {"sent": b"y"}},
    ],
    "01: record is not None": lambda _: {"record": None, "topic": "collection-fleet-0", "partition": 1, "offset": 17},
    "01: record.error() is None": lambda _: {"record": ns(error=lambda: "KafkaError{code=OFFSET_OUT_OF_RANGE}")},
    "01: f'\"reason\": \"{exc.reason}\"' in bad['fault_detail']": lambda _: {
        "exc": ns(reason="not-json"),
        "bad": {"fault_detail": '{"reason": "truncated"}'},
    },
    "01: len(in_ledger) == len(ok)": lambda _: {"in_ledger": {("t", 0, 1, b"a")}, "ok": pd.DataFrame({"offset": [1, 1]})},
    "01: found == in_ledger": lambda _: {"found": {("t", 0, 1, b"a"), ("t", 0, 2, b"b")}, "in_ledger": {("t", 0, 1, b"a")}},
    "01: unexpected.empty": lambda _: {"unexpected": pd.DataFrame({"outcome": ["timed-out"], "error": ["Message timed out"]})},
    "01: record is not None and record.error() is None": [
        lambda _: {"record": None},
        lambda _: {"record": ns(error=lambda: "KafkaError{code=_PARTITION_EOF}")},
    ],
    # 02: the stateful job
    "02: 'broken-session' not in reasons_of['window 8']": _ch02_step,
    "02: 'broken-session' in reasons_of['window 2']": _ch02_step,
    "02: reasons_of['none'] == []": _ch02_step,
    "02: summary.error is None": lambda _: {"summary": runner_summary()},
    "02: report.ok": lambda _: {"report": report(ok=False, lost=3)},
    # 03: checkpoints and delivery
    "03: kill.offsets[-1] == N and N not in kill.commits and (N - 1 in kill.commits)": [
        _ch03_kill(4, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, []),  # the kill fell before offsets/N was written
        _ch03_kill(5, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}, []),  # after the commit: batch N finished
        _ch03_kill(5, {0, 1, 2, 3}, {0, 1, 2, 3}, ["part-00000-b5.parquet"]),  # N-1 uncommitted too: N is not the batch cut
    ],
    "03: N not in kill.sink_log_batches and kill.uncommitted_files": [
        _ch03_kill(5, {0, 1, 2, 3, 4, 5}, {0, 1, 2, 3, 4, 5}, []),  # batch N finished, listed in the sink's log
        _ch03_kill(5, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4}, []),  # killed before batch N wrote a file
    ],
    "03: state.pending == N": lambda _: {"N": 5, "state": ns(pending=None, commits={0, 1, 2, 3, 4, 5})},  # nothing pending
    "03: int(meta.maxBatchId.max()) == N - 1": lambda _: {"N": 5, "meta": pd.DataFrame({"maxBatchId": [5, 5]})},
    "03: len(stored) >= 1 and isinstance(session_state, SessionState)": [
        _ch03_state,  # the state source read nothing
        lambda tmp: {
            **_ch03_state(tmp),
            "stored": pd.DataFrame({"session_key": ["fleet-0-s0000"], "state": [b"\x81"]}),
            "session_state": {"table": {}},
        },  # parsed into a plain mapping, not the job's type
    ],
    "03: done.returncode == 0": _ch03_rerun,
    "03: first_batch.batch_id == N": _ch03_rerun,
    "03: (query_ckpt / 'offsets' / str(N)).read_text() == before": _ch03_rerun,
    "03: N in checkpoints.log_state(query_ckpt).commits": _ch03_rerun,
    "03: spark_dupes == 0": _ch03_sinks,
    "03: raw_dupes > 0 or len(orphans) > 0": _ch03_sinks,
    "03: crashed.returncode == -9": lambda _: {
        "crashed": proc(0, stderr="[delivery] batch 1 committed")
    },  # the crash switch did nothing
    "03: finished.returncode == 0": lambda _: {"finished": proc(1, stderr="StreamingQueryException")},
    "03: append['rows written'] - append['distinct records'] == append['rows of batch 1'] // 2 > 0": [
        _ch03_sinks,
        # the crash came before batch 1 had a record: nothing to replay, nothing written twice
        lambda _: {"append": {"rows written": 200, "distinct records": 200, "rows of batch 1": 0}},
    ],
    "03: idem['rows written'] == idem['distinct records']": _ch03_sinks,
    "03: report.ok": lambda _: {"report": report(ok=False, lost=3)},
    "03: spark_dupes == 0 and foreach['idempotent']['rows written'] == foreach['idempotent']['distinct records']": [
        _ch03_sinks,
        lambda _: {"spark_dupes": 0, "foreach": {"idempotent": {"rows written": 350, "distinct records": 300}}},
    ],
    # 04: environmental failures
    "04: run.outcomes and all((o.time_to_flow_s is not None for o in run.outcomes))": [
        lambda _: {"run": ns(outcomes=[]), "table": "fault | behaviour"},  # no fault ran
        _ch04_run,
    ],
    "04: by_kind['worker-kill'].behaviour == 'kept going'": _ch04_run,
    "04: by_kind['broker-kill'].behaviour == 'waited'": _ch04_run,
    "04: by_kind['minio-pause'].behaviour == 'waited'": _ch04_run,
    "04: by_kind['master-kill'].behaviour == 'kept going'": _ch04_run,
    "04: by_kind['driver-kill'].behaviour == 'failed, restarted from the checkpoint'": _ch04_run,
    "04: run.job_starts == 2": _ch04_run,
    "04: min((by_kind[k].batches_during for k in ('worker-kill', 'master-kill'))) >= environment.KEPT_GOING_BATCHES": _ch04_run,
    "04: 'stall' in by_kind['broker-kill'].alerts": _ch04_run,
    "04: 'stall' in by_kind['minio-pause'].alerts": _ch04_run,
    "04: 'error' in by_kind['driver-kill'].alerts": _ch04_run,
    "04: all((by_kind[k].alerts[-1:] == ('recovered',) for k in ('broker-kill', 'minio-pause', 'driver-kill')))": _ch04_run,
    "04: any(('Application has been re-registered' in line for line in recovery))": _ch04_run,
    "04: any(('Recovery complete' in line for line in recovery))": _ch04_run,
    "04: run.clean": _ch04_run,
    "04: services and all((str(s.state) == 'running' for s in services))": [
        lambda _: {"services": []},  # the sandbox reported no service at all
        lambda _: {"services": [ns(state="running"), ns(state="stopped")]},
    ],
    # 05: backlog and memory
    "05: produce(prime, rate=400, duration=1, sessions=1, seed=1).run().error is None": _ch05_backlog,
    "05: summary.error is None and sum(summary.outcomes.values()) >= 30000": [
        lambda _: {"summary": runner_summary()},  # the producers failed
        _ch05_backlog,  # they sent too little
    ],
    "05: a.backlog == a4.backlog": _ch05_backlog,
    "05: big.input_rows == a.backlog": _ch05_backlog,
    "05: all((x.input_rows == 0 for x in a.batches if x.end < big.end))": _ch05_backlog,
    "05: max((x.input_rows for x in a4.batches)) <= CAP": _ch05_backlog,
    "05: a4.first_commit_s < a.first_commit_s": _ch05_backlog,
    "05: a4.first_commit_s < a4.caught_up_s / 2": _ch05_backlog,
    "05: a4.caught_up_s > a.caught_up_s": _ch05_backlog,
    "05: a.peak_memory_bytes > a4.peak_memory_bytes": _ch05_backlog,
    "05: result['summary'].error is None": _ch05_backlog,
    "05: sum((1 for x in b.batches if x.input_rows)) > 4": _ch05_backlog,
    "05: max((x.input_rows for x in b.batches)) <= CAP": _ch05_backlog,
    "05: b.caught_up_s is not None": _ch05_backlog,
    "05: -2 * TRIGGER_S <= b.caught_up_s - explained <= TRIGGER_S": [
        lambda _: {
            "TRIGGER_S": 2,
            "explained": 90.0,
            "b": ns(caught_up_s=40.0, table=list),
        },  # far sooner than the arithmetic says
        lambda _: {"TRIGGER_S": 2, "explained": 40.0, "b": ns(caught_up_s=90.0, table=list)},  # far later
    ],
    "05: peak_state > 4": _ch05_backlog,
    "05: b.batches[-1].state_rows == 0": _ch05_backlog,
    "05: report.ok": _ch05_backlog,
    # 06: data integrity
    "06: not missing": _ch06_matrix,
    "06: sp.run.error is not None and gap in sp.run.error": [
        _ch06_matrix,  # strict did not stop
        lambda _: {"sp": ns(run=ns(error="KafkaError: broker down")), "gap": "seq 41 after 39"},  # it stopped, not on the gap
    ],
    "06: sp.gap_free and sp.applied_seqs and (max(sp.applied_seqs) == last_clean)": [
        _ch06_matrix,  # a hole in the lake
        lambda _: {"sp": ns(gap_free=True, applied_seqs=[]), "last_clean": 39},  # nothing applied
        lambda _: {"sp": ns(gap_free=True, applied_seqs=list(range(30))), "last_clean": 39},  # a whole batch short
    ],
    "06: sp.run.report.ok": _ch06_matrix,
    "06: not failed": _ch06_matrix,
    "06: reports and all((r.ok for r in reports.values()))": [
        lambda _: {"reports": {}},  # no policy's run was verified
        _ch06_matrix,
    ],
    "06: strict.error is not None and reports['strict'].quarantined == 0": [
        _ch06_matrix,  # strict never stopped
        lambda _: {"strict": ns(error="seq 12 after 10"), "reports": {"strict": report(ok=False, quarantined=2)}},
    ],
    "06: all((matrix.runs[p].error is None for p in ('resync', 'window', 'none')))": _ch06_matrix,
    "06: reports['resync'].lost == 0 and reports['window'].lost == 0": [
        _ch06_matrix,
        lambda _: {"reports": {"resync": report(), "window": report(lost=1)}},
    ],
    "06: by.loc[('window', Reorder.name), 'quarantined'] < by.loc[('resync', Reorder.name), 'quarantined']": _ch06_matrix,
    "06: reports['none'].applied > reports['resync'].applied": _ch06_matrix,
    "06: bad_record_faults and all((by.loc[('resync', f), 'applied'] == 0 for f in bad_record_faults))": [
        lambda _: {"bad_record_faults": []},  # the registry names no fault that writes bad records
        _ch06_matrix,  # resync applied two corrupt records
    ],
    "06: len(frame) > 0 and frame.allowed.all()": [
        lambda _: {"frame": pd.DataFrame({"policy": [], "fault": [], "allowed": []})},  # the matrix is empty
        _ch06_matrix,
    ],
    "06: reports and all((r.ok for r in reports.values())) and (strict.error is not None)": [
        lambda _: {"reports": {}},
        _ch06_matrix,
        lambda _: {"reports": {"strict": report(), "resync": report()}, "strict": ns(error=None)},  # strict ran to the end
    ],
    "06: len(sweep) > 0 and sweep.ok.all() and (sweep.set_aside <= sweep.bound).all()": [
        lambda _: {"sweep": pd.DataFrame({"ok": [], "set_aside": [], "bound": []})},  # no interval verified
        _ch06_matrix,  # one interval's verdict failed
        lambda _: {"sweep": pd.DataFrame({"ok": [True, True], "set_aside": [10, 90], "bound": [20, 60]})},  # past the bound
    ],
    "06: sweep.set_aside_per_fault.iloc[-1] > sweep.set_aside_per_fault.iloc[0]": _ch06_matrix,
    # 07: Kafka data loss
    "07: first.returncode == 0": _ch07_loss,
    "07: first_run.error is None": lambda _: {"first_run": ns(error="StreamingQueryException: ...", rows=300)},
    "07: first_run.rows > 0": _ch07_loss,  # it read nothing
    "07: sum(read.values()) > 0": lambda _: {"read": {("t1", 0): 0}},  # rows, yet no offset committed
    "07: first_run.batches >= 3": _ch07_loss,
    "07: outage.records > 0 and after['retention.ms'] == before['retention.ms']": [
        _ch07_loss,  # retention deleted nothing
        lambda _: {"outage": ns(records=500), "before": {"retention.ms": "604800000"}, "after": {"retention.ms": "1000"}},
    ],
    "07: {t for t, _ in gone_partitions} == {shortened, by_hand}": _ch07_loss,
    "07: [k for k in gone_partitions if k[0] == by_hand] == [hit]": _ch07_loss,
    "07: gone_partitions and all((marks[k][0] > read[k] for k in gone_partitions))": [
        lambda _: {"gone_partitions": set(), "marks": {}, "read": {}},  # nothing was deleted
        lambda _: {
            "gone_partitions": {("t1", 0)},
            "marks": {("t1", 0): (40, 90)},
            "read": {("t1", 0): 55},
        },  # start not past what was read
    ],
    "07: kept and all((marks[k][0] == 0 for k in kept))": [
        # the second topic's records sat in one partition only: nothing within it was kept
        lambda _: {"kept": [], "hit": ("t2", 0), "marks": {("t2", 0): (40, 40)}},
        _ch07_loss,  # t2[1] lost records too
    ],
    "07: third and all((marks[k][0] == 0 for k in third))": [
        lambda _: {"third": [], "marks": {("t1", 0): (9, 40)}},  # the watermarks listed no partition of the third topic
        lambda _: {"third": [("t3", 2)], "marks": {("t3", 2): (7, 50)}},  # t3[2] lost 7 records
    ],
    "07: summary.error is None": _ch07_loss,
    "07: summary_b.error is None": _ch07_loss,
    "07: failed.returncode == 1 and 'KAFKA_DATA_LOSS' in error_line and ('--no-fail-on-data-loss' in error_line)": [
        lambda _: {"failed": proc(0), "error_line": None},  # the job read past the loss
        lambda _: {"failed": proc(1), "error_line": "error: Py4JJavaError: ..."},  # it failed, on something else
        lambda _: {"failed": proc(1), "error_line": "error: the job stopped: KAFKA_DATA_LOSS (offsets 0..9 of t1[0] deleted)"},
    ],
    "07: 'Traceback' not in failed.stderr and stopped.rows == 0": [
        _ch07_loss,
        lambda _: {"failed": proc(1, stderr="error: the job stopped: KAFKA_DATA_LOSS"), "stopped": ns(rows=120)},
    ],
    "07: [(d.topic, d.partition) for d in found] == [(d.topic, d.partition) for d in deleted]": _ch07_loss,
    "07: found and all((d.line() in error_line for d in found))": [
        lambda _: {"found": [], "error_line": "error: ..."},  # the checkpoint against Kafka found nothing deleted
        lambda _: {
            "found": [ns(line=lambda: "t1[0] offsets 10..19 (10 records)"), ns(line=lambda: "t2[1] offsets 0..4 (5 records)")],
            "error_line": "error: streaming query q stopped: Kafka no longer has 10 records that the checkpoint says come next: "
            "t1[0] offsets 10..19 (10 records) (...)",
        },
    ],
    "07: found and all((f.start <= o.start and f.end >= o.end for f, o in zip(found, deleted)))": [
        lambda _: {"found": [], "deleted": [ns(topic="t1", partition=0, start=5, end=20, count=15)]},
        _ch07_loss,
    ],
    "07: skipped.returncode == 0": _ch07_loss,
    "07: report.ok and set(report.counts) == {KAFKA_DELETED}": [
        lambda _: {"report": report(ok=False, lost=15), "KAFKA_DELETED": "kafka-deleted"},  # told the ranges, it still failed
        # the lake held nothing wrong: no anomaly for the deleted ranges to allow
        lambda _: {"report": ns(**vars(report(ok=True)), counts={}), "KAFKA_DELETED": "kafka-deleted"},
        # an anomaly allowed by another fault: the deleted ranges alone do not explain the lake
        lambda _: {
            "report": ns(**vars(report(ok=True, lost=15)), counts={"kafka-deleted": {"lost": 15}, "drop": {"gap": 1}}),
            "KAFKA_DELETED": "kafka-deleted",
        },
    ],
    "07: report.lost == sum((d.count for d in found))": _ch07_loss,
    "07: len(losses) > 0 and losses.whole_again.all()": [
        lambda _: {"losses": pd.DataFrame({"session": [], "whole_again": []})},  # no session lost records
        _ch07_loss,
    ],
    "07: cli.returncode == 0": _ch07_loss,
    "07: throughput > input_rate and len(table) > 0 and (table.catch_up_h < float('inf')).all()": [
        _ch07_loss,
        lambda _: {"throughput": 200.0, "input_rate": 150.0, "table": pd.DataFrame({"catch_up_h": []})},  # no scenario figured
        # the table figured with another job's pace than the one measured
        lambda _: {"throughput": 200.0, "input_rate": 150.0, "table": pd.DataFrame({"catch_up_h": [3.5, float("inf")]})},
    ],
    "07: failed.returncode == 1 and isinstance(error_line, str) and ('KAFKA_DATA_LOSS' in error_line)": [
        _ch07_loss,
        lambda _: {"failed": proc(1), "error_line": None},  # no line said why
        lambda _: {"failed": proc(1), "error_line": "error: Py4JJavaError: ..."},
    ],
    "07: skipped.returncode == 0 #2": _ch07_loss,
    "07: report.ok and report.lost == sum((d.count for d in found)) and (len(losses) > 0) and losses.whole_again.all()": [
        lambda _: {"report": report(ok=False, lost=15)},
        _ch07_loss,  # 12 lost, 15 deleted
        # the count matched, yet no session was listed as having lost records
        lambda _: {"report": report(ok=True, lost=0), "found": [], "losses": pd.DataFrame({"session": [], "whole_again": []})},
        lambda tmp: {**_ch07_loss(tmp), "report": report(ok=True, lost=15)},  # a session not whole again
    ],
    # 08: the metadata trap
    "08: trap.restored_from < trap.log_latest": lambda _tmp: {"trap": ns(restored_from=5, log_latest=5)},
    "08: len(trap.skipped) > 0": lambda _tmp: {"trap": ns(skipped=pd.DataFrame(), batches=pd.DataFrame({"batch": [0]}))},
    "08: not before.ok": lambda _tmp: {"before": report(ok=True)},
    "08: before.lost > 0": lambda _tmp: {"before": report(ok=False, lost=0)},
    "08: damaged": lambda _tmp: {"damaged": set()},
    "08: refused is not None": lambda _tmp: {"refused": None},
    "08: refused.planned is not None and refused.planned < trap.log_latest <= refused.log[1]": [
        lambda _tmp: {"refused": ns(planned=None, log=(0, 5)), "trap": ns(log_latest=5)},  # the error named no batch
        _ch08_guard,
        lambda _tmp: {"refused": ns(planned=4, log=(0, 4)), "trap": ns(log_latest=5)},  # it named a log behind the sink's
    ],
    "08: not (again.checkpoint / 'sessions' / 'commits' / str(refused.planned + 1)).exists()": _ch08_guard,
    "08: dry.returncode == 0": _ch08_repair,
    "08: damaged == lost_where": _ch08_repair,
    "08: not bad": _ch08_repair,
    "08: (cfg.checkpoint / 'sessions' / 'commits').is_dir()": _ch08_repair,
    "08: applied.returncode == 0": _ch08_repair,
    "08: after.ok and after.lost == 0": [
        _ch08_repair,
        lambda _tmp: {"after": report(ok=True, lost=4)},  # a verdict that allowed what the repair should have brought back
    ],
    # 09: backfill from the lake
    "09: summary.error is None": _ch09_backfill,
    "09: boundary_duplicates > 0": _ch09_backfill,
    "09: merged_duplicates == 0": _ch09_backfill,
    "09: same_as_stream": _ch09_backfill,
    "09: archive_report.ok": _ch09_backfill,
    "09: deleted and pipeline.source_end_offsets(bootstrap, prefix) == {}": [
        _ch09_backfill,  # nothing deleted
        lambda tmp: {**_ch09_backfill(tmp), "deleted": ["nb09-collection-fleet-0"]},  # deleted, yet Kafka still has it
    ],
    "09: boundary_duplicates > 0 and merged_keys.count() == merged_keys.distinct().count()": [
        _ch09_backfill,
        lambda tmp: {**_ch09_backfill(tmp), "boundary_duplicates": 3},  # the merge kept a boundary row twice
    ],
    "09: merged_report.ok": _ch09_backfill,
    "09: not live_report.ok": _ch09_backfill,
    "09: fixed.report.ok and fixed.switched and (fixed.previous == buggy.root)": [
        lambda _: {
            "fixed": ns(report=report(ok=False, lost=2), switched=False, previous=None),
            "buggy": ns(root="s3a://lake/v1"),
        },
        _ch09_backfill,  # verified, not switched
        lambda _: {"fixed": ns(report=report(), switched=True, previous="s3a://lake/v0"), "buggy": ns(root="s3a://lake/v1")},
    ],
    # 10: the recovery benchmark
    "10: capacity['capacity'] > 0 and abs(schedule.rate / capacity['capacity'] - LOAD) < 0.01": [
        lambda _: {"LOAD": 0.15, "capacity": {"capacity": 0.0}, "schedule": ns(rate=0.0)},  # no batch measured
        lambda _: {"LOAD": 0.15, "capacity": {"capacity": 4880.0}, "schedule": ns(rate=100.0)},  # the old fixed 100 msg/s
    ],
    "10: warm is not None": lambda _: {"warm": None},  # no batch with input ran before the first kill
    "10: verdicts and all(verdicts.values())": [
        lambda _: {"verdicts": {}, "result": {"runs": {}}},  # no system ran
        _ch10_bench,
    ],
    "10: hit and all((c > 0 for c in hit))": [
        lambda _: {"hit": []},  # no failure was a worker kill, or the master counted nothing
        lambda _: {"hit": [0]},  # the kill hit a worker with none of the job's executors
    ],
    "10: resumed and all((r['before'] is not None and r['after'] is not None and (r['before'] <= r['after'] <= r['before'] + 2) for r in resumed))": [
        lambda _: {"resumed": []},  # the driver was never restarted
        lambda _: {"resumed": [{"before": 28, "after": 0}]},  # the new driver started over from batch 0
    ],
    "10: state_on == [2] * schedule.failures": _ch10_bench,
    "10: job.all_recovered": _ch10_bench,
    "10: baseline.all_detected and baseline.all_recovered": [
        lambda _: {"baseline": ns(all_detected=False, all_recovered=False, describe=lambda: "failure 2 never detected")},
        _ch10_bench,
    ],
    "10: len(pairs) == 1": lambda _: {"pairs": []},  # the driver kill and the process kill did not line up
    "10: peak is not None and peak >= 0.9 * schedule.rate * at": [
        lambda _: {"peak": None, "schedule": ns(rate=800.0), "at": 30.0},  # no lag sampled after the restart
        lambda _: {"peak": 9_000.0, "schedule": ns(rate=800.0), "at": 30.0},  # 24,000 sent; it went on from where it was
    ],
}

#: asserts whose ``all`` may run over nothing, and why a run that leaves nothing to check is a good one
ALL_MAY_BE_EMPTY: dict[str, str] = {
    "05: all((x.input_rows == 0 for x in a.batches if x.end < big.end))": "no batch before the whole-backlog batch is the good run: nothing committed before it",
}

ASSERTS = chapter_asserts()


def broken_inputs(name: str) -> list[Broken]:
    """An assert's broken inputs: its entry in :data:`BROKEN`, one or a list."""
    entry = BROKEN[name]
    return entry if isinstance(entry, list) else [entry]


def checked(predicate: Callable[[ast.Assert], bool]) -> list[str]:
    """The asserts with broken inputs here that ``predicate`` picks (the others fail the coverage test)."""
    return sorted(name for name in BROKEN if name in ASSERTS and predicate(ASSERTS[name]))


def test_every_assert_in_the_chapters_has_a_broken_input_here():
    missing = sorted(set(ASSERTS) - set(BROKEN))
    stale = sorted(set(BROKEN) - set(ASSERTS))
    assert not missing, "asserts with no broken input in tests/test_chapter_asserts.py (write how each fails):\n  " + "\n  ".join(
        missing
    )
    assert not stale, "broken inputs for asserts the chapters no longer have (remove or rename):\n  " + "\n  ".join(stale)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_an_assert_fails_on_each_broken_input_with_a_message_that_formats(name, tmp_path):
    node = ASSERTS.get(name)
    if node is None:
        pytest.fail(f"{name!r}: no such assert in the chapters (see the coverage test)")
    assert broken_inputs(name), f"{name!r}: an empty list of broken inputs"
    for k, broken in enumerate(broken_inputs(name), 1):
        namespace = broken(tmp_path / str(k))
        holds = evaluate(node.test, namespace, name)
        assert not holds, f"{name!r} holds on its broken input {k}: the check cannot tell this broken run from a good one"
        if node.msg is not None:
            evaluate(node.msg, namespace, name)  # raises if it cannot format


@pytest.mark.parametrize("name", checked(lambda node: len(conjuncts(node.test)) > 1))
def test_every_part_of_an_and_is_the_reason_it_fails_on_one_broken_input(name, tmp_path):
    parts = conjuncts(ASSERTS[name].test)
    shown = {first_false(parts, broken(tmp_path / str(k)), name) for k, broken in enumerate(broken_inputs(name), 1)}
    lacking = [f"part {i + 1} of {len(parts)}, `{ast.unparse(part)}`" for i, part in enumerate(parts) if i not in shown]
    assert not lacking, (
        f"{name!r}: no broken input on which the parts before it hold and it is false, for "
        + "; ".join(lacking)
        + " (add one to its list in BROKEN)"
    )


@pytest.mark.parametrize(
    "name", [name for name in checked(lambda node: bool(all_iterables(node.test))) if name not in ALL_MAY_BE_EMPTY]
)
def test_an_all_over_a_collection_fails_when_the_collection_is_empty(name, tmp_path):
    test = ASSERTS[name].test
    namespaces = [broken(tmp_path / str(k)) for k, broken in enumerate(broken_inputs(name), 1)]
    passes_empty = [
        f"`{ast.unparse(it)}`"
        for it in all_iterables(test)
        if not any(is_empty(it, ns_, name) and not evaluate(test, ns_, name) for ns_ in namespaces)
    ]
    assert not passes_empty, (
        f"{name!r}: no broken input on which {', '.join(passes_empty)} is empty and the assert fails: "
        "all() over nothing is True, so a run that did nothing passes; give the assert a "
        "non-empty part (`xs and all(...)`, `len(frame) > 0 and frame.ok.all()`) and a broken input "
        "with nothing in it, or say in ALL_MAY_BE_EMPTY why nothing to check is a good run"
    )


def test_every_all_that_may_run_over_nothing_is_an_assert_with_one_and_says_why():
    stale = sorted(name for name in ALL_MAY_BE_EMPTY if name not in ASSERTS or not all_iterables(ASSERTS[name].test))
    unsaid = sorted(name for name, why in ALL_MAY_BE_EMPTY.items() if not why.strip())
    assert not stale, "ALL_MAY_BE_EMPTY names asserts the chapters no longer have, or that run no all():\n  " + "\n  ".join(stale)
    assert not unsaid, "ALL_MAY_BE_EMPTY entries that do not say why:\n  " + "\n  ".join(unsaid)
