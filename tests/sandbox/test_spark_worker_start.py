"""docker/spark_worker_start.py: a compose worker's JVM starts once the master says ALIVE, and
starts anyway (with a line saying so) when the master never answers. Against a real HTTP
server standing in for the master's JSON status, and the script run as Docker runs it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "docker" / "spark_worker_start.py"


class _Master:
    """Answers /json/ with STANDBY for the first ``standby_answers`` requests, then ALIVE."""

    def __init__(self, standby_answers: int) -> None:
        self.answers: list[str] = []
        master = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                status = "STANDBY" if len(master.answers) < standby_answers else "ALIVE"
                master.answers.append(status)
                body = json.dumps({"status": status, "workers": []}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def master():
    made: list[_Master] = []
    yield lambda standby_answers: made.append(_Master(standby_answers)) or made[-1]
    for m in made:
        m.close()


def _run(url: str, wait_s: float) -> subprocess.CompletedProcess:
    env = dict(os.environ, OSL_SPARK_MASTER_UI_INTERNAL=url, OSL_WORKER_WAIT_S=str(wait_s))
    command = [sys.executable, "-c", "print('the worker runs')"]
    return subprocess.run([sys.executable, str(SCRIPT), *command], capture_output=True, text=True, env=env, timeout=60)


def test_the_worker_starts_only_after_the_master_says_alive(master):
    m = master(3)
    proc = _run(m.url, wait_s=30)
    assert proc.returncode == 0, proc.stderr
    assert m.answers == ["STANDBY", "STANDBY", "STANDBY", "ALIVE"]
    said, ran = proc.stdout.splitlines()
    assert f"the master at {m.url} is ALIVE" in said and ran == "the worker runs"


def test_a_master_that_never_answers_delays_the_worker_only_up_to_the_bound():
    proc = _run("http://127.0.0.1:9", wait_s=1)  # the discard port: nothing listens
    assert proc.returncode == 0, proc.stderr
    said, ran = proc.stdout.splitlines()
    assert "did not say ALIVE within 1s; starting the worker anyway" in said and ran == "the worker runs"


def test_no_command_is_a_usage_error():
    proc = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "usage: spark_worker_start.py COMMAND" in proc.stderr
