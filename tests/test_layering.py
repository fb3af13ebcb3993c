"""The packages' layering, read off the code: imports only run down, and no module imports
itself back through others (function-level imports count: a lazy import hides a circle
from Python, not from a reader).

``job/`` is layered in wings (see ``job/__init__.py``)::

    cli -> drills -> ops -> verify -> spark -> engine        (baseline: engine + verify)

and across packages: ``sandbox`` knows no message format (imports neither ``producers`` nor
``job``), ``producers`` never imports ``job``, ``book`` (the site) imports none of the other
three and none of them imports it, and each part of ``job`` imports only the
modules of ``producers`` and ``sandbox`` that :data:`JOB_OUTSIDE` lists for it, each with its
reason. The engine is pure: besides those it imports the standard library and
:data:`ENGINE_THIRD_PARTY`, nothing else (no pyspark, py4j, confluent_kafka).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("job", "producers", "sandbox", "book")

#: job's wings, bottom first. A module may import its own wing and any wing below it.
WING_RANK = {"engine": 0, "spark": 1, "verify": 2, "baseline": 3, "ops": 3, "drills": 4, "cli": 5, "__main__": 6, "": 6}
#: Wings a wing may not import although they rank below it.
FORBIDDEN = {"baseline": {"spark"}}
#: What ``sandbox``, ``producers`` and ``book`` may import from the other packages (module
#: prefixes); ``job``'s imports of ``producers`` and ``sandbox`` are listed module by module in
#: :data:`JOB_OUTSIDE`, and it may not import ``book``.
CROSS = {
    "sandbox": (),
    "producers": ("sandbox",),
    "book": (),
}
#: The modules of ``producers`` and ``sandbox`` a part of ``job`` may import, and why. A key is
#: a wing (``"verify"``) or one module of it (``"verify.lake_check"``); a module gets the
#: entries of every key it lies under. Anything not listed is a violation, and every entry
#: must still be used (:func:`test_every_allowance_is_used`): this is what the code needs, no more.
JOB_OUTSIDE: dict[str, dict[str, str]] = {
    "engine": {
        "producers.contract": "the wire format: the engine decodes the producers' messages",
        "producers.errors": "the contract's rejection reasons, which are quarantine reasons",
    },
    "spark": {
        "producers.contract": "the topic prefix the job reads by default (TOPIC_PREFIX); an s3a:// output's bucket (s3_parts)",
        "producers.kafka": "the topics' end offsets, which a drain waits for",
        "sandbox.progress": "the drain's progress line (Ticker); no sandbox setting or service",
    },
    "verify": {
        "producers.contract": "the verifier decodes the ledger's messages; an s3a:// lake's bucket (s3_parts)",
        "producers.expected_output": "the oracle: what the ledger says the lake must hold",
        "producers.faults": "the declared faults an anomaly is blamed on",
        "producers.frames": "a session's frames as rows without pandas' cost per call",
        "producers.ledger": "the ledger, the verifier's input",
    },
    "baseline": {
        "producers.contract": "the topic prefix it reads by default (TOPIC_PREFIX)",
        "producers.kafka": "the topics' end offsets, where a bounded run stops",
        "producers.ledger": "its --ledger option checks the run against a ledger",
        "sandbox.settings": "the sandbox's Kafka address as --bootstrap's default (KAFKA_BOOTSTRAP)",
    },
    "ops": {
        "producers.contract": "backfill decodes archived records to prime session state; an s3a:// lake's bucket and "
        "prefix (s3_parts)",
        "producers.kafka": "the data-loss listing reads the partitions' watermarks",
        "producers.ledger": "the verifier's S3 target (S3Target) and its preflight lists a ledger's parts",
        "sandbox.checks.health": "the S3 client that lists a sink log (repair), "
        "require (the verifier's preflight: MinIO answers)",
        "sandbox.settings": "shown(): paths as messages print them (repair)",
        "sandbox.topics": "backfill deletes a run's topics with the sandbox's one topic deletion (`sandbox prune`'s)",
        "sandbox.jvm.spark_session": "the Spark session of `job repair` / `job backfill`, the verifier's own "
        "(job.ops.verifier) and the packaged submit's conf",
    },
    "drills": {
        "producers.contract": "an exercise builds messages by hand",
        "producers.expected_output": "the integrity matrix's window bound, from the ledger's expected sessions",
        "producers.faults": "the drills declare data faults",
        "producers.kafka": "the backlog drill samples the topics' end offsets",
        "producers.runner": "the drills run producers",
        "sandbox": "the drills act on the sandbox (Settings, open_sandbox)",
        "sandbox.checks.health": "wait_for: the metadata trap polls until the job has committed its batches",
        "sandbox.jvm.spark_session": "a drill's own Spark session",
    },
    "cli": {
        "producers.errors": "ProducerError, one of the errors the command line reports in one paragraph",
        "sandbox": "Settings and SandboxError: the command line runs against the sandbox",
        "sandbox.checks.health": "require: the services a command needs answer before it starts",
        "sandbox.settings": "shown(): paths as messages print them",
        "sandbox.jvm.spark_session": "the job's Spark session and its driver log",
    },
}
#: The engine's only imports beyond the standard library and :data:`JOB_OUTSIDE` ``["engine"]``.
ENGINE_THIRD_PARTY = ("msgspec",)  # the session state's binary form
#: Never loaded by ``import job.engine`` (checked in a fresh interpreter, so through every module
#: it loads: ``job/__init__``, ``producers.contract``).
ENGINE_NEVER_LOADS = ("pyspark", "py4j", "confluent_kafka", "sandbox", "boto3", "botocore")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(packages=PACKAGES) -> dict[str, Path]:
    return {module_name(p): p for pkg in packages for p in sorted((ROOT / pkg).rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> list[tuple[str, int]]:
    """The modules ``name`` imports, with the line: ``from a.b import c`` names the submodule
    ``a.b.c`` where one exists in the project, else the module ``a.b``."""
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
    return out


def graph(packages=PACKAGES) -> dict[str, list[tuple[str, int]]]:
    mods = modules(packages)
    known = set(mods)
    return {name: imports_of(name, path, known) for name, path in mods.items()}


def wing(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def under(module: str, key: str) -> bool:
    """Whether the ``job`` module ``module`` lies under the :data:`JOB_OUTSIDE` key ``key``."""
    inside = module.split(".", 1)[1] if "." in module else ""
    return inside == key or inside.startswith(key + ".")


def job_outside(module: str) -> dict[str, str]:
    """What of ``producers`` and ``sandbox`` the ``job`` module ``module`` may import, with why."""
    return {dst: why for key, entries in JOB_OUTSIDE.items() if under(module, key) for dst, why in entries.items()}


def layering_violations(edges: dict[str, list[tuple[str, int]]]) -> list[str]:
    out = []
    for src, targets in edges.items():
        pkg = src.split(".")[0]
        for dst, line in targets:
            where = f"{src} (line {line}) imports {dst}"
            dst_pkg = dst.split(".")[0]
            if dst_pkg not in PACKAGES:
                if src.startswith("job.engine") and dst_pkg not in sys.stdlib_module_names | set(ENGINE_THIRD_PARTY):
                    out.append(
                        f"{where}: the engine is pure Python, it may import only the standard library, "
                        f"{', '.join(ENGINE_THIRD_PARTY)} and {', '.join(JOB_OUTSIDE['engine'])}"
                    )
                continue
            if dst_pkg != pkg:
                if pkg != "job":
                    if not dst.startswith(CROSS[pkg]):
                        out.append(f"{where}: {pkg} may import only {', '.join(CROSS[pkg]) or 'nothing'} of the other packages")
                elif dst not in (allowed := job_outside(src)):
                    out.append(
                        f"{where}: {src} may import only {', '.join(sorted(allowed)) or 'nothing'} of producers "
                        "and sandbox (tests/test_layering.py JOB_OUTSIDE lists each with its reason)"
                    )
                continue
            if pkg != "job":
                continue
            a, b = wing(src), wing(dst)
            if a == b:
                continue
            if WING_RANK[b] >= WING_RANK[a] or b in FORBIDDEN.get(a, ()):
                out.append(
                    f"{where}: wing {a or 'job'} may not import wing {b or 'job'} (imports only run down: "
                    "cli -> drills -> ops -> verify -> spark -> engine; baseline: engine + verify)"
                )
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
    assert not problems, "imports against the layering:\n" + "\n".join(problems)


def test_every_allowance_is_used():
    """:data:`JOB_OUTSIDE` is what the code needs: an entry no module under its key imports
    any more goes, so the table never grows looser than the code."""
    edges = graph(("job",))
    used = {(key, dst) for key in JOB_OUTSIDE for src, targets in edges.items() if under(src, key) for dst, _ in targets}
    stale = sorted(f"{key}: {dst}" for key, entries in JOB_OUTSIDE.items() for dst in entries if (key, dst) not in used)
    assert not stale, "allowed but no longer imported (drop them from JOB_OUTSIDE): " + "; ".join(stale)


def test_importing_the_engine_loads_no_spark_kafka_or_sandbox():
    """The static check sees the engine's own lines; this one what ``import job.engine`` loads
    through them (``job/__init__``, the producers' contract), in a fresh interpreter."""
    code = (
        "import sys, job.engine.session, job.engine.errors; "
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {ENGINE_NEVER_LOADS!r}))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", f"import job.engine loaded {done.stdout.strip()}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle(package):
    found = circles(_package_edges(graph((package,))))
    assert not found, f"import circles in {package}/: " + "; ".join(" <-> ".join(c) for c in found)


