"""Fetch the Kafka broker's and the Spark job's jars into OSL_CACHE_DIR during the image build.

The same resolution the local backend runs (sandbox.artifacts, Ivy against Maven Central or
OSL_MAVEN_REPO), so the containers and the local processes load identical jars.
"""

from __future__ import annotations

import sys

from sandbox.artifacts import kafka_jars, spark_job_jars
from sandbox.settings import Settings


def main() -> int:
    settings = Settings.from_env(backend="compose")
    print(f"fetch_jars: {len(kafka_jars(settings))} Kafka jars, {len(spark_job_jars(settings))} Spark job jars")
    return 0


if __name__ == "__main__":
    sys.exit(main())
