"""The job's errors: one root, small subclasses that carry the data a caller needs.

Every message names the subject, the place and the fix. :class:`IntegrityError` crosses
process boundaries (a Spark Python worker raises it, the driver reports it), so it
pickles by value.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = [
    "BaselineError",
    "ConfigError",
    "DataLossError",
    "DrainTimeoutError",
    "IntegrityError",
    "KafkaOffsetsError",
    "JobError",
    "LakeError",
    "QueryFailedError",
    "RepairError",
    "StateError",
    "UsageError",
    "VerifierResourceError",
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
    Rebuilt on the driver from a Spark worker's message
    (:func:`~job.spark.errors.query_error`), ``problem`` is ``remote``: the worker's
    traceback carries only the message.
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


class ConfigError(JobError):
    """A job setting that cannot work; raised before any Spark starts."""

    def __init__(self, field_name: str, value: object, fix: str) -> None:
        self.field, self.value, self.fix = field_name, value, fix
        super().__init__(f"job config {field_name}={value!r}: {fix}")


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


class KafkaOffsetsError(JobError):
    """Kafka did not say where its topics end (the job's drain and its watchdog ask)."""

    def __init__(self, bootstrap: str, problem: str, fix: str) -> None:
        self.bootstrap, self.problem, self.fix = bootstrap, problem, fix
        super().__init__(f"Kafka at {bootstrap}: {problem}; {fix}")


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
            f"streaming query {query} still had {left} of {total} records to process after {timeout_s:.0f}s of draining; {why}"
        )


class LakeError(JobError):
    """A lake root the job cannot use: it holds no job output, or output in an older layout
    that is refused (docs/lake-layout.md)."""

    def __init__(self, lake: str, problem: str, fix: str) -> None:
        self.lake, self.problem, self.fix = lake, problem, fix
        super().__init__(f"lake {lake}: {problem}; {fix}")


class VerifierResourceError(JobError):
    """The verifier's Spark ran out of something it needs (its driver's heap), or could not start
    with what it was given; ``fix`` says how to give it more."""

    def __init__(self, problem: str, fix: str) -> None:
        self.problem, self.fix = problem, fix
        super().__init__(f"verify: {problem}; {fix}")


class DataLossError(JobError):
    """A query stopped because Kafka no longer has records its checkpoint says are next
    (``failOnDataLoss=true``): retention deleted them, or the partition lost its log.

    ``reason`` is Spark's subclass of ``KAFKA_DATA_LOSS`` (e.g. ``START_OFFSET_RESET``),
    ``detail`` Spark's own sentence about it; ``topic``/``partition`` (None when Spark
    named several) and ``lost`` (records, None when it cannot be told) where it was.
    """

    exit_status = 1

    def __init__(
        self,
        query: str,
        *,
        reason: str,
        detail: str,
        topic: str | None = None,
        partition: int | None = None,
        lost: int | None = None,
        deleted: Sequence[tuple[str, int]] | None = None,
    ) -> None:
        self.query, self.reason, self.detail = query, reason, detail
        self.topic, self.partition, self.lost = topic, partition, lost
        #: What Kafka deleted, compared with the checkpoint after the stop: (``topic[p] offsets
        #: a..b (n records)``, n) per partition; None where it could not be asked.
        self.deleted = list(deleted) if deleted else None
        if self.deleted:
            total = sum(n for _, n in self.deleted)
            what = (
                f"{total} records that the checkpoint says come next: {'; '.join(line for line, _ in self.deleted)} "
                f"(the checkpoint's next offsets against Kafka's log start offsets; Spark stopped at "
                f"KAFKA_DATA_LOSS.{reason}: {detail})"
            )
        else:
            where = f" from {topic}[{partition}]" if topic is not None else ""
            count = f"{lost} records" if lost is not None else "records"
            what = (
                f"{count}{where} that the checkpoint says come next (KAFKA_DATA_LOSS.{reason}: {detail}; Spark "
                f"names only the first range it failed to fetch)"
            )
        super().__init__(
            f"streaming query {query} stopped: Kafka no longer has {what}; retention deleted them while the job was "
            f"down, or the broker lost the partition's log. Either restore them to Kafka and run again, or accept the "
            f"loss: run with --no-fail-on-data-loss (the job skips to the oldest record Kafka has; each session that "
            f"lost records is quarantined until its next snapshot) and check the lake with the verifier"
        )

    def naming(self, deleted: Sequence[tuple[str, int]]) -> DataLossError:
        """The same stop, its message naming what Kafka deleted (``deleted``: line and count per partition)."""
        return DataLossError(
            self.query,
            reason=self.reason,
            detail=self.detail,
            topic=self.topic,
            partition=self.partition,
            lost=self.lost,
            deleted=deleted,
        )


class SinkAheadError(JobError):
    """The output's sink log holds batches the checkpoint never planned: the metadata trap.

    The file sink skips every batch whose id its ``_spark_metadata`` log already has, so a job
    started there would read, apply and commit those batches and write none of them
    (job/ops/repair.py; chapter 08)."""

    def __init__(self, sink: str, checkpoint: str, log: tuple[int, int], planned: int | None, fix: str) -> None:
        self.sink, self.checkpoint, self.log, self.planned = sink, checkpoint, log, planned
        mine = f"batches 0..{planned}" if planned is not None else "no batch"
        super().__init__(
            f"the metadata trap: the output's sink log {sink.rstrip('/')}/_spark_metadata has batches {log[0]}..{log[1]}, "
            f"but checkpoint {checkpoint} has {mine}; the sink would skip the restarted job's batches up to {log[1]} "
            f"and lose their rows without an error. {fix}"
        )


class RepairError(JobError):
    """``job repair`` cannot go on: ``subject`` (a checkpoint, an output, an argument) at fault."""

    def __init__(self, subject: str, problem: str, fix: str) -> None:
        self.subject, self.problem, self.fix = subject, problem, fix
        super().__init__(f"{subject}: {problem}; {fix}")
