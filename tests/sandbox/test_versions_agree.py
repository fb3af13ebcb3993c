"""docker-compose.yml, docker/Dockerfile and sandbox/versions.py pin the same stack.

Each rule is a pure function over the parsed files that returns the problems it finds; the
tests run every rule on the real files (no problem allowed) and on a copy broken on purpose
(the rule must notice), so a rule cannot silently stop checking anything.
"""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from sandbox import versions
from sandbox.settings import Ports

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
ONE_SHOT_LABEL = "org.ordered-stream-lab.one-shot"

#: The image each Dockerfile target becomes (compose names them; versions.py pins the tags).
TARGET_IMAGES = {"spark": versions.SPARK_IMAGE, "kafka": versions.KAFKA_IMAGE, "minio": versions.MINIO_IMAGE}

#: Dockerfile build arg -> the OSL_* variable compose feeds it from -> the value versions.py gives.
BUILD_ENV = versions.image_build_env()
EXPECTED_ARGS = {name.removeprefix("OSL_"): value for name, value in BUILD_ENV.items()}
ARG_NAMES = {
    "DEBIAN_IMAGE": "OSL_DEBIAN_IMAGE",
    "GO_IMAGE": "OSL_GO_IMAGE",
    "PYTHON_VERSION": "OSL_PYTHON_VERSION",
    "PYSPARK_VERSION": "OSL_PYSPARK_VERSION",
    "KAFKA_VERSION": "OSL_KAFKA_VERSION",
    "HADOOP_VERSION": "OSL_HADOOP_VERSION",
    "MINIO_MODULE": "OSL_MINIO_MODULE",
    "MINIO_VERSION": "OSL_MINIO_VERSION",
    "JAVA_PACKAGE": "OSL_JAVA_PACKAGE",
}

#: Host-port variables in docker-compose.yml and the default port sandbox/settings.py uses.
PORT_DEFAULTS = {
    "OSL_KAFKA_PORT": Ports().kafka,
    "OSL_MINIO_PORT": Ports().minio,
    "OSL_MINIO_CONSOLE_PORT": Ports().minio_console,
    "OSL_SPARK_MASTER_PORT": Ports().spark_master,
    "OSL_SPARK_MASTER_UI_PORT": Ports().spark_master_ui,
    "OSL_SPARK_WORKER_1_UI_PORT": Ports().worker_ui(1),
    "OSL_SPARK_WORKER_2_UI_PORT": Ports().worker_ui(2),
    "OSL_JUPYTER_PORT": Ports().jupyter,
}


# ------------------------------------------------------------------------------- parsing
def load_compose(path: Path = COMPOSE_FILE) -> dict:
    return yaml.safe_load(path.read_text())


def dockerfile_args(text: str) -> dict[str, list[str]]:
    """Every ``ARG NAME=default`` in the Dockerfile (a name may be declared in several stages)."""
    found: dict[str, list[str]] = {}
    for match in re.finditer(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(\S*))?\s*$", text, re.M):
        found.setdefault(match.group(1), []).append(match.group(2) or "")
    return found


def image_ref(image: str) -> tuple[str, str | None, str | None]:
    """(repository, tag, digest) of an image reference."""
    digest = None
    if "@" in image:
        image, digest = image.split("@", 1)
    last = image.rsplit("/", 1)[-1]
    if ":" in last:
        repo, tag = image.rsplit(":", 1)
        return repo, tag, digest
    return image, None, digest


def published_ports(service: dict) -> list[object]:
    return list(service.get("ports", []))


# --------------------------------------------------------------------------------- rules
def problems_with_dockerfile_args(text: str) -> list[str]:
    args = dockerfile_args(text)
    problems = []
    for name, expected in EXPECTED_ARGS.items():
        defaults = args.get(name)
        if not defaults:
            problems.append(f"Dockerfile has no ARG {name} (sandbox/versions.py: {expected})")
            continue
        for default in defaults:
            if default != expected:
                problems.append(f"Dockerfile ARG {name}={default!r}, sandbox/versions.py says {expected!r}")
    return problems


def resolve_defaults(text: str) -> str:
    """``${VAR:-default}`` -> ``default``: what a bare ``docker compose`` uses."""
    return re.sub(r"\$\{[A-Z0-9_]+:-([^}]*)\}", r"\1", text)


