"""The foreachBatch drill's sink composition and its command line (no Spark needed)."""

from __future__ import annotations

import pytest

from job.drills.delivery import _main, make_sink


def test_make_sink_refuses_a_kind_twice_or_none():
    with pytest.raises(ValueError, match="distinct"):
        make_sink(["append", "append"], "s3a://b/p")
    with pytest.raises(ValueError, match="at least one"):
        make_sink([], "s3a://b/p")


def test_the_drill_refuses_a_sink_named_twice_before_it_starts_spark(capsys):
    with pytest.raises(SystemExit) as exit_:
        _main(["--prefix", "p-", "--sink", "append", "--sink", "append", "--output", "s3a://b/p", "--checkpoint", "/tmp/c"])
    assert exit_.value.code == 2
    assert "--sink: each kind once" in capsys.readouterr().err
