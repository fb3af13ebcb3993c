"""The fault service's rules against a stand-in Docker engine (a Unix-socket HTTP server that
records the calls); the compose lane runs the real one (tests/compose/test_fault_service.py)."""

from __future__ import annotations

import json
import socketserver
import threading
import urllib.error
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from sandbox.services import fault_service
from sandbox.services.backend import CORE_SERVICES
from sandbox.services.inside_compose import AttachedSandbox, FaultServiceError, HostOnlyActionError
from sandbox.settings import Settings

PROJECT = "ordered-stream-lab"


def box(ident: str, service: str, state: str = "running", project: str = PROJECT, oneoff: str = "False") -> dict:
    labels = {fault_service.PROJECT_LABEL: project, fault_service.SERVICE_LABEL: service, fault_service.ONEOFF_LABEL: oneoff}
    return {"Id": ident, "State": state, "Labels": labels}


class Engine:
    """What the service sees of Docker: containers, and the calls made to it."""

    def __init__(self, containers: list[dict], *, honour_filters: bool = True) -> None:
        self.containers, self.calls, self.honour_filters = containers, [], honour_filters

    def answer(self, method: str, url: str) -> tuple[int, bytes]:
        parts = urllib.parse.urlsplit(url)
        query = urllib.parse.parse_qs(parts.query)
        self.calls.append((method, parts.path, {k: v[0] for k, v in query.items()}))
        if parts.path == "/_ping":
            return 200, b"OK"
        if parts.path == "/containers/json":
            wanted = json.loads(query["filters"][0])["label"] if self.honour_filters else []
            found = [c for c in self.containers if all(w in {f"{k}={v}" for k, v in c["Labels"].items()} for w in wanted)]
            return 200, json.dumps(found).encode()
        ident, action = parts.path.split("/")[2], parts.path.split("/")[-1]
        target = next((c for c in self.containers if c["Id"] == ident or c["Id"].startswith(ident)), None)
        if target is None:
            return 404, json.dumps({"message": f"No such container: {ident}"}).encode()
        if action == "json":
            return 200, json.dumps({"Config": {"Labels": target["Labels"]}}).encode()
        if action == "logs":
            text = b"line one\n"
            return 200, b"\x02\0\0\0" + len(text).to_bytes(4, "big") + text
        target["State"] = {"kill": "exited", "pause": "paused", "unpause": "running", "restart": "running"}[action]
        return 204, b""


