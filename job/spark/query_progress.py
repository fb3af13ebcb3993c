"""What a query progress says, as plain data: the Kafka offsets of a micro-batch.

A ``StreamingQueryProgress`` (a query's ``lastProgress`` / ``recentProgress`` entries, or the
JSON a ``StreamingQueryListener`` gets) lists its ``sources``; a Kafka source's
``startOffset`` and ``endOffset`` are ``{topic: {partition: offset}}``, as a JSON string or
already parsed, depending on who handed the progress over. This module is the one reader
of them; it needs nothing but the standard library.

- :func:`kafka_offsets` -- one source's offsets as ``{topic: {partition: offset}}``;
  bad JSON and shapes that are not Kafka's (another source type) give ``{}``.
- :func:`reached` and :func:`started` -- a batch's end and start offsets, merged over its
  sources (a query reads one pattern, so topics do not collide).
- :func:`offset_total` and :func:`records_between` -- sums over partitions.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

__all__ = ["kafka_offsets", "offset_total", "reached", "records_between", "started"]


def kafka_offsets(value: Any) -> dict[str, dict[str, int]]:
    """A source's ``startOffset`` or ``endOffset`` (a JSON string or a dict) as
    ``{topic: {partition: offset}}``; a value that is not Kafka-shaped (bad JSON, None,
    another source's offsets) gives ``{}``, and a topic whose offsets are not all ints is left out."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            return {}
    if not isinstance(value, Mapping):
        return {}
    out: dict[str, dict[str, int]] = {}
    for topic, parts in value.items():
        if isinstance(parts, Mapping) and all(isinstance(v, int) for v in parts.values()):
            out[str(topic)] = {str(p): int(o) for p, o in parts.items()}
    return out


def _merged(progress: Mapping[str, Any] | None, key: str) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for source in (progress or {}).get("sources") or []:
        for topic, parts in kafka_offsets(source.get(key)).items():
            out.setdefault(topic, {}).update(parts)
    return out


def reached(progress: Mapping[str, Any] | None) -> dict[str, dict[str, int]]:
    """The end offsets of every Kafka source of a progress (None: no batch yet), merged:
    where the batch left off, exclusive."""
    return _merged(progress, "endOffset")


def started(progress: Mapping[str, Any] | None) -> dict[str, dict[str, int]]:
    """The start offsets of every Kafka source of a progress, merged: where the batch began."""
    return _merged(progress, "startOffset")


def offset_total(offsets: Mapping[str, Mapping[str, int]]) -> int:
    """The sum of every partition's offset: with end offsets of topics that start at 0, the
    records up to there."""
    return sum(int(o) for parts in offsets.values() for o in parts.values())


def records_between(start: Mapping[str, Mapping[str, int]], end: Mapping[str, Mapping[str, int]]) -> int:
    """Records from ``start`` up to ``end``, summed over ``end``'s partitions; a partition
    missing from ``start`` counts from 0, and one already past its end counts 0."""
    return sum(max(0, int(o) - int(start.get(t, {}).get(p, 0))) for t, parts in end.items() for p, o in parts.items())
