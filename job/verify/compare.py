"""The verifier: compare the job's outputs with what the producers' ledger says they must be.

:func:`check` is pure (pandas, no Spark): the Spark side reads the lake into pandas and
calls it, the baseline and the tests call it directly. What each session's output must
be, and where a fault allows it to differ, comes from :mod:`producers.expected_output`
(``expected_sessions``: intended final tables, loss windows, allowed anomalies); the
verifier only compares and attributes.

What is compared, per session of the ledger
    Every record the ledger says Kafka acknowledged (outcome ``ok``) must be *applied*
    (its row changes are in ``rows``, with the content of the bytes sent) or *quarantined*
    (in ``quarantine``); anything else is ``lost``. A message applied more than once is
    ``duplicated``. The table rebuilt from ``rows`` (:func:`job.engine.session.rebuild`) must
    equal the intended final table on every row the ledger marks certain (a mismatch is
    ``wrong-value``, ``lost`` or ``unexpected`` and is never allowed: a fault's window has
    closed by then, or the row is uncertain and not checked). The latest status row must
    say ``ended`` when a clean ``end`` was delivered (else ``unterminated``), and its
    ``gaps``, ``divergences`` and ``epoch_changes`` counters must be allowed by a fault.
    Output that no ledger record explains is ``unexpected``.

Order and event time (what the output shows, judged per session)
    ``reordered`` means *applied* out of sequence order, not arrived out of it: a record
    whose changes are in ``rows`` and that the job applied after it had already applied a
    record of the same session with a higher ``(epoch, seq)``. Each such record is one
    finding, at its own coordinates, naming the witness (the highest such record). The
    apply order is the order the core reads records in, ``(partition, offset)``: under
    ``strict``, ``resync`` and ``none`` each record is applied (or refused) when it is
    read. Under ``window`` a record ahead of the expected seq is held and applied once the
    seqs before it are; a change keeps its own record's offset, not the moment it was
    applied, so the verifier counts an earlier-offset record W as applied *after* the
    record R when the window could have held it: same epoch, W not a snapshot (a snapshot
    is never held), and every intended ``(epoch, seq)`` from R's up to W's applied (a
    window releases W only when that gap has closed). Limitation: whether the hold fitted
    the window size is not checked (``check`` does not know it). A re-application of a
    message is ``duplicated``, never ``reordered``. Allowed inside a ``reorder`` window
    (from the lower swapped seq to the next clean snapshot), under ``none`` only.

    ``late``: the event time of an applied record is out of line with its neighbours.
    Per session and epoch, take one event time per applied ``(epoch, seq)`` (the rows'
    ``event_ts_ms``) in seq order; a correct producer's clock makes them non-decreasing. A
    record is *in line* when it belongs to some longest non-decreasing subsequence of
    them; a record in none is late when it is more than :data:`LATE_TOLERANCE_MS` earlier
    than an in-line record before it or later than one after it. So a pause (a step
    forward) flags nothing, a single shifted record is the one flagged whichever way it
    moved, and when the times cannot say which of two records moved (a tie, e.g. the last
    two of an epoch) neither is flagged. Late records are applied and counted as applied
    (never lost). Allowed inside a ``clock-skew`` window (the skewed message), under every
    policy.

When an anomaly is allowed
    Only inside a loss window of a fault that allows that anomaly at that ``(epoch,
    seq)`` (``ExpectedSession.allows``), and only if the policy can show it at all:
    ``resync`` and ``window`` never apply a message twice (no ``duplicated``); ``strict``
    never quarantines, never counts a gap or divergence, and may lose records only by
    stopping: when the ledger holds a fault that makes ``strict`` fail, every record not
    yet written is allowed as ``lost`` (the query stopped), but what was written must be
    a gap-free prefix of each session whose table is the intended one at that point.

Sessions in the outputs that the ledger does not know (other runs sharing the topics, or
keyless records) are counted in ``foreign_sessions`` and not judged.
"""

from __future__ import annotations

import bisect
import dataclasses
import json
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, get_args

import pandas as pd

from job.engine.errors import UsageError
from job.engine.session import Policy, QuarantineRecord, RowChange, SessionStatus, check_policy, load_row, rebuild
from job.spark.lake import STATUS_COLUMNS
from producers.contract import ContractError, Kind, Row, decode
from producers.expected_output import DELIVERY_ALLOWED, ExpectedSession, LossWindow, changes_of, expected_sessions
from producers.faults import BAD_RECORD, STRICT_STOPPING, Anomaly
from producers.frames import records as frame_records
from producers.frames import tuples as frame_tuples

__all__ = [
    "KAFKA_DELETED",
    "LATE_TOLERANCE_MS",
    "QUARANTINE_COLUMNS",
    "ROWS_COLUMNS",
    "SESSIONS_COLUMNS",
    "DeletedRange",
    "Finding",
    "FindingKind",
    "Report",
    "Part",
    "check",
    "expected_for",
    "judge_part",
    "load_deleted",
    "output_frames",
    "report",
    "save_deleted",
    "strict_candidates",
    "strict_stop",
]

#: What a finding can be: the producers' anomalies, plus output nothing explains.
FindingKind = Literal[
    "lost",
    "quarantined",
    "duplicated",
    "reordered",
    "gap",
    "orphan",
    "divergence",
    "wrong-value",
    "epoch-change",
    "unterminated",
    "late",
    "unexpected",
]
assert set(get_args(FindingKind)) == {a.value for a in Anomaly} | {"unexpected"}

ROWS_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(RowChange))
QUARANTINE_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(QuarantineRecord))
SESSIONS_COLUMNS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(SessionStatus))

# What each policy can show at all, whatever the faults allow.
_POLICY_SHOWS: dict[str, frozenset[str]] = {
    "strict": frozenset({"lost", "wrong-value", "epoch-change", "unterminated", "late"}),
    "resync": frozenset(a.value for a in Anomaly) - {"duplicated", "reordered"},
    "window": frozenset(a.value for a in Anomaly) - {"duplicated", "reordered"},
    "none": frozenset(a.value for a in Anomaly),
}
#: How far (ms) an event time may run against seq order before it counts as ``late``: a
#: producer's clock can step back a little (NTP); the ``clock-skew`` fault moves a
#: message by a minute to an hour unless told otherwise.
LATE_TOLERANCE_MS = 1_000

