//! Behaviour of the expire lock (DESIGN.md §4, §8) on both stores: contention, expiry, renewal,
//! bad input, a user's data under the lock's keys, and the blocking twins.

mod support;

use std::sync::{Arc, Barrier};
use std::time::Duration;

use support::{Env, RedisServer, TestStore, backend_tests};
use tairlock::{
    Acquire, ErrorKind, ExpireLock, Lease, MAX_TTL, MemoryStore, RedisStore, Renew, Store, Ttl,
    Unlock,
};

const LONG: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(100);
const PAST_SHORT: Duration = Duration::from_millis(250);
const SLACK: Duration = Duration::from_secs(2);

fn lock_key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

fn fence_key(name: &str) -> String {
    format!("tairlock:{{{name}}}:fence")
}

#[track_caller]
fn acquired(outcome: Acquire) -> Lease {
    match outcome {
        Acquire::Acquired(lease) => lease,
        other => panic!("expected the lock to be acquired, got {other:?}"),
    }
}

async fn try_acquire_when_held_returns_the_holders_lease_and_remaining_time<S: TestStore>(
    env: Env<S>,
) {
    let locks = env.locks();
    let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
    assert!(lease.remaining().unwrap() <= LONG);
    env.pass(Duration::from_millis(50)).await;
    match locks
        .expire_lock("job", Duration::from_secs(1))
        .await
        .unwrap()
    {
        Acquire::Held { holder, remaining } => {
            let remaining = remaining.expect("the holder's lease expires");
            assert_eq!(
                holder.value(),
                lease.value(),
                "the holder is the first lease"
            );
            assert_eq!(
                (holder.fence(), holder.expires_at()),
                (lease.fence(), lease.expires_at())
            );
            assert_eq!(
                holder.deadline(),
                None,
                "a lease read back has no local deadline"
            );
            assert!(
                remaining <= LONG - Duration::from_millis(50),
                "remaining {remaining:?}"
            );
            assert!(remaining >= LONG - SLACK, "remaining {remaining:?}");
            if env.virtual_clock().is_some() {
                assert_eq!(
                    remaining,
                    LONG - Duration::from_millis(50),
                    "exact on a virtual clock"
                );
            }
        }
        other => panic!("expected Held, got {other:?}"),
    }
    // The failed attempt changed nothing.
    assert_eq!(
        locks
            .inspect("job")
            .await
            .unwrap()
            .holder
            .map(|l| l.value().to_owned()),
        Some(lease.value().to_owned())
    );
    assert_eq!(
        locks.expire_unlock("job", &lease).await.unwrap(),
        Unlock::Released
    );
}

async fn unlock_after_expiry_reports_not_held_and_spares_the_next_holder<S: TestStore>(
    env: Env<S>,
) {
    let locks = env.locks();
    let a = acquired(locks.expire_lock("job", SHORT).await.unwrap());
    env.pass(PAST_SHORT).await;
    assert_eq!(
        locks.expire_unlock("job", &a).await.unwrap(),
        Unlock::NotHeld,
        "expired, nobody else"
    );

    let a = acquired(locks.expire_lock("job", SHORT).await.unwrap());
    env.pass(PAST_SHORT).await;
    let b = acquired(locks.expire_lock("job", LONG).await.unwrap());
    assert!(b.fence() > a.fence());
    // A, whose lease expired, cannot touch B's lock.
    assert_eq!(
        locks.expire_unlock("job", &a).await.unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        locks.renew("job", &a, LONG).await.unwrap(),
        Renew::HeldByOther
    );
    let inspection = locks.inspect("job").await.unwrap();
    assert_eq!(
        inspection.holder.as_ref().map(Lease::value),
        Some(b.value()),
        "B still holds"
    );
    assert_eq!(
        locks.expire_unlock("job", &b).await.unwrap(),
        Unlock::Released
    );
}

