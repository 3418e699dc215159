//! The deadline rule on every lock kind of the core crate: a lease's local deadline is the send
//! time of the request whose answer granted (or renewed) it, plus the time that answer reports
//! the lease has left, less drift — never the length asked for, dated from a later send.
//!
//! Each grant case loses the replies of one script for 1.5 s of a 3 s lease: the script runs on
//! the store, its reply never comes (as after a timeout or a dropped connection), so the waiting
//! call repeats it with the same nonce and gets back what the first send took. The lease it
//! hands out must not be relied on past the server's own expiry of it, read from the store after
//! the call (the latest local instant it can be: the read's reply time + its `PTTL` + 1 ms).
//! Every case runs on the embedded store (paused time) and on a real `redis-server`.
//!
//! Also here: a deadline change wakes a waiting `lost()`, and a lock key without a time to live
//! is waited for with back-off (not retried every millisecond) and reported by `inspect`.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use support::RedisServer;
use tairlock::clock::TokioClock;
use tairlock::keys::key_slot;
use tairlock::redlock::{Redlock, RedlockOptions};
use tairlock::scripts::{EXPIRE_LOCK, FAIR_LOCK, LOCK_MANY, RENEW, SEM_ACQUIRE};
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{
    Error, ErrorKind, ExpireLock, MemoryStore, Options, Script, Semaphore, SemaphoreOptions, Store,
    Ttl, WaitStrategy,
};
use tokio::time::Instant;

/// The lease of every case.
const LEASE: Duration = Duration::from_secs(3);
/// How long the replies of the grant are lost: half the lease.
const OUTAGE: Duration = Duration::from_millis(1500);
/// The waiting calls' patience: far longer than the outage.
const PATIENCE: Duration = Duration::from_secs(10);

/// A hook that, while armed for a script, runs each call of it on the store and then reports
/// its reply lost; counts the calls of every script.
#[derive(Default)]
struct Outage {
    armed: Mutex<Option<(&'static Script, Instant)>>,
    lost: AtomicUsize,
    calls: Mutex<Vec<&'static str>>,
}

impl Outage {
    /// Lose the replies of `script` for `length` from now.
    fn lose(&self, script: &'static Script, length: Duration) {
        *self.armed.lock() = Some((script, Instant::now() + length));
    }

    fn lost(&self) -> usize {
        self.lost.load(Ordering::SeqCst)
    }

    fn calls_of(&self, script: &Script) -> usize {
        let calls = self.calls.lock();
        calls.iter().filter(|n| **n == script.name()).count()
    }
}

impl Hook for Outage {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let Command::Eval { script, .. } = command else {
            return run;
        };
        self.calls.lock().push(script.name());
        let armed = *self.armed.lock();
        match armed {
            Some((lost, until)) if std::ptr::eq(lost, script) && Instant::now() < until => {
                Box::pin(async move {
                    // Applied by the store; the reply never comes.
                    let _ = run.await;
                    self.lost.fetch_add(1, Ordering::SeqCst);
                    Err(Error::new(ErrorKind::Timeout, "the reply was lost"))
                })
            }
            _ => run,
        }
    }
}

type Lossy<S> = Intercept<S, Outage>;

fn lossy<S: Store>(store: S) -> Lossy<S> {
    Intercept::new(store, Outage::default())
}

/// The embedded store on tokio's (paused) clock: its server time is the tests' time.
fn memory() -> MemoryStore {
    MemoryStore::with_clock(Arc::new(TokioClock::new()))
}

/// The latest local instant the server's expiry of `key` can be: the read's reply time, plus
/// the `PTTL` it read, plus the millisecond `PTTL` rounds off.
async fn expiry_of<S: Store>(store: &S, key: &str) -> Instant {
    let ttl = store.pttl(key).await.unwrap();
    let read = Instant::now();
    match ttl {
        Ttl::Expires(left) => read + left + Duration::from_millis(1),
        other => panic!("{key} has no expiry: {other:?}"),
    }
}

/// `deadline` is not past the server's expiry `expiry`, and (the lease the first send made,
/// not a new one) not much earlier than that send + the lease.
#[track_caller]
fn assert_within_the_servers_expiry(what: &str, deadline: Instant, expiry: Instant, sent: Instant) {
    let at = |i: Instant| i.saturating_duration_since(sent);
    assert!(
        deadline <= expiry,
        "{what}: relied on until {:?} after the first send, the server's lease ends at {:?}",
        at(deadline),
        at(expiry)
    );
    assert!(
        deadline + Duration::from_millis(500) >= sent + LEASE,
        "{what}: a deadline at {:?} wastes the lease",
        at(deadline)
    );
}

