//! The Tair-style expire lock.
//!
//! A lock is held iff its key exists; the key carries a server TTL, so an expired lock simply
//! disappears. [`ExpireLock::expire_lock`] succeeds only when the lock is not held and returns a
//! [`Lease`], the only credential that unlocks or renews it.
//!
//! # Key layout
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `<prefix>{name}` | string | `tl1:<expiry ms>:<fence>:<nonce>` | the lease (`PX ttl`) | `expire_lock`, `renew`; deleted by `expire_unlock`, `force_unlock` |
//! | `<prefix>{name}:fence` | string | last fencing token issued (decimal) | lease + fence retention (up to 1.5 × the retention after a watchdog's renewal) | `expire_lock`, `renew`, the watchdog |
//!
//! # States
//!
//! | lock key | meaning | `expire_lock` | `expire_unlock(lease)` | `renew(lease)` |
//! |---|---|---|---|---|
//! | absent (never set, released, or expired) | free | takes it: [`Acquire::Acquired`] | [`Unlock::NotHeld`] | [`Renew::NotHeld`] |
//! | our lease, equal to `lease` | held by the caller | [`Acquire::Held`] (or the same lease when retried with the same nonce) | [`Unlock::Released`] | [`Renew::Renewed`] |
//! | our lease, another value | held by someone else | [`Acquire::Held`] with the holder and its remaining time | [`Unlock::HeldByOther`] | [`Renew::HeldByOther`] |
//! | anything else (a user's string, hash, list, ...) | not ours | error, nothing changed | error, nothing changed | error, nothing changed |
//!
//! # Fencing
//!
//! Every acquisition returns a fencing token ([`Lease::fence`]) computed in the same script that
//! takes the lock: `max(last + 1, server time in µs)`. The last token is kept in the fence key
//! for the lease plus a retention period (default 60 s) and then forgotten, so storage stays
//! bounded: nothing is kept for a lock nobody uses. Monotonicity survives the fence key expiring
//! because tokens are anchored to the server clock: every token issued was at most "its issue
//! time in µs, plus the number of grants within that same microsecond", and a grant after the
//! fence key has expired happens at least the retention period later, so its time-based token is
//! larger. This holds as long as the server's clock does not step backwards by more than the
//! retention period (a backward step shorter than that is absorbed by the `last + 1` rule).

use std::time::Duration;

use crate::blocking;
use crate::deadline::Remaining;
use crate::error::{Error, Result};
use crate::keys::{Keyspace, LockKeys};
use crate::lease::{Lease, nonce};
use crate::script::{Packed, Reply, Script, array, unexpected};
use crate::scripts::{EXPIRE_LOCK, EXPIRE_UNLOCK, FORCE_UNLOCK, INSPECT, RENEW};
use crate::store::{Store, Ttl};

pub use crate::deadline::MAX_TTL;

/// The default waiter lease of the fair mode ([`Options::waiter_lease`]).
pub(crate) const WAITER_LEASE: Duration = Duration::from_secs(2);

/// Settings of an [`ExpireLock`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Key prefix (default `tairlock:`).
    pub keyspace: Keyspace,
    /// How long the last fencing token is kept after a lease ends, at least (default 60 s). A
    /// watchdog's batched renewal refreshes the fence key only when it would not outlive the
    /// lease by this, to 1.5 times this: the token is then kept up to 1.5 times this long.
    pub fence_retention: Duration,
    /// The lease of guards without an explicit lease time, renewed by the watchdog at a third
    /// of its length (default 30 s).
    pub watchdog_lease: Duration,
    /// How `lock` and `try_lock_for` wait for a busy lock (default: by notification).
    pub wait: crate::engine::WaitStrategy,
    /// Fair mode (default off): waiters queue on the server, first come first served, and a
    /// release hands the lock directly to the next one. See [`fair`](crate::fair).
    pub fair: bool,
    /// In fair mode, how long a waiter's place (and a grant made to it) lasts unless refreshed
    /// (default 2 s): a crashed waiter holds up the queue at most this long.
    pub waiter_lease: Duration,
    /// The bound on automatic renewal (default none): a watchdog never renews a guard's lease
    /// past this long after the guard was made (a renewal near the end asks only for the time
    /// left), so the lease runs out about `max_hold` after the acquisition and the guard is
    /// lost then ([`LockGuard::is_lost`](crate::LockGuard::is_lost),
    /// [`with_lock`](ExpireLock::with_lock) stops its critical section). Guards with an
    /// explicit lease have no watchdog and are not affected.
    pub max_hold: Option<Duration>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            keyspace: Keyspace::default(),
            fence_retention: Duration::from_secs(60),
            watchdog_lease: Duration::from_secs(30),
            wait: crate::engine::WaitStrategy::default(),
            fair: false,
            waiter_lease: WAITER_LEASE,
            max_hold: None,
        }
    }
}

