//! Waiting for a busy lock, and the guard-returning acquire methods.
//!
//! - **By notification** (the default): releases publish on the lock's channel; a waiter sleeps
//!   until a message *or* the holder's remaining time, whichever is first, then tries again. A
//!   lost message, or a lock that expired instead of being released, costs at most one lease.
//!   The waiter subscribes only once its first attempt found the lock busy, and waits for the
//!   subscription within its patience and a limit; without one (refused by an ACL, stalled, or
//!   a store without notifications) it polls as below. See [`notify`](crate::notify).
//! - **By polling** ([`WaitStrategy::Poll`]): jittered, capped exponential back-off, never
//!   longer than the holder's remaining time.
//!
//! Either way, waiters in one process for one lock line up in a local FIFO queue, and only the
//! head of the queue talks to the server: N local waiters cost O(1) commands per handoff, and
//! no local waiter starves.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::Rng;
use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::{Acquire, ExpireLock};
use crate::guard::LockGuard;
use crate::lease::{Lease, nonce};
use crate::store::Store;

/// How [`ExpireLock::lock`] and friends wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[derive(Default)]
pub enum WaitStrategy {
    /// Sleep until a release is announced or the holder's lease runs out.
    #[default]
    Notify,
    /// Poll with jittered exponential back-off from `min` to `max`, never past the holder's
    /// remaining time.
    Poll {
        /// First back-off.
        min: Duration,
        /// Back-off cap.
        max: Duration,
    },
}

/// Per-client local state: one FIFO queue (a fair async mutex) per lock name being waited for.
#[derive(Default)]
pub(crate) struct Local {
    queues: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
    /// The store's notifier, once a wait needed it: later acquires look (without a round
    /// trip) whether their channel is still subscribed before their first attempt.
    notifier: std::sync::OnceLock<crate::notify::Notifier>,
}

impl fmt::Debug for Local {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Local")
            .field("queues", &self.queues.lock().len())
            .finish()
    }
}

impl Local {
    fn queue(&self, name: &str) -> Arc<tokio::sync::Mutex<()>> {
        self.queues
            .lock()
            .entry(name.to_owned())
            .or_default()
            .clone()
    }

    /// The store's notifier (made within `deadline` and `SUBSCRIBE_LIMIT`), remembered.
    async fn notifier<S: Store>(
        &self,
        store: &S,
        deadline: Option<Instant>,
    ) -> Option<crate::notify::Notifier> {
        if let Some(n) = self.notifier.get() {
            return Some(n.clone());
        }
        let n = crate::notify::notifier_by(store, deadline).await?;
        Some(self.notifier.get_or_init(|| n).clone())
    }

    /// Watch `channel` if it is subscribed already (no round trip), else `None`.
    fn watching(&self, channel: &str) -> Option<crate::notify::Watch> {
        self.notifier.get()?.watching(channel)
    }

    fn forget(&self, name: &str, queue: Arc<tokio::sync::Mutex<()>>) {
        let mut queues = self.queues.lock();
        // Ours and the map's: nobody else is queued.
        if Arc::strong_count(&queue) == 2 {
            queues.remove(name);
        }
    }
}

/// How long to wait for a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Patience {
    Once,
    Until(Instant),
    Forever,
}

/// Disarmed on success; on drop while armed (the acquire future was cancelled after a request
/// may have reached the server), releases whatever this attempt's nonce may hold, in the
/// background.
struct CancelCleanup<S: Store> {
    locks: ExpireLock<S>,
    name: String,
    ttl: Duration,
    nonce: Option<String>,
}

impl<S: Store> Drop for CancelCleanup<S> {
    fn drop(&mut self) {
        let Some(nonce) = self.nonce.take() else {
            return;
        };
        let (locks, name, ttl) = (self.locks.clone(), self.name.clone(), self.ttl);
        crate::blocking::spawn_handle(locks.store().runtime()).spawn(async move {
            // Repeating the acquire with the same nonce returns our lease if the lost attempt
            // took the lock (and takes it if free); either way we then release it. Without an
            // answer (the server is slow or failing over) try again until the lease would have
            // run out anyway.
            let give_up = Instant::now() + ttl;
            let lease = loop {
                match locks
                    .expire_lock_with_nonce(&name, ttl, nonce.clone())
                    .await
                {
                    Ok(Acquire::Acquired(lease)) => break lease,
                    Err(e) if e.is_transient() && pause(give_up).await => {}
                    _ => return,
                }
            };
            loop {
                match locks.expire_unlock(&name, &lease).await {
                    Err(e) if e.is_transient() && pause(give_up).await => {}
                    _ => return,
                }
            }
        });
    }
}

