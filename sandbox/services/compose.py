"""The Docker Compose backend: the sandbox as the services of ``docker-compose.yml``.

Every action is one ``docker compose`` command against the checkout's compose file. The ports,
credentials and sizes come from :class:`~sandbox.settings.Settings` (passed to compose as the
``OSL_*`` variables the compose file reads), so ``endpoints()`` always names what the
containers publish. Healthy means what it means for the local backend: after compose reports
every container healthy (its own in-container checks), the shared checks in
:mod:`sandbox.checks.health` must pass from this machine too.

Inside the compose network the job reaches Kafka at ``kafka:19092``, MinIO at
``http://minio:9000`` and the master at ``spark://spark-master:7077``; its driver runs in the
``jupyter`` container, because executors must be able to connect back to it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

from sandbox import versions
from sandbox.artifacts import Progress, say
from sandbox.checks import health
from sandbox.errors import (
    NotRunningError,
    PortBusyError,
    SandboxError,
    ServiceStartError,
    ToolMissingError,
    UnknownServiceError,
)
from sandbox.services.backend import CORE_SERVICES, ServiceState, ServiceStatus
from sandbox.settings import JIT_OPTIONS, PROJECT, BackendKind, Endpoints, Settings, docker_engine_answers, project_root

__all__ = [
    "ComposeBackend",
    "ComposeCommandError",
    "ComposePluginMissingError",
    "DockerEngineDownError",
    "DockerMissingError",
    "compose_environment",
    "compose_unavailable",
    "docker_engine_answers",
]

#: Services a learner can break, in start order (the one-shot ``minio-init`` is not one).
COMPOSE_SERVICES: tuple[str, ...] = (*CORE_SERVICES, "jupyter", "faults")
#: The fault service's address, on the compose network only (sandbox/services/fault_service.py).
FAULTS_ADDRESS = "faults:8099"
#: The named volume holding the learner's working copy of the workbook; ``reset`` keeps it.
LEARNER_VOLUME = "workbook"
#: The compose file runs exactly this many Spark workers.
COMPOSE_WORKERS = 2

_QUICK_TIMEOUT_S = 120.0
_DOCKER_FIX = "install Docker Engine or Docker Desktop (https://docs.docker.com/get-docker/), or use OSL_BACKEND=local"
_PLUGIN_FIX = (
    "install the compose plugin (Debian/Ubuntu: apt-get install docker-compose-plugin), or build "
    "it from source with scripts/ensure-compose-plugin.sh, or use OSL_BACKEND=local"
)


# ------------------------------------------------------------------------------------ errors
class DockerMissingError(ToolMissingError):
    """There is no ``docker`` command on PATH."""

    def __init__(self) -> None:
        super().__init__("docker", "CLI", _DOCKER_FIX)


class ComposePluginMissingError(ToolMissingError):
    """``docker`` exists but ``docker compose`` does not (the compose CLI plugin is missing)."""

    def __init__(self, detail: str) -> None:
        super().__init__("docker compose", "v2 (the CLI plugin)", _PLUGIN_FIX, found=detail or None)


class DockerEngineDownError(SandboxError):
    """The docker CLI works but no Docker engine answers it (not started, or no permission)."""

    def __init__(self, detail: str) -> None:
        self.detail = detail
        if "permission denied" in detail.lower():
            fix = "add your user to the `docker` group (then log out and in again), or run with sudo"
        else:
            fix = "start Docker (Docker Desktop, or `sudo systemctl start docker`), or use OSL_BACKEND=local"
        super().__init__(f"the Docker engine does not answer: {detail.strip() or 'no reply'}; {fix}")


class ComposeCommandError(SandboxError):
    """A ``docker compose`` command failed for a reason this module does not recognise."""

    def __init__(self, argv: Sequence[str], returncode: int, output: str) -> None:
        self.argv, self.returncode, self.output = list(argv), returncode, output
        tail = "\n".join("    " + line for line in output.strip().splitlines()[-15:]) or "    (no output)"
        super().__init__(f"`{' '.join(self.argv)}` failed with exit code {returncode}:\n{tail}")


# --------------------------------------------------------------------------- engine probing
def compose_environment(settings: Settings) -> dict[str, str]:
    """The ``OSL_*`` variables docker-compose.yml reads, from ``settings`` and sandbox/versions.py
    (they override .env): host ports, credentials, sizes, the broker's JIT options, image versions, the
    build CA bundle."""
    p = settings.ports
    env = {
        "OSL_KAFKA_PORT": p.kafka,
        "OSL_MINIO_PORT": p.minio,
        "OSL_MINIO_CONSOLE_PORT": p.minio_console,
        "OSL_SPARK_MASTER_PORT": p.spark_master,
        "OSL_SPARK_MASTER_UI_PORT": p.spark_master_ui,
        "OSL_SPARK_WORKER_1_UI_PORT": p.worker_ui(1),
        "OSL_SPARK_WORKER_2_UI_PORT": p.worker_ui(2),
        "OSL_JUPYTER_PORT": p.jupyter,
        "OSL_SPARK_DRIVER_UI_PORT": p.spark_driver_ui,
        "OSL_S3_ACCESS_KEY": settings.s3_access_key,
        "OSL_S3_SECRET_KEY": settings.s3_secret_key,
        "OSL_BUCKET": settings.bucket,
        "OSL_KAFKA_HEAP": settings.kafka_heap,
        "OSL_KAFKA_JIT_OPTS": JIT_OPTIONS[settings.kafka_jit],
        "OSL_KAFKA_PARTITIONS": settings.kafka_partitions,
        "OSL_SPARK_WORKER_CORES": settings.spark_worker_cores,
        "OSL_SPARK_WORKER_MEMORY": settings.spark_worker_memory,
        "OSL_CDS": "1" if settings.cds else "0",
    }
    env["OSL_PORT_OFFSET"] = p.offset
    if settings.maven_repo:
        env["OSL_MAVEN_REPO"] = settings.maven_repo
    if settings.build_ca_bundle:
        env["OSL_BUILD_CA_BUNDLE"] = settings.build_ca_bundle
    env.update(versions.image_build_env())
    return {k: str(v) for k, v in env.items()}


# ----------------------------------------------------------------------------------- backend
class ComposeBackend:
    """Runs the sandbox with ``docker compose`` (see module docstring)."""

    kind: BackendKind = "compose"

    def __init__(
        self,
        settings: Settings,
        *,
        compose_file: Path | None = None,
        project_name: str | None = None,
        progress: Progress = say,
    ) -> None:
        if settings.spark_workers != COMPOSE_WORKERS:
            raise SandboxError(
                f"docker-compose.yml runs {COMPOSE_WORKERS} Spark workers but settings ask for "
                f"{settings.spark_workers}; use spark_workers={COMPOSE_WORKERS} with the compose backend, "
                f"or the local backend (OSL_BACKEND=local) for another cluster size"
            )
        if compose_file is None:
            root = project_root()
            if root is None:
                raise SandboxError(
                    "the compose backend needs the repository checkout (docker-compose.yml and docker/), "
                    "and this sandbox package is not running from one; run from a clone "
                    "(`pip install -e .`), pass compose_file=..., or use OSL_BACKEND=local"
                )
            compose_file = root / "docker-compose.yml"
        self.settings = settings
        self.compose_file = Path(compose_file).resolve()
        offset = settings.ports.offset
        self.project_name = project_name or (PROJECT if offset == 0 else f"{PROJECT}-p{offset}")
        self._progress = progress
        self._checked = False

    # --------------------------------------------------------------------------- commands
    def compose_argv(self, *args: str) -> list[str]:
        """The full ``docker compose ...`` command line for ``args``."""
        return [
            "docker",
            "compose",
            "--project-name",
            self.project_name,
            "--file",
            str(self.compose_file),
            "--project-directory",
            str(self.compose_file.parent),
            *args,
        ]

    def _env(self) -> dict[str, str]:
        return dict(os.environ, **compose_environment(self.settings))

    def _compose(self, *args: str, timeout_s: float | None = _QUICK_TIMEOUT_S, check: bool = True) -> str:
        """Run one compose command; return its output, or raise a SandboxError naming the cause."""
        self._preflight()
        argv = self.compose_argv(*args)
        try:
            proc = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                env=self._env(),
                timeout=timeout_s,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired as exc:
            out = _text(exc.stdout) + _text(exc.stderr)
            raise ComposeCommandError(argv, -1, out + f"\n(timed out after {timeout_s:.0f}s)") from None
        out = (proc.stdout or "") + (proc.stderr or "")
        if check and proc.returncode != 0:
            raise self._classify(argv, proc.returncode, out)
        return proc.stdout or ""

    def _compose_streaming(self, *args: str, label: str) -> None:
        """Run a long compose command (build, up), turning its output into progress lines."""
        self._preflight()
        argv = self.compose_argv(*args)
        started = time.monotonic()
        proc = subprocess.Popen(
            argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=self._env(),
            stdin=subprocess.DEVNULL,
        )
        done = threading.Event()

        def beat() -> None:
            while not done.wait(30.0):
                self._progress(f"[compose]   still working on {label} ({time.monotonic() - started:.0f}s)")

        threading.Thread(target=beat, daemon=True).start()
        tail: list[str] = []
        seen: set[str] = set()  # compose repeats "Container X Healthy" for every service that waits on X
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                tail = (tail + [line.rstrip()])[-60:]
                shown = _progress_line(line)
                if shown and shown not in seen:
                    seen.add(shown)
                    self._progress(f"[compose]   {shown}")
            rc = proc.wait()
        finally:
            done.set()
            if proc.poll() is None:
                proc.kill()
        if rc != 0:
            raise self._classify(argv, rc, "\n".join(tail))

    def _preflight(self) -> None:
        """Raise a specific error when the docker CLI, the compose plugin or the engine is missing."""
        if self._checked:
            return
        if shutil.which("docker") is None:
            raise DockerMissingError()
        try:
            version = subprocess.run(
                ["docker", "compose", "version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise ComposePluginMissingError("`docker compose version` did not answer within 30s") from None
        if version.returncode != 0:
            raise ComposePluginMissingError(_first_line(version.stderr or version.stdout))
        try:
            info = subprocess.run(
                ["docker", "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                text=True,
                timeout=15,
                stdin=subprocess.DEVNULL,
            )
        except subprocess.TimeoutExpired:
            raise DockerEngineDownError("`docker info` did not answer within 15s") from None
        if info.returncode != 0 or not info.stdout.strip():
            raise DockerEngineDownError(_first_line(info.stderr) or f"`docker info` exited {info.returncode}")
        self._checked = True

    def _classify(self, argv: Sequence[str], returncode: int, output: str) -> SandboxError:
        if "Cannot connect to the Docker daemon" in output or "permission denied while trying to connect" in output:
            return DockerEngineDownError(_first_line_with(output, ("Cannot connect", "permission denied")))
        busy = re.search(r"(?:Bind for|listen tcp4?) (?P<host>[\d.]+):(?P<port>\d+)", output)
        if busy is not None and ("already allocated" in output or "address already in use" in output):
            port = int(busy["port"])
            return PortBusyError(self._service_of_port(port), busy["host"], port, None)
        return ComposeCommandError(argv, returncode, output)

    def _service_of_port(self, port: int) -> str:
        env = compose_environment(self.settings)
        owners = {
            "OSL_KAFKA_PORT": "kafka",
            "OSL_MINIO_PORT": "minio",
            "OSL_MINIO_CONSOLE_PORT": "minio",
            "OSL_SPARK_MASTER_PORT": "spark-master",
            "OSL_SPARK_MASTER_UI_PORT": "spark-master",
            "OSL_SPARK_WORKER_1_UI_PORT": "spark-worker-1",
            "OSL_SPARK_WORKER_2_UI_PORT": "spark-worker-2",
            "OSL_JUPYTER_PORT": "jupyter",
            "OSL_SPARK_DRIVER_UI_PORT": "jupyter",
        }
        for var, service in owners.items():
            if env[var] == str(port):
                return service
        return "a sandbox service"

    def run_in(
        self, service: str, argv: Sequence[str], *, capture: bool = False, timeout_s: float | None = None
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` inside the running ``service`` container (``docker compose exec -T``).

        Code that must sit inside the compose network runs this way: the demo's pipeline and the
        workbook under nbval, whose Spark driver executors must reach by name. ``capture=False``
        streams the output to this process's stdout/stderr."""
        self._preflight()
        cmd = self.compose_argv("exec", "-T", service, *argv)
        return subprocess.run(
            cmd,
            env=self._env(),
            stdin=subprocess.DEVNULL,
            timeout=timeout_s,
            text=True,
            capture_output=capture,
        )

    # ------------------------------------------------------------------------- protocol
    def services(self) -> list[str]:
        return list(COMPOSE_SERVICES)

    def endpoints(self) -> Endpoints:
        return self.settings.endpoints()

    def up(self) -> None:
        """Build the images (cached after the first time), start everything, wait for health.

        The first build compiles MinIO, installs Python packages and bakes the job's jars into
        the image: several minutes. Later calls reuse Docker's build cache.
        """
        started = time.monotonic()
        for status in self._container_states().values():
            if status["State"] == "paused":
                self._progress(f"[compose] {status['Service']} is paused; resuming it")
                self._compose("unpause", status["Service"])
        self._stage_minio()
        self._progress(f"[compose] building images for {self.project_name} (cached after the first build) ...")
        self._compose_streaming("build", label="the image build")
        self._progress("[compose] starting services and waiting until each passes its check ...")
        # No `--wait`: Docker runs a healthcheck every 5 s (no `start_interval` before Engine 25),
        # so waiting on them found a ready stack about 5 s late. `up --detach` returns once every
        # container has started (minio-init after MinIO's healthcheck); then each service's own
        # check, from this machine, every half second, and a container that exits or that Docker
        # calls unhealthy ends the wait at once, with its log.
        try:
            self._compose_streaming("up", "--detach", "--no-build", "--remove-orphans", label="docker compose up")
        except ComposeCommandError as exc:
            raise self._start_failure(exc) from None
        for name in self.services():
            self._wait_healthy(name, abort=self._failed_container)
        self._progress(f"[compose] all services healthy ({time.monotonic() - started:.1f}s)")

    def _stage_minio(self) -> None:
        """Put the MinIO binary the local backend built from the same pinned module in
        ``prebuilt/``, where the image build takes it instead of compiling MinIO again
        (prebuilt/README.md); nothing when there is none, and the image builds its own. A build
        the bootstrap left running is waited for, not built a second time in the image."""
        from sandbox import artifacts, versions

        built = artifacts.wait_for_minio_build(self.settings, progress=self._progress)
        folder = self.compose_file.parent / "prebuilt"
        if built is None or not folder.is_dir():
            return
        dest, stamp = folder / "minio", folder / "minio.version"
        want = f"{versions.MINIO_MODULE}@{versions.MINIO_VERSION}"
        current = stamp.exists() and stamp.read_text() == want and dest.exists()
        if current and dest.stat().st_size == built.stat().st_size:
            return
        stamp.unlink(missing_ok=True)  # never a stamp naming a binary not (yet) in place
        partial = folder / "minio.partial"
        shutil.copy2(built, partial)
        partial.replace(dest)
        stamp.write_text(want)
        self._progress(f"[compose] the MinIO image reuses the binary built for the local backend ({built})")

    def down(self) -> None:
        self._unpause_all()
        self._compose("down", "--remove-orphans", timeout_s=300)

    def reset(self) -> None:
        """``down`` and delete the data volumes (topics, objects, checkpoints, state); images stay.

        The learner's working copy of the workbook (the ``workbook`` volume) is kept: a reset
        starts the data over, it does not throw away someone's notes. ``docker volume rm``
        of ``<project>_workbook`` removes it too.
        """
        self._unpause_all()
        self._compose("down", "--remove-orphans", timeout_s=300)
        names = subprocess.run(
            ["docker", "volume", "ls", "--quiet", "--filter", f"label=com.docker.compose.project={self.project_name}"],
            capture_output=True,
            text=True,
            timeout=_QUICK_TIMEOUT_S,
        )
        if names.returncode != 0:
            raise SandboxError(f"reset: `docker volume ls` failed: {_first_line(names.stderr)}; is dockerd running?")
        doomed = [n for n in names.stdout.split() if n != f"{self.project_name}_{LEARNER_VOLUME}"]
        if not doomed:
            return
        removed = subprocess.run(["docker", "volume", "rm", *doomed], capture_output=True, text=True, timeout=_QUICK_TIMEOUT_S)
        if removed.returncode != 0:
            raise SandboxError(
                f"reset: could not remove the volumes {', '.join(doomed)}: {_first_line(removed.stderr)}; "
                f"a container outside this project may use them (docker ps -a --filter volume=<name>)"
            )

    def status(self) -> list[ServiceStatus]:
        states = self._container_states()
        return [self._checked_status(name, states.get(name)) for name in self.services()]

    def _checked_status(self, service: str, record: dict | None) -> ServiceStatus:
        """Docker's verdict, except in the seconds after ``up`` before its first healthcheck
        ("starting"): ``up`` returns as soon as the service's own check passes, so that check
        decides until Docker has one of its own."""
        status = self._status_of(service, record)
        if (record or {}).get("State") == "running" and (record or {}).get("Health") == "starting":
            result = self._probe(service)()
            if result:
                return replace(
                    status, state=ServiceState.RUNNING, detail=f"{result.detail} (Docker's first healthcheck is still to come)"
                )
        return status

    def logs(self, service: str, lines: int = 50) -> str:
        self._known(service)
        out = self._compose("logs", "--no-color", "--no-log-prefix", "--tail", str(lines), service)
        return "\n".join(out.splitlines()[-lines:])

    def kill(self, service: str) -> None:
        self._require_running(service, "kill")
        self._compose("kill", "--signal", "SIGKILL", service)

    def pause(self, service: str) -> None:
        state = self._require_running(service, "pause")
        if state is not ServiceState.PAUSED:
            self._compose("pause", service)

    def resume(self, service: str) -> None:
        if self._require_running(service, "resume") is ServiceState.PAUSED:
            self._compose("unpause", service)
            self._wait_docker_health(service)

    def restart(self, service: str) -> None:
        self._known(service)
        state = self._state_of(service)
        if state is ServiceState.PAUSED:
            self._compose("unpause", service)
        if state is not ServiceState.STOPPED:
            self._progress(f"[compose] stopping {service}")
            self._compose("stop", service, timeout_s=120)
        self._progress(f"[compose] starting {service}")
        try:  # no `--wait`: its own check, every 0.5 s, as in `up`
            self._compose("up", "--detach", "--no-build", "--no-deps", service, timeout_s=self.settings.start_timeout_s + 60)
        except ComposeCommandError as exc:
            raise self._start_failure(exc, prefer=service) from None
        self._wait_healthy(service, abort=lambda: self._failed_container(only=service))

    # ------------------------------------------------------------------------- internals
    def _known(self, service: str) -> None:
        if service not in COMPOSE_SERVICES:
            raise UnknownServiceError(service, list(COMPOSE_SERVICES))

    def _container_states(self) -> dict[str, dict]:
        """``docker compose ps --all`` as {service: container record}."""
        out = self._compose("ps", "--all", "--format", "json")
        return {record["Service"]: record for record in _parse_ps(out)}

    def _state_of(self, service: str) -> ServiceState:
        return self._status_of(service, self._container_states().get(service)).state

    def _require_running(self, service: str, action: str) -> ServiceState:
        self._known(service)
        state = self._state_of(service)
        if state is ServiceState.STOPPED:
            raise NotRunningError(
                f"{service} is not running; nothing to {action} (start it with `python -m sandbox up`, "
                f"or `python -m sandbox restart {service}`)"
            )
        return state

    def _status_of(self, service: str, record: dict | None) -> ServiceStatus:
        endpoint, ui = self._addresses(service)
        log = self._logs_hint(service)
        if record is None:
            return ServiceStatus(
                name=service,
                state=ServiceState.STOPPED,
                endpoint=endpoint,
                ui=ui,
                log=log,
                detail="no container (run `python -m sandbox up`)",
            )
        state_text, health_text = record.get("State", ""), record.get("Health", "")
        state = container_state(state_text)
        if state is None and state_text == "running":
            state = ServiceState.UNHEALTHY if health_text in ("unhealthy", "starting") else ServiceState.RUNNING
        elif state is None:  # restarting
            state = ServiceState.UNHEALTHY
        detail = record.get("Status", "") or state_text
        if state is ServiceState.STOPPED and state_text == "exited":
            detail = f"exited with code {record.get('ExitCode', '?')}"
        return ServiceStatus(name=service, state=state, endpoint=endpoint, ui=ui, log=log, detail=detail)

    def _addresses(self, service: str) -> tuple[str, str | None]:
        if service == "jupyter":
            return self.settings.endpoints().jupyter or "", self.settings.endpoints().jupyter
        if service == "faults":
            return f"{FAULTS_ADDRESS} (inside the compose network only)", None
        return service_addresses(self.settings, service)

    def _probe(self, service: str) -> Callable[[], health.Health]:
        if service == "jupyter":
            return lambda: _check_jupyter(self.settings)
        if service == "faults":  # no published port: Docker's own check, which asks the engine through it
            return self._docker_healthy
        return service_probe(self.settings, service)

    def _docker_healthy(self) -> health.Health:
        record = self._container_states().get("faults") or {}
        ok = record.get("State") == "running" and record.get("Health") == "healthy"
        return health.Health(ok, f"{record.get('State', 'no container')}, {record.get('Health') or 'no check yet'}")

    def _wait_docker_health(self, service: str) -> None:
        """Until Docker's own healthcheck passes again. A paused container's checks fail (its
        processes are frozen), so right after ``unpause`` Docker still reports it unhealthy
        until the next check: ``status`` would show that stale verdict."""
        try:
            health.wait_for(
                lambda: self._state_of(service) is ServiceState.RUNNING,
                timeout_s=self.settings.start_timeout_s,
                what=f"{service}'s Docker healthcheck after unpause",
                progress=self._progress,
            )
        except TimeoutError as exc:
            raise ServiceStartError(
                service,
                f"was unpaused but does not pass its healthcheck: {exc}",
                self._logs_hint(service),
                self._safe_logs(service),
            ) from None

    def _wait_healthy(self, service: str, *, abort: Callable[[], SandboxError | None] | None = None) -> None:
        """The shared real-work check for ``service``, from this machine, until it passes; with
        ``abort``, the error it returns between checks ends the wait."""
        probe = self._probe(service)
        failed: list[SandboxError] = []
        asked = [0.0]

        def stop_early() -> str | None:  # at most every 2 s: each ask is a `docker compose ps`
            if abort is None or time.monotonic() - asked[0] < 2.0:
                return None
            asked[0] = time.monotonic()
            if (error := abort()) is not None:
                failed.append(error)
                return str(error)
            return None

        try:
            result = health.wait_for(
                probe, timeout_s=self.settings.start_timeout_s, what=service, abort=stop_early, progress=self._progress
            )
        except health._Aborted:
            raise failed[0] from None
        except TimeoutError as exc:
            raise ServiceStartError(
                service,
                f"is up in Docker but fails its check from this machine: {exc}",
                self._logs_hint(service),
                self._safe_logs(service),
            ) from None
        self._progress(f"[compose] {service} healthy: {result.detail}")

    def _failed_container(self, *, only: str | None = None) -> SandboxError | None:
        """A ServiceStartError for a container (``only`` that service's) that exited, died or
        failed Docker's healthcheck (minio-init exiting 0 is its success), else None."""
        try:
            states = self._container_states()
            return self._container_failure({only: states[only]} if only in states else {} if only else states)
        except SandboxError:
            return None  # the engine did not answer this once; the service's own check goes on

    def _start_failure(self, exc: ComposeCommandError, *, prefer: str | None = None) -> SandboxError:
        """Turn a failed ``up`` into a ServiceStartError for the service that failed."""
        try:
            states = self._container_states()
        except SandboxError:
            return exc
        return self._container_failure(states, prefer=prefer) or exc

    def _container_failure(self, states: dict[str, dict], *, prefer: str | None = None) -> ServiceStartError | None:
        order = ([prefer] if prefer else []) + ["minio-init", *COMPOSE_SERVICES]
        for name in order:
            record = states.get(name)
            if record is None:
                continue
            bad_exit = record.get("State") == "exited" and (name != "minio-init" or record.get("ExitCode") != 0)
            if record.get("Health") == "unhealthy" or bad_exit or record.get("State") in ("dead", "restarting"):
                reason = (
                    f"exited with code {record.get('ExitCode')}"
                    if bad_exit
                    else f"did not become healthy ({record.get('Status', '')})"
                )
                return ServiceStartError(name, reason, self._logs_hint(name), self._safe_logs(name))
        return None

    def _logs_hint(self, service: str) -> str:
        """The command that shows a service's whole log (works from any directory)."""
        return f"docker compose -p {self.project_name} logs {service}"

    def _safe_logs(self, service: str) -> str:
        try:
            return "\n".join(
                self._compose("logs", "--no-color", "--no-log-prefix", "--tail", "25", service, check=False).splitlines()[-25:]
            )
        except SandboxError:
            return ""

    def _unpause_all(self) -> None:
        try:
            states = self._container_states()
        except ComposeCommandError:
            return
        for record in states.values():
            if record.get("State") == "paused":
                self._compose("unpause", record["Service"])


