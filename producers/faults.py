"""Data faults: named, documented damage that the producers do to their own streams.

Each fault is a frozen dataclass registered by name in :data:`FAULTS`. Its
:class:`FaultInfo` says what it does to the stream, what damage that causes, what a
correct pipeline must do about it and which :class:`Anomaly` values the verifier may
then see (``python -m producers faults`` prints all of this).

How a fault is applied
    Every fault has a ``probability`` and a :class:`Target`: ``sites`` (names),
    ``sessions`` (ordinals within a site, 0 = the site's first session) and ``at`` (the
    index of a session's intended message, counted from 0 = the opening snapshot, across
    epochs; when set, only that message is eligible). A *message* fault draws once per
    eligible message; ``orphan-update`` draws once per session.

One fault per message
    Session and stream faults (``orphan-update``, ``epoch-reset``, ``crash``, ``burst``) are
    decided before the message exists and win over transmission faults. Among
    transmission faults the one listed first wins; the reorder partner of an earlier
    message is never faulted otherwise. A ``duplicate`` sends two ledger rows: the
    original (no fault) and the copy (fault ``duplicate``).

Adding a fault
    One registered class: its :class:`FaultInfo` (documentation, window, and the
    properties the verifier derives its sets from: ``stops_strict``, ``clean_snapshot``,
    ``bad_record``) and the apply step of its stage (:meth:`Fault.strike` for a stream
    fault, :meth:`Fault.damage` or :meth:`Fault.transmit` for a transmission fault). Code
    outside this module names a fault through its class (``Crash.name``) or one of the
    derived sets, never by a string (a test scans the tree for that).

Reproducibility
    Each (session, fault) pair draws from its own ``random.Random`` seeded from the run
    seed, the site name, the session ordinal, the fault's name and its place in the list,
    so adding one fault never moves where another lands. What a hit does (the variant, the
    skew, the cut) comes from a generator seeded from the same key and the message index.
"""

from __future__ import annotations

import dataclasses
import json
import random
import textwrap
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, ClassVar, Literal, Protocol, get_args

from producers.contract import DEFAULT_MAX_BYTES, Kind, Message, decode, dump_json, encode
from producers.errors import ContractError, FaultSpecError

__all__ = [
    "BAD_RECORD",
    "CLEAN_SNAPSHOT",
    "FAULTS",
    "FAULT_NAMES",
    "Anomaly",
    "Burst",
    "ClockSkew",
    "Corrupt",
    "Crash",
    "Drop",
    "Duplicate",
    "EpochReset",
    "Fault",
    "FaultInfo",
    "FaultName",
    "OrphanUpdate",
    "Oversized",
    "Reorder",
    "SchemaDrift",
    "SessionFaults",
    "STRICT_STOPPING",
    "SilentDivergence",
    "Target",
    "Transmission",
    "describe_faults",
    "parse_fault",
]


class StruckSession(Protocol):
    """What a stream fault changes in a session (:class:`producers.sessions.SessionScript` is one)."""

    epoch: int
    seq: int

    def restart(self) -> None: ...

    def end_message(self) -> Message: ...


class StruckDriver(Protocol):
    """What a stream fault needs from the driver of the session it strikes
    (:class:`producers.sessions.SessionDriver` is one): its session, its faults, a way to
    end it and a way to start a burst. A protocol, so that this module does not import
    the sessions module that imports it."""

    session: StruckSession
    faults: SessionFaults
    done: bool

    def burst(self, size: int) -> None: ...


class Anomaly(StrEnum):
    """What a verifier may observe when comparing the ledger with the pipeline's output.

    A fault *allows* some of these inside its loss window; any anomaly outside every
    window that allows it is a pipeline bug.
    """

    LOST = "lost"  # a message delivered `ok` has no effect in the output
    QUARANTINED = "quarantined"  # a delivered record was set aside as bad
    DUPLICATED = "duplicated"  # a message was applied more than once
    REORDERED = "reordered"  # messages were applied out of sequence order
    GAP = "gap"  # the session reports a missing sequence number
    ORPHAN = "orphan"  # updates arrived for a session/epoch whose snapshot was never seen
    DIVERGENCE = "divergence"  # a snapshot disagreed with the state built from updates
    WRONG_VALUE = "wrong-value"  # for a while, an output row differs from the intended one
    EPOCH_CHANGE = "epoch-change"  # the session reports a producer restart
    UNTERMINATED = "unterminated"  # the session never received a usable `end`
    LATE = "late"  # event time out of line with its neighbours; may be flagged, never dropped


