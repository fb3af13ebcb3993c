#!/usr/bin/env bash
# Create the project's virtualenv and fill the artifact cache. Safe to run again: pip and
# the artifact cache both skip what is already there.
set -euo pipefail
PYTHON=${PYTHON:-python3}
VENV=${VENV:-.venv}

die() { echo "bootstrap: $*" >&2; exit 1; }

command -v "$PYTHON" >/dev/null || die "$PYTHON not found: install Python 3.11+ (Debian/Ubuntu: apt-get install python3 python3-venv) or run make PYTHON=/path/to/python3.11"
"$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' \
  || die "Python 3.11+ is required, $PYTHON is $("$PYTHON" -V 2>&1): run make PYTHON=/path/to/python3.11"

java_major() { "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -1; }
JAVA=${JAVA_HOME:+$JAVA_HOME/bin/}java
if ! command -v "$JAVA" >/dev/null || [ "$(java_major "$JAVA")" -lt 17 ]; then
  die "Java 17+ is required for Kafka and Spark (found: $(command -v "$JAVA" >/dev/null && java_major "$JAVA" || echo none)): apt-get install openjdk-17-jre-headless, or set JAVA_HOME to a JDK 17+"
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "bootstrap: creating $VENV with $("$PYTHON" -V)"
  "$PYTHON" -m venv "$VENV" || die "could not create a virtualenv: apt-get install python3-venv"
fi
# The browser tests (the book, JupyterLab) drive Debian's chromium; Playwright's own browser
# download cannot be fetched everywhere. Installed as root on Debian, else said and left to the user.
# It installs in the background, beside pip and the artifact fetch (all three mostly wait on
# downloads); apt calls queue on one lock file with scripts/ensure-docker.sh's, which .ci/run
# runs at the same time.
chromium_pid=
if ! command -v chromium >/dev/null && ! command -v chromium-browser >/dev/null && [ -z "${OSL_CHROMIUM:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    log="$VENV/apt-chromium.log"
    echo "bootstrap: installing Debian's chromium for the browser tests, in the background (apt log: $log)"
    flock -w 900 "${OSL_APT_LOCK:-/tmp/osl-apt.lock}" \
      bash -c 'apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium' >"$log" 2>&1 &
    chromium_pid=$!
  else
    echo "bootstrap: NOTE: no chromium here; the browser tests will skip: apt-get install chromium (as root), or set OSL_CHROMIUM=/path/to/chrome"
  fi
fi
# MinIO's Go build (minutes on an empty cache) needs only Go and the standard library: it starts
# now, beside pip, and bootstrap does not wait for it. The fetch below leaves it to finish (a lock),
# and the first `sandbox up` or compose image build waits for it instead of building it again:
# on an empty machine the unit tests run meanwhile (docs/decisions/0032-bootstrap-leaves-the-minio-build-running.md).
minio_pid=
if [ -z "$(PYTHONPATH=. "$PYTHON" -c 'from sandbox import Settings; from sandbox.artifacts import built_minio; print(built_minio(Settings.from_env()) or "")' 2>/dev/null)" ]; then
  minio_log="$VENV/minio-build.log"
  echo "bootstrap: building MinIO in the background, beside pip (log: $minio_log)"
  PYTHONPATH=. nohup "$PYTHON" -c 'from sandbox import Settings; from sandbox.artifacts import minio_binary; minio_binary(Settings.from_env())' \
    >"$minio_log" 2>&1 </dev/null &
  minio_pid=$!
fi
echo "bootstrap: installing the project and its test tools into $VENV at the versions of constraints.txt (pyspark is large; pip caches it)"
"$VENV/bin/python" -m pip install --disable-pip-version-check -q --upgrade pip
# setuptools prints a banner on every editable install (a warning about same-named folders in
# the working directory, which is how this project is meant to run); silence that one only.
PYTHONWARNINGS="ignore:Editable installation:UserWarning" \
  "$VENV/bin/python" -m pip install --disable-pip-version-check -q -c constraints.txt -e ".[dev]"
# Times from the jars' content, not the install's: a class-data archive recorded for this
# pyspark at this path stays valid for a new virtualenv (sandbox/jvm/jar_times.py).
"$VENV/bin/python" -m sandbox.jvm.jar_times
echo "bootstrap: fetching Kafka and Spark-job jars and MinIO into the cache (once)"
"$VENV/bin/python" -m sandbox --backend local fetch --no-wait-for-minio
if [ -n "$minio_pid" ] && kill -0 "$minio_pid" 2>/dev/null; then
  echo "bootstrap: MinIO is still building in the background (log: $minio_log); the first \`make up\`, \`make demo\` or \`make test\` waits for it"
elif [ -n "$minio_pid" ] && ! wait "$minio_pid"; then
  echo "bootstrap: NOTE: the background MinIO build failed (see $minio_log); fetch built it instead"
fi
if [ -n "$chromium_pid" ]; then
  if wait "$chromium_pid"; then
    echo "bootstrap: chromium installed"
  else
    echo "bootstrap: NOTE: apt-get install chromium failed (see $log); the browser tests will skip, and fail under CI"
  fi
fi
