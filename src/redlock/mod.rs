//! Redlock: one lock over N independent Redis masters, held while a majority agrees.
//!
//! The algorithm of the Redis documentation ("Distributed locks with Redis"), with the same
//! numbers as the common implementations:
//!
//! 1. note the local monotonic time `start`; send `SET key value NX PX ttl` to **all N servers at
//!    once** (one random 128-bit value per acquisition), each bounded by
//!    [`RedlockOptions::server_timeout`];
//! 2. acquired iff at least `N/2 + 1` servers said yes **and** the validity
//!    `ttl − elapsed − drift` (`drift = ttl/100 + 2 ms`) is still positive;
//! 3. otherwise delete the key on **every** server (including those that seemed to fail: their
//!    reply may have been lost after the write), wait a random delay, and retry until the
//!    caller's timeout (then [`acquire`](Redlock::acquire) returns `Ok(None)`, as every lock
//!    kind does when its patience runs out);
//! 4. [`renew`](Redlock::renew) moves the TTL only where the value is still ours and counts only
//!    when a majority did so within the new validity; [`release`](Redlock::release) deletes
//!    where the value is still ours, on all servers.
//!
//! [`RedlockLease::deadline`] is the local instant the validity ends: stop relying on the lock
//! by then.
//!
//! # Key layout
//!
//! | key | type | value | TTL |
//! |---|---|---|---|
//! | `<prefix>{name}:redlock`, on every server | string | 32 hex digits, random per acquisition | the lease (`PX ttl`) |
//!
//! The key is not the [`ExpireLock`](crate::ExpireLock)'s: do not mix the two modes on one name.
//!
//! # Guarantees
//!
//! With at most a minority of servers down or partitioned, and bounded clock drift between the
//! servers' expiry clocks and the client's monotonic clock, two clients never both hold a lease
//! whose [`deadline`](RedlockLease::deadline) has not passed. Killing a minority keeps locking
//! working; with a majority down, [`acquire`](Redlock::acquire) gives up cleanly within its timeout
//! (`Ok(None)`).
//!
//! # Not guaranteed
//!
//! - **No fencing token.** There is no single master to count grants, and counters on several
//!   masters diverge; the lease carries no monotonic number. What is available: the lease's
//!   random [`value`](RedlockLease::value), usable for check-and-set on the resource ("write only
//!   if the resource's current lock value is this one"). If your resource can check a monotonic
//!   token, use [`ExpireLock`](crate::ExpireLock) on one master (with
//!   [`ReplicatedLock`](crate::replicated::ReplicatedLock) for failover) instead.
//! - **Process pauses and delayed packets** after acquisition: a holder paused past its deadline
//!   (GC, swap, SIGSTOP) keeps running while someone else holds the lock. Every lease lock has
//!   this problem; without fencing, Redlock cannot make the resource reject the late writer.
//! - **Clock jumps.** Redis expires keys by its wall clock: a server whose clock steps forward
//!   frees the key early, and a new majority may form with it. Run NTP in slew mode.
//! - **Restarts without persistence.** A server that restarts empty forgets the keys it held; a
//!   client can then gain a majority that includes it while the previous holder is still within
//!   its validity. **Delayed-restart rule:** keep a crashed server down for at least the longest
//!   TTL in use before it rejoins (or run it with `appendfsync always`).
//!
//! Kleppmann ("How to do distributed locking", 2016) and antirez ("Is Redlock safe?", 2016)
//! discuss these trade-offs; for correctness-critical mutual exclusion prefer fencing.

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use tokio::time::Instant;

use crate::engine::{Attempt, Kind, Patience, Waiters};
use crate::error::{Error, Result};
use crate::keys::Keyspace;
use crate::script::{CommandResult, Db, Reply, Script};
use crate::store::Store;

/// Compare-and-delete. Lua: `release.lua`.
pub static RELEASE: Script = Script::new("redlock_release", include_str!("release.lua"), release);
/// Compare-and-`PEXPIRE`. Lua: `extend.lua`.
pub static EXTEND: Script = Script::new("redlock_extend", include_str!("extend.lua"), extend);

