"""Kafka data loss: which records the broker gave up before the job read them, and how long
retention must be for that not to happen.

Kafka keeps a partition's records from its *log start offset* (the low watermark) to its
end (the high watermark). Two things move the start past records a stopped job has not
read yet:

- **retention**: a topic's ``retention.ms`` deletes whole segments whose newest record is
  older than that (checked every ``log.retention.check.interval.ms``); the log start jumps
  to the oldest segment left. ``AdminClient.delete_records`` moves it the same way, by hand.
- **storage loss**: a partition's log directory is gone; the broker starts that partition
  again, empty, so its *end* offset drops below what the checkpoint already read.

The job's checkpoint says up to where each query read (``offsets/<n>`` of its last
committed batch). :func:`unread_deleted` compares that with Kafka's log start offsets and
returns the deleted, unread ranges as :class:`DeletedRange` (the verifier takes them:
``job.verify.compare.check(..., deleted=...)`` allows exactly those records as ``lost`` and the
resync each loss causes up to its session's next snapshot). :func:`rewound_partitions`
finds the partitions whose end went backwards, the ones ``python -m job repair
--partitions`` must repair. :func:`retention_table` does the sources' arithmetic: time to
detect plus time to fix must stay under retention. Causing a loss on purpose (chapter 07's
drill) is :mod:`job.drills.kafka_loss`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from job.engine.errors import JobError
from job.verify.compare import KAFKA_DELETED, DeletedRange

__all__ = [
    "KAFKA_DELETED",
    "DeletedRange",
    "RetentionError",
    "Rewound",
    "admin_client",
    "committed_offsets",
    "retention_table",
    "rewound_partitions",
    "session_losses",
    "unread_deleted",
    "watermarks",
]

Partition = tuple[str, int]


class RetentionError(JobError):
    """Kafka did not delete (or could not be told to keep) what a data-loss run asked for."""

    def __init__(self, subject: str, problem: str, fix: str) -> None:
        self.subject, self.problem, self.fix = subject, problem, fix
        super().__init__(f"{subject}: {problem}; {fix}")


@dataclass(frozen=True, kw_only=True, order=True)
class Rewound:
    """A partition whose end offset is now below what the job's checkpoint read: its log was
    lost (or the topic recreated). ``read`` is the checkpoint's offset, ``end`` Kafka's now."""

    topic: str
    partition: int
    read: int
    end: int

    @property
    def spec(self) -> str:
        """As ``python -m job repair --partitions`` takes it."""
        return f"{self.topic}:{self.partition}"


# -- pure comparisons ------------------------------------------------------------------------


def unread_deleted(read: Mapping[Partition, int], low: Mapping[Partition, int]) -> list[DeletedRange]:
    """The ranges Kafka deleted that the job had not read: per partition of ``read`` (the
    checkpoint's next offset to read), ``[read, low)`` where the log start ``low`` is past it.

    A partition Kafka no longer has at all is not here (:func:`rewound_partitions` and the
    query's own error name it); partitions the checkpoint never read are not either.
    """
    out = [
        DeletedRange(topic=t, partition=p, start=int(r), end=int(low[(t, p)]))
        for (t, p), r in read.items()
        if (t, p) in low and low[(t, p)] > r
    ]
    return sorted(out)


def rewound_partitions(read: Mapping[Partition, int], high: Mapping[Partition, int]) -> list[Rewound]:
    """Partitions whose end offset (``high``) is below what the checkpoint read (``read``),
    and those Kafka does not list at all (end taken as 0): the partitions that lost their log."""
    out = [Rewound(topic=t, partition=p, read=int(r), end=int(high.get((t, p), 0))) for (t, p), r in read.items()]
    return sorted(x for x in out if x.end < x.read)


def committed_offsets(*query_checkpoints: str | Path) -> dict[Partition, int]:
    """Per partition, the offset up to which the given queries' last committed batches read
    (the largest, when several queries read the same partition: a wait for Kafka to delete
    past it then covers them all)."""
    from job.spark.checkpoints import checkpoint_end_offsets

    out: dict[Partition, int] = {}
    for ckpt in query_checkpoints:
        for key, offset in checkpoint_end_offsets(Path(ckpt)).items():
            out[key] = max(offset, out.get(key, offset))
    return out


# -- Kafka -----------------------------------------------------------------------------------


def admin_client(bootstrap: str):
    """A Kafka AdminClient for ``bootstrap`` (keep it until its futures are done)."""
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "log_level": 4})


def watermarks(bootstrap: str, topics: Iterable[str], *, timeout_s: float = 10.0) -> dict[Partition, tuple[int, int]]:
    """``(log start, end)`` of every partition of ``topics`` as Kafka reports them now."""
    from confluent_kafka import KafkaException

    from producers.kafka import partition_watermarks

    wanted = set(topics)
    try:
        return partition_watermarks(bootstrap, wanted.__contains__, timeout_s=timeout_s)
    except KafkaException as exc:
        raise RetentionError(
            f"Kafka at {bootstrap}",
            f"cannot read the partitions' offsets ({exc})",
            "check that the broker answers (python -m sandbox status)",
        ) from None


# -- what the loss did to the sessions -------------------------------------------------------


def session_losses(report, ledger: pd.DataFrame, deleted: Sequence[DeletedRange]) -> pd.DataFrame:
    """One row per session that lost records to Kafka, from the verifier's ``report`` (run
    with ``deleted``) and the ledger: where its records were lost, how many of its later
    updates were quarantined until the session resynchronised, the seq of the snapshot that
    did it, and ``whole_again``: such a snapshot came and the verifier found nothing
    wrong with the session (its final table is the intended one).
    """
    columns = ["session", "partition", "lost", "lost_seqs", "quarantined", "resync_seq", "whole_again"]
    findings = [f for f in report.anomalies if f.fault == KAFKA_DELETED]
    if not findings:
        return pd.DataFrame(columns=columns)
    bad = {f.session for f in report.anomalies if not f.allowed}
    frame = pd.DataFrame(
        [
            {
                "session": f.session,
                "kind": f.kind,
                "seq": f.seq,
                "epoch": f.epoch,
                "where": f"{f.topic}[{f.partition}]" if f.topic else None,
            }
            for f in findings
        ]
    )
    ok = ledger[ledger["outcome"] == "ok"]
    gone = {
        (r.topic, int(r.partition), int(r.offset))
        for r in ok.itertuples(index=False)
        if any(d.contains(r.topic, int(r.partition), int(r.offset)) for d in deleted)
    }
    rows = []
    for session, group in frame.groupby("session", sort=True):
        lost = group[group["kind"] == "lost"]
        last_lost = int(lost["seq"].max()) if len(lost) else None
        mine = ok[(ok["session"] == session) & (ok["kind"] == "snapshot")]
        resync = [
            int(r.seq)
            for r in mine.itertuples(index=False)
            if last_lost is not None and int(r.seq) > last_lost and (r.topic, int(r.partition), int(r.offset)) not in gone
        ]
        rows.append(
            {
                "session": session,
                "partition": lost["where"].dropna().iloc[0] if len(lost) else None,
                "lost": len(lost),
                "lost_seqs": f"{int(lost['seq'].min())}..{last_lost}" if len(lost) else "",
                "quarantined": int((group["kind"] == "quarantined").sum()),
                "resync_seq": min(resync) if resync else None,
                "whole_again": bool(resync) and session not in bad,
            }
        )
    return pd.DataFrame(rows, columns=columns)


# -- the sources' arithmetic -----------------------------------------------------------------


def retention_table(
    scenarios: Mapping[str, tuple[float, float]],
    retentions_h: Sequence[float],
    *,
    input_rate: float,
    throughput: float,
) -> pd.DataFrame:
    """For each outage scenario ``name -> (hours to detect, hours to fix)`` and each retention
    in hours: the margin ``retention - detect - fix`` (negative: the oldest unread records
    are deleted before the job is back, so data is lost), the backlog the restarted job
    finds at ``input_rate`` records/s, and the hours it needs to catch up at ``throughput``
    records/s while input keeps arriving (infinite when it cannot keep up).

    The oldest unread record is the first the restarted job reads, so ``detect + fix <
    retention`` is the whole condition; catching up only needs ``throughput > input_rate``.
    """
    rows = []
    for name, (detect_h, fix_h) in scenarios.items():
        down_h = detect_h + fix_h
        backlog = input_rate * down_h * 3600
        spare = throughput - input_rate
        catch_up_h = backlog / spare / 3600 if spare > 0 else float("inf")
        for retention in retentions_h:
            margin = retention - down_h
            rows.append(
                {
                    "scenario": name,
                    "detect_h": detect_h,
                    "fix_h": fix_h,
                    "retention_h": retention,
                    "margin_h": margin,
                    "backlog_records": int(backlog),
                    "catch_up_h": catch_up_h,
                    "data_lost": margin <= 0,
                }
            )
    return pd.DataFrame(rows)
