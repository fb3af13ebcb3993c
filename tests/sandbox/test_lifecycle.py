"""A second, short-lived sandbox: idempotent up, no stray process after down, and the guard
against two sandboxes on the same ports."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sandbox.errors import AnotherSandboxRunningError
from sandbox.local import LocalBackend, sandbox_processes
from sandbox.settings import Ports
from tests.ports import free_port_offset

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_up_is_idempotent_down_leaves_nothing_and_a_second_sandbox_is_refused(tmp_path, sandbox_settings):
    settings = replace(sandbox_settings, state_dir=tmp_path / "one", ports=Ports().shifted(free_port_offset()), spark_workers=1)
    first = LocalBackend(settings, progress=lambda _m: None)
    try:
        first.up()
        pids = {s.name: s.pid for s in first.status()}
        assert all(pids.values())
        first.up()
        assert {s.name: s.pid for s in first.status()} == pids

        other = LocalBackend(replace(settings, state_dir=tmp_path / "two"), progress=lambda _m: None)
        with pytest.raises(AnotherSandboxRunningError, match=str(tmp_path / "one")):
            other.up()
        assert not sandbox_processes(other.settings), "the refused sandbox started nothing"
    finally:
        first.down()
    assert sandbox_processes(settings) == []
    assert all(s.state == "stopped" for s in first.status())
