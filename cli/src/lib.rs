//! The `tairlock` command-line tool, as a library so tests can drive its parts.
//!
//! - [`race`]: the main job, `tairlock race`.
//! - [`bench`](mod@bench): `tairlock bench`.
//! - [`admin`]: `tairlock inspect` and `tairlock unlock --force`.
//! - [`rw_inspect`]: `tairlock inspect` for reader/writer locks.
//! - [`sem_inspect`]: `tairlock inspect` for semaphores.
//! - `run` (Unix only): `tairlock run KEY -- CMD…`.

pub mod admin;
pub mod bench;
pub mod race;
#[cfg(unix)]
pub mod run;
pub mod rw_inspect;
pub mod sem_inspect;
