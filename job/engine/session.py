"""The session state machine: one session's records, in offset order, rebuilt into its table.

Pure Python (no Spark): the Spark operator, the plain-consumer baseline and the tests all
call :func:`step` with the records of one session, one micro-batch at a time, and carry
the returned :class:`SessionState` to the next call.

How a session is tracked
    A session's messages are ordered by ``(epoch, seq)`` (see ``producers/__init__.py``).
    The state remembers the current ``epoch`` and ``next_seq``, the sequence number it
    expects next, and a ``status``:

    ``new``     no snapshot applied yet in the current epoch (nothing to apply updates to)
    ``open``    the table is in step with every message up to ``next_seq - 1``
    ``broken``  a message went missing; the table is stale until the next snapshot
    ``ended``   ``end`` was applied; nothing more may follow

What it detects, for each record
    ``missing-key`` / ``key-mismatch`` (the key must equal the message's ``session``), a
    contract reason (the bytes do not decode, see :func:`producers.contract.decode`),
    ``stale-epoch`` (an epoch older than the current one), an epoch change (a newer epoch
    restarts the sequence at 0 and must open with a snapshot), ``duplicate`` (seq below
    ``next_seq``, or already held), ``gap`` (seq above ``next_seq``), ``orphan`` (an update
    while ``new``), ``broken-session`` (an update while ``broken``, or anything after
    ``end``), and at each in-sequence snapshot of an ``open`` session a *divergence*: the
    snapshot disagrees with the table rebuilt from updates.

What it does about them: the integrity policy
    ``strict``  raise :class:`~job.engine.errors.IntegrityError` at the first fault, naming topic,
                partition, offset and session. Nothing past the fault is returned.
    ``resync``  quarantine the record and go on. A gap marks the session ``broken``; its
                updates are quarantined until the next snapshot, which is applied and
                reopens it. A snapshot that arrives late (overtaken by seqs already
                refused) is applied too, being fresher than the stale table, but the
                session stays broken. A divergent snapshot is counted and replaces the
                table. Loss is bounded by the snapshot interval.
    ``window``  as ``resync``, but first try to repair disorder: a record up to ``window``
                seqs ahead of ``next_seq`` is held (in the state) until the missing seqs
                arrive, then applied in order. When a record lands further ahead, an
                ``end`` or a newer epoch arrives while records are held, the gap is given
                up on: held records go through the ``resync`` rules, and the ones refused
                are quarantined as ``window-overflow``. A snapshot ahead of ``next_seq``
                is never held: it is the whole table, so it settles the records held
                before it the same way, is applied, and reopens the session.
    ``none``    apply every message that decodes, in arrival order (duplicates, stale and
                orphan updates included); only records that do not decode or do not belong
                to the session are quarantined. Counters and the status still record what
                was seen (``broken`` from a gap, duplicate or late record to the next
                snapshot), but nothing is held back.

Outputs
    Each applied message becomes :class:`RowChange` values (a snapshot one per row), each
    refused record a :class:`QuarantineRecord` carrying its raw bytes, and every call ends
    with a :class:`SessionStatus`. :func:`rebuild` turns changes back into tables.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, get_args

import msgspec

from job.engine.errors import ConfigError, IntegrityError, StateError, UsageError
from producers.contract import Kind, Message, Row, decode
from producers.errors import CONTRACT_REASONS, ContractError, ContractReason

__all__ = [
    "DEFAULT_POLICY",
    "DEFAULT_WINDOW",
    "POLICIES",
    "check_policy",
    "REASONS",
    "Op",
    "Policy",
    "QuarantineRecord",
    "Reason",
    "Record",
    "RowChange",
    "SessionState",
    "SessionStatus",
    "Status",
    "Step",
    "expire",
    "flush",
    "load_row",
    "rebuild",
    "step",
]

Policy = Literal["strict", "resync", "window", "none"]
POLICIES: tuple[Policy, ...] = get_args(Policy)
#: The policy the job, the baseline, the tools and the verifier use when none is named: a gap
#: quarantines the session until its next snapshot (the README's Integrity policies).
DEFAULT_POLICY: Policy = "resync"


def check_policy(policy: str) -> Policy:
    """``policy`` if it names an integrity policy, else :class:`~job.engine.errors.ConfigError`
    listing the choices: the one check of a policy name (the job's config, the baseline and
    the verifier call it)."""
    if policy not in POLICIES:
        raise ConfigError("policy", policy, f"choose one of {', '.join(POLICIES)}")
    return policy  # type: ignore[return-value]


Status = Literal["new", "open", "broken", "ended"]
Op = Literal["snapshot", "upsert", "delete"]

#: Why a record was quarantined: the contract's reasons, then the session's own.
SessionReason = Literal[
    "gap",
    "duplicate",
    "stale-epoch",
    "orphan",
    "broken-session",
    "key-mismatch",
    "missing-key",
    "window-overflow",
]
Reason = ContractReason | SessionReason
REASONS: tuple[Reason, ...] = (*CONTRACT_REASONS, *get_args(SessionReason))

#: How many seqs ahead of the expected one policy ``window`` holds records by default.
DEFAULT_WINDOW = 8
#: The stored form (:meth:`SessionState.to_stored`): 2 is MessagePack, rows kept as JSON
#: text; 1 was one JSON text, still what :meth:`SessionState.to_json` writes.
_STATE_VERSION = 2
_JSON_VERSION = 1


@dataclass(frozen=True, slots=True)
class Record:
    """One Kafka record, as the source hands it over (``key`` decoded as UTF-8)."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes | None
    kafka_ts_ms: int


