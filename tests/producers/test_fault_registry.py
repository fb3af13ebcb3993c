"""Faults: the registry, the spec syntax, and what each fault does to the stream, exactly."""

from __future__ import annotations

import ast
import dataclasses
import itertools
import json
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers.contract import DEFAULT_MAX_BYTES, ContractError, Kind, Message, decode, encode
from producers.errors import FaultSpecError
from producers.faults import (
    FAULT_NAMES,
    FAULTS,
    Anomaly,
    Drop,
    Fault,
    Reorder,
    Target,
    Transmission,
    parse_fault,
)
from producers.sessions import SessionDriver, SessionPlan
from producers.sites import Site
from tests.producers.fault_literals import DAMAGING

ISSUE_FAULTS = {
    "drop",
    "duplicate",
    "reorder",
    "corrupt",
    "schema-drift",
    "orphan-update",
    "epoch-reset",
    "silent-divergence",
    "oversized",
    "clock-skew",
    "crash",
    "burst",
}


def run(
    faults: list[Fault] | list[str],
    *,
    length: int = 300,
    every: int = 100,
    seed: int = 7,
    ordinal: int = 0,
    site: tuple[str, str] = ("warehouse-0", "warehouse"),
) -> tuple[list[Transmission], SessionDriver]:
    parsed = [parse_fault(f) if isinstance(f, str) else f for f in faults]
    clock = itertools.count()
    d = SessionDriver(
        Site(site[0], site[1], seed=seed, rows=60),  # type: ignore[arg-type]
        ordinal=ordinal,
        plan=SessionPlan(length=length, snapshot_every=every),
        faults=parsed,
        seed=seed,
        clock=lambda: 1.7e9 + next(clock) * 0.001,
    )
    out: list[Transmission] = []
    while not d.done:
        out += d.step()
    return out, d


def intended(length: int = 300, **kw) -> list[Message]:
    return [t.message for t in run([], length=length, **kw)[0]]


def faulted(txs: list[Transmission], name: str) -> list[Transmission]:
    return [t for t in txs if t.fault == name]


def untouched(txs: list[Transmission]) -> bool:
    return all(t.value == encode(t.message) for t in txs if t.fault is None)


# -- registry and spec syntax -------------------------------------------------------------


def test_the_registry_holds_every_fault_the_issue_names_with_its_documentation() -> None:
    assert set(FAULTS) == ISSUE_FAULTS == set(FAULT_NAMES)
    for name, cls in FAULTS.items():
        info = cls.info
        assert info.name == name
        assert info.does and info.damage and info.must
        assert info.damage in (cls.__doc__ or "") and info.must in (cls.__doc__ or "")
        assert all(isinstance(a, Anomaly) for a in info.allowed)
        assert info.kinds


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("drop:0.01", Drop(probability=0.01)),
        ("reorder:0.02:k=4", Reorder(probability=0.02, k=4)),
        ("reorder:k=4:p=0.5", Reorder(probability=0.5, k=4)),
        (
            "crash:sites=fleet-2,weather-1:sessions=1:at=120",
            FAULTS["crash"](
                probability=1.0,
                target=Target(sites=frozenset({"fleet-2", "weather-1"}), sessions=frozenset({1}), at=120),
            ),
        ),
        ("orphan-update:sessions=0", FAULTS["orphan-update"](probability=1.0, target=Target(sessions=frozenset({0})))),
        ("corrupt:0.1:variant=truncate", FAULTS["corrupt"](probability=0.1, variant="truncate")),
        ("clock-skew:0.1:skew-ms=5000", FAULTS["clock-skew"](probability=0.1, skew_ms=5000)),
        ("drop:0.01:after=100", Drop(probability=0.01, target=Target(after=100))),
    ],
)
def test_fault_specs_parse_into_fault_dataclasses(text: str, expected: Fault) -> None:
    assert parse_fault(text) == expected


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("bogus:0.1", ["no fault is named 'bogus'", "drop, duplicate"]),
        ("drop", ["no probability", "drop:0.01", "drop:at=40"]),
        ("drop:1.5", ["outside [0, 1]"]),
        ("drop:lots", ["probability='lots'", "number"]),
        ("drop:0.1:0.2", ["second probability"]),
        ("drop:0.1:k=3", ["'k' is not a setting of drop", "sites, sessions, at"]),
        ("reorder:0.1:k=0", ["k=0 must be >= 1"]),
        ("reorder:0.1:k=two", ["k='two'", "integer"]),
        ("corrupt:0.1:variant=melt", ["variant='melt'", "truncate, invalid-json, wrong-type"]),
        ("schema-drift:0.1:variant=x", ["unknown-field, missing-field, future-version"]),
        ("oversized:0.1:size=10", ["size=10", "over the contract limit"]),
        ("burst:0.1:size=0", ["size=0"]),
        ("drop:at=-1", ["negative"]),
        ("orphan-update:at=3", ["at= does not apply"]),
        ("orphan-update:0.3:after=3", ["after=3 does not apply", "sessions="]),
        ("drop:0.1:after=-2", ["after=-2", ">= 0"]),
        ("orphan-update", ["orphan-update:sessions=0"]),
        ("drop::0.1", ["empty part"]),
    ],
)
def test_bad_fault_specs_are_refused_naming_the_problem_and_the_fix(text: str, words: list[str]) -> None:
    with pytest.raises(FaultSpecError) as exc:
        parse_fault(text)
    for word in words:
        assert word in str(exc.value), f"{word!r} not in {exc.value}"


