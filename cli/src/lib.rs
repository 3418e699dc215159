//! The `tairlock` command-line tool, as a library so tests can drive its parts.
//!
//! Install the command with `cargo install tairlock-cli`; `tairlock --help` lists its commands,
//! flags and exit codes:
//!
//! | command | what it does |
//! |---|---|
//! | `tairlock race` | contending clients run each lock algorithm under stalls, crashes and clock skew; a table counts overlaps, foreign deletions, accepted stale writes and stuck locks |
//! | `tairlock run KEY -- CMD…` | runs a command while holding a lock, like `flock(1)`: no process started for the command runs after the lease's deadline |
//! | `tairlock inspect KEY` | a lock's holder, expiry and fencing token; a reader/writer lock's readers, a semaphore's holders, a legacy key's timestamp, a token lock's token |
//! | `tairlock unlock --force KEY` | deletes a stuck lock of any kind, and refuses a key that holds anything else; `--if-value` deletes only the holding that was looked at |
//! | `tairlock scan [PATTERN]` | finds every lock in a live keyspace, reading only, and with `--stuck` the ones nobody can take without help |
//! | `tairlock bench` | throughput and latency of each primitive against the round-trip floor measured in the same run |
//!
//! The locks are those of [`tairlock`], [`tairlock_rwlock`] and [`tairlock_legacy`]; the race
//! is [`tairlock_testing`]'s.
//!
//! The binary (`main.rs`) parses the command line and dispatches; each command's flags and its
//! work are here:
//!
//! - [`race_cmd`]: `tairlock race`, the main job; the race itself is [`race`], from the
//!   `tairlock-testing` crate.
//! - [`bench_cmd`]: `tairlock bench`; its scenarios and table are in [`bench`](mod@bench).
//! - [`inspect`]: `tairlock inspect`, which picks the report of [`admin`] (the expire lock),
//!   [`rw_inspect`] (reader/writer locks), [`sem_inspect`] (semaphores), [`legacy_inspect`]
//!   (legacy `SETNX`/`GETSET` keys) or [`token_inspect`] (token locks: redis-py, redlock, ...).
//! - [`unlock`]: `tairlock unlock --force`, for every lock kind.
//! - [`scan`]: `tairlock scan`, every lock in a live keyspace (read-only), and the stuck ones.
//! - [`run_args`]: `tairlock run`'s flags; `run` and `run::job` (Unix only): `tairlock run KEY
//!   -- CMD…`, for every lock kind.
//! - [`flags`]: the flags several commands share (connection, a lock's key).
//! - [`target`]: where a command connects, parsed once from its flags.
//! - [`duration`]: durations on the command line (`250ms`, `1h30m`).
//! - [`exit`]: every exit code, defined once.
//! - [`logging`]: `-v`, `-q` and `--log FILTER` on every command.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod admin;
pub mod bench;
pub mod bench_cmd;
pub mod duration;
pub mod exit;
pub mod flags;
pub mod inspect;
pub mod legacy_inspect;
pub mod logging;
pub mod race;
pub mod race_cmd;
#[cfg(unix)]
pub mod run;
pub mod run_args;
pub mod rw_inspect;
pub mod scan;
pub mod sem_inspect;
pub mod target;
pub mod token_inspect;
pub mod unlock;
