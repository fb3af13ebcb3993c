"""Start a Spark worker once its master can register it, then become the worker (exec).

    python spark_worker_start.py spark-class org.apache.spark.deploy.worker.Worker ARGS...

Why wait: a worker that reaches the master while the master is still starting (its web UI,
REST server and recovery store come up before it elects itself leader) is answered "standby"
and tries again only after its fixed retry interval, a random 5-15 s that Spark does not let
one set. When the stack starts, the master and both workers start together, so that happened
on most starts and added 5-15 s to every `up`. Here the worker's JVM starts when the master's
JSON status says ALIVE (the master's UI, polled every 0.2 s); after ``OSL_WORKER_WAIT_S``
(default 60 s) without an answer it starts anyway, and registers by its own retries whenever
the master comes. The command then replaces this process, so Docker's signals reach it.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request


def master_alive(url: str, timeout_s: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/json/", timeout=timeout_s) as resp:
            return json.loads(resp.read()).get("status") == "ALIVE"
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_for_master(url: str, wait_s: float, *, interval_s: float = 0.2) -> float | None:
    """Seconds until the master at ``url`` said ALIVE, or None after ``wait_s``."""
    started = time.monotonic()
    while time.monotonic() - started < wait_s:
        if master_alive(url):
            return time.monotonic() - started
        time.sleep(interval_s)
    return None


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: spark_worker_start.py COMMAND [ARGS...]  (the worker's command line)", file=sys.stderr)
        return 2
    url = os.environ.get("OSL_SPARK_MASTER_UI_INTERNAL", "http://spark-master:8080")
    wait_s = float(os.environ.get("OSL_WORKER_WAIT_S", "60"))
    waited = wait_for_master(url, wait_s)
    if waited is None:
        print(
            f"spark_worker_start: the master at {url} did not say ALIVE within {wait_s:.0f}s; "
            "starting the worker anyway (it retries its registration by itself)",
            flush=True,
        )
    else:
        print(f"spark_worker_start: the master at {url} is ALIVE (after {waited:.1f}s); starting the worker", flush=True)
    os.execvp(argv[0], argv)
    return 0  # not reached


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
