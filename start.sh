#!/usr/bin/env bash
# recipekit — from a fresh clone to a served, verified model.
#
#   ./start.sh                 apply the recipe for this host (RECIPE=<id|path|auto>, default auto;
#                              PORT=<port> and other settings via env or .env); re-running reuses
#                              every verified step; extra args go to `recipe apply` (--dry-run, ...)
#   ./start.sh test [ARGS]     create what the tests need and run the whole suite (ARGS go to pytest)
#   ./start.sh stop|status|logs|restart|plan|doctor
#                              lifecycle of the applied recipe (same RECIPE)
#   ./start.sh help            this text
#
# Creates .venv with the toolkit (nothing pre-installed assumed) and calls the `recipe` CLI.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$HERE"
PYTHON="${PYTHON:-python3}"
VENV="$HERE/.venv"

log() { printf '[start.sh] %s\n' "$*" >&2; }
die() { printf '[start.sh] error: %s\n' "$*" >&2; exit "${2:-1}"; }

apt_install() {
  # Debian packages, only as root and only when missing.
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  if [ -z "${_APT_UPDATED:-}" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    _APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

need_python() {
  if ! "$PYTHON" -c 'import sys, venv; assert sys.version_info >= (3, 10)' 2>/dev/null; then
    log "python3 >= 3.10 with venv is missing; installing it"
    apt_install python3 python3-venv python3-pip || die "install Python >= 3.10 with the venv module, then re-run" 3
    PYTHON=python3
  fi
}

# ensure_venv EXTRAS: (re)install the toolkit when pyproject.toml or the extras changed.
ensure_venv() {
  local extras="$1" stamp="$VENV/.recipekit-install" want have=""
  want="$(sha256sum pyproject.toml | cut -c1-16) ${extras:-base}"
  [ -f "$stamp" ] && have="$(cat "$stamp")"
  # a test install is a superset of the base install
  if [ -x "$VENV/bin/recipe" ] && { [ "$have" = "$want" ] || { [ -z "$extras" ] && [ "${have% *}" = "${want% *}" ]; }; }; then
    return 0
  fi
  need_python
  [ -x "$VENV/bin/python" ] || { log "creating $VENV"; "$PYTHON" -m venv "$VENV"; }
  log "installing the toolkit into .venv${extras:+ (with $extras)}"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check -e ".${extras:+[$extras]}"
  echo "$want" > "$stamp"
}

test_system_deps() {
  # Real components the integration tests start: dockerd (docker.io) and headless chromium.
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v busybox >/dev/null || missing+=(busybox-static)   # the docker runner test's local base image
  command -v chromium >/dev/null || missing+=(chromium)
  [ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || missing+=(haproxy)   # the multi-node balancer tests
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing test system packages: ${missing[*]}"
    apt_install "${missing[@]}" || log "could not install ${missing[*]} (not root or no apt); tests needing them will fail"
  fi
}

cmd="${1:-apply}"
case "$cmd" in
  help|-h|--help)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  test)
    shift
    ensure_venv test
    test_system_deps
    exec "$VENV/bin/python" -m pytest "$@"
    ;;
  apply|--*)
    [ "$cmd" = apply ] && [ $# -gt 0 ] && shift
    ensure_venv ""
    exec "$VENV/bin/recipe" apply "${RECIPE:-auto}" "$@"
    ;;
  stop|status|logs|restart|plan|doctor)
    shift
    ensure_venv ""
    exec "$VENV/bin/recipe" "$cmd" "${RECIPE:-auto}" "$@"
    ;;
  *)
    die "unknown command '$cmd' (try ./start.sh help)" 2
    ;;
esac
