//! [`Liveness`]: the loss bookkeeping every guard with a watchdog shares.

use std::future::Future;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::time::Instant;

/// What one renewal attempt of a [`Liveness::watchdog`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Renewal {
    /// Renewed in time: the next renewal comes a full interval later.
    Renewed,
    /// Not renewed this time (a store error, a renewal the replicas did not acknowledge): try
    /// again soon, unless the deadline has passed meanwhile.
    Retry,
    /// The lease is gone, or its renewal came back too late: lost for good.
    Lost,
}

/// Whether a held lease still counts as held, for a guard whose watchdog renews it: the local
/// deadline of the lease in effect, a *lost* flag that stays set once set, the lock a renewal
/// holds while in flight (so a release or a downgrade never races a lease about to change), and
/// the watchdog task.
///
/// The guard is lost once the flag is set (a renewal found the lease gone) or once the deadline
/// has passed (no renewal landed in time), whichever comes first.
/// [`LockGuard`](crate::LockGuard), [`ReplicatedGuard`](crate::ReplicatedGuard) and the
/// reader/writer lock's guards are built on it; it is public for guards of other lock kinds.
#[derive(Debug)]
pub struct Liveness {
    deadline: Mutex<Option<Instant>>,
    lost: watch::Sender<bool>,
    renewing: tokio::sync::Mutex<()>,
    watchdog: Mutex<Option<tokio::task::AbortHandle>>,
}

impl Liveness {
    /// Not lost, valid until `deadline` (`None`: no local deadline is known).
    pub fn new(deadline: Option<Instant>) -> Self {
        Liveness {
            deadline: Mutex::new(deadline),
            lost: watch::channel(false).0,
            renewing: tokio::sync::Mutex::new(()),
            watchdog: Mutex::new(None),
        }
    }

    /// The local deadline of the lease in effect.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock()
    }

    /// A renewal landed: the lease is valid until `deadline` now.
    pub fn set_deadline(&self, deadline: Option<Instant>) {
        *self.deadline.lock() = deadline;
    }

    /// A renewal landed, valid until `deadline`: [`Renewal::Renewed`], or [`Renewal::Lost`] if
    /// it landed after the old deadline. A late reply comes too late: the guard has been (or
    /// could have been) reported lost meanwhile, and "once lost, stays lost". The new deadline
    /// is taken anyway, so that a release still deletes the renewed lease at once.
    pub fn renewed(&self, deadline: Option<Instant>) -> Renewal {
        let late = self.past_deadline();
        self.set_deadline(deadline);
        if late {
            Renewal::Lost
        } else {
            Renewal::Renewed
        }
    }

    /// The lease is gone: lost for good.
    pub fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    /// Whether the deadline has passed.
    pub fn past_deadline(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// Whether the guard is lost: marked so, or past its deadline. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        *self.lost.borrow() || self.past_deadline()
    }

    /// Resolves when the guard is lost: when marked so, or at the deadline unless a renewal
    /// moved it meanwhile.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        let mut rx = self.lost.subscribe();
        loop {
            if *rx.borrow_and_update() {
                return;
            }
            match self.deadline() {
                Some(deadline) => {
                    tokio::select! {
                        changed = rx.changed() => if changed.is_err() { return },
                        () = tokio::time::sleep_until(deadline) => {
                            // A renewal may have moved the deadline meanwhile.
                            if self.past_deadline() {
                                self.mark_lost();
                                return;
                            }
                        }
                    }
                }
                None => {
                    if rx.changed().await.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// Hold this while renewing (or otherwise replacing the lease): a release waits for it.
    pub async fn renewing(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.renewing.lock().await
    }

    /// The watchdog task to stop on release.
    pub fn set_watchdog(&self, handle: tokio::task::AbortHandle) {
        *self.watchdog.lock() = Some(handle);
    }

    /// Stop the watchdog, after any renewal in flight.
    pub async fn stop_watchdog(&self) {
        let _in_flight = self.renewing().await;
        if let Some(handle) = self.watchdog.lock().take() {
            handle.abort();
        }
    }

    /// Run a watchdog: every `interval`, call `renew` with the renewal lock held; after a
    /// [`Retry`](Renewal::Retry), try again after [`retry_pause`](Self::retry_pause). Returns,
    /// with the guard marked lost, once a renewal finds it [`Lost`](Renewal::Lost) or a retry
    /// finds the deadline passed. Spawn it and hand its task to
    /// [`set_watchdog`](Self::set_watchdog), so a release stops it.
    pub async fn watchdog<F, Fut>(&self, interval: Duration, mut renew: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Renewal>,
    {
        let mut wait = interval;
        loop {
            tokio::time::sleep(wait).await;
            let _in_flight = self.renewing().await;
            match renew().await {
                Renewal::Renewed => wait = interval,
                // Try again soon, well before the deadline.
                Renewal::Retry if !self.past_deadline() => wait = self.retry_pause(interval),
                Renewal::Retry | Renewal::Lost => {
                    self.mark_lost();
                    return;
                }
            }
        }
    }

    /// How long the watchdog pauses after a renewal that did not count (a store error, or one
    /// not acknowledged): a quarter of the time left before the deadline, at least 5 ms (or
    /// `interval` if shorter), at most `interval`.
    pub fn retry_pause(&self, interval: Duration) -> Duration {
        let left = self.deadline().map_or(Duration::ZERO, |d| {
            d.saturating_duration_since(Instant::now())
        });
        (left / 4).clamp(Duration::from_millis(5).min(interval), interval)
    }
}
