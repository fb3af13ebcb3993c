"""Ports for a test that needs a sandbox of its own (or a place where nothing listens).

One helper instead of hand-picked offsets: the sandboxes a developer may have running use
fixed offsets (0 the demo, +10000 the test sandbox, +12500 the chapters beside the tests in
`make test`, +15000 the compose lane, +20000 the benches), and two hand-picked ones once landed
on the same ports (4e272d0). ``free_port_offset`` returns an offset none of whose ports is one of theirs, whose every port nothing listens on now,
and whose every port lies outside the kernel's ephemeral range: a port in that range can be
taken as the local end of any outgoing connection between the check and the service's bind
(Kafka once failed with "Address already in use" on 37292 that way).
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

from sandbox.settings import Ports

#: Offsets the project's own sandboxes use.
RESERVED = (0, 10_000, 12_500, 15_000, 20_000)
#: Where Linux keeps the range it draws outgoing connections' local ports from.
EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
#: Linux's default, for a machine without that file.
DEFAULT_EPHEMERAL = (32_768, 60_999)
#: The driver UI's port and the next ``spark.port.maxRetries`` (16, Spark's default) it may try.
DRIVER_UI_TRIES = 17


def sandbox_ports(offset: int, workers: int = 2) -> list[int]:
    """Every host port a sandbox at ``offset`` listens on, the driver UI's retries included."""
    p = Ports().shifted(offset)
    return [
        p.kafka,
        p.kafka_controller,
        p.minio,
        p.minio_console,
        p.spark_master,
        p.spark_master_ui,
        p.jupyter,
        *(p.worker_ui(n) for n in range(1, workers + 1)),
        *range(p.spark_driver_ui, p.spark_driver_ui + DRIVER_UI_TRIES),
    ]


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    try:
        low, high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL
    return low, high


def candidate_offsets(ephemeral: tuple[int, int], workers: int = 2) -> list[int]:
    """Multiples of 100 whose ports are all ≥ 1024, outside ``ephemeral`` and clear of every
    port of the :data:`RESERVED` sandboxes (with four workers, so a bigger one is clear too)."""
    low, high = ephemeral
    taken = {port for r in RESERVED for port in sandbox_ports(r, workers=4)}
    out = []
    for offset in range(0, 65_536, 100):
        ports = sandbox_ports(offset, workers)
        if min(ports) < 1024 or max(ports) > 65_535:
            continue
        if any(low <= port <= high for port in ports) or taken.intersection(ports):
            continue
        out.append(offset)
    return out


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_offset(*, rng: random.Random | None = None, tries: int = 200, ephemeral: tuple[int, int] | None = None) -> int:
    """An offset from :func:`candidate_offsets` where every port of a two-worker sandbox is free
    now. Drawn at random, so parallel runs rarely meet."""
    rng = rng or random.Random()
    ephemeral = ephemeral or ephemeral_range()
    candidates = candidate_offsets(ephemeral)
    if not candidates:
        raise RuntimeError(
            f"no sandbox port offset keeps every port outside the ephemeral range {ephemeral} "
            f"({EPHEMERAL_RANGE_FILE}); narrow it, e.g. `sysctl net.ipv4.ip_local_port_range='40000 60999'`"
        )
    for _ in range(tries):
        offset = rng.choice(candidates)
        if all(_free(port) for port in sandbox_ports(offset)):
            return offset
    raise RuntimeError(
        f"no free sandbox port offset after {tries} draws among {len(candidates)} "
        f"candidates ({candidates[0]}..{candidates[-1]}): what holds their ports?"
    )