def test_an_upward_import_and_a_circle_are_caught():
    """The checks themselves, on a planted graph: a drill imported by the engine, Spark and the
    sandbox in the engine, the sandbox in the verifier (which takes its Spark from its caller), and two producers modules
    importing each other."""
    planted = {
        "job.engine.session": [("job.drills.trap", 7), ("msgspec", 8), ("json", 9), ("producers.contract", 10)],
        "job.engine.errors": [("pyspark.sql.utils", 11), ("sandbox.settings", 12), ("producers.runner", 13)],
        "job.baseline": [("job.spark.pipeline", 3), ("job.verify.compare", 4)],
        "job.drills.trap": [("job.engine.session", 1), ("sandbox.checks.health", 2)],
        "job.verify.compare": [("sandbox.jvm.spark_session", 5), ("producers.ledger", 6)],
        "job.verify.lake_check": [("sandbox.jvm.spark_session", 5)],
        "producers.faults": [("producers.sessions", 2)],
        "producers.sessions": [("producers.faults", 9)],
    }
    problems = layering_violations(planted)
    for wanted in (
        "job.engine.session (line 7) imports job.drills.trap",
        "job.baseline (line 3) imports job.spark.pipeline",
        "job.engine.errors (line 11) imports pyspark.sql.utils: the engine is pure Python",
        "job.engine.errors (line 12) imports sandbox.settings",
        "job.engine.errors (line 13) imports producers.runner",
        "job.verify.compare (line 5) imports sandbox.jvm.spark_session",
        "job.verify.lake_check (line 5) imports sandbox.jvm.spark_session",
    ):
        assert any(wanted in p for p in problems), (wanted, problems)
    assert len(problems) == 7, problems
    assert circles(planted) == [["job.drills.trap", "job.engine.session"], ["producers.faults", "producers.sessions"]]


def test_every_job_module_sits_in_a_known_wing():
    assert {wing(m) for m in modules(("job",))} <= set(WING_RANK)


def test_the_readme_states_the_rules_this_test_enforces():
    """The README's Layout section draws the wings' chain and says which wings know no sandbox:
    the same rules as :data:`WING_RANK` and :data:`JOB_OUTSIDE`, or one of them is out of date."""
    import re

    text = (ROOT / "README.md").read_text()
    chain = re.search(r"`(cli(?: → \w+)+)`", text)
    assert chain, "README.md's Layout section lost the wings' chain (`cli → drills → ...`)"
    drawn = chain[1].split(" → ")
    ranked = sorted((w for w in WING_RANK if w not in ("baseline", "__main__", "")), key=WING_RANK.get, reverse=True)
    assert drawn == ranked, f"README.md draws {drawn}, tests/test_layering.py ranks {ranked}"
    assert "the verifier takes its Spark session and S3 target from its caller and imports no\nsandbox module" in text
    assert not [
        m
        for key, allowed in JOB_OUTSIDE.items()
        if key.split(".")[0] in ("engine", "verify")
        for m in allowed
        if m.startswith("sandbox")
    ], "README.md says the engine and the verifier import no sandbox module"
