"""The run's configuration on disk (job/spark/saved.py): every field survives the round trip, a
file it cannot read is named, and a flag over the saved value is said once."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from job.engine.errors import ConfigError
from job.spark import saved
from job.spark.config import JobConfig


def _settings(tmp_path: Path):
    return type("S", (), {"bucket": "lake", "checkpoint_root": tmp_path / "checkpoints"})()


def test_every_field_of_a_non_default_config_comes_back(tmp_path):
    cfg = JobConfig(
        output="s3a://lake/x",
        checkpoint=tmp_path / "ckpt",
        topic_prefix="t-",
        policy="window",
        window=5,
        starting_offsets='{"t-a": {"0": 7}}',
        session_cuts={("t-a", 0, "s1"): 3},
        max_offsets_per_trigger=None,
        fetch_max_wait_ms=7,
        state_partitions=4,
        input_tasks=0,
        sink_writers=0,
        fail_on_data_loss=False,
        trigger="3 seconds",
        idle_timeout_s=60,
        raw_archive=False,
        topic_discovery_ms=900,
        name="other",
        operator="transformWithStateInPandas",
        extra_kafka_options={"kafka.x": "1"},
    )
    defaults = JobConfig(output="s3a://lake/job", checkpoint=tmp_path / "d")
    differs = [f.name for f in dataclasses.fields(JobConfig) if getattr(cfg, f.name) == getattr(defaults, f.name)]
    assert differs == [], f"set these to non-defaults so the round trip means something: {differs}"
    saved.save(cfg)
    assert saved.load(cfg.checkpoint) == cfg
    assert saved.load(tmp_path / "nothing") is None


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("{", "not JSON"),
        ('{"format": 99, "config": {}}', "format 1"),
        ('{"format": 1, "config": {"output": "s3a://l/x", "checkpoint": "/c", "color": 1}}', "newer"),
    ],
)
def test_a_file_it_cannot_read_is_named_with_the_way_on(tmp_path, text, said):
    (tmp_path / "job.json").write_text(text)
    with pytest.raises(ConfigError) as refused:
        saved.load(tmp_path)
    assert str(tmp_path / "job.json") in str(refused.value) and said in str(refused.value)


def test_flags_override_the_saved_run_and_say_so_once(tmp_path):
    settings = _settings(tmp_path)
    ckpt = tmp_path / "ckpt"
    saved.save(JobConfig(output="s3a://lake/run", checkpoint=ckpt, state_partitions=4, max_offsets_per_trigger=500))
    said: list[str] = []
    cfg = saved.resolve(settings, ckpt, {"max_offsets_per_trigger": 300, "state_partitions": 4}, say=said.append)
    assert (cfg.output, cfg.state_partitions, cfg.max_offsets_per_trigger) == ("s3a://lake/run", 4, 300)
    assert len(said) == 1 and "--max-offsets-per-trigger 300 overrides the saved 500" in said[0]
    assert "state-partitions" not in said[0]  # the same value is no override
    # another lake's run is not this one's: the flags and the defaults
    other = saved.resolve(settings, ckpt, {"output": "s3a://lake/else"}, say=said.append)
    assert (other.output, other.state_partitions) == ("s3a://lake/else", 2) and "not s3a://lake/else" in said[-1]
    # no file, no batches: the defaults, silently; the sandbox's checkpoint when none is given
    fresh = saved.resolve(settings, None, {}, say=said.append)
    assert fresh.checkpoint == tmp_path / "checkpoints" / "job" and len(said) == 2


def test_a_fixed_setting_that_differs_from_the_saved_run_is_refused(tmp_path):
    cfg = JobConfig(output="s3a://lake/run", checkpoint=tmp_path / "ckpt", operator="applyInPandasWithState")
    saved.save(cfg)
    saved.check_fixed(dataclasses.replace(cfg, max_offsets_per_trigger=7))  # not fixed
    for name, value in (
        ("operator", "transformWithStateInPandas"),
        ("output", "s3a://lake/else"),
        ("name", "n"),
        ("state_partitions", 3),
    ):
        with pytest.raises(saved.FixedSettingError, match=f"started with {name}="):
            saved.check_fixed(dataclasses.replace(cfg, **{name: value}))


@pytest.mark.parametrize(
    ("kept", "asked"),
    [
        ("applyInPandasWithState", "applyInPandasWithState-by-partition"),
        ("applyInPandasWithState-by-partition", "transformWithState"),
    ],
)
def test_a_checkpoint_keyed_by_session_is_not_continued_keyed_by_partition_nor_back(tmp_path, kept, asked):
    """The state's key changes with the operator's key: the run is refused, and the message gives
    the restart from the old checkpoint's offsets into a new checkpoint and lake."""
    cfg = JobConfig(output="s3a://lake/run", checkpoint=tmp_path / "ckpt", operator=kept)
    saved.save(cfg)
    with pytest.raises(saved.FixedSettingError) as refused:
        saved.check_fixed(dataclasses.replace(cfg, operator=asked))
    text = str(refused.value)
    assert f"started with operator={kept!r}" in text and repr(asked) in text
    assert f"--checkpoint {tmp_path / 'ckpt'}-new --output s3a://lake/run-new" in text and f"--operator {asked}" in text