async fn retried_unlock_is_harmless<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let a = acquired(locks.expire_lock("job", LONG).await.unwrap());
    assert_eq!(
        locks.expire_unlock("job", &a).await.unwrap(),
        Unlock::Released
    );
    assert_eq!(
        locks.expire_unlock("job", &a).await.unwrap(),
        Unlock::NotHeld
    );
    assert_eq!(
        locks.expire_unlock("job", &a).await.unwrap(),
        Unlock::NotHeld
    );
    let c = acquired(locks.expire_lock("job", LONG).await.unwrap());
    assert_eq!(
        locks.expire_unlock("job", &a).await.unwrap(),
        Unlock::HeldByOther,
        "late retry"
    );
    let inspection = locks.inspect("job").await.unwrap();
    assert_eq!(
        inspection.holder.as_ref().map(Lease::value),
        Some(c.value())
    );
}

async fn renew_extends_the_lease_and_retires_the_old_one<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let lease = acquired(
        locks
            .expire_lock("job", Duration::from_secs(1))
            .await
            .unwrap(),
    );
    let Ttl::Expires(before) = env.store.pttl(&lock_key("job")).await.unwrap() else {
        panic!("a lease has a TTL");
    };
    let Renew::Renewed(renewed) = locks.renew("job", &lease, LONG).await.unwrap() else {
        panic!("the holder renews");
    };
    let Ttl::Expires(after) = env.store.pttl(&lock_key("job")).await.unwrap() else {
        panic!("a renewed lease has a TTL");
    };
    assert!(after > before, "PTTL grew from {before:?} to {after:?}");
    assert!(after <= LONG && after >= LONG - SLACK, "{after:?}");
    assert!(renewed.expires_at() > lease.expires_at());
    assert_eq!(renewed.fence(), lease.fence());
    assert_ne!(renewed.value(), lease.value());
    assert!(renewed.deadline().is_some());
    // The old lease is retired: it neither unlocks nor renews.
    assert_eq!(
        locks.expire_unlock("job", &lease).await.unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        locks.renew("job", &lease, LONG).await.unwrap(),
        Renew::HeldByOther
    );
    assert_eq!(
        locks.expire_unlock("job", &renewed).await.unwrap(),
        Unlock::Released
    );
}

async fn renewal_keeps_the_lock_past_its_first_expiry<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ttl = Duration::from_millis(300);
    let mut lease = acquired(locks.expire_lock("job", ttl).await.unwrap());
    for _ in 0..3 {
        env.pass(Duration::from_millis(150)).await;
        lease = match locks.renew("job", &lease, ttl).await.unwrap() {
            Renew::Renewed(lease) => lease,
            other => panic!("renewal within the lease failed: {other:?}"),
        };
    }
    // 450 ms after a 300 ms acquire: still held, by the latest lease.
    let Acquire::Held { holder, .. } = locks.expire_lock("job", ttl).await.unwrap() else {
        panic!("a renewed lock is still held");
    };
    assert_eq!(holder.value(), lease.value());
    // Renewing to a shorter TTL shortens it.
    let Renew::Renewed(short) = locks.renew("job", &lease, SHORT).await.unwrap() else {
        panic!("renew");
    };
    env.pass(PAST_SHORT).await;
    assert_eq!(
        locks.expire_unlock("job", &short).await.unwrap(),
        Unlock::NotHeld
    );
}

