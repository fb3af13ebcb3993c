"""The streaming job's typed configuration, checked before any Spark starts.

The policy check and :class:`~job.engine.errors.ConfigError` live in the engine, which the
baseline and the verifier share; everything here is about the Spark query."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, get_args

from job.engine.errors import ConfigError
from job.engine.session import DEFAULT_POLICY, DEFAULT_WINDOW, Policy, check_policy
from job.spark import lake
from producers.contract import TOPIC_PREFIX, s3_parts

StartingOffsets = Literal["earliest", "latest"]
#: Explicit offsets, as the Kafka source's ``startingOffsets`` JSON: ``{"topic": {"0": 42}}``,
#: where -2 means earliest and -1 latest. :func:`parse_offsets` is the one place that checks it.
OffsetsJson = str
#: Where the job resumes a session after a repair: ``(topic, partition, session key)`` ->
#: the first offset to process; that session's earlier records are already in the lake.
SessionCuts = Mapping[tuple[str, int, str], int]
#: The Python arbitrary-stateful operators the job can run on, all calling the same
#: per-session function: the Row-based ``transformWithState`` (Spark 4.1+),
#: ``transformWithStateInPandas`` (4.0+) and the older ``applyInPandasWithState`` (3.4+).
#: ``applyInPandasWithState-by-partition`` is the last with a different key: one call per Kafka
#: partition and batch, which runs the same per-session function for each session of the
#: partition (docs/decisions/0023-operator-keyed-by-partition.md).
Operator = Literal[
    "transformWithState", "transformWithStateInPandas", "applyInPandasWithState", "applyInPandasWithState-by-partition"
]
OPERATORS: tuple[Operator, ...] = get_args(Operator)

_TRIGGER = re.compile(r"^\s*(\d+)\s*(ms|milliseconds?|s|seconds?|m|minutes?)\s*$")


def trigger_ms(trigger: str) -> float | None:
    """A processing-time trigger's interval in milliseconds ("1 second" -> 1000.0); None for
    ``available-now`` or anything the job would refuse."""
    match = _TRIGGER.match(trigger)
    if not match:
        return None
    unit = match.group(2)
    scale = 1.0 if unit == "ms" or unit.startswith("milli") else 1000.0 if unit.startswith("s") else 60_000.0
    return int(match.group(1)) * scale


@dataclass(frozen=True, kw_only=True)
class JobConfig:
    """What the job reads, how strictly, and where it writes.

    ``output`` is the lake root: the job writes ``<output>/out``, one Parquet file sink
    holding the ``rows``, ``sessions`` and ``quarantine`` outputs and the input archive
    (``raw``, with ``raw_archive``) as partitions of the ``output`` column. ``checkpoint`` is a local
    (or shared-volume) directory, never object storage: S3 has no atomic rename, which the
    checkpoint's metadata log relies on.
    """

    output: str
    checkpoint: Path
    topic_prefix: str = TOPIC_PREFIX
    policy: Policy = DEFAULT_POLICY
    window: int = DEFAULT_WINDOW
    starting_offsets: StartingOffsets | OffsetsJson = "earliest"
    session_cuts: SessionCuts = field(default_factory=dict)
    #: Records per micro-batch at most: a catch-up runs in batches this large. The fastest cap
    #: that still bounds a batch's time and memory; see docs/decisions/0002-batch-cap.md.
    #: Chapter 05 shows what a cap is for.
    max_offsets_per_trigger: int | None = 100_000
    #: ``fetch.max.wait.ms`` of the executors' Kafka consumers. Kafka's default, 500 ms, is how
    #: long a broker may hold an empty fetch, and every partition a task reads meets it once on
    #: prefetches; see docs/decisions/0003-fetch-wait.md.
    fetch_max_wait_ms: int = 1
    #: Partitions of the session state (``spark.sql.shuffle.partitions`` for the query). A
    #: checkpoint keeps the number it was started with, for good: ``job run`` refuses another
    #: value (docs/job-config.md), and only a new checkpoint changes it. Each partition
    #: is a task per batch with its own Python worker and state-store commit, so on the sandbox's
    #: two cores more partitions only cost (docs/decisions/0004-state-partitions.md); set it to
    #: the cores the job will have at its largest before the first run.
    state_partitions: int = 2
    #: Tasks that read Kafka in each micro-batch: a number coalesces the Kafka partitions' offset
    #: ranges into that many tasks (each reads its share of the partitions one after another, in
    #: offset order); 0 is Spark's default, one task per Kafka partition with new records.
    #: Each task costs a launch and a fetch's round trip, so on the sandbox's two cores a fleet
    #: batch of 150 partitions read in 2 tasks is faster (docs/decisions/0005-input-tasks.md).
    input_tasks: int = 2
    #: Parquet files a sink task keeps open at once (``spark.sql.maxConcurrentOutputFileWriters``
    #: for the query). The sink is partitioned by output, and without open files Spark sorts
    #: every task's rows by the partition column before it writes them (a 16 MiB sort buffer a
    #: task, even for a few rows); with one file open per output folder (four) it writes them as
    #: they come, and sorts only past that: a little faster, and far less memory for a large
    #: batch (docs/decisions/0006-sink-writers.md). 0 is Spark's default: sort.
    sink_writers: int = 4
    fail_on_data_loss: bool = True
    trigger: str = "5 seconds"
    idle_timeout_s: int = 600
    raw_archive: bool = True
    topic_discovery_ms: int = 5_000
    name: str = "ordered-sessions"
    #: The fastest of the three on this stack, on a backlog and live; the other two stay
    #: selectable for the comparison (docs/decisions/0001-operator.md).
    operator: Operator = "applyInPandasWithState"
    extra_kafka_options: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ConfigError naming the field, the bad value and the fix."""
        check_policy(self.policy)
        if self.operator not in get_args(Operator):
            raise ConfigError("operator", self.operator, f"choose one of {', '.join(get_args(Operator))}")
        if self.starting_offsets not in get_args(StartingOffsets):
            parse_offsets(self.starting_offsets, field_name="starting_offsets")
        for key, offset in self.session_cuts.items():
            ok = isinstance(key, tuple) and len(key) == 3 and isinstance(key[1], int) and isinstance(offset, int)
            if not ok or offset < 0:
                raise ConfigError("session_cuts", {key: offset}, "map (topic, partition, session key) to an offset >= 0")
        if not re.fullmatch(r"[A-Za-z0-9._-]+", self.topic_prefix):
            raise ConfigError("topic_prefix", self.topic_prefix, "use letters, digits, '.', '_' or '-' (a Kafka topic prefix)")
        if not (1 <= self.window <= 10_000):
            raise ConfigError("window", self.window, "use a reorder window between 1 and 10000 messages")
        if not (0 <= self.fetch_max_wait_ms <= 60_000):
            raise ConfigError("fetch_max_wait_ms", self.fetch_max_wait_ms, "use 0..60000 ms (Kafka's default is 500)")
        if not (1 <= self.state_partitions <= 10_000):
            raise ConfigError(
                "state_partitions", self.state_partitions, "use 1..10000 (the cores the job will have at its largest)"
            )
        if not (0 <= self.input_tasks <= 10_000):
            raise ConfigError("input_tasks", self.input_tasks, "use 1..10000 tasks, or 0 for one task per Kafka partition")
        if not (0 <= self.sink_writers <= 1_000):
            raise ConfigError(
                "sink_writers", self.sink_writers, "use 0..1000 open files per sink task (0: sort by output, Spark's default)"
            )
        if self.max_offsets_per_trigger is not None and self.max_offsets_per_trigger < 1:
            raise ConfigError(
                "max_offsets_per_trigger", self.max_offsets_per_trigger, "use a positive number, or None for no limit"
            )
        if not _TRIGGER.match(self.trigger) and self.trigger != "available-now":
            raise ConfigError(
                "trigger", self.trigger, "use an interval such as '5 seconds', '500 ms', '1 minute', or 'available-now'"
            )
        if self.idle_timeout_s < 1:
            raise ConfigError("idle_timeout_s", self.idle_timeout_s, "use a positive number of seconds")
        no_bucket = self.output.startswith("s3a://") and not s3_parts(self.output)[0]
        if not self.output.startswith(("s3a://", "file:/", "/")) or no_bucket:
            raise ConfigError("output", self.output, "use an s3a://bucket/prefix URL (or an absolute local path for experiments)")
        if str(self.checkpoint).startswith(("s3a://", "s3://")):
            raise ConfigError(
                "checkpoint",
                str(self.checkpoint),
                "keep checkpoints on a local or shared volume: object stores lack the atomic rename the checkpoint log needs",
            )
        if not Path(self.checkpoint).is_absolute():
            raise ConfigError("checkpoint", str(self.checkpoint), "use an absolute path")

    @property
    def topic_pattern(self) -> str:
        return "^" + re.escape(self.topic_prefix) + ".*"

    @property
    def sink_path(self) -> str:
        """The file sink's folder (an existing lake's, after refusing an older layout: :func:`job.spark.lake.open_lake`)."""
        return lake.sink_path(self.output)

    def trigger_kwargs(self) -> dict[str, object]:
        """Keyword arguments for ``DataStreamWriter.trigger``."""
        if self.trigger == "available-now":
            return {"availableNow": True}
        return {"processingTime": self.trigger.strip()}


