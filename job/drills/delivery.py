"""Delivery semantics, rehearsed for real: a driver killed between the offsets log and the
commit log, and ``foreachBatch`` sinks with and without idempotence.

- :func:`kill_between_logs` starts ``python -m job run`` as a process group and SIGKILLs it
  at the moment batch N's offsets are logged, its tasks have written files to the bucket,
  but neither the sink's ``_spark_metadata/N`` nor ``commits/N`` exists yet.
- :func:`append_sink` appends every batch it is given: a batch Spark runs twice is written
  twice (at-least-once). :func:`idempotent_sink` overwrites the batch's own ``batch_id``
  partition, so a re-run replaces what the interrupted attempt wrote (exactly-once output).
- ``python -m job.drills.delivery`` runs one ``foreachBatch`` query that hands each batch to
  the sinks named (``--sink append --sink idempotent``: both, each under ``<output>/<kind>``),
  optionally dying right after they wrote batch N (``--die-after-batch``), before Spark could
  log the commit: the replay on the next start is then certain, not a matter of timing, and
  both sinks see the very same replay.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from job.engine.errors import JobError
from job.spark import checkpoints

__all__ = ["KillReport", "SinkKind", "append_sink", "idempotent_sink", "kill_between_logs", "make_sink"]

SinkKind = Literal["append", "idempotent"]


@dataclass(frozen=True, kw_only=True)
class KillReport:
    """What the checkpoint and the bucket looked like when the driver was killed."""

    batch: int
    pid: int
    offsets: tuple[int, ...]
    commits: tuple[int, ...]
    uncommitted_files: tuple[str, ...]
    sink_log_batches: tuple[int, ...]
    waited_s: float


def kill_between_logs(
    argv: Sequence[str],
    *,
    query_checkpoint: Path,
    fs,
    sink_path: str,
    min_batch: int = 1,
    timeout_s: float = 300.0,
    env: dict[str, str] | None = None,
    log: Path | None = None,
    poll_s: float = 0.02,
) -> KillReport:
    """Run ``argv`` (a job run) and SIGKILL its whole process group once a batch >= ``min_batch``
    is planned (``offsets/N``), not committed (no ``commits/N``), not in the sink's log (no
    ``_spark_metadata/N``) and has already written data files to the bucket.

    The condition is re-checked right after the kill and reported, so the caller can assert
    the kill really fell between the logs. Raises JobError if the job exits first or the
    moment does not come within ``timeout_s``.
    """
    out = open(log, "ab") if log is not None else subprocess.DEVNULL  # noqa: SIM115 -- closed below
    process = subprocess.Popen(list(argv), env=env, stdout=out, stderr=out, start_new_session=True)
    started = time.monotonic()
    try:
        batch = _wait_for_moment(process, query_checkpoint, fs, sink_path, min_batch, started + timeout_s, poll_s)
        os.killpg(process.pid, signal.SIGKILL)  # no shutdown hook, no last commit: a crashed driver
        process.wait()
    except BaseException:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        raise
    finally:
        if log is not None:
            out.close()  # type: ignore[union-attr]
    logs = checkpoints.log_state(query_checkpoint)
    sink_log = checkpoints.sink_log(fs, sink_path)
    return KillReport(
        batch=batch,
        pid=process.pid,
        offsets=logs.offsets,
        commits=logs.commits,
        uncommitted_files=tuple(checkpoints.uncommitted_files(fs, sink_path)),
        sink_log_batches=tuple(sink_log),
        waited_s=round(time.monotonic() - started, 1),
    )


def _wait_for_moment(process, query_checkpoint: Path, fs, sink_path: str, min_batch: int, deadline: float, poll_s: float) -> int:
    from pyarrow import fs as pafs

    meta = checkpoints._split(sink_path) + "/_spark_metadata"
    while True:
        if process.poll() is not None:
            raise JobError(
                f"the job exited (code {process.returncode}) before a batch sat between its offsets and commit logs; see its log"
            )
        if time.monotonic() > deadline:
            raise JobError(f"no batch sat between the offsets and commit logs of {query_checkpoint} in time; is input arriving?")
        state = checkpoints.log_state(query_checkpoint)
        batch = state.pending
        if batch is not None and batch >= min_batch:
            logged = fs.get_file_info(f"{meta}/{batch}").type != pafs.FileType.NotFound
            if not logged and checkpoints.uncommitted_files(fs, sink_path):
                # the files may be from this attempt only: the log has no entry for this batch yet
                if checkpoints.log_state(query_checkpoint).pending == batch:
                    return batch
        time.sleep(poll_s)


# --- foreachBatch sinks --------------------------------------------------------------------


def append_sink(path: str) -> Callable:
    """A ``foreachBatch`` function that appends each batch to Parquet at ``path``, with its
    batch id in a column. Not idempotent: a batch Spark re-runs after a crash is appended again."""

    def write(df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        df.withColumn("batch_id", F.lit(batch_id)).write.mode("append").parquet(path)

    return write


def idempotent_sink(path: str) -> Callable:
    """A ``foreachBatch`` function that writes batch N into partition ``batch_id=N`` and
    overwrites only that partition: a re-run batch replaces its earlier attempt. Correct
    because Spark re-runs a batch with exactly the offsets logged for it."""

    def write(df, batch_id: int) -> None:
        from pyspark.sql import functions as F

        (
            df.withColumn("batch_id", F.lit(batch_id))
            .write.mode("overwrite")
            .option("partitionOverwriteMode", "dynamic")
            .partitionBy("batch_id")
            .parquet(path)
        )

    return write


def make_sink(kind: SinkKind | Sequence[SinkKind], path: str, *, die_after_batch: int | None = None) -> Callable:
    """The sink of ``kind`` writing to ``path``; with several kinds, one function that writes
    each batch to every one of them, each under ``<path>/<kind>``. With ``die_after_batch``
    the driver kills its own process group right after that batch's writes returned, before
    Spark logs the commit."""
    kinds = [kind] if isinstance(kind, str) else list(kind)
    if not kinds or len(set(kinds)) != len(kinds):
        raise ValueError(f"sink kinds must be distinct and at least one, got {kinds}")
    factories = {"append": append_sink, "idempotent": idempotent_sink}
    if len(kinds) == 1:
        sinks = [factories[kinds[0]](path)]
    else:
        sinks = [factories[k](f"{path.rstrip('/')}/{k}") for k in kinds]

    def write(df, batch_id: int) -> None:
        if len(sinks) > 1:
            df = df.persist()  # read the batch's Kafka range once for all sinks
        try:
            for sink in sinks:
                sink(df, batch_id)
        finally:
            if len(sinks) > 1:
                df.unpersist()
        if batch_id == die_after_batch:
            print(
                f"[delivery] batch {batch_id} written; killing the driver before its commit is logged",
                file=sys.stderr,
                flush=True,
            )
            os.killpg(os.getpgid(0), signal.SIGKILL)

    return write


def _main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m job.drills.delivery", description="a foreachBatch query over the raw Kafka records"
    )
    parser.add_argument("--topic-prefix", "--prefix", dest="prefix", required=True, help="topic prefix")
    parser.add_argument(
        "--sink",
        choices=("append", "idempotent"),
        action="append",
        required=True,
        help="the sink to write; repeat it for both (then each writes under <output>/<kind>)",
    )
    parser.add_argument("--output", required=True, help="s3a:// path the sink (or the sinks) write")
    parser.add_argument("--checkpoint", type=Path, required=True)
    parser.add_argument("--max-offsets-per-trigger", type=int, default=200)
    parser.add_argument("--die-after-batch", type=int)
    args = parser.parse_args(argv)
    from sandbox import Settings
    from sandbox.jvm.spark_session import spark_session

    settings = Settings.from_env()
    bootstrap = settings.endpoints().kafka_bootstrap
    if len(set(args.sink)) != len(args.sink):
        parser.error(f"--sink: each kind once, got {args.sink}")
    spark = spark_session(settings, f"delivery-{'-'.join(args.sink)}")
    from job.spark.config import JobConfig
    from job.spark.pipeline import kafka_stream

    # the job's own Kafka reader, one task per partition: what differs here is the sink
    read = JobConfig(
        output=args.output,
        checkpoint=args.checkpoint.resolve(),
        topic_prefix=args.prefix,
        max_offsets_per_trigger=args.max_offsets_per_trigger,
        input_tasks=0,
    )
    stream = kafka_stream(spark, read, bootstrap).selectExpr(
        "topic", "partition", "offset", "CAST(key AS STRING) AS key", "value"
    )
    query = (
        stream.writeStream.foreachBatch(make_sink(args.sink, args.output, die_after_batch=args.die_after_batch))
        .option("checkpointLocation", str(args.checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    # bounded: the drill kills this process on purpose, and a wedged run must not outlive it
    if not query.awaitTermination(600):
        query.stop()
        print("[delivery] not done after 600 s: stopped", file=sys.stderr)
        return 1
    print(f"[delivery] done at batch {query.lastProgress and query.lastProgress['batchId']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(_main())