async fn bad_input_is_refused_and_writes_nothing<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ghost = Lease::parse("tl1:1:1:ffff").unwrap();
    for name in ["", "a{b", "a}b"] {
        let kind = |e: tairlock::Error| e.kind();
        assert_eq!(
            locks
                .expire_lock(name, LONG)
                .await
                .map_err(kind)
                .unwrap_err(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            locks
                .expire_unlock(name, &ghost)
                .await
                .map_err(kind)
                .unwrap_err(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            locks
                .renew(name, &ghost, LONG)
                .await
                .map_err(kind)
                .unwrap_err(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            locks.inspect(name).await.map_err(kind).unwrap_err(),
            ErrorKind::InvalidInput
        );
        assert_eq!(
            locks.force_unlock(name).await.map_err(kind).unwrap_err(),
            ErrorKind::InvalidInput
        );
    }
    let bad_ttls = [
        Duration::ZERO,
        Duration::from_nanos(1),
        Duration::from_micros(999),
        MAX_TTL + Duration::from_millis(1),
        Duration::from_secs(u64::MAX),
        Duration::MAX,
    ];
    for ttl in bad_ttls {
        let err = locks.expire_lock("job", ttl).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{ttl:?}: {err}");
        assert!(
            err.message().contains("ttl"),
            "the message names the ttl: {err}"
        );
    }
    assert_eq!(env.store.dbsize().await, 0, "nothing was written");
    assert_eq!(env.store.key_type(&lock_key("job")).await.unwrap(), "none");
    assert_eq!(env.store.key_type(&fence_key("job")).await.unwrap(), "none");

    // A held lock is not touched by a renewal with a bad TTL.
    let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
    let before = env.store.snapshot(&lock_key("job")).await;
    for ttl in bad_ttls {
        let err = locks.renew("job", &lease, ttl).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{ttl:?}: {err}");
    }
    env.store.snapshot(&lock_key("job")).await.assert_intact(
        &before,
        SLACK,
        "lock after bad renewals",
    );
    assert_eq!(
        locks.expire_unlock("job", &lease).await.unwrap(),
        Unlock::Released
    );

    // The bounds themselves are accepted.
    let longest = acquired(locks.expire_lock("edge", MAX_TTL).await.unwrap());
    let Ttl::Expires(left) = env.store.pttl(&lock_key("edge")).await.unwrap() else {
        panic!("a lease has a TTL");
    };
    assert!(left <= MAX_TTL && left >= MAX_TTL - SLACK, "{left:?}");
    assert_eq!(
        locks.expire_unlock("edge", &longest).await.unwrap(),
        Unlock::Released
    );
    acquired(
        locks
            .expire_lock("edge", Duration::from_millis(1))
            .await
            .unwrap(),
    );
    env.pass(Duration::from_millis(5)).await;
    assert_eq!(
        locks.inspect("edge").await.unwrap().key_type,
        "none",
        "a 1 ms lease is gone 5 ms later"
    );
}

/// Every kind of user data the tests put under a lock's keys.
const USER_KINDS: [&str; 4] = ["hash", "list", "string", "string with ttl"];

async fn put_user_data<S: TestStore>(store: &S, key: &str, kind: &str) {
    match kind {
        "hash" => {
            store.hset(key, "owner", b"alice").await;
            store.hset(key, "blob", &[0, 0xc3, 0x28, 0xff]).await;
        }
        "list" => {
            store.rpush(key, b"one").await;
            store.rpush(key, &[0xfe, 0x00, 0x01]).await;
            store.rpush(key, b"one").await;
        }
        "string" => store.set(key, b"session=1234; not a lock").await.unwrap(),
        "string with ttl" => {
            store.set(key, &[b'x', 0, 0xff]).await.unwrap();
            assert!(store.pexpire(key, Duration::from_secs(600)).await.unwrap());
        }
        other => unreachable!("{other}"),
    }
}

async fn users_data_under_the_lock_key_is_never_touched<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ghost = Lease::parse("tl1:1:1:ffff").unwrap();
    for (i, kind) in USER_KINDS.into_iter().enumerate() {
        let name = format!("user{i}");
        let key = lock_key(&name);
        put_user_data(&env.store, &key, kind).await;
        let before = env.store.snapshot(&key).await;

        let errors = [
            (
                "expire_lock",
                locks.expire_lock(&name, LONG).await.map(drop),
            ),
            (
                "expire_unlock",
                locks.expire_unlock(&name, &ghost).await.map(drop),
            ),
            ("renew", locks.renew(&name, &ghost, LONG).await.map(drop)),
            ("force_unlock", locks.force_unlock(&name).await.map(drop)),
        ];
        for (op, result) in errors {
            let err = result.expect_err(op);
            assert_eq!(
                err.kind(),
                ErrorKind::WrongType,
                "{op} on a {kind}: {err} {}",
                env.context()
            );
            assert!(err.is_wrong_type());
        }
        let inspection = locks.inspect(&name).await.unwrap();
        assert!(inspection.foreign, "{kind}: {inspection:?}");
        assert_eq!(inspection.holder, None);
        assert_eq!(
            inspection.key_type,
            if kind.starts_with("string") {
                "string"
            } else {
                kind
            }
        );
        assert_eq!(
            std::mem::discriminant(&inspection.ttl),
            std::mem::discriminant(&before.ttl),
            "{kind}: inspect reports the key's own TTL"
        );

        env.store
            .snapshot(&key)
            .await
            .assert_intact(&before, SLACK, kind);
        assert_eq!(
            env.store.key_type(&fence_key(&name)).await.unwrap(),
            "none",
            "no fence written"
        );
    }
}

async fn users_data_under_the_fence_key_is_never_touched<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ghost = Lease::parse("tl1:1:1:ffff").unwrap();
    for (i, kind) in USER_KINDS.into_iter().enumerate() {
        // A free lock whose fence key holds the user's data.
        let name = format!("free{i}");
        let key = fence_key(&name);
        put_user_data(&env.store, &key, kind).await;
        let before = env.store.snapshot(&key).await;
        let err = locks.expire_lock(&name, LONG).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongType, "{kind}: {err}");
        assert_eq!(
            env.store.key_type(&lock_key(&name)).await.unwrap(),
            "none",
            "no lease written"
        );
        // The other operations never read the fence key of a free lock.
        assert_eq!(
            locks.expire_unlock(&name, &ghost).await.unwrap(),
            Unlock::NotHeld
        );
        assert_eq!(
            locks.renew(&name, &ghost, LONG).await.unwrap(),
            Renew::NotHeld
        );
        assert!(!locks.force_unlock(&name).await.unwrap());
        let inspection = locks.inspect(&name).await.unwrap();
        assert!(
            !inspection.foreign && inspection.holder.is_none() && inspection.last_fence.is_none()
        );
        env.store
            .snapshot(&key)
            .await
            .assert_intact(&before, SLACK, kind);

        // A held lock whose fence key was replaced by the user's data meanwhile.
        let name = format!("held{i}");
        let key = fence_key(&name);
        let lease = acquired(locks.expire_lock(&name, LONG).await.unwrap());
        assert!(env.store.del(&key).await.unwrap());
        put_user_data(&env.store, &key, kind).await;
        let before = env.store.snapshot(&key).await;
        let lock_before = env.store.snapshot(&lock_key(&name)).await;
        let err = locks
            .renew(&name, &lease, Duration::from_secs(20))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongType, "{kind}: {err}");
        env.store
            .snapshot(&lock_key(&name))
            .await
            .assert_intact(&lock_before, SLACK, "the lease");
        env.store
            .snapshot(&key)
            .await
            .assert_intact(&before, SLACK, kind);
        // Releasing only touches the lock key.
        assert_eq!(
            locks.expire_unlock(&name, &lease).await.unwrap(),
            Unlock::Released
        );
        env.store
            .snapshot(&key)
            .await
            .assert_intact(&before, SLACK, kind);
    }
}