/// Every Redlock script.
pub static ALL: [&Script; 2] = [&RELEASE, &EXTEND];

fn release(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    if db.get(&keys[0])?.as_deref() == Some(args[0].as_bytes()) {
        return Ok(Reply::Int(i64::from(db.del(&keys[0]))));
    }
    Ok(Reply::Int(0))
}

fn extend(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let ttl = crate::script::int_arg(args, 1)?;
    if db.get(&keys[0])?.as_deref() == Some(args[0].as_bytes()) {
        let done = db.pexpire(&keys[0], Duration::from_millis(ttl.max(0) as u64));
        return Ok(Reply::Int(i64::from(done)));
    }
    Ok(Reply::Int(0))
}

/// Settings of a [`Redlock`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedlockOptions {
    /// Key prefix (default `tairlock:`).
    pub keyspace: Keyspace,
    /// How long one server may take to answer one command (default 50 ms); small against the TTL.
    pub server_timeout: Duration,
    /// The base pause between two attempts of [`Redlock::acquire`]; each pause is random in
    /// `[base/2, base)` (default 50 ms).
    pub retry_delay: Duration,
    /// Clock drift allowed for, as a fraction of the TTL (default 0.01; 2 ms are always added).
    pub drift_factor: f64,
}

impl Default for RedlockOptions {
    fn default() -> Self {
        RedlockOptions {
            keyspace: Keyspace::default(),
            server_timeout: Duration::from_millis(50),
            retry_delay: Duration::from_millis(50),
            drift_factor: 0.01,
        }
    }
}

impl RedlockOptions {
    /// Per-server timeout.
    pub fn server_timeout(mut self, timeout: Duration) -> Self {
        self.server_timeout = timeout;
        self
    }

    /// Base retry delay.
    pub fn retry_delay(mut self, delay: Duration) -> Self {
        self.retry_delay = delay;
        self
    }

    /// Key prefix.
    pub fn keyspace(mut self, keyspace: Keyspace) -> Self {
        self.keyspace = keyspace;
        self
    }
}

/// A lock held on a majority. See the [module docs](self).
#[derive(Clone, PartialEq, Eq)]
pub struct RedlockLease {
    key: String,
    value: String,
    deadline: Instant,
    granted: usize,
}

impl std::fmt::Debug for RedlockLease {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockLease")
            .field("key", &self.key)
            .field("value", &format_args!("{}…", &self.value[..6]))
            .field("granted", &self.granted)
            .finish_non_exhaustive()
    }
}

impl RedlockLease {
    /// The key (the same on every server).
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The random value: check-and-set material for the resource (not a fencing token).
    pub fn value(&self) -> &str {
        &self.value
    }

    /// The local instant the validity ends: `start + ttl − drift`, `start` taken before the
    /// first request was sent.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// Validity left, zero once the deadline passed.
    pub fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// How many servers granted (or extended) it.
    pub fn granted(&self) -> usize {
        self.granted
    }
}

/// Redlock over independent masters. See the [module docs](self).
///
/// # Examples
///
/// Three embedded stores standing in for three independent masters:
///
/// ```
/// use std::time::Duration;
/// use tairlock::{MemoryStore, Redlock, RedlockOptions};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let servers = vec![MemoryStore::new(), MemoryStore::new(), MemoryStore::new()];
/// let redlock = Redlock::new(servers, RedlockOptions::default())?;
/// let lease = redlock
///     .acquire("job", Duration::from_secs(10), Duration::from_secs(1))
///     .await?
///     .expect("a majority granted it");
/// assert_eq!(lease.granted(), 3);
/// assert!(redlock.try_acquire("job", Duration::from_secs(10)).await?.is_none());
/// redlock.release(&lease).await;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Redlock<S> {
    servers: Vec<S>,
    options: RedlockOptions,
    waiters: Arc<Waiters>,
}

/// Redlock's steps for the [engine](crate::engine): one round of `SET NX PX` under the
/// acquisition's value; undone by the compare-and-delete on every server.
#[derive(Clone)]
struct Step<S> {
    redlock: Redlock<S>,
    key: Arc<str>,
    ttl: Duration,
}

