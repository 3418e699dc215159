#!/usr/bin/env bash
# Each crate's package (`cargo package --list`) against the files it should hold: the sources
# (`.rs` and the `.lua` scripts) as git tracks them, plus a fixed set per crate. Anything else
# (tests, their certificates, target/, pictures nobody shows) fails, and so does a missing file.
set -euo pipefail
cd "$(dirname "$0")/.."

status=0
# check PACKAGE DIR FILE... : the fixed files, relative to DIR; DIR's tracked sources are added.
check() {
  local package=$1 dir=$2
  shift 2
  local expected actual
  expected=$(
    {
      printf '%s\n' Cargo.toml Cargo.toml.orig Cargo.lock README.md LICENSE-MIT LICENSE-APACHE "$@"
      git -C "$dir" ls-files -- 'src/*.rs' 'src/*.lua'
    } | sort -u
  )
  # .cargo_vcs_info.json is written when packaging from a git checkout.
  actual=$(cargo package --list --allow-dirty -p "$package" 2>/dev/null \
    | grep -vx '.cargo_vcs_info.json' | sort -u)
  if [ "$expected" != "$actual" ]; then
    echo "scripts/package_files.sh: the package of $package differs from what it should hold" >&2
    echo "  (< expected, > packaged)" >&2
    diff <(echo "$expected") <(echo "$actual") >&2 || true
    status=1
  fi
}

# shellcheck disable=SC2046 # one file name per line, none with spaces
check tairlock . CHANGELOG.md docs/race-timeline.svg $(git ls-files -- 'docs/*.md')
check tairlock-legacy legacy
check tairlock-rwlock rwlock
# shellcheck disable=SC2046
check tairlock-testing testing $(git -C testing ls-files -- 'examples/*.rs')
check tairlock-cli cli

if [ "$status" = 0 ]; then
  echo "scripts/package_files.sh: every package holds exactly its files"
fi
exit "$status"
