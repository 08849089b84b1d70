#!/usr/bin/env bash
# recipekit — from a fresh clone to a served, verified model.
#
#   ./start.sh                 apply the recipe for this host (RECIPE=<id|path|auto>, default auto;
#                              PORT=<port> and other settings via env or .env); re-running reuses
#                              every verified step; extra args go to `recipe apply` (--dry-run, ...)
#   ./start.sh test [ARGS]     create what the tests need, run the linters, then the whole suite (ARGS go to pytest)
#   ./start.sh lint            ruff (lint + format check) and mypy, as configured in pyproject.toml
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
die() { printf '[start.sh] error: %s\n' "$1" >&2; exit "${2:-1}"; }

apt_install() {
  # Debian packages, only as root and only when missing.
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || return 1
  if [ -z "${_APT_UPDATED:-}" ]; then
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    _APT_UPDATED=1
  fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# with_ticker WHAT CMD...: run CMD, saying every 5 s that WHAT is still running (no long silence in
# a log); a Ctrl-C stops CMD too. Exits with CMD's status.
with_ticker() {
  local what="$1" t0=$SECONDS next=$((SECONDS + 5)) pid rc=0
  shift
  "$@" & pid=$!
  trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; log "interrupted: $what; a re-run installs again"; exit 130' INT TERM
  while kill -0 "$pid" 2>/dev/null; do
    sleep 1
    if [ "$SECONDS" -ge "$next" ] && kill -0 "$pid" 2>/dev/null; then
      log "  ... $what: $((SECONDS - t0)) s elapsed"
      next=$((SECONDS + 5))
    fi
  done
  wait "$pid" || rc=$?
  trap - INT TERM
  return "$rc"
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
  [ -x "$VENV/bin/python" ] || { log "creating $VENV"; with_ticker "creating .venv" "$PYTHON" -m venv "$VENV"; }
  install_toolkit ".${extras:+[$extras]}"
  # uv writes no bytecode: the first `recipe` run would compile what it imports in silence (12 s at
  # load 9); import that once here, under a ticker (the same work, not more)
  with_ticker "loading the toolkit once (compiling its modules)" "$VENV/bin/python" -c \
    'import recipekit.cli.main, recipekit.apply.pipeline' || true
  echo "$want" > "$stamp"
}

# install_toolkit SPEC: the toolkit into .venv with uv (faster than pip on the same inputs:
# python -m recipekit.backends.cpu.install_bench), uv itself bootstrapped there with pip; pip installs
# when uv cannot be had or fails. uv is handed pip's own package sources (backends/cpu/installer.py).
install_toolkit() {
  local spec="$1" py="$VENV/bin/python" src=()
  if "$py" -c 'import uv' 2>/dev/null || with_ticker "uv bootstrap (pip)" "$py" -m pip install -q --disable-pip-version-check uv; then
    mapfile -t src < <("$py" backends/cpu/installer.py)
    log "installing the toolkit into .venv with uv${src[*]:+ (with the sources pip uses: ${src[*]})}"
    if with_ticker "toolkit install (uv)" "$py" -m uv pip install --quiet --python "$py" "${src[@]}" -e "$spec"; then
      return 0
    fi
    log "uv could not install the toolkit (above); installing with pip"
  else
    log "uv could not be installed (above); installing with pip"
  fi
  with_ticker "toolkit install (pip)" "$py" -m pip install -q --disable-pip-version-check -e "$spec"
}

test_system_deps() {
  # Real components the integration tests start: dockerd (docker.io) and headless chromium;
  # the shells tests/hostile sources rendered env files with (bash, dash, busybox sh).
  local missing=()
  command -v dockerd >/dev/null || missing+=(docker.io)
  command -v busybox >/dev/null || missing+=(busybox-static)   # the docker runner test's base image; busybox sh
  command -v dash >/dev/null || missing+=(dash)                # tests/hostile sources rendered env files with it
  command -v chromium >/dev/null || missing+=(chromium)
  [ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || missing+=(haproxy)   # the multi-node balancer tests
  if [ ${#missing[@]} -gt 0 ]; then
    log "installing test system packages: ${missing[*]}"
    apt_install "${missing[@]}" || log "could not install ${missing[*]} (not root or no apt); tests needing them will fail"
  fi
}

# lint: ruff check, ruff format --check, and mypy over a link tree that maps the top-level folders into
# the recipekit namespace as pyproject.toml's package-dir does (mypy cannot follow setuptools' editable finder).
lint() {
  local tree="$VENV/mypy-tree" rc=0
  log "ruff check"
  "$VENV/bin/ruff" check --quiet . || rc=1
  log "ruff format --check"
  "$VENV/bin/ruff" format --check --quiet . || rc=1
  log "mypy"
  rm -rf "$tree/recipekit"
  "$VENV/bin/python" - "$HERE" "$tree" <<'PY' || rc=1
import os, sys, tomllib
here, tree = sys.argv[1:3]
dirs = tomllib.load(open(os.path.join(here, "pyproject.toml"), "rb"))["tool"]["setuptools"]["package-dir"]
root = os.path.join(tree, "recipekit")
os.makedirs(root)
for name in os.listdir(os.path.join(here, dirs["recipekit"])):
    os.symlink(os.path.join(here, dirs["recipekit"], name), os.path.join(root, name))
for pkg, folder in dirs.items():
    if pkg.count(".") == 1:
        os.symlink(os.path.join(here, folder), os.path.join(root, pkg.split(".")[1]))
PY
  (cd "$tree" && "$VENV/bin/mypy" --config-file "$HERE/pyproject.toml" --cache-dir "$tree/.mypy_cache" -p recipekit) || rc=1
  [ "$rc" = 0 ] || die "lint found problems (above); fix them, then re-run" 1
}

cmd="${1:-apply}"
case "$cmd" in
  help|-h|--help)
    sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'
    ;;
  test)
    shift
    ensure_venv test
    lint
    test_system_deps
    exec "$VENV/bin/python" -m pytest --durations=25 "$@"
    ;;
  apply|--*)
    [ "$cmd" = apply ] && [ $# -gt 0 ] && shift
    ensure_venv ""
    exec "$VENV/bin/recipe" apply "${RECIPE:-auto}" "$@"
    ;;
  lint)
    ensure_venv test
    lint
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
