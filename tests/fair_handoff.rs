//! One-hop handoff in the expire lock's fair mode (issue #13 §3): a release's grant
//! announcement carries the grant, and a waiting `lock()` holds as soon as it reads it, without
//! another command, until a local deadline never later than the server's grant expiry; the
//! guard then confirms the lease to its full length. A lost announcement still ends in the hold
//! through the waiter's refresh, and a grant for another nonce on the same wake channel is
//! ignored. On the embedded store and a real server.
//!
//! Every test runs on a current-thread runtime: nothing else runs between the moment `lock()`
//! returns and the waiter's next statement, so the command log read there is exact.

mod support;

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use support::{Env, TestStore};
use tairlock::scripts::FAIR_LOCK;
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{ExpireLock, Options, Store, Ttl};
use tokio::time::Instant;

const NAME: &str = "handoff-job";

/// The nonce of another acquisition (hex, as every nonce).
const OTHER: &str = "00ddba11";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `name::{memory,redis}` from `async fn name(env)`.
macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            use super::support::Env;

            #[tokio::test]
            async fn memory() {
                super::$name(Env::memory_real_time()).await;
            }

            #[tokio::test]
            async fn redis() {
                super::$name(Env::redis().await).await;
            }
        }
    )+};
}

on_both_stores!(
    a_granted_waiter_holds_without_another_command,
    a_lost_announcement_still_ends_in_the_hold_through_the_refresh,
    a_grant_for_another_nonce_does_not_hand_over_the_lock,
    a_grant_whose_confirmation_finds_it_gone_is_lost,
);

/// Every command sent through the stores that share it, in order: the script's name for a
/// script, the command's debug name otherwise.
#[derive(Default, Clone)]
struct Log(Arc<Mutex<Vec<String>>>);

impl Log {
    fn len(&self) -> usize {
        self.0.lock().len()
    }

    fn since(&self, from: usize) -> Vec<String> {
        self.0.lock()[from..].to_vec()
    }

    fn count(&self, name: &str) -> usize {
        self.0.lock().iter().filter(|n| *n == name).count()
    }
}

impl Hook for Log {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let name = match command {
            Command::Eval { script, .. } => script.name().to_owned(),
            other => format!("{other:?}")
                .split([' ', '{'])
                .next()
                .unwrap_or_default()
                .to_owned(),
        };
        self.0.lock().push(name);
        run
    }
}

/// A client of its own (its own local queue and wake channel) whose commands go to `log`.
fn client<S: TestStore>(
    env: &Env<S>,
    log: &Log,
    options: Options,
) -> ExpireLock<Intercept<S, Log>> {
    ExpireLock::with_options(Intercept::new(env.store.clone(), log.clone()), options)
}

fn lock_key() -> String {
    format!("tairlock:{{{NAME}}}")
}

fn waiters_key() -> String {
    format!("{}:fairw", lock_key())
}

/// The queued waiters' entries (nonce → `<end>:<lease ms>:<wake channel>`), once there are `n`.
async fn queued<S: TestStore>(store: &S, n: usize) -> Vec<(String, String)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let entries = store.hgetall(&waiters_key()).await;
        if entries.len() >= n {
            return entries
                .into_iter()
                .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
                .collect();
        }
        assert!(Instant::now() < deadline, "{n} waiters never queued");
        tokio::time::sleep(ms(5)).await;
    }
}

/// Wait until `log` has seen `n` more attempts of the fair mode than `from`, then a little
/// more: a waiter whose first attempt found the lock busy subscribes and tries once more before
/// it sleeps.
async fn attempts_seen(log: &Log, from: usize, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while log.count(FAIR_LOCK.name()) < from + n {
        assert!(Instant::now() < deadline, "never saw {n} attempts");
        tokio::time::sleep(ms(5)).await;
    }
    tokio::time::sleep(ms(100)).await;
}

async fn pttl<S: Store>(store: &S) -> Duration {
    match store.pttl(&lock_key()).await.unwrap() {
        Ttl::Expires(left) => left,
        other => panic!("the lock key has no expiry: {other:?}"),
    }
}

