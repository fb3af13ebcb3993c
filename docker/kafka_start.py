"""Start the Kafka broker (KRaft, combined broker + controller) from the jars in /opt/kafka/libs.

Configured like the official apache/kafka image, so docker-compose.yml reads the same either way:
every ``KAFKA_<NAME>`` variable becomes the property ``<name>`` (lower case, ``_`` -> ``.``,
``__`` -> ``_``, ``___`` -> ``-``); ``CLUSTER_ID`` formats empty storage once; ``KAFKA_HEAP_OPTS``
and ``KAFKA_JVM_PERFORMANCE_OPTS`` go to the JVM. The broker then replaces this process (exec),
so signals from Docker reach it directly.
"""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

LIBS = "/opt/kafka/libs"
CONFIG = Path("/opt/kafka/config")
#: KAFKA_* variables that configure the JVM, not the broker.
JVM_VARS = {"KAFKA_HEAP_OPTS", "KAFKA_JVM_PERFORMANCE_OPTS", "KAFKA_OPTS", "KAFKA_LOG4J_OPTS"}
LOG4J = """\
status = warn
appender.console.type = Console
appender.console.name = STDOUT
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.stdout.ref = STDOUT
logger.state.name = state.change.logger
logger.state.level = WARN
"""


def property_name(variable: str) -> str:
    """``KAFKA_LOG_DIRS`` -> ``log.dirs`` (the official image's convention)."""
    name = variable.removeprefix("KAFKA_").lower()
    return name.replace("___", "-").replace("__", "\0").replace("_", ".").replace("\0", "_")


def server_properties(environ: dict[str, str]) -> str:
    lines = [f"{property_name(k)}={v}" for k, v in sorted(environ.items()) if k.startswith("KAFKA_") and k not in JVM_VARS]
    return "\n".join(lines) + "\n"


def main() -> int:
    env = dict(os.environ)
    props = CONFIG / "server.properties"
    props.write_text(server_properties(env))
    log4j = CONFIG / "log4j2.properties"
    log4j.write_text(LOG4J)
    java = [
        "java",
        *env.get("KAFKA_HEAP_OPTS", "-Xmx512m -Xms512m").split(),
        *env.get("KAFKA_JVM_PERFORMANCE_OPTS", "-XX:+UseG1GC -XX:MaxGCPauseMillis=20").split(),
        *env.get("KAFKA_OPTS", "").split(),
        f"-Dlog4j2.configurationFile={log4j}",
        "-cp",
        ":".join(sorted(glob.glob(f"{LIBS}/*.jar"))),
    ]
    log_dirs = env.get("KAFKA_LOG_DIRS", "/var/lib/kafka/data").split(",")
    if not any((Path(d) / "meta.properties").exists() for d in log_dirs):
        cluster_id = env.get("CLUSTER_ID")
        if not cluster_id:
            print("kafka_start: empty storage and no CLUSTER_ID to format it with; set CLUSTER_ID", file=sys.stderr)
            return 1
        print(f"kafka_start: formatting {', '.join(log_dirs)} for cluster {cluster_id}", flush=True)
        subprocess.run(
            [*java, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(props), "--ignore-formatted"],
            check=True,
        )
    os.execvp("java", [*java, "kafka.Kafka", str(props)])
    return 1  # not reached


if __name__ == "__main__":
    sys.exit(main())