# ------------------------------------------------------------------------------------ helpers
def container_state(state_text: str) -> ServiceState | None:
    """Docker's container state as a status says it: paused, or stopped (created, exited, dead,
    removing, or no container); None while its processes live (running, restarting): a check decides."""
    if state_text == "paused":
        return ServiceState.PAUSED
    return None if state_text in ("running", "restarting") else ServiceState.STOPPED


def service_addresses(settings: Settings, service: str) -> tuple[str, str | None]:
    """(endpoint, UI link) of one core service of the compose stack, for ``status``."""
    e = settings.endpoints()
    if service == "kafka":
        return e.kafka_bootstrap, None
    if service == "minio":
        return e.s3_endpoint, e.s3_console
    if service == "spark-master":
        return e.spark_master, e.spark_master_ui
    n = int(service.rsplit("-", 1)[1])
    return f"{service} (registers with spark://spark-master:7077)", e.spark_worker_uis[n - 1]


def service_probe(settings: Settings, service: str) -> Callable[[], health.Health]:
    """The shared real-work health check of one core service, with the addresses in ``settings``."""
    if service == "kafka":
        return lambda: health.check_kafka(settings, timeout_s=3.0)
    if service == "minio":
        return lambda: health.check_minio(settings, timeout_s=3.0)
    if service == "spark-master":
        return lambda: health.check_spark(settings, timeout_s=3.0)
    if service.startswith("spark-worker-"):
        n = int(service.rsplit("-", 1)[1])
        return lambda: health.check_spark_worker(settings, n, timeout_s=3.0)
    raise UnknownServiceError(service, list(CORE_SERVICES))


