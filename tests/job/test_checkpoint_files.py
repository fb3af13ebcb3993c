"""Reading a checkpoint's logs from files laid out as Spark 4 writes them (the integration
test and chapter 03 read real ones)."""

from __future__ import annotations

import json

import pytest

from job.engine.errors import UsageError
from job.spark import checkpoints

OFFSETS = [
    "v1",
    json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": 1763840000000, "conf": {"spark.sql.shuffle.partitions": "2"}}),
    json.dumps({"collection-a": {"0": 120, "1": 97}}),
]


@pytest.fixture
def checkpoint(tmp_path):
    root = tmp_path / "sessions"
    for batch in (0, 1, 2):
        (root / "offsets").mkdir(parents=True, exist_ok=True)
        (root / "offsets" / str(batch)).write_text("\n".join(OFFSETS))
    for batch in (0, 1):
        (root / "commits").mkdir(parents=True, exist_ok=True)
        (root / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (root / "commits" / ".1.crc").write_bytes(b"crc")
    (root / "metadata").write_text('{"id":"0b7f"}')
    (root / "state" / "0" / "1").mkdir(parents=True)
    (root / "state" / "0" / "1" / "2.changelog").write_bytes(b"x" * 10)
    (root / "state" / "0" / "_stateSchema" / "default").mkdir(parents=True)
    (root / "state" / "0" / "_stateSchema" / "default" / "0_schema").write_bytes(b"s")
    return root


def test_a_batch_in_the_offsets_log_but_not_the_commit_log_is_pending(checkpoint):
    state = checkpoints.log_state(checkpoint)
    assert (state.offsets, state.commits, state.last_committed, state.pending) == ((0, 1, 2), (0, 1), 1, 2)
    (checkpoint / "commits" / "2").write_text("v1\n{}")
    assert checkpoints.log_state(checkpoint).pending is None


def test_offsets_entry_reads_as_metadata_and_kafka_offsets_per_source(checkpoint):
    entry = checkpoints.read_offsets(checkpoint, 2)
    assert entry["metadata"]["conf"]["spark.sql.shuffle.partitions"] == "2"
    assert entry["sources"] == [{"collection-a": {"0": 120, "1": 97}}]
    assert checkpoints.read_commit(checkpoint, 1) == {"version": "v1", "nextBatchWatermarkMs": 0}


def test_missing_entry_names_the_file_and_the_fix(checkpoint):
    with pytest.raises(UsageError, match=r"commits/2 does not exist; list the log's batches"):
        checkpoints.read_commit(checkpoint, 2)


def test_files_are_classified_and_checksums_left_out(checkpoint):
    files = checkpoints.checkpoint_files(checkpoint)
    assert checkpoints.count_kinds(files) == {"commits": 2, "metadata": 1, "offsets": 3, "state-changelog": 1, "state-schema": 1}
    assert not any(f["path"].endswith(".crc") for f in files)


def test_the_state_partitions_a_checkpoint_keeps_come_from_its_latest_offsets_entry(checkpoint, tmp_path):
    assert checkpoints.kept_state_partitions(checkpoint) == 2
    (tmp_path / "fresh" / "offsets").mkdir(parents=True)
    assert checkpoints.kept_state_partitions(tmp_path / "fresh") is None


def test_a_run_that_asks_for_other_state_partitions_than_an_old_checkpoint_keeps_is_refused(checkpoint):
    """A checkpoint from before job.json: its offsets log is what says what it keeps."""
    from job.spark import saved
    from job.spark.config import JobConfig

    def config(n: int) -> JobConfig:
        return JobConfig(output="s3a://lake/job", checkpoint=checkpoint.parent, state_partitions=n)

    saved.check_fixed(config(2))
    with pytest.raises(saved.FixedSettingError) as refused:
        saved.check_fixed(config(8))
    text = str(refused.value)
    assert "state_partitions=2" in text and "asks for 8" in text and "Drop --state-partitions" in text
    assert f"--checkpoint {checkpoint.parent}-new" in text and "--starting-offsets '{" in text
    saved.check_fixed(JobConfig(output="s3a://lake/job", checkpoint=checkpoint.parent / "none", state_partitions=8))
