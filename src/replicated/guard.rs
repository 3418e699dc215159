//! The guard of a replica-acknowledged lock, and its watchdog.
//!
//! Separate from [`LockGuard`](crate::LockGuard) because validity is judged differently: a
//! `LockGuard`'s lease is valid until the deadline of its last renewal, a replicated guard's
//! until the deadline of its last *acknowledged* renewal. A renewal the master applied but the
//! replicas did not acknowledge moves the lease (the master has a new value) without moving that
//! deadline.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;

use super::{ReplicatedAcquire, ReplicatedLock, ReplicatedRelease, ReplicatedRenew};
use crate::error::Result;
use crate::guard::{Liveness, Renewal};
use crate::lease::Lease;
use crate::observe::{Hold, ReleaseOutcome};
use crate::store::ReplicaStore;

struct Shared<S: ReplicaStore> {
    lock: ReplicatedLock<S>,
    name: String,
    ttl: Duration,
    /// The lease in effect on the master. Its deadline is the end of the last *acknowledged*
    /// validity: an unacknowledged renewal replaces the value and keeps the deadline.
    lease: Mutex<Lease>,
    /// Lost, or past the last acknowledged validity.
    live: Liveness,
}

impl<S: ReplicaStore> Shared<S> {
    fn current(&self) -> Lease {
        self.lease.lock().clone()
    }

    /// Take a renewed `lease` as the lease in effect (see [`Liveness::renewed`]).
    fn adopt(&self, lease: Lease) -> Renewal {
        let renewal = self.live.renewed(lease.deadline());
        *self.lease.lock() = lease;
        renewal
    }

    /// One renewal with the renewal lock held: the pending one if its reply was lost (same
    /// nonce, dated from its first send), else a new one, waiting for `wait_for`.
    async fn renew(&self, wait_for: crate::store::WaitFor) -> Result<ReplicatedRenew> {
        let current = self.current();
        let attempt = self.live.renewal_attempt(self.ttl);
        let outcome = self
            .lock
            .renew_attempt(&self.name, &current, &attempt, wait_for, true)
            .await;
        self.live.renewal_outcome(&outcome);
        outcome
    }

    /// Stop renewing and give the lease back; `background` for a dropped guard's release.
    async fn release(&self, background: bool) -> Result<ReplicatedRelease> {
        self.live.stop_watchdog().await;
        if self.live.pending_renewal().is_some() {
            // A renewal whose reply was lost may have rotated the lease: learn the lease in
            // effect (one repeat, same nonce), so the release deletes it rather than missing.
            let _in_flight = self.live.renewing().await;
            let mut wait_for = self.lock.wait_for();
            wait_for.replicas = 0;
            if let Ok(
                ReplicatedRenew::Renewed { lease, .. }
                | ReplicatedRenew::NotAcknowledged { lease, .. },
            ) = self.renew(wait_for).await
            {
                let lease = lease.with_deadline_of(&self.current());
                *self.lease.lock() = lease;
            }
        }
        let lease = self.current();
        let outcome = self.lock.release(&self.name, &lease).await;
        self.live.mark_lost();
        self.live.released(
            match &outcome {
                Ok(
                    ReplicatedRelease::Released { .. } | ReplicatedRelease::NotAcknowledged { .. },
                ) => ReleaseOutcome::Released,
                Ok(_) => ReleaseOutcome::NotHeld,
                Err(e) => ReleaseOutcome::Failed(e),
            },
            background,
        );
        outcome
    }
}

