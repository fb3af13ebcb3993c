"""The operator's output frames convert to Arrow the way PySpark converts them (no Spark needed)."""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql.pandas.serializers import ArrowStreamPandasUDFSerializer
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType

from job import lake
from job.config import ConfigError, JobConfig
from job.pipeline import _union_frame

_TYPES = {"string": StringType(), "bigint": LongType(), "int": IntegerType(), "binary": BinaryType()}


def test_union_frame_with_columns_no_row_filled_converts_to_plain_arrow_arrays():
    frame = _union_frame(
        [
            {"output": "rows", "session": "s", "epoch": 0, "seq": 2, "partition": 1, "offset": 5, "data": "{}"},
            {"output": "sessions", "session": "s", "rows": 3, "status": None},
        ]
    )
    serializer = ArrowStreamPandasUDFSerializer("UTC", True, True, False)
    for name, kind in lake.UNION_COLUMNS:
        array = serializer._create_array(frame[name], to_arrow_type(_TYPES[kind]), arrow_cast=True)
        assert isinstance(array, pa.Array), f"{name} became {type(array).__name__}"
    assert frame["offset"].tolist()[0] == 5 and frame["reason"].tolist() == [None, None]


@pytest.mark.parametrize(
    ("field", "value", "fix"),
    [
        ("policy", "lenient", "strict, resync, window, none"),
        ("checkpoint", "s3a://lake/ckpt", "atomic rename"),
        ("trigger", "soon", "5 seconds"),
        ("topic_prefix", "bad prefix!", "Kafka topic prefix"),
        ("window", 0, "between 1 and 10000"),
    ],
)
def test_bad_job_config_names_field_value_and_fix_before_spark_starts(field, value, fix, tmp_path):
    kwargs = {"output": "s3a://lake/job", "checkpoint": tmp_path, field: value}
    with pytest.raises(ConfigError) as info:
        JobConfig(**kwargs)
    assert field in str(info.value) and repr(value) in str(info.value) and fix in str(info.value)
