//! `tairlock race`: the engine lives in the [`tairlock_testing`] crate; the CLI parses the
//! arguments and prints the table.

pub use tairlock_testing::race::*;
