//! The expire lock's atomic operations, each a `.lua` file beside its native body.
//!
//! | operation | KEYS | ARGV | reply |
//! |---|---|---|---|
//! | [`EXPIRE_LOCK`] | lock, fence | ttl ms, nonce, fence retention ms | `{1, lease, pttl}` / `{0, holder, pttl}` |
//! | [`EXPIRE_UNLOCK`] | lock | lease, [release channel, [publish cmd]] | `1` / `0` / `-1` |
//! | [`RENEW`] | lock, fence | lease, ttl ms, new nonce, fence retention ms | `{1, lease, pttl}` / `{0}` / `{-1}` |
//! | [`RENEW_MANY`] | lock, fence of each lease | fence retention ms, then lease, ttl ms, new nonce, `1`/`0` refresh the fence key of each | `{1, expiry, pttl, fence pttl}` / `{0, 0, 0, 0}` / `{-1, 0, 0, 0}` / `{-2, 0, 0, 0}` for each |
//! | [`FORCE_UNLOCK`] | lock, [grant record] | [release channel, [publish cmd]] | `1` / `-1` |
//! | [`INSPECT`] | lock, fence | | `{type, value, pttl, fence}` |
//! | [`LOCK_MANY`] | lock, fence of each lock (one slot) | ttl ms, nonce, fence retention ms | `{1, lease, pttl, ...}` / `{0, i, holder, pttl}` |
//! | [`FAIR_LOCK`] | lock, fence, queue, waiters | ttl ms, nonce, fence retention ms, waiter lease ms, wake channel, queue? | `{1, lease, pttl}` / `{0, pttl, mark}` |
//! | [`FAIR_UNLOCK`] | lock, fence, queue, waiters, [grant record] | lease or nonce, `lease`/`nonce`, fence retention ms, release channel, [publish cmd] | `{released, granted}` |
//! | [`SEM_ACQUIRE`] | holders, holdings, fence, queue, waiters, limit | nonce, permits, limit, lease ms, fence retention ms, `0`/`wait`/`once`, waiter lease ms | `{1, expiry, fence, in use, held, remaining}` / `{0, wait ms, in use}` / `LIMIT` error |
//! | [`SEM_RENEW`] | holders, holdings, fence, limit | nonce, lease ms, fence retention ms | `{1, expiry, remaining}` / `{-1}` |
//! | [`SEM_RELEASE`] | holders, holdings, queue, waiters | nonce, release channel, [publish cmd] | `1` / `-1` |
//! | [`SEM_INSPECT`] | holders, holdings, fence, limit | | `{types, last fence, limit type, limit, holders...}` (read-only) |
//! | [`SEM_SET_LIMIT`] | fence, limit | limit, keep ms | previous limit, `0` for none |
//! | [`TOKEN_ACQUIRE`] | lock (raw), fence | token, ttl ms, fence retention ms | `{1, pttl, fence}` / `{0, pttl}` |
//! | [`TOKEN_RELEASE`] | lock (raw) | token, [release channel, [publish cmd]] | `1` / `0` / `-1` |
//! | [`TOKEN_RENEW`] | lock (raw), fence | token, ttl ms, fence retention ms | `{1, pttl}` / `{0}` / `{-1}` |
//!
//! Every reply that grants or renews carries the lease's time left as the server sees it
//! (`pttl`: the key's `PTTL`; `remaining`: the holder's score − `TIME`), read in the same step:
//! the client dates its local deadline from it ([`deadline`](crate::deadline)), never from the
//! length it asked for. A repeat that finds its own grant reports what that grant has left.
//!
//! `[publish cmd]` is `SPUBLISH` where the store announces releases with sharded pub/sub
//! ([`PubSub::Sharded`](crate::notify::PubSub)), otherwise absent (`PUBLISH`).
//!
//! The token lock ([`token`](crate::token)) reads its snapshot with [`INSPECT`].
//!
//! Every one checks key types first and answers `WRONGTYPE`/`NOTLOCK` without writing when a key
//! holds data that is not ours (a token lock's key is any string: its format is another
//! library's), and every one is O(1) (no `KEYS`/`SCAN`), except [`LOCK_MANY`]:
//! O(the number of locks it is given), and [`RENEW_MANY`]: O(the number of leases it is given),
//! each with its own outcome (`-2` where a key holds data that is not ours, nothing written
//! for that lease).

mod expire_lock;
mod expire_unlock;
mod fair;
mod force_unlock;
mod format;
mod inspect;
mod lock_many;
mod renew;
mod renew_many;
mod semaphore;
mod token;

pub use self::expire_lock::EXPIRE_LOCK;
pub use self::expire_unlock::EXPIRE_UNLOCK;
pub use self::fair::{FAIR_LOCK, FAIR_UNLOCK};
pub use self::force_unlock::FORCE_UNLOCK;
pub use self::format::{LEASE_PREFIX, MAX_FENCE, format_lease, read_fence, write_lease};
pub use self::inspect::INSPECT;
pub use self::lock_many::LOCK_MANY;
pub use self::renew::RENEW;
pub use self::renew_many::RENEW_MANY;
pub use self::semaphore::{SEM_ACQUIRE, SEM_INSPECT, SEM_RELEASE, SEM_RENEW, SEM_SET_LIMIT};
pub use self::token::{TOKEN_ACQUIRE, TOKEN_RELEASE, TOKEN_RENEW};

use crate::script::Script;

/// The fair mode's scripts ([`Options::fair`](crate::Options::fair)).
pub static FAIR: [&Script; 2] = [&FAIR_LOCK, &FAIR_UNLOCK];

/// The multi-lock's script ([`ExpireLock::lock_many`](crate::ExpireLock::lock_many)).
pub static MULTI: [&Script; 1] = [&LOCK_MANY];

/// The semaphore's scripts ([`Semaphore`](crate::Semaphore)).
pub static SEMAPHORE: [&Script; 5] = [
    &SEM_ACQUIRE,
    &SEM_RENEW,
    &SEM_RELEASE,
    &SEM_INSPECT,
    &SEM_SET_LIMIT,
];

/// The token lock's scripts ([`TokenLock`](crate::TokenLock)), with the snapshot it shares with
/// the expire lock.
pub static TOKEN: [&Script; 4] = [&TOKEN_ACQUIRE, &TOKEN_RELEASE, &TOKEN_RENEW, &INSPECT];

/// Every script of the expire lock, e.g. for [`RedisStore::preload`](crate::RedisStore::preload).
pub static ALL: [&Script; 6] = [
    &EXPIRE_LOCK,
    &EXPIRE_UNLOCK,
    &RENEW,
    &RENEW_MANY,
    &FORCE_UNLOCK,
    &INSPECT,
];
