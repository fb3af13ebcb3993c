"""The fault service: how a notebook inside the compose stack breaks the stack's own services.

A chapter opened in JupyterLab runs in the ``jupyter`` container, which has no Docker access and
never gets it. This small HTTP server runs in a container of its own (``faults`` in
docker-compose.yml), the only one that holds the Docker socket, and offers exactly this:

    GET  /health                      the Docker engine answers; this compose project's name
    GET  /services                    state of each allowed service: running, paused, exited, missing
    POST /services/<service>/kill     SIGKILL, as ``docker compose kill --signal SIGKILL``
    POST /services/<service>/pause    freeze (``docker compose pause``)
    POST /services/<service>/resume   unfreeze
    POST /services/<service>/restart  stop (or unfreeze) and start again; returns once started
    GET  /services/<service>/logs?lines=N   the last N lines of its log (read only)

It acts only on containers that carry this compose project's label and whose service is on
``ALLOWED`` (the five services the workbook breaks: not ``jupyter``, not itself, nothing of
another project, nothing outside Compose); anything else is refused with 403 and a sentence.
It publishes no port: only containers on the stack's network reach it. docs/fault-service.md
says why that is safe enough for a local sandbox and how to run the stack without it.

Stdlib only: it speaks the Docker Engine API over the Unix socket.

    python -m sandbox.services.fault_service [--port 8099] [--socket /var/run/docker.sock]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

#: The services a notebook may break, and nothing else (sandbox.services.backend.CORE_SERVICES; a unit
#: test keeps the two equal without this module importing the sandbox's settings).
ALLOWED: tuple[str, ...] = ("kafka", "minio", "spark-master", "spark-worker-1", "spark-worker-2")
ACTIONS: tuple[str, ...] = ("kill", "pause", "resume", "restart")
PORT = 8099
PROJECT_LABEL = "com.docker.compose.project"
SERVICE_LABEL = "com.docker.compose.service"
ONEOFF_LABEL = "com.docker.compose.oneoff"


class Refused(Exception):
    """A request the service will not carry out: (HTTP status, one sentence)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path: str, timeout: float) -> None:
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(self.timeout)
        self.sock.connect(self._path)


class Docker:
    """The few Docker Engine API calls the service needs, over the engine's Unix socket."""

    def __init__(self, socket_path: str = "/var/run/docker.sock", timeout_s: float = 60.0) -> None:
        self.socket_path, self.timeout_s = socket_path, timeout_s

    def call(self, method: str, path: str, query: dict[str, str] | None = None) -> tuple[int, bytes]:
        url = path + ("?" + urllib.parse.urlencode(query) if query else "")
        conn = _UnixConnection(self.socket_path, self.timeout_s)
        try:
            conn.request(method, url)
            reply = conn.getresponse()
            return reply.status, reply.read()
        except OSError as exc:
            raise Refused(502, f"the Docker engine does not answer at {self.socket_path} ({exc})") from None
        finally:
            conn.close()

    def json(self, method: str, path: str, query: dict[str, str] | None = None) -> object:
        status, body = self.call(method, path, query)
        if status >= 300:
            raise Refused(502, f"Docker answered {status} to {method} {path}: {_docker_message(body)}")
        return json.loads(body) if body else None

    def containers(self, project: str, service: str | None = None) -> list[dict]:
        labels = [f"{PROJECT_LABEL}={project}"] + ([f"{SERVICE_LABEL}={service}"] if service else [])
        found = self.json("GET", "/containers/json", {"all": "1", "filters": json.dumps({"label": labels})})
        # the filter is the engine's; check the labels again here, where the promise is made
        return [
            c
            for c in found  # type: ignore[union-attr]
            if c.get("Labels", {}).get(PROJECT_LABEL) == project
            and (service is None or c.get("Labels", {}).get(SERVICE_LABEL) == service)
            and c.get("Labels", {}).get(ONEOFF_LABEL, "False") != "True"
        ]


def _docker_message(body: bytes) -> str:
    try:
        return str(json.loads(body).get("message", body[:200]))
    except ValueError:
        return body[:200].decode(errors="replace")


def own_project(docker: Docker, hostname: str | None = None) -> str:
    """This container's compose project, from its own labels (its hostname is its id)."""
    me = hostname or socket.gethostname()
    info = docker.json("GET", f"/containers/{me}/json")
    project = (info.get("Config", {}).get("Labels") or {}).get(PROJECT_LABEL)  # type: ignore[union-attr]
    if not project:
        raise SystemExit(f"fault service: container {me} has no {PROJECT_LABEL} label; run it with docker compose")
    return project


