"""`make test`: the tests and the chapters side by side on two sandboxes, then the chapters
whose checks compare durations with the machine to themselves.

Run one after the other, the tests (about 880 s) and the chapters (about 1,140 s) left 36 % of
two cores idle: both wait on real time (producers at a rate, triggers, restarts, kills). Here
the chapters run in a second pytest on a sandbox of their own (``.sandbox-test-book``, ports
+12500) while the tests run in the foreground on the test sandbox (+10000). Chapters 05, 07 and
10 run last and alone: 05 asserts a catch-up time against its own forecast and the cap's price in
time, 07 that the job it measured outpaces its input, 10 measures recovery times against the load
it measured first; beside other work they measure the neighbour
(docs/decisions/0025-tests-and-chapters-side-by-side.md).
``OSL_TEST_BOOK_AFTER=<file>``: the chapters beside start only once that file exists or the
tests have ended, whichever comes first. ``.ci/run`` names the file its compose lane writes when
it ends: two heavy runs at a time, never three (three on two cores made CI slower, not faster:
decision 0025). ``OSL_TEST_ONE_PYTEST=1``: everything in one pytest, one part after the other, as
before (for comparison).

Usage: ``python scripts/test_side_by_side.py [PYTEST_ARGS...]``: the arguments go to every
pytest (``--durations=20``, ``-x``, ``-k``); to run one file, call pytest on it. Exits 0 when
every pytest passed (a pytest that selected nothing, exit 5, counts as passed when another ran
tests), else 1; prints each part's time and result at the end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The chapters whose checks compare durations or rates: run after everything else, with the machine to themselves.
ALONE = (
    "notebooks/05-backlog-and-memory.ipynb",
    "notebooks/07-kafka-data-loss.ipynb",
    "notebooks/10-recovery-benchmark.ipynb",
)
#: The second sandbox, for the chapters beside the tests (tests/ports.py reserves its ports).
BOOK_STATE_DIR = ROOT / ".sandbox-test-book"
BOOK_PORT_OFFSET = 12_500
#: pytest's exit status when it selected no test.
NO_TESTS = 5


@dataclass
class Part:
    name: str
    args: list[str]
    env: dict[str, str] = field(default_factory=dict)
    log: Path | None = None  # None: in the foreground
    proc: subprocess.Popen | None = None
    started: float = 0.0
    seconds: float = 0.0
    status: int | None = None
    _watcher: threading.Thread | None = None

    def start(self, extra: list[str]) -> None:
        env = {**os.environ, **self.env}
        command = [sys.executable, "-m", "pytest", *self.args, *extra]
        self.started = time.monotonic()
        if self.log is None:
            self.proc = subprocess.Popen(command, cwd=ROOT, env=env)
        else:
            self.log.parent.mkdir(parents=True, exist_ok=True)
            with self.log.open("w") as out:
                self.proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        # its own time, taken when it ends, not when the caller gets round to waiting for it
        self._watcher = threading.Thread(target=self._watch, daemon=True)
        self._watcher.start()

    def _watch(self) -> None:
        assert self.proc is not None
        self.proc.wait()
        self.seconds = time.monotonic() - self.started

    def wait(self, timeout: float | None = None) -> int | None:
        """The exit status, or None while it still runs after ``timeout`` seconds."""
        assert self._watcher is not None
        self._watcher.join(timeout)
        if self._watcher.is_alive():
            return None
        self.status = self.proc.returncode
        return self.status


def chapters() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))]


def last_line(log: Path) -> str:
    try:
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][-160:] if lines else ""


def wait_to_start(after: Path, tests: Part, poll_s: float = 1.0) -> str:
    """Wait until ``after`` exists or the tests have ended; say which (checked every ``poll_s``)."""
    while True:
        if after.exists():
            return f"{after.name} exists"
        if tests.wait(timeout=poll_s) is not None:
            return "the tests ended"


def parts() -> tuple[Part, Part, Part]:
    beside = [c for c in chapters() if c not in ALONE]
    book = Part(
        "the chapters beside",
        # its own cache folder: two pytest processes writing one lastfailed file at once
        [*beside, "-o", f"cache_dir={ROOT / '.pytest_cache' / 'book'}"],
        env={"OSL_STATE_DIR": str(BOOK_STATE_DIR), "OSL_PORT_OFFSET": str(BOOK_PORT_OFFSET), "OSL_BACKEND": "local"},
        log=BOOK_STATE_DIR / "logs" / "make-test-chapters.log",
    )
    tests = Part("the tests", ["-m", "not compose", "tests"])
    alone = Part("the chapters alone", [*ALONE])
    return tests, book, alone


def verdict(part: Part) -> str:
    if part.status is None:
        return "not run"
    if part.status == 0:
        return "passed"
    if part.status == NO_TESTS:
        return "selected no test"
    return f"FAILED (pytest exit {part.status})"


def main(extra: list[str]) -> int:
    if os.environ.get("OSL_TEST_ONE_PYTEST") == "1":
        print("make test: one pytest, the tests then every chapter (OSL_TEST_ONE_PYTEST=1)", flush=True)
        return subprocess.call([sys.executable, "-m", "pytest", "-m", "not compose", *extra], cwd=ROOT)
    tests, book, alone = parts()
    after = Path(os.environ["OSL_TEST_BOOK_AFTER"]) if os.environ.get("OSL_TEST_BOOK_AFTER") else None
    print(
        f"make test: {len(chapters()) - len(ALONE)} chapters run beside the tests on a second sandbox "
        f"({BOOK_STATE_DIR.name}, ports +{BOOK_PORT_OFFSET})"
        + (f", from when {after} exists or the tests end (OSL_TEST_BOOK_AFTER)" if after else "")
        + f"; their output, shown when the tests end: {book.log}",
        flush=True,
    )

    def stop(signum, _frame):
        for part in (book, tests, alone):
            if part.proc is not None and part.proc.poll() is None:
                part.proc.send_signal(signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        tests.start(extra)
        if after is not None:
            why = wait_to_start(after, tests)
            print(f"make test: the chapters beside start now ({why}, {time.monotonic() - tests.started:.0f}s in)", flush=True)
        book.start(extra)
        tests.wait()
        if book.wait(timeout=0) is None:
            print(f"make test: the tests ended; the chapters beside still run: {last_line(book.log)}", flush=True)
        while book.wait(timeout=60) is None:
            print(f"make test: waiting for the chapters beside: {last_line(book.log)}", flush=True)
    except KeyboardInterrupt:
        if book.proc is not None:  # not started while it waited for OSL_TEST_BOOK_AFTER
            book.proc.send_signal(signal.SIGINT)
            book.proc.wait()
        raise
    print(f"make test: ---------------------------------------- {book.name} ({book.log})", flush=True)
    print(book.log.read_text(errors="replace"), flush=True)
    print(f"make test: ---------------------------------------- {alone.name}: {', '.join(ALONE)}", flush=True)
    alone.start(extra)
    alone.wait()

    print("make test: ---------------------------------------- summary", flush=True)
    for part in (tests, book, alone):
        print(f"make test: {part.name}: {verdict(part)} in {part.seconds:.0f}s", flush=True)
    return overall([p.status for p in (tests, book, alone)])


def overall(statuses: list[int | None]) -> int:
    """0 when every pytest passed or selected nothing and one ran tests; 5 when none selected a
    test; else 1 (a part not run, None, is a failure: it was stopped)."""
    if any(s not in (0, NO_TESTS) for s in statuses):
        return 1
    return NO_TESTS if all(s == NO_TESTS for s in statuses) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
