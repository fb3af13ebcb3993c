"""The wire contract, version 1: one JSON object per Kafka record, keyed by session id.

This module is the only place that turns messages into bytes and back; the job imports
:func:`decode` to parse records, so both sides share one definition. The package
docstring (``producers/__init__.py``) describes the envelope field by field.

Contract of :func:`decode`: it returns a :class:`Message` or raises :class:`ContractError`
whose ``reason`` says what is wrong (a closed vocabulary, see
:data:`producers.errors.CONTRACT_REASONS`) and whose ``detail`` names the field and what
was expected. It never raises anything else, whatever the bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal, TypeAlias

import msgspec

from producers.errors import ContractError

#: Each collection point publishes to the topic ``<prefix><site>``; this is the prefix unless
#: a run says otherwise (readers subscribe to ``^<prefix>.*`` to discover sites).
TOPIC_PREFIX = "collection-"


def s3_parts(location: str) -> tuple[str, str] | None:
    """The bucket and the key prefix (no slash at either end) of an ``s3a://`` or ``s3://``
    location, as ledgers and lakes name them; None for any other (a local path)."""
    if not location.startswith(("s3a://", "s3://")):
        return None
    bucket, _, prefix = location.split("://", 1)[1].partition("/")
    return bucket, prefix.strip("/")


__all__ = [
    "TOPIC_PREFIX",
    "s3_parts",
    "DEFAULT_MAX_BYTES",
    "SCHEMA_VERSION",
    "ContractError",
    "Encoder",
    "Kind",
    "Message",
    "Row",
    "Scalar",
    "decode",
    "encode",
]

SCHEMA_VERSION = 1

#: Records longer than this are rejected with reason ``too-large`` before any parsing.
DEFAULT_MAX_BYTES = 1_000_000

Scalar: TypeAlias = str | int | float | bool | None
#: A row is a plain dict: ``"id"`` (str) plus the site type's columns, all JSON scalars.
#: Treat rows inside a :class:`Message` as read-only; they are dicts (not frozen mappings)
#: so that messages stay cheap to build, JSON-native and picklable.
Row: TypeAlias = dict[str, Scalar]

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
_isfinite = math.isfinite


class Kind(StrEnum):
    """What a message does to its session's table."""

    SNAPSHOT = "snapshot"  # the full table; replaces whatever the reader had
    UPSERT = "upsert"  # one complete row (not a patch), inserted or replaced by id
    DELETE = "delete"  # one row removed, by id
    END = "end"  # the session is closed; nothing follows in this session


# The payload field each kind carries (END carries none).
_PAYLOAD: dict[Kind, str | None] = {
    Kind.SNAPSHOT: "rows",
    Kind.UPSERT: "row",
    Kind.DELETE: "id",
    Kind.END: None,
}
# Which of (rows, row, row_id) each kind sets.
_SHAPE: dict[Kind, tuple[bool, bool, bool]] = {
    kind: (payload == "rows", payload == "row", payload == "id") for kind, payload in _PAYLOAD.items()
}
_ENVELOPE = ("v", "kind", "site", "session", "seq", "epoch", "ts")
_ALLOWED: dict[Kind, frozenset[str]] = {
    kind: frozenset(_ENVELOPE) | ({payload} if payload else set()) for kind, payload in _PAYLOAD.items()
}


