"""The lake's sink folder: ``out`` for a new lake, ``sessions-out`` kept for one an older version
wrote (its ``_spark_metadata`` names every file by its full path, so the folder cannot move)."""

from __future__ import annotations

import pytest

from job.engine.errors import LakeError
from job.spark import lake
from job.verify.lake_check import check_lake


def _sink(root, folder: str) -> None:
    (root / folder / "_spark_metadata").mkdir(parents=True)


def test_check_lake_accepts_a_lake_written_under_either_name_and_names_the_new_one_when_neither(tmp_path, sandbox_settings):
    new, old, empty = tmp_path / "new", tmp_path / "old", tmp_path / "empty"
    _sink(new, lake.SINK_DIR)
    _sink(old, lake.LEGACY_SINK_DIR)
    empty.mkdir()
    check_lake(sandbox_settings, str(new))
    check_lake(sandbox_settings, str(old))
    with pytest.raises(LakeError, match=r"/out/_spark_metadata is missing"):
        check_lake(sandbox_settings, str(empty))


@pytest.mark.integration
def test_find_sink_keeps_an_old_lake_s_folder_and_gives_a_new_lake_out(spark, tmp_path):
    old, both, new = tmp_path / "old", tmp_path / "both", tmp_path / "new"
    _sink(old, lake.LEGACY_SINK_DIR)
    _sink(both, lake.LEGACY_SINK_DIR)
    _sink(both, lake.SINK_DIR)
    new.mkdir()
    assert lake.find_sink(spark, f"file:{old}") == f"file:{old}/sessions-out"
    assert lake.find_sink(spark, f"file:{both}") == f"file:{both}/out"
    assert lake.find_sink(spark, f"file:{new}") == f"file:{new}/out"
