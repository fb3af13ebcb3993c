"""Data integrity under each policy: every data fault of the registry, through the real job.

:func:`fault_matrix` produces ONE ledgered run carrying every fault of
:data:`producers.faults.FAULTS` (:func:`every_fault`) into fresh topics, then runs the job
once per integrity policy over the same topics (each with its own output and checkpoint)
and verifies each output against the ledger. :func:`matrix_frame` turns the verifier's
reports into one tidy row per (fault, policy): how many delivered records carried the
fault and how many of those the output applied, and what the verifier found inside the
fault's loss windows (quarantined, lost, other kinds) and whether all of it was allowed.

Under ``strict`` the query stops at the first fault that breaks a session's order (the
job raises :class:`~job.engine.errors.IntegrityError`, naming session, topic, partition and
offset): :class:`PolicyRun` keeps that message, and the verifier checks that what was
written before the stop is a gap-free prefix.

:func:`interval_sweep` answers the second question of the chapter: under ``resync`` a
fault costs everything from the faulted record to the session's next snapshot, so the
loss grows with the snapshot interval. It produces the same faults at several
``snapshot_every`` values into topics under one prefix, runs the job once over all of
them, and verifies each interval's ledger on its own. :func:`window_bound` is the most a
correct job may set aside (the delivered records inside a window that allows ``lost`` or
``quarantined``) and :func:`expected_fraction` the back-of-the-envelope model: with a
fault probability ``p`` per message and a snapshot every ``n`` messages, about ``p·n/2``
of the records are set aside while ``p·n`` is small, approaching all but the snapshots as it
grows: 2 % faults and a snapshot every 50 messages set aside over a third of the records.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from job.engine.session import DEFAULT_WINDOW
from job.spark import lake
from job.spark.config import JobConfig
from producers.faults import FAULTS, Anomaly, Burst, Crash, Drop, EpochReset, Fault, OrphanUpdate, Oversized, Target

__all__ = [
    "MATRIX_COLUMNS",
    "MATRIX_POLICIES",
    "Matrix",
    "PolicyRun",
    "SweepPoint",
    "every_fault",
    "expected_fraction",
    "fault_matrix",
    "interval_sweep",
    "matrix_frame",
    "StrictPrefix",
    "run_policy",
    "strict_prefix",
    "sweep_frame",
    "window_bound",
]

#: The policies the matrix runs, in the order the chapter shows them.
MATRIX_POLICIES: tuple[str, ...] = ("strict", "resync", "window", "none")

#: The columns of :func:`matrix_frame`.
MATRIX_COLUMNS: tuple[str, ...] = (
    "fault",
    "policy",
    "faulted",
    "applied",
    "quarantined",
    "lost",
    "other",
    "other_kinds",
    "allowed",
)

# Faults whose probability is per session or that end/restart a session: rarer, or they
# would swamp the run (a crash per 100 messages ends every session in its first interval).
_RARER: dict[str, float] = {OrphanUpdate.name: 0.3, Crash.name: 0.002, EpochReset.name: 0.003, Oversized.name: 0.003}


def every_fault(probability: float = 0.01, *, burst_size: int = 40) -> tuple[Fault, ...]:
    """One instance of every fault in :data:`~producers.faults.FAULTS`, in registry order.

    Message faults draw with ``probability`` per eligible message; ``orphan-update`` (drawn
    once per session), ``crash``, ``epoch-reset`` and ``oversized`` (1.1 MB records) use
    fixed, rarer rates so that a short run keeps most of its sessions whole. ``burst``
    sends ``burst_size`` messages at once (small: the point is that nothing is lost).
    """
    out: list[Fault] = []
    for name, cls in FAULTS.items():
        p = _RARER.get(name, probability)
        out.append(cls(probability=p, size=burst_size) if cls is Burst else cls(probability=p))  # type: ignore[call-arg]
    return tuple(out)


# -- pure: reports to a tidy frame, and the loss bound -------------------------------------


def matrix_frame(reports: Mapping[str, object], ledger: pd.DataFrame, faults: Iterable[str] | None = None) -> pd.DataFrame:
    """One row per (fault, policy) from the verifier's reports (``policy -> Report``).

    ``faulted``: records Kafka acknowledged that carry the fault in ``ledger``; ``applied``:
    of those, the ones the output applied (neither quarantined nor lost). ``quarantined``,
    ``lost`` and ``other`` count the verifier's findings attributed to the fault (inside
    its loss windows, or, under ``strict``, to the fault that stopped the query);
    ``other_kinds`` names the other kinds found; ``allowed`` is True when every finding
    attributed to the fault is allowed. Faults default to the registry's (in its order),
    followed by any other cause a report names (``-`` for findings no fault explains).
    """
    names = list(faults) if faults is not None else list(FAULTS)
    for report in reports.values():
        names += [f for f in report.counts if f not in names]  # type: ignore[attr-defined]
    ok = ledger[ledger["outcome"] == "ok"]
    rows = []
    for policy, report in reports.items():
        findings = report.frame()  # type: ignore[attr-defined]
        findings = findings.assign(fault=findings["fault"].fillna("-"))
        marked = {
            kind: set(zip(group["topic"], group["partition"], group["offset"], strict=True))
            for kind, group in findings[findings["offset"].notna()].groupby("kind")
        }
        set_aside = marked.get("quarantined", set()) | marked.get("lost", set())
        for name in names:
            carried = ok[ok["fault"] == name]
            where = zip(carried["topic"], carried["partition"].astype(int), carried["offset"].astype(int), strict=True)
            mine = findings[findings["fault"] == name]
            others = mine[~mine["kind"].isin(["quarantined", "lost"])]
            rows.append(
                {
                    "fault": name,
                    "policy": policy,
                    "faulted": len(carried),
                    "applied": sum(1 for w in where if w not in set_aside),
                    "quarantined": int((mine["kind"] == "quarantined").sum()),
                    "lost": int((mine["kind"] == "lost").sum()),
                    "other": len(others),
                    "other_kinds": ", ".join(sorted(set(others["kind"]))),
                    "allowed": bool(mine["allowed"].all()),
                }
            )
    return pd.DataFrame(rows, columns=list(MATRIX_COLUMNS))


def window_bound(ledger: pd.DataFrame) -> int:
    """The most records a correct job may set aside: delivered records (outcome ``ok``) that
    lie inside a loss window allowing ``lost`` or ``quarantined`` (``producers.expected_output``)."""
    from producers.expected_output import expected_sessions

    expected = expected_sessions(ledger)
    ok = ledger[ledger["outcome"] == "ok"]
    return sum(
        1
        for sid, epoch, seq in zip(ok["session"], ok["epoch"], ok["seq"], strict=True)
        if any(expected[str(sid)].allows(a, int(epoch), int(seq)) for a in (Anomaly.LOST, Anomaly.QUARANTINED))
    )


def expected_fraction(probability: float, interval: int) -> float:
    """The share of a session's records ``resync`` sets aside, on average, when each message
    is faulted with ``probability`` and a snapshot comes every ``interval`` messages.

    Within one interval (a snapshot, then ``interval - 1`` updates) the k-th update is set
    aside when any of the first k updates was hit: ``1 - (1 - p)^k``. Averaged over the
    interval this is about ``p * (interval - 1) / 2`` for small ``p * interval``, and tends to
    ``1 - 1/interval`` (the snapshot itself is always applied).
    """
    if not 0.0 <= probability <= 1.0 or interval < 1:
        raise ValueError(f"probability {probability} must be in [0, 1] and interval {interval} >= 1")
    q = 1.0 - probability
    return sum(1.0 - q**k for k in range(1, interval)) / interval


# -- on the sandbox ---------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class PolicyRun:
    """One policy's run over the matrix's topics: its config, the verifier's report, and
    the error that stopped the query (``strict``), if any."""

    policy: str
    cfg: JobConfig
    report: object  # job.verify.compare.Report
    error: str | None = None


@dataclass(frozen=True, kw_only=True)
class Matrix:
    """The fault x policy matrix: the ledger, the run's summary, and one run per policy."""

    prefix: str
    ledger: str
    summary: object  # producers.runner.RunSummary
    runs: Mapping[str, PolicyRun]

    def frame(self, settings) -> pd.DataFrame:
        """:func:`matrix_frame` of the runs' reports against this matrix's ledger."""
        from job.verify.lake_check import load_ledger

        return matrix_frame({p: r.report for p, r in self.runs.items()}, load_ledger(self.ledger))


