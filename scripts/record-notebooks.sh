#!/usr/bin/env bash
# Re-execute the workbook against the test sandbox and store the outputs nbval compares with.
# Run it after changing a chapter; review the diff before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
# The test sandbox by default; OSL_STATE_DIR / OSL_PORT_OFFSET pick another (e.g. while a test
# run holds the test sandbox's ports).
export OSL_STATE_DIR="${OSL_STATE_DIR:-$PWD/.sandbox-test}" OSL_PORT_OFFSET="${OSL_PORT_OFFSET:-10000}"
export OSL_BACKEND=local IPYTHONDIR="$PWD/tests/ipython"
[ $# -gt 0 ] || set -- notebooks/*.ipynb
for nb in "$@"; do
  echo "recording $nb"
  (cd "$(dirname "$nb")" && ../.venv/bin/jupyter nbconvert --to notebook --execute --inplace \
     --ExecutePreprocessor.timeout=900 "$(basename "$nb")")
done
