"""Where a command's CPU goes: run it, sample every process's CPU time from ``/proc`` while it
runs, and print the busy core-seconds per kind of process (Spark driver, executor, Kafka broker,
notebook kernel, ...), with how many processes of each kind there were.

    .venv/bin/python bench/cpu_by_process.py [--json OUT] [--every S] -- COMMAND [ARGS...]

Linux only. Every process on the machine is counted, not only the command's children: the
services a test starts (a broker, a Spark worker) are not its children. A process's CPU is its
``utime + stime`` when last seen, less what it had when sampling began; one that starts and ends
between two samples is missed (``--every``, 1 s by default). The exit status is the command's.
Decisions 0016, 0026 and 0027 (docs/decisions/) compared settings this way.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")

#: Kinds of process, by a piece of the command line: the first that matches names it.
KINDS = (
    ("kafka.Kafka", "Kafka broker"),
    ("CoarseGrainedExecutorBackend", "Spark executor"),
    ("deploy.worker.Worker", "Spark worker"),
    ("deploy.master.Master", "Spark master"),
    ("SparkSubmit", "Spark driver"),
    ("ipykernel", "notebook kernel"),
    ("pyspark.daemon", "PySpark Python worker"),
    ("pyspark/daemon", "PySpark Python worker"),
    ("pytest", "pytest"),
    ("-m job", "python -m job"),
    ("minio", "MinIO"),
    ("dockerd", "Docker engine"),
    ("containerd", "Docker engine"),
    ("runc", "Docker engine"),
    ("docker", "docker CLI"),
    ("java", "other JVM"),
    ("python", "other Python"),
)


def kind(command: str) -> str:
    for piece, name in KINDS:
        if piece in command:
            return name
    return "other"


@dataclass
class Seen:
    kind: str
    cpu0: float
    cpu: float


def machine_busy() -> float:
    """Busy core-seconds since boot, from /proc/stat (everything but idle and iowait)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / HZ


def sample(seen: dict[str, Seen], first: bool) -> None:
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            rest = stat[stat.rindex(")") + 2 :].split()
            cpu = (int(rest[11]) + int(rest[12])) / HZ
            key = f"{entry.name}.{rest[19]}"  # pid and start time: a reused pid is another process
            if key not in seen:
                raw = Path(f"/proc/{entry.name}/cmdline").read_bytes()
                command = raw.replace(b"\0", b" ").decode(errors="replace") or stat[stat.index("(") + 1 : stat.rindex(")")]
                seen[key] = Seen(kind(command), cpu if first else 0.0, cpu)
            seen[key].cpu = cpu
        except (OSError, ValueError, IndexError):  # it ended while we read it
            continue


def table(seen: dict[str, Seen], wall: float, busy: float) -> tuple[str, dict]:
    sums: dict[str, list[float]] = {}
    for s in seen.values():
        used = s.cpu - s.cpu0
        if used > 0:
            entry = sums.setdefault(s.kind, [0.0, 0])
            entry[0] += used
            entry[1] += 1
    rows = sorted(sums.items(), key=lambda kv: -kv[1][0])
    lines = [
        f"{wall:.0f} s wall, {busy:.0f} busy core-seconds of {wall * os.cpu_count():.0f} "
        f"({100 * busy / max(wall * os.cpu_count(), 1e-9):.0f} % busy)",
        f"{'kind':<24} {'core-s':>8} {'processes':>9}",
    ]
    lines += [f"{name:<24} {cpu:>8.1f} {count:>9}" for name, (cpu, count) in rows]
    data = {"wall_s": wall, "busy_core_s": busy, "by_kind": {k: {"cpu_s": v[0], "processes": v[1]} for k, v in rows}}
    return "\n".join(lines), data


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--every", type=float, default=1.0, help="seconds between samples (default 1)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("name the command to measure after --, e.g. -- .venv/bin/python -m pytest tests/job")
    if not Path("/proc/stat").exists():
        parser.error("this reads /proc: Linux only")
    seen: dict[str, Seen] = {}
    sample(seen, first=True)
    busy0, started = machine_busy(), time.monotonic()
    try:
        proc = subprocess.Popen(command)
    except OSError as e:
        parser.error(f"cannot start {command[0]!r}: {e.strerror}")
    try:
        while proc.poll() is None:
            sample(seen, first=False)
            try:
                proc.wait(timeout=args.every)
            except subprocess.TimeoutExpired:
                pass
    except KeyboardInterrupt:
        proc.wait()
    sample(seen, first=False)
    text, data = table(seen, time.monotonic() - started, machine_busy() - busy0)
    print(f"cpu_by_process: {' '.join(command)}\n{text}", file=sys.stderr, flush=True)
    if args.json:
        args.json.write_text(json.dumps({"command": command, "exit_status": proc.returncode, **data}, indent=1))
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