def _produce(
    settings,
    *,
    ledger: str,
    prefix: str,
    faults: Sequence[Fault],
    snapshot_every: int,
    sites: int,
    sessions: int,
    rate: float,
    duration: float,
    seed: int,
    run_id: str,
    session_length: int | None = None,
):
    from producers.runner import RunConfig, Runner

    summary = Runner(
        RunConfig(
            ledger=ledger,
            bootstrap=settings.endpoints().kafka_bootstrap,
            sites=sites,
            sessions=sessions,
            rate=rate,
            duration=duration,
            snapshot_every=snapshot_every,
            faults=tuple(faults),
            seed=seed,
            run_id=run_id,
            topic_prefix=prefix,
            rows=12,
            session_length=session_length,
        )
    ).run()
    if summary.error is not None:
        raise RuntimeError(f"the producers failed: {summary.error}")
    return summary


def _verify(spark, *, ledger: str, cfg: JobConfig, policy: str):
    """The verifier's report; an output the job never committed to (``strict`` stopped in its
    first batch) is verified as empty rather than failing to read."""
    from job.spark.lake import sink_log_batches
    from job.verify.compare import check, output_frames
    from job.verify.lake_check import load_ledger, verify_lake

    if sink_log_batches(spark, cfg.sink_path):
        return verify_lake(spark, ledger=ledger, lake=cfg.output, policy=policy)
    return check(load_ledger(ledger), *output_frames([], [], []), policy=policy)  # type: ignore[arg-type]


