"""The verifier at a fleet's scale: :func:`job.verify.compare.judge_part` run inside Spark on
groups of whole sessions, and only what it finds comes back to the driver.

The ledger and the lake's outputs are grouped by a hash of the session into :data:`BUCKETS`
groups (a cogroup: one shuffle of each); each group is judged in a Python worker by the same
rules the pure :func:`~job.verify.compare.check` applies, so the two cannot drift. The driver collects one row per finding, one count row per
group and the sessions the ledger does not know: its memory grows with the anomalies and the
sessions, not with the lake's rows (a fleet's lake of a million row changes came back as a few
thousand rows; docs/verifier.md has the measurements).

Under ``strict`` one session's verdict depends on the others (the query stops at the earliest
fault of any session): a first pass over the ledger alone finds that fault, and every group is
judged with it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from job.engine.session import Policy, check_policy
from job.spark import lake
from job.verify import compare
from job.verify.compare import DeletedRange, Finding, Part, Report

__all__ = ["OUTPUTS", "check_frames", "ledger_dataframe"]

#: The outputs the verifier reads (the raw archive is checked by :mod:`job.verify.archive_check`).
OUTPUTS: tuple[lake.Output, ...] = ("rows", "quarantine", "sessions")

#: Groups of whole sessions judged in one Python call each (by a hash of the session).
BUCKETS = 64
_TALLY = ("delivered", "applied", "quarantined", "lost")
#: One row of a group's verdict: a finding, the group's counts, or a session the ledger lacks.
_RESULT_DDL = (
    "what string, ordinal int, session string, kind string, epoch bigint, seq bigint, topic string, "
    "`partition` int, `offset` bigint, fault string, allowed boolean, detail string, "
    "delivered bigint, applied bigint, quarantined bigint, lost bigint, sessions bigint"
)
_RESULT_FIELDS = [c.strip().split(" ")[0].strip("`") for c in _RESULT_DDL.split(",")]
_STOP_DDL = "send_index bigint, fault string, session string"
_SPARK_TYPES = {pa.string(): "string", pa.int64(): "bigint", pa.int32(): "int", pa.binary(): "binary"}


def ledger_dataframe(spark, files: Sequence[str]):
    """The ledger's part files (:func:`producers.ledger.ledger_parts`) as a Spark DataFrame with
    the ledger's columns. Read by Spark, so no process holds the whole ledger."""
    from producers.ledger import LEDGER_SCHEMA

    ddl = ", ".join(f"`{f.name}` {_SPARK_TYPES[f.type]}" for f in LEDGER_SCHEMA)
    if not files:
        return spark.createDataFrame([], ddl)
    return spark.read.schema(ddl).parquet(*files)


def check_frames(spark, ledger_df, outputs_df, *, policy: Policy, deleted: Sequence[DeletedRange] = ()) -> Report:
    """:func:`job.verify.compare.check`'s report for a ledger and a lake given as Spark
    DataFrames: ``ledger_df`` with the ledger's columns, ``outputs_df`` the file sink's union
    frame (its ``output`` column says which output a row belongs to; other outputs are ignored)."""
    check_policy(policy)
    deleted = tuple(deleted)
    stop = _strict_stop(ledger_df, deleted) if policy == "strict" else None
    columns = sorted({c for name in OUTPUTS for c in lake.COLUMNS[name]} | {"output"})
    outputs = outputs_df.where(outputs_df["output"].isin(*OUTPUTS)).select(*columns)
    # Sessions are judged in buckets of whole sessions: one Python call per session cost ~16 ms
    # each, most of a small fleet's time (docs/verifier.md).
    judged = (
        ledger_df.groupBy(_bucket())
        .cogroup(outputs.groupBy(_bucket()))
        .applyInArrow(_judge_group(policy, deleted, stop), _RESULT_DDL)
    )
    return _report(policy, judged.collect())