async fn a_granted_waiter_holds_without_another_command<S: TestStore>(env: Env<S>) {
    // A long waiter lease: the waiter's refreshes (a third of it) stay out of the way.
    let waiter_lease = Duration::from_secs(20);
    let options = Options::default().fair(true).waiter_lease(waiter_lease);
    let log = Log::default();
    let holder = client(&env, &log, options.clone());
    let waiter = client(&env, &log, options);
    let guard = holder.lock(NAME).await.unwrap();
    let from = log.count(FAIR_LOCK.name());
    let (store, waiter_log) = (env.store.clone(), log.clone());
    let next = tokio::spawn(async move {
        let guard = waiter.lock(NAME).await.unwrap();
        // Nothing ran since `lock()` returned (a current-thread runtime).
        let held_at = waiter_log.len();
        let lease = guard.lease();
        // The grant as the server has it, read before the guard's confirmation can run.
        let asked = Instant::now();
        let left = pttl(&store).await;
        (guard, lease, held_at, asked, left)
    });
    // Queued, subscribed, and asleep: the first attempt, and the one after subscribing.
    queued(&env.store, 1).await;
    attempts_seen(&log, from, 2).await;
    let before = log.len();
    guard.release().await.unwrap();
    let (guard, lease, held_at, asked, left) = next.await.unwrap();
    assert_eq!(
        log.0.lock()[before..held_at].to_vec(),
        vec!["fair_unlock".to_owned()],
        "between the release and the waiter's guard only the release ran {}",
        env.context()
    );
    // Held by the grant itself, for the waiter lease.
    assert!(left <= waiter_lease, "{left:?} {}", env.context());
    let deadline = lease.deadline().expect("an acquired lease has a deadline");
    // Never later than the server's expiry of the grant: PTTL was computed after `asked`.
    assert!(
        deadline <= asked + left,
        "the local deadline is {:?} past the server's grant expiry {}",
        deadline.saturating_duration_since(asked + left),
        env.context()
    );
    // The guard confirms it at once: renewed to the guard's full lease, same fencing token.
    let confirmed = Instant::now() + Duration::from_secs(10);
    while guard.lease() == lease {
        assert!(
            Instant::now() < confirmed,
            "never confirmed {}",
            env.context()
        );
        tokio::time::sleep(ms(5)).await;
    }
    assert_eq!(guard.fence(), lease.fence());
    assert!(!guard.is_lost());
    assert!(log.since(held_at).contains(&"renew".to_owned()));
    let full = pttl(&env.store).await;
    assert!(
        full > waiter_lease && full <= Options::default().watchdog_lease,
        "{full:?}"
    );
    assert!(guard.lease().remaining().unwrap() > waiter_lease);
    guard.release().await.unwrap();
    assert!(env.locks().try_lock(NAME).await.unwrap().is_some());
}

async fn a_lost_announcement_still_ends_in_the_hold_through_the_refresh<S: TestStore>(env: Env<S>) {
    // The waiter is subscribed, but the release announces its grant where nobody listens: its
    // entry's wake channel is rewritten just before. It finds its grant at its next refresh (a
    // third of its waiter lease, 300 ms) and holds a confirmed lease.
    let waiter_lease = ms(900);
    let options = Options::default().fair(true).waiter_lease(waiter_lease);
    let log = Log::default();
    let holder = client(&env, &log, options.clone());
    let waiter = client(&env, &log, options);
    let guard = holder.lock(NAME).await.unwrap();
    let from = log.count(FAIR_LOCK.name());
    let next = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    queued(&env.store, 1).await;
    attempts_seen(&log, from, 2).await;
    let (nonce, entry) = queued(&env.store, 1).await.remove(0);
    let (ends, rest) = entry.split_once(':').unwrap();
    let (lease_ms, _channel) = rest.split_once(':').unwrap();
    let deaf = format!("{ends}:{lease_ms}:{}:released:w:nobody", lock_key());
    env.store
        .hset(&waiters_key(), &nonce, deaf.as_bytes())
        .await;
    let attempts = log.count(FAIR_LOCK.name());
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = next.await.unwrap();
    let took = released.elapsed();
    assert!(
        took < waiter_lease,
        "the refresh should have found the grant, took {took:?} {}",
        env.context()
    );
    assert!(
        log.count(FAIR_LOCK.name()) > attempts,
        "the hold came from an attempt"
    );
    assert_eq!(next.lease().nonce(), nonce);
    // Confirmed by that attempt: the full lease, not the grant's.
    assert!(pttl(&env.store).await > waiter_lease);
    next.release().await.unwrap();
}

