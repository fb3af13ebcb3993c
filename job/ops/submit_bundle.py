"""The job packaged for ``spark-submit``, the way teams ship a PySpark job to a cluster.

``python -m job package`` writes three files into one folder (default ``build/spark-submit``):

- ``ordered_stream_lab-<version>.zip``: the ``job``, ``producers`` and ``sandbox`` packages, for
  ``--py-files``. Spark puts it on the driver's ``sys.path`` and ships it to every executor, so
  neither needs this checkout (the executors' Python must still have the third-party packages
  of ``pyproject.toml``: pyspark, pandas, pyarrow, msgspec, ...).
- ``driver.py``: the entry script, ``python -m job`` under another name: its arguments are
  ``job``'s (``run --until-drained``, ``verify --ledger ...``).
- ``spark-defaults.conf``: for ``--properties-file``: the master, the Kafka source and S3A jars
  on the class path, and S3A pointed at the object store, for the settings the packaging ran
  with (``OSL_*``). Class-path settings must be given at launch: under ``spark-submit`` the JVM
  is running before the job's own code sets anything.

Deploy mode: on a Spark **standalone** master a Python driver runs in client mode (Spark refuses
cluster mode there for Python applications), on the machine that submits. On Kubernetes the
same files run in cluster mode; see docs/operations.md.
"""

from __future__ import annotations

import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Package", "build"]

PACKAGES = ("job", "producers", "sandbox")

DRIVER = '''"""spark-submit entry point of the ordered session job: the arguments are `python -m job`'s."""

import sys

from job.cli import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
'''

#: Settings a spark-submit run takes from its environment, never from a file written elsewhere:
#: the interpreter is the submitting environment's (PYSPARK_PYTHON), not the packaging one's.
_NOT_PACKAGED = ("spark.pyspark.python", "spark.pyspark.driver.python")


@dataclass(frozen=True, kw_only=True)
class Package:
    """What :func:`build` wrote, and the command that submits it."""

    zip: Path
    driver: Path
    properties: Path
    modules: int

    def submit_argv(self, spark_submit: str = "spark-submit", *job_args: str) -> list[str]:
        return [
            spark_submit,
            "--deploy-mode",
            "client",
            "--properties-file",
            str(self.properties),
            "--py-files",
            str(self.zip),
            str(self.driver),
            *job_args,
        ]

    def submit_line(self, *job_args: str) -> str:
        return " ".join(shlex.quote(a) for a in self.submit_argv("spark-submit", *job_args))


def _source_root() -> Path:
    root = Path(__file__).resolve().parents[2]
    missing = [p for p in PACKAGES if not (root / p / "__init__.py").is_file()]
    if missing:
        from job.engine.errors import UsageError

        raise UsageError(
            f"package: the sources of {', '.join(missing)} under {root}",
            "run `python -m job package` from the project's checkout (pip install -e .)",
        )
    return root


def build(out: Path, settings, *, version: str | None = None) -> Package:
    """Write the zip, the driver script and the properties file into ``out``; see the module doc."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    from sandbox.jvm.spark_session import spark_conf

    root = _source_root()
    if version is None:
        try:
            version = dist_version("ordered-stream-lab")
        except PackageNotFoundError:
            version = "0"
    out.mkdir(parents=True, exist_ok=True)
    archive = out / f"ordered_stream_lab-{version}.zip"
    modules = 0
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        for package in PACKAGES:
            for path in sorted((root / package).rglob("*")):
                if path.is_dir() or "__pycache__" in path.parts or path.suffix in (".pyc", ".pyo"):
                    continue
                zf.write(path, path.relative_to(root).as_posix())
                modules += path.suffix == ".py"
    driver = out / "driver.py"
    driver.write_text(DRIVER)
    conf = {k: v for k, v in spark_conf(settings, progress=lambda _line: None).items() if k not in _NOT_PACKAGED}
    properties = out / "spark-defaults.conf"
    properties.write_text(
        "# spark-submit --properties-file for the ordered session job, written by `python -m job package`\n"
        "# for the settings it ran with (OSL_*). Class-path entries must exist on every node.\n"
        + "".join(f"{key} {value}\n" for key, value in sorted(conf.items()))
    )
    return Package(zip=archive, driver=driver, properties=properties, modules=modules)
