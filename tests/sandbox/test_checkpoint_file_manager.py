"""The project's checkpoint file manager (sandbox/jvm/java/osl/FastCheckpointFileManager.java),
driven through the driver's JVM on the real cluster session: Spark must pick it for both the
local checkpoint and the sink log on MinIO, and it must keep the contract Spark relies on —
a file appears whole or not at all, never replaces one it may not, and a cancelled write
leaves nothing behind."""

from __future__ import annotations

import uuid

import pytest
from py4j.protocol import Py4JJavaError

pytestmark = pytest.mark.integration

_MANAGER = "osl.FastCheckpointFileManager"


def _manager(spark, root: str):
    """What Spark's own factory makes for ``root`` under the session's settings."""
    jvm = spark._jvm
    conf = spark._jsparkSession.sessionState().newHadoopConf()
    factory = jvm.org.apache.spark.sql.execution.streaming.checkpointing.CheckpointFileManager
    return factory.create(jvm.org.apache.hadoop.fs.Path(root), conf), jvm.org.apache.hadoop.fs.Path


def _write(manager, path, data: bytes, *, overwrite: bool, cancel: bool = False) -> None:
    out = manager.createAtomic(path, overwrite)
    out.write(bytearray(data))
    out.cancel() if cancel else out.close()


def _read(manager, path) -> bytes:
    stream = manager.open(path)
    try:
        return bytes(stream.readAllBytes())
    finally:
        stream.close()


def _names(manager, path_class, root: str) -> list[str]:
    return sorted(str(status.getPath().getName()) for status in manager.list(path_class(root)))


def _already_exists(error: Py4JJavaError) -> bool:
    return "FileAlreadyExistsException" in str(error.java_exception.getClass().getName())


@pytest.mark.parametrize("where", ["local", "s3a"])
def test_a_checkpoint_file_appears_whole_once_and_is_never_replaced_unasked(spark, sandbox_settings, tmp_path, where):
    root = str(tmp_path) if where == "local" else f"s3a://{sandbox_settings.bucket}/itest/cfm-{uuid.uuid4().hex[:8]}"
    manager, Path = _manager(spark, root)
    assert manager.getClass().getName() == _MANAGER, "spark.sql.streaming.checkpointFileManagerClass is not in effect"
    assert manager.scheme() == ("file" if where == "local" else "s3a")
    manager.mkdirs(Path(root))
    first = Path(root + "/0")

    _write(manager, first, b"v1", overwrite=False)
    assert _read(manager, first) == b"v1"

    with pytest.raises(Py4JJavaError) as refused:  # the offset and commit logs' contract
        _write(manager, first, b"v2", overwrite=False)
    assert _already_exists(refused.value), refused.value.java_exception
    assert _read(manager, first) == b"v1"

    _write(manager, first, b"v3", overwrite=True)  # a state changelog may be rewritten
    assert _read(manager, first) == b"v3"

    cancelled = Path(root + "/1")
    _write(manager, cancelled, b"never", overwrite=False, cancel=True)
    assert not manager.exists(cancelled)
    assert _names(manager, Path, root) == ["0"], "a temporary file or object was left behind"


def test_an_s3a_entry_is_invisible_until_its_stream_closes(spark, sandbox_settings):
    root = f"s3a://{sandbox_settings.bucket}/itest/cfm-{uuid.uuid4().hex[:8]}"
    manager, Path = _manager(spark, root)
    entry = Path(root + "/7")
    out = manager.createAtomic(entry, False)
    out.write(bytearray(b"batch 7"))
    out.flush()
    assert not manager.exists(entry), "a reader of the sink log could see a half-written entry"
    out.close()
    assert _read(manager, entry) == b"batch 7"
    assert _names(manager, Path, root) == ["7"]
