//! In-crate tests that need the crate's insides: the loom models (`--cfg tairlock_loom`,
//! run by `scripts/loom.sh`).

mod loom_fair_writers;
mod loom_rwlock;
mod loom_share;