@dataclass(frozen=True, slots=True)
class Message:
    """One envelope, typed. Exactly one payload attribute is set, according to ``kind``.

    ``rows`` (snapshot), ``row`` (upsert) and ``row_id`` (delete) are ``None`` for the other
    kinds, and all three are ``None`` for ``end``. ``seq`` counts the messages of a session
    within one producer ``epoch`` from 0 (the opening snapshot); ``ts`` is event time in
    epoch milliseconds. Messages holding rows are not hashable (rows are dicts).
    """

    kind: Kind
    site: str
    session: str
    seq: int
    epoch: int
    ts: int
    rows: tuple[Row, ...] | None = None
    row: Row | None = None
    row_id: str | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.kind, Kind):
            object.__setattr__(self, "kind", Kind(self.kind))
        # The common case in one comparison (a message is built per record sent).
        if (self.rows is not None, self.row is not None, self.row_id is not None) == _SHAPE[self.kind] and (
            self.seq >= 0 and self.epoch >= 0
        ):
            return
        present = {
            "rows": self.rows is not None,
            "row": self.row is not None,
            "id": self.row_id is not None,
        }
        want = _PAYLOAD[self.kind]
        for name, is_set in present.items():
            if is_set != (name == want):
                need = f"needs {want!r}" if want else "carries no payload"
                raise ContractError(
                    "missing-field" if not is_set else "unknown-field",
                    f"a {self.kind} message {need}; payload {name!r} is "
                    f"{'set' if is_set else 'missing'} (session {self.session!r} seq {self.seq})",
                )
        if self.seq < 0 or self.epoch < 0:
            raise ContractError(
                "wrong-type",
                f"seq and epoch must be >= 0, got seq={self.seq} epoch={self.epoch} (session {self.session!r})",
            )

    @classmethod
    def snapshot(cls, *, site: str, session: str, seq: int, epoch: int, ts: int, rows: Sequence[Row]) -> Message:
        return cls(Kind.SNAPSHOT, site, session, seq, epoch, ts, rows=tuple(rows))

    @classmethod
    def upsert(cls, *, site: str, session: str, seq: int, epoch: int, ts: int, row: Row) -> Message:
        return cls(Kind.UPSERT, site, session, seq, epoch, ts, row=row)

    @classmethod
    def delete(cls, *, site: str, session: str, seq: int, epoch: int, ts: int, row_id: str) -> Message:
        return cls(Kind.DELETE, site, session, seq, epoch, ts, row_id=row_id)

    @classmethod
    def end(cls, *, site: str, session: str, seq: int, epoch: int, ts: int) -> Message:
        return cls(Kind.END, site, session, seq, epoch, ts)

    def to_json_obj(self) -> dict[str, Any]:
        """The envelope as a JSON-ready dict, fields in canonical order (no validation)."""
        obj: dict[str, Any] = {
            "v": SCHEMA_VERSION,
            "kind": self.kind.value,
            "site": self.site,
            "session": self.session,
            "seq": self.seq,
            "epoch": self.epoch,
            "ts": self.ts,
        }
        if self.kind is Kind.SNAPSHOT:
            obj["rows"] = list(self.rows or ())
        elif self.kind is Kind.UPSERT:
            obj["row"] = self.row
        elif self.kind is Kind.DELETE:
            obj["id"] = self.row_id
        return obj


def encode(msg: Message) -> bytes:
    """The record value for ``msg``: compact UTF-8 JSON, envelope fields first.

    Raises :class:`ContractError` when the message could not be decoded again (a row value
    that is not a JSON scalar, a non-finite float, an integer outside 64 bits, an empty
    site or session): the encoder never writes what the parser would reject.
    """
    _check_str(msg.site, "site")
    _check_str(msg.session, "session")
    _check_int(msg.seq, "seq", minimum=0)
    _check_int(msg.epoch, "epoch", minimum=0)
    _check_int(msg.ts, "ts")
    if msg.kind is Kind.SNAPSHOT:
        for i, row in enumerate(msg.rows or ()):
            _check_row(row, f"rows[{i}]")
    elif msg.kind is Kind.UPSERT:
        _check_row(msg.row, "row")
    elif msg.kind is Kind.DELETE:
        _check_str(msg.row_id, "id")
    return dump_json(msg.to_json_obj())


class Encoder:
    """:func:`encode` for a producer that never edits a row once it is in a message.

    Each row object is checked and serialised once and remembered (by row id, and only
    while it is the same object), so a snapshot joins bytes it already has and an upsert
    serialises one row. The envelope's constant part is kept per (kind, site, session).
    The output is byte for byte what :func:`encode` returns, and the same
    :class:`ContractError` is raised for a message it would refuse. Keep one encoder
    per table of rows (e.g. per site): it holds the bytes of the rows not yet deleted.
    """

    def __init__(self) -> None:
        self._rows: dict[object, tuple[Row, bytes]] = {}
        self._heads: dict[tuple[Kind, str, str], bytes] = {}

    def encode(self, msg: Message) -> bytes:
        """The record value for ``msg``; see :func:`encode`."""
        kind = msg.kind
        head = self._heads.get((kind, msg.site, msg.session))
        if head is None:
            _check_str(msg.site, "site")
            _check_str(msg.session, "session")
            head = dump_json({"v": SCHEMA_VERSION, "kind": kind.value, "site": msg.site, "session": msg.session})
            head = self._heads[(kind, msg.site, msg.session)] = head[:-1] + b',"seq":'
        seq, epoch, ts = msg.seq, msg.epoch, msg.ts
        if not (
            type(seq) is int
            and type(epoch) is int
            and type(ts) is int
            and 0 <= seq <= _INT64_MAX
            and 0 <= epoch <= _INT64_MAX
            and _INT64_MIN <= ts <= _INT64_MAX
        ):
            _check_int(seq, "seq", minimum=0)
            _check_int(epoch, "epoch", minimum=0)
            _check_int(ts, "ts")
        out = b'%s%d,"epoch":%d,"ts":%d' % (head, seq, epoch, ts)
        if kind is Kind.UPSERT:
            return b'%s,"row":%s}' % (out, self._row(msg.row, "row"))
        if kind is Kind.SNAPSHOT:
            return b'%s,"rows":[%s]}' % (out, b",".join(self._rows_json(msg.rows or ())))
        if kind is Kind.DELETE:
            rid = _check_str(msg.row_id, "id")
            self._rows.pop(rid, None)  # the row is gone: keep memory to the live table
            return b'%s,"id":%s}' % (out, dump_json(rid))
        return out + b"}"

    def _rows_json(self, rows: Sequence[Row]) -> list[bytes]:
        # A snapshot's rows are nearly all known: look them up inline, name a row only on a miss.
        known = self._rows.get
        out = []
        for i, row in enumerate(rows):
            rid = row.get("id") if type(row) is dict else None
            hit = known(rid) if type(rid) is str else None
            out.append(hit[1] if hit is not None and hit[0] is row else self._row(row, f"rows[{i}]"))
        return out

    def _row(self, row: Row | None, where: str) -> bytes:
        rid = row.get("id") if type(row) is dict else None
        hit = self._rows.get(rid) if type(rid) is str else None
        if hit is not None and hit[0] is row:
            return hit[1]
        data = _row_json(row, where)
        self._rows[rid] = (row, data)  # type: ignore[index]
        return data


