"""The sandbox: Kafka, MinIO and a Spark standalone cluster, by Docker Compose or as local processes.

    from sandbox import Settings, running
    with running(Settings.from_env()) as sb:
        print(sb.endpoints().kafka_bootstrap)

``python -m sandbox --help`` lists the commands (up, down, status, logs, reset, kill,
pause, resume, restart, fetch, smoke).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from sandbox.errors import SandboxError
from sandbox.services.backend import Sandbox, ServiceState, ServiceStatus
from sandbox.settings import Endpoints, Settings

__all__ = [
    "Endpoints",
    "Sandbox",
    "SandboxError",
    "ServiceState",
    "ServiceStatus",
    "Settings",
    "any_service_up",
    "open_sandbox",
    "paused",
    "running",
]


def open_sandbox(settings: Settings, **kwargs: object) -> Sandbox:
    """The backend ``settings.backend`` names, not started; inside the compose network
    (``settings.attached``) the running stack it belongs to."""
    if settings.attached:
        from sandbox.services.inside_compose import AttachedSandbox

        return AttachedSandbox(settings, **kwargs)  # type: ignore[arg-type]
    if settings.backend == "compose":
        from sandbox.services.compose import ComposeBackend

        return ComposeBackend(settings, **kwargs)  # type: ignore[arg-type]
    from sandbox.services.local import LocalBackend

    return LocalBackend(settings, **kwargs)  # type: ignore[arg-type]


def any_service_up(sb: Sandbox) -> bool:
    """Whether any of ``sb``'s services is other than stopped: a sandbox partly up (a crashed
    worker, a half-finished start) still holds ports and needs a ``down``."""
    return any(s.state != ServiceState.STOPPED for s in sb.status())


@contextlib.contextmanager
def running(settings: Settings, *, keep: bool = False, **kwargs: object) -> Iterator[Sandbox]:
    """Bring the sandbox up for the block; take it down afterwards unless it was already up
    or ``keep`` is true. A partial start is cleaned up before the error propagates."""
    sb = open_sandbox(settings, **kwargs)
    was_up = all(s.state == ServiceState.RUNNING for s in sb.status())
    try:
        sb.up()
    except BaseException:
        if not was_up:
            sb.down()
        raise
    try:
        yield sb
    finally:
        if not (keep or was_up):
            sb.down()


@contextlib.contextmanager
def paused(sb: Sandbox, service: str) -> Iterator[None]:
    """Freeze ``service`` for the block (SIGSTOP / docker compose pause), then resume it."""
    sb.pause(service)
    try:
        yield
    finally:
        sb.resume(service)
