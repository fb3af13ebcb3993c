"""Every pinned version of the stack, in one place.

The local backend, the Dockerfile and ``docker-compose.yml`` must agree with these;
``tests/sandbox/test_versions_agree.py`` fails when they drift apart.
"""

from __future__ import annotations

PYTHON = "3.11"
#: The oldest interpreter of that line the project runs on: Debian bookworm's python3.11, which
#: the images use. scripts/lock.sh resolves the lock for it, so no pin needs a newer patch release
#: (soupsieve 4.x requires 3.11.5 and broke the image build before).
PYTHON_FLOOR = "3.11.2"
#: Checked against the registries reachable here (2026-11-22): `pip index versions pyspark`
#: lists 4.2.0, and `mvn dependency:get` resolves spark-sql-kafka-0-10_2.13:4.2.0,
#: spark-token-provider-kafka-0-10_2.13:4.2.0 and hadoop-aws:3.5.0.
PYSPARK = "4.2.0"
SCALA_BINARY = "2.13"
#: Hadoop client bundled inside the pyspark wheel; hadoop-aws must match it exactly.
HADOOP = "3.5.0"
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


#: The AWS SDK v2 release hadoop-aws HADOOP is built against (the ``bundle`` version in its POM).
AWS_SDK = "2.35.4"
#: S3A's optional analytics input stream, a compile dependency in hadoop-aws HADOOP's POM.
S3_ANALYTICS_ACCELERATOR = "1.3.1"


def spark_job_packages() -> list[tuple[str, str, str]]:
    """Maven coordinates the Spark job needs on its classpath (resolved with dependencies).

    hadoop-aws itself is in :func:`spark_job_intransitive`: its POM pulls the SDK's
    ``bundle``, 690 MB of every AWS service, shaded. S3A needs the S3 client and its
    transfer manager, 14 MB with their dependencies, listed here instead
    (``tests/sandbox/test_local_backend.py`` runs every S3 path the job uses against MinIO).
    """
    return [
        ("org.apache.spark", f"spark-sql-kafka-0-10_{SCALA_BINARY}", PYSPARK),
        ("software.amazon.awssdk", "s3", AWS_SDK),
        ("software.amazon.awssdk", "s3-transfer-manager", AWS_SDK),
        ("software.amazon.s3.analyticsaccelerator", "analyticsaccelerator-s3", S3_ANALYTICS_ACCELERATOR),
    ]


#: The Eclipse compiler for Java, which compiles the project's own JVM classes (sandbox/jvm/java) on a
#: JRE: the images carry no javac. Checked 2026-11-27: `mvn dependency:get
#: -Dartifact=org.eclipse.jdt:ecj:3.44.0` resolves (Maven Central lists up to 3.46.100), and it
#: runs on Java 17.
ECJ = "3.44.0"


def spark_job_intransitive() -> list[tuple[str, str, str]]:
    """Coordinates of the job's classpath resolved without their dependencies (see above)."""
    return [("org.apache.hadoop", "hadoop-aws", HADOOP)]
