"""The ledger: ground truth of what the producers meant to send, what they sent, and what Kafka said.

One row per transmission (see :data:`LEDGER_SCHEMA` for the columns): every intended
message has at least one row, a ``duplicate`` adds a second, a ``crash`` records the
``end`` that was never sent. Rows are written as Parquet *part files* under one location
(a local directory or ``s3a://bucket/prefix``) while the run goes, each flush a complete
file, so a crash loses at most the rows not yet flushed. ``_run.json`` beside the parts
holds the run's settings, seed and faults (also in every part's schema metadata under
``producers.runner``).

A row is written once its outcome is known: ``ok`` (Kafka acknowledged it at
``partition``/``offset``), ``failed`` (Kafka or the client refused it; ``error`` says
why), ``indeterminate`` (no answer before the run closed, or a timeout: it may or may not
be in the topic) or ``not-sent`` (a fault withheld it on purpose).
"""

from __future__ import annotations

import dataclasses
import json
import os.path
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

import pandas as pd
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from producers.contract import s3_parts
from producers.errors import LedgerError

__all__ = [
    "LEDGER_SCHEMA",
    "OUTCOMES",
    "LedgerEntry",
    "LedgerRow",
    "LedgerWriter",
    "Outcome",
    "RunInfo",
    "S3Target",
    "ledger_frame",
    "ledger_from_arrow",
    "ledger_parts",
    "read_ledger",
    "read_run_info",
]

Outcome = Literal["ok", "failed", "indeterminate", "not-sent"]
OUTCOMES: tuple[Outcome, ...] = ("ok", "failed", "indeterminate", "not-sent")

LEDGER_VERSION = 1

#: Columns of a ledger, in order. Nullable unless noted.
LEDGER_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("send_index", pa.int64(), nullable=False),  # order the producers handled it, unique per run
        pa.field("site", pa.string(), nullable=False),
        pa.field("session", pa.string(), nullable=False),  # also the Kafka key
        pa.field("topic", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),  # of the intended message
        pa.field("seq", pa.int64(), nullable=False),
        pa.field("epoch", pa.int64(), nullable=False),
        pa.field("ts", pa.int64(), nullable=False),  # intended event time, epoch ms
        pa.field("intended", pa.string(), nullable=False),  # the intended message, as contract JSON
        pa.field("sent", pa.binary()),  # the bytes handed to Kafka; null when not sent
        pa.field("fault", pa.string()),  # a fault name, or null
        pa.field("fault_detail", pa.string()),  # JSON object describing the hit, or null
        pa.field("outcome", pa.string(), nullable=False),  # ok | failed | indeterminate | not-sent
        pa.field("partition", pa.int32()),  # set when outcome is ok
        pa.field("offset", pa.int64()),  # set when outcome is ok
        pa.field("error", pa.string()),  # why it failed or is indeterminate
        pa.field("produced_ms", pa.int64(), nullable=False),  # wall clock when handed over (or withheld)
        pa.field("acked_ms", pa.int64()),  # wall clock of the delivery report
    ]
)
_INT_TYPES = {pa.int64(): pd.Int64Dtype(), pa.int32(): pd.Int32Dtype()}