@given(
    name=st.sampled_from(FAULT_NAMES),
    p=st.floats(0, 1),
    sites=st.none() | st.frozensets(st.sampled_from(["fleet-2", "weather-1"]), min_size=1),
    sessions=st.none() | st.frozensets(st.integers(0, 9), min_size=1),
    after=st.none() | st.integers(0, 500),
)
def test_a_faults_spec_parses_back_to_the_same_fault(name: str, p: float, sites, sessions, after) -> None:
    if FAULTS[name].info.stage == "session":
        after = None  # a session fault hits the opening; after= is refused for it
    fault = FAULTS[name](probability=p, target=Target(sites=sites, sessions=sessions, after=after))  # type: ignore[index]
    assert parse_fault(fault.spec()) == fault


# -- what each fault does ---------------------------------------------------------------


def test_after_keeps_a_session_s_first_messages_clean_and_hits_from_there() -> None:
    txs, _ = run(["drop:1.0:after=4"])
    hit = [t.message.seq for t in faulted(txs, "drop")]
    assert hit and min(hit) == 4, hit  # every message from index 4 on, none before


def test_drop_withholds_exactly_the_chosen_message() -> None:
    txs, _ = run(["drop:at=5"])
    assert [t.message for t in txs] == intended()
    [hit] = faulted(txs, "drop")
    assert hit.message.seq == 5 and hit.value is None
    assert untouched(txs) and sum(t.value is None for t in txs) == 1


def test_drop_probability_is_per_message_and_reproducible() -> None:
    txs, _ = run(["drop:0.1"], length=3000, every=1000)
    again, _ = run(["drop:0.1"], length=3000, every=1000)
    hits = [t.message.seq for t in faulted(txs, "drop")]
    assert 240 <= len(hits) <= 360  # 3001 eligible messages at p=0.1 (a fixed draw, not flaky)
    assert hits == [t.message.seq for t in faulted(again, "drop")]


def test_a_fault_listed_later_never_moves_an_earlier_faults_hits() -> None:
    alone = [t.message.seq for t in faulted(run(["drop:0.05"], length=1000)[0], "drop")]
    both, _ = run(["drop:0.05", "corrupt:0.05"], length=1000)
    assert [t.message.seq for t in faulted(both, "drop")] == alone
    assert faulted(both, "corrupt")


def test_duplicate_sends_the_same_bytes_twice_in_a_row_and_marks_the_copy() -> None:
    txs, _ = run(["duplicate:at=7"])
    i = next(i for i, t in enumerate(txs) if t.fault == "duplicate")
    original, copy = txs[i - 1], txs[i]
    assert original.message == copy.message and original.message.seq == 7
    assert original.value == copy.value == encode(original.message)
    assert original.fault is None
    assert len(txs) == len(intended()) + 1


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), k=st.integers(1, 6), at=st.integers(1, 80))
def test_reorder_swaps_a_message_with_one_at_most_k_later(seed: int, k: int, at: int) -> None:
    txs, _ = run([f"reorder:at={at}:k={k}"], length=100, seed=seed)
    want = [(m.epoch, m.seq) for m in intended(length=100, seed=seed)]
    got = [(t.message.epoch, t.message.seq) for t in txs]
    moved = faulted(txs, "reorder")
    assert len(moved) == 2
    later = next(t for t in moved if t.detail["moved"] == "later")
    earlier = next(t for t in moved if t.detail["moved"] == "earlier")
    d = later.detail["distance"]
    assert 1 <= d <= k and later.message.seq == at and earlier.message.seq == at + d
    assert later.detail["partner_seq"] == at + d and earlier.detail["partner_seq"] == at
    swapped = list(want)
    swapped[at], swapped[at + d] = swapped[at + d], swapped[at]
    assert got == swapped
    assert all(t.value == encode(t.message) for t in txs)  # reorder changes order, never bytes


