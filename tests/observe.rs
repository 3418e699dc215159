//! What the locks report through `tracing` (issue #15 §1), on a real `redis-server`, caught by a
//! `tracing-subscriber` formatter writing into a buffer: the lines a user with a subscriber sees.
//!
//! - A normal cycle: `acquired` with the fence, `lease renewed`, `released` with the outcome,
//!   and no nonce anywhere in the output.
//! - A lease deleted behind the holder's back: a `WARN` `lease lost` with the reason.
//! - A server paused past the lease (`CLIENT PAUSE`): a `WARN` `lease lost`, the local deadline
//!   passed without an answered renewal.
//!
//! The subscriber is global (the watchdogs run on the store's runtime); each test locks a name
//! of its own and reads only the lines that name it.

mod support;

use std::io::Write;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use parking_lot::Mutex;
use support::RedisServer;
use tairlock::store::RedisOptions;
use tairlock::{ExpireLock, Lease, Options, RedisStore, Unlock};
use tracing_subscriber::fmt::MakeWriter;

/// Everything the subscriber wrote, from every test of this file.
static OUTPUT: LazyLock<Arc<Mutex<Vec<u8>>>> = LazyLock::new(|| {
    let out = Arc::new(Mutex::new(Vec::new()));
    tracing_subscriber::fmt()
        .with_writer(Capture(out.clone()))
        .with_ansi(false)
        .with_env_filter("tairlock=trace")
        .init();
    out
});

#[derive(Clone)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Capture {
    type Writer = Capture;

    fn make_writer(&'a self) -> Capture {
        self.clone()
    }
}

fn capture() {
    LazyLock::force(&OUTPUT);
}

fn output() -> String {
    String::from_utf8_lossy(&OUTPUT.lock()).into_owned()
}

/// The lines that report on lock `name`.
fn lines_of(name: &str) -> Vec<String> {
    let field = format!("lock={name} ");
    output()
        .lines()
        .filter(|line| line.contains(&field) || line.ends_with(&format!("lock={name}")))
        .map(str::to_owned)
        .collect()
}

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

fn locks(store: RedisStore, lease: Duration) -> ExpireLock<RedisStore> {
    ExpireLock::with_options(store, Options::default().watchdog_lease(lease))
}

/// No nonce of `leases` appears in anything the subscriber wrote.
fn no_nonce_in_output(leases: &[Lease]) {
    let out = output();
    for lease in leases {
        assert!(
            !out.contains(lease.nonce()),
            "the nonce {} is in the output:\n{out}",
            lease.nonce()
        );
    }
}