impl Options {
    /// Use this keyspace.
    pub fn keyspace(mut self, keyspace: Keyspace) -> Self {
        self.keyspace = keyspace;
        self
    }

    /// Keep the last fencing token this long after a lease ends.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// The watchdog's lease length.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How to wait for a busy lock.
    pub fn wait(mut self, wait: crate::engine::WaitStrategy) -> Self {
        self.wait = wait;
        self
    }

    /// Fair mode on or off; see [`fair`](crate::fair).
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// The waiter lease of the fair mode.
    pub fn waiter_lease(mut self, lease: Duration) -> Self {
        self.waiter_lease = lease;
        self
    }

    /// Bound automatic renewal: see [`Options::max_hold`](Self#structfield.max_hold).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
}

/// The outcome of [`ExpireLock::expire_lock`]. Contention is an outcome, not an error.
#[must_use = "an acquired lease is the only way to unlock the lock"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Acquire {
    /// The lock is ours until the lease expires.
    Acquired(Lease),
    /// Someone else holds it.
    Held {
        /// The holder's lease.
        holder: Lease,
        /// How long until it expires unless renewed, as the server reported it: a waiter can
        /// sleep exactly this long. `None` when the lock key has no time to live (removed by
        /// `PERSIST`, or a restore without one): it is held until released or force-unlocked,
        /// and [`inspect`](ExpireLock::inspect) reports
        /// [`no_expiry`](Inspection::no_expiry).
        remaining: Option<Duration>,
    },
}

impl Acquire {
    /// The lease, if acquired.
    pub fn lease(self) -> Option<Lease> {
        match self {
            Acquire::Acquired(lease) => Some(lease),
            Acquire::Held { .. } => None,
        }
    }

    /// Whether the lock was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, Acquire::Acquired(_))
    }
}

/// The outcome of [`ExpireLock::expire_unlock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unlock {
    /// Our lease was deleted.
    Released,
    /// No lease is held (it expired, was released already, or never existed).
    NotHeld,
    /// Another lease holds the lock; nothing was deleted.
    HeldByOther,
}

/// The outcome of [`ExpireLock::renew`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    /// The new lease (same fence, new expiry, new nonce); the old one no longer matches.
    Renewed(Lease),
    /// No lease is held: ours expired.
    NotHeld,
    /// Another lease holds the lock: ours expired and someone else took it.
    HeldByOther,
}

/// A snapshot of one lock, from [`ExpireLock::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Inspection {
    /// The lock key.
    pub key: String,
    /// The lock key's Redis type (`none` when free).
    pub key_type: String,
    /// The holder's lease, when held.
    pub holder: Option<Lease>,
    /// The key holds something that is not one of our leases.
    pub foreign: bool,
    /// The lock key's time to live.
    pub ttl: Ttl,
    /// The lock key holds a lease but has no time to live ([`Ttl::Persistent`]: removed by
    /// `PERSIST`, or a restore without one): it never expires by itself, only a release or a
    /// force unlock frees it, and waiters back off as for a holder of unknown remaining time.
    pub no_expiry: bool,
    /// The last fencing token issued, while the fence state is retained.
    pub last_fence: Option<u64>,
}

/// Tair-style expiring locks on one store. See the [module docs](self).
///
/// Cheap to clone (it clones the store handle); one value serves any number of lock names.
///
/// # Examples
///
/// The single steps, on the embedded store (the guards are [`lock`](Self::lock),
/// [`with_lock`](Self::with_lock) and their `try_` variants):
///
/// ```
/// use std::time::Duration;
/// use tairlock::{ExpireLock, MemoryStore, Renew, Unlock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = ExpireLock::new(MemoryStore::new());
/// let ttl = Duration::from_secs(10);
/// let lease = locks.expire_lock("job", ttl).await?.lease().expect("nobody holds it");
/// assert!(locks.is_locked("job").await?);
/// let holder = locks.inspect("job").await?.holder.expect("held");
/// assert_eq!((holder.nonce(), holder.fence()), (lease.nonce(), lease.fence()));
///
/// // Renewing rotates the lease (same fencing token): keep the new one.
/// let Renew::Renewed(renewed) = locks.renew("job", &lease, ttl).await? else {
///     panic!("the lease was lost");
/// };
/// assert_eq!(renewed.fence(), lease.fence());
/// assert_eq!(locks.expire_unlock("job", &lease).await?, Unlock::HeldByOther);
/// assert_eq!(locks.expire_unlock("job", &renewed).await?, Unlock::Released);
/// assert_eq!(locks.expire_unlock("job", &renewed).await?, Unlock::NotHeld); // safe to repeat
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ExpireLock<S> {
    store: S,
    /// Shared by the clones (every guard keeps one).
    options: std::sync::Arc<Options>,
    pub(crate) local: std::sync::Arc<crate::engine::Waiters>,
    /// The watchdog of this handle's guards: one task renewing their leases in batches.
    pub(crate) renewer: std::sync::Arc<crate::guard::Renewer>,
}

