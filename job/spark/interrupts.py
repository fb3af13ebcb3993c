"""Ctrl-C while the driver waits on Spark, without a screen of Py4J tracebacks.

PySpark's own SIGINT handler calls into the JVM (``cancelAllJobs``) from inside whatever
Py4J call the main thread was blocked in; the two calls share one socket reader, so the
user gets "reentrant call" tracebacks instead of a clean stop. Inside
:func:`deferred_interrupts` a SIGINT only sets a flag; the driver's wait loops call
:func:`check` between Py4J calls, which raises :class:`KeyboardInterrupt` at a point where
stopping the queries is safe. A second Ctrl-C exits at once (status 130): the checkpoint
is made for crashes, so the next run still continues where the last commit left off.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["check", "deferred_interrupts"]

_requested = threading.Event()


@contextmanager
def deferred_interrupts() -> Iterator[None]:
    """Within the block, SIGINT sets a flag for :func:`check` instead of raising anywhere.

    Install it after the SparkSession exists (creating a SparkContext installs PySpark's
    handler). Outside the main thread (where no signal handler can be set) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def on_sigint(_signum, _frame) -> None:
        if _requested.is_set():
            os.write(2, b"interrupted again: exiting now; the checkpoint lets the next run continue\n")
            os._exit(130)
        _requested.set()

    previous = signal.signal(signal.SIGINT, on_sigint)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        _requested.clear()


def check() -> None:
    """Raise KeyboardInterrupt if a SIGINT arrived inside :func:`deferred_interrupts`."""
    if _requested.is_set():
        raise KeyboardInterrupt
