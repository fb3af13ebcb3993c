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
    assert alone.args == [
        "notebooks/05-backlog-and-memory.ipynb",
        "notebooks/07-kafka-data-loss.ipynb",
        "notebooks/10-recovery-benchmark.ipynb",
    ]
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


def _pytest_part(runner, tmp_path: Path, body: str):
    test = tmp_path / "test_part.py"
    test.write_text(body)
    return runner.Part("the tests", [str(test), "-q", "-p", "no:cacheprovider", "-o", "addopts="])


def test_the_chapters_beside_wait_for_the_file_while_the_tests_still_run(tmp_path) -> None:
    """CI's compose lane writes the file when it ends: the chapters start then, the tests still running."""
    runner = _runner()
    after, release = tmp_path / "compose.seconds", tmp_path / "release"
    tests = _pytest_part(
        runner,
        tmp_path,
        f"import time\ndef test_waits():\n    deadline = time.monotonic() + 60\n"
        f"    while not __import__('os').path.exists({str(release)!r}):\n"
        f"        assert time.monotonic() < deadline\n        time.sleep(0.05)\n",
    )
    tests.start([])
    try:
        after.write_text("1\n")
        assert runner.wait_to_start(after, tests, poll_s=0.05) == "compose.seconds exists"
        assert tests.wait(timeout=0) is None  # still running: the file, not the tests' end, started them
    finally:
        release.touch()
        tests.wait(timeout=60)
    assert tests.status == 0


def test_the_chapters_beside_start_when_the_tests_end_first(tmp_path) -> None:
    runner = _runner()
    tests = _pytest_part(runner, tmp_path, "def test_passes():\n    pass\n")
    tests.start([])
    assert runner.wait_to_start(tmp_path / "never-written", tests, poll_s=0.05) == "the tests ended"
    assert tests.status == 0