FaultName = Literal[
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
FAULT_NAMES: tuple[FaultName, ...] = get_args(FaultName)

Stage = Literal["session", "stream", "transmission"]
#: How far the damage of one faulted message reaches (see ``producers.expected_output``):
#: ``to-next-snapshot`` until the next clean snapshot; ``message`` that message only;
#: ``to-end`` from that message to the end of its epoch; ``none`` no window at all.
WindowShape = Literal["to-next-snapshot", "message", "to-end", "none"]

#: The largest record the runner's topics and producer accept (``max.message.bytes``
#: is set a little above this), so an ``oversized`` record reaches the reader.
OVERSIZED_MAX_BYTES = 4_000_000

_ALL_KINDS = frozenset(Kind)
_NOT_END = frozenset({Kind.SNAPSHOT, Kind.UPSERT, Kind.DELETE})
_BAD_RECORD = frozenset({Anomaly.QUARANTINED, Anomaly.GAP, Anomaly.LOST, Anomaly.ORPHAN, Anomaly.UNTERMINATED})


@dataclass(frozen=True, kw_only=True)
class FaultInfo:
    """The documentation of one fault, as data (the registry and the CLI print it)."""

    name: FaultName
    stage: Stage
    kinds: frozenset[Kind]  # which intended messages it can hit
    does: str  # what it does to the stream
    damage: str  # what damage that causes downstream
    must: str  # what a correct pipeline must do
    allowed: frozenset[Anomaly]  # what the verifier may see inside its window
    window: WindowShape
    #: A ``strict`` query fails on it (it leaves a bad record, a gap, a duplicate or a divergence).
    stops_strict: bool = False
    #: A snapshot carrying it still restates the table: it closes loss windows (a resync point).
    clean_snapshot: bool = False
    #: It sends bytes the contract rejects; its ledger detail names the parser's ``reason``.
    bad_record: bool = False

    def text(self) -> str:
        anomalies = ", ".join(sorted(self.allowed)) or "none (nothing may be lost)"
        return f"Does: {self.does}\nDamage: {self.damage}\nA correct pipeline: {self.must}\nAllowed anomalies: {anomalies}."


@dataclass(frozen=True, kw_only=True)
class Target:
    """Where a fault may apply. ``None`` means everywhere."""

    sites: frozenset[str] | None = None
    sessions: frozenset[int] | None = None  # ordinals within a site, from 0
    at: int | None = None  # index of the intended message within the session, from 0
    #: the first index a message may be hit at: the session's messages before it are clean
    #: (a clean stretch, so a ``strict`` job commits a gap-free prefix before its stop)
    after: int | None = None

    def matches(self, site: str, ordinal: int) -> bool:
        return (self.sites is None or site in self.sites) and (self.sessions is None or ordinal in self.sessions)


@dataclass(frozen=True, kw_only=True)
class Fault:
    """Base of every fault: a probability per eligible message (or session) and a target."""

    probability: float
    target: Target = field(default_factory=Target)
    info: ClassVar[FaultInfo]
    #: The registry name (``Drop.name == "drop"``): how code outside this module names a fault.
    name: ClassVar[FaultName]

    def __post_init__(self) -> None:
        if not 0.0 <= self.probability <= 1.0:
            raise FaultSpecError(self.spec(), f"probability {self.probability} is outside [0, 1]", "use e.g. 0.01")
        if self.info.stage == "session" and self.target.at is not None:
            raise FaultSpecError(self.spec(), "at= does not apply, it hits whole sessions", "target with sessions= instead")
        if self.target.at is not None and self.target.at < 0:
            raise FaultSpecError(self.spec(), f"at={self.target.at} is negative", "use a message index >= 0")
        if self.target.after is not None and (self.target.after < 0 or self.info.stage == "session"):
            fix = "target with sessions= instead" if self.info.stage == "session" else "use a message index >= 0"
            raise FaultSpecError(self.spec(), f"after={self.target.after} does not apply here", fix)

    def knobs(self) -> dict[str, Any]:
        """The fault-specific settings (everything but probability and target)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in ("probability", "target")}

    def spec(self) -> str:
        """The command-line form, e.g. ``reorder:0.01:k=3:sites=fleet-2``; ``parse_fault`` reads it back."""
        parts = [self.info.name, repr(float(self.probability))]  # repr: exact round trip
        parts += [f"{k}={v}" for k, v in self.knobs().items() if v is not None]
        t = self.target
        if t.sites is not None:
            parts.append("sites=" + ",".join(sorted(t.sites)))
        if t.sessions is not None:
            parts.append("sessions=" + ",".join(map(str, sorted(t.sessions))))
        if t.at is not None:
            parts.append(f"at={t.at}")
        if t.after is not None:
            parts.append(f"after={t.after}")
        return ":".join(parts)

    # -- the apply steps (each fault class overrides the one of its stage) ----------------

    def strike(self, driver: StruckDriver, index: int) -> tuple[list[Transmission], dict[str, Any]]:
        """A stream fault hits intended message ``index`` of ``driver``'s session, before it is made.

        Returns the transmissions to send first and the ledger detail of the tagged
        message; a fault that ends the session sets ``driver.done`` (no message is made).
        """
        raise AssertionError(f"{self.name} is not a stream fault")  # pragma: no cover

    def transmit(self, faults: SessionFaults, msg: Message, value: bytes, rng: random.Random) -> list[Transmission] | None:
        """A transmission fault hits ``msg`` (encoded as ``value``): what goes out instead.

        ``rng`` decides the details of the hit. None when the fault cannot apply to this
        message (the next hit is tried). The default sends what :meth:`damage` makes.
        """
        done = self.damage(msg, value, rng)
        if done is None:
            return None
        sent, detail = done
        faults.count_hit(self.name)
        return [Transmission(msg, sent, self.name, detail, value)]

    def damage(self, msg: Message, value: bytes, rng: random.Random) -> tuple[bytes | None, dict[str, Any]] | None:
        """What is sent instead of ``value`` (None: nothing) and the ledger detail; None if it cannot apply."""
        raise AssertionError(f"{self.name} is not a transmission fault")  # pragma: no cover

    @classmethod
    def span(cls, seq: int, detail: str | None) -> tuple[int, int]:
        """The seqs a hit at ``seq`` (ledger detail JSON ``detail``) damages: ``(lowest, highest)``."""
        return seq, seq


FAULTS: dict[FaultName, type[Fault]] = {}


def _register(info: FaultInfo):  # type: ignore[no-untyped-def]
    def wrap(cls: type[Fault]) -> type[Fault]:
        cls.info = info
        cls.name = info.name
        # One source of truth: the docstring is the registry text.
        cls.__doc__ = f"The ``{info.name}`` fault ({info.stage} stage).\n\n{info.text()}"
        FAULTS[info.name] = cls
        return cls

    return wrap


@_register(
    FaultInfo(
        name="drop",
        stage="transmission",
        kinds=_ALL_KINDS,
        does="the message is never sent (ledger outcome `not-sent`).",
        damage="a gap in the session's sequence; its change is missing until a snapshot restates the table.",
        must="detect the gap (seq jumps); under `strict` fail, under `resync`/`window` mark the session "
        "broken and hold its updates until the next snapshot.",
        allowed=frozenset({Anomaly.GAP, Anomaly.LOST, Anomaly.QUARANTINED, Anomaly.ORPHAN, Anomaly.UNTERMINATED}),
        window="to-next-snapshot",
        stops_strict=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class Drop(Fault):
    def damage(self, msg: Message, value: bytes, rng: random.Random) -> tuple[bytes | None, dict[str, Any]] | None:
        return None, {}


@_register(
    FaultInfo(
        name="duplicate",
        stage="transmission",
        kinds=_ALL_KINDS,
        does="the message is sent twice in a row, byte for byte (two ledger rows, the copy marked).",
        damage="the same seq arrives twice; applying it twice double-counts anything non-idempotent.",
        must="recognise seq <= last seen and skip it (or, under `strict`, fail).",
        allowed=frozenset({Anomaly.DUPLICATED, Anomaly.QUARANTINED, Anomaly.LOST}),
        window="to-next-snapshot",
        stops_strict=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class Duplicate(Fault):
    def transmit(self, faults: SessionFaults, msg: Message, value: bytes, rng: random.Random) -> list[Transmission] | None:
        faults.count_hit(self.name)
        return [Transmission(msg, value, intended=value), Transmission(msg, value, self.name, {"copy": 2}, value)]


@_register(
    FaultInfo(
        name="reorder",
        stage="transmission",
        kinds=_NOT_END,
        does="swaps the message with one 1..k messages later in the same session and epoch "
        "(never past `end`; shortened when the session ends sooner, dropped if no partner).",
        damage="a later seq arrives first (looks like a gap), then the earlier one arrives late.",
        must="under `window` hold and reorder within its window; otherwise treat as gap + late record.",
        allowed=frozenset({Anomaly.REORDERED, Anomaly.GAP, Anomaly.LOST, Anomaly.QUARANTINED}),
        window="to-next-snapshot",
        stops_strict=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class Reorder(Fault):
    k: int = 3

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.k < 1:
            raise FaultSpecError(self.spec(), f"k={self.k} must be >= 1", "use e.g. k=3")

    def transmit(self, faults: SessionFaults, msg: Message, value: bytes, rng: random.Random) -> list[Transmission] | None:
        if faults.holding:
            return None  # no reorder inside a reorder
        faults.hold(rng.randint(1, self.k), msg.epoch)
        return [Transmission(msg, value, self.name, {}, value)]

    @classmethod
    def span(cls, seq: int, detail: str | None) -> tuple[int, int]:
        # Both swapped messages are damaged: the window opens at the lower seq.
        partner = json.loads(detail or "{}").get("partner_seq", seq)
        return min(seq, partner), max(seq, partner)


CorruptVariant = Literal["truncate", "invalid-json", "wrong-type"]
DriftVariant = Literal["unknown-field", "missing-field", "future-version"]


@_register(
    FaultInfo(
        name="corrupt",
        stage="transmission",
        kinds=_ALL_KINDS,
        does="sends damaged bytes instead: `truncate` (cut short), `invalid-json` (a syntax error) or "
        "`wrong-type` (a field of the wrong JSON type). The ledger detail names the parser's reason.",
        damage="a record that cannot be parsed (reason invalid-json, not-utf8 or wrong-type); its seq is missing.",
        must="quarantine the record with its reason, never crash on it, then handle the missing seq as a gap.",
        allowed=_BAD_RECORD,
        window="to-next-snapshot",
        stops_strict=True,
        bad_record=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class Corrupt(Fault):
    variant: CorruptVariant | None = None  # None: chosen at random per hit

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_variant(self, self.variant, get_args(CorruptVariant))

    def damage(self, msg: Message, value: bytes, rng: random.Random) -> tuple[bytes | None, dict[str, Any]] | None:
        variant = self.variant or rng.choice(get_args(CorruptVariant))
        if variant == "truncate":
            cut = rng.randint(1, len(value) - 1)
            return _bad(value[:cut], {"variant": variant, "kept_bytes": cut, "of_bytes": len(value)})
        if variant == "invalid-json":
            mangle = rng.choice(("trailing-comma", "single-quotes", "extra-brace"))
            if mangle == "trailing-comma":
                sent = value[:-1] + b",}"
            elif mangle == "single-quotes":
                sent = value.replace(b'"v":', b"'v':", 1)
            else:
                sent = value + b"}"
            return _bad(sent, {"variant": variant, "mangle": mangle})
        obj = json.loads(value)
        choices = ["seq", "epoch", "ts", "site", "session"] + ([_payload_field(msg)] if msg.kind is not Kind.END else [])
        name = rng.choice(choices)
        obj[name] = _wrong_type(obj[name])
        return _bad(dump_json(obj), {"variant": variant, "field": name})


@_register(
    FaultInfo(
        name="schema-drift",
        stage="transmission",
        kinds=_ALL_KINDS,
        does="sends a well-formed JSON envelope that breaks the schema: `unknown-field` (an extra "
        'top-level field), `missing-field` (one removed) or `future-version` ("v": 2).',
        damage="a parseable record the v1 contract rejects (reason unknown-field, missing-field or "
        "unsupported-version); its seq is missing.",
        must="quarantine it with the reason (never guess at the meaning of a field it does not know), "
        "then handle the missing seq as a gap.",
        allowed=_BAD_RECORD,
        window="to-next-snapshot",
        stops_strict=True,
        bad_record=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class SchemaDrift(Fault):
    variant: DriftVariant | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_variant(self, self.variant, get_args(DriftVariant))

    def damage(self, msg: Message, value: bytes, rng: random.Random) -> tuple[bytes | None, dict[str, Any]] | None:
        variant = self.variant or rng.choice(get_args(DriftVariant))
        obj = json.loads(value)
        if variant == "unknown-field":
            obj["producer_host"] = f"edge-{rng.randint(1, 99)}"
            detail: dict[str, Any] = {"variant": variant, "field": "producer_host"}
        elif variant == "missing-field":
            name = rng.choice(
                ["site", "session", "seq", "epoch", "ts"] + ([_payload_field(msg)] if msg.kind is not Kind.END else [])
            )
            del obj[name]
            detail = {"variant": variant, "field": name}
        else:
            obj["v"] = 2
            detail = {"variant": variant, "v": 2}
        return _bad(dump_json(obj), detail)


@_register(
    FaultInfo(
        name="orphan-update",
        stage="session",
        kinds=frozenset({Kind.SNAPSHOT}),
        does="the session's opening snapshot (epoch 0, seq 0) is never sent; its updates follow from seq 1.",
        damage="updates for a session the reader has no table for.",
        must="not invent a table: hold or quarantine the updates until the session's first snapshot.",
        allowed=frozenset({Anomaly.ORPHAN, Anomaly.QUARANTINED, Anomaly.LOST, Anomaly.GAP}),
        window="to-next-snapshot",
        stops_strict=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class OrphanUpdate(Fault):
    pass  # a session fault: SessionFaults withholds the opening snapshot


@_register(
    FaultInfo(
        name="epoch-reset",
        stage="stream",
        kinds=_NOT_END,
        does="the producer restarts mid-session: epoch + 1, seq back to 0, and a fresh snapshot of the "
        "current table (the first message of the new epoch carries the fault).",
        damage="seq goes backwards; a reader keyed on seq alone sees duplicates or disorder.",
        must="order by (epoch, seq): accept the higher epoch, reset its sequence tracking and take the "
        "new snapshot; messages of an older epoch arriving later are stale.",
        allowed=frozenset({Anomaly.EPOCH_CHANGE}),
        window="message",
        clean_snapshot=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class EpochReset(Fault):
    def strike(self, driver: StruckDriver, index: int) -> tuple[list[Transmission], dict[str, Any]]:
        # Messages held for a reorder belong to the old epoch; let them out first.
        out = driver.faults.drain()
        detail = {"previous_epoch": driver.session.epoch, "previous_last_seq": driver.session.seq - 1}
        driver.session.restart()
        return out, detail


@_register(
    FaultInfo(
        name="silent-divergence",
        stage="transmission",
        kinds=frozenset({Kind.UPSERT}),
        does="an upsert goes out with one column changed to a wrong but valid value; the sequence is intact "
        "(the ledger keeps the intended and the sent value).",
        damage="the reader's table is wrong and nothing looks broken until the next snapshot.",
        must="compare each snapshot with its state, report the divergence and adopt the snapshot.",
        allowed=frozenset({Anomaly.WRONG_VALUE, Anomaly.DIVERGENCE}),
        window="to-next-snapshot",
        stops_strict=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class SilentDivergence(Fault):
    def damage(self, msg: Message, value: bytes, rng: random.Random) -> tuple[bytes | None, dict[str, Any]] | None:
        assert msg.row is not None
        columns = [c for c, v in msg.row.items() if c != "id" and v is not None]
        if not columns:
            return None  # nothing to change in this row
        column = rng.choice(columns)
        intended = msg.row[column]
        wrong = _wrong_value(intended, rng)
        sent_msg = dataclasses.replace(msg, row={**msg.row, column: wrong})
        return encode(sent_msg), {"column": column, "row_id": msg.row["id"], "intended": intended, "sent": wrong}


@_register(
    FaultInfo(
        name="oversized",
        stage="transmission",
        kinds=frozenset({Kind.SNAPSHOT, Kind.UPSERT}),
        does="pads one string column so the record grows to `size` bytes (default 1,100,000: over the "
        "contract's 1,000,000-byte limit, under the topics' max.message.bytes).",
        damage="a valid-looking record too big to accept (reason too-large); its seq is missing.",
        must="reject it by size before parsing (no memory blow-up), quarantine it, handle the gap.",
        allowed=_BAD_RECORD,
        window="to-next-snapshot",
        stops_strict=True,
        bad_record=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class Oversized(Fault):
    size: int = 1_100_000

    def __post_init__(self) -> None:
        super().__post_init__()
        if not DEFAULT_MAX_BYTES < self.size <= OVERSIZED_MAX_BYTES:
            raise FaultSpecError(
                self.spec(),
                f"size={self.size} must be over the contract limit ({DEFAULT_MAX_BYTES}) and at most "
                f"{OVERSIZED_MAX_BYTES} (what the collection topics accept)",
                "use e.g. size=1100000",
            )

    def damage(self, msg: Message, value: bytes, rng: random.Random) -> tuple[bytes | None, dict[str, Any]] | None:
        rows = list(msg.rows or ()) if msg.kind is Kind.SNAPSHOT else [msg.row]
        for i, row in enumerate(rows):
            assert row is not None
            column = next((c for c, v in row.items() if c != "id" and isinstance(v, str)), None)
            if column is None:
                continue
            pad = max(0, self.size - len(value))
            padded = {**row, column: f"{row[column]} {'x' * pad}"}
            if msg.kind is Kind.SNAPSHOT:
                rows[i] = padded
                sent_msg = dataclasses.replace(msg, rows=tuple(rows))
            else:
                sent_msg = dataclasses.replace(msg, row=padded)
            return _bad(encode(sent_msg), {"column": column, "row_id": row["id"]})
        return None  # no string column to pad


@_register(
    FaultInfo(
        name="clock-skew",
        stage="transmission",
        kinds=_ALL_KINDS,
        does="shifts the message's event time `ts` by `skew_ms` (default: a random 1 min to 1 h, either way).",
        damage="event time disagrees with order; event-time watermarks may call it late.",
        must="order by offset and seq, never by ts; apply the message (it may be flagged late, not dropped).",
        allowed=frozenset({Anomaly.LATE}),
        window="message",
        clean_snapshot=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class ClockSkew(Fault):
    skew_ms: int | None = None

    def damage(self, msg: Message, value: bytes, rng: random.Random) -> tuple[bytes | None, dict[str, Any]] | None:
        skew = self.skew_ms if self.skew_ms is not None else rng.choice((-1, 1)) * rng.randint(60_000, 3_600_000)
        return encode(dataclasses.replace(msg, ts=msg.ts + skew)), {"skew_ms": skew}


@_register(
    FaultInfo(
        name="crash",
        stage="stream",
        kinds=_NOT_END,
        does="the session stops before this message and never sends `end` (the ledger keeps the `end` it "
        "meant to send, outcome `not-sent`). The site's next session starts as usual.",
        damage="a session that stays open forever; its state lingers.",
        must="keep the table as of the last message, and expire or flag the session as unterminated.",
        allowed=frozenset({Anomaly.UNTERMINATED}),
        window="to-end",
    )
)
@dataclass(frozen=True, kw_only=True)
class Crash(Fault):
    def strike(self, driver: StruckDriver, index: int) -> tuple[list[Transmission], dict[str, Any]]:
        out = driver.faults.drain()
        end = driver.session.end_message()
        out.append(Transmission(end, None, self.name, {"at_index": index, "last_seq": end.seq - 1}))
        driver.faults.count_hit(self.name)
        driver.done = True
        return out, {}


@_register(
    FaultInfo(
        name="burst",
        stage="stream",
        kinds=_NOT_END,
        does="from this message on, the session sends its next `size` messages (default 500) at once, "
        "ignoring the rate (a backlog spike; the first message carries the fault).",
        damage="a sudden batch far larger than usual: memory, trigger size and latency suffer.",
        must="absorb it (bounded batches such as maxOffsetsPerTrigger) without losing anything.",
        allowed=frozenset(),
        window="none",
        clean_snapshot=True,
    )
)
@dataclass(frozen=True, kw_only=True)
class Burst(Fault):
    size: int = 500

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.size < 1:
            raise FaultSpecError(self.spec(), f"size={self.size} must be >= 1", "use e.g. size=500")

    def strike(self, driver: StruckDriver, index: int) -> tuple[list[Transmission], dict[str, Any]]:
        driver.burst(self.size)
        return [], {"size": self.size}


def _registry_names(test: Callable[[FaultInfo], bool]) -> frozenset[FaultName]:
    return frozenset(name for name, cls in FAULTS.items() if test(cls.info))


#: Faults on which a ``strict`` query fails (derived from the registry).
STRICT_STOPPING: frozenset[FaultName] = _registry_names(lambda i: i.stops_strict)
#: Faults a snapshot may carry and still be a resynchronisation point.
CLEAN_SNAPSHOT: frozenset[FaultName] = _registry_names(lambda i: i.clean_snapshot)
#: Faults that send a record the contract rejects (the ledger detail names its reason).
BAD_RECORD: frozenset[FaultName] = _registry_names(lambda i: i.bad_record)


def _check_variant(fault: Fault, variant: str | None, allowed: tuple[str, ...]) -> None:
    if variant is not None and variant not in allowed:
        raise FaultSpecError(fault.spec(), f"variant={variant!r} is unknown", f"use one of {', '.join(allowed)}")


# -- parsing and listing ----------------------------------------------------------------


def parse_fault(text: str) -> Fault:
    """Read a fault from its command-line form ``NAME[:PROB][:knob=value]...``.

    Knobs are the fault's own settings (``k``, ``variant``, ``size``, ``skew_ms``) and the
    target: ``sites=a,b``, ``sessions=0,2``, ``at=N`` (that message only), ``after=N`` (none
    of the session's messages before it). A probability is required unless ``at=`` is given,
    or the fault hits whole sessions and ``sites=``/``sessions=`` is given; then it defaults
    to 1. Examples: ``drop:0.01``, ``reorder:0.02:k=4``, ``crash:sites=fleet-2:sessions=1:at=120``,
    ``drop:0.01:after=100``.
    """
    parts = [p.strip() for p in text.strip().split(":")]
    name = parts[0]
    if name not in FAULTS:
        raise FaultSpecError(
            text, f"no fault is named {name!r}", f"use one of {', '.join(FAULT_NAMES)} (python -m producers faults)"
        )
    cls = FAULTS[name]  # type: ignore[index]
    probability: float | None = None
    knobs: dict[str, Any] = {}
    sites: frozenset[str] | None = None
    sessions: frozenset[int] | None = None
    at: int | None = None
    after: int | None = None
    own = {f.name: f for f in dataclasses.fields(cls) if f.name not in ("probability", "target")}
    for part in parts[1:]:
        if not part:
            raise FaultSpecError(text, "an empty part between colons", "write NAME:PROB:knob=value")
        if "=" not in part:
            if probability is not None:
                raise FaultSpecError(text, f"{part!r} is a second probability", "give one probability")
            probability = _number(text, "probability", part, float)
            continue
        key, _, value = part.partition("=")
        key = key.strip().replace("-", "_")
        value = value.strip()
        if key == "sites":
            sites = frozenset(s for s in value.split(",") if s)
        elif key == "sessions":
            sessions = frozenset(_number(text, "sessions", s, int) for s in value.split(",") if s)
        elif key == "at":
            at = _number(text, "at", value, int)
        elif key == "after":
            after = _number(text, "after", value, int)
        elif key in ("p", "probability"):
            probability = _number(text, "probability", value, float)
        elif key in own:
            kind = own[key].type
            knobs[key] = _number(text, key, value, int) if "int" in str(kind) else value
        else:
            allowed = ["sites", "sessions", "at", "after", *own]
            raise FaultSpecError(text, f"{key!r} is not a setting of {name}", f"use {', '.join(allowed)}")
    if probability is None:
        targeted_session = cls.info.stage == "session" and (sites is not None or sessions is not None)
        if at is None and not targeted_session:
            example = f"{name}:sessions=0" if cls.info.stage == "session" else f"{name}:at=40"
            raise FaultSpecError(text, "no probability given", f"write e.g. {name}:0.01, or {example} to aim it")
        probability = 1.0
    return cls(probability=probability, target=Target(sites=sites, sessions=sessions, at=at, after=after), **knobs)


def _number(spec: str, what: str, text: str, kind: type) -> Any:
    try:
        return kind(text)
    except ValueError:
        raise FaultSpecError(
            spec,
            f"{what}={text!r} is not a{'n integer' if kind is int else ' number'}",
            f"write e.g. {what}={'3' if kind is int else '0.01'}",
        ) from None


def describe_faults(names: Iterable[FaultName] | None = None, width: int = 88) -> str:
    """The registry as text: one paragraph per fault (what ``python -m producers faults`` prints)."""
    out = []
    for name in names or FAULT_NAMES:
        cls = FAULTS[name]
        info = cls.info
        knobs = [f"{f.name}={f.default}" for f in dataclasses.fields(cls) if f.name not in ("probability", "target")]
        head = f"{name}  [{info.stage} fault; hits: {', '.join(sorted(k.value for k in info.kinds))}"
        head += f"; knobs: {', '.join(knobs)}]" if knobs else "]"
        body = "\n".join(
            textwrap.fill(line, width, initial_indent="  ", subsequent_indent="    ") for line in info.text().splitlines()
        )
        out.append(f"{head}\n{body}")
    return "\n\n".join(out)


# -- application ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Transmission:
    """One ledger row to be: the intended message, what goes on the wire, and why.

    ``value`` is the record value to send, or ``None`` when the fault withholds it
    (``drop``, ``orphan-update``, ``crash``). ``detail`` is a small JSON-able dict
    describing the hit (variant, partner seq, parser reason, skew...).
    ``intended`` is ``encode(message)`` when the maker had it at hand (None: encode it
    again when needed), so the ledger need not encode a message twice.
    """

    message: Message
    value: bytes | None
    fault: FaultName | None = None
    detail: Mapping[str, Any] = field(default_factory=dict)
    intended: bytes | None = None

    def intended_bytes(self) -> bytes:
        """The intended message as the contract encodes it."""
        return self.intended if self.intended is not None else encode(self.message)


_NO_DETAIL: Mapping[str, Any] = MappingProxyType({})


class SessionFaults:
    """The fault decisions for one session (one per session, built by the session driver).

    ``opening_withheld`` says whether ``orphan-update`` hit the session;
    :meth:`stream_fault` is asked before each intended message; :meth:`transmit` turns
    an intended message into zero or more transmissions (holding some back while a
    reorder waits for its partner); :meth:`drain` releases whatever is held.
    """

    def __init__(
        self,
        faults: Sequence[Fault],
        *,
        seed: int,
        site: str,
        ordinal: int,
        length: int,
        encode: Callable[[Message], bytes] = encode,
    ) -> None:
        self._length = length
        self._encode = encode
        self._active: list[tuple[Fault, random.Random, str]] = []
        for place, fault in enumerate(faults):
            if fault.target.matches(site, ordinal):
                key = f"{seed}/{site}/{ordinal}/{fault.name}/{place}"
                self._active.append((fault, random.Random(key), key))
        self.opening_withheld: Fault | None = None
        for fault, rng, _ in self._active:
            if fault.info.stage == "session" and rng.random() < fault.probability and self.opening_withheld is None:
                self.opening_withheld = fault
        # Per stage, in list order (the order draws are made in): most messages meet none.
        self._stream = [(f, rng) for f, rng, _ in self._active if f.info.stage == "stream"]
        self._transmission = [(f, rng) for f, rng, _ in self._active if f.info.stage == "transmission"]
        self._held: list[list[Transmission]] | None = None
        self._held_want = 0
        self._held_epoch = 0
        self.counts: dict[FaultName, int] = {}

    # Stream faults are eligible from the second intended message up to the last before `end`.
    def stream_fault(self, index: int) -> Fault | None:
        """The stream fault (``epoch-reset``, ``crash``, ``burst``) hitting message ``index``, if any."""
        if not self._stream or not 1 <= index < self._length:
            return None
        winner = None
        for fault, rng in self._stream:
            if not _eligible(fault, index):
                continue
            if rng.random() < fault.probability and winner is None:
                winner = fault
        return winner

    def detail_rng(self, fault: Fault, index: int) -> random.Random:
        for f, _, key in self._active:
            if f is fault:
                return random.Random(f"{key}/{index}")
        return random.Random(f"{fault.name}/{index}")

    def transmit(
        self, msg: Message, index: int, *, tag: Fault | None = None, tag_detail: Mapping[str, Any] | None = None
    ) -> list[Transmission]:
        """The transmissions for intended message ``msg`` (the ``index``-th of its session).

        ``tag`` is a session or stream fault already decided for this message; it excludes
        every transmission fault. Returns an empty list while a reorder holds messages back.
        """
        if tag is None and self._held is None and not self._transmission:
            value = self._encode(msg)
            return [Transmission(msg, value, None, _NO_DETAIL, value)]  # no fault can touch it
        hits: list[Fault] = []
        for fault, rng in self._transmission:
            if msg.kind not in fault.info.kinds or not _eligible(fault, index):
                continue
            if rng.random() < fault.probability:
                hits.append(fault)
        out: list[Transmission] = []
        if self._held is not None and (msg.kind is Kind.END or msg.epoch != self._held_epoch):
            out += self.drain()
        value = self._encode(msg)
        if tag is not None:
            sent = None if tag.info.stage == "session" else value
            group = [Transmission(msg, sent, tag.name, dict(tag_detail or {}), value)]
            self.count_hit(tag.name)
        elif self._held is not None and len(self._held) >= self._held_want - 1:
            # The reorder partner: sent plain (its own draws are spent but ignored) and
            # relabelled when the swap is made.
            group = [Transmission(msg, value, intended=value)]
        else:
            group = self._apply(msg, value, index, hits)
        if self._held is not None:
            self._held.append(group)
            if len(self._held) >= self._held_want:
                out += self._release()
            return out
        return out + group

    def drain(self) -> list[Transmission]:
        """Release held messages (a reorder cut short by `end`, an epoch change or a crash)."""
        return self._release() if self._held is not None else []

    @property
    def holding(self) -> bool:
        """True while a reorder holds messages back for its partner."""
        return self._held is not None

    def hold(self, distance: int, epoch: int) -> None:
        """Start a reorder: hold the next ``distance`` messages of ``epoch``, then swap."""
        self._held = []
        self._held_want = distance + 1
        self._held_epoch = epoch

    def _apply(self, msg: Message, value: bytes, index: int, hits: list[Fault]) -> list[Transmission]:
        for fault in hits:
            out = fault.transmit(self, msg, value, self.detail_rng(fault, index))
            if out is not None:
                return out
        return [Transmission(msg, value, intended=value)]

    def _release(self) -> list[Transmission]:
        held = self._held or []
        self._held = None
        if not held:
            return []
        first = held[0][0]
        # The partner is the latest plain single transmission; when the session cut the
        # reorder short this may be nearer than planned, and with none there is no swap.
        j = next(
            (
                i
                for i in range(len(held) - 1, 0, -1)
                if len(held[i]) == 1 and held[i][0].fault is None and held[i][0].value is not None
            ),
            None,
        )
        flat = lambda groups: [t for g in groups for t in g]  # noqa: E731
        if j is None:
            return [dataclasses.replace(first, fault=None, detail={})] + flat(held[1:])
        partner = held[j][0]
        self.count_hit("reorder")
        moved_up = dataclasses.replace(
            partner, fault="reorder", detail={"partner_seq": first.message.seq, "distance": j, "moved": "earlier"}
        )
        moved_down = dataclasses.replace(first, detail={"partner_seq": partner.message.seq, "distance": j, "moved": "later"})
        return [moved_up] + flat(held[1:j]) + [moved_down] + flat(held[j + 1 :])

    def count_hit(self, name: FaultName) -> None:
        """Count one hit of ``name`` in :attr:`counts` (the driver reports crashes here)."""
        self.counts[name] = self.counts.get(name, 0) + 1


def _eligible(fault: Fault, index: int) -> bool:
    t = fault.target
    return (t.at is None or t.at == index) and (t.after is None or index >= t.after)


def _bad(sent: bytes, detail: dict[str, Any]) -> tuple[bytes, dict[str, Any]]:
    # Record what the contract parser says about these bytes, so the verifier knows the
    # quarantine reason to expect without re-deriving it.
    try:
        decode(sent, max_bytes=DEFAULT_MAX_BYTES)
        reason = None
    except ContractError as exc:
        reason = exc.reason
    detail["reason"] = reason
    detail["bytes"] = len(sent)
    return sent, detail


def _payload_field(msg: Message) -> str:
    return {Kind.SNAPSHOT: "rows", Kind.UPSERT: "row", Kind.DELETE: "id"}[msg.kind]


def _wrong_type(value: Any) -> Any:
    if isinstance(value, bool) or value is None:
        return "true"
    if isinstance(value, int):
        return str(value)  # "17" instead of 17
    if isinstance(value, str):
        return 12345
    if isinstance(value, list):
        return {"rows": value[:1]}
    return [value]  # a row object becomes an array


def _wrong_value(value: Any, rng: random.Random) -> Any:
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + rng.randint(1, 9)
    if isinstance(value, float):
        return round(value + rng.uniform(1.0, 10.0), 2)
    text = str(value)
    return text[::-1] if text[::-1] != text else text + "*"
