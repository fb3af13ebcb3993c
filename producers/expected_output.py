"""What a correct pipeline must produce, computed from the ledger alone.

:func:`expected_sessions` replays each session's *intended* messages (in ``(epoch, seq)``
order, whatever was actually sent) into the table the producer meant to publish, and
turns every faulted or undelivered ledger row into a :class:`LossWindow`: the range of
one session's messages inside which a correct pipeline may show the anomalies the fault
allows (and nothing else).

Loss-window semantics (the verifier relies on these)
    A window is ``(session, epoch, from_seq, to_seq)``: it covers the messages of that
    session and epoch with ``from_seq <= seq < to_seq``; ``to_seq is None`` means up to
    the end of the epoch. Inside it the anomalies in ``allowed`` may appear; outside every
    window that allows an anomaly, that anomaly is a pipeline bug.

    Faults that damage the table (``drop``, ``duplicate``, ``reorder``, ``corrupt``,
    ``schema-drift``, ``orphan-update``, ``silent-divergence``, ``oversized``, and a
    delivery that ``failed`` or is ``indeterminate``) open a window at the faulted seq
    (for ``reorder``, the lower of the two swapped seqs) that closes at the next *clean
    snapshot* of the same epoch after the faulted seq(s): a snapshot with a ledger row
    whose outcome is ``ok`` and whose fault is none, ``clock-skew``, ``burst`` or
    ``epoch-reset``. That snapshot itself is outside the window and must be applied.
    With no such snapshot the window runs to the end of the epoch; ``restored`` then says
    whether a clean snapshot in a later epoch restores the table anyway.

    The others: ``clock-skew`` covers its one message (``late``), ``epoch-reset`` covers
    seq 0 of the new epoch (``epoch-change``), ``crash`` covers the ``end`` it withheld
    and everything after (``unterminated``); ``burst`` opens no window (nothing may go).

Final tables
    ``final_rows`` is the intended table after the session's last intended message. Rows
    whose final value a correct pipeline may still get wrong (touched inside a window that
    is never restored; all rows if that window starts at seq 0, where the reader has no
    table to start from) are listed in ``uncertain_ids``; every other row must match.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import pandas as pd

from producers.contract import Kind, Message, Row, decode
from producers.faults import CLEAN_SNAPSHOT, FAULTS, Anomaly, Drop, FaultName
from producers.frames import tuples

__all__ = [
    "CLEAN_FAULTS",
    "DELIVERY_ALLOWED",
    "ExpectedSession",
    "LossWindow",
    "WindowCause",
    "apply_message",
    "changes_of",
    "expected_sessions",
    "loss_windows",
]

WindowCause = FaultName | Literal["delivery-failed", "delivery-indeterminate"]

#: What a snapshot's ledger row may say and the snapshot still be a resynchronisation
#: point: no fault, or one the registry marks ``clean_snapshot``.
CLEAN_FAULTS: frozenset[str | None] = frozenset({None, *CLEAN_SNAPSHOT})

#: What an undelivered message allows (an indeterminate one may also have arrived twice,
#: e.g. when a run is restarted and resends; the idempotent producer prevents retries
#: from duplicating within a run).
DELIVERY_ALLOWED: dict[str, frozenset[Anomaly]] = {
    "delivery-failed": Drop.info.allowed,
    "delivery-indeterminate": Drop.info.allowed | {Anomaly.DUPLICATED},
}

Change = tuple[str, str, Row | None]


# -- the oracle's table semantics ------------------------------------------------------------
# The checker replays the wire semantics on its own, on purpose: it shares no code with the
# session core (job/engine/session.py) it checks, since an oracle that reused the core would agree
# with the core's bugs. These two are the only places that apply a message to a table; the
# verifier asks this one (``changes_of``, ``apply_message``) and never keeps a third (it
# reads the job's ``rows`` output back with the core's ``rebuild``, the core's own format).


def changes_of(msg: Message) -> list[Change]:
    """The row changes ``msg`` must write, as ``(op, row_id, row)``, in the ``rows`` output's terms.

    A snapshot writes one ``snapshot`` change per row (an empty one the marker
    ``("snapshot", "", None)``), an upsert its whole row, a delete ``(delete, id, None)``,
    an ``end`` nothing.
    """
    if msg.kind is Kind.SNAPSHOT:
        if not msg.rows:
            return [("snapshot", "", None)]
        return [("snapshot", str(r["id"]), r) for r in msg.rows]
    if msg.kind is Kind.UPSERT:
        assert msg.row is not None
        return [("upsert", str(msg.row["id"]), msg.row)]
    if msg.kind is Kind.DELETE:
        return [("delete", str(msg.row_id), None)]
    return []


def apply_message(table: dict[str, Row], msg: Message) -> dict[str, Row]:
    """The table after ``msg``: a snapshot replaces it, an upsert puts a row, a delete removes one.

    Returns a new dict for a snapshot, else ``table`` itself, changed in place.
    """
    if msg.kind is Kind.SNAPSHOT:
        return {str(r["id"]): r for r in msg.rows or ()}
    for op, rid, row in changes_of(msg):
        if op == "upsert":
            table[rid] = row  # type: ignore[assignment]
        else:
            table.pop(rid, None)
    return table


@dataclass(frozen=True, kw_only=True)
class LossWindow:
    """Where one fault allows anomalies; see the module docstring for the exact semantics."""

    session: str
    epoch: int
    from_seq: int
    to_seq: int | None  # exclusive; None = to the end of the epoch
    fault: WindowCause
    allowed: frozenset[Anomaly]
    send_index: int  # the ledger row that opened the window
    restored: bool  # the table is right again after it (or the fault never damages the table)

    def covers(self, epoch: int, seq: int) -> bool:
        return epoch == self.epoch and seq >= self.from_seq and (self.to_seq is None or seq < self.to_seq)

    def allows(self, anomaly: Anomaly | str, epoch: int, seq: int) -> bool:
        return Anomaly(anomaly) in self.allowed and self.covers(epoch, seq)


@dataclass(frozen=True, kw_only=True)
class ExpectedSession:
    """What a correct pipeline's output must say about one session."""

    session: str
    site: str
    topic: str
    final_rows: Mapping[str, Row]  # id -> row, the intended table at the end
    last_epoch: int
    last_seq: int  # of the last intended message (its `end`, or the `end` a crash withheld)
    ended: bool  # a clean `end` was delivered: the pipeline must close the session
    windows: tuple[LossWindow, ...]
    uncertain_ids: frozenset[str]  # rows whose final value may legitimately differ

    @property
    def exact(self) -> bool:
        """True when every final row must match (no window is left unrestored)."""
        return not self.uncertain_ids

    def allows(self, anomaly: Anomaly | str, epoch: int, seq: int) -> bool:
        """True when some window of this session allows ``anomaly`` at ``(epoch, seq)``."""
        return any(w.allows(anomaly, epoch, seq) for w in self.windows)

    def checked_rows(self) -> dict[str, Row]:
        """``final_rows`` without the uncertain ones: what must match exactly."""
        return {k: v for k, v in self.final_rows.items() if k not in self.uncertain_ids}


