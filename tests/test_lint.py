"""One formatter and linter for the tree: ruff, configured in pyproject.toml ([tool.ruff]).

`make format` applies both; these tests fail when a change was not formatted or brings a
lint error, naming the files (the notebooks are the recordings' business, not ruff's)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _ruff(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ruff", *args], cwd=ROOT, capture_output=True, text=True, timeout=120)


def test_the_tree_is_formatted():
    done = _ruff("format", "--check", ".")
    assert done.returncode == 0, f"not formatted (run `make format`):\n{done.stdout}{done.stderr}"


def test_the_tree_passes_the_linter():
    done = _ruff("check", "--output-format", "concise", ".")
    assert done.returncode == 0, f"lint errors (`make format` fixes the safe ones):\n{done.stdout}{done.stderr}"


def test_no_statement_escapes_the_formatter_without_saying_why():
    """A ``# fmt: skip`` must carry its reason (``# fmt: skip - <why>``): ruff lays out the rest."""
    listed = subprocess.run(["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    bare = [
        f"{name}:{n}"
        for name in listed
        for n, line in enumerate((ROOT / name).read_text().splitlines(), 1)
        if line.rstrip().endswith("# fmt: skip")
    ]
    assert not bare, "`# fmt: skip` without a reason (remove it, or add ' - <why>'): " + ", ".join(bare[:20])
