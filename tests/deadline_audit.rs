//! The deadline audit of the chaos and cancellation suites ([`support::deadline_audit`]) on a
//! real server: it flags a guard's deadline that is later than its lease's end on the server,
//! and not the deadline the guard computed itself; and it catches a repeated acquire whose
//! grant is dated from the repeat rather than from the lease the server reports (the first,
//! unanswered attempt took the lock: the repeat finds that lease, with only what is left of it).

mod support;

use std::time::Duration;

use support::RedisServer;
use support::deadline_audit::{Audited, DeadlineAudit};
use support::proxy::{Proxy, Which};
use tairlock::store::redis::RedisOptions;
use tairlock::{ExpireLock, Options};
use tairlock_rwlock::RwLock;
use tokio::time::Instant;

const LEASE: Duration = Duration::from_secs(3);

async fn audited(server: &RedisServer, proxy: Option<&Proxy>) -> (Audited, DeadlineAudit) {
    let audit = DeadlineAudit::new(server.store().await);
    let store = match proxy {
        Some(proxy) => {
            let mut options = RedisOptions::default();
            options.response_timeout = Duration::from_millis(300);
            proxy.store_with(options).await
        }
        None => server.store().await,
    };
    (audit.wrap(store), audit)
}

#[tokio::test]
async fn the_audit_flags_a_deadline_past_the_lease_and_not_the_guards_own() {
    let server = RedisServer::start();
    let (store, audit) = audited(&server, None).await;
    let locks = ExpireLock::with_options(store.clone(), Options::default().watchdog_lease(LEASE));
    let guard = locks.try_lock("audited").await.unwrap().unwrap();
    let lease = guard.lease();
    let deadline = lease.deadline().unwrap();
    let bound = audit.settled(lease.value()).await.unwrap();
    let ends_by = bound.ends_by.expect("the lease was read");
    assert!(
        ends_by >= deadline,
        "the guard's own deadline is within the lease"
    );
    assert!(
        ends_by <= Instant::now() + LEASE + Duration::from_millis(5),
        "the bound is within a read's round trip of the lease's end: {:?} past now",
        ends_by - Instant::now()
    );
    assert!(audit.check(lease.value(), deadline).is_none());
    // A deadline a third of the lease later (as if dated from a repeat a second after the
    // first attempt) is late, by that much less what the guard's drift allowance kept back.
    let late = audit
        .check(lease.value(), deadline + LEASE / 3)
        .expect("flagged");
    assert!(late.by > LEASE / 3 - Duration::from_millis(200), "{late}");
    // A renewal: the new lease is read again.
    guard.renew(LEASE).await.unwrap();
    let renewed = guard.lease();
    audit.settled(renewed.value()).await.unwrap();
    assert!(
        audit
            .check(renewed.value(), renewed.deadline().unwrap())
            .is_none()
    );
    guard.release().await.unwrap();

    // A reader: its lease is its member of the readers' set, by nonce.
    let rw = RwLock::with_options(
        store,
        tairlock_rwlock::Options::default().watchdog_lease(LEASE),
    );
    let read = rw.try_read("audited-rw").await.unwrap().unwrap();
    let nonce = audit
        .take_last_reader()
        .expect("the audit saw the reader admitted");
    audit.settled(&nonce).await.unwrap();
    let deadline = read.deadline().unwrap();
    assert!(audit.check(&nonce, deadline).is_none());
    assert!(audit.check(&nonce, deadline + LEASE / 3).is_some());
    read.release().await.unwrap();
}

/// The reply to the first attempt of a waiting acquire is dropped (the server ran it and took
/// the lock); the call repeats the attempt with the same nonce and gets back that lease. Its
/// deadline must come from the lease's remaining time, not from the repeat.
async fn repeated_acquire_is_not_dated_from_the_repeat(read: bool) {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let (store, audit) = audited(&server, Some(&proxy)).await;
    let script = if read {
        &tairlock_rwlock::scripts::READ_ACQUIRE
    } else {
        &tairlock::scripts::EXPIRE_LOCK
    };
    // Warm the connection and the script cache, so that the next call's first command is the
    // acquire itself.
    let locks = ExpireLock::with_options(store.clone(), Options::default().watchdog_lease(LEASE));
    let rw = RwLock::with_options(
        store.clone(),
        tairlock_rwlock::Options::default().watchdog_lease(LEASE),
    );
    locks
        .try_lock("warm")
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    rw.try_read("warm-rw")
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    // Two replies lost (the call's first attempt and its immediate repeat); the reconnect and
    // the back-off between attempts date the next repeat well after the first.
    proxy.drop_replies_matching(Which::Data, script.sha1().as_bytes(), 2);
    let (lease, deadline) = if read {
        let guard = rw
            .try_read_for("repeat", Duration::from_secs(5))
            .await
            .unwrap();
        let guard = guard.expect("acquired");
        let nonce = audit.take_last_reader().expect("admitted");
        (nonce, guard.deadline().unwrap())
    } else {
        let guard = locks
            .try_lock_for("repeat", Duration::from_secs(5))
            .await
            .unwrap();
        let lease = guard.expect("acquired").lease();
        (lease.value().to_owned(), lease.deadline().unwrap())
    };
    assert!(proxy.faults().get("drop_reply").copied().unwrap_or(0) >= 1);
    audit.settled(&lease).await.expect("the grant was read");
    if let Some(late) = audit.check(&lease, deadline) {
        panic!("the repeated acquire's deadline is {late}");
    }
}

#[tokio::test]
async fn a_repeated_expire_lock_acquire_is_dated_from_the_lease_it_finds() {
    repeated_acquire_is_not_dated_from_the_repeat(false).await;
}

#[tokio::test]
async fn a_repeated_read_acquire_is_dated_from_the_lease_it_finds() {
    repeated_acquire_is_not_dated_from_the_repeat(true).await;
}
