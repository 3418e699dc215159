//! The `tairlock` command-line tool, as a library so tests can drive its parts.
//!
//! - [`race`]: the main job, `tairlock race`.
//! - [`admin`]: `tairlock inspect` and `tairlock unlock --force`.
//! - [`run`]: `tairlock run KEY -- CMD…`.

pub mod admin;
pub mod race;
pub mod run;