def problems_with_images(compose: dict) -> list[str]:
    """Every image is built here from docker/Dockerfile, tagged with versions.py's pins, and its
    build args are exactly the pinned versions, fed from the OSL_* variables versions.py sets."""
    problems = []
    for name, service in compose["services"].items():
        image = service.get("image")
        build = service.get("build")
        if image is None:
            problems.append(f"{name}: no image name (an unnamed build gets no pinned tag)")
            continue
        if not isinstance(build, dict):
            problems.append(f"{name}: image {image!r} is not built from docker/Dockerfile (no registry here)")
            continue
        target = build.get("target")
        want = TARGET_IMAGES.get(target or "")
        if want is None:
            problems.append(f"{name}: builds unknown Dockerfile target {target!r}")
        elif resolve_defaults(image) != want:
            problems.append(f"{name}: builds target {target} but tags it {resolve_defaults(image)!r}, expected {want!r}")
        _, tag, digest = image_ref(resolve_defaults(image))
        if digest is None and tag in (None, "", "latest"):
            problems.append(f"{name}: image {image!r} is not pinned to a version tag")
        if service.get("pull_policy") != "build":
            problems.append(f"{name}: a built image needs pull_policy: build (never pulled from a registry)")
        args = build.get("args") or {}
        for arg, var in ARG_NAMES.items():
            got = str(args.get(arg, ""))
            expected = f"${{{var}:-{BUILD_ENV[var]}}}"
            if got != expected:
                problems.append(f"{name}: build arg {arg} is {got!r}, expected {expected!r}")
        if "osl_ca" not in (build.get("secrets") or []):
            problems.append(f"{name}: build without the osl_ca secret (downloads behind a TLS proxy fail)")
    return problems


def problems_with_port_bindings(compose: dict) -> list[str]:
    problems = []
    for name, service in compose["services"].items():
        for port in published_ports(service):
            if isinstance(port, dict):
                if port.get("published") is not None and port.get("host_ip") != "127.0.0.1":
                    problems.append(f"{name}: port {port} is not bound to 127.0.0.1")
            elif not str(port).startswith("127.0.0.1:"):
                problems.append(f"{name}: port {port!r} is not bound to 127.0.0.1")
    return problems


def problems_with_port_defaults(compose: dict) -> list[str]:
    """Each host port is an OSL_* variable whose default is the port sandbox/settings.py uses."""
    text = yaml.safe_dump(compose, width=10**9)
    problems = []
    for var, port in PORT_DEFAULTS.items():
        defaults = set(re.findall(r"\$\{" + var + r":-(\d+)\}", text))
        if defaults != {str(port)}:
            problems.append(f"{var} defaults to {sorted(defaults) or 'nothing'} in docker-compose.yml, settings say {port}")
    for name, service in compose["services"].items():
        for port in published_ports(service):
            if isinstance(port, str) and not re.match(r"127\.0\.0\.1:\$\{OSL_\w+:-\d+\}:", port):
                problems.append(f"{name}: host port in {port!r} is not overridable with an OSL_* variable")
    return problems


def problems_with_dependencies(compose: dict) -> list[str]:
    """Dependents wait for health; only labelled one-shot services are waited on to complete."""
    services = compose["services"]
    problems = []
    for name, service in services.items():
        depends = service.get("depends_on", {})
        if isinstance(depends, list):
            problems.append(f"{name}: depends_on is a list, so nothing waits for health")
            continue
        for target, spec in depends.items():
            condition = (spec or {}).get("condition")
            one_shot = str(services[target].get("labels", {}).get(ONE_SHOT_LABEL, "")).lower() == "true"
            if one_shot:
                if condition != "service_completed_successfully":
                    problems.append(
                        f"{name} -> {target} (one-shot): condition {condition!r}, expected service_completed_successfully"
                    )
                continue
            if condition != "service_healthy":
                problems.append(f"{name} -> {target}: condition {condition!r}, expected service_healthy")
            check = services[target].get("healthcheck")
            if not check or check.get("disable") or not check.get("test"):
                problems.append(f"{target} has dependents ({name}) but no healthcheck")
    return problems


def problems_with_healthchecks(compose: dict) -> list[str]:
    """Every long-running service has a healthcheck, so `up --wait` means healthy."""
    problems = []
    for name, service in compose["services"].items():
        if str(service.get("labels", {}).get(ONE_SHOT_LABEL, "")).lower() == "true":
            continue
        check = service.get("healthcheck")
        if not check or check.get("disable") or not check.get("test"):
            problems.append(f"{name}: no healthcheck")
    return problems


# --------------------------------------------------------------------------------- tests
def test_dockerfile_build_arg_defaults_equal_versions_py():
    assert problems_with_dockerfile_args(DOCKERFILE.read_text()) == []


def test_version_rule_notices_a_drifted_build_arg():
    text = DOCKERFILE.read_text().replace(f"ARG PYSPARK_VERSION={versions.PYSPARK}", "ARG PYSPARK_VERSION=3.5.0")
    assert any("PYSPARK_VERSION" in p for p in problems_with_dockerfile_args(text))
    text = DOCKERFILE.read_text().replace(f"ARG DEBIAN_IMAGE={versions.DEBIAN_IMAGE}", "ARG DEBIAN_IMAGE=debian:trixie-slim")
    assert any("DEBIAN_IMAGE" in p for p in problems_with_dockerfile_args(text))


