//! Replica-acknowledged locks on a master and a replica that the test starts itself (issue #8):
//! without acknowledgements a failover loses a lock; with them the acquisition is either
//! acknowledged (and survives the promotion) or refused and rolled back; renewals and releases
//! report their acknowledgements, and the guard's watchdog counts only acknowledged renewals.
//! On a Redis Cluster with a replica per master, each call waits for the replica of its key's
//! master.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::store::WaitFor;
use tairlock::{
    Acquire, ExpireLock, RedisStore, Renew, ReplicatedAcquire, ReplicatedLock, ReplicatedRelease,
    ReplicatedRenew, Unlock,
};

const LONG: Duration = Duration::from_secs(30);

/// A master and one replica with its link up.
fn master_and_replica() -> (RedisServer, RedisServer) {
    // No diskless-sync delay: the replica's first sync completes at once, not after 5 s.
    let master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
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
    // After a diskless sync the master streams to the replica (and counts it in WAIT) only once
    // the replica's first REPLCONF ACK arrived: wait until a write is acknowledged.
    let client = master.check(redis::Client::open(master.url()), "bad redis url");
    let mut con = master.check(client.get_connection(), "connect to the master");
    loop {
        let _: () = master.check(redis::cmd("SET").arg("probe").arg(1).query(&mut con), "SET");
        let acked: i64 = master.check(redis::cmd("WAIT").arg(1).arg(100).query(&mut con), "WAIT");
        if acked >= 1 {
            break;
        }
        if Instant::now() > deadline {
            master.fail("the replica acknowledged no write within 10 s");
        }
    }
    let _: () = master.check(redis::cmd("DEL").arg("probe").query(&mut con), "DEL");
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

/// Latency of acquire, renew and release with and without replica acknowledgements (printed;
/// run with --nocapture).
#[tokio::test]
async fn latency_with_and_without_acks() {
    let (master, _replica) = master_and_replica();
    let plain = ExpireLock::new(master.store().await);
    let acked = ReplicatedLock::new(
        plain.clone(),
        WaitFor::replicas(1, Duration::from_millis(500)),
    );
    const N: u32 = 300;
    // [acquire, renew, release] × [plain, with WAIT 1]
    let mut total = [[Duration::ZERO; 2]; 3];
    for i in 0..N {
        let name = format!("lat:{i}");
        let t = Instant::now();
        let lease = plain
            .expire_lock(&name, LONG)
            .await
            .unwrap()
            .lease()
            .unwrap();
        total[0][0] += t.elapsed();
        let t = Instant::now();
        let Renew::Renewed(lease) = plain.renew(&name, &lease, LONG).await.unwrap() else {
            master.fail("plain renew of a held lease failed");
        };
        total[1][0] += t.elapsed();
        let t = Instant::now();
        let unlocked = plain.expire_unlock(&name, &lease).await.unwrap();
        total[2][0] += t.elapsed();
        assert_eq!(unlocked, Unlock::Released);

        let t = Instant::now();
        let lease = acked.acquire(&name, LONG).await.unwrap().lease().unwrap();
        total[0][1] += t.elapsed();
        let t = Instant::now();
        let ReplicatedRenew::Renewed { lease, .. } =
            acked.renew(&name, &lease, LONG).await.unwrap()
        else {
            master.fail("acknowledged renew refused with a healthy replica");
        };
        total[1][1] += t.elapsed();
        let t = Instant::now();
        let released = acked.release(&name, &lease).await.unwrap();
        total[2][1] += t.elapsed();
        assert!(released.is_acknowledged(), "{released:?}");
    }
    let [acquire, renew, release] = total.map(|[p, a]| (p / N, a / N));
    println!(
        "latency per op over {N} uncontended cycles (1 master + 1 replica, loopback), plain vs \
         with WAIT 1: acquire {:?} vs {:?}, renew {:?} vs {:?}, release {:?} vs {:?}",
        acquire.0, acquire.1, renew.0, renew.1, release.0, release.1
    );
}

/// The master's or the replica's view of one key: its value ("" when absent) and `PTTL`.
fn key_state(server: &RedisServer, key: &str) -> (String, i64) {
    let value = server.cli(&["GET", key]);
    let pttl = server.cli(&["PTTL", key]).parse().unwrap_or(-3);
    (value, pttl)
}

fn replicated(store: RedisStore, timeout: Duration) -> ReplicatedLock<RedisStore> {
    ReplicatedLock::new(ExpireLock::new(store), WaitFor::replicas(1, timeout))
}

#[tokio::test]
async fn acknowledged_renew_and_release_reach_the_replica() {
    let (master, replica) = master_and_replica();
    let a = replicated(master.store().await, Duration::from_millis(500));
    let key = a.locks().keys("job").unwrap().lock;
    let lease = a
        .acquire("job", Duration::from_secs(5))
        .await
        .unwrap()
        .lease()
        .unwrap();
    let outcome = a.renew("job", &lease, LONG).await.unwrap();
    let ReplicatedRenew::Renewed {
        lease: renewed,
        acks,
    } = outcome
    else {
        master.fail(format!("renew with a healthy replica: {outcome:?}"));
    };
    assert!(acks.replicas >= 1, "{acks:?}");
    assert_eq!(renewed.fence(), lease.fence());
    // Acknowledged means the replica has it now, not eventually: read it at once.
    let (value, pttl) = key_state(&replica, &key);
    assert_eq!(
        value,
        renewed.value(),
        "the replica lacks the renewed lease"
    );
    assert!(
        pttl > 25_000,
        "the replica has the old expiry: PTTL {pttl} ms"
    );

    let released = a.release("job", &renewed).await.unwrap();
    let ReplicatedRelease::Released { acks } = released else {
        master.fail(format!("release with a healthy replica: {released:?}"));
    };
    assert!(acks.replicas >= 1, "{acks:?}");
    assert_eq!(key_state(&replica, &key), (String::new(), -2));
    // Renewing or releasing a lease that is gone writes nothing and claims no acks.
    assert_eq!(
        a.renew("job", &renewed, LONG).await.unwrap(),
        ReplicatedRenew::NotHeld
    );
    assert_eq!(
        a.release("job", &renewed).await.unwrap(),
        ReplicatedRelease::NotHeld
    );
}

#[tokio::test]
async fn unacknowledged_renew_and_release_are_reported_and_not_undone() {
    let (mut master, replica) = master_and_replica();
    let a = replicated(master.store().await, Duration::from_millis(150));
    let b = ExpireLock::new(replica.store().await);
    let short = Duration::from_secs(3);
    let job = a.acquire("job", short).await.unwrap().lease().unwrap();
    let other = a.acquire("other", LONG).await.unwrap().lease().unwrap();
    cut_replication(&master, &replica);

    let started = Instant::now();
    let outcome = a.renew("job", &job, LONG).await.unwrap();
    let took = started.elapsed();
    let ReplicatedRenew::NotAcknowledged {
        lease: renewed,
        acks,
        required,
    } = outcome
    else {
        master.fail(format!(
            "expected an unacknowledged renewal, got {outcome:?}"
        ));
    };
    assert_eq!((acks.replicas, required), (0, 1));
    assert!(
        took >= Duration::from_millis(140),
        "WAIT returned early: {took:?}"
    );
    // Not undone: the master holds the renewed lease, and the old one no longer matches there.
    let holder = a.locks().inspect("job").await.unwrap().holder.unwrap();
    assert_eq!(holder.value(), renewed.value());
    assert_eq!(
        a.renew("job", &job, LONG).await.unwrap(),
        ReplicatedRenew::HeldByOther
    );

    let released = a.release("other", &other).await.unwrap();
    assert_eq!(
        released,
        ReplicatedRelease::NotAcknowledged {
            acks: tairlock::store::Acks { replicas: 0 },
            required: 1
        }
    );
    assert!(a.locks().inspect("other").await.unwrap().holder.is_none());

    // What "not acknowledged" means after a failover: the promoted replica has the old lease
    // with its old expiry, and still holds the released lock.
    fail_over(&mut master, &replica);
    let Acquire::Held { holder, remaining } = b.expire_lock("job", LONG).await.unwrap() else {
        replica.fail("the promoted replica lost the acknowledged acquisition");
    };
    assert_eq!(
        holder.value(),
        job.value(),
        "the replica has the renewed lease"
    );
    assert!(
        remaining.is_some_and(|r| r <= short),
        "the replica has the renewed expiry: {remaining:?}"
    );
    let Acquire::Held { holder, .. } = b.expire_lock("other", LONG).await.unwrap() else {
        replica.fail("the unacknowledged release reached the replica after all");
    };
    assert_eq!(holder.value(), other.value());
}

#[tokio::test]
async fn an_acknowledged_renewal_survives_promotion() {
    let (mut master, replica) = master_and_replica();
    let a = replicated(master.store().await, Duration::from_millis(500));
    let b = ExpireLock::new(replica.store().await);
    let lease = a
        .acquire("job", Duration::from_secs(2))
        .await
        .unwrap()
        .lease()
        .unwrap();
    let ReplicatedRenew::Renewed { lease: renewed, .. } =
        a.renew("job", &lease, LONG).await.unwrap()
    else {
        master.fail("acknowledged renew refused with a healthy replica");
    };
    fail_over(&mut master, &replica);
    let (value, pttl) = key_state(&replica, &a.locks().keys("job").unwrap().lock);
    assert_eq!(value, renewed.value());
    assert!(
        pttl > 25_000,
        "the new master has the pre-renewal expiry: {pttl} ms"
    );
    // And it excludes others for the renewed time, well past the original 2 s.
    tokio::time::sleep(Duration::from_millis(2200)).await;
    let Acquire::Held { holder, remaining } = b.expire_lock("job", LONG).await.unwrap() else {
        replica.fail("the renewed lock ended at its original expiry on the new master");
    };
    assert_eq!(holder.value(), renewed.value());
    assert!(
        remaining.is_some_and(|r| r > Duration::from_secs(20)),
        "{remaining:?}"
    );
}

#[tokio::test]
async fn the_guard_renews_with_acks_and_releases_with_acks() {
    let (master, replica) = master_and_replica();
    let a = replicated(master.store().await, Duration::from_millis(100));
    let key = a.locks().keys("job").unwrap().lock;
    let ttl = Duration::from_millis(600);
    let guard = a.try_lock("job", ttl).await.unwrap().unwrap();
    let first = guard.lease();
    // Busy for others meanwhile, replicated or not.
    assert!(matches!(
        a.try_lock("job", ttl).await.unwrap(),
        Err(ReplicatedAcquire::Held { .. })
    ));
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        !guard.is_lost(),
        "the watchdog did not keep the lease past its length"
    );
    let current = guard.lease();
    assert_ne!(current.value(), first.value(), "no renewal happened");
    assert_eq!(current.fence(), first.fence());
    assert!(current.remaining().unwrap() > ttl / 3);
    // The replica has a renewed lease of this holding (the watchdog may rotate it again while
    // we read, so compare the fence and the expiry, not the exact value).
    let (value, pttl) = key_state(&replica, &key);
    let on_replica = tairlock::Lease::parse(&value).unwrap();
    assert_eq!(on_replica.fence(), first.fence());
    assert!(on_replica.expires_at() > first.expires_at());
    assert!(pttl > 0);

    let released = guard.release().await.unwrap();
    assert!(
        matches!(released, ReplicatedRelease::Released { acks } if acks.replicas >= 1),
        "{released:?}"
    );
    assert_eq!(key_state(&replica, &key), (String::new(), -2));

    // Dropped: released in the background, on the master and then the replica.
    let guard = a.try_lock("job", ttl).await.unwrap().unwrap();
    drop(guard);
    let deadline = Instant::now() + Duration::from_secs(2);
    while key_state(&master, &key).1 != -2 || key_state(&replica, &key).1 != -2 {
        if Instant::now() > deadline {
            master.fail("a dropped guard's lock was not released within 2 s");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn the_guard_is_lost_when_renewals_stop_being_acknowledged() {
    let (master, mut replica) = master_and_replica();
    let a = replicated(master.store().await, Duration::from_millis(100));
    let key = a.locks().keys("job").unwrap().lock;
    let ttl = Duration::from_millis(1200);
    let guard = a.try_lock("job", ttl).await.unwrap().unwrap();
    let probe = a.acquire("probe", LONG).await.unwrap().lease().unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!guard.is_lost());
    replica.stop();
    let gone = Instant::now() + Duration::from_secs(5);
    while !master
        .cli(&["INFO", "replication"])
        .contains("connected_slaves:0")
    {
        assert!(Instant::now() < gone, "the master still sees its replica");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // From here no renewal can be acknowledged: the guard's validity ends at the deadline of the
    // last acknowledged one.
    let valid_until = guard.lease().deadline().unwrap();
    let at_stop = key_state(&master, &key).0;
    let interval = ttl / 3;

    // The next renewal is applied on the master but not acknowledged: reported by the lock...
    let renewed = a.renew("probe", &probe, LONG).await.unwrap();
    assert!(
        matches!(
            renewed,
            ReplicatedRenew::NotAcknowledged {
                acks: tairlock::store::Acks { replicas: 0 },
                required: 1,
                ..
            }
        ),
        "{renewed:?}"
    );
    // ... and by the guard, which keeps counting on the acknowledged validity only.
    let renewed_on_master = tokio::time::Instant::now() + interval + Duration::from_millis(300);
    while key_state(&master, &key).0 == at_stop {
        assert!(
            tokio::time::Instant::now() < renewed_on_master,
            "the watchdog did not renew on the master within one interval"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !guard.is_lost(),
        "lost before the acknowledged validity ended"
    );
    assert_eq!(guard.lease().deadline(), Some(valid_until));
    let early =
        tokio::time::timeout_at(valid_until - Duration::from_millis(50), guard.lost()).await;
    assert!(
        early.is_err(),
        "lost before the acknowledged validity ended"
    );
    tokio::time::timeout_at(valid_until + Duration::from_millis(200), guard.lost())
        .await
        .expect("still not lost 200 ms after the acknowledged validity ended");
    assert!(guard.is_lost());

    // The lock key itself still exists on the master, renewed there without the replica (a
    // last renewal may still be in flight: compare the holding, not the exact value).
    let (value, pttl) = key_state(&master, &key);
    let on_master = tairlock::Lease::parse(&value).expect("the lock key is gone on the master");
    assert_eq!(on_master.fence(), guard.fence());
    assert!(pttl > 0, "the key expired: {pttl}");
    let released = guard.release().await.unwrap();
    assert!(
        matches!(
            released,
            ReplicatedRelease::NotAcknowledged { required: 1, .. }
        ),
        "{released:?}"
    );
    assert_eq!(key_state(&master, &key), (String::new(), -2));
}

/// `ReplicatedLock` needs a `ReplicaStore`: on the embedded store it does not compile (there is
/// no run-time "no replicas" error any more), while the same code on `RedisStore` does.
#[test]
fn a_replicated_lock_on_the_memory_store_does_not_compile() {
    let snippet = r#"
        use std::time::Duration;
        pub async fn f() {
            let locks = tairlock::ReplicatedLock::new(
                tairlock::ExpireLock::new(tairlock::MemoryStore::new()),
                tairlock::store::WaitFor::replicas(1, Duration::from_millis(100)),
            );
            let _ = locks.acquire("a", Duration::from_secs(1)).await;
        }
    "#;
    let (ok, stderr) = support::compile_snippet("replicated_memory", snippet);
    assert!(!ok, "ReplicatedLock<MemoryStore> was accepted");
    assert!(
        stderr.contains("error[E0277]")
            && stderr.contains("MemoryStore: ReplicaStore")
            && !stderr.contains("error[E0433]")
            && !stderr.contains("error[E0425]"),
        "rejected for another reason:
{stderr}"
    );
    let control = snippet
        .replace(
            "tairlock::ExpireLock::new(tairlock::MemoryStore::new())",
            "tairlock::ExpireLock::new(store)",
        )
        .replace(
            "pub async fn f()",
            "pub async fn f(store: tairlock::RedisStore)",
        );
    let (ok, stderr) = support::compile_snippet("replicated_redis", &control);
    assert!(
        ok,
        "the control snippet on RedisStore must compile:
{stderr}"
    );
}

/// On a cluster with one replica per master, `WAIT` runs on the connection to the master of the
/// lock's slot and counts that master's replica: acquire, renew and release are acknowledged by
/// it (the replica's key count follows), and asking for two replicas is refused and rolled back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicated_lock_on_a_cluster_waits_for_the_slot_masters_replica() {
    let cluster = support::cluster::RedisCluster::start_with_replicas(3, 1, &[]);
    let store = cluster.store().await;
    let one = ReplicatedLock::new(
        ExpireLock::new(store.clone()),
        WaitFor::replicas(1, Duration::from_secs(2)),
    );
    let two = ReplicatedLock::new(
        ExpireLock::new(store),
        WaitFor::replicas(2, Duration::from_millis(100)),
    );
    let keys = cluster.one_key_per_master((0..200).map(|i| format!("tairlock:{{acked{i}}}")));
    for key in keys {
        let name = &key["tairlock:{".len()..key.len() - 1];
        let master = cluster.node_of_key(&key);
        let replicas = cluster.replicas_of(master);
        assert_eq!(replicas.len(), 1, "node {master}'s replicas: {replicas:?}");
        let replica = &cluster.nodes[replicas[0]];
        let dbsize = |n: &RedisServer| n.cli(&["DBSIZE"]);

        let ReplicatedAcquire::Acquired { lease, acks } = one.acquire(name, LONG).await.unwrap()
        else {
            cluster.fail(format!("{name}: not acquired with one replica's ack"))
        };
        assert_eq!(acks.replicas, 1, "{name}");
        // Acknowledged: the replica has the lock and its fence key already.
        assert_eq!(dbsize(replica), dbsize(&cluster.nodes[master]), "{name}");
        let ReplicatedRenew::Renewed { lease, acks } = one.renew(name, &lease, LONG).await.unwrap()
        else {
            cluster.fail(format!("{name}: renew not acknowledged"))
        };
        assert_eq!(acks.replicas, 1, "{name}");
        let ReplicatedRelease::Released { acks } = one.release(name, &lease).await.unwrap() else {
            cluster.fail(format!("{name}: release not acknowledged"))
        };
        assert_eq!(acks.replicas, 1, "{name}");

        // Two replicas asked for, one exists: refused within its timeout, rolled back.
        let ReplicatedAcquire::NotAcknowledged {
            acks,
            required,
            rolled_back,
        } = two.acquire(name, LONG).await.unwrap()
        else {
            cluster.fail(format!("{name}: acquired without two replicas"))
        };
        assert_eq!(
            (acks.replicas, required, rolled_back),
            (1, 2, true),
            "{name}"
        );
        assert!(
            one.locks().inspect(name).await.unwrap().holder.is_none(),
            "{name}: a refused grant stayed"
        );
    }
}
