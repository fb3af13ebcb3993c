"""``python -m sandbox prune`` on the real broker: the topics runs left are deleted, only with
a confirmation, and a sandbox without any says so."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

pytestmark = pytest.mark.integration


def _prune(sandbox, *args: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-m", "sandbox", "--backend", "local", "prune", *args]
    env = dict(os.environ, OSL_STATE_DIR=str(sandbox.settings.state_dir))
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)


def test_prune_deletes_a_run_s_topics_only_when_confirmed_and_leaves_the_others(sandbox):
    bootstrap = sandbox.settings.endpoints().kafka_bootstrap
    prefix = f"prune-{uuid.uuid4().hex[:8]}-"
    mine = [f"{prefix}site-a", f"{prefix}site-b"]
    other = f"prune-other-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(t, 3, 1) for t in [*mine, other]]).values():
        future.result(30)

    refused = _prune(sandbox, "--prefix", prefix)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "prune deletes 2 topic(s), 6 partition(s)" in refused.stderr and "--yes" in refused.stderr, refused.stderr
    assert set(mine) <= set(admin.list_topics(timeout=30).topics), "a refused prune deleted topics"

    done = _prune(sandbox, "--prefix", prefix, "--yes")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "deleted 2 topic(s), 6 partition(s)" in done.stdout, done.stdout
    left = set(admin.list_topics(timeout=30).topics)
    assert not set(mine) & left and other in left, sorted(t for t in left if t.startswith("prune-"))

    again = _prune(sandbox, "--prefix", prefix, "--yes")
    assert again.returncode == 0 and "nothing to prune" in again.stdout, again.stdout + again.stderr
    admin.delete_topics([other])[other].result(30)


def test_prune_without_a_broker_names_it_and_the_fix_without_a_traceback(tmp_path):
    argv = [sys.executable, "-m", "sandbox", "--backend", "local", "--port-offset", "29000", "prune", "--yes"]
    env = dict(os.environ, OSL_STATE_DIR=str(tmp_path / "none"))
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr and "rdkafka" not in done.stderr, done.stderr
    assert "127.0.0.1:38092 could not be listed" in done.stderr and "python -m sandbox status" in done.stderr, done.stderr
