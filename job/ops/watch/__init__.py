"""The watchdog: notices when a streaming query fails, stalls or falls behind, and tells a human.

- :mod:`job.ops.watch.rules` — the pure decisions (events in, :class:`Alert` out), no Spark.
- :mod:`job.ops.watch.channels` — where alerts go: stderr, a JSON-lines file, a webhook.
- :mod:`job.ops.watch.events` — the ``StreamingQueryListener`` and the job's event log.
- :mod:`job.ops.watch.supervisor` — :class:`Watchdog`, :func:`watch_spark` (in the job or a
  notebook, as a context manager) and :func:`follow_log` (``python -m job watch``).
"""

from job.ops.watch.channels import Channel, ChannelError, JsonLinesChannel, StderrChannel, WebhookChannel, parse_channel
from job.ops.watch.rules import Alert, AlertKind, Thresholds, decide
from job.ops.watch.supervisor import Watchdog, follow_log, kafka_high_watermarks, watch_spark

__all__ = [
    "Alert",
    "AlertKind",
    "Channel",
    "ChannelError",
    "JsonLinesChannel",
    "StderrChannel",
    "Thresholds",
    "Watchdog",
    "WebhookChannel",
    "decide",
    "follow_log",
    "kafka_high_watermarks",
    "parse_channel",
    "watch_spark",
]
