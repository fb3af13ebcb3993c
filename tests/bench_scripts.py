"""Import a benchmark script (bench/*.py is not a package) as a module, for tests of its pure parts."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def loaded(name: str) -> Iterator[ModuleType]:
    """Yield ``bench/<name>.py`` as module ``name`` (registered in ``sys.modules`` meanwhile, as
    dataclasses need), for a fixture: ``yield from loaded("job_bench")``."""
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    try:
        yield module
    finally:
        sys.modules.pop(name, None)