def compose_unavailable() -> str | None:
    """Why the compose backend cannot run here (no CLI, no engine, no plugin), or None."""
    if shutil.which("docker") is None:
        return "no docker CLI"
    if not docker_engine_answers():
        return "no Docker engine answers"
    try:
        proc = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL
        )
    except subprocess.TimeoutExpired:
        return "`docker compose version` did not answer"
    if proc.returncode != 0:
        return "Docker answers but the compose plugin is missing (scripts/ensure-docker.sh builds it)"
    return None


def _parse_ps(out: str) -> list[dict]:
    """Compose >= 2.21 prints one JSON object per line; older versions print one JSON array."""
    text = out.strip()
    if not text:
        return []
    if text.startswith("["):
        return list(json.loads(text))
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _check_jupyter(settings: Settings, *, timeout_s: float = 3.0) -> health.Health:
    url = f"{settings.endpoints().jupyter}/api"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as resp:
            version = json.loads(resp.read()).get("version")
    except (urllib.error.URLError, OSError, ValueError) as exc:
        return health.Health(False, f"{url}: {exc}")
    return health.Health(True, f"Jupyter server {version} at {settings.endpoints().jupyter}")


def _progress_line(line: str) -> str | None:
    """The lines of compose/BuildKit output worth showing: build steps, containers ready or failed, errors."""
    line = line.rstrip()
    if re.match(r"#\d+ \[[\w-]+ +\d+/\d+\] ", line):  # a build step starts
        return re.sub(r"^#\d+ ", "", line)[:160]
    # one line per container when it is ready or fails; Created/Started/Waiting would be three more each
    if re.search(r"\b(Container|Image) \S+ +(Healthy|Built|Exited|Error)", line):
        return line.strip()
    if re.search(r"\b(ERROR|error|failed)\b", line):
        return line.strip()[:300]
    return None


def _text(data: str | bytes | None) -> str:
    if data is None:
        return ""
    return data.decode("utf-8", "replace") if isinstance(data, bytes) else data


def _first_line(text: str | None) -> str:
    return next((line.strip() for line in (text or "").splitlines() if line.strip()), "")


def _first_line_with(text: str, needles: Sequence[str]) -> str:
    return next((line.strip() for line in text.splitlines() if any(n in line for n in needles)), _first_line(text))
