"""`make test`: the tests and the chapters side by side on two sandboxes, then the chapters
whose checks compare durations with the machine to themselves.

Run one after the other, the tests (about 880 s) and the chapters (about 1,140 s) left 36 % of
two cores idle: both wait on real time (producers at a rate, triggers, restarts, kills). Here
the tests run in the foreground on the test sandbox (+10000) while the chapters run on a
sandbox of their own (``.sandbox-test-book``, ports +12500), one pytest per chapter, longest
first (the time each took at its last recording). The chapters are one queue for both
sandboxes: once the tests end, the test sandbox takes chapters from it too, so neither waits
long for the other however their lengths change (on an empty machine CI's compose lane builds
images for 25 minutes and the chapters beside start late). Chapter 04 restarts Kafka, and a
broker restarted with the partitions every test left took three times as long to be healthy:
it runs on the book's sandbox only. Chapters 05, 07 and 10 run last and alone, on the test
sandbox: 05 asserts a catch-up time against its own forecast and the cap's price in time, 07
that the job it measured outpaces its input, 10 measures recovery times against the load it
measured first; beside other work they measure the neighbour
(docs/decisions/0025-tests-and-chapters-side-by-side.md).

Both sandboxes stay up from one part to the next (a pytest under the runner leaves its sandbox
up, ``OSL_TEST_KEEP_SANDBOX``): the runner stops each at the end unless it was up before.
``OSL_TEST_BOOK_AFTER=<file>``: the book's sandbox starts taking chapters only once that file
exists (the test sandbox still takes them once the tests end). ``.ci/run`` names the file its
compose lane writes when it ends: two heavy runs at a time, never three (three on two cores
made CI slower, not faster: decision 0025). ``OSL_TEST_ONE_PYTEST=1``: everything in one pytest,
one part after the other, as before (for comparison).

Usage: ``python scripts/test_side_by_side.py [PYTEST_ARGS...]``: the arguments go to every
pytest (``--durations=20``, ``-x``, ``-k``); to run one file, call pytest on it. Exits 0 when
every pytest passed (a pytest that selected nothing, exit 5, counts as passed when another ran
tests), else 1; prints each part's time and result at the end.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # tests.sandbox_defaults: the test sandbox's one home

from tests.sandbox_defaults import KEEP_SANDBOX, TEST_SANDBOX  # noqa: E402

#: The chapters whose checks compare durations or rates: run after everything else, with the machine to themselves.
ALONE = (
    "notebooks/05-backlog-and-memory.ipynb",
    "notebooks/07-kafka-data-loss.ipynb",
    "notebooks/10-recovery-benchmark.ipynb",
)
#: Chapters that restart Kafka: only on the book's sandbox, whose broker holds no test's partitions.
BOOK_ONLY = ("notebooks/04-environmental-failures.ipynb",)
#: The second sandbox, for the chapters beside the tests (tests/ports.py reserves its ports).
BOOK_STATE_DIR = ROOT / ".sandbox-test-book"
BOOK_PORT_OFFSET = 12_500
#: pytest's exit status when it selected no test.
NO_TESTS = 5


@dataclass(frozen=True)
class Place:
    """A sandbox the parts run on: its name, the variables that select it, where its logs go."""

    name: str
    env: dict[str, str]

    @property
    def logs(self) -> Path:
        return Path(self.env["OSL_STATE_DIR"]) / "logs"

    def settings(self):
        from sandbox import Settings

        return Settings.from_env({**os.environ, **self.env})

    def is_up(self) -> bool:
        from sandbox import any_service_up, open_sandbox

        return any_service_up(open_sandbox(self.settings(), progress=lambda _m: None))

    def down(self) -> None:
        from sandbox import open_sandbox

        open_sandbox(self.settings(), progress=lambda _m: None).down()


def places() -> tuple[Place, Place]:
    """(the test sandbox, as the environment or tests/sandbox_defaults.py names it; the book's)."""
    tests = Place("the test sandbox", {name: os.environ.get(name, value) for name, value in TEST_SANDBOX.items()})
    book = Place(
        "the book's sandbox",
        {"OSL_STATE_DIR": str(BOOK_STATE_DIR), "OSL_PORT_OFFSET": str(BOOK_PORT_OFFSET), "OSL_BACKEND": "local"},
    )
    return tests, book


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
    where: str = ""
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

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


def chapters() -> list[str]:
    return [str(p.relative_to(ROOT)) for p in sorted((ROOT / "notebooks").glob("[0-9][0-9]-*.ipynb"))]


def recorded_seconds(chapter: str) -> float:
    """How long ``chapter`` took at its last recording (its metadata), 0 when unknown."""
    try:
        meta = json.loads((ROOT / chapter).read_text())["metadata"]
        return float(meta.get("osl_recording", {}).get("seconds", 0))
    except (OSError, ValueError, TypeError):
        return 0.0


def beside() -> list[str]:
    """The chapters beside the tests, longest first: the queue both sandboxes take from (the
    longest first leaves the shortest for the end, where one sandbox may wait for the other)."""
    return sorted((c for c in chapters() if c not in ALONE), key=lambda c: (-recorded_seconds(c), c))


class Queue:
    """The chapters beside, taken one at a time by the sandboxes; ``BOOK_ONLY`` ones only by the book's."""

    def __init__(self, items: list[str], book: Place) -> None:
        self._items = list(items)
        self._book = book
        self._lock = threading.Lock()

    def take(self, place: Place) -> str | None:
        with self._lock:
            for item in self._items:
                if place is self._book or item not in BOOK_ONLY:
                    self._items.remove(item)
                    return item
            return None

    def left(self) -> list[str]:
        with self._lock:
            return list(self._items)


def chapter_part(chapter: str, place: Place) -> Part:
    name = Path(chapter).stem
    return Part(
        chapter,
        # a cache folder of its own: two pytest processes writing one lastfailed file at once
        [chapter, "-o", f"cache_dir={ROOT / '.pytest_cache' / name}"],
        env={**place.env, KEEP_SANDBOX: "1"},
        log=place.logs / f"make-test-{name}.log",
        where=place.name,
    )


def run_chapters(queue: Queue, place: Place, extra: list[str], done: list[Part], stop: threading.Event) -> None:
    """Take chapters from ``queue`` and run them on ``place`` until none is left for it."""
    while not stop.is_set() and (chapter := queue.take(place)) is not None:
        part = chapter_part(chapter, place)
        part.start(extra)
        part.wait()
        done.append(part)


def wait_for_file(after: Path, stopping: threading.Event, poll_s: float = 1.0) -> bool:
    """Wait until ``after`` exists (True) or ``stopping`` is set (False), looking every ``poll_s``."""
    while not after.exists():
        if stopping.wait(poll_s):
            return False
    return True


def verdict(part: Part) -> str:
    if part.status is None:
        return "not run"
    if part.status == 0:
        return "passed"
    if part.status == NO_TESTS:
        return "selected no test"
    return f"FAILED (pytest exit {part.status})"


def show(part: Part) -> None:
    print(f"make test: ---------------------------------------- {part.name} on {part.where} ({part.log})", flush=True)
    if part.log is not None:
        print(part.log.read_text(errors="replace"), flush=True)


def main(extra: list[str]) -> int:
    if os.environ.get("OSL_TEST_ONE_PYTEST") == "1":
        print("make test: one pytest, the tests then every chapter (OSL_TEST_ONE_PYTEST=1)", flush=True)
        return subprocess.call([sys.executable, "-m", "pytest", "-m", "not compose", *extra], cwd=ROOT)
    test_place, book_place = places()
    was_up = {place.name: place.is_up() for place in (test_place, book_place)}
    queue = Queue(beside(), book_place)
    tests = Part("the tests", ["-m", "not compose", "tests"], env={**test_place.env, KEEP_SANDBOX: "1"}, where=test_place.name)
    alone = Part("the chapters alone", [*ALONE], env={**test_place.env, KEEP_SANDBOX: "1"}, where=test_place.name)
    after = Path(os.environ["OSL_TEST_BOOK_AFTER"]) if os.environ.get("OSL_TEST_BOOK_AFTER") else None
    print(
        f"make test: {len(queue.left())} chapters beside the tests, longest first, on {book_place.name} "
        f"({BOOK_STATE_DIR.name}, ports +{BOOK_PORT_OFFSET})"
        + (f" from when {after} exists (OSL_TEST_BOOK_AFTER)" if after else "")
        + f", and on {test_place.name} once the tests end; their output is shown as each ends, after the tests",
        flush=True,
    )
    done: list[Part] = []
    stopping = threading.Event()

    def book_lane() -> None:
        if after is not None:
            if not wait_for_file(after, stopping):
                return
            print(f"make test: {book_place.name} starts taking chapters ({after.name} exists)", flush=True)
        run_chapters(queue, book_place, extra, done, stopping)

    def stop(signum, _frame):
        stopping.set()
        for part in (tests, alone, *done):
            if part.running():
                part.proc.send_signal(signum)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    book_thread = threading.Thread(target=book_lane, daemon=True)
    try:
        tests.start(extra)
        book_thread.start()
        tests.wait()
        shown = 0
        test_thread = threading.Thread(target=run_chapters, args=(queue, test_place, extra, done, stopping), daemon=True)
        test_thread.start()
        waited = time.monotonic()
        while test_thread.is_alive() or book_thread.is_alive():
            for thread in (test_thread, book_thread):
                thread.join(timeout=1.0)
            while shown < len(done):
                show(done[shown])
                shown += 1
            if time.monotonic() - waited >= 60:
                waited = time.monotonic()
                print(f"make test: chapters still to run or running: {', '.join(queue.left()) or '(none queued)'}", flush=True)
        while shown < len(done):
            show(done[shown])
            shown += 1
        print(
            f"make test: ---------------------------------------- {alone.name} on {alone.where}: {', '.join(ALONE)}", flush=True
        )
        alone.start(extra)
        alone.wait()
    except KeyboardInterrupt:
        stopping.set()
        for part in (tests, alone, *done):
            if part.running():
                part.proc.send_signal(signal.SIGINT)
                part.proc.wait()
        raise
    finally:
        for place in (test_place, book_place):
            if not was_up[place.name] and place.is_up():
                print(f"make test: stopping {place.name} (it was not up before make test)", flush=True)
                place.down()

    print("make test: ---------------------------------------- summary", flush=True)
    parts = [tests, *sorted(done, key=lambda p: p.name), alone]
    for part in parts:
        print(f"make test: {part.name} on {part.where}: {verdict(part)} in {part.seconds:.0f}s", flush=True)
    missing = [c for c in beside() if c not in {p.name for p in done}]
    for chapter in missing:
        print(f"make test: {chapter}: not run", flush=True)
    return overall([p.status for p in parts] + [None for _ in missing])


def overall(statuses: list[int | None]) -> int:
    """0 when every pytest passed or selected nothing and one ran tests; 5 when none selected a
    test; else 1 (a part not run, None, is a failure: it was stopped)."""
    if any(s not in (0, NO_TESTS) for s in statuses):
        return 1
    return NO_TESTS if all(s == NO_TESTS for s in statuses) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
