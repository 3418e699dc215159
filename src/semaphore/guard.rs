//! [`PermitGuard`]: held permits, renewed by a watchdog, released on drop.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::lock::{Given, Permit, Semaphore};
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::Unlock;
use crate::guard::{Liveness, Renewal};
use crate::observe::{Hold, Loss, ReleaseOutcome};
use crate::store::Store;

struct Shared<S: Store> {
    sem: Semaphore<S>,
    name: String,
    permit: Permit,
    ttl: Duration,
    live: Liveness,
}

impl<S: Store> Shared<S> {
    /// One renewal to `ttl`, with the renewal lock held. A renewal is named by the holder's
    /// nonce, which never changes, so a repeat after no answer is the same request.
    async fn renew(&self, ttl: Duration) -> Result<Option<Instant>> {
        self.sem.renew(&self.name, &self.permit, ttl).await
    }

    /// Stop renewing and give the permits back; `background` for a dropped guard's release.
    async fn release(&self, background: bool) -> Result<Unlock> {
        self.live.stop_watchdog().await;
        // Held until now, as far as this guard knows: a release whose first request got no
        // answer, and whose repeat finds nothing, released the permits with that request.
        let held = !self.live.is_lost();
        let outcome = self
            .sem
            .give_back(&self.name, &self.permit.nonce)
            .await
            .map(|given| match given {
                Given::Released => Unlock::Released,
                Given::Unanswered if held => Unlock::Released,
                Given::Unanswered | Given::NotHeld => Unlock::NotHeld,
            });
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

async fn watchdog<S: Store>(shared: Arc<Shared<S>>) {
    let shared = &shared;
    shared
        .live
        .watchdog(shared.ttl / 3, || async move {
            // Past `SemaphoreOptions::max_hold`, renew no more; before it, never past it.
            let Some(ttl) = shared.live.capped_ttl(shared.ttl) else {
                return Renewal::Stop;
            };
            match shared.renew(ttl).await {
                Ok(Some(deadline)) => shared.live.renewed(Some(deadline)),
                Ok(None) => Renewal::Lost,
                // No answer, or a refusal: tried again until the deadline passes.
                Err(_) => Renewal::Retry,
            }
        })
        .await;
}

/// Held permits of a [`Semaphore`]. See the [module docs](super).
///
/// A watchdog renews the holder's lease at a third of
/// [`watchdog_lease`](super::SemaphoreOptions::watchdog_lease) for as long as the guard lives.
/// With [`max_hold`](super::SemaphoreOptions::max_hold) it renews no lease past that long
/// after the acquisition, and the guard is lost when the last lease runs out.
/// When a renewal finds the holder gone, or none is answered before the lease's local deadline,
/// the guard is lost: [`is_lost`](Self::is_lost) turns true and [`lost`](Self::lost) resolves.
/// Release it with [`release`](Self::release) to learn the outcome; dropping it releases in
/// the background (and if that cannot be done, the lease frees the permits).
#[must_use = "the permits are released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct PermitGuard<S: Store> {
    shared: Arc<Shared<S>>,
    armed: bool,
}

impl<S: Store> fmt::Debug for PermitGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PermitGuard")
            .field("name", &self.shared.name)
            .field("permits", &self.shared.permit.permits)
            .field("fence", &self.shared.permit.fence)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<S: Store> PermitGuard<S> {
    /// Wrap acquired permits and start their watchdog.
    pub(super) fn new(sem: Semaphore<S>, name: &str, permit: Permit, ttl: Duration) -> Self {
        let shared = Arc::new(Shared {
            sem,
            name: name.to_owned(),
            live: Liveness::new(Some(permit.deadline)).observed(Hold::new(
                "semaphore",
                name,
                Some(permit.fence),
            )),
            permit,
            ttl,
        });
        if let Some(max_hold) = shared.sem.options().max_hold {
            shared.live.renew_until(Instant::now() + max_hold);
        }
        let handle = crate::blocking::spawn_handle(shared.sem.store().runtime())
            .spawn(watchdog(shared.clone()))
            .abort_handle();
        shared.live.set_watchdog(handle);
        PermitGuard {
            shared,
            armed: true,
        }
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// How many permits this guard holds.
    pub fn permits(&self) -> u32 {
        self.shared.permit.permits
    }

    /// The fencing token of this acquisition: pass it with every write to the protected
    /// resource.
    pub fn fence(&self) -> u64 {
        self.shared.permit.fence
    }

    /// The holder's nonce, as [`Semaphore::inspect`] lists it.
    pub fn nonce(&self) -> &str {
        &self.shared.permit.nonce
    }

    /// The local deadline of the lease in effect: it moves with every renewal, and past it
    /// the permits must not be relied on.
    pub fn deadline(&self) -> Option<Instant> {
        self.shared.live.deadline()
    }

    /// Whether the permits are lost: a renewal found the holder gone, or no renewal was
    /// answered before the lease's local deadline. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        self.shared.live.is_lost()
    }

    /// Resolves when the permits are lost (see [`is_lost`](Self::is_lost)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.shared.live.lost().await;
    }

    /// Renew now, to `ttl` from now (the watchdog keeps its own interval and length).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] when the holder is gone; [`ErrorKind::InvalidInput`] for a
    /// `ttl` out of range; store errors. When no reply came
    /// ([`Error::is_unanswered`]) the renewal may have been applied: the guard is not lost by
    /// it, and a repeat is the same request.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the lease may or may not have moved; the guard's deadline
    /// moves only on an answer.
    pub async fn renew(&self, ttl: Duration) -> Result<()> {
        let _in_flight = self.shared.live.renewing().await;
        match self.shared.renew(ttl).await? {
            Some(deadline) => {
                let _ = self.shared.live.renewed(Some(deadline));
                Ok(())
            }
            None => {
                self.shared.live.lose(Loss::Gone);
                Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!("the permits on {} are gone", self.shared.name),
                ))
            }
        }
    }

    /// Give the permits back and report what happened: [`Unlock::Released`], or
    /// [`Unlock::NotHeld`] when they had been lost.
    ///
    /// # Errors
    ///
    /// Store errors; the lease frees the permits then.
    ///
    /// # Cancel safety
    ///
    /// If dropped midway the permits may stay held until the lease ends (the watchdog is
    /// stopped first).
    pub async fn release(mut self) -> Result<Unlock> {
        self.armed = false;
        self.shared.release(false).await
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
            shared.sem.store().runtime(),
            "blocking_release",
            async move { shared.release(false).await },
        )
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(&self, ttl: Duration) -> Result<()> {
        crate::blocking::block_on(
            self.shared.sem.store().runtime(),
            "blocking_renew",
            self.renew(ttl),
        )
    }
}

impl<S: Store> Drop for PermitGuard<S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let shared = self.shared.clone();
        crate::blocking::spawn_handle(self.shared.sem.store().runtime()).spawn(async move {
            let _ = shared.release(true).await;
        });
    }
}
