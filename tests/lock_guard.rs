//! Guards (DESIGN.md §7, issue #4 part 2): `release()` reports the outcome, `Drop` releases in
//! the background without blocking, `#[must_use]` is on every guard, and cancelling or timing
//! out an acquire (mid-wait and mid-acquire) never leaves a lock held beyond its TTL.
//!
//! Every test runs on a real `redis-server` unless its name says otherwise.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::{ExpireLock, MemoryStore, Options, RedisStore, Store, Ttl, Unlock, WaitStrategy};

const NAME: &str = "guarded";

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

/// `PTTL` of the lock key of `name`, read on a separate connection.
fn pttl(server: &RedisServer, name: &str) -> i64 {
    server
        .cli(&["PTTL", &key(name)])
        .parse()
        .unwrap_or_else(|e| server.fail(format!("PTTL reply: {e}")))
}

/// Poll until the lock key of `name` is gone; how long that took, or `None` after `limit`.
async fn gone_within(server: &RedisServer, name: &str, limit: Duration) -> Option<Duration> {
    let start = Instant::now();
    while start.elapsed() < limit {
        if pttl(server, name) == -2 {
            return Some(start.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

#[tokio::test]
async fn release_reports_released_and_frees_the_lock() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    let guard = locks.lock(NAME).await.unwrap();
    assert!(pttl(&server, NAME) > 0, "held on the server");
    assert!(guard.fence() > 0);
    assert_eq!(guard.name(), NAME);
    assert!(guard.is_renewed(), "lock() runs the watchdog");
    assert!(!guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    assert_eq!(
        pttl(&server, NAME),
        -2,
        "the key is gone once release returns"
    );
    assert!(locks.try_lock(NAME).await.unwrap().is_some());
}

#[tokio::test]
async fn release_after_the_lease_ran_out_reports_not_held_or_held_by_other() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    let lease = Duration::from_millis(150);

    let expired = locks
        .lock_with_lease("a", lease, Some(Duration::ZERO))
        .await
        .unwrap()
        .expect("free");
    assert!(!expired.is_renewed(), "an explicit lease has no watchdog");
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    assert!(expired.is_lost(), "past its local deadline");
    assert_eq!(expired.release().await.unwrap(), Unlock::NotHeld);

    let taken_over = locks
        .lock_with_lease("b", lease, None)
        .await
        .unwrap()
        .expect("free");
    tokio::time::sleep(lease + Duration::from_millis(100)).await;
    let other = ExpireLock::new(server.store().await);
    let newer = other.try_lock("b").await.unwrap().expect("expired: free");
    assert_eq!(
        taken_over.release().await.unwrap(),
        Unlock::HeldByOther,
        "the stale guard must not delete the new holder's lock"
    );
    assert!(pttl(&server, "b") > 0, "the new holder still holds it");
    assert_eq!(newer.release().await.unwrap(), Unlock::Released);
}

#[tokio::test]
async fn drop_releases_in_the_background() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    let guard = locks.lock(NAME).await.unwrap();
    assert!(pttl(&server, NAME) > 25_000, "a 30 s watchdog lease");

    let dropped_at = Instant::now();
    drop(guard);
    let drop_took = dropped_at.elapsed();
    assert!(
        drop_took < Duration::from_millis(5),
        "drop must not block on the server ({drop_took:?})"
    );
    let freed = gone_within(&server, NAME, Duration::from_secs(2))
        .await
        .unwrap_or_else(|| server.fail("the key is still there 2 s after the guard was dropped"));
    println!("drop -> key gone: {freed:?} (the lease had 30 s left)");
    assert!(locks.try_lock(NAME).await.unwrap().is_some());
}

#[test]
fn drop_outside_any_runtime_releases_in_the_background() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(RedisStore::blocking_connect(&server.url()).unwrap());
    let guard = locks.blocking_lock(NAME).unwrap();
    let start = Instant::now();
    drop(guard);
    assert!(
        start.elapsed() < Duration::from_millis(5),
        "drop never blocks"
    );
    let deadline = Instant::now() + Duration::from_secs(2);
    while pttl(&server, NAME) != -2 {
        assert!(
            Instant::now() < deadline,
            "not released 2 s after a drop on a plain thread"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[tokio::test]
async fn drop_on_the_memory_store_releases_in_the_background() {
    let store = MemoryStore::new();
    let locks = ExpireLock::new(store.clone());
    drop(locks.lock(NAME).await.unwrap());
    let start = Instant::now();
    while store.pttl(&key(NAME)).await.unwrap() != Ttl::Missing {
        assert!(start.elapsed() < Duration::from_secs(2), "not released");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Mid-wait: the acquire is parked (subscribed, waiting for a release) when the timeout fires.
/// Nothing may be left behind: after the holder releases, nobody holds the lock.
#[tokio::test]
async fn timeout_while_waiting_leaves_nothing_held() {
    let server = RedisServer::start();
    let holder = ExpireLock::new(server.store().await);
    let waiter = ExpireLock::new(server.store().await);
    let held = holder
        .lock_with_lease(NAME, Duration::from_secs(10), None)
        .await
        .unwrap()
        .unwrap();

    for timeout in [1, 5, 20, 100] {
        let outcome = tokio::time::timeout(Duration::from_millis(timeout), waiter.lock(NAME)).await;
        assert!(outcome.is_err(), "the lock is held: the wait must time out");
    }
    // try_lock_for's own timeout, and lock_with_lease's, end the same way.
    assert!(
        waiter
            .try_lock_for(NAME, Duration::from_millis(50))
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        waiter
            .lock_with_lease(
                NAME,
                Duration::from_secs(60),
                Some(Duration::from_millis(50))
            )
            .await
            .unwrap()
            .is_none()
    );

    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    // Give any stray background work time to run; the key must stay absent.
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            pttl(&server, NAME),
            -2,
            "a cancelled waiter took the lock after the release"
        );
    }
    // And the cancelled waiters left no local queue entry that blocks the next acquire.
    let next = tokio::time::timeout(Duration::from_millis(500), waiter.lock(NAME))
        .await
        .expect("the waiter's client can lock again at once")
        .unwrap();
    assert_eq!(next.release().await.unwrap(), Unlock::Released);
}

/// How an acquire under test is started.
#[derive(Debug, Clone, Copy)]
enum Attempt {
    /// `lock_with_lease(.., Some(0))`: one attempt, no subscription.
    Once,
    /// `lock_with_lease(.., None)` with the polling strategy: the first request is the acquire.
    PollForever,
    /// `lock_with_lease(.., None)` by notification: the first request is the SUBSCRIBE of the
    /// shared pub/sub connection, so the timeout lands before the acquire is sent.
    NotifyForever,
}

/// Pause the server, start an acquire with a 60 s lease, time it out while its first request is
/// in flight, and show that the lock is free again shortly after the pause ends, long before the
/// TTL. Returns whether the paused acquire was granted (and then cleaned up).
async fn cancel_mid_request(attempt: Attempt) -> bool {
    let server = RedisServer::start();
    let wait = match attempt {
        Attempt::PollForever => WaitStrategy::Poll {
            min: Duration::from_millis(5),
            max: Duration::from_millis(50),
        },
        Attempt::Once | Attempt::NotifyForever => WaitStrategy::Notify,
    };
    let locks = ExpireLock::with_options(server.store().await, Options::default().wait(wait));
    // Load the scripts first, so the paused request is the acquire itself.
    let warm = locks.try_lock("warm-up").await.unwrap().unwrap();
    warm.release().await.unwrap();

    let pause = Duration::from_millis(400);
    assert_eq!(
        server.cli(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "ALL"]),
        "OK"
    );
    let paused_at = Instant::now();
    let lease = Duration::from_secs(60);
    let patience = match attempt {
        Attempt::Once => Some(Duration::ZERO),
        Attempt::PollForever | Attempt::NotifyForever => None,
    };
    let outcome = tokio::time::timeout(
        Duration::from_millis(100),
        locks.lock_with_lease(NAME, lease, patience),
    )
    .await;
    assert!(
        outcome.is_err(),
        "{attempt:?}: the server is paused, the request is in flight"
    );

    tokio::time::sleep(pause.saturating_sub(paused_at.elapsed())).await;
    let freed = gone_within(&server, NAME, Duration::from_secs(3))
        .await
        .unwrap_or_else(|| {
            server.fail(format!(
                "{attempt:?}: the lock is still held (PTTL {}) 3 s after the pause; the \
                 cancelled acquire's lease is {lease:?}",
                pttl(&server, NAME)
            ))
        });
    // Whether the paused acquire ran (and was then released by the cleanup) or never ran: a
    // grant leaves the fence key behind.
    let granted = server.cli(&["EXISTS", "tairlock:{guarded}:fence"]) != "0";
    println!("{attempt:?}: key gone {freed:?} after the pause ended; granted: {granted}");
    let other = ExpireLock::new(server.store().await);
    assert!(other.try_lock(NAME).await.unwrap().is_some(), "{attempt:?}");
    granted
}

/// Mid-acquire: the acquire request is in flight (the server is paused) when the timeout
/// fires. The server then grants the lock to nobody; the background cleanup must release it
/// long before its 60 s lease would.
#[tokio::test]
async fn timeout_mid_acquire_is_cleaned_up_long_before_the_ttl() {
    assert!(
        cancel_mid_request(Attempt::Once).await,
        "the paused single attempt was granted once the pause ended (then cleaned up)"
    );
}

#[tokio::test]
async fn timeout_mid_acquire_while_polling_is_cleaned_up_long_before_the_ttl() {
    assert!(
        cancel_mid_request(Attempt::PollForever).await,
        "the paused polling acquire was granted once the pause ended (then cleaned up)"
    );
}

/// By notification too the first request of a wait is the acquire (a waiter subscribes only
/// once the lock was found busy): cancelled in flight, it is granted once the pause ends and
/// cleaned up, as the others.
#[tokio::test]
async fn timeout_mid_acquire_by_notification_is_cleaned_up_long_before_the_ttl() {
    assert!(
        cancel_mid_request(Attempt::NotifyForever).await,
        "the paused acquire was granted once the pause ended (then cleaned up)"
    );
}

/// Cancel acquires at random points around one round trip, many times: whichever point the
/// cancellation lands on (before sending, in flight, after the reply), nothing stays held.
#[tokio::test]
async fn random_cancellation_points_never_leak_a_lock() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    // One round trip, measured.
    let start = Instant::now();
    for _ in 0..20 {
        locks
            .try_lock(NAME)
            .await
            .unwrap()
            .unwrap()
            .release()
            .await
            .unwrap();
    }
    let rtt = start.elapsed() / 40;

    let (mut cancelled, mut completed) = (0, 0);
    for i in 0..200u32 {
        let after = rtt.mul_f64(f64::from(i % 40) / 10.0);
        match tokio::time::timeout(
            after,
            locks.lock_with_lease(NAME, Duration::from_secs(60), None),
        )
        .await
        {
            Err(_) => cancelled += 1,
            Ok(guard) => {
                completed += 1;
                let guard = guard.unwrap().unwrap();
                assert_eq!(guard.release().await.unwrap(), Unlock::Released);
            }
        }
        // Let the background cleanup of a cancelled attempt finish before the next one (so the
        // next one does not just wait for it).
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!("rtt {rtt:?}: {cancelled} cancelled, {completed} completed");
    assert!(
        cancelled > 0 && completed > 0,
        "both outcomes were exercised"
    );
    let freed = gone_within(&server, NAME, Duration::from_secs(2)).await;
    assert!(
        freed.is_some(),
        "a cancelled acquire left the lock held (PTTL {})",
        pttl(&server, NAME)
    );
}

/// `#[must_use]` on the guards and on the acquire outcome: ignoring one is a compile error under
/// `-D unused_must_use`, checked by compiling a snippet against this build of tairlock.
#[test]
fn guards_are_must_use() {
    let ignored = r#"
        #![deny(unused_must_use)]
        pub fn f(locks: &tairlock::ExpireLock<tairlock::MemoryStore>,
                 owned: &tairlock::ReentrantLock<tairlock::MemoryStore>) {
            locks.blocking_lock("a").unwrap();
            owned.blocking_lock("b").unwrap();
        }
        pub async fn g(owned: &tairlock::ReentrantLock<tairlock::MemoryStore>, owner: &tairlock::Owner) {
            owned.lock_as(owner, "c").await.unwrap();
        }
    "#;
    let (ok, stderr) = support::compile_snippet("must_use_ignored", ignored);
    assert!(!ok, "ignoring a guard must be rejected:\n{stderr}");
    for guard in ["LockGuard", "ReentrantGuard", "OwnedReentrantGuard"] {
        assert!(
            stderr.contains(&format!("unused `{guard}")) && stderr.contains("must be used"),
            "no must_use error for {guard}:\n{stderr}"
        );
    }
    // The control: binding the guards compiles, so the errors above are the lint and nothing else.
    let bound = ignored
        .replace("locks.blocking_lock", "let _a = locks.blocking_lock")
        .replace("owned.blocking_lock", "let _b = owned.blocking_lock")
        .replace("owned.lock_as(", "let _c = owned.lock_as(");
    let (ok, stderr) = support::compile_snippet("must_use_bound", &bound);
    assert!(ok, "the control snippet must compile:\n{stderr}");
}

#[tokio::test]
async fn the_watchdog_keeps_a_memory_store_guard_past_its_lease() {
    // The same guard API on the embedded store, with a short watchdog lease.
    let locks = ExpireLock::with_options(
        MemoryStore::new(),
        Options::default().watchdog_lease(Duration::from_millis(300)),
    );
    let guard = locks.lock(NAME).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(!guard.is_lost(), "the watchdog kept it past one lease");
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
}
