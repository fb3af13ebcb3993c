"""Session core micro-benchmark: ``job.engine.session.step`` next to a naive JSON loop, in one run.

The input is one session of one site, made by the producers' own code (``SessionScript`` over a
``Site`` of ``--rows`` rows, a snapshot every ``--snapshot-every`` messages, the default
mix of upserts and deletes, no faults) and encoded with ``producers.contract.encode``:
the exact bytes a Kafka topic would hold.

Two readers consume the same records in the same process, interleaved ``--repeats`` times:

  naive  ``json.loads`` of each value, then a dict update: a snapshot replaces the table,
         an upsert sets a row, a delete pops one. No checks, no outputs, no state kept
         outside the process. The baseline of the ratio.
  core   the job's per-session work as the Spark operators do it: the records cut into
         batches of ``--batch`` records; for each batch the stored state is loaded, fed to
         ``job.engine.session.step`` (policy ``resync``) with the batch, and the new state stored
         again, in the same stored form the operators keep (``job.spark.pipeline``'s choice).

  map    the same, with the state shaped as a map (a small header value plus one entry per
         row, as a ``MapState`` would keep it): only the rows a batch touched are written
         (a snapshot rewrites them all). Simulated in process with a dict, so it is a lower
         bound: each ``MapState`` call of ``transformWithStateInPandas`` is a round trip to
         the JVM, and ``map_state_ops_per_batch`` says how many it would make, against the
         blob's two (one get, one update).

The ratio core / naive is taken per pair of adjacent runs (so a busy neighbour slows both),
and its median is reported. The readers' final tables are checked equal before timing.

    .venv/bin/python bench/session_bench.py                  # about 30 s
    .venv/bin/python bench/session_bench.py --batch 100 --repeats 3

Figures go to stdout and ``bench/results/session-<time>.json`` (shape: see ``SHAPE``).
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import RESULTS  # noqa: E402  (after sys.path above)
from job.engine import session as sm  # noqa: E402
from producers.contract import encode  # noqa: E402
from producers.sessions import SessionPlan, SessionScript, session_id  # noqa: E402
from producers.sites import SITE_TYPES, Site, site_name  # noqa: E402

#: Bumped when a key of the JSON result changes meaning or goes away (new keys may be added).
SHAPE = 1
POLICY = "resync"


def build_stream(*, messages: int, rows: int, snapshot_every: int, site_type: str, seed: int) -> list[sm.Record]:
    """``messages`` records of one session (its opening snapshot included, then ``end``)."""
    index = SITE_TYPES.index(site_type)
    site = Site(site_name(index), site_type, seed=seed, rows=rows)  # type: ignore[arg-type]
    sid = session_id(site.name, 0)
    clock_ms = iter(range(1_732_233_600_000, 1_732_233_600_000 + 10 * (messages + 1), 10))
    session = SessionScript(
        site,
        sid=sid,
        ordinal=0,
        plan=SessionPlan(length=messages - 1, snapshot_every=snapshot_every),
        seed=seed,
        clock=lambda: next(clock_ms) / 1000,
    )
    msgs = [session.next_message() for _ in range(messages - 1)] + [session.end_message()]
    topic = f"collection-{site.name}"
    return [sm.Record(topic, 0, i, sid, encode(m), 1_732_233_600_000 + i) for i, m in enumerate(msgs)]


def naive(values: list[bytes]) -> dict:
    """The baseline: decode each value and update a dict, nothing else."""
    loads = json.loads
    table: dict = {}
    for value in values:
        obj = loads(value)
        kind = obj["kind"]
        if kind == "upsert":
            row = obj["row"]
            table[row["id"]] = row
        elif kind == "delete":
            table.pop(obj["id"], None)
        elif kind == "snapshot":
            table = {row["id"]: row for row in obj["rows"]}
    return table


def stored_form() -> tuple[str, object, object]:
    """How the Spark operators store a session's state: (name, dump, load)."""
    dump = getattr(sm.SessionState, "to_stored", None)
    if dump is not None:
        return "stored", dump, sm.SessionState.from_stored
    return "json", sm.SessionState.to_json, sm.SessionState.from_json


