//! Every lock kind on a real 3-master Redis Cluster that the test starts itself (issue #8):
//! the expire lock (acquire, renew, unlock, inspect, fencing, guards, waiting by notification,
//! contention across masters), the scripted legacy lock (keys with and without a hash tag) and
//! the scripted reader/writer lock; no request ever meets CROSSSLOT. Release notifications use
//! sharded pub/sub (Redis 7.0) and follow a channel whose slot moves; classic pub/sub on request.
//! A slot moves while clients contend.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::cluster::RedisCluster;
use tairlock::keys::key_slot;
use tairlock::notify::PubSub;
use tairlock::scripts::FAIR_LOCK;
use tairlock::store::ClusterOptions;
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{Acquire, ClusterStore, ErrorKind, ExpireLock, Renew, Store, Unlock};

const LONG: Duration = Duration::from_secs(30);

/// Lock names whose keys land on every master, one each.
fn names_on_every_master(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    let keys = cluster.one_key_per_master((0..200).map(|i| format!("tairlock:{{{prefix}{i}}}")));
    keys.iter()
        .map(|k| k["tairlock:{".len()..k.len() - 1].to_owned())
        .collect()
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

/// Guards over many slots on every master, renewed by the batched watchdog: a call per slot
/// (a cluster refuses keys of several slots in one script), none lost over several intervals,
/// every lease still the one in effect at the release.
async fn batched_renewals_on(cluster: &RedisCluster, store: &ClusterStore) {
    let lease = Duration::from_millis(600);
    let locks = ExpireLock::with_options(
        store.clone(),
        tairlock::Options::default().watchdog_lease(lease),
    );
    let mut guards = Vec::new();
    for i in 0..300 {
        guards.push(locks.lock(&format!("batch:{i}")).await.unwrap());
    }
    tokio::time::sleep(lease * 2).await;
    for guard in guards {
        let name = guard.name().to_owned();
        if guard.is_lost() {
            cluster.fail(format!("{name}: lost while every master answered"));
        }
        assert_eq!(guard.release().await.unwrap(), Unlock::Released, "{name}");
    }
}

async fn waiting_is_woken_by_notification(cluster: &RedisCluster, store: &ClusterStore) {
    // The holder's lease is 30 s; a waiter that gets the lock within a few seconds of the
    // release was woken by the release message, not by its lease-bounded fallback.
    let locks = ExpireLock::new(store.clone());
    for name in names_on_every_master(cluster, "notify:") {
        let guard = locks.lock(&name).await.unwrap();
        let waiter = spawn_waiter(&locks, &name);
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

/// Counts the fair mode's attempts sent through it.
#[derive(Default)]
struct CountAttempts(AtomicUsize);

impl Hook for CountAttempts {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        if let Command::Eval { script, .. } = command
            && std::ptr::eq(script, &FAIR_LOCK)
        {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
        run
    }
}

async fn fair_handoff_on(cluster: &RedisCluster, store: &ClusterStore) {
    // Fair mode: the release grants to the queued waiter of another client and announces the
    // grant on its wake channel, in the lock's shard. With 30 s leases for the holder and for
    // the waiter's place, a waiter that has the lock within a few seconds was woken by that
    // announcement, and one that sent no attempt meanwhile held on its payload (one hop).
    let options = tairlock::Options::default().fair(true).waiter_lease(LONG);
    let holder = ExpireLock::with_options(store.clone(), options.clone());
    let waiter = ExpireLock::with_options(
        Intercept::new(store.clone(), CountAttempts::default()),
        options,
    );
    for name in names_on_every_master(cluster, "fair:") {
        let guard = holder.lock(&name).await.unwrap();
        let fence = guard.lease().fence();
        let next = {
            let (waiter, name) = (waiter.clone(), name.clone());
            tokio::spawn(async move {
                let guard = waiter.lock(&name).await.unwrap();
                let (got, attempts) = (
                    Instant::now(),
                    waiter.store().hook().0.load(Ordering::SeqCst),
                );
                guard.release().await.unwrap();
                (got, attempts)
            })
        };
        // Queued and subscribed (the attempt after the subscription included) well before.
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(!next.is_finished(), "{name}: waiter got a held lock");
        let attempts = waiter.store().hook().0.load(Ordering::SeqCst);
        let released = Instant::now();
        guard.release().await.unwrap();
        let (got, attempts_then) = next.await.unwrap();
        let handoff = got.duration_since(released);
        assert!(
            handoff < Duration::from_secs(3),
            "{name}: the granted waiter woke {handoff:?} after the release"
        );
        assert_eq!(
            attempts_then, attempts,
            "{name}: the granted waiter sent an attempt after the release"
        );
        // The waiter released at once, with nobody queued: free, a larger token retained.
        let after = waiter.inspect(&name).await.unwrap();
        assert!(after.holder.is_none(), "{name}: {after:?}");
        assert!(after.last_fence.unwrap() > fence, "{name}: {after:?}");
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

        // A writer waiting behind a reader is woken by the last reader's release message
        // (sharded on this cluster), not by re-asserting its intent (every 10 s / 3 here).
        let r = locks.read(&name).await.unwrap();
        let writer = {
            let locks = RwLock::with_options(
                store.clone(),
                tairlock_rwlock::Options::default().intent_lease(Duration::from_secs(10)),
            );
            let name = name.clone();
            tokio::spawn(async move {
                let w = locks.write(&name).await.unwrap();
                let got = Instant::now();
                w.release().await.unwrap();
                got
            })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(!writer.is_finished(), "{name}: writer beside a reader");
        let released = Instant::now();
        r.release().await.unwrap();
        let handoff = writer.await.unwrap().duration_since(released);
        assert!(
            handoff < Duration::from_secs(1),
            "{name}: writer got in {handoff:?} after the last reader left (no notification?)"
        );
    }
}

/// One cluster for all lock kinds (starting one costs seconds on this machine).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_lock_kind_on_three_masters() {
    let cluster = RedisCluster::start(3);
    let store = cluster.store().await;
    expire_lock_on(&cluster, &store).await;
    batched_renewals_on(&cluster, &store).await;
    waiting_is_woken_by_notification(&cluster, &store).await;
    contention_across_masters(&cluster, &store).await;
    fair_handoff_on(&cluster, &store).await;
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
async fn throughput<S: Store>(store: S, rounds: usize) -> f64 {
    let locks = ExpireLock::new(store);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for t in 0..32 {
        let locks = locks.clone();
        tasks.push(tokio::spawn(async move {
            for round in 0..rounds {
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
    (1000 * rounds) as f64 / started.elapsed().as_secs_f64()
}

/// The figure: throughput over 1,000 keys on one master vs the 3-master cluster, same
/// run, same client (printed; run with --nocapture). Not an assertion: a 2-core machine runs
/// the three masters and the client on the same cores.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throughput_one_master_vs_three_master_cluster() {
    // Each key is taken `rounds` times (3 by default, a fraction of a second per store; set
    // TAIRLOCK_THROUGHPUT_ROUNDS=30 or more for steadier figures).
    let rounds: usize = std::env::var("TAIRLOCK_THROUGHPUT_ROUNDS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let single = support::RedisServer::start();
    let cluster = RedisCluster::start(3);
    let one = throughput(single.store().await, rounds).await;
    let three = throughput(cluster.store().await, rounds).await;
    // The same cluster with classic pub/sub: every release's PUBLISH crosses the cluster bus to
    // every node, listened to or not.
    let mut options = ClusterOptions::default();
    options.pubsub = Some(PubSub::Classic);
    let classic = ClusterStore::connect_with(&cluster.urls(), options)
        .await
        .unwrap();
    let three_classic = throughput(classic, rounds).await;
    println!(
        "expire_lock + expire_unlock over 1,000 keys × {rounds}, 32 tasks: 1 master {one:.0} acq/s, \
         3-master cluster {three:.0} acq/s (sharded pub/sub), {three_classic:.0} acq/s \
         (classic pub/sub)"
    );
}

/// Several tasks contend on one lock while its slot moves to another master: never two
/// holders, no error, every waiter gets in within 10 s (none stuck), and the lock works on the
/// new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reshard_while_contending() {
    let cluster = Arc::new(RedisCluster::start(3));
    let store = cluster.store().await;
    let name = "resharded";
    let slot = key_slot(&format!("{}{{{name}}}", tairlock::keys::DEFAULT_PREFIX));
    let from = cluster.node_of_slot(slot);
    let to = (from + 1) % cluster.nodes.len();

    let inside = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let moved = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let locks = ExpireLock::new(store.clone());
        let (inside, stop, moved) = (inside.clone(), stop.clone(), moved.clone());
        tasks.push(tokio::spawn(async move {
            let (mut entries, mut after_move) = (0u32, 0u32);
            while !stop.load(Ordering::SeqCst) {
                let was_moved = moved.load(Ordering::SeqCst);
                // Bounded: a waiter that never gets in fails the test instead of hanging it.
                let outcome = tokio::time::timeout(
                    Duration::from_secs(10),
                    locks.with_lock(name, |_| async {
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        tokio::time::sleep(Duration::from_millis(3)).await;
                        inside.store(false, Ordering::SeqCst);
                    }),
                )
                .await
                .expect("a waiter stayed stuck for 10 s");
                match outcome {
                    Ok(()) => {}
                    // While the lock's keys sit on two nodes, multi-key scripts get TRYAGAIN; the
                    // cluster client retries, but a long enough split can outlast its retries.
                    // That is a transient, documented cluster condition, not a safety failure:
                    // count it and try again (safety is the `inside` check above).
                    Err(e)
                        if e.message().contains("TRYAGAIN")
                            || e.is_connection()
                            || e.is_timeout() =>
                    {
                        eprintln!("transient error during the migration (retried): {e}");
                        continue;
                    }
                    Err(e) => panic!("with_lock failed during the migration: {e}"),
                }
                entries += 1;
                if was_moved {
                    after_move += 1;
                }
            }
            (entries, after_move)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let migration = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || {
            cluster.move_slot_step_by_step(slot, from, to, Duration::from_millis(150))
        })
    };
    migration.await.expect("migration panicked");
    moved.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(700)).await;
    stop.store(true, Ordering::SeqCst);
    let mut counts = Vec::new();
    for task in tasks {
        counts.push(task.await.expect("contending task failed"));
    }
    eprintln!("(entries, entries after the move) per task: {counts:?}");
    // Every task's last wait ended (bounded at 10 s each): no waiter stuck. Entries per task are
    // not balanced — the lock has no FIFO order, and one task may get in only once or twice
    // while the others cycle, with or without a migration — so only the total after the move
    // is required to be non-zero.
    assert!(counts.iter().all(|&(entries, _)| entries > 0), "{counts:?}");
    assert!(
        counts.iter().map(|&(_, after)| after).sum::<u32>() > 0,
        "nobody got in after the move: {counts:?}"
    );
    assert_eq!(cluster.node_of_slot(slot), to, "the slot moved");
    // The lock's keys live on the new master now (the fence key at least: it never expires).
    let fence_key = format!("{}{{{name}}}:fence", tairlock::keys::DEFAULT_PREFIX);
    assert_eq!(cluster.nodes[to].cli(&["EXISTS", &fence_key]), "1");
    assert_eq!(
        cluster.nodes[from].cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]),
        "0"
    );
}

/// How many clients node `node` has subscribed to `channel`: `PUBSUB SHARDNUMSUB` when
/// `sharded`, else `PUBSUB NUMSUB`.
fn subscribers(cluster: &RedisCluster, node: usize, sharded: bool, channel: &str) -> u64 {
    let sub = if sharded { "SHARDNUMSUB" } else { "NUMSUB" };
    let reply = cluster.nodes[node].cli(&["PUBSUB", sub, channel]);
    // redis-cli prints the channel and its count on two lines.
    reply
        .lines()
        .nth(1)
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| cluster.fail(format!("PUBSUB {sub} {channel}: {reply:?}")))
}

/// Wait up to 5 s until `node` has `want` subscribers of `channel`.
async fn await_subscribers(
    cluster: &RedisCluster,
    node: usize,
    sharded: bool,
    channel: &str,
    want: u64,
) {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let have = subscribers(cluster, node, sharded, channel);
        if have == want {
            return;
        }
        if Instant::now() > deadline {
            cluster.fail(format!(
                "node {node} has {have} subscribers of {channel} (sharded: {sharded}), not {want}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// A task that waits for `name`, releases it at once, and returns when it got in.
fn spawn_waiter(locks: &ExpireLock<ClusterStore>, name: &str) -> tokio::task::JoinHandle<Instant> {
    let (locks, name) = (locks.clone(), name.to_owned());
    tokio::spawn(async move {
        let guard = locks.lock(&name).await.unwrap();
        let got = Instant::now();
        guard.release().await.unwrap();
        got
    })
}

/// Hold `name` (no watchdog, 30 s lease), start a waiter, and return the lease and the waiter,
/// once the waiter is waiting.
async fn hold_with_waiter(
    locks: &ExpireLock<ClusterStore>,
    name: &str,
) -> (tairlock::Lease, tokio::task::JoinHandle<Instant>) {
    let lease = locks
        .expire_lock(name, LONG)
        .await
        .unwrap()
        .lease()
        .unwrap();
    (lease, spawn_waiter(locks, name))
}

/// Release `lease` and require the waiter to get in within 3 s: far less than the holder's 30 s
/// lease, so it was woken by the release message.
async fn release_wakes(
    locks: &ExpireLock<ClusterStore>,
    name: &str,
    lease: &tairlock::Lease,
    waiter: tokio::task::JoinHandle<Instant>,
) -> Duration {
    assert!(!waiter.is_finished(), "{name}: waiter got a held lock");
    let released = Instant::now();
    assert_eq!(
        locks.expire_unlock(name, lease).await.unwrap(),
        Unlock::Released
    );
    let handoff = waiter.await.unwrap().duration_since(released);
    assert!(
        handoff < Duration::from_secs(3),
        "{name}: waiter woke {handoff:?} after the release (no notification?)"
    );
    handoff
}

/// On Redis 7.0 the store picks sharded pub/sub: a waiter `SSUBSCRIBE`s on the master of its
/// lock's slot only, the release script `SPUBLISH`es there only, and the waiter is woken by it.
/// No classic subscription or `PUBLISH` anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_are_announced_in_the_shard_of_the_lock() {
    let cluster = RedisCluster::start(3);
    let store = cluster.store().await;
    assert_eq!(store.pubsub(), PubSub::Sharded);
    let locks = ExpireLock::new(store.clone());
    let names = names_on_every_master(&cluster, "shard:");
    for i in 0..cluster.nodes.len() {
        cluster.nodes[i].cli(&["CONFIG", "RESETSTAT"]);
    }
    let mut owners = Vec::new();
    for name in &names {
        let channel = format!("tairlock:{{{name}}}:released");
        let owner = cluster.node_of_slot(key_slot(&channel));
        owners.push(owner);
        let (lease, waiter) = hold_with_waiter(&locks, name).await;
        await_subscribers(&cluster, owner, true, &channel, 1).await;
        for node in 0..cluster.nodes.len() {
            if node != owner {
                assert_eq!(subscribers(&cluster, node, true, &channel), 0, "{name}");
            }
            assert_eq!(subscribers(&cluster, node, false, &channel), 0, "{name}");
        }
        let handoff = release_wakes(&locks, name, &lease, waiter).await;
        eprintln!("{name}: handoff {handoff:?} through node {owner}");
    }
    for node in 0..cluster.nodes.len() {
        // Each name's first release (by the holder) and the waiter's own release.
        let owned = owners.iter().filter(|&&o| o == node).count() as u64;
        assert_eq!(
            cluster.command_calls(node, "spublish"),
            2 * owned,
            "node {node}"
        );
        assert_eq!(cluster.command_calls(node, "publish"), 0, "node {node}");
    }
}

/// Classic pub/sub when asked for (what the store uses on servers before 7.0): releases are
/// `PUBLISH`ed, heard through one ordinary subscription, and still wake the waiter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn classic_pubsub_on_request() {
    let cluster = RedisCluster::start(3);
    let mut options = ClusterOptions::default();
    options.pubsub = Some(PubSub::Classic);
    let store = ClusterStore::connect_with(&cluster.urls(), options)
        .await
        .unwrap();
    assert_eq!(store.pubsub(), PubSub::Classic);
    let locks = ExpireLock::new(store);
    for name in names_on_every_master(&cluster, "classic:") {
        let channel = format!("tairlock:{{{name}}}:released");
        let (lease, waiter) = hold_with_waiter(&locks, &name).await;
        // The notifier listens on the first seed node, whatever the slot.
        await_subscribers(&cluster, 0, false, &channel, 1).await;
        release_wakes(&locks, &name, &lease, waiter).await;
    }
    let spublish: u64 = (0..cluster.nodes.len())
        .map(|n| cluster.command_calls(n, "spublish"))
        .sum();
    assert_eq!(spublish, 0);
}

/// A waiter's sharded subscription follows its channel when the slot moves to another master:
/// the old master drops it (`sunsubscribe`), the notifier subscribes again on the new master,
/// and a release after the move still wakes the waiter at once (the holder's lease is 30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharded_subscription_follows_its_slot_to_another_master() {
    let cluster = Arc::new(RedisCluster::start(3));
    let store = cluster.store().await;
    let holder = ExpireLock::new(cluster.store().await);
    let locks = ExpireLock::new(store);
    let name = "moving";
    let channel = format!("tairlock:{{{name}}}:released");
    let slot = key_slot(&channel);
    let from = cluster.node_of_slot(slot);
    let to = (from + 1) % cluster.nodes.len();

    let lease = holder
        .expire_lock(name, LONG)
        .await
        .unwrap()
        .lease()
        .unwrap();
    let waiter = spawn_waiter(&locks, name);
    await_subscribers(&cluster, from, true, &channel, 1).await;
    {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || {
            cluster.move_slot_step_by_step(slot, from, to, Duration::from_millis(50))
        })
        .await
        .expect("migration panicked");
    }
    assert_eq!(cluster.node_of_slot(slot), to);
    await_subscribers(&cluster, to, true, &channel, 1).await;
    assert_eq!(subscribers(&cluster, from, true, &channel), 0);
    // Let any wake-up from the move itself pass (the waiter retries and finds the lock held).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let handoff = release_wakes(&holder, name, &lease, waiter).await;
    eprintln!("handoff after the slot moved from node {from} to node {to}: {handoff:?}");
}

/// A master is killed (`SIGKILL`) and the cluster promotes its replica. A lock whose acquisition
/// the replica acknowledged is still held on the new master (a third client is refused), the
/// waiter's sharded subscription moves to the new master, and the holder's release after the
/// failover wakes the waiter at once (its lease is 30 s).
///
/// Waiting rides through the failover (issue 12, item 12): every waiter here makes one call with
/// a 30 s patience and the test never retries for it. Besides the waiter subscribed before the
/// kill, an expire-lock waiter and an RwLock writer start right after it on a free lock of the
/// same master, while its slots have no master: their attempts meet connection errors and
/// `CLUSTERDOWN` until the replica takes over, and they get their locks all the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_keeps_an_acknowledged_lock_and_its_waiters_subscription() {
    use tairlock::store::WaitFor;
    use tairlock::{ReplicatedAcquire, ReplicatedLock};
    let mut cluster = RedisCluster::start_with_replicas(3, 1, &["--cluster-node-timeout", "2000"]);
    let name = "failover";
    let channel = format!("tairlock:{{{name}}}:released");
    let master = cluster.node_of_key(&format!("tairlock:{{{name}}}"));
    let replica = cluster.replicas_of(master)[0];

    let holder = ReplicatedLock::new(
        ExpireLock::new(cluster.store().await),
        WaitFor::replicas(1, Duration::from_secs(2)),
    );
    let ReplicatedAcquire::Acquired { lease, .. } = holder.acquire(name, LONG).await.unwrap()
    else {
        cluster.fail("not acquired with the replica's ack")
    };
    let waiter = {
        let locks = ExpireLock::new(cluster.store().await);
        tokio::spawn(async move {
            let guard = locks
                .try_lock_for(name, LONG)
                .await
                .expect("the waiter rides through the failover")
                .expect("the lock came free within the patience");
            let got = Instant::now();
            guard.release().await.unwrap();
            got
        })
    };
    await_subscribers(&cluster, master, true, &channel, 1).await;
    // Connected before the kill: a late waiter of each kind, on a free lock of the same master.
    let late = (0..)
        .map(|i| format!("late-{i}"))
        .find(|n| cluster.node_of_key(&format!("tairlock:{{{n}}}")) == master)
        .unwrap();
    let late_name = late.clone();
    let (late_locks, late_rw) = (
        ExpireLock::new(cluster.store().await),
        tairlock_rwlock::RwLock::new(cluster.store().await),
    );

    cluster.nodes[master].stop();
    let killed = Instant::now();
    let late_waiter = tokio::spawn(async move {
        let outcome = late_locks.try_lock_for(&late, LONG).await;
        let guard = outcome
            .expect("a waiter that starts during the failover rides through it")
            .expect("the lock came free within the patience");
        guard.release().await.unwrap();
    });
    let late_writer = tokio::spawn(async move {
        let outcome = late_rw.try_write_for(&late_name, LONG).await;
        let guard = outcome
            .expect("an RwLock writer that starts during the failover rides through it")
            .expect("the free lock is taken within the patience");
        let got = killed.elapsed();
        guard.release().await.unwrap();
        got
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cluster.nodes[replica].cli(&["ROLE"]).starts_with("master") {
        if Instant::now() > deadline {
            cluster.fail("the replica was not promoted within 30 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The acknowledged grant survived the failover.
    let third = ExpireLock::new(cluster.store().await);
    let Acquire::Held { holder: on_new, .. } = third.expire_lock(name, LONG).await.unwrap() else {
        cluster.fail("the lock was lost in the failover")
    };
    assert_eq!(on_new.value(), lease.value());
    // The waiter listens on the new master now.
    await_subscribers(&cluster, replica, true, &channel, 1).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    assert_eq!(
        holder.locks().expire_unlock(name, &lease).await.unwrap(),
        Unlock::Released
    );
    let got = waiter.await.unwrap();
    let handoff = got.duration_since(released);
    let writer_got = late_writer.await.unwrap();
    late_waiter.await.unwrap();
    eprintln!(
        "after the failover: handoff {handoff:?}; the late RwLock writer got in {writer_got:?} \
         after the kill"
    );
    assert!(
        handoff < Duration::from_secs(3),
        "waiter woke {handoff:?} after the release (subscription lost in the failover?)"
    );
}

/// A cluster whose `COMMAND` is renamed away (as some managed services and ACLs do) cannot be
/// asked whether it has `SPUBLISH`: the store connects anyway, with classic pub/sub, and waiters
/// are still woken by releases.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pubsub_detection_falls_back_to_classic_when_command_info_is_refused() {
    let cluster = RedisCluster::start_with_replicas(3, 0, &["--rename-command", "COMMAND", ""]);
    let store = cluster.store().await;
    assert_eq!(store.pubsub(), PubSub::Classic);
    let locks = ExpireLock::new(store);
    let name = "no-command";
    let (lease, waiter) = hold_with_waiter(&locks, name).await;
    await_subscribers(
        &cluster,
        0,
        false,
        &format!("tairlock:{{{name}}}:released"),
        1,
    )
    .await;
    release_wakes(&locks, name, &lease, waiter).await;
}
