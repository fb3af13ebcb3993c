"""The engine: the session state machine, its integrity policies, its errors.

Pure Python: no Spark, no Kafka client, no I/O. The Spark job, the plain-consumer baseline
and the verifier all run this one core, so it is unit- and property-tested in milliseconds.

- :mod:`job.engine.session` — records in offset order in, row changes, quarantine and
  status out, under ``strict`` / ``resync`` / ``window`` / ``none``.
- :mod:`job.engine.errors` — the job's one error root and its named subclasses (reading
  them back out of Spark's exception text is :mod:`job.spark.errors`).

May import: ``producers.contract`` and ``producers.errors`` (the wire format and its
rejection reasons), ``msgspec`` and the standard library. Nothing in ``job`` above it;
``tests/test_layering.py`` keeps it so.
"""
