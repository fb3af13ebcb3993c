"""Capture sessions: the snapshot/update lifecycle of one site, with its faults applied.

A session opens with a full snapshot (seq 0), then sends row upserts and deletes, repeats a
full snapshot every ``snapshot_every`` messages (or ``snapshot_interval_s`` seconds, when
set, whichever comes first) so that any loss is bounded by one interval, and closes with
``end``. Sessions of a site run one after another over the site's living table.

:class:`SessionScript` makes the *intended* messages (what a healthy producer would send);
:class:`SessionDriver` adds the faults and yields :class:`~producers.faults.Transmission`
values, one per ledger row. Both are deterministic from the seed, the site and the session
ordinal, given the clock (which only feeds ``ts`` and the time-based snapshot schedule).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from producers.contract import Kind, Message
from producers.errors import RunConfigError
from producers.faults import Fault, FaultName, SessionFaults, Transmission
from producers.sites import Site, derive_int

__all__ = ["SessionDriver", "SessionPlan", "SessionScript", "session_id"]

Clock = Callable[[], float]


def session_id(site: str, ordinal: int, run_id: str = "") -> str:
    """The session id (also the Kafka key): ``<site>-<run id>-s0003``, or ``<site>-s0003``.

    The run id keeps ids unique across runs that write to the same topics; readers must
    treat the id as opaque.
    """
    return f"{site}-{run_id}-s{ordinal:04d}" if run_id else f"{site}-s{ordinal:04d}"


@dataclass(frozen=True, kw_only=True)
class SessionPlan:
    """The shape of a session: ``length`` intended messages before ``end``.

    ``length`` counts snapshots and updates (across epochs, if the producer restarts).
    A full snapshot opens the session and repeats every ``snapshot_every`` messages, and
    also after ``snapshot_interval_s`` seconds since the last one, when that is set.
    """

    length: int = 1000
    snapshot_every: int = 200
    snapshot_interval_s: float | None = None

    def __post_init__(self) -> None:
        if self.length < 1:
            raise RunConfigError("session length", self.length, "a session needs at least 1 message before end")
        if self.snapshot_every < 1:
            raise RunConfigError("snapshot_every", self.snapshot_every, "use a positive message count, e.g. 200")
        if self.snapshot_interval_s is not None and self.snapshot_interval_s <= 0:
            raise RunConfigError(
                "snapshot_interval_s", self.snapshot_interval_s, "use a positive number of seconds or leave it unset"
            )


class SessionScript:
    """The intended messages of one session, in order. Mutates the site's table as it goes.

    The mix of updates: about 8% inserts (new ids), 8% deletes and the rest changes to
    existing rows, kept inside the site's row-count band. Upserts carry whole rows.
    """

    def __init__(self, site: Site, *, sid: str, ordinal: int, plan: SessionPlan, seed: int, clock: Clock) -> None:
        self.site = site
        self.id = sid
        self.plan = plan
        self.epoch = 0
        self.seq = 0  # the next message's seq
        self._clock = clock
        self._rng = random.Random(derive_int(seed, site.name, ordinal, "content"))
        self._since_snapshot = 0
        self._last_snapshot_at = 0.0

    def restart(self) -> None:
        """A producer restart: a new epoch whose first message (seq 0) is a snapshot."""
        self.epoch += 1
        self.seq = 0

    def next_message(self) -> Message:
        now = self._clock()
        site, rng = self.site, self._rng
        # Positional construction: this runs once per message, and keyword plumbing shows.
        head = (site.name, self.id, self.seq, self.epoch, int(now * 1000))
        interval = self.plan.snapshot_interval_s
        if (
            self.seq == 0
            or self._since_snapshot >= self.plan.snapshot_every
            or (interval is not None and now - self._last_snapshot_at >= interval)
        ):
            msg = Message(Kind.SNAPSHOT, *head, rows=tuple(site.table.values()))
            self._since_snapshot = 0
            self._last_snapshot_at = now
        else:
            r = rng.random()
            n = len(site.table)
            if n < site.min_rows or (r < 0.08 and n < site.max_rows):
                row = site.new_row(rng)
                site.put(row)
                msg = Message(Kind.UPSERT, *head, row=row)
            elif r < 0.16 and n > site.min_rows:
                rid = site.pick_id(rng)
                site.remove(rid)
                msg = Message(Kind.DELETE, *head, row_id=rid)
            else:
                rid = site.pick_id(rng)
                row = site.changed(site.table[rid], rng)
                site.put(row)
                msg = Message(Kind.UPSERT, *head, row=row)
        self._since_snapshot += 1
        self.seq += 1
        return msg

    def end_message(self) -> Message:
        msg = Message.end(site=self.site.name, session=self.id, seq=self.seq, epoch=self.epoch, ts=int(self._clock() * 1000))
        self.seq += 1
        return msg


class SessionDriver:
    """One session with its faults: call :meth:`step` until :attr:`done`.

    Each step makes one intended message (or, on ``crash``, none) and returns the
    transmissions it produced, in send order; a step may return nothing while a reorder
    holds messages back, or several messages when it releases them. :attr:`urgent` is
    true during a ``burst``: the caller should step again without waiting for the rate.
    """

    def __init__(
        self,
        site: Site,
        *,
        ordinal: int,
        plan: SessionPlan,
        faults: Sequence[Fault] = (),
        seed: int = 0,
        run_id: str = "",
        clock: Clock,
    ) -> None:
        self.site = site
        self.ordinal = ordinal
        self.plan = plan
        self.id = session_id(site.name, ordinal, run_id)
        self.session = SessionScript(site, sid=self.id, ordinal=ordinal, plan=plan, seed=seed, clock=clock)
        self.faults = SessionFaults(
            faults, seed=seed, site=site.name, ordinal=ordinal, length=plan.length, encode=site.encoder.encode
        )
        self.index = 0  # intended messages made so far
        self.done = False
        self._burst_left = 0

    @property
    def urgent(self) -> bool:
        return self._burst_left > 0 and not self.done

    @property
    def fault_counts(self) -> dict[FaultName, int]:
        return dict(self.faults.counts)

    def burst(self, size: int) -> None:
        """Make the next ``size`` steps urgent (the ``burst`` fault)."""
        self._burst_left = size

    def step(self) -> list[Transmission]:
        if self.done:
            return []
        i = self.index
        out: list[Transmission] = []
        tag: Fault | None = None
        detail: dict[str, object] = {}
        if i == 0 and self.faults.opening_withheld is not None:
            tag = self.faults.opening_withheld
        elif (hit := self.faults.stream_fault(i)) is not None:
            out, detail = hit.strike(self, i)
            if self.done:
                return out
            tag = hit
        if self._burst_left:
            self._burst_left -= 1
        msg = self.session.end_message() if i >= self.plan.length else self.session.next_message()
        self.index += 1
        out += self.faults.transmit(msg, i, tag=tag, tag_detail=detail)
        if msg.kind is Kind.END:
            self.done = True
        return out

    def finish(self) -> list[Transmission]:
        """Close the session now (the run is stopping): release held messages, send ``end``."""
        if self.done:
            return []
        end = self.session.end_message()
        out = self.faults.transmit(end, self.index)
        self.index += 1
        self.done = True
        return out
