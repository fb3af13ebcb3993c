"""Where alerts go: pluggable channels behind one small protocol.

A channel's :meth:`Channel.send` either delivers the alert or raises
:class:`ChannelError` saying what went wrong and what to check; the supervisor reports
that and carries on, so a dead webhook never takes the watchdog down with it.

Specs on the command line: ``stderr``, ``jsonl:PATH``, ``webhook:URL``.
"""

from __future__ import annotations

import json
import socket
import sys
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import IO, Protocol, runtime_checkable

from job.engine.errors import JobError, UsageError
from job.ops.watch.rules import Alert

__all__ = ["Channel", "ChannelError", "JsonLinesChannel", "StderrChannel", "WebhookChannel", "parse_channel"]


class ChannelError(JobError):
    """A channel could not deliver an alert (the watchdog reports it and goes on)."""

    def __init__(self, channel: str, problem: str, fix: str) -> None:
        self.channel, self.problem, self.fix = channel, problem, fix
        super().__init__(f"alert channel {channel}: {problem}; {fix}")


@runtime_checkable
class Channel(Protocol):
    """Delivers one alert, or raises :class:`ChannelError`. ``name`` identifies it in reports."""

    name: str

    def send(self, alert: Alert) -> None: ...


class StderrChannel:
    """One line per alert on a text stream (stderr unless given)."""

    name = "stderr"

    def __init__(self, stream: IO[str] | None = None) -> None:
        self._stream = stream

    def send(self, alert: Alert) -> None:
        stream = self._stream or sys.stderr
        try:
            print(alert.line(), file=stream, flush=True)
        except (OSError, ValueError) as exc:  # a closed pipe or stream
            raise ChannelError(self.name, f"cannot write ({exc})", "check where stderr goes") from exc


class JsonLinesChannel:
    """Appends one JSON object per alert (see :meth:`Alert.to_dict`) to a file."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.name = f"jsonl:{self.path}"
        self._lock = threading.Lock()

    def send(self, alert: Alert) -> None:
        line = json.dumps(alert.to_dict(), default=str, sort_keys=True)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._lock, self.path.open("a", encoding="utf-8") as fh:
                fh.write(line + "\n")
        except OSError as exc:
            raise ChannelError(self.name, f"cannot append ({exc.strerror or exc})", "check the path and its permissions") from exc


class WebhookChannel:
    """HTTP POST of the alert as JSON (``Content-Type: application/json``) to a URL.

    Any 2xx answer is a delivery; anything else, a refused connection or no answer within
    ``timeout_s`` raises :class:`ChannelError`.
    """

    def __init__(self, url: str, *, timeout_s: float = 5.0, headers: dict[str, str] | None = None) -> None:
        if not url.startswith(("http://", "https://")):
            raise UsageError(f"webhook URL {url!r}", "use an http:// or https:// URL")
        self.url, self.timeout_s = url, timeout_s
        self.headers = {"Content-Type": "application/json", "User-Agent": "ordered-stream-lab-watch", **(headers or {})}
        self.name = f"webhook:{url}"

    def send(self, alert: Alert) -> None:
        body = json.dumps(alert.to_dict(), default=str).encode()
        request = urllib.request.Request(self.url, data=body, headers=self.headers, method="POST")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s) as response:
                response.read()
        except urllib.error.HTTPError as exc:
            raise ChannelError(self.name, f"HTTP {exc.code} {exc.reason}", "check the receiving endpoint's log") from exc
        except (TimeoutError, socket.timeout) as exc:
            raise ChannelError(
                self.name, f"no answer within {self.timeout_s:g} s", "check that the endpoint is up, or raise the timeout"
            ) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise ChannelError(
                    self.name, f"no answer within {self.timeout_s:g} s", "check that the endpoint is up, or raise the timeout"
                ) from exc
            raise ChannelError(
                self.name, f"cannot connect ({exc.reason})", "check the URL and that the endpoint listens"
            ) from exc
        except OSError as exc:
            raise ChannelError(self.name, f"connection failed ({exc})", "check the URL and that the endpoint listens") from exc


def parse_channel(spec: str, *, webhook_timeout_s: float = 5.0) -> Channel:
    """A channel from a command-line spec: ``stderr``, ``jsonl:PATH`` or ``webhook:URL``."""
    kind, _, rest = spec.partition(":")
    if kind == "stderr" and not rest:
        return StderrChannel()
    if kind == "jsonl" and rest:
        return JsonLinesChannel(rest)
    if kind == "webhook" and rest:
        return WebhookChannel(rest, timeout_s=webhook_timeout_s)
    raise UsageError(
        f"alert channel {spec!r}", "use stderr, jsonl:PATH or webhook:URL (e.g. webhook:http://127.0.0.1:8000/alerts)"
    )