def _strict_stop(ledger_df, deleted: tuple[DeletedRange, ...]):
    """Where ``strict`` stops over the whole ledger (each session's candidates found in Spark)."""

    def candidates(table: pa.Table) -> pa.Table:
        ledger = _ledger(table)
        found = compare.strict_candidates(compare.expected_for(ledger, deleted))
        names = ("send_index", "fault", "session")
        return pa.table({n: [c[i] for c in found] for i, n in enumerate(names)}, schema=_stop_schema())

    first = ledger_df.groupBy(_bucket()).applyInArrow(candidates, _STOP_DDL).orderBy("send_index", "fault", "session").first()
    return None if first is None else compare.strict_stop([(first.send_index, first.fault, first.session)])


def _bucket():
    from pyspark.sql import functions as F

    return F.pmod(F.xxhash64("session"), F.lit(BUCKETS)).alias("bucket")


def _stop_schema() -> pa.Schema:
    return pa.schema([("send_index", pa.int64()), ("fault", pa.string()), ("session", pa.string())])


def _judge_group(policy: Policy, deleted: tuple[DeletedRange, ...], stop):
    def judge(ledger_table: pa.Table, lake_table: pa.Table) -> pa.Table:
        frames = {name: _output(lake_table, name) for name in OUTPUTS}
        part = compare.judge_part(
            _ledger(ledger_table),
            frames["rows"],
            frames["quarantine"],
            frames["sessions"],
            policy=policy,
            deleted=deleted,
            stop=stop,
        )
        return _part_table(part)

    return judge


def _ledger(table: pa.Table):
    """A group's ledger rows as :func:`producers.ledger.read_ledger` returns them."""
    from producers.ledger import LEDGER_SCHEMA, ledger_from_arrow

    arrays = [table.column(f.name).cast(f.type) for f in LEDGER_SCHEMA]
    return ledger_from_arrow(pa.Table.from_arrays(arrays, names=LEDGER_SCHEMA.names))


def _output(table: pa.Table, name: str):
    """One output of a group's lake rows, as the pure verifier reads it (``toPandas`` of it)."""
    rows = table.filter(pc.equal(table.column("output"), name)) if table.num_rows else table
    return rows.select(lake.COLUMNS[name]).to_pandas()


def _part_table(part: Part) -> pa.Table:
    rows: list[dict] = [
        {"what": "finding", "ordinal": i, **{k: getattr(f, k) for k in _FINDING_FIELDS}} for i, f in enumerate(part.findings)
    ]
    rows.append({"what": "tally", "sessions": part.sessions, **{k: part.tally[k] for k in _TALLY}})
    rows += [{"what": "foreign", "session": s} for s in sorted(part.foreign)]
    return pa.Table.from_pylist([{k: r.get(k) for k in _RESULT_FIELDS} for r in rows], schema=_result_schema())


_FINDING_FIELDS = ("session", "kind", "epoch", "seq", "topic", "partition", "offset", "fault", "allowed", "detail")


def _result_schema() -> pa.Schema:
    types = {"ordinal": pa.int32(), "partition": pa.int32(), "allowed": pa.bool_()}
    ints = {"epoch", "seq", "offset", *_TALLY, "sessions"}
    return pa.schema([(n, types.get(n, pa.int64() if n in ints else pa.string())) for n in _RESULT_FIELDS])


def _report(policy: Policy, rows: list) -> Report:
    findings = sorted((r for r in rows if r.what == "finding"), key=lambda r: (r.session, r.ordinal))
    tally: Counter[str] = Counter()
    sessions = 0
    for r in rows:
        if r.what == "tally":
            tally.update({k: int(getattr(r, k)) for k in _TALLY})
            sessions += int(r.sessions)
    part = Part(
        findings=[Finding(**{k: getattr(r, k) for k in _FINDING_FIELDS}) for r in findings],
        tally=tally,
        sessions=sessions,
        foreign=frozenset(r.session for r in rows if r.what == "foreign"),
    )
    return compare.report(policy, part)
