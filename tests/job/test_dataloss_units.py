"""Kafka data loss without services: which offsets the broker deleted before the job read them,
which partitions went backwards, how the verifier judges a deleted range, the data-loss error
the job prints, and the retention arithmetic."""

from __future__ import annotations

import pytest

from job.engine.errors import DataLossError, QueryFailedError
from job.engine.session import step
from job.ops.dataloss import (
    KAFKA_DELETED,
    DeletedRange,
    Rewound,
    retention_table,
    rewound_partitions,
    session_losses,
    unread_deleted,
)
from job.spark.errors import query_error
from job.verify.compare import check, output_frames
from tests.job.test_verify_check import BASE, TOPIC, arrivals, ledger

T = "nb07-x-site-0"


def test_unread_deleted_is_the_range_between_the_checkpoint_and_the_log_start():
    read = {(T, 0): 100, (T, 1): 40, (T, 2): 7}
    low = {(T, 0): 250, (T, 1): 40, (T, 2): 0}
    assert unread_deleted(read, low) == [DeletedRange(topic=T, partition=0, start=100, end=250)]
    assert unread_deleted(read, low)[0].count == 150


def test_a_partition_kafka_does_not_list_or_the_checkpoint_never_read_is_no_deleted_range():
    assert unread_deleted({(T, 0): 5}, {}) == []
    assert unread_deleted({}, {(T, 0): 99}) == []


def test_a_partition_whose_end_went_below_the_checkpoint_is_rewound():
    read = {(T, 0): 500, (T, 1): 300, (T, 2): 10}
    high = {(T, 0): 0, (T, 1): 320, (T, 2): 10}
    assert rewound_partitions(read, high) == [Rewound(topic=T, partition=0, read=500, end=0)]
    assert rewound_partitions(read, high)[0].spec == f"{T}:0"
    # a partition Kafka no longer lists at all lost everything
    assert rewound_partitions({(T, 3): 4}, high) == [Rewound(topic=T, partition=3, read=4, end=0)]


# -- the verifier and a deleted range ----------------------------------------------------------
# BASE: 0 snapshot, 1-3 upserts, 4 snapshot, 5 delete, 6 end, at offsets 0..6 of TOPIC[0].


def _run_without(deleted: DeletedRange):
    df = ledger(*BASE)
    seen = [x for x in arrivals(df) if not deleted.contains(x.topic, x.partition, x.offset)]
    s = step(None, seen, policy="resync")
    return df, output_frames(s.changes, s.quarantine, [s.status])


def test_records_kafka_deleted_are_allowed_as_lost_and_the_next_snapshot_makes_the_session_whole():
    gone = DeletedRange(topic=TOPIC, partition=0, start=1, end=3)  # upserts seq 1 and 2
    df, frames = _run_without(gone)
    assert not check(df, *frames, policy="resync").ok  # without the ranges: a loss nothing explains
    report = check(df, *frames, policy="resync", deleted=[gone])
    assert report.ok, report.summary()
    lost = [(f.seq, f.offset, f.fault) for f in report.anomalies if f.kind == "lost"]
    assert lost == [(1, 1, KAFKA_DELETED), (2, 2, KAFKA_DELETED)]
    assert all("Kafka deleted" in f.detail for f in report.anomalies if f.kind == "lost")
    # seq 3 came after a gap: quarantined until the snapshot at seq 4
    assert [(f.kind, f.seq) for f in report.anomalies if f.kind == "quarantined"] == [("quarantined", 3)]
    losses = session_losses(report, df, [gone])
    assert losses.to_dict("records") == [
        {
            "session": BASE[0].session,
            "partition": f"{TOPIC}[0]",
            "lost": 2,
            "lost_seqs": "1..2",
            "quarantined": 1,
            "resync_seq": 4,
            "whole_again": True,
        }
    ]


def test_a_loss_outside_the_deleted_range_still_fails():
    gone = DeletedRange(topic=TOPIC, partition=0, start=1, end=3)
    df, (rows, quarantine, sessions) = _run_without(gone)
    rows = rows[rows["seq"] != 5]  # the delete at seq 5 vanished from the output as well
    report = check(df, rows, quarantine, sessions, policy="resync", deleted=[gone])
    assert not report.ok
    assert [(f.kind, f.seq) for f in report.disallowed if f.kind == "lost"] == [("lost", 5)]


