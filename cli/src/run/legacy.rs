//! `tairlock run --legacy`: a lock on the legacy `SETNX`/`GETSET` wire format, on exactly the
//! key the old code names, so that a migrated job and an unmigrated one exclude each other.
//!
//! The legacy kinds have no guards: this module keeps the lease alive itself. A watchdog renews
//! at a third of `--ttl` ([`LegacyLock::renew`]); a definite answer that the lock is no longer
//! ours (gone, another grant, an old client's rewrite) marks the hold lost, and so does its local
//! deadline passing without a renewal. A renewal whose reply is lost may have been applied under
//! a timestamp this client never saw: the next attempt reads the key's current value and renews
//! with it and our fencing token, which the renew script checks atomically (any other grant moves
//! the token, and an old client's write drops the key's TTL), so repeating it is safe.
//!
//! [`Strategy::GetSet`] (the original algorithm, chosen with `--legacy-kind getset` or detected on
//! a server that has neither scripts nor `WATCH`) cannot renew: the command must end within
//! `--ttl`, and is stopped at its deadline less `--grace`.

use std::sync::Arc;
use std::time::Duration;

use tairlock_legacy::wire::parse_value;
use tairlock_legacy::{Holding, LegacyLock, Release, Renew, Strategy, TryAcquire, WatchStore};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::kinds::{Hold, Locker, Released};

/// The shortest pause between two attempts of a failing renewal.
const RETRY: Duration = Duration::from_millis(10);

/// A legacy lock kind, taken for `ttl` at a time.
#[derive(Debug)]
pub struct LegacyLocker<S: WatchStore> {
    lock: LegacyLock<S>,
    ttl: Duration,
}

impl<S: WatchStore> LegacyLocker<S> {
    /// Hold locks of `lock`'s kind for `ttl`, renewed at a third of it. `lock`'s own
    /// `acquire_timeout` bounds a wait that is neither forever nor a single attempt.
    pub fn new(lock: LegacyLock<S>, ttl: Duration) -> Self {
        LegacyLocker { lock, ttl }
    }

    /// The kind in use.
    pub fn strategy(&self) -> Strategy {
        self.lock.strategy()
    }
}

/// What the watchdog and the command's supervision share.
#[derive(Debug, Clone)]
struct State {
    /// The grant in effect.
    holding: Holding,
    /// Its local deadline.
    deadline: Instant,
    /// A definite answer said the lock is not ours any more.
    lost: bool,
    /// A renewal got no reply: the key may hold a timestamp we never saw.
    uncertain: bool,
}

/// A held legacy lock.
#[derive(Debug)]
pub struct LegacyHold<S: WatchStore> {
    lock: LegacyLock<S>,
    key: String,
    state: Arc<watch::Sender<State>>,
    stop: Arc<Notify>,
    watchdog: Option<tokio::task::JoinHandle<()>>,
}

impl<S: WatchStore> Locker for LegacyLocker<S> {
    type Hold = LegacyHold<S>;

    async fn acquire(
        &self,
        name: &str,
        wait: Option<Duration>,
    ) -> tairlock::Result<Option<Self::Hold>> {
        let holding = match wait {
            Some(wait) if wait.is_zero() => match self.lock.try_acquire(name, self.ttl).await? {
                TryAcquire::Acquired(holding) => Some(holding),
                TryAcquire::Busy { .. } => None,
            },
            _ => self.lock.acquire(name, self.ttl).await?,
        };
        let Some(holding) = holding else {
            return Ok(None);
        };
        let state = Arc::new(watch::Sender::new(State {
            deadline: holding.deadline(),
            holding,
            lost: false,
            uncertain: false,
        }));
        let stop = Arc::new(Notify::new());
        let watchdog = (self.lock.strategy() != Strategy::GetSet).then(|| {
            tokio::spawn(watchdog(
                self.lock.clone(),
                self.ttl,
                state.clone(),
                stop.clone(),
            ))
        });
        Ok(Some(LegacyHold {
            lock: self.lock.clone(),
            key: name.to_owned(),
            state,
            stop,
            watchdog,
        }))
    }
}