def test_reorder_is_cut_short_by_the_end_and_skipped_without_a_partner() -> None:
    txs, _ = run(["reorder:at=99:k=5"], length=101, every=1000)
    got = [t.message.seq for t in txs]
    assert got[-3:] == [100, 99, 101]  # partner 100 is the last before `end` (seq 101)
    assert faulted(txs, "reorder")[0].detail["distance"] == 1
    txs, _ = run(["reorder:at=100:k=5"], length=101, every=1000)
    assert [t.message.seq for t in txs] == list(range(102)) and not faulted(txs, "reorder")


CORRUPT_REASONS = {
    "truncate": {"invalid-json", "not-utf8"},
    "invalid-json": {"invalid-json"},
    "wrong-type": {"wrong-type"},
}


@pytest.mark.parametrize("variant", sorted(CORRUPT_REASONS))
def test_corrupt_sends_bytes_the_parser_rejects_for_the_documented_reason(variant: str) -> None:
    txs, _ = run([f"corrupt:1.0:variant={variant}"], length=60, every=20)
    assert len(txs) == 61 and all(t.fault == "corrupt" for t in txs)
    for t in txs:
        with pytest.raises(ContractError) as exc:
            decode(t.value)
        assert exc.value.reason in CORRUPT_REASONS[variant]
        assert exc.value.reason == t.detail["reason"]
        if variant == "truncate":
            assert encode(t.message).startswith(t.value) and len(t.value) < len(encode(t.message))
        if variant == "wrong-type":
            assert t.detail["field"] in exc.value.detail


DRIFT_REASONS = {
    "unknown-field": "unknown-field",
    "missing-field": "missing-field",
    "future-version": "unsupported-version",
}


@pytest.mark.parametrize("variant", sorted(DRIFT_REASONS))
def test_schema_drift_sends_valid_json_the_v1_contract_rejects(variant: str) -> None:
    txs, _ = run([f"schema-drift:1.0:variant={variant}"], length=60, every=20)
    for t in txs:
        json.loads(t.value)  # well-formed JSON, only the schema is wrong
        with pytest.raises(ContractError) as exc:
            decode(t.value)
        assert exc.value.reason == DRIFT_REASONS[variant] == t.detail["reason"]


def test_orphan_update_withholds_the_opening_snapshot_of_the_chosen_sessions_only() -> None:
    hit, _ = run(["orphan-update:sessions=1"], ordinal=1)
    miss, _ = run(["orphan-update:sessions=1"], ordinal=0)
    assert hit[0].message.kind is Kind.SNAPSHOT and hit[0].message.seq == 0
    assert hit[0].value is None and hit[0].fault == "orphan-update"
    assert [t.fault for t in hit[1:]] == [None] * (len(hit) - 1)
    assert not faulted(miss, "orphan-update")


def test_epoch_reset_restarts_seq_at_zero_with_a_snapshot_in_the_next_epoch() -> None:
    txs, d = run(["epoch-reset:at=50"], length=120)
    msgs = [t.message for t in txs]
    assert [(m.epoch, m.seq) for m in msgs] == [(0, s) for s in range(50)] + [(1, s) for s in range(71)]
    restart = msgs[50]
    assert restart.kind is Kind.SNAPSHOT and txs[50].fault == "epoch-reset"
    assert txs[50].detail == {"previous_epoch": 0, "previous_last_seq": 49}
    table: dict = {}
    for m in msgs[:50]:
        if m.kind is Kind.SNAPSHOT:
            table = {r["id"]: r for r in m.rows}
        elif m.kind is Kind.UPSERT:
            table[m.row["id"]] = m.row
        elif m.kind is Kind.DELETE:
            del table[m.row_id]
    assert {r["id"]: r for r in restart.rows} == table
    assert msgs[-1].kind is Kind.END and len(msgs) == 121


def test_silent_divergence_changes_one_column_of_an_upsert_and_nothing_else() -> None:
    txs, _ = run(["silent-divergence:1.0"], length=200)
    hits = faulted(txs, "silent-divergence")
    assert hits and all(t.message.kind is Kind.UPSERT for t in hits)
    for t in hits:
        sent = decode(t.value)  # valid on the wire, sequence intact
        assert dataclasses.replace(sent, row=t.message.row) == t.message
        diff = {c for c in t.message.row if t.message.row[c] != sent.row[c]}
        assert diff == {t.detail["column"]}
        assert sent.row[t.detail["column"]] == t.detail["sent"] != t.detail["intended"] == t.message.row[t.detail["column"]]
    assert all(t.fault is None for t in txs if t.message.kind is not Kind.UPSERT)