def expected_sessions(ledger: pd.DataFrame) -> dict[str, ExpectedSession]:
    """One :class:`ExpectedSession` per session in ``ledger`` (as :func:`read_ledger` returns it)."""
    out: dict[str, ExpectedSession] = {}
    if ledger.empty:
        return out
    for sid, rows in ledger.sort_values("send_index", kind="stable").groupby("session", sort=True):
        out[str(sid)] = _session(str(sid), rows)
    return out


def loss_windows(ledger: pd.DataFrame) -> pd.DataFrame:
    """Every loss window of the ledger as a DataFrame (one row per window).

    Columns: session, epoch, from_seq, to_seq (nullable), fault, allowed (sorted list of
    anomaly names), send_index, restored.
    """
    records = [
        {
            "session": w.session,
            "epoch": w.epoch,
            "from_seq": w.from_seq,
            "to_seq": w.to_seq,
            "fault": w.fault,
            "allowed": sorted(a.value for a in w.allowed),
            "send_index": w.send_index,
            "restored": w.restored,
        }
        for s in expected_sessions(ledger).values()
        for w in s.windows
    ]
    df = pd.DataFrame.from_records(
        records, columns=["session", "epoch", "from_seq", "to_seq", "fault", "allowed", "send_index", "restored"]
    )
    df["to_seq"] = df["to_seq"].astype("Int64")
    return df


def _session(sid: str, rows: pd.DataFrame) -> ExpectedSession:
    """The expectation for session ``sid`` from its ledger rows, in send order."""
    each = tuples(rows)
    intended, clean_snapshots = _intended_messages(each)
    order = sorted(intended)
    table, touched, everyone = _replay(intended, order)
    windows = [w for r in each for w in _windows_of(sid, r, clean_snapshots)]
    first = rows.iloc[0]
    last_epoch, last_seq = order[-1]
    return ExpectedSession(
        session=sid,
        site=str(first["site"]),
        topic=str(first["topic"]),
        final_rows=table,
        last_epoch=last_epoch,
        last_seq=last_seq,
        ended=_ended_cleanly(each, order[-1]),
        windows=tuple(windows),
        uncertain_ids=frozenset(_uncertain(windows, order, touched, everyone)),
    )


def _intended_messages(rows: Sequence[Any]) -> tuple[dict[tuple[int, int], Message], set[tuple[int, int]]]:
    """The intended message of each ``(epoch, seq)``, and the keys of the clean snapshots
    (delivered ``ok``, fault none or clean: resynchronisation points)."""
    # One intended message per (epoch, seq): a duplicate's copy repeats its original.
    intended: dict[tuple[int, int], Message] = {}
    clean_snapshots: set[tuple[int, int]] = set()
    for r in rows:
        key = (int(r.epoch), int(r.seq))
        if key not in intended:
            intended[key] = _intended(r.intended)
        if r.kind == Kind.SNAPSHOT and r.outcome == "ok" and _fault(r.fault) in CLEAN_FAULTS:
            clean_snapshots.add(key)
    return intended, clean_snapshots


