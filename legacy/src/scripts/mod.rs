//! [`ScriptedLock`](crate::ScriptedLock)'s atomic operations, each a `.lua` file beside its
//! native body (the core's [`Script`] pattern).
//!
//! | operation | KEYS | ARGV | reply |
//! |---|---|---|---|
//! | [`ACQUIRE`] | lock, fence | ms per unit, lease in units, fence retention ms | `{1, value, fence, px}` / `{0, value, remaining ms}` |
//! | [`RELEASE`] | lock, fence | value, fence | `1` / `0` / `-1` / `-2` |
//! | [`RENEW`] | lock, fence | value, fence, ms per unit, lease in units, fence retention ms | `{1, value, px}` / `{0}` / `{-1}` / `{-2}` |
//! | [`PROBE`] | | | `1` |
//! | [`PROBE_WRITE`] | scratch key | | `1` (an error where a write after `TIME` is refused) |
//!
//! Every one reads the time from the server (`TIME`) when it needs it, checks key types before
//! writing (`WRONGTYPE`/`NOTLOCK`, nothing written), and is O(1).

mod acquire;
mod probe;
mod probe_write;
mod release;
mod renew;

pub use self::acquire::ACQUIRE;
pub use self::probe::PROBE;
pub use self::probe_write::PROBE_WRITE;
pub use self::release::RELEASE;
pub use self::renew::RENEW;

use tairlock::Script;
use tairlock::script::{Db, now_us};

/// Every script, e.g. for [`RedisStore::preload`](tairlock::RedisStore::preload).
pub static ALL: [&Script; 5] = [&ACQUIRE, &RELEASE, &RENEW, &PROBE, &PROBE_WRITE];

/// `#v <= 19 and string.match(v, '^%d+$')`, then `tonumber`.
fn digits(v: &[u8]) -> Option<u64> {
    crate::wire::parse_value(v)
}

/// (now in µs, now in ms) by the store's frozen clock, as the scripts compute them from `TIME`.
fn now(db: &Db) -> (u64, u64) {
    let us = now_us(db);
    (us, us / 1000)
}

/// `(value + 1) * unit - now_ms - 1`: the PX that ends the key with its timestamp.
fn px(value: u64, unit_ms: u64, now_ms: u64) -> u64 {
    ((value + 1) * unit_ms).saturating_sub(now_ms + 1)
}
