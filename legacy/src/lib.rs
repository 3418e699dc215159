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
//! that old clients are using, so a migration never needs a flag day (the repository's
//! `docs/legacy-migration.md` walks through one). [`LegacyLock::detect`] probes a server and
//! picks the strongest kind it supports.
//!
//! Part of tairlock: the core crate [`tairlock`] has the stores these locks run on
//! ([`RedisStore`](tairlock::RedisStore), `ClusterStore`, the embedded
//! [`MemoryStore`](tairlock::MemoryStore)) and [`ExpireLock`](tairlock::ExpireLock), the lock
//! a migration can end on; [`tairlock-testing`](https://docs.rs/tairlock-testing) races these
//! kinds and drives their exact interleavings, and
//! [`tairlock-cli`](https://docs.rs/tairlock-cli) runs commands under them (`tairlock run
//! --legacy`) and inspects their keys.
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
//! Old and new clients on one key, on the embedded store (as it runs here; the same against a
//! server):
//!
//! ```
//! use std::time::Duration;
//! use tairlock::MemoryStore;
//! use tairlock_legacy::{GetSetLock, Release, ScriptedLock};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tairlock::Result<()> {
//! let store = MemoryStore::new();
//! let old = GetSetLock::new(store.clone()); // the original algorithm, as old code runs it
//! let new = ScriptedLock::new(store); // the same key and value format, one script per step
//!
//! let held = old.acquire("lock.orderid", Duration::from_secs(10)).await?.expect("free");
//! assert!(new.try_acquire("lock.orderid", Duration::from_secs(10)).await?.holding().is_none());
//! old.release(&held).await?;
//!
//! let mine = new.acquire("lock.orderid", Duration::from_secs(10)).await?.expect("free");
//! assert!(mine.fence().is_some(), "the new kinds issue fencing tokens");
//! assert_eq!(new.release(&mine).await?, Release::Released);
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
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod detect;
pub mod getset;
mod is_locked;
mod options;
pub mod scripted;
pub mod scripts;
#[cfg(all(test, tairlock_loom))]
mod tests;
mod waiting;
pub mod watch;
pub mod wire;

pub use crate::detect::{Capabilities, LegacyLock, Strategy, probe};
pub use crate::getset::GetSetLock;
pub use crate::options::{Holding, Options, Release, Renew, TryAcquire};
pub use crate::scripted::ScriptedLock;
pub use crate::watch::{Profile, WatchLock, WatchStore};
pub use crate::wire::Unit;

// The README's example is a doc test, so it compiles with every test run.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;
