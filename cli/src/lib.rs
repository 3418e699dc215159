//! The `tairlock` command-line tool, as a library so tests can drive its parts.
//!
//! - [`race`]: the main job, `tairlock race`.
//! - [`bench`]: `tairlock bench`.
//! - [`admin`]: `tairlock inspect` and `tairlock unlock --force`.
//! - [`run`]: `tairlock run KEY -- CMD…`.

pub mod admin;
pub mod bench;
pub mod race;
pub mod run;
