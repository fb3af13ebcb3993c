"""Nothing the sandbox or a driver on it starts listens beyond this machine."""

from __future__ import annotations

import psutil
import pytest

from sandbox.services.local import sandbox_processes

pytestmark = [pytest.mark.integration, pytest.mark.slow]

WILDCARDS = {"0.0.0.0", "::", ""}


def _listening(processes) -> list[tuple[int, str, str, int]]:
    out = []
    for proc in processes:
        try:
            name = proc.name()
            for conn in proc.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN:
                    out.append((proc.pid, name, conn.laddr.ip, conn.laddr.port))
        except psutil.NoSuchProcess:
            continue
    return out


def test_no_sandbox_process_or_driver_listens_on_a_wildcard_address(sandbox, spark):
    assert spark.range(100).count() == 100  # executors up, the driver's servers started
    driver = psutil.Process().children(recursive=True)  # the driver's JVM and its Python workers
    sockets = _listening(sandbox_processes(sandbox.settings) + driver)
    ui_port = int(spark.sparkContext.uiWebUrl.rsplit(":", 1)[1])
    assert any(port == ui_port for _, _, _, port in sockets), f"the driver UI :{ui_port} must be among {sockets}"
    assert any(port == sandbox.settings.ports.kafka for _, _, _, port in sockets), sockets
    wild = [s for s in sockets if s[2] in WILDCARDS]
    assert not wild, f"listening on every interface (pid, process, address, port): {wild}"