# The lake's status columns back to the SessionStatus fields.
_STATUS_FIELDS = {column: name for name, column in STATUS_COLUMNS.items()}


@dataclass(frozen=True, kw_only=True)
class Finding:
    """One anomaly: what, where (session, ``(epoch, seq)``, record), which fault, allowed or not.

    ``epoch``/``seq`` are the intended message's (None for session-level findings without
    a place); ``topic``/``partition``/``offset`` the record's, when there is one.
    """

    kind: FindingKind
    session: str
    epoch: int | None
    seq: int | None
    topic: str | None
    partition: int | None
    offset: int | None
    fault: str | None
    allowed: bool
    detail: str

    def line(self) -> str:
        where = f"epoch {self.epoch} seq {self.seq}" if self.seq is not None else "session-wide"
        record = f" {self.topic}[{self.partition}]@{self.offset}" if self.offset is not None else ""
        verdict = (
            f"allowed by {self.fault}"
            if self.allowed
            else (f"NOT allowed, in a {self.fault} window" if self.fault else "NOT allowed, no fault explains it")
        )
        return f"{self.kind} session {self.session} {where}{record}: {self.detail} [{verdict}]"


@dataclass(frozen=True, kw_only=True)
class Report:
    """The verdict: ``ok`` when every finding is allowed by an injected fault."""

    policy: Policy
    ok: bool
    sessions: int  # sessions in the ledger, all checked
    delivered: int  # records the ledger says Kafka acknowledged
    applied: int  # ...of which the output applied
    quarantined: int  # ...quarantined
    lost: int  # ...neither
    foreign_sessions: int  # sessions in the outputs that the ledger does not know
    counts: Mapping[str, Mapping[str, int]]  # fault ("-": none) -> finding kind -> count
    anomalies: tuple[Finding, ...]

    @property
    def disallowed(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.anomalies if not f.allowed)

    def to_json(self) -> str:
        data = dataclasses.asdict(self)
        data["anomalies"] = [dataclasses.asdict(f) for f in self.anomalies]
        return json.dumps(data, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Report:
        """The report :meth:`to_json` wrote (``python -m job verify --json``), read back."""
        data = json.loads(text)
        return cls(**{**data, "anomalies": tuple(Finding(**f) for f in data["anomalies"])})

    def frame(self) -> pd.DataFrame:
        """The findings as a DataFrame (one row each). Its column types do not depend on the
        findings: the places are nullable integers and ``allowed`` is boolean even with no
        rows, so grouping by ``partition`` and looking partitions up by label behaves the same
        whether or not anything went wrong."""
        columns = [f.name for f in dataclasses.fields(Finding)]
        frame = pd.DataFrame([dataclasses.asdict(f) for f in self.anomalies], columns=columns)
        return frame.astype({**{c: "Int64" for c in ("epoch", "seq", "partition", "offset")}, "allowed": bool})

    def summary(self, limit: int = 10) -> str:
        bad = self.disallowed
        head = (
            f"verify (policy {self.policy}): {'OK' if self.ok else 'FAILED'}: {self.sessions} sessions, "
            f"{self.delivered} records delivered: {self.applied} applied, {self.quarantined} quarantined, "
            f"{self.lost} lost; {len(self.anomalies)} anomalies, "
            + ("all allowed by the injected faults" if self.ok else f"{len(bad)} NOT allowed")
        )
        lines = [head]
        for fault, kinds in sorted(self.counts.items()):
            label = "no fault" if fault == "-" else fault
            lines.append(f"  {label}: " + ", ".join(f"{n} {k}" for k, n in sorted(kinds.items())))
        if self.foreign_sessions:
            lines.append(f"  ({self.foreign_sessions} sessions in the outputs are not in the ledger; not judged)")
        if bad:
            lines.append(f"first {min(limit, len(bad))} of {len(bad)} anomalies no fault allows:")
            lines += [f"  {f.line()}" for f in bad[:limit]]
        return "\n".join(lines)


def output_frames(
    changes: Iterable[RowChange], quarantine: Iterable[QuarantineRecord], statuses: Iterable[SessionStatus]
) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """The ``rows``, ``quarantine`` and ``sessions`` outputs as DataFrames (columns = the fields)."""

    def frame(items: Iterable[Any], columns: Sequence[str], nullable_ints: Sequence[str] = ()) -> pd.DataFrame:
        # getattr, not dataclasses.astuple: that deep-copies every value and is slow here.
        df = pd.DataFrame([tuple(getattr(i, c) for c in columns) for i in items], columns=list(columns))
        for name in nullable_ints:
            df[name] = df[name].astype("Int64")
        return df

    return (
        frame(changes, ROWS_COLUMNS),
        frame(quarantine, QUARANTINE_COLUMNS, ("seq",)),
        frame(statuses, SESSIONS_COLUMNS),
    )


def check(
    ledger: pd.DataFrame,
    rows: pd.DataFrame,
    quarantine: pd.DataFrame,
    sessions: pd.DataFrame,
    *,
    policy: Policy,
    deleted: Sequence[DeletedRange] = (),
) -> Report:
    """Compare the outputs with the ledger (see the module docstring); returns a :class:`Report`.

    ``deleted`` lists :class:`DeletedRange` values: offsets Kafka deleted
    before the job read them (retention, ``delete_records``). A delivered record in one is
    expected to be lost, as if it had never been sent: a window named ``kafka-deleted``
    allows what a dropped message allows, up to the session's next clean snapshot after it.

    ``ledger`` is what :func:`producers.ledger.read_ledger` returns; ``rows``,
    ``quarantine`` and ``sessions`` have the fields of :class:`~job.engine.session.RowChange`,
    :class:`~job.engine.session.QuarantineRecord` and :class:`~job.engine.session.SessionStatus` as
    columns (extra columns are ignored; the lake's ``topic``/``partition``/``offset``/
    ``event_ts_ms`` for a status row are read as ``last_*``). ``sessions`` may hold
    several rows per session; the latest by ``(epoch, last_seq, last_offset)`` counts.
    """
    check_policy(policy)
    part = judge_part(ledger, rows, quarantine, sessions, policy=policy, deleted=deleted, stop=STOP_OF_THIS_LEDGER)
    return report(policy, part)


#: ``judge_part``'s ``stop`` when the ledger it is given is the whole ledger: the strict stop is
#: found in it. A caller judging a ledger in parts (:mod:`job.verify.spark_check`) finds the stop
#: over the whole ledger first (:func:`strict_candidates`) and passes it to every part.
STOP_OF_THIS_LEDGER = "this-ledger"


@dataclass(frozen=True, kw_only=True)
class Part:
    """What judging some sessions gives: their findings (in report order), record counts,
    the ledger's sessions judged, and the output's sessions the ledger does not know."""

    findings: list[Finding]
    tally: Counter[str]
    sessions: int
    foreign: frozenset[str]


def judge_part(
    ledger: pd.DataFrame,
    rows: pd.DataFrame,
    quarantine: pd.DataFrame,
    sessions: pd.DataFrame,
    *,
    policy: Policy,
    deleted: Sequence[DeletedRange] = (),
    stop: _Stop | None | str = STOP_OF_THIS_LEDGER,
) -> Part:
    """The rules of :func:`check` on any set of whole sessions: the ledger's rows and the
    outputs of those sessions (one session, a group of them, or all). ``stop``: under
    ``strict``, where the query stopped (:func:`strict_stop` over the whole ledger), or
    :data:`STOP_OF_THIS_LEDGER` when ``ledger`` is the whole ledger."""
    if ledger.attrs:  # the run's settings (read_ledger): pandas deep-copies them into every frame cut from this one
        ledger = ledger.copy(deep=False)
        ledger.attrs = {}
    gone = _deleted_records(ledger, deleted)
    rows = _columns(rows, ROWS_COLUMNS)
    quarantine = _columns(quarantine, QUARANTINE_COLUMNS)
    sessions = _columns(_rename_status(sessions), SESSIONS_COLUMNS)
    expected = _expected_with_deleted(ledger, gone) if gone else expected_sessions(ledger)
    if stop == STOP_OF_THIS_LEDGER:
        stop = strict_stop(strict_candidates(expected)) if policy == "strict" else None
    by_session = {str(k): v for k, v in ledger.groupby("session", sort=False)} if len(ledger) else {}
    out_rows = _group(rows)
    out_quarantine = _group(quarantine)
    latest = _latest_status(sessions)

    findings: list[Finding] = []
    tally: Counter[str] = Counter()
    for sid, exp in sorted(expected.items()):
        session = _Session(
            exp,
            by_session[sid],
            out_rows.get(sid, rows.iloc[0:0]),
            out_quarantine.get(sid, quarantine.iloc[0:0]),
            latest.get(sid),
            policy,
            stop if isinstance(stop, _Stop) else None,
            gone,
        )
        found, counted = _judge(session)
        findings += found
        tally.update(counted)
    seen = set(out_rows) | set(out_quarantine) | set(latest)
    foreign = frozenset(s for s in seen if s and s not in expected)
    return Part(findings=findings, tally=tally, sessions=len(expected), foreign=foreign)


def expected_for(ledger: pd.DataFrame, deleted: Sequence[DeletedRange] = ()) -> dict[str, ExpectedSession]:
    """What each session of ``ledger`` must show, when the records in ``deleted`` never reached the job."""
    gone = _deleted_records(ledger, deleted)
    return _expected_with_deleted(ledger, gone) if gone else expected_sessions(ledger)


def report(policy: Policy, *parts: Part) -> Report:
    """The :class:`Report` of parts that together hold every session of the ledger once, in any
    order: the findings are listed by session, each session's in the order they were found."""
    findings = sorted((f for p in parts for f in p.findings), key=lambda f: f.session)
    tally: Counter[str] = sum((p.tally for p in parts), Counter())
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    for f in findings:
        counts[f.fault or "-"][f.kind] += 1
    return Report(
        policy=policy,
        ok=all(f.allowed for f in findings),
        sessions=sum(p.sessions for p in parts),
        delivered=tally["delivered"],
        applied=tally["applied"],
        quarantined=tally["quarantined"],
        lost=tally["lost"],
        foreign_sessions=len(frozenset().union(*(p.foreign for p in parts))),
        counts={k: dict(v) for k, v in counts.items()},
        anomalies=tuple(findings),
    )


# -- one session ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Stop:
    """Under ``strict``: the fault that makes the query fail (the earliest in the ledger)."""

    fault: str
    session: str


class _Session:
    """One session's ledger rows and outputs, indexed by record and by intended ``(epoch, seq)``.

    It only answers questions; the checks below judge, and a :class:`_Findings` records.
    """

    def __init__(
        self,
        exp: ExpectedSession,
        ledger: pd.DataFrame,
        rows: pd.DataFrame,
        quarantine: pd.DataFrame,
        status: Mapping[str, Any] | None,
        policy: Policy,
        stop: _Stop | None,
        gone: Mapping[tuple[str, int, int], int] | None = None,
    ) -> None:
        self.exp, self.policy, self.stop = exp, policy, stop
        self.gone = gone or {}
        self.ledger = ledger.sort_values("send_index", kind="stable")
        self.rows, self.quarantine, self.status = rows, quarantine, status
        # Ledger rows by the record Kafka gave them; the intended messages' JSON by (epoch, seq).
        self.delivered: dict[tuple[str, int, int], Any] = {}
        self.intended: dict[tuple[int, int], str] = {}
        self.ledger_rows = frame_tuples(self.ledger)
        for r in self.ledger_rows:
            self.intended.setdefault((int(r.epoch), int(r.seq)), r.intended)
            if r.outcome == "ok":
                self.delivered[(str(r.topic), int(r.partition), int(r.offset))] = r
        self.order = sorted(self.intended)
        self.changes_at: dict[tuple[str, int, int], list[Any]] = defaultdict(list)
        for c in frame_tuples(rows):
            self.changes_at[(str(c.topic), int(c.partition), int(c.offset))].append(c)
        # Built on first use: only sessions with findings need them.
        self._touches: dict[str, list[tuple[int, int]]] | None = None
        self._where: dict[tuple[int, int], tuple[str, int, int]] | None = None
        self.quarantined_at = {(str(q.topic), int(q.partition), int(q.offset)): q for q in frame_tuples(quarantine)}

    @property
    def stopped_by(self) -> str | None:
        """Under ``strict``, the fault at which the query stops; None when none does or under another policy."""
        return self.stop.fault if self.policy == "strict" and self.stop is not None else None

    def ended_at(self, key: tuple[int, int]) -> bool:
        """True when the status row says the session ended with intended message ``key``."""
        s = self.status
        return s is not None and s["status"] == "ended" and (int(s["epoch"]), int(s["last_seq"])) == key

    def applied(self) -> list[tuple[tuple[str, int, int], tuple[int, int], Any]]:
        """Each record with changes in ``rows``, in apply order for the policies that apply
        on reading: ``(record, (epoch, seq), first change)``, sorted by (topic, partition, offset)."""
        return [
            (where, (int(cs[0].epoch), int(cs[0].seq)), cs[0])
            for where, cs in sorted(self.changes_at.items(), key=lambda item: item[0])
        ]

    def last_touch(self, rid: str, upto: tuple[int, int]) -> tuple[int, int] | None:
        """The intended message, up to ``upto``, that last set or removed row ``rid``."""
        if self._touches is None:
            self._touches = defaultdict(list)
            for key in self.order:  # in (epoch, seq) order, so each list is sorted
                m = decode(self.intended[key].encode("utf-8"), max_bytes=1 << 40)
                for _, row_id, _ in changes_of(m):
                    if row_id:  # not the marker of an empty snapshot
                        self._touches[row_id].append(key)
        keys = self._touches.get(rid, [])
        at = bisect.bisect_right(keys, upto)
        return keys[at - 1] if at else None

    def record_of(self, key: tuple[int, int] | None) -> tuple[str, int, int] | None:
        """Where the first delivered record of intended message ``key`` landed, if anywhere."""
        if self._where is None:
            self._where = {}
            for where, r in self.delivered.items():
                self._where.setdefault((int(r.epoch), int(r.seq)), where)
        return None if key is None else self._where.get(key)


class _Findings:
    """One session's findings, in the order noted, each attributed to the fault window (and
    the policy) that allows it."""

    def __init__(self, exp: ExpectedSession, policy: Policy, status: Mapping[str, Any] | None) -> None:
        self.exp, self.policy, self.status = exp, policy, status
        self.findings: list[Finding] = []
        # per epoch, the windows latest-opening first (ties in the session's order) with the
        # kinds each allows, and their -from_seq ascending for bisect: a Kafka deletion opens a
        # window per deleted record, and scanning them all per lost record was quadratic
        # (6,136 lost records of 5 sessions took 60 s; docs/verifier.md)
        self._by_epoch: dict[int, list[tuple[LossWindow, frozenset[str]]]] = defaultdict(list)
        for w in sorted(exp.windows, key=lambda w: -w.from_seq):
            self._by_epoch[w.epoch].append((w, frozenset(a.value for a in w.allowed)))
        self._starts = {e: [-w.from_seq for w, _ in ws] for e, ws in self._by_epoch.items()}

    def note(
        self,
        kind: FindingKind,
        detail: str,
        *,
        key: tuple[int, int] | None = None,
        record: tuple[str, int, int] | None = None,
        allowed: bool | None = None,
        fault: str | None = None,
        or_by: tuple[int, int] | None = None,
    ) -> None:
        """Record a finding; unless told, it is allowed when a window and the policy allow it, at
        ``key`` or, failing that, at ``or_by`` (the other record of a pair, e.g. the neighbour a
        record's event time is out of line with: either one's moved clock explains the pair)."""
        window = self._window(kind, key)
        judged = key
        if or_by is not None and not (window is not None and key is not None and window.allows(kind, *key)):  # type: ignore[arg-type]
            other = self._window(kind, or_by)
            if other is not None and other.allows(kind, *or_by):  # type: ignore[arg-type]
                window, judged = other, or_by
                detail = f"{detail} (seq {or_by[1]} carries the fault)"
        if allowed is None:
            allowed = window is not None and judged is not None and window.allows(kind, *judged)  # type: ignore[arg-type]
            if allowed and kind not in _POLICY_SHOWS[self.policy]:
                allowed, detail = False, f"{detail} (the fault allows it, policy {self.policy} must never show it)"
        topic, partition, offset = record if record is not None else (None, None, None)
        self.findings.append(
            Finding(
                kind=kind,
                session=self.exp.session,
                epoch=None if key is None else key[0],
                seq=None if key is None else key[1],
                topic=topic,
                partition=partition,
                offset=offset,
                fault=fault if fault is not None else (None if window is None else str(window.fault)),
                allowed=allowed,
                detail=detail,
            )
        )

    def note_counter(self, kind: FindingKind, detail: str) -> None:
        """Record a finding from a status counter: placed at the status row's last record, allowed
        when any window of the session allows ``kind`` and the policy can show it."""
        window = self._session_window(kind)
        allowed = window is not None and kind in _POLICY_SHOWS[self.policy]
        if window is not None and not allowed:
            detail = f"{detail} (the fault allows it, policy {self.policy} must never show it)"
        self.findings.append(
            Finding(
                kind=kind,
                session=self.exp.session,
                epoch=None if self.status is None else int(self.status["epoch"]),
                seq=None,
                topic=None if self.status is None else str(self.status["last_topic"]),
                partition=None if self.status is None else int(self.status["last_partition"]),
                offset=None if self.status is None else int(self.status["last_offset"]),
                fault=None if window is None else str(window.fault),
                allowed=allowed,
                detail=detail,
            )
        )

    def _window(self, kind: str, key: tuple[int, int] | None) -> LossWindow | None:
        """The window that allows ``kind`` at ``key`` or, failing that, one that covers it.

        Among several, the latest to open wins: it names the fault nearest the anomaly
        (a damaged record inside an earlier drop's window is blamed on its own damage).
        """
        if key is None:
            return None
        epoch, seq = key
        if epoch not in self._by_epoch:
            return None
        first = None
        # from the latest window that opened at or before seq back to the earliest
        for w, kinds in self._by_epoch[epoch][bisect.bisect_left(self._starts[epoch], -seq) :]:
            if w.to_seq is not None and seq >= w.to_seq:
                continue
            if kind in kinds:
                return w
            first = first or w
        return first

    def _session_window(self, kind: str) -> LossWindow | None:
        """The first window of the session that allows ``kind`` anywhere."""
        return next((w for w in self.exp.windows if kind in {a.value for a in w.allowed}), None)


def _judge(s: _Session) -> tuple[list[Finding], Counter[str]]:
    """Every finding for one session, in report order, and its record counts (``delivered``,
    ``applied``, ``quarantined``, ``lost``)."""
    out = _Findings(s.exp, s.policy, s.status)
    tally = _check_records(s, out)
    _check_unexplained(s, out)
    _check_duplicates(s, out)
    _check_reordered(s, out)
    _check_late(s, out)
    if s.policy == "strict":
        _check_strict_prefix(s, out)
    else:
        _check_table(s, out, s.exp)
    _check_status(s, out)
    return out.findings, tally


# -- the records: applied, quarantined, lost, unexplained, duplicated ------------------------


def _check_records(s: _Session, out: _Findings) -> Counter[str]:
    """Each delivered record: applied (with the content sent), quarantined, or lost; returns the counts."""
    tally: Counter[str] = Counter()
    for where, r in s.delivered.items():
        key = (int(r.epoch), int(r.seq))
        tally["delivered"] += 1
        q = s.quarantined_at.get(where)
        changes = s.changes_at.get(where)
        if q is not None:
            tally["quarantined"] += 1
            out.note("quarantined", f"quarantined as {q.reason}: {q.detail}", key=key, record=where)
            expected_reason = _contract_reason(r)
            if expected_reason is not None and q.reason != expected_reason:
                out.note(
                    "unexpected",
                    f"quarantined as {q.reason}, but the record breaks the contract with {expected_reason}",
                    key=key,
                    record=where,
                    allowed=False,
                )
            if changes:
                out.note("unexpected", "the record was both applied and quarantined", key=key, record=where, allowed=False)
        elif changes:
            tally["applied"] += 1
            problem = _content_problem(r.sent, changes)
            if problem:
                out.note("unexpected", problem, key=key, record=where, allowed=False)
        elif r.kind == Kind.END and s.ended_at(key):
            tally["applied"] += 1  # an `end` writes no row; the status says it was applied
        elif r.kind == Kind.END and s.exp.ended and key == (s.exp.last_epoch, s.exp.last_seq):
            tally["lost"] += 1  # reported once, as the session being unterminated
        else:
            tally["lost"] += 1
            _note_lost(s, out, r, key, where)
    return tally


def _note_lost(s: _Session, out: _Findings, r: Any, key: tuple[int, int], where: tuple[str, int, int]) -> None:
    """Note delivered record ``r`` as lost, saying why it may be: the strict stop, a Kafka deletion, or nothing."""
    if s.stopped_by is not None:
        out.note(
            "lost",
            f"not written: the strict query stops at the first {s.stopped_by}",
            key=key,
            record=where,
            allowed=True,
            fault=s.stopped_by,
        )
    elif where in s.gone:
        out.note("lost", f"Kafka deleted this {r.kind} before the job read it", key=key, record=where)
    else:
        out.note("lost", f"a delivered {r.kind} is neither applied nor quarantined", key=key, record=where)


def _check_unexplained(s: _Session, out: _Findings) -> None:
    """Output that refers to a record the ledger did not deliver to this session."""
    maybe = [r for r in s.ledger_rows if r.outcome == "indeterminate"]
    maybe_keys = {(int(r.epoch), int(r.seq)) for r in maybe}
    maybe_bytes = {bytes(r.sent) for r in maybe if r.sent is not None}
    for where, changes in s.changes_at.items():
        if where in s.delivered:
            continue
        key = (int(changes[0].epoch), int(changes[0].seq))
        if key not in maybe_keys:
            out.note(
                "unexpected",
                f"{changes[0].op} changes from a record the ledger never delivered",
                key=key,
                record=where,
                allowed=False,
            )
    for where, q in s.quarantined_at.items():
        if where in s.delivered:
            continue
        if q.value is None or bytes(q.value) not in maybe_bytes:
            out.note("unexpected", f"quarantined ({q.reason}) a record the ledger never delivered", record=where, allowed=False)


def _check_duplicates(s: _Session, out: _Findings) -> None:
    """A message (epoch, seq) applied more than once (twice the same row change)."""
    if s.rows.empty:
        return
    counts = s.rows.groupby(["epoch", "seq", "op", "row_id"], sort=False).size()
    twice = counts[counts > 1].sort_index()  # sorted: .loc on an unsorted MultiIndex warns (PerformanceWarning)
    for epoch, seq in sorted({(int(e), int(q)) for e, q, _, _ in twice.index}):
        at = s.rows[(s.rows["epoch"] == epoch) & (s.rows["seq"] == seq)]
        # the copy applied last, in offset order: the lake's row order differs from read to read
        last = at.sort_values(["topic", "partition", "offset"], kind="stable").iloc[-1]
        times = int(twice.loc[(epoch, seq)].max())
        out.note(
            "duplicated",
            f"applied {times} times (from offsets {sorted(set(map(int, at['offset'])))})",
            key=(epoch, seq),
            record=(str(last["topic"]), int(last["partition"]), int(last["offset"])),
        )


# -- order and event time -------------------------------------------------------------------


def _check_reordered(s: _Session, out: _Findings) -> None:
    """Records applied after a record with a higher (epoch, seq); see the module docstring."""
    applied = s.applied()
    if not applied:
        return
    done = {key for _, key, _ in applied}
    earlier: list[tuple[tuple[int, int], tuple[str, int, int], str]] = []  # sorted by key
    seen: set[tuple[int, int]] = set()
    for where, key, change in applied:
        if key in seen:
            continue  # applied again: that is `duplicated`
        seen.add(key)
        if earlier and earlier[-1][0] > key:
            ahead = earlier[bisect.bisect_right(earlier, (key, ("", 0, 0), "")) :]
            if s.policy == "window":
                ahead = [w for w in ahead if not _window_held(s.order, key, w[0], w[2], done)]
            if ahead:
                (e, q), (_, _, at), _ = max(ahead)
                out.note(
                    "reordered",
                    f"seq {key[1]} (epoch {key[0]}) applied at offset {where[2]} after seq {q} (epoch {e}) at offset {at}",
                    key=key,
                    record=where,
                )
        bisect.insort(earlier, (key, where, str(change.op)))


def _window_held(
    order: Sequence[tuple[int, int]], key: tuple[int, int], ahead: tuple[int, int], op: str, done: set[tuple[int, int]]
) -> bool:
    """Could policy ``window`` have held the record ``ahead`` until ``key`` was applied?
    (``order``: the session's intended keys, sorted; ``done``: the keys applied.)"""
    if ahead[0] != key[0] or op == "snapshot":
        return False
    lo, hi = bisect.bisect_right(order, key), bisect.bisect_left(order, ahead)
    return all(k in done for k in order[lo:hi])


def _check_late(s: _Session, out: _Findings) -> None:
    """Applied records whose event time is out of line with their neighbours (module docstring)."""
    first: dict[tuple[int, int], tuple[int, tuple[str, int, int]]] = {}
    for where, key, change in s.applied():
        first.setdefault(key, (int(change.event_ts_ms), where))
    by_epoch: dict[int, list[tuple[int, int, tuple[str, int, int]]]] = defaultdict(list)
    for (epoch, seq), (ts, where) in sorted(first.items()):
        by_epoch[epoch].append((seq, ts, where))
    for epoch, records in by_epoch.items():
        times = [ts for _, ts, _ in records]
        for i, (side, j) in _out_of_line(times, LATE_TOLERANCE_MS):
            seq, ts, where = records[i]
            other_seq, other_ts, _ = records[j]
            detail = (
                f"event time {ts} is {other_ts - ts} ms earlier than seq {other_seq}'s before it"
                if side == "earlier"
                else f"event time {ts} is {ts - other_ts} ms later than seq {other_seq}'s after it"
            )
            # The pair is out of line; which of the two had its clock moved, the sequence alone
            # cannot say (two skewed records in a row outnumber one in-line one after them).
            out.note("late", detail, key=(epoch, seq), record=where, or_by=(epoch, other_seq))


# -- the final table ------------------------------------------------------------------------


def _check_table(s: _Session, out: _Findings, exp: ExpectedSession) -> None:
    """The rebuilt table against ``exp``'s intended one, on the rows the ledger marks certain."""
    got = rebuild(frame_records(s.rows)).get(exp.session, {})
    want = exp.checked_rows()
    for rid in sorted(want.keys() | got.keys()):
        if rid in exp.uncertain_ids:
            continue
        have, need = got.get(rid), want.get(rid)
        if have == need:
            continue
        key = s.last_touch(rid, upto=(exp.last_epoch, exp.last_seq))
        if need is None:
            kind: FindingKind = "unexpected"
            detail = f"row {rid!r} is in the output table but not in the intended one"
        elif have is None:
            kind, detail = "lost", f"row {rid!r} is missing from the output table"
        else:
            kind = "wrong-value"
            diff = sorted(c for c in need.keys() | have.keys() if need.get(c) != have.get(c))
            detail = f"row {rid!r} differs in {', '.join(diff)}: {_show(have, diff)} instead of {_show(need, diff)}"
        # The ledger's windows are closed (or the row would be uncertain): never allowed.
        out.note(kind, detail, key=key, record=s.record_of(key), allowed=False)


def _check_strict_prefix(s: _Session, out: _Findings) -> None:
    """``strict`` wrote a gap-free prefix of the session, whose table is the intended one."""
    written = {(int(e), int(q)) for e, q in zip(s.rows["epoch"], s.rows["seq"], strict=True)}
    end_key = s.order[-1] if s.order else None
    if end_key is not None and s.ended_at(end_key):
        written.add(end_key)
    n = max((i + 1 for i, k in enumerate(s.order) if k in written), default=0)
    # Only a hole with a written message of the same epoch after it was visible to strict;
    # the tail of an older epoch can go missing unnoticed (a new epoch restarts at seq 0).
    # Nor is anything before the first record Kafka delivered when that record is a
    # snapshot: the core joins a new session there (see job.engine.session), the whole table.
    first = s.delivered[min(s.delivered)] if s.delivered else None
    joined = (int(first.epoch), int(first.seq)) if first is not None and first.kind == "snapshot" else None
    # The first message strict wrote is the first it saw: it applies each message or stops,
    # and every applied message writes a change. A snapshot there is a join even when its
    # record's delivery was indeterminate, so not among the delivered (the output shows it arrived).
    first_written = next((k for k in s.order if k in written), None)
    if joined is None and first_written is not None:
        kinds = {(int(r.epoch), int(r.seq)): r.kind for r in s.ledger_rows}
        joined = first_written if kinds.get(first_written) == "snapshot" else None
    missing = [
        k
        for k in s.order[:n]
        if k not in written and any(w > k and w[0] == k[0] for w in written) and not (joined and k < joined)
    ]
    if missing:
        after = next(k for k in s.order if k > missing[0] and k in written)
        out.note(
            "unexpected",
            f"strict wrote epoch {after[0]} seq {after[1]} past the missing seq {missing[0][1]} "
            f"(it must stop at the first fault)",
            key=after,
            record=s.record_of(after),
            allowed=False,
        )
    if n == 0:
        return
    written_keys = set(s.order[:n])
    keys = zip(s.ledger["epoch"], s.ledger["seq"], strict=True)
    prefix = s.ledger[[(int(e), int(q)) in written_keys for e, q in keys]]
    _check_table(s, out, expected_sessions(prefix)[s.exp.session])


# -- the status row and its counters --------------------------------------------------------


def _check_status(s: _Session, out: _Findings) -> None:
    """The latest status row: present, ``ended`` exactly when a clean end was delivered, and
    its gap, divergence and epoch-change counters each explained by a fault."""
    status, exp = s.status, s.exp
    if status is None:
        if s.delivered and s.stopped_by is not None:
            out.note(
                "lost", f"no status row: the strict query stopped at the first {s.stopped_by}", allowed=True, fault=s.stopped_by
            )
        elif s.delivered:
            out.note("unexpected", "the output has no status row for this session", allowed=False)
        return
    end_key = (exp.last_epoch, exp.last_seq)
    if exp.ended and status["status"] != "ended":
        detail = f"the clean end was delivered but the session is {status['status']}"
        if s.stopped_by is not None:
            detail += f" (the strict query stopped at the first {s.stopped_by})"
            out.note("unterminated", detail, key=end_key, record=s.record_of(end_key), allowed=True, fault=s.stopped_by)
        else:
            out.note("unterminated", detail, key=end_key, record=s.record_of(end_key))
    if not exp.ended and status["status"] == "ended" and not _end_may_have_arrived(s.ledger):
        out.note("unexpected", "the session is ended but no usable end was delivered", key=end_key, allowed=False)
    _check_counters(s, out, status)


def _check_counters(s: _Session, out: _Findings, status: Mapping[str, Any]) -> None:
    """The status row's ``gaps``, ``divergences`` and ``epoch_changes``: each must be allowed by
    a fault; the n-th epoch change is matched with the n-th restart window."""
    if int(status["gaps"]) > 0:
        out.note_counter("gap", f"the status counts {int(status['gaps'])} gaps")
    if int(status["divergences"]) > 0:
        out.note_counter("divergence", f"the status counts {int(status['divergences'])} divergent snapshots")
    resets = [w for w in s.exp.windows if Anomaly.EPOCH_CHANGE in w.allowed]
    for i in range(int(status["epoch_changes"])):
        if i < len(resets):
            w = resets[i]
            out.note(
                "epoch-change",
                f"producer restart into epoch {w.epoch}",
                key=(w.epoch, w.from_seq),
                record=s.record_of((w.epoch, w.from_seq)),
            )
        else:
            detail = f"epoch change {i + 1} of {int(status['epoch_changes'])}: no restart explains it"
            out.note_counter("epoch-change", detail)
            out.findings[-1] = dataclasses.replace(out.findings[-1], allowed=False)


def _end_may_have_arrived(ledger: pd.DataFrame) -> bool:
    """True when ``ledger`` holds an ``end`` that was (or may have been) delivered and decodes as one."""
    for r in frame_tuples(ledger):
        if r.kind != Kind.END or r.outcome not in ("ok", "indeterminate") or r.sent is None:
            continue
        try:
            if decode(bytes(r.sent)).kind is Kind.END:
                return True
        except ContractError:
            continue
    return False


# -- event time ----------------------------------------------------------------------------


def _out_of_line(times: Sequence[int], tolerance: int) -> list[tuple[int, tuple[str, int]]]:
    """The indexes of ``times`` (event times in seq order) that are out of line, each with
    its witness: ``("earlier", j)`` (more than ``tolerance`` before the in-line time at
    ``j < i``) or ``("later", j)`` (more than ``tolerance`` after the in-line time at ``j > i``).

    In line means in some longest non-decreasing subsequence: ``ending[i] + starting[i] - 1``
    equals its length, where ``ending``/``starting`` are the longest such subsequences
    ending/starting at ``i`` (patience sorting, O(n log n); sessions run to thousands).
    """
    n = len(times)
    ending, starting = [0] * n, [0] * n
    tails: list[int] = []
    for i, t in enumerate(times):
        at = bisect.bisect_right(tails, t)
        tails[at : at + 1] = [t]
        ending[i] = at + 1
    tails = []
    for i in range(n - 1, -1, -1):  # backwards, negated: non-decreasing from i onwards
        at = bisect.bisect_right(tails, -times[i])
        tails[at : at + 1] = [-times[i]]
        starting[i] = at + 1
    longest = max(ending, default=0)
    inline = [ending[i] + starting[i] - 1 == longest for i in range(n)]
    # For each index, the in-line index before it with the latest time and the one after it with the earliest.
    before: list[int | None] = [None] * n
    best = None
    for i in range(n):
        before[i] = best
        if inline[i] and (best is None or times[i] >= times[best]):
            best = i
    after: list[int | None] = [None] * n
    best = None
    for i in range(n - 1, -1, -1):
        after[i] = best
        if inline[i] and (best is None or times[i] <= times[best]):
            best = i
    out: list[tuple[int, tuple[str, int]]] = []
    for i in range(n):
        if inline[i]:
            continue
        b, a = before[i], after[i]
        if b is not None and times[i] < times[b] - tolerance:
            out.append((i, ("earlier", b)))
        elif a is not None and times[i] > times[a] + tolerance:
            out.append((i, ("later", a)))
    return out


# -- records Kafka deleted -----------------------------------------------------------------


#: The name the verifier gives a loss Kafka caused (a record deleted before the job read it).
KAFKA_DELETED = "kafka-deleted"


@dataclass(frozen=True, kw_only=True, order=True)
class DeletedRange:
    """Offsets ``[start, end)`` of ``topic[partition]`` that Kafka deleted before the job read them."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def count(self) -> int:
        return self.end - self.start

    def contains(self, topic: str, partition: int, offset: int) -> bool:
        return topic == self.topic and partition == self.partition and self.start <= offset < self.end

    def line(self) -> str:
        return f"{self.topic}[{self.partition}] offsets {self.start}..{self.end - 1} ({self.count} records)"


def save_deleted(ranges: Sequence[DeletedRange], path: Path) -> Path:
    """Write ``ranges`` as JSON (``[{"topic", "partition", "start", "end"}, ...]``, end excluded)
    for ``python -m job verify --kafka-deleted``."""
    path.write_text(json.dumps([dataclasses.asdict(d) for d in ranges], indent=1))
    return path


def load_deleted(path: Path) -> list[DeletedRange]:
    """Read :func:`save_deleted`'s file; a missing or malformed one raises UsageError naming it."""
    fix = "write it with job.verify.compare.save_deleted (a JSON list of {topic, partition, start, end})"
    try:
        items = json.loads(path.read_text())
        ranges = [
            DeletedRange(topic=str(i["topic"]), partition=int(i["partition"]), start=int(i["start"]), end=int(i["end"]))
            for i in items
        ]
    except FileNotFoundError:
        raise UsageError(f"--kafka-deleted {path}: no such file", fix) from None
    except (ValueError, TypeError, KeyError) as exc:
        raise UsageError(f"--kafka-deleted {path}: not a list of deleted ranges ({exc})", fix) from None
    bad = [d for d in ranges if d.start < 0 or d.end < d.start]
    if bad:
        raise UsageError(f"--kafka-deleted {path}: a range ends before it starts: {bad[0]}", fix)
    return ranges


def _deleted_records(ledger: pd.DataFrame, deleted: Sequence[DeletedRange]) -> dict[tuple[str, int, int], int]:
    """The delivered records inside a deleted range: ``(topic, partition, offset) -> send_index``."""
    if not len(deleted) or ledger.empty:
        return {}
    ok = ledger[ledger["outcome"] == "ok"]
    out: dict[tuple[str, int, int], int] = {}
    for d in deleted:
        hit = ok[(ok["topic"] == d.topic) & (ok["partition"] == d.partition) & (ok["offset"] >= d.start) & (ok["offset"] < d.end)]
        out.update({(str(r.topic), int(r.partition), int(r.offset)): int(r.send_index) for r in hit.itertuples(index=False)})
    return out


def _expected_with_deleted(ledger: pd.DataFrame, gone: Mapping[tuple[str, int, int], int]) -> dict[str, ExpectedSession]:
    """The expectation when ``gone`` never reached the job: as if their delivery had failed
    (a window to the next clean snapshot, a deleted snapshot no resync point), the windows
    they open named ``kafka-deleted``."""
    indexes = set(gone.values())
    as_sent = ledger.copy()
    as_sent.loc[as_sent["send_index"].isin(indexes), "outcome"] = "failed"
    out = {}
    for sid, exp in expected_sessions(as_sent).items():
        windows = tuple(
            dataclasses.replace(w, fault=KAFKA_DELETED) if w.send_index in indexes and w.fault == "delivery-failed" else w
            for w in exp.windows
        )
        out[sid] = dataclasses.replace(exp, windows=windows)
    return out


# -- frames --------------------------------------------------------------------------------


def _columns(df: pd.DataFrame | None, columns: Sequence[str]) -> pd.DataFrame:
    if df is None or (df.empty and not set(columns) <= set(df.columns)):
        return pd.DataFrame({c: pd.Series(dtype=object) for c in columns})
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise UsageError(
            f"an output frame lacks the columns {', '.join(missing)}",
            f"pass frames with the fields of the job.engine.session dataclasses ({', '.join(columns)})",
        )
    return df.reset_index(drop=True)


def _rename_status(df: pd.DataFrame | None) -> pd.DataFrame | None:
    if df is None or "last_offset" in df.columns:
        return df
    renames = {k: v for k, v in _STATUS_FIELDS.items() if k in df.columns}
    return df.rename(columns=renames)


def _group(df: pd.DataFrame) -> dict[str, pd.DataFrame]:
    if df.empty:
        return {}
    return {str(k): v for k, v in df.groupby("session", sort=False)}


def _latest_status(df: pd.DataFrame) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    best: dict[str, tuple[int, ...]] = {}
    for s in frame_records(df):
        sid = str(s["session"])
        rank = (int(s["epoch"]), int(s["last_seq"]), int(s["last_offset"]), int(s["applied"]) + int(s["quarantined"]))
        if sid not in best or rank >= best[sid]:
            best[sid], out[sid] = rank, s
    return out


def strict_candidates(expected: Mapping[str, ExpectedSession]) -> list[tuple[int, str, str]]:
    """The faults that make ``strict`` fail, as ``(send_index, fault, session)``."""
    return [
        (int(w.send_index), str(w.fault), s.session) for s in expected.values() for w in s.windows if w.fault in _STRICT_STOPS
    ]


def strict_stop(candidates: Iterable[tuple[int, str, str]]) -> _Stop | None:
    """Where ``strict`` stops: the earliest of the :func:`strict_candidates` (by send index), if any."""
    first = min(candidates, default=None)
    return None if first is None else _Stop(first[1], first[2])


# Window causes after which a strict query fails (a bad record, a gap, a duplicate, a
# divergence): the faults the registry marks so, and every undelivered message.
_STRICT_STOPS: frozenset[str] = STRICT_STOPPING | frozenset(DELIVERY_ALLOWED)


def _contract_reason(r: Any) -> str | None:
    if r.fault not in BAD_RECORD or not r.fault_detail:
        return None
    return json.loads(r.fault_detail).get("reason")


def _content_problem(sent: bytes | None, changes: list[Any]) -> str | None:
    """Why the changes written for a record do not say what its bytes said (None if they do)."""
    try:
        m = decode(None if sent is None else bytes(sent))
    except ContractError as exc:
        return f"applied a record that breaks the contract ({exc.reason})"
    if {(int(c.epoch), int(c.seq)) for c in changes} != {(m.epoch, m.seq)}:
        carried = sorted({(int(c.epoch), int(c.seq)) for c in changes})
        return f"changes carry (epoch, seq) {carried}, the record ({m.epoch}, {m.seq})"
    got = {(str(c.op), str(c.row_id)): _row(c.data) for c in changes}
    if m.kind is Kind.END:
        return "row changes written for an end message"
    want = {(op, rid): row for op, rid, row in changes_of(m)}
    # A record applied twice shows each change twice; that is reported as duplicated.
    if got != want:
        return f"the changes do not match the {m.kind} that was sent"
    return None


def _row(data: object) -> Any:
    if data is None or (isinstance(data, float) and data != data):  # None, or NaN from pandas
        return None
    return load_row(str(data))


def _show(row: Row, columns: Sequence[str]) -> str:
    return "{" + ", ".join(f"{c}={row.get(c)!r}" for c in columns) + "}"
