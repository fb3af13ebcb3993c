"""ensure_topics returns only once every partition has a leader (a stand-in admin client:
the broker's metadata lag is a race a real broker shows only now and then)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from producers.errors import TopicError
from producers.kafka import _wait_for_leaders


def _meta(leaders: dict[str, list[int]]):
    return SimpleNamespace(
        topics={
            t: SimpleNamespace(
                error=None, partitions={i: SimpleNamespace(leader=leader, error=None) for i, leader in enumerate(ls)}
            )
            for t, ls in leaders.items()
        }
    )


class _Admin:
    def __init__(self, answers):
        self.answers, self.calls = list(answers), 0

    def list_topics(self, timeout):
        self.calls += 1
        return self.answers[min(self.calls, len(self.answers)) - 1]


def test_it_waits_until_the_metadata_shows_every_partition_led():
    admin = _Admin([_meta({"t": [1, -1, 1]}), _meta({}), _meta({"t": [1, 1, 1]})])
    _wait_for_leaders(admin, "k:9092", ["t"], timeout_s=5)
    assert admin.calls == 3


def test_a_partition_without_a_leader_past_the_deadline_names_the_topic_and_the_fix():
    admin = _Admin([_meta({"t": [1, -1]})])
    with pytest.raises(TopicError, match=r"topic t on k:9092: has no partition leader after 0.3s \(no leader yet for t\); check"):
        _wait_for_leaders(admin, "k:9092", ["t"], timeout_s=0.3)
