"""The raw archive on the sandbox: the sink's fourth output (``output=raw``) from the one query;
the second query of docs/decisions/0007 (``raw_in_sink=False``, the bench's alternative) writes
``<lake>/raw``, which the job and the readers refuse as an older version's layout."""

from __future__ import annotations

import uuid

import pytest

from job.engine.errors import LakeError
from job.spark import lake, pipeline
from job.spark.config import job_config
from job.spark.driver_rest import last_stage_tasks
from job.verify.lake_check import verify_archive
from producers.runner import new_run_id
from tests import kafka_runs

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _archived(spark, root: str) -> list[tuple]:
    frame = lake.read_raw(spark, root)
    assert frame is not None, f"no archive found at {root}"
    return sorted(tuple(r) for r in frame.select(*lake.RAW_COLUMNS).collect())


def _produce(settings, tmp_path, seed: int):
    """A short run of 2 sites x 2 sessions on its own topics: (the run, its summary)."""
    run_id = new_run_id()
    run, summary = kafka_runs.produce(
        settings.endpoints().kafka_bootstrap,
        tmp_path / f"ledger-{run_id}",
        sites=2,
        sessions=2,
        rate=200.0,
        duration=2.0,
        snapshot_every=25,
        seed=seed,
        run_id=run_id,
    )
    assert summary.error is None, summary.error
    return run, summary


def test_the_archive_is_the_sinks_fourth_output_and_an_archive_query_s_lake_is_refused(sandbox, spark, tmp_path, capsys):
    settings = sandbox.settings
    bootstrap = settings.endpoints().kafka_bootstrap
    run, summary = _produce(settings, tmp_path, seed=3)

    def config(name: str):
        return job_config(
            settings,
            output=f"s3a://{settings.bucket}/itest/archive-{name}-{uuid.uuid4().hex[:8]}",
            checkpoint=tmp_path / name,
            topic_prefix=run.topic_prefix,
            policy="resync",
            trigger="available-now",
        )

    new, old = config("new"), config("old")
    queries = pipeline.start(spark, new, bootstrap=bootstrap)
    assert [q.name for q in queries] == [f"{new.name}-sessions"], "one query writes the outputs and the archive"
    pipeline.await_all(queries, timeout_s=300)
    # Kafka read once a batch: the archive reads the operator's exchange, it does not scan again
    assert sum(p["numInputRows"] for p in queries[0].recentProgress) == summary.outcomes["ok"]
    queries[0].explain()
    assert "ReusedExchange" in capsys.readouterr().out
    second = pipeline.start(spark, old, bootstrap=bootstrap, raw_in_sink=False)  # the bench's alternative
    assert sorted(q.name for q in second) == [f"{old.name}-raw", f"{old.name}-sessions"]
    pipeline.await_all(second, timeout_s=300)
    for refused in (lambda: pipeline.start(spark, old, bootstrap=bootstrap), lambda: lake.read_raw(spark, old.output)):
        with pytest.raises(LakeError, match=r"/raw is a raw archive written by its own query"):
            refused()

    assert lake.read_raw(spark, new.output + "-nowhere") is None
    assert verify_archive(spark, ledger=run.ledger, lake=new.output).ok
    archived = _archived(spark, new.output)
    assert len(archived) == summary.outcomes["ok"] == len({r[:3] for r in archived}), "every delivered record, once"
    # the archive is input, not output: the readers of the three outputs never see it
    assert lake.read_output(spark, lake.sink_path(new.output), "rows").count() > 0
    assert {r.output for r in spark.read.parquet(lake.sink_path(new.output)).select("output").distinct().collect()} >= {
        "raw",
        "rows",
    }


def test_with_a_file_open_per_output_the_sink_writes_its_rows_without_sorting_them(sandbox, spark, tmp_path):
    """``sink_writers``: the sink's tasks keep a Parquet file open per output folder instead of
    sorting their rows by output first. The archive's tasks (after the operator's two) do
    nothing but write, so their execution memory is the writer's sort buffer, or none."""
    settings = sandbox.settings
    bootstrap = settings.endpoints().kafka_bootstrap
    run, summary = _produce(settings, tmp_path, seed=4)
    peaks, outputs = {}, {}
    for writers in (0, 4):
        cfg = job_config(
            settings,
            output=f"s3a://{settings.bucket}/itest/writers-{writers}-{uuid.uuid4().hex[:8]}",
            checkpoint=tmp_path / f"w{writers}",
            topic_prefix=run.topic_prefix,
            policy="resync",
            trigger="available-now",
            sink_writers=writers,
            name=f"writers-{writers}",
        )
        (query,) = pipeline.start(spark, cfg, bootstrap=bootstrap)
        pipeline.await_all([query], timeout_s=300)
        batch = next(p["batchId"] for p in query.recentProgress if p["numInputRows"])
        tasks = last_stage_tasks(spark, query.name, str(query.id))[batch]
        assert len(tasks) == 2 * cfg.state_partitions, "the operator's tasks, then the archive's"
        peaks[writers] = [t["taskMetrics"]["peakExecutionMemory"] for t in tasks[cfg.state_partitions :]]
        outputs[writers] = sorted(
            tuple(r) for r in spark.read.parquet(lake.sink_path(cfg.output)).groupBy("output").count().collect()
        )
    assert all(p > 0 for p in peaks[0]) and peaks[4] == [0, 0], f"the archive's tasks' peak execution memory: {peaks}"
    assert outputs[0] == outputs[4], "the same rows in each output either way"
