"""The archive check: every record Kafka acknowledged must be in the job's raw archive.

Backfill (:mod:`job.ops.backfill`) rebuilds output from the archive alone once the broker's
copy is gone, so the archive is only as good as it is complete. :func:`check_archive` is
pure (pandas, no Spark): it compares the ledger's delivered records (outcome ``ok``, which
carry the partition and offset Kafka gave them) with the archive's ``(topic, partition,
offset)`` and reports each delivered record that is missing, with its session and seq.
:func:`job.verify.lake_check.verify_archive` reads the archive through Spark and calls it.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

__all__ = ["ArchiveReport", "MissingRecord", "check_archive"]

_KEY = ["topic", "partition", "offset"]


@dataclass(frozen=True)
class MissingRecord:
    """A delivered record the archive does not hold: where Kafka put it, and what it was."""

    topic: str
    partition: int
    offset: int
    session: str
    epoch: int
    seq: int
    kind: str

    def line(self) -> str:
        return f"  missing {self.topic}[{self.partition}]@{self.offset}: session {self.session!r} epoch {self.epoch} seq {self.seq} ({self.kind})"


@dataclass(frozen=True)
class ArchiveReport:
    """``delivered`` records the ledger says Kafka acknowledged, how many of them the
    archive holds (``archived``), the ``missing`` ones, and ``duplicated``: archive
    entries beyond the first for one ``(topic, partition, offset)``. ``ok`` when none is missing."""

    delivered: int
    archived: int
    missing: tuple[MissingRecord, ...]
    duplicated: int

    @property
    def ok(self) -> bool:
        return not self.missing

    def summary(self, limit: int = 20) -> str:
        head = (
            f"archive check: {'OK' if self.ok else 'FAILED'}: {self.archived} of {self.delivered} delivered records "
            f"archived, {len(self.missing)} missing, {self.duplicated} archived more than once"
        )
        lines = [head, *(m.line() for m in self.missing[:limit])]
        if len(self.missing) > limit:
            lines.append(f"  ... and {len(self.missing) - limit} more")
        return "\n".join(lines)


def check_archive(ledger: pd.DataFrame, archived: pd.DataFrame) -> ArchiveReport:
    """Compare ``ledger`` (:func:`producers.ledger.read_ledger`'s frame) with ``archived``
    (columns topic, partition, offset; other columns ignored; any topics)."""
    delivered = ledger[ledger["outcome"] == "ok"][[*_KEY, "session", "epoch", "seq", "kind"]].copy()
    delivered["partition"] = delivered["partition"].astype("int64")
    delivered["offset"] = delivered["offset"].astype("int64")
    seen = archived[_KEY].astype({"topic": str, "partition": "int64", "offset": "int64"})
    duplicated = int(seen.duplicated().sum())
    joined = delivered.merge(seen.drop_duplicates(), on=_KEY, how="left", indicator=True)
    lost = joined[joined["_merge"] == "left_only"].sort_values(_KEY)
    missing = tuple(
        MissingRecord(str(r.topic), int(r.partition), int(r.offset), str(r.session), int(r.epoch), int(r.seq), str(r.kind))
        for r in lost.itertuples(index=False)
    )
    return ArchiveReport(delivered=len(delivered), archived=len(delivered) - len(missing), missing=missing, duplicated=duplicated)
