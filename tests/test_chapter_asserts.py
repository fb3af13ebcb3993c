"""Every assert in the workbook can fail, and says something a learner can read when it does.

A chapter's verdict is an ``assert`` on its own run. An assert that holds whatever the run did
(a check on a constant, a comparison of a value with itself) would print a verdict the run
never earned. For every assert in every chapter, :data:`BROKEN` gives a broken input: the
values the chapter's names would hold had that part of the run gone wrong, built from the
package's own functions and types where they are cheap to call. The tests check that

- the assert's condition is false on its broken input (the check can fail), and
- its message, where it has one, formats on that input (a learner sees what went wrong, not
  a ``NameError`` or ``KeyError`` raised while Python builds the message);

and that every assert in the chapters has a broken input here, and no entry is left over: a
new assert, or a changed condition, fails until someone writes down how it fails.

An assert is named ``"<chapter>: <its condition>"``, the condition as ``ast.unparse`` prints
it (with `` #2`` when a chapter repeats a condition), so that moving cells changes nothing
and changing a condition asks for its broken input again.
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


# --- small stand-ins for what a run hands back ------------------------------------------


def proc(returncode: int, stdout: str = "", stderr: str = "") -> ns:
    """A finished ``subprocess.run``."""
    return ns(returncode=returncode, stdout=stdout, stderr=stderr)


def report(ok: bool = True, lost: int = 0, applied: int = 0, quarantined: int = 0) -> ns:
    """A verifier's report (``job.verify``): its verdict and counts."""
    return ns(ok=ok, lost=lost, applied=applied, quarantined=quarantined,
              summary=lambda: f"FAILED: {lost} lost, {applied} applied, {quarantined} quarantined")  # fmt: skip


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
    from producers import Message, decode, encode

    msg = Message.upsert(site="fleet-2", session="fleet-2-demo-s0000", seq=17, epoch=0, ts=1, row={"id": "veh-1", "speed": 0.0})
    # the bytes of the next update of the session: they parse, into a different message
    value = encode(Message.upsert(site="fleet-2", session="fleet-2-demo-s0000", seq=18, epoch=0, ts=1, row={"id": "veh-1", "speed": 0.0}))
    return {"decode": decode, "value": value, "msg": msg}


def _ch01_ledger(_tmp: Path) -> dict:
    ledger = pd.DataFrame({"outcome": ["ok", "ok", "timed-out"], "error": [None, None, "Message timed out"]})
    return {"unexpected": ledger[~ledger["outcome"].isin(["ok", "not-sent"])]}


def _ch02_step(_tmp: Path) -> dict:
    """Chapter 02's window runs with the window too wide to give up: window 2 held like window 8."""
    return {"reasons_of": {"window 8": ["broken-session"], "window 2": ["duplicate"], "none": ["corrupt"]}}


def _ch03_kill(_tmp: Path) -> dict:
    # the kill fell after the commit: batch N finished, its files listed in the sink log
    return {"N": 5, "kill": ns(offsets=[0, 1, 2, 3, 4, 5], commits={0, 1, 2, 3, 4, 5}, sink_log_batches=(0, 1, 2, 3, 4, 5),
                               uncommitted_files=[])}  # fmt: skip


def _ch03_pending(tmp: Path) -> dict:
    from job.spark import checkpoints

    return {"N": 5, "state": checkpoints.log_state(_checkpoint(tmp, [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4, 5]))}


def _ch03_rerun(tmp: Path) -> dict:
    """The re-run rewrote offsets/5 and stopped before committing it."""
    from job.spark import checkpoints

    query_ckpt = _checkpoint(tmp, [0, 1, 2, 3, 4, 5], [0, 1, 2, 3, 4])
    return {"N": 5, "query_ckpt": query_ckpt, "before": "v1\n{}\noffsets 5 as first planned\n", "checkpoints": checkpoints,
            "done": proc(1, stderr="Py4JJavaError: ..."), "first_batch": ns(batch_id=6)}  # fmt: skip


def _ch03_state(_tmp: Path) -> dict:
    from job.engine.session import SessionState

    return {"stored": [], "session_state": None, "SessionState": SessionState}