def run_policy(spark, settings, cfg: JobConfig, *, ledger: str, progress: Callable[[str], None] = print) -> PolicyRun:
    """Run the job with ``cfg`` until it has processed everything in Kafka (or a ``strict``
    query stops on a fault), stop its queries, and verify its output against ``ledger``.

    An :class:`~job.engine.errors.IntegrityError` is the expected outcome under ``strict`` and is
    kept in :attr:`PolicyRun.error`; under any other policy it is raised.
    """
    from job.engine.errors import IntegrityError
    from job.spark import pipeline

    bootstrap = settings.endpoints().kafka_bootstrap
    queries = pipeline.start(spark, cfg, bootstrap=bootstrap)
    error = None
    try:
        pipeline.drain(queries, bootstrap=bootstrap, topic_prefix=cfg.topic_prefix, progress=progress)
    except IntegrityError as exc:
        if cfg.policy != "strict":
            raise
        error = str(exc)
    finally:
        for q in queries:
            q.stop()
    progress(f"[integrity] {cfg.policy}: " + ("drained" if error is None else f"stopped: {error}"))
    report = _verify(spark, ledger=ledger, cfg=cfg, policy=cfg.policy)
    return PolicyRun(policy=cfg.policy, cfg=cfg, report=report, error=error)


@dataclass(frozen=True, kw_only=True)
class StrictPrefix:
    """:func:`strict_prefix`'s run: one session with a single ``drop`` at ``dropped_seq``,
    through a ``strict`` job in batches of ``batch_records``."""

    run: PolicyRun
    dropped_seq: int
    batch_records: int
    applied_seqs: tuple[int, ...]  # seq of every row change the lake holds, sorted

    @property
    def gap_free(self) -> bool:
        """The applied seqs are exactly 0..n-1 (snapshots write one change per row, so a seq
        may repeat; none may be missing or come from past the drop)."""
        seqs = sorted(set(self.applied_seqs))
        return seqs == list(range(len(seqs))) and (not seqs or seqs[-1] < self.dropped_seq)


