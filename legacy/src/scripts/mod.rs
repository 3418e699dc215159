//! [`ScriptedLock`](crate::ScriptedLock)'s atomic operations, each a `.lua` file beside its
//! native body (the core's [`Script`] pattern).
//!
//! | operation | KEYS | ARGV | reply |
//! |---|---|---|---|
//! | [`ACQUIRE`] | lock, fence | ms per unit, lease in units, fence retention ms | `{1, value, fence, pttl}` / `{0, value, remaining ms}` |
//! | [`RELEASE`] | lock, fence | value, fence | `1` / `0` / `-1` / `-2` |
//! | [`RENEW`] | lock, fence | value, fence, ms per unit, lease in units, fence retention ms | `{1, value, pttl}` / `{0}` / `{-1}` / `{-2}` |
//! | [`PROBE`] | | | `1` |
//! | [`PROBE_WRITE`] | scratch key | | `1` (an error where a write after `TIME` is refused) |
//!
//! A grant or renewal answers the lock key's `PTTL` after its write: the holder's local deadline
//! is dated from it ([`tairlock::deadline::local_deadline`]). [`ACQUIRE`] judges an existing key
//! as [`WatchLock`](crate::WatchLock) does: a key with a TTL is held while it exists; only a key
//! without one (an old client's) is judged by its timestamp.
//!
//! Every one reads the time from the server (`TIME`) when it needs it, checks key types before
//! writing (`WRONGTYPE`/`NOTLOCK`, nothing written), and is O(1).

mod acquire;
mod native;
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

/// Every script, e.g. for [`RedisStore::preload`](tairlock::RedisStore::preload).
pub static ALL: [&Script; 5] = [&ACQUIRE, &RELEASE, &RENEW, &PROBE, &PROBE_WRITE];
