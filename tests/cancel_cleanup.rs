//! Cleanup never overruns the caller's patience and is never abandoned (issue 26 §2): the undo
//! of a waiter that gives up (leaving a fair queue, giving back a grant or permits) is a task of
//! its own on the store's runtime. A server that stops answering at the deadline must not hold
//! the call up past its patience and a round trip, and the undo goes on after the call returns.
//!
//! The embedded store behind an [`Intercept`] whose hook can stop answering one script (each of
//! its calls then fails after a short while as a timed-out reply would, without running) stands
//! in for a server that stopped answering: what is tested is the client's timing.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use tairlock::scripts::{FAIR_UNLOCK, SEM_RELEASE};
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{
    Error, ErrorKind, ExpireLock, MemoryStore, Options, Script, Semaphore, SemaphoreOptions, Store,
};
use tokio::time::Instant;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// How long a call may take beyond its patience here: the engine's wait for its undo (one round
/// trip) and scheduling on a loaded machine.
const SLACK: Duration = Duration::from_millis(400);

/// Stops answering `script` while `stalled`: each call fails after 100 ms as a timed-out reply,
/// without running. Counts the calls it stalled.
struct Stall {
    script: &'static Script,
    stalled: AtomicBool,
    calls: AtomicUsize,
}

impl Stall {
    fn new(script: &'static Script) -> Arc<Self> {
        Arc::new(Stall {
            script,
            stalled: AtomicBool::new(true),
            calls: AtomicUsize::new(0),
        })
    }
}

impl Hook for Stall {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        match command {
            Command::Eval { script, .. }
                if std::ptr::eq(script, self.script) && self.stalled.load(Ordering::SeqCst) =>
            {
                self.calls.fetch_add(1, Ordering::SeqCst);
                Box::pin(async {
                    tokio::time::sleep(ms(100)).await;
                    Err(Error::new(
                        ErrorKind::Timeout,
                        "test: the server stopped answering",
                    ))
                })
            }
            _ => run,
        }
    }
}

/// A fair waiter whose leave is never answered gives up within its patience; its leave goes on
/// in the background and lands once the server answers again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_gives_up_in_time_when_its_leave_is_not_answered() {
    let store = MemoryStore::new();
    let options = Options::default().fair(true).waiter_lease(ms(2000));
    let holder = ExpireLock::with_options(store.clone(), options.clone());
    let guard = holder.lock("job").await.unwrap();
    let stall = Stall::new(&FAIR_UNLOCK);
    let waiter = ExpireLock::with_options(Intercept::shared(store.clone(), stall.clone()), options);
    let patience = ms(300);
    let started = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        waiter.try_lock_for("job", patience),
    )
    .await
    .expect("the call overran its patience by seconds");
    let took = started.elapsed();
    assert!(got.unwrap().is_none());
    assert!(
        took <= patience + SLACK,
        "a {patience:?} patience took {took:?}"
    );
    // The leave goes on after the call returned: still queued while the server does not answer,
    // gone once it answers again.
    let queue = "tairlock:{job}:fairq";
    tokio::time::sleep(ms(300)).await;
    assert!(
        stall.calls.load(Ordering::SeqCst) >= 2,
        "the leave was not retried"
    );
    assert_eq!(
        store.key_type(queue).await.unwrap(),
        "zset",
        "left without an answer?"
    );
    stall.stalled.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.key_type(queue).await.unwrap() != "none" {
        assert!(Instant::now() < deadline, "the waiter never left the queue");
        tokio::time::sleep(ms(20)).await;
    }
    guard.release().await.unwrap();
}

/// The same for a fair semaphore's waiter, whose undo gives its nonce back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_semaphore_waiter_gives_up_in_time_when_its_release_is_not_answered() {
    let store = MemoryStore::new();
    let options = SemaphoreOptions::default()
        .fair(true)
        .waiter_lease(ms(2000));
    let holder = Semaphore::with_options(store.clone(), 1, options.clone());
    let permit = holder.acquire("pool", 1).await.unwrap();
    let stall = Stall::new(&SEM_RELEASE);
    let waiter =
        Semaphore::with_options(Intercept::shared(store.clone(), stall.clone()), 1, options);
    let patience = ms(300);
    let started = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        waiter.try_acquire_for("pool", 1, patience),
    )
    .await
    .expect("the call overran its patience by seconds");
    let took = started.elapsed();
    assert!(got.unwrap().is_none());
    assert!(
        took <= patience + SLACK,
        "a {patience:?} patience took {took:?}"
    );
    let queue = "tairlock:{pool}:sem:q";
    tokio::time::sleep(ms(300)).await;
    assert!(
        stall.calls.load(Ordering::SeqCst) >= 2,
        "the release was not retried"
    );
    assert_eq!(store.key_type(queue).await.unwrap(), "zset");
    stall.stalled.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.key_type(queue).await.unwrap() != "none" {
        assert!(Instant::now() < deadline, "the waiter never left the queue");
        tokio::time::sleep(ms(20)).await;
    }
    permit.release().await.unwrap();
}

/// What [`RenewHook`] does to the renewals of one lock key.
#[derive(Default)]
struct RenewHook {
    /// Apply the next this-many renewals of the key but report their reply lost.
    lose: parking_lot::Mutex<Option<(String, usize)>>,
    /// Hold every renewal of the key until the gate opens, reporting each one held.
    gate: parking_lot::Mutex<Option<(String, Arc<tokio::sync::Semaphore>)>>,
    held: tokio::sync::Notify,
}

