"""Environmental faults against a running job: inject them on the sandbox, measure the recovery.

Chapter 04 calls this module (under nbval it is the integration test of the five faults);
the pure parts are unit-tested in tests/job/test_environment_units.py.

- :data:`FAULTS` -- the faults, as data: what each one breaks, how long it is held and
  what a correct job does about it. The sandbox's own fault actions do the breaking
  (:meth:`sandbox.services.backend.Sandbox.kill`, ``pause``, ``resume``, ``restart``), the same ones
  the recovery benchmark (``bench/recovery_bench.py``) uses.
- :class:`JobProcess` -- ``python -m job run`` as a subprocess in its own process group,
  so a driver kill is a real ``SIGKILL`` and a restart continues from the checkpoint.
- :func:`run_faults` -- producers at a constant rate, the job streaming, a watchdog
  (:func:`job.ops.watch.follow_log`) following the job's event log, the faults one at a time,
  then a drain and the verifier. Returns a :class:`FaultRun`.
- :func:`outcome` and :func:`timeline` -- the pure parts: per fault, what the job did and
  how long until output flowed again, from the job's progress events; and the per-second
  records/s and lag series for the plot.

How "output flowing again" is measured: the job writes one ``BatchCompleted`` event per
micro-batch to ``<checkpoint>/events.jsonl`` (:mod:`job.ops.watch.events`), stamped when the
batch's progress was reported, i.e. when its output was committed. Only the sessions
query counts (its name ends in ``-sessions``; an older job's raw-archive query writes the same
log, and the watchdog alerts for it too, which would count every fault twice). A fault's *time to
flow* is the completion time of the first batch with input rows after the fault's
reference moment, minus the injection time. The reference moment is the injection for a
fault the job can absorb (a worker kill: the other executor carries on; a master kill: a
running application does not need its master), and the moment
the fault was undone for one that blocks the job until then (broker down, object store
frozen, driver dead): a batch that completes while the broker is still down is not output
flowing *again*.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from job.engine.errors import JobError
from job.spark.query_progress import offset_total

__all__ = [
    "FAULTS",
    "EnvFault",
    "FaultKind",
    "FaultOutcome",
    "FaultRun",
    "Injected",
    "JobProcess",
    "outcome",
    "run_faults",
    "run_faults_in_subprocess",
    "sessions_only",
    "timeline",
]

#: For event logs written before batches carried their trigger time (``started_at``): seconds
#: after an injection during which a completed batch is taken for one already in flight.
GRACE_S = 5.0

#: Batches with input that started after a fault the job can absorb and committed while it
#: lasted: once the job has shown this many, it kept going, and the fault is undone.
KEPT_GOING_BATCHES = 2

#: The suffix of the sessions query's name (``JobConfig.name`` + ``-sessions``): the query judged.
SESSIONS_QUERY_SUFFIX = "-sessions"

FaultKind = Literal["worker-kill", "broker-kill", "minio-pause", "driver-kill", "master-kill"]
Behaviour = Literal["kept going", "waited", "failed, restarted from the checkpoint"]


class EnvironmentFaultError(JobError):
    """A fault run could not be carried out (the job never started, a fault was unknown)."""


@dataclass(frozen=True, kw_only=True)
class EnvFault:
    """One environmental fault: ``kind`` names it, ``blocks`` says whether the job can make
    output while it lasts (it decides where :func:`outcome` measures from and how long it is
    held). A fault that blocks is held ``hold_s``, the outage's length; one the job can absorb
    is held until the job has committed :data:`KEPT_GOING_BATCHES` batches begun after it
    struck, ``hold_s`` at most (past that, the job "waited"). ``damage`` and ``expected`` are
    the prose the chapter prints: what breaks, and what a correct job does."""

    kind: FaultKind
    hold_s: float
    blocks: bool
    damage: str
    expected: str


#: The faults, registered by name. A blocking fault's outage outlasts a micro-batch (trigger
#: 1 s, a batch takes 1-4 s on two cores) and the watchdog's stall threshold (10 s), and by
#: no more than it must: the chapter runs in three minutes. The broker's outage is its hold
#: plus its restart (a JVM and the recovery of every partition's log: 13 s measured on the
#: test sandbox with 964 partitions, never under 3 s), MinIO's is its hold alone. A fault the job
#: absorbs is held until the job's own events show it carried on (no fixed sleep decides: a
#: fixed 10 s hold flaked in CI when the restarted worker's JVM start competed with the job's
#: recovery for the two cores); its ``hold_s`` is only the bound.
FAULTS: dict[str, EnvFault] = {
    f.kind: f
    for f in (
        EnvFault(
            kind="worker-kill",
            hold_s=60.0,
            blocks=False,
            damage="SIGKILL of spark-worker-1 and its executor; restarted once the job committed 2 batches without it",
            expected="Spark re-runs the lost tasks on the surviving executor; the query never fails",
        ),
        EnvFault(
            kind="broker-kill",
            hold_s=8.0,
            blocks=True,
            damage="SIGKILL of the only Kafka broker; started again after hold_s (its log is on disk)",
            expected="the source cannot fetch offsets: the query waits, then reads on from its checkpointed offsets",
        ),
        EnvFault(
            kind="minio-pause",
            hold_s=12.0,
            blocks=True,
            damage="SIGSTOP of MinIO (the file sink's object store) for hold_s, then SIGCONT",
            expected="sink writes hang: no batch commits while paused, the batch in flight completes after",
        ),
        EnvFault(
            kind="master-kill",
            hold_s=60.0,
            blocks=False,
            damage="SIGKILL of the Spark master; started again once the job committed 2 batches without it (recovery mode FILESYSTEM)",
            expected="driver and executors talk directly and keep going; the new master recovers app and workers",
        ),
        EnvFault(
            kind="driver-kill",
            hold_s=2.0,
            blocks=True,
            damage="SIGKILL of the job's driver process group; the operator restarts it after hold_s",
            expected="the restarted query re-runs any uncommitted batch from the checkpoint; nothing lost or doubled",
        ),
    )
}


@dataclass(frozen=True, kw_only=True)
class Injected:
    """One fault as it happened: epoch seconds of injection and undo, and whether the job's
    process died during it (killed, or its query failed) and was restarted."""

    kind: FaultKind
    injected_at: float
    undone_at: float
    job_died: bool = False
    job_exit: int | None = None


@dataclass(frozen=True, kw_only=True)
class FaultOutcome:
    """What one fault did to the job (see the module docstring for the measure).

    ``time_to_flow_s`` is None when no batch with input completed before the horizon
    (the next fault, or the end of the run). ``longest_gap_s`` is the longest time without
    a committed batch with input, from the last such batch before the injection to the
    first one after the fault was over: how long the output stood still. None when there
    is no batch on either side."""

    kind: FaultKind
    injected_at: float
    undone_at: float
    behaviour: Behaviour
    batches_during: int
    time_to_flow_s: float | None
    longest_gap_s: float | None
    alerts: tuple[str, ...]


# ------------------------------------------------------------------ the pure parts


def _batches(events: Sequence[Mapping[str, Any]]) -> list[tuple[float, int, int]]:
    """(at, batch_id, input_rows) of every BatchCompleted event dict, by time."""
    out = [(float(e["at"]), int(e["batch_id"]), int(e.get("input_rows") or 0)) for e in events if _is_batch(e)]
    return sorted(out)


def begun_after(events: Sequence[Mapping[str, Any]], moment: float, *, until: float = float("inf")) -> int:
    """Batches with input that began after ``moment`` (epoch s) and committed before ``until``:
    work the job did after something happened, not a batch already in flight finishing. Uses
    each batch's trigger time; an event without one counts when it completed more than
    :data:`GRACE_S` after ``moment``."""
    count = 0
    for e in events:
        if not _is_batch(e) or not e.get("input_rows"):
            continue
        began = e.get("started_at")
        after = float(began) > moment if began is not None else float(e["at"]) > moment + GRACE_S
        count += after and float(e["at"]) < until
    return count


def _is_batch(event: Mapping[str, Any]) -> bool:
    return event.get("type") == "BatchCompleted"


def sessions_only(records: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The events or alerts (dicts) of the sessions query only."""
    return [dict(r) for r in records if str(r.get("query", "")).endswith(SESSIONS_QUERY_SUFFIX)]


