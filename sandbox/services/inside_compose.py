"""The sandbox as seen from inside its own compose network (the ``jupyter`` container).

A chapter opened in JupyterLab runs in a container of the stack it talks to: there is no docker
CLI and nothing to start, only services to find. ``AttachedSandbox`` satisfies the
:class:`~sandbox.services.backend.Sandbox` protocol by checking the running services over the compose
network (addresses from the ``OSL_*`` variables docker-compose.yml sets). Breaking a service
(kill, pause, resume, restart) and reading its log go through the stack's fault service
(:mod:`sandbox.services.fault_service`, the one container that holds the Docker socket); starting,
stopping or deleting the stack is refused with the command to run on the host, and so is every
action when the stack runs without its fault service.
``endpoints()`` keeps the in-network addresses the job needs (``kafka:19092``) and the links a
browser on the host opens (``http://127.0.0.1:<published port>``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable

from sandbox.artifacts import Progress, say
from sandbox.checks import health
from sandbox.errors import NotRunningError, SandboxError, UnknownServiceError
from sandbox.services.backend import CORE_SERVICES, ServiceState, ServiceStatus
from sandbox.services.compose import container_state, service_addresses, service_probe
from sandbox.settings import BackendKind, Endpoints, Settings

__all__ = ["AttachedSandbox", "FaultServiceError", "HostOnlyActionError"]


class HostOnlyActionError(SandboxError):
    """An action that changes containers was asked for from inside one."""

    def __init__(self, action: str, command: str, why: str | None = None) -> None:
        self.action, self.command = action, command
        super().__init__(
            f"{action} is not possible from inside the compose network: "
            f"{why or 'this is a container of the stack, with no Docker access'}. "
            f"Run it on your machine: `{command}`"
        )


class FaultServiceError(SandboxError):
    """The fault service refused an action or failed to carry it out (its sentence says which)."""


_NOT_BACK = "did not pass its check after the fault service brought it back ({exc}); see its log on your machine: `python -m sandbox logs {service}`"


class AttachedSandbox:
    """The running compose stack, reached from one of its containers; starts nothing."""

    kind: BackendKind = "compose"

    def __init__(self, settings: Settings, *, progress: Progress = say, **_ignored: object) -> None:
        self.settings = settings
        self._progress = progress

    def services(self) -> list[str]:
        return list(CORE_SERVICES)

    def endpoints(self) -> Endpoints:
        return self.settings.endpoints()

    def up(self) -> None:
        """Wait (up to the start timeout) until every service passes its check; start nothing."""
        for name in self.services():
            self._wait_healthy(
                name,
                "does not answer from inside the compose network ({exc}); start or repair "
                "the stack on your machine: `python -m sandbox up`",
            )

    def status(self) -> list[ServiceStatus]:
        out = []
        for name in self.services():
            result = self._probe(name)()
            endpoint, ui = self._addresses(name)
            state = ServiceState.RUNNING if result.ok else ServiceState.UNHEALTHY
            if not result.ok and (docker := self._container_states().get(name)) is not None:
                # the fault service, where there is one, tells paused from stopped
                state = container_state(docker) or state
            out.append(
                ServiceStatus(
                    name=name,
                    state=state,
                    endpoint=endpoint,
                    ui=ui,
                    log=f"docker compose logs {name} (on your machine)",
                    detail=result.detail,
                )
            )
        return out

    def logs(self, service: str, lines: int = 50) -> str:
        self._known(service)
        reply = self._ask(
            "GET",
            f"/services/{service}/logs?lines={int(lines)}",
            f"reading {service}'s log",
            f"python -m sandbox logs {service} -n {lines}",
        )
        return reply["log"]

    def down(self) -> None:
        raise HostOnlyActionError("stopping the stack", "python -m sandbox down")

    def reset(self) -> None:
        raise HostOnlyActionError("deleting the stack's data", "python -m sandbox reset --yes")

    def kill(self, service: str) -> None:
        self._act("kill", service)

    def pause(self, service: str) -> None:
        self._act("pause", service)

    def resume(self, service: str) -> None:
        self._act("resume", service)
        self._wait_healthy(service, _NOT_BACK)

    def restart(self, service: str) -> None:
        self._progress(f"[attached] restarting {service} through the fault service")
        self._act("restart", service)
        self._wait_healthy(service, _NOT_BACK)  # as the host's backends: back means healthy, not started

    # ------------------------------------------------------------------------- internals
    def _act(self, action: str, service: str) -> None:
        self._known(service)
        self._ask("POST", f"/services/{service}/{action}", f"{action} {service}", f"python -m sandbox {action} {service}")

    def _ask(self, method: str, path: str, action: str, host_command: str) -> dict:
        """One request to the fault service; without one, the host command (no traceback to read)."""
        base = self.settings.faults_url
        if not base:
            raise HostOnlyActionError(action, host_command, "this stack runs without its fault service (OSL_FAULTS_URL is unset)")
        request = urllib.request.Request(base.rstrip("/") + path, method=method, data=b"" if method == "POST" else None)
        try:
            with urllib.request.urlopen(request, timeout=180) as reply:
                return json.load(reply)
        except urllib.error.HTTPError as exc:
            try:
                said = json.load(exc).get("error", "")
            except ValueError:
                said = ""
            raise FaultServiceError(f"{action}: the fault service answered {exc.code}: {said or exc.reason}") from None
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise HostOnlyActionError(
                action,
                host_command,
                f"the stack's fault service does not answer at {base} ({reason}); "
                "`docker compose up -d faults` on your machine starts it",
            ) from None

    def _container_states(self) -> dict[str, str]:
        """Docker's state of each service's container, from the fault service; {} without one."""
        try:
            return self._ask("GET", "/services", "status", "python -m sandbox status")["services"]
        except SandboxError:
            return {}

    def _wait_healthy(self, service: str, failure: str) -> None:
        """Until ``service`` passes its own check; ``failure`` (a format: {exc}, {service}) after the start timeout."""
        try:
            result = health.wait_for(self._probe(service), timeout_s=self.settings.start_timeout_s, what=service)
        except TimeoutError as exc:
            raise NotRunningError(f"{service} " + failure.format(exc=exc, service=service)) from None
        self._progress(f"[attached] {service}: {result.detail}")

    def _known(self, service: str) -> None:
        if service not in self.services():
            raise UnknownServiceError(service, self.services())

    def _addresses(self, service: str) -> tuple[str, str | None]:
        return service_addresses(self.settings, service)

    def _probe(self, service: str) -> Callable[[], health.Health]:
        self._known(service)
        return service_probe(self.settings, service)