async fn watchdog<S: ReplicaStore>(shared: Arc<Shared<S>>) {
    let shared = &shared;
    shared
        .live
        .watchdog(shared.ttl / 3, || async move {
            let current = shared.current();
            let left = current.remaining().unwrap_or(Duration::ZERO);
            if left.is_zero() {
                return Renewal::Lost;
            }
            // An acknowledgement that arrives after the acknowledged validity has ended comes
            // too late to keep the guard: wait for replicas no longer than that.
            let mut wait_for = shared.lock.wait_for();
            wait_for.timeout = wait_for.timeout.min(left);
            match shared.renew(wait_for).await {
                Ok(ReplicatedRenew::Renewed { lease, .. }) => shared.adopt(lease),
                // The master has the new lease, the replicas may still have the old expiry (or a
                // repeat found a renewal whose reply was lost, and its WAIT proved nothing): take
                // the new value (the old one no longer matches on the master), keep the
                // acknowledged deadline, and try again before it passes.
                Ok(ReplicatedRenew::NotAcknowledged { lease, .. }) => {
                    match shared.adopt(lease.with_deadline_of(&current)) {
                        Renewal::Lost => Renewal::Lost,
                        _ => Renewal::Retry,
                    }
                }
                Ok(ReplicatedRenew::NotHeld | ReplicatedRenew::HeldByOther) => Renewal::Lost,
                // No answer: repeated with the same nonce until one comes or the acknowledged
                // validity ends.
                Err(_) => Renewal::Retry,
            }
        })
        .await;
}

/// A held replica-acknowledged lock, from [`ReplicatedLock::try_lock`]. See the
/// [module docs](super).
///
/// A watchdog renews the lease every third of its length with acknowledged renewals
/// ([`ReplicatedLock::renew`]). The guard counts as held only while the last acknowledged
/// renewal is valid ([`lease().deadline()`](Lease::deadline)); it is **lost** when a renewal
/// finds the lease gone, or when no renewal was acknowledged by the required replicas before
/// that validity ended — even though the lock key may still exist on the master, renewed there
/// without the replicas. Once lost, it stays lost and the watchdog stops.
///
/// Release it with [`release`](Self::release) to learn whether the release reached the
/// replicas. Dropping it releases in the background (it never blocks); if that cannot be done,
/// the lease's TTL frees the lock.
///
/// # Examples
///
/// See [`ReplicatedLock::try_lock`].
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct ReplicatedGuard<S: ReplicaStore> {
    shared: Arc<Shared<S>>,
    armed: bool,
}

impl<S: ReplicaStore> fmt::Debug for ReplicatedGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplicatedGuard")
            .field("name", &self.shared.name)
            .field("lease", &self.shared.current())
            .field("wait_for", &self.shared.lock.wait_for())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<S: ReplicaStore> ReplicatedGuard<S> {
    /// Wrap an acknowledged lease and start its watchdog (renewing to `ttl` every `ttl / 3`).
    fn new(lock: ReplicatedLock<S>, name: &str, lease: Lease, ttl: Duration) -> Self {
        let shared = Arc::new(Shared {
            lock,
            name: name.to_owned(),
            ttl,
            live: Liveness::new(lease.deadline()).observed(Hold::new(
                "replicated",
                name,
                Some(lease.fence()),
            )),
            lease: Mutex::new(lease),
        });
        let handle = crate::blocking::spawn_handle(shared.lock.locks().store().runtime())
            .spawn(watchdog(shared.clone()))
            .abort_handle();
        shared.live.set_watchdog(handle);
        ReplicatedGuard {
            shared,
            armed: true,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The lease in effect on the master (it rotates with every renewal, acknowledged or not).
    /// Its [`deadline`](Lease::deadline) is the end of the last *acknowledged* validity.
    pub fn lease(&self) -> Lease {
        self.shared.current()
    }

    /// The fencing token of this holding: pass it with every write to the protected resource.
    pub fn fence(&self) -> u64 {
        self.shared.current().fence()
    }

    /// Whether the guard is lost: a renewal found the lease gone, or no renewal was
    /// acknowledged by the required replicas before the acknowledged validity ended. Once true,
    /// stays true.
    pub fn is_lost(&self) -> bool {
        self.shared.live.is_lost()
    }

    /// Resolves when the guard is lost (see [`is_lost`](Self::is_lost)): at the latest when the
    /// acknowledged validity ends, whatever the watchdog is doing.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.shared.live.lost().await;
    }

    /// Stop the watchdog, release the lock, and wait for the replicas to acknowledge the
    /// release ([`ReplicatedLock::release`]).
    ///
    /// Returns [`ReplicatedRelease::Released`] when the required replicas acknowledged it,
    /// [`ReplicatedRelease::NotAcknowledged`] when only the master is known to have freed the
    /// lock, and [`NotHeld`](ReplicatedRelease::NotHeld)/[`HeldByOther`](ReplicatedRelease::HeldByOther)
    /// when the lease had been lost. Waits for a renewal in flight first (up to the wait's
    /// timeout), so the lease released is the current one.
    ///
    /// # Errors
    ///
    /// As [`ReplicatedLock::release`]; the TTL frees the lock then.
    ///
    /// # Cancel safety
    ///
    /// If dropped midway the lock may stay held until its TTL (at most one renewal interval
    /// plus the lease, since the watchdog is stopped first).
    pub async fn release(mut self) -> Result<ReplicatedRelease> {
        self.armed = false;
        self.shared.release(false).await
    }
}

impl<S: ReplicaStore> Drop for ReplicatedGuard<S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Release in the background: stop the watchdog (after any renewal in flight, so the
        // lease released is the current one), then compare-and-delete and wait for replicas.
        let shared = self.shared.clone();
        crate::blocking::spawn_handle(self.shared.lock.locks().store().runtime()).spawn(
            async move {
                let _ = shared.release(true).await;
            },
        );
    }
}