@pytest.mark.parametrize("at", [0, 3])
def test_oversized_grows_a_record_past_the_limit_and_keeps_it_valid_otherwise(at: int) -> None:
    txs, _ = run([f"oversized:at={at}:size=1200000"])
    [t] = faulted(txs, "oversized")
    assert t.message.seq == at and len(t.value) >= 1_200_000
    with pytest.raises(ContractError) as exc:
        decode(t.value)
    assert exc.value.reason == "too-large" == t.detail["reason"]
    big = decode(t.value, max_bytes=10**7)
    rows_sent = big.rows or (big.row,)
    rows_meant = t.message.rows or (t.message.row,)
    assert [r["id"] for r in rows_sent] == [r["id"] for r in rows_meant]
    col, rid = t.detail["column"], t.detail["row_id"]
    padded = next(r for r in rows_sent if r["id"] == rid)
    assert padded[col].startswith(next(r for r in rows_meant if r["id"] == rid)[col])


def test_clock_skew_moves_only_the_event_time() -> None:
    txs, _ = run(["clock-skew:0.2"], length=200)
    hits = faulted(txs, "clock-skew")
    assert hits
    for t in hits:
        skew = t.detail["skew_ms"]
        assert 60_000 <= abs(skew) <= 3_600_000
        assert decode(t.value) == dataclasses.replace(t.message, ts=t.message.ts + skew)
    fixed, _ = run(["clock-skew:at=4:skew_ms=-5000"])
    [t] = faulted(fixed, "clock-skew")
    assert decode(t.value).ts == t.message.ts - 5000


def test_crash_stops_the_session_without_sending_end() -> None:
    txs, d = run(["crash:at=40"])
    assert d.done
    assert [t.message.seq for t in txs] == list(range(41))
    last = txs[-1]
    assert last.message.kind is Kind.END and last.message.seq == 40
    assert last.value is None and last.fault == "crash"
    assert all(t.value is not None for t in txs[:-1])


def test_burst_makes_the_next_size_messages_urgent() -> None:
    clock = itertools.count()
    d = SessionDriver(
        Site("fleet-2", "fleet", seed=1, rows=20),
        ordinal=0,
        plan=SessionPlan(length=100),
        faults=[parse_fault("burst:at=10:size=20")],
        seed=1,
        clock=lambda: 1.7e9 + next(clock),
    )
    urgent = []
    while not d.done:
        txs = d.step()
        urgent.append((txs[0].message.seq, d.urgent, txs[0].fault))
    assert [seq for seq, u, _ in urgent if u] == list(range(10, 29))  # 20 messages: 10 plus 19 more
    assert [(seq, f) for seq, _, f in urgent if f] == [(10, "burst")]


def test_faults_aimed_at_a_site_or_session_hit_nothing_else() -> None:
    aimed = ["drop:0.5:sites=fleet-2", "corrupt:0.5:sessions=3"]
    assert not [t for t in run(aimed)[0] if t.fault]
    assert faulted(run(aimed, site=("fleet-2", "fleet"))[0], "drop")
    assert faulted(run(aimed, ordinal=3)[0], "corrupt")


ALL_TRANSMISSION = [
    "drop:0.03",
    "duplicate:0.03",
    "reorder:0.03",
    "corrupt:0.03",
    "schema-drift:0.03",
    "silent-divergence:0.03",
    "clock-skew:0.03",
    "oversized:0.005",
]


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000))
def test_with_every_fault_each_intended_message_appears_once_plus_duplicate_copies(seed: int) -> None:
    txs, _ = run(ALL_TRANSMISSION + ["epoch-reset:0.01", "burst:0.01:size=5"], length=400, seed=seed)
    seen = Counter((t.message.epoch, t.message.seq) for t in txs)
    copies = Counter((t.message.epoch, t.message.seq) for t in faulted(txs, "duplicate"))
    for key, n in seen.items():
        assert n == 1 + copies[key]
    assert untouched(txs)
    # the intended stream is whole: each epoch counts 0..n without holes
    by_epoch: dict[int, list[int]] = {}
    for e, s in sorted(seen):
        by_epoch.setdefault(e, []).append(s)
    assert all(seqs == list(range(len(seqs))) for seqs in by_epoch.values())
    for t in txs:
        if t.fault in ("corrupt", "schema-drift", "oversized"):
            with pytest.raises(ContractError):
                decode(t.value, max_bytes=DEFAULT_MAX_BYTES)