def strict_prefix(
    spark,
    settings,
    *,
    workdir: Path,
    prefix: str,
    dropped_seq: int = 120,
    batch_records: int = 40,
    seed: int = 6,
    progress: Callable[[str], None] = print,
) -> StrictPrefix:
    """What ``strict`` commits before it stops: one site, one session (a snapshot every 25
    messages), whose message ``dropped_seq`` is dropped; the job reads it in batches of
    ``batch_records`` from the earliest offset. Every batch before the one holding the gap
    is committed; that batch and everything after it is not."""
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = str(workdir / "ledger-strict-prefix")
    drop = Drop(probability=1.0, target=Target(at=dropped_seq))
    _produce(
        settings,
        ledger=ledger,
        prefix=prefix,
        faults=(drop,),
        snapshot_every=25,
        sites=1,
        sessions=1,
        rate=2000.0,
        duration=10.0,
        seed=seed,
        run_id=f"sp{uuid.uuid4().hex[:6]}",
        session_length=3 * dropped_seq,
    )
    cfg = _config(settings, workdir, prefix, "strict-prefix", policy="strict", max_offsets_per_trigger=batch_records)
    run = run_policy(spark, settings, cfg, ledger=ledger, progress=progress)
    from job.spark.lake import sink_log_batches

    seqs: list[int] = []
    if sink_log_batches(spark, cfg.sink_path):
        rows = lake.read_output(spark, cfg.sink_path, "rows").select("seq").toPandas()
        seqs = sorted(int(x) for x in rows["seq"])
    return StrictPrefix(run=run, dropped_seq=dropped_seq, batch_records=batch_records, applied_seqs=tuple(seqs))


def _config(settings, workdir: Path, prefix: str, name: str, **overrides) -> JobConfig:
    # One output and checkpoint per run; no raw archive (nothing here reads it); a small cap
    # per batch so that strict writes the batches before the one it stops in.
    return JobConfig(
        output=f"s3a://{settings.bucket}/integrity/{prefix}{name}",
        checkpoint=workdir / f"ckpt-{name}",
        topic_prefix=prefix,
        raw_archive=False,
        trigger="1 second",
        **overrides,
    )


def fault_matrix(
    spark,
    settings,
    *,
    workdir: Path,
    prefix: str | None = None,
    policies: Sequence[str] = MATRIX_POLICIES,
    window: int = DEFAULT_WINDOW,
    faults: Sequence[Fault] | None = None,
    snapshot_every: int = 25,
    sites: int = 3,
    sessions: int = 2,
    rate: float = 400.0,
    duration: float = 8.0,
    seed: int = 6,
    max_offsets_per_trigger: int = 1000,
    progress: Callable[[str], None] = print,
) -> Matrix:
    """Produce one run with ``faults`` (default :func:`every_fault`) into topics
    ``<prefix>*`` (default ``integrity-<id>-``), then run and verify the job once per
    policy (``window`` is the reorder window of policy ``window``); see the module docstring.
    Ledger and checkpoints live under ``workdir``; outputs under ``s3a://<bucket>/integrity/``.
    """
    from producers.runner import new_run_id

    run_id = new_run_id()
    prefix = prefix or f"integrity-{run_id}-"
    workdir.mkdir(parents=True, exist_ok=True)
    ledger = str(workdir / f"ledger-{run_id}")
    faults = every_fault() if faults is None else faults
    progress(f"[integrity] producing {duration:.0f}s at {rate:.0f} msg/s with {len(faults)} faults into {prefix}*")
    summary = _produce(
        settings,
        ledger=ledger,
        prefix=prefix,
        faults=faults,
        snapshot_every=snapshot_every,
        sites=sites,
        sessions=sessions,
        rate=rate,
        duration=duration,
        seed=seed,
        run_id=run_id,
    )
    runs = {}
    for policy in policies:
        cfg = _config(
            settings, workdir, prefix, policy, policy=policy, window=window, max_offsets_per_trigger=max_offsets_per_trigger
        )
        runs[policy] = run_policy(spark, settings, cfg, ledger=ledger, progress=progress)
    return Matrix(prefix=prefix, ledger=ledger, summary=summary, runs=runs)