@dataclass(frozen=True, slots=True, kw_only=True)
class RowChange:
    """One row written by an applied message.

    ``op`` is ``snapshot`` (one change per row of the snapshot; an empty snapshot writes a
    single change with ``row_id=""`` and ``data=None`` so that the emptying is not lost),
    ``upsert`` (``data`` is the whole row) or ``delete`` (``data`` is None). ``data`` is
    the row as a JSON object string. Topic, partition and offset say which record did it.
    """

    session: str
    site: str
    epoch: int
    seq: int
    op: Op
    row_id: str
    data: str | None
    event_ts_ms: int
    topic: str
    partition: int
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class QuarantineRecord:
    """A record set aside: its raw bytes, where it was, and why (``reason`` is a :data:`Reason`)."""

    topic: str
    partition: int
    offset: int
    key: str | None
    value: bytes | None
    reason: Reason
    detail: str
    session: str
    seq: int | None  # None when the record does not decode


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionStatus:
    """Where a session stands after a call. ``-1`` means "none yet" (no epoch, seq or offset seen).

    ``last_seq`` is the highest seq accounted for (applied or refused) in ``epoch``;
    ``rows`` the size of the table; ``gaps`` counts jumps in the sequence, ``duplicates``
    records behind it (repeated, late or of a stale epoch).
    """

    session: str
    site: str
    epoch: int
    status: Status
    last_seq: int
    rows: int
    applied: int
    gaps: int
    duplicates: int
    quarantined: int
    divergences: int
    epoch_changes: int
    last_topic: str
    last_partition: int
    last_offset: int
    last_event_ts_ms: int