def _ch03_sinks(_tmp: Path) -> dict:
    append = {"rows written": 300, "distinct records": 300, "rows of batch 1": 100}  # no replay after the crash
    idem = {"rows written": 350, "distinct records": 300, "rows of batch 1": 100}  # a replay written twice
    return {"append": append, "idem": idem, "foreach": {"append": append, "idempotent": idem},
            "spark_dupes": 3, "raw_dupes": 0, "orphans": []}  # fmt: skip


def _ch04_run(_tmp: Path) -> dict:
    """Every fault the other way round: a stalled job, a job that ignored Kafka, a restart too many."""
    outcome = lambda behaviour, batches=0, alerts=(): ns(behaviour=behaviour, batches_during=batches, alerts=alerts, time_to_flow_s=None)  # noqa: E731
    by_kind = {
        "worker-kill": outcome("waited", 0), "broker-kill": outcome("kept going", 3, ("recovered",)),
        "minio-pause": outcome("kept going", 3, ()), "master-kill": outcome("waited", 0),
        "driver-kill": outcome("kept going", 4, ("stall", "recovered", "stall")),
    }  # fmt: skip
    from job.drills import environment

    return {"by_kind": by_kind, "table": "fault | behaviour\n...", "environment": environment,
            "run": ns(outcomes=list(by_kind.values()), job_starts=3, alerts=["stall"], clean=False,
                      verdict={"summary": "FAILED: 12 lost"}),
            "recovery": ["Starting Spark master", "I have been elected leader! New state: RECOVERING"],
            "sb": ns(status=lambda: [ns(state="running"), ns(state="stopped")])}  # fmt: skip


def _ch05_backlog(_tmp: Path) -> dict:
    batch = lambda rows, end, state=0: ns(input_rows=rows, end=end, state_rows=state)  # noqa: E731
    # uncapped, yet it committed a small batch first and read only part of the backlog at once
    big = batch(20_000, 30.0)
    a = ns(backlog=30_000, batches=[batch(500, 10.0), big], first_commit_s=12.0, peak_memory_bytes=32 << 20)
    # "capped" at 4,000 yet one batch took 6,000; first records as late as the uncapped run's
    a4 = ns(backlog=29_000, batches=[batch(6_000, 5.0), batch(4_000, 9.0)], first_commit_s=20.0, caught_up_s=30.0,
            peak_memory_bytes=32 << 20)  # the same pages as the whole backlog's batch  # fmt: skip
    b = ns(batches=[batch(6_000, 5.0, 9), batch(0, 6.0, 3)], caught_up_s=None, table=lambda: "batch | rows\n...")
    produce = lambda *args, **kw: ns(run=lambda: runner_summary())  # noqa: E731  (the priming run failed)
    return {"a": a, "a4": a4, "big": big, "b": b, "produce": produce, "prime": "nb05-prime-",
            "summary": runner_summary(None, {"ok": 12_000}), "result": {"summary": runner_summary()},
            "predicted": 90.0, "peak_state": 3, "report": report(ok=False, lost=40)}  # fmt: skip


def _ch06_matrix(_tmp: Path) -> dict:
    from producers.faults import FAULTS, Duplicate, Reorder

    bad = next(f for f in FAULTS if FAULTS[f].info.bad_record)
    frame = pd.DataFrame([
        {"policy": "window", "fault": Reorder.name, "quarantined": 9, "applied": 0, "other_kinds": "", "allowed": True},
        {"policy": "resync", "fault": Reorder.name, "quarantined": 4, "applied": 0, "other_kinds": "", "allowed": True},
        {"policy": "resync", "fault": bad, "quarantined": 0, "applied": 2, "other_kinds": "", "allowed": False},
        {"policy": "none", "fault": Duplicate.name, "quarantined": 0, "applied": 1, "other_kinds": "", "allowed": True},
    ])  # fmt: skip
    reports = {"strict": report(ok=False, quarantined=2), "resync": report(lost=3, applied=50), "window": report(lost=1),
               "none": report(applied=40)}  # fmt: skip
    matrix = ns(summary=ns(faults={Reorder.name: 3}), runs={"resync": ns(error="KafkaError"), "window": ns(error=None),
                                                           "none": ns(error=None)})  # fmt: skip
    sweep = pd.DataFrame({"ok": [True, False], "set_aside": [10, 90], "bound": [20, 60], "set_aside_per_fault": [5.0, 4.0]})
    sp = ns(run=ns(error=None, report=report(ok=False, lost=7)), gap_free=False, applied_seqs=[0, 1, 2, 4])
    return {"FAULTS": FAULTS, "Reorder": Reorder, "frame": frame, "by": frame.set_index(["policy", "fault"]),
            "reports": reports, "matrix": matrix, "sweep": sweep, "strict": ns(error=None), "sp": sp,
            "gap": "seq 41 after 39", "last_clean": 29, "missing": ["crash", "reorder"],
            "failed": ["window sets aside fewer records around reorders than resync"]}  # fmt: skip


