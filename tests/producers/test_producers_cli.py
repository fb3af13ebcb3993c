"""``python -m producers``: fault listing, flag errors, ledger summaries (runs are in the integration test)."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

import pytest

from producers.cli import _parser, main
from producers.faults import FAULT_NAMES, parse_fault
from producers.runner import RunConfig, Runner

ROOT = Path(__file__).resolve().parents[2]


def cli(*argv: str, env: dict | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = main(list(argv), env=env or {}, out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def test_python_m_producers_faults_lists_every_fault_with_its_description() -> None:
    done = subprocess.run([sys.executable, "-m", "producers", "faults"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    for name in FAULT_NAMES:
        assert f"\n{name}  [" in "\n" + done.stdout
    assert done.stdout.count("A correct pipeline:") == len(FAULT_NAMES)
    assert done.stdout.count("Allowed anomalies:") == len(FAULT_NAMES)


def test_faults_can_be_listed_one_by_one_and_unknown_names_are_refused(capsys) -> None:
    code, out, _ = cli("faults", "reorder")
    assert code == 0 and out.startswith("reorder  [") and "drop  [" not in out
    with pytest.raises(SystemExit) as exc:
        cli("faults", "melt")
    assert exc.value.code == 2 and "no fault is named 'melt'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["run", "--rate", "-5"], ["--rate=-5.0", "positive"]),
        (["run", "--sites", "0"], ["--sites=0"]),
        (["run", "--fault", "bogus:0.1"], ["no fault is named 'bogus'"]),
        (["run", "--fault", "drop"], ["no probability given", "drop:0.01"]),
        (["run", "--topic-prefix", "bad prefix"], ["Kafka topic names"]),
    ],
)
def test_bad_run_flags_exit_2_with_a_clear_error(tmp_path, argv: list[str], words: list[str]) -> None:
    code, out, err = cli(*argv, "--ledger", str(tmp_path / "l"))
    assert code == 2 and out == ""
    assert err.startswith("error: ")
    for word in words:
        assert word in err
    assert not (tmp_path / "l").exists()  # nothing started


def test_malformed_numbers_are_argparse_usage_errors(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        cli("run", "--sites", "three")
    assert exc.value.code == 2 and "invalid int value: 'three'" in capsys.readouterr().err


def test_the_environment_supplies_defaults_and_flags_override_it() -> None:
    env = {"OSL_KAFKA_BOOTSTRAP": "kafka:29092", "OSL_S3_ENDPOINT": "http://minio:9000"}
    args = _parser(env).parse_args(["run"])
    assert (args.bootstrap, args.s3_endpoint, args.s3_access_key) == ("kafka:29092", "http://minio:9000", "sandbox")
    assert _parser(env).parse_args(["run", "--bootstrap", "h:1"]).bootstrap == "h:1"
    assert _parser({}).parse_args(["run"]).bootstrap == "127.0.0.1:9092"


def test_a_port_offset_moves_the_producers_to_the_sandbox_it_names() -> None:
    """A second sandbox on other ports (OSL_PORT_OFFSET, as the README offers): the producers reach
    its Kafka and MinIO as `python -m sandbox` and `python -m job` do, not 9092 and 9000."""
    args = _parser({"OSL_PORT_OFFSET": "20000"}).parse_args(["run"])
    assert (args.bootstrap, args.s3_endpoint) == ("127.0.0.1:29092", "http://127.0.0.1:29000")
    led = _parser({"OSL_PORT_OFFSET": "20000"}).parse_args(["ledger", "x"])
    assert led.s3_endpoint == "http://127.0.0.1:29000"


def test_an_offset_that_is_not_a_number_is_one_line_and_exit_2() -> None:
    code, _out, err = cli("run", env={"OSL_PORT_OFFSET": "lots"})
    assert code == 2 and err.startswith("error: OSL_PORT_OFFSET='lots' is not an integer"), err


def test_ledger_command_summarises_sessions_and_windows(tmp_path, memory_transport, step_clock) -> None:
    cfg = RunConfig(
        ledger=str(tmp_path / "l"),
        sites=2,
        sessions=1,
        session_length=80,
        snapshot_every=30,
        rows=20,
        run_id="rcli",
        faults=(parse_fault("drop:at=10"),),
    )
    Runner(cfg, transport=memory_transport(), wall=step_clock(), monotonic=step_clock(start=0, step=1e-4)).run()
    code, out, _ = cli("ledger", str(tmp_path / "l"), "--windows")
    assert code == 0
    assert "run rcli seed 0 faults drop:1.0:at=10" in out
    assert "warehouse-0-rcli-s0000" in out and "weather-1-rcli-s0000" in out
    assert out.count("drop                   epoch 0 seq 10..30 restored") == 2
