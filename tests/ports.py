"""Ports for a test that needs a sandbox of its own (or a place where nothing listens).

One helper instead of hand-picked offsets: the sandboxes a developer may have running use
fixed offsets (0 the demo, +10000 the test sandbox, +15000 the compose lane, +20000 the
benches), and two hand-picked ones once landed on the same ports (4e272d0). ``free_port_offset``
returns an offset clear of those bands whose every sandbox port nothing listens on now.
"""

from __future__ import annotations

import random
import socket

from sandbox.settings import Ports

#: Offsets the project's own sandboxes use (each spans its ports plus a margin).
RESERVED = (0, 10_000, 15_000, 20_000)
_MARGIN = 2_000


def sandbox_ports(offset: int, workers: int = 2) -> list[int]:
    p = Ports().shifted(offset)
    return [p.kafka, p.kafka_controller, p.minio, p.minio_console, p.spark_master, p.spark_master_ui,
            p.jupyter, *(p.worker_ui(n) for n in range(1, workers + 1))]  # fmt: skip


def _free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_offset(*, rng: random.Random | None = None, tries: int = 200) -> int:
    """An offset (a multiple of 100 in 21,000..55,000, away from :data:`RESERVED`) where every
    port of a two-worker sandbox is free now. Drawn at random, so parallel runs rarely meet."""
    rng = rng or random.Random()
    for _ in range(tries):
        offset = rng.randrange(21_000, 55_000, 100)
        if any(abs(offset - r) < _MARGIN for r in RESERVED):
            continue
        if all(_free(port) for port in sandbox_ports(offset)):
            return offset
    raise RuntimeError(f"no free sandbox port offset after {tries} draws: what holds the ports 21000-65000?")