impl<S: ReplicaStore> ReplicatedGuard<S> {
    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(self) -> Result<ReplicatedRelease> {
        let runtime = self.shared.lock.locks().store().runtime();
        crate::blocking::block_on(runtime, "blocking_release", self.release())
    }
}

// The guard-returning calls of the lock: here, with the guard they make.
impl<S: ReplicaStore> ReplicatedLock<S> {
    /// [`acquire`](Self::acquire), and wrap an acknowledged lease in a [`ReplicatedGuard`] whose
    /// watchdog keeps it with acknowledged renewals every `ttl / 3`; any other outcome
    /// ([`Held`](ReplicatedAcquire::Held), [`NotAcknowledged`](ReplicatedAcquire::NotAcknowledged))
    /// comes back as `Err`.
    ///
    /// Choose the wait's timeout well under `ttl / 3`, so a lagging replica delays a renewal
    /// without eating the lease.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire): a dropped call may leave a grant nobody holds (no guard,
    /// no watchdog), freed by its TTL.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tairlock::store::WaitFor;
    /// use tairlock::{ExpireLock, RedisStore, ReplicatedLock};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> tairlock::Result<()> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let locks = ReplicatedLock::new(
    ///     ExpireLock::new(store),
    ///     WaitFor::replicas(1, Duration::from_millis(200)),
    /// );
    /// match locks.try_lock("job", Duration::from_secs(30)).await? {
    ///     Ok(guard) => {
    ///         tokio::select! {
    ///             () = guard.lost() => eprintln!("replicas stopped acknowledging: stop writing"),
    ///             () = async { /* the critical section, passing guard.fence() along */ } => {}
    ///         }
    ///         guard.release().await?;
    ///     }
    ///     Err(refused) => println!("not taken: {refused:?}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn try_lock(
        &self,
        name: &str,
        ttl: Duration,
    ) -> Result<std::result::Result<ReplicatedGuard<S>, ReplicatedAcquire>> {
        Ok(match self.acquire(name, ttl).await? {
            ReplicatedAcquire::Acquired { lease, .. } => {
                Ok(ReplicatedGuard::new(self.clone(), name, lease, ttl))
            }
            refused => Err(refused),
        })
    }

    /// Blocking twin of [`try_lock`](Self::try_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock(
        &self,
        name: &str,
        ttl: Duration,
    ) -> Result<std::result::Result<ReplicatedGuard<S>, ReplicatedAcquire>> {
        crate::blocking::block_on(
            self.locks().store().runtime(),
            "blocking_try_lock",
            self.try_lock(name, ttl),
        )
    }
}