def test_dockerfile_stages_start_from_pinned_build_args_only():
    text = DOCKERFILE.read_text()
    stages = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, re.M | re.I)
    for base in re.findall(r"^FROM\s+(\S+)", text, re.M | re.I):
        assert base in ("${DEBIAN_IMAGE}", "${GO_IMAGE}") or base in stages, f"FROM {base} is not a pinned base"
    assert {"minio-build", "minio", "spark", "kafka"} <= set(stages)


def test_go_image_is_new_enough_to_build_minio():
    match = re.match(r"golang:(\d+)\.(\d+)", versions.GO_IMAGE)
    assert match and (int(match.group(1)), int(match.group(2))) >= versions.GO_MIN


def test_pyproject_pins_the_same_pyspark():
    text = (ROOT / "pyproject.toml").read_text()
    assert f'"pyspark=={versions.PYSPARK}"' in text


def test_compose_images_are_pinned_and_match_versions_py():
    assert problems_with_images(load_compose()) == []


def test_image_rule_notices_unpinned_or_drifted_images():
    compose = load_compose()
    broken = copy.deepcopy(compose)
    broken["services"]["kafka"]["image"] = "apache/kafka:latest"
    del broken["services"]["kafka"]["build"]
    assert any("kafka" in p and "not built" in p for p in problems_with_images(broken))
    broken = copy.deepcopy(compose)
    broken["services"]["minio"]["image"] = "ordered-stream-lab/minio"
    assert any("minio" in p and "not pinned" in p for p in problems_with_images(broken))
    broken = copy.deepcopy(compose)
    broken["services"]["jupyter"]["image"] = "ordered-stream-lab/spark:3.5.0-python3.11"
    assert any("jupyter" in p and versions.SPARK_IMAGE in p for p in problems_with_images(broken))
    broken = copy.deepcopy(compose)
    broken["services"]["kafka"]["build"]["args"] = dict(broken["services"]["kafka"]["build"]["args"])
    broken["services"]["kafka"]["build"]["args"]["PYSPARK_VERSION"] = "3.5.0"
    assert any("kafka: build arg PYSPARK_VERSION" in p for p in problems_with_images(broken))


def test_every_version_var_sandbox_sets_reaches_a_build_arg():
    # A variable in image_build_env() that no build arg reads would be a pin that changes nothing.
    assert set(ARG_NAMES.values()) == set(BUILD_ENV)
    assert set(ARG_NAMES) <= set(dockerfile_args(DOCKERFILE.read_text()))


def test_every_published_port_is_bound_to_localhost():
    assert problems_with_port_bindings(load_compose()) == []


def test_port_rule_notices_a_port_open_to_the_network():
    broken = load_compose()
    broken["services"]["kafka"]["ports"] = ["9092:9092"]
    broken["services"]["minio"]["ports"] = [{"target": 9000, "published": "9000", "host_ip": "0.0.0.0"}]
    found = problems_with_port_bindings(broken)
    assert any(p.startswith("kafka") for p in found) and any(p.startswith("minio") for p in found)


def test_host_ports_default_to_the_local_backend_ports_and_are_overridable():
    assert problems_with_port_defaults(load_compose()) == []


def test_port_default_rule_notices_a_different_default():
    text = COMPOSE_FILE.read_text().replace("${OSL_JUPYTER_PORT:-8888}", "${OSL_JUPYTER_PORT:-8889}")
    assert any("OSL_JUPYTER_PORT" in p for p in problems_with_port_defaults(yaml.safe_load(text)))


def test_dependents_wait_for_healthy_services():
    assert problems_with_dependencies(load_compose()) == []


def test_dependency_rule_notices_a_dependency_without_health():
    compose = load_compose()
    broken = copy.deepcopy(compose)
    broken["services"]["minio-init"]["depends_on"]["minio"] = {"condition": "service_started"}
    assert any("minio-init -> minio" in p for p in problems_with_dependencies(broken))
    broken = copy.deepcopy(compose)
    del broken["services"]["minio"]["healthcheck"]
    assert any("minio has dependents" in p for p in problems_with_dependencies(broken))
    broken = copy.deepcopy(compose)
    broken["services"]["minio-init"]["depends_on"] = ["minio"]
    assert any("is a list" in p for p in problems_with_dependencies(broken))


def test_every_long_running_service_has_a_healthcheck():
    assert problems_with_healthchecks(load_compose()) == []
    broken = load_compose()
    broken["services"]["spark-worker-2"]["healthcheck"] = {"disable": True}
    assert problems_with_healthchecks(broken) == ["spark-worker-2: no healthcheck"]


@pytest.mark.parametrize("service", ["spark-master", "spark-worker-1", "spark-worker-2", "jupyter", "minio-init"])
def test_spark_nodes_and_jupyter_share_one_image(service):
    compose = load_compose()
    assert compose["services"][service]["image"] == compose["services"]["jupyter"]["image"]
    assert compose["services"][service]["build"] == compose["services"]["jupyter"]["build"]