def _ch07_loss(_tmp: Path) -> dict:
    from job.ops import dataloss

    # the checkpoint read past what Kafka now holds: a partition recreated empty
    rewound = dataloss.rewound_partitions({("collection-fleet-0", 0): 1200}, {("collection-fleet-0", 0): 5})
    # a job slower than its input: no backlog is ever worked off, and a weekend loses data at 72 h too
    table = dataloss.retention_table({"weekend (Fri 18:00 to Mon 08:00)": (62.0, 14.0)}, [24, 72], input_rate=150, throughput=109)
    weekend = table[table.scenario.str.startswith("weekend")].set_index("retention_h")
    found = [ns(topic="t1", partition=0, start=10, end=20, count=10), ns(topic="t2", partition=1, start=0, end=5, count=5)]
    deleted = [ns(topic="t1", partition=0, start=5, end=20, count=15)]
    return {
        "rewound": rewound, "table": table, "weekend": weekend, "throughput": 109.0, "input_rate": 150.0,
        "found": found, "deleted": deleted, "first": proc(1, stderr="UsageError"), "skipped": proc(1, stderr="..."),
        "first_run": ns(error=None, rows=0, batches=1), "read": {("t1", 0): 0},
        "outage": ns(records=0), "before": {"retention.ms": "604800000"}, "after": {"retention.ms": "1000"},
        "gone_partitions": {("t1", 0), ("t3", 2), ("t2", 0), ("t2", 1)}, "shortened": "t1", "by_hand": "t2", "hit": ("t2", 0),
        "marks": {("t1", 0): (0, 50), ("t3", 2): (7, 50), ("t2", 0): (9, 40), ("t2", 1): (9, 40)},
        "summary": runner_summary(), "failed": proc(0, stderr="Traceback (most recent call last): ..."),
        "error_line": None, "stopped": ns(rows=120), "blind": report(), "report": report(ok=True, lost=12),
        "losses": pd.DataFrame({"session": ["s1"], "whole_again": [False]}),
        "cli": proc(2, stdout="FAILED: 12 lost", stderr="error: --kafka-deleted: no such file"),
    }  # fmt: skip


def _ch08_repair(tmp: Path) -> dict:
    from job.ops.repair import RepairPlan

    plan_partition = lambda topic, p, restart, damage, end: ns(topic=topic, partition=p, damaged=True, restart=restart,  # noqa: E731
                                                               damage=damage, checkpoint_end=end)  # fmt: skip
    plan = ns(partitions=[plan_partition("t1", 2, 40, 30, 80)])  # restarts after its damage: records 30..39 never again
    return {"RepairPlan": RepairPlan, "damaged": {("t1", 2)}, "lost_where": {("t1", 2), ("t2", 2)},
            "bad": [p for p in plan.partitions if p.damaged and not p.restart <= p.damage <= p.checkpoint_end],
            "cfg": ns(checkpoint=tmp / "deleted-by-the-dry-run"), "dry": proc(2, stderr="error: --plan: ..."),
            "applied": proc(1, stderr="[repair] ..."), "after": report(ok=False, lost=4)}  # fmt: skip


def _ch08_guard(tmp: Path) -> dict:
    """The guard let a checkpoint behind the sink's log run: its next batch was committed, and the
    error (had there been one) named a checkpoint as far as the log."""
    commits = tmp / "again" / "sessions" / "commits"
    commits.mkdir(parents=True, exist_ok=True)
    (commits / "6").write_text("v1\n{}")
    return {"refused": ns(planned=5, log=(0, 5)), "trap": ns(log_latest=5), "again": ns(checkpoint=tmp / "again")}


