"""The job's errors: one root, small subclasses that carry the data a caller needs.

Every message names the subject, the place and the fix. :class:`IntegrityError` crosses
process boundaries (a Spark Python worker raises it, the driver reports it), so it
pickles by value.
"""

from __future__ import annotations

__all__ = ["BaselineError", "IntegrityError", "JobError", "RepairError", "StateError", "UsageError"]


class JobError(Exception):
    """Root of every error the ``job`` package raises on purpose."""


class IntegrityError(JobError):
    """A session broke the stream's integrity under policy ``strict``.

    ``problem`` is a quarantine reason (``gap``, ``duplicate``, ``stale-epoch``,
    ``orphan``, ``broken-session``, ``key-mismatch``, ``missing-key`` or a
    :class:`~producers.errors.ContractError` reason) or ``divergence``; ``detail`` says
    what was seen. The message reads
    ``session "s42" topic collection-site-3[1] offset 981: seq 17 after 15 (gap of 1)``.
    """

    def __init__(
        self,
        *,
        session: str,
        topic: str,
        partition: int,
        offset: int,
        problem: str,
        detail: str,
        epoch: int | None = None,
        seq: int | None = None,
    ) -> None:
        self.session, self.topic, self.partition, self.offset = session, topic, partition, offset
        self.problem, self.detail, self.epoch, self.seq = problem, detail, epoch, seq
        super().__init__(
            f'session "{session}" topic {topic}[{partition}] offset {offset}: {detail}; '
            f"policy strict stops here: run with policy resync to quarantine and go on, or repair "
            f"the input from this offset"
        )

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (_rebuild_integrity, (self.__dict__.copy(),))


def _rebuild_integrity(fields: dict) -> IntegrityError:
    keep = ("session", "topic", "partition", "offset", "problem", "detail", "epoch", "seq")
    return IntegrityError(**{k: fields[k] for k in keep})


class StateError(JobError, ValueError):
    """A stored session state cannot be read back (written by another version, or damaged)."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem, self.fix = problem, fix
        super().__init__(f"session state: {problem}; {fix}")


class BaselineError(JobError):
    """The baseline consumer could not read from Kafka."""

    def __init__(self, bootstrap: str, problem: str, fix: str) -> None:
        self.bootstrap, self.problem, self.fix = bootstrap, problem, fix
        super().__init__(f"baseline consumer on {bootstrap}: {problem}; {fix}")


class UsageError(JobError, ValueError):
    """A function of the job was called with arguments it cannot work with."""

    def __init__(self, what: str, fix: str) -> None:
        self.what, self.fix = what, fix
        super().__init__(f"{what}; {fix}")


class RepairError(JobError):
    """``job repair`` cannot go on: ``subject`` (a checkpoint, an output, an argument) at fault."""

    def __init__(self, subject: str, problem: str, fix: str) -> None:
        self.subject, self.problem, self.fix = subject, problem, fix
        super().__init__(f"{subject}: {problem}; {fix}")
