//! The scripted [`RwLock`](crate::RwLock)'s atomic operations, each a `.lua` file beside its
//! native body (the embedded store runs the native body; both obey one contract).
//!
//! | operation | KEYS | ARGV | reply |
//! |---|---|---|---|
//! | [`READ_ACQUIRE`] | w, r, wi | nonce, lease ms, honour intent | `{1, expiry, readers, remaining}` / `{0, 'writer'\|'intent', pttl}` |
//! | [`WRITE_ACQUIRE`] | w, r, wi, fence | nonce, lease ms, intent ms, fence retention ms, [intent channel, [publish cmd, [announce idle]]] | `{1, lease, pttl}` / `{0, 'writer'\|'intent'\|'readers', pttl, readers}` |
//! | [`READ_RELEASE`] | r, [wq, ww] | nonce, channel, [publish cmd] | `1` / `-1` |
//! | [`READ_RENEW`] | r | nonce, lease ms | `{1, expiry, remaining}` / `{-1}` |
//! | [`WRITE_ABANDON`] | w, wi | nonce, channel, [publish cmd] | keys deleted |
//! | [`DOWNGRADE`] | w, r | lease, reader nonce, lease ms, channel, [publish cmd] | `{1, expiry, readers, remaining}` (also a repeat after it happened) / `{0}` / `{-1}` |
//! | [`FAIR_WRITE_ACQUIRE`] | w, r, wi, fence, wq, ww | nonce, lease ms, intent ms, fence retention ms, waiter lease ms, wake channel, queue `1`/`0`, intent channel, publish cmd, [announce `idle` `1`/`0`] | `{1, lease, pttl}` / `{0, 'writer'\|'intent'\|'readers', pttl, readers}` |
//! | [`FAIR_WRITE_RELEASE`] | w, wi, fence, wq, ww | lease or nonce, `lease`/`nonce`, fence retention ms, channel, publish cmd, intent ms | `{released 1/0/-1, granted 1/0}` |
//! | [`INSPECT`] | w, r, wi, fence | | snapshot (read-only) |
//! | [`COUNT`] | w, r, wi | | `{readers, writer pttl, intent pttl}` (read-only) |
//! | core [`EXPIRE_UNLOCK`](tairlock::scripts::EXPIRE_UNLOCK) | w | lease, channel, [publish cmd] | `1` / `0` / `-1` (write release) |
//! | core [`RENEW`](tairlock::scripts::RENEW) | w, fence | lease, lease ms, new nonce, retention ms | `{1, lease, pttl}` / `{0}` / `{-1}` (write renewal) |
//!
//! Every reply that grants or renews a lease ends with the time that lease has left by the
//! server's clock (`remaining`: a reader's expiry − `TIME`, never past the readers set's own
//! expiry; `pttl`: the writer key's `PTTL`), also when it answers a repeat with the lease the
//! first call made: the holder's local deadline is dated from it
//! ([`tairlock::deadline::local_deadline`]), never from the length asked for.
//!
//! The two fair scripts serve [`Options::fair`](crate::Options::fair) writers (see
//! `docs/rwlock.md`); [`READ_RELEASE`] given the fair queue's keys also wakes the first queued
//! fair writer when the last reader leaves.
//!
//! `[publish cmd]` is `SPUBLISH` where the store announces releases with sharded pub/sub
//! ([`PubSub::Sharded`](tairlock::notify::PubSub)), otherwise absent (`PUBLISH`).
//!
//! The writer key holds exactly the core's lease format, so the write lock's release and renewal
//! *are* the core expire lock's scripts, run on the writer key.
//!
//! Every script checks key types first and answers `WRONGTYPE`/`NOTLOCK` without writing when a
//! key holds data that is not ours. Every one is O(log n) in the number of readers except
//! reaping, which removes each expired reader once, and [`INSPECT`], which lists the live
//! readers. None uses `KEYS`/`SCAN`.

mod count;
mod db;
mod downgrade;
mod fair_write_acquire;
mod fair_write_release;
mod inspect;
mod read_acquire;
mod read_release;
mod read_renew;
mod write_abandon;
mod write_acquire;

pub use self::count::COUNT;
pub use self::downgrade::DOWNGRADE;
pub use self::fair_write_acquire::FAIR_WRITE_ACQUIRE;
pub use self::fair_write_release::FAIR_WRITE_RELEASE;
pub use self::inspect::INSPECT;
pub use self::read_acquire::READ_ACQUIRE;
pub use self::read_release::READ_RELEASE;
pub use self::read_renew::READ_RENEW;
pub use self::write_abandon::WRITE_ABANDON;
pub use self::write_acquire::WRITE_ACQUIRE;

use tairlock::script::Script;

/// Every script of the scripted RwLock (the two core scripts it reuses included), e.g. for
/// [`RedisStore::preload`](tairlock::RedisStore::preload).
pub static ALL: [&Script; 10] = [
    &READ_ACQUIRE,
    &WRITE_ACQUIRE,
    &READ_RELEASE,
    &READ_RENEW,
    &WRITE_ABANDON,
    &DOWNGRADE,
    &INSPECT,
    &COUNT,
    &tairlock::scripts::EXPIRE_UNLOCK,
    &tairlock::scripts::RENEW,
];

/// The scripts of the fair mode for writers ([`Options::fair`](crate::Options::fair)), loaded
/// when first used.
pub static FAIR: [&Script; 2] = [&FAIR_WRITE_ACQUIRE, &FAIR_WRITE_RELEASE];
