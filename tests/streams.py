"""A hand-built session shared by the unit tests of the producers' oracle, the state machine
and the verifier: the same seven messages, so the three are checked against one example."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from producers.contract import Message, encode
from producers.ledger import LedgerEntry

SID = "fleet-2-s0000"

_MAKERS = {"snapshot": Message.snapshot, "upsert": Message.upsert, "delete": Message.delete, "end": Message.end}


def r(rid: str, v: int) -> dict[str, Any]:
    """A row with id ``rid`` and one value column."""
    return {"id": rid, "v": v}


def message(kind: str, seq: int, *, epoch: int = 0, session: str = SID, ts: int | None = None, **payload: Any) -> Message:
    """One message of site ``fleet-2``; event time defaults to ``1000 + seq``."""
    common = {"site": "fleet-2", "session": session, "seq": seq, "epoch": epoch, "ts": 1000 + seq if ts is None else ts}
    return _MAKERS[kind](**common, **payload)


def base_session(msg=message) -> list[Message]:
    """Snapshot, three upserts, a snapshot, a delete, end; built with ``msg``."""
    return [
        msg("snapshot", 0, rows=[r("a", 1), r("b", 1)]),
        msg("upsert", 1, row=r("a", 2)),
        msg("upsert", 2, row=r("b", 2)),
        msg("upsert", 3, row=r("c", 1)),
        msg("snapshot", 4, rows=[r("a", 2), r("b", 2), r("c", 1)]),
        msg("delete", 5, row_id="a"),
        msg("end", 6),
    ]


#: The table ``base_session`` leaves.
FINAL = {"b": r("b", 2), "c": r("c", 1)}


def ledger_entry(
    m: Message,
    send_index: int,
    *,
    topic: str,
    outcome: str = "ok",
    sent: bytes | None = None,
    fault: str | None = None,
    detail: Mapping[str, Any] | None = None,
    offset: int | None = None,
) -> LedgerEntry:
    """The ledger row of ``m`` as the producers would write it (run ``r``); ``offset``
    given means it arrived, in partition 0."""
    return LedgerEntry(
        run_id="r",
        send_index=send_index,
        site=m.site,
        session=m.session,
        topic=topic,
        kind=m.kind.value,
        seq=m.seq,
        epoch=m.epoch,
        ts=m.ts,
        intended=encode(m).decode(),
        sent=sent,
        fault=fault,
        fault_detail=json.dumps(dict(detail or {})) if fault else None,
        outcome=outcome,  # type: ignore[arg-type]
        partition=None if offset is None else 0,
        offset=offset,
    )
