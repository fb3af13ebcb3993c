"""Both backends satisfy the one :class:`sandbox.services.backend.Sandbox` protocol, signature for
signature, so that chapters, tests and the CLI can drive either without knowing which."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from sandbox import any_service_up
from sandbox.services.backend import Sandbox, ServiceState, ServiceStatus
from sandbox.services.compose import ComposeBackend
from sandbox.services.local import LocalBackend
from sandbox.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = {"up", "down", "reset", "status", "logs", "endpoints", "services", "kill", "pause", "resume", "restart"}


def _backend(kind: str, tmp_path: Path):
    settings = Settings(state_dir=tmp_path / "state", cache_dir=tmp_path / "cache", backend=kind)  # type: ignore[arg-type]
    if kind == "compose":
        return ComposeBackend(settings, compose_file=ROOT / "docker-compose.yml")
    return LocalBackend(settings, progress=lambda _line: None)


def _members() -> set[str]:
    return {n for n, v in vars(Sandbox).items() if callable(v) and not n.startswith("_")}


def test_the_protocol_names_every_operation_the_chapters_use():
    assert _members() == EXPECTED


@pytest.mark.parametrize("kind", ["local", "compose"])
def test_the_backend_satisfies_the_sandbox_protocol(kind, tmp_path):
    backend = _backend(kind, tmp_path)
    assert isinstance(backend, Sandbox)
    assert backend.kind == kind
    for name in _members():
        want = inspect.signature(getattr(Sandbox, name))
        got = inspect.signature(getattr(type(backend), name))
        assert list(got.parameters) == list(want.parameters), name
        for param_name, param in want.parameters.items():
            mine = got.parameters[param_name]
            assert mine.kind == param.kind, (name, param_name)
            assert mine.default == param.default, (name, param_name)


class _Statuses:
    def __init__(self, *states: ServiceState):
        self.states = states

    def status(self) -> list[ServiceStatus]:
        return [ServiceStatus(name=f"s{i}", state=s, endpoint="", ui=None, log="") for i, s in enumerate(self.states)]


@pytest.mark.parametrize(
    ("states", "up"),
    [
        ((ServiceState.STOPPED, ServiceState.STOPPED), False),
        ((), False),
        ((ServiceState.STOPPED, ServiceState.UNHEALTHY), True),  # a half-finished start still needs a down
        ((ServiceState.PAUSED, ServiceState.STOPPED), True),
        ((ServiceState.RUNNING,), True),
    ],
)
def test_a_sandbox_is_up_while_any_service_is_not_stopped(states, up):
    assert any_service_up(_Statuses(*states)) is up  # type: ignore[arg-type]
