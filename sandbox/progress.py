"""Progress for long waits: one mechanism for terminals, notebooks and logs.

Every wait that can last more than a few seconds (a service becoming healthy, a drain)
reports through a :class:`Ticker`, which hands lines to the caller's ``progress`` callable
(the same ``Callable[[str], None]`` the sandbox uses for every message). Short waits stay
silent; long ones say what they wait for, for how long, and how far they got. On a
terminal, with the default sink, the line is rewritten in place; anywhere else (a
notebook, a pipe, a log file) a new line appears every ``every_s`` seconds, so a
five-minute wait adds about thirty lines, not thousands.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

__all__ = ["Ticker"]


class Ticker:
    """Rate-limited progress for one wait.

    Call it with a function that builds the current line (built only when shown); call
    :meth:`close` when the wait ends. Nothing is shown during the first ``after_s`` seconds.
    """

    def __init__(
        self,
        progress: Callable[[str], None],
        *,
        after_s: float = 3.0,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        from sandbox.artifacts import say

        self._progress, self._after_s, self._clock = progress, after_s, clock
        self._inplace = progress is say and sys.stderr.isatty()
        self._every_s = 0.5 if self._inplace else every_s
        self.started = clock()
        self._shown_at: float | None = None

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self.started

    def __call__(self, line: Callable[[], str]) -> None:
        now = self._clock()
        if now - self.started < self._after_s:
            return
        if self._shown_at is not None and now - self._shown_at < self._every_s:
            return
        self._shown_at = now
        if self._inplace:
            sys.stderr.write("\r" + line() + "\x1b[K")
            sys.stderr.flush()
        else:
            self._progress(line())

    def close(self) -> None:
        """End the in-place line (if one was shown), so the next message starts clean."""
        if self._inplace and self._shown_at is not None:
            sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