/// The answered call came only after the outage, its grant repeated.
#[track_caller]
fn assert_repeated(outage: &Outage, sent: Instant) {
    assert!(
        outage.lost() >= 2,
        "the first send and its repeat were lost"
    );
    assert!(
        sent.elapsed() >= OUTAGE,
        "answered {:?} after the first send, within the outage",
        sent.elapsed()
    );
}

// ---- grants repeated after lost replies -----------------------------------------------------

async fn a_repeated_acquire_is_dated_from_the_lease_its_first_send_made<S: Store>(store: S) {
    let store = lossy(store);
    let locks = ExpireLock::new(store.clone());
    store.hook().lose(&EXPIRE_LOCK, OUTAGE);
    let sent = Instant::now();
    let guard = locks
        .lock_with_lease("job", LEASE, Some(PATIENCE))
        .await
        .unwrap()
        .expect("free");
    assert_repeated(store.hook(), sent);
    let deadline = guard.lease().deadline().unwrap();
    let expiry = expiry_of(&store, &locks.keys("job").unwrap().lock).await;
    assert_within_the_servers_expiry("expire lock", deadline, expiry, sent);
    guard.release().await.unwrap();
}

async fn a_repeated_lock_many_is_dated_from_the_leases_its_first_send_made<S: Store>(store: S) {
    let store = lossy(store);
    let locks = ExpireLock::with_options(store.clone(), Options::default().watchdog_lease(LEASE));
    let peer = same_slot_as("job");
    store.hook().lose(&LOCK_MANY, OUTAGE);
    let sent = Instant::now();
    let guard = locks
        .try_lock_many_for(&["job", &peer], PATIENCE)
        .await
        .unwrap()
        .expect("free");
    assert_repeated(store.hook(), sent);
    for (name, lease) in guard.names().iter().zip(guard.leases()) {
        let expiry = expiry_of(&store, &locks.keys(name).unwrap().lock).await;
        let what = format!("lock_many {name}");
        assert_within_the_servers_expiry(&what, lease.deadline().unwrap(), expiry, sent);
    }
    guard.release().await.unwrap();
}

/// The fair mode's take rewrites the lease's expiry on a repeat (so the old dating was sound
/// there too); its deadline now comes from the reply all the same.
async fn a_repeated_fair_take_is_within_the_servers_expiry<S: Store>(store: S) {
    let store = lossy(store);
    let locks = ExpireLock::with_options(store.clone(), Options::default().fair(true));
    store.hook().lose(&FAIR_LOCK, OUTAGE);
    let sent = Instant::now();
    let guard = locks
        .lock_with_lease("job", LEASE, Some(PATIENCE))
        .await
        .unwrap()
        .expect("free");
    assert_repeated(store.hook(), sent);
    let expiry = expiry_of(&store, &locks.keys("job").unwrap().lock).await;
    let deadline = guard.lease().deadline().unwrap();
    assert!(deadline <= expiry, "fair take: past the server's expiry");
    guard.release().await.unwrap();
}

/// A repeated semaphore acquire moves its lease to the full length again (so the old dating was
/// sound there too); its deadline now comes from the reply's score − `TIME` all the same.
async fn a_repeated_semaphore_acquire_is_within_the_servers_expiry<S: Store>(store: S) {
    let store = lossy(store);
    let options = SemaphoreOptions::default().watchdog_lease(LEASE);
    let sem = Semaphore::with_options(store.clone(), 2, options);
    store.hook().lose(&SEM_ACQUIRE, OUTAGE);
    let sent = Instant::now();
    let permit = sem
        .try_acquire_for("pool", 1, PATIENCE)
        .await
        .unwrap()
        .expect("free");
    assert_repeated(store.hook(), sent);
    let inspection = sem.inspect("pool").await.unwrap();
    let expiry = Instant::now() + inspection.holders[0].remaining + Duration::from_millis(1);
    let deadline = permit.deadline().unwrap();
    assert!(deadline <= expiry, "semaphore: past the server's expiry");
    permit.release().await.unwrap();
}

