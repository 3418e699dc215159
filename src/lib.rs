//! Tair-style expiring distributed locks on Redis, and an embedded Redis-like store.
//!
//! - **[`ExpireLock`]**: `expire_lock(name, ttl)` takes a lock iff nobody holds it and returns a
//!   server-issued [`Lease`] (server-time expiry, 128-bit nonce, fencing token); the lease is the
//!   only way to [`expire_unlock`](ExpireLock::expire_unlock) or [`renew`](ExpireLock::renew) it.
//!   One round trip per operation, all of them atomic scripts.
//! - **Several locks as one** ([`multi`]): [`ExpireLock::lock_many`] and its `try_`/timed
//!   variants return one [`MultiGuard`]: one atomic script when the names share a cluster slot,
//!   otherwise sorted order with rollback; one watchdog for all.
//! - **[`TokenLock`]** ([`token`]): a lock in the wire format of redis-py's `Lock`, node
//!   `redlock` and `redis-semaphore` (a plain key holding a random token, `SET NX PX`,
//!   compare-and-delete), so that a Rust service and a Python or Node one exclude each other on
//!   one key; with the guards, watchdog and waiting of every other kind.
//! - **Stores** ([`store`]): [`RedisStore`] on a real server and [`MemoryStore`] in process, one
//!   [`Store`] contract, proven equal by the conformance and differential tests.
//! - **Atomic operations** ([`script`], [`scripts`]): each a `.lua` file beside its native body,
//!   the way `tairlock-legacy` and `tairlock-rwlock` declare theirs too.
//! - **Time** ([`clock`]): injected everywhere a clock is read, so tests can pause and skew it.
//! - **Observability** ([`observe`]): `tracing` events for acquire, renew, loss and release
//!   (feature `tracing`, on by default) and `metrics` counters and histograms labelled by lock
//!   kind (feature `metrics`).
//!
//! # Quick start
//!
//! ```no_run
//! use std::time::Duration;
//! use tairlock::{Acquire, ExpireLock, RedisStore};
//!
//! # #[tokio::main]
//! # async fn main() -> tairlock::Result<()> {
//! let locks = ExpireLock::new(RedisStore::connect("redis://127.0.0.1:6379").await?);
//! match locks.expire_lock("orders:42", Duration::from_secs(10)).await? {
//!     Acquire::Acquired(lease) => {
//!         // ... the critical section; pass lease.fence() to the resource you write ...
//!         locks.expire_unlock("orders:42", &lease).await?;
//!     }
//!     Acquire::Held { remaining, .. } => println!("busy for another {remaining:?}"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! # Connecting
//!
//! - `rediss://` URLs connect over TLS (feature `tls`); [`store::TlsOptions`] adds a CA file and
//!   a client certificate for mutual TLS, in [`store::RedisOptions`] and
//!   `store::ClusterOptions`.
//! - `RedisStore::connect_sentinel` finds the master through Redis Sentinel and follows it
//!   through failovers (feature `sentinel`, module `store::sentinel`).
//! - [`RedisStore::from_client`] and [`RedisStore::from_manager`] reuse the application's own
//!   `redis` client or connection manager; `ClusterStore::from_connection` and
//!   `ClusterStore::connect_customized` likewise for a cluster (feature `cluster`).
//!
//! # Examples
//!
//! Runnable programs in the repository's `examples/` directory (`cargo run --example NAME --
//! redis://127.0.0.1:6379`): `with_lock` (a web handler's critical section), `fenced_sqlite` (a
//! paused holder's late write refused by SQLite with `UPDATE … WHERE fence < ?`),
//! `blocking_reentrant` (a blocking job with [`ReentrantLock`]) and `legacy_migration` (an old
//! `SETNX`/`GETSET` client and a scripted client sharing a key).
//!
//! # Guarantees, and what is not guaranteed
//!
//! - Mutual exclusion holds while every holder finishes within its lease. A holder paused past
//!   its lease (GC, swap, a stopped VM) keeps running after someone else got the lock: no lease
//!   lock can prevent that. Pass [`Lease::fence`] to the protected resource and have it reject
//!   lower tokens; that is what makes a paused holder harmless.
//! - Expiry is judged by the server's clock only; client clocks never decide anything.
//! - A single Redis master with asynchronous replication can lose a lock on failover;
//!   [`ReplicatedLock`] makes acquisitions, renewals and releases wait for replicas. Scale-out
//!   modes (Redis Cluster via [`ClusterStore`], replica acknowledgements, [`Redlock`] over
//!   independent masters) are compared in `docs/scaling-out.md`.

#![warn(missing_docs)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod blocking;
pub mod clock;
pub mod deadline;
pub mod engine;
mod error;
pub mod expire_lock;
pub mod fair;
pub mod guard;
pub mod keys;
mod lease;
#[cfg(tairlock_loom)]
#[doc(hidden)]
pub mod loom_models;
pub mod multi;
pub mod notify;
pub mod observe;
pub mod redlock;
pub mod reentrant;
pub mod replicated;
pub mod script;
pub mod scripts;
pub mod semaphore;
pub mod slot;
pub mod store;
mod sync;
pub mod token;
pub mod wait;

pub use crate::error::{Error, ErrorKind, Result};
pub use crate::expire_lock::{
    Acquire, ExpireLock, Inspection, MAX_TTL, Options, Renew, Unlock, ttl_ms,
};
pub use crate::fair::FairAttempt;
pub use crate::guard::LockGuard;
pub use crate::keys::{Keyspace, LockKeys};
pub use crate::lease::{Lease, new_nonce};
pub use crate::multi::MultiGuard;
pub use crate::redlock::{Redlock, RedlockLease, RedlockOptions};
pub use crate::reentrant::{OwnedReentrantGuard, Owner, ReentrantGuard, ReentrantLock};
pub use crate::replicated::{
    ReplicatedAcquire, ReplicatedGuard, ReplicatedLock, ReplicatedRelease, ReplicatedRenew,
};
pub use crate::script::{Reply, Script};
pub use crate::semaphore::{PermitGuard, Semaphore, SemaphoreOptions};
#[cfg(feature = "cluster")]
pub use crate::store::ClusterStore;
pub use crate::store::{MemoryStore, RedisStore, ReplicaStore, Store, Ttl};
pub use crate::token::{
    TokenAttempt, TokenGuard, TokenHolding, TokenInspection, TokenLock, TokenOptions, TokenRenew,
};
pub use crate::wait::WaitStrategy;
