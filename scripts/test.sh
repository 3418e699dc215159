#!/usr/bin/env bash
# The test command: installs what the tests need, then runs every test of the workspace.
#
#   bash scripts/test.sh
#
# Integration tests start their own redis-server processes on free loopback ports; they never
# touch a server you already run. redis-server comes from Debian's package when it is missing
# (REDIS_SERVER_BIN may point at another build instead).
set -euo pipefail
cd "$(dirname "$0")/.."

need_redis() {
  [ -n "${REDIS_SERVER_BIN:-}" ] && [ -x "${REDIS_SERVER_BIN}" ] && return 1
  ! command -v redis-server >/dev/null 2>&1 || ! command -v redis-cli >/dev/null 2>&1
}

if need_redis; then
  echo "scripts/test.sh: installing redis-server (Debian package redis-server)"
  sudo=""
  if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq
  $sudo apt-get install -y -qq redis-server >/dev/null
fi
echo "scripts/test.sh: $(redis-server --version)"

cargo test --workspace --all-targets
cargo test --workspace --doc

# The loom models (see scripts/loom.sh) are part of the suite when present.
if [ -x scripts/loom.sh ]; then
  bash scripts/loom.sh
fi
