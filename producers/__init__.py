"""Collection-point producers: the wire contract, sites and sessions, data faults, the ledger.

Wire contract, version 1
========================
Each Kafka record is one message. The **key** is the session id (UTF-8); the **value**
is one JSON object in UTF-8, at most 1,000,000 bytes (``DEFAULT_MAX_BYTES``). Topics are
named ``<prefix><site>`` (default prefix ``collection-``), one per site, so a reader can
subscribe by pattern (``collection-.*``) and discover sites as they appear.

Envelope fields, all required, no others allowed (``unknown-field``):

=========  ========  ==============================================================
field      type      meaning
=========  ========  ==============================================================
``v``      int       schema version, ``1`` (anything else: ``unsupported-version``)
``kind``   str       ``snapshot`` | ``upsert`` | ``delete`` | ``end``
``site``   str       the collection point (non-empty)
``session`` str      the session id, unique across sites and runs; equals the key
``seq``    int >= 0  per session *and epoch*: 0 is the opening snapshot, +1 per
                     message of the session (snapshots and ``end`` included)
``epoch``  int >= 0  producer epoch; a restarted producer bumps it and restarts seq
                     at 0 with a snapshot. Order within a session is ``(epoch, seq)``
``ts``     int       event time, epoch milliseconds (never use it for ordering)
=========  ========  ==============================================================

Payload, by kind: ``snapshot`` carries ``"rows"`` (array of row objects, the full table,
replacing whatever the reader had); ``upsert`` carries ``"row"`` (one complete row,
inserted or replaced by id, never a patch); ``delete`` carries ``"id"`` (the row id, a
string); ``end`` carries nothing and closes the session. A row object always has
``"id"`` (non-empty string) plus the site type's columns, each a JSON scalar (string,
number, boolean, null; integers within 64 bits, floats finite). Snapshots repeat every N
messages (and optionally every T seconds), which bounds any loss to one interval.

Example (an upsert)::

    {"v":1,"kind":"upsert","site":"fleet-2","session":"fleet-2-r1a2b3c-s0001","seq":17,
     "epoch":0,"ts":1732233600123,"row":{"id":"veh-00042","driver":null,"status":"idle",...}}

:func:`decode` turns bytes into a typed :class:`Message` or raises :class:`ContractError`
with ``reason`` in a closed vocabulary (``empty``, ``too-large``, ``not-utf8``,
``invalid-json``, ``not-an-object``, ``missing-field``, ``unknown-field``,
``wrong-type``, ``unknown-kind``, ``unsupported-version``) and a ``detail`` naming the
field and what was expected. :func:`encode` is its inverse and refuses what decode would
reject.

The rest of the package
=======================
``producers.sites`` (Faker-made tables per site type), ``producers.sessions`` (the
snapshot/update lifecycle), ``producers.faults`` (the fault registry; ``python -m
producers faults``), ``producers.ledger`` (what was meant, sent and acknowledged, as
Parquet), ``producers.expected_output`` (from the ledger alone: each session's expected final
table and the loss window of every fault), ``producers.runner`` and ``producers.cli``
(``python -m producers run``). Importing this package stays light (no Kafka, pandas or
Arrow) until a name that needs them is used.
"""

from __future__ import annotations

import importlib
from typing import Any

from producers.contract import DEFAULT_MAX_BYTES, SCHEMA_VERSION, Kind, Message, decode, encode
from producers.errors import ContractError, ProducerError

__all__ = [
    "DEFAULT_MAX_BYTES",
    "FAULTS",
    "SCHEMA_VERSION",
    "Anomaly",
    "ContractError",
    "ExpectedSession",
    "Kind",
    "LossWindow",
    "Message",
    "ProducerError",
    "RunConfig",
    "Runner",
    "S3Target",
    "decode",
    "encode",
    "expected_sessions",
    "loss_windows",
    "parse_fault",
    "read_ledger",
]

# Heavy modules load on first use, so a Spark worker that only decodes stays lean.
_LAZY = {
    "FAULTS": "producers.faults",
    "Anomaly": "producers.faults",
    "parse_fault": "producers.faults",
    "ExpectedSession": "producers.expected_output",
    "LossWindow": "producers.expected_output",
    "expected_sessions": "producers.expected_output",
    "loss_windows": "producers.expected_output",
    "read_ledger": "producers.ledger",
    "S3Target": "producers.ledger",
    "RunConfig": "producers.runner",
    "Runner": "producers.runner",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'producers' has no attribute {name!r}")