@dataclass(frozen=True, kw_only=True)
class S3Target:
    """Where ``s3a://`` ledgers go: an S3-compatible endpoint (MinIO in the sandbox) and its keys."""

    endpoint: str  # e.g. "http://127.0.0.1:9000"
    access_key: str
    secret_key: str
    region: str = "us-east-1"

    def filesystem(self) -> pafs.S3FileSystem:
        url = urlparse(self.endpoint if "://" in self.endpoint else f"http://{self.endpoint}")
        return pafs.S3FileSystem(
            access_key=self.access_key,
            secret_key=self.secret_key,
            endpoint_override=url.netloc,
            scheme=url.scheme or "http",
            region=self.region,
            connect_timeout=5,
            request_timeout=30,
        )


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """What a run was asked to do: enough to reproduce it from the same seed."""

    run_id: str
    seed: int
    faults: tuple[str, ...] = ()  # fault specs, as ``parse_fault`` reads them
    settings: Mapping[str, Any] = field(default_factory=dict)  # every other run setting
    started_at: str = ""  # ISO 8601, UTC
    ledger_version: int = LEDGER_VERSION

    def to_json(self) -> str:
        return json.dumps(
            {**dataclasses.asdict(self), "faults": list(self.faults), "settings": dict(self.settings)},
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str | bytes) -> RunInfo:
        data = json.loads(text)
        return cls(
            run_id=data["run_id"],
            seed=data["seed"],
            faults=tuple(data.get("faults", ())),
            settings=data.get("settings", {}),
            started_at=data.get("started_at", ""),
            ledger_version=data.get("ledger_version", LEDGER_VERSION),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class LedgerEntry:
    """One ledger row (the columns of :data:`LEDGER_SCHEMA`)."""

    run_id: str
    send_index: int
    site: str
    session: str
    topic: str
    kind: str
    seq: int
    epoch: int
    ts: int
    intended: str
    sent: bytes | None
    fault: str | None
    fault_detail: str | None
    outcome: Outcome
    partition: int | None = None
    offset: int | None = None
    error: str | None = None
    produced_ms: int = 0
    acked_ms: int | None = None


#: A ledger row as a plain tuple, values in the order of :data:`LEDGER_SCHEMA`'s columns
#: (what :meth:`LedgerWriter.append` takes; ``intended`` may be UTF-8 bytes or a str).
LedgerRow = tuple[Any, ...]


def _row(entry: LedgerEntry) -> LedgerRow:
    return tuple(getattr(entry, name) for name in LEDGER_SCHEMA.names)


def _table(rows: Sequence[LedgerRow], metadata: Mapping[bytes, bytes] | None = None) -> pa.Table:
    # One transpose in C, then one Arrow array per column: no per-row Python work.
    columns = list(zip(*rows)) if rows else [()] * len(LEDGER_SCHEMA)
    schema = LEDGER_SCHEMA.with_metadata(dict(metadata)) if metadata else LEDGER_SCHEMA
    arrays = [pa.array(values, type=f.type) for values, f in zip(columns, LEDGER_SCHEMA, strict=True)]
    return pa.Table.from_arrays(arrays, schema=schema)


def _frame(table: pa.Table) -> pd.DataFrame:
    df = table.to_pandas(types_mapper=_INT_TYPES.get)
    if len(df):
        df = df.sort_values("send_index", kind="stable").reset_index(drop=True)
    return df


def ledger_from_arrow(table: pa.Table) -> pd.DataFrame:
    """A table with the :data:`LEDGER_SCHEMA` columns as the DataFrame :func:`read_ledger` returns."""
    return _frame(table)


def ledger_frame(entries: Iterable[LedgerEntry], run: RunInfo | None = None) -> pd.DataFrame:
    """Entries as the DataFrame :func:`read_ledger` would return (same columns and dtypes)."""
    df = _frame(_table([_row(e) for e in entries]))
    if run is not None:
        df.attrs["run"] = json.loads(run.to_json())
    return df


def _locate(location: str, s3: S3Target | None) -> tuple[pafs.FileSystem, str]:
    if parts := s3_parts(location):
        if s3 is None:
            raise LedgerError(
                location,
                "an s3a:// ledger needs an S3 endpoint and keys",
                "pass s3=S3Target(...) (the CLI reads OSL_S3_* or --s3-endpoint)",
            )
        bucket, prefix = parts
        if not prefix:
            raise LedgerError(location, "no key prefix after the bucket", "use s3a://bucket/some/prefix")
        return s3.filesystem(), f"{bucket}/{prefix}"
    path = location[len("file://") :] if location.startswith("file://") else location
    return pafs.LocalFileSystem(), os.path.abspath(path)


class LedgerWriter:
    """Writes ledger rows as Parquet part files under ``location`` while a run goes.

    Use as a context manager, or call :meth:`close`. :meth:`add` buffers a finished row and
    flushes when ``flush_rows`` rows are waiting or ``flush_interval_s`` has passed since
    the last flush; :meth:`flush` forces one. Refuses a location that already holds a
    ledger (runs never mix). Raises :class:`~producers.errors.LedgerError` when the
    location cannot be written, naming it and the fix.
    """

    def __init__(
        self,
        location: str,
        *,
        run: RunInfo,
        s3: S3Target | None = None,
        flush_rows: int = 5000,
        flush_interval_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.location = location
        self.run = run
        self._fs, self._base = _locate(location, s3)
        self._flush_rows = flush_rows
        self._flush_interval_s = flush_interval_s
        self._clock = clock
        self._pending: list[LedgerRow] = []
        self._last_flush = clock()
        self._parts = 0
        self.rows_written = 0
        self._metadata = {b"producers.run": run.to_json().encode()}
        try:
            info = self._fs.get_file_info(f"{self._base}/_run.json")
            if info.type != pafs.FileType.NotFound:
                raise LedgerError(
                    location,
                    "already holds a ledger",
                    "choose a new path (ledgers are never appended to) or delete the old one",
                )
            self._fs.create_dir(self._base, recursive=True)
            with self._fs.open_output_stream(f"{self._base}/_run.json") as out:
                out.write(run.to_json().encode())
        except LedgerError:
            raise
        except (OSError, pa.ArrowException) as exc:
            raise LedgerError(
                location, f"cannot write there ({exc})", "check the path, the bucket and the S3 endpoint and keys"
            ) from exc

    def __enter__(self) -> LedgerWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, entry: LedgerEntry) -> None:
        """Buffer one row (flushing when due)."""
        self._pending.append(_row(entry))
        self.maybe_flush()

    def append(self, row: LedgerRow) -> None:
        """Buffer one row given as a :data:`LedgerRow` tuple: the run loop's cheap path.

        Flushes when ``flush_rows`` rows wait; the time-based flush is left to
        :meth:`maybe_flush`, which the caller runs now and then (reading a clock per row
        costs more than building the row).
        """
        self._pending.append(row)
        if len(self._pending) >= self._flush_rows:
            self.flush()

    def maybe_flush(self) -> None:
        if len(self._pending) >= self._flush_rows or (
            self._pending and self._clock() - self._last_flush >= self._flush_interval_s
        ):
            self.flush()

    def flush(self) -> None:
        """Write every buffered row as one new part file (nothing when the buffer is empty)."""
        self._last_flush = self._clock()
        if not self._pending:
            return
        rows, self._pending = self._pending, []
        path = f"{self._base}/part-{self._parts:05d}.parquet"
        try:
            if isinstance(self._fs, pafs.LocalFileSystem):
                # A reader never sees half a part: write aside, then rename.
                pq.write_table(_table(rows, self._metadata), path + ".tmp", filesystem=self._fs, compression="zstd")
                self._fs.move(path + ".tmp", path)
            else:
                pq.write_table(_table(rows, self._metadata), path, filesystem=self._fs, compression="zstd")
        except (OSError, pa.ArrowException) as exc:
            self._pending = rows + self._pending
            raise LedgerError(self.location, f"cannot write {path} ({exc})", "check free space and the S3 endpoint") from exc
        self._parts += 1
        self.rows_written += len(rows)

    def close(self) -> None:
        self.flush()


def read_run_info(location: str, *, s3: S3Target | None = None) -> RunInfo:
    """The :class:`RunInfo` stored with the ledger at ``location``."""
    fs, base = _locate(location, s3)
    try:
        with fs.open_input_stream(f"{base}/_run.json") as src:
            return RunInfo.from_json(src.read())
    except FileNotFoundError:
        raise LedgerError(location, "no _run.json here, so no ledger", "pass the path given to --ledger") from None


def _part_paths(location: str, fs: pafs.FileSystem, base: str) -> list[str]:
    try:
        infos = fs.get_file_info(pafs.FileSelector(base, recursive=False))
    except (OSError, pa.ArrowException) as exc:
        raise LedgerError(location, f"cannot list it ({exc})", "check the path and the S3 endpoint") from exc
    return sorted(i.path for i in infos if i.is_file and i.path.endswith(".parquet"))


def ledger_parts(location: str, *, s3: S3Target | None = None) -> list[str]:
    """The complete part files of the ledger at ``location`` (``*.tmp`` left by a crash are not),
    as paths a reader of ``location``'s kind opens: local paths, or ``s3a://bucket/key``."""
    fs, base = _locate(location, s3)
    read_run_info(location, s3=s3)  # no _run.json, no ledger: say so before listing
    parts = _part_paths(location, fs, base)
    return [f"s3a://{p}" for p in parts] if isinstance(fs, pafs.S3FileSystem) else parts


def read_ledger(location: str, *, s3: S3Target | None = None) -> pd.DataFrame:
    """Every row of the ledger at ``location``, ordered by ``send_index``.

    Columns and types follow :data:`LEDGER_SCHEMA`; integer columns use pandas' nullable
    ``Int64``/``Int32``, ``sent`` holds ``bytes`` (or None). ``df.attrs["run"]`` holds the
    run's settings as a dict (see :class:`RunInfo`). Parts left half-written by a crash
    (``*.tmp``) are ignored.
    """
    fs, base = _locate(location, s3)
    run = read_run_info(location, s3=s3)
    parts = _part_paths(location, fs, base)
    tables = [pq.read_table(p, filesystem=fs, schema=LEDGER_SCHEMA) for p in parts]
    table = pa.concat_tables(tables) if tables else LEDGER_SCHEMA.empty_table()
    df = _frame(table.replace_schema_metadata(None))
    df.attrs["run"] = json.loads(run.to_json())
    return df
