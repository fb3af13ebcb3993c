"""`make demo` picks compose where it can run, and says in one line when it falls back."""

from __future__ import annotations

from pathlib import Path

import pytest

import demo
from sandbox.services import compose as compose_mod
from sandbox.settings import Settings


def _settings(tmp_path: Path, backend: str) -> Settings:
    return Settings(state_dir=tmp_path, cache_dir=tmp_path, backend=backend)  # type: ignore[arg-type]


def test_docker_without_the_compose_plugin_falls_back_to_local_with_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.delenv("OSL_BACKEND", raising=False)
    monkeypatch.setattr(compose_mod, "compose_unavailable", lambda: "Docker answers but the compose plugin is missing")
    chosen = demo._choose_backend(_settings(tmp_path, "compose"))
    assert chosen.backend == "local"
    out = capsys.readouterr().out.strip().splitlines()
    assert len(out) == 1 and "compose plugin is missing" in out[0] and "local backend" in out[0]


@pytest.mark.parametrize("forced", ["compose", "local"])
def test_osl_backend_forces_either_backend(tmp_path, monkeypatch, capsys, forced):
    monkeypatch.setenv("OSL_BACKEND", forced)
    monkeypatch.setattr(compose_mod, "compose_unavailable", lambda: "no Docker engine answers")
    assert demo._choose_backend(_settings(tmp_path, forced)).backend == forced
    assert capsys.readouterr().out == ""


def test_compose_that_can_run_is_kept(tmp_path, monkeypatch):
    monkeypatch.delenv("OSL_BACKEND", raising=False)
    monkeypatch.setattr(compose_mod, "compose_unavailable", lambda: None)
    assert demo._choose_backend(_settings(tmp_path, "compose")).backend == "compose"
