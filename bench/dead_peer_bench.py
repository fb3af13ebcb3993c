"""Dead-peer bench: how long a new TCP connection to a killed container's address takes to fail.

When a Spark worker's container is killed, an executor on the other worker that then opens a
connection to the dead executor (a shuffle fetch) sends its SYN to an address nobody answers. On
the compose network nothing refuses it: the connect waits until the kernel gives up on the
neighbour (``No route to host``) or Spark's ``spark.shuffle.io.connectionCreationTimeout`` ends
it (docs/decisions/0030-shuffle-connection-timeout.md). This bench does what that fetch does,
without Spark: a listener in ``spark-worker-1``, a client in ``spark-worker-2`` that keeps a
connection to it busy (as two executors exchanging shuffle data do), a ``SIGKILL`` of
``spark-worker-1``, then, ``--delay`` seconds later, a new connection to the same address, timed.

    .venv/bin/python bench/dead_peer_bench.py                    # 3 rounds, about 2 minutes
    .venv/bin/python bench/dead_peer_bench.py --rounds 5 --delay 8

It needs the compose stack of ``OSL_STATE_DIR`` / ``OSL_PORT_OFFSET`` running (``python -m sandbox
--backend compose up``), restarts ``spark-worker-1`` after each round, and writes
``bench/results/dead-peer-<run>.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import RESULTS  # noqa: E402  (after sys.path above)

PORT = 9999

LISTENER = f"""
import socket
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", {PORT})); s.listen(8)
held = []
while True:
    held.append(s.accept()[0])
"""

# keeps a connection busy until /tmp/dead-peer-go exists, waits DELAY s, then times a new connect
CLIENT = f"""
import os, socket, sys, time
delay = float(sys.argv[1])
ip = socket.gethostbyname("spark-worker-1")
busy = socket.create_connection((ip, {PORT}), timeout=5)
open("/tmp/dead-peer-connected", "w").close()
while not os.path.exists("/tmp/dead-peer-go"):
    try:
        busy.send(b"x")
    except OSError:
        break
    time.sleep(0.1)
time.sleep(delay)
t = time.monotonic()
try:
    socket.create_connection((ip, {PORT}), timeout=300)
    outcome = "connected"
except OSError as exc:
    outcome = type(exc).__name__ + ": " + (exc.strerror or str(exc))
print(f"result {{time.monotonic() - t:.1f}} {{outcome}}", flush=True)
"""


BOUND = f"import socket; socket.create_connection(('127.0.0.1', {PORT}), timeout=1)"


def wait_until(cond, what: str, timeout_s: float = 30.0) -> None:
    """``sandbox.checks.health.wait_for`` with the bench's ending: past ``timeout_s``, exit naming ``what``."""
    from sandbox.checks.health import wait_for

    try:
        wait_for(cond, timeout_s=timeout_s, what=what, interval_s=0.2)
    except TimeoutError as exc:
        raise SystemExit(f"error: {exc}") from None


def one_round(sb, delay: float) -> dict:
    """One kill of spark-worker-1 and the timed connect from spark-worker-2."""
    sb.run_in("spark-worker-1", ["bash", "-c", f"nohup python3 -c '{LISTENER}' >/dev/null 2>&1 &"], capture=True, timeout_s=30)
    sb.run_in("spark-worker-2", ["rm", "-f", "/tmp/dead-peer-go", "/tmp/dead-peer-connected"], capture=True, timeout_s=30)
    wait_until(
        lambda: sb.run_in("spark-worker-1", ["python3", "-c", BOUND], capture=True, timeout_s=30).returncode == 0, "the listener"
    )
    out: dict = {}

    def client() -> None:
        out["proc"] = sb.run_in("spark-worker-2", ["python3", "-c", CLIENT, str(delay)], capture=True, timeout_s=400)

    thread = threading.Thread(target=client)
    thread.start()
    wait_until(
        lambda: sb.run_in("spark-worker-2", ["test", "-e", "/tmp/dead-peer-connected"], capture=True).returncode == 0,
        "the client",
    )
    sb.kill("spark-worker-1")
    sb.run_in("spark-worker-2", ["touch", "/tmp/dead-peer-go"], capture=True, timeout_s=30)
    thread.join(420)
    proc = out.get("proc")
    line = next((x for x in proc.stdout.splitlines() if x.startswith("result ")), None) if proc else None
    sb.restart("spark-worker-1")
    if line is None:
        said = f"{proc.stdout[-500:]} {proc.stderr[-500:]}" if proc else "nothing within 400 s"
        raise SystemExit(f"error: the client in spark-worker-2 printed no result: {said}")
    _, seconds, outcome = line.split(" ", 2)
    return {"delay_s": delay, "connect_s": float(seconds), "outcome": outcome}


def main(argv: list[str] | None = None) -> int:
    from sandbox import Settings
    from sandbox.errors import SandboxError
    from sandbox.services.compose import ComposeBackend

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--delay", type=float, default=3.0, help="seconds between the kill and the new connection")
    args = parser.parse_args(argv)
    sb = ComposeBackend(Settings.from_env(backend="compose"))
    try:
        down = [s.name for s in sb.status() if s.name.startswith("spark-worker") and str(s.state) != "running"]
    except SandboxError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if down:
        print(
            f"error: {', '.join(down)} not running; start the stack with `python -m sandbox --backend compose up`",
            file=sys.stderr,
        )
        return 2
    rows = []
    for i in range(args.rounds):
        try:
            row = one_round(sb, args.delay)
        except SandboxError as exc:
            print(f"error: round {i + 1}: {exc}", file=sys.stderr)
            return 2
        rows.append(row)
        print(
            f"round {i + 1}: connect {args.delay:g} s after the kill ended after {row['connect_s']} s: {row['outcome']}",
            flush=True,
        )
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"dead-peer-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}-{uuid.uuid4().hex[:6]}.json"
    out.write_text(json.dumps({"rounds": rows}, indent=2))
    print(f"results: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