impl<S: Store> ExpireLock<S> {
    /// Locks on `store` with default options.
    pub fn new(store: S) -> Self {
        ExpireLock::with_options(store, Options::default())
    }

    /// Locks on `store` with `options`.
    pub fn with_options(store: S, options: Options) -> Self {
        ExpireLock {
            store,
            options: std::sync::Arc::new(options),
            local: Default::default(),
            renewer: Default::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The command release scripts announce with on this store (see
    /// [`Store::pubsub`]).
    pub(crate) fn publish_command(&self) -> String {
        self.store.pubsub().publish_command().to_owned()
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// The keys of the lock `name`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for an empty name or one with
    /// braces.
    pub fn keys(&self, name: &str) -> Result<LockKeys> {
        self.options.keyspace.lock_keys(name)
    }

    /// Take the lock `name` for `ttl` if nobody holds it.
    ///
    /// One round trip. The expiry is computed from the server's clock.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput): empty name, TTL under 1 ms
    ///   or over [`MAX_TTL`]; nothing is sent.
    /// - [`ErrorKind::WrongType`](crate::ErrorKind::WrongType): the key holds data that is not
    ///   one of our locks; nothing is changed.
    /// - [`ErrorKind::Connection`](crate::ErrorKind::Connection) or
    ///   [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when no answer came after one repeat.
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after the request was sent, the server may still have granted
    /// the lock; nobody then holds the lease, and the server frees the lock when `ttl` passes.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tairlock::{Acquire, ExpireLock, MemoryStore, Unlock};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let locks = ExpireLock::new(MemoryStore::new());
    /// let Acquire::Acquired(lease) = locks.expire_lock("orders:42", Duration::from_secs(10)).await? else {
    ///     panic!("nobody else holds it");
    /// };
    /// assert!(!locks.expire_lock("orders:42", Duration::from_secs(10)).await?.is_acquired());
    /// assert_eq!(locks.expire_unlock("orders:42", &lease).await?, Unlock::Released);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn expire_lock(&self, name: &str, ttl: Duration) -> Result<Acquire> {
        self.expire_lock_with_nonce(name, ttl, nonce()).await
    }

    /// [`expire_lock`](Self::expire_lock) with a caller-chosen nonce: repeating a call with the
    /// same nonce returns the same lease if the first one took the lock.
    pub(crate) async fn expire_lock_with_nonce(
        &self,
        name: &str,
        ttl: Duration,
        nonce: String,
    ) -> Result<Acquire> {
        let keys = self.keys(name)?;
        let ttl_ms = ttl_ms(ttl)?;
        let args = [ttl_ms.to_string(), nonce, self.retention_ms()];
        let sent = tokio::time::Instant::now();
        let reply = self
            .eval_retrying(&EXPIRE_LOCK, &keys.both(), &args)
            .await?;
        decode_acquire(&reply, sent)
    }

    /// The keys and `ARGV` of one [`EXPIRE_LOCK`] call, after validating `name` and `ttl`.
    pub(crate) fn acquire_request(
        &self,
        name: &str,
        ttl: Duration,
        nonce: String,
    ) -> Result<([String; 2], [String; 3])> {
        let keys = self.keys(name)?;
        let ttl_ms = ttl_ms(ttl)?;
        Ok((
            keys.both(),
            [ttl_ms.to_string(), nonce, self.retention_ms()],
        ))
    }

    /// The keys and `ARGV` of one [`EXPIRE_UNLOCK`] call for `lease`, after validating `name`.
    /// Every release of an expire lease builds its request here, so the release-channel
    /// arguments are the same everywhere.
    pub(crate) fn unlock_request(
        &self,
        name: &str,
        lease: &Lease,
    ) -> Result<([String; 1], [String; 3])> {
        let keys = self.keys(name)?;
        Ok((
            [keys.lock],
            [
                lease.value().to_owned(),
                keys.channel,
                self.publish_command(),
            ],
        ))
    }

    /// The keys and `ARGV` of one [`RENEW`] call, after validating `name` and `ttl`; `nonce` is
    /// the renewed lease's (repeating a call with the same nonce is idempotent).
    pub(crate) fn renew_request(
        &self,
        name: &str,
        lease: &Lease,
        ttl: Duration,
        nonce: String,
    ) -> Result<([String; 2], [String; 4])> {
        let keys = self.keys(name)?;
        let ttl_ms = ttl_ms(ttl)?;
        Ok((
            keys.both(),
            [
                lease.value().to_owned(),
                ttl_ms.to_string(),
                nonce,
                self.retention_ms(),
            ],
        ))
    }
}

/// Decode an [`EXPIRE_UNLOCK`] reply.
pub(crate) fn decode_unlock(reply: &Reply) -> Result<Unlock> {
    match reply.as_int() {
        Some(1) => Ok(Unlock::Released),
        Some(0) => Ok(Unlock::HeldByOther),
        Some(-1) => Ok(Unlock::NotHeld),
        _ => Err(unexpected(&EXPIRE_UNLOCK, reply)),
    }
}

/// Decode a [`RENEW`] reply for a request first sent at `sent`: the renewed lease is dated from
/// `sent` and the time it has left as the reply reports it.
pub(crate) fn decode_renew(reply: &Reply, sent: tokio::time::Instant) -> Result<Renew> {
    let items = array(reply, &RENEW)?;
    match items.first().and_then(Reply::as_int) {
        Some(1) => Ok(Renew::Renewed(
            lease_at(items, 1, &RENEW)?.dated(sent, Remaining::at(items, 2, &RENEW)?),
        )),
        Some(0) => Ok(Renew::HeldByOther),
        Some(-1) => Ok(Renew::NotHeld),
        _ => Err(unexpected(&RENEW, reply)),
    }
}

/// Decode an [`EXPIRE_LOCK`] reply for a request sent at `sent`: a lease granted (or found
/// granted, by a repeat) is dated from `sent` and the time it has left as the reply reports it.
pub(crate) fn decode_acquire(reply: &Reply, sent: tokio::time::Instant) -> Result<Acquire> {
    let items = array(reply, &EXPIRE_LOCK)?;
    match items.first().and_then(Reply::as_int) {
        Some(1) => Ok(Acquire::Acquired(
            lease_at(items, 1, &EXPIRE_LOCK)?.dated(sent, Remaining::at(items, 2, &EXPIRE_LOCK)?),
        )),
        Some(0) => Ok(Acquire::Held {
            holder: lease_at(items, 1, &EXPIRE_LOCK)?,
            remaining: busy_remaining(items, 2),
        }),
        _ => Err(unexpected(&EXPIRE_LOCK, reply)),
    }
}

/// The holder's time left in a busy answer, element `i`: `None` when the server could not say
/// (the key has no time to live: `PTTL` −1), never zero for that, which would have a waiter try
/// again at once, forever.
pub(crate) fn busy_remaining(items: &[Reply], i: usize) -> Option<Duration> {
    items
        .get(i)
        .and_then(Reply::as_int)
        .and_then(Remaining::from_server_ms)
        .map(Remaining::get)
}

impl<S: Store> ExpireLock<S> {
    /// Delete the lock `name` only if it holds exactly `lease`.
    ///
    /// One round trip: the [`EXPIRE_UNLOCK`] script, or on a server with `DELIFEQ` (Valkey 9+)
    /// that command, with the same outcomes (see [`Store::compare_and_delete`]; a release that
    /// finds the lock not held by `lease` costs a second round trip there). Safe to repeat: a retried unlock reports
    /// [`Unlock::NotHeld`] and deletes nothing. An expired holder can never delete a later
    /// holder's lock.
    ///
    /// # Errors
    ///
    /// As [`expire_lock`](Self::expire_lock).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the lock; the TTL frees it in any case.
    pub async fn expire_unlock(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        if self.options.fair {
            return self.fair_unlock(name, lease).await;
        }
        let (keys, args) = self.unlock_request(name, lease)?;
        // The store's compare-and-delete: the script, or `DELIFEQ` where the server has it (see
        // `Store::compare_and_delete`); either is safe to repeat after no answer.
        let reply = match self.store.compare_and_delete(&keys, &args).await {
            Err(e) if e.is_unanswered() => self.store.compare_and_delete(&keys, &args).await,
            other => other,
        }?;
        decode_unlock(&reply)
    }

    /// Extend a held lease to `ttl` from now (server time). The lease rotates: the returned one
    /// replaces `lease`, which no longer matches. The fencing token stays the same.
    ///
    /// # Errors
    ///
    /// As [`expire_lock`](Self::expire_lock).
    ///
    /// # Cancel safety
    ///
    /// If the future is dropped after sending, the lock may hold a lease the caller never saw;
    /// the old lease then no longer matches and the lock frees itself after `ttl`.
    pub async fn renew(&self, name: &str, lease: &Lease, ttl: Duration) -> Result<Renew> {
        let (keys, args) = self.renew_request(name, lease, ttl, nonce())?;
        let sent = tokio::time::Instant::now();
        let reply = self.eval_retrying(&RENEW, &keys, &args).await?;
        decode_renew(&reply, sent)
    }

    /// [`renew`](Self::renew) as `attempt`: its nonce, its length, and a deadline dated from
    /// its first send (a repeat may find the renewal applied then) and the time the lease has
    /// left as the answer reports it.
    pub(crate) async fn renew_attempt(
        &self,
        name: &str,
        lease: &Lease,
        attempt: &crate::guard::RenewalAttempt,
    ) -> Result<Renew> {
        let (keys, args) = self.renew_request(name, lease, attempt.ttl, attempt.nonce.clone())?;
        let reply = self.eval_retrying(&RENEW, &keys, &args).await?;
        decode_renew(&reply, attempt.sent)
    }

    /// Read the lock's state in one atomic snapshot: holder, remaining time, last fence.
    ///
    /// # Errors
    ///
    /// Invalid name; connection errors.
    pub async fn inspect(&self, name: &str) -> Result<Inspection> {
        let keys = self.keys(name)?;
        let reply = self.eval_retrying(&INSPECT, &keys.both(), &[]).await?;
        let items = array(&reply, &INSPECT)?;
        let text = |i: usize| items.get(i).and_then(Reply::as_str).map(str::to_owned);
        let key_type = text(0).ok_or_else(|| unexpected(&INSPECT, &reply))?;
        let value = text(1);
        let holder = value.as_deref().and_then(Lease::parse);
        let ttl = Ttl::from_pttl(items.get(2).and_then(Reply::as_int).unwrap_or(-2));
        Ok(Inspection {
            key: keys.lock,
            foreign: key_type != "none" && holder.is_none(),
            no_expiry: holder.is_some() && ttl == Ttl::Persistent,
            key_type,
            holder,
            ttl,
            last_fence: text(3).and_then(|f| f.parse().ok()),
        })
    }

    /// Whether the lock `name` is held by anyone (one atomic read; an expired lease is not
    /// held).
    ///
    /// # Errors
    ///
    /// Invalid name; [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when the key holds
    /// data that is not one of our leases; connection errors.
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        let inspection = self.inspect(name).await?;
        if inspection.foreign {
            return Err(Error::new(
                crate::ErrorKind::WrongType,
                format!(
                    "{} holds a {} that is not a tairlock lease",
                    inspection.key, inspection.key_type
                ),
            ));
        }
        Ok(inspection.holder.is_some())
    }

    /// Delete the lock whoever holds it, for operators. Dangerous: the holder is not told and
    /// keeps running its critical section; only fencing protects the resource then.
    ///
    /// Returns whether a lock was deleted.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::WrongType`](crate::ErrorKind::WrongType) when the key holds anything but one
    /// of our leases: a user's data is never deleted. When no reply came
    /// ([`Error::is_unanswered`]) the lock may or may not have been deleted, and the call is
    /// **not** repeated: a repeat could delete the lock of the next holder, who may have taken
    /// it in between. Look with [`inspect`](Self::inspect) before deciding to force again.
    pub async fn force_unlock(&self, name: &str) -> Result<bool> {
        let keys = self.keys(name)?;
        // Never repeated (see above): the one script that deletes whoever holds the lock.
        // With the fair mode's grant record: a grant not confirmed yet is revoked (see `fair`).
        let grant = keys.grant();
        let reply = self
            .store
            .eval(
                &FORCE_UNLOCK,
                &[keys.lock, grant],
                &[keys.channel, self.publish_command()],
            )
            .await?;
        match reply.as_int() {
            Some(1) => Ok(true),
            Some(-1) => Ok(false),
            _ => Err(unexpected(&FORCE_UNLOCK, &reply)),
        }
    }

    /// Blocking twin of [`expire_lock`](Self::expire_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_expire_lock(&self, name: &str, ttl: Duration) -> Result<Acquire> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_expire_lock",
            self.expire_lock(name, ttl),
        )
    }

