"""Every pinned version of the stack, in one place.

The local backend, the Dockerfile and ``docker-compose.yml`` must agree with these;
``tests/sandbox/test_versions_agree.py`` fails when they drift apart.
"""

from __future__ import annotations

PYTHON = "3.11"
#: 4.0.0 is the newest Spark whose Kafka connector resolves completely from the Maven registry
#: reachable here (spark-token-provider-kafka-0-10 is published for 4.0.0 but not for 4.0.x/4.1.x).
PYSPARK = "4.0.0"
SCALA_BINARY = "2.13"
#: Hadoop client bundled inside the pyspark wheel; hadoop-aws must match it exactly.
HADOOP = "3.4.1"
KAFKA = "4.1.1"
JAVA_MIN = 17
#: MinIO's community source was archived; this is the final commit on the Go module proxy.
MINIO_MODULE = "github.com/minio/minio"
MINIO_VERSION = "v0.0.0-20260212201848-7aac2a2c5b7c"
GO_MIN = (1, 24)

#: The two base images docker/Dockerfile starts FROM; every image docker-compose.yml runs is built
#: from them. Where no registry answers, scripts/ensure-docker.sh builds both locally under these
#: same tags (debootstrap for Debian; Go's toolchain module GO_TOOLCHAIN on top of it).
DEBIAN_IMAGE = "debian:bookworm-slim"
GO_IMAGE = "golang:1.24-bookworm"
GO_TOOLCHAIN = "1.24.13"

#: Tags of the sandbox's own images (docker-compose.yml names them; the Dockerfile builds them).
SPARK_IMAGE = f"ordered-stream-lab/spark:{PYSPARK}-python{PYTHON}"
KAFKA_IMAGE = f"ordered-stream-lab/kafka:{KAFKA}"
MINIO_IMAGE = f"ordered-stream-lab/minio:{MINIO_VERSION}"



def image_build_env() -> dict[str, str]:
    """The ``OSL_*`` variables docker-compose.yml turns into the Dockerfile's build args and tags.

    ``python -m sandbox`` passes these to every compose command, so a version bump here flows into
    the images; the compose file's defaults repeat them for a bare ``docker compose``.
    """
    return {
        "OSL_DEBIAN_IMAGE": DEBIAN_IMAGE,
        "OSL_GO_IMAGE": GO_IMAGE,
        "OSL_PYTHON_VERSION": PYTHON,
        "OSL_PYSPARK_VERSION": PYSPARK,
        "OSL_KAFKA_VERSION": KAFKA,
        "OSL_HADOOP_VERSION": HADOOP,
        "OSL_MINIO_MODULE": MINIO_MODULE,
        "OSL_MINIO_VERSION": MINIO_VERSION,
        "OSL_JAVA_PACKAGE": f"openjdk-{JAVA_MIN}-jre-headless",
    }


MAVEN_CENTRAL = "https://repo1.maven.org/maven2"

LOG4J = "2.24.3"


def kafka_broker() -> list[tuple[str, str, str]]:
    """Maven coordinates of the Kafka broker (KRaft), its server tools, and a log binding.

    The broker's POM leaves the slf4j binding to the distribution; without one it logs nothing.
    """
    return [
        ("org.apache.kafka", f"kafka_{SCALA_BINARY}", KAFKA),
        ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J),
    ]

def spark_job_packages() -> list[tuple[str, str, str]]:
    """Maven coordinates the Spark job needs on its classpath (resolved with dependencies)."""
    return [
        ("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", PYSPARK),
        ("org.apache.hadoop", "hadoop-aws", HADOOP),
    ]