# -- one home for the fault names -----------------------------------------------------------

_ROOT = Path(__file__).resolve().parents[2]
_SCANNED = ("producers", "job", "sandbox", "book", "bench", "demo.py", "notebooks")
# A literal that is also a word of another closed vocabulary, in the module that owns it:
# the session core's quarantine reason "duplicate" is not the fault.
_OTHER_VOCABULARY = {"job/engine/session.py": {"duplicate"}}


def _string_literals(source: str) -> list[tuple[int, str]]:
    return [
        (node.lineno, node.value)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
    ]


def _notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text())["cells"]
    lines = []
    for cell in cells:
        if cell["cell_type"] == "code":
            source = "".join(cell["source"])
            # IPython magics and shell escapes are not Python.
            lines += [ln if not ln.lstrip().startswith(("%", "!")) else "" for ln in source.splitlines()]
    return "\n".join(lines)


def _sources() -> list[tuple[str, str]]:
    files: list[Path] = []
    for name in _SCANNED:
        path = _ROOT / name
        if path.is_file():
            files.append(path)
        else:
            files += sorted(path.rglob("*.py")) + sorted(path.glob("*.ipynb"))
    return [(str(p.relative_to(_ROOT)), _notebook_code(p) if p.suffix == ".ipynb" else p.read_text()) for p in files]


def test_no_module_outside_the_registry_names_a_fault_by_a_string() -> None:
    sources = _sources()
    assert any(name == "producers/expected_output.py" for name, _ in sources)  # the scan sees the tree
    assert any(name.endswith(".ipynb") for name, _ in sources)
    names = set(FAULT_NAMES)
    found = [
        f"{name}:{line}: {text!r}"
        for name, source in sources
        if name != "producers/faults.py"
        for line, text in _string_literals(source)
        if text in names and text not in _OTHER_VOCABULARY.get(name, set())
    ]
    assert not found, "name faults through the registry (e.g. Crash.name, STRICT_STOPPING): " + "; ".join(found)


def test_faults_that_damage_the_table_open_windows_to_the_next_snapshot() -> None:
    from producers.faults import (
        BAD_RECORD,
        CLEAN_SNAPSHOT,
        STRICT_STOPPING,
        Burst,
        ClockSkew,
        Corrupt,
        Crash,
        Duplicate,
        EpochReset,
        OrphanUpdate,
        Oversized,
        SchemaDrift,
        SilentDivergence,
    )

    # Written from each fault's definition, not from the registry: these eight damage the table
    # (they send a record the contract rejects, or leave a gap, a duplicate or a divergence), so a
    # strict query stops on them and their loss window runs to the next clean snapshot; the
    # other four leave the table whole (a restated snapshot, a late timestamp, a burst) or end
    # the session (crash).
    damaging = DAMAGING
    assert set(BAD_RECORD) == {"corrupt", "schema-drift", "oversized"}
    assert set(BAD_RECORD | STRICT_STOPPING) == damaging
    assert {n for n, cls in FAULTS.items() if cls.info.window == "to-next-snapshot"} == damaging
    assert set(CLEAN_SNAPSHOT) == {"epoch-reset", "clock-skew", "burst"}
    assert {n: cls.info.window for n, cls in FAULTS.items() if n not in damaging} == {
        "epoch-reset": "message",
        "clock-skew": "message",
        "crash": "to-end",
        "burst": "none",
    }
    classes = (
        Drop,
        Duplicate,
        Reorder,
        Corrupt,
        SchemaDrift,
        OrphanUpdate,
        EpochReset,
        SilentDivergence,
        Oversized,
        ClockSkew,
        Crash,
        Burst,
    )
    assert [c.name for c in classes] == [
        "drop",
        "duplicate",
        "reorder",
        "corrupt",
        "schema-drift",
        "orphan-update",
        "epoch-reset",
        "silent-divergence",
        "oversized",
        "clock-skew",
        "crash",
        "burst",
    ]


def test_every_fault_has_the_apply_step_of_its_stage() -> None:
    for name, cls in FAULTS.items():
        stage = cls.info.stage
        own = {m for m in ("strike", "transmit", "damage") if getattr(cls, m) is not getattr(Fault, m)}
        if stage == "stream":
            assert own == {"strike"}, name
        elif stage == "transmission":
            assert own and own <= {"transmit", "damage"}, name
        else:
            assert not own, name
