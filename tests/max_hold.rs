//! `Options::max_hold`, the bound on automatic renewal (issue #16, part 3), on a real server:
//! the watchdog renews a guard's lease until `max_hold` after the acquisition and never past it,
//! then stops; the guard reports the loss when the lease runs out, and the lock is free for
//! others right after. The reader/writer lock's read and write holds (shared read holds too)
//! are bounded the same way by `tairlock_rwlock::Options::max_hold`, and a semaphore's permits
//! by `SemaphoreOptions::max_hold` (on a real server and on the embedded store).

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::{
    ErrorKind, ExpireLock, MemoryStore, Options, RedisStore, Semaphore, SemaphoreOptions, Store,
    Ttl,
};

const LEASE: Duration = Duration::from_millis(600);
const MAX_HOLD: Duration = Duration::from_millis(1800);

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

fn bounded(store: RedisStore) -> ExpireLock<RedisStore> {
    ExpireLock::with_options(
        store,
        Options::default().watchdog_lease(LEASE).max_hold(MAX_HOLD),
    )
}

/// Renewed past its first lease (three leases' worth), then lost once `max_hold` has passed:
/// not before the bound, and the server's key ends with it.
#[tokio::test]
async fn the_watchdog_stops_at_max_hold_and_the_guard_reports_the_loss() {
    let server = RedisServer::start();
    let locks = bounded(server.store().await);
    let probe = server.store().await;
    let started = Instant::now();
    let guard = locks.lock("bounded").await.unwrap();
    assert!(guard.is_renewed());
    // Well past the first lease: the watchdog renewed it.
    tokio::time::sleep(LEASE * 2).await;
    assert!(!guard.is_lost(), "lost before max_hold");
    assert!(matches!(
        probe.pttl(&key("bounded")).await.unwrap(),
        Ttl::Expires(_)
    ));
    tokio::time::timeout(MAX_HOLD + LEASE + Duration::from_secs(5), guard.lost())
        .await
        .expect("the guard never reported the loss after max_hold");
    let held = started.elapsed();
    assert!(
        held >= MAX_HOLD - Duration::from_millis(100),
        "lost after {held:?}, before max_hold {MAX_HOLD:?}"
    );
    assert!(guard.is_lost());
    // The lease the server holds ran out with it: nobody renewed past the bound.
    let deadline = Instant::now() + Duration::from_secs(5);
    while probe.pttl(&key("bounded")).await.unwrap() != Ttl::Missing {
        assert!(Instant::now() < deadline, "the key outlived max_hold");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let other = ExpireLock::new(server.store().await);
    assert!(other.try_lock("bounded").await.unwrap().is_some());
}

/// Without the bound the same guard is still held after the time `max_hold` allows.
#[tokio::test]
async fn without_max_hold_the_watchdog_keeps_renewing() {
    let server = RedisServer::start();
    let locks = ExpireLock::with_options(
        server.store().await,
        Options::default().watchdog_lease(LEASE),
    );
    assert_eq!(locks.options().max_hold, None);
    let guard = locks.lock("unbounded").await.unwrap();
    tokio::time::sleep(MAX_HOLD + LEASE * 2).await;
    assert!(!guard.is_lost());
    guard.release().await.unwrap();
}

/// `with_lock` stops a critical section that outlives `max_hold` and says the lease was lost.
#[tokio::test]
async fn with_lock_stops_the_critical_section_at_max_hold() {
    let server = RedisServer::start();
    let locks = bounded(server.store().await);
    let started = Instant::now();
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        locks.with_lock("job", |_lease| tokio::time::sleep(Duration::from_secs(60))),
    )
    .await
    .expect("the critical section was not stopped");
    assert_eq!(outcome.unwrap_err().kind(), ErrorKind::LeaseLost);
    assert!(started.elapsed() >= MAX_HOLD - Duration::from_millis(100));
}

fn bounded_rw(store: RedisStore, share_reads: bool) -> tairlock_rwlock::RwLock<RedisStore> {
    tairlock_rwlock::RwLock::with_options(
        store,
        tairlock_rwlock::Options::default()
            .watchdog_lease(LEASE)
            .max_hold(MAX_HOLD)
            .share_reads(share_reads),
    )
}