@pytest.fixture
def engine(tmp_path):
    state = Engine(
        [
            box("c-kafka", "kafka"),
            box("c-w1", "spark-worker-1"),
            box("c-jup", "jupyter"),
            box("c-other", "spark-worker-1", project="someone-else"),
            box("c-run", "kafka", oneoff="True"),
        ]
    )
    sock = str(tmp_path / "docker.sock")

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            status, body = state.answer(self.command, self.path)
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _any  # noqa: N815

        def log_message(self, *_a) -> None:
            pass

    server = socketserver.ThreadingUnixStreamServer(sock, Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.socket = sock
    yield state
    server.shutdown()
    server.server_close()


@pytest.fixture
def service(engine):
    """The fault service on loopback, on the stand-in engine; its URL."""
    faults = fault_service.Faults(fault_service.Docker(engine.socket, timeout_s=5), PROJECT)
    server = ThreadingHTTPServer(("127.0.0.1", 0), fault_service.handler_for(faults))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_the_allow_list_is_the_sandbox_s_core_services():
    assert fault_service.ALLOWED == CORE_SERVICES
    assert "jupyter" not in fault_service.ALLOWED and "faults" not in fault_service.ALLOWED


def test_own_project_comes_from_the_container_s_own_labels(engine):
    assert fault_service.own_project(fault_service.Docker(engine.socket), hostname="c-kafka") == PROJECT


@pytest.mark.parametrize(
    ("action", "path", "query"),
    [
        ("kill", "/containers/c-w1/kill", {"signal": "SIGKILL"}),
        ("pause", "/containers/c-w1/pause", {}),
        ("restart", "/containers/c-w1/restart", {"t": "10"}),
    ],
)
def test_each_action_reaches_only_this_project_s_container(engine, action, path, query):
    faults = fault_service.Faults(fault_service.Docker(engine.socket), PROJECT)
    faults.act("spark-worker-1", action)
    posted = [(p, q) for m, p, q in engine.calls if m == "POST"]
    assert posted == [(path, query)]
    assert next(c for c in engine.containers if c["Id"] == "c-other")["State"] == "running"


def test_a_container_of_another_project_is_never_chosen_even_when_the_engine_s_filter_lets_it_through(engine):
    engine.honour_filters = False  # the engine answers every container; the service checks labels itself
    engine.containers.insert(0, box("c-impostor", "spark-worker-1", project="someone-else"))
    faults = fault_service.Faults(fault_service.Docker(engine.socket), PROJECT)
    faults.act("spark-worker-1", "kill")
    assert [p for m, p, _ in engine.calls if m == "POST"] == ["/containers/c-w1/kill"]
    assert fault_service.Faults(fault_service.Docker(engine.socket), PROJECT).states()["kafka"] == "running"  # not the one-off


def test_a_paused_service_is_unfrozen_before_its_restart_and_kill_of_a_stopped_one_is_refused(engine):
    faults = fault_service.Faults(fault_service.Docker(engine.socket), PROJECT)
    faults.act("kafka", "pause")
    faults.act("kafka", "restart")
    assert [p for m, p, _ in engine.calls if m == "POST"][-2:] == ["/containers/c-kafka/unpause", "/containers/c-kafka/restart"]
    faults.act("kafka", "kill")
    with pytest.raises(fault_service.Refused, match="kafka is not running") as refused:
        faults.act("kafka", "kill")
    assert refused.value.status == 409


def test_logs_are_demultiplexed_from_docker_s_frames():
    frames = b"".join(b"\x01\0\0\0" + len(t).to_bytes(4, "big") + t for t in (b"out 1\n", b"out 2\n"))
    assert fault_service.demultiplex(frames) == "out 1\nout 2\n"
    assert fault_service.demultiplex(b"plain text\n") == "plain text\n"


def test_over_http_anything_outside_the_allow_list_is_refused_with_a_sentence(service, engine):
    for path in ("/services/jupyter/kill", "/services/faults/kill", "/services/c-other/kill"):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(urllib.request.Request(service + path, method="POST", data=b""), timeout=5)
        assert refused.value.code == 403
        assert "is not a service the fault service may touch" in json.load(refused.value)["error"]
    with pytest.raises(urllib.error.HTTPError) as unknown:
        urllib.request.urlopen(urllib.request.Request(service + "/services/kafka/exec", method="POST", data=b""), timeout=5)
    assert unknown.value.code == 404
    assert not [p for m, p, _ in engine.calls if m == "POST"]  # nothing reached the engine


def test_health_pings_the_engine(service):
    with urllib.request.urlopen(service + "/health", timeout=5) as reply:
        assert json.load(reply) == {"ok": True, "project": PROJECT}
    with pytest.raises(urllib.error.HTTPError) as bad:
        urllib.request.urlopen(service + "/services/kafka/logs?lines=many", timeout=5)
    assert bad.value.code == 400 and "whole number" in json.load(bad.value)["error"]


def test_the_attached_sandbox_breaks_services_through_the_service(service, engine):
    sb = AttachedSandbox(Settings.from_env({}, faults_url=service), progress=lambda _m: None)
    sb.kill("spark-worker-1")
    sb.pause("kafka")
    assert [p for m, p, _ in engine.calls if m == "POST"] == ["/containers/c-w1/kill", "/containers/c-kafka/pause"]
    assert sb.logs("kafka", lines=5) == "line one\n"
    assert sb._container_states()["spark-worker-1"] == "exited"
    # a refusal from the service is an error with its sentence, not a traceback from urllib
    engine.containers = [c for c in engine.containers if c["Id"] != "c-kafka"]
    with pytest.raises(FaultServiceError, match="kafka has no container in compose project"):
        sb.kill("kafka")


def test_without_a_fault_service_the_attached_sandbox_names_the_host_command():
    sb = AttachedSandbox(Settings.from_env({}), progress=lambda _m: None)
    with pytest.raises(HostOnlyActionError, match=r"without its fault service.*`python -m sandbox kill spark-worker-2`"):
        sb.kill("spark-worker-2")
    down = AttachedSandbox(Settings.from_env({}, faults_url="http://127.0.0.1:9"), progress=lambda _m: None)
    with pytest.raises(HostOnlyActionError, match=r"does not answer at http://127.0.0.1:9.*`python -m sandbox pause minio`"):
        down.pause("minio")
