"""Reference answers to the chapters' "Your turn" tasks (job/drills/exercises.py checks them).

Not part of the book: a learner who wants the answer reads it here; tests/job/test_exercises.py
feeds each one to its check, which must call it right."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence


def ch02(depth: int = 3) -> tuple[str, int]:
    """Hold late messages for as many places as they can be late; a loss then overflows the window."""
    return ("window", depth)


def ch03(offsets: Iterable[int], commits: Iterable[int]) -> int:
    """The first batch with offsets/<n> and no commits/<n>."""
    done = set(commits)
    return min(b for b in offsets if b not in done)


def ch05(*, trigger_s: float, input_rate: float, outage_s: float, within_s: float) -> int:
    """Throughput needed = input + backlog / time allowed; a cap of that many records per trigger."""
    return math.ceil((input_rate + input_rate * outage_s / within_s) * trigger_s)


def ch07(*, outage_h: float, input_rate: float, throughput: float) -> float:
    """Backlog / (throughput - input rate), in hours."""
    return outage_h * input_rate / (throughput - input_rate)


def ch10(recovery_times_s: Sequence[float], hold_s: float = 0.0) -> float:
    """Longer than the longest recovery and the detector's hold after it, with room to spare."""
    return 1.5 * (max(recovery_times_s) + hold_s)


def ch06(table) -> str:
    """Of the policies that run to the end, lose nothing and apply no bad record, the one that
    sets the fewest records aside (``table``: job.drills.exercises._policy_table)."""
    fit = table[~table.stopped & (table.lost == 0) & (table["bad applied"] == 0)]
    return str(fit["set aside"].idxmin())


def ch01(ledger) -> int:
    """Delivered (outcome ok) and carrying a fault that leaves a bad record."""
    from producers.faults import FAULTS

    bad = [name for name, cls in FAULTS.items() if cls.info.bad_record]
    return int(((ledger["outcome"] == "ok") & ledger["fault"].isin(bad)).sum())


#: Chapter 04: a worker or the master can go (the application keeps executors, or needs no master);
#: Kafka and the object store are in every batch's path; the driver is the application.
CH04 = {"worker-kill": "kept going", "broker-kill": "waited", "minio-pause": "waited", "master-kill": "kept going",
        "driver-kill": "failed, restarted from the checkpoint"}


#: Chapter 08: the repair plans from the lake when the checkpoint is gone.
CH08 = "python -m job repair --checkpoint <checkpoint> --output <lake> --apply"


#: Chapter 09: the earliest replay wins a merge; a wrong release is reprocessed, not merged.
CH09 = ("first", "reprocess")
