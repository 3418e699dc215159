//! The watchdog (DESIGN.md §7, issue #4 part 4), on a real `redis-server`.
//!
//! - Without an explicit lease the lease is renewed at a third of its length while the guard
//!   lives (a 300 ms lease here instead of the default 30 s, so a test sees many renewals).
//! - Renewals stop on release and on drop: no script reaches the server afterwards.
//! - Loss is detected and reported (`is_lost()`, `lost()`), and `with_lock` drops the critical
//!   section's future, when the key is deleted behind the holder's back, when the server is
//!   paused past the lease (`CLIENT PAUSE`), and when the server restarts (empty, no
//!   persistence).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use support::RedisServer;
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{ErrorKind, ExpireLock, LockGuard, Options, RedisStore, Store, Ttl, Unlock};

const NAME: &str = "watched";

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

/// `calls` per command from `INFO commandstats`.
fn command_counts(server: &RedisServer) -> BTreeMap<String, u64> {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    command_counts(server).get("evalsha").copied().unwrap_or(0)
}

fn reset_stats(server: &RedisServer) {
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
}

fn locks_with_lease(store: RedisStore, lease: Duration) -> ExpireLock<RedisStore> {
    ExpireLock::with_options(store, Options::default().watchdog_lease(lease))
}

#[tokio::test]
async fn the_default_watchdog_lease_is_30_seconds() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    assert_eq!(locks.options().watchdog_lease, Duration::from_secs(30));
    let guard = locks.lock(NAME).await.unwrap();
    assert!(guard.is_renewed());
    let left = guard.lease().remaining().unwrap();
    assert!(left > Duration::from_secs(29) && left <= Duration::from_secs(30));
    let probe = server.store().await;
    match probe.pttl(&key(NAME)).await.unwrap() {
        Ttl::Expires(t) => assert!(t > Duration::from_secs(29), "{t:?}"),
        other => panic!("{other:?}"),
    }
    guard.release().await.unwrap();
}

/// A 300 ms lease held for 1.5 s (five leases): renewed every 100 ms, its PTTL never falls much
/// below two thirds, and never below one third.
#[tokio::test]
async fn the_watchdog_renews_at_a_third_of_the_lease() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let locks = locks_with_lease(server.store().await, lease);
    let probe = server.store().await;
    let guard = locks.lock(NAME).await.unwrap();
    let first = guard.lease();
    reset_stats(&server);

    let held_for = lease * 5;
    let start = Instant::now();
    let mut min_pttl = Duration::MAX;
    let mut samples = 0;
    while start.elapsed() < held_for {
        match probe.pttl(&key(NAME)).await.unwrap() {
            Ttl::Expires(t) => min_pttl = min_pttl.min(t),
            other => server.fail(format!("the lock vanished while held: {other:?}")),
        }
        samples += 1;
        assert!(!guard.is_lost(), "lost after {:?}", start.elapsed());
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let renewals = evalsha_calls(&server);
    println!(
        "lease {lease:?} held {held_for:?}: {renewals} renewals, min PTTL {min_pttl:?} over \
         {samples} samples"
    );
    assert!(
        min_pttl >= lease / 3,
        "PTTL fell to {min_pttl:?}, below a third of {lease:?}"
    );
    // One renewal per 100 ms: 15 in 1.5 s, give or take scheduling.
    assert!(
        (12..=17).contains(&renewals),
        "{renewals} renewals in {held_for:?} with a {lease:?} lease"
    );
    let last = guard.lease();
    assert_ne!(last.value(), first.value(), "the lease rotates on renewal");
    assert_eq!(last.fence(), first.fence(), "the fence stays");
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
}

