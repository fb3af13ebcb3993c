"""Producer runs into fresh topics, for the integration tests that need real records in Kafka.

Every run gets its own random topic prefix unless one is given, so reruns and other tests
never share a topic.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from producers.faults import parse_fault
from producers.runner import RunConfig, Runner, RunSummary


def fresh_prefix() -> str:
    return f"itest-{uuid.uuid4().hex[:8]}-"


def run_config(bootstrap: str, ledger: str | Path, *, faults: Iterable[str] = (), **settings: Any) -> RunConfig:
    """A RunConfig for the sandbox's Kafka with faults given as CLI specs (``drop:0.01``)."""
    settings.setdefault("topic_prefix", fresh_prefix())
    return RunConfig(ledger=str(ledger), bootstrap=bootstrap, faults=tuple(parse_fault(f) for f in faults), **settings)


def produce(bootstrap: str, ledger: str | Path, *, faults: Iterable[str] = (), **settings: Any) -> tuple[RunConfig, RunSummary]:
    """Run the producers to the end; returns the config (its ``topic_prefix``, ``ledger``) and the summary."""
    cfg = run_config(bootstrap, ledger, faults=faults, **settings)
    return cfg, Runner(cfg).run()
