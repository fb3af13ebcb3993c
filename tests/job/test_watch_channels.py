"""Alert channels against real endpoints (a file, a stream, an HTTP server on 127.0.0.1),
and the supervisor's threads around the pure rules (no Spark)."""

from __future__ import annotations

import contextlib
import http.server
import io
import json
import subprocess
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from job.engine.errors import UsageError
from job.ops.watch import (
    AlertKind,
    ChannelError,
    JsonLinesChannel,
    StderrChannel,
    Thresholds,
    Watchdog,
    WebhookChannel,
    parse_channel,
)
from job.ops.watch.events import EventLog, batch_from_progress, event_from_dict, event_to_dict
from job.ops.watch.rules import Alert, BatchCompleted, LagSample, QueryStarted, QueryTerminated
from sandbox.checks.health import wait_for

ALERT = Alert(kind=AlertKind.LAG, query="q", at=1_700_000_000.0, figures={"lag_records": 1234}, message="1234 records behind")


@contextlib.contextmanager
def http_endpoint(*, status=200, delay_s=0.0):
    """A real HTTP server on 127.0.0.1 in a thread; yields (url, list of received JSON bodies)."""
    received: list[dict] = []
    release = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 -- http.server's naming
            body = self.rfile.read(int(self.headers["Content-Length"]))
            if delay_s:
                release.wait(delay_s)
            received.append({"content_type": self.headers["Content-Type"], **json.loads(body)})
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/alerts", received
    finally:
        release.set()
        server.shutdown()
        server.server_close()


def test_webhook_posts_the_alert_as_json():
    with http_endpoint() as (url, received):
        WebhookChannel(url).send(ALERT)
    assert received == [{"content_type": "application/json", **json.loads(json.dumps(ALERT.to_dict()))}]


def test_webhook_error_status_is_a_channel_error_naming_the_status():
    with http_endpoint(status=503) as (url, _), pytest.raises(ChannelError, match="HTTP 503"):
        WebhookChannel(url).send(ALERT)


def test_webhook_that_does_not_answer_in_time_is_a_timeout_error():
    with http_endpoint(delay_s=5) as (url, _), pytest.raises(ChannelError, match="no answer within 0.3 s"):
        WebhookChannel(url, timeout_s=0.3).send(ALERT)


def test_webhook_refused_connection_is_a_channel_error():
    with http_endpoint() as (url, _):
        pass  # the server is gone: the port refuses
    with pytest.raises(ChannelError, match="cannot connect"):
        WebhookChannel(url, timeout_s=2).send(ALERT)


def test_jsonl_and_stderr_channels_write_one_record_per_alert(tmp_path):
    path = tmp_path / "alerts" / "a.jsonl"
    JsonLinesChannel(path).send(ALERT)
    JsonLinesChannel(path).send(ALERT)
    assert [json.loads(line)["figures"] for line in path.read_text().splitlines()] == [{"lag_records": 1234}] * 2
    stream = io.StringIO()
    StderrChannel(stream).send(ALERT)
    assert stream.getvalue() == "2023-11-14T22:13:20Z ALERT lag q: 1234 records behind\n"


def test_channel_specs_parse_or_say_which_forms_exist(tmp_path):
    assert isinstance(parse_channel("stderr"), StderrChannel)
    assert parse_channel(f"jsonl:{tmp_path}/a.jsonl").path == tmp_path / "a.jsonl"
    assert parse_channel("webhook:http://127.0.0.1:9/x").url == "http://127.0.0.1:9/x"
    with pytest.raises(UsageError, match="use stderr, jsonl:PATH or webhook:URL"):
        parse_channel("email:ops@example.org")