/// After `release()` and after `drop`, not one script reaches the server over five renewal
/// intervals.
#[tokio::test]
async fn renewals_stop_on_release_and_on_drop() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let locks = locks_with_lease(server.store().await, lease);
    let quiet = lease / 3 * 5;

    // Control: while held, the quiet period sees renewals.
    let guard = locks.lock(NAME).await.unwrap();
    reset_stats(&server);
    tokio::time::sleep(quiet).await;
    let while_held = evalsha_calls(&server);
    assert!(while_held >= 3, "{while_held} renewals while held");

    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    reset_stats(&server);
    tokio::time::sleep(quiet).await;
    let after_release = command_counts(&server);
    assert_eq!(
        after_release.get("evalsha"),
        None,
        "a renewal reached the server after release: {after_release:?}"
    );

    let guard = locks.lock(NAME).await.unwrap();
    tokio::time::sleep(lease / 2).await; // at least one renewal
    drop(guard);
    // The background release runs right away; after it, nothing.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        server.cli(&["EXISTS", &key(NAME)]),
        "0",
        "dropped: released"
    );
    reset_stats(&server);
    tokio::time::sleep(quiet).await;
    let after_drop = command_counts(&server);
    assert_eq!(
        after_drop.get("evalsha"),
        None,
        "a renewal reached the server after drop: {after_drop:?}"
    );
    println!("evalsha over {quiet:?}: {while_held} while held, 0 after release, 0 after drop");
}

/// What breaks the lease in a loss test.
#[derive(Debug, Clone, Copy)]
enum Loss {
    /// `DEL` of the lock key, behind the holder's back.
    Deleted,
    /// `CLIENT PAUSE <3 leases> ALL`.
    Paused,
    /// The server restarts (empty).
    Restarted,
}

const LOSS_LEASE: Duration = Duration::from_millis(600);

/// Break the lease (blocking: a restart takes a moment); returns when the break happened.
fn break_lease(server: &mut RedisServer, loss: Loss) -> Instant {
    match loss {
        Loss::Deleted => {
            assert_eq!(server.cli(&["DEL", &key(NAME)]), "1");
            Instant::now()
        }
        Loss::Paused => {
            let pause = (LOSS_LEASE * 3).as_millis().to_string();
            assert_eq!(server.cli(&["CLIENT", "PAUSE", &pause, "ALL"]), "OK");
            Instant::now()
        }
        Loss::Restarted => {
            let at = Instant::now();
            server.restart();
            at
        }
    }
}

/// The longest a loss may take to be reported, from the moment of the break. A deleted key is
/// found at the next renewal: one interval. A paused server cannot confirm anything, so the
/// lease is given up at its local deadline: at most one lease after the break (the last
/// renewal was before it). A restart kills the connection: the next renewal (one interval)
/// reconnects and finds the key gone, or at worst the deadline ends it.
fn loss_bound(loss: Loss) -> Duration {
    let interval = LOSS_LEASE / 3;
    let slack = Duration::from_millis(150);
    match loss {
        Loss::Deleted => interval + slack,
        Loss::Paused | Loss::Restarted => LOSS_LEASE + slack,
    }
}

