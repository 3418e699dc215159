//! Replica-acknowledged acquisition on a master and a replica that the test starts itself
//! (issue #8): without acknowledgements a failover loses a lock; with them the acquisition is
//! either acknowledged (and survives the promotion) or refused and rolled back.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::store::WaitFor;
use tairlock::{Acquire, ExpireLock, ReplicatedAcquire, ReplicatedLock};

const LONG: Duration = Duration::from_secs(30);

/// A master and one replica with its link up.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start();
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
    {
        if Instant::now() > deadline {
            replica.fail("replica link not up within 10 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (master, replica)
}

/// Cut the replication link and keep it cut: the replica can no longer authenticate to its
/// master, and the master drops its replica connection. Writes from now on reach only the master.
fn cut_replication(master: &RedisServer, replica: &RedisServer) {
    assert_eq!(replica.cli(&["CONFIG", "SET", "masterauth", "wrong"]), "OK");
    master.cli(&["CLIENT", "KILL", "TYPE", "replica"]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !master
        .cli(&["INFO", "replication"])
        .contains("connected_slaves:0")
    {
        if Instant::now() > deadline {
            master.fail("replica still connected after CLIENT KILL");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Kill the master and promote the replica.
fn fail_over(master: &mut RedisServer, replica: &RedisServer) {
    master.stop();
    assert_eq!(replica.cli(&["REPLICAOF", "NO", "ONE"]), "OK");
}

#[tokio::test]
async fn without_acks_a_failover_loses_the_lock() {
    let (mut master, replica) = master_and_replica();
    let a = ExpireLock::new(master.store().await);
    let b = ExpireLock::new(replica.store().await);
    cut_replication(&master, &replica);
    let lease = a.expire_lock("job", LONG).await.unwrap().lease().unwrap();
    fail_over(&mut master, &replica);
    // The promoted replica never had A's grant: B gets the lock A still holds.
    let Acquire::Acquired(b_lease) = b.expire_lock("job", LONG).await.unwrap() else {
        panic!("expected the loss to show: B should have acquired");
    };
    assert!(lease.remaining().unwrap() > Duration::from_secs(20));
    assert_ne!(b_lease.value(), lease.value());
}

#[tokio::test]
async fn with_acks_the_lock_survives_promotion() {
    let (mut master, replica) = master_and_replica();
    let a = ReplicatedLock::new(
        ExpireLock::new(master.store().await),
        WaitFor::replicas(1, Duration::from_millis(500)),
    );
    let b = ExpireLock::new(replica.store().await);
    let ReplicatedAcquire::Acquired { lease, acks } = a.acquire("job", LONG).await.unwrap() else {
        master.fail("acknowledged acquire refused with a healthy replica");
    };
    assert!(acks.replicas >= 1);
    fail_over(&mut master, &replica);
    let Acquire::Held { holder, .. } = b.expire_lock("job", LONG).await.unwrap() else {
        replica.fail("an acknowledged lock was lost on promotion");
    };
    assert_eq!(holder.value(), lease.value());
}

#[tokio::test]
async fn with_acks_an_unreplicated_grant_is_refused_and_rolled_back() {
    let (mut master, replica) = master_and_replica();
    let store = master.store().await;
    let a = ReplicatedLock::new(
        ExpireLock::new(store.clone()),
        WaitFor::replicas(1, Duration::from_millis(200)),
    );
    let b = ExpireLock::new(replica.store().await);
    cut_replication(&master, &replica);
    let started = Instant::now();
    let outcome = a.acquire("job", LONG).await.unwrap();
    let took = started.elapsed();
    let ReplicatedAcquire::NotAcknowledged {
        acks,
        required,
        rolled_back,
    } = outcome
    else {
        master.fail(format!("expected a refusal, got {outcome:?}"));
    };
    assert_eq!((acks.replicas, required, rolled_back), (0, 1, true));
    assert!(
        took >= Duration::from_millis(190),
        "WAIT returned early: {took:?}"
    );
    assert!(took < Duration::from_secs(2), "WAIT took {took:?}");
    // Rolled back on the master: the lock is free there.
    assert!(a.locks().inspect("job").await.unwrap().holder.is_none());
    // Refused means not held: after a failover B takes it, and nobody believed they held it.
    fail_over(&mut master, &replica);
    assert!(b.expire_lock("job", LONG).await.unwrap().is_acquired());
}

/// Acquire latency with and without replica acknowledgements (printed; run with --nocapture).
#[tokio::test]
async fn acquire_latency_with_and_without_acks() {
    let (master, _replica) = master_and_replica();
    let plain = ExpireLock::new(master.store().await);
    let acked = ReplicatedLock::new(
        plain.clone(),
        WaitFor::replicas(1, Duration::from_millis(500)),
    );
    const N: u32 = 300;
    let mut plain_total = Duration::ZERO;
    let mut acked_total = Duration::ZERO;
    for i in 0..N {
        let name = format!("lat:{i}");
        let t = Instant::now();
        let lease = plain
            .expire_lock(&name, LONG)
            .await
            .unwrap()
            .lease()
            .unwrap();
        plain_total += t.elapsed();
        plain.expire_unlock(&name, &lease).await.unwrap();
        let t = Instant::now();
        let lease = acked.acquire(&name, LONG).await.unwrap().lease().unwrap();
        acked_total += t.elapsed();
        plain.expire_unlock(&name, &lease).await.unwrap();
    }
    println!(
        "acquire latency over {N} uncontended acquisitions (1 master + 1 replica, loopback): \
         plain {:?}/op, with WAIT 1 {:?}/op",
        plain_total / N,
        acked_total / N
    );
}