def test_progress_json_becomes_a_batch_with_merged_kafka_end_offsets():
    progress = {
        "name": "q",
        "batchId": 7,
        "numInputRows": 42,
        "sources": [{"endOffset": '{"t1":{"0":10,"1":4}}'}, {"endOffset": {"t2": {"0": 3}}}, {"endOffset": "not json"}],
    }
    event = batch_from_progress(progress, at=5.0)
    assert event == BatchCompleted(
        query="q", at=5.0, batch_id=7, input_rows=42, end_offsets={"t1": {"0": 10, "1": 4}, "t2": {"0": 3}}
    )


class _ProgressOnly:
    """A Java progress event that offers its JSON and nothing else: any other field read fails."""

    def __init__(self, text: str) -> None:
        self._text = text

    def progress(self):
        outer = self

        class _Progress:
            def json(self) -> str:
                return outer._text

            def __getattr__(self, name):
                raise AssertionError(f"the listener read the progress field {name!r}, not only its JSON")

        return _Progress()


def test_the_listener_registers_its_own_bridge_which_reads_only_the_progress_json():
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from job.ops.watch.events import EventListener, _JsonBridge

    got: list = []
    listener = EventListener.create(got.append, clock=lambda: 9.0)
    # PySpark's own bridge converts every field of every event (docs/performance.md, "The listener's progress events")
    assert type(listener)._jlistener is not StreamingQueryListener._jlistener
    progress = {"name": "q", "batchId": 3, "numInputRows": 5, "sources": [{"endOffset": '{"t":{"0":8}}'}]}
    _JsonBridge(listener).onQueryProgress(_ProgressOnly(json.dumps(progress)))
    assert got == [BatchCompleted(query="q", at=9.0, batch_id=3, input_rows=5, end_offsets={"t": {"0": 8}})]


def test_an_unreadable_progress_event_is_printed_and_never_raised_into_spark(capsys):
    from job.ops.watch.events import EventListener, _JsonBridge

    class _Gone:
        def progress(self):
            raise RuntimeError("py4j: the gateway is closed")

    got: list = []
    listener = EventListener.create(got.append)
    _JsonBridge(listener).onQueryProgress(_Gone())
    listener.onQueryProgress(SimpleNamespace(progress=SimpleNamespace(json="{not json")))
    assert got == []
    assert capsys.readouterr().err.count("[watch] cannot read a progress event") == 2


def test_event_log_round_trips_and_returns_only_whole_lines(tmp_path):
    log = EventLog(tmp_path / "events.jsonl")
    events = [
        QueryStarted(query="q", at=1, run_id="r", pid=42),
        BatchCompleted(query="q", at=2, batch_id=0, input_rows=1, end_offsets={"t": {"0": 5}}),
        LagSample(query="q", at=3, failure="down"),
        QueryTerminated(query="q", at=4, error="x"),
    ]
    for event in events:
        log.append(event)
    with log.path.open("a") as fh:
        fh.write('{"type": "QueryTerminated", "query"')  # a line still being written
    read, position = log.read_from(0)
    assert read == events and [event_from_dict(event_to_dict(e)) for e in events] == events
    assert log.read_from(position) == ([], position)


class _Broken:
    name = "broken"

    def send(self, alert):
        raise RuntimeError("bug in a channel")


def test_watchdog_delivers_to_every_channel_and_reports_failures_without_stopping(tmp_path):
    reports: list[str] = []
    with http_endpoint(status=500) as (bad_url, _), http_endpoint() as (url, received):
        dog = Watchdog(
            channels=[
                _Broken(),
                WebhookChannel(bad_url, timeout_s=2),
                WebhookChannel(url),
                JsonLinesChannel(tmp_path / "a.jsonl"),
            ],
            report=reports.append,
            tick_s=0.05,
        )
        with dog:
            dog.feed(QueryStarted(query="q", at=time.time()))
            dog.feed(QueryTerminated(query="q", at=time.time(), error="boom"))
            alert = dog.wait_for("error", query="q", timeout_s=5)
    assert alert.message == "query terminated: boom"
    assert [r["kind"] for r in received] == ["error"]
    assert json.loads((tmp_path / "a.jsonl").read_text())["kind"] == "error"
    assert [f.channel for f in dog.failures] == ["broken", f"webhook:{bad_url}"]
    assert any("HTTP 500" in line for line in reports)