/// The grant to present next: the one in effect, or after a renewal without a reply, the key's
/// current value with our token (the server checks both atomically).
async fn presentable<S: WatchStore>(lock: &LegacyLock<S>, state: &watch::Sender<State>) -> Holding {
    let current = state.borrow().clone();
    if !current.uncertain {
        return current.holding;
    }
    let held = &current.holding;
    match lock.store().get(held.key()).await {
        Ok(Some(raw)) => match parse_value(&raw) {
            Some(value) => Holding::new(held.key(), value, held.unit(), held.fence()),
            None => current.holding,
        },
        _ => current.holding,
    }
}

/// Renew every third of `ttl` until stopped or lost.
async fn watchdog<S: WatchStore>(
    lock: LegacyLock<S>,
    ttl: Duration,
    state: Arc<watch::Sender<State>>,
    stop: Arc<Notify>,
) {
    let interval = ttl / 3;
    let mut pause = interval;
    loop {
        // Stopped only between renewals: a renewal in flight completes and is recorded.
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = stop.notified() => return,
        }
        if Instant::now() >= state.borrow().deadline {
            state.send_modify(|s| s.lost = true);
            return;
        }
        match renew_once(&lock, ttl, &state).await {
            Renewal::Renewed => pause = interval,
            Renewal::Lost => return,
            // Retried until the deadline passes.
            Renewal::Retry => pause = (interval / 4).max(RETRY),
        }
    }
}

/// What one renewal attempt found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Renewal {
    /// The lease was moved; the state holds the new grant.
    Renewed,
    /// A definite answer: the lock is not ours any more (the state says lost).
    Lost,
    /// No definite answer: try again.
    Retry,
}

/// One renewal, recorded in `state`. A renewal without a reply marks the state uncertain, and
/// the next attempt presents the key's current value (see [`presentable`]).
async fn renew_once<S: WatchStore>(
    lock: &LegacyLock<S>,
    ttl: Duration,
    state: &watch::Sender<State>,
) -> Renewal {
    let holding = presentable(lock, state).await;
    match lock.renew(&holding, ttl).await {
        Ok(Renew::Renewed(renewed)) => {
            state.send_modify(|s| {
                s.deadline = renewed.deadline();
                s.holding = renewed;
                s.uncertain = false;
            });
            Renewal::Renewed
        }
        Ok(_) => {
            state.send_modify(|s| s.lost = true);
            Renewal::Lost
        }
        Err(e) => {
            if e.is_unanswered() {
                state.send_modify(|s| s.uncertain = true);
            }
            Renewal::Retry
        }
    }
}

impl<S: WatchStore> Hold for LegacyHold<S> {
    fn key(&self) -> &str {
        &self.key
    }

    fn fence(&self) -> Option<u64> {
        self.state.borrow().holding.fence()
    }

    fn deadline(&self) -> Option<Instant> {
        Some(self.state.borrow().deadline)
    }

    fn is_lost(&self) -> bool {
        let state = self.state.borrow();
        state.lost || Instant::now() >= state.deadline
    }

    async fn lost(&self) {
        let mut rx = self.state.subscribe();
        loop {
            let (lost, deadline) = {
                let state = rx.borrow_and_update();
                (state.lost, state.deadline)
            };
            if lost {
                return;
            }
            tokio::select! {
                changed = rx.changed() => {
                    if changed.is_err() {
                        return std::future::pending().await;
                    }
                }
                () = tokio::time::sleep_until(deadline) => {
                    if rx.borrow().deadline == deadline {
                        return;
                    }
                }
            }
        }
    }

    /// Only the watchdog renews a legacy lease: a renewal of its own beside the watchdog's
    /// would present a value the other may just have replaced, and read as another holder's.
    async fn renew(&self) -> bool {
        false
    }

