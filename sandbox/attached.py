"""The sandbox as seen from inside its own compose network (the ``jupyter`` container).

A chapter opened in JupyterLab runs in a container of the stack it talks to: there is no docker
CLI and nothing to start, only services to find. ``AttachedSandbox`` satisfies the
:class:`~sandbox.backend.Sandbox` protocol by checking the running services over the compose
network (addresses from the ``OSL_*`` variables docker-compose.yml sets) and by refusing, with the
command to run on the host, every action that would start, stop or break a container.
``endpoints()`` keeps the in-network addresses the job needs (``kafka:19092``) and the links a
browser on the host opens (``http://127.0.0.1:<published port>``).
"""

from __future__ import annotations

from collections.abc import Callable

from sandbox import health
from sandbox.artifacts import Progress, say
from sandbox.backend import CORE_SERVICES, ServiceState, ServiceStatus
from sandbox.compose import service_addresses, service_probe
from sandbox.errors import NotRunningError, SandboxError, UnknownServiceError
from sandbox.settings import BackendKind, Endpoints, Settings

__all__ = ["AttachedSandbox", "HostOnlyActionError"]


class HostOnlyActionError(SandboxError):
    """An action that changes containers was asked for from inside one."""

    def __init__(self, action: str, command: str) -> None:
        self.action, self.command = action, command
        super().__init__(
            f"{action} is not possible from inside the compose network (this is a container of the "
            f"stack, with no Docker access); run it on your machine: `{command}`"
        )


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
            try:
                result = health.wait_for(self._probe(name), timeout_s=self.settings.start_timeout_s, what=name)
            except TimeoutError as exc:
                raise NotRunningError(
                    f"{name} does not answer from inside the compose network ({exc}); start or repair "
                    f"the stack on your machine: `python -m sandbox up`"
                ) from None
            self._progress(f"[attached] {name}: {result.detail}")

    def status(self) -> list[ServiceStatus]:
        out = []
        for name in self.services():
            result = self._probe(name)()
            endpoint, ui = self._addresses(name)
            out.append(
                ServiceStatus(
                    name=name, state=ServiceState.RUNNING if result.ok else ServiceState.UNHEALTHY,
                    endpoint=endpoint, ui=ui, log=f"docker compose logs {name} (on your machine)",
                    detail=result.detail,
                )  # fmt: skip
            )
        return out

    def logs(self, service: str, lines: int = 50) -> str:
        self._known(service)
        raise HostOnlyActionError(f"reading {service}'s log", f"python -m sandbox logs {service} -n {lines}")

    def down(self) -> None:
        raise HostOnlyActionError("stopping the stack", "python -m sandbox down")

    def reset(self) -> None:
        raise HostOnlyActionError("deleting the stack's data", "python -m sandbox reset --yes")

    def kill(self, service: str) -> None:
        self._host_only("kill", service)

    def pause(self, service: str) -> None:
        self._host_only("pause", service)

    def resume(self, service: str) -> None:
        self._host_only("resume", service)

    def restart(self, service: str) -> None:
        self._host_only("restart", service)

    # ------------------------------------------------------------------------- internals
    def _host_only(self, action: str, service: str) -> None:
        self._known(service)
        raise HostOnlyActionError(f"{action} {service}", f"python -m sandbox {action} {service}")

    def _known(self, service: str) -> None:
        if service not in self.services():
            raise UnknownServiceError(service, self.services())

    def _addresses(self, service: str) -> tuple[str, str | None]:
        return service_addresses(self.settings, service)

    def _probe(self, service: str) -> Callable[[], health.Health]:
        self._known(service)
        return service_probe(self.settings, service)
