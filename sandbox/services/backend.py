"""The one protocol every way of running the sandbox implements.

``LocalBackend`` (plain processes) and ``ComposeBackend`` (Docker Compose) both satisfy
:class:`Sandbox`; ``tests/sandbox/test_backend_protocol.py`` checks that they do.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Protocol, runtime_checkable

from sandbox.settings import BackendKind, Endpoints, Settings


class ServiceState(StrEnum):
    """What ``status`` can say about one service."""

    RUNNING = "running"  # process alive and health check passed
    UNHEALTHY = "unhealthy"  # process alive, health check failed
    PAUSED = "paused"  # stopped with SIGSTOP / docker compose pause
    STOPPED = "stopped"  # not running (never started, killed, or exited)


@dataclass(frozen=True, kw_only=True)
class ServiceStatus:
    name: str
    state: ServiceState
    endpoint: str
    ui: str | None
    log: str  # a file path (local) or the command that shows the log (compose)
    pid: int | None = None
    detail: str = ""


#: Services every backend runs, in start order.
CORE_SERVICES: tuple[str, ...] = ("kafka", "minio", "spark-master", "spark-worker-1", "spark-worker-2")


@runtime_checkable
class Sandbox(Protocol):
    """A running (or stoppable) set of Kafka, MinIO and a Spark standalone cluster."""

    kind: BackendKind
    settings: Settings

    def up(self) -> None:
        """Start every service that is not running and wait until all are healthy. Idempotent."""

    def down(self) -> None:
        """Stop every service; no sandbox process is left. Data stays (see ``reset``)."""

    def reset(self) -> None:
        """``down`` and delete all data (topics, objects, checkpoints); caches stay."""

    def status(self) -> list[ServiceStatus]:
        """One entry per service, in start order."""

    def logs(self, service: str, lines: int = 50) -> str:
        """The last ``lines`` lines of one service's log."""

    def endpoints(self) -> Endpoints:
        """Where the services answer, from this machine."""

    def services(self) -> list[str]:
        """Names accepted by the fault actions below."""

    def kill(self, service: str) -> None:
        """SIGKILL the service: no shutdown hook runs (a crashed node)."""

    def pause(self, service: str) -> None:
        """Freeze the service (SIGSTOP): connections stay open but nothing answers."""

    def resume(self, service: str) -> None:
        """Undo ``pause``."""

    def restart(self, service: str) -> None:
        """Stop the service (if running) and start it again; returns once it is healthy."""


def log_tail(path: Path, lines: int) -> str:
    """The last ``lines`` lines of a text file ('' if it does not exist)."""
    try:
        with path.open("rb") as fh:
            fh.seek(0, 2)
            size = fh.tell()
            fh.seek(max(0, size - 256 * 1024))
            data = fh.read().decode("utf-8", "replace")
    except FileNotFoundError:
        return ""
    return "\n".join(data.splitlines()[-lines:])


def format_status(statuses: list[ServiceStatus]) -> str:
    """The status table ``python -m sandbox status`` prints (service, state, endpoint, UI,
    log), followed by the detail of every service that is not running."""
    rows = [("SERVICE", "STATE", "ENDPOINT", "UI", "LOG")] + [(s.name, s.state, s.endpoint, s.ui or "-", s.log) for s in statuses]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    lines += [f"  {s.name}: {s.detail}" for s in statuses if s.state != "running" and s.detail]
    return "\n".join(lines)
