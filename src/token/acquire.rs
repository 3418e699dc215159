//! Waiting for a token lock: its steps for the [engine](crate::engine), and the calls that
//! return a [`TokenGuard`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::guard::TokenGuard;
use super::{TokenAttempt, TokenHolding, TokenLock};
use crate::blocking;
use crate::engine::{self, Attempt, Kind, Patience};
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::ttl_ms;
use crate::store::Store;

/// The token lock's steps for the [engine](crate::engine): one [`TokenLock::attempt`] with the
/// acquisition's nonce as its token (the same token for every attempt, so a repeat finds what
/// an unanswered one took); undone by releasing that token (a no-op if it took nothing).
#[derive(Clone)]
struct Step<S: Store> {
    locks: TokenLock<S>,
    key: Arc<str>,
    channel: Arc<str>,
    ttl: Duration,
}

impl<S: Store> Kind for Step<S> {
    type Store = S;
    type Held = TokenHolding;

    fn store(&self) -> &S {
        self.locks.store()
    }

    fn channel(&self) -> Option<&str> {
        Some(&self.channel)
    }

    fn label(&self) -> &'static str {
        "token"
    }

    fn fence(&self, holding: &TokenHolding) -> Option<u64> {
        Some(holding.fence())
    }

    fn refresh_every(&self) -> Option<Duration> {
        // Foreign clients announce no release: look again this often.
        Some(self.locks.options().recheck)
    }

    async fn attempt(&self, nonce: &str) -> Result<Attempt<TokenHolding>> {
        Ok(
            match self.locks.attempt(&self.key, nonce, self.ttl).await? {
                TokenAttempt::Acquired(holding) => Attempt::Acquired(holding),
                TokenAttempt::Busy { remaining } => Attempt::Busy { remaining },
            },
        )
    }

    async fn undo(self, nonce: String) {
        // Compare-and-delete of the token: removes the lock only if an unanswered attempt took
        // it. Without an answer, try again until the lease would have run out anyway.
        let give_up = Instant::now() + self.ttl;
        let mut transient = engine::Transient::new();
        while let Err(e) = self.locks.release(&self.key, &nonce).await {
            if !e.is_transient() || !transient.wait(Some(give_up)).await {
                return;
            }
        }
    }
}

impl<S: Store> TokenLock<S> {
    async fn guard(
        &self,
        key: &str,
        lease: Option<Duration>,
        patience: Patience,
    ) -> Result<Option<TokenGuard<S>>> {
        let (ttl, watchdog) = match lease {
            Some(ttl) => (ttl, false),
            None => (self.options().watchdog_lease, true),
        };
        ttl_ms(ttl)?;
        let keys = self.keys(key)?;
        let step = Step {
            locks: self.clone(),
            key: key.into(),
            channel: keys.channel.into(),
            ttl,
        };
        let wait = self.options().wait;
        Ok(engine::acquire(&self.local, key, wait, patience, step)
            .await?
            .map(|holding| TokenGuard::new(self.clone(), holding, ttl, watchdog)))
    }

    /// Wait for the lock `key` and hold it, renewed by the watchdog until the guard is released
    /// or dropped.
    ///
    /// Waits in this client's local queue, woken at once by the releases of this crate's
    /// clients, and looking again every [`recheck`](super::TokenOptions::recheck) for those of
    /// foreign clients (which announce nothing), never later than the holder's TTL runs out.
    /// Rides through transient errors ([`Error::is_transient`]) with the same token, so a lock
    /// an unanswered attempt took is found rather than orphaned.
    ///
    /// # Errors
    ///
    /// Bad input (see [`attempt`](Self::attempt)), nothing sent; a key holding another type;
    /// store errors other than transient ones, and transient ones that last over a minute in a
    /// row.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropped while a request was in flight (or returning an error after one
    /// whose outcome is unknown), it releases in the background whatever that request may have
    /// taken, and the TTL bounds it in any case.
    pub async fn lock(&self, key: &str) -> Result<TokenGuard<S>> {
        Ok(self
            .guard(key, None, Patience::Forever)
            .await?
            .expect("waiting forever ends only with the lock"))
    }

    /// One attempt: the lock with a watchdog, or `None` if it is busy.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock), except that transient errors are returned at once.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock(&self, key: &str) -> Result<Option<TokenGuard<S>>> {
        self.guard(key, None, Patience::Once).await
    }

    /// Wait up to `timeout` for the lock; `None` if it did not come free in time.
    ///
    /// # Errors
    ///
    /// As [`lock`](Self::lock); transient errors are retried until `timeout`.
    ///
    /// # Cancel safety
    ///
    /// As [`lock`](Self::lock).
    pub async fn try_lock_for(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<TokenGuard<S>>> {
        self.guard(key, None, Patience::within(timeout)).await
    }

    /// Wait up to `timeout` (forever if `None`) for the lock with a fixed `lease` and no
    /// watchdog: the key expires with the lease, and the guard is lost then.
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
        key: &str,
        lease: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<TokenGuard<S>>> {
        self.guard(key, Some(lease), Patience::from_timeout(timeout))
            .await
    }

    /// Hold the lock `key` (with the watchdog) while `critical` runs, and stop `critical` if the
    /// lease is lost: its future is dropped and the call returns an
    /// [`ErrorKind::LeaseLost`] error. `critical` receives the holding (its
    /// [`fence`](TokenHolding::fence) is ours only: see the module docs).
    ///
    /// # Errors
    ///
    /// Lease lost; acquire errors.
    pub async fn with_lock<T, F, Fut>(&self, key: &str, critical: F) -> Result<T>
    where
        F: FnOnce(TokenHolding) -> Fut,
        Fut: Future<Output = T>,
    {
        let guard = self.lock(key).await?;
        let work = critical(guard.holding());
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
                format!("the lease on {key} was lost; the critical section was stopped"),
            )),
        }
    }

    /// Blocking twin of [`lock`](Self::lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_lock(&self, key: &str) -> Result<TokenGuard<S>> {
        blocking::block_on(self.store().runtime(), "blocking_lock", self.lock(key))
    }

    /// Blocking twin of [`try_lock`](Self::try_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock(&self, key: &str) -> Result<Option<TokenGuard<S>>> {
        blocking::block_on(
            self.store().runtime(),
            "blocking_try_lock",
            self.try_lock(key),
        )
    }

    /// Blocking twin of [`try_lock_for`](Self::try_lock_for).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock_for(
        &self,
        key: &str,
        timeout: Duration,
    ) -> Result<Option<TokenGuard<S>>> {
        blocking::block_on(
            self.store().runtime(),
            "blocking_try_lock_for",
            self.try_lock_for(key, timeout),
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
        key: &str,
        lease: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<TokenGuard<S>>> {
        blocking::block_on(
            self.store().runtime(),
            "blocking_lock_with_lease",
            self.lock_with_lease(key, lease, timeout),
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
    pub fn blocking_with_lock<T, F, Fut>(&self, key: &str, critical: F) -> Result<T>
    where
        F: FnOnce(TokenHolding) -> Fut,
        Fut: Future<Output = T>,
    {
        blocking::block_on(
            self.store().runtime(),
            "blocking_with_lock",
            self.with_lock(key, critical),
        )
    }
}
