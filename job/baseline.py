"""The baseline: the same session state machine behind one plain Kafka consumer, no Spark.

It subscribes to ``^<prefix>.*`` (new sites are picked up while it runs), reads every
partition from the earliest offset, and treats each ``consume()`` call as a micro-batch:
the batch's records are grouped by key (the session id), each group in (partition,
offset) order goes through :func:`job.engine.session.step`, and every session touched writes one
status row, exactly as the Spark operator does. It stops after ``idle_s`` seconds without
a record, or once it has read up to given end offsets (:func:`end_offsets` takes them
from the brokers before a run).

It is the benchmark's baseline and a fast checker: :class:`BaselineResult` holds the
``rows``, ``quarantine`` and ``sessions`` outputs as DataFrames with the columns
:func:`job.verify.compare.check` reads, and can write them as local Parquet.

Under policy ``strict`` an :class:`~job.engine.errors.IntegrityError` stops the run like it stops
the Spark query: the failing batch writes nothing, the result keeps what earlier batches
wrote and carries the error.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from job.engine.errors import BaselineError, IntegrityError
from job.engine.session import (
    DEFAULT_POLICY,
    DEFAULT_WINDOW,
    POLICIES,
    Policy,
    QuarantineRecord,
    Record,
    RowChange,
    SessionState,
    SessionStatus,
    check_policy,
    flush,
    step,
)
from job.verify.compare import output_frames
from producers.contract import TOPIC_PREFIX
from sandbox.settings import KAFKA_BOOTSTRAP

__all__ = ["BaselineConfig", "BaselineResult", "Sessions", "end_offsets", "main", "run_baseline"]

StopReason = Literal["idle", "end-offsets", "deadline", "integrity"]
Partition = tuple[str, int]


@dataclass(frozen=True, kw_only=True)
class BaselineConfig:
    """One baseline run; built at the edge (CLI, notebook, test) and passed down.

    ``end_offsets`` maps (topic, partition) to the offset to read up to (exclusive): the
    run stops once every listed partition got there. ``idle_s`` stops it after that long
    without a record (also when no topic matches yet). ``batch_size`` caps the records of
    one micro-batch. ``flush_at_end`` settles records still held by policy ``window`` when
    the run stops (what the job does when a session's timer fires).
    """

    bootstrap: str
    topic_prefix: str = TOPIC_PREFIX
    policy: Policy = DEFAULT_POLICY
    window: int = DEFAULT_WINDOW
    idle_s: float = 10.0
    end_offsets: Mapping[Partition, int] | None = None
    deadline_s: float | None = None
    batch_size: int = 5000
    poll_s: float = 0.2
    flush_at_end: bool = True
    group_id: str | None = None
    consumer_config: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_policy(self.policy)
        if self.batch_size < 1 or self.idle_s <= 0 or self.window < 1:
            raise BaselineError(
                self.bootstrap,
                f"batch_size={self.batch_size}, idle_s={self.idle_s}, window={self.window} are out of range",
                "use a batch size and a window of at least 1 and a positive idle time",
            )

    @property
    def pattern(self) -> str:
        return f"^{re.escape(self.topic_prefix)}.*"


@dataclass(frozen=True, kw_only=True)
class BaselineResult:
    """The three outputs of a run, how it ended, and how fast it went."""

    rows: pd.DataFrame
    quarantine: pd.DataFrame
    sessions: pd.DataFrame
    records: int
    batches: int
    elapsed_s: float
    stopped: StopReason
    error: IntegrityError | None = None

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def write_parquet(self, directory: str | Path) -> dict[str, Path]:
        """Write ``rows.parquet``, ``quarantine.parquet`` and ``sessions.parquet`` under ``directory``."""
        out = Path(directory)
        out.mkdir(parents=True, exist_ok=True)
        paths = {}
        for name in ("rows", "quarantine", "sessions"):
            paths[name] = out / f"{name}.parquet"
            getattr(self, name).to_parquet(paths[name], index=False, compression="zstd")
        return paths


class Sessions:
    """The consumer-independent part: session states, micro-batches in, outputs accumulated.

    :meth:`batch` applies one micro-batch atomically: if a session raises (policy
    ``strict``), nothing of that batch is kept and the error propagates.
    """

    def __init__(self, *, policy: Policy, window: int = DEFAULT_WINDOW) -> None:
        self.policy, self.window = policy, window
        self.states: dict[str, SessionState] = {}
        self.changes: list[RowChange] = []
        self.quarantine: list[QuarantineRecord] = []
        self.statuses: list[SessionStatus] = []
        self.batches = 0

    def batch(self, records: Iterable[Record]) -> None:
        groups: dict[str, list[Record]] = {}
        for record in records:
            groups.setdefault(record.key or "", []).append(record)
        states: dict[str, SessionState] = {}
        changes: list[RowChange] = []
        quarantine: list[QuarantineRecord] = []
        statuses: list[SessionStatus] = []
        for key, group in groups.items():
            group.sort(key=lambda r: (r.partition, r.offset))  # the order step() relies on
            s = step(self.states.get(key), group, policy=self.policy, window=self.window)
            states[key] = s.state
            changes += s.changes
            quarantine += s.quarantine
            statuses.append(s.status)
        # Only a batch that went through whole is kept, like a Spark micro-batch.
        self.states.update(states)
        self.changes += changes
        self.quarantine += quarantine
        self.statuses += statuses
        self.batches += 1

    def settle(self) -> None:
        """Give up on every held record (policy ``window``), writing a status row for each such session."""
        for key, state in list(self.states.items()):
            if state.pending:
                s = flush(state)
                self.states[key] = s.state
                self.changes += s.changes
                self.quarantine += s.quarantine
                self.statuses.append(s.status)

    def frames(self) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
        return output_frames(self.changes, self.quarantine, self.statuses)


def _with_records(ends: Mapping[Partition, int] | None) -> dict[Partition, int]:
    """The partitions the run must read up to: those whose end offset is past 0."""
    return {tp: end for tp, end in (ends or {}).items() if end > 0}


def run_baseline(
    config: BaselineConfig,
    *,
    progress: Callable[[str], None] | None = None,
    on_batch: Callable[[list[Record]], None] | None = None,
    end_offsets_later: Callable[[], Mapping[Partition, int] | None] | None = None,
) -> BaselineResult:
    """Consume the collection topics through the session state machine (see the module docstring).

    ``on_batch`` is called with each micro-batch's records once its outputs are kept (the
    benchmark takes that moment as the baseline's "output visible" time).
    ``end_offsets_later`` is asked between batches until it returns end offsets (e.g. once
    the producers are done); from then on the run stops when it has read up to them, as with
    ``config.end_offsets``.
    """
    from confluent_kafka import KafkaException

    sessions = Sessions(policy=config.policy, window=config.window)
    reader = _Reader(config)
    ends = config.end_offsets
    targets = _with_records(ends)
    started = last_record = time.monotonic()
    count = 0
    stopped: StopReason = "idle"  # each way out of the loop sets it
    error: IntegrityError | None = None
    try:
        reader.subscribe()
        while True:
            if ends is None and end_offsets_later is not None and (ends := end_offsets_later()) is not None:
                targets = _with_records(ends)
            reason = _stop_reason(config, reader, targets if ends is not None else None, started, last_record)
            if reason is not None:
                stopped = reason
                break
            batch = reader.batch()
            if not batch:
                continue
            last_record = time.monotonic()
            count += len(batch)
            try:
                sessions.batch(batch)
            except IntegrityError as exc:
                stopped, error = "integrity", exc
                break
            if on_batch is not None:
                on_batch(batch)
            if progress is not None:
                progress(f"[baseline] batch {sessions.batches}: {len(batch)} records, {count} in all")
    except KafkaException as exc:
        raise BaselineError(config.bootstrap, f"consumer failed ({exc})", "check that Kafka answers there") from exc
    finally:
        reader.close()
    if config.flush_at_end and error is None:
        sessions.settle()
    rows, quarantine, statuses = sessions.frames()
    return BaselineResult(
        rows=rows,
        quarantine=quarantine,
        sessions=statuses,
        records=count,
        batches=sessions.batches,
        elapsed_s=time.monotonic() - started,
        stopped=stopped,
        error=error,
    )


def _stop_reason(
    config: BaselineConfig, reader: _Reader, targets: Mapping[Partition, int] | None, started: float, last_record: float
) -> StopReason | None:
    """Why the run stops now: ``targets`` (the end offsets, None: none known yet) read, idle,
    or past the deadline; None to read on."""
    now = time.monotonic()
    if targets is not None and reader.reached(targets):
        return "end-offsets"
    if now - last_record >= config.idle_s:
        return "idle"
    if config.deadline_s is not None and now - started >= config.deadline_s:
        return "deadline"
    return None


class _Reader:
    """The run's consumer: subscribed to the topic pattern from the earliest offset, it hands
    out micro-batches and keeps the next offset to read of each partition."""

    def __init__(self, config: BaselineConfig) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError

        self.config = config
        self._beginning, self._eof = OFFSET_BEGINNING, KafkaError._PARTITION_EOF
        self.position: dict[Partition, int] = {}
        self.consumer = Consumer(
            {
                "bootstrap.servers": config.bootstrap,
                "group.id": config.group_id or f"osl-baseline-{uuid.uuid4().hex[:8]}",
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                # Topic discovery for the pattern subscription runs on metadata refreshes.
                "topic.metadata.refresh.interval.ms": 1000,
                **config.consumer_config,
            }
        )

    def subscribe(self) -> None:
        """Subscribe to the topic pattern; partitions (re)assigned later resume where this run is."""
        self.consumer.subscribe([self.config.pattern], on_assign=self._resume)

    def _resume(self, c: Any, partitions: list[Any]) -> None:
        # A new topic triggers a rebalance; offsets are never committed, so without this a
        # reassigned partition would start again from the beginning and replay records.
        for tp in partitions:
            tp.offset = self.position.get((tp.topic, tp.partition), self._beginning)
        c.assign(partitions)

    def reached(self, targets: Mapping[Partition, int]) -> bool:
        """True when every partition in ``targets`` has been read up to its offset there."""
        return all(self.position.get(tp, 0) >= end for tp, end in targets.items())

    def batch(self) -> list[Record]:
        """The next micro-batch: up to ``batch_size`` records, waiting at most ``poll_s`` (may be empty).

        Raises :class:`~job.engine.errors.BaselineError` on a fatal consumer error.
        """
        batch: list[Record] = []
        for msg in self.consumer.consume(num_messages=self.config.batch_size, timeout=self.config.poll_s):
            err = msg.error()
            if err is not None:
                if err.code() == self._eof:
                    tp = (msg.topic(), msg.partition())
                    self.position[tp] = max(self.position.get(tp, 0), msg.offset())
                    continue
                if err.fatal():
                    raise BaselineError(self.config.bootstrap, f"fatal consumer error: {err.str()}", "check the broker")
                continue  # librdkafka retries transient errors itself
            key = msg.key()
            ts_type, ts = msg.timestamp()
            batch.append(
                Record(
                    msg.topic(),
                    msg.partition(),
                    msg.offset(),
                    None if key is None else key.decode("utf-8", "replace"),
                    msg.value(),
                    ts if ts_type else 0,
                )
            )
            tp = (msg.topic(), msg.partition())
            self.position[tp] = max(self.position.get(tp, 0), msg.offset() + 1)
        return batch

    def close(self) -> None:
        self.consumer.close()


def end_offsets(bootstrap: str, topic_prefix: str = TOPIC_PREFIX, *, timeout_s: float = 10.0) -> dict[Partition, int]:
    """:func:`producers.kafka.end_offsets`, with a Kafka that does not answer reported as a
    :class:`~job.engine.errors.BaselineError`."""
    from confluent_kafka import KafkaException

    from producers.kafka import end_offsets as read_end_offsets

    try:
        return read_end_offsets(bootstrap, topic_prefix, timeout_s=timeout_s)
    except KafkaException as exc:
        raise BaselineError(bootstrap, f"cannot read topic offsets ({exc})", "check that Kafka answers there") from exc


def main(argv: list[str] | None = None) -> int:
    """``python -m job.baseline``: consume, optionally write Parquet and verify against a ledger."""
    parser = argparse.ArgumentParser(prog="python -m job.baseline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--bootstrap", default=KAFKA_BOOTSTRAP)
    parser.add_argument("--topic-prefix", default=TOPIC_PREFIX)
    parser.add_argument("--policy", choices=POLICIES, default=DEFAULT_POLICY)
    parser.add_argument("--window", type=int, default=DEFAULT_WINDOW)
    parser.add_argument("--idle", type=float, default=10.0, help="stop after this many seconds without a record")
    parser.add_argument("--to-current-end", action="store_true", help="stop at the end offsets found at start")
    parser.add_argument("--out", type=Path, help="write rows/quarantine/sessions Parquet files here")
    parser.add_argument("--ledger", help="verify the outputs against this producers ledger")
    args = parser.parse_args(argv)
    try:
        ends = end_offsets(args.bootstrap, args.topic_prefix) if args.to_current_end else None
        config = BaselineConfig(
            bootstrap=args.bootstrap,
            topic_prefix=args.topic_prefix,
            policy=args.policy,
            window=args.window,
            idle_s=args.idle,
            end_offsets=ends,
        )
        result = run_baseline(config, progress=lambda line: print(line, file=sys.stderr))
    except BaselineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(
        f"baseline ({args.policy}): {result.records} records in {result.elapsed_s:.1f}s "
        f"({result.records_per_s:.0f}/s), {result.batches} batches, stopped: {result.stopped}"
    )
    if result.error is not None:
        print(f"integrity error: {result.error}", file=sys.stderr)
    if args.out:
        for name, path in result.write_parquet(args.out).items():
            print(f"{name}: {path}")
    if args.ledger:
        from job.verify.compare import check
        from producers.ledger import read_ledger

        report = check(read_ledger(args.ledger), result.rows, result.quarantine, result.sessions, policy=args.policy)
        print(report.summary())
        return 0 if report.ok else 1
    return 0 if result.error is None else 1


if __name__ == "__main__":
    raise SystemExit(main())
