//! Every lock kind on a real 3-master Redis Cluster that the test starts itself (issue #8):
//! the expire lock (acquire, renew, unlock, inspect, fencing, guards, waiting by notification,
//! contention across masters), the scripted legacy lock (keys with and without a hash tag) and
//! the scripted reader/writer lock; no request ever meets CROSSSLOT.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::cluster::RedisCluster;
use tairlock::keys::key_slot;
use tairlock::{Acquire, ClusterStore, ErrorKind, ExpireLock, Renew, Store, Unlock};

const LONG: Duration = Duration::from_secs(30);

/// Names whose slots land on every master (found by asking the cluster which node serves them).
fn names_on_every_master(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    let mut seen = HashSet::new();
    let mut names = Vec::new();
    for i in 0..200 {
        let name = format!("{prefix}{i}");
        let node = cluster.node_of_slot(key_slot(&format!("tairlock:{{{name}}}")));
        if seen.insert(node) {
            names.push(name);
        }
        if seen.len() == cluster.nodes.len() {
            return names;
        }
    }
    cluster.fail("no names spread over every master")
}

async fn expire_lock_on(cluster: &RedisCluster, store: &ClusterStore) {
    let locks = ExpireLock::new(store.clone());
    for name in names_on_every_master(cluster, "orders:") {
        let Acquire::Acquired(lease) = locks.expire_lock(&name, LONG).await.unwrap() else {
            cluster.fail(format!("{name}: free lock not acquired"))
        };
        let Acquire::Held { holder, .. } = locks.expire_lock(&name, LONG).await.unwrap() else {
            cluster.fail(format!("{name}: held lock acquired twice"))
        };
        assert_eq!(holder.value(), lease.value());
        let inspection = locks.inspect(&name).await.unwrap();
        assert_eq!(
            inspection.holder.as_ref().map(|l| l.value()),
            Some(lease.value())
        );
        assert_eq!(inspection.last_fence, Some(lease.fence()));
        let Renew::Renewed(renewed) = locks.renew(&name, &lease, LONG).await.unwrap() else {
            cluster.fail(format!("{name}: renew failed"))
        };
        assert_eq!(renewed.fence(), lease.fence());
        assert_eq!(
            locks.expire_unlock(&name, &lease).await.unwrap(),
            Unlock::HeldByOther
        );
        assert_eq!(
            locks.expire_unlock(&name, &renewed).await.unwrap(),
            Unlock::Released
        );
        let again = locks
            .expire_lock(&name, LONG)
            .await
            .unwrap()
            .lease()
            .unwrap();
        assert!(again.fence() > lease.fence(), "fence must increase");
        assert!(locks.force_unlock(&name).await.unwrap());
    }
}