@dataclass(frozen=True, kw_only=True)
class SessionState:
    """Everything needed to continue a session in the next call (see the module docstring).

    ``table`` maps row id to row and is never mutated (each call works on a copy);
    ``pending`` holds records waiting for a missing seq under policy ``window``, in seq
    order. Round-trips through :meth:`to_stored` / :meth:`from_stored` (compact bytes:
    what the Spark operators keep, one binary value per session) and through
    :meth:`to_json` / :meth:`from_json` (one JSON text, for people and older stores).
    """

    session: str
    site: str = ""
    epoch: int = -1
    next_seq: int = 0
    status: Status = "new"
    table: Mapping[str, Row] = field(default_factory=dict)
    table_seq: int = -1  # the seq of ``epoch`` the table reflects (-1: none yet)
    pending: tuple[Record, ...] = ()
    applied: int = 0
    gaps: int = 0
    duplicates: int = 0
    quarantined: int = 0
    divergences: int = 0
    epoch_changes: int = 0
    last_topic: str = ""
    last_partition: int = -1
    last_offset: int = -1
    last_event_ts_ms: int = -1

    def status_row(self) -> SessionStatus:
        return SessionStatus(
            session=self.session,
            site=self.site,
            epoch=self.epoch,
            status=self.status,
            last_seq=self.next_seq - 1 if self.epoch >= 0 else -1,
            rows=len(self.table),
            applied=self.applied,
            gaps=self.gaps,
            duplicates=self.duplicates,
            quarantined=self.quarantined,
            divergences=self.divergences,
            epoch_changes=self.epoch_changes,
            last_topic=self.last_topic,
            last_partition=self.last_partition,
            last_offset=self.last_offset,
            last_event_ts_ms=self.last_event_ts_ms,
        )

    def to_stored(self) -> bytes:
        """The state as the Spark operators store it (version :data:`_STATE_VERSION`).

        MessagePack, the fields of :class:`_StoredV2` in order; each row of the table is
        kept as its JSON text, so the next call decodes only the rows it reads.
        """
        values = [getattr(self, name) for name in _STORED_FIELDS]
        values[_STORED_TABLE] = _table_text(self.table)
        values[_STORED_PENDING] = [
            (r.topic, r.partition, r.offset, r.key, None if r.value is None else bytes(r.value), r.kafka_ts_ms)
            for r in self.pending
        ]
        return _encode_stored([_STATE_VERSION, *values])

    @classmethod
    def from_stored(cls, data: bytes | bytearray | memoryview | str) -> SessionState:
        """The state :meth:`to_stored` wrote; also reads what :meth:`to_json` writes (version 1).

        Raises :class:`~job.engine.errors.StateError` for anything else, naming the version found.
        """
        if isinstance(data, str) or data[:1] == b"{":
            return cls.from_json(bytes(data) if isinstance(data, memoryview) else data)
        try:
            s = _decode_stored(data)
        except (msgspec.MsgspecError, ValueError, TypeError) as exc:
            raise _stored_error(data, exc) from None
        values = {name: getattr(s, name) for name in _STORED_FIELDS}
        values["table"] = _Table(s.table)
        values["pending"] = tuple(Record(*p) for p in s.pending)
        return cls(**values)

    def to_json(self) -> str:
        """The state as one JSON object (version 1 of the stored form); :meth:`from_json` reads it."""
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        data["table"] = list(self.table.values())  # rows carry their id
        data["pending"] = [_record_to_json(r) for r in self.pending]
        data["v"] = _JSON_VERSION
        return json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)

    @classmethod
    def from_json(cls, text: str | bytes) -> SessionState:
        try:
            data = json.loads(text)
            version = data.pop("v", None)
        except (ValueError, AttributeError, TypeError) as exc:
            raise StateError(f"not a JSON object ({exc})", "drop the state (or the checkpoint) and replay") from None
        if version != _JSON_VERSION:
            raise StateError(
                f"written as version {version!r}, this code reads version {_JSON_VERSION} as JSON",
                "restart the query from a new checkpoint, or run the version that wrote it",
            )
        try:
            data["table"] = {row["id"]: row for row in data["table"]}
            data["pending"] = tuple(_record_from_json(r) for r in data["pending"])
            return cls(**data)
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"a field is missing or malformed ({exc!r})", "drop the state and replay") from None


@dataclass(frozen=True, slots=True)
class Step:
    """What one call produced: the state to keep, and the three outputs."""

    state: SessionState
    changes: list[RowChange]
    quarantine: list[QuarantineRecord]
    status: SessionStatus


def step(
    state: SessionState | None,
    records: Iterable[Record],
    *,
    policy: Policy,
    window: int = DEFAULT_WINDOW,
) -> Step:
    """Apply ``records`` (one session's, sorted by partition and offset) to ``state``.

    ``state`` is None for a session not seen before. Every record must have the same key
    (the session id; ``None`` for records without a key, which are all quarantined as
    ``missing-key``). ``window`` is the reordering window of policy ``window`` (ignored by
    the others). Under ``strict`` raises :class:`~job.engine.errors.IntegrityError` at the first
    fault; see the module docstring for what each policy does.
    """
    if policy not in POLICIES:
        raise UsageError(f"policy {policy!r} is unknown", f"use one of {', '.join(POLICIES)}")
    if window < 1:
        raise UsageError(f"window={window} is too small", "use a window of at least 1 message, e.g. 8")
    records = list(records)
    if state is None:
        state = SessionState(session=(records[0].key or "") if records else "")
    machine = _Machine(state, policy, window)
    for record in records:
        if (record.key or "") != state.session:
            raise UsageError(
                f"step() for session {state.session!r} got a record keyed {record.key!r} "
                f"({record.topic}[{record.partition}] offset {record.offset})",
                "group records by key and call step() once per key",
            )
        machine.feed(record)
    return machine.result()


def flush(state: SessionState) -> Step:
    """Give up on the records ``state`` holds (policy ``window``), as if the gap will never close.

    Held records go through the ``resync`` rules: a held snapshot is applied, held updates
    are quarantined as ``window-overflow``. Call it before :func:`expire` when a session
    goes quiet, so that no held record is dropped without a trace.
    """
    machine = _Machine(state, "window", DEFAULT_WINDOW)
    machine.give_up()
    return machine.result()


def expire(state: SessionState) -> SessionStatus:
    """The final status row of a session whose timer fired (it keeps the status it had).

    An expired session that never applied ``end`` stays ``open``/``broken``/``new``: the
    verifier reads that as unterminated. Records still held are not applied; call
    :func:`flush` first to quarantine them.
    """
    return state.status_row()