/// How long a waiting call rides through errors that a failover produces when it has no
/// deadline of its own ([`ExpireLock::lock`]): a failover settles well within this.
pub(crate) const FAILOVER_PATIENCE: Duration = Duration::from_secs(60);

/// Sleep a jittered 50–250 ms before trying again, if that ends before `give_up`; false
/// (without sleeping) otherwise.
async fn pause(give_up: Instant) -> bool {
    let pause = Duration::from_millis(rand::rng().random_range(50..250));
    if Instant::now() + pause >= give_up {
        return false;
    }
    tokio::time::sleep(pause).await;
    true
}

/// Back-off between attempts that met a transient error (a failover, a timeout): doubling from
/// 50 ms up to 1 s, jittered.
#[derive(Debug)]
pub(crate) struct Transient {
    next: Duration,
    since: Option<Instant>,
}

impl Transient {
    pub(crate) fn new() -> Self {
        Transient {
            next: Duration::from_millis(50),
            since: None,
        }
    }

    /// An attempt was answered: the next transient error starts a new episode.
    pub(crate) fn answered(&mut self) {
        *self = Transient::new();
    }

    /// After a transient error: sleep and return true when another attempt fits before
    /// `deadline` (for `None`, within [`FAILOVER_PATIENCE`] of the first error in a row); false
    /// (at once) when the caller should give up and return the error.
    pub(crate) async fn wait(&mut self, deadline: Option<Instant>) -> bool {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        let deadline = deadline.unwrap_or(since + FAILOVER_PATIENCE);
        let pause = self.next.mul_f64(rand::rng().random_range(0.5..1.0));
        if now + pause >= deadline {
            return false;
        }
        self.next = (self.next * 2).min(Duration::from_secs(1));
        tokio::time::sleep(pause).await;
        true
    }
}

