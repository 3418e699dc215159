//! The same API on every lock kind (issue #16, part 3), on a real server:
//!
//! - `ReentrantLock`: `try_lock_as`, `try_lock_for_as`, `lock_with_lease_as` (and their
//!   thread-keyed blocking twins) re-enter without a round trip and otherwise behave like the
//!   expire lock's; `held_depth(owner, name)` counts an owner's holds.
//! - `is_locked(name)` on every kind: expire lock, reentrant, replicated, RwLock, Redlock, the token
//!   lock, the three legacy kinds (and the detected one); a key holding user data is an error.
//! - A few blocking twins from a plain thread: `blocking_try_lock`, `blocking_with_lock`,
//!   `blocking_lock_with_lease`, `blocking_renew`, the multi-lock's, `blocking_is_locked`.
//! - The RwLock's single steps and the two-step recipe's, through their blocking twins.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::clock::SystemClock;
use tairlock::store::WaitFor;
use tairlock::{
    ErrorKind, ExpireLock, Options, Owner, RedisStore, Redlock, RedlockOptions, ReentrantLock,
    ReplicatedLock, Ttl, Unlock,
};
use tairlock_legacy::{GetSetLock, LegacyLock, ScriptedLock, TryAcquire, WatchLock};
use tairlock_rwlock::{Blocker, ReadAttempt, RwLock, TwoStepRwLock, WriteAttempt};

