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
from typing import Any, TypeAlias

from producers.errors import ContractError

#: Each collection point publishes to the topic ``<prefix><site>``; this is the prefix unless
#: a run says otherwise (readers subscribe to ``^<prefix>.*`` to discover sites).
TOPIC_PREFIX = "collection-"

__all__ = [
    "TOPIC_PREFIX",
    "DEFAULT_MAX_BYTES",
    "SCHEMA_VERSION",
    "ContractError",
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


def dump_json(obj: object) -> bytes:
    """Serialise exactly as :func:`encode` does (used by faults that edit an envelope)."""
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


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
            f"the record value is {len(value)} bytes, over the limit of {max_bytes}; "
            f"the producer must split or shrink it",
        )
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ContractError(
            "not-utf8", f"byte {exc.start} is not valid UTF-8 ({exc.reason}); expected UTF-8 JSON"
        ) from None
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError) as exc:
        raise ContractError("invalid-json", f"not valid JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise ContractError(
            "not-an-object", f"the record is a JSON {_json_type(obj)}; expected an object with field 'v'"
        )
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
