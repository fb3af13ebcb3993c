"""A shim for one PySpark 4.0.0 bug, applied in the Python workers that import this module.

``applyInPandasWithState`` hands each Python worker a state-info struct column next to the
data. The column has a null entry for every data row past the groups' count, and pyarrow
converts a struct with nulls to dicts whose integer fields are floats. PySpark then calls
``RecordBatch.slice(startOffset, numRows)`` with those floats; pyarrow 16+ (built with
Cython 3) refuses them: ``TypeError: 'float' object cannot be interpreted as an integer``.
So every applyInPandasWithState query fails on its first non-empty batch with PySpark 4.0.0
and the pyarrow this project needs. The shim turns the two fields back into ints.

:mod:`job.pipeline` references :func:`installed` from the function it gives
``applyInPandasWithState``, so unpickling that function in a worker imports this module
and patches the serializer before it reads any batch. ``tests/job/test_pipeline_frames.py``
checks that the bug is still there; when it is gone, delete this module.
"""

from __future__ import annotations

_FIELDS = ("startOffset", "numRows")


def _patch() -> bool:
    from pyspark.sql.pandas.serializers import ApplyInPandasWithStateSerializer

    original = ApplyInPandasWithStateSerializer.arrow_to_pandas
    if getattr(original, "_osl_shim", False):
        return True

    def arrow_to_pandas(self, arrow_column, *args, **kwargs):
        series = original(self, arrow_column, *args, **kwargs)
        kind = arrow_column.type
        if hasattr(kind, "get_field_index") and all(kind.get_field_index(f) >= 0 for f in _FIELDS):
            series = series.map(lambda info: info if info is None else _as_ints(info))
        return series

    arrow_to_pandas._osl_shim = True  # type: ignore[attr-defined]
    arrow_to_pandas._osl_original = original  # type: ignore[attr-defined]
    ApplyInPandasWithStateSerializer.arrow_to_pandas = arrow_to_pandas
    return True


def _as_ints(info):
    out = dict(info)
    for name in _FIELDS:
        if out.get(name) is not None:
            out[name] = int(out[name])
    return out


_INSTALLED = _patch()


def installed() -> bool:
    """True once the shim is in place (importing this module installs it)."""
    return _INSTALLED
