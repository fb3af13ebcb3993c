"""A producer run: several sites, their sessions one after another, faults, and the ledger.

:class:`Runner` drives every site from one thread (so the interleaving is simple and the
rate is one token bucket): at each tick it picks the next site round-robin, asks its
session for one step and sends what comes out. Sites listed in ``join`` arrive during the
run (their topics appear then, to exercise topic discovery). The run ends when every
site has finished its sessions, when ``duration`` is up (open sessions then send ``end``),
or on :meth:`Runner.stop` (same as the deadline). Either way the producer is flushed and
every ledger row is written; rows without a delivery report by then are
``indeterminate``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from producers.contract import TOPIC_PREFIX
from producers.errors import ProducerError, RunConfigError
from producers.faults import Fault, Transmission
from producers.kafka import Delivery, KafkaTransport, Transport
from producers.ledger import LedgerRow, LedgerWriter, RunInfo, S3Target
from producers.sessions import SessionDriver, SessionPlan
from producers.sites import SITE_TYPES, Site, site_name, topic_for
from sandbox.settings import KAFKA_BOOTSTRAP, shown

__all__ = ["RunProgress", "RunConfig", "RunSummary", "Runner", "new_run_id"]

StopReason = Literal["completed", "duration", "stopped", "aborted", "error"]


def new_run_id() -> str:
    """A short id that keeps session ids of different runs apart (``r`` + 6 hex digits)."""
    return "r" + uuid.uuid4().hex[:6]


@dataclass(frozen=True, kw_only=True)
class RunConfig:
    """Everything a run needs; built once at the edge (CLI, notebook, test) and passed down.

    ``rate`` is the target for all sites together, in messages per second (sessions in a
    ``burst`` go faster). ``sessions`` is per site, one after another; each has
    ``session_length`` messages before its ``end`` (default: enough to fill ``duration``
    at ``rate``). ``rows`` fixes each site's initial table size (default: 200-400 rows,
    from the seed).
    """

    ledger: str
    bootstrap: str = KAFKA_BOOTSTRAP
    sites: int = 3
    join: int = 0
    sessions: int = 4
    rate: float = 500.0
    duration: float = 60.0
    session_length: int | None = None
    snapshot_every: int = 200
    snapshot_interval_s: float | None = None
    faults: tuple[Fault, ...] = ()
    seed: int = 0
    run_id: str | None = None
    topic_prefix: str = TOPIC_PREFIX
    partitions: int = 3
    rows: int | None = None
    s3: S3Target | None = None
    producer_config: Mapping[str, Any] = field(default_factory=dict)
    flush_timeout_s: float = 30.0

    def __post_init__(self) -> None:
        checks: list[tuple[str, object, bool, str]] = [
            ("--sites", self.sites, self.sites >= 1, "run at least 1 site"),
            ("--join", self.join, self.join >= 0, "use 0 or more sites joining later"),
            ("--sessions", self.sessions, self.sessions >= 1, "each site needs at least 1 session"),
            ("--rate", self.rate, self.rate > 0, "use a positive number of messages per second"),
            ("--duration", self.duration, self.duration > 0, "use a positive number of seconds"),
            (
                "--snapshot-every",
                self.snapshot_every,
                self.snapshot_every >= 1,
                "use a positive message count, e.g. 200",
            ),
            ("--partitions", self.partitions, self.partitions >= 1, "topics need at least 1 partition"),
            ("--rows", self.rows, self.rows is None or self.rows >= 1, "tables need at least 1 row"),
            (
                "--session-length",
                self.session_length,
                self.session_length is None or self.session_length >= 1,
                "use at least 1",
            ),
            (
                "--snapshot-interval",
                self.snapshot_interval_s,
                self.snapshot_interval_s is None or self.snapshot_interval_s > 0,
                "use a positive number of seconds",
            ),
        ]
        for name, value, ok, fix in checks:
            if not ok:
                raise RunConfigError(name, value, fix)
        if self.run_id is not None and not self.run_id.replace("-", "").isalnum():
            raise RunConfigError("--run-id", self.run_id, "use letters, digits and dashes only")
        topic_for("x", self.topic_prefix)  # validates the prefix

    @property
    def plan(self) -> SessionPlan:
        length = self.session_length or max(10, int(self.rate * self.duration / ((self.sites + self.join) * self.sessions)))
        return SessionPlan(length=length, snapshot_every=self.snapshot_every, snapshot_interval_s=self.snapshot_interval_s)

    def settings(self) -> dict[str, Any]:
        """The settings as JSON-able data (stored in the ledger's run info; no secrets)."""
        out = {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if f.name not in ("faults", "s3", "producer_config", "ledger", "run_id")
        }
        out["session_length"] = self.plan.length
        return out


@dataclass(frozen=True, kw_only=True)
class RunProgress:
    """A snapshot of a running run, for a progress line."""

    elapsed_s: float
    rate: float  # messages handed to Kafka per second, since the previous report
    mb_per_s: float
    rows: int  # ledger rows so far
    sent: int
    ok: int
    failed: int
    indeterminate: int
    not_sent: int
    pending: int
    faults: Mapping[str, int]
    queue_full_waits: int
    client_errors: int
    sites: int
    sessions_done: int
    last_error: str | None = None

    def line(self) -> str:
        """One line, most important first (a narrow terminal cuts the end): rate, fault hits,
        delivery errors, then counts."""
        faults = " ".join(f"{k}={v}" for k, v in sorted(self.faults.items())) or "none"
        text = (
            f"{self.elapsed_s:6.1f}s {self.rate:6.0f} msg/s {self.mb_per_s:5.2f} MB/s | faults: {faults} | "
            f"errors: failed {self.failed} indet {self.indeterminate} client {self.client_errors} "
            f"queue-full {self.queue_full_waits} | sent {self.sent} ok {self.ok} pending {self.pending} | "
            f"sites {self.sites} sessions done {self.sessions_done}"
        )
        return text + (f" | last client error: {self.last_error}" if self.last_error else "")


@dataclass(frozen=True, kw_only=True)
class RunSummary:
    """What a run did, per outcome, per fault and per site."""

    run_id: str
    ledger: str
    stopped: StopReason
    elapsed_s: float
    rows: int
    bytes_sent: int
    outcomes: Mapping[str, int]
    faults: Mapping[str, int]
    sites: Mapping[str, Mapping[str, int]]  # site -> {"sessions": n, "rows": n, "ok": n, ...}
    topics: tuple[str, ...]
    client_errors: int = 0  # connection-level errors librdkafka reported (it retries them)
    last_client_error: str | None = None
    error: str | None = None

    def text(self, *, sites: bool = True) -> str:
        """The summary a person reads; ``sites=False`` leaves out the per-site table."""
        lines = [
            f"run {self.run_id}: {self.stopped} after {self.elapsed_s:.1f}s, {self.rows} ledger rows, "
            f"{self.bytes_sent / 1e6:.2f} MB sent ({self.rows / max(self.elapsed_s, 1e-9):.0f} rows/s)",
            "outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(self.outcomes.items())),
            "faults:   " + (", ".join(f"{k} {v}" for k, v in sorted(self.faults.items())) or "none"),
        ]
        if sites:
            lines.append(f"{'site':<16}{'sessions':>9}{'rows':>8}{'ok':>8}{'failed':>8}{'indet':>7}{'not-sent':>9}")
        for site, c in self.sites.items() if sites else ():
            lines.append(
                f"{site:<16}{c.get('sessions', 0):>9}{c.get('rows', 0):>8}{c.get('ok', 0):>8}"
                f"{c.get('failed', 0):>8}{c.get('indeterminate', 0):>7}{c.get('not-sent', 0):>9}"
            )
        if self.client_errors:
            lines.append(f"client:   {self.client_errors} connection errors, last: {self.last_client_error}")
        lines.append(f"ledger:   {shown(self.ledger)}")
        if self.error:
            lines.append(f"error:    {self.error}")
        return "\n".join(lines)


@dataclass
class _SiteState:
    site: Site
    topic: str
    ordinal: int = 0
    driver: SessionDriver | None = None
    finished: bool = False


@dataclass
class _Pace:
    """The run's one token bucket: which active site sends next, round-robin, at the configured rate."""

    interval: float  # seconds per message, all sites together
    next_due: float
    turn: int = 0

    def take(self, active: Sequence[_SiteState], now: float) -> _SiteState | None:
        """The next site in turn when its message is due by ``now``; None (and no change) when not yet."""
        if now < self.next_due:
            return None
        # Never bank more than half a second of catch-up after a stall.
        self.next_due = max(self.next_due + self.interval, now - 0.5)
        state = active[self.turn % len(active)]
        self.turn += 1
        return state


class Runner:
    """Runs one :class:`RunConfig`. Not reusable: build a new one per run.

    ``transport`` defaults to a :class:`~producers.kafka.KafkaTransport` on
    ``config.bootstrap``. ``on_progress`` is called about every ``progress_every_s``
    seconds. ``wall`` (epoch seconds, for event times) and ``monotonic`` (for pacing) are
    injectable for tests.
    """

    def __init__(
        self,
        config: RunConfig,
        *,
        transport: Transport | None = None,
        on_progress: Callable[[RunProgress], None] | None = None,
        progress_every_s: float = 0.5,
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.run_id = config.run_id or new_run_id()
        self._transport = transport
        self._on_progress = on_progress
        self._progress_every = progress_every_s
        self._wall = wall
        self._mono = monotonic
        self._stop = False
        self._send_index = 0
        self._pending: dict[int, tuple[Any, ...]] = {}  # ledger rows awaiting a delivery report
        self._outcomes: Counter[str] = Counter()
        self._faults: Counter[str] = Counter()
        self._per_site: dict[str, Counter[str]] = {}
        self._sent = 0
        self._bytes = 0
        self._sessions_done = 0
        self._writer: LedgerWriter | None = None

    def stop(self) -> None:
        """Ask the run to end soon: open sessions send ``end``, then everything is flushed.
        Safe to call from a signal handler or another thread."""
        self._stop = True

    # -- the run -------------------------------------------------------------------------

    def run(self) -> RunSummary:
        """Send every site's sessions, flush, and write the ledger; returns what the run did.

        A :class:`~producers.errors.ProducerError` or a second Ctrl-C ends the run early:
        the summary then says ``error`` or ``aborted`` and why, and the ledger is still written.
        """
        cfg = self.config
        info = self._info()
        transport = self._transport or KafkaTransport(cfg.bootstrap, partitions=cfg.partitions, config=cfg.producer_config)
        began = self._mono()
        stopped: StopReason = "completed"
        error: str | None = None
        sites: list[_SiteState] = []
        with LedgerWriter(cfg.ledger, run=info, s3=cfg.s3) as writer:
            self._writer = writer
            try:
                sites = [self._new_site(i) for i in range(cfg.sites)]
                transport.ensure_topics([s.topic for s in sites])
                stopped = self._send_loop(transport, sites, writer)
                self._end_open_sessions(transport, sites)
            except KeyboardInterrupt:
                stopped, error = "aborted", "interrupted twice: open sessions were not ended"
            except ProducerError as exc:
                stopped, error = "error", str(exc)
            finally:
                self._close(transport, writer)
        return self._summary(stopped, self._mono() - began, sites, transport, error)

    def _info(self) -> RunInfo:
        """The run's identity and settings, as the ledger stores them."""
        cfg = self.config
        return RunInfo(
            run_id=self.run_id,
            seed=cfg.seed,
            faults=tuple(f.spec() for f in cfg.faults),
            settings=cfg.settings(),
            started_at=datetime.now(UTC).isoformat(timespec="seconds"),
        )

    def _send_loop(self, transport: Transport, sites: list[_SiteState], writer: LedgerWriter) -> StopReason:
        """Send until every site has finished its sessions (``completed``), ``duration`` is up or
        :meth:`stop` is called; sites that join on the way are appended to ``sites``."""
        cfg = self.config
        # The duration, the joins and the pacing count from here: building tables and
        # topics is setup, and no reason to send a burst.
        start = self._mono()
        pace = _Pace(interval=1.0 / cfg.rate, next_due=start)
        joins = [start + cfg.duration * (k + 1) / (cfg.join + 1) for k in range(cfg.join)]
        last_report = start
        last_sent, last_bytes = 0, 0
        # Kept up to date where it changes (a site joins or finishes), not per message.
        active = list(sites)
        while True:
            now = self._mono()
            if self._stop:
                return "stopped"
            if now - start >= cfg.duration:
                return "duration"
            if joins and now >= joins[0]:
                self._join_due(transport, sites, joins, now)
                active = [s for s in sites if not s.finished]
            if now - last_report >= self._progress_every:
                self._report(transport, now - start, now - last_report, last_sent, last_bytes, len(sites))
                last_report, last_sent, last_bytes = now, self._sent, self._bytes
                writer.maybe_flush()
            if not active and not joins:
                return "completed"
            if not active:
                transport.poll(min(0.05, max(0.0, joins[0] - now)))
                continue
            urgent = next((s for s in active if s.driver is not None and s.driver.urgent), None)
            state = urgent if urgent is not None else pace.take(active, now)
            if state is None:
                # Waiting for the rate is time to serve delivery reports.
                transport.poll(min(pace.next_due - now, 0.05))
                continue
            self._step(transport, state)
            if state.finished:
                active = [s for s in sites if not s.finished]
            transport.poll(0)

    def _join_due(self, transport: Transport, sites: list[_SiteState], joins: list[float], now: float) -> None:
        """Add a site (and its topic) for every join time up to ``now``, taking those times off ``joins``."""
        while joins and now >= joins[0]:
            joins.pop(0)
            state = self._new_site(len(sites))
            transport.ensure_topics([state.topic])
            sites.append(state)

    def _step(self, transport: Transport, state: _SiteState) -> None:
        """Send one step of the site's current session (starting one if none is open); end it when done."""
        if state.driver is None:
            state.driver = SessionDriver(
                state.site,
                ordinal=state.ordinal,
                plan=self.config.plan,
                faults=self.config.faults,
                seed=self.config.seed,
                run_id=self.run_id,
                clock=self._wall,
            )
        self._dispatch(transport, state, state.driver.step())
        if state.driver.done:
            self._end_session(state)

    def _end_open_sessions(self, transport: Transport, sites: Sequence[_SiteState]) -> None:
        """Let each open session send what closes it (its ``end``) and count it as done."""
        for state in sites:
            if state.driver is not None:
                self._dispatch(transport, state, state.driver.finish())
                self._end_session(state)

    def _summary(
        self, stopped: StopReason, elapsed: float, sites: Sequence[_SiteState], transport: Transport, error: str | None
    ) -> RunSummary:
        """What the run did, from the counters kept while it ran."""
        return RunSummary(
            run_id=self.run_id,
            ledger=self.config.ledger,
            stopped=stopped,
            elapsed_s=elapsed,
            rows=self._send_index,
            bytes_sent=self._bytes,
            outcomes=dict(self._outcomes),
            faults=dict(self._faults),
            sites={name: dict(c) for name, c in self._per_site.items()},
            topics=tuple(s.topic for s in sites),
            client_errors=transport.errors,
            last_client_error=transport.last_error,
            error=error,
        )

    def _new_site(self, index: int) -> _SiteState:
        name = site_name(index)
        site = Site(name, SITE_TYPES[index % len(SITE_TYPES)], seed=self.config.seed, rows=self.config.rows)
        self._per_site[name] = Counter()
        return _SiteState(site=site, topic=topic_for(name, self.config.topic_prefix))

    def _end_session(self, state: _SiteState) -> None:
        state.driver = None
        state.ordinal += 1
        self._per_site[state.site.name]["sessions"] += 1
        self._sessions_done += 1
        if state.ordinal >= self.config.sessions:
            state.finished = True

    def _dispatch(self, transport: Transport, state: _SiteState, txs: Sequence[Transmission]) -> None:
        # Per message: the ledger row is a tuple in LEDGER_SCHEMA order, its delivery half
        # added by _delivered; no dict, no dataclass (this loop is the producers' hot path).
        per_site = self._per_site[state.site.name]
        topic = state.topic
        for tx in txs:
            index = self._send_index
            self._send_index += 1
            msg = tx.message
            fault = tx.fault
            value = tx.value
            row = (
                self.run_id,
                index,
                msg.site,
                msg.session,
                topic,
                msg.kind.value,
                msg.seq,
                msg.epoch,
                msg.ts,
                tx.intended_bytes(),
                value,
                fault,
                json.dumps(dict(tx.detail), sort_keys=True) if fault else None,
                int(self._wall() * 1000),
            )
            per_site["rows"] += 1
            if fault:
                self._faults[fault] += 1
            if value is None:
                self._record((*row[:13], "not-sent", None, None, None, row[13], None), msg.site)
                continue
            self._pending[index] = row
            self._sent += 1
            self._bytes += len(value)
            try:
                transport.send(topic, _key(msg.session), value, functools.partial(self._delivered, index))
            except ProducerError as exc:
                # Never queued, so certainly not in the topic; the run stops on it.
                if index in self._pending:
                    self._delivered(index, Delivery("failed", error=str(exc)))
                raise

    def _delivered(self, index: int, d: Delivery) -> None:
        row = self._pending.pop(index)
        acked = int(self._wall() * 1000)
        self._record((*row[:13], d.outcome, d.partition, d.offset, d.error, row[13], acked), row[2])

    def _record(self, row: LedgerRow, site: str) -> None:
        outcome = row[13]
        self._outcomes[outcome] += 1
        self._per_site[site][outcome] += 1
        assert self._writer is not None
        self._writer.append(row)

    def _close(self, transport: Transport, writer: LedgerWriter) -> None:
        try:
            transport.flush(self.config.flush_timeout_s)
        except KeyboardInterrupt:
            pass  # a third Ctrl-C: stop waiting, the ledger still gets written below
        error = f"no delivery report within {self.config.flush_timeout_s:g}s of the run closing"
        for index in sorted(self._pending):
            row = self._pending.pop(index)
            self._record((*row[:13], "indeterminate", None, None, error, row[13], None), row[2])
        transport.close()
        writer.flush()

    def _report(self, transport: Transport, elapsed: float, dt: float, last_sent: int, last_bytes: int, sites: int) -> None:
        if self._on_progress is None:
            return
        self._on_progress(
            RunProgress(
                elapsed_s=elapsed,
                rate=(self._sent - last_sent) / dt if dt > 0 else 0.0,
                mb_per_s=(self._bytes - last_bytes) / dt / 1e6 if dt > 0 else 0.0,
                rows=self._send_index,
                sent=self._sent,
                ok=self._outcomes["ok"],
                failed=self._outcomes["failed"],
                indeterminate=self._outcomes["indeterminate"],
                not_sent=self._outcomes["not-sent"],
                pending=len(self._pending),
                faults=dict(self._faults),
                queue_full_waits=transport.queue_full_waits,
                client_errors=transport.errors,
                last_error=transport.last_error,
                sites=sites,
                sessions_done=self._sessions_done,
            )
        )


@functools.lru_cache(maxsize=1024)
def _key(session: str) -> bytes:
    # The Kafka key of every record of a session: encoded once, not per record.
    return session.encode("utf-8")