impl<S: Store> ExpireLock<S> {
    async fn acquire_lease(
        &self,
        name: &str,
        ttl: Duration,
        patience: Patience,
    ) -> Result<Option<Lease>> {
        crate::expire_lock::ttl_ms(ttl)?;
        let keys = self.keys(name)?;
        let queue = self.local.queue(name);
        let result = async {
            // Whether this acquire waits by notification.
            let notify = matches!(self.options().wait, WaitStrategy::Notify)
                && !matches!(patience, Patience::Once);
            let deadline = match patience {
                Patience::Until(deadline) => Some(deadline),
                _ => None,
            };
            let mut watch = None;
            let _turn = match queue.try_lock() {
                Ok(turn) => turn,
                // A local waiter is ahead: the lock is busy as far as we are concerned.
                Err(_) if patience == Patience::Once => return Ok(None),
                Err(_) => {
                    // Local contention: watch the channel while queued, not only once at the
                    // head, so the subscription lives as long as anyone here waits. Otherwise
                    // each new head subscribes and each departing one unsubscribes: two extra
                    // commands per handoff (tests/lock_waiting.rs counts them). Registering
                    // waits for nobody: the subscription is asked for in the background.
                    if notify {
                        watch = self
                            .local
                            .notifier(self.store(), deadline)
                            .await
                            .map(|n| n.register(&keys.channel));
                    }
                    match patience {
                        Patience::Until(deadline) => {
                            match tokio::time::timeout_at(deadline, queue.lock()).await {
                                Ok(turn) => turn,
                                Err(_) => return Ok(None),
                            }
                        }
                        _ => queue.lock().await,
                    }
                }
            };
            if notify && watch.is_none() {
                // Free if the channel is still subscribed from a recent wait: then a refusal of
                // the first attempt needs no second one.
                watch = self.local.watching(&keys.channel);
            }
            let mut backoff = match self.options().wait {
                WaitStrategy::Poll { min, .. } => min,
                WaitStrategy::Notify => Duration::from_millis(10),
            };
            // Armed while an attempt's outcome is unknown: on cancel, or on an error the call
            // returns, it releases whatever the attempt's nonce may hold.
            let mut cleanup = CancelCleanup {
                locks: self.clone(),
                name: name.to_owned(),
                ttl,
                nonce: None,
            };
            let mut transient = Transient::new();
            // Whether this acquire has waited for its subscription once already: a waiter waits
            // for it at most once (bounded by its patience and `SUBSCRIBE_LIMIT`), then polls
            // until the subscription comes through in the background.
            let mut waited_for_subscription = false;
            let mut subscribe = false;
            loop {
                if std::mem::take(&mut subscribe) {
                    // Busy: only now listen (an uncontended acquire never subscribes), within
                    // the caller's patience, then try again at once: a release between the
                    // refused attempt and the subscription must not be missed.
                    if watch.is_none() {
                        watch = self
                            .local
                            .notifier(self.store(), deadline)
                            .await
                            .map(|n| n.register(&keys.channel));
                    }
                    if let Some(w) = &watch {
                        w.subscribed_by(deadline).await;
                    }
                }
                // A message counts only on a subscription confirmed before the attempt: a
                // release announced before that went unheard.
                let listening = watch
                    .as_ref()
                    .is_some_and(crate::notify::Watch::is_subscribed);
                let notified = watch.as_ref().map(|w| w.notified());
                let mut notified = pin!(notified);
                if let Some(n) = notified.as_mut().as_pin_mut() {
                    n.enable();
                }
                // A new nonce per answered attempt; after no answer, the same one again, so a
                // repeat finds a grant the lost attempt made.
                let attempt_nonce = cleanup.nonce.get_or_insert_with(nonce).clone();
                let outcome = self.expire_lock_with_nonce(name, ttl, attempt_nonce).await;
                let remaining = match outcome {
                    Ok(Acquire::Acquired(lease)) => {
                        cleanup.nonce = None;
                        return Ok(Some(lease));
                    }
                    Ok(Acquire::Held { remaining, .. }) => {
                        cleanup.nonce = None;
                        transient.answered();
                        remaining
                    }
                    // A failover, a slow server: a waiting call tries again within its patience
                    // (a single attempt returns the error at once). The cleanup stays armed.
                    Err(e) if e.is_transient() && patience != Patience::Once => {
                        let deadline = match patience {
                            Patience::Until(deadline) => Some(deadline),
                            _ => None,
                        };
                        if transient.wait(deadline).await {
                            continue;
                        }
                        return Err(e);
                    }
                    Err(e) => return Err(e),
                };
                if matches!(patience, Patience::Once)
                    || deadline.is_some_and(|d| Instant::now() >= d)
                {
                    return Ok(None);
                }
                if notify && !listening && !waited_for_subscription {
                    waited_for_subscription = true;
                    subscribe = true;
                    continue;
                }
                let now = Instant::now();
                let wake = match patience {
                    Patience::Once => return Ok(None),
                    Patience::Until(deadline) if now >= deadline => return Ok(None),
                    Patience::Until(deadline) => deadline,
                    Patience::Forever => now + Duration::from_secs(3600),
                };
                // Never sleep past the holder's lease: it may expire without a release.
                let mut until = now + remaining + Duration::from_millis(1);
                if !listening {
                    // Polling: no subscription (a store without notifications, a refused or
                    // stalled one), or one confirmed only after this attempt.
                    let (min, max) = match self.options().wait {
                        WaitStrategy::Poll { min, max } => (min, max),
                        WaitStrategy::Notify => {
                            (Duration::from_millis(10), Duration::from_millis(200))
                        }
                    };
                    let jittered = backoff.mul_f64(rand::rng().random_range(0.5..1.0));
                    until = until.min(now + jittered);
                    backoff = (backoff * 2).clamp(min, max);
                }
                let until = until.min(wake);
                match notified.as_mut().as_pin_mut() {
                    Some(n) => {
                        tokio::select! {
                            () = n => {}
                            () = tokio::time::sleep_until(until) => {}
                        }
                    }
                    None => tokio::time::sleep_until(until).await,
                }
            }
        }
        .await;
        self.local.forget(name, queue);
        result
    }

    async fn guard(
        &self,
        name: &str,
        lease: Option<Duration>,
        patience: Patience,
    ) -> Result<Option<LockGuard<S>>> {
        let (ttl, watchdog) = match lease {
            Some(ttl) => (ttl, false),
            None => (self.options().watchdog_lease, true),
        };
        Ok(self
            .acquire_lease(name, ttl, patience)
            .await?
            .map(|l| LockGuard::new(self.clone(), name, l, ttl, watchdog)))
    }

