#!/usr/bin/env bash
# The loom models (issue #6): every interleaving of 2-3 clients, a crash and the server's TTL
# expiry on the embedded store, up to a preemption bound. Verbatim recipes must keep showing
# their flaws; scripted algorithms must show none.
#
#   bash scripts/loom.sh                      # bound 2, every model
#   LOOM_MAX_PREEMPTIONS=3 bash scripts/loom.sh naive   # a deeper run of the models matching "naive"
#
# Models: src/loom_models/ (naive-setnx-expire vs the expire lock, the fair queue, the reentrancy map,
# the semaphore),
# legacy/src/tests/loom_*.rs and rwlock/src/tests/loom_*.rs. They build only under
# `--cfg tairlock_loom` (namespaced: tokio must never see plain `cfg(loom)`), in their own target
# directory so the normal build's artefacts are not rebuilt. Same as
#   CARGO_TARGET_DIR=target/loom RUSTFLAGS="--cfg tairlock_loom" cargo test --release --workspace --lib loom
set -euo pipefail
cd "$(dirname "$0")/.."

export CARGO_TARGET_DIR="${LOOM_TARGET_DIR:-target/loom}"
export RUSTFLAGS="--cfg tairlock_loom"
export LOOM_MAX_PREEMPTIONS="${LOOM_MAX_PREEMPTIONS:-2}"

filter="${1:-loom}"
started=$SECONDS
status=0
# --nocapture: each model prints its executions, bound, runtime and what it found (for a
# verbatim recipe, the first interleaving that showed each flaw). --no-fail-fast: every crate's
# models run even when one fails.
cargo test --release --workspace --lib --no-fail-fast "$filter" -- --nocapture || status=$?
outcome=passed
if [ "$status" != 0 ]; then outcome=FAILED; fi
echo "scripts/loom.sh: loom models $outcome in $((SECONDS - started)) s" \
  "(build included; LOOM_MAX_PREEMPTIONS=$LOOM_MAX_PREEMPTIONS)"
exit "$status"