backend_tests!(
    try_acquire_when_held_returns_the_holders_lease_and_remaining_time,
    unlock_after_expiry_reports_not_held_and_spares_the_next_holder,
    retried_unlock_is_harmless,
    renew_extends_the_lease_and_retires_the_old_one,
    renewal_keeps_the_lock_past_its_first_expiry,
    bad_input_is_refused_and_writes_nothing,
    users_data_under_the_lock_key_is_never_touched,
    users_data_under_the_fence_key_is_never_touched,
);

// ---------------------------------------------------------------------------------------------
// Blocking twins

/// The blocking API from plain threads: one lock, four contenders, exactly one winner, then the
/// whole life cycle.
fn exercise_blocking<S: Store>(locks: ExpireLock<S>) {
    let barrier = Arc::new(Barrier::new(4));
    let winners: Vec<bool> = (0..4)
        .map(|_| {
            let locks = locks.clone();
            let barrier = barrier.clone();
            std::thread::spawn(move || {
                barrier.wait();
                locks
                    .blocking_expire_lock("race", LONG)
                    .unwrap()
                    .is_acquired()
            })
        })
        .collect::<Vec<_>>()
        .into_iter()
        .map(|t| t.join().unwrap())
        .collect();
    assert_eq!(winners.iter().filter(|w| **w).count(), 1, "{winners:?}");
    let holder = locks
        .blocking_inspect("race")
        .unwrap()
        .holder
        .expect("someone holds it");

    let lease = acquired(locks.blocking_expire_lock("job", LONG).unwrap());
    match locks.blocking_expire_lock("job", LONG).unwrap() {
        Acquire::Held { holder, remaining } => {
            assert_eq!(holder.value(), lease.value());
            assert!(remaining.is_some_and(|r| r <= LONG), "{remaining:?}");
        }
        other => panic!("expected Held, got {other:?}"),
    }
    let inspection = locks.blocking_inspect("job").unwrap();
    assert_eq!(inspection.last_fence, Some(lease.fence()));
    let Renew::Renewed(renewed) = locks.blocking_renew("job", &lease, LONG).unwrap() else {
        panic!("renew");
    };
    assert_eq!(
        locks.blocking_expire_unlock("job", &lease).unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        locks.blocking_expire_unlock("job", &renewed).unwrap(),
        Unlock::Released
    );
    assert_eq!(
        locks.blocking_expire_unlock("job", &renewed).unwrap(),
        Unlock::NotHeld
    );
    let err = locks.blocking_expire_lock("", LONG).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    // The race winner's lease is still intact.
    let Acquire::Held { holder: still, .. } = locks.blocking_expire_lock("race", LONG).unwrap()
    else {
        panic!("the race winner still holds the lock");
    };
    assert_eq!(still.value(), holder.value());
}

