//! [`Liveness`]: the loss bookkeeping every guard with a watchdog shares.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::time::Instant;

use crate::observe::{Hold, Loss, ReleaseOutcome};

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
    /// The bound on automatic renewal ([`Liveness::renew_until`]) is reached: renew no more.
    /// The guard is not lost yet; it is once the lease in effect runs out.
    Stop,
}

/// One renewal request, named by the nonce of the lease it asks for.
///
/// Renewals are idempotent by nonce: a repeat of a renewal that was applied finds its own lease
/// in place and returns it. So a renewal whose outcome is unknown (no reply: a timeout, a
/// dropped connection) is kept by [`Liveness`] and repeated with the same nonce until a definite
/// answer comes; a repeat with a new nonce would present the old lease to a server that may
/// already hold the new one, and be refused as "held by another". The lease a repeat returns
/// is dated from [`sent`](Self::sent), the *first* send (the server may have applied it then),
/// and the time it has left as the repeat's answer reports it ([`deadline`](crate::deadline)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalAttempt {
    /// The nonce of the lease this renewal asks for.
    pub nonce: String,
    /// When the first request with this nonce was sent.
    pub sent: Instant,
    /// The lease length asked for.
    pub ttl: Duration,
    /// Whether a request with this nonce was sent before (its outcome unknown).
    pub repeat: bool,
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
    /// The deadline of the lease in effect; a change wakes whatever waits for it
    /// ([`lost`](Liveness::lost)).
    deadline: Mutex<Option<Instant>>,
    lost: AtomicBool,
    /// Wakes whatever waits in [`lost`](Liveness::lost) when the flag or the deadline changes;
    /// made by the first such wait (most guards never wait, and a guard is small without it).
    changed: std::sync::OnceLock<Notify>,
    renewing: tokio::sync::Mutex<()>,
    watchdog: Mutex<Option<tokio::task::AbortHandle>>,
    /// Set when a release starts: a watchdog poll that takes the renewal lock after that sends
    /// nothing.
    stopped: AtomicBool,
    /// A renewal sent whose outcome is not known yet.
    pending: Mutex<Option<RenewalAttempt>>,
    /// The bound on automatic renewal: no lease is asked to last past this instant.
    renew_until: Mutex<Option<Instant>>,
    /// What renewals, a loss and the release report ([`observe`](crate::observe)).
    observe: Hold,
}

impl Liveness {
    /// Not lost, valid until `deadline` (`None`: no local deadline is known).
    pub fn new(deadline: Option<Instant>) -> Self {
        Liveness {
            deadline: Mutex::new(deadline),
            lost: AtomicBool::new(false),
            changed: std::sync::OnceLock::new(),
            renewing: tokio::sync::Mutex::new(()),
            watchdog: Mutex::new(None),
            stopped: AtomicBool::new(false),
            pending: Mutex::new(None),
            renew_until: Mutex::new(None),
            observe: Hold::default(),
        }
    }

    /// Report renewals, a loss and the release as those of `hold` (a lease of a lock kind, on a
    /// lock name, with its fencing token), in traces and metrics.
    #[must_use]
    pub fn observed(mut self, hold: Hold) -> Self {
        self.observe = hold;
        self
    }

    /// Bound automatic renewal (`Options::max_hold`): from now on a watchdog renewal asks for
    /// no more than the time left until `until` ([`capped_ttl`](Self::capped_ttl)), and none is
    /// sent once less than a millisecond is left, so the lease runs out at about `until` and
    /// the guard is lost then.
    pub fn renew_until(&self, until: Instant) {
        *self.renew_until.lock() = Some(until);
    }

    /// The lease length a watchdog renewal should ask for instead of `ttl`: `ttl`, or the time
    /// left before the bound set by [`renew_until`](Self::renew_until) if that is shorter;
    /// `None` when less than a millisecond is left (renew no more: [`Renewal::Stop`]).
    pub fn capped_ttl(&self, ttl: Duration) -> Option<Duration> {
        let Some(until) = *self.renew_until.lock() else {
            return Some(ttl);
        };
        let left = until.saturating_duration_since(Instant::now());
        (left >= Duration::from_millis(1)).then(|| ttl.min(left))
    }

