"""The order the tests run in (the root conftest's collection hook)."""

from __future__ import annotations


def units_first(items):
    """The tests that need no service first, the rest in their order (notebooks last, as
    testpaths has them): on an empty machine they run while MinIO's build, which bootstrap
    leaves running, ends before the first sandbox starts
    (docs/decisions/0032-bootstrap-leaves-the-minio-build-running.md)."""
    return sorted(items, key=lambda item: item.get_closest_marker("integration") is not None)
