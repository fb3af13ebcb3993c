"""The one progress mechanism for long waits: silent at first, then a line every few seconds."""

from __future__ import annotations

from sandbox.progress import Ticker


class _Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_short_wait_says_nothing_and_a_long_one_a_line_every_interval():
    clock, lines = _Clock(), []
    ticker = Ticker(lines.append, after_s=3.0, every_s=10.0, clock=clock)
    for step in range(0, 300):  # 30 s in steps of 0.1 s
        clock.now = 100.0 + step / 10
        ticker(lambda: f"waiting {ticker.elapsed_s:.1f}s")
    ticker.close()
    assert lines == ["waiting 3.0s", "waiting 13.0s", "waiting 23.0s"]


def test_the_line_is_built_only_when_shown():
    clock, built = _Clock(), []
    ticker = Ticker(lambda _line: None, after_s=3.0, clock=clock)
    ticker(lambda: built.append("x") or "x")
    assert built == []
