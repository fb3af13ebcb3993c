"""The operator's tools, run against a live or stopped job.

- :mod:`job.ops.repair` — the six-step repair of a checkpoint and an output that disagree.
- :mod:`job.ops.backfill` — replay the raw archive into versioned output.
- :mod:`job.ops.dataloss` — what Kafka deleted before the job read it, which partitions rewound, how long retention must be.
- :mod:`job.ops.verifier` — the verifier on the sandbox: its own local Spark, S3 keys, preflight.
- :mod:`job.ops.watch` — the watchdog: failed, stalled or lagging queries, told to a human.

May import: :mod:`job.verify`, :mod:`job.spark`, :mod:`job.engine`, the modules of
``producers`` and ``sandbox`` that ``JOB_OUTSIDE`` in ``tests/test_layering.py`` lists. Never
the drills or the command line.
"""