class Faults:
    """The service's rules, apart from HTTP: every action checks the allow-list and the project."""

    def __init__(self, docker: Docker, project: str) -> None:
        self.docker, self.project = docker, project

    def container(self, service: str) -> dict:
        if service not in ALLOWED:
            raise Refused(
                403,
                f"refused: {service!r} is not a service the fault service may touch; it acts only on "
                f"{', '.join(ALLOWED)} of compose project {self.project!r}",
            )
        found = self.docker.containers(self.project, service)
        if not found:
            raise Refused(
                404,
                f"{service} has no container in compose project {self.project!r}: start the stack with `python -m sandbox up`",
            )
        return found[0]

    def states(self) -> dict[str, str]:
        out = {}
        for service in ALLOWED:
            found = self.docker.containers(self.project, service)
            out[service] = found[0]["State"] if found else "missing"
        return out

    def act(self, service: str, action: str) -> str:
        if action not in ACTIONS:
            raise Refused(404, f"refused: {action!r} is not an action of the fault service ({', '.join(ACTIONS)})")
        box = self.container(service)
        ident, state = box["Id"], box["State"]
        if action in ("kill", "pause", "resume") and state not in ("running", "paused"):
            raise Refused(409, f"{service} is not running ({state}); nothing to {action} (bring it back with restart)")
        if action == "kill":
            self.docker.json("POST", f"/containers/{ident}/kill", {"signal": "SIGKILL"})
        elif action == "pause" and state != "paused":
            self.docker.json("POST", f"/containers/{ident}/pause")
        elif action == "resume" and state == "paused":
            self.docker.json("POST", f"/containers/{ident}/unpause")
        elif action == "restart":
            if state == "paused":
                self.docker.json("POST", f"/containers/{ident}/unpause")
            # stop waits up to 10 s for a clean exit, then kills; start returns once it runs
            self.docker.json("POST", f"/containers/{ident}/restart", {"t": "10"})
        return self.container(service)["State"]

    def logs(self, service: str, lines: int) -> str:
        ident = self.container(service)["Id"]
        status, body = self.docker.call("GET", f"/containers/{ident}/logs", {"stdout": "1", "stderr": "1", "tail": str(lines)})
        if status >= 300:
            raise Refused(502, f"Docker answered {status} to the logs of {service}: {_docker_message(body)}")
        return demultiplex(body)


def demultiplex(body: bytes) -> str:
    """A container's log as Docker streams it without a TTY: 8-byte frame headers, then text."""
    out, pos = [], 0
    while pos + 8 <= len(body) and body[pos] in (0, 1, 2) and body[pos + 1 : pos + 4] == b"\0\0\0":
        size = int.from_bytes(body[pos + 4 : pos + 8], "big")
        out.append(body[pos + 8 : pos + 8 + size])
        pos += 8 + size
    if pos == 0:  # a TTY container's log is plain text
        return body.decode(errors="replace")
    return b"".join(out).decode(errors="replace")


def handler_for(faults: Faults) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        server_version = "osl-faults/1"

        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            url = urllib.parse.urlsplit(self.path)
            parts = [p for p in url.path.split("/") if p]
            try:
                if parts == ["health"]:
                    status, body = faults.docker.call("GET", "/_ping")  # answers "OK", not JSON
                    if status != 200:
                        raise Refused(502, f"the Docker engine answered {status} to a ping: {_docker_message(body)}")
                    self._send(200, {"ok": True, "project": faults.project})
                elif parts == ["services"]:
                    self._send(200, {"project": faults.project, "services": faults.states()})
                elif len(parts) == 3 and parts[0] == "services" and parts[2] == "logs":
                    asked = urllib.parse.parse_qs(url.query).get("lines", ["50"])[0]
                    if not asked.isdigit():
                        raise Refused(400, f"lines={asked!r}: give a whole number of lines")
                    self._send(200, {"service": parts[1], "log": faults.logs(parts[1], max(1, min(int(asked), 10_000)))})
                else:
                    raise Refused(404, f"no such request: GET {url.path}")
            except Refused as exc:
                self._send(exc.status, {"ok": False, "error": str(exc)})

        def do_POST(self) -> None:  # noqa: N802
            parts = [p for p in urllib.parse.urlsplit(self.path).path.split("/") if p]
            try:
                if len(parts) != 3 or parts[0] != "services":
                    raise Refused(404, f"no such request: POST {self.path}; use /services/<service>/<action>")
                state = faults.act(parts[1], parts[2])
                self.log_message("%s %s: now %s", parts[2], parts[1], state)
                self._send(200, {"ok": True, "service": parts[1], "action": parts[2], "state": state})
            except Refused as exc:
                self.log_message("refused %s: %s", self.path, exc)
                self._send(exc.status, {"ok": False, "error": str(exc)})

        def _send(self, status: int, payload: dict) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the stdlib's name)
            print(f"fault service: {format % args}", file=sys.stderr, flush=True)

    return Handler


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m sandbox.services.fault_service", description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=PORT)
    parser.add_argument("--socket", default=os.environ.get("OSL_DOCKER_SOCKET_IN_CONTAINER", "/var/run/docker.sock"))
    args = parser.parse_args(argv)
    if not os.path.exists(args.socket):
        raise SystemExit(
            f"fault service: no Docker socket at {args.socket}; docker-compose.yml mounts the engine's "
            f"socket there (OSL_DOCKER_SOCKET on the host names another one)"
        )
    docker = Docker(args.socket)
    faults = Faults(docker, own_project(docker))
    server = ThreadingHTTPServer(("0.0.0.0", args.port), handler_for(faults))
    print(
        f"fault service: compose project {faults.project!r}, services {', '.join(ALLOWED)}, on port {args.port}",
        file=sys.stderr,
        flush=True,
    )
    server.serve_forever()


if __name__ == "__main__":
    main()
