#!/usr/bin/env bash
# Re-execute the workbook against the test sandbox and store the outputs nbval compares with.
# All chapters in one run (the default, and what tests/test_notebook_records.py requires: one
# run id across the chapters), each stamped with its run, time and code fingerprint
# (scripts/notebook_stamp.py). Prints each chapter's time and the total. Review the diff
# before committing; never edit stored outputs by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
# The test sandbox by default; OSL_STATE_DIR / OSL_PORT_OFFSET pick another (e.g. while a test
# run holds the test sandbox's ports).
export OSL_STATE_DIR="${OSL_STATE_DIR:-$PWD/.sandbox-test}" OSL_PORT_OFFSET="${OSL_PORT_OFFSET:-10000}"
export OSL_BACKEND=local IPYTHONDIR="$PWD/tests/ipython"
if [ $# -eq 0 ]; then
  set -- notebooks/*.ipynb
  # The whole book from an empty sandbox, as CI and a learner's first run have it: a sandbox
  # that tests and chapters reran for a while holds thousands of topics, and reloading them
  # made chapter 04's broker restart 28 s slower (`python -m sandbox prune` for a learner's).
  echo "recording the whole workbook: resetting the sandbox at $OSL_STATE_DIR first"
  .venv/bin/python -m sandbox reset --yes
fi
run_id="rec-$(date -u +%Y%m%dT%H%M%SZ)-$(head -c4 /dev/urandom | od -An -tx1 | tr -d ' \n')"
started=$SECONDS
times=()
for nb in "$@"; do
  echo "recording $nb (run $run_id)"
  t0=$SECONDS
  (cd "$(dirname "$nb")" && ../.venv/bin/jupyter nbconvert --to notebook --execute --inplace \
     --ExecutePreprocessor.timeout=900 "$(basename "$nb")")
  .venv/bin/python scripts/notebook_stamp.py "$nb" "$run_id" "$((SECONDS - t0))"
  times+=("$(printf '%5ds  %s' "$((SECONDS - t0))" "$(basename "$nb")")")
  echo "recorded $nb in $((SECONDS - t0))s"
done
echo "---- per chapter (run $run_id)"
printf '%s\n' "${times[@]}"
echo "total: $((SECONDS - started))s for $# chapters"