async fn a_grant_for_another_nonce_does_not_hand_over_the_lock<S: TestStore>(env: Env<S>) {
    // Another acquisition (nonce OTHER) is queued ahead of the waiter under the waiter's own
    // wake channel: the release grants the lock to it and announces that on the channel the
    // waiter listens to. The waiter wakes, must not take the grant as its own, and gets the lock
    // only once that grant has lapsed.
    let other_lease = ms(800);
    let options = Options::default().fair(true).waiter_lease(ms(1500));
    let log = Log::default();
    let holder = client(&env, &log, options.clone());
    let waiter = client(&env, &log, options);
    let guard = holder.lock(NAME).await.unwrap();
    // The waiter's wake channel, learnt from its place in another lock's queue.
    let probe_guard = holder.lock("probe").await.unwrap();
    let probe = {
        let waiter = waiter.clone();
        tokio::spawn(async move { waiter.lock("probe").await })
    };
    let probe_waiters = "tairlock:{probe}:fairw";
    let deadline = Instant::now() + Duration::from_secs(10);
    let probe_entry = loop {
        if let Some((_, v)) = env.store.hgetall(probe_waiters).await.into_iter().next() {
            break String::from_utf8(v).unwrap();
        }
        assert!(Instant::now() < deadline, "the probe never queued");
        tokio::time::sleep(ms(5)).await;
    };
    probe.abort();
    let _ = probe.await;
    probe_guard.release().await.unwrap();
    let client_id = probe_entry.rsplit(":w:").next().unwrap();
    let wake = format!("{}:released:w:{client_id}", lock_key());
    // The other acquisition queues first, under the waiter's wake channel.
    let lock = lock_key();
    let keys = [
        lock.clone(),
        format!("{lock}:fence"),
        format!("{lock}:fairq"),
        waiters_key(),
    ];
    let args = [
        "30000".to_owned(),
        OTHER.to_owned(),
        "60000".to_owned(),
        other_lease.as_millis().to_string(),
        wake,
        "1".to_owned(),
    ];
    let busy = env.store.eval(&FAIR_LOCK, &keys, &args).await.unwrap();
    assert_eq!(busy.as_array().unwrap()[0].as_int(), Some(0), "{busy:?}");
    let from = log.count(FAIR_LOCK.name());
    let next = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    queued(&env.store, 2).await;
    attempts_seen(&log, from, 2).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let granted = env.locks().inspect(NAME).await.unwrap().holder.unwrap();
    assert_eq!(granted.nonce(), OTHER);
    let next = next.await.unwrap();
    let took = released.elapsed();
    assert!(
        took >= other_lease - ms(100),
        "the waiter held after {took:?}, while the other grant ({other_lease:?}) was live {}",
        env.context()
    );
    assert_ne!(next.lease().nonce(), OTHER);
    assert!(next.fence() > granted.fence());
    next.release().await.unwrap();
}

/// Deletes the lock key just before the first renewal it sees runs: the guard's confirmation
/// of a one-hop grant then finds the lease gone.
struct GoneBeforeConfirm<S> {
    store: S,
    armed: std::sync::atomic::AtomicBool,
}

impl<S: Store> Hook for GoneBeforeConfirm<S> {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let renew = matches!(command, Command::Eval { script, .. } if script.name() == "renew");
        if renew && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst) {
            return Box::pin(async move {
                self.store.del(&lock_key()).await?;
                run.await
            });
        }
        run
    }
}

async fn a_grant_whose_confirmation_finds_it_gone_is_lost<S: TestStore>(env: Env<S>) {
    let options = Options::default()
        .fair(true)
        .waiter_lease(Duration::from_secs(20));
    let holder = env.locks_with(options.clone());
    let hook = GoneBeforeConfirm {
        store: env.store.clone(),
        armed: std::sync::atomic::AtomicBool::new(true),
    };
    let waiter = ExpireLock::with_options(Intercept::new(env.store.clone(), hook), options);
    let guard = holder.lock(NAME).await.unwrap();
    let next = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    queued(&env.store, 1).await;
    tokio::time::sleep(ms(300)).await;
    guard.release().await.unwrap();
    let next = next.await.unwrap();
    // The confirmation (a renewal) finds the lock gone: lost the usual way, at once, not at the
    // grant's deadline 20 s later.
    tokio::time::timeout(Duration::from_secs(5), next.lost())
        .await
        .expect("the failed confirmation did not lose the guard");
    assert!(next.is_lost());
    assert!(env.locks().try_lock(NAME).await.unwrap().is_some());
}