def outcome(
    fault: Injected, events: Sequence[Mapping[str, Any]], *, horizon: float, alerts: Sequence[Mapping[str, Any]] = ()
) -> FaultOutcome:
    """Judge one fault from the job's event log (dicts as written by
    :class:`job.ops.watch.events.EventLog`) and the watchdog's alerts (:meth:`Alert.to_dict`).

    - ``batches_during``: batches with input that began after ``injected_at`` and committed
      before ``undone_at`` (:func:`begun_after`): a batch that was already running when the
      fault struck may still finish, which says nothing about the job working *through* it;
    - ``behaviour``: "failed, restarted from the checkpoint" when the job process died,
      else "kept going" when batches completed during the fault, else "waited";
    - ``time_to_flow_s``: see the module docstring; only batches before ``horizon`` count;
    - ``longest_gap_s``: see :class:`FaultOutcome`;
    - ``alerts``: the kinds of the alerts raised in ``[injected_at, horizon)``, in order.
    """
    spec = FAULTS.get(fault.kind)
    if spec is None:
        raise EnvironmentFaultError(f"fault kind {fault.kind!r} is unknown; use one of {sorted(FAULTS)}")
    productive = [(at, rows) for at, _, rows in _batches(events) if rows > 0]
    during = begun_after(events, fault.injected_at, until=fault.undone_at)
    reference = fault.undone_at if spec.blocks else fault.injected_at
    first = next((at for at, _ in productive if reference < at < horizon), None)
    before = [at for at, _ in productive if at <= fault.injected_at]
    gap = None
    if before and first is not None:
        times = [before[-1]] + [at for at, _ in productive if fault.injected_at < at <= first]
        gap = round(max(b - a for a, b in zip(times, times[1:])), 1) if len(times) > 1 else None
    if fault.job_died:
        behaviour: Behaviour = "failed, restarted from the checkpoint"
    elif during:
        behaviour = "kept going"
    else:
        behaviour = "waited"
    kinds = tuple(str(a["kind"]) for a in sorted(alerts, key=lambda a: a["at"]) if fault.injected_at <= a["at"] < horizon)
    return FaultOutcome(
        kind=fault.kind,
        injected_at=fault.injected_at,
        undone_at=fault.undone_at,
        behaviour=behaviour,
        batches_during=during,
        time_to_flow_s=None if first is None else round(first - fault.injected_at, 1),
        longest_gap_s=gap,
        alerts=kinds,
    )


