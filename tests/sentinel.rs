//! A `RedisStore` behind Redis Sentinel, through a real failover (issue 14, item 2).
//!
//! One master, one replica and three sentinels (`redis-server sentinel.conf --sentinel`), all on
//! free loopback ports; the failover is forced with `SENTINEL FAILOVER`, which needs no quorum
//! and no waiting for a down-after period.
//!
//! - `follows_the_master_through_a_failover`: a store made with `connect_sentinel` locks on the
//!   master; a `ReplicatedLock` acquisition (acknowledged by the replica) is held across the
//!   failover, and its release on the promoted master finds it; a waiter blocked on a lock
//!   across the failover has its release channel subscribed again on the new master (`PUBSUB
//!   CHANNELS` there), and gets the lock after the holder releases on the new master; a new lock is taken on the new
//!   master, and the store's address is the new master's.
//! - `unknown_master_name_is_refused`: a name the sentinels do not know is a clear connection
//!   error, in bounded time.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use support::sentinel::{MASTER, Sentinel, eventually, setup};
use tairlock::store::{SentinelOptions, WaitFor};
use tairlock::{
    Acquire, ErrorKind, ExpireLock, RedisStore, ReplicatedAcquire, ReplicatedLock, Unlock,
};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn follows_the_master_through_a_failover() {
    let (master, replica, sentinels) = setup();
    let urls: Vec<String> = sentinels.iter().map(Sentinel::url).collect();
    let store = RedisStore::connect_sentinel(&urls, MASTER, SentinelOptions::default())
        .await
        .unwrap();
    assert_eq!(
        store.url(),
        format!("redis://127.0.0.1:{}/0", master.port())
    );
    let locks = ExpireLock::new(store.clone());

    // A lock on the master.
    let first = match locks
        .expire_lock("sentinel:first", Duration::from_secs(60))
        .await
        .unwrap()
    {
        Acquire::Acquired(lease) => lease,
        other => panic!("not acquired on the master: {other:?}"),
    };
    assert!(first.fence() > 0);

    // A lock acknowledged by the replica: held across the failover.
    let replicated =
        ReplicatedLock::new(locks.clone(), WaitFor::replicas(1, Duration::from_secs(5)));
    let kept = match replicated
        .acquire("sentinel:kept", Duration::from_secs(60))
        .await
        .unwrap()
    {
        ReplicatedAcquire::Acquired { lease, .. } => lease,
        other => panic!("not acknowledged: {other:?}"),
    };

    // A holder with a 60 s lease and a waiter queued behind it, across the failover.
    let holder = match locks
        .expire_lock("sentinel:queue", Duration::from_secs(60))
        .await
        .unwrap()
    {
        Acquire::Acquired(lease) => lease,
        other => panic!("not acquired on the master: {other:?}"),
    };
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let guard = locks.lock("sentinel:queue").await.unwrap();
            let fence = guard.fence();
            guard.release().await.unwrap();
            fence
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;

    // The failover (forced; retried while the sentinel is not ready for it yet).
    let s0 = &sentinels[0];
    assert!(
        eventually(Duration::from_secs(30), || s0
            .cli(&["SENTINEL", "FAILOVER", MASTER])
            .starts_with("OK")),
        "SENTINEL FAILOVER was not accepted"
    );
    assert!(
        eventually(Duration::from_secs(30), || sentinels
            .iter()
            .all(|s| s.master_port() == Some(replica.port()))),
        "the sentinels did not all name the replica as the new master"
    );
    assert!(
        eventually(Duration::from_secs(30), || replica
            .cli(&["ROLE"])
            .starts_with("master")),
        "the replica was not promoted"
    );

    // The waiter's subscription moved to the new master.
    assert!(
        eventually(Duration::from_secs(20), || replica
            .cli(&["PUBSUB", "CHANNELS"])
            .contains("sentinel:queue")),
        "the release channel is not subscribed on the new master: {}",
        replica.cli(&["PUBSUB", "CHANNELS"])
    );

    // The holder releases on the new master; the waiter, subscribed again there, gets in
    // well before the holder's 60 s lease would have ended.
    let released_at = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        // The first command after the failover may meet the killed connection or the demoted
        // master (a transient error, after which the store asks the sentinels); releasing with
        // the same lease again is safe.
        match locks.expire_unlock("sentinel:queue", &holder).await {
            Ok(unlock) => {
                assert_eq!(unlock, Unlock::Released, "the held lock was lost");
                break;
            }
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("cannot release on the new master: {e}"),
        }
    }
    let fence = tokio::time::timeout(Duration::from_secs(40), waiter)
        .await
        .expect("the waiter did not get the lock after the failover")
        .unwrap();
    assert!(fence > 0);
    assert!(
        released_at.elapsed() < Duration::from_secs(50),
        "the waiter waited for the lease instead of the release"
    );

    // The store follows the new master.
    let deadline = Instant::now() + Duration::from_secs(30);
    let second = loop {
        match locks
            .expire_lock("sentinel:second", Duration::from_secs(60))
            .await
        {
            Ok(Acquire::Acquired(lease)) => break lease,
            Ok(other) => panic!("not acquired on the new master: {other:?}"),
            Err(e) if e.is_transient() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("no lock on the new master: {e}"),
        }
    };
    assert!(second.fence() > 0);
    assert_eq!(
        store.url(),
        format!("redis://127.0.0.1:{}/0", replica.port())
    );
    assert!(
        replica
            .cli(&["EXISTS", "tairlock:{sentinel:second}"])
            .starts_with('1'),
        "the new lock is not on the promoted master"
    );

    // The acknowledged lock survived the failover: its release finds it on the new master
    // (whose own replica, the old master, may not be back yet to acknowledge the release).
    let released = replicated.release("sentinel:kept", &kept).await.unwrap();
    assert_eq!(
        released.unlock(),
        Unlock::Released,
        "the acknowledged lock did not survive the failover: {released:?}"
    );
    drop(master);
}

#[tokio::test]
async fn unknown_master_name_is_refused() {
    let master = RedisServer::start();
    let sentinel = Sentinel::start(master.port());
    let started = Instant::now();
    let err = RedisStore::connect_sentinel(
        &[sentinel.url()],
        "no-such-master",
        SentinelOptions::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.to_string().contains("no-such-master"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));

    let none = RedisStore::connect_sentinel::<&str>(&[], MASTER, SentinelOptions::default())
        .await
        .unwrap_err();
    assert_eq!(none.kind(), ErrorKind::InvalidInput);
}