def test_a_deleted_snapshot_is_no_resync_point():
    gone = DeletedRange(topic=TOPIC, partition=0, start=3, end=5)  # seq 3 and the snapshot at seq 4
    df, frames = _run_without(gone)
    report = check(df, *frames, policy="resync", deleted=[gone])
    assert report.ok, report.summary()
    losses = session_losses(report, df, [gone])
    assert losses.loc[0, "lost_seqs"] == "3..4" and losses.loc[0, "resync_seq"] is None
    assert not losses.loc[0, "whole_again"]


# -- the error the job prints ----------------------------------------------------------------------

#: A StreamingQueryException's text when the Kafka source finds its next offset deleted (shape
#: as Spark 4.2 words KAFKA_DATA_LOSS, JVM frames trimmed).
RETENTION_FAILURE = """[STREAM_FAILED] Query ordered-sessions-sessions [id = 5d1e, runId = 77aa] terminated with exception: \
Job aborted due to stage failure: Task 1 in stage 0.0 failed 4 times, most recent failure: Lost task 1.3 in stage 0.0 \
(TID 7) (127.0.0.1 executor 0): org.apache.spark.SparkIllegalStateException: [KAFKA_DATA_LOSS.START_OFFSET_RESET] \
Some data may have been lost because they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason:
Starting offset for nb07-1a2b3c-warehouse-0-2 was 812 but consumer reset to 1290. SQLSTATE: 22000
\tat org.apache.spark.sql.kafka010.KafkaExceptions$.startOffsetReset(KafkaExceptions.scala:95)
"""


#: The same as the executor throws it (captured from chapter 07's run on Spark 4.2: no error
#: class in brackets, the consumer group named, JVM frames after it).
EXECUTOR_FAILURE = """org.apache.spark.sql.kafka010.KafkaIllegalStateException: Some data may have been lost because \
they are not available in Kafka any more;
either the data was aged out by Kafka or the topic may have been deleted before all the data in the
topic was processed.
If you don't want your streaming query to fail on such cases, set the source option failOnDataLoss to false.
Reason: Could not read records in offset [2154, 2249) for topic partition nb07-18b607-weather-1-0
with consumer group spark-kafka-source-33239379-22c3-4989-a9e6-e560f3d51196-909488765-executor.
\tat org.apache.spark.sql.kafka010.KafkaExceptions$.couldNotReadOffsetRange(KafkaExceptions.scala:94)
\tat org.apache.spark.sql.kafka010.consumer.KafkaDataConsumer.throwOnDataLoss(KafkaDataConsumer.scala:766)
"""


def test_the_executors_unbracketed_data_loss_is_recognised_by_its_sentence():
    error = query_error("ordered-sessions-sessions", Exception(EXECUTOR_FAILURE))
    assert isinstance(error, DataLossError)
    assert (error.reason, error.topic, error.partition, error.lost) == (
        "COULD_NOT_READ_OFFSET_RANGE",
        "nb07-18b607-weather-1",
        0,
        95,
    )
    message = str(error)
    assert "consumer group" not in message and "\tat " not in message and "\n" not in message
    assert "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE" in message and "[2154, 2249)" in message


def test_kafka_data_loss_is_one_paragraph_naming_query_partition_offsets_and_fix():
    error = query_error("ordered-sessions-sessions", Exception(RETENTION_FAILURE))
    assert isinstance(error, DataLossError) and error.exit_status == 1
    assert (error.reason, error.topic, error.partition, error.lost) == ("START_OFFSET_RESET", "nb07-1a2b3c-warehouse-0", 2, 478)
    message = str(error)
    assert "\n" not in message and "\tat " not in message
    assert "ordered-sessions-sessions" in message and "nb07-1a2b3c-warehouse-0[2]" in message
    assert "was 812 but consumer reset to 1290" in message and "478 records" in message
    assert "--no-fail-on-data-loss" in message


@pytest.mark.parametrize(
    ("reason", "detail", "partition", "lost"),
    [
        (
            "COULD_NOT_READ_OFFSET_RANGE",
            "Could not read records in offset [10, 30) for topic partition t-x-1 with consumer group g.",
            1,
            20,
        ),
        ("PARTITION_OFFSET_CHANGED", "Partition t-x-0 offset was changed from 500 to 0. This could be either 1) ...", 0, None),
        ("PARTITIONS_DELETED", "Partitions [t-x-0] have been deleted.", None, None),
    ],
)
def test_every_kafka_data_loss_reason_becomes_a_data_loss_error(reason, detail, partition, lost):
    text = (
        f"terminated with exception: [KAFKA_DATA_LOSS.{reason}] Some data may have been lost because they are not "
        f"available in Kafka any more;\n(...)\nReason:\n{detail} SQLSTATE: 22000"
    )
    error = query_error("q", Exception(text))
    assert isinstance(error, DataLossError)
    assert (error.reason, error.partition, error.lost) == (reason, partition, lost)