/// A renewal whose reply was lost, repeated after the outage with its nonce: dated from its
/// first send (the pending-attempt rule) and the time the lease has left at the repeat.
async fn a_repeated_renewal_is_within_the_servers_expiry<S: Store>(store: S) {
    let store = lossy(store);
    let locks = ExpireLock::new(store.clone());
    let guard = locks
        .lock_with_lease("job", LEASE, None)
        .await
        .unwrap()
        .expect("free");
    store.hook().lose(&RENEW, OUTAGE);
    let sent = Instant::now();
    let err = guard.renew(LEASE).await.unwrap_err();
    assert!(err.is_unanswered(), "{err}");
    tokio::time::sleep_until(sent + OUTAGE).await;
    guard.renew(LEASE).await.unwrap();
    assert!(store.hook().lost() >= 2);
    let expiry = expiry_of(&store, &locks.keys("job").unwrap().lock).await;
    let deadline = guard.lease().deadline().unwrap();
    assert!(deadline <= expiry, "renewal: past the server's expiry");
    assert!(
        deadline <= sent + LEASE,
        "dated from the first send of the renewal"
    );
    guard.release().await.unwrap();
}

/// Redlock's validity: the latest instant by which a majority of its servers still hold the key,
/// each relied on until the round's start + the time it reported left − drift.
async fn a_redlock_lease_is_within_its_majoritys_expiry<S: Store>(servers: Vec<S>) {
    let redlock = Redlock::new(servers.clone(), RedlockOptions::default()).unwrap();
    let key = "tairlock:{job}:redlock";
    // One server holds the key for another acquisition, briefly: a majority of two is left.
    assert!(
        servers[0]
            .set_nx_px(key, b"someone", Duration::from_millis(200))
            .await
            .unwrap()
    );
    let lease = redlock
        .acquire("job", LEASE, PATIENCE)
        .await
        .unwrap()
        .expect("a majority is free");
    let mut expiries = Vec::new();
    for server in &servers {
        if server.get(key).await.unwrap().as_deref() == Some(lease.value().as_bytes()) {
            expiries.push(expiry_of(server, key).await);
        }
    }
    expiries.sort_unstable_by(|a, b| b.cmp(a));
    let majority = redlock.quorum();
    assert!(expiries.len() >= majority, "{} hold it", expiries.len());
    assert!(
        lease.deadline() <= expiries[majority - 1],
        "redlock: relied on past the time a majority holds the key"
    );
    redlock.release(&lease).await;
}

/// A name whose lock key hashes to the slot of `name`'s: `lock_many` takes both by one script.
fn same_slot_as(name: &str) -> String {
    let key = |n: &str| format!("tairlock:{{{n}}}");
    let slot = key_slot(&key(name));
    (0..1_000_000)
        .map(|i| format!("peer{i}"))
        .find(|n| key_slot(&key(n)) == slot)
        .expect("a slot collision within a million names")
}

// ---- a deadline change wakes lost() ---------------------------------------------------------

/// `lost()` read the 30 s deadline and sleeps until it; a renewal to 1 s moves it earlier, and
/// `lost()` resolves at the new deadline.
#[tokio::test(start_paused = true)]
async fn renewing_to_a_shorter_lease_makes_lost_resolve_at_the_new_deadline() {
    let locks = ExpireLock::new(memory());
    let guard = locks
        .lock_with_lease("job", Duration::from_secs(30), None)
        .await
        .unwrap()
        .expect("free");
    let start = Instant::now();
    let lost_at = async {
        guard.lost().await;
        Instant::now()
    };
    let shorten = async {
        // `lost()` is polled first: it has read the 30 s deadline when this renews.
        tokio::task::yield_now().await;
        guard.renew(Duration::from_secs(1)).await.unwrap();
        guard.lease().deadline().unwrap()
    };
    let (lost_at, deadline) = tokio::join!(lost_at, shorten);
    assert!(deadline < start + Duration::from_secs(1));
    assert_eq!(lost_at, deadline, "lost() resolved at the new deadline");
    assert!(guard.is_lost());
}