def timeline(
    events: Sequence[Mapping[str, Any]],
    high_watermarks: Sequence[tuple[float, int | None]],
    *,
    start: float,
    end: float,
    smooth_s: int = 5,
) -> dict[str, list[float | None]]:
    """Per-second series from ``start`` to ``end`` (epoch s) on a clock relative to ``start``:

    - ``t``: seconds since ``start``;
    - ``records_per_s``: input rows of the batches completed in each second, as a trailing
      mean over ``smooth_s`` seconds (a micro-batch engine commits in bursts);
    - ``lag``: the sampled total high watermark minus the job's committed end offsets
      (summed over partitions, from the last batch completed by then); None where Kafka
      could not be asked or no batch had completed yet.

    ``high_watermarks`` is a list of ``(at, total)`` samples, ``total`` None when the broker
    did not answer.
    """
    n = max(int(end - start) + 1, 1)
    per_second = [0.0] * n
    committed: list[tuple[float, int]] = []
    for e in events:
        if not _is_batch(e):
            continue
        i = int(float(e["at"]) - start)
        if 0 <= i < n:
            per_second[i] += int(e.get("input_rows") or 0)
        committed.append((float(e["at"]), offset_total(e.get("end_offsets") or {})))
    committed.sort()
    smoothed = [sum(per_second[max(0, i - smooth_s + 1) : i + 1]) / min(smooth_s, i + 1) for i in range(n)]
    lag: list[float | None] = [None] * n
    samples = sorted((at, total) for at, total in high_watermarks)
    for i in range(n):
        now = start + i + 1
        high = next((total for at, total in reversed(samples) if at <= now), None)
        done = next((total for at, total in reversed(committed) if at <= now), None)
        if high is not None and done is not None:
            lag[i] = float(max(high - done, 0))
    return {"t": [float(i) for i in range(n)], "records_per_s": smoothed, "lag": lag}


# ------------------------------------------------------------------ the job as a process