    /// The local deadline of the lease in effect.
    pub fn deadline(&self) -> Option<Instant> {
        *self.deadline.lock()
    }

    /// A renewal landed: the lease is valid until `deadline` now (earlier or later than
    /// before). Whatever waits for the deadline ([`lost`](Self::lost)) is woken to read it
    /// again.
    pub fn set_deadline(&self, deadline: Option<Instant>) {
        let changed = std::mem::replace(&mut *self.deadline.lock(), deadline) != deadline;
        if changed {
            self.wake();
        }
    }

    /// Wake whatever waits in [`lost`](Self::lost).
    fn wake(&self) {
        if let Some(changed) = self.changed.get() {
            changed.notify_waiters();
        }
    }

    /// A renewal landed, valid until `deadline`: [`Renewal::Renewed`], or [`Renewal::Lost`] if
    /// it landed after the old deadline. A late reply comes too late: the guard has been (or
    /// could have been) reported lost meanwhile, and "once lost, stays lost". The new deadline
    /// is taken anyway, so that a release still deletes the renewed lease at once.
    pub fn renewed(&self, deadline: Option<Instant>) -> Renewal {
        let late = self.past_deadline();
        if late {
            // Marked before the deadline moves: `is_lost` never reads false in between.
            self.lose(Loss::Late);
        } else {
            self.observe.renewed();
        }
        self.set_deadline(deadline);
        if late {
            Renewal::Lost
        } else {
            Renewal::Renewed
        }
    }

    /// The renewal to send now, asking for `ttl`: the one whose outcome is still unknown if
    /// there is one (same nonce, same first send time and length, marked as a repeat), else a
    /// new one, kept as pending until [`renewal_outcome`](Self::renewal_outcome) learns its
    /// outcome. Call it with the renewal lock ([`renewing`](Self::renewing)) held.
    pub fn renewal_attempt(&self, ttl: Duration) -> RenewalAttempt {
        self.renewal_attempt_with(ttl, RenewalAttempt::clone)
    }

    /// [`renewal_attempt`](Self::renewal_attempt), read in place by `read` (the batched
    /// watchdog copies the nonce into its call rather than cloning the attempt).
    pub(crate) fn renewal_attempt_with<R>(
        &self,
        ttl: Duration,
        read: impl FnOnce(&RenewalAttempt) -> R,
    ) -> R {
        let mut pending = self.pending.lock();
        let repeat = pending.is_some();
        let attempt = pending.get_or_insert_with(|| RenewalAttempt {
            nonce: crate::lease::nonce(),
            sent: Instant::now(),
            ttl,
            repeat: false,
        });
        attempt.repeat |= repeat;
        read(attempt)
    }

    /// The renewal sent last got `outcome`: it stays pending (to be repeated with the same
    /// nonce) only when no answer came ([`Error::is_unanswered`](crate::Error::is_unanswered));
    /// any answer settles it.
    pub fn renewal_outcome<T>(&self, outcome: &crate::Result<T>) {
        if let Err(e) = outcome {
            self.observe.renewal_failed(e);
        }
        if !matches!(outcome, Err(e) if e.is_unanswered()) {
            *self.pending.lock() = None;
        }
    }

    /// The renewal whose outcome is still unknown, if any.
    pub fn pending_renewal(&self) -> Option<RenewalAttempt> {
        self.pending.lock().clone()
    }

    /// The lease is gone: lost for good. Silent: a release ends a hold this way; use
    /// [`lose`](Self::lose) for a loss.
    pub fn mark_lost(&self) {
        self.lost.store(true, Ordering::SeqCst);
        self.wake();
    }

    /// The lease is lost for `reason`: lost for good, and reported (a `warn` event and the
    /// loss counter) unless it was lost or released before.
    pub fn lose(&self, reason: Loss) {
        // Reported before the watchers wake, so that the reason comes before whatever they say.
        if !self.lost.swap(true, Ordering::SeqCst) {
            self.observe.lost(reason);
            self.wake();
        }
    }

