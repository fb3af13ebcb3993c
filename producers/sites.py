"""Collection points: each site owns a living table that its sessions publish and change.

A site has a name (also the suffix of its Kafka topic), a type that fixes its columns, and
a table of a few hundred rows generated with Faker. Everything is deterministic from the
run seed and the site name: the same seed gives the same table and, for the same sequence
of calls with the same ``random.Random``, the same changes.
"""

from __future__ import annotations

import functools
import hashlib
import random
import re
from dataclasses import dataclass
from typing import Literal

from faker import Faker

from producers.contract import TOPIC_PREFIX, Encoder, Row
from producers.errors import RunConfigError

__all__ = [
    "SITE_TYPES",
    "Site",
    "SiteType",
    "site_name",
    "topic_for",
]

SiteType = Literal["warehouse", "weather", "fleet"]
SITE_TYPES: tuple[SiteType, ...] = ("warehouse", "weather", "fleet")

#: The columns of each site type, after ``id`` (every row has exactly these keys).
COLUMNS: dict[SiteType, tuple[str, ...]] = {
    "warehouse": ("product", "supplier", "aisle", "quantity", "price", "discontinued"),
    "weather": ("station", "condition", "alert", "temperature_c", "humidity_pct", "wind_kph"),
    "fleet": ("driver", "status", "lat", "lon", "speed_kph", "odometer_km"),
}
_ID_PREFIX: dict[SiteType, str] = {"warehouse": "sku-", "weather": "stn-", "fleet": "veh-"}
_CONDITIONS = ("clear", "cloudy", "rain", "snow", "fog", "storm")
_ALERTS = ("wind", "flood", "heat", "frost")
_STATUSES = ("idle", "moving", "loading", "offline")

# Kafka's own rule for topic names (kafka.common.internals.Topic).
_TOPIC_RE = re.compile(r"^[a-zA-Z0-9._-]{1,249}$")


def site_name(index: int) -> str:
    """The name of the ``index``-th site of a run: its type and its index, e.g. ``fleet-2``."""
    return f"{SITE_TYPES[index % len(SITE_TYPES)]}-{index}"


def topic_for(site: str, prefix: str = TOPIC_PREFIX) -> str:
    """The Kafka topic of ``site``: ``prefix + site``; raises if Kafka would refuse the name."""
    topic = f"{prefix}{site}"
    if not _TOPIC_RE.match(topic) or topic in (".", ".."):
        raise RunConfigError(
            "topic",
            topic,
            "Kafka topic names are 1-249 characters from [a-zA-Z0-9._-]; change the prefix or site name",
        )
    return topic