def test_other_failures_are_not_taken_for_data_loss():
    assert isinstance(query_error("q", Exception("org.apache.kafka.common.errors.TimeoutException: x")), QueryFailedError)


# -- retention arithmetic ---------------------------------------------------------------------------


def test_a_weekend_outage_outlasts_a_day_of_retention_but_not_three():
    table = retention_table({"weekend": (62.0, 4.0)}, [24, 72, 168], input_rate=100.0, throughput=400.0)
    lost = dict(zip(table["retention_h"], table["data_lost"], strict=True))
    assert lost == {24: True, 72: False, 168: False}
    row = table.iloc[1]
    assert row["margin_h"] == pytest.approx(6.0)
    assert row["backlog_records"] == 100 * 66 * 3600
    assert row["catch_up_h"] == pytest.approx(66 * 100 / 300)


def test_a_job_slower_than_its_input_never_catches_up():
    table = retention_table({"night": (8.0, 1.0)}, [72], input_rate=100.0, throughput=80.0)
    assert table.loc[0, "catch_up_h"] == float("inf")


def test_query_run_reads_the_last_start_of_a_query_from_its_events():
    from job.drills.kafka_loss import query_run
    from job.ops.watch.rules import BatchCompleted, QueryStarted, QueryTerminated

    q = "ordered-sessions-sessions"
    events = [
        QueryStarted(query=q, at=100.0),
        BatchCompleted(query=q, at=110.0, batch_id=0, input_rows=500),
        BatchCompleted(query="ordered-sessions-raw", at=111.0, batch_id=0, input_rows=500),
        QueryTerminated(query=q, at=120.0),
        QueryStarted(query=q, at=200.0),
        QueryTerminated(query=q, at=204.0, error="KAFKA_DATA_LOSS"),
    ]
    second = query_run(events, q)
    assert (second.rows, second.batches, second.seconds, second.error) == (0, 0, 4.0, "KAFKA_DATA_LOSS")
    first = query_run(events[:4], q)
    assert (first.rows, first.seconds, first.records_per_s) == (500, 20.0, 25.0)


def test_processing_throughput_counts_only_the_time_batches_ran():
    from job.drills.kafka_loss import query_run
    from job.ops.watch.rules import BatchCompleted, QueryStarted, QueryTerminated

    q = "ordered-sessions-sessions"
    events = [
        QueryStarted(query=q, at=100.0),  # 20 s of start-up before the first trigger
        BatchCompleted(query=q, at=124.0, batch_id=0, input_rows=800, started_at=120.0),
        BatchCompleted(query=q, at=132.0, batch_id=1, input_rows=400, started_at=130.0),
        QueryTerminated(query=q, at=133.0),
    ]
    run = query_run(events, q)
    assert (run.busy_s, run.processing_records_per_s) == (6.0, 200.0)
    assert (run.steady_rows, run.steady_busy_s, run.steady_records_per_s) == (400, 2.0, 200.0)  # the first batch left out
    assert run.records_per_s == 1200 / 33.0  # start-up and idle time included
    untimed = query_run([QueryStarted(query=q, at=0.0), BatchCompleted(query=q, at=5.0, batch_id=0, input_rows=9)], q)
    assert untimed.processing_records_per_s is None  # no trigger time: no figure rather than a wrong one
    assert untimed.steady_records_per_s is None


def test_the_data_loss_stop_names_every_range_kafka_deleted_not_the_first_fetch_spark_failed():
    spark_says = DataLossError(
        "q",
        reason="COULD_NOT_READ_OFFSET_RANGE",
        detail="Could not read records in offset [1665, 1998) for topic partition w-1-0",
        topic="w-1",
        partition=0,
        lost=333,
    )
    assert "333 records from w-1[0]" in str(spark_says) and "first range it failed to fetch" in str(spark_says)
    named = spark_says.naming(
        [("w-0[1] offsets 1665..2575 (911 records)", 911), ("w-1[0] offsets 1665..2677 (1013 records)", 1013)]
    )
    text = str(named)
    assert (
        "Kafka no longer has 1924 records that the checkpoint says come next: w-0[1] offsets 1665..2575 (911 records); "
        "w-1[0] offsets 1665..2677 (1013 records)" in text
    )
    assert "333" not in text.split("Spark stopped at")[0]  # Spark's first range is kept only as its own words
    assert "KAFKA_DATA_LOSS.COULD_NOT_READ_OFFSET_RANGE" in text and "--no-fail-on-data-loss" in text
    assert named.exit_status == spark_says.exit_status == 1
