"""The streaming job on Spark: the Kafka source, the stateful operator around the engine,
the file sink's layout, the checkpoint and the query progress.

- :mod:`job.spark.config` — :class:`~job.spark.config.JobConfig`, checked before Spark starts.
- :mod:`job.spark.pipeline` — start, drain and stop the query.
- :mod:`job.spark.lake` — the lake's layout and its readers (through the sink's log).
- :mod:`job.spark.checkpoints` — what a checkpoint holds: offsets, commits, state, sink log.
- :mod:`job.spark.query_progress` — the one reader of a query progress's Kafka offsets.
- :mod:`job.spark.errors` — a dead query's Spark/Py4J exception text as the engine's errors.
- :mod:`job.spark.interrupts` — Ctrl-C while the driver waits on Spark, without a screen of
  Py4J tracebacks.

May import: :mod:`job.engine`, ``producers`` (contract, kafka) and ``sandbox.progress``
(``JOB_OUTSIDE`` in ``tests/test_layering.py`` says why). Never the verifier, the operator's
tools, the drills or the baseline.
"""
