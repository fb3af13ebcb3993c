"""Sessions: snapshot first, updates, periodic snapshots, end; deterministic from the seed."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers.contract import Kind, Message, decode
from producers.errors import RunConfigError
from producers.sessions import SessionDriver, SessionPlan, session_id
from producers.sites import Site


def run_session(site: Site, plan: SessionPlan, clock: Callable[[], float], ordinal: int = 0, seed: int = 7) -> list[Message]:
    d = SessionDriver(site, ordinal=ordinal, plan=plan, seed=seed, run_id="rtest", clock=clock)
    out = []
    while not d.done:
        out += [t.message for t in d.step()]
    return out


def replay(messages: list[Message]) -> dict[str, dict]:
    table: dict[str, dict] = {}
    for m in messages:
        if m.kind is Kind.SNAPSHOT:
            table = {r["id"]: r for r in m.rows or ()}
        elif m.kind is Kind.UPSERT:
            assert m.row is not None
            table[m.row["id"]] = m.row  # type: ignore[index]
        elif m.kind is Kind.DELETE:
            del table[m.row_id]  # type: ignore[arg-type]
    return table


def test_a_session_opens_with_a_snapshot_counts_seq_and_ends(step_clock) -> None:
    site = Site("weather-1", "weather", seed=7)
    opening = dict(site.table)
    msgs = run_session(site, SessionPlan(length=450, snapshot_every=200), step_clock())
    assert [m.seq for m in msgs] == list(range(451))
    assert msgs[0].kind is Kind.SNAPSHOT and {r["id"]: r for r in msgs[0].rows} == opening
    assert [m.seq for m in msgs if m.kind is Kind.SNAPSHOT] == [0, 200, 400]
    assert msgs[-1].kind is Kind.END and all(m.kind is not Kind.END for m in msgs[:-1])
    assert {m.session for m in msgs} == {"weather-1-rtest-s0000"}
    assert all(m.epoch == 0 and m.site == "weather-1" for m in msgs)
    kinds = {m.kind for m in msgs}
    assert {Kind.UPSERT, Kind.DELETE} <= kinds


def test_every_snapshot_equals_the_replay_of_what_came_before(step_clock) -> None:
    site = Site("fleet-2", "fleet", seed=1)
    msgs = run_session(site, SessionPlan(length=600, snapshot_every=100), step_clock())
    for i, m in enumerate(msgs):
        if m.kind is Kind.SNAPSHOT and i:
            assert {r["id"]: r for r in m.rows} == replay(msgs[:i])
    assert replay(msgs) == site.table  # the producer's truth is what the messages say


def test_the_table_band_holds_and_every_message_is_valid_on_the_wire(step_clock) -> None:
    site = Site("warehouse-0", "warehouse", seed=5, rows=40)
    d = SessionDriver(site, ordinal=0, plan=SessionPlan(length=2000, snapshot_every=500), seed=5, clock=step_clock())
    while not d.done:
        for t in d.step():
            assert t.fault is None
            assert decode(t.value) == t.message
            assert site.min_rows <= len(site.table) <= site.max_rows


def test_a_time_based_snapshot_comes_when_the_interval_passes(step_clock) -> None:
    # Each clock read advances 10 ms; one read per message, so 1 s is about 100 messages.
    msgs = run_session(
        Site("fleet-2", "fleet", seed=1),
        SessionPlan(length=300, snapshot_every=1000, snapshot_interval_s=1.0),
        step_clock(step=0.01),
    )
    snaps = [m.seq for m in msgs if m.kind is Kind.SNAPSHOT]
    assert snaps[0] == 0 and len(snaps) == 3
    assert all(90 <= b - a <= 110 for a, b in zip(snaps, snaps[1:], strict=False))


def test_the_same_seed_gives_the_same_messages(step_clock) -> None:
    a = run_session(Site("fleet-2", "fleet", seed=9), SessionPlan(length=300), step_clock())
    b = run_session(Site("fleet-2", "fleet", seed=9), SessionPlan(length=300), step_clock())
    c = run_session(Site("fleet-2", "fleet", seed=10), SessionPlan(length=300), step_clock())
    assert a == b
    assert a != c


def test_consecutive_sessions_continue_the_sites_table(step_clock) -> None:
    site = Site("weather-1", "weather", seed=2)
    clock = step_clock()
    first = run_session(site, SessionPlan(length=100), clock, ordinal=0)
    second = run_session(site, SessionPlan(length=100), clock, ordinal=1)
    assert {r["id"]: r for r in second[0].rows} == replay(first)
    assert first[0].session != second[0].session == "weather-1-rtest-s0001"


def test_session_ids_embed_site_run_and_ordinal() -> None:
    assert session_id("fleet-2", 3) == "fleet-2-s0003"
    assert session_id("fleet-2", 3, "r1a2b3c") == "fleet-2-r1a2b3c-s0003"


@settings(max_examples=25, deadline=None)
@given(length=st.integers(1, 300), every=st.integers(1, 120))
def test_snapshots_fall_exactly_every_n_messages(length: int, every: int) -> None:
    from itertools import count

    c = count()
    msgs = run_session(
        Site("fleet-2", "fleet", seed=0, rows=5),
        SessionPlan(length=length, snapshot_every=every),
        lambda: 1e9 + next(c),
    )
    assert [m.seq for m in msgs if m.kind is Kind.SNAPSHOT] == list(range(0, length, every))
    assert len(msgs) == length + 1


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"length": 0}, "session length"),
        ({"snapshot_every": 0}, "snapshot_every"),
        ({"snapshot_interval_s": 0}, "snapshot_interval_s"),
    ],
)
def test_a_bad_plan_is_refused_naming_the_setting(kwargs: dict, words: str) -> None:
    with pytest.raises(RunConfigError, match=words):
        SessionPlan(**kwargs)