async fn loss_is_reported(loss: Loss) {
    let mut server = RedisServer::start();
    let locks = locks_with_lease(server.store().await, LOSS_LEASE);
    let guard = locks.lock(NAME).await.unwrap();
    // Held through a few renewals first.
    tokio::time::sleep(LOSS_LEASE).await;
    assert!(!guard.is_lost());

    let broken = tokio::task::block_in_place(|| break_lease(&mut server, loss));
    let lost = tokio::time::timeout(Duration::from_secs(5), guard.lost()).await;
    let took = broken.elapsed();
    assert!(lost.is_ok(), "{loss:?}: lost() did not resolve within 5 s");
    println!("{loss:?}: loss reported {took:?} after the break");
    assert!(guard.is_lost(), "{loss:?}");
    assert!(
        took <= loss_bound(loss),
        "{loss:?}: reported after {took:?}, bound {:?}",
        loss_bound(loss)
    );
    // Lost stays lost.
    tokio::time::sleep(LOSS_LEASE / 3).await;
    assert!(guard.is_lost(), "{loss:?}: lost went back to held");
    // Releasing a lost guard deletes nothing: the key is gone (deleted, or lost with the
    // restart) or expired meanwhile (the pause); or the release fails while the server is paused.
    let released = guard.release().await;
    assert!(
        matches!(released, Ok(Unlock::NotHeld)) || released.is_err(),
        "{loss:?}: {released:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_key_is_reported_lost_within_one_renewal_interval() {
    loss_is_reported(Loss::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_paused_past_the_lease_is_reported_lost() {
    loss_is_reported(Loss::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_server_is_reported_lost() {
    loss_is_reported(Loss::Restarted).await;
}

/// Records when it is dropped: the moment the critical section's future was cancelled.
struct DropProbe(Arc<Mutex<Option<Instant>>>);

impl Drop for DropProbe {
    fn drop(&mut self) {
        *self.0.lock() = Some(Instant::now());
    }
}

/// `with_lock` runs a critical section that would take 10 s; the lease breaks 700 ms in. The
/// section's future must be dropped within the bound, never complete, and the call must return
/// `LeaseLost`.
async fn with_lock_stops_the_critical_section(loss: Loss) {
    let mut server = RedisServer::start();
    let locks = locks_with_lease(server.store().await, LOSS_LEASE);
    let completed = Arc::new(AtomicBool::new(false));
    let dropped_at = Arc::new(Mutex::new(None));
    let started = Arc::new(tokio::sync::Notify::new());

    let task = {
        let (completed, dropped_at, started) =
            (completed.clone(), dropped_at.clone(), started.clone());
        tokio::spawn(async move {
            locks
                .with_lock(NAME, move |lease| async move {
                    let _probe = DropProbe(dropped_at);
                    assert!(lease.fence() > 0);
                    started.notify_one();
                    tokio::time::sleep(Duration::from_secs(10)).await;
                    completed.store(true, Ordering::SeqCst);
                })
                .await
        })
    };
    started.notified().await;
    tokio::time::sleep(LOSS_LEASE + Duration::from_millis(100)).await;
    assert!(
        dropped_at.lock().is_none(),
        "{loss:?}: stopped before the break"
    );

    let broken = tokio::task::block_in_place(|| break_lease(&mut server, loss));
    let outcome = tokio::time::timeout(Duration::from_secs(8), task)
        .await
        .unwrap_or_else(|_| panic!("{loss:?}: with_lock did not return"))
        .unwrap();
    let returned = broken.elapsed();
    let dropped = dropped_at
        .lock()
        .unwrap_or_else(|| panic!("{loss:?}: the future was never dropped"));
    let stopped = dropped.saturating_duration_since(broken);
    println!(
        "{loss:?}: critical section dropped {stopped:?} after the break; with_lock returned \
         after {returned:?}"
    );
    assert!(
        !completed.load(Ordering::SeqCst),
        "{loss:?}: it ran to completion"
    );
    let err = outcome.expect_err("the lease was lost");
    assert_eq!(err.kind(), ErrorKind::LeaseLost, "{loss:?}: {err}");
    assert!(
        stopped <= loss_bound(loss),
        "{loss:?}: dropped after {stopped:?}, bound {:?}",
        loss_bound(loss)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_critical_section_when_the_key_is_deleted() {
    with_lock_stops_the_critical_section(Loss::Deleted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_critical_section_when_the_server_is_paused() {
    with_lock_stops_the_critical_section(Loss::Paused).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_stops_the_critical_section_when_the_server_restarts() {
    with_lock_stops_the_critical_section(Loss::Restarted).await;
}

#[tokio::test]
async fn with_lock_returns_the_value_and_releases() {
    let server = RedisServer::start();
    let locks = locks_with_lease(server.store().await, Duration::from_millis(300));
    let fence = locks
        .with_lock(NAME, |lease| async move {
            // Outlive the lease: the watchdog keeps it.
            tokio::time::sleep(Duration::from_millis(700)).await;
            lease.fence()
        })
        .await
        .unwrap();
    assert!(fence > 0);
    assert_eq!(server.cli(&["EXISTS", &key(NAME)]), "0");
}

/// Guards without a watchdog (an explicit lease) are lost at their deadline, and say so.
#[tokio::test]
async fn an_explicit_lease_is_not_renewed_and_is_lost_at_its_deadline() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    let lease = Duration::from_millis(300);
    let guard: LockGuard<RedisStore> = locks
        .lock_with_lease(NAME, lease, None)
        .await
        .unwrap()
        .unwrap();
    assert!(!guard.is_renewed());
    reset_stats(&server);
    let start = Instant::now();
    guard.lost().await;
    let took = start.elapsed();
    assert!(
        took <= lease && took >= lease - Duration::from_millis(30),
        "lost after {took:?} with a {lease:?} lease"
    );
    assert_eq!(evalsha_calls(&server), 0, "no renewals without a watchdog");
    // The local deadline is a little ahead of the server's expiry (a drift allowance); past
    // the latter the server has freed it.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        server.cli(&["EXISTS", &key(NAME)]),
        "0",
        "expired on the server"
    );
    assert_eq!(guard.release().await.unwrap(), Unlock::NotHeld);
}

/// A hook that holds the next renewal's reply (`RENEW_MANY` or `RENEW`) back for a while (the renewal itself runs on the
/// server at once): a slow network on the way back.
#[derive(Debug, Default)]
struct SlowRenewReply {
    delay: Mutex<Option<Duration>>,
}

impl Hook for SlowRenewReply {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        match command {
            // A guard's renewal: the batched watchdog's, or a single one.
            Command::Eval { script, .. }
                if std::ptr::eq(script, &tairlock::scripts::RENEW_MANY)
                    || std::ptr::eq(script, &tairlock::scripts::RENEW) =>
            {
                Box::pin(async move {
                    let reply = run.await;
                    let delay = self.delay.lock().take();
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    reply
                })
            }
            _ => run,
        }
    }
}

/// A renewal whose reply comes back after the lease's local deadline (but before the server's
/// expiry): the guard was reported lost at the deadline, and it must stay lost ("once true,
/// stays true") rather than come back to life when the late reply lands. Releasing it still
/// frees the lock at once (the late lease is adopted for that), and renewals stop.
#[tokio::test]
async fn a_late_renewal_does_not_bring_a_lost_guard_back() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let store = Intercept::new(server.store().await, SlowRenewReply::default());
    let slow = store.shared_hook().clone();
    let locks = ExpireLock::with_options(store, Options::default().watchdog_lease(lease));
    let guard = locks.lock(NAME).await.unwrap();
    // The first renewal (at ~100 ms) runs on the server at once; its reply lands at ~350 ms,
    // after the first lease's local deadline (~295 ms) and before the renewed one's (~395 ms).
    *slow.delay.lock() = Some(Duration::from_millis(250));

    let start = Instant::now();
    let mut first_lost = None;
    let mut flipped_back = None;
    while start.elapsed() < lease * 2 {
        let lost = guard.is_lost();
        match (lost, first_lost) {
            (true, None) => first_lost = Some(start.elapsed()),
            (false, Some(_)) if flipped_back.is_none() => flipped_back = Some(start.elapsed()),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!("lost at {first_lost:?}, back to held at {flipped_back:?}");
    assert!(
        first_lost.is_some(),
        "the deadline passed without a reply: lost"
    );
    assert_eq!(
        flipped_back, None,
        "is_lost() went back to false after the late renewal reply"
    );
    tokio::time::timeout(Duration::from_millis(10), guard.lost())
        .await
        .expect("lost() resolves at once on a lost guard");
    // Renewals have stopped; the guard's release still deletes whatever it last held.
    reset_stats(&server);
    tokio::time::sleep(lease).await;
    assert_eq!(
        evalsha_calls(&server),
        0,
        "the watchdog of a lost guard stopped"
    );
    let released = guard.release().await.unwrap();
    assert!(
        matches!(released, Unlock::Released | Unlock::NotHeld),
        "{released:?}"
    );
    assert_eq!(server.cli(&["EXISTS", &key(NAME)]), "0");
}