def default_output(settings) -> str:
    """The sandbox's lake root, ``s3a://<bucket>/job``: the one spelling of it."""
    return f"s3a://{settings.bucket}/job"


def job_config(settings, *, output: str | None = None, checkpoint: Path | None = None, **overrides) -> JobConfig:
    """A JobConfig with the sandbox's defaults for output (:func:`default_output`) and checkpoint
    (``<checkpoint_root>/job``) where those are None; every other override is taken as given
    (``max_offsets_per_trigger=None`` is no cap)."""
    return JobConfig(
        output=output or default_output(settings),
        checkpoint=Path(checkpoint) if checkpoint else settings.checkpoint_root / "job",
        **overrides,
    )


def parse_offsets(text: str, *, field_name: str = "starting_offsets") -> dict[str, dict[str, int]]:
    """Parse and check explicit Kafka offsets ``{"topic": {"partition": offset}}``.

    Offsets are integers >= -2 (-2 earliest, -1 latest), partitions non-negative integers
    written as strings (the Kafka source's format). Raises :class:`ConfigError` naming the
    field, the bad value and the fix; returns the offsets with partitions as strings.
    """
    fix = "use 'earliest', 'latest' or JSON such as {\"topic\": {\"0\": 42}} (offset -2 = earliest, -1 = latest)"
    try:
        data = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        data = None
    if not isinstance(data, dict) or not data:
        raise ConfigError(field_name, text, fix)
    out: dict[str, dict[str, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(field_name, text, f"topic {topic!r} needs a non-empty object of partition -> offset; {fix}")
        for part, offset in parts.items():
            if not str(part).isdigit() or isinstance(offset, bool) or not isinstance(offset, int) or offset < -2:
                raise ConfigError(field_name, text, f"{topic}[{part}] = {offset!r} is not a partition -> offset >= -2; {fix}")
            out.setdefault(topic, {})[str(int(part))] = offset
    return out
