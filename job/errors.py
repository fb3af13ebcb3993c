"""The job's errors: one root, small subclasses that carry the data a caller needs.

Every message names the subject, the place and the fix. :class:`IntegrityError` crosses
process boundaries (a Spark Python worker raises it, the driver reports it), so it
pickles by value.
"""

from __future__ import annotations

import re

__all__ = [
    "BaselineError",
    "DrainTimeoutError",
    "IntegrityError",
    "JobError",
    "LakeError",
    "QueryFailedError",
    "RepairError",
    "StateError",
    "UsageError",
    "query_error",
]


class JobError(Exception):
    """Root of every error the ``job`` package raises on purpose.

    ``exit_status`` is what a command line exits with: 2 for input or an environment it
    cannot work with (the default), 1 for a check that ran and failed.
    """

    exit_status = 2


class IntegrityError(JobError):
    """A session broke the stream's integrity under policy ``strict``.

    ``problem`` is a quarantine reason (``gap``, ``duplicate``, ``stale-epoch``,
    ``orphan``, ``broken-session``, ``key-mismatch``, ``missing-key`` or a
    :class:`~producers.errors.ContractError` reason) or ``divergence``; ``detail`` says
    what was seen. The message reads
    ``session "s42" topic collection-site-3[1] offset 981: seq 17 after 15 (gap of 1)``.
    Rebuilt on the driver from a Spark worker's message (:func:`query_error`), ``problem``
    is ``remote``: the worker's traceback carries only the message.
    """

    exit_status = 1

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


class QueryFailedError(JobError):
    """A streaming query stopped with an error, or was stopped, before it was done."""

    exit_status = 1

    def __init__(self, query: str, cause: str, fix: str) -> None:
        self.query, self.cause, self.fix = query, cause, fix
        super().__init__(f"streaming query {query}: {cause}; {fix}")


class DrainTimeoutError(JobError):
    """A drain did not see the queries reach Kafka's end offsets in time."""

    exit_status = 1

    def __init__(self, query: str, left: int, total: int, timeout_s: float, *, executors: int | None = None) -> None:
        self.query, self.left, self.total, self.timeout_s = query, left, total, timeout_s
        self.executors = executors
        if executors == 0:
            why = (
                "its application has no executors: the standalone cluster's cores are held by other applications "
                "(a notebook's or a test's SparkSession, another job); stop one of them, or give the workers more "
                "cores (OSL_SPARK_WORKER_CORES), and look at the running applications on the Spark master's UI"
            )
        else:
            why = (
                "it is alive but slower than the wait allows: wait longer (drain's timeout_s), lower the input "
                "rate, or look at its batches in the Spark UI and the driver log"
            )
        super().__init__(
            f"streaming query {query} still had {left} of {total} records to process after {timeout_s:.0f}s of "
            f"draining; {why}"
        )


class LakeError(JobError):
    """A lake root that holds no job output."""

    def __init__(self, lake: str, problem: str, fix: str) -> None:
        self.lake, self.problem, self.fix = lake, problem, fix
        super().__init__(f"lake {lake}: {problem}; {fix}")


_REMOTE_INTEGRITY = re.compile(
    r'IntegrityError: session "(?P<session>[^"]*)" topic (?P<topic>\S+)\[(?P<partition>\d+)\] '
    r"offset (?P<offset>\d+): (?P<detail>.*?); policy strict stops here"
)


def query_error(query: str, exc: BaseException, *, log: object = None) -> JobError:
    """The error a user can act on for a streaming query that died with ``exc``.

    An :class:`IntegrityError` raised in a Spark Python worker reaches the driver as text
    inside a Py4J-wrapped ``StreamingQueryException``; it is rebuilt from that text (so
    the message is the worker's, not a screen of JVM frames). Anything else becomes a
    :class:`QueryFailedError` with the first line of the cause and where the full trace is.
    """
    text = str(exc)
    match = _REMOTE_INTEGRITY.search(text)
    if match:
        return IntegrityError(
            session=match["session"], topic=match["topic"], partition=int(match["partition"]),
            offset=int(match["offset"]), problem="remote", detail=match["detail"],
        )  # fmt: skip
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = next((line for line in reversed(lines) if re.match(r"^[\w.]*(Error|Exception)\b", line)), lines[0] if lines else repr(exc))
    where = f"the driver log {log}" if log else "the driver log"
    return QueryFailedError(query, f"failed with {cause[:500]}", f"{where} has the full trace; fix the cause and run again (the checkpoint resumes)")


class RepairError(JobError):
    """``job repair`` cannot go on: ``subject`` (a checkpoint, an output, an argument) at fault."""

    def __init__(self, subject: str, problem: str, fix: str) -> None:
        self.subject, self.problem, self.fix = subject, problem, fix
        super().__init__(f"{subject}: {problem}; {fix}")
