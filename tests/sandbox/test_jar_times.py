"""Content-derived jar times (sandbox/jvm/jar_times.py): two installs of the same jars get the
same times, so a class-data archive keyed by size and time outlives a new virtualenv."""

from __future__ import annotations

import os

from sandbox.jvm.jar_times import content_time, pin


def _install(folder, jars: dict[str, bytes]):
    folder.mkdir()
    for name, data in jars.items():
        (folder / name).write_bytes(data)
    return folder


def test_two_installs_of_the_same_jars_get_the_same_times_and_a_changed_jar_another(tmp_path):
    jars = {"a.jar": b"spark core" * 1000, "b.jar": b"kafka client" * 700}
    first = _install(tmp_path / "first", jars)
    os.utime(first / "a.jar", (1_800_000_000, 1_800_000_000))  # pip writes the install's time
    second = _install(tmp_path / "second", jars)
    assert pin(first) == 2 and pin(second) == 2
    times = lambda folder: {j.name: j.stat().st_mtime_ns for j in folder.glob("*.jar")}  # noqa: E731
    assert times(first) == times(second)
    assert all(t % 1_000_000_000 == 0 for t in times(first).values())
    assert pin(first) == 0  # already pinned: nothing rewritten

    (second / "b.jar").write_bytes(b"kafka client" * 701)
    assert pin(second) == 1
    assert times(second)["b.jar"] != times(first)["b.jar"]
    assert times(second)["a.jar"] == times(first)["a.jar"]


def test_the_time_depends_on_the_bytes_only(tmp_path):
    one, other = tmp_path / "one.jar", tmp_path / "other.jar"
    one.write_bytes(b"x" * 10)
    other.write_bytes(b"x" * 10)
    assert content_time(one) == content_time(other)
    other.write_bytes(b"x" * 11)
    assert content_time(one) != content_time(other)
