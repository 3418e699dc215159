//! The waiting of the Watch and Scripted kinds: their attempt step ([`TryStep`]), run by the
//! core's [engine](tairlock::engine).

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tairlock::WaitStrategy;
use tairlock::engine::{self, Attempt, Kind, Patience, Waiters};

use crate::options::{Holding, Options, TryAcquire};

/// The Watch and Scripted kinds' attempt step, for the core's [engine](tairlock::engine).
pub(crate) trait TryStep: Clone + Send + Sync + 'static {
    /// The store.
    type Store: tairlock::Store;
    /// The store.
    fn store(&self) -> &Self::Store;
    /// The options.
    fn options(&self) -> &Options;
    /// The local queues.
    fn waiters(&self) -> &Waiters;
    /// One attempt.
    fn try_acquire(
        &self,
        key: &str,
        lease: Duration,
    ) -> impl Future<Output = tairlock::Result<TryAcquire>> + Send;
}

#[derive(Clone)]
struct Step<L> {
    lock: L,
    key: Arc<str>,
    lease: Duration,
}

impl<L: TryStep> Kind for Step<L> {
    type Store = L::Store;
    type Held = Holding;

    fn store(&self) -> &L::Store {
        self.lock.store()
    }

    /// The old protocol announces nothing: its waiters poll.
    fn channel(&self) -> Option<&str> {
        None
    }

    fn label(&self) -> &'static str {
        "legacy"
    }

    async fn attempt(&self, _nonce: &str) -> tairlock::Result<Attempt<Holding>> {
        Ok(match self.lock.try_acquire(&self.key, self.lease).await? {
            TryAcquire::Acquired(holding) => Attempt::Acquired(holding),
            TryAcquire::Busy { remaining, .. } => Attempt::Busy { remaining },
        })
    }

    /// The value carries no owner id, so nothing can be recognised as ours: a lock an
    /// unanswered attempt took is held for nobody until its timestamp passes.
    async fn undo(self, _nonce: String) {}
}

/// The waiting of the Watch and Scripted kinds, by the core's engine: attempt, then sleep the
/// poll interval (jittered) or the holder's remaining time, whichever is shorter, in a local
/// FIFO queue per key, until acquired (`Some`) or out of time (`None`).
pub(crate) async fn acquire<L: TryStep>(
    lock: &L,
    key: &str,
    lease: Duration,
) -> tairlock::Result<Option<Holding>> {
    let options = lock.options();
    let interval = options.poll_interval;
    let wait = WaitStrategy::Poll {
        min: interval,
        max: interval,
    };
    let patience = Patience::from_timeout(options.acquire_timeout);
    let step = Step {
        lock: lock.clone(),
        key: key.into(),
        lease,
    };
    engine::acquire(lock.waiters(), key, wait, patience, step).await
}
