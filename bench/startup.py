"""Start-up benchmark for the local backend.

Reports, in one run:
  * cold: an empty artifact cache (jars resolved and downloaded again; MinIO rebuilt only
    with --include-minio-build, otherwise copied from the warm cache and said so), then
    ``up`` until every service is healthy;
  * warm: the same, with the cache filled and a fresh state directory (storage formatted);
  * restart: ``down`` then ``up`` again on existing data, and a killed broker started again;
and the resident memory of each service once healthy.

    .venv/bin/python bench/startup.py [--include-minio-build] [--port-offset 22000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sandbox import artifacts, versions  # noqa: E402
from sandbox.services.local import LocalBackend  # noqa: E402
from sandbox.settings import Ports, Settings  # noqa: E402


def _quiet(_line: str) -> None:
    pass


def _group_rss_mib(pid: int) -> float:
    total = 0
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pid:
                total += proc.memory_info().rss
        except (ProcessLookupError, psutil.Error):
            continue
    return total / 2**20


def _timed_up(backend: LocalBackend) -> float:
    started = time.monotonic()
    backend.up()
    return time.monotonic() - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--include-minio-build", action="store_true", help="rebuild MinIO in the cold run (minutes)")
    parser.add_argument(
        "--port-offset",
        type=int,
        default=22000,
        help="where the cold sandbox's ports go; keep them below the ephemeral range (default 22000)",
    )
    args = parser.parse_args()

    # up's one-time class-data warm-up (sandbox/jvm/class_data_sharing.py) is not part of what
    # these rows time
    warm_settings = Settings.from_env(backend="local", cds=False)
    print("filling the warm cache first (no-op when it is full) ...", flush=True)
    warm_minio = artifacts.minio_binary(warm_settings)
    artifacts.fetch_all(warm_settings)

    work = Path(tempfile.mkdtemp(prefix="osl-bench-"))
    base = replace(
        warm_settings, ports=Ports().shifted(args.port_offset), state_dir=work / "state-cold", cache_dir=work / "cache"
    )
    rows: list[tuple[str, str]] = []
    try:
        # ---------------------------------------------------------------- cold
        started = time.monotonic()
        artifacts.kafka_jars(base, progress=_quiet)
        artifacts.spark_job_jars(base, progress=_quiet)
        jars_s = time.monotonic() - started
        rows.append(("cold: resolve + download jars (Kafka, Spark job)", f"{jars_s:7.1f} s"))
        if args.include_minio_build:
            started = time.monotonic()
            artifacts.minio_binary(base, progress=_quiet)
            rows.append(("cold: build MinIO from its Go module", f"{time.monotonic() - started:7.1f} s"))
        else:
            dest = base.cache_dir / "minio" / versions.MINIO_VERSION / "minio"
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(warm_minio, dest)
            rows.append(("cold: build MinIO", "skipped (copied; --include-minio-build)"))
        cold = LocalBackend(base, progress=_quiet)
        up_s = _timed_up(cold)
        cold.down()
        rows.append(("cold: up -> all healthy (after the fetch)", f"{up_s:7.1f} s"))
        rows.append(("cold: total", f"{jars_s + up_s:7.1f} s (+ MinIO build if included)"))

        # ---------------------------------------------------------------- warm
        warm = LocalBackend(replace(base, state_dir=work / "state-warm", cache_dir=warm_settings.cache_dir), progress=_quiet)
        warm_s = _timed_up(warm)
        rows.append(("warm cache, new state: up -> all healthy", f"{warm_s:7.1f} s"))
        rss = {s.name: _group_rss_mib(s.pid) for s in warm.status() if s.pid}
        warm.down()
        restart_s = _timed_up(warm)
        rows.append(("warm cache, existing state: down + up -> healthy", f"{restart_s:7.1f} s"))
        # the drills' broker kill: SIGKILL, then start again until healthy (the controller's
        # broker session, sandbox.services.local_processes.KAFKA_SESSION_TIMEOUT_MS, is most of it)
        warm.kill("kafka")
        started = time.monotonic()
        warm.restart("kafka")
        rows.append(("warm: Kafka SIGKILLed -> restarted and healthy", f"{time.monotonic() - started:7.1f} s"))
        rows.append(("warm vs cold (up + fetch)", f"{(jars_s + up_s) / warm_s:7.1f} x slower cold"))
        for name, mib in rss.items():
            rows.append((f"RSS {name}", f"{mib:7.0f} MiB"))
        rows.append(("RSS total", f"{sum(rss.values()):7.0f} MiB"))
        warm.down()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    width = max(len(k) for k, _ in rows)
    print(f"\nlocal backend start-up ({os.cpu_count()} cores, Kafka {versions.KAFKA}, Spark {versions.PYSPARK})")
    for key, value in rows:
        print(f"  {key:<{width}}  {value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