impl Hook for RenewHook {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let Command::Eval { script, keys, .. } = command else {
            return run;
        };
        if !std::ptr::eq(script, &tairlock::scripts::RENEW) {
            return run;
        }
        let key = keys[0].clone();
        Box::pin(async move {
            let gate = self
                .gate
                .lock()
                .as_ref()
                .filter(|(k, _)| *k == key)
                .map(|(_, g)| g.clone());
            if let Some(gate) = gate {
                self.held.notify_one();
                drop(gate.acquire().await.unwrap());
            }
            let reply = run.await;
            let mut lose = self.lose.lock();
            if let Some((k, left)) = &mut *lose
                && *k == key
                && *left > 0
            {
                *left -= 1;
                return Err(Error::new(ErrorKind::Timeout, "test: the reply was lost"));
            }
            reply
        })
    }
}

/// A renewal round of several locks in which one lock is found gone and another's renewal is
/// applied without its reply: the renewal stays pending, and the release learns the renewed
/// lease and deletes it, rather than sending the old one and leaving the lock to nobody.
#[tokio::test]
async fn a_multi_lock_release_deletes_a_renewal_whose_reply_was_lost() {
    let store = MemoryStore::new();
    let hook = Arc::new(RenewHook::default());
    let locks = ExpireLock::new(Intercept::shared(store.clone(), hook.clone()));
    let admin = ExpireLock::new(store.clone());
    // Two names in two slots: taken one at a time, renewed together.
    let guard = locks.lock_many(&["a", "b"]).await.unwrap();
    assert!(admin.force_unlock("a").await.unwrap());
    // The renewal of `b` and its repeat are applied; neither reply comes.
    *hook.lose.lock() = Some(("tairlock:{b}".to_owned(), 2));
    let err = guard.renew(Duration::from_secs(30)).await.unwrap_err();
    assert!(err.is_lease_lost(), "{err}");
    let b = admin.inspect("b").await.unwrap().holder.unwrap();
    assert_ne!(b, guard.leases()[1], "the renewal was applied");
    let outcomes = guard.release().await.unwrap();
    assert_eq!(
        outcomes,
        vec![tairlock::Unlock::NotHeld, tairlock::Unlock::Released]
    );
    assert!(
        !admin.is_locked("b").await.unwrap(),
        "the renewed lock is held by nobody: {:?}",
        admin.inspect("b").await.unwrap()
    );
}

/// `lock_many` cancelled after it took a lock but while it waits to add it to the hold (a
/// renewal of an earlier lock is in flight): the lock is released with the others, not left
/// held by nobody until its lease ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_many_cancelled_while_adding_a_lease_releases_it() {
    let store = MemoryStore::new();
    let hook = Arc::new(RenewHook::default());
    let lease = Duration::from_secs(3);
    let options = Options::default().watchdog_lease(lease);
    let locks = ExpireLock::with_options(Intercept::shared(store.clone(), hook.clone()), options);
    let other = ExpireLock::new(store.clone());
    let b = other.lock("b").await.unwrap();
    // Every renewal of `a` waits at the gate: the watchdog's first one (a third of the lease in)
    // holds the renewal lock until the test opens it.
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    *hook.gate.lock() = Some(("tairlock:{a}".to_owned(), gate.clone()));
    let call = tokio::spawn({
        let locks = locks.clone();
        async move { locks.lock_many(&["a", "b"]).await.map(drop) }
    });
    hook.held.notified().await;
    // `b` comes free; the call takes it and then waits for the renewal in flight.
    b.release().await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let holder = other.inspect("b").await.unwrap().holder;
        if holder.is_some() {
            break;
        }
        assert!(Instant::now() < deadline, "the call never took `b`");
        tokio::time::sleep(ms(5)).await;
    }
    tokio::time::sleep(ms(50)).await;
    assert!(!call.is_finished());
    call.abort();
    let _ = call.await;
    gate.add_permits(100);
    let released = Instant::now() + lease / 3;
    while other.is_locked("b").await.unwrap() || other.is_locked("a").await.unwrap() {
        assert!(
            Instant::now() < released,
            "a lock of the cancelled call stayed held: a {:?}, b {:?}",
            other.inspect("a").await.unwrap().holder,
            other.inspect("b").await.unwrap().holder
        );
        tokio::time::sleep(ms(10)).await;
    }
}

/// `try_lock_many_for` that took one lock and gives up on the next: its rollback (the release
/// of the first) is a task of its own, so a release the server does not answer never holds the
/// call up past its patience; it lands once the server answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_lock_rollback_never_overruns_the_patience() {
    let store = MemoryStore::new();
    let stall = Stall::new(&tairlock::scripts::EXPIRE_UNLOCK);
    let locks = ExpireLock::new(Intercept::shared(store.clone(), stall.clone()));
    let other = ExpireLock::new(store.clone());
    let b = other.lock("b").await.unwrap();
    let patience = ms(300);
    let started = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        locks.try_lock_many_for(&["a", "b"], patience),
    )
    .await
    .expect("the call overran its patience by seconds");
    let took = started.elapsed();
    assert!(got.unwrap().is_none());
    assert!(
        took <= patience + SLACK,
        "a {patience:?} patience took {took:?}"
    );
    assert!(
        other.is_locked("a").await.unwrap(),
        "released without an answer?"
    );
    stall.stalled.store(false, Ordering::SeqCst);
    let deadline = Instant::now() + Duration::from_secs(5);
    while other.is_locked("a").await.unwrap() {
        assert!(Instant::now() < deadline, "the rollback never released `a`");
        tokio::time::sleep(ms(20)).await;
    }
    b.release().await.unwrap();
}
