"""The executors talk to their Python workers over a Unix domain socket
(``spark.python.unix.domain.socket.enabled`` in ``sandbox.jvm.spark_session.spark_conf``): over loopback
TCP, which Spark opens without TCP_NODELAY, each Python call of a task could stall on a
delayed acknowledgement, and the stateful operator makes two calls per task and batch."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


def socket_kinds(fd_dir: Path = Path("/proc/self/fd"), net: Path = Path("/proc/net")) -> dict[str, int]:
    """How many of this process's open sockets are Unix domain and how many TCP (from procfs)."""

    def inodes(table: str, column: int) -> set[str]:
        path = net / table
        if not path.exists():
            return set()
        return {line.split()[column] for line in path.read_text().splitlines()[1:] if len(line.split()) > column}

    unix, tcp = inodes("unix", 6), inodes("tcp", 9) | inodes("tcp6", 9)
    mine = []
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(fd_dir / fd)
        except OSError:  # closed since the listing
            continue
        if target.startswith("socket:["):
            mine.append(target[len("socket:[") : -1])
    return {"unix": sum(i in unix for i in mine), "tcp": sum(i in tcp for i in mine)}


def test_socket_kinds_counts_this_process_s_sockets():
    import socket

    a, b = socket.socketpair(socket.AF_UNIX)
    server = socket.create_server(("127.0.0.1", 0))
    try:
        before = socket_kinds()
        assert before["unix"] >= 2 and before["tcp"] >= 1, before
    finally:
        a.close(), b.close(), server.close()
    after = socket_kinds()
    assert after["unix"] == before["unix"] - 2 and after["tcp"] == before["tcp"] - 1, (before, after)


@pytest.mark.integration
def test_the_executors_python_workers_are_reached_over_a_unix_socket(spark):
    import sys

    from pyspark import cloudpickle

    def kinds(frames):
        import pandas as pd

        for _ in frames:
            pass
        found = socket_kinds()
        yield pd.DataFrame({"unix": [found["unix"]], "tcp": [found["tcp"]]})

    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)  # the executors need not import the tests
    try:
        rows = spark.range(0, 2, numPartitions=2).mapInPandas(kinds, "unix int, tcp int").collect()
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert len(rows) == 2
    for row in rows:  # a worker holds its connection to the executor and nothing else
        assert row.unix >= 1 and row.tcp == 0, (
            f"a Python worker has {row.unix} Unix and {row.tcp} TCP sockets: the executor reached it over TCP "
            "(spark.python.unix.domain.socket.enabled is not in effect)"
        )
