"""The verifier's window index against the scan it replaced (bench/verify_deleted_bench.py): the
same report on a session whose middle Kafka deleted, and the verdict the deletion explains."""

from __future__ import annotations

import pytest

from tests.bench_scripts import loaded


@pytest.fixture(scope="module")
def bench():
    yield from loaded("verify_deleted_bench")


@pytest.mark.parametrize("n", [200, 1000])
def test_the_index_and_the_scan_give_the_same_report(bench, n):
    ledger, deleted = bench.session(n)
    frames = bench.outputs(ledger, deleted)
    _, indexed = bench.judge(ledger, frames, deleted)
    with bench.baseline():
        _, scanned = bench.judge(ledger, frames, deleted)
    assert indexed.ok and indexed.lost == deleted.count == n - 2 * (n // 10), indexed.summary()
    assert indexed.counts == {"kafka-deleted": {"gap": 1, "lost": deleted.count}}, indexed.counts
    assert indexed == scanned