# msgspec writes what json.dumps writes (compact, UTF-8, same string escapes) for str
# keys and str, bool, None and int64 values, and for floats written without an exponent
# (0 and 1e-4 <= |x| < 1e16); outside that range it writes "1e-05" as "0.00001". Rows of
# only such cells take the C encoder; any other row takes json, so the bytes never differ.
_msgspec_json = msgspec.json.Encoder().encode


def _row_json(row: object, where: str) -> bytes:
    """``dump_json(row)`` after the checks of :func:`_check_row` (the same error, if any)."""
    if type(row) is dict:
        rid = row.get("id")
        if type(rid) is str and rid:
            for name, cell in row.items():
                kind = type(cell)
                if type(name) is not str:
                    break
                if kind is str or kind is bool or cell is None:
                    continue
                if kind is int and _INT64_MIN <= cell <= _INT64_MAX:
                    continue
                if kind is float and (cell == 0.0 or 1e-4 <= abs(cell) < 1e16):
                    continue
                break
            else:
                return _msgspec_json(row)
    _check_row(row, where)
    return dump_json(row)


def dump_json(obj: object) -> bytes:
    """Serialise exactly as :func:`encode` does (used by faults that edit an envelope)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


# -- decoding ---------------------------------------------------------------------------
#
# Two readers of one contract. The typed reader (msgspec, in C) accepts a strict subset of
# what the checking reader accepts and builds the same Message; anything it refuses, for
# whatever reason, goes to the checking reader, which alone decides what is wrong and says
# so. So a valid record costs one C parse, and every reason and detail stays as the
# checking reader words it. What the typed reader must refuse so that the subset holds:
# a duplicated "kind" (json takes the last one; msgspec refuses), integers and strings
# out of bounds (constrained below), non-finite floats (msgspec refuses 1e999), and a row
# without a non-empty string "id" (checked after the parse).

_I64 = Annotated[int, msgspec.Meta(ge=_INT64_MIN, le=_INT64_MAX)]
_U63 = Annotated[int, msgspec.Meta(ge=0, le=_INT64_MAX)]
_Name = Annotated[str, msgspec.Meta(min_length=1)]
_WireRow = dict[str, str | _I64 | float | bool | None]


class _Envelope(msgspec.Struct, tag_field="kind", forbid_unknown_fields=True):
    v: Literal[1]
    site: _Name
    session: _Name
    seq: _U63
    epoch: _U63
    ts: _I64


class _Snapshot(_Envelope, tag="snapshot"):
    rows: tuple[_WireRow, ...]


class _Upsert(_Envelope, tag="upsert"):
    row: _WireRow


class _Delete(_Envelope, tag="delete"):
    id: _Name


class _End(_Envelope, tag="end"):
    pass


_typed = msgspec.json.Decoder(_Snapshot | _Upsert | _Delete | _End).decode
# The slots' own setters (member descriptors), by name: the frozen __init__ goes through
# object.__setattr__ per field, about twice as slow, and this runs once per record.
_new = object.__new__
_m_kind = Message.kind.__set__  # type: ignore[attr-defined]
_m_site = Message.site.__set__  # type: ignore[attr-defined]
_m_session = Message.session.__set__  # type: ignore[attr-defined]
_m_seq = Message.seq.__set__  # type: ignore[attr-defined]
_m_epoch = Message.epoch.__set__  # type: ignore[attr-defined]
_m_ts = Message.ts.__set__  # type: ignore[attr-defined]
_m_rows = Message.rows.__set__  # type: ignore[attr-defined]
_m_row = Message.row.__set__  # type: ignore[attr-defined]
_m_row_id = Message.row_id.__set__  # type: ignore[attr-defined]


def _trusted(kind: Kind, e: _Envelope, rows: tuple[Row, ...] | None, row: Row | None, row_id: str | None) -> Message:
    # The typed reader has checked what Message.__post_init__ would: skip it.
    m = _new(Message)
    _m_kind(m, kind)
    _m_site(m, e.site)
    _m_session(m, e.session)
    _m_seq(m, e.seq)
    _m_epoch(m, e.epoch)
    _m_ts(m, e.ts)
    _m_rows(m, rows)
    _m_row(m, row)
    _m_row_id(m, row_id)
    return m


def _decode_typed(value: bytes) -> Message | None:
    """The message, when the typed reader accepts ``value``; None to ask the checking reader."""
    try:
        e = _typed(value)
    except (msgspec.MsgspecError, ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        return None
    t = type(e)
    if t is _Upsert:
        rid = e.row.get("id")  # type: ignore[attr-defined]
        return _trusted(Kind.UPSERT, e, None, e.row, None) if type(rid) is str and rid else None  # type: ignore[attr-defined]
    if t is _Snapshot:
        rows = e.rows  # type: ignore[attr-defined]
        for row in rows:  # a loop, not a call per row: snapshots are hundreds of rows
            rid = row.get("id")
            if type(rid) is not str or not rid:
                return None
        return _trusted(Kind.SNAPSHOT, e, rows, None, None)
    if t is _Delete:
        return _trusted(Kind.DELETE, e, None, None, e.id)  # type: ignore[attr-defined]
    return _trusted(Kind.END, e, None, None, None)


def decode(value: bytes | None, *, max_bytes: int = DEFAULT_MAX_BYTES) -> Message:
    """Parse one record value into a :class:`Message`, or raise :class:`ContractError`.

    Checks run in this order, and the first failure is reported: ``empty`` (None or no
    bytes), ``too-large`` (more than ``max_bytes``), ``not-utf8``, ``invalid-json`` (also
    NaN/Infinity literals), ``not-an-object``, the version (``missing-field`` /
    ``wrong-type`` / ``unsupported-version`` for ``"v"``), ``missing-field`` (``kind``),
    ``wrong-type`` / ``unknown-kind`` (``kind``), ``missing-field`` (the other envelope
    fields and the kind's payload), ``unknown-field`` (any other top-level field),
    ``wrong-type`` (field types, row ids, row values, 64-bit integer range, finite floats).
    """
    if not value:
        raise ContractError("empty", "the record value is empty (null or zero bytes); expected a JSON object")
    if len(value) > max_bytes:
        raise ContractError(
            "too-large",
            f"the record value is {len(value)} bytes, over the limit of {max_bytes}; the producer must split or shrink it",
        )
    msg = _decode_typed(value)
    return msg if msg is not None else _decode_checked(value)


def _decode_checked(value: bytes) -> Message:
    """The checking reader: every check of :func:`decode` after the size, in order."""
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError("not-utf8", f"byte {exc.start} is not valid UTF-8 ({exc.reason}); expected UTF-8 JSON") from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ContractError("invalid-json", f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ContractError("not-an-object", f"the record is a JSON {_json_type(obj)}; expected an object with field 'v'")
    return _from_obj(obj)


def _from_obj(obj: dict[str, Any]) -> Message:
    if "v" not in obj:
        raise ContractError("missing-field", "field 'v' (schema version, an integer) is missing")
    version = obj["v"]
    if not _is_int(version):
        raise ContractError("wrong-type", f"field 'v' must be an integer, got {_show(version)}")
    if version != SCHEMA_VERSION:
        raise ContractError(
            "unsupported-version",
            f"field 'v' is {version}; this reader understands version {SCHEMA_VERSION} only "
            f"(upgrade the reader, or make the producer write v{SCHEMA_VERSION})",
        )
    if "kind" not in obj:
        raise ContractError("missing-field", "field 'kind' is missing; expected one of snapshot, upsert, delete, end")
    kind_text = obj["kind"]
    if not isinstance(kind_text, str):
        raise ContractError("wrong-type", f"field 'kind' must be a string, got {_show(kind_text)}")
    try:
        kind = Kind(kind_text)
    except ValueError:
        raise ContractError(
            "unknown-kind", f"field 'kind' is {kind_text!r}; expected one of snapshot, upsert, delete, end"
        ) from None
    allowed = _ALLOWED[kind]
    missing = [name for name in (*_ENVELOPE, _PAYLOAD[kind]) if name is not None and name not in obj]
    if missing:
        raise ContractError(
            "missing-field",
            f"field {missing[0]!r} is missing from a {kind} message"
            + (f" (also missing: {', '.join(missing[1:])})" if len(missing) > 1 else ""),
        )
    extra = sorted(set(obj) - allowed)
    if extra:
        raise ContractError(
            "unknown-field",
            f"field {extra[0]!r} is not part of a v{SCHEMA_VERSION} {kind} message"
            + (f" (also: {', '.join(extra[1:])})" if len(extra) > 1 else "")
            + f"; allowed fields: {', '.join(sorted(allowed))}",
        )
    site = _check_str(obj["site"], "site")
    session = _check_str(obj["session"], "session")
    seq = _check_int(obj["seq"], "seq", minimum=0)
    epoch = _check_int(obj["epoch"], "epoch", minimum=0)
    ts = _check_int(obj["ts"], "ts")
    if kind is Kind.SNAPSHOT:
        rows = obj["rows"]
        if not isinstance(rows, list):
            raise ContractError("wrong-type", f"field 'rows' must be an array of row objects, got {_show(rows)}")
        for i, row in enumerate(rows):
            _check_row(row, f"rows[{i}]")
        return Message(kind, site, session, seq, epoch, ts, rows=tuple(rows))
    if kind is Kind.UPSERT:
        return Message(kind, site, session, seq, epoch, ts, row=_check_row(obj["row"], "row"))
    if kind is Kind.DELETE:
        return Message(kind, site, session, seq, epoch, ts, row_id=_check_str(obj["id"], "id"))
    return Message(kind, site, session, seq, epoch, ts)


def _check_row(row: object, where: str) -> Row:
    if not isinstance(row, dict):
        raise ContractError("wrong-type", f"field {where!r} must be a row object, got {_show(row)}")
    if "id" not in row:
        raise ContractError("missing-field", f"field '{where}.id' is missing; every row needs a string id")
    _check_str(row["id"], f"{where}.id")
    for name, cell in row.items():
        kind = type(cell)
        # Exact-type fast path first: encoding whole snapshots runs this per cell.
        if kind is str or kind is bool or cell is None or (kind is float and _isfinite(cell)):
            continue
        if kind is int and _INT64_MIN <= cell <= _INT64_MAX:
            continue
        if isinstance(cell, (str, bool)):
            continue
        if isinstance(cell, int):
            if not _INT64_MIN <= cell <= _INT64_MAX:
                raise ContractError("wrong-type", f"field '{where}.{name}' is {cell}, outside 64-bit integers")
            continue
        if isinstance(cell, float):
            if not math.isfinite(cell):
                raise ContractError("wrong-type", f"field '{where}.{name}' is {cell}; expected a finite number")
            continue
        raise ContractError(
            "wrong-type",
            f"field '{where}.{name}' must be a JSON scalar (string, number, boolean, null), got {_show(cell)}",
        )
    return row  # type: ignore[return-value]


def _check_str(value: object, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise ContractError("wrong-type", f"field {where!r} must be a non-empty string, got {_show(value)}")
    return value


def _check_int(value: object, where: str, *, minimum: int | None = None) -> int:
    if not _is_int(value) or not _INT64_MIN <= value <= _INT64_MAX:  # type: ignore[operator]
        raise ContractError("wrong-type", f"field {where!r} must be a 64-bit integer, got {_show(value)}")
    if minimum is not None and value < minimum:  # type: ignore[operator]
        raise ContractError("wrong-type", f"field {where!r} must be an integer >= {minimum}, got {value}")
    return value  # type: ignore[return-value]


def _is_int(value: object) -> bool:
    # bool is an int subclass in Python but not an integer on the wire.
    return isinstance(value, int) and not isinstance(value, bool)


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not valid JSON")


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "array"
    if isinstance(value, Mapping):
        return "object"
    return type(value).__name__


def _show(value: object) -> str:
    text = json.dumps(value) if isinstance(value, (str, int, float, bool, type(None))) else None
    if text is None or len(text) > 40:
        return f"a {_json_type(value)}"
    return f"{text} ({_json_type(value)})"
