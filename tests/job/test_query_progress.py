"""job.spark.query_progress: the Kafka offsets a query progress reports, as plain data. Pure, no services."""

from __future__ import annotations

import json

import pytest

from job.spark.query_progress import kafka_offsets, offset_total, reached, records_between, started


def test_an_offset_as_a_json_string_or_a_dict_reads_the_same():
    offsets = {"t": {"0": 10, "1": 4}}
    assert kafka_offsets(json.dumps(offsets)) == offsets
    assert kafka_offsets(offsets) == offsets
    assert kafka_offsets({"t": {0: 10}}) == {"t": {"0": 10}}  # partitions are strings, as in Spark's JSON


@pytest.mark.parametrize("value", ["not json", "", None, 42, "[1, 2]", '"latest"'])
def test_what_is_not_json_or_not_a_mapping_reads_as_no_offsets(value):
    assert kafka_offsets(value) == {}


def test_a_topic_whose_offsets_are_not_kafkas_shape_is_left_out():
    # another source type's offsets (a rate source's, a file source's log position) are not {partition: int}
    assert kafka_offsets({"logOffset": 3}) == {}
    assert kafka_offsets({"t": {"0": "5"}, "u": [1, 2], "v": {"0": 1}}) == {"v": {"0": 1}}


def test_the_end_and_start_offsets_of_several_sources_are_merged():
    progress = {
        "sources": [
            {"startOffset": '{"t1": {"0": 2}}', "endOffset": '{"t1": {"0": 10, "1": 4}}'},
            {"startOffset": {"t2": {"0": 1}}, "endOffset": {"t2": {"0": 3}}},
            {"startOffset": None, "endOffset": "not json"},
            {"description": "a source that reports no offsets"},
        ]
    }
    assert reached(progress) == {"t1": {"0": 10, "1": 4}, "t2": {"0": 3}}
    assert started(progress) == {"t1": {"0": 2}, "t2": {"0": 1}}


@pytest.mark.parametrize("progress", [None, {}, {"sources": None}, {"sources": []}])
def test_no_progress_or_no_sources_reached_nothing(progress):
    assert reached(progress) == {} and started(progress) == {}


def test_the_total_sums_every_partition_of_every_topic():
    assert offset_total({"t1": {"0": 10, "1": 4}, "t2": {"0": 3}}) == 17
    assert offset_total({}) == 0 and offset_total({"t": {}}) == 0


def test_records_between_count_from_zero_where_there_was_no_start_and_never_below_zero():
    start = {"t": {"0": 5, "1": 9}}
    end = {"t": {"0": 8, "1": 4, "2": 6}, "u": {"0": 2}}
    assert records_between(start, end) == 3 + 0 + 6 + 2
    assert records_between({}, end) == offset_total(end)
    assert records_between(end, {}) == 0


def test_a_batch_s_records_are_its_end_minus_its_start():
    progress = {"sources": [{"startOffset": '{"t": {"0": 100, "1": 50}}', "endOffset": '{"t": {"0": 130, "1": 60}}'}]}
    assert records_between(started(progress), reached(progress)) == 40
    first = {"sources": [{"startOffset": None, "endOffset": {"t": {"0": 7}}}]}  # a first batch: no start reported
    assert records_between(started(first), reached(first)) == 7