def _replay(
    intended: Mapping[tuple[int, int], Message], order: list[tuple[int, int]]
) -> tuple[dict[str, Row], dict[tuple[int, int], set[str]], set[str]]:
    """Apply the intended messages in ``order``: the final table, the row ids each message
    changes, and every row id the session ever had."""
    table: dict[str, Row] = {}
    touched: dict[tuple[int, int], set[str]] = {}
    everyone: set[str] = set()
    for key in order:
        msg = intended[key]
        table = apply_message(table, msg)
        # A snapshot restates rows rather than changing them: it touches none.
        touched[key] = set() if msg.kind is Kind.SNAPSHOT else {rid for _, rid, _ in changes_of(msg)}
        everyone.update(table if msg.kind is Kind.SNAPSHOT else touched[key])
    return table, touched, everyone


def _windows_of(sid: str, r: Any, clean: set[tuple[int, int]]) -> list[LossWindow]:
    """The loss windows ledger row ``r`` opens: its fault's, then its delivery's when that
    failed or is unknown (unless the fault's window already allows all it can cause)."""
    fault = _fault(r.fault)
    epoch, seq, index = int(r.epoch), int(r.seq), int(r.send_index)
    windows: list[LossWindow] = []
    if fault is not None:
        window = _fault_window(sid, r, fault, clean)  # type: ignore[arg-type]
        if window is not None:
            windows.append(window)
    if r.outcome in ("failed", "indeterminate"):
        cause = f"delivery-{r.outcome}"
        # A fault window to the next snapshot that already allows all a lost message
        # can cause covers it; any other (a silent divergence allows wrong values, not
        # a gap) does not, and the delivery's own window opens as well.
        covered = (
            fault is not None
            and FAULTS[fault].info.window == "to-next-snapshot"  # type: ignore[index]
            and DELIVERY_ALLOWED[cause] <= FAULTS[fault].info.allowed  # type: ignore[index]
        )
        if not covered:
            windows.append(
                _to_snapshot(sid, epoch, seq, seq, cause, DELIVERY_ALLOWED[cause], index, clean)  # type: ignore[arg-type]
            )
    return windows


def _fault_window(sid: str, r: Any, fault: FaultName, clean: set[tuple[int, int]]) -> LossWindow | None:
    """The window ``fault`` opens at ledger row ``r``, shaped as the registry says (None: it opens none)."""
    info = FAULTS[fault].info
    epoch, seq, index = int(r.epoch), int(r.seq), int(r.send_index)
    if info.window == "to-next-snapshot":
        lo, hi = FAULTS[fault].span(seq, r.fault_detail)
        return _to_snapshot(sid, epoch, lo, hi, fault, info.allowed, index, clean)
    if info.window in ("message", "to-end"):
        return LossWindow(
            session=sid,
            epoch=epoch,
            from_seq=seq,
            to_seq=seq + 1 if info.window == "message" else None,
            fault=fault,
            allowed=info.allowed,
            send_index=index,
            restored=True,
        )
    return None


def _uncertain(
    windows: list[LossWindow],
    order: list[tuple[int, int]],
    touched: Mapping[tuple[int, int], set[str]],
    everyone: set[str],
) -> set[str]:
    """The rows whose final value may differ: those changed from the start of a window that is
    never restored on (every row when such a window starts at seq 0)."""
    starts = [(w.epoch, w.from_seq) for w in windows if not w.restored]
    if not starts:
        return set()
    if any(seq == 0 for _, seq in starts):
        return set(everyone)  # the reader may never have had a table for this epoch
    # every key from the earliest start on (one pass: a window per deleted record made it quadratic)
    first = min(starts)
    return set().union(*(touched[key] for key in order if key >= first))


def _ended_cleanly(rows: Sequence[Any], last: tuple[int, int]) -> bool:
    """True when the session's last intended message, ``last``, is an ``end`` delivered ``ok``
    without a fault that spoils it."""
    return any(
        r.kind == Kind.END and r.outcome == "ok" and _fault(r.fault) in CLEAN_FAULTS and (int(r.epoch), int(r.seq)) == last
        for r in rows
    )


def _to_snapshot(
    sid: str,
    epoch: int,
    lo: int,
    hi: int,
    cause: WindowCause,
    allowed: frozenset[Anomaly],
    index: int,
    clean: set[tuple[int, int]],
) -> LossWindow:
    closing = min((s for e, s in clean if e == epoch and s > hi), default=None)
    restored = closing is not None or any(e > epoch for e, _ in clean)
    return LossWindow(
        session=sid,
        epoch=epoch,
        from_seq=lo,
        to_seq=closing,
        fault=cause,
        allowed=allowed,
        send_index=index,
        restored=restored,
    )


def _intended(text: str) -> Message:
    # The ledger's intended JSON was written by ``encode``; decode checks it is still v1.
    return decode(text.encode("utf-8"), max_bytes=1 << 40)


def _fault(value: object) -> str | None:
    if value is None or (isinstance(value, float) and value != value):
        return None
    return str(value)