    /// Wait for the lock `name` and hold it, renewed by the watchdog until the guard is released
    /// or dropped.
    ///
    /// Waits by notification (or polling, per [`Options::wait`](crate::Options::wait)), bounded
    /// by the holder's remaining time, in a fair local queue.
    ///
    /// While waiting it rides through what a failover or a slow server produces
    /// ([`Error::is_transient`]: no answer, `CLUSTERDOWN`, `MOVED`, `TRYAGAIN`, `LOADING`,
    /// `READONLY`, ...): the attempt is repeated with backoff, with the same nonce when no answer
    /// came, so a grant the lost attempt made is found rather than orphaned.
    ///
    /// # Errors
    ///
    /// Invalid name or TTL; the key holds data that is not ours; store errors other than
    /// transient ones, and transient ones that last over a minute in a row.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped while a request was in flight, or returns an error
    /// after one whose outcome is unknown, a background task releases whatever that request may
    /// have acquired, and the TTL bounds it in any case.
    ///
    /// # Examples
    ///
    /// ```
    /// use tairlock::{ExpireLock, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let locks = ExpireLock::new(MemoryStore::new());
    /// let guard = locks.lock("reports").await?;
    /// assert!(locks.try_lock("reports").await?.is_none());
    /// guard.release().await?;
    /// assert!(locks.try_lock("reports").await?.is_some());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock(&self, name: &str) -> Result<LockGuard<S>> {
        Ok(self
            .guard(name, None, Patience::Forever)
            .await?
            .expect("waiting forever ends only with the lock"))
    }

    /// One attempt: the lock with a watchdog, or `None` if it is busy.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), except that transient errors ([`Error::is_transient`]) are
    /// returned at once: one attempt means one attempt.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self, name: &str) -> Result<Option<LockGuard<S>>> {
        self.guard(name, None, Patience::Once).await
    }

    /// Wait up to `timeout` for the lock; `None` if it did not come free in time.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); transient errors are retried until `timeout`, then the last one
    /// is returned.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock_for(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<LockGuard<S>>> {
        self.guard(name, None, Patience::Until(Instant::now() + timeout))
            .await
    }

    /// Wait up to `timeout` (forever if `None`) for the lock with a fixed `lease` and no
    /// watchdog: the guard is lost when the lease runs out.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock).
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn lock_with_lease(
        &self,
        name: &str,
        lease: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<LockGuard<S>>> {
        let patience = match timeout {
            Some(t) if t.is_zero() => Patience::Once,
            Some(t) => Patience::Until(Instant::now() + t),
            None => Patience::Forever,
        };
        self.guard(name, Some(lease), patience).await
    }

    /// Hold the lock `name` (with the watchdog) while `critical` runs, and stop `critical` if the
    /// lease is lost: its future is dropped within one renewal interval and the call returns a
    /// [`ErrorKind::LeaseLost`] error. `critical` receives the lease, whose
    /// [`fence`](Lease::fence) it should pass to the resource it writes.
    ///
    /// # Errors
    ///
    /// Lease lost; acquire errors.
    ///
    /// # Examples
    ///
    /// ```
    /// use tairlock::{ExpireLock, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let locks = ExpireLock::new(MemoryStore::new());
    /// let fence = locks.with_lock("nightly-job", |lease| async move { lease.fence() }).await?;
    /// assert!(fence > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn with_lock<T, F, Fut>(&self, name: &str, critical: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock(name).await?;
        let work = critical(guard.lease());
        let outcome = tokio::select! {
            out = work => Some(out),
            () = guard.lost() => None,
        };
        let released = guard.release().await;
        match outcome {
            Some(out) => {
                released?;
                Ok(out)
            }
            None => Err(Error::new(
                ErrorKind::LeaseLost,
                format!("the lease on {name} was lost; the critical section was stopped"),
            )),
        }
    }

    /// Blocking twin of [`lock`](Self::lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_lock(&self, name: &str) -> Result<LockGuard<S>> {
        crate::blocking::block_on(self.store().runtime(), "blocking_lock", self.lock(name))
    }

    /// Blocking twin of [`try_lock_for`](Self::try_lock_for).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock_for(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<LockGuard<S>>> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_try_lock_for",
            self.try_lock_for(name, timeout),
        )
    }
}
