"""The packages' layering, read off the code: imports only run down, and no module imports
itself back through others (function-level imports count: a lazy import hides a circle
from Python, not from a reader).

``job/`` is layered in wings (see ``job/__init__.py``)::

    cli -> drills -> ops -> verify -> spark -> engine        (baseline: engine + verify)

and across packages: ``sandbox`` knows no message format (imports neither ``producers`` nor
``job``), ``producers`` never imports ``job``, and the engine reads only the producers'
wire contract.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("job", "producers", "sandbox")

#: job's wings, bottom first. A module may import its own wing and any wing below it.
WING_RANK = {"engine": 0, "spark": 1, "verify": 2, "baseline": 3, "ops": 3, "drills": 4, "cli": 5, "__main__": 6, "": 6}
#: Wings a wing may not import although they rank below it.
FORBIDDEN = {"baseline": {"spark"}}
#: What each package may import from the other two (module prefixes).
CROSS = {
    "sandbox": (),
    "producers": ("sandbox",),
    "job": ("producers", "sandbox"),
}
#: The wire contract and its errors: what the engine reads of the producers.
ENGINE_MAY_IMPORT = ("producers.contract", "producers.errors")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(packages=PACKAGES) -> dict[str, Path]:
    return {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The project modules ``name`` imports, with the line: ``from a.b import c`` names the
    submodule ``a.b.c`` where one exists, else the module ``a.b``."""
    is_package = path.name == "__init__.py"
    out = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[: len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub if sub in known else base, node.lineno))
    return [(m, line) for m, line in out if m.split(".")[0] in PACKAGES]


def graph(packages=PACKAGES) -> dict[str, list[tuple[str, int]]]:
    mods = modules(packages)
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layering_violations(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    out = []
    for src, targets in edges.items():
        pkg = src.split(".")[0]
        for dst, line in targets:
            where = f"{src} (line {line}) imports {dst}"
            dst_pkg = dst.split(".")[0]
            if dst_pkg != pkg:
                if not dst.startswith(CROSS[pkg]):
                    out.append(f"{where}: {pkg} may import only {', '.join(CROSS[pkg]) or 'nothing'} of the other packages")
                elif src.startswith("job.engine") and not dst.startswith(ENGINE_MAY_IMPORT):
                    out.append(f"{where}: the engine may import only {', '.join(ENGINE_MAY_IMPORT)} outside job")
                continue
            if pkg != "job":
                continue
            a, b = wing(src), wing(dst)
            if a == b:
                continue
            if WING_RANK[b] >= WING_RANK[a] or b in FORBIDDEN.get(a, ()):
                out.append(f"{where}: wing {a or 'job'} may not import wing {b or 'job'} (imports only run down: "
                           "cli -> drills -> ops -> verify -> spark -> engine; baseline: engine + verify)")  # fmt: skip
    return sorted(set(out))


def circles(edges: dict[str, list[tuple[str, int]]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w, _ in edges.get(v, ()):
            if w == v or w not in edges:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def _package_edges(edges):
    """Imports of a package's own ``__init__`` by its children are how Python loads a
    package, not a circle a reader can untangle: drop child -> ancestor-package edges."""
    return {src: [(d, n) for d, n in ts if not src.startswith(d + ".")] for src, ts in edges.items()}


def test_job_wings_import_only_downwards():
    problems = layering_violations(graph())
    assert not problems, "upward imports:\n" + "\n".join(problems)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
    found = circles(_package_edges(graph((package,))))
    assert not found, f"import circles in {package}/: " + "; ".join(" <-> ".join(c) for c in found)


def test_an_upward_import_and_a_circle_are_caught():
    """The checks themselves, on a planted graph: a drill imported by the engine, and two
    producers modules importing each other."""
    planted = {
        "job.engine.session": [("job.drills.trap", 7)],
        "job.baseline": [("job.spark.pipeline", 3), ("job.verify.verifier", 4)],
        "job.drills.trap": [("job.engine.session", 1)],
        "producers.faults": [("producers.sessions", 2)],
        "producers.sessions": [("producers.faults", 9)],
    }
    problems = layering_violations(planted)
    assert any("job.engine.session (line 7) imports job.drills.trap" in p for p in problems), problems
    assert any("job.baseline (line 3) imports job.spark.pipeline" in p for p in problems), problems
    assert not any("job.verify" in p for p in problems), problems
    assert circles(planted) == [["job.drills.trap", "job.engine.session"], ["producers.faults", "producers.sessions"]]


def test_every_job_module_sits_in_a_known_wing():
    assert {wing(m) for m in modules(("job",))} <= set(WING_RANK)