def derive_int(*parts: object) -> int:
    """A stable 63-bit integer from ``parts`` (``hash()`` is salted per process)."""
    digest = hashlib.sha256("/".join(map(str, parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


@dataclass(frozen=True, slots=True)
class _Pools:
    # Faker is slow per call; sampling from pools built once keeps changes cheap.
    words: tuple[str, ...]
    companies: tuple[str, ...]
    cities: tuple[str, ...]
    names: tuple[str, ...]


@functools.lru_cache(maxsize=64)
def _pools(seed: int, name: str) -> _Pools:
    # Pools are immutable and depend only on (seed, name): safe to share between sites.
    fake = Faker("en_US")
    fake.seed_instance(derive_int(seed, name, "faker"))
    return _Pools(
        words=tuple(f"{fake.color_name()} {fake.word()}" for _ in range(120)),
        companies=tuple(fake.company() for _ in range(40)),
        cities=tuple(fake.city() for _ in range(120)),
        names=tuple(fake.name() for _ in range(120)),
    )


class Site:
    """One collection point and its current table (``table``, id -> row, never mutated in place).

    Rows are replaced, never edited, so a snapshot tuple taken earlier stays valid.
    ``new_row``, ``changed`` and the row choice helpers take the caller's ``random.Random``
    so each session's changes are reproducible on their own.
    """

    def __init__(self, name: str, type: SiteType, *, seed: int, rows: int | None = None) -> None:
        if type not in SITE_TYPES:
            raise RunConfigError("site type", type, f"use one of {', '.join(SITE_TYPES)}")
        self.name = name
        self.type: SiteType = type
        self.columns: tuple[str, ...] = ("id", *COLUMNS[type])
        self._pools = _pools(seed, name)
        #: Encodes this site's messages; its rows are replaced, never edited, so it may
        #: remember each row's bytes.
        self.encoder = Encoder()
        rng = random.Random(derive_int(seed, name, "table"))
        self._next_id = 0
        self.table: dict[str, Row] = {}
        self._ids: list[str] = []
        self._where: dict[str, int] = {}
        size = rows if rows is not None else rng.randint(200, 400)
        for _ in range(size):
            self.put(self.new_row(rng))
        #: The table keeps between these many rows: deletes and inserts stay inside the band.
        self.min_rows = max(1, size // 2)
        self.max_rows = max(2, size * 3 // 2)

    def __repr__(self) -> str:
        return f"Site({self.name!r}, {self.type!r}, rows={len(self.table)})"

    # -- the table ---------------------------------------------------------------------

    def put(self, row: Row) -> None:
        """Insert or replace ``row`` (by its id)."""
        rid = row["id"]
        assert isinstance(rid, str)
        if rid not in self.table:
            self._where[rid] = len(self._ids)
            self._ids.append(rid)
        self.table[rid] = row

    def remove(self, rid: str) -> None:
        """Delete row ``rid`` (it must exist)."""
        del self.table[rid]
        # Swap-remove keeps random choice O(1).
        i = self._where.pop(rid)
        last = self._ids.pop()
        if last != rid:
            self._ids[i] = last
            self._where[last] = i

    def pick_id(self, rng: random.Random) -> str:
        return self._ids[rng.randrange(len(self._ids))]

    # -- rows --------------------------------------------------------------------------

    def new_row(self, rng: random.Random) -> Row:
        """A fresh row with an id never used at this site."""
        rid = f"{_ID_PREFIX[self.type]}{self._next_id:05d}"
        self._next_id += 1
        p = self._pools
        if self.type == "warehouse":
            return {
                "id": rid,
                "product": rng.choice(p.words),
                "supplier": rng.choice(p.companies) if rng.random() < 0.9 else None,
                "aisle": f"{rng.choice('ABCDEFGH')}{rng.randint(1, 40):02d}",
                "quantity": rng.randint(0, 500),
                "price": round(rng.uniform(0.5, 400.0), 2),
                "discontinued": rng.random() < 0.05,
            }
        if self.type == "weather":
            return {
                "id": rid,
                "station": rng.choice(p.cities),
                "condition": rng.choice(_CONDITIONS),
                "alert": rng.choice(_ALERTS) if rng.random() < 0.1 else None,
                "temperature_c": round(rng.uniform(-20.0, 40.0), 1),
                "humidity_pct": rng.randint(5, 100),
                "wind_kph": round(rng.uniform(0.0, 90.0), 1),
            }
        return {
            "id": rid,
            "driver": rng.choice(p.names) if rng.random() < 0.85 else None,
            "status": rng.choice(_STATUSES),
            "lat": round(rng.uniform(-60.0, 70.0), 5),
            "lon": round(rng.uniform(-180.0, 180.0), 5),
            "speed_kph": round(rng.uniform(0.0, 120.0), 1),
            "odometer_km": rng.randint(0, 400_000),
        }

    def changed(self, row: Row, rng: random.Random) -> Row:
        """A copy of ``row`` with one to three columns changed the way this site's data moves."""
        new = dict(row)
        if self.type == "warehouse":
            q = new["quantity"]
            new["quantity"] = max(0, (q if isinstance(q, int) else 0) + rng.randint(-25, 25))
            if rng.random() < 0.2:
                new["price"] = round(rng.uniform(0.5, 400.0), 2)
            if rng.random() < 0.02:
                new["discontinued"] = not new["discontinued"]
        elif self.type == "weather":
            t = new["temperature_c"]
            new["temperature_c"] = round((t if isinstance(t, float) else 0.0) + rng.uniform(-1.5, 1.5), 1)
            new["humidity_pct"] = min(100, max(0, int(new["humidity_pct"] or 0) + rng.randint(-5, 5)))
            if rng.random() < 0.15:
                new["condition"] = rng.choice(_CONDITIONS)
                new["alert"] = rng.choice(_ALERTS) if rng.random() < 0.2 else None
        else:
            for axis in ("lat", "lon"):
                v = new[axis]
                new[axis] = round((v if isinstance(v, float) else 0.0) + rng.uniform(-0.01, 0.01), 5)
            new["speed_kph"] = round(rng.uniform(0.0, 120.0), 1)
            new["odometer_km"] = int(new["odometer_km"] or 0) + rng.randint(0, 3)
            if rng.random() < 0.1:
                new["status"] = rng.choice(_STATUSES)
        return new
