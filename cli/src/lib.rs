//! The `tairlock` command-line tool, as a library so tests can drive its parts.
//!
//! - [`race`]: the main job, `tairlock race`.
//! - [`bench`](mod@bench): `tairlock bench`.
//! - [`admin`]: `tairlock inspect`.
//! - [`rw_inspect`]: `tairlock inspect` for reader/writer locks.
//! - [`unlock`]: `tairlock unlock --force`, for every lock kind.
//! - `run` (Unix only): `tairlock run KEY -- CMD…`, for every lock kind.
//! - [`target`]: where a command connects, parsed once from its flags.
//! - [`duration`]: durations on the command line (`250ms`, `1h30m`).
//! - [`exit`]: every exit code, defined once.
//! - [`logging`]: `-v`, `-q` and `--log FILTER` on every command.
//! - [`sem_inspect`]: `tairlock inspect` for semaphores.

pub mod admin;
pub mod bench;
pub mod duration;
pub mod exit;
pub mod logging;
pub mod race;
#[cfg(unix)]
pub mod run;
pub mod rw_inspect;
pub mod sem_inspect;
pub mod target;
pub mod unlock;