async fn waiting_is_woken_by_notification(cluster: &RedisCluster, store: &ClusterStore) {
    // The holder's lease is 30 s; a waiter that gets the lock within a few seconds of the
    // release was woken by the release message, not by its lease-bounded fallback.
    let locks = ExpireLock::new(store.clone());
    for name in names_on_every_master(cluster, "notify:") {
        let guard = locks.lock(&name).await.unwrap();
        let waiter = {
            let locks = locks.clone();
            let name = name.clone();
            tokio::spawn(async move {
                let guard = locks.lock(&name).await.unwrap();
                let got = Instant::now();
                guard.release().await.unwrap();
                got
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!waiter.is_finished(), "{name}: waiter got a held lock");
        let released = Instant::now();
        guard.release().await.unwrap();
        let got = waiter.await.unwrap();
        let handoff = got.duration_since(released);
        assert!(
            handoff < Duration::from_secs(3),
            "{name}: waiter woke {handoff:?} after the release (no notification?)"
        );
    }
}

async fn contention_across_masters(cluster: &RedisCluster, store: &ClusterStore) {
    let names = Arc::new(names_on_every_master(cluster, "hot:"));
    let inside: Arc<Vec<AtomicBool>> =
        Arc::new(names.iter().map(|_| AtomicBool::new(false)).collect());
    let entries = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..6 {
        let locks = ExpireLock::new(store.clone());
        let (names, inside, entries) = (names.clone(), inside.clone(), entries.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..15 {
                let k = (t + i) % names.len();
                locks
                    .with_lock(&names[k], |_| async {
                        assert!(
                            !inside[k].swap(true, Ordering::SeqCst),
                            "two holders of {} at once",
                            names[k]
                        );
                        tokio::time::sleep(Duration::from_millis(2)).await;
                        inside[k].store(false, Ordering::SeqCst);
                        entries.fetch_add(1, Ordering::SeqCst);
                    })
                    .await
                    .unwrap();
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 6 * 15);
}

async fn legacy_scripted_on(cluster: &RedisCluster, store: &ClusterStore) {
    use tairlock_legacy::{Release, ScriptedLock, TryAcquire, wire::fence_key};
    let locks = ScriptedLock::new(store.clone());
    // Keys without a tag (the fence key wraps the key in braces: `{K}:fence`, same slot), with a
    // tag (`K:fence`), on every master.
    let mut keys: Vec<String> = (0..30).map(|i| format!("lock.orderid.{i}")).collect();
    keys.extend((0..30).map(|i| format!("locks:{{order{i}}}:7")));
    let mut nodes = HashSet::new();
    for key in &keys {
        assert_eq!(key_slot(&fence_key(key)), key_slot(key), "{key}");
        nodes.insert(cluster.node_of_slot(key_slot(key)));
        let TryAcquire::Acquired(holding) = locks.try_acquire(key, LONG).await.unwrap() else {
            cluster.fail(format!("{key}: free legacy lock not acquired"))
        };
        assert!(
            !locks.try_acquire(key, LONG).await.unwrap().is_acquired(),
            "{key}: acquired twice"
        );
        let renewed = locks.renew(&holding, LONG).await.unwrap();
        let holding = match renewed {
            tairlock_legacy::Renew::Renewed(h) => h,
            other => cluster.fail(format!("{key}: renew gave {other:?}")),
        };
        assert_eq!(locks.release(&holding).await.unwrap(), Release::Released);
    }
    assert_eq!(nodes.len(), 3, "legacy keys should cover every master");
}

async fn rwlock_on(cluster: &RedisCluster, store: &ClusterStore) {
    use tairlock_rwlock::RwLock;
    let locks = RwLock::new(store.clone());
    for name in names_on_every_master(cluster, "doc:") {
        let r1 = locks.read(&name).await.unwrap();
        let r2 = locks.read(&name).await.unwrap();
        assert_eq!(locks.readers(&name).await.unwrap(), 2);
        assert!(locks.try_write(&name).await.unwrap().is_none());
        r1.release().await.unwrap();
        r2.release().await.unwrap();
        let w = locks.write(&name).await.unwrap();
        assert!(locks.try_read(&name).await.unwrap().is_none());
        let r = w.downgrade().await.unwrap();
        assert_eq!(locks.readers(&name).await.unwrap(), 1);
        r.release().await.unwrap();
        let inspection = locks.inspect(&name).await.unwrap();
        assert_eq!(inspection.readers.len(), 0, "{inspection:?}");
    }
}

/// One cluster for all lock kinds (starting one costs seconds on this machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_kind_on_three_masters() {
    let cluster = RedisCluster::start(3);
    let store = cluster.store().await;
    expire_lock_on(&cluster, &store).await;
    waiting_is_woken_by_notification(&cluster, &store).await;
    contention_across_masters(&cluster, &store).await;
    legacy_scripted_on(&cluster, &store).await;
    rwlock_on(&cluster, &store).await;

    // A caller's own cross-slot keys are refused before anything is sent.
    let err = store
        .eval(
            &tairlock::scripts::INSPECT,
            &["a".to_owned(), "b".to_owned()],
            &[],
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("CROSSSLOT"), "{err}");
}

/// Acquire + unlock over 1,000 keys from 32 concurrent tasks; acquisitions per second.
async fn throughput<S: Store>(store: S) -> f64 {
    let locks = ExpireLock::new(store);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..32 {
        let locks = locks.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..3 {
                for k in (t..1000).step_by(32) {
                    let name = format!("tp:{k}");
                    let lease = locks.expire_lock(&name, LONG).await.unwrap().lease();
                    let lease = lease.unwrap_or_else(|| panic!("{name} round {round} busy"));
                    locks.expire_unlock(&name, &lease).await.unwrap();
                }
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    3000.0 / started.elapsed().as_secs_f64()
}

/// The figure: throughput over 1,000 keys on one master vs the 3-master cluster, same
/// run, same client (printed; run with --nocapture). Not an assertion: a 2-core machine runs
/// the three masters and the client on the same cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_one_master_vs_three_master_cluster() {
    let single = support::RedisServer::start();
    let cluster = RedisCluster::start(3);
    let one = throughput(single.store().await).await;
    let three = throughput(cluster.store().await).await;
    println!(
        "expire_lock + expire_unlock over 1,000 keys, 32 tasks: 1 master {one:.0} acq/s, \
         3-master cluster {three:.0} acq/s"
    );
}
