"""`make test`'s parts (scripts/test_side_by_side.py): every chapter runs in exactly one of them,
on ports no other sandbox of the project uses, and the exit status says whether all passed."""

from __future__ import annotations

import importlib.util
import sys
import time
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
    on_disk = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "notebooks").glob("*.ipynb"))
    assert len(on_disk) == 11, on_disk  # chapters 00-10; drafts and solutions live in folders
    queued = runner.beside()
    assert sorted(queued + list(runner.ALONE)) == on_disk
    assert runner.ALONE == (
        "notebooks/05-backlog-and-memory.ipynb",
        "notebooks/07-kafka-data-loss.ipynb",
        "notebooks/10-recovery-benchmark.ipynb",
    )
    assert runner.BOOK_ONLY == ("notebooks/04-environmental-failures.ipynb",) and set(runner.BOOK_ONLY) <= set(queued)


def test_the_chapters_beside_are_queued_longest_first_by_their_last_recording() -> None:
    runner = _runner()
    times = [runner.recorded_seconds(c) for c in runner.beside()]
    assert all(t > 0 for t in times), times  # every chapter is recorded with its time
    assert times == sorted(times, reverse=True), list(zip(runner.beside(), times))


def test_the_test_sandbox_never_takes_a_chapter_that_restarts_kafka() -> None:
    runner = _runner()
    tests, book = runner.places()
    queue = runner.Queue(["notebooks/04-environmental-failures.ipynb", "notebooks/03-checkpoints-and-delivery.ipynb"], book)
    assert queue.take(tests) == "notebooks/03-checkpoints-and-delivery.ipynb"
    assert queue.take(tests) is None  # 04 is left for the book's sandbox
    assert queue.left() == ["notebooks/04-environmental-failures.ipynb"]
    assert queue.take(book) == "notebooks/04-environmental-failures.ipynb"
    assert queue.take(book) is None


def test_the_chapters_beside_use_a_sandbox_of_their_own(monkeypatch) -> None:
    runner = _runner()
    monkeypatch.delenv("OSL_STATE_DIR", raising=False)
    tests, book = runner.places()
    assert book.env["OSL_PORT_OFFSET"] == "12500" and int(book.env["OSL_PORT_OFFSET"]) in RESERVED
    assert book.env["OSL_STATE_DIR"].endswith(".sandbox-test-book")
    assert tests.env["OSL_STATE_DIR"] == str(ROOT / ".sandbox-test") and tests.env["OSL_PORT_OFFSET"] != "12500"
    theirs = {p for r in RESERVED if r != 12_500 for p in sandbox_ports(r, workers=4)}
    assert not theirs & set(sandbox_ports(12_500, workers=4))
    part = runner.chapter_part("notebooks/03-checkpoints-and-delivery.ipynb", book)
    assert part.env["OSL_STATE_DIR"] == book.env["OSL_STATE_DIR"] and part.env["OSL_TEST_KEEP_SANDBOX"] == "1"
    assert part.log.parent == Path(book.env["OSL_STATE_DIR"]) / "logs"


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


def test_the_book_s_sandbox_waits_for_the_file_or_gives_up_when_stopped(tmp_path) -> None:
    """CI's compose lane writes the file when it ends: the book's sandbox takes chapters from then."""
    import threading

    runner = _runner()
    after, stopping = tmp_path / "compose.seconds", threading.Event()
    writer = threading.Timer(0.3, lambda: after.write_text("1\n"))
    writer.start()
    started = time.monotonic()
    assert runner.wait_for_file(after, stopping, poll_s=0.05) is True
    assert time.monotonic() - started >= 0.25, "it returned before the file existed"
    stopping.set()
    assert runner.wait_for_file(tmp_path / "never-written", stopping, poll_s=0.05) is False