/// The other way: a renewal that lands moves the deadline later, and `lost()` does not resolve
/// at the old one.
#[tokio::test(start_paused = true)]
async fn a_renewal_that_lands_keeps_lost_from_resolving_at_the_old_deadline() {
    let locks = ExpireLock::new(memory());
    let guard = locks
        .lock_with_lease("job", Duration::from_secs(1), None)
        .await
        .unwrap()
        .expect("free");
    let old = guard.lease().deadline().unwrap();
    let lost = tokio::time::timeout(Duration::from_secs(5), async {
        guard.lost().await;
        Instant::now()
    });
    let extend = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        guard.renew(Duration::from_secs(10)).await.unwrap();
    };
    let (lost, ()) = tokio::join!(lost, extend);
    assert!(
        lost.is_err(),
        "lost() resolved at {:?}",
        lost.map(|at| at - old)
    );
    assert!(!guard.is_lost());
}

// ---- a lock key without a time to live -------------------------------------------------------

/// A holder's key loses its time to live (`PERSIST`, a restore): a waiter backs off as for a
/// holder of unknown remaining time (125–250 ms between attempts), rather than trying again
/// every millisecond until its patience runs out, and `inspect` says the key has no expiry.
async fn a_lock_key_without_a_ttl_is_waited_for_with_back_off<S: Store>(store: S) {
    let store = lossy(store);
    let locks = ExpireLock::new(store.clone());
    let holder = locks
        .lock_with_lease("job", LEASE, None)
        .await
        .unwrap()
        .expect("free");
    let inspection = locks.inspect("job").await.unwrap();
    assert!(!inspection.no_expiry, "{inspection:?}");
    // SET without PX: the same lease, no time to live (as PERSIST leaves it).
    let key = locks.keys("job").unwrap().lock;
    store
        .set(&key, holder.lease().value().as_bytes())
        .await
        .unwrap();
    let inspection = locks.inspect("job").await.unwrap();
    assert!(inspection.no_expiry, "{inspection:?}");
    assert_eq!(inspection.ttl, Ttl::Persistent);

    // By notification: 125-250 ms apart (none comes); by polling: the poll's back-off, here
    // 10 ms doubling to 100 ms, jittered. Before, both were 1 ms apart: about 2000 attempts.
    for (wait, most) in [
        (WaitStrategy::Notify, 20),
        (
            WaitStrategy::Poll {
                min: Duration::from_millis(10),
                max: Duration::from_millis(100),
            },
            60,
        ),
    ] {
        let waiter = ExpireLock::with_options(store.clone(), Options::default().wait(wait));
        let before = store.hook().calls_of(&EXPIRE_LOCK);
        let started = Instant::now();
        let got = waiter
            .try_lock_for("job", Duration::from_secs(2))
            .await
            .unwrap();
        assert!(got.is_none(), "the holder keeps it");
        let attempts = store.hook().calls_of(&EXPIRE_LOCK) - before;
        assert!(
            (2..=most).contains(&attempts),
            "{wait:?}: {attempts} attempts in {:?}",
            started.elapsed()
        );
    }
    holder.release().await.unwrap();
}

// ---- each case on both stores ---------------------------------------------------------------

/// `case` on the embedded store (paused time) and on a real server.
macro_rules! on_both_stores {
    ($($case:ident),* $(,)?) => {
        mod memory {
            $(
                #[tokio::test(start_paused = true)]
                async fn $case() {
                    super::$case(super::memory()).await;
                }
            )*
        }
        mod redis {
            $(
                #[tokio::test]
                async fn $case() {
                    let server = super::RedisServer::start();
                    super::$case(server.store().await).await;
                }
            )*
        }
    };
}

on_both_stores!(
    a_repeated_acquire_is_dated_from_the_lease_its_first_send_made,
    a_repeated_lock_many_is_dated_from_the_leases_its_first_send_made,
    a_repeated_fair_take_is_within_the_servers_expiry,
    a_repeated_semaphore_acquire_is_within_the_servers_expiry,
    a_repeated_renewal_is_within_the_servers_expiry,
    a_lock_key_without_a_ttl_is_waited_for_with_back_off,
);

#[tokio::test(start_paused = true)]
async fn a_redlock_lease_is_within_its_majoritys_expiry_on_memory() {
    a_redlock_lease_is_within_its_majoritys_expiry(vec![memory(), memory(), memory()]).await;
}

#[tokio::test]
async fn a_redlock_lease_is_within_its_majoritys_expiry_on_redis() {
    let servers = [
        RedisServer::start(),
        RedisServer::start(),
        RedisServer::start(),
    ];
    let mut stores = Vec::new();
    for server in &servers {
        stores.push(server.store().await);
    }
    a_redlock_lease_is_within_its_majoritys_expiry(stores).await;
}
