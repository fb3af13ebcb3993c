"""The executors' JVMs run the collector ``Settings.executor_gc`` names (README, Known
limits: G1's concurrent threads took a sixth of the executors' CPU on a fleet backlog)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sandbox.jvm import class_data_sharing


def _thread_names(pid: int) -> list[str]:
    names = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            names.append((task / "comm").read_text().strip())
        except OSError:  # the thread ended meanwhile
            continue
    return names


@pytest.mark.integration
def test_the_executors_collect_garbage_without_g1s_concurrent_threads(spark):
    """Asked of the running JVMs, not of the conf: a G1 JVM has its "G1 Conc#0", "G1 Refine#0"
    and "G1 Service" threads from its start, the parallel collector has only "GC Thread#N"."""
    app = spark.sparkContext.applicationId
    spark.range(4).repartition(2).count()  # executors are up
    executors = class_data_sharing.executor_pids(app)
    assert executors, f"no executor process of {app} on this machine"
    for pid in executors:
        names = _thread_names(pid)
        g1 = sorted({n for n in names if n.startswith("G1 ")})
        assert not g1, (
            f"executor JVM {pid} of {app} runs G1 (threads {g1}), not {spark.conf.get('spark.executor.extraJavaOptions')}"
        )
        assert any(n.startswith("GC Thread") for n in names), f"executor JVM {pid}: no GC thread among {sorted(set(names))}"
