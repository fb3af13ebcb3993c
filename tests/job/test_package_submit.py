"""`python -m job package` + `spark-submit`: the job as a packaged artifact, submitted in client
mode to the sandbox's standalone master from an environment that has the project's dependencies
but not its source tree, drains a small run, and the lake verifies clean against the ledger."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import uuid
import venv
from pathlib import Path

import pytest

from job.ops.submit_bundle import build
from job.verify.lake_check import verify_lake
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _without_the_source(tmp_path: Path) -> Path:
    """A virtualenv that reaches this one's third-party packages through a ``.pth`` line. Only a
    site directory's own ``.pth`` files run, so the editable install's import hook -- the only
    way this venv finds the checkout -- is not carried over: ``import job`` fails there."""
    env = tmp_path / "env"
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    Path(purelib, "project-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def test_package_writes_a_zip_of_the_three_packages_a_driver_and_the_sandbox_s_conf(sandbox, tmp_path):
    pkg = build(tmp_path / "pkg", sandbox.settings)
    import zipfile

    names = zipfile.ZipFile(pkg.zip).namelist()
    assert {"job/cli.py", "producers/runner.py", "sandbox/settings.py"} <= set(names)
    # the sandbox's rooms, and the Java sources the driver compiles its checkpoint file manager from
    assert {"sandbox/jvm/spark_session.py", "sandbox/jvm/java/osl/FastCheckpointFileManager.java"} <= set(names)
    assert not [n for n in names if n.startswith("book/")]  # the site is no part of the job
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    conf = dict(line.split(" ", 1) for line in pkg.properties.read_text().splitlines() if not line.startswith("#"))
    assert conf["spark.master"] == sandbox.settings.endpoints().spark_master
    assert "spark-sql-kafka" in conf["spark.driver.extraClassPath"]
    assert "spark.pyspark.python" not in conf  # the submitting environment's interpreter, not this one's


def test_the_packaged_job_under_spark_submit_without_the_source_tree_verifies_clean(sandbox, spark, tmp_path):
    settings = sandbox.settings
    python = _without_the_source(tmp_path)
    bare = subprocess.run(
        [python, "-c", "import pyspark, pandas, msgspec; import job"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
    )
    assert bare.returncode == 1 and "No module named 'job'" in bare.stderr, bare.stderr  # the precondition

    packaged = subprocess.run(
        [sys.executable, "-m", "job", "package", "--out", str(tmp_path / "pkg")],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=120,
    )
    assert packaged.returncode == 0, packaged.stderr
    assert "spark-submit --deploy-mode client --properties-file" in packaged.stdout
    pkg = build(tmp_path / "pkg", settings)  # the same files again, for their paths

    cfg, summary = kafka_runs.produce(
        settings.endpoints().kafka_bootstrap,
        tmp_path / "ledger",
        sites=2,
        sessions=1,
        rate=200.0,
        duration=3.0,
        snapshot_every=20,
        seed=5,
    )
    assert summary.error is None and summary.outcomes.get("ok", 0) > 0, summary.text()
    import pyspark

    spark_home = Path(pyspark.__file__).parent
    output = f"s3a://{settings.bucket}/itest/submit-{uuid.uuid4().hex[:8]}"
    argv = pkg.submit_argv(
        str(spark_home / "bin" / "spark-submit"),
        "run",
        "--topic-prefix",
        cfg.topic_prefix,
        "--output",
        output,
        "--checkpoint",
        str(tmp_path / "ckpt"),
        "--trigger",
        "1 second",
        "--until-drained",
    )
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env.update(PYSPARK_PYTHON=str(python), SPARK_HOME=str(spark_home), PATH=f"{python.parent}{os.pathsep}{env['PATH']}")
    submitted = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert submitted.returncode == 0, submitted.stdout[-3000:] + submitted.stderr[-3000:]

    report = verify_lake(spark, ledger=cfg.ledger, lake=output, policy="resync")
    assert report.ok and report.delivered == summary.outcomes["ok"], report.summary()