#[tokio::test]
async fn reentrant_try_timed_and_fixed_lease_variants_and_owner_depth() {
    let server = RedisServer::start();
    let locks = ReentrantLock::new(ExpireLock::new(server.store().await));
    let (alice, bob) = (Owner::new(), Owner::new());
    let outer = locks.try_lock_as(&alice, "r").await.unwrap().expect("free");
    assert_eq!(locks.held_depth(&alice, "r"), 1);
    let inner = locks
        .try_lock_for_as(&alice, "r", Duration::from_millis(10))
        .await
        .unwrap()
        .expect("re-entry");
    let lease_inner = locks
        .lock_with_lease_as(&alice, "r", Duration::from_millis(50), Some(Duration::ZERO))
        .await
        .unwrap()
        .expect("re-entry keeps the outer lease");
    assert_eq!(locks.held_depth(&alice, "r"), 3);
    assert_eq!(locks.held_depth(&bob, "r"), 0);
    assert!(locks.try_lock_as(&bob, "r").await.unwrap().is_none());
    let started = Instant::now();
    assert!(
        locks
            .try_lock_for_as(&bob, "r", Duration::from_millis(300))
            .await
            .unwrap()
            .is_none()
    );
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(
        locks
            .lock_with_lease_as(
                &bob,
                "r",
                Duration::from_secs(1),
                Some(Duration::from_millis(100))
            )
            .await
            .unwrap()
            .is_none()
    );
    assert!(locks.is_locked("r").await.unwrap());
    assert_eq!(lease_inner.release().await.unwrap(), None);
    assert_eq!(inner.release().await.unwrap(), None);
    assert_eq!(locks.held_depth(&alice, "r"), 1);
    assert_eq!(outer.release().await.unwrap(), Some(Unlock::Released));
    assert_eq!(locks.held_depth(&alice, "r"), 0);
    assert!(!locks.is_locked("r").await.unwrap());
    // A fixed lease: no watchdog, the key expires with it.
    let fixed = locks
        .lock_with_lease_as(&bob, "r", Duration::from_millis(300), None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(locks.held_depth(&bob, "r"), 1);
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(fixed.is_lost());
    assert!(
        !locks.is_locked("r").await.unwrap(),
        "a fixed lease was renewed"
    );
    let refused = locks.try_lock_as(&bob, "r").await.unwrap_err();
    assert_eq!(
        refused.kind(),
        ErrorKind::LeaseLost,
        "re-entry after the loss"
    );
    drop(fixed);
    assert!(locks.try_lock_as(&bob, "r").await.unwrap().is_some());
}

#[tokio::test]
async fn is_locked_on_every_lock_kind() {
    let server = RedisServer::start();
    let store = server.store().await;
    let lease = Duration::from_secs(10);

    let expire = ExpireLock::new(store.clone());
    assert!(!expire.is_locked("e").await.unwrap());
    let guard = expire.lock("e").await.unwrap();
    assert!(expire.is_locked("e").await.unwrap());
    guard.release().await.unwrap();
    assert!(!expire.is_locked("e").await.unwrap());

    let reentrant = ReentrantLock::new(expire.clone());
    let owner = Owner::new();
    let held = reentrant.lock_as(&owner, "e").await.unwrap();
    assert!(reentrant.is_locked("e").await.unwrap());
    held.release().await.unwrap();
    assert!(!reentrant.is_locked("e").await.unwrap());

    let replicated = ReplicatedLock::new(
        expire.clone(),
        WaitFor::replicas(0, Duration::from_millis(100)),
    );
    let taken = replicated
        .acquire("p", lease)
        .await
        .unwrap()
        .lease()
        .unwrap();
    assert!(replicated.is_locked("p").await.unwrap());
    replicated.release("p", &taken).await.unwrap();
    assert!(!replicated.is_locked("p").await.unwrap());

    let rw = tairlock_rwlock::RwLock::new(store.clone());
    assert!(!rw.is_locked("doc").await.unwrap());
    let reader = rw.read("doc").await.unwrap();
    assert!(rw.is_locked("doc").await.unwrap());
    reader.release().await.unwrap();
    assert!(!rw.is_locked("doc").await.unwrap());
    let writer = rw.write("doc").await.unwrap();
    assert!(rw.is_locked("doc").await.unwrap());
    writer.release().await.unwrap();
    assert!(!rw.is_locked("doc").await.unwrap());

    let (second, third) = (RedisServer::start(), RedisServer::start());
    let redlock = Redlock::new(
        vec![store.clone(), second.store().await, third.store().await],
        RedlockOptions::default(),
    )
    .unwrap();
    assert!(!redlock.is_locked("q").await.unwrap());
    let quorum = redlock.try_acquire("q", lease).await.unwrap().unwrap();
    assert!(redlock.is_locked("q").await.unwrap());
    // A minority holding the key is not a lock.
    let key = quorum.key().to_owned();
    second.cli(&["DEL", &key]);
    third.cli(&["DEL", &key]);
    assert!(!redlock.is_locked("q").await.unwrap());
    redlock.release(&quorum).await;
    assert!(!redlock.is_locked("q").await.unwrap());

    let scripted = ScriptedLock::new(store.clone());
    let watch = WatchLock::new(store.clone());
    let getset = GetSetLock::new(store.clone());
    let detected = LegacyLock::detect(store.clone(), Default::default())
        .await
        .unwrap();
    let TryAcquire::Acquired(holding) = scripted.try_acquire("legacy:1", lease).await.unwrap()
    else {
        panic!("free");
    };
    assert!(scripted.is_locked("legacy:1").await.unwrap());
    assert!(watch.is_locked("legacy:1").await.unwrap());
    assert!(getset.is_locked("legacy:1").await.unwrap());
    assert!(detected.is_locked("legacy:1").await.unwrap());
    scripted.release(&holding).await.unwrap();
    for (kind, locked) in [
        ("scripted", scripted.is_locked("legacy:1").await.unwrap()),
        ("watch", watch.is_locked("legacy:1").await.unwrap()),
        ("getset", getset.is_locked("legacy:1").await.unwrap()),
        ("detected", detected.is_locked("legacy:1").await.unwrap()),
    ] {
        assert!(!locked, "{kind} says a released lock is held");
    }
    // An expired timestamp left behind by an old client: not held.
    server.cli(&["SET", "legacy:2", "1"]);
    assert!(!scripted.is_locked("legacy:2").await.unwrap());
    assert!(!getset.is_locked("legacy:2").await.unwrap());

    // A token lock, ours or a foreign client's (any string under the key is somebody's token).
    let token = tairlock::TokenLock::new(store.clone());
    assert!(!token.is_locked("py:lock").await.unwrap());
    let guard = token.lock("py:lock").await.unwrap();
    assert!(token.is_locked("py:lock").await.unwrap());
    guard.release().await.unwrap();
    assert!(!token.is_locked("py:lock").await.unwrap());
    server.cli(&[
        "SET",
        "py:lock",
        "6f1c1b0e9a6d11ee8c900242ac120002",
        "PX",
        "30000",
    ]);
    assert!(token.is_locked("py:lock").await.unwrap());
    server.cli(&["HSET", "py:hash", "f", "v"]);
    assert_eq!(
        token.is_locked("py:hash").await.unwrap_err().kind(),
        ErrorKind::WrongType
    );

    // User data: an error, and the data stays.
    server.cli(&["SET", "tairlock:{user}", "not a lease"]);
    server.cli(&["SET", "legacy:user", "not a timestamp"]);
    assert_eq!(
        expire.is_locked("user").await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        scripted.is_locked("legacy:user").await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(server.cli(&["GET", "tairlock:{user}"]), "not a lease");
    assert_eq!(
        expire.is_locked("").await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

/// The blocking twins, from a plain thread with a store that owns its runtime.
#[test]
fn blocking_twins_work_from_a_plain_thread() {
    let server = RedisServer::start();
    let store = RedisStore::blocking_connect(&server.url()).unwrap();
    let locks = ExpireLock::with_options(
        store,
        Options::default().watchdog_lease(Duration::from_secs(2)),
    );
    let guard = locks.blocking_try_lock("b").unwrap().expect("free");
    assert!(locks.blocking_try_lock("b").unwrap().is_none());
    assert!(locks.blocking_is_locked("b").unwrap());
    guard.blocking_renew(Duration::from_secs(5)).unwrap();
    assert!(guard.lease().remaining().unwrap() > Duration::from_secs(4));
    guard.blocking_release().unwrap();
    let fence = locks
        .blocking_with_lock("b", |lease| async move { lease.fence() })
        .unwrap();
    assert!(fence > 0);
    let fixed = locks
        .blocking_lock_with_lease("b", Duration::from_millis(200), None)
        .unwrap()
        .unwrap();
    assert!(!fixed.is_renewed());
    let many = locks
        .blocking_try_lock_many_for(&["b", "c"], Duration::from_secs(5))
        .unwrap()
        .expect("b's fixed lease runs out");
    many.blocking_renew(Duration::from_secs(3)).unwrap();
    assert_eq!(many.blocking_release().unwrap(), [Unlock::Released; 2]);
    drop(fixed);
    let reentrant = ReentrantLock::new(locks.clone());
    let outer = reentrant.blocking_try_lock("t").unwrap().unwrap();
    let inner = reentrant
        .blocking_try_lock_for("t", Duration::from_millis(10))
        .unwrap()
        .unwrap();
    assert_eq!(reentrant.thread_held_depth("t"), 2);
    assert_eq!(inner.release().unwrap(), None);
    assert_eq!(outer.release().unwrap(), Some(Unlock::Released));
    assert!(!locks.blocking_force_unlock("t").unwrap());
}

/// `ClusterStore::blocking_connect` from a plain thread: the store owns its runtime.
#[test]
fn a_cluster_store_connects_from_blocking_code() {
    let cluster = support::cluster::RedisCluster::start(3);
    let store = tairlock::ClusterStore::blocking_connect(&cluster.urls()).unwrap();
    let locks = ExpireLock::new(store);
    let guard = locks.blocking_try_lock("blocking").unwrap().expect("free");
    assert!(locks.blocking_is_locked("blocking").unwrap());
    assert_eq!(guard.blocking_release().unwrap(), Unlock::Released);
}

/// The RwLock's single steps and the two-step recipe's, through their blocking twins from a
/// plain thread: acquire, refuse, renew, inspect, downgrade and release, one step at a time.
#[test]
fn rwlock_single_steps_have_blocking_twins() {
    let server = RedisServer::start();
    let store = RedisStore::blocking_connect(&server.url()).unwrap();
    let rw = RwLock::new(store.clone());
    let lease = Duration::from_secs(10);
    // A reader in; a repeat with its nonce is the same admission.
    for _ in 0..2 {
        match rw.blocking_read_acquire("doc", "a1", lease).unwrap() {
            ReadAttempt::Acquired { lease, readers } => {
                assert_eq!(lease.nonce(), "a1");
                assert_eq!(readers, 1);
            }
            other => panic!("a free lock refused a reader: {other:?}"),
        }
    }
    let state = rw.blocking_state("doc").unwrap();
    assert_eq!((state.readers, state.writer), (1, Ttl::Missing));
    assert_eq!(rw.blocking_readers("doc").unwrap(), 1);
    assert!(rw.blocking_is_locked("doc").unwrap());
    // A writer is kept out by the reader and raises its intent.
    let refused = rw
        .blocking_write_acquire("doc", "b1", lease, Some(Duration::from_secs(10)))
        .unwrap();
    assert!(
        matches!(
            refused,
            WriteAttempt::Blocked {
                by: Blocker::Readers(1),
                ..
            }
        ),
        "{refused:?}"
    );
    let snapshot = rw.blocking_inspect("doc").unwrap();
    assert_eq!(snapshot.readers.len(), 1);
    assert_eq!(snapshot.readers[0].nonce, "a1");
    assert_eq!(snapshot.intent.expect("the writer's intent").nonce, "b1");
    assert!(snapshot.writer.is_none());
    // The intent keeps a new reader out; the reader inside renews.
    assert!(matches!(
        rw.blocking_read_acquire("doc", "a2", lease).unwrap(),
        ReadAttempt::Blocked {
            by: Blocker::Intent,
            ..
        }
    ));
    let renewed = rw
        .blocking_read_renew("doc", "a1", Duration::from_secs(20))
        .unwrap()
        .expect("a live reader renews");
    assert_eq!(renewed.nonce(), "a1");
    // The writer gives up (its intent goes), the reader leaves; a repeat finds it gone.
    assert_eq!(rw.blocking_write_abandon("doc", "b1").unwrap(), 1);
    assert!(rw.blocking_read_release("doc", "a1").unwrap());
    assert!(!rw.blocking_read_release("doc", "a1").unwrap());
    assert!(
        rw.blocking_read_renew("doc", "a1", lease)
            .unwrap()
            .is_none()
    );
    assert!(!rw.blocking_is_locked("doc").unwrap());
    // A writer in, with a fencing token; readers stay out; the renewal keeps the token.
    let WriteAttempt::Acquired(write) =
        rw.blocking_write_acquire("doc", "b2", lease, None).unwrap()
    else {
        panic!("a free lock refused a writer");
    };
    assert!(write.fence() > 0);
    assert!(matches!(
        rw.blocking_read_acquire("doc", "a3", lease).unwrap(),
        ReadAttempt::Blocked {
            by: Blocker::Writer,
            ..
        }
    ));
    let write = rw
        .blocking_write_renew("doc", write.lease(), Duration::from_secs(20))
        .unwrap()
        .expect("a held write lease renews");
    assert_eq!(
        write.fence(),
        rw.blocking_inspect("doc").unwrap().last_fence.unwrap()
    );
    // Downgraded atomically to a reader; the old write lease releases nothing any more.
    let read = rw
        .blocking_downgrade_lease("doc", write.lease(), "a4", lease)
        .unwrap()
        .expect("a held write lease downgrades");
    assert_eq!(read.nonce(), "a4");
    let state = rw.blocking_state("doc").unwrap();
    assert_eq!((state.readers, state.writer), (1, Ttl::Missing));
    assert_eq!(
        rw.blocking_write_release("doc", write.lease()).unwrap(),
        Unlock::NotHeld
    );
    assert!(rw.blocking_read_release("doc", "a4").unwrap());
    // A write lease released by its holder.
    let WriteAttempt::Acquired(write) =
        rw.blocking_write_acquire("doc", "b3", lease, None).unwrap()
    else {
        panic!("a free lock refused a writer");
    };
    assert_eq!(
        rw.blocking_write_release("doc", write.lease()).unwrap(),
        Unlock::Released
    );
    assert!(!rw.blocking_is_locked("doc").unwrap());

    // The two-step recipe, its steps by name.
    let two = TwoStepRwLock::new(store, Arc::new(SystemClock));
    let taken = two
        .blocking_try_write("old", lease)
        .unwrap()
        .expect("no readers, no writer");
    assert!(!two.blocking_try_read("old").unwrap());
    assert!(!two.blocking_probe_writer("old").unwrap());
    assert!(two.blocking_expire_lock("old", lease).unwrap().is_none());
    assert!(two.blocking_write_unlock("old", &taken).unwrap());
    assert!(two.blocking_try_read("old").unwrap());
    assert_eq!(two.blocking_enter_read("old").unwrap(), 2);
    assert_eq!(two.blocking_reader_count("old").unwrap(), 2);
    assert_eq!(two.blocking_exit_read("old").unwrap(), 1);
    assert_eq!(two.blocking_read_unlock("old").unwrap(), 0);
    let taken = two
        .blocking_expire_lock("old", lease)
        .unwrap()
        .expect("free again");
    assert!(
        !two.blocking_expire_unlock("old", taken.expiry_ms() - 1)
            .unwrap()
    );
    assert!(
        two.blocking_expire_unlock("old", taken.expiry_ms())
            .unwrap()
    );
    assert_eq!(server.cli(&["EXISTS", "tairlock:{old}:w"]), "0");
}
