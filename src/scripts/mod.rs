//! The expire lock's atomic operations, each a `.lua` file beside its native body.
//!
//! | operation | KEYS | ARGV | reply |
//! |---|---|---|---|
//! | [`EXPIRE_LOCK`] | lock, fence | ttl ms, nonce, fence retention ms | `{1, lease}` / `{0, holder, pttl}` |
//! | [`EXPIRE_UNLOCK`] | lock | lease, [release channel, [publish cmd]] | `1` / `0` / `-1` |
//! | [`RENEW`] | lock, fence | lease, ttl ms, new nonce, fence retention ms | `{1, lease}` / `{0}` / `{-1}` |
//! | [`FORCE_UNLOCK`] | lock | [release channel, [publish cmd]] | `1` / `-1` |
//! | [`INSPECT`] | lock, fence | | `{type, value, pttl, fence}` |
//! | [`FAIR_LOCK`] | lock, fence, queue, waiters | ttl ms, nonce, fence retention ms, waiter lease ms, wake channel, queue? | `{1, lease}` / `{0, pttl}` |
//! | [`FAIR_UNLOCK`] | lock, fence, queue, waiters | lease or nonce, `lease`/`nonce`, fence retention ms, release channel, [publish cmd] | `{released, granted}` |
//! | [`SEM_ACQUIRE`] | holders, holdings, fence, queue, waiters | nonce, permits, limit, lease ms, fence retention ms, `0`/`wait`/`once`, waiter lease ms | `{1, expiry, fence, in use, held}` / `{0, wait ms, in use}` |
//! | [`SEM_RENEW`] | holders, holdings, fence | nonce, lease ms, fence retention ms | `{1, expiry}` / `{-1}` |
//! | [`SEM_RELEASE`] | holders, holdings, queue, waiters | nonce, release channel, [publish cmd] | `1` / `-1` |
//! | [`SEM_INSPECT`] | holders, holdings, fence | | `{types, last fence, holders...}` (read-only) |
//!
//! `[publish cmd]` is `SPUBLISH` where the store announces releases with sharded pub/sub
//! ([`PubSub::Sharded`](crate::notify::PubSub)), otherwise absent (`PUBLISH`).
//!
//! Every one checks key types first and answers `WRONGTYPE`/`NOTLOCK` without writing when a key
//! holds data that is not ours, and every one is O(1) (no `KEYS`/`SCAN`).

mod expire_lock;
mod expire_unlock;
mod fair;
mod force_unlock;
mod inspect;
mod renew;
mod semaphore;

pub use self::expire_lock::EXPIRE_LOCK;
pub use self::expire_unlock::EXPIRE_UNLOCK;
pub use self::fair::{FAIR_LOCK, FAIR_UNLOCK};
pub use self::force_unlock::FORCE_UNLOCK;
pub use self::inspect::INSPECT;
pub use self::renew::RENEW;
pub use self::semaphore::{SEM_ACQUIRE, SEM_INSPECT, SEM_RELEASE, SEM_RENEW};

use crate::script::Script;
use crate::store::memory::{CommandError, CommandResult, Db};

/// The fair mode's scripts ([`Options::fair`](crate::Options::fair)).
pub static FAIR: [&Script; 2] = [&FAIR_LOCK, &FAIR_UNLOCK];

/// The semaphore's scripts ([`Semaphore`](crate::Semaphore)).
pub static SEMAPHORE: [&Script; 4] = [&SEM_ACQUIRE, &SEM_RENEW, &SEM_RELEASE, &SEM_INSPECT];

/// Every script of the expire lock, e.g. for [`RedisStore::preload`](crate::RedisStore::preload).
pub static ALL: [&Script; 5] = [
    &EXPIRE_LOCK,
    &EXPIRE_UNLOCK,
    &RENEW,
    &FORCE_UNLOCK,
    &INSPECT,
];

/// The value prefix that marks a tairlock lease.
pub const LEASE_PREFIX: &str = "tl1:";

/// `TYPE` must be `none` or `string`; `what` names the key in the error, as the Lua does.
pub(crate) fn string_or_none(db: &mut Db, key: &str, what: &str) -> CommandResult<&'static str> {
    match db.key_type(key) {
        t @ ("none" | "string") => Ok(t),
        other => Err(CommandError::new(
            "WRONGTYPE",
            format!("{what} key holds a {other}"),
        )),
    }
}

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

/// `string.match(v, '^%d+$')`.
pub(crate) fn all_digits(v: &[u8]) -> bool {
    !v.is_empty() && v.iter().all(u8::is_ascii_digit)
}

/// The largest fencing token: 2^53 - 1, the largest integer a Lua number (a double) holds exactly.
pub(crate) const MAX_FENCE: u64 = (1 << 53) - 1;

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
pub(crate) fn read_fence(db: &mut Db, key: &str) -> CommandResult<Option<u64>> {
    if string_or_none(db, key, "fence")? == "none" {
        return Ok(None);
    }
    let raw = db.get(key)?.unwrap_or_default();
    fence_token(&raw).map(Some).ok_or_else(not_a_fence)
}

/// A repeat's write: `PEXPIRE key (PTTL key)` when the key expires, keeping its expiry. A
/// script that found its own earlier write in place makes one, so that a `WAIT` pipelined after
/// it waits for replicas that have that write.
pub(crate) fn touch(db: &mut Db, key: &str) {
    let pttl = db.pttl(key);
    if pttl > 0 {
        db.pexpire(key, std::time::Duration::from_millis(pttl as u64));
    }
}

/// Microseconds since the epoch, by the store's (frozen) clock.
pub(crate) fn now_us(db: &Db) -> u64 {
    let (secs, micros) = db.time();
    secs * 1_000_000 + micros
}

pub(crate) fn format_lease(expiry_ms: u64, fence: u64, nonce: &str) -> String {
    format!("{LEASE_PREFIX}{expiry_ms}:{fence}:{nonce}")
}
