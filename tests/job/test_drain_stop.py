"""job.spark.pipeline.stop_between_batches: a drained query is stopped while it waits for its
next trigger, not in the middle of a batch. A query stand-in with a scripted status; no services."""

from __future__ import annotations

from job.spark.pipeline import stop_between_batches


class _Query:
    """Its status says a trigger is active for the first ``busy_polls`` reads, and its last
    progress moves to the next batch at read ``commit_at`` (never when None); it records when
    it was stopped, counted in status reads."""

    def __init__(self, busy_polls: int, commit_at: int | None = None) -> None:
        self.busy_polls, self.commit_at = busy_polls, commit_at
        self.reads = 0
        self.stopped_after: int | None = None

    @property
    def lastProgress(self) -> dict:  # noqa: N802 - PySpark's name
        return {"batchId": 8 if self.commit_at is not None and self.reads >= self.commit_at else 7}

    @property
    def status(self) -> dict:
        self.reads += 1
        return {"isTriggerActive": self.reads <= self.busy_polls, "isDataAvailable": True, "message": "Processing new data"}

    def stop(self) -> None:
        assert self.stopped_after is None, "stopped twice"
        self.stopped_after = self.reads


class _Clock:
    def __init__(self, step: float) -> None:
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


def test_a_query_in_a_batch_is_stopped_at_the_first_read_that_finds_it_waiting():
    query = _Query(busy_polls=3)
    assert stop_between_batches(query, within_s=10.0, poll_s=0.0, clock=_Clock(0.1)) is True
    assert query.stopped_after == 4  # three reads in a batch, the fourth between batches


def test_a_query_already_waiting_is_stopped_at_once():
    query = _Query(busy_polls=0)
    assert stop_between_batches(query, within_s=10.0, poll_s=0.0, clock=_Clock(0.1)) is True
    assert query.stopped_after == 1


def test_a_query_whose_batches_run_back_to_back_is_stopped_the_moment_one_commits():
    query = _Query(busy_polls=10_000, commit_at=5)
    assert stop_between_batches(query, within_s=10.0, poll_s=0.0, clock=_Clock(0.1)) is True
    assert query.stopped_after == 5


def test_a_query_never_between_batches_is_still_stopped_once_the_wait_is_up_and_says_so():
    query = _Query(busy_polls=10_000)
    assert stop_between_batches(query, within_s=1.0, poll_s=0.0, clock=_Clock(0.1)) is False
    assert query.stopped_after is not None and query.stopped_after < 20  # about ten reads in 1 s of 0.1 s steps
