"""The local-process backend: Kafka, MinIO and a Spark standalone cluster as plain processes.

Each service is a process group of its own (so ``kill`` also takes a worker's executors
down, like a crashed node), with a log file under ``<state>/logs`` and data under
``<state>/data``. Process ids live in ``<state>/run``, so any later CLI call can find,
stop or break what an earlier one started. What each service runs (command line,
environment, ports, probe) and the files it needs first are :mod:`sandbox.services.local_processes`;
this module starts, watches, stops and breaks them.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from sandbox import artifacts
from sandbox.artifacts import Progress, say
from sandbox.checks import health
from sandbox.errors import (
    AnotherSandboxRunningError,
    NotRunningError,
    PortBusyError,
    SandboxError,
    ServiceStartError,
    UnknownServiceError,
)
from sandbox.jvm import class_data_sharing
from sandbox.services import local_processes
from sandbox.services.backend import ServiceState, ServiceStatus, log_tail
from sandbox.services.local_processes import SANDBOX_MARK
from sandbox.settings import BackendKind, Endpoints, Settings, shown

_STOP_GRACE_S = 15.0

#: How long a port with no listener may stay busy before starting a service on it fails.
_PORT_RELEASE_S = 10.0

#: Popen handles of the children this Python process started, so killed ones get reaped.
_children: dict[int, subprocess.Popen] = {}


class LocalBackend:
    """Runs the sandbox as supervised local processes (see module docstring)."""

    kind: BackendKind = "local"

    def __init__(self, settings: Settings, *, progress: Progress = say) -> None:
        self.settings = settings
        self._progress = progress
        self._artifacts: dict[str, object] | None = None
        self._layout = local_processes.Layout(settings.state_dir)

    # ----------------------------------------------------------------- layout
    def services(self) -> list[str]:
        return local_processes.service_names(self.settings)

    def endpoints(self) -> Endpoints:
        return self.settings.endpoints()

    # ---------------------------------------------------------------- lifecycle
    def up(self) -> None:
        self._check_other_sandboxes()
        started = time.monotonic()
        master_starting = False
        for name in self.services():
            pid = self._pid(name)
            if pid is not None:
                if psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                    self._progress(f"[sandbox] {name} is paused; resuming it")
                    self._signal(name, signal.SIGCONT)
                continue
            if name == "spark-master" and not any(self._pid(w) for w in self.services() if w.startswith("spark-worker-")):
                # a cold start: what an earlier master recorded names workers and applications
                # that are gone, and recovering them would hold the new master back a worker timeout
                shutil.rmtree(self._layout.recovery_dir, ignore_errors=True)
            if name.startswith("spark-worker-") and master_starting:
                # A worker that reaches a master still starting is told "standby" and tries again
                # only after a random 5-15 s that Spark does not let one set; Kafka and MinIO go on
                # starting meanwhile.
                self._wait_healthy(self._spec("spark-master"))
                master_starting = False
            self._start(name)
            master_starting = master_starting or name == "spark-master"
        self._register()
        for name in self.services():
            self._wait_healthy(self._spec(name))
        self._progress(f"[sandbox] all services healthy ({time.monotonic() - started:.1f}s)")
        class_data_sharing.ensure(self.settings, progress=self._progress)  # once per machine and classpath

    def down(self) -> None:
        for name in reversed(self.services()):
            self._stop(name)
        self._sweep_strays()
        self._registry_file().unlink(missing_ok=True)

    def reset(self) -> None:
        self.down()
        for sub in ("data", "checkpoints", "logs", "config"):
            shutil.rmtree(self.settings.state_dir / sub, ignore_errors=True)

    def status(self) -> list[ServiceStatus]:
        out = []
        for name in self.services():
            spec = self._spec(name, need_artifacts=False)
            pid = self._pid(name)
            if pid is None:
                state, detail = ServiceState.STOPPED, ""
            elif psutil.Process(pid).status() == psutil.STATUS_STOPPED:
                state, detail = ServiceState.PAUSED, "SIGSTOP"
            else:
                result = spec.probe()
                state = ServiceState.RUNNING if result.ok else ServiceState.UNHEALTHY
                detail = result.detail
            out.append(
                ServiceStatus(
                    name=name,
                    state=state,
                    endpoint=spec.endpoint,
                    ui=spec.ui,
                    log=str(self._layout.log_path(name)),
                    pid=pid,
                    detail=detail,
                )
            )
        return out

    def logs(self, service: str, lines: int = 50) -> str:
        self._known(service)
        return log_tail(self._layout.log_path(service), lines)

    # ------------------------------------------------------------------- faults
    def kill(self, service: str) -> None:
        self._known(service)
        if self._pid(service) is None:
            raise NotRunningError(f"{service} is not running; nothing to kill (start it with `up`)")
        self._signal(service, signal.SIGKILL)
        self._wait_dead(service, 10.0)
        self._pid_file(service).unlink(missing_ok=True)

    def pause(self, service: str) -> None:
        self._known(service)
        if self._pid(service) is None:
            raise NotRunningError(f"{service} is not running; nothing to pause (start it with `up`)")
        self._signal(service, signal.SIGSTOP)
        self._wait_stopped(service, True)

    def resume(self, service: str) -> None:
        self._known(service)
        if self._pid(service) is None:
            raise NotRunningError(f"{service} is not running; nothing to resume (start it with `up`)")
        self._signal(service, signal.SIGCONT)
        self._wait_stopped(service, False)

    def restart(self, service: str) -> None:
        self._known(service)
        self._stop(service)
        self._start(service)
        self._wait_healthy(self._spec(service))

    # ---------------------------------------------------------------- internals
    def _known(self, service: str) -> None:
        if service not in self.services():
            raise UnknownServiceError(service, self.services())

    def _arts(self) -> dict[str, object]:
        if self._artifacts is None:
            self._artifacts = artifacts.fetch_all(self.settings, progress=self._progress)
        return self._artifacts

    def _spec(self, name: str, *, need_artifacts: bool = True) -> local_processes.ServiceSpec:
        return local_processes.service_spec(self.settings, self._layout, name, self._arts() if need_artifacts else {})

    def _start(self, name: str) -> None:
        local_processes.prepare(self.settings, self._layout, name, self._arts(), progress=self._progress)
        spec = self._spec(name)
        for port in spec.ports:
            self._check_port(name, port)
        self._progress(f"[sandbox] starting {name} (log: {shown(self._layout.log_path(name))})")
        log = self._layout.log_path(name).open("ab")
        log.write(f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} sandbox starts {name}\n".encode())
        log.flush()
        proc = subprocess.Popen(
            spec.argv,
            cwd=spec.cwd,
            env=spec.env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        log.close()
        _children[proc.pid] = proc
        self._layout.run_dir.mkdir(parents=True, exist_ok=True)
        self._pid_file(name).write_text(
            json.dumps({"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(), "argv": spec.argv})
        )

    def _wait_healthy(self, spec: local_processes.ServiceSpec) -> None:
        name = spec.name

        def exited() -> str | None:
            return None if self._pid(name) is not None else "exited during start"

        if name == "minio":
            probe = _minio_with_bucket(self.settings)
        else:
            probe = spec.probe
        try:
            health.wait_for(probe, timeout_s=self.settings.start_timeout_s, what=name, abort=exited, progress=self._progress)
        except health._Aborted as exc:
            raise ServiceStartError(
                name, str(exc), str(self._layout.log_path(name)), log_tail(self._layout.log_path(name), 25)
            ) from None
        except TimeoutError as exc:
            raise ServiceStartError(
                name,
                f"did not become healthy: {exc}",
                str(self._layout.log_path(name)),
                log_tail(self._layout.log_path(name), 25),
            ) from None
        self._progress(f"[sandbox] {name} healthy: {probe().detail}")

    def _stop(self, name: str) -> None:
        pid = self._pid(name)
        if pid is not None:
            self._progress(f"[sandbox] stopping {name} (pid {pid})")
            self._signal(name, signal.SIGCONT)  # a paused process cannot handle SIGTERM
            self._signal(name, signal.SIGTERM)
            if not self._wait_dead(name, _STOP_GRACE_S):
                self._signal(name, signal.SIGKILL)
                self._wait_dead(name, 10.0)
        self._pid_file(name).unlink(missing_ok=True)

    def _pid_file(self, name: str) -> Path:
        return self._layout.run_dir / f"{name}.json"

    def _pid(self, name: str) -> int | None:
        """The live pid recorded for ``name``, or None (stale records are ignored)."""
        try:
            record = json.loads(self._pid_file(name).read_text())
        except (FileNotFoundError, ValueError):
            return None
        pid = int(record["pid"])
        _reap(pid)
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - float(record["create_time"])) > 1.0:
                return None
            if proc.status() == psutil.STATUS_ZOMBIE:
                return None
        except psutil.NoSuchProcess:
            return None
        return pid

    def _signal(self, name: str, sig: signal.Signals) -> None:
        pid = self._pid(name)
        if pid is None:
            return
        try:
            os.killpg(pid, sig)  # the service's whole group: a worker takes its executors with it
        except ProcessLookupError:
            pass

    def _wait_stopped(self, name: str, stopped: bool) -> None:
        """Signals are delivered asynchronously: wait until the kernel reports the new state."""
        pid = self._pid(name)
        if pid is None:
            return
        health.wait_for(
            lambda: (psutil.Process(pid).status() == psutil.STATUS_STOPPED) == stopped,
            timeout_s=10.0,
            interval_s=0.05,
            what=f"{name} {'stopping' if stopped else 'continuing'}",
        )

    def _wait_dead(self, name: str, timeout_s: float) -> bool:
        record = self._pid_file(name)
        try:
            pgid = int(json.loads(record.read_text())["pid"])
        except (FileNotFoundError, ValueError):
            return True
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            _reap(pgid)
            if not _group_members(pgid):
                return True
            time.sleep(0.1)
        return False

    def _check_port(self, service: str, port: int) -> None:
        # A port nobody listens on can still be held for a moment by the closing connections
        # of a process just killed (a restart right after a kill): wait for those, not longer.
        deadline = time.monotonic() + _PORT_RELEASE_S
        while not _bindable(self.settings.host, port):
            owner_pid, owner = _port_owner(port)
            if owner_pid is not None or time.monotonic() > deadline:
                break
            time.sleep(0.2)
        else:
            return
        for entry in _registry_entries(self.settings):
            if entry["state_dir"] != str(self.settings.state_dir) and owner_pid in entry.get("pids", []):
                raise AnotherSandboxRunningError(entry["state_dir"], [port])
        raise PortBusyError(service, self.settings.host, port, owner)

    # ------------------------------------------- one sandbox per set of ports
    def _registry_file(self) -> Path:
        digest = hashlib.sha1(str(self.settings.state_dir).encode()).hexdigest()[:12]
        return self.settings.cache_dir / "running" / f"{digest}.json"

    def _register(self) -> None:
        path = self._registry_file()
        path.parent.mkdir(parents=True, exist_ok=True)
        pids = [pid for name in self.services() if (pid := self._pid(name)) is not None]
        path.write_text(json.dumps({"state_dir": str(self.settings.state_dir), "ports": _all_ports(self.settings), "pids": pids}))

    def _check_other_sandboxes(self) -> None:
        mine = set(_all_ports(self.settings))
        for entry in _registry_entries(self.settings):
            if entry["state_dir"] == str(self.settings.state_dir):
                continue
            clash = sorted(mine & set(entry.get("ports", [])))
            if clash:
                raise AnotherSandboxRunningError(entry["state_dir"], clash)

    def _sweep_strays(self) -> None:
        """Kill leftovers the sandbox started (an executor orphaned by a killed worker), found
        by :data:`SANDBOX_MARK`; nothing else, whatever its working directory."""
        for proc in sandbox_processes(self.settings):
            try:
                proc.kill()
            except psutil.Error:
                pass


def _minio_with_bucket(settings: Settings) -> Callable[[], health.Health]:
    def probe() -> health.Health:
        result = health.check_minio(settings, timeout_s=3.0)
        if not result.ok and "bucket" in result.detail:
            try:
                health.ensure_bucket(settings)
            except Exception as exc:  # noqa: BLE001 - reported as the health detail
                return health.Health(False, f"creating bucket {settings.bucket}: {exc}")
            result = health.check_minio(settings, timeout_s=3.0)
        return result

    return probe


def _all_ports(settings: Settings) -> list[int]:
    p = settings.ports
    return [p.kafka, p.kafka_controller, p.minio, p.minio_console, p.spark_master, p.spark_master_ui] + [
        p.worker_ui(n) for n in range(1, settings.spark_workers + 1)
    ]


def _registry_entries(settings: Settings) -> list[dict]:
    """Registered sandboxes that still have a live process (stale entries are removed)."""
    out = []
    for path in sorted((settings.cache_dir / "running").glob("*.json")):
        try:
            entry = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if any(psutil.pid_exists(pid) for pid in entry.get("pids", [])):
            out.append(entry)
        else:
            path.unlink(missing_ok=True)
    return out


def _bindable(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _port_owner(port: int) -> tuple[int | None, str | None]:
    try:
        for conn in psutil.net_connections(kind="inet"):
            if conn.laddr and conn.laddr.port == port and conn.status == psutil.CONN_LISTEN and conn.pid:
                proc = psutil.Process(conn.pid)
                cmd = " ".join(proc.cmdline()[:3])
                return conn.pid, f"pid {conn.pid} ({proc.name()}: {cmd[:80]})"
    except (psutil.Error, OSError):
        pass
    return None, None


def _group_members(pgid: int) -> list[int]:
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                members.append(proc.pid)
        except (ProcessLookupError, psutil.Error):
            continue
    return members


def _reap(pid: int) -> None:
    proc = _children.get(pid)
    if proc is not None and proc.poll() is not None:
        _children.pop(pid, None)


def sandbox_processes(settings: Settings) -> list[psutil.Process]:
    """Every live process this sandbox started, directly or through a service (executors,
    Python workers): those whose environment carries :data:`SANDBOX_MARK` for it."""
    root = str(settings.state_dir)
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if proc.pid == os.getpid() or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get(SANDBOX_MARK) == root:
                found.append(proc)
        except psutil.Error:
            continue
    return found


__all__ = ["LocalBackend", "sandbox_processes", "SandboxError"]


def running_here(settings: Settings) -> list[str]:
    """The services a local sandbox runs now from ``settings.state_dir`` (live process records),
    whatever backend ``settings`` names: a command line asks before it picks compose."""
    from dataclasses import replace

    sb = LocalBackend(replace(settings, backend="local"), progress=lambda _line: None)
    return [name for name in sb.services() if sb._pid(name) is not None]  # noqa: SLF001 - the backend's own records