    /// Blocking twin of [`expire_unlock`](Self::expire_unlock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_expire_unlock(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_expire_unlock",
            self.expire_unlock(name, lease),
        )
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(&self, name: &str, lease: &Lease, ttl: Duration) -> Result<Renew> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_renew",
            self.renew(name, lease, ttl),
        )
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, name: &str) -> Result<bool> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_is_locked",
            self.is_locked(name),
        )
    }

    /// Blocking twin of [`force_unlock`](Self::force_unlock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_force_unlock(&self, name: &str) -> Result<bool> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_force_unlock",
            self.force_unlock(name),
        )
    }

    /// Blocking twin of [`inspect`](Self::inspect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_inspect(&self, name: &str) -> Result<Inspection> {
        blocking::block_on(self.store.runtime(), "blocking_inspect", self.inspect(name))
    }

    pub(crate) fn retention_ms(&self) -> String {
        (self
            .options
            .fence_retention
            .as_millis()
            .min(MAX_TTL.as_millis()) as u64)
            .to_string()
    }

    /// Every script sent through here is safe to repeat (nonces make acquire and renew
    /// idempotent; unlock is compare-and-delete; inspect only reads), so one repeat after no
    /// answer (a dropped connection or a timeout: the script may have run) is harmless.
    /// [`force_unlock`](Self::force_unlock) is not: it never comes here.
    pub(crate) async fn eval_retrying(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        match self.store.eval(script, keys, args).await {
            Err(e) if e.is_unanswered() => self.store.eval(script, keys, args).await,
            other => other,
        }
    }

    /// [`eval_retrying`](Self::eval_retrying) with packed keys and arguments.
    pub(crate) async fn eval_packed_retrying(
        &self,
        script: &'static Script,
        keys: &Packed,
        args: &Packed,
    ) -> Result<Reply> {
        match self.store.eval_packed(script, keys, args).await {
            Err(e) if e.is_unanswered() => self.store.eval_packed(script, keys, args).await,
            other => other,
        }
    }
}