def rebuild(changes: Iterable[RowChange | Mapping[str, Any]]) -> dict[str, dict[str, Row]]:
    """Each session's table from its changes: its latest snapshot, then later upserts and deletes.

    Changes are ordered by ``(epoch, seq)``; changes with equal keys keep their input
    order. Accepts :class:`RowChange` values or mappings with the same fields (rows of
    the ``rows`` output).
    """
    by_session: dict[str, list[tuple[int, int, int, str, str, str | None]]] = {}
    for i, c in enumerate(changes):
        d = c if isinstance(c, Mapping) else {name: getattr(c, name) for name in _CHANGE_FIELDS}
        by_session.setdefault(str(d["session"]), []).append(
            (int(d["epoch"]), int(d["seq"]), i, str(d["op"]), str(d["row_id"]), d["data"])
        )
    tables: dict[str, dict[str, Row]] = {}
    for sid, items in by_session.items():
        items.sort()
        snapshots = [(e, s) for e, s, _, op, _, _ in items if op == "snapshot"]
        start = max(snapshots) if snapshots else (-1, -1)
        table: dict[str, Row] = {}
        for epoch, seq, _, op, row_id, data in items:
            if (epoch, seq) < start:
                continue
            if op == "snapshot":
                if (epoch, seq) == start and data is not None:
                    table[row_id] = load_row(data)
            elif op == "upsert" and data is not None:
                table[row_id] = load_row(data)
            elif op == "delete":
                table.pop(row_id, None)
        tables[sid] = table
    return tables


_CHANGE_FIELDS = ("session", "epoch", "seq", "op", "row_id", "data")


# -- the machine ------------------------------------------------------------------------