def _ch09_backfill(_tmp: Path) -> dict:
    naive_rows = [("t", 0, 1, "a"), ("t", 0, 2, "a")]  # the two ranges met without overlap
    merged = spark_frame([("t", 0, 1, "a"), ("t", 0, 1, "a")])  # the merge kept a boundary row twice
    return {"boundary_duplicates": len(naive_rows) - len(set(naive_rows)), "merged_duplicates": 1, "same_as_stream": False,
            "merged_keys": merged, "archive_report": report(ok=False, lost=3), "merged_report": report(ok=False, lost=1),
            "live_report": report(ok=True), "deleted": [], "bootstrap": "localhost:9092", "prefix": "nb09-",
            "pipeline": ns(source_end_offsets=lambda bootstrap, prefix: {("nb09-collection-fleet-0", 0): 120}),
            "summary": runner_summary(), "fixed": ns(report=report(), switched=False, previous="s3a://lake/v1"),
            "buggy": ns(root="s3a://lake/v1")}  # fmt: skip


def _ch10_bench(_tmp: Path) -> dict:
    return {"LOAD": 0.15, "capacity": {"capacity": 4880.0}, "schedule": ns(rate=2440.0, failures=3),
            "verdicts": {"job": True, "baseline": False},
            "result": {"runs": {"job": ns(verdict={"summary": "OK"}), "baseline": ns(verdict={"summary": "FAILED: 9 lost"})}},
            "hit": [2, 0], "job": ns(all_recovered=False, describe=lambda: "unstable: never recovered from failure 2"),
            "baseline": ns(all_detected=True, all_recovered=False, describe=lambda: "unstable"),
            "peaks": [42_731, None, 97_586],
            "state_on": [2, 1, None]}  # fmt: skip


