"""Container healthchecks that do real work (stdlib only: it also runs in the MinIO image).

    python healthcheck.py kafka [--port 19092]
    python healthcheck.py minio [--port 9000]
    python healthcheck.py spark-master [--port 8080] [--min-workers 1]
    python healthcheck.py spark-worker --port 8081
    python healthcheck.py jupyter [--port 8888]
    python healthcheck.py faults [--port 8099]

Exit 0 when healthy; otherwise exit 1 with one line saying why (Docker keeps it in
``docker inspect``'s health log, which ``docker compose ps`` summarises).
"""

from __future__ import annotations

import argparse
import json
import socket
import struct
import sys
import urllib.error
import urllib.request

TIMEOUT_S = 4.0


def _get(port: int, path: str) -> bytes:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=TIMEOUT_S) as resp:
        if resp.status != 200:
            raise RuntimeError(f"GET {path} answered {resp.status}")
        return resp.read()


def kafka(port: int) -> str:
    """A Metadata request (v4, which Kafka 4 still serves) answered with a broker and a controller.

    Raw protocol instead of kafka-topics.sh: no JVM start (seconds of CPU) every interval."""
    client = b"osl-health"
    # header v1: api_key 3 (Metadata), version 4, correlation id, client id; body: all topics
    # (null array), no auto-creation
    body = struct.pack(">hhih", 3, 4, 7, len(client)) + client + struct.pack(">ib", -1, 0)
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT_S) as sock:
        sock.sendall(struct.pack(">i", len(body)) + body)
        size = struct.unpack(">i", _recv(sock, 4))[0]
        data = _recv(sock, size)
    correlation, _throttle, brokers = struct.unpack_from(">iii", data, 0)
    if correlation != 7:
        raise RuntimeError(f"answer to another request (correlation id {correlation})")
    pos = 12
    for _ in range(brokers):
        pos += 4  # node id
        (host_len,) = struct.unpack_from(">h", data, pos)
        pos += 2 + host_len + 4  # host, port
        (rack_len,) = struct.unpack_from(">h", data, pos)
        pos += 2 + max(rack_len, 0)
    (cluster_len,) = struct.unpack_from(">h", data, pos)
    pos += 2 + max(cluster_len, 0)
    (controller,) = struct.unpack_from(">i", data, pos)
    if brokers < 1 or controller < 0:
        raise RuntimeError(f"metadata lists {brokers} broker(s), controller {controller}")
    return f"{brokers} broker(s), controller {controller}"


def _recv(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise RuntimeError("connection closed mid-answer")
        data += chunk
    return data


def minio(port: int) -> str:
    _get(port, "/minio/health/ready")
    return "ready"


def spark_master(port: int, min_workers: int) -> str:
    status = json.loads(_get(port, "/json/"))
    if status.get("status") != "ALIVE":
        raise RuntimeError(f"master status is {status.get('status')!r}")
    alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
    if len(alive) < min_workers:
        raise RuntimeError(f"{len(alive)} ALIVE worker(s), need {min_workers}")
    return f"ALIVE with {len(alive)} worker(s)"


def spark_worker(port: int) -> str:
    state = json.loads(_get(port, "/json/"))
    # The worker reports its master's URL only once the master accepted its registration.
    if not state.get("masterurl"):
        raise RuntimeError("UI answers but the worker is not registered with a master yet")
    return f"registered with {state['masterurl']} ({state.get('cores')} cores)"


def jupyter(port: int) -> str:
    version = json.loads(_get(port, "/api")).get("version")
    return f"Jupyter server {version}"


def faults(port: int) -> str:
    # /health pings the Docker engine through the socket the service holds
    project = json.loads(_get(port, "/health")).get("project")
    return f"fault service of compose project {project}, Docker engine answers"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["kafka", "minio", "spark-master", "spark-worker", "jupyter", "faults"])
    parser.add_argument("--port", type=int)
    parser.add_argument("--min-workers", type=int, default=1)
    args = parser.parse_args(argv)
    default_port = {"kafka": 19092, "minio": 9000, "spark-master": 8080, "spark-worker": 8081, "jupyter": 8888, "faults": 8099}
    port = args.port or default_port[args.role]
    try:
        if args.role == "kafka":
            detail = kafka(port)
        elif args.role == "minio":
            detail = minio(port)
        elif args.role == "spark-master":
            detail = spark_master(port, args.min_workers)
        elif args.role == "spark-worker":
            detail = spark_worker(port)
        elif args.role == "faults":
            detail = faults(port)
        else:
            detail = jupyter(port)
    except (urllib.error.URLError, OSError, ValueError, RuntimeError, struct.error) as exc:
        print(f"{args.role} on port {port}: unhealthy: {exc}")
        return 1
    print(f"{args.role} on port {port}: {detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