class _Machine:
    """A mutable working copy of one :class:`SessionState` for the length of one call."""

    def __init__(self, state: SessionState, policy: Policy, window: int) -> None:
        self.state = state
        self.policy = policy
        self.window = window
        self.session = state.session
        self.site = state.site
        self.epoch = state.epoch
        self.next_seq = state.next_seq
        self.status: Status = state.status
        # The table twice over: ``text`` holds every row's JSON text (what is stored),
        # ``rows`` the rows decoded so far. Most calls read few rows, so most are never decoded.
        table = state.table
        if type(table) is _Table:
            self.text, self.rows = dict(table._text), dict(table._rows)
        else:
            self.rows = dict(table)
            self.text = {rid: _dump_checked(row) for rid, row in self.rows.items()}
        self._encoded_for: Message | None = None
        self._encoded: list[bytes] = []
        self.table_seq = state.table_seq
        self.counts = {
            name: getattr(state, name)
            for name in ("applied", "gaps", "duplicates", "quarantined", "divergences", "epoch_changes")
        }
        self.last = (state.last_topic, state.last_partition, state.last_offset)
        self.last_event_ts_ms = state.last_event_ts_ms
        self.held: dict[int, tuple[Message, Record]] = {}
        for record in state.pending:
            msg = decode(record.value)  # it decoded when it was held
            self.held[msg.seq] = (msg, record)
        self.giving_up = False
        self.changes: list[RowChange] = []
        self.quarantine: list[QuarantineRecord] = []

    def result(self) -> Step:
        state = replace(
            self.state,
            site=self.site,
            epoch=self.epoch,
            next_seq=self.next_seq,
            status=self.status,
            table=_Table(self.text, self.rows),
            table_seq=self.table_seq,
            pending=tuple(record for _, (_, record) in sorted(self.held.items())),
            last_topic=self.last[0],
            last_partition=self.last[1],
            last_offset=self.last[2],
            last_event_ts_ms=self.last_event_ts_ms,
            **self.counts,
        )
        return Step(state, self.changes, self.quarantine, state.status_row())

    # -- one record ---------------------------------------------------------------------

    def feed(self, record: Record) -> None:
        self.last = (record.topic, record.partition, record.offset)
        if record.key is None:
            self.refuse(record, None, "missing-key", "the record has no key; the producer must key it by session id")
            return
        try:
            msg = decode(None if record.value is None else bytes(record.value))
        except ContractError as exc:
            self.refuse(record, None, exc.reason, exc.detail)
            return
        if msg.session != record.key:
            detail = f"the key is {record.key!r} but the message is for {msg.session!r}"
            self.refuse(record, msg, "key-mismatch", detail)
            return
        self.site = self.site or msg.site
        if self.policy == "none":
            self.apply_anyway(msg, record)
        else:
            self.message(msg, record)

    def message(self, m: Message, record: Record) -> None:
        """Route a decoded message of this session: behind, ahead (a gap), or the next one."""
        if self.status == "ended":
            if (m.epoch, m.seq) < (self.epoch, self.next_seq):
                self.behind(m, record)
            else:
                detail = f"seq {m.seq} after the session ended at seq {self.next_seq - 1}"
                self.refuse(record, m, "broken-session", detail)
            return
        if m.epoch == self.epoch and m.seq < self.next_seq and self.fresher_snapshot(m):
            self.late_snapshot(m, record)
            return
        if m.epoch < self.epoch or (m.epoch == self.epoch and (m.seq < self.next_seq or m.seq in self.held)):
            self.behind(m, record)
            return
        joining = self.epoch < 0 and self.status == "new" and m.kind is Kind.SNAPSHOT
        if m.epoch > self.epoch:
            self.new_epoch(m.epoch)
        if joining and m.seq > self.next_seq:
            # A reader that meets the session first at a snapshot (a job restarted by a
            # repair at the session's last snapshot, or started mid-stream) has missed
            # nothing it could apply: the snapshot is the whole table. No gap to count.
            self.next_seq = m.seq
        if m.seq > self.next_seq and self.policy == "window":
            if m.kind is Kind.SNAPSHOT:
                # A snapshot restates the whole table: nothing held before it still
                # matters, and waiting behind the missing seq would only keep the stale
                # table longer. Settle what it supersedes; what is held after it waits on.
                self.give_up(before=m.seq)
            elif self.can_hold(m):
                self.held[m.seq] = (m, record)
                return
            elif self.held:
                # Too far ahead, an `end`: the missing seqs are not coming. Settle what
                # is held first, then look at this record again against the new position.
                self.give_up()
                self.message(m, record)
                return
        if m.seq > self.next_seq:
            self.gap(m, record)
        else:
            self.in_sequence(m, record)
        while self.next_seq in self.held and self.status != "ended":
            held, held_record = self.held.pop(self.next_seq)
            self.in_sequence(held, held_record)
        if self.status == "ended" and self.held:
            self.give_up()  # held past the `end`: nothing can follow it

    def behind(self, m: Message, record: Record) -> None:
        self.counts["duplicates"] += 1
        if m.epoch < self.epoch:
            self.refuse(record, m, "stale-epoch", f"epoch {m.epoch} seq {m.seq} after epoch {self.epoch} began")
        else:
            self.refuse(record, m, "duplicate", f"seq {m.seq} after {self.next_seq - 1} (a duplicate or a late record)")

    def fresher_snapshot(self, m: Message) -> bool:
        return m.kind is Kind.SNAPSHOT and self.status in ("new", "broken") and m.seq > self.table_seq

    def late_snapshot(self, m: Message, record: Record) -> None:
        """A snapshot behind ``next_seq`` (it was overtaken) but newer than the stale table.

        It is still the freshest full table a broken session can get, so it is applied;
        the session stays broken, since messages after it were already refused.
        """
        self.replace_table(m)
        self.status = "broken"
        self.emit(m, record)

    def new_epoch(self, epoch: int) -> None:
        # Records held for the old epoch can never be completed: a producer restart
        # sends everything of the old epoch first.
        self.give_up()
        if self.epoch >= 0:
            self.counts["epoch_changes"] += 1
        self.epoch, self.next_seq, self.status, self.table_seq = epoch, 0, "new", -1

    def can_hold(self, m: Message) -> bool:
        # An `end` is never overtaken, so a gap still open when it arrives will not close.
        return (
            self.status != "broken"
            and m.kind is not Kind.END
            and m.seq - self.next_seq <= self.window
            and len(self.held) < self.window
        )

    def give_up(self, *, before: int | None = None) -> None:
        """The gap will not close: run the held records (those below seq ``before``, when
        given), in seq order, through the resync rules."""
        held = sorted((seq, item) for seq, item in self.held.items() if before is None or seq < before)
        self.held = {seq: item for seq, item in self.held.items() if before is not None and seq >= before}
        self.giving_up = True
        try:
            for _, (m, record) in held:
                if self.status == "ended":
                    self.refuse(record, m, "broken-session", f"seq {m.seq} after the session ended")
                elif m.seq > self.next_seq:
                    self.gap(m, record)
                else:
                    self.in_sequence(m, record)
        finally:
            self.giving_up = False

    def gap(self, m: Message, record: Record) -> None:
        """``m`` is ahead of ``next_seq``: the messages in between are lost to this reader."""
        self.counts["gaps"] += 1
        missing = m.seq - self.next_seq
        where = f"seq {m.seq} after {self.next_seq - 1}" if self.next_seq else f"seq {m.seq} opens epoch {m.epoch}"
        if self.status == "new" and m.kind in (Kind.UPSERT, Kind.DELETE):
            self.next_seq = m.seq + 1
            self.refuse(record, m, "orphan", f"{where} (gap of {missing}) with no snapshot yet in epoch {m.epoch}")
            return
        if self.policy == "strict":
            self.fail(record, m, "gap", f"{where} (gap of {missing})")
        if self.status == "open":
            self.status = "broken"
        if m.kind in (Kind.SNAPSHOT, Kind.END):
            # A snapshot restates the table (the gap no longer matters); an `end` closes
            # the session whatever its table is.
            self.next_seq = m.seq
            self.in_sequence(m, record)
        else:
            self.next_seq = m.seq + 1
            self.refuse(record, m, "gap", f"{where} (gap of {missing}); updates wait for the next snapshot")

    def in_sequence(self, m: Message, record: Record) -> None:
        """``m`` is the message expected next: apply it, or refuse an update with no table to go on."""
        self.next_seq = m.seq + 1
        if m.kind is Kind.SNAPSHOT:
            if self.status == "open" and self.diverges(m):
                self.counts["divergences"] += 1
                if self.policy == "strict":
                    rows = {row["id"]: row for row in m.rows or ()}
                    self.fail(record, m, "divergence", _divergence(m.seq, _Table(self.text, self.rows), rows))
            self.replace_table(m)
            self.status = "open"
            self.emit(m, record)
        elif m.kind is Kind.END:
            self.status = "ended"
            self.emit(m, record)
        elif self.status == "new":
            self.refuse(record, m, "orphan", f"{m.kind} seq {m.seq} with no snapshot yet in epoch {m.epoch}")
        elif self.status == "broken":
            self.refuse(record, m, "broken-session", f"{m.kind} seq {m.seq} while the session waits for a snapshot")
        else:
            self.apply_update(m)
            self.emit(m, record)

    def apply_anyway(self, m: Message, record: Record) -> None:
        """Policy ``none``: apply the message whatever it is; the status only reports trust.

        The status still says ``broken`` after a gap, a duplicate or a late record (until
        the next snapshot that is not behind), so that a divergence is only counted when
        the sequence was intact since the last snapshot.
        """
        if m.epoch > self.epoch:
            if self.epoch >= 0:
                self.counts["epoch_changes"] += 1
            self.epoch, self.next_seq = m.epoch, 0
            if self.status != "ended":
                self.status = "new"
        in_step = (m.epoch, m.seq) == (self.epoch, self.next_seq)
        behind = (m.epoch, m.seq) < (self.epoch, self.next_seq)
        if behind:
            self.counts["duplicates"] += 1
        elif not in_step:
            self.counts["gaps"] += 1
        if not in_step and self.status == "open":
            self.status = "broken"
        if not behind:
            self.next_seq = m.seq + 1
        if m.kind is Kind.SNAPSHOT:
            if in_step and self.status == "open" and self.diverges(m):
                self.counts["divergences"] += 1
            self.replace_table(m)
            if not behind and self.status != "ended":
                self.status = "open"
        elif m.kind is Kind.END:
            self.status = "ended"
        else:
            self.apply_update(m)
        self.emit(m, record)

    # -- effects --------------------------------------------------------------------------

    def encoded(self, m: Message) -> list[bytes]:
        """The JSON text of each row ``m`` carries (one snapshot or upsert), made once per message."""
        if self._encoded_for is not m:
            self._encoded = [_dump_bytes(r) for r in m.rows or ()] if m.row is None else [_dump_bytes(m.row)]
            self._encoded_for = m
        return self._encoded

    def diverges(self, m: Message) -> bool:
        """Whether snapshot ``m`` disagrees with the table (rows compared as dicts, as ever)."""
        rows = m.rows or ()
        text = dict(zip([str(r["id"]) for r in rows], self.encoded(m)))
        if text == self.text:
            return False  # the same text is the same row; different text may still be
        if text.keys() != self.text.keys():
            return True
        new = {row["id"]: row for row in rows}
        return any(b != self.text[rid] and self.row(rid) != new[rid] for rid, b in text.items())

    def row(self, rid: str) -> Row:
        row = self.rows.get(rid)
        if row is None:
            row = self.rows[rid] = load_row(self.text[rid])
        return row

    def replace_table(self, m: Message) -> None:
        rows = m.rows or ()
        ids = [str(r["id"]) for r in rows]
        self.text = dict(zip(ids, self.encoded(m)))
        self.rows = dict(zip(ids, rows))

    def apply_update(self, m: Message) -> None:
        if m.kind is Kind.UPSERT:
            assert m.row is not None
            rid = str(m.row["id"])
            self.text[rid] = self.encoded(m)[0]
            self.rows[rid] = m.row
        else:
            rid = str(m.row_id)
            self.text.pop(rid, None)
            self.rows.pop(rid, None)

    def emit(self, m: Message, record: Record) -> None:
        self.counts["applied"] += 1
        self.last_event_ts_ms = m.ts
        kind = m.kind
        if kind is Kind.END:
            return
        self.table_seq = m.seq
        session, site, epoch, seq, ts = self.session, m.site, m.epoch, m.seq, m.ts
        topic, partition, offset = record.topic, record.partition, record.offset
        change = _row_change
        if kind is Kind.SNAPSHOT:
            rows = m.rows or ()
            items = [(str(r["id"]), b.decode()) for r, b in zip(rows, self.encoded(m))] if rows else [("", None)]
            self.changes += [
                change(session, site, epoch, seq, "snapshot", rid, data, ts, topic, partition, offset) for rid, data in items
            ]
            return
        if kind is Kind.UPSERT:
            assert m.row is not None
            op: Op = "upsert"
            rid, data = str(m.row["id"]), self.encoded(m)[0].decode()
        else:
            op, rid, data = "delete", str(m.row_id), None
        self.changes.append(change(session, site, epoch, seq, op, rid, data, ts, topic, partition, offset))

    def fail(self, record: Record, m: Message | None, problem: str, detail: str) -> None:
        raise IntegrityError(
            session=self.session or (m.session if m is not None else ""),
            topic=record.topic,
            partition=record.partition,
            offset=record.offset,
            problem=problem,
            detail=detail,
            epoch=None if m is None else m.epoch,
            seq=None if m is None else m.seq,
        )

    def refuse(self, record: Record, m: Message | None, reason: Reason, detail: str) -> None:
        """Quarantine ``record`` for ``reason`` (under ``strict``: raise instead)."""
        if self.policy == "strict":
            self.fail(record, m, reason, detail)
        if self.giving_up and reason in ("gap", "orphan", "broken-session"):
            reason, detail = "window-overflow", f"{detail}; the gap did not close within the window"
        session = self.session or (m.session if m is not None else "")
        self.counts["quarantined"] += 1
        self.quarantine.append(
            QuarantineRecord(
                topic=record.topic,
                partition=record.partition,
                offset=record.offset,
                key=record.key,
                value=None if record.value is None else bytes(record.value),
                reason=reason,
                detail=detail,
                session=session,
                seq=None if m is None else m.seq,
            )
        )


