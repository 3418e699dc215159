//! Put your own lock code through the tairlock race and through exact interleavings, in your
//! own tests.
//!
//! - [`race`]: the race of `tairlock race` as a library: contending clients run an
//!   [`Algorithm`](race::Algorithm) under stalls, crashes and clock skew, and a table counts
//!   overlaps, foreign deletions, stale writes and stuck locks.
//! - [`gated`]: a store on which a test names, command by command, which client's command runs
//!   next.

pub mod gated;
pub mod race;
