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
