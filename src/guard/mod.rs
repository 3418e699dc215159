//! RAII guards for the expire lock, and the watchdog that renews their leases.
//!
//! A [`LockGuard`] owns one lease. Without an explicit lease time the guard's lease is renewed
//! by a **watchdog** at a third of its length for as long as the guard lives, until release or
//! drop. The guards of one [`ExpireLock`] handle (and its clones) share one watchdog task on the
//! store's runtime, which renews every lease due within a short window in batches, one script
//! call per batch of up to 256 leases (per hash slot on a cluster): holding many locks costs a
//! few calls a second, not one per lease. Each lease's outcome in a batch is its own guard's
//! only; fair-mode guards are renewed the same way, except a lease handed over by a fair
//! release, which a task of its own confirms at once (and then renews). A renewal whose reply
//! does not come (a timeout, a dropped
//! connection) may have been applied: it is repeated with the same nonce until an answer comes,
//! so a slow server never makes a live holder give up. When a renewal finds the lease gone (it
//! expired, or someone force-unlocked it) or no renewal is answered before the lease's local
//! deadline, the guard is marked lost: [`LockGuard::is_lost`] turns true and [`LockGuard::lost`] resolves, so the
//! critical section can stop ([`ExpireLock::with_lock`](crate::ExpireLock::with_lock) does this
//! for you).
//!
//! Each renewal, a failed renewal, a loss with its reason and the release (with the time held)
//! are reported through [`observe`](crate::observe): `tracing` events (a loss, a failed renewal
//! and a failed background release are warnings) and, with the `metrics` feature, metrics.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::{ExpireLock, Renew, Unlock};
use crate::lease::Lease;
use crate::observe::{Hold, Loss, ReleaseOutcome};
use crate::store::Store;

mod batch;
mod liveness;
mod queue;

pub(crate) use self::queue::Renewer;

pub use self::liveness::{Liveness, Renewal, RenewalAttempt};

pub(crate) struct Shared<S> {
    locks: ExpireLock<S>,
    name: String,
    ttl: Duration,
    lease: Mutex<Lease>,
    live: Liveness,
    renews: bool,
    /// Until when the lock's fence key lasts at least, dated by the [deadline
    /// rule](crate::deadline) from the batched renewal that refreshed it last; `None` before
    /// one did. The batched watchdog asks a renewal to refresh the fence key only when it might
    /// not outlive the renewed lease by the retention.
    fence_until: Mutex<Option<Instant>>,
}

impl<S: Store> Shared<S> {
    fn current(&self) -> Lease {
        self.lease.lock().clone()
    }

    /// How long to wait before trying again after a renewal that did not count.
    fn retry_pause(&self) -> Duration {
        self.live.retry_pause(self.ttl / 3)
    }

    /// Take a renewed `lease` as the lease in effect (see [`Liveness::renewed`]).
    fn adopt(&self, lease: Lease) -> Renewal {
        let renewal = self.live.renewed(lease.deadline());
        *self.lease.lock() = lease;
        renewal
    }

    /// Take the renewal a batch's answer reports (`expiry`, `remaining`, for the attempt with
    /// `nonce` first sent at `sent`) as the lease in effect, rewriting the lease in place
    /// ([`Lease::renew_in_place`]); as [`adopt`](Self::adopt) does with a whole lease.
    fn adopt_renewal(
        &self,
        expiry: u64,
        nonce: &str,
        sent: Instant,
        remaining: crate::deadline::Remaining,
    ) -> Renewal {
        let deadline = {
            let mut lease = self.lease.lock();
            lease.renew_in_place(expiry, nonce, sent, remaining);
            lease.deadline()
        };
        self.live.renewed(deadline)
    }

    /// One renewal to `ttl`: the pending one if a reply was lost (same nonce), else a new one.
    /// Call with the renewal lock held. Returns the attempt's length and outcome.
    async fn renew(&self, ttl: Duration) -> (Duration, Result<Renew>) {
        let current = self.current();
        let attempt = self.live.renewal_attempt(ttl);
        let outcome = self
            .locks
            .renew_attempt(&self.name, &current, &attempt)
            .await;
        self.live.renewal_outcome(&outcome);
        (attempt.ttl, outcome)
    }

