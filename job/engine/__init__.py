"""The engine: the session state machine, its integrity policies, its errors.

Pure Python: no Spark, no Kafka client, no I/O. The Spark job, the plain-consumer baseline
and the verifier all run this one core, so it is unit- and property-tested in milliseconds.

- :mod:`job.engine.session` — records in offset order in, row changes, quarantine and
  status out, under ``strict`` / ``resync`` / ``window`` / ``none``.
- :mod:`job.engine.errors` — the job's one error root and its named subclasses.
- :mod:`job.engine.interrupts` — Ctrl-C without a screen of Py4J tracebacks.

May import: ``producers.contract`` (the wire format) and the standard library. Nothing in
``job`` above it.
"""
