//! Legacy locks: the old `SETNX`/`GETSET` lock verbatim, and two safe locks that speak its wire
//! format, for deployments whose servers or whose existing clients know only the old protocol
//! and whose lock keys are live in production.
//!
//! | kind | sends | server | expiry judged by | fencing | owner-checked release |
//! |---|---|---|---|---|---|
//! | [`GetSetLock`] | `SETNX`, `GET`, `GETSET`, `DEL` | any (1.0+), scripting off | each client's clock | no | no (deletes any live lock) |
//! | [`WatchLock`] | `WATCH` + `GET`, `PTTL`, `TIME` (one pipeline); `MULTI`/`SET`/`PEXPIREAT`/`DEL`/`EXEC` | ≥ 2.2, no Lua needed ([`Profile`]); one server or a Redis Cluster ([`watch::ClusterWatch`]) | the server (TTL, `TIME`) | yes | yes |
//! | [`ScriptedLock`] | `EVALSHA` (one script per operation) | ≥ 5.0 (the scripts call `TIME` before writing) | the server (`TIME`) | yes | yes (compare-and-delete) |
//!
//! All three read and write the same key — exactly the name the old code uses, e.g.
//! `lock.orderid` — holding the same value: a bare integer Unix timestamp `now + timeout + 1`, in
//! seconds as the original or in milliseconds ([`Unit`]). That is what lets new clients join a key
//! that old clients are using, so a migration never needs a flag day
//! (`docs/legacy-migration.md`). [`LegacyLock::detect`] probes a server and picks the strongest
//! kind it supports.
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use tairlock::RedisStore;
//! use tairlock_legacy::{LegacyLock, Options, Unit};
//!
//! # #[tokio::main]
//! # async fn main() -> tairlock::Result<()> {
//! let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
//! // Same unit as the old clients on these keys.
//! let locks = LegacyLock::detect(store, Options::default().unit(Unit::Seconds)).await?;
//! if let Some(holding) = locks.acquire("lock.orderid", Duration::from_secs(10)).await? {
//!     // ... the critical section; pass holding.fence() to the resource, if it checks ...
//!     locks.release(&holding).await?;
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Every operation has a blocking twin (`blocking_acquire`, `blocking_release`, ...) for
//! synchronous callers, as in the core. The multi-command operations can also be driven one step
//! at a time ([`GetSetLock::attempt`], [`WatchLock::attempt`], and their release twins), which is
//! how the deterministic race tests and `tairlock race` pause a client between two commands.
//!
//! # Key layout
//!
//! | key | value | TTL | GetSet | Watch, Scripted |
//! |---|---|---|---|---|
//! | `K` (as named) | `now + timeout + 1` (decimal) | none when an old client wrote it last; until the timestamp passes when a new one did | reads, writes | reads, writes |
//! | [`fence_key(K)`](wire::fence_key) = `{K}:fence` (`K:fence` if `K` has a hash tag) | last fencing token | lease + retention | never touches | reads, writes |
//!
//! Details per kind: [`getset`], [`watch`], [`scripted`]; the format: [`wire`].
//!
//! # Mixed clients on one key: the interop matrix
//!
//! "Old" is [`GetSetLock`] or any hand-written client of the original protocol; "new" is
//! [`WatchLock`] or [`ScriptedLock`]. Every row is a test in `tests/legacy_interop.rs` against a
//! real server.
//!
//! | pair | can two hold at once? | old deletes new's lock? | new deletes old's lock? | an old client's losing `GETSET` on a new client's lock |
//! |---|---|---|---|---|
//! | old + old | yes: F2 clock skew, F3 shortened leases, F4/F4b releases | yes (F4, F4b) | — | the winner's lease becomes the loser's timestamp |
//! | old + Scripted | only through the old client's flaws: its clock runs ahead of the server by more than the lease left (F2), or its release deleted the new lock (F4b) and a third client got in | **yes**: the old release deletes any lock whose timestamp is still in its future (F4b) | **never**: the new release compares value, TTL and fencing token, and reports [`Release::Overwritten`] or [`Release::HeldByOther`] instead | the lease becomes the loser's timestamp (shorter or longer) and the key loses its TTL; the new holder's release and renewal report [`Release::Overwritten`] and leave the key, which frees itself (for new clients by server time) when that timestamp passes |
//! | old + Watch | as old + Scripted | **yes** (F4b) | **never** | as old + Scripted |
//! | Watch + Scripted | no | no | no | — (neither sends `GETSET`) |
//!
//! Leases across the protocols: a new client takes an old client's lock once the old timestamp
//! has passed by the *server's* clock; an old client takes a new client's lock once the new
//! timestamp (written from server time) has passed by *its own* clock — at the same moment the
//! key's TTL removes it, if its clock is right. Keep every client NTP-synchronised while old
//! clients remain, and keep them all on one [`Unit`].
//!
//! # Guarantees, and what is not guaranteed
//!
//! - Between new clients ([`WatchLock`], [`ScriptedLock`], in any mix): mutual exclusion while
//!   every holder finishes within its lease; no release or renewal ever touches another grant;
//!   expiry by the server's clock only; fencing tokens that strictly increase per lock, moved in
//!   the same atomic step as the grant. A holder paused past its lease keeps running: only a
//!   resource that checks the fencing token makes that harmless.
//! - [`GetSetLock`] guarantees none of that; its flaws are listed in [`getset`] and
//!   demonstrated deterministically in `tests/legacy_races.rs`.
//! - Old and new clients together: only what the matrix says. The new clients' side is safe;
//!   the old clients' flaws remain theirs.
//! - A single Redis master with asynchronous replication can lose a lock on failover (F9).