    async fn release(mut self) -> Released {
        if let Some(watchdog) = self.watchdog.take() {
            self.stop.notify_one();
            let _ = watchdog.await;
        }
        let holding = presentable(&self.lock, &self.state).await;
        match self.lock.release(&holding).await {
            Ok(Release::Released) => Released::Released,
            Ok(Release::NotHeld) => Released::Gone("gone"),
            Ok(Release::Expired) => Released::Gone("expired"),
            Ok(Release::HeldByOther) => Released::Gone("held by someone else"),
            Ok(Release::Overwritten) => {
                Released::Gone("rewritten by an old-protocol client (SETNX/GETSET)")
            }
            Err(e) => Released::Failed(e.to_string()),
        }
    }
}

impl<S: WatchStore> Drop for LegacyHold<S> {
    fn drop(&mut self) {
        if let Some(watchdog) = self.watchdog.take() {
            watchdog.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use tairlock::{MemoryStore, Store};
    use tairlock_legacy::{Options, Unit};

    use super::*;

    /// A scripted legacy lock on the embedded store, in milliseconds, and a grant of `key`.
    async fn held(key: &str) -> (LegacyLock<MemoryStore>, watch::Sender<State>) {
        let lock = LegacyLock::with_strategy(
            MemoryStore::new(),
            Options::default().unit(Unit::Millis),
            Strategy::Scripted,
        );
        let TryAcquire::Acquired(holding) =
            lock.try_acquire(key, Duration::from_secs(3)).await.unwrap()
        else {
            panic!("a fresh key is free");
        };
        let state = watch::Sender::new(State {
            deadline: holding.deadline(),
            holding,
            lost: false,
            uncertain: false,
        });
        (lock, state)
    }

    /// A renewal the server applied but whose reply was lost: the key now holds a timestamp
    /// this client never saw.
    async fn renewal_with_a_lost_reply(
        lock: &LegacyLock<MemoryStore>,
        state: &watch::Sender<State>,
    ) {
        tokio::time::sleep(Duration::from_millis(5)).await;
        let holding = state.borrow().holding.clone();
        let applied = lock.renew(&holding, Duration::from_secs(3)).await.unwrap();
        assert!(matches!(applied, Renew::Renewed(ref h) if h.value() != holding.value()));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    #[tokio::test]
    async fn a_renewal_after_one_without_a_reply_keeps_the_lease() {
        let (lock, state) = held("lock.a").await;
        renewal_with_a_lost_reply(&lock, &state).await;
        state.send_modify(|s| s.uncertain = true);
        let ttl = Duration::from_secs(3);
        assert_eq!(renew_once(&lock, ttl, &state).await, Renewal::Renewed);
        let now = state.borrow().clone();
        assert!(!now.lost && !now.uncertain);
        let stored = lock.store().get("lock.a").await.unwrap().unwrap();
        assert_eq!(stored, now.holding.value_text().into_bytes());
        // And the release recognises the grant in effect.
        assert_eq!(lock.release(&now.holding).await.unwrap(), Release::Released);
    }

    /// Without the recovery, the same sequence would be taken for another holder: the hold
    /// would be declared lost on an answer that is not definite.
    #[tokio::test]
    async fn presenting_the_old_grant_after_a_lost_reply_is_refused() {
        let (lock, state) = held("lock.b").await;
        renewal_with_a_lost_reply(&lock, &state).await;
        let stale = state.borrow().holding.clone();
        assert_eq!(
            lock.renew(&stale, Duration::from_secs(3)).await.unwrap(),
            Renew::HeldByOther
        );
    }

    /// The recovery presents our token: another client's grant is still a definite loss.
    #[tokio::test]
    async fn another_grant_after_a_lost_reply_is_a_definite_loss() {
        let (lock, state) = held("lock.c").await;
        renewal_with_a_lost_reply(&lock, &state).await;
        state.send_modify(|s| s.uncertain = true);
        lock.store().del("lock.c").await.unwrap();
        assert!(
            lock.try_acquire("lock.c", Duration::from_secs(3))
                .await
                .unwrap()
                .is_acquired()
        );
        let ttl = Duration::from_secs(3);
        assert_eq!(renew_once(&lock, ttl, &state).await, Renewal::Lost);
        assert!(state.borrow().lost);
    }
}
