"""What the workbook does to the sandbox to teach: each drill breaks something for real and
measures what the job did about it.

- :mod:`job.drills.environment` — kill or pause a worker, the driver, the broker, MinIO, the master.
- :mod:`job.drills.backlog` — downtime, then a catch-up, and the arithmetic that forecasts it.
- :mod:`job.drills.kafka_loss` — Kafka deletes records the stopped job has not read (retention, delete_records).
- :mod:`job.drills.delivery` — a driver killed mid-batch; a non-idempotent sink replays.
- :mod:`job.drills.trap` — the checkpoint and ``_spark_metadata`` disagree, reproduced.
- :mod:`job.drills.integrity` — every data fault under every policy, verified.
- :mod:`job.drills.recovery` — the recovery detector of the recurrent-failure benchmark.

May import: everything in ``job`` below it (ops, verify, spark, engine), ``producers`` and
``sandbox``. Only the command line sits above.
"""
