"""`make demo`: bring the embedded sandbox up, prove every service works, say where to look.

It leaves the sandbox running so you can explore; `make down` stops it.
"""

from __future__ import annotations

import sys
import time

from sandbox import SandboxError, Settings, open_sandbox
from sandbox.cli import _print_status
from sandbox.smoke import run_all


def main() -> int:
    started = time.monotonic()
    try:
        settings = Settings.from_env()
        sb = open_sandbox(settings)
        print(f"== starting the {settings.backend} sandbox (state: {settings.state_dir})", flush=True)
        sb.up()
        print("\n== proving each service does real work", flush=True)
        proofs = run_all(settings)
    except SandboxError as exc:
        print(f"\ndemo failed: {exc}", file=sys.stderr)
        return 2
    print()
    _print_status(sb.status())
    e = settings.endpoints()
    print(
        f"\n== where to look next ({time.monotonic() - started:.0f}s so far)\n"
        f"  Spark master UI   {e.spark_master_ui}\n"
        f"  MinIO console     {e.s3_console}  (user {settings.s3_access_key} / {settings.s3_secret_key})\n"
        f"  Kafka bootstrap   {e.kafka_bootstrap}\n"
        f"  logs              {settings.state_dir / 'logs'}\n"
        f"  the workbook      notebooks/00-tour.ipynb (jupyter lab notebooks/)\n"
        f"  break things      .venv/bin/python -m sandbox kill spark-worker-1   (then: restart spark-worker-1)\n"
        f"  stop              make down"
    )
    if not proofs:
        print("\ndemo failed: a proof above did not pass", file=sys.stderr)
        return 1
    print("\ndemo: all proofs passed")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
