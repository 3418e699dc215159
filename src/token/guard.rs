//! [`TokenGuard`]: a held token lock, renewed by a watchdog, released on drop.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{TokenHolding, TokenLock, TokenRenew};
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::Unlock;
use crate::guard::{Liveness, Renewal};
use crate::observe::{Hold, Loss, ReleaseOutcome};
use crate::store::Store;

struct Shared<S: Store> {
    locks: TokenLock<S>,
    holding: TokenHolding,
    ttl: Duration,
    live: Liveness,
    renews: bool,
}

impl<S: Store> Shared<S> {
    /// One renewal to `ttl`, with the renewal lock held: the pending one if a reply was lost
    /// (dated from its first send), else a new one.
    async fn renew(&self, ttl: Duration) -> Result<TokenRenew> {
        let attempt = self.live.renewal_attempt(ttl);
        let outcome = self
            .locks
            .renew_sent(
                self.holding.key(),
                self.holding.token(),
                attempt.ttl,
                attempt.sent,
            )
            .await;
        self.live.renewal_outcome(&outcome);
        outcome
    }

    /// Stop renewing and give the lock back; `background` for a dropped guard's release.
    async fn release(&self, background: bool) -> Result<Unlock> {
        self.live.stop_watchdog().await;
        let outcome = self
            .locks
            .release(self.holding.key(), self.holding.token())
            .await;
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

    /// A renewal's answer: the new deadline taken, or the guard lost.
    fn settle(&self, renewed: TokenRenew) -> Renewal {
        match renewed {
            TokenRenew::Renewed { deadline } => self.live.renewed(Some(deadline)),
            TokenRenew::NotHeld => {
                self.live.lose(Loss::Gone);
                Renewal::Lost
            }
            TokenRenew::HeldByOther => {
                self.live.lose(Loss::HeldByOther);
                Renewal::Lost
            }
        }
    }
}

async fn watchdog<S: Store>(shared: Arc<Shared<S>>) {
    let shared = &shared;
    shared
        .live
        .watchdog(shared.ttl / 3, || async move {
            // Past `TokenOptions::max_hold`, renew no more; before it, never past it.
            let Some(ttl) = shared.live.capped_ttl(shared.ttl) else {
                return Renewal::Stop;
            };
            match shared.renew(ttl).await {
                Ok(renewed) => shared.settle(renewed),
                // No answer: repeated (dated from its first send) until one comes or the
                // deadline passes. A refusal (an error reply): tried again the same way.
                Err(_) => Renewal::Retry,
            }
        })
        .await;
}

/// A held [`TokenLock`]. See the [module docs](super).
///
/// Without an explicit lease a watchdog renews the key's TTL at a third of
/// [`watchdog_lease`](super::TokenOptions::watchdog_lease) for as long as the guard lives (with
/// [`max_hold`](super::TokenOptions::max_hold), never past that long after the acquisition).
/// When a renewal finds the token gone, or none is answered before the lease's local deadline,
/// the guard is lost: [`is_lost`](Self::is_lost) turns true and [`lost`](Self::lost) resolves.
/// Release it with [`release`](Self::release) to learn the outcome; dropping it releases in the
/// background (and if that cannot be done, the TTL frees the lock).
#[must_use = "the lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct TokenGuard<S: Store> {
    shared: Arc<Shared<S>>,
    armed: bool,
}

impl<S: Store> fmt::Debug for TokenGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenGuard")
            .field("holding", &self.shared.holding)
            .field("watchdog", &self.shared.renews)
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<S: Store> TokenGuard<S> {
    /// Wrap an acquired holding; with `watchdog_on`, start renewing it at a third of `ttl`.
    pub(super) fn new(
        locks: TokenLock<S>,
        holding: TokenHolding,
        ttl: Duration,
        watchdog_on: bool,
    ) -> Self {
        let live = Liveness::new(Some(holding.deadline())).observed(Hold::new(
            "token",
            holding.key(),
            Some(holding.fence()),
        ));
        let shared = Arc::new(Shared {
            locks,
            holding,
            ttl,
            live,
            renews: watchdog_on,
        });
        if watchdog_on {
            if let Some(max_hold) = shared.locks.options().max_hold {
                shared.live.renew_until(Instant::now() + max_hold);
            }
            let handle = crate::blocking::spawn_handle(shared.locks.store().runtime())
                .spawn(watchdog(shared.clone()))
                .abort_handle();
            shared.live.set_watchdog(handle);
        }
        TokenGuard {
            shared,
            armed: true,
        }
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        self.shared.holding.key()
    }

    /// The token the key holds.
    pub fn token(&self) -> &str {
        self.shared.holding.token()
    }

    /// The fencing token of this acquisition (ours only: see the
    /// [module docs](super#fencing-ours-only)).
    pub fn fence(&self) -> u64 {
        self.shared.holding.fence()
    }

    /// The holding, as acquired (its deadline is the first one; see
    /// [`deadline`](Self::deadline) for the one in effect).
    pub fn holding(&self) -> TokenHolding {
        self.shared.holding.clone()
    }

    /// The local deadline of the lease in effect: it moves with every renewal, and past it the
    /// lock must not be relied on.
    pub fn deadline(&self) -> Option<Instant> {
        self.shared.live.deadline()
    }

    /// Whether the watchdog renews this lease.
    pub fn is_renewed(&self) -> bool {
        self.shared.renews
    }

    /// Whether the lock is lost: a renewal found the token gone, or no renewal was answered
    /// before the lease's local deadline (without a watchdog: the deadline passed). Once true,
    /// stays true.
    pub fn is_lost(&self) -> bool {
        self.shared.live.is_lost()
    }

    /// Resolves when the lock is lost (see [`is_lost`](Self::is_lost)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.shared.live.lost().await;
    }

    /// Renew now, to `ttl` from now (the watchdog, if any, keeps its own interval and length).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] when the token is gone; [`ErrorKind::InvalidInput`] for a `ttl`
    /// out of range; store errors. When no reply came ([`Error::is_unanswered`]) the renewal
    /// may have been applied: the guard is not lost by it, and the next renewal repeats it.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the expiry may or may not have moved; the guard's deadline
    /// moves only on an answer.
    pub async fn renew(&self, ttl: Duration) -> Result<()> {
        crate::expire_lock::ttl_ms(ttl)?;
        let _in_flight = self.shared.live.renewing().await;
        let renewed = self.shared.renew(ttl).await?;
        match self.shared.settle(renewed) {
            // Renewed (a reply that came after the old deadline is a loss, reported as such).
            Renewal::Renewed => Ok(()),
            _ if matches!(renewed, TokenRenew::Renewed { .. }) => Err(Error::new(
                ErrorKind::LeaseLost,
                format!(
                    "the lease on {} ran out before its renewal was answered",
                    self.key()
                ),
            )),
            _ => Err(Error::new(
                ErrorKind::LeaseLost,
                format!("the token lock {} is gone", self.key()),
            )),
        }
    }

    /// Release the lock (compare-and-delete of its token) and report what happened:
    /// [`Unlock::Released`], or [`Unlock::NotHeld`]/[`Unlock::HeldByOther`] when the lease had
    /// run out (nothing of another holder is deleted).
    ///
    /// # Errors
    ///
    /// Store errors; the TTL frees the lock then.
    ///
    /// # Cancel safety
    ///
    /// If dropped midway the lock may stay held until its TTL (the watchdog is stopped first).
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

impl<S: Store> Drop for TokenGuard<S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let shared = self.shared.clone();
        crate::blocking::spawn_handle(self.shared.locks.store().runtime()).spawn(async move {
            let _ = shared.release(true).await;
        });
    }
}