#![warn(missing_docs)]

pub mod detect;
pub mod getset;
mod is_locked;
mod options;
pub mod scripted;
pub mod scripts;
#[cfg(all(test, tairlock_loom))]
mod tests;
pub mod watch;
pub mod wire;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tairlock::WaitStrategy;
use tairlock::engine::{self, Attempt, Kind, Patience, Waiters};

pub use crate::detect::{Capabilities, LegacyLock, Strategy, probe};
pub use crate::getset::GetSetLock;
pub use crate::options::{Holding, Options, Release, Renew, TryAcquire};
pub use crate::scripted::ScriptedLock;
pub use crate::watch::{Profile, WatchLock, WatchStore};
pub use crate::wire::Unit;

/// The Watch and Scripted kinds' attempt step, for the core's [engine](tairlock::engine).
pub(crate) trait TryStep: Clone + Send + Sync + 'static {
    /// The store.
    type Store: tairlock::Store;
    /// The store.
    fn store(&self) -> &Self::Store;
    /// The options.
    fn options(&self) -> &Options;
    /// The local queues.
    fn waiters(&self) -> &Waiters;
    /// One attempt.
    fn try_acquire(
        &self,
        key: &str,
        lease: Duration,
    ) -> impl Future<Output = tairlock::Result<TryAcquire>> + Send;
}

#[derive(Clone)]
struct Step<L> {
    lock: L,
    key: Arc<str>,
    lease: Duration,
}

impl<L: TryStep> Kind for Step<L> {
    type Store = L::Store;
    type Held = Holding;

    fn store(&self) -> &L::Store {
        self.lock.store()
    }

    /// The old protocol announces nothing: its waiters poll.
    fn channel(&self) -> Option<&str> {
        None
    }

    fn label(&self) -> &'static str {
        "legacy"
    }

    async fn attempt(&self, _nonce: &str) -> tairlock::Result<Attempt<Holding>> {
        Ok(match self.lock.try_acquire(&self.key, self.lease).await? {
            TryAcquire::Acquired(holding) => Attempt::Acquired(holding),
            TryAcquire::Busy { remaining, .. } => Attempt::Busy { remaining },
        })
    }

    /// The value carries no owner id, so nothing can be recognised as ours: a lock an
    /// unanswered attempt took is held for nobody until its timestamp passes.
    async fn undo(self, _nonce: String) {}
}

/// The waiting of the Watch and Scripted kinds, by the core's engine: attempt, then sleep the
/// poll interval (jittered) or the holder's remaining time, whichever is shorter, in a local
/// FIFO queue per key, until acquired (`Some`) or out of time (`None`).
pub(crate) async fn acquire<L: TryStep>(
    lock: &L,
    key: &str,
    lease: Duration,
) -> tairlock::Result<Option<Holding>> {
    let options = lock.options();
    let interval = options.poll_interval;
    let wait = WaitStrategy::Poll {
        min: interval,
        max: interval,
    };
    let patience = Patience::from_timeout(options.acquire_timeout);
    let step = Step {
        lock: lock.clone(),
        key: key.into(),
        lease,
    };
    engine::acquire(lock.waiters(), key, wait, patience, step).await
}