# -- rows as text, and the stored form ------------------------------------------------------

_encode_json = msgspec.json.Encoder().encode
_decode_row = msgspec.json.Decoder(dict).decode


# The slots' own setters (member descriptors), by name.
_new = object.__new__
_rc_session = RowChange.session.__set__  # type: ignore[attr-defined]
_rc_site = RowChange.site.__set__  # type: ignore[attr-defined]
_rc_epoch = RowChange.epoch.__set__  # type: ignore[attr-defined]
_rc_seq = RowChange.seq.__set__  # type: ignore[attr-defined]
_rc_op = RowChange.op.__set__  # type: ignore[attr-defined]
_rc_row_id = RowChange.row_id.__set__  # type: ignore[attr-defined]
_rc_data = RowChange.data.__set__  # type: ignore[attr-defined]
_rc_event_ts_ms = RowChange.event_ts_ms.__set__  # type: ignore[attr-defined]
_rc_topic = RowChange.topic.__set__  # type: ignore[attr-defined]
_rc_partition = RowChange.partition.__set__  # type: ignore[attr-defined]
_rc_offset = RowChange.offset.__set__  # type: ignore[attr-defined]


def _row_change(
    session: str,
    site: str,
    epoch: int,
    seq: int,
    op: Op,
    row_id: str,
    data: str | None,
    event_ts_ms: int,
    topic: str,
    partition: int,
    offset: int,
) -> RowChange:
    """``RowChange(...)`` with positional arguments, at half the cost: this runs once per output row.

    A frozen dataclass's ``__init__`` sets each field through ``object.__setattr__``; setting
    the slots through their descriptors is the same thing, without the per-field lookups.
    """
    c = _new(RowChange)
    _rc_session(c, session)
    _rc_site(c, site)
    _rc_epoch(c, epoch)
    _rc_seq(c, seq)
    _rc_op(c, op)
    _rc_row_id(c, row_id)
    _rc_data(c, data)
    _rc_event_ts_ms(c, event_ts_ms)
    _rc_topic(c, topic)
    _rc_partition(c, partition)
    _rc_offset(c, offset)
    return c


