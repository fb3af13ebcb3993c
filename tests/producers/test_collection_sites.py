"""Sites: deterministic Faker tables, one column set per type, valid topic names."""

from __future__ import annotations

import random

import pytest

from producers.errors import RunConfigError
from producers.sites import COLUMNS, SITE_TYPES, Site, site_name, topic_for


@pytest.mark.parametrize("kind", SITE_TYPES)
def test_the_same_seed_builds_the_same_table(kind: str) -> None:
    a = Site(f"{kind}-0", kind, seed=7)  # type: ignore[arg-type]
    b = Site(f"{kind}-0", kind, seed=7)  # type: ignore[arg-type]
    c = Site(f"{kind}-0", kind, seed=8)  # type: ignore[arg-type]
    assert a.table == b.table
    assert a.table != c.table


@pytest.mark.parametrize("kind", SITE_TYPES)
def test_every_row_has_exactly_the_types_columns_as_json_scalars(kind: str) -> None:
    site = Site(f"{kind}-1", kind, seed=1)  # type: ignore[arg-type]
    assert 200 <= len(site.table) <= 400
    rng = random.Random(0)
    rows = list(site.table.values()) + [site.changed(r, rng) for r in list(site.table.values())[:50]]
    for row in rows:
        assert tuple(row) == ("id", *COLUMNS[kind])  # type: ignore[index]
        assert all(v is None or isinstance(v, (str, int, float, bool)) for v in row.values())
        assert isinstance(row["id"], str) and row["id"]


def test_changed_rows_keep_their_id_and_differ_somewhere() -> None:
    site = Site("fleet-2", "fleet", seed=3)
    rng = random.Random(1)
    for row in list(site.table.values())[:100]:
        new = site.changed(row, rng)
        assert new["id"] == row["id"]
        assert new != row
        assert row is not new  # rows are replaced, never edited


def test_new_rows_never_reuse_an_id_even_after_deletes() -> None:
    site = Site("warehouse-0", "warehouse", seed=2, rows=10)
    rng = random.Random(0)
    seen = set(site.table)
    for _ in range(30):
        site.remove(site.pick_id(rng))
        row = site.new_row(rng)
        assert row["id"] not in seen
        seen.add(row["id"])
        site.put(row)
    assert len(site.table) == 10


def test_site_names_cycle_through_the_types() -> None:
    assert [site_name(i) for i in range(4)] == ["warehouse-0", "weather-1", "fleet-2", "warehouse-3"]


def test_topic_is_prefix_plus_site_and_must_be_a_valid_kafka_name() -> None:
    assert topic_for("fleet-2") == "collection-fleet-2"
    assert topic_for("fleet-2", "lab.") == "lab.fleet-2"
    with pytest.raises(RunConfigError, match=r"\[a-zA-Z0-9._-\]"):
        topic_for("fleet 2")
    with pytest.raises(RunConfigError):
        topic_for("x" * 250, "")


def test_unknown_site_type_is_refused_with_the_choices() -> None:
    with pytest.raises(RunConfigError, match="warehouse, weather, fleet"):
        Site("x", "bakery", seed=0)  # type: ignore[arg-type]