/// Wait up to `within` for a line of `name` containing every one of `parts`.
async fn line_with(name: &str, parts: &[&str], within: Duration) -> String {
    let until = tokio::time::Instant::now() + within;
    loop {
        if let Some(line) = lines_of(name)
            .into_iter()
            .find(|line| parts.iter().all(|p| line.contains(p)))
        {
            return line;
        }
        if tokio::time::Instant::now() >= until {
            panic!(
                "no line of {name} with {parts:?} within {within:?}; its lines:\n{}",
                lines_of(name).join("\n")
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_normal_cycle_reports_acquire_renewals_and_release_without_the_nonce() {
    capture();
    let server = RedisServer::start();
    let name = "obs-cycle";
    let locks = locks(server.store().await, Duration::from_millis(300));
    let guard = locks.lock(name).await.unwrap();
    let fence = guard.fence();
    let mut leases = vec![guard.lease()];
    // A few renewals (every 100 ms); each rotates the nonce.
    for _ in 0..5 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        leases.push(guard.lease());
    }
    let fence_field = format!("fence={fence}");
    let renewed = line_with(name, &["lease renewed"], Duration::from_secs(5)).await;
    assert!(renewed.contains(&fence_field), "{renewed}");
    assert!(renewed.contains("kind=expire"), "{renewed}");
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);

    let acquired = line_with(name, &["acquired"], Duration::from_secs(1)).await;
    assert!(acquired.contains("DEBUG"), "{acquired}");
    assert!(acquired.contains(&fence_field), "{acquired}");
    assert!(acquired.contains("waited="), "{acquired}");
    let released = line_with(name, &["released"], Duration::from_secs(1)).await;
    assert!(released.contains("outcome=released"), "{released}");
    assert!(released.contains(&fence_field), "{released}");
    assert!(released.contains("held="), "{released}");
    // Nothing went wrong: no warning about this lock.
    let lines = lines_of(name);
    assert!(
        lines.iter().all(|line| !line.contains("WARN")),
        "{}",
        lines.join("\n")
    );
    no_nonce_in_output(&leases);
}

#[tokio::test]
async fn a_lease_deleted_behind_the_holders_back_is_a_warning_with_the_reason() {
    capture();
    let server = RedisServer::start();
    let name = "obs-deleted";
    // Renewed every second: the next renewal finds the key gone, well before the deadline.
    let locks = locks(server.store().await, Duration::from_secs(3));
    let guard = locks.lock(name).await.unwrap();
    let lease = guard.lease();
    assert_eq!(server.cli(&["DEL", &key(name)]), "1");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the loss was not noticed");
    let lost = line_with(name, &["lease lost"], Duration::from_secs(1)).await;
    assert!(lost.contains("WARN"), "{lost}");
    assert!(lost.contains(&format!("fence={}", lease.fence())), "{lost}");
    assert!(
        lost.contains("reason=a renewal found the lease gone: it expired or was deleted"),
        "{lost}"
    );
    // Reported once, however often the loss is looked at.
    assert!(guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), Unlock::NotHeld);
    let released = line_with(name, &["released"], Duration::from_secs(1)).await;
    assert!(released.contains("outcome=not_held"), "{released}");
    let losses = lines_of(name)
        .iter()
        .filter(|l| l.contains("lease lost"))
        .count();
    assert_eq!(losses, 1, "{}", lines_of(name).join("\n"));
    no_nonce_in_output(&[lease]);
}

#[tokio::test]
async fn a_server_paused_past_the_lease_is_a_warning_that_no_renewal_was_answered() {
    capture();
    let server = RedisServer::start();
    let name = "obs-paused";
    let lease = Duration::from_millis(600);
    let locks = locks(server.store().await, lease);
    let guard = locks.lock(name).await.unwrap();
    let pause = (lease * 4).as_millis().to_string();
    assert_eq!(server.cli(&["CLIENT", "PAUSE", &pause, "ALL"]), "OK");
    tokio::time::timeout(Duration::from_secs(10), guard.lost())
        .await
        .expect("the loss was not noticed");
    let lost = line_with(name, &["lease lost"], Duration::from_secs(1)).await;
    assert!(lost.contains("WARN"), "{lost}");
    assert!(
        lost.contains("reason=no renewal was answered before the lease's local deadline")
            || lost.contains("reason=a renewal was answered only after the lease's local deadline"),
        "{lost}"
    );
    assert_eq!(server.cli(&["CLIENT", "UNPAUSE"]), "OK");
    let _ = guard.release().await;
}

#[tokio::test]
async fn a_release_that_fails_in_the_background_is_a_warning() {
    capture();
    let server = RedisServer::start();
    let name = "obs-background";
    let locks = locks(server.store().await, Duration::from_secs(30));
    // A fixed lease: no watchdog to find the key changed first.
    let guard = locks
        .lock_with_lease(name, Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let lease = guard.lease();
    // Someone's data in the lock's key: the release refuses to touch it.
    assert_eq!(server.cli(&["DEL", &key(name)]), "1");
    assert_eq!(server.cli(&["HSET", &key(name), "f", "v"]), "1");
    drop(guard);
    let failed = line_with(
        name,
        &["release failed in the background"],
        Duration::from_secs(5),
    )
    .await;
    assert!(failed.contains("WARN"), "{failed}");
    assert!(failed.contains("error=wrong type"), "{failed}");
    no_nonce_in_output(&[lease]);
}

#[tokio::test]
async fn a_refused_subscription_is_a_warning_that_waiters_poll() {
    capture();
    let server = RedisServer::start();
    let password = "s3cret-obs-pw";
    // Redis 7's default: a new user has no channel permissions.
    server.cli(&[
        "ACL",
        "SETUSER",
        "obs",
        "on",
        &format!(">{password}"),
        "~*",
        "+@all",
    ]);
    let url = format!("redis://obs:{password}@127.0.0.1:{}", server.port());
    let holder = ExpireLock::new(RedisStore::connect(&url).await.unwrap());
    let waiter = ExpireLock::new(RedisStore::connect(&url).await.unwrap());
    let name = "obs-refused";
    let held = holder
        .lock_with_lease(name, Duration::from_millis(400), None)
        .await
        .unwrap()
        .unwrap();
    let got = waiter
        .try_lock_for(name, Duration::from_secs(5))
        .await
        .unwrap()
        .expect("the waiter polls until the lease runs out");
    let out = output();
    let fallback = out
        .lines()
        .find(|l| l.contains("release notifications unavailable") && l.contains(name))
        .unwrap_or_else(|| panic!("no fallback warning:\n{out}"));
    assert!(fallback.contains("WARN"), "{fallback}");
    assert!(fallback.contains("NOPERM"), "{fallback}");
    assert!(!out.contains(password), "{out}");
    drop(held);
    got.release().await.unwrap();
}

#[tokio::test]
async fn a_wait_reports_its_refused_attempts_in_the_acquire_span_and_the_handoff() {
    capture();
    let server = RedisServer::start();
    let name = "obs-contended";
    let holder = locks(server.store().await, Duration::from_secs(30));
    let waiter = locks(server.store().await, Duration::from_secs(30));
    let held = holder
        .lock_with_lease(name, Duration::from_secs(10), None)
        .await
        .unwrap()
        .unwrap();
    let waiting =
        tokio::spawn(async move { waiter.try_lock_for(name, Duration::from_secs(8)).await });
    line_with(name, &["attempt refused"], Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    let got = waiting
        .await
        .unwrap()
        .unwrap()
        .expect("the release wakes the waiter");
    let refused = line_with(name, &["attempt refused"], Duration::from_secs(1)).await;
    assert!(refused.contains("TRACE"), "{refused}");
    assert!(
        refused.contains(&format!("acquire{{kind=expire lock={name}}}")),
        "{refused}"
    );
    assert!(refused.contains("remaining="), "{refused}");
    let fence = format!("fence={}", got.fence());
    let acquired = line_with(name, &["acquired", &fence], Duration::from_secs(1)).await;
    // Woken by the release's notification: the handoff is measured.
    assert!(acquired.contains("handoff="), "{acquired}");
    got.release().await.unwrap();
}

/// A renewal that hangs (the server paused, a long response timeout) does not hold up the
/// report: the loss is a warning at the lease's local deadline, with nobody awaiting `lost()`.
#[tokio::test]
async fn a_hanging_renewal_does_not_delay_the_loss_warning_past_the_deadline() {
    capture();
    let server = RedisServer::start();
    let name = "obs-hanging";
    let mut options = RedisOptions::default();
    options.response_timeout = Duration::from_secs(20);
    let store = RedisStore::connect_with(&server.url(), options)
        .await
        .unwrap();
    let lease = Duration::from_millis(600);
    let guard = locks(store, lease).lock(name).await.unwrap();
    let paused = tokio::time::Instant::now();
    assert_eq!(server.cli(&["CLIENT", "PAUSE", "3000", "ALL"]), "OK");
    // The deadline is at most one lease after the pause (the last renewal came before it);
    // the hanging renewal is answered only when the pause ends, 3 s after it began.
    let lost = line_with(name, &["lease lost"], Duration::from_millis(2500)).await;
    let after = paused.elapsed();
    assert!(
        lost.contains("reason=no renewal was answered before the lease's local deadline"),
        "{lost}"
    );
    assert!(after < Duration::from_millis(2500), "{after:?}");
    assert!(guard.is_lost());
    let _ = guard.release().await;
}