def _dump_bytes(row: Row) -> bytes:
    """A decoded row (str keys, finite JSON scalars) as compact UTF-8 JSON.

    :func:`load_row` gives back an equal row with values of the same types.
    """
    try:
        return _encode_json(row)
    except UnicodeEncodeError:  # a lone surrogate (from a \ud800 escape) is not UTF-8
        return _dump_checked(row)


def _dump_checked(row: Row) -> bytes:
    """Any row, from a table a caller built: ``json`` refuses NaN and what is not JSON
    (msgspec would write NaN as null), as ``to_json`` always did."""
    return json.dumps(row, separators=(",", ":"), allow_nan=False).encode()


def load_row(text: bytes | str) -> Row:
    """A row's JSON text as ``json.loads`` reads it, in C when msgspec can (three times faster;
    the verifier reads every row of the lake this way)."""
    try:
        return _decode_row(text)
    except msgspec.DecodeError:  # msgspec refuses lone surrogate escapes; json reads them
        return json.loads(text)


class _Table(Mapping[str, Row]):
    """A session's table between calls: each row kept as its JSON text, decoded on first read.

    A read-only mapping of row id to row, equal to the dict of the same rows; the cache of
    decoded rows is the only thing that changes, and it does not show.
    """

    __slots__ = ("_rows", "_text")

    def __init__(self, text: dict[str, bytes], rows: dict[str, Row] | None = None) -> None:
        self._text = text
        self._rows = {} if rows is None else rows

    def __getitem__(self, rid: str) -> Row:
        row = self._rows.get(rid)
        if row is None:
            row = self._rows[rid] = load_row(self._text[rid])
        return row

    def __iter__(self) -> Iterator[str]:
        return iter(self._text)

    def __len__(self) -> int:
        return len(self._text)

    def __contains__(self, rid: object) -> bool:
        return rid in self._text

    def __repr__(self) -> str:
        return repr(dict(self.items()))


