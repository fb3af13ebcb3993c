"""The repair's pure planning: damage, session cuts, restart offsets, what to delete."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from job.engine.errors import ConfigError, RepairError
from job.ops.repair import (
    RepairPlan,
    _Journal,
    find_damage,
    parse_partitions,
    plan_repair,
    restart_points,
    starting_offsets,
)
from job.spark.checkpoints import checkpoint_end_offsets
from job.spark.config import JobConfig, parse_offsets

T = "site-1"


def _rows(*items):
    """(session, op, row_id, partition, offset) -> a rows table on topic T."""
    return pd.DataFrame(
        [{"session": s, "op": op, "row_id": rid, "topic": T, "partition": p, "offset": o} for s, op, rid, p, o in items],
        columns=["session", "op", "row_id", "topic", "partition", "offset"],
    )


def _inputs(*items):
    """(partition, offset, kind, snapshot_rows) -> Kafka records on topic T."""
    return pd.DataFrame(
        [{"topic": T, "partition": p, "offset": o, "kind": k, "snapshot_rows": n} for p, o, k, n in items],
        columns=["topic", "partition", "offset", "kind", "snapshot_rows"],
    )


EMPTY_Q = pd.DataFrame(columns=["key", "session", "topic", "partition", "offset"])
EMPTY_S = pd.DataFrame(columns=["session", "status", "topic", "partition", "offset"])

# Partition 0 holds sessions a and b; a snapshots at 0 and 4, b at 1 and 6 (6 is missing).
INPUTS = _inputs(
    (0, 0, "snapshot", 2),
    (0, 1, "snapshot", 1),
    (0, 2, "upsert", None),
    (0, 3, "upsert", None),
    (0, 4, "snapshot", 2),
    (0, 5, "upsert", None),
    (0, 6, "snapshot", 1),
    (0, 7, "upsert", None),
)
LAKE = _rows(
    ("a", "snapshot", "r1", 0, 0),
    ("a", "snapshot", "r2", 0, 0),
    ("b", "snapshot", "x", 0, 1),
    ("a", "upsert", "r1", 0, 2),
    ("b", "upsert", "x", 0, 3),
    ("a", "snapshot", "r1", 0, 4),
    ("a", "snapshot", "r2", 0, 4),
    ("b", "upsert", "y", 0, 5),
)


def test_damage_is_the_first_processed_record_without_output():
    present = LAKE[["topic", "partition", "offset"]]
    assert find_damage(INPUTS, present, {(T, 0): 8}) == {(T, 0): 6}
    # records the checkpoint has not reached yet are not damage
    assert find_damage(INPUTS, present, {(T, 0): 6}) == {}


def test_an_end_record_writes_no_row_and_is_never_damage():
    inputs = _inputs((0, 0, "snapshot", 1), (0, 1, "end", None))
    assert find_damage(inputs, _rows(("a", "snapshot", "r", 0, 0)), {(T, 0): 2}) == {}


def test_each_session_restarts_at_its_last_complete_snapshot_before_the_damage():
    cuts = restart_points(LAKE, EMPTY_Q, EMPTY_S, {(T, 0): 6}, {(T, 0, 0): 2, (T, 0, 1): 1, (T, 0, 4): 2})
    assert cuts == {(T, 0, "a"): 4, (T, 0, "b"): 1}


def test_an_incomplete_snapshot_does_not_count():
    lake = LAKE[~((LAKE["offset"] == 4) & (LAKE["row_id"] == "r2"))]  # one of snapshot 4's two rows is gone
    cuts = restart_points(lake, EMPTY_Q, EMPTY_S, {(T, 0): 6}, {(T, 0, 0): 2, (T, 0, 1): 1, (T, 0, 4): 2})
    assert cuts[(T, 0, "a")] == 0


def test_an_empty_snapshot_is_complete_with_its_single_marker_row():
    lake = _rows(("a", "snapshot", "r1", 0, 0), ("a", "snapshot", "", 0, 3))
    cuts = restart_points(lake, EMPTY_Q, EMPTY_S, {(T, 0): 5}, {(T, 0, 0): 1, (T, 0, 3): 0})
    assert cuts == {(T, 0, "a"): 3}


def test_a_session_without_a_snapshot_or_ended_is_cut_at_the_damage():
    quarantine = pd.DataFrame([{"key": "c", "session": "c", "topic": T, "partition": 0, "offset": 2}])
    sessions = pd.DataFrame([{"session": "a", "status": "ended", "topic": T, "partition": 0, "offset": 5}])
    cuts = restart_points(LAKE, quarantine, sessions, {(T, 0): 6}, {})
    assert cuts[(T, 0, "c")] == 6 and cuts[(T, 0, "a")] == 6 and cuts[(T, 0, "b")] == 1


def test_plan_restarts_the_partition_at_the_earliest_cut_and_counts_rows_to_delete():
    plan = _plan()
    (p0,) = plan.partitions
    assert (p0.damage, p0.restart, p0.damaged) == (6, 1, True)
    # a's rows from offset 4 and b's from offset 1 are rewritten by the restarted job
    assert p0.rows_to_delete == len(
        LAKE[((LAKE.session == "a") & (LAKE.offset >= 4)) | ((LAKE.session == "b") & (LAKE.offset >= 1))]
    )
    assert plan.offsets == {T: {"0": 1, "1": -2}}
    assert "damage" in plan.describe() and plan.backup in plan.describe()


def test_intact_partitions_restart_for_their_state_when_another_is_repaired():
    lake = pd.concat([LAKE, _rows(("z", "snapshot", "q", 1, 0), ("z", "upsert", "q", 1, 1))], ignore_index=True)
    inputs = pd.concat([INPUTS, _inputs((1, 0, "snapshot", 1), (1, 1, "upsert", None))], ignore_index=True)
    plan = _plan(lake=lake, inputs=inputs, ends={(T, 0): 8, (T, 1): 2})
    by_part = {p.partition: p for p in plan.partitions}
    assert not by_part[1].damaged and by_part[1].damage == 2 and by_part[1].restart == 0
    assert plan.cuts[(T, 1, "z")] == 0


def test_nothing_to_repair_when_the_lake_has_every_processed_record():
    plan = _plan(ends={(T, 0): 6})
    assert not plan.needed and plan.partitions == () and "nothing to repair" in plan.describe()


def test_partition_list_forces_a_repair_and_rejects_unknown_partitions():
    plan = _plan(ends={(T, 0): 6}, only={(T, 0)})
    assert plan.needed and plan.partitions[0].damage == 6
    with pytest.raises(RepairError, match=r"site-1:9.*not in the checkpoint.*choose among"):
        _plan(only={(T, 9)})


def test_planning_twice_gives_the_same_plan_and_it_survives_json():
    first, second = _plan(), _plan()
    assert first == second
    assert RepairPlan.from_json(first.to_json()) == first


def test_journal_records_steps_so_a_second_apply_skips_them(tmp_path):
    journal = _Journal(tmp_path)
    journal.mark("backup-output")
    again = _Journal(tmp_path)
    assert "backup-output" in again.done and not again.finished


@pytest.mark.parametrize("text", ["site-1", "site-1:x", ":0", "site-1:0,oops"])
def test_bad_partition_lists_name_the_item_and_the_fix(text):
    with pytest.raises(RepairError, match="topic:partition"):
        parse_partitions(text)


def test_partition_list_parses_topics_with_colons_and_dashes():
    assert parse_partitions("a-b:0, a-b:2,c:1") == {("a-b", 0), ("a-b", 2), ("c", 1)}
    assert parse_partitions(None) is None


def test_starting_offsets_list_every_partition_earliest_for_unseen_ones():
    assert starting_offsets({("t", 0): 5}, [("t", 0), ("t", 1), ("u", 0)]) == {"t": {"0": 5, "1": -2}, "u": {"0": -2}}


def test_checkpoint_end_offsets_come_from_the_last_committed_batch(tmp_path):
    q = tmp_path / "sessions"
    (q / "offsets").mkdir(parents=True)
    (q / "commits").mkdir()
    meta = json.dumps({"batchWatermarkMs": 0})
    (q / "offsets" / "0").write_text(f"v1\n{meta}\n" + json.dumps({"t": {"0": 5, "1": 3}}))
    (q / "offsets" / "1").write_text(f"v1\n{meta}\n" + json.dumps({"t": {"0": 9, "1": 4}}))
    (q / "commits" / "0").write_text("v1\n{}")
    assert checkpoint_end_offsets(q) == {("t", 0): 5, ("t", 1): 3}  # batch 1 was planned, not committed


def test_job_config_accepts_explicit_offsets_and_rejects_bad_ones(tmp_path):
    cfg = JobConfig(output="s3a://lake/x", checkpoint=tmp_path, starting_offsets='{"t": {"0": 5}}')
    assert parse_offsets(cfg.starting_offsets) == {"t": {"0": 5}}
    for bad in ("oldest", "{}", '{"t": {"0": -3}}', '{"t": {"x": 1}}', '{"t": []}'):
        with pytest.raises(ConfigError, match="starting_offsets"):
            JobConfig(output="s3a://lake/x", checkpoint=tmp_path, starting_offsets=bad)


def _plan(*, lake=LAKE, inputs=INPUTS, ends=None, only=None):
    return plan_repair(
        checkpoint="/ckpt",
        output="s3a://lake/job",
        backup="/ckpt.repair-x",
        checkpoint_end=ends or {(T, 0): 8},
        inputs=inputs,
        rows=lake,
        quarantine=EMPTY_Q,
        sessions=EMPTY_S,
        kafka_partitions=[(T, 0), (T, 1)],
        only=only,
    )


def test_cli_without_a_checkpoint_exits_2_naming_it_and_the_fix(tmp_path, capsys):
    from job.cli import main

    assert main(["repair", "--checkpoint", str(tmp_path / "nowhere"), "--output", "s3a://lake/x"]) == 2
    err = capsys.readouterr().err
    assert "nowhere" in err and "no committed batch" in err and "--checkpoint" in err


def test_cli_with_a_bad_partition_list_exits_2(tmp_path, capsys):
    from job.cli import main

    assert main(["repair", "--partitions", "site-1:zero"]) == 2
    assert "'site-1:zero' is not topic:partition" in capsys.readouterr().err


@pytest.mark.parametrize("policy", ["strict", "resync", "window"])
def test_a_session_resumed_at_its_snapshot_opens_without_a_gap(policy):
    from job.engine.session import Record, step

    snap = json.dumps(
        {"v": 1, "kind": "snapshot", "site": "a", "session": "s", "seq": 7, "epoch": 0, "ts": 1, "rows": [{"id": "r"}]}
    ).encode()
    up = json.dumps(
        {"v": 1, "kind": "upsert", "site": "a", "session": "s", "seq": 8, "epoch": 0, "ts": 2, "row": {"id": "r", "x": 1}}
    ).encode()
    result = step(None, [Record(T, 0, 40, "s", snap, 0), Record(T, 0, 41, "s", up, 0)], policy=policy, window=8)
    assert (result.status.status, result.status.gaps, len(result.quarantine), result.status.applied) == ("open", 0, 0, 2)
