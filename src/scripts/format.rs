//! The values the expire lock's scripts read and write: the lease (`tl1:<expiry ms>:<fence>:<nonce>`)
//! and the fencing token, and the `NOTLOCK` refusals of anything else.

use crate::script::{CommandError, CommandResult, Db, all_digits, string_or_none};

/// The value prefix that marks a tairlock lease.
pub const LEASE_PREFIX: &str = "tl1:";

pub(crate) fn not_a_lease() -> CommandError {
    CommandError::new(
        "NOTLOCK",
        "lock key holds a value that is not a tairlock lease",
    )
}

pub(crate) fn not_a_fence() -> CommandError {
    CommandError::new(
        "NOTLOCK",
        "fence key holds a value that is not a fencing token",
    )
}

/// The largest fencing token: 2^53 - 1, the largest integer a Lua number (a double) holds exactly.
pub const MAX_FENCE: u64 = (1 << 53) - 1;

/// A fence key's value as a token, the way the scripts accept it: digits, at most [`MAX_FENCE`]
/// (`string.match(v, '^%d+$') and tonumber(v) <= 9007199254740991`).
pub(crate) fn fence_token(v: &[u8]) -> Option<u64> {
    if !all_digits(v) {
        return None;
    }
    let digits = std::str::from_utf8(v).ok()?;
    digits.parse::<u64>().ok().filter(|t| *t <= MAX_FENCE)
}

/// Read a fence key the way the scripts do: absent → `None`, a token → the value, else `NOTLOCK`.
///
/// # Errors
///
/// `WRONGTYPE` when the key holds another type, `NOTLOCK` when its string is not a token.
pub fn read_fence(db: &mut Db, key: &str) -> CommandResult<Option<u64>> {
    if string_or_none(db, key, "fence")? == "none" {
        return Ok(None);
    }
    let raw = db.get(key)?.unwrap_or_default();
    fence_token(&raw).map(Some).ok_or_else(not_a_fence)
}

/// The lease value `tl1:<expiry ms>:<fence>:<nonce>`, as the scripts write it.
pub fn format_lease(expiry_ms: u64, fence: u64, nonce: &str) -> String {
    let mut value = String::with_capacity(LEASE_PREFIX.len() + 40 + nonce.len());
    write_lease(&mut value, expiry_ms, fence, nonce);
    value
}

/// [`format_lease`] written over `out` (its buffer reused).
pub fn write_lease(out: &mut String, expiry_ms: u64, fence: u64, nonce: &str) {
    use std::fmt::Write as _;
    out.clear();
    // Writing into a `String` cannot fail.
    let _ = write!(out, "{LEASE_PREFIX}{expiry_ms}:{fence}:{nonce}");
}
