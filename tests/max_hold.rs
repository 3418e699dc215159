//! `Options::max_hold`, the bound on automatic renewal (issue #16, part 3), on a real server:
//! the watchdog renews a guard's lease until `max_hold` after the acquisition and never past it,
//! then stops; the guard reports the loss when the lease runs out, and the lock is free for
//! others right after.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::{ErrorKind, ExpireLock, Options, RedisStore, Store, Ttl};

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
