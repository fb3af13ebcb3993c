"""The baseline consumer against the sandbox's real Kafka: produce with faults, consume, verify.

Each test writes to topics under its own random prefix, so reruns and other tests never
share a topic.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from job.baseline import BaselineConfig, end_offsets, run_baseline
from job.engine.errors import IntegrityError
from job.verify.compare import check
from producers.ledger import read_ledger
from producers.runner import Runner
from tests.kafka_runs import produce, run_config

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FAULTS = (
    "drop:0.01",
    "duplicate:0.01",
    "reorder:0.01:k=3",
    "corrupt:0.005",
    "schema-drift:0.005",
    "silent-divergence:0.01",
    "clock-skew:0.005",
    "oversized:sessions=0:at=40",  # a periodic snapshot (snapshot_every=40)
    "orphan-update:sessions=1",
    "epoch-reset:sites=weather-1:at=150",
    "crash:sites=fleet-2:sessions=0:at=120",
)


@pytest.fixture(scope="module")
def faulty_run(bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    """One producer run with every kind of data fault, into fresh topics: (prefix, ledger path)."""
    cfg, summary = produce(
        bootstrap,
        tmp_path_factory.mktemp("baseline") / "ledger",
        faults=FAULTS,
        sites=2,
        join=1,
        sessions=2,
        rate=3000.0,
        duration=30.0,
        session_length=300,
        snapshot_every=40,
        seed=5,
    )
    assert summary.stopped == "completed", summary.text()
    return cfg.topic_prefix, cfg.ledger


@pytest.mark.parametrize("policy", ["resync", "window", "none"])
def test_a_faulty_run_read_by_the_baseline_passes_the_verifier(
    bootstrap: str, faulty_run: tuple[str, str], policy: str, tmp_path: Path
) -> None:
    prefix, ledger_path = faulty_run
    ledger = read_ledger(ledger_path)
    ends = end_offsets(bootstrap, prefix)
    assert len(ends) == 9  # three sites, three partitions each
    config = BaselineConfig(
        bootstrap=bootstrap,
        topic_prefix=prefix,
        policy=policy,
        end_offsets=ends,
        idle_s=60,  # type: ignore[arg-type]
    )
    result = run_baseline(config)
    assert result.stopped == "end-offsets" and result.error is None
    assert result.records == sum(ends.values()) == int((ledger["outcome"] == "ok").sum())
    report = check(ledger, result.rows, result.quarantine, result.sessions, policy=policy)  # type: ignore[arg-type]
    assert report.ok, report.summary()
    assert report.sessions == 6 and report.lost == 0  # every delivered record is applied or quarantined
    faults = set(report.counts)
    assert {"drop", "duplicate", "corrupt", "oversized", "orphan-update", "epoch-reset"} <= faults, report.summary()
    if policy != "none":
        assert report.quarantined > 0 and "too-large" in set(result.quarantine["reason"])
    paths = result.write_parquet(tmp_path / policy)
    assert all(p.stat().st_size > 0 for p in paths.values())


def test_under_strict_the_baseline_stops_at_the_first_fault_and_what_it_wrote_verifies(
    bootstrap: str, faulty_run: tuple[str, str]
) -> None:
    prefix, ledger_path = faulty_run
    result = run_baseline(
        BaselineConfig(
            bootstrap=bootstrap,
            topic_prefix=prefix,
            policy="strict",
            end_offsets=end_offsets(bootstrap, prefix),
            batch_size=50,
            idle_s=60,
        )
    )
    assert result.stopped == "integrity" and isinstance(result.error, IntegrityError)
    assert result.error.topic.startswith(prefix) and result.error.session in str(result.error)
    report = check(read_ledger(ledger_path), result.rows, result.quarantine, result.sessions, policy="strict")
    assert report.ok, report.summary()
    assert report.lost > 0 and result.quarantine.empty


def test_end_offsets_given_later_stop_the_run_there_instead_of_at_idle(bootstrap: str, faulty_run: tuple[str, str]) -> None:
    """The recovery bench's baseline learns its end offsets only once the producers are
    done: asked between batches, they stop the run as soon as it has read them."""
    prefix, _ = faulty_run
    ends = end_offsets(bootstrap, prefix)
    asked: list[int] = []

    def later():
        asked.append(1)
        return ends if len(asked) > 3 else None

    result = run_baseline(
        BaselineConfig(bootstrap=bootstrap, topic_prefix=prefix, batch_size=50, idle_s=600), end_offsets_later=later
    )
    assert result.stopped == "end-offsets" and result.records == sum(ends.values()), (result.stopped, result.records)
    assert len(asked) == 4  # asked until it answered, not after


def test_the_baseline_discovers_a_site_that_joins_while_it_runs(bootstrap: str, tmp_path: Path) -> None:
    cfg = run_config(
        bootstrap,
        tmp_path / "ledger",
        faults=["drop:0.01"],
        sites=1,
        join=1,
        sessions=1,
        rate=200.0,
        duration=8.0,
        session_length=600,
        snapshot_every=50,
        seed=9,
    )
    prefix = cfg.topic_prefix
    producing = threading.Thread(target=lambda: Runner(cfg).run())
    producing.start()
    try:
        # Started before the second site's topic exists; stops 6 s after the last record.
        result = run_baseline(BaselineConfig(bootstrap=bootstrap, topic_prefix=prefix, policy="resync", idle_s=6))
    finally:
        producing.join(timeout=120)
    assert not producing.is_alive()
    ledger = read_ledger(cfg.ledger)
    assert set(result.rows["topic"]) == {f"{prefix}warehouse-0", f"{prefix}weather-1"}
    report = check(ledger, result.rows, result.quarantine, result.sessions, policy="resync")
    assert report.ok, report.summary()
    assert report.delivered == result.records and report.lost == 0