def core(records: list[sm.Record], batch: int) -> tuple[sm.SessionState, int]:
    """The job's per-session work, batch by batch, state stored and loaded around each."""
    _, dump, load = stored_form()
    step = sm.step
    stored = None
    state = None
    size = 0
    for start in range(0, len(records), batch):
        state = None if stored is None else load(stored)  # type: ignore[operator]
        result = step(state, records[start : start + batch], policy=POLICY)
        if result.quarantine:
            raise SystemExit(f"the core quarantined a clean record: {result.quarantine[0]}")
        state = result.state
        stored = dump(state)  # type: ignore[operator]
        size = max(size, len(stored))
    assert state is not None
    return state, size


def core_map(records: list[sm.Record], batch: int) -> tuple[sm.SessionState, float]:
    """``core`` with a map-shaped state: returns the final state and state-store calls per batch."""
    header: bytes | None = None
    entries: dict[str, bytes] = {}  # what the MapState would hold: row id -> the row's JSON text
    step = sm.step
    state = None
    calls = 0
    batches = 0
    for start in range(0, len(records), batch):
        batches += 1
        calls += 1  # get the header
        if header is not None:
            # The machine takes the table as the row texts it keeps (job.engine.session._Table).
            state = replace(sm.SessionState.from_stored(header), table=sm._Table(dict(entries)))
        result = step(state, records[start : start + batch], policy=POLICY)
        state = result.state
        snapshot = None
        for c in result.changes:  # in the order applied: replay them on the map
            if c.op == "snapshot" and snapshot != (c.epoch, c.seq):
                snapshot = (c.epoch, c.seq)
                entries.clear()  # a snapshot replaces the whole table
                calls += 1
            if c.op == "delete":
                entries.pop(c.row_id, None)
            elif c.data is not None:
                entries[c.row_id] = c.data.encode()
            calls += 1
        header = replace(state, table={}).to_stored()
        calls += 1  # update the header
    assert state is not None
    return state, calls / batches


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def timed(clock, fn, *args) -> tuple[float, object]:  # noqa: ANN001
    started = clock()
    out = fn(*args)
    return clock() - started, out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--messages", type=int, default=20_000, help="records in the session (default %(default)s)")
    p.add_argument("--rows", type=int, default=300, help="rows of the site's table (default %(default)s)")
    p.add_argument("--snapshot-every", type=int, default=200, help="default %(default)s")
    p.add_argument("--site-type", choices=SITE_TYPES, default="fleet")
    p.add_argument("--batch", type=int, action="append", help="records per batch (repeatable; default 10 100 1000)")
    p.add_argument("--repeats", type=int, default=5, help="interleaved rounds (default %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--clock",
        choices=tuple(CLOCKS),
        default="wall",
        help="wall time, or this process's CPU time (steadier on a shared machine); default %(default)s",
    )
    p.add_argument("--out", type=Path, help="JSON result file (default bench/results/session-<time>.json)")
    args = p.parse_args(argv)
    batches = args.batch or [10, 100, 1000]
    clock = CLOCKS[args.clock]
    # The map-shaped variant needs the core's row-text table (version 2 of the stored
    # form); against an older core the script still measures the rest.
    with_map = hasattr(sm, "_Table")

    records = build_stream(
        messages=args.messages,
        rows=args.rows,
        snapshot_every=args.snapshot_every,
        site_type=args.site_type,
        seed=args.seed,
    )
    values = [r.value for r in records]
    assert all(v is not None for v in values)
    snapshots = sum(1 for v in values if b'"kind":"snapshot"' in v)  # type: ignore[operator]
    total_bytes = sum(len(v) for v in values)  # type: ignore[arg-type]
    form, _, _ = stored_form()

    # Same answer first: a fast wrong core is no result.
    expect = naive(values)  # type: ignore[arg-type]
    for b in batches:
        state, _ = core(records, b)
        if dict(state.table) != expect or state.status != "ended" or state.applied != len(records):
            raise SystemExit(f"batch {b}: the core's final state differs from the naive loop's table")
        mapped, _ = core_map(records, b) if with_map else (state, 0)
        if dict(mapped.table) != expect or mapped.applied != len(records):
            raise SystemExit(f"batch {b}: the map-shaped core's final state differs from the naive loop's table")

    print(
        f"one {args.site_type} session: {len(records)} records ({snapshots} snapshots of ~{args.rows} rows, "
        f"{total_bytes / len(records):.0f} bytes/record on average), policy {POLICY}, state stored as {form!r}; "
        f"{args.repeats} interleaved rounds, {args.clock} clock",
        flush=True,
    )
    runs: dict[int, list[dict]] = {b: [] for b in batches}
    for round_ in range(args.repeats):
        for b in batches:
            t_naive, _ = timed(clock, naive, values)
            t_core, (_, size) = timed(clock, core, records, b)  # type: ignore[misc]
            run = {
                "naive_rps": len(records) / t_naive,
                "core_rps": len(records) / t_core,
                "ratio": t_naive / t_core,
                "max_state_bytes": size,
            }
            if with_map:
                t_map, (_, calls) = timed(clock, core_map, records, b)  # type: ignore[misc]
                run |= {"map_rps": len(records) / t_map, "map_ratio": t_naive / t_map, "map_state_ops_per_batch": calls}
            runs[b].append(run)
        print(f"  round {round_ + 1}/{args.repeats} done", flush=True)

    results = []
    print(
        f"{'batch':>6} {'naive rec/s':>12} {'core rec/s':>11} {'ratio':>6} {'ratio min-max':>14} {'state B':>8}"
        f" | {'map rec/s':>10} {'ratio':>6} {'map ops/batch':>13}"
    )
    for b in batches:
        rs = runs[b]
        row = {
            "batch": b,
            "naive_rps": statistics.median(r["naive_rps"] for r in rs),
            "core_rps": statistics.median(r["core_rps"] for r in rs),
            "ratio": statistics.median(r["ratio"] for r in rs),
            "ratio_min": min(r["ratio"] for r in rs),
            "ratio_max": max(r["ratio"] for r in rs),
            "max_state_bytes": rs[0]["max_state_bytes"],
            "blob_state_ops_per_batch": 2,
            "map_rps": statistics.median(r["map_rps"] for r in rs) if with_map else None,
            "map_ratio": statistics.median(r["map_ratio"] for r in rs) if with_map else None,
            "map_state_ops_per_batch": rs[0]["map_state_ops_per_batch"] if with_map else None,
            "runs": rs,
        }
        results.append(row)
        print(
            f"{b:>6} {row['naive_rps']:>12,.0f} {row['core_rps']:>11,.0f} {row['ratio']:>6.2f} "
            f"{row['ratio_min']:>6.2f}-{row['ratio_max']:<7.2f} {row['max_state_bytes']:>8,}"
            + (
                f" | {row['map_rps']:>10,.0f} {row['map_ratio']:>6.2f} {row['map_state_ops_per_batch']:>13.1f}"
                if with_map
                else " | (no map-shaped variant for this core)"
            )
        )

    stamp = time.strftime("%Y%m%d-%H%M%S")
    report = {
        "shape": SHAPE,
        "benchmark": "session-core",
        "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "machine": platform.machine(),
        "stream": {
            "records": len(records),
            "rows": args.rows,
            "snapshot_every": args.snapshot_every,
            "snapshots": snapshots,
            "site_type": args.site_type,
            "bytes": total_bytes,
            "seed": args.seed,
        },
        "policy": POLICY,
        "state_form": form,
        "clock": args.clock,
        "repeats": args.repeats,
        "results": results,
    }
    out = args.out or RESULTS / f"session-{stamp}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
