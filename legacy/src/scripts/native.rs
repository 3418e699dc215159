//! What the legacy scripts' native bodies share beyond the core's helpers
//! ([`tairlock::script::native`]): the wire format's timestamps.

use tairlock::script::{Db, now_us};

/// `#v <= 19 and string.match(v, '^%d+$')`, then `tonumber`.
pub(super) fn digits(v: &[u8]) -> Option<u64> {
    crate::wire::parse_value(v)
}

/// (now in µs, now in ms) by the store's frozen clock, as the scripts compute them from `TIME`.
pub(super) fn now(db: &Db) -> (u64, u64) {
    let us = now_us(db);
    (us, us / 1000)
}

/// `(value + 1) * unit - now_ms - 1`: the PX that ends the key with its timestamp.
pub(super) fn px(value: u64, unit_ms: u64, now_ms: u64) -> u64 {
    ((value + 1) * unit_ms).saturating_sub(now_ms + 1)
}
