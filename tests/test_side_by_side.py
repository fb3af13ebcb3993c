"""`make test`'s parts (scripts/test_side_by_side.py): every chapter runs in exactly one of them,
on ports no other sandbox of the project uses, and the exit status says whether all passed."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from tests.ports import RESERVED, sandbox_ports

ROOT = Path(__file__).resolve().parent.parent


def _runner():
    spec = importlib.util.spec_from_file_location("test_side_by_side_script", ROOT / "scripts" / "test_side_by_side.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_every_chapter_runs_in_exactly_one_part() -> None:
    runner = _runner()
    tests, book, alone = runner.parts()
    on_disk = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert len(on_disk) == 11, on_disk  # chapters 00-10; drafts and solutions live in folders
    beside = [a for a in book.args if a.endswith(".ipynb")]
    assert sorted(beside + alone.args) == on_disk
    assert alone.args == ["notebooks/05-backlog-and-memory.ipynb", "notebooks/10-recovery-benchmark.ipynb"]
    assert tests.args == ["-m", "not compose", "tests"]


def test_the_chapters_beside_use_a_sandbox_of_their_own() -> None:
    runner = _runner()
    _tests, book, _alone = runner.parts()
    assert book.env["OSL_PORT_OFFSET"] == "12500" and int(book.env["OSL_PORT_OFFSET"]) in RESERVED
    assert book.env["OSL_STATE_DIR"].endswith(".sandbox-test-book")
    theirs = {p for r in RESERVED if r != 12_500 for p in sandbox_ports(r, workers=4)}
    assert not theirs & set(sandbox_ports(12_500, workers=4))


@pytest.mark.parametrize(
    ("statuses", "expected"),
    [
        ([0, 0, 0], 0),
        ([0, 5, 5], 0),  # a -k that selects only tests
        ([5, 5, 5], 5),
        ([1, 0, 0], 1),
        ([0, 1, 0], 1),
        ([0, 0, 2], 1),  # interrupted
        ([0, 0, None], 1),  # not run
        ([5, 5, 1], 1),
    ],
)
def test_the_exit_status_is_a_failure_when_any_part_failed(statuses, expected) -> None:
    assert _runner().overall(statuses) == expected
