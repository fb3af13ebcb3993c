"""The Docker Compose side, checked without a Docker engine and without the network.

(What needs the compose plugin or Go modules, ``docker compose config`` and the BuildKit
check of the Dockerfile, runs in the compose lane: ``tests/compose/test_compose_tools.py``.)
``ComposeBackend`` is checked,
with ``subprocess`` replaced by a recorder, for the exact ``docker compose`` commands it runs (its
protocol compliance is in ``test_backend_protocol.py``, with the local backend's); the in-container healthchecks run against fake HTTP servers.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import yaml

from sandbox.checks import health
from sandbox.errors import NotRunningError, PortBusyError, SandboxError, ServiceStartError, UnknownServiceError
from sandbox.services import compose as compose_mod
from sandbox.services.backend import CORE_SERVICES, ServiceState
from sandbox.services.compose import (
    ComposeBackend,
    ComposeCommandError,
    ComposePluginMissingError,
    DockerEngineDownError,
    DockerMissingError,
    compose_environment,
    docker_engine_answers,
)
from sandbox.settings import Ports, Settings

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "docker-compose.yml"
ENSURE_PLUGIN = ROOT / "scripts" / "ensure-compose-plugin.sh"
HEALTHCHECK = ROOT / "docker" / "healthcheck.py"


def make_settings(tmp_path: Path, *, offset: int = 0, **overrides: object) -> Settings:
    return Settings(
        state_dir=tmp_path / "state",
        cache_dir=tmp_path / "cache",
        backend="compose",
        ports=Ports().shifted(offset),
        **overrides,  # type: ignore[arg-type]
    )


def test_ensure_compose_plugin_script_is_valid_bash():
    assert subprocess.run(["bash", "-n", str(ENSURE_PLUGIN)], capture_output=True).returncode == 0
    assert os.access(ENSURE_PLUGIN, os.X_OK)


# --------------------------------------------------------------------- compose file content
def _compose() -> dict:
    return yaml.safe_load(COMPOSE_FILE.read_text())


def test_compose_runs_every_backend_service_plus_jupyter_and_the_fault_service():
    services = _compose()["services"]
    assert set(compose_mod.COMPOSE_SERVICES) <= set(services)
    assert compose_mod.COMPOSE_SERVICES == (*CORE_SERVICES, "jupyter", "faults")


def test_only_the_fault_service_holds_the_docker_socket_and_it_publishes_no_port():
    services = _compose()["services"]
    holders = {name for name, svc in services.items() if any("docker.sock" in str(v) for v in svc.get("volumes", []))}
    assert holders == {"faults"}
    faults = services["faults"]
    assert "ports" not in faults and "network_mode" not in faults
    assert faults["command"][:3] == ["python", "-m", "sandbox.services.fault_service"]
    # the notebooks find it by name on the stack's network
    assert services["jupyter"]["environment"]["OSL_FAULTS_URL"] == f"http://{compose_mod.FAULTS_ADDRESS}"


def test_named_volumes_hold_kafka_minio_and_checkpoints_on_every_spark_node():
    compose = _compose()
    services = compose["services"]
    assert "kafka-data:/var/lib/kafka/data" in services["kafka"]["volumes"]
    assert "minio-data:/data" in services["minio"]["volumes"]
    for name in ("spark-master", "spark-worker-1", "spark-worker-2", "jupyter"):
        assert "checkpoints:/checkpoints" in services[name]["volumes"], name
    assert {"kafka-data", "minio-data", "checkpoints"} <= set(compose["volumes"])


def test_compose_workers_clean_up_ended_applications_like_local_ones():
    from sandbox.services.local_processes import SPARK_WORKER_OPTS

    services = _compose()["services"]
    for name in ("spark-worker-1", "spark-worker-2"):
        assert services[name]["environment"]["SPARK_WORKER_OPTS"] == SPARK_WORKER_OPTS, name


def test_compose_spark_daemons_run_with_the_local_ones_jvm_options():
    from sandbox.services.local_processes import SPARK_DAEMON_JAVA_OPTS

    services = _compose()["services"]
    for name in ("spark-master", "spark-worker-1", "spark-worker-2"):
        assert services[name]["environment"]["SPARK_DAEMON_JAVA_OPTS"] == SPARK_DAEMON_JAVA_OPTS, name


def test_compose_workers_start_once_the_master_is_alive():
    services = _compose()["services"]
    for name in ("spark-worker-1", "spark-worker-2"):
        assert services[name]["command"][:3] == ["python", "/opt/osl/docker/spark_worker_start.py", "spark-class"], name


def test_compose_master_recovers_its_applications_like_the_local_one():
    from sandbox.services.local_processes import spark_master_opts

    # in the container's own filesystem: it survives a kill and restart, not a `compose down`
    assert _compose()["services"]["spark-master"]["environment"]["SPARK_MASTER_OPTS"] == spark_master_opts("/tmp/spark-recovery")


def test_compose_kafka_ends_a_killed_broker_s_session_like_the_local_one(tmp_path):
    from sandbox.services import local_processes

    env = _compose()["services"]["kafka"]["environment"]
    session_ms = local_processes.KAFKA_SESSION_TIMEOUT_MS
    assert int(env["KAFKA_BROKER_SESSION_TIMEOUT_MS"]) == session_ms
    # Kafka wants a heartbeat at least twice per session (KAFKA-19432)
    assert 2 * int(env["KAFKA_BROKER_HEARTBEAT_INTERVAL_MS"]) <= session_ms
    assert session_ms < 9000, "shorter than Kafka's default, or a killed broker waits 9 s to register again"
    # the local broker's properties say the same (storage marked formatted: no jars needed)
    layout = local_processes.Layout(tmp_path / "state")
    (layout.data_dir("kafka") / "logs").mkdir(parents=True)
    (layout.data_dir("kafka") / "logs" / "meta.properties").write_text("")
    local_processes.prepare(make_settings(tmp_path), layout, "kafka", {}, progress=lambda _line: None)
    props = dict(line.split("=", 1) for line in (layout.config_dir / "kafka.properties").read_text().splitlines() if line)
    assert int(props["broker.session.timeout.ms"]) == session_ms
    assert 2 * int(props["broker.heartbeat.interval.ms"]) <= session_ms


def test_memory_limits_fit_a_16_gb_laptop():
    def mib(text: str) -> float:
        number, unit = float(str(text)[:-1]), str(text)[-1].lower()
        return number * {"m": 1, "g": 1024}[unit]

    services = _compose()["services"]
    limits = {name: mib(service["mem_limit"]) for name, service in services.items()}
    # ceilings, not reservations: 11 GiB of ceilings still leaves the OS and a browser 5 GB
    assert sum(limits.values()) <= 11 * 1024, limits
    assert set(limits) == set(services)
    # a worker must fit its daemon (~400 MiB), a 1g executor JVM with overhead, and Python workers
    assert limits["spark-worker-1"] >= 2048 and limits["spark-worker-2"] >= 2048


def test_jupyter_opens_a_working_copy_beside_the_read_only_recordings_and_reads_its_token_from_env():
    compose = _compose()
    jupyter = compose["services"]["jupyter"]
    assert "./notebooks:/workspace/recorded:ro" in jupyter["volumes"]
    assert "workbook:/workspace/notebooks" in jupyter["volumes"] and "workbook" in compose["volumes"]
    assert jupyter["command"][:2] == ["python", "/opt/osl/docker/jupyter_start.py"]
    assert jupyter["environment"]["JUPYTER_TOKEN"].startswith("${OSL_JUPYTER_TOKEN")
    assert "--port=8888" in jupyter["command"]


def test_containers_are_told_the_in_network_addresses():
    env = _compose()["services"]["jupyter"]["environment"]
    assert env["OSL_KAFKA_BOOTSTRAP"] == "kafka:19092"
    assert env["OSL_S3_ENDPOINT"] == "http://minio:9000"
    assert env["OSL_SPARK_MASTER"] == "spark://spark-master:7077"
    assert env["OSL_CHECKPOINT_ROOT"] == "/checkpoints"
    assert env["SPARK_LOCAL_HOSTNAME"] == "jupyter"


def test_every_osl_variable_compose_reads_is_documented_in_env_example():
    import re

    used = dict(re.findall(r"\$\{(OSL_\w+):?-([^}]*)\}", COMPOSE_FILE.read_text()))  # ":-" and "-" defaults
    documented = dict(
        line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines() if re.match(r"OSL_\w+=", line)
    )
    assert set(used) == set(documented)
    for name, default in used.items():
        assert documented[name] == default, name
    # ComposeBackend passes everything but the token, the build uid, the mirror and the CA bundle
    # (those two when set) from Settings and versions.py.
    assert set(used) - set(compose_environment(make_settings(Path("/tmp")))) == {
        "OSL_JUPYTER_TOKEN",
        "OSL_UID",
        "OSL_MAVEN_REPO",
        "OSL_BUILD_CA_BUNDLE",
        "OSL_DOCKER_SOCKET",
    }


def test_files_the_image_copies_exist_and_pass_dockerignore():
    dockerfile = (ROOT / "docker" / "Dockerfile").read_text()
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for path in ("pyproject.toml", "sandbox/", "producers/", "job/", "docker/"):
        assert f"!{path}" in ignore, path
        assert f"COPY {path}" in dockerfile or f"COPY {path.rstrip('/')}" in dockerfile or path == "docker/"
    for script in ("healthcheck.py", "ensure_bucket.py", "check_versions.py"):
        assert (ROOT / "docker" / script).exists()
        assert f"/opt/osl/docker/{script}" in (COMPOSE_FILE.read_text() + dockerfile), script


# ------------------------------------------------------------------ in-container healthchecks
class _Server:
    """A tiny HTTP server answering fixed JSON per path, for docker/healthcheck.py."""

    def __init__(self, routes: dict[str, tuple[int, object]]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802
                status, body = routes.get(self.path, (404, {}))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _healthcheck(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(HEALTHCHECK), *args], capture_output=True, text=True, timeout=30)


@pytest.mark.parametrize(
    ("role", "routes", "healthy"),
    [
        ("spark-master", {"/json/": (200, {"status": "ALIVE", "workers": [{"state": "ALIVE"}]})}, True),
        ("spark-master", {"/json/": (200, {"status": "ALIVE", "workers": [{"state": "DEAD"}]})}, False),
        ("spark-master", {"/json/": (200, {"status": "STANDBY", "workers": [{"state": "ALIVE"}]})}, False),
        ("spark-worker", {"/json/": (200, {"masterurl": "spark://spark-master:7077", "cores": 1})}, True),
        ("spark-worker", {"/json/": (200, {"masterurl": "", "cores": 1})}, False),
        ("minio", {"/minio/health/ready": (200, {})}, True),
        ("minio", {"/minio/health/ready": (503, {})}, False),
        ("jupyter", {"/api": (200, {"version": "2.14.0"})}, True),
    ],
)
def test_container_healthcheck_passes_only_when_the_service_does_its_job(role, routes, healthy):
    server = _Server(routes)
    try:
        proc = _healthcheck(role, "--port", str(server.port))
    finally:
        server.close()
    assert (proc.returncode == 0) is healthy, proc.stdout + proc.stderr
    assert role in proc.stdout


def test_container_healthcheck_fails_when_nothing_listens():
    server = _Server({})
    port = server.port
    server.close()
    assert _healthcheck("minio", "--port", str(port)).returncode == 1


def test_compose_backend_refuses_a_cluster_size_the_compose_file_does_not_run(tmp_path):
    with pytest.raises(SandboxError, match="2 Spark workers"):
        ComposeBackend(make_settings(tmp_path, spark_workers=3), compose_file=COMPOSE_FILE)


# --------------------------------------------------------------------- commands, with a recorder
class FakeDocker:
    """Stands in for subprocess.run / Popen: records argv, answers from a script of outputs."""

    def __init__(self, *, ps: list[dict] | None = None) -> None:
        self.calls: list[list[str]] = []
        self.envs: list[dict[str, str]] = []
        self.ps = ps or []
        self.fail: dict[str, tuple[int, str]] = {}  # compose sub-command -> (rc, output)
        self.stale_reads: dict[str, int] = {}  # service -> ps reads still showing "unhealthy"
        self.volumes: list[str] = []  # what `docker volume ls --quiet` answers

    def _sub(self, argv: list[str]) -> str:
        if argv[:2] != ["docker", "compose"]:
            return argv[1]
        rest = argv[2:]
        i = 0
        while i < len(rest) and rest[i].startswith("--"):
            i += 2
        return rest[i] if i < len(rest) else "version"

    def run(self, argv, **kwargs):
        argv = list(argv)
        self.calls.append(argv)
        self.envs.append(kwargs.get("env") or {})
        sub = self._sub(argv)
        if argv[:2] == ["docker", "info"]:
            return subprocess.CompletedProcess(argv, 0, "28.2.2\n", "")
        if argv[:3] == ["docker", "volume", "ls"]:
            return subprocess.CompletedProcess(argv, 0, "".join(f"{v}\n" for v in self.volumes), "")
        if sub in self.fail:
            rc, out = self.fail[sub]
            return subprocess.CompletedProcess(argv, rc, "", out)
        if sub == "unpause":
            # Docker's verdict stays "unhealthy" until the next check after an unpause
            for record in self.ps:
                if record["Service"] == argv[-1]:
                    record.update(State="running", Health="unhealthy", Status="Up (unhealthy)")
                    self.stale_reads[argv[-1]] = 1
        if sub == "ps":
            for record in self.ps:
                if record["Service"] in self.stale_reads:
                    if self.stale_reads[record["Service"]] <= 0:
                        record.update(Health="healthy", Status="Up (healthy)")
                    self.stale_reads[record["Service"]] -= 1
            return subprocess.CompletedProcess(argv, 0, "\n".join(json.dumps(r) for r in self.ps), "")
        if sub == "version":
            return subprocess.CompletedProcess(argv, 0, "Docker Compose version v2.40.3\n", "")
        if sub == "logs":
            return subprocess.CompletedProcess(argv, 0, "line 1\nline 2\nline 3\n", "")
        return subprocess.CompletedProcess(argv, 0, "", "")

    def popen(self, argv, **kwargs):
        argv = list(argv)
        self.calls.append(argv)
        self.envs.append(kwargs.get("env") or {})
        rc, out = self.fail.get(self._sub(argv), (0, " Container ordered-stream-lab-kafka-1  Healthy\n"))
        return _FakeProc(rc, out)

    def compose_calls(self) -> list[list[str]]:
        """Only the part after the global options, for every `docker compose` call but `version`/`ps`."""
        out = []
        for argv in self.calls:
            if argv[:2] != ["docker", "compose"]:
                continue
            rest = argv[2:]
            while rest and rest[0].startswith("--"):
                rest = rest[2:]
            if rest and rest[0] not in ("version", "ps"):
                out.append(rest)
        return out


class _FakeProc:
    def __init__(self, rc: int, out: str) -> None:
        self.stdout = iter(out.splitlines(keepends=True))
        self._rc = rc

    def wait(self) -> int:
        return self._rc

    def poll(self) -> int:
        return self._rc

    def kill(self) -> None:
        pass


FAULTS_HEALTHY = {"Service": "faults", "State": "running", "Health": "healthy", "Status": "Up (healthy)", "ExitCode": 0}


def _record(kafka="running", health_="healthy", **states: str) -> list[dict]:
    rows = [{"Service": "kafka", "State": kafka, "Health": health_, "Status": f"Up ({health_})", "ExitCode": 0}]
    for service, state in states.items():
        rows.append({"Service": service.replace("_", "-"), "State": state, "Health": "", "Status": state, "ExitCode": 137})
    return rows


@pytest.fixture
def fake_docker(monkeypatch):
    fake = FakeDocker()
    monkeypatch.setattr(compose_mod.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(compose_mod.subprocess, "run", fake.run)
    monkeypatch.setattr(compose_mod.subprocess, "Popen", fake.popen)
    return fake


@pytest.fixture
def backend(tmp_path, fake_docker):
    return ComposeBackend(make_settings(tmp_path), compose_file=COMPOSE_FILE, progress=lambda _: None)


def test_pause_runs_docker_compose_pause_on_the_project_file(backend, fake_docker):
    fake_docker.ps = _record()
    backend.pause("kafka")
    pause = [argv for argv in fake_docker.calls if "pause" in argv]
    assert pause == [
        [
            "docker",
            "compose",
            "--project-name",
            "ordered-stream-lab",
            "--file",
            str(COMPOSE_FILE),
            "--project-directory",
            str(ROOT),
            "pause",
            "kafka",
        ]
    ]


@pytest.mark.parametrize(
    ("action", "expected"),
    [
        ("kill", ["kill", "--signal", "SIGKILL", "spark-worker-1"]),
        ("resume", ["unpause", "spark-worker-1"]),
    ],
)
def test_fault_actions_run_the_matching_compose_command(backend, fake_docker, action, expected):
    fake_docker.ps = _record(spark_worker_1="paused")
    getattr(backend, action)("spark-worker-1")
    assert fake_docker.compose_calls() == [expected]


def test_resume_returns_once_dockers_healthcheck_passes_again(backend, fake_docker):
    fake_docker.ps = _record(kafka="paused", health_="healthy")
    backend.resume("kafka")
    after = fake_docker.calls[[c[-1:] for c in fake_docker.calls].index(["kafka"]) :]
    assert sum(1 for argv in after if "ps" in argv) >= 2  # it read the stale "unhealthy", then waited
    assert [s.state for s in backend.status() if s.name == "kafka"] == [ServiceState.RUNNING]


def test_resume_of_a_running_service_does_nothing(backend, fake_docker):
    fake_docker.ps = _record()
    backend.resume("kafka")
    assert fake_docker.compose_calls() == []


def test_kill_of_a_stopped_service_says_it_is_not_running(backend, fake_docker):
    fake_docker.ps = _record(spark_master="exited")
    with pytest.raises(NotRunningError, match="spark-master is not running"):
        backend.kill("spark-master")
    with pytest.raises(NotRunningError, match="minio is not running"):
        backend.pause("minio")  # no container at all


def test_unknown_service_lists_the_known_ones(backend):
    with pytest.raises(UnknownServiceError, match="spark-worker-2, jupyter"):
        backend.kill("zookeeper")


def test_down_keeps_volumes_and_reset_deletes_the_data_but_not_the_learner_s_workbook(backend, fake_docker):
    fake_docker.ps = _record(minio="paused")
    backend.down()
    fake_docker.ps = _record(minio="paused")  # the fake unpaused it; both must unpause first
    fake_docker.volumes = [f"ordered-stream-lab_{v}" for v in ("kafka-data", "minio-data", "workbook")]
    backend.reset()
    assert fake_docker.compose_calls() == [
        ["unpause", "minio"],
        ["down", "--remove-orphans"],
        ["unpause", "minio"],
        ["down", "--remove-orphans"],
    ]
    assert fake_docker.calls[-1] == ["docker", "volume", "rm", "ordered-stream-lab_kafka-data", "ordered-stream-lab_minio-data"]


def test_logs_asks_compose_for_the_tail_of_one_service(backend, fake_docker):
    assert backend.logs("jupyter", lines=2) == "line 2\nline 3"
    assert fake_docker.compose_calls() == [["logs", "--no-color", "--no-log-prefix", "--tail", "2", "jupyter"]]


def test_status_maps_compose_states_in_start_order(backend, fake_docker, monkeypatch):
    monkeypatch.setattr(compose_mod, "_check_jupyter", lambda *_a, **_k: health.Health(False, "connection refused"))
    fake_docker.ps = [
        {"Service": "kafka", "State": "running", "Health": "healthy", "Status": "Up 1 minute (healthy)"},
        {"Service": "minio", "State": "running", "Health": "unhealthy", "Status": "Up (unhealthy)"},
        {"Service": "spark-master", "State": "paused", "Health": "healthy", "Status": "Up (Paused)"},
        {"Service": "spark-worker-1", "State": "exited", "Health": "", "Status": "Exited (137)", "ExitCode": 137},
        {"Service": "minio-init", "State": "exited", "Health": "", "Status": "Exited (0)", "ExitCode": 0},
        {"Service": "jupyter", "State": "running", "Health": "starting", "Status": "Up (health: starting)"},
    ]
    statuses = backend.status()
    assert [s.name for s in statuses] == list(compose_mod.COMPOSE_SERVICES)
    by_name = {s.name: s for s in statuses}
    assert by_name["kafka"].state is ServiceState.RUNNING
    assert by_name["minio"].state is ServiceState.UNHEALTHY
    assert by_name["spark-master"].state is ServiceState.PAUSED
    assert by_name["spark-worker-1"].state is ServiceState.STOPPED
    assert by_name["spark-worker-1"].detail == "exited with code 137"
    assert by_name["spark-worker-2"].state is ServiceState.STOPPED
    assert by_name["jupyter"].state is ServiceState.UNHEALTHY
    assert by_name["kafka"].endpoint == "127.0.0.1:9092"
    assert by_name["spark-worker-2"].ui == "http://127.0.0.1:8082"
    assert by_name["minio"].log == "docker compose -p ordered-stream-lab logs minio"


def test_status_reads_the_older_json_array_format_too():
    assert compose_mod._parse_ps('[{"Service": "kafka", "State": "running"}]') == [{"Service": "kafka", "State": "running"}]
    assert compose_mod._parse_ps("") == []


def test_port_offset_moves_ports_and_project_name(tmp_path, fake_docker):
    backend = ComposeBackend(make_settings(tmp_path, offset=10000), compose_file=COMPOSE_FILE, progress=lambda _: None)
    assert backend.project_name == "ordered-stream-lab-p10000"
    fake_docker.ps = _record()
    backend.pause("kafka")
    env = fake_docker.envs[-1]
    assert env["OSL_KAFKA_PORT"] == "19092"
    assert env["OSL_SPARK_WORKER_2_UI_PORT"] == "18082"
    assert env["OSL_SPARK_DRIVER_UI_PORT"] == "14040"
    assert env["OSL_S3_SECRET_KEY"] == "sandbox-secret"


def test_up_builds_then_waits_then_checks_health_from_this_machine(backend, fake_docker, monkeypatch):
    checked = []
    ok = lambda name: lambda *a, **k: checked.append(name) or health.Health(True, name)  # noqa: E731
    monkeypatch.setattr(health, "check_kafka", ok("kafka"))
    monkeypatch.setattr(health, "check_minio", ok("minio"))
    monkeypatch.setattr(health, "check_spark", ok("spark-master"))
    monkeypatch.setattr(health, "check_spark_worker", lambda s, n, **k: checked.append(f"w{n}") or health.Health(True, ""))
    monkeypatch.setattr(compose_mod, "_check_jupyter", ok("jupyter"))
    fake_docker.ps = [FAULTS_HEALTHY]  # no published port: Docker's own healthcheck decides
    backend.up()
    calls = fake_docker.compose_calls()
    assert calls[0] == ["build"]
    assert calls[1][:3] == ["up", "--detach", "--no-build"] and "--wait" not in calls[1]
    assert checked == ["kafka", "minio", "spark-master", "w1", "w2", "jupyter"]


def test_up_stops_waiting_when_a_container_fails_and_names_it(backend, fake_docker, monkeypatch):
    """`up` waits on each service's own check, not on Docker's healthchecks; a container that
    exits meanwhile ends the wait at once, with its log, instead of after the start timeout."""
    down = lambda *_a, **_k: health.Health(False, "connection refused")  # noqa: E731
    for name in ("check_kafka", "check_minio", "check_spark", "check_spark_worker"):
        monkeypatch.setattr(health, name, down)
    fake_docker.ps = _record(spark_worker_1="exited")
    started = time.monotonic()
    with pytest.raises(ServiceStartError, match="spark-worker-1 exited with code 137") as info:
        backend.up()
    assert time.monotonic() - started < 10 and "line 3" in info.value.log_tail


def test_status_trusts_the_services_own_check_until_dockers_first_healthcheck(backend, fake_docker, monkeypatch):
    """Right after `up` Docker may not have run a healthcheck yet ("starting"): the service's
    own check decides then, so `status` does not call a ready service unhealthy."""
    answer = health.Health(True, "Jupyter server 2.21.1")
    monkeypatch.setattr(compose_mod, "_check_jupyter", lambda *_a, **_k: answer)
    fake_docker.ps = [{"Service": "jupyter", "State": "running", "Health": "starting", "Status": "Up (health: starting)"}]
    jupyter = {s.name: s for s in backend.status()}["jupyter"]
    assert jupyter.state is ServiceState.RUNNING and "first healthcheck is still to come" in jupyter.detail
    answer = health.Health(False, "connection refused")
    assert {s.name: s for s in backend.status()}["jupyter"].state is ServiceState.UNHEALTHY


def test_up_names_the_service_that_failed_its_healthcheck(backend, fake_docker):
    fake_docker.fail["up"] = (1, "container ordered-stream-lab-minio-1 is unhealthy")
    fake_docker.ps = [{"Service": "minio", "State": "running", "Health": "unhealthy", "Status": "Up (unhealthy)"}]
    with pytest.raises(ServiceStartError, match="minio did not become healthy") as info:
        backend.up()
    assert "line 3" in info.value.log_tail


def test_port_already_taken_becomes_port_busy_error(backend, fake_docker):
    fake_docker.fail["up"] = (
        1,
        "Error response from daemon: driver failed programming external connectivity on endpoint "
        "ordered-stream-lab-kafka-1: Bind for 127.0.0.1:9092 failed: port is already allocated",
    )
    with pytest.raises(PortBusyError, match=r"kafka: port 127\.0\.0\.1:9092 is already in use"):
        backend.up()


def test_other_compose_failures_carry_the_command_and_output(backend, fake_docker):
    fake_docker.fail["logs"] = (1, "no such service: jupyter")
    with pytest.raises(ComposeCommandError, match="no such service"):
        backend.logs("jupyter")


# --------------------------------------------------------------------------- missing pieces
def test_missing_docker_cli_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(compose_mod.shutil, "which", lambda name: None)
    backend = ComposeBackend(make_settings(tmp_path), compose_file=COMPOSE_FILE)
    with pytest.raises(DockerMissingError, match="docker CLI is required"):
        backend.status()
    assert docker_engine_answers() is False


def test_missing_compose_plugin_points_at_the_build_script(backend, fake_docker):
    fake_docker.fail["version"] = (1, "docker: 'compose' is not a docker command.")
    with pytest.raises(ComposePluginMissingError, match="ensure-compose-plugin.sh"):
        backend.status()


def test_engine_that_does_not_answer_is_a_clear_error(backend, fake_docker, monkeypatch):
    real_run = fake_docker.run

    def run(argv, **kwargs):
        if list(argv)[:2] == ["docker", "info"]:
            return subprocess.CompletedProcess(argv, 1, "", "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.")
        return real_run(argv, **kwargs)

    monkeypatch.setattr(compose_mod.subprocess, "run", run)
    with pytest.raises(DockerEngineDownError, match="start Docker"):
        backend.status()
    assert docker_engine_answers() is False


def test_engine_probe_gives_up_quickly(monkeypatch):
    def slow(argv, **kwargs):
        assert kwargs["timeout"] <= 5
        raise subprocess.TimeoutExpired(argv, kwargs["timeout"])

    monkeypatch.setattr(compose_mod.shutil, "which", lambda name: "/usr/bin/docker")
    monkeypatch.setattr(compose_mod.subprocess, "run", slow)
    assert docker_engine_answers() is False


def test_settings_with_offset_and_compose_environment_agree_with_endpoints(tmp_path):
    settings = make_settings(tmp_path, offset=7)
    env = compose_environment(settings)
    e = settings.endpoints()
    assert e.kafka_bootstrap.endswith(":" + env["OSL_KAFKA_PORT"])
    assert e.s3_endpoint.endswith(":" + env["OSL_MINIO_PORT"])
    assert e.spark_master_ui.endswith(":" + env["OSL_SPARK_MASTER_UI_PORT"])
    assert e.jupyter and e.jupyter.endswith(":" + env["OSL_JUPYTER_PORT"])


def _checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "prebuilt").mkdir(parents=True)
    (root / "docker-compose.yml").write_text(COMPOSE_FILE.read_text())
    return root


def test_the_minio_the_local_backend_built_is_staged_for_the_image_with_its_module_and_version(tmp_path, fake_docker):
    from sandbox import versions

    settings = make_settings(tmp_path)
    built = settings.cache_dir / "minio" / versions.MINIO_VERSION / "minio"
    built.parent.mkdir(parents=True)
    built.write_bytes(b"\x7fELF minio")
    root = _checkout(tmp_path)
    backend = ComposeBackend(settings, compose_file=root / "docker-compose.yml", progress=lambda _: None)
    backend._stage_minio()
    assert (root / "prebuilt" / "minio").read_bytes() == b"\x7fELF minio"
    assert (root / "prebuilt" / "minio.version").read_text() == f"{versions.MINIO_MODULE}@{versions.MINIO_VERSION}"
    # the Dockerfile's test is this very string
    assert '"${MINIO_MODULE}@${MINIO_VERSION}"' in (ROOT / "docker" / "Dockerfile").read_text()


#: Another process's MinIO build: it holds the build's lock, says "held", and on a line from its
#: stdin writes the binary and ends (releasing the lock).
_BUILDING = """
import fcntl, sys
from pathlib import Path
folder = Path(sys.argv[1])
lock = (folder / ".build.lock").open("w")
fcntl.flock(lock, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
(folder / "minio").write_bytes(b"\\x7fELF built meanwhile")
"""


def test_a_minio_build_another_process_runs_is_waited_for_then_staged_not_built_again(tmp_path):
    """bootstrap leaves MinIO's build running (scripts/bootstrap.sh): the image must take its
    binary once it is there, not compile MinIO a second time because it was not there yet."""
    from sandbox import versions

    settings = make_settings(tmp_path)
    folder = settings.cache_dir / "minio" / versions.MINIO_VERSION
    folder.mkdir(parents=True)
    builder = subprocess.Popen(
        [sys.executable, "-c", _BUILDING, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert builder.stdout.readline() == "held\n"
        waiting = threading.Event()

        def progress(line: str) -> None:
            if "waiting for the MinIO build another process runs" in line:
                waiting.set()

        root = _checkout(tmp_path)
        backend = ComposeBackend(settings, compose_file=root / "docker-compose.yml", progress=progress)
        staging = threading.Thread(target=backend._stage_minio, daemon=True)
        staging.start()
        assert waiting.wait(30), "_stage_minio did not wait for the build that holds the lock"
        assert not (root / "prebuilt" / "minio").exists()
        builder.stdin.write("done\n")
        builder.stdin.flush()
        staging.join(30)
        assert not staging.is_alive(), "_stage_minio still waits after the build ended"
        assert (root / "prebuilt" / "minio").read_bytes() == b"\x7fELF built meanwhile"
    finally:
        builder.kill()
        builder.wait()


def test_without_a_local_minio_nothing_is_staged_and_the_image_builds_its_own(tmp_path, fake_docker):
    root = _checkout(tmp_path)
    backend = ComposeBackend(make_settings(tmp_path), compose_file=root / "docker-compose.yml", progress=lambda _: None)
    backend._stage_minio()
    assert sorted(p.name for p in (root / "prebuilt").iterdir()) == []


def test_restart_waits_on_the_services_own_check_and_only_its_own_container(backend, fake_docker, monkeypatch):
    """`restart` starts one container without `--wait` and waits on its own check; another
    service a drill killed earlier (exited 137) does not end the wait, the restarted one does."""
    answers = iter([health.Health(False, "not yet"), health.Health(True, "registered")])
    monkeypatch.setattr(health, "check_spark_worker", lambda *_a, **_k: next(answers))
    fake_docker.ps = [
        {"Service": "spark-worker-1", "State": "running", "Health": "starting", "Status": "Up"},
        {"Service": "spark-worker-2", "State": "exited", "Health": "", "Status": "Exited (137)", "ExitCode": 137},
    ]
    backend.restart("spark-worker-1")
    ups = [c for c in fake_docker.compose_calls() if c[0] == "up"]
    assert ups == [["up", "--detach", "--no-build", "--no-deps", "spark-worker-1"]]

    fake_docker.ps = [{"Service": "spark-worker-2", "State": "exited", "Health": "", "Status": "Exited (1)", "ExitCode": 1}]
    monkeypatch.setattr(health, "check_spark_worker", lambda *_a, **_k: health.Health(False, "not registered"))
    with pytest.raises(ServiceStartError, match="spark-worker-2 exited with code 1"):
        backend.restart("spark-worker-2")


def test_a_long_wait_in_up_says_what_it_waits_for(tmp_path, fake_docker, monkeypatch):
    """Without `--wait` compose prints nothing while a service starts: `up` itself says which
    service it waits for, for how long, and the last check's answer."""
    lines: list[str] = []
    backend = ComposeBackend(make_settings(tmp_path), compose_file=COMPOSE_FILE, progress=lines.append)
    ready_at = time.monotonic() + 3.5
    monkeypatch.setattr(health, "check_kafka", lambda *_a, **_k: health.Health(time.monotonic() >= ready_at, "no broker yet"))
    for name in ("check_minio", "check_spark", "check_spark_worker"):
        monkeypatch.setattr(health, name, lambda *_a, **_k: health.Health(True, "ok"))
    monkeypatch.setattr(compose_mod, "_check_jupyter", lambda *_a, **_k: health.Health(True, "ok"))
    fake_docker.ps = [FAULTS_HEALTHY]
    backend.up()
    waits = [line for line in lines if line.startswith("[sandbox] waiting for kafka")]
    assert waits and "of at most" in waits[0] and "(last check: no broker yet)" in waits[0], lines