#: name of an assert -> the chapter's names as a broken run would leave them (called with a tmp dir)
BROKEN: dict[str, Callable[[Path], dict]] = {
    # 00: the tour
    "00: producer.flush(30) == 0": lambda _: {"producer": ns(flush=lambda timeout: 2)},  # two messages still queued
    "00: all((s.state == 'running' for s in sb.status()))": lambda _: {"sb": ns(status=lambda: [ns(state="running"), ns(state="stopped")])},
    "00: sorted((k for k, *_ in received)) == ['session-a'] * 3 + ['session-b'] * 3":
        lambda _: {"received": [("session-a", 0, 0, "m"), ("session-b", 1, 0, "m")]},  # four of six never arrived
    "00: body == b'hello, lake' and listed == [key]": lambda _: {"body": b"hello, lake", "listed": [], "key": "tour/hello.txt"},
    "00: lake.count() == 6": lambda _: {"lake": ns(count=lambda: 5)},
    "00: alive() == 2": lambda _: {"alive": lambda: 1},  # one worker lost
    "00: len(parts) == 1": lambda _: {"parts": {0, 2}, "session": "session-a"},  # a key hashed to two partitions
    # 01: producers and the ledger
    "01: decode(value) == msg": _ch01_decode,
    "01: summary.error is None": lambda _: {"summary": runner_summary()},
    "01: key.decode() == snapshot.session and value == first['sent']":
        lambda _: {"key": b"fleet-0-s0001", "snapshot": ns(session="fleet-0-s0000"), "value": b"x", "first": {"sent": b"x"}},
    "01: record is not None": lambda _: {"record": None, "topic": "collection-fleet-0", "partition": 1, "offset": 17},
    "01: record.error() is None": lambda _: {"record": ns(error=lambda: "KafkaError{code=OFFSET_OUT_OF_RANGE}")},
    "01: f'\"reason\": \"{exc.reason}\"' in bad['fault_detail']":
        lambda _: {"exc": ns(reason="not-json"), "bad": {"fault_detail": '{"reason": "truncated"}'}},
    "01: len(in_ledger) == len(ok)": lambda _: {"in_ledger": {("t", 0, 1, b"a")}, "ok": pd.DataFrame({"offset": [1, 1]})},
    "01: found == in_ledger": lambda _: {"found": {("t", 0, 1, b"a"), ("t", 0, 2, b"b")}, "in_ledger": {("t", 0, 1, b"a")}},
    "01: unexpected.empty": _ch01_ledger,
    "01: record is not None and record.error() is None": lambda _: {"record": None},
    # 02: the stateful job
    "02: 'broken-session' not in reasons_of['window 8']": _ch02_step,
    "02: 'broken-session' in reasons_of['window 2']": _ch02_step,
    "02: reasons_of['none'] == []": _ch02_step,
    "02: summary.error is None": lambda _: {"summary": runner_summary()},
    "02: report.ok": lambda _: {"report": report(ok=False, lost=3)},
    # 03: checkpoints and delivery
    "03: kill.offsets[-1] == N and N not in kill.commits and (N - 1 in kill.commits)": _ch03_kill,
    "03: N not in kill.sink_log_batches and kill.uncommitted_files": _ch03_kill,
    "03: state.pending == N": _ch03_pending,
    "03: int(meta.maxBatchId.max()) == N - 1": lambda _: {"N": 5, "meta": pd.DataFrame({"maxBatchId": [5, 5]})},
    "03: len(stored) >= 1 and isinstance(session_state, SessionState)": _ch03_state,
    "03: done.returncode == 0": _ch03_rerun,
    "03: first_batch.batch_id == N": _ch03_rerun,
    "03: (query_ckpt / 'offsets' / str(N)).read_text() == before": _ch03_rerun,
    "03: N in checkpoints.log_state(query_ckpt).commits": _ch03_rerun,
    "03: spark_dupes == 0": _ch03_sinks,
    "03: raw_dupes > 0 or len(orphans) > 0": _ch03_sinks,
    "03: crashed.returncode == -9": lambda _: {"crashed": proc(0, stderr="[delivery] batch 1 committed")},  # the crash switch did nothing
    "03: finished.returncode == 0": lambda _: {"finished": proc(1, stderr="StreamingQueryException")},
    "03: append['rows written'] - append['distinct records'] == append['rows of batch 1'] // 2 > 0": _ch03_sinks,
    "03: idem['rows written'] == idem['distinct records']": _ch03_sinks,
    "03: report.ok": lambda _: {"report": report(ok=False, lost=3)},
    "03: spark_dupes == 0 and foreach['idempotent']['rows written'] == foreach['idempotent']['distinct records']": _ch03_sinks,
    # 04: environmental failures
    "04: all((o.time_to_flow_s is not None for o in run.outcomes))": _ch04_run,
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
    "04: all((str(s.state) == 'running' for s in sb.status()))": _ch04_run,
    # 05: backlog and memory
    "05: produce(prime, rate=400, duration=1, sessions=1, seed=1).run().error is None": _ch05_backlog,
    "05: summary.error is None and sum(summary.outcomes.values()) >= 30000": _ch05_backlog,
    "05: a.backlog == a4.backlog": _ch05_backlog,
    "05: big.input_rows == a.backlog": _ch05_backlog,
    "05: all((x.input_rows == 0 for x in a.batches if x.end < big.end))": _ch05_backlog,
    "05: max((x.input_rows for x in a4.batches)) <= 4000": _ch05_backlog,
    "05: a4.first_commit_s < a.first_commit_s": _ch05_backlog,
    "05: a4.first_commit_s < a4.caught_up_s / 2": _ch05_backlog,
    "05: a.peak_memory_bytes > a4.peak_memory_bytes": _ch05_backlog,
    "05: result['summary'].error is None": _ch05_backlog,
    "05: sum((1 for x in b.batches if x.input_rows)) > 4": _ch05_backlog,
    "05: max((x.input_rows for x in b.batches)) <= 4000 and b.caught_up_s is not None": _ch05_backlog,
    "05: abs(predicted - b.caught_up_s) <= b.caught_up_s / 3 + 2": lambda _: {"predicted": 90.0, "b": ns(caught_up_s=40.0)},
    "05: peak_state > 4 and b.batches[-1].state_rows == 0": _ch05_backlog,
    "05: report.ok": _ch05_backlog,
    # 06: data integrity
    "06: not missing": _ch06_matrix,
    "06: sp.run.error is not None and gap in sp.run.error": _ch06_matrix,
    "06: sp.gap_free and sp.applied_seqs and (max(sp.applied_seqs) == last_clean)": _ch06_matrix,
    "06: sp.run.report.ok": _ch06_matrix,
    "06: not failed": _ch06_matrix,
    "06: all((r.ok for r in reports.values()))": _ch06_matrix,
    "06: strict.error is not None and reports['strict'].quarantined == 0": _ch06_matrix,
    "06: all((matrix.runs[p].error is None for p in ('resync', 'window', 'none')))": _ch06_matrix,
    "06: reports['resync'].lost == 0 and reports['window'].lost == 0": _ch06_matrix,
    "06: by.loc[('window', Reorder.name), 'quarantined'] < by.loc[('resync', Reorder.name), 'quarantined']": _ch06_matrix,
    "06: reports['none'].applied > reports['resync'].applied": _ch06_matrix,
    "06: all((by.loc[('resync', f), 'applied'] == 0 for f in FAULTS if FAULTS[f].info.bad_record))": _ch06_matrix,
    "06: frame.allowed.all()": _ch06_matrix,
    "06: all((r.ok for r in reports.values())) and strict.error is not None": _ch06_matrix,
    "06: sweep.ok.all() and (sweep.set_aside <= sweep.bound).all()": _ch06_matrix,
    "06: sweep.set_aside_per_fault.iloc[-1] > sweep.set_aside_per_fault.iloc[0]": _ch06_matrix,
    # 07: Kafka data loss
    "07: first.returncode == 0": _ch07_loss,
    "07: first_run.error is None and first_run.rows > 0 and (sum(read.values()) > 0)": _ch07_loss,
    "07: first_run.batches >= 3": _ch07_loss,
    "07: outage.records > 0 and after['retention.ms'] == before['retention.ms']": _ch07_loss,
    "07: {t for t, _ in gone_partitions} == {shortened, by_hand}": _ch07_loss,
    "07: [k for k in gone_partitions if k[0] == by_hand] == [hit]": _ch07_loss,
    "07: all((marks[k][0] > read[k] for k in gone_partitions))": lambda _: {"gone_partitions": {("t1", 0)}, "marks": {("t1", 0): (40, 90)},
                                                                           "read": {("t1", 0): 55}},  # start not past what was read
    "07: summary.error is None": _ch07_loss,
    "07: failed.returncode == 1 and 'KAFKA_DATA_LOSS' in error_line and ('--no-fail-on-data-loss' in error_line)":
        lambda _: {"failed": proc(1), "error_line": "error: the job stopped: KAFKA_DATA_LOSS (offsets 0..9 of t1[0] deleted)"},
    "07: 'Traceback' not in failed.stderr and stopped.rows == 0": _ch07_loss,
    "07: [(d.topic, d.partition) for d in found] == [(d.topic, d.partition) for d in deleted]": _ch07_loss,
    "07: all((d.line() in error_line for d in found))": lambda _: {
        "found": [ns(line=lambda: "t1[0] offsets 10..19 (10 records)"), ns(line=lambda: "t2[1] offsets 0..4 (5 records)")],
        "error_line": "error: streaming query q stopped: Kafka no longer has 10 records that the checkpoint says come next: "
                      "t1[0] offsets 10..19 (10 records) (...)"},
    "07: all((f.start <= o.start and f.end >= o.end for f, o in zip(found, deleted)))": _ch07_loss,
    "07: skipped.returncode == 0": _ch07_loss,
    "07: not blind.ok and report.ok": _ch07_loss,
    "07: report.lost == sum((d.count for d in found))": _ch07_loss,
    "07: len(losses) > 0 and losses.whole_again.all()": _ch07_loss,
    "07: cli.returncode == 0": _ch07_loss,
    "07: f'{report.lost} lost' in cli.stdout and 'kafka-deleted:' in cli.stdout":
        lambda _: {"report": report(lost=12), "cli": proc(1, stdout="FAILED: 12 lost")},
    "07: throughput > input_rate and (table.catch_up_h < float('inf')).all()": _ch07_loss,
    "07: failed.returncode == 1 and isinstance(error_line, str) and ('KAFKA_DATA_LOSS' in error_line)": _ch07_loss,
    "07: skipped.returncode == 0 #2": _ch07_loss,
    "07: report.ok and report.lost == sum((d.count for d in found)) and losses.whole_again.all()": _ch07_loss,
    # 08: the metadata trap
    "08: trap.restored_from < trap.log_latest": lambda _tmp: {"trap": ns(restored_from=5, log_latest=5)},
    "08: len(trap.skipped) > 0": lambda _tmp: {"trap": ns(skipped=pd.DataFrame(), batches=pd.DataFrame({"batch": [0]}))},
    "08: not before.ok": lambda _tmp: {"before": report(ok=True)},
    "08: before.lost > 0": lambda _tmp: {"before": report(ok=False, lost=0)},
    "08: damaged": lambda _tmp: {"damaged": set()},
    "08: refused is not None": lambda _tmp: {"refused": None},
    "08: refused.planned is not None and refused.planned < trap.log_latest <= refused.log[1]": _ch08_guard,
    "08: not (again.checkpoint / 'sessions' / 'commits' / str(refused.planned + 1)).exists()": _ch08_guard,
    "08: dry.returncode == 0": _ch08_repair,
    "08: damaged == lost_where": _ch08_repair,
    "08: not bad": _ch08_repair,
    "08: (cfg.checkpoint / 'sessions' / 'commits').is_dir()": _ch08_repair,
    "08: applied.returncode == 0": _ch08_repair,
    "08: after.ok and after.lost == 0": _ch08_repair,
    # 09: backfill from the lake
    "09: summary.error is None": _ch09_backfill,
    "09: boundary_duplicates > 0": _ch09_backfill,
    "09: merged_duplicates == 0": _ch09_backfill,
    "09: same_as_stream": _ch09_backfill,
    "09: archive_report.ok": _ch09_backfill,
    "09: deleted and pipeline.source_end_offsets(bootstrap, prefix) == {}": _ch09_backfill,
    "09: boundary_duplicates > 0 and merged_keys.count() == merged_keys.distinct().count()": _ch09_backfill,
    "09: merged_report.ok": _ch09_backfill,
    "09: not live_report.ok": _ch09_backfill,
    "09: fixed.report.ok and fixed.switched and (fixed.previous == buggy.root)": _ch09_backfill,
    # 10: the recovery benchmark
    "10: capacity['capacity'] > 0 and abs(schedule.rate / capacity['capacity'] - LOAD) < 0.01":
        lambda _: {"LOAD": 0.15, "capacity": {"capacity": 4880.0}, "schedule": ns(rate=100.0)},  # the old fixed 100 msg/s
    "10: warm is not None": lambda _: {"warm": None},  # no batch with input ran before the first kill
    "10: all(verdicts.values())": _ch10_bench,
    "10: len(hit) == schedule.failures and all((c > 0 for c in hit))": _ch10_bench,
    "10: state_on == [2] * schedule.failures": _ch10_bench,
    "10: job.all_recovered": _ch10_bench,
    "10: baseline.all_detected and baseline.all_recovered": _ch10_bench,
    "10: None not in peaks and all((b > a for a, b in zip(peaks, peaks[1:])))": _ch10_bench,
}  # fmt: skip

ASSERTS = chapter_asserts()


def test_every_assert_in_the_chapters_has_a_broken_input_here():
    missing = sorted(set(ASSERTS) - set(BROKEN))
    stale = sorted(set(BROKEN) - set(ASSERTS))
    assert not missing, "asserts with no broken input in tests/test_chapter_asserts.py (write how each fails):\n  " + "\n  ".join(missing)
    assert not stale, "broken inputs for asserts the chapters no longer have (remove or rename):\n  " + "\n  ".join(stale)


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_an_assert_fails_on_its_broken_input_with_a_message_that_formats(name, tmp_path):
    node = ASSERTS.get(name)
    if node is None:
        pytest.fail(f"{name!r}: no such assert in the chapters (see the coverage test)")
    namespace = BROKEN[name](tmp_path)
    holds = eval(compile(ast.Expression(node.test), name, "eval"), namespace)  # noqa: S307  (the chapters' own code)
    assert not holds, f"{name!r} holds on its broken input: the check cannot tell this broken run from a good one"
    if node.msg is not None:
        eval(compile(ast.Expression(node.msg), name, "eval"), namespace)  # noqa: S307  (raises if it cannot format)