    /// The hold ended by a release with `outcome` (`background`: a dropped guard's, which
    /// nobody waits for): reported, with the time held.
    pub fn released(&self, outcome: ReleaseOutcome<'_>, background: bool) {
        self.observe.released(outcome, background);
    }

    /// Whether the deadline has passed.
    pub fn past_deadline(&self) -> bool {
        self.deadline().is_some_and(|d| Instant::now() >= d)
    }

    /// Whether the guard is lost: marked so, or past its deadline. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst) || self.past_deadline()
    }

    /// Resolves when the guard is lost: when marked so, or at the deadline in effect — a
    /// change of the deadline (a renewal landing, a renewal to a shorter lease) is seen at
    /// once, so it resolves at the new deadline whether that is earlier or later.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        let changed = self.changed.get_or_init(Notify::new);
        loop {
            // Registered before the state is read: a change after this wakes the wait below.
            let notified = changed.notified();
            let mut notified = std::pin::pin!(notified);
            notified.as_mut().enable();
            if self.lost.load(Ordering::SeqCst) {
                return;
            }
            let deadline = self.deadline();
            let until_deadline = async {
                match deadline {
                    Some(deadline) => tokio::time::sleep_until(deadline).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                () = notified => {}
                () = until_deadline => {
                    if self.past_deadline() {
                        self.lose(Loss::Deadline);
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

    /// The renewal lock if nothing else holds it now (a batched watchdog passes over a lease
    /// being renewed otherwise).
    pub(crate) fn try_renewing(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        self.renewing.try_lock().ok()
    }

    /// Whether a release has started ([`stop_watchdog`](Self::stop_watchdog)): renew no more.
    pub(crate) fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }

    /// The watchdog task to stop on release.
    pub fn set_watchdog(&self, handle: tokio::task::AbortHandle) {
        *self.watchdog.lock() = Some(handle);
    }

    /// Stop the watchdog, after any renewal in flight. From the moment this is called no new
    /// renewal starts, even one whose poll was already waiting for the renewal lock.
    pub async fn stop_watchdog(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let _in_flight = self.renewing().await;
        if let Some(handle) = self.watchdog.lock().take() {
            handle.abort();
        }
    }

    /// Run a watchdog: every `interval`, call `renew` with the renewal lock held; after a
    /// [`Retry`](Renewal::Retry), try again after [`retry_pause`](Self::retry_pause). Returns,
    /// with the guard marked lost, once a renewal finds it [`Lost`](Renewal::Lost) or a retry
    /// finds the deadline passed; returns without marking it lost on [`Stop`](Renewal::Stop)
    /// (the bound on renewal is reached: the deadline of the lease in effect then marks it).
    /// Spawn it and hand its task to [`set_watchdog`](Self::set_watchdog), so a release stops
    /// it.
    pub async fn watchdog<F, Fut>(&self, interval: Duration, renew: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Renewal>,
    {
        self.watchdog_after(interval, interval, renew).await;
    }

    /// [`watchdog`](Self::watchdog) whose first renewal comes after `first` rather than a full
    /// `interval` (zero: at once, to confirm a lease held only provisionally).
    pub async fn watchdog_after<F, Fut>(&self, first: Duration, interval: Duration, mut renew: F)
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Renewal>,
    {
        let mut wait = first;
        loop {
            tokio::time::sleep(wait).await;
            let _in_flight = self.renewing().await;
            if self.stopped.load(Ordering::SeqCst) {
                // A release started while this poll waited for the lock: send nothing.
                return;
            }
            // A renewal still unanswered at the deadline (a paused or unreachable server) does
            // not hold up the loss: it is reported then, and the renewal is awaited still.
            let mut renewal = std::pin::pin!(renew());
            let outcome = match self.deadline() {
                Some(deadline) => {
                    tokio::select! {
                        outcome = renewal.as_mut() => outcome,
                        () = tokio::time::sleep_until(deadline) => {
                            self.lose(Loss::Deadline);
                            renewal.await
                        }
                    }
                }
                None => renewal.await,
            };
            match outcome {
                Renewal::Renewed => wait = interval,
                // Try again soon, well before the deadline.
                Renewal::Retry if !self.past_deadline() => wait = self.retry_pause(interval),
                Renewal::Retry => {
                    self.lose(Loss::Deadline);
                    return;
                }
                // Reported with its reason by the renewal already, if it knew one.
                Renewal::Lost => {
                    self.lose(if self.past_deadline() {
                        Loss::Deadline
                    } else {
                        Loss::Gone
                    });
                    return;
                }
                Renewal::Stop => return,
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A watchdog poll that is already waiting for the renewal lock when a release starts
    /// sends no renewal: the release's stop wins, although the poll takes the lock first.
    #[tokio::test]
    async fn no_renewal_starts_after_a_release_started() {
        let live = Arc::new(Liveness::new(Some(
            Instant::now() + Duration::from_secs(60),
        )));
        let renewals = Arc::new(AtomicUsize::new(0));
        // Something else (an `extend`) holds the renewal lock while the poll comes due.
        let busy = live.renewing().await;
        let watchdog = {
            let (live, renewals) = (live.clone(), renewals.clone());
            tokio::spawn(async move {
                live.watchdog(Duration::from_millis(10), || {
                    renewals.fetch_add(1, Ordering::SeqCst);
                    async { Renewal::Renewed }
                })
                .await;
            })
        };
        live.set_watchdog(watchdog.abort_handle());
        // The poll is due and queued on the lock, ahead of the release below.
        tokio::time::sleep(Duration::from_millis(50)).await;
        let release = {
            let live = live.clone();
            tokio::spawn(async move { live.stop_watchdog().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(busy);
        release.await.unwrap();
        let _ = watchdog.await;
        assert_eq!(
            renewals.load(Ordering::SeqCst),
            0,
            "a renewal was sent after the release started"
        );
    }

    #[tokio::test]
    async fn an_unanswered_renewal_is_repeated_with_its_nonce() {
        let live = Liveness::new(None);
        let first = live.renewal_attempt(Duration::from_secs(3));
        assert!(!first.repeat);
        live.renewal_outcome::<()>(&Err(crate::Error::new(
            crate::ErrorKind::Timeout,
            "no reply",
        )));
        let again = live.renewal_attempt(Duration::from_secs(9));
        assert!(again.repeat);
        assert_eq!(
            (&again.nonce, again.sent, again.ttl),
            (&first.nonce, first.sent, first.ttl)
        );
        live.renewal_outcome(&Ok(()));
        assert_eq!(live.pending_renewal(), None);
        let fresh = live.renewal_attempt(Duration::from_secs(3));
        assert_ne!(fresh.nonce, first.nonce);
        live.renewal_outcome::<()>(&Err(crate::Error::from_reply("ERR", "refused")));
        assert_eq!(live.pending_renewal(), None, "an answer settles it");
    }

    #[tokio::test]
    async fn renewal_is_capped_by_the_bound_and_stops_at_it() {
        let live = Liveness::new(None);
        let ttl = Duration::from_secs(30);
        assert_eq!(live.capped_ttl(ttl), Some(ttl));
        live.renew_until(Instant::now() + Duration::from_secs(10));
        let capped = live.capped_ttl(ttl).unwrap();
        assert!(capped <= Duration::from_secs(10) && capped > Duration::from_secs(5));
        live.renew_until(Instant::now());
        assert_eq!(live.capped_ttl(ttl), None);
        assert!(
            !live.is_lost(),
            "reaching the bound is not a loss by itself"
        );
    }

    #[test]
    fn a_late_renewal_marks_lost_for_good() {
        let live = Liveness::new(Some(Instant::now()));
        std::thread::sleep(Duration::from_millis(2));
        let later = Instant::now() + Duration::from_secs(60);
        assert_eq!(live.renewed(Some(later)), Renewal::Lost);
        assert!(live.is_lost());
    }
}
