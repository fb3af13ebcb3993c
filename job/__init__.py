"""The ordered, stateful session job: Kafka -> per-session state machine -> Parquet on S3.

- :mod:`job.session` — the pure state machine and integrity policies (no Spark).
- :mod:`job.pipeline` — the Spark Structured Streaming job around it.
- :mod:`job.verify` / :mod:`job.verify_spark` — the verifier (ledger vs lake).
- :mod:`job.baseline` — a single-process consumer running the same state machine.
- :mod:`job.repair` / :mod:`job.trap` — the six-step repair of a checkpoint and output that
  disagree (``python -m job repair``), and the metadata trap that causes it, reproduced.
- :mod:`job.backfill` — replay the raw archive into versioned output; merge, switch, reprocess.
- :mod:`job.archive_check` — every delivered record must be in the raw archive.
- ``python -m job run|verify|watch|repair|backfill`` — the command line.
"""

from job.config import ConfigError, JobConfig, Policy
from job.errors import IntegrityError, JobError

__all__ = ["ConfigError", "IntegrityError", "JobConfig", "JobError", "Policy"]