impl<S: Store> Kind for Step<S> {
    type Store = S;
    type Held = RedlockLease;

    fn store(&self) -> &S {
        &self.redlock.servers[0]
    }

    /// Nothing is announced on independent masters: waiters poll.
    fn channel(&self) -> Option<&str> {
        None
    }

    fn label(&self) -> &'static str {
        "redlock"
    }

    async fn attempt(&self, value: &str) -> Result<Attempt<RedlockLease>> {
        Ok(
            match self.redlock.attempt(&self.key, self.ttl, value).await {
                Some(lease) => Attempt::Acquired(lease),
                None => Attempt::Busy { remaining: None },
            },
        )
    }

    async fn undo(self, value: String) {
        let lease = RedlockLease {
            key: self.key.to_string(),
            value,
            deadline: Instant::now(),
            granted: 0,
        };
        self.redlock.release(&lease).await;
    }
}

impl<S: Store> Redlock<S> {
    /// Redlock over `servers` (independent masters; an odd number, typically 3 or 5).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty list.
    pub fn new(servers: Vec<S>, options: RedlockOptions) -> Result<Self> {
        if servers.is_empty() {
            return Err(Error::invalid("redlock needs at least one server"));
        }
        Ok(Redlock {
            servers,
            options,
            waiters: Arc::default(),
        })
    }

    /// The servers.
    pub fn servers(&self) -> &[S] {
        &self.servers
    }

    /// `N/2 + 1`.
    pub fn quorum(&self) -> usize {
        self.servers.len() / 2 + 1
    }

    fn drift(&self, ttl: Duration) -> Duration {
        crate::engine::drift(ttl, self.options.drift_factor)
    }

    /// One attempt: `Some(lease)` iff a majority granted within the validity; otherwise every
    /// server is released and `None` returned.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad name or TTL. Unreachable servers are not errors:
    /// they count as refusals.
    ///
    /// # Cancel safety
    ///
    /// A dropped attempt may leave keys on some servers; their TTL frees them.
    pub async fn try_acquire(&self, name: &str, ttl: Duration) -> Result<Option<RedlockLease>> {
        let key = self.options.keyspace.key(name, ":redlock")?;
        crate::expire_lock::ttl_ms(ttl)?;
        Ok(self.attempt(&key, ttl, &crate::lease::nonce()).await)
    }

    /// One round under `value`: `SET NX PX` everywhere; the lease iff a majority granted within
    /// the validity, else released everywhere.
    async fn attempt(&self, key: &str, ttl: Duration, value: &str) -> Option<RedlockLease> {
        let start = Instant::now();
        let granted = join_all(self.servers.iter().map(|s| async move {
            matches!(
                tokio::time::timeout(
                    self.options.server_timeout,
                    s.set_nx_px(key, value.as_bytes(), ttl)
                )
                .await,
                Ok(Ok(true))
            )
        }))
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count();
        let deadline = start + ttl.saturating_sub(self.drift(ttl));
        let lease = RedlockLease {
            key: key.to_owned(),
            value: value.to_owned(),
            deadline,
            granted,
        };
        if granted >= self.quorum() && Instant::now() < deadline {
            return Some(lease);
        }
        self.release(&lease).await;
        None
    }