#[test]
fn blocking_twins_work_from_plain_threads_on_redis() {
    let server = RedisServer::start();
    let store = server.check(
        RedisStore::blocking_connect(&server.url()),
        "blocking_connect",
    );
    exercise_blocking(ExpireLock::new(store));
}

#[test]
fn blocking_twins_work_from_plain_threads_on_memory() {
    exercise_blocking(ExpireLock::new(MemoryStore::new()));
}

#[tokio::test]
#[should_panic(expected = "inside an async runtime")]
async fn blocking_twin_panics_inside_an_async_runtime_on_memory() {
    let locks = ExpireLock::new(MemoryStore::new());
    let _ = locks.blocking_expire_lock("job", LONG);
}

#[tokio::test]
#[should_panic(expected = "inside an async runtime")]
async fn blocking_twin_panics_inside_an_async_runtime_on_redis() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    let _ = locks.blocking_inspect("job");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[should_panic(expected = "inside an async runtime")]
async fn blocking_unlock_panics_inside_a_multi_thread_runtime() {
    let locks = ExpireLock::new(MemoryStore::new());
    let lease = acquired(locks.expire_lock("job", LONG).await.unwrap());
    let _ = locks.blocking_expire_unlock("job", &lease);
}

#[tokio::test]
#[should_panic(expected = "inside an async runtime")]
async fn blocking_connect_panics_inside_an_async_runtime() {
    let server = RedisServer::start();
    let _ = RedisStore::blocking_connect(&server.url());
}
