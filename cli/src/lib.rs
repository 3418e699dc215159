//! The `tairlock` command-line tool, as a library so tests can drive its parts.
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
