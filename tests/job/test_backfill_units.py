"""Backfill's pure parts: time bounds, the warm-up from a snapshot, the merge rule at range
boundaries, the archive check, and the CLI's refusals before any Spark starts."""

from __future__ import annotations

import pandas as pd
import pytest

from job.cli import main
from job.ops.backfill import BackfillError, TimeRange, _replay_session, keep_first_source, parse_time, resolve_range
from job.verify.archive_check import check_archive
from job.verify.compare import check
from producers.contract import encode
from tests.job.test_verify_check import BASE, TOPIC, ledger
from tests.streams import SID

# -- time bounds -------------------------------------------------------------------------------


def test_iso_times_with_and_without_zone_are_utc_epoch_milliseconds():
    assert parse_time("2026-11-22T21:00:00Z") == 1_795_381_200_000
    assert parse_time("2026-11-22T21:00:00") == 1_795_381_200_000
    assert parse_time("2026-11-22T22:00:00+01:00") == 1_795_381_200_000
    assert parse_time("1795381200123") == 1_795_381_200_123
    assert parse_time("earliest") == "earliest" and parse_time(" latest ") == "latest"


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "12", ""])
def test_unparseable_time_names_the_flag_and_the_accepted_forms(text):
    with pytest.raises(BackfillError) as info:
        parse_time(text, flag="--to")
    assert "--to" in str(info.value) and "ISO 8601" in str(info.value)


@pytest.mark.parametrize(("start", "end"), [(10, 10), (11, 10)])
def test_range_must_start_before_it_ends(start, end):
    with pytest.raises(BackfillError, match="--from must be before --to"):
        TimeRange(start, end)


def test_earliest_and_latest_resolve_to_the_archive_bounds_with_latest_included():
    span = resolve_range("earliest", "latest", (100, 200))
    assert (span.start_ms, span.end_ms) == (100, 201)
    assert resolve_range(150, "latest", (100, 200)).start_ms == 150
    with pytest.raises(BackfillError, match="empty archive"):
        resolve_range("earliest", 500, None)


# -- replaying a range, and merging ranges -------------------------------------------------------
# BASE: 0 snapshot  1-3 upserts  4 snapshot  5 delete a  6 end; offsets = seqs, timestamps = seqs.


def _archive(warm_from: int | None, offsets: range) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "session_key": SID,
            "key_missing": False,
            "value": [encode(BASE[o]) for o in offsets],
            "topic": TOPIC,
            "partition": 0,
            "offset": list(offsets),
            "kafka_ts_ms": list(offsets),
            "warm_from": warm_from,
        }
    )


def _replay(warm_from: int | None, offsets: range) -> pd.DataFrame:
    return _replay_session("v1", "resync", 8, 0)(_archive(warm_from, offsets))


def _outputs(frame: pd.DataFrame) -> tuple[pd.DataFrame, ...]:
    return tuple(frame[frame["output"] == name] for name in ("rows", "quarantine", "sessions"))


def test_a_range_starting_at_a_snapshot_is_primed_so_it_counts_no_false_gap():
    status = _outputs(_replay(4, range(4, 7)))[2].iloc[0]
    assert (status["status"], status["gaps"], status["applied"]) == ("ended", 0, 3)
    # without the priming, a session met first at its snapshot opens there without a gap too
    # (job.engine.session: the snapshot is the whole table), and applies the same records
    unprimed = _outputs(_replay(None, range(4, 7)))[2].iloc[0]
    assert (unprimed["gaps"], unprimed["applied"]) == (0, 3)


def _merged(*frames: pd.DataFrame) -> pd.DataFrame:
    return keep_first_source(pd.concat([f.assign(_rank=i) for i, f in enumerate(frames)], ignore_index=True))


def _row_keys(frame: pd.DataFrame) -> list[tuple]:
    rows = frame[frame["output"] == "rows"]
    return sorted(zip(rows["offset"], rows["row_id"], strict=True))