    /// Stop renewing and give the lease back; `background` for a dropped guard's release.
    async fn release(&self, background: bool) -> Result<Unlock> {
        self.live.stop_watchdog().await;
        if let Some(attempt) = self.live.pending_renewal() {
            // A renewal whose reply was lost may have rotated the lease: learn the lease in
            // effect (one repeat, same nonce), so the release deletes it rather than missing.
            let _in_flight = self.live.renewing().await;
            if let (_, Ok(Renew::Renewed(lease))) = self.renew(attempt.ttl).await {
                let _ = self.adopt(lease);
            }
        }
        let lease = self.current();
        let outcome = self.locks.expire_unlock(&self.name, &lease).await;
        self.live.mark_lost();
        self.live.released(
            match &outcome {
                Ok(Unlock::Released) => ReleaseOutcome::Released,
                Ok(_) => ReleaseOutcome::NotHeld,
                Err(e) => ReleaseOutcome::Failed(e),
            },
            background,
        );
        outcome
    }
}

/// Renew the guard's lease: at a third of its length with a watchdog; with `confirm` (a lease
/// handed over by a fair grant announcement, which lasts only the waiter lease) first at once,
/// to the full length, and then no more without a watchdog.
async fn watchdog<S: Store>(shared: Arc<Shared<S>>, confirm: bool) {
    let shared = &shared;
    let interval = shared.ttl / 3;
    let first = if confirm { Duration::ZERO } else { interval };
    shared
        .live
        .watchdog_after(first, interval, || async move {
            // Past `Options::max_hold`, renew no more; before it, never past it.
            let Some(ttl) = shared.live.capped_ttl(shared.ttl) else {
                return Renewal::Stop;
            };
            match shared.renew(ttl).await.1 {
                Ok(Renew::Renewed(lease)) => match shared.adopt(lease) {
                    // Confirmed; a guard without a watchdog renews no more.
                    Renewal::Renewed if !shared.renews => Renewal::Stop,
                    other => other,
                },
                Ok(Renew::NotHeld) => {
                    shared.live.lose(Loss::Gone);
                    Renewal::Lost
                }
                Ok(Renew::HeldByOther) => {
                    shared.live.lose(Loss::HeldByOther);
                    Renewal::Lost
                }
                // No answer: repeated with the same nonce until one comes or the deadline
                // passes. A refusal (an error reply): tried again the same way.
                Err(_) => Renewal::Retry,
            }
        })
        .await;
}

/// A held expire lock. See the [module docs](self).
///
/// Release it with [`release`](Self::release) to learn the outcome. Dropping it releases in the
/// background (it never blocks); if that cannot be done, the lease's TTL frees the lock.
///
/// # Examples
///
/// Stop the work when the lease is lost (here, force-unlocked behind the holder's back):
///
/// ```
/// use std::time::Duration;
/// use tairlock::{ExpireLock, MemoryStore, Unlock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = ExpireLock::new(MemoryStore::new());
/// let guard = locks.lock_with_lease("job", Duration::from_millis(300), None).await?.unwrap();
/// locks.force_unlock("job").await?;
/// let work = tokio::time::sleep(Duration::from_secs(60)); // the critical section
/// tokio::select! {
///     () = guard.lost() => {} // a fixed lease: lost when it runs out, at the latest
///     () = work => panic!("ran on without the lock"),
/// }
/// assert!(guard.is_lost());
/// assert_eq!(guard.release().await?, Unlock::NotHeld);
/// # Ok(())
/// # }
/// ```
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct LockGuard<S: Store> {
    shared: Arc<Shared<S>>,
    armed: bool,
}

