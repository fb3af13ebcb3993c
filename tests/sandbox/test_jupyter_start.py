"""docker/jupyter_start.py: the learner's working copy follows the recordings without losing edits."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("jupyter_start", ROOT / "docker" / "jupyter_start.py")
jupyter_start = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(jupyter_start)


def _dirs(tmp_path: Path) -> tuple[Path, Path]:
    recorded, work = tmp_path / "recorded", tmp_path / "work"
    recorded.mkdir()
    (recorded / "00-tour.ipynb").write_text("tour v1")
    (recorded / "01-producers.ipynb").write_text("producers v1")
    return recorded, work


def _synced(tmp_path: Path) -> tuple[Path, Path]:
    """Recorded chapters and a working copy already filled from them once."""
    recorded, work = _dirs(tmp_path)
    jupyter_start.sync(recorded, work)
    return recorded, work


def test_a_fresh_working_copy_gets_every_chapter(tmp_path):
    recorded, work = _dirs(tmp_path)
    done = jupyter_start.sync(recorded, work)
    assert done["new"] == ["00-tour.ipynb", "01-producers.ipynb"]
    assert (work / "00-tour.ipynb").read_text() == "tour v1"


def test_an_untouched_chapter_follows_a_new_recording_and_an_edited_one_is_kept(tmp_path):
    recorded, work = _synced(tmp_path)
    (work / "01-producers.ipynb").write_text("producers v1 + my notes")
    (recorded / "00-tour.ipynb").write_text("tour v2")
    (recorded / "01-producers.ipynb").write_text("producers v2")
    done = jupyter_start.sync(recorded, work)
    assert (done["updated"], done["kept"]) == (["00-tour.ipynb"], ["01-producers.ipynb"])
    assert (work / "00-tour.ipynb").read_text() == "tour v2"
    assert (work / "01-producers.ipynb").read_text() == "producers v1 + my notes"


def test_an_edit_is_kept_even_when_the_recording_did_not_change(tmp_path):
    recorded, work = _synced(tmp_path)
    (work / "00-tour.ipynb").write_text("my run")
    done = jupyter_start.sync(recorded, work)
    assert done["same"] == ["00-tour.ipynb", "01-producers.ipynb"]
    assert (work / "00-tour.ipynb").read_text() == "my run"


def test_a_deleted_chapter_comes_back_from_the_recording(tmp_path):
    recorded, work = _synced(tmp_path)
    (work / "00-tour.ipynb").unlink()
    assert jupyter_start.sync(recorded, work)["new"] == ["00-tour.ipynb"]
