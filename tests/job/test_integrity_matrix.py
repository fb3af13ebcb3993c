"""A small fault x policy matrix for real: producers with faults into fresh topics, the job
under each policy on the sandbox's cluster, and the verifier's verdict on every output."""

from __future__ import annotations

import pytest

from job.drills.integrity import fault_matrix, interval_sweep, sweep_frame
from producers.faults import ClockSkew, Corrupt, Drop, Duplicate, Reorder

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_each_policy_keeps_its_promise_on_the_same_damaged_run(sandbox, spark, tmp_path):
    faults = (
        Drop(probability=0.02),
        Duplicate(probability=0.02),
        Corrupt(probability=0.02),
        Reorder(probability=0.02),
        ClockSkew(probability=0.02),
    )
    matrix = fault_matrix(
        spark,
        sandbox.settings,
        workdir=tmp_path,
        faults=faults,
        sites=2,
        sessions=1,
        rate=200,
        duration=3,
        progress=lambda m: None,
    )
    reports = {p: r.report for p, r in matrix.runs.items()}
    assert all(r.ok for r in reports.values()), "\n".join(r.summary() for r in reports.values())
    strict = matrix.runs["strict"]
    assert strict.error is not None and "policy strict stops here" in strict.error
    assert reports["strict"].quarantined == 0 and reports["strict"].lost > 0
    assert reports["resync"].quarantined > 0 and reports["resync"].lost == 0
    frame = matrix.frame(sandbox.settings).set_index(["policy", "fault"])
    assert frame.loc[("resync", Corrupt.name), "faulted"] > 0 and frame.loc[("resync", Corrupt.name), "applied"] == 0
    skew = frame.loc[("resync", ClockSkew.name)]
    # a late timestamp costs nothing of its own: applied (unless another fault's window covers it), never set aside
    assert skew.faulted > 0 and skew.applied > 0 and skew.quarantined == 0 and skew.lost == 0
    # none applies everything in arrival order: the skewed times are flagged late, the swaps reordered
    # (the seed fixes where the faults land; resync and window must never show reordered, ok checks that)
    assert "late" in frame.loc[("none", ClockSkew.name), "other_kinds"].split(", ")
    assert "reordered" in frame.loc[("none", Reorder.name), "other_kinds"].split(", ")
    assert frame.allowed.all()


def test_resync_sets_aside_more_with_a_longer_snapshot_interval_and_never_past_the_bound(sandbox, spark, tmp_path):
    points = interval_sweep(
        spark,
        sandbox.settings,
        workdir=tmp_path,
        intervals=(5, 40),
        faults=(Drop(probability=0.03),),
        sites=2,
        rate=200,
        duration=3,
        progress=lambda m: None,
    )
    sweep = sweep_frame(points).set_index("snapshot_every")
    assert sweep.ok.all(), "\n".join(p.report.summary() for p in points)
    assert (sweep.set_aside <= sweep.bound).all() and sweep.loc[40, "set_aside"] > sweep.loc[5, "set_aside"]