@dataclass(frozen=True, kw_only=True)
class SweepPoint:
    """One snapshot interval of :func:`interval_sweep`: its ledger, report and bound."""

    snapshot_every: int
    ledger: str
    report: object  # job.verify.compare.Report
    bound: int  # window_bound of the ledger
    faulted: int  # delivered records that carry a fault, plus records never sent by one


def interval_sweep(
    spark,
    settings,
    *,
    workdir: Path,
    intervals: Sequence[int] = (10, 25, 50),
    faults: Sequence[Fault],
    prefix: str | None = None,
    sites: int = 3,
    sessions: int = 1,
    rate: float = 300.0,
    duration: float = 6.0,
    seed: int = 6,
    progress: Callable[[str], None] = print,
) -> list[SweepPoint]:
    """Produce ``faults`` once per snapshot interval into ``<prefix>s<interval>-*`` (same
    seed: the faults hit the same message indices), run the job once under ``resync`` over
    ``<prefix>*``, and verify each interval's ledger on its own (the other intervals'
    sessions are foreign to it and not judged)."""
    from job.verify.lake_check import load_ledger
    from producers.runner import new_run_id

    prefix = prefix or f"integrity-{new_run_id()}-"
    workdir.mkdir(parents=True, exist_ok=True)
    ledgers = {}
    for n in intervals:
        run_id = f"{uuid.uuid4().hex[:4]}s{n}"
        ledgers[n] = str(workdir / f"ledger-s{n}-{run_id}")
        progress(f"[integrity] producing with a snapshot every {n} messages into {prefix}s{n}-*")
        _produce(
            settings,
            ledger=ledgers[n],
            prefix=f"{prefix}s{n}-",
            faults=faults,
            snapshot_every=n,
            sites=sites,
            sessions=sessions,
            rate=rate,
            duration=duration,
            seed=seed,
            run_id=run_id,
        )
    cfg = _config(settings, workdir, prefix, "sweep", policy="resync", max_offsets_per_trigger=None)
    run = run_policy(spark, settings, cfg, ledger=ledgers[intervals[0]], progress=progress)
    points = [
        SweepPoint(
            snapshot_every=intervals[0],
            ledger=ledgers[intervals[0]],
            report=run.report,
            bound=window_bound(load_ledger(ledgers[intervals[0]])),
            faulted=_faulted(load_ledger(ledgers[intervals[0]])),
        )
    ]
    for n in intervals[1:]:
        frame = load_ledger(ledgers[n])
        report = _verify(spark, ledger=ledgers[n], cfg=cfg, policy="resync")
        points.append(
            SweepPoint(snapshot_every=n, ledger=ledgers[n], report=report, bound=window_bound(frame), faulted=_faulted(frame))
        )
    return points


def _faulted(ledger: pd.DataFrame) -> int:
    return int(ledger["fault"].notna().sum())


def sweep_frame(points: Sequence[SweepPoint]) -> pd.DataFrame:
    """One row per interval: delivered, applied, quarantined, lost, set_aside (the last two
    summed), bound (:func:`window_bound`), faulted, set_aside_per_fault, share (of delivered), ok."""
    rows = []
    for p in points:
        r = p.report
        set_aside = r.quarantined + r.lost  # type: ignore[attr-defined]
        rows.append(
            {
                "snapshot_every": p.snapshot_every,
                "delivered": r.delivered,
                "applied": r.applied,  # type: ignore[attr-defined]
                "quarantined": r.quarantined,
                "lost": r.lost,
                "set_aside": set_aside,
                "bound": p.bound,  # type: ignore[attr-defined]
                "faulted": p.faulted,
                "set_aside_per_fault": set_aside / p.faulted if p.faulted else 0.0,
                "share": set_aside / r.delivered if r.delivered else 0.0,
                "ok": r.ok,  # type: ignore[attr-defined]
            }
        )
    return pd.DataFrame(rows)