@pytest.mark.parametrize("first_end", [5, 6], ids=["adjacent", "overlapping"])
def test_two_ranges_merge_into_the_full_replay_without_duplicates_and_verify_clean(first_end):
    # range A is seqs [0, first_end); range B starts at seq 5, warmed up from the snapshot at 4,
    # so the records at offset 4 (and 5, when the ranges overlap) come out of both
    first, second = _replay(None, range(first_end)), _replay(4, range(4, 7))
    assert set(_row_keys(first)) & set(_row_keys(second)), "the ranges must share records for this test to mean anything"
    merged = _merged(first, second)
    assert _row_keys(merged) == _row_keys(_replay(None, range(7)))
    rows, quarantine, sessions = _outputs(merged)
    assert len(sessions) == 2  # one status per range: the verifier reads the latest
    report = check(ledger(*BASE), rows, quarantine, sessions, policy="resync")
    assert report.ok, report.summary()
    # concatenating without the rule applies the overlap twice, which the verifier catches
    doubled = pd.concat([first, second], ignore_index=True)
    naive = check(ledger(*BASE), *_outputs(doubled), policy="none")
    assert any(f.kind == "duplicated" for f in naive.anomalies)


def test_the_first_source_wins_a_record_both_hold_even_when_they_disagree():
    live, backfilled = _replay(None, range(7)), _replay(None, range(7))
    backfilled.loc[backfilled["output"] == "rows", "data"] = '{"id":"x","v":99}'
    merged = _merged(live, backfilled)
    assert (merged[merged["output"] == "rows"]["data"] != '{"id":"x","v":99}').all()
    hole = live[~((live["output"] == "rows") & (live["offset"] == 5))]
    refilled = _merged(hole, _replay(4, range(4, 7)))
    assert (5, "a") in _row_keys(refilled)


# -- the archive check ------------------------------------------------------------------------


def test_archive_check_reports_each_delivered_record_missing_from_the_archive():
    sent = ledger(*BASE)
    archived = pd.DataFrame({"topic": TOPIC, "partition": 0, "offset": [0, 1, 2, 2, 4, 5, 6]})
    report = check_archive(sent, archived)
    assert not report.ok
    assert [(m.offset, m.seq, m.kind) for m in report.missing] == [(3, 3, "upsert")]
    assert (report.delivered, report.archived, report.duplicated) == (7, 6, 1)
    assert f"{TOPIC}[0]@3" in report.summary()
    assert check_archive(sent, archived.assign(offset=range(7))).ok


# -- the command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "expect"),
    [
        (["--from", "2026-11-22T10:00:00Z", "--to", "2026-11-22T09:00:00Z"], "--from must be before --to"),
        (["--from", "noon", "--to", "latest"], "time 'noon' at --from"),
        (["--from", "earliest", "--to", "latest", "--switch"], "give --ledger too"),
        (["--from", "earliest", "--to", "latest", "--job-version", "v9"], "choose one of v1"),
    ],
)
def test_backfill_cli_refuses_bad_input_with_exit_2_before_spark_starts(argv, expect, capsys):
    assert main(["backfill", *argv]) == 2
    err = capsys.readouterr().err
    assert expect in err and "Traceback" not in err


def test_a_strict_stop_inside_a_spark_task_is_reported_by_its_integrity_message():
    from job.ops.backfill import _integrity_line

    wrapped = (
        'py4j.protocol.Py4JJavaError: An error occurred\n  File "x.py"\n'
        'job.engine.errors.IntegrityError: session "s1" topic t[0] offset 9: seq 4 after 2 (gap of 1); policy strict stops here\n'
        "\tat org.apache.spark..."
    )
    assert _integrity_line(wrapped) == 'session "s1" topic t[0] offset 9: seq 4 after 2 (gap of 1); policy strict stops here'
    assert _integrity_line("java.io.IOException: disk full") is None
