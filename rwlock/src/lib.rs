//! Reader/writer locks on Redis and Valkey: a scripted, atomic, crash-safe [`RwLock`], and the
//! two-step Tair recipe verbatim, for comparison.
//!
//! Use it for data that many processes read and one at a time rewrites — a cache, a catalog, a
//! configuration — where readers must never see a half-written state and a crashed reader must
//! not block writers forever.
//!
//! - **[`RwLock`]** (use this): one Lua script per operation, every key of a lock under one hash
//!   tag. A reader never enters beside a live writer and a writer never beside a live reader or
//!   writer; each reader holds its own lease, so a crashed reader blocks writers no longer than
//!   that lease; writer preference (switchable); atomic write→read downgrade; read→write upgrade
//!   refused with an error instead of a self-deadlock; reentrant reads and writes through a
//!   local owner map; a fencing token on every write acquire; leases renewed by a watchdog;
//!   waiting by release notification. Guards: [`ReadGuard`], [`WriteGuard`].
//! - **[`TwoStepRwLock`]** (do not use): the original recipe — probe the write lock with
//!   `expireUnlock(w, now)` then `INCR` a reader count; writers check the count then
//!   `expireLock`. It breaks in five ways (I–V below), kept to demonstrate them.
//! - **Scripts** ([`scripts`]): each a `.lua` file beside its native body for the embedded store.
//!
//! # Quick start
//!
//! On the embedded store, as it runs here; against a server, the store is
//! `RedisStore::connect("redis://127.0.0.1:6379").await?`.
//!
//! ```
//! use tairlock::MemoryStore;
//! use tairlock_rwlock::RwLock;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tairlock::Result<()> {
//! let locks = RwLock::new(MemoryStore::new());
//! let a = locks.read("catalog").await?; // many readers at once
//! let b = locks.read("catalog").await?;
//! assert!(locks.try_write("catalog").await?.is_none(), "readers keep writers out");
//! a.release().await?;
//! b.release().await?;
//!
//! let write = locks.write("catalog").await?; // waits for readers; new readers wait for it
//! assert!(write.fence() > 0); // pass it to the store you write to
//! let read = write.downgrade().await?; // atomically a reader now
//! read.release().await?;
//! # Ok(())
//! # }
//! ```
//!
//! Blocking code uses `blocking_read`/`blocking_write` (thread-reentrant, `!Send` guards); async
//! code that needs reentrancy passes an explicit [`Owner`](tairlock::Owner) to
//! [`read_as`](RwLock::read_as)/[`write_as`](RwLock::write_as).
//!
//! Part of tairlock: the core crate [`tairlock`] has the stores these locks run on
//! ([`RedisStore`](tairlock::RedisStore), `ClusterStore`, the embedded
//! [`MemoryStore`](tairlock::MemoryStore)), the plain expire lock and the semaphore;
//! [`tairlock-testing`](https://docs.rs/tairlock-testing) races both kinds of this crate, and
//! [`tairlock-cli`](https://docs.rs/tairlock-cli) runs commands under them (`tairlock run
//! --read`/`--write`) and inspects them.
//!
//! # Key layout of [`RwLock`]
//!
//! Every key of one lock shares the hash tag `{name}`, so each script touches one Redis Cluster
//! slot. Default prefix `tairlock:`.
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `<prefix>{name}:w` | string | writer lease `tl1:<expiry ms>:<fence>:<nonce>` (the core's format) | the write lease (`PX`) | `write_acquire`, renew; deleted by release, `downgrade`, `write_abandon` |
//! | `<prefix>{name}:r` | sorted set | member: a reader's 128-bit nonce; score: its lease expiry, ms, **server** time | `PEXPIRE` to the longest reader lease | `read_acquire`, `read_renew`, `downgrade`; members removed by `read_release` and reaped by score in every script |
//! | `<prefix>{name}:wi` | string | the waiting writer's nonce (writer intent) | the intent lease (`PX`, default 1 s), re-asserted while it waits | `write_acquire` when refused; deleted when that writer acquires or gives up |
//! | `<prefix>{name}:fence` | string | last fencing token issued | write lease + retention (60 s) | `write_acquire`, renew |
//! | `<prefix>{name}:wq` | sorted set | fair mode: a queued writer's nonce → its arrival, server µs | `PEXPIRE` to the longest waiter lease | fair write attempts (join, leave when in), fair releases (grant, leave) |
//! | `<prefix>{name}:ww` | hash | fair mode: a queued writer's nonce → `<place ends ms>:<waiter lease ms>:<wake channel>` | as `:wq` | as `:wq`; each waiting attempt refreshes its entry |
//! | `<prefix>{name}:released` | pub/sub channel | `released` | — | write release, last reader's release, downgrade, abandon (waiters listen here) |
//! | `<prefix>{name}:released:w:<client id>` | pub/sub channel | `granted` / `released` | — | fair mode: a fair release's grant; the last reader's release (the first queued fair writer waits here) |
//! | `<prefix>{name}:intent` | pub/sub channel | `intent`, or `idle` | — | `write_acquire` raising an intent against live readers, or under reader preference a waiting writer first refused by live readers (`idle`) (shared read holds listen here; waiters do not, so it wakes none) |
//!
//! # Key layout of [`TwoStepRwLock`]
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `<prefix>{name}:w` | string | the writer's expiry, ms, by the **writer's** clock | `PX ttl` | `expireLock`; deleted by `expireUnlock` (the writer's and every reader's probe) |
//! | `<prefix>{name}:rc` | string | reader count | **none** | `INCR`/`DECR` |
//!
//! The two kinds share the `:w` key name on purpose: a scripted lock meeting a two-step writer's
//! bare timestamp refuses with a `NOTLOCK` error instead of misreading it.
//!
//! # Guarantees of [`RwLock`], and what is not guaranteed
//!
//! - **Exclusion, while every holder finishes within its lease.** Each acquire is one script: it
//!   reaps expired readers, then admits a reader only if no writer key exists, and a writer only
//!   if no writer key exists and no live reader is left — judged by the **server's** clock, in
//!   one atomic step. A holder paused past its lease (GC, a stopped VM) keeps running after
//!   others got in: no lease lock can prevent that. Writers get a fencing token
//!   ([`WriteGuard::fence`]) that strictly increases per lock; pass it to the resource and have
//!   it reject lower tokens. Readers get no token (they do not write).
//! - **A crashed reader blocks writers for at most its own lease** (the watchdog lease, 30 s by
//!   default; the watchdog renews it at a third while the reader lives). A crashed writer
//!   likewise. A crashed *waiting* writer keeps new readers out for at most the intent lease.
//! - **No starvation of writers** under [`Preference::Writer`] (the default): a waiting writer's
//!   intent keeps new readers out, so it gets in once the readers already inside leave. Among
//!   several waiting writers the first to announce goes first; waiters in one process queue
//!   FIFO. This is preference, not a global FIFO: a writer can still lose a race to another
//!   writer that arrives while it sleeps — unless [`Options::fair`] is on: then waiting writers
//!   line up in a FIFO on the server, a fair writer's release hands the lock directly to the
//!   next one, and readers do not barge ahead of a queued writer.
//! - **Reentrancy without self-deadlock.** An owner's re-entry is served from the local map with
//!   no round trip, so a reentrant read never queues behind a waiting writer. A read inside the
//!   owner's write is served by the write hold. A read→write upgrade is refused with
//!   [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput) (waiting for it would wait
//!   for our own read); take the write lock first and [`downgrade`](WriteGuard::downgrade).
//!   Only the owner-keyed API is reentrant: a task calling [`read`](RwLock::read) twice makes two
//!   independent reads, and the second can wait behind a waiting writer that waits for the
//!   first, as with `tokio::sync::RwLock`.
//! - **Shared read holds** ([`Options::share_reads`], off by default): the local readers of one
//!   `RwLock` value (and its clones) share one server reader entry, joined with no round trip;
//!   an idle one lingers [`Options::linger`] (5 ms) for the next reader. A waiting writer's
//!   intent, announced on the lock's channel, revokes it in every client: no more joins, given
//!   back once its readers inside leave. Under [`Preference::Reader`] a waiting writer raises no
//!   intent but announces itself once per wait: idle holds are given back at once, holds with
//!   readers inside stay and take new readers (and no longer linger once idle). Exclusion,
//!   loss reporting (every local reader of a lost hold sees it lost), reentrancy and fencing
//!   are unchanged. The repository's `docs/rwlock.md` has the details.
//! - **Bad input changes nothing.** A key of the lock holding a user's data (another type, or a
//!   string that is not ours) gets a `WRONGTYPE`/`NOTLOCK` error
//!   ([`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType)); nothing is written.
//! - **Not guaranteed: failover.** A single master with asynchronous replication can lose a lock
//!   on failover, as for every Redis lock.
//! - **Not guaranteed: bounded reader count.** The readers set grows with the number of live
//!   readers; every script is O(log n) in it (reaping removes each expired reader once).
//!
//! # Why a bare INCR/DECR counter cannot be crash-safe
//!
//! A counter records *how many* readers are in, not *which*, nor until when. When a reader
//! dies between `INCR` and `DECR`, nothing distinguishes its unit from a live reader's, so
//! nothing can ever take it back: without a TTL the count never returns to 0 (writers starve
//! forever, flaw III); with a TTL on the key, the TTL is one deadline for everybody — it either
//! expires under readers still inside (a writer then enters beside them, and their later `DECR`s
//! drive the count negative, after which `== 0` is never true again) or is pushed forward by
//! every new reader (a dead reader's unit then lives as long as reads continue). Crash safety
//! needs one lease *per reader*; the sorted set is exactly that — member = reader, score = its
//! own expiry — and every script drops members whose score has passed.
//!
//! # The two-step recipe's flaws
//!
//! [`TwoStepRwLock`] breaks in at least five ways, each a deterministic test in
//! `tests/rwlock_two_step.rs` (on the embedded store and on a real server), where the same
//! schedules leave [`RwLock`] intact:
//!
//! | | what happens | why |
//! |---|---|---|
//! | I | a reader and a writer both enter | the reader's probe and its `INCR` are two steps; the writer's `GET rc` and `expireLock` too |
//! | II | the same, writer's check first | as I |
//! | III | a crashed reader starves writers forever | `rc` has no TTL and no per-reader identity |
//! | IV | a reader with a fast clock deletes a live writer's lock | `expireUnlock(w, now)` trusts the caller's clock (threshold semantics) |
//! | V | writers starve under continuous reads | no writer preference |
//!
//! ```compile_fail
//! // A thread-keyed guard cannot move to another thread.
//! fn must_be_send<T: Send>(_: T) {}
//! let locks = tairlock_rwlock::RwLock::new(tairlock::MemoryStore::new());
//! let guard = locks.blocking_read("a").unwrap();
//! must_be_send(guard);
//! ```

#![warn(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acquire;
mod decode;
mod guard;
mod hold;
mod is_locked;
mod leases;
mod lock;
mod options;
mod registry;
pub mod scripts;
mod share;
mod share_state;
#[cfg(all(test, tairlock_loom))]
mod tests;
pub mod two_step;
mod types;

pub use crate::guard::{GuardNoSend, GuardSend, ReadGuard, Release, WriteGuard};
pub use crate::lock::RwLock;
pub use crate::options::{Options, Preference};
pub use crate::two_step::{TwoStepKeys, TwoStepRwLock, TwoStepWrite};
pub use crate::types::{
    Blocker, IntentInfo, QueuedWriter, ReadAttempt, ReadLease, ReaderInfo, RwInspection, RwKeys,
    RwState, WriteAttempt, WriteLease,
};

// The README's example is a doc test, so it compiles with every test run.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;
