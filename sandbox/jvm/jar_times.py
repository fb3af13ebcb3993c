"""pyspark's jars get a modification time derived from their content, so a class-data archive
outlives a reinstall of the same pyspark at the same path.

A JVM maps a class-data archive only if every jar on its classpath has the size and
modification time it had when the archive was recorded (:mod:`sandbox.jvm.class_data_sharing`
keys its archives by both). pip writes a wheel's files with the time of the install, so every
new virtualenv, a fresh clone's in CI included, invalidated the archive and paid the warm-up
again (82 s alone here, 140 s in CI beside the compose lane). The time written here depends
only on the jar's bytes: the same pyspark gives the same times, a different jar a different one.
``scripts/bootstrap.sh`` runs this after pip (docs/decisions/0017-class-data-archives.md).

Usage: ``python -m sandbox.jvm.jar_times`` (prints how many jars it set).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

#: The earliest time given (2000-01-01 UTC); a jar's hash adds up to about eight years to it.
_EPOCH_S = 946_684_800


def content_time(jar: Path) -> int:
    """The modification time (seconds) that ``jar``'s bytes give."""
    digest = hashlib.sha256()
    with jar.open("rb") as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    return _EPOCH_S + int(digest.hexdigest()[:7], 16)


def pin(folder: Path) -> int:
    """Give every jar in ``folder`` its content's time; returns how many changed."""
    changed = 0
    for jar in sorted(folder.glob("*.jar")):
        when = content_time(jar)
        if int(jar.stat().st_mtime) != when or jar.stat().st_mtime_ns % 1_000_000_000:
            os.utime(jar, (when, when))
            changed += 1
    return changed


def main() -> int:
    from sandbox.artifacts import spark_home

    folder = spark_home() / "jars"
    changed = pin(folder)
    print(f"jar times: {changed} of {len(list(folder.glob('*.jar')))} jars in {folder} set from their content")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
