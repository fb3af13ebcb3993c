#!/usr/bin/env bash
# Re-execute the workbook against the test sandbox and store the outputs nbval compares with.
# Run it after changing a chapter; review the diff before committing.
set -euo pipefail
cd "$(dirname "$0")/.."
export OSL_STATE_DIR="$PWD/.sandbox-test" OSL_PORT_OFFSET=10000 OSL_BACKEND=local IPYTHONDIR="$PWD/tests/ipython"
[ $# -gt 0 ] || set -- notebooks/*.ipynb
for nb in "$@"; do
  echo "recording $nb"
  (cd "$(dirname "$nb")" && ../.venv/bin/jupyter nbconvert --to notebook --execute --inplace \
     --ExecutePreprocessor.timeout=900 "$(basename "$nb")")
done