def test_watchdog_samples_lag_and_ticks_into_a_stall_then_a_failing_sampler_keeps_it_alive():
    highs = {"t": {"0": 500}}

    def sampler():
        if highs is None:
            raise ConnectionError("Kafka unreachable")
        return highs

    dog = Watchdog(
        thresholds=Thresholds(stall_after_s=0.5, lag_records=100),
        high_watermarks=sampler,
        tick_s=0.05,
        lag_every_s=0.05,
        report=lambda _l: None,
    )
    with dog:
        dog.feed(QueryStarted(query="q", at=time.time()))
        dog.feed(BatchCompleted(query="q", at=time.time(), batch_id=0, input_rows=1, end_offsets={"t": {"0": 100}}))
        lag = dog.wait_for("lag", timeout_s=5)
        stall = dog.wait_for("stall", timeout_s=5)
        highs = None
        dog.feed(BatchCompleted(query="q", at=time.time(), batch_id=1, input_rows=400, end_offsets={"t": {"0": 500}}))
        recovered = dog.wait_for("recovered", timeout_s=5)
        # the sampler keeps failing from now on; it survives, and the rule hears about it
        blind = dog.wait_for("stall", after=len(dog.alerts), timeout_s=5)
    assert lag.figures["lag_records"] == 400 and stall.figures["lag_records"] == 400
    assert recovered.figures["cleared"] == "stall"
    assert blind.figures["kafka_failure"] == "Kafka unreachable" and blind.figures["lag_records"] == "unknown"


def test_a_killed_drivers_last_batch_is_applied_before_its_death_so_only_the_restart_recovers(tmp_path):
    """Chapter 04 once paged 'recovered' before the driver kill and nothing after it: the event
    log's last batch, written just before the SIGKILL, was read after the death was declared
    and counted as the restarted query's recovery. Two real processes stand in for the
    drivers; the log is read the way ``follow_log`` reads it, on the watchdog's tick."""
    log, alerts = EventLog(tmp_path / "events.jsonl"), tmp_path / "alerts.jsonl"
    position = 0

    def new_lines():
        nonlocal position
        events, position = log.read_from(position)
        return events

    first, second = drivers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(2)]
    dog = Watchdog(watch_pids=True, source=new_lines, channels=[JsonLinesChannel(alerts)], tick_s=0.05)
    try:
        with dog:
            log.append(QueryStarted(query="q", at=time.time(), pid=first.pid))
            log.append(BatchCompleted(query="q", at=time.time(), batch_id=0, input_rows=5))
            wait_for(
                lambda: "q" in dog.state.queries and dog.state.queries["q"].last_batch_id == 0,
                timeout_s=10,
                what="the watchdog reading the first run's first batch",
            )
            log.append(BatchCompleted(query="q", at=time.time(), batch_id=1, input_rows=5))  # its last words...
            first.kill()  # ...then SIGKILL, before the watchdog's next read
            first.wait()
            dog.wait_for("error", timeout_s=10)
            log.append(QueryStarted(query="q", at=time.time(), pid=second.pid))
            log.append(BatchCompleted(query="q", at=time.time(), batch_id=2, input_rows=5))
            dog.wait_for("recovered", timeout_s=10)
    finally:
        for driver in drivers:
            driver.kill()
            driver.wait()
    raised = [json.loads(line) for line in alerts.read_text().splitlines()]
    assert [a["kind"] for a in raised] == ["error", "recovered"], raised
    assert f"driver process {first.pid} is gone" in raised[0]["message"]
    assert raised[1]["figures"] == {"cleared": "error", "batch_id": 2}, (
        "the restarted run's first batch recovers, not the dead one's last"
    )
    assert raised[0]["at"] <= raised[1]["at"], "the page must read in the order things happened"
