"""A streaming query's failure as an error a user can act on: Spark's and Py4J's exception
text read back into the engine's errors (:mod:`job.engine.errors`).

An :class:`~job.engine.errors.IntegrityError` raised in a Spark Python worker reaches the
driver only as text inside a Py4J-wrapped ``StreamingQueryException``; ``KAFKA_DATA_LOSS``
and ``CANNOT_LOAD_STATE_STORE`` are Spark's words. Parsing them is Spark's business, so it
lives here, and the engine keeps only the error classes.
"""

from __future__ import annotations

import re

from job.engine.errors import DataLossError, IntegrityError, JobError, QueryFailedError

__all__ = ["data_loss_error", "query_error"]


_REMOTE_INTEGRITY = re.compile(
    r'IntegrityError: session "(?P<session>[^"]*)" topic (?P<topic>\S+)\[(?P<partition>\d+)\] '
    r"offset (?P<offset>\d+): (?P<detail>.*?); policy strict stops here"
)


# Spark words it with or without the error class in brackets (the executor's
# KafkaIllegalStateException carries no "[KAFKA_DATA_LOSS.X]" prefix), then "Reason:" and a
# sentence, then JVM frames or the SQLSTATE.
_DATA_LOSS = re.compile(
    r"(?:\[KAFKA_DATA_LOSS\.(?P<reason>[A-Z_]+)\]\s*)?Some data may have been lost because they are not "
    r"available in Kafka any more;.*?Reason:\s*(?P<detail>.*?)\s*(?:SQLSTATE:|\n\s*at |$)",
    re.S,
)
# Spark's subclasses and how to recognise each sentence; those that name one partition and two
# offsets capture which is which.
_DATA_LOSS_DETAIL = {
    "START_OFFSET_RESET": r"Starting offset for (?P<tp>\S+) was (?P<start>\d+) but consumer reset to (?P<end>\d+)",
    "COULD_NOT_READ_OFFSET_RANGE": r"offset \[(?P<start>\d+), (?P<end>\d+)\) for topic partition (?P<tp>\S+)",
    "PARTITION_OFFSET_CHANGED": r"Partition (?P<tp>\S+) offset was changed from (?P<start>\d+) to (?P<end>\d+)",
    "ADDED_PARTITION_DOES_NOT_START_FROM_OFFSET_ZERO": r"Added partition \S+ starts from",
    "INITIAL_OFFSET_NOT_FOUND_FOR_PARTITIONS": r"Cannot find initial offsets for partitions",
    "PARTITIONS_DELETED": r"Partitions .* have been deleted",
}


def data_loss_error(query: str, text: str) -> DataLossError | None:
    """The :class:`DataLossError` in a query failure's text, or None when it is not one."""
    match = _DATA_LOSS.search(text)
    if match is None:
        return None
    # the consumer group Spark names is its own, random per query: no help to a reader
    detail = " ".join(match["detail"].split()).split(" with consumer group ")[0].rstrip(".")
    reason = match["reason"] or next((r for r, rx in _DATA_LOSS_DETAIL.items() if re.search(rx, detail)), "UNKNOWN")
    found = re.search(_DATA_LOSS_DETAIL.get(reason, r"$^"), detail)
    if found is None or "tp" not in found.groupdict():
        return DataLossError(query, reason=reason, detail=detail)
    topic, _, part = found["tp"].rpartition("-")
    start, end = int(found["start"]), int(found["end"])
    # an offset changed *down* (the partition's log was lost) loses what was never read; unknown here
    lost = end - start if end > start else None
    return DataLossError(query, reason=reason, detail=detail, topic=topic, partition=int(part), lost=lost)


#: Spark's error when a state store version cannot be loaded, and the file it could not read.
_STATE_STORE = re.compile(r"CANNOT_LOAD_STATE_STORE(?:\.\w+)?.*?(?P<file>\S*state/\S+?)(?: does not exist|[\s,;]|$)", re.S)


def query_error(query: str, exc: BaseException, *, log: object = None) -> JobError:
    """The error a user can act on for a streaming query that died with ``exc``.

    An :class:`IntegrityError` raised in a Spark Python worker reaches the driver as text
    inside a Py4J-wrapped ``StreamingQueryException``; it is rebuilt from that text (so
    the message is the worker's, not a screen of JVM frames). Spark's ``KAFKA_DATA_LOSS``
    becomes a :class:`DataLossError` naming the partition, the offsets and the way on. Anything else becomes a
    :class:`QueryFailedError` with the first line of the cause and where the full trace is.
    """
    text = str(exc)
    lost = data_loss_error(query, text)
    if lost is not None:
        return lost
    match = _REMOTE_INTEGRITY.search(text)
    if match:
        return IntegrityError(
            session=match["session"],
            topic=match["topic"],
            partition=int(match["partition"]),
            offset=int(match["offset"]),
            problem="remote",
            detail=match["detail"],
        )
    if (state := _STATE_STORE.search(text)) is not None:
        return QueryFailedError(
            query,
            f"failed with CANNOT_LOAD_STATE_STORE: the checkpoint's session state lacks a file ({state['file']})",
            "the checkpoint does not hold the state its offsets say it has (batches the file sink skipped write "
            "no state: the metadata trap; or the checkpoint was restored in part), so running again fails the same way; "
            "repair it: python -m job repair --checkpoint <the job's checkpoint> --apply (job/ops/repair.py)",
        )
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    cause = next(
        (line for line in reversed(lines) if re.match(r"^[\w.]*(Error|Exception)\b", line)), lines[0] if lines else repr(exc)
    )
    where = f"the driver log {log}" if log else "the driver log"
    return QueryFailedError(
        query, f"failed with {cause[:500]}", f"{where} has the full trace; fix the cause and run again (the checkpoint resumes)"
    )