class JobProcess:
    """``python -m job run`` in its own process group, its output to ``log``.

    :meth:`kill` is a real driver crash (SIGKILL of the group: no shutdown hook runs);
    :meth:`start` again continues from the checkpoint, as an operator's restart would;
    :meth:`stop` asks it to stop cleanly (SIGINT, which the job turns into a clean stop).
    """

    def __init__(self, argv: Sequence[str], *, log: Path, env: Mapping[str, str] | None = None) -> None:
        self.argv, self.log, self.env = list(argv), Path(log), dict(env or os.environ)
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self) -> None:
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen(
                self.argv, env=self.env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.starts += 1

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def returncode(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    def kill(self) -> None:
        if self.alive:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()

    def stop(self, timeout_s: float = 120.0) -> int | None:
        """SIGINT and wait; SIGKILL if it does not stop within ``timeout_s``. The exit status."""
        if self.alive:
            assert self.proc is not None
            os.killpg(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.kill()
        return self.returncode

    def tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except FileNotFoundError:
            return ""


# ------------------------------------------------------------------ the run


@dataclass(kw_only=True)
class FaultRun:
    """Everything a fault run observed. Times are epoch seconds; ``start`` is when the
    faults' clock starts (the job's first batch with input)."""

    start: float
    end: float
    faults: list[Injected]
    outcomes: list[FaultOutcome]
    events: list[dict[str, Any]]
    alerts: list[dict[str, Any]]
    high_watermarks: list[tuple[float, int | None]]
    verdict: dict[str, Any]
    job_starts: int
    ledger: str
    output: str
    files: dict[str, Path] = field(default_factory=dict)

    def to_json(self) -> str:
        """All of it as JSON (paths as strings); :meth:`from_json` reads it back."""
        data = {k: v for k, v in self.__dict__.items()}
        data["faults"] = [f.__dict__ for f in self.faults]
        data["outcomes"] = [o.__dict__ for o in self.outcomes]
        data["files"] = {k: str(v) for k, v in self.files.items()}
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> FaultRun:
        data = json.loads(text)
        data["faults"] = [Injected(**f) for f in data["faults"]]
        data["outcomes"] = [FaultOutcome(**{**o, "alerts": tuple(o["alerts"])}) for o in data["outcomes"]]
        data["high_watermarks"] = [tuple(h) for h in data["high_watermarks"]]
        data["files"] = {k: Path(v) for k, v in data["files"].items()}
        return cls(**data)

    @property
    def clean(self) -> bool:
        """The verifier found the lake equal to the ledger."""
        return bool(self.verdict.get("ok"))

    def table(self) -> list[dict[str, Any]]:
        """One row per fault: kind, at (s since start), held (s), behaviour, batches during,
        time to flow (s), alerts."""
        return [
            {
                "fault": o.kind,
                "at (s)": round(o.injected_at - self.start),
                "held (s)": round(o.undone_at - o.injected_at),
                "what the job did": o.behaviour,
                "batches during": o.batches_during,
                "time to flow (s)": o.time_to_flow_s,
                "longest gap (s)": o.longest_gap_s,
                "alerts": ", ".join(o.alerts) or "-",
            }
            for o in self.outcomes
        ]


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    out = []
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    for line in lines:
        try:
            out.append(json.loads(line))
        except ValueError:
            continue  # a line cut by a killed driver
    return out


def _until(cond: Callable[[], bool], *, timeout_s: float) -> bool:
    """Poll ``cond`` (every 0.2 s) until it holds; False when ``timeout_s`` passed first. The
    deadline only bounds a wait on an event; it never decides an outcome by itself."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _wait(cond: Callable[[], bool], *, timeout_s: float, what: str, abort: Callable[[], str | None] = lambda: None) -> None:
    why: list[str] = []

    def done() -> bool:
        if (reason := abort()) is not None:
            why.append(reason)
            return True
        return cond()

    if not _until(done, timeout_s=timeout_s):
        raise EnvironmentFaultError(f"waiting for {what}: not within {timeout_s:g} s")
    if why:
        raise EnvironmentFaultError(f"waiting for {what}: {why[0]}")


def _child_env() -> dict[str, str]:
    """This environment, with the project's root (the folder holding ``job/``) first on
    ``PYTHONPATH``, for the ``python -m job ...`` processes a run starts."""
    root = Path(__file__).resolve().parents[2]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}


def _inject(kind: FaultKind, sandbox, job: JobProcess) -> Callable[[], None]:
    """Break it now; return the operator's move that undoes it."""
    if kind == "worker-kill":
        sandbox.kill("spark-worker-1")
        return lambda: sandbox.restart("spark-worker-1")
    if kind == "broker-kill":
        sandbox.kill("kafka")
        return lambda: sandbox.restart("kafka")
    if kind == "minio-pause":
        sandbox.pause("minio")
        return lambda: sandbox.resume("minio")
    if kind == "driver-kill":
        job.kill()
        return job.start
    if kind == "master-kill":
        sandbox.kill("spark-master")
        return lambda: sandbox.restart("spark-master")
    raise EnvironmentFaultError(f"fault kind {kind!r} is unknown; use one of {sorted(FAULTS)}")


def run_faults(
    sandbox,
    kinds: Sequence[FaultKind],
    *,
    work: Path,
    topic_prefix: str,
    output: str,
    rate: float = 100.0,
    warmup_batches: int = 1,
    recover_within_s: float = 180.0,
    stall_after_s: float = 10.0,
    seed: int = 4,
    say: Callable[[str], None] = lambda line: None,
) -> FaultRun:
    """Run the job while each fault of ``kinds`` strikes once, one after another.

    Producers send ``rate`` messages/s to fresh topics ``topic_prefix*`` (2 sites, ledger
    in ``work/ledger``) for the whole run; the job (``python -m job run``, trigger 1 s,
    checkpoint ``work/checkpoint``) writes ``output``. Every wait is on the job's own events
    (its batches in ``events.jsonl``, each with its trigger time), with a deadline only as the
    failure bound: after ``warmup_batches`` batches with input, each fault is injected and
    held (:class:`EnvFault`: a blocking one for its ``hold_s``; one the job can absorb until
    the job committed :data:`KEPT_GOING_BATCHES` batches begun after it, ``hold_s`` at most),
    undone, and the next fault waits until a batch begun after the undo has committed (output
    flows again; at most ``recover_within_s``). If the job process is dead once a fault is
    undone (its query failed, or it was the driver kill), it is started again from the
    checkpoint, as an operator would. A watchdog follows the event log (stall after
    ``stall_after_s``; driver pid watched) and writes alerts to ``work/alerts.jsonl``.
    Then the producers stop, the job drains (its committed offsets reach Kafka's high
    watermarks), stops cleanly, and ``python -m job verify`` judges the lake.

    Leaves every service running and healthy. Raises :class:`EnvironmentFaultError` when
    the job does not start or does not drain.
    """
    from job.drills.backlog import HighWatermarks
    from job.ops.watch import JsonLinesChannel, Thresholds, follow_log, kafka_high_watermarks
    from job.spark.pipeline import source_end_offsets
    from producers.runner import RunConfig, Runner

    for kind in kinds:
        if kind not in FAULTS:
            raise EnvironmentFaultError(f"fault kind {kind!r} is unknown; use one of {sorted(FAULTS)}")
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    settings = sandbox.settings
    bootstrap = settings.endpoints().kafka_bootstrap
    files = {
        "ledger": work / "ledger",
        "checkpoint": work / "checkpoint",
        "events": work / "checkpoint" / "events.jsonl",
        "alerts": work / "alerts.jsonl",
        "job_log": work / "job.log",
        "verdict": work / "verdict.json",
    }
    duration = sum(FAULTS[k].hold_s + recover_within_s for k in kinds) + 900  # stopped explicitly below
    runner = Runner(
        RunConfig(
            ledger=str(files["ledger"]),
            bootstrap=bootstrap,
            sites=2,
            sessions=1,
            rate=rate,
            duration=duration,
            session_length=10**6,
            snapshot_every=200,
            seed=seed,
            run_id=topic_prefix.strip("-"),
            topic_prefix=topic_prefix,
        )
    )
    producing = threading.Thread(target=runner.run, name="producers", daemon=True)
    producing.start()
    env = _child_env()
    job = JobProcess(
        [
            sys.executable,
            "-m",
            "job",
            "run",
            "--topic-prefix",
            topic_prefix,
            "--output",
            output,
            "--checkpoint",
            str(files["checkpoint"]),
            "--trigger",
            "1 second",
            "--max-offsets-per-trigger",
            "5000",
            "--state-partitions",
            "4",
        ],
        log=files["job_log"],
        env=env,
    )

    # a dead broker is a gap in the series (None), not a crash: chapter 04's plot shows it
    highs = HighWatermarks(bootstrap, topic_prefix, interval_s=1.0, timeout_s=2.0, gaps=True)

    def logged() -> list[dict[str, Any]]:
        return sessions_only(_read_jsonl(files["events"]))

    def productive() -> bool:
        return begun_after(logged(), 0.0) > 0

    def flowing_since(moment: float) -> bool:
        return begun_after(logged(), moment) > 0 or not job.alive

    watching = threading.Event()
    dog_box: dict[str, Any] = {}
    faults: list[Injected] = []
    try:
        job.start()
        say(f"job started (log {files['job_log']})")
        _wait(
            productive,
            timeout_s=300,
            what="the job's first batch with input",
            abort=lambda: None if job.alive else f"the job exited ({job.returncode}): {job.tail()}",
        )
        highs.start()
        dog_thread = threading.Thread(
            target=lambda: dog_box.setdefault(
                "dog",
                follow_log(
                    files["events"],
                    until=watching.is_set,
                    channels=[JsonLinesChannel(files["alerts"])],
                    thresholds=Thresholds(stall_after_s=stall_after_s, lag_records=10**9),
                    high_watermarks=kafka_high_watermarks(bootstrap, topic_prefix, timeout_s=2.0),
                    lag_every_s=2.0,
                    tick_s=0.5,
                ),
            ),
            name="watchdog",
            daemon=True,
        )
        dog_thread.start()
        start = time.time()
        _wait(
            lambda: begun_after(logged(), 0.0) >= warmup_batches,
            timeout_s=300,
            what=f"{warmup_batches} batches with input before the first fault",
            abort=lambda: None if job.alive else f"the job exited ({job.returncode}): {job.tail()}",
        )
        for kind in kinds:
            spec = FAULTS[kind]
            injected_at = time.time()
            say(f"{kind}: injected at t={injected_at - start:.0f}s")
            undo = _inject(kind, sandbox, job)
            if spec.blocks:
                time.sleep(spec.hold_s)  # the outage's length: the experiment's input, not a verdict
            else:
                kept_going = _until(
                    lambda: begun_after(logged(), injected_at) >= KEPT_GOING_BATCHES or not job.alive, timeout_s=spec.hold_s
                )
                say(
                    f"{kind}: "
                    + (
                        f"{KEPT_GOING_BATCHES} batches begun after it committed"
                        if kept_going
                        else f"no {KEPT_GOING_BATCHES} batches within {spec.hold_s:g} s"
                    )
                )
            died = not job.alive
            exit_status = job.returncode
            undo()  # returns once the service is healthy again: the outage lasts until then
            undone_at = time.time()
            if kind != "driver-kill" and not job.alive:  # its query failed: the operator restarts it
                died, exit_status = True, job.returncode
                job.start()
            say(
                f"{kind}: undone at t={undone_at - start:.0f}s"
                + (f"; job had exited ({exit_status}) and was restarted" if died and kind != "driver-kill" else "")
            )
            faults.append(
                Injected(
                    kind=kind,
                    injected_at=injected_at,
                    undone_at=undone_at,
                    job_died=died or kind == "driver-kill",
                    job_exit=exit_status,
                )
            )
            # the next fault only once output flows again: a batch begun after the undo committed
            if not _until(lambda: flowing_since(undone_at), timeout_s=recover_within_s):
                say(f"{kind}: no batch begun after the undo committed within {recover_within_s:g} s")
            if not job.alive:  # it failed after the fault was undone (e.g. the broker came back too late)
                faults[-1] = Injected(**{**faults[-1].__dict__, "job_died": True, "job_exit": job.returncode})
                restarted_at = time.time()
                job.start()
                _until(lambda: begun_after(logged(), restarted_at) > 0, timeout_s=recover_within_s)
        runner.stop()
        producing.join(120)
        targets = source_end_offsets(bootstrap, topic_prefix)
        goal = offset_total(targets)

        def drained() -> bool:
            done = [e for e in sessions_only(_read_jsonl(files["events"])) if _is_batch(e)]
            return bool(done) and offset_total(done[-1]["end_offsets"]) >= goal

        _wait(
            drained, timeout_s=300, what="the job to drain", abort=lambda: None if job.alive else f"the job exited: {job.tail()}"
        )
        end = time.time()
    finally:
        runner.stop()
        job.stop()
        watching.set()
        highs.stop()
        for service in sandbox.status():  # whatever happened, leave the sandbox whole
            if str(service.state) == "paused":
                sandbox.resume(service.name)
        sandbox.up()
    dog_thread.join(30)
    report = _verify(settings, ledger=str(files["ledger"]), lake=output, to=files["verdict"])
    events = sessions_only(_read_jsonl(files["events"]))
    alerts = sessions_only(_read_jsonl(files["alerts"]))
    horizons = [f.injected_at for f in faults[1:]] + [end]
    outcomes = [outcome(f, events, horizon=h, alerts=alerts) for f, h in zip(faults, horizons)]
    return FaultRun(
        start=start,
        end=end,
        faults=faults,
        outcomes=outcomes,
        events=events,
        alerts=alerts,
        high_watermarks=highs.samples,
        verdict=report,
        job_starts=job.starts,
        ledger=str(files["ledger"]),
        output=output,
        files=files,
    )


def _verify(settings, *, ledger: str, lake: str, to: Path) -> dict[str, Any]:
    """``python -m job verify``'s verdict on ``lake``, in this process (no second Python and
    its imports to start: the chapter has three minutes), as a dict; also written to ``to``."""
    from job.ops.verifier import verify_on_sandbox

    try:
        found = verify_on_sandbox(settings, ledger=ledger, lake=lake, policy="resync")
    except Exception as exc:  # noqa: BLE001 - any failure to verify is the verdict, said in full
        report: dict[str, Any] = {"ok": False, "summary": f"the verifier could not judge {lake}: {exc}", "summary_line": ""}
    else:
        report = {**json.loads(found.to_json()), "summary": found.summary(), "summary_line": found.summary().splitlines()[0]}
        to.write_text(found.to_json())
    finally:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
    return report


def run_faults_in_subprocess(
    kinds: Sequence[FaultKind], *, work: Path, topic_prefix: str, output: str, timeout_s: float = 1200.0, **options: float
) -> FaultRun:
    """:func:`run_faults` in a child process (``python -m job.drills.environment``), its output in
    ``work/run.log``. A notebook uses this: Kafka's C client writes connection errors
    straight to file descriptor 2 while the broker is down, which a kernel would show as
    cell output; in a child process they land in the log. ``options`` are
    :func:`run_faults`' numeric keywords (rate, warmup_batches, recover_within_s, stall_after_s, seed)."""
    work = Path(work)
    work.mkdir(parents=True, exist_ok=True)
    env = _child_env()
    argv = [
        sys.executable,
        "-m",
        "job.drills.environment",
        "--work",
        str(work),
        "--topic-prefix",
        topic_prefix,
        "--output",
        output,
        "--faults",
        ",".join(kinds),
    ] + [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
    with (work / "run.log").open("ab") as log:
        done = subprocess.run(argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, timeout=timeout_s)
    result = work / "result.json"
    if done.returncode != 0 or not result.exists():
        tail = (work / "run.log").read_text(errors="replace")[-3000:]
        raise EnvironmentFaultError(f"the fault run in {work} failed (exit {done.returncode}); its log ends:\n{tail}")
    return FaultRun.from_json(result.read_text())


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m job.drills.environment``: one fault run on the sandbox of ``OSL_STATE_DIR``;
    writes ``<work>/result.json`` (:meth:`FaultRun.to_json`)."""
    import argparse

    from sandbox import Settings, open_sandbox

    parser = argparse.ArgumentParser(prog="python -m job.drills.environment", description=run_faults.__doc__.split("\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--topic-prefix", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--faults", default=",".join(FAULTS), help=f"comma-separated, of {', '.join(FAULTS)}")
    for name, default in (
        ("rate", 100.0),
        ("warmup-batches", 1),
        ("recover-within-s", 180.0),
        ("stall-after-s", 10.0),
        ("seed", 4),
    ):
        parser.add_argument(f"--{name}", type=float, default=default)
    args = parser.parse_args(argv)
    kinds = [k.strip() for k in args.faults.split(",") if k.strip()]
    settings = Settings.from_env()
    sandbox = open_sandbox(settings, progress=lambda line: print(line, flush=True))
    sandbox.up()
    say = lambda line: print(f"[{time.strftime('%H:%M:%S')}] {line}", flush=True)  # noqa: E731
    run = run_faults(
        sandbox,
        kinds,
        work=args.work,
        topic_prefix=args.topic_prefix,
        output=args.output,
        rate=args.rate,
        warmup_batches=int(args.warmup_batches),
        recover_within_s=args.recover_within_s,
        stall_after_s=args.stall_after_s,
        seed=int(args.seed),
        say=say,
    )
    (args.work / "result.json").write_text(run.to_json())
    for row in run.table():
        say(str(row))
    say(f"verdict: {run.verdict.get('summary_line')} ok={run.clean}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
