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
//! Either way (all of it is the [`engine`], shared by every lock kind), waiters in
//! one process for one lock line up in a local FIFO queue, and only the
//! head of the queue talks to the server: N local waiters cost O(1) commands per handoff, and
//! no local waiter starves.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::engine::{self, Attempt, Kind, Patience};
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::{Acquire, ExpireLock};
use crate::guard::LockGuard;
use crate::lease::Lease;
use crate::store::Store;

// Defined with the engine, which waits by it; named here too, where the waiting calls are.
pub use crate::engine::WaitStrategy;

/// The expire lock's steps for the [engine](crate::engine): one `expire_lock` under the
/// acquisition's nonce; undone by repeating it (which returns our lease if the lost attempt
/// took the lock) and releasing what it returns.
#[derive(Clone)]
struct Step<S: Store> {
    locks: ExpireLock<S>,
    name: Arc<str>,
    channel: Arc<str>,
    ttl: Duration,
}

impl<S: Store> Kind for Step<S> {
    type Store = S;
    type Held = Lease;

    fn store(&self) -> &S {
        self.locks.store()
    }

    fn channel(&self) -> Option<&str> {
        Some(&self.channel)
    }

    fn label(&self) -> &'static str {
        "expire"
    }

    fn fence(&self, lease: &Lease) -> Option<u64> {
        Some(lease.fence())
    }

    async fn attempt(&self, nonce: &str) -> Result<Attempt<Lease>> {
        let outcome = self
            .locks
            .expire_lock_with_nonce(&self.name, self.ttl, nonce.to_owned())
            .await?;
        Ok(match outcome {
            Acquire::Acquired(lease) => Attempt::Acquired(lease),
            Acquire::Held { remaining, .. } => Attempt::Busy { remaining },
        })
    }

    async fn undo(self, nonce: String) {
        // Without an answer (the server is slow or failing over) try again until the lease
        // would have run out anyway.
        let give_up = Instant::now() + self.ttl;
        let lease = loop {
            match self
                .locks
                .expire_lock_with_nonce(&self.name, self.ttl, nonce.clone())
                .await
            {
                Ok(Acquire::Acquired(lease)) => break lease,
                Err(e) if e.is_transient() && pause(give_up).await => {}
                _ => return,
            }
        };
        loop {
            match self.locks.expire_unlock(&self.name, &lease).await {
                Err(e) if e.is_transient() && pause(give_up).await => {}
                _ => return,
            }
        }
    }
}

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

impl<S: Store> ExpireLock<S> {
    /// Acquire `name` for `ttl`. With `one_hop` (for a holder that confirms an unconfirmed lease
    /// at once: a [`LockGuard`]), a fair waiter takes a grant announcement as the lock; see
    /// [`fair`](crate::fair).
    pub(crate) async fn acquire_lease(
        &self,
        name: &str,
        ttl: Duration,
        patience: Patience,
        one_hop: bool,
    ) -> Result<Option<Lease>> {
        crate::expire_lock::ttl_ms(ttl)?;
        let wait = self.options().wait;
        if self.options().fair {
            let step = self.fair_step(name, ttl, patience, one_hop)?;
            return engine::acquire(&self.local, name, wait, patience, step).await;
        }
        let keys = self.keys(name)?;
        let step = Step {
            locks: self.clone(),
            name: name.into(),
            channel: keys.channel.into(),
            ttl,
        };
        engine::acquire(&self.local, name, wait, patience, step).await
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
            .acquire_lease(name, ttl, patience, true)
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
        self.guard(name, None, Patience::within(timeout)).await
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
        self.guard(name, Some(lease), Patience::from_timeout(timeout))
            .await
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

impl<S: Store> ExpireLock<S> {
    /// Blocking twin of [`try_lock`](Self::try_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock(&self, name: &str) -> Result<Option<LockGuard<S>>> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_try_lock",
            self.try_lock(name),
        )
    }

    /// Blocking twin of [`lock_with_lease`](Self::lock_with_lease).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_lock_with_lease(
        &self,
        name: &str,
        lease: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<LockGuard<S>>> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_lock_with_lease",
            self.lock_with_lease(name, lease, timeout),
        )
    }

    /// Blocking twin of [`with_lock`](Self::with_lock): the critical section is the same
    /// future, run on the store's runtime, and stopped the same way when the lease is lost.
    ///
    /// # Errors
    ///
    /// As [`with_lock`](Self::with_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_with_lock<T, F, Fut>(&self, name: &str, critical: F) -> Result<T>
    where
        F: FnOnce(Lease) -> Fut,
        Fut: Future<Output = T>,
    {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_with_lock",
            self.with_lock(name, critical),
        )
    }
}
