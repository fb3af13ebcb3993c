"""Fetch the Kafka broker's and the Spark job's jars into OSL_CACHE_DIR during the image build.

The same resolution the local backend runs (sandbox.artifacts, Ivy against Maven Central or
OSL_MAVEN_REPO), so the containers and the local processes load identical jars.
"""

from __future__ import annotations

import sys

from sandbox.artifacts import kafka_jars, spark_job_jars
from sandbox.jvm.jar_times import pin
from sandbox.settings import Settings


def main() -> int:
    settings = Settings.from_env(backend="compose")
    job_jars = spark_job_jars(settings)
    # each build writes these jars anew: times from their bytes let the class-data archive a
    # previous build recorded for the same jars be reused (class_data_warmup --reuse, decision 0029)
    pinned = sum(pin(folder) for folder in sorted({jar.parent for jar in job_jars}))
    print(
        f"fetch_jars: {len(kafka_jars(settings))} Kafka jars, {len(job_jars)} Spark job jars ({pinned} given their content's time)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
