"""The wire contract: round trips, every parser error, and the parser's total behaviour."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from producers import SCHEMA_VERSION, ContractError, Kind, Message, decode, encode
from producers.contract import Encoder
from producers.errors import CONTRACT_REASONS

BASE = {"site": "fleet-2", "session": "fleet-2-s0001", "seq": 3, "epoch": 0, "ts": 1_732_233_600_123}

# -- strategies -------------------------------------------------------------------------

names = st.text(min_size=1, max_size=12)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=20),
)
rows = st.builds(
    lambda rid, cols: {"id": rid, **{k: v for k, v in cols.items() if k != "id"}},
    names,
    st.dictionaries(st.text(min_size=1, max_size=8), scalars, max_size=5),
)
envelopes = st.fixed_dictionaries(
    {
        "site": names,
        "session": names,
        "seq": st.integers(0, 2**63 - 1),
        "epoch": st.integers(0, 2**63 - 1),
        "ts": st.integers(-(2**63), 2**63 - 1),
    }
)
messages = st.one_of(
    st.builds(lambda e, r: Message.snapshot(rows=r, **e), envelopes, st.lists(rows, max_size=5)),
    st.builds(lambda e, r: Message.upsert(row=r, **e), envelopes, rows),
    st.builds(lambda e, i: Message.delete(row_id=i, **e), envelopes, names),
    st.builds(lambda e: Message.end(**e), envelopes),
)


def obj(**changes: object) -> dict:
    """A valid upsert envelope as a dict, with ``changes`` applied (a value of ... removes)."""
    base = {"v": 1, "kind": "upsert", **BASE, "row": {"id": "veh-1", "speed_kph": 12.5, "driver": None}}
    for k, v in changes.items():
        if v is ...:
            base.pop(k, None)
        else:
            base[k] = v
    return base


def raw(o: object) -> bytes:
    return json.dumps(o).encode()


# -- round trips ------------------------------------------------------------------------


def test_every_kind_round_trips_through_encode_and_decode() -> None:
    examples = [
        Message.snapshot(rows=[{"id": "a", "x": 1}, {"id": "b", "x": None}], **BASE),
        Message.upsert(row={"id": "a", "x": 2.5, "ok": True, "name": "é"}, **BASE),
        Message.delete(row_id="a", **BASE),
        Message.end(**BASE),
    ]
    for msg in examples:
        assert decode(encode(msg)) == msg


def test_encoding_is_compact_json_with_the_envelope_first() -> None:
    value = encode(Message.delete(row_id="a", **BASE))
    assert value == (
        b'{"v":1,"kind":"delete","site":"fleet-2","session":"fleet-2-s0001","seq":3,"epoch":0,"ts":1732233600123,"id":"a"}'
    )
    assert SCHEMA_VERSION == 1


@given(messages)
def test_any_valid_message_round_trips(msg: Message) -> None:
    assert decode(encode(msg)) == msg


@given(messages, st.data())
def test_any_truncation_of_a_valid_record_is_rejected_as_invalid_json_or_not_utf8(msg: Message, data: st.DataObject) -> None:
    value = encode(msg)
    cut = data.draw(st.integers(1, len(value) - 1))
    with pytest.raises(ContractError) as exc:
        decode(value[:cut])
    assert exc.value.reason in ("invalid-json", "not-utf8")


@given(st.binary(max_size=300))
def test_decode_raises_only_contract_errors_on_arbitrary_bytes(value: bytes) -> None:
    try:
        decode(value)
    except ContractError as exc:
        assert exc.reason in CONTRACT_REASONS


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=5)),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)),
    max_leaves=10,
)


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.sampled_from(["v", "kind", "site", "session", "seq", "epoch", "ts", "rows", "row", "id", "x"]), json_values
    )
)
def test_decode_raises_only_contract_errors_on_arbitrary_json_objects(o: dict) -> None:
    try:
        msg = decode(raw(o))
    except ContractError as exc:
        assert exc.reason in CONTRACT_REASONS
    else:
        assert decode(encode(msg)) == msg  # anything accepted is canonical again


# -- every parser error -----------------------------------------------------------------

CASES = [
    # (record value, reason, words the detail must contain)
    (None, "empty", ["empty"]),
    (b"", "empty", ["empty"]),
    (b"{" + b" " * 2000 + b"}", "too-large", ["2002 bytes", "limit of 1000"]),
    (b'{"v":1,"site":"\xff"}', "not-utf8", ["byte 15", "UTF-8"]),
    (b'{"v":1,', "invalid-json", ["not valid JSON"]),
    (b'{"v":NaN}', "invalid-json", ["NaN"]),
    (b"[1,2]", "not-an-object", ["array", "expected an object"]),
    (b'"hello"', "not-an-object", ["string"]),
    (raw(obj(v=...)), "missing-field", ["'v'"]),
    (raw(obj(v="1")), "wrong-type", ["'v'", "integer", '"1" (string)']),
    (raw(obj(v=True)), "wrong-type", ["'v'", "integer"]),
    (raw(obj(v=2)), "unsupported-version", ["'v' is 2", "version 1"]),
    (raw(obj(kind=...)), "missing-field", ["'kind'", "snapshot, upsert, delete, end"]),
    (raw(obj(kind=7)), "wrong-type", ["'kind'", "string"]),
    (raw(obj(kind="patch")), "unknown-kind", ["'patch'", "snapshot, upsert, delete, end"]),
    (raw(obj(seq=...)), "missing-field", ["'seq'", "upsert"]),
    (raw(obj(row=...)), "missing-field", ["'row'"]),
    (raw(obj(ts=..., seq=...)), "missing-field", ["'seq'", "also missing: ts"]),
    (raw(obj(extra=1)), "unknown-field", ["'extra'", "allowed fields"]),
    (raw(obj(id="x")), "unknown-field", ["'id'", "upsert"]),
    (raw(obj(seq="3")), "wrong-type", ["'seq'", "64-bit integer", '"3" (string)']),
    (raw(obj(seq=-1)), "wrong-type", ["'seq'", ">= 0"]),
    (raw(obj(seq=True)), "wrong-type", ["'seq'"]),
    (raw(obj(epoch=1.5)), "wrong-type", ["'epoch'"]),
    (raw(obj(ts=2**64)), "wrong-type", ["'ts'", "64-bit"]),
    (raw(obj(site="")), "wrong-type", ["'site'", "non-empty string"]),
    (raw(obj(session=None)), "wrong-type", ["'session'"]),
    (raw(obj(row=["veh-1"])), "wrong-type", ["'row'", "row object", "array"]),
    (raw(obj(row={"speed_kph": 1})), "missing-field", ["'row.id'"]),
    (raw(obj(row={"id": 5})), "wrong-type", ["'row.id'"]),
    (raw(obj(row={"id": "a", "tags": [1]})), "wrong-type", ["'row.tags'", "JSON scalar"]),
    (raw(obj(row={"id": "a", "n": 2**63})), "wrong-type", ["'row.n'", "64-bit"]),
    (
        b'{"v":1,"kind":"upsert","site":"s","session":"s","seq":1,"epoch":0,"ts":1,"row":{"id":"a","t":1e999}}',
        "wrong-type",
        ["'row.t'", "finite"],
    ),
    (raw({"v": 1, "kind": "snapshot", **BASE, "rows": {"id": "a"}}), "wrong-type", ["'rows'", "array"]),
    (raw({"v": 1, "kind": "snapshot", **BASE, "rows": [{"id": "a"}, 3]}), "wrong-type", ["'rows[1]'"]),
    (raw({"v": 1, "kind": "delete", **BASE, "id": 3}), "wrong-type", ["'id'"]),
    (raw({"v": 1, "kind": "end", **BASE, "rows": []}), "unknown-field", ["'rows'", "end"]),
]


@pytest.mark.parametrize(("value", "reason", "words"), CASES, ids=[f"{c[1]}-{i}" for i, c in enumerate(CASES)])
def test_parser_error_names_the_reason_the_field_and_the_expectation(value: bytes | None, reason: str, words: list[str]) -> None:
    with pytest.raises(ContractError) as exc:
        decode(value, max_bytes=1000)
    assert exc.value.reason == reason
    for word in words:
        assert word in exc.value.detail, f"{word!r} not in {exc.value.detail!r}"
    assert str(exc.value).startswith(f"{reason}: ")


def test_every_reason_in_the_vocabulary_is_exercised() -> None:
    assert {c[1] for c in CASES} == set(CONTRACT_REASONS)


def test_contract_error_pickles_by_value() -> None:
    err = ContractError("missing-field", "field 'seq' is missing")
    back = pickle.loads(pickle.dumps(err))
    assert type(back) is ContractError
    assert (back.reason, back.detail, str(back)) == (err.reason, err.detail, str(err))


def test_contract_error_refuses_a_reason_outside_the_vocabulary() -> None:
    with pytest.raises(ValueError, match="not one of"):
        ContractError("bogus", "x")  # type: ignore[arg-type]


# -- building and encoding --------------------------------------------------------------


def test_message_payload_must_match_its_kind() -> None:
    with pytest.raises(ContractError) as exc:
        Message(Kind.UPSERT, **BASE)
    assert exc.value.reason == "missing-field" and "'row'" in exc.value.detail
    with pytest.raises(ContractError) as exc:
        Message(Kind.END, **BASE, row_id="a")
    assert exc.value.reason == "unknown-field"
    with pytest.raises(ContractError):
        Message.end(**{**BASE, "seq": -1})


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        (Message.upsert(row={"id": "a", "x": float("nan")}, **BASE), "row.x"),
        (Message.upsert(row={"id": "a", "x": [1]}, **BASE), "row.x"),  # type: ignore[dict-item]
        (Message.upsert(row={"x": 1}, **BASE), "row.id"),
        (Message.snapshot(rows=[{"id": "a"}, {"id": ""}], **BASE), "rows[1].id"),
        (Message.end(**{**BASE, "site": ""}), "site"),
    ],
)
def test_encode_refuses_what_decode_would_reject(msg: Message, field: str) -> None:
    with pytest.raises(ContractError) as exc:
        encode(msg)
    assert field in exc.value.detail


def test_decode_accepts_memoryview_and_bytearray() -> None:
    value = encode(Message.end(**BASE))
    assert decode(bytearray(value)) == decode(value)


def test_messages_pickle_for_spark_workers() -> None:
    msg = Message.snapshot(rows=[{"id": "a", "x": 1}], **BASE)
    assert pickle.loads(pickle.dumps(msg)) == msg


def test_decoding_needs_no_heavy_imports_and_nothing_in_producers_imports_spark() -> None:
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys, producers; producers.decode(producers.encode(producers.Message.end(site='s', session='s', seq=0,"
        " epoch=0, ts=0)));"
        "light = [m for m in ('pandas', 'pyarrow', 'confluent_kafka', 'faker') if m in sys.modules];"
        "import producers.cli, producers.runner, producers.expected_output, producers.kafka, producers.ledger;"
        "print(light, 'pyspark' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "[] False", done.stderr


# -- the typed reader agrees with the checking reader -------------------------------------

edge_cells = st.one_of(
    scalars,
    st.sampled_from([2**63, -(2**63) - 1, 2**64, 1.0, -0.0, 1e308, 0, True, False, "", "\ud800", "é\u2028"]),
)
edge_rows = st.dictionaries(st.sampled_from(["id", "x", "", "\u0000"]), edge_cells, max_size=4)
edge_objects = st.dictionaries(
    st.sampled_from(["v", "kind", "site", "session", "seq", "epoch", "ts", "rows", "row", "id", "x"]),
    st.one_of(
        edge_cells,
        st.sampled_from(["snapshot", "upsert", "delete", "end", "SNAPSHOT", "patch"]),
        edge_rows,
        st.lists(edge_rows, max_size=3),
        json_values,
    ),
)


def _as_text(msg: Message) -> str:
    # repr tells 1 from 1.0 and True from 1, which == does not
    return repr(msg)


@settings(max_examples=500)
@given(st.one_of(messages.map(encode), edge_objects.map(lambda o: json.dumps(o).encode())))
def test_the_typed_reader_accepts_only_what_the_checking_reader_accepts_and_reads_it_alike(value: bytes) -> None:
    from producers.contract import _decode_checked, _decode_typed

    fast = _decode_typed(value)
    try:
        slow = _decode_checked(value)
    except ContractError:
        assert fast is None
    else:
        if fast is not None:
            assert _as_text(fast) == _as_text(slow)


@pytest.mark.parametrize(
    "value",
    [
        b'{"kind":"upsert","v":1,"site":"s","session":"s","seq":1,"epoch":0,"ts":1,"kind":"delete","id":"x"}',
        b'{"v":1,"kind":"upsert","site":"s","session":"s","seq":1,"epoch":0,"ts":1,"row":{"id":"a","t":1e999}}',
        b'{"v":1,"kind":"upsert","site":"s","session":"s","seq":1,"epoch":0,"ts":1,"row":{"id":"\\ud800"}}',
        b'{"v":1,"kind":"upsert","site":"s","session":"s","seq":1,"epoch":0,"ts":1,"row":{"id":"a","n":2e0}}',
        b'{"v":1,"v":2,"kind":"end","site":"s","session":"s","seq":1,"epoch":0,"ts":1}',
    ],
)
def test_decode_is_the_checking_readers_answer_on_edge_records(value: bytes) -> None:
    from producers.contract import _decode_checked

    try:
        want: object = _as_text(_decode_checked(value))
    except ContractError as exc:
        want = (exc.reason, exc.detail)
    try:
        got: object = _as_text(decode(value))
    except ContractError as exc:
        got = (exc.reason, exc.detail)
    assert got == want


@given(messages)
def test_the_typed_reader_reads_every_encoded_message_itself(msg: Message) -> None:
    from producers.contract import _decode_typed

    fast = _decode_typed(encode(msg))
    assert fast is not None and _as_text(fast) == _as_text(msg)


# -- the producers' encoder: the same bytes, faster ------------------------------------------

small_floats = st.sampled_from([1e-05, -5e-05, 1e16, -2.5e17, 1e-300, 0.0, -0.0, 1e-4, 9999999999999998.0])
tricky_rows = st.builds(
    lambda rid, cells: {"id": rid, **cells},
    names,
    # a cell named "id" would replace the row id (with a null, say): not a valid row to encode
    st.dictionaries(st.text(min_size=1, max_size=8).filter(lambda k: k != "id"), st.one_of(scalars, small_floats), max_size=5),
)
tricky_messages = st.one_of(
    messages,
    st.builds(lambda e, r: Message.snapshot(rows=r, **e), envelopes, st.lists(tricky_rows, max_size=5)),
    st.builds(lambda e, r: Message.upsert(row=r, **e), envelopes, tricky_rows),
)


@given(st.lists(tricky_messages, min_size=1, max_size=6))
def test_the_encoder_writes_exactly_what_encode_writes(msgs: list[Message]) -> None:
    encoder = Encoder()
    for msg in msgs + msgs:  # the second pass is served from what it remembers
        assert encoder.encode(msg) == encode(msg)


def test_the_encoder_reuses_a_rows_bytes_only_while_it_is_the_same_object() -> None:
    encoder = Encoder()
    row = {"id": "a", "x": 1}
    first = encoder.encode(Message.upsert(row=row, **BASE))
    changed = {"id": "a", "x": 2}  # a new row with the same id replaces the remembered one
    assert encoder.encode(Message.snapshot(rows=[changed], **BASE)) == encode(Message.snapshot(rows=[changed], **BASE))
    assert b'"x":1' in first


@pytest.mark.parametrize(
    ("msg", "field"),
    [
        (Message.upsert(row={"id": "a", "x": float("nan")}, **BASE), "row.x"),
        (Message.upsert(row={"id": "a", "x": [1]}, **BASE), "row.x"),  # type: ignore[dict-item]
        (Message.upsert(row={"x": 1}, **BASE), "row.id"),
        (Message.upsert(row={"id": "a", "x": 2**63}, **BASE), "row.x"),
        (Message.snapshot(rows=[{"id": "a"}, {"id": ""}], **BASE), "rows[1].id"),
        (Message.snapshot(rows=[{"id": ["a"]}], **BASE), "rows[0].id"),  # type: ignore[list-item]
        (Message.end(**{**BASE, "site": ""}), "site"),
        (Message.end(**{**BASE, "ts": 2**63}), "ts"),
    ],
)
def test_the_encoder_refuses_what_encode_refuses(msg: Message, field: str) -> None:
    with pytest.raises(ContractError) as exc:
        Encoder().encode(msg)
    assert field in exc.value.detail
