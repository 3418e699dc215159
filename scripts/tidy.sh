#!/usr/bin/env bash
# Formatting, lints and docs, as CI checks them.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo fmt --all -- --check
# Imports run one way: the core crate's lower layers (scripting, slots, keys, notifications,
# stores) name nothing above them; and no import cycle between the files of one crate, in any
# crate of the workspace (`--report-only CRATE` would list a crate's cycles without failing).
python3 scripts/import_cycles.py --self-test
python3 scripts/import_cycles.py --layers
python3 scripts/import_cycles.py
cargo clippy --workspace --all-targets -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps
cargo bench --workspace --no-run
# Feature combinations: the core crate with none, each alone, all; the other crates trimmed.
cargo check -p tairlock --no-default-features
for feature in cluster tls sentinel tracing metrics; do
    cargo check -p tairlock --no-default-features --features "$feature"
done
cargo check -p tairlock --all-features
# The observability features on their own and together, without the connection features.
cargo check -p tairlock --no-default-features --features tracing,metrics
cargo check -p tairlock-legacy --no-default-features
cargo check -p tairlock-cli --no-default-features
# The CLI on a non-Unix target (no `run` there), when that target is installed. Without the
# `tls` feature: ring's build needs a C compiler for the target.
if rustup target list --installed 2>/dev/null | grep -qx x86_64-pc-windows-gnu; then
    cargo check -p tairlock-cli --no-default-features --target x86_64-pc-windows-gnu
fi
# The examples compile (they run in `tests/examples.rs`).
cargo build --examples -p tairlock
# The crates as published: each package holds exactly the files it should (its sources with their
# `.lua` scripts, its README and licences; no tests, certificates, build output or unused
# pictures), and all five package in dependency order, each resolving the ones before it.
# `cargo package --workspace` (without --no-verify) also builds each from its package alone.
bash scripts/package_files.sh
cargo package --workspace --no-verify --allow-dirty --quiet
