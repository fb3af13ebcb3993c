#!/usr/bin/env bash
# scripts/timed.sh NAME GOAL_SECONDS CMD...: run CMD, then print its wall time against its goal
# (a line a reader cannot miss when the lane outgrew it); exits with CMD's status.
name=$1 goal=$2
shift 2
started=$SECONDS
"$@"
status=$?
took=$((SECONDS - started))
if ((took > goal)); then
  echo "$name: !!!!! ${took}s, past its goal of ${goal}s: find what grew (pytest --durations=20) !!!!!"
else
  echo "$name: ${took}s, within its goal of ${goal}s"
fi
exit "$status"
