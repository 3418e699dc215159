//! Expiring distributed locks on Redis and Valkey, with fencing tokens, and an embedded store
//! that runs them in process.
//!
//! Use it when something must not happen twice at once across processes or hosts: a job, a
//! cache rebuild, a write to a record. Every lock is a server-issued [`Lease`] that expires on
//! its own if its holder dies, carries a fencing token that strictly increases per lock, and is
//! released or renewed only by comparing it, in one atomic script per operation. Guards renew
//! their lease with a watchdog and tell you when it is lost.
//!
//! # The crates
//!
//! - **`tairlock`** (this crate): the expire lock and its guards, reentrancy, semaphores,
//!   several locks at once, fair queues, replica-acknowledged locks, Redlock, and the stores
//!   ([`RedisStore`], `ClusterStore`, the embedded [`MemoryStore`]).
//! - [`tairlock-rwlock`](https://docs.rs/tairlock-rwlock): reader/writer locks for read-heavy
//!   data, on the same stores.
//! - [`tairlock-legacy`](https://docs.rs/tairlock-legacy): locks that speak the old
//!   `SETNX`/`GETSET` protocol, to migrate keys that are live in production.
//! - [`tairlock-testing`](https://docs.rs/tairlock-testing): the race and exact interleavings,
//!   to put your own lock code through them in your tests.
//! - [`tairlock-cli`](https://docs.rs/tairlock-cli): the `tairlock` command (`race`, `run`,
//!   `inspect`, `unlock`, `bench`).
//!
//! # Which lock
//!
//! | you need | use |
//! |---|---|
//! | one holder at a time | [`ExpireLock`]: [`lock`](ExpireLock::lock), [`with_lock`](ExpireLock::with_lock), [`try_lock_for`](ExpireLock::try_lock_for) return a [`LockGuard`]; [`expire_lock`](ExpireLock::expire_lock) is the single-step Tair API |
//! | first come, first served across processes | [`Options::fair`] |
//! | the same lock again, deeper in the same call | [`ReentrantLock`] |
//! | at most N holders | [`Semaphore`] |
//! | several locks as one, without deadlock | [`ExpireLock::lock_many`] → [`MultiGuard`] ([`multi`]) |
//! | a lock that survives a master failover | [`ReplicatedLock`] (replica acknowledgements) or [`Redlock`] (a majority of masters) |
//! | one lock shared with a Python or Node service (redis-py's `Lock`, node `redlock`, `redis-semaphore`) | [`TokenLock`] ([`token`]): their key and wire format |
//! | tests without a server | [`MemoryStore`]: every lock kind, in process |
//!
//! # Quick start
//!
//! On the embedded store, as it runs here; against a server, the store is
//! `RedisStore::connect("redis://127.0.0.1:6379").await?`.
//!
//! ```
//! use std::time::Duration;
//! use tairlock::{Acquire, ExpireLock, MemoryStore, Unlock};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> tairlock::Result<()> {
//! let locks = ExpireLock::new(MemoryStore::new());
//!
//! // A guard: waits for the lock, renewed by a watchdog until released.
//! let guard = locks.lock("reports").await?;
//! let fence = guard.fence(); // pass it with every write to the protected resource
//! assert_eq!(guard.release().await?, Unlock::Released);
//!
//! // The critical section as a closure, stopped if the lease is lost.
//! let next = locks.with_lock("reports", |lease| async move { lease.fence() }).await?;
//! assert!(next > fence, "fencing tokens strictly increase");
//!
//! // The single-step Tair API: one round trip, a lease or the holder's remaining time.
//! match locks.expire_lock("orders:42", Duration::from_secs(10)).await? {
//!     Acquire::Acquired(lease) => {
//!         locks.expire_unlock("orders:42", &lease).await?;
//!     }
//!     Acquire::Held { remaining: Some(left), .. } => println!("busy for another {left:?}"),
//!     Acquire::Held { remaining: None, .. } => println!("busy, and the key has no expiry"),
//! }
//! # Ok(())
//! # }
//! ```
//!
//! Every async method has a `blocking_` twin ([`ExpireLock::blocking_lock`], ...) for code
//! outside a runtime.
//!
//! # Guarantees, and what is not guaranteed
//!
//! - Mutual exclusion holds while every holder finishes within its lease. A holder paused past
//!   its lease (GC, swap, a stopped VM) keeps running after someone else got the lock: no lease
//!   lock can prevent that. Pass [`Lease::fence`] to the protected resource and have it reject
//!   lower tokens; that is what makes a paused holder harmless.
//! - Expiry is judged by the server's clock. A holder relies on its lease until a local
//!   deadline ([`deadline`]): the send time of the request whose answer it read, plus the
//!   remaining time that answer reports, less drift.
//! - Releases and renewals compare the lease: an expired holder never deletes or extends a later
//!   holder's lock, and every step is safe to repeat after a lost reply.
//! - Cancelling a waiting call never leaves a lock behind: the undo runs on the store's runtime.
//! - A key that holds your data is never overwritten or deleted
//!   ([`ErrorKind::WrongType`]); bad input is refused before anything is sent.
//! - A single Redis master with asynchronous replication can lose a lock on failover;
//!   [`ReplicatedLock`] makes acquisitions, renewals and releases wait for replicas, and
//!   [`Redlock`] takes a majority of independent masters (without fencing tokens).
//!
//! # Connecting
//!
//! - `rediss://` URLs connect over TLS (feature `tls`); [`store::TlsOptions`] adds a CA file and
//!   a client certificate for mutual TLS, in [`store::RedisOptions`] and
//!   `store::ClusterOptions`.
//! - `RedisStore::connect_sentinel` finds the master through Redis Sentinel and follows it
//!   through failovers (feature `sentinel`, module `store::sentinel`).
//! - `ClusterStore` spreads locks over a Redis Cluster (feature `cluster`).
//! - [`RedisStore::from_client`] and [`RedisStore::from_manager`] reuse the application's own
//!   `redis` client or connection manager; `ClusterStore::from_connection` and
//!   `ClusterStore::connect_customized` likewise for a cluster.
//!
//! # Cargo features
//!
//! | feature | default | gives |
//! |---|---|---|
//! | `cluster` | on | `ClusterStore`, the Redis Cluster client |
//! | `tls` | on | `rediss://` URLs through rustls (ring), [`store::TlsOptions`] certificates |
//! | `sentinel` | on | `RedisStore::connect_sentinel` |
//! | `tracing` | on | spans and events for acquire, renew, loss and release ([`observe`]) |
//! | `metrics` | off | counters and histograms through the `metrics` facade ([`observe::metrics`]) |
//!
//! Without default features, [`RedisStore`], [`MemoryStore`] and every lock kind remain.
//!
//! # Modules
//!
//! - [`store`]: the [`Store`] contract, [`RedisStore`], `ClusterStore`, [`MemoryStore`], proven
//!   equal by the conformance and differential tests; [`store::intercept`] wraps a store with a
//!   hook around each command.
//! - [`script`], [`scripts`]: the atomic operations, each a `.lua` file beside its native body.
//! - [`engine`], [`wait`]: the one acquire engine every lock kind waits in.
//! - [`deadline`]: the deadline rule; [`clock`]: injected time, so tests can pause and skew it.
//! - [`observe`]: what the locks report while they work.
//!
//! # Examples
//!
//! Runnable programs in the repository's `examples/` directory (`cargo run --example NAME --
//! redis://127.0.0.1:6379`): `with_lock` (a web handler's critical section), `fenced_sqlite` (a
//! paused holder's late write refused by SQLite with `UPDATE … WHERE fence < ?`),
//! `blocking_reentrant` (a blocking job with [`ReentrantLock`]) and `legacy_migration` (an old
//! `SETNX`/`GETSET` client and a scripted client sharing a key). The repository's `docs/` is a
//! guide of one page a topic.

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
pub use crate::script::{Packed, Reply, Script};
pub use crate::semaphore::{PermitGuard, Semaphore, SemaphoreOptions};
#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use crate::store::ClusterStore;
pub use crate::store::{MemoryStore, RedisStore, ReplicaStore, Store, Ttl};
pub use crate::token::{
    TokenAttempt, TokenGuard, TokenHolding, TokenInspection, TokenLock, TokenOptions, TokenRenew,
};
pub use crate::wait::WaitStrategy;

// The README's and the guide's examples are doc tests of this crate, so they compile with every
// test run, and those on the embedded store run.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;

#[cfg(doctest)]
mod guide {
    #[doc = include_str!("../docs/getting-started.md")]
    struct GettingStarted;
    #[doc = include_str!("../docs/choosing-a-lock.md")]
    struct ChoosingALock;
    #[doc = include_str!("../docs/guarantees.md")]
    struct Guarantees;
    #[doc = include_str!("../docs/run.md")]
    struct Run;
    #[doc = include_str!("../docs/race.md")]
    struct Race;
    #[doc = include_str!("../docs/rwlock.md")]
    struct RwLock;
    #[doc = include_str!("../docs/legacy-migration.md")]
    struct LegacyMigration;
    #[doc = include_str!("../docs/scaling-out.md")]
    struct ScalingOut;
    #[doc = include_str!("../docs/deployment.md")]
    struct Deployment;
    #[doc = include_str!("../docs/observability.md")]
    struct Observability;
    #[doc = include_str!("../docs/performance.md")]
    struct Performance;
    #[doc = include_str!("../docs/development.md")]
    struct Development;
}
