"""The ordered, stateful session job: Kafka -> per-session state machine -> Parquet on S3.

Five wings; imports only run down (``tests/test_layering.py`` keeps it so)::

    cli -> drills -> ops -> verify -> spark -> engine        (baseline: engine + verify)

- :mod:`job.engine` — the pure state machine, its policies and errors (no Spark, no Kafka).
- :mod:`job.spark` — the Spark Structured Streaming job around it: config, pipeline, lake
  layout, checkpoints, query progress.
- :mod:`job.verify` — the verifier (ledger vs lake) and its Spark and archive readers.
- :mod:`job.ops` — the operator's tools: repair, backfill, data-loss listing, the watchdog.
- :mod:`job.drills` — what the workbook does to the sandbox: faults, backlog, delivery,
  the metadata trap, the integrity matrix, the recovery detector.
- :mod:`job.baseline` — a single-process consumer running the same engine.
- ``python -m job run|verify|watch|repair|backfill`` (:mod:`job.cli`) — the command line.
"""

from job.engine.errors import ConfigError, IntegrityError, JobError
from job.engine.session import Policy
from job.spark.config import JobConfig

__all__ = ["ConfigError", "IntegrityError", "JobConfig", "JobError", "Policy"]
