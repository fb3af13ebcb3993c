"""Fail the image build when its build args, sandbox/versions.py and what got installed disagree.

Run by docker/Dockerfile after the jar fetch, with the build args in the environment
(PYTHON_VERSION, PYSPARK_VERSION, KAFKA_VERSION, HADOOP_VERSION, MINIO_VERSION).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path


def main() -> int:
    import pyspark

    from sandbox import versions

    problems: list[str] = []

    def agree(what: str, build_arg: str, expected: str) -> None:
        got = os.environ.get(build_arg)
        if got is not None and got != expected:
            problems.append(f"{what}: build arg {build_arg}={got} but sandbox/versions.py says {expected}")

    agree("Python", "PYTHON_VERSION", versions.PYTHON)
    agree("pyspark", "PYSPARK_VERSION", versions.PYSPARK)
    agree("Kafka", "KAFKA_VERSION", versions.KAFKA)
    agree("Hadoop", "HADOOP_VERSION", versions.HADOOP)
    agree("MinIO", "MINIO_VERSION", versions.MINIO_VERSION)

    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    if running != versions.PYTHON:
        problems.append(f"Python: the image runs {running}, sandbox/versions.py says {versions.PYTHON}")
    if pyspark.__version__ != versions.PYSPARK:
        problems.append(f"pyspark: installed {pyspark.__version__}, sandbox/versions.py says {versions.PYSPARK}")
    spark_home = Path(os.environ.get("SPARK_HOME", ""))
    if spark_home.resolve() != Path(pyspark.__file__).resolve().parent:
        problems.append(f"SPARK_HOME={spark_home} is not the pyspark install at {Path(pyspark.__file__).parent}")

    out = subprocess.run(["java", "-version"], capture_output=True, text=True).stderr
    match = re.search(r'version "(\d+)', out)
    if not match or int(match.group(1)) < versions.JAVA_MIN:
        problems.append(f"Java {versions.JAVA_MIN}+ needed, `java -version` said: {out.strip()[:200]}")

    jar_dir = Path(os.environ["OSL_CACHE_DIR"]) / "jars" / f"spark-job-{versions.PYSPARK}"
    jars = {p.name for p in jar_dir.glob("*.jar")}
    for group, artifact, version in versions.spark_job_packages() + versions.spark_job_intransitive():
        if f"{artifact}-{version}.jar" not in jars:
            problems.append(f"{group}:{artifact}:{version} is not baked into {jar_dir}")

    for line in problems:
        print(f"check_versions: {line}", file=sys.stderr)
    if not problems:
        print(
            f"check_versions: Python {running}, pyspark {pyspark.__version__}, "
            f"Java {match.group(1) if match else '?'}, {len(jars)} job jars in {jar_dir}: "
            "all agree with sandbox/versions.py"
        )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
