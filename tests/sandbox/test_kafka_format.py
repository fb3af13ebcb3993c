"""The KRaft cluster id a fresh local sandbox formats Kafka's storage with.

A URL-safe base64 id starts with ``-`` one time in 64; passed as ``-t <id>`` Kafka's
``StorageTool`` read it as an option and every fresh state dir (tests, bench, demo) rolled
that die. These format real storage with the cached Kafka jars and an id that starts with
``-``.
"""

from __future__ import annotations

import uuid

import pytest

from sandbox import Settings
from sandbox.artifacts import fetch_all
from sandbox.services import local_processes

#: 0xF8 as the first byte: base64's first six bits are 62, which URL-safe base64 writes "-".
DASH_FIRST = uuid.UUID(bytes=b"\xf8" + bytes(range(1, 16)))
PLAIN = uuid.UUID(bytes=bytes(range(16, 32)))


def test_a_cluster_id_that_would_start_with_a_dash_is_drawn_again():
    draws = iter([DASH_FIRST, DASH_FIRST, PLAIN])
    cluster_id = local_processes.kafka_cluster_id(lambda: next(draws))
    assert not cluster_id.startswith("-") and cluster_id == "EBESExQVFhcYGRobHB0eHw"


@pytest.mark.slow
def test_kafka_storage_formats_with_an_id_that_starts_with_a_dash(tmp_path, monkeypatch):
    """The argv itself takes any id: format with one that starts with ``-`` (what
    ``kafka_cluster_id`` no longer makes), through the sandbox's own format step."""
    settings = Settings.from_env({"OSL_STATE_DIR": str(tmp_path / "state")})
    arts = fetch_all(settings, progress=lambda _line: None)
    dashed = "-" + "HKWajAqR1m1WF9eURim9g"
    monkeypatch.setattr(local_processes, "kafka_cluster_id", lambda: dashed)
    layout = local_processes.Layout(settings.state_dir)
    local_processes.prepare(settings, layout, "kafka", arts, progress=lambda _line: None)
    meta = (layout.data_dir("kafka") / "logs" / "meta.properties").read_text()
    assert f"cluster.id={dashed}" in meta, meta
