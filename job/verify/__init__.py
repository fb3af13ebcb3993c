"""The verifier: the ledger says what the lake must hold; this checks that it does.

- :mod:`job.verify.compare` — :func:`~job.verify.compare.check`, pure pandas: lost,
  duplicated, quarantined and unexplained records, each blamed on a declared fault or not.
- :mod:`job.verify.lake_check` — read a lake through Spark and the ledger, then check.
- :mod:`job.verify.archive_check` — every delivered record must be in the raw archive.

May import: :mod:`job.engine`, the readers of :mod:`job.spark` (``lake``), ``producers``
(contract, expected_output, faults, ledger); never the sandbox: a caller hands it a Spark session
and an S3 target (:mod:`job.ops.verifier` opens them on the sandbox).
"""
