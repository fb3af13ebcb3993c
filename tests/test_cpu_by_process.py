"""bench/cpu_by_process.py: the CPU a real command burns is found under its kind of process, and
the command's exit status is the tool's."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.bench_scripts import loaded

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cpu_by_process():
    yield from loaded("cpu_by_process")


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("java -cp x org.apache.spark.executor.CoarseGrainedExecutorBackend --driver-url y", "Spark executor"),
        ("java -cp x org.apache.spark.deploy.SparkSubmit pyspark-shell", "Spark driver"),
        ("java -Xmx512m kafka.Kafka /tmp/server.properties", "Kafka broker"),
        ("/usr/bin/python -m ipykernel_launcher -f k.json", "notebook kernel"),
        ("/x/.venv/bin/python -m job run --config c.json", "python -m job"),
        ("bash -c true", "other"),
    ],
)
def test_a_process_is_named_by_its_command_line(cpu_by_process, command, expected):
    assert cpu_by_process.kind(command) == expected


def test_a_command_s_cpu_and_exit_status_are_reported(tmp_path):
    out = tmp_path / "cpu.json"
    burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.0: pass\nraise SystemExit(3)"
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "bench" / "cpu_by_process.py"),
            "--json",
            str(out),
            "--every",
            "0.2",
            "--",
            sys.executable,
            "-c",
            burn,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 3, proc.stderr
    figures = json.loads(out.read_text())
    assert figures["exit_status"] == 3
    assert figures["by_kind"]["other Python"]["cpu_s"] >= 0.8, figures["by_kind"]
    assert figures["busy_core_s"] >= 0.8
    assert "other Python" in proc.stderr and "% busy" in proc.stderr


def test_no_command_is_a_clear_error():
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "cpu_by_process.py")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "name the command to measure after --" in proc.stderr
