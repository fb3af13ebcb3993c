"""Inside the jupyter container: settings from the compose file's environment, no start-up."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from sandbox import open_sandbox
from sandbox.errors import UnknownServiceError
from sandbox.services.backend import Sandbox
from sandbox.services.inside_compose import AttachedSandbox, HostOnlyActionError
from sandbox.settings import Settings

ROOT = Path(__file__).resolve().parents[2]


def jupyter_environment(offset: int) -> dict[str, str]:
    """The jupyter service's environment as compose resolves it for ``OSL_PORT_OFFSET=offset``."""
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    env = {}
    for key, value in compose["services"]["jupyter"]["environment"].items():
        text = str(value).replace("${OSL_PORT_OFFSET:-0}", str(offset))
        text = text.replace("${OSL_SPARK_MASTER_UI_PORT:-8080}", str(8080 + offset))
        env[key] = text.split(":-")[-1].rstrip("}") if text.startswith("${") else text
    return env | {"OSL_STATE_DIR": "/state"}


def test_the_jupyter_container_gets_an_attached_sandbox_with_host_links():
    settings = Settings.from_env(jupyter_environment(30000))
    sb = open_sandbox(settings, progress=lambda _m: None)
    assert isinstance(sb, AttachedSandbox) and isinstance(sb, Sandbox)
    e = sb.endpoints()
    # what the job uses: names inside the compose network
    assert (e.kafka_bootstrap, e.s3_endpoint, e.spark_master) == (
        "kafka:19092",
        "http://minio:9000",
        "spark://spark-master:7077",
    )
    # what a browser on the host opens: the published ports, moved by the offset
    assert e.spark_master_ui == "http://127.0.0.1:38080"
    assert e.s3_console == "http://127.0.0.1:39001"
    assert e.jupyter == "http://127.0.0.1:38888"
    # health checks reach the master's UI by name
    assert settings.spark_status_url() == "http://spark-master:38080"


@pytest.mark.parametrize("action", ["kill", "pause", "resume", "restart"])
def test_fault_actions_from_inside_say_which_host_command_to_run(action):
    sb = AttachedSandbox(Settings.from_env(jupyter_environment(0)))
    with pytest.raises(HostOnlyActionError, match=rf"`python -m sandbox {action} spark-worker-1`"):
        getattr(sb, action)("spark-worker-1")
    with pytest.raises(UnknownServiceError):
        getattr(sb, action)("zookeeper")


def test_down_and_reset_from_inside_are_refused_with_the_host_command():
    sb = AttachedSandbox(Settings.from_env(jupyter_environment(0)))
    with pytest.raises(HostOnlyActionError, match="python -m sandbox down"):
        sb.down()
    with pytest.raises(HostOnlyActionError, match="reset --yes"):
        sb.reset()