impl<S: Store> fmt::Debug for LockGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockGuard")
            .field("name", &self.shared.name)
            .field("lease", &self.shared.current())
            .field("watchdog", &self.shared.renews)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<S: Store> LockGuard<S> {
    /// Wrap an acquired lease; with `watchdog`, start renewing it at a third of `ttl`.
    pub(crate) fn new(
        locks: ExpireLock<S>,
        name: &str,
        lease: Lease,
        ttl: Duration,
        watchdog_on: bool,
    ) -> Self {
        let kind = if locks.options().fair {
            "fair"
        } else {
            "expire"
        };
        let shared = Arc::new(Shared {
            name: name.to_owned(),
            ttl,
            live: Liveness::new(lease.deadline()).observed(Hold::new(
                kind,
                name,
                Some(lease.fence()),
            )),
            locks,
            lease: Mutex::new(lease),
            renews: watchdog_on,
            fence_until: Mutex::new(None),
        });
        // A lease a fair grant announcement handed over lasts only the waiter lease until
        // confirmed: renew it to the full length at once (see `fair`).
        let confirm = shared.current().is_unconfirmed();
        if watchdog_on && let Some(max_hold) = shared.locks.options().max_hold {
            shared
                .live
                .renew_until(tokio::time::Instant::now() + max_hold);
        }
        if watchdog_on && !confirm {
            // The expire lock's leases, plain and fair, are renewed in batches by the lock
            // handle's one watchdog (see `batch`); a lease handed over unconfirmed is confirmed
            // at once by a task of its own, which then renews it.
            let due = tokio::time::Instant::now() + ttl / 3;
            shared.locks.renewer.schedule(&shared, due);
        } else if watchdog_on || confirm {
            let handle = crate::blocking::spawn_handle(shared.locks.store().runtime())
                .spawn(watchdog(shared.clone(), confirm))
                .abort_handle();
            shared.live.set_watchdog(handle);
        }
        LockGuard {
            shared,
            armed: true,
        }
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// The current lease (it rotates with every renewal).
    pub fn lease(&self) -> Lease {
        self.shared.current()
    }

    /// The fencing token of this holding: pass it with every write to the protected resource.
    pub fn fence(&self) -> u64 {
        self.shared.current().fence()
    }

    /// Whether the watchdog renews this lease.
    pub fn is_renewed(&self) -> bool {
        self.shared.renews
    }

    /// Whether the lease is lost: a renewal found it gone, or (without a watchdog, or with the
    /// server unreachable) its local deadline has passed. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        // With a working watchdog the deadline keeps moving forward; a passed deadline means no
        // renewal landed in time.
        self.shared.live.is_lost()
    }

    /// Resolves when the lease is lost (see [`is_lost`](Self::is_lost)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.shared.live.lost().await;
    }

    /// Renew now, to `ttl` from now (the watchdog, if any, keeps its own interval).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] when the lease is gone; store errors. When no reply came
    /// ([`Error::is_unanswered`]) the extension may have been applied: the guard is not lost by
    /// it, and the next `renew` (or watchdog renewal) repeats it with the same nonce, which
    /// finds it applied if it was (a renewal whose reply was lost is settled first, at its own
    /// length, before one of another length is sent).
    pub async fn renew(&self, ttl: Duration) -> Result<()> {
        let _in_flight = self.shared.live.renewing().await;
        loop {
            match self.shared.renew(ttl).await {
                (asked, Ok(Renew::Renewed(lease))) => {
                    // `renew` reports the renewal as done even after the old deadline;
                    // `is_lost` already said so if it was asked meanwhile.
                    let _ = self.shared.adopt(lease);
                    if asked == ttl {
                        return Ok(());
                    }
                    // That settled an earlier renewal of another length: now this one.
                }
                (_, Ok(found @ (Renew::NotHeld | Renew::HeldByOther))) => {
                    self.shared.live.lose(if found == Renew::NotHeld {
                        Loss::Gone
                    } else {
                        Loss::HeldByOther
                    });
                    return Err(Error::new(
                        ErrorKind::LeaseLost,
                        format!("the lease on {} is gone", self.shared.name),
                    ));
                }
                (_, Err(e)) => return Err(e),
            }
        }
    }

    /// Release the lock and report what happened: [`Unlock::Released`], or
    /// [`Unlock::NotHeld`]/[`Unlock::HeldByOther`] when the lease had been lost.
    ///
    /// # Errors
    ///
    /// Store errors; the TTL frees the lock then.
    ///
    /// # Cancel safety
    ///
    /// If dropped midway the lock may stay held until its TTL (at most one renewal interval
    /// plus the lease, since the watchdog is stopped first).
    pub async fn release(mut self) -> Result<Unlock> {
        self.armed = false;
        self.shared.release(false).await
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(&self, ttl: Duration) -> Result<()> {
        crate::blocking::block_on(
            self.shared.locks.store().runtime(),
            "blocking_renew",
            self.renew(ttl),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(mut self) -> Result<Unlock> {
        self.armed = false;
        let shared = self.shared.clone();
        crate::blocking::block_on(
            shared.locks.store().runtime(),
            "blocking_release",
            async move { shared.release(false).await },
        )
    }
}

impl<S: Store> Drop for LockGuard<S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        // Release in the background: stop the watchdog (after any renewal in flight, so the
        // lease we release is the current one), then compare-and-delete.
        let shared = self.shared.clone();
        crate::blocking::spawn_handle(self.shared.locks.store().runtime()).spawn(async move {
            let _ = shared.release(true).await;
        });
    }
}
