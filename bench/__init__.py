"""The benchmarks: scripts run with ``make bench-*`` (each on its own sandbox, ports +20000), and
the recovery benchmark that chapter 10 imports (on the chapter's sandbox)."""

import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: Where every bench writes its figures (``<bench>-<run>.json``, plots): one directory, kept out of git.
RESULTS = HERE / "results"


def own_sandbox() -> None:
    """Run as a script, a bench uses its own sandbox (``.sandbox-bench``, ports +20000, local)
    unless ``OSL_*`` say otherwise; imported by a chapter, it leaves the kernel's environment alone."""
    if Path(sys.argv[0]).resolve().parent == HERE:
        os.environ.setdefault("OSL_STATE_DIR", str(HERE.parent / ".sandbox-bench"))
        os.environ.setdefault("OSL_PORT_OFFSET", "20000")
        os.environ.setdefault("OSL_BACKEND", "local")
