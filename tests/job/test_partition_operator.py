"""The operator keyed by Kafka partition (``applyInPandasWithState-by-partition``) against the
per-session one, without Spark: for the same rows, each session's state and outputs are what
``apply_records`` gives that session alone, and an idle session expires in the batch where its
own timeout would have fired (Spark times a group out once its timeout is before the batch's
time). The streaming comparison, on Kafka and the cluster, is ``test_partition_operator_kafka.py``."""

from __future__ import annotations

import random

import pytest

from job.engine.errors import IntegrityError
from job.spark.checkpoints import decode_partition_sessions as _decode_sessions
from job.spark.pipeline import apply_records, expire_columns, step_partition
from producers.contract import encode
from tests.streams import base_session, message

IDLE = 1000


def _rows(sessions: dict[str, list], *, partition: int = 3, start: int = 0) -> list[tuple]:
    """Operator input tuples (the order of pipeline._INPUT) of several sessions' messages
    interleaved in one partition, offsets from ``start``, the list then shuffled as a shuffle
    hands a group over."""
    queues = {key: list(messages) for key, messages in sessions.items()}
    rows, offset, pick = [], start, random.Random(5)
    while any(queues.values()):
        key = pick.choice([k for k, q in queues.items() if q])
        m = queues[key].pop(0)
        rows.append(("t", partition, offset, False, key, encode(m), 1000 + offset))
        offset += 1
    pick.shuffle(rows)
    return rows


def _by_session(columns: dict[str, list]) -> dict[str, list[tuple]]:
    """The output rows of each session (the union schema's ``session`` column), as sorted tuples."""
    rows = list(zip(*columns.values()))
    index = list(columns).index("session")
    out: dict[str, list[tuple]] = {}
    for row in rows:
        out.setdefault(row[index], []).append(row)
    return {k: sorted(v, key=repr) for k, v in out.items()}


@pytest.mark.parametrize("policy", ["resync", "window", "none"])
def test_each_session_of_a_partition_gets_the_state_and_outputs_it_gets_alone(policy):
    a = base_session(lambda *x, **k: message(*x, session="fleet-2-s0001", **k))
    b = base_session(lambda *x, **k: message(*x, session="fleet-2-s0002", **k))
    b = [b[0], b[2], b[1], *b[3:]]  # out of seq order: the policies differ on it
    rows = _rows({"fleet-2-s0001": a[:4], "fleet-2-s0002": b[:4]})
    stored, columns, timeout = step_partition(None, rows, policy=policy, window=8, now_ms=50, idle_timeout_ms=IDLE)
    kept = _decode_sessions(stored)
    assert sorted(kept) == ["fleet-2-s0001", "fleet-2-s0002"]
    for session in kept:
        state, alone = apply_records(None, [r for r in rows if r[4] == session], policy=policy, window=8, now_ms=50)
        assert kept[session] == [state, 50]
        assert _by_session(columns)[session] == _by_session(alone)[session]
    assert set(_by_session(columns)) == set(kept), "the output holds a session the partition does not"
    assert timeout == IDLE  # both had records at 50: the first to go idle does so at 50 + IDLE

    # the next batch: only one session has records; the other keeps its state untouched
    later = _rows({"fleet-2-s0001": a[4:]}, start=100)
    stored2, columns2, _ = step_partition(stored, later, policy=policy, window=8, now_ms=60, idle_timeout_ms=IDLE)
    kept2 = _decode_sessions(stored2)
    state_a, alone_a = apply_records(kept["fleet-2-s0001"][0], later, policy=policy, window=8, now_ms=60)
    assert kept2["fleet-2-s0001"] == [state_a, 60] and kept2["fleet-2-s0002"] == kept["fleet-2-s0002"]
    assert _by_session(columns2) == _by_session(alone_a)


def test_under_strict_a_gap_in_one_session_stops_the_partition_with_the_error_that_session_raises_alone():
    a = base_session(lambda *x, **k: message(*x, session="fleet-2-s0001", **k))[:4]
    b = base_session(lambda *x, **k: message(*x, session="fleet-2-s0002", **k))
    rows = _rows({"fleet-2-s0001": a, "fleet-2-s0002": [b[0], b[2]]})
    with pytest.raises(IntegrityError) as alone:
        apply_records(None, [r for r in rows if r[4] == "fleet-2-s0002"], policy="strict", window=8, now_ms=1)
    with pytest.raises(IntegrityError) as together:
        step_partition(None, rows, policy="strict", window=8, now_ms=1, idle_timeout_ms=IDLE)
    assert str(together.value) == str(alone.value)


def test_an_idle_session_expires_in_the_batch_its_own_timeout_would_fire_and_not_before():
    a = base_session(lambda *x, **k: message(*x, session="fleet-2-s0001", **k))[:3]
    b = base_session(lambda *x, **k: message(*x, session="fleet-2-s0002", **k))[:3]
    stored, _, _ = step_partition(None, _rows({"fleet-2-s0001": a}), policy="window", window=8, now_ms=0, idle_timeout_ms=IDLE)
    stored, _, timeout = step_partition(
        stored, _rows({"fleet-2-s0002": b}, start=10), policy="window", window=8, now_ms=500, idle_timeout_ms=IDLE
    )
    assert timeout == IDLE - 500  # a, idle since 0, goes first: Spark's timeout then sits at 0 + IDLE
    before = _decode_sessions(stored)

    # at exactly 0 + IDLE a per-session timeout (at 0 + IDLE) has not fired: it fires when it is before the batch's time
    same, columns, timeout = step_partition(stored, [], policy="window", window=8, now_ms=IDLE, idle_timeout_ms=IDLE)
    assert same == stored and columns is None and timeout == 1  # Spark wants a positive duration

    after, columns, timeout = step_partition(stored, [], policy="window", window=8, now_ms=IDLE + 1, idle_timeout_ms=IDLE)
    assert sorted(_decode_sessions(after)) == ["fleet-2-s0002"]
    assert columns == expire_columns(before["fleet-2-s0001"][0], now_ms=IDLE + 1)
    assert timeout == 500 + IDLE - (IDLE + 1)

    gone, columns, timeout = step_partition(after, [], policy="window", window=8, now_ms=500 + IDLE + 1, idle_timeout_ms=IDLE)
    assert gone is None and timeout is None
    assert columns == expire_columns(before["fleet-2-s0002"][0], now_ms=500 + IDLE + 1)


def test_without_idle_expiry_no_session_expires_and_no_timeout_is_set():
    a = base_session(lambda *x, **k: message(*x, session="fleet-2-s0001", **k))[:3]
    stored, _, timeout = step_partition(
        None, _rows({"fleet-2-s0001": a}), policy="resync", window=8, now_ms=0, idle_timeout_ms=None
    )
    assert timeout is None
    kept, columns, timeout = step_partition(stored, [], policy="resync", window=8, now_ms=10**9, idle_timeout_ms=None)
    assert kept == stored and columns is None and timeout is None
