"""Where the tests' sandbox lives unless the environment says otherwise: one home for the root
``conftest.py``, which applies it before anything is collected (notebook kernels inherit it), and
for `make test`'s runner (``scripts/test_side_by_side.py``), which keeps that sandbox up from one
part to the next and stops it at the end."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: The test sandbox: ``.sandbox-test``, every port moved by 10000, local processes.
TEST_SANDBOX = {"OSL_STATE_DIR": str(ROOT / ".sandbox-test"), "OSL_PORT_OFFSET": "10000", "OSL_BACKEND": "local"}

#: Set to 1 by the runner: a pytest leaves its sandbox up at the end, the runner stops it once.
KEEP_SANDBOX = "OSL_TEST_KEEP_SANDBOX"