/// Waits until nobody holds `name` on the server, or fails after a generous bound.
async fn until_free(rw: &tairlock_rwlock::RwLock<RedisStore>, name: &str) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while rw.is_locked(name).await.unwrap() {
        assert!(Instant::now() < deadline, "{name} outlived max_hold");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A reader/writer hold `lost` after `started`: renewed past its first lease, lost once
/// `max_hold` has passed and not before.
async fn lost_at_the_bound(started: Instant, is_lost: impl Fn() -> bool, lost: impl Future) {
    tokio::time::sleep(LEASE * 2).await;
    assert!(!is_lost(), "lost before max_hold");
    tokio::time::timeout(MAX_HOLD + LEASE + Duration::from_secs(5), lost)
        .await
        .expect("the guard never reported the loss after max_hold");
    let held = started.elapsed();
    assert!(
        held >= MAX_HOLD - Duration::from_millis(100),
        "lost after {held:?}, before max_hold {MAX_HOLD:?}"
    );
    assert!(is_lost());
}

/// An RwLock write hold: renewed until `max_hold`, then lost, and the lock is free after it.
#[tokio::test]
async fn a_write_hold_stops_renewing_at_max_hold() {
    let server = RedisServer::start();
    let rw = bounded_rw(server.store().await, false);
    let started = Instant::now();
    let guard = rw.write("w").await.unwrap();
    lost_at_the_bound(started, || guard.is_lost(), guard.lost()).await;
    let other = tairlock_rwlock::RwLock::new(server.store().await);
    until_free(&other, "w").await;
    assert!(other.try_write("w").await.unwrap().is_some());
}

/// An RwLock read hold, unshared and shared: renewed until `max_hold`, then lost, and a writer
/// gets in after it.
#[tokio::test]
async fn a_read_hold_stops_renewing_at_max_hold() {
    let server = RedisServer::start();
    for (name, share) in [("r", false), ("shared", true)] {
        let rw = bounded_rw(server.store().await, share);
        let started = Instant::now();
        let guard = rw.read(name).await.unwrap();
        lost_at_the_bound(started, || guard.is_lost(), guard.lost()).await;
        let other = tairlock_rwlock::RwLock::new(server.store().await);
        until_free(&other, name).await;
        assert!(other.try_write(name).await.unwrap().is_some(), "{name}");
    }
}

/// Without the bound, RwLock read and write holds are still held after the time `max_hold`
/// allows.
#[tokio::test]
async fn without_max_hold_rwlock_holds_keep_renewing() {
    let server = RedisServer::start();
    let rw = tairlock_rwlock::RwLock::with_options(
        server.store().await,
        tairlock_rwlock::Options::default().watchdog_lease(LEASE),
    );
    assert_eq!(rw.options().max_hold, None);
    let write = rw.write("w").await.unwrap();
    let read = rw.read("r").await.unwrap();
    tokio::time::sleep(MAX_HOLD + LEASE * 2).await;
    assert!(!write.is_lost());
    assert!(!read.is_lost());
    write.release().await.unwrap();
    read.release().await.unwrap();
}

fn bounded_sem<S: Store>(store: S) -> Semaphore<S> {
    Semaphore::with_options(
        store,
        2,
        SemaphoreOptions::default()
            .watchdog_lease(LEASE)
            .max_hold(MAX_HOLD),
    )
}

/// Both permits of a semaphore of 2, taken under `max_hold` on `store`: renewed past the first
/// lease, lost once `max_hold` has passed and not before, the holders gone from the server
/// with it, and the permits taken by a client without the bound right after.
async fn permits_stop_renewing_at_max_hold<S: Store + Clone>(store: S) {
    let sem = bounded_sem(store.clone());
    assert_eq!(sem.options().max_hold, Some(MAX_HOLD));
    let started = Instant::now();
    let guard = sem.acquire("bounded", 2).await.unwrap();
    lost_at_the_bound(started, || guard.is_lost(), guard.lost()).await;
    let other = Semaphore::new(store, 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while other.available("bounded").await.unwrap() != 2 {
        assert!(
            Instant::now() < deadline,
            "the permits outlived max_hold: {:?}",
            other.inspect("bounded").await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let taken = other.try_acquire("bounded", 2).await.unwrap();
    assert!(taken.is_some(), "the permits did not come back");
}

/// A semaphore's permits on a real server: renewed until `max_hold`, then lost, and free for
/// others after it.
#[tokio::test]
async fn semaphore_permits_stop_renewing_at_max_hold() {
    let server = RedisServer::start();
    permits_stop_renewing_at_max_hold(server.store().await).await;
}

/// The same on the embedded store.
#[tokio::test]
async fn semaphore_permits_stop_renewing_at_max_hold_on_the_embedded_store() {
    permits_stop_renewing_at_max_hold(MemoryStore::new()).await;
}

/// Without the bound, a semaphore's permits are still held after the time `max_hold` allows,
/// on a real server and on the embedded store.
#[tokio::test]
async fn without_max_hold_semaphore_permits_keep_renewing() {
    let server = RedisServer::start();
    let redis = Semaphore::with_options(
        server.store().await,
        1,
        SemaphoreOptions::default().watchdog_lease(LEASE),
    );
    let memory = Semaphore::with_options(
        MemoryStore::new(),
        1,
        SemaphoreOptions::default().watchdog_lease(LEASE),
    );
    assert_eq!(redis.options().max_hold, None);
    let held = redis.acquire("unbounded", 1).await.unwrap();
    let embedded = memory.acquire("unbounded", 1).await.unwrap();
    tokio::time::sleep(MAX_HOLD + LEASE * 2).await;
    assert!(!held.is_lost());
    assert!(!embedded.is_lost());
    assert_eq!(redis.available("unbounded").await.unwrap(), 0);
    assert_eq!(memory.available("unbounded").await.unwrap(), 0);
    held.release().await.unwrap();
    embedded.release().await.unwrap();
}