def _table_text(table: Mapping[str, Row]) -> dict[str, bytes]:
    if type(table) is _Table:
        return table._text
    return {rid: _dump_checked(row) for rid, row in table.items()}


class _StoredV2(msgspec.Struct, array_like=True, forbid_unknown_fields=True):
    """Version 2 of the stored form: an array of these fields, in this order.

    Spelled out rather than derived from :class:`SessionState`, so that the stored layout
    changes only on purpose (with the version); a test checks the two have the same fields.
    """

    v: Literal[2]
    session: str
    site: str
    epoch: int
    next_seq: int
    status: Status
    table: dict[str, bytes]  # row id -> the row's JSON text
    table_seq: int
    pending: list[tuple[str, int, int, str | None, bytes | None, int]]  # Record's fields
    applied: int
    gaps: int
    duplicates: int
    quarantined: int
    divergences: int
    epoch_changes: int
    last_topic: str
    last_partition: int
    last_offset: int
    last_event_ts_ms: int


_STORED_FIELDS = _StoredV2.__struct_fields__[1:]  # after the version: SessionState's fields
_STORED_TABLE, _STORED_PENDING = _STORED_FIELDS.index("table"), _STORED_FIELDS.index("pending")
_encode_stored = msgspec.msgpack.Encoder().encode
_decode_stored = msgspec.msgpack.Decoder(_StoredV2).decode


def _stored_error(data: bytes | bytearray | memoryview, exc: Exception) -> StateError:
    try:
        head = msgspec.msgpack.decode(data)
    except (msgspec.MsgspecError, ValueError, TypeError):
        head = None
    if isinstance(head, list) and head and head[0] != _STATE_VERSION:
        return StateError(
            f"written as version {head[0]!r}, this code reads version {_STATE_VERSION} (and {_JSON_VERSION} as JSON)",
            "restart the query from a new checkpoint, or run the version that wrote it",
        )
    return StateError(f"not a stored session state ({exc})", "drop the state (or the checkpoint) and replay")


def _divergence(seq: int, table: Mapping[str, Row], rows: Mapping[str, Row]) -> str:
    differ = sorted(rid for rid in table.keys() | rows.keys() if table.get(rid) != rows.get(rid))
    shown = ", ".join(differ[:3]) + (", ..." if len(differ) > 3 else "")
    return (
        f"snapshot seq {seq} disagrees with the table rebuilt from updates: "
        f"{len(differ)} row{'s' if len(differ) != 1 else ''} differ ({shown})"
    )


def _record_to_json(r: Record) -> dict[str, Any]:
    value = None if r.value is None else base64.b64encode(bytes(r.value)).decode("ascii")
    return {
        "topic": r.topic,
        "partition": r.partition,
        "offset": r.offset,
        "key": r.key,
        "value": value,
        "kafka_ts_ms": r.kafka_ts_ms,
    }


def _record_from_json(d: Mapping[str, Any]) -> Record:
    value = None if d["value"] is None else base64.b64decode(d["value"])
    return Record(d["topic"], d["partition"], d["offset"], d["key"], value, d["kafka_ts_ms"])