/// Check a lease length (at least 1 ms, at most [`MAX_TTL`]) and return it in whole
/// milliseconds, rounded up.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) outside those bounds.
pub fn ttl_ms(ttl: Duration) -> Result<u64> {
    if ttl < Duration::from_millis(1) {
        return Err(Error::invalid(format!("ttl {ttl:?} is shorter than 1 ms")));
    }
    if ttl > MAX_TTL {
        return Err(Error::invalid(format!(
            "ttl {ttl:?} is longer than the maximum of {MAX_TTL:?}"
        )));
    }
    // Round up: a lease never ends before the caller asked.
    Ok(ttl.as_micros().div_ceil(1000) as u64)
}

/// Element `i` of `script`'s array reply as a [`Lease`]: how every script that grants or reports
/// a lease answers it (the expire lock's, and the rwlock's writer lease).
///
/// # Errors
///
/// [`ErrorKind::Server`](crate::ErrorKind::Server) when the element is missing or not a lease.
pub fn lease_at(items: &[Reply], i: usize, script: &Script) -> Result<Lease> {
    items
        .get(i)
        .and_then(Reply::as_str)
        .and_then(Lease::parse)
        .ok_or_else(|| {
            Error::new(
                crate::ErrorKind::Server,
                format!("{} returned a malformed lease", script.name()),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ttl_is_validated_and_rounded_up() {
        assert!(ttl_ms(Duration::ZERO).unwrap_err().is_invalid_input());
        assert!(
            ttl_ms(Duration::from_micros(999))
                .unwrap_err()
                .is_invalid_input()
        );
        assert!(
            ttl_ms(MAX_TTL + Duration::from_millis(1))
                .unwrap_err()
                .is_invalid_input()
        );
        assert!(ttl_ms(Duration::MAX).unwrap_err().is_invalid_input());
        assert_eq!(ttl_ms(Duration::from_micros(1500)).unwrap(), 2);
        assert_eq!(ttl_ms(Duration::from_secs(30)).unwrap(), 30_000);
    }
}
