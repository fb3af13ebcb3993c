"""The sandbox's errors. Every message names the subject, the place and the fix."""

from __future__ import annotations


class SandboxError(Exception):
    """Root of every error the sandbox raises on purpose."""


class ToolMissingError(SandboxError):
    """A required program (Java, Go, docker) is absent or too old."""

    def __init__(self, tool: str, need: str, fix: str, found: str | None = None) -> None:
        self.tool, self.need, self.fix, self.found = tool, need, fix, found
        got = f" (found {found})" if found else " (not found)"
        super().__init__(f"{tool} {need} is required{got}: {fix}")


class PortBusyError(SandboxError):
    """A port the sandbox must listen on is already taken."""

    def __init__(self, service: str, host: str, port: int, owner: str | None) -> None:
        self.service, self.host, self.port, self.owner = service, host, port, owner
        who = f" by {owner}" if owner else " by another process"
        super().__init__(
            f"{service}: port {host}:{port} is already in use{who}; stop that process, "
            f"or move the whole sandbox with OSL_PORT_OFFSET=<n> (ports become port+n)"
        )


class ArtifactFetchError(SandboxError):
    """A jar or a Go module could not be fetched from its registry."""

    def __init__(self, artifact: str, registry: str, detail: str) -> None:
        self.artifact, self.registry, self.detail = artifact, registry, detail
        super().__init__(
            f"could not fetch {artifact} from {registry}: {detail}\n"
            f"check that {registry} is reachable from this machine (proxy settings, "
            f"firewall), or point OSL_MAVEN_REPO / GOPROXY at a mirror"
        )


class ServiceStartError(SandboxError):
    """A service exited, or never became healthy, while the sandbox was starting it."""

    def __init__(self, service: str, reason: str, log_path: str | None, log_tail: str) -> None:
        self.service, self.reason, self.log_path, self.log_tail = service, reason, log_path, log_tail
        where = f" (log: {log_path})" if log_path else ""
        tail = "\n".join("    " + line for line in log_tail.splitlines()) or "    (log is empty)"
        super().__init__(f"{service} {reason}{where}; last lines of its log:\n{tail}")


class AnotherSandboxRunningError(SandboxError):
    """A sandbox started from another state directory holds the same ports."""

    def __init__(self, other_state_dir: str, ports: list[int]) -> None:
        self.other_state_dir, self.ports = other_state_dir, ports
        super().__init__(
            f"another sandbox is running from {other_state_dir} on ports "
            f"{', '.join(map(str, ports))}; stop it with "
            f"`python -m sandbox down --state-dir {other_state_dir}`, or run this one on "
            f"other ports with OSL_PORT_OFFSET=<n>"
        )


class UnknownServiceError(SandboxError):
    """A service name that this backend does not run."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name, self.known = name, known
        super().__init__(f"no service named {name!r}; choose one of: {', '.join(known)}")


class NotRunningError(SandboxError):
    """An action needs the sandbox (or one service) to be up, and it is not."""
