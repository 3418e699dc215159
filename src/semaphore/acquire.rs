//! Waiting for permits: the semaphore's steps for the [engine](crate::engine), and the calls
//! that return a [`PermitGuard`].

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::PermitGuard;
use super::lock::{Permit, PermitAttempt, Semaphore};
use crate::blocking;
use crate::engine::{self, Attempt, Kind, Patience};
use crate::error::Result;
use crate::expire_lock::ttl_ms;
use crate::store::Store;

impl<S: Store> Semaphore<S> {
    async fn guard(
        &self,
        name: &str,
        permits: u32,
        patience: Patience,
    ) -> Result<Option<PermitGuard<S>>> {
        self.check_permits(permits)?;
        let ttl = self.options.watchdog_lease;
        ttl_ms(ttl)?;
        let keys = self.keys(name)?;
        let step = Step {
            sem: self.clone(),
            name: name.into(),
            channel: keys.channel.into(),
            permits,
            ttl,
            queue: self.options.fair && patience.waits(),
        };
        let wait = self.options.wait;
        Ok(engine::acquire(&self.local, name, wait, patience, step)
            .await?
            .map(|permit| PermitGuard::new(self.clone(), name, permit, ttl)))
    }

    /// Wait for `permits` of the semaphore `name` and hold them, renewed by the guard's
    /// watchdog until it is released or dropped.
    ///
    /// Waits by notification (a release announces itself) or polling, per
    /// [`SemaphoreOptions::wait`](super::SemaphoreOptions::wait), never longer than the earliest holder's lease, in this
    /// client's local FIFO; rides through transient errors with the same nonce.
    ///
    /// # Errors
    ///
    /// Bad input (see [`attempt`](Self::attempt)), nothing sent; a key holding data that is not
    /// ours; store errors other than transient ones, and transient ones that last over a
    /// minute in a row.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while a request was in flight (or returning an error after one
    /// whose outcome is unknown), it releases in the background whatever that request may have
    /// taken, and the lease bounds it in any case.
    ///
    /// # Examples
    ///
    /// ```
    /// use tairlock::{MemoryStore, Semaphore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let sem = Semaphore::new(MemoryStore::new(), 2);
    /// let a = sem.acquire("jobs", 1).await?;
    /// let b = sem.acquire("jobs", 1).await?;
    /// assert!(sem.try_acquire("jobs", 1).await?.is_none());
    /// assert_ne!(a.fence(), b.fence());
    /// a.release().await?;
    /// assert_eq!(sem.available("jobs").await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn acquire(&self, name: &str, permits: u32) -> Result<PermitGuard<S>> {
        Ok(self
            .guard(name, permits, Patience::Forever)
            .await?
            .expect("waiting forever ends only with the permits"))
    }

    /// Take `permits` of the semaphore `name` if they fit now (one attempt): `Ok(None)` if not.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire); transient errors are returned at once.
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire(&self, name: &str, permits: u32) -> Result<Option<PermitGuard<S>>> {
        self.guard(name, permits, Patience::Once).await
    }

    /// Wait up to `timeout` for `permits` of the semaphore `name`: `Ok(None)` if they did not
    /// fit in time.
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`acquire`](Self::acquire).
    pub async fn try_acquire_for(
        &self,
        name: &str,
        permits: u32,
        timeout: Duration,
    ) -> Result<Option<PermitGuard<S>>> {
        self.guard(name, permits, Patience::from_timeout(Some(timeout)))
            .await
    }

    /// Blocking twin of [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_acquire(&self, name: &str, permits: u32) -> Result<PermitGuard<S>> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_acquire",
            self.acquire(name, permits),
        )
    }

    /// Blocking twin of [`try_acquire`](Self::try_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_acquire(&self, name: &str, permits: u32) -> Result<Option<PermitGuard<S>>> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_try_acquire",
            self.try_acquire(name, permits),
        )
    }

    /// Blocking twin of [`try_acquire_for`](Self::try_acquire_for).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_acquire_for(
        &self,
        name: &str,
        permits: u32,
        timeout: Duration,
    ) -> Result<Option<PermitGuard<S>>> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_try_acquire_for",
            self.try_acquire_for(name, permits, timeout),
        )
    }
}

/// The semaphore's steps for the [engine](crate::engine): one [`SEM_ACQUIRE`] under the
/// acquisition's nonce (in fair mode, taking or refreshing a place in the queue when refused);
/// undone by releasing that nonce (which also leaves the queue; a no-op if it took nothing).
#[derive(Clone)]
struct Step<S: Store> {
    sem: Semaphore<S>,
    name: Arc<str>,
    channel: Arc<str>,
    permits: u32,
    ttl: Duration,
    /// Fair mode, waiting: a refused attempt takes (or refreshes) a place in the queue.
    queue: bool,
}

impl<S: Store> Kind for Step<S> {
    type Store = S;
    type Held = Permit;

    fn store(&self) -> &S {
        self.sem.store()
    }

    fn channel(&self) -> Option<&str> {
        Some(&self.channel)
    }

    fn label(&self) -> &'static str {
        "semaphore"
    }

    fn fence(&self, permit: &Permit) -> Option<u64> {
        Some(permit.fence)
    }

    async fn attempt(&self, nonce: &str) -> Result<Attempt<Permit>> {
        Ok(
            match self
                .sem
                .attempt_as(&self.name, self.permits, self.ttl, nonce, self.queue)
                .await?
            {
                PermitAttempt::Acquired(permit) => Attempt::Acquired(permit),
                PermitAttempt::Busy { remaining, .. } => Attempt::Busy {
                    // Nobody holds any (a larger limit's holders just left): try again soon.
                    remaining: Some(remaining).filter(|r| !r.is_zero()),
                },
            },
        )
    }

    fn busy_leaves_trace(&self) -> bool {
        // A waiting call's place in the fair queue.
        self.queue
    }

    fn refresh_every(&self) -> Option<Duration> {
        // Refresh the place well within the waiter lease.
        self.queue.then(|| self.sem.options.waiter_lease / 3)
    }

    async fn undo(self, nonce: String) {
        // Release the nonce (and leave the queue). Without an answer, try again until the
        // lease (or the place) would have lapsed anyway.
        let give_up = Instant::now() + self.ttl.max(self.sem.options.waiter_lease);
        let mut transient = engine::Transient::new();
        while let Err(e) = self.sem.give_back(&self.name, &nonce).await {
            if !e.is_transient() || !transient.wait(Some(give_up)).await {
                return;
            }
        }
    }
}