    /// Retry [`try_acquire`](Self::try_acquire) after random pauses (half to all of
    /// [`retry_delay`](RedlockOptions::retry_delay)) until it succeeds, or `None` once `timeout`
    /// has passed. The waiting is the [engine](crate::engine)'s, as for every lock kind: the
    /// acquires of this value (and its clones) for one name queue locally, first come first
    /// served, and only the head sends; every round of one acquisition uses the same value.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) as `try_acquire`. Not gaining a majority in time is `Ok(None)`,
    /// not an error.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while a round is in flight, a background task deletes the
    /// acquisition's value everywhere it is still the key's.
    pub async fn acquire(
        &self,
        name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Option<RedlockLease>> {
        let key = self.options.keyspace.key(name, ":redlock")?;
        crate::expire_lock::ttl_ms(ttl)?;
        let step = Step {
            redlock: self.clone(),
            key: key.into(),
            ttl,
        };
        let delay = self.options.retry_delay;
        let wait = crate::WaitStrategy::Poll {
            min: delay,
            max: delay,
        };
        let patience = Patience::from_timeout(Some(timeout));
        crate::engine::acquire(&self.waiters, name, wait, patience, step).await
    }

    /// Extend the lease to `ttl` from now where it is still ours: `Some(new lease)` iff a
    /// majority extended it within the new validity. On `None` the old lease still ends at its
    /// old deadline.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad TTL.
    pub async fn renew(&self, lease: &RedlockLease, ttl: Duration) -> Result<Option<RedlockLease>> {
        let ttl_ms = crate::expire_lock::ttl_ms(ttl)?;
        let start = Instant::now();
        let extended = self
            .on_all(&EXTEND, lease, &[lease.value.clone(), ttl_ms.to_string()])
            .await;
        let deadline = start + ttl.saturating_sub(self.drift(ttl));
        if extended >= self.quorum() && Instant::now() < deadline && Instant::now() < lease.deadline
        {
            return Ok(Some(RedlockLease {
                deadline,
                granted: extended,
                ..lease.clone()
            }));
        }
        Ok(None)
    }

    /// Delete the key on every server where it still holds this lease; returns on how many it
    /// did. Unreachable servers are skipped (their TTL frees them).
    pub async fn release(&self, lease: &RedlockLease) -> usize {
        self.on_all(&RELEASE, lease, std::slice::from_ref(&lease.value))
            .await
    }

    async fn on_all(
        &self,
        script: &'static Script,
        lease: &RedlockLease,
        args: &[String],
    ) -> usize {
        let keys = [lease.key.clone()];
        join_all(self.servers.iter().map(|s| {
            let keys = &keys;
            async move {
                matches!(
                    tokio::time::timeout(self.options.server_timeout, s.eval(script, keys, args))
                        .await,
                    Ok(Ok(Reply::Int(1)))
                )
            }
        }))
        .await
        .into_iter()
        .filter(|ok| *ok)
        .count()
    }
}

impl<S: Store> Redlock<S> {
    /// Blocking twin of [`try_acquire`](Self::try_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_acquire(&self, name: &str, ttl: Duration) -> Result<Option<RedlockLease>> {
        crate::blocking::block_on(
            self.servers.first().and_then(Store::runtime),
            "blocking_try_acquire",
            self.try_acquire(name, ttl),
        )
    }

    /// Blocking twin of [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_acquire(
        &self,
        name: &str,
        ttl: Duration,
        timeout: Duration,
    ) -> Result<Option<RedlockLease>> {
        crate::blocking::block_on(
            self.servers.first().and_then(Store::runtime),
            "blocking_acquire",
            self.acquire(name, ttl, timeout),
        )
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(
        &self,
        lease: &RedlockLease,
        ttl: Duration,
    ) -> Result<Option<RedlockLease>> {
        crate::blocking::block_on(
            self.servers.first().and_then(Store::runtime),
            "blocking_renew",
            self.renew(lease, ttl),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(&self, lease: &RedlockLease) -> usize {
        crate::blocking::block_on(
            self.servers.first().and_then(Store::runtime),
            "blocking_release",
            self.release(lease),
        )
    }
}

impl<S: Store> Redlock<S> {
    /// Whether `name` is held: a majority of the servers have its key (a server that does not
    /// answer within the server timeout counts as not having it).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a bad name.
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        let key = self.options.keyspace.key(name, ":redlock")?;
        let holding = join_all(self.servers.iter().map(|s| {
            let key = &key;
            async move {
                matches!(
                    tokio::time::timeout(self.options.server_timeout, s.get(key)).await,
                    Ok(Ok(Some(_)))
                )
            }
        }))
        .await
        .into_iter()
        .filter(|held| *held)
        .count();
        Ok(holding >= self.quorum())
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, name: &str) -> Result<bool> {
        crate::blocking::block_on(
            self.servers.first().and_then(Store::runtime),
            "blocking_is_locked",
            self.is_locked(name),
        )
    }
}
