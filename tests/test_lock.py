"""One lock for the whole Python set: constraints.txt agrees with pyproject.toml and the stack's pins."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sandbox import versions

ROOT = Path(__file__).resolve().parent.parent


def _lock() -> dict[str, str]:
    pins: dict[str, str] = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep, f"constraints.txt: {line!r} is not an exact pin (name==version); run `make lock`"
        pins[canonicalize_name(name)] = version.strip()
    return pins


def _declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extras = project.get("optional-dependencies", {})
    reqs = [Requirement(r) for r in project["dependencies"]]
    reqs += [Requirement(r) for group in extras.values() for r in group]
    return [r for r in reqs if canonicalize_name(r.name) != "ordered-stream-lab"]


def test_every_declared_dependency_is_pinned_by_the_lock_within_its_range():
    pins = _lock()
    for req in _declared():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} is declared in pyproject.toml but not pinned in constraints.txt: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"constraints.txt pins {req.name}=={pins[name]}, outside pyproject.toml's {req}: run `make lock`"
        )


def test_the_lock_pins_the_stacks_pyspark():
    assert _lock()["pyspark"] == versions.PYSPARK


def test_bootstrap_images_and_ci_install_through_the_lock():
    bootstrap = (ROOT / "scripts" / "bootstrap.sh").read_text()
    assert re.search(r"pip install[^\n]*-c constraints\.txt", bootstrap), (
        "scripts/bootstrap.sh must install with -c constraints.txt"
    )
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    assert "constraints.txt" in dockerfile and re.search(r"pip install[^\n]*-c[ =]?\S*constraints\.txt", dockerfile), (
        "docker/Dockerfile must install Python packages with -c constraints.txt"
    )
    # CI runs `make test` and a user `make demo`: both must depend on the bootstrap that installs through the lock
    targets = {m[1]: m[2].split() for m in re.finditer(r"^([\w-]+):([^\n=]*)$", (ROOT / "Makefile").read_text(), re.M)}
    assert {"test", "demo", "test-quick"} <= set(targets), sorted(targets)
    assert all("bootstrap" in targets[t] for t in ("test", "demo", "test-quick")), {t: targets[t] for t in ("test", "demo")}
