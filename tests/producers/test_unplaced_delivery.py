"""Records Kafka acknowledged without an offset are placed by reading the partition back.

librdkafka reports a retried idempotent send that the broker already had as delivered at
offset -1001; the ledger must still say where the record is, or the verifier cannot find it.
"""

from __future__ import annotations

from producers.kafka import Delivery, Unplaced, place


def _log(records):
    return lambda topic, partition: iter(records[(topic, partition)])


def test_an_unplaced_record_gets_the_offset_of_its_bytes() -> None:
    got: list[Delivery] = []
    log = {("t", 0): [(0, b"k", b"a"), (1, b"k", b"b"), (2, b"k", b"c")]}
    place([Unplaced("t", 0, b"k", b"b", got.append)], _log(log), {("t", 0): {0, 2}})
    assert got == [Delivery("ok", 0, 1)]


def test_identical_bytes_take_the_offset_no_other_row_claims() -> None:
    # a duplicate fault sent the same bytes twice; offset 3 is already in the ledger
    got: list[Delivery] = []
    log = {("t", 1): [(3, b"k", b"same"), (4, b"k", b"x"), (5, b"k", b"same")]}
    place([Unplaced("t", 1, b"k", b"same", got.append)], _log(log), {("t", 1): {3, 4}})
    assert got == [Delivery("ok", 1, 5)]


def test_two_unplaced_copies_get_two_offsets() -> None:
    got: list[Delivery] = []
    log = {("t", 0): [(7, b"k", b"v"), (8, b"k", b"v")]}
    place([Unplaced("t", 0, b"k", b"v", got.append), Unplaced("t", 0, b"k", b"v", got.append)], _log(log), {})
    assert sorted(d.offset for d in got) == [7, 8]


def test_a_record_not_in_the_partition_was_lost_whatever_the_report_said() -> None:
    got: list[Delivery] = []
    log = {("t", 2): [(0, b"k", b"other")]}
    place([Unplaced("t", 2, b"k", b"missing", got.append)], _log(log), {})
    assert got[0].outcome == "failed" and got[0].offset is None
    assert "not in t/2" in (got[0].error or "")


def test_a_partition_that_cannot_be_read_back_leaves_the_outcome_open() -> None:
    got: list[Delivery] = []

    def unreadable(topic, partition):
        raise TimeoutError("t/0 not read to offset 9 within 30s")

    place([Unplaced("t", 0, b"k", b"v", got.append)], unreadable, {})
    assert got[0].outcome == "indeterminate" and "could not be read back" in (got[0].error or "")
