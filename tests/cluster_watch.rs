//! WatchLock on a real 3-master Redis Cluster that each test starts itself: every transaction
//! runs on the master of its lock's slot (checked by each master's `EXEC` count) over one pooled
//! connection per master, contending clients never both hold, a holding interoperates with
//! ScriptedLock on the cluster, and a slot move while a lock is held and contended keeps the
//! holder's lock and never lets two in. Then the migration states one at a time: an `EXEC`
//! refused by a former owner runs nothing, and watched reads wait out a split slot within a
//! bound.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::cluster::RedisCluster;
use tairlock::ClusterStore;
use tairlock::keys::key_slot;
use tairlock_legacy::wire::fence_key;
use tairlock_legacy::{
    Holding, Options, Release, Renew, ScriptedLock, TryAcquire, Unit, WatchLock, WatchStore,
};

const LONG: Duration = Duration::from_secs(30);

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn watch_lock(store: &ClusterStore) -> WatchLock<ClusterStore> {
    WatchLock::with_options(store.clone(), Options::default().unit(Unit::Millis))
}

#[track_caller]
fn acquired(outcome: tairlock::Result<TryAcquire>) -> Holding {
    match outcome {
        Ok(TryAcquire::Acquired(h)) => h,
        other => panic!("expected the lock to be acquired, got {other:?}"),
    }
}

#[track_caller]
fn renewed(outcome: tairlock::Result<Renew>) -> Holding {
    match outcome {
        Ok(Renew::Renewed(h)) => h,
        other => panic!("expected the lock to be renewed, got {other:?}"),
    }
}

/// Lock keys without a hash tag (the fence key wraps them: `{K}:fence`) and with one
/// (`K:fence`), one of each per master.
fn keys_on_every_master(cluster: &RedisCluster, prefix: &str) -> Vec<String> {
    let mut keys = cluster.one_key_per_master((0..).map(|i| format!("{prefix}.orderid.{i}")));
    keys.extend(cluster.one_key_per_master((0..).map(|i| format!("{prefix}:{{order{i}}}:7"))));
    keys
}

/// Acquire, busy, renew, release (old and new holding), re-acquire with a higher token, on keys
/// of every master; the lock's keys are written on the key's master and every `EXEC` of these
/// operations ran there and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_on_every_master() {
    let cluster = RedisCluster::start(3);
    let store = cluster.store().await;
    let locks = watch_lock(&store);
    let keys = keys_on_every_master(&cluster, "lock");
    let owners: Vec<usize> = keys.iter().map(|k| cluster.node_of_key(k)).collect();
    let execs_before: Vec<u64> = (0..3).map(|n| cluster.command_calls(n, "exec")).collect();

    for (key, &node) in keys.iter().zip(&owners) {
        let master = &cluster.nodes[node];
        assert_eq!(key_slot(&fence_key(key)), key_slot(key), "{key}");
        let held = acquired(locks.try_acquire(key, LONG).await);
        let fence = held.fence().expect("a WatchLock holding has a token");
        assert_eq!(master.cli(&["GET", key]), held.value().to_string(), "{key}");
        assert_eq!(master.cli(&["GET", &fence_key(key)]), fence.to_string());
        let pttl: u64 = master.cli(&["PTTL", key]).parse().unwrap();
        // The lease's TTL: the key lives until `now + timeout + 1` ms, so up to 30,001 ms right
        // after the grant, less what two CLI round trips took on a loaded machine.
        assert!((20_000..=30_001).contains(&pttl), "{key}: PTTL {pttl}");

        match locks.try_acquire(key, LONG).await.unwrap() {
            TryAcquire::Busy { holder, remaining } => {
                assert_eq!(holder, Some(held.value()), "{key}");
                assert!(remaining.unwrap() > Duration::from_secs(20), "{key}");
            }
            other => panic!("{key}: a held lock was acquired again: {other:?}"),
        }

        tokio::time::sleep(ms(5)).await;
        let renewal = renewed(locks.renew(&held, LONG * 2).await);
        assert_eq!(renewal.fence(), Some(fence), "renewal keeps the token");
        assert!(
            renewal.value() > held.value(),
            "renewal moves the timestamp"
        );
        let pttl: u64 = master.cli(&["PTTL", key]).parse().unwrap();
        assert!(pttl > 50_000, "{key}: PTTL after renewal {pttl}");
        assert_eq!(
            locks.release(&held).await.unwrap(),
            Release::HeldByOther,
            "{key}: the holding before the renewal no longer matches"
        );
        assert_eq!(locks.release(&renewal).await.unwrap(), Release::Released);
        assert_eq!(master.cli(&["EXISTS", key]), "0", "{key}");
        assert_eq!(locks.release(&renewal).await.unwrap(), Release::NotHeld);

        let again = acquired(locks.try_acquire(key, LONG).await);
        assert!(
            again.fence().unwrap() > fence,
            "{key}: the token must increase"
        );
        assert_eq!(locks.release(&again).await.unwrap(), Release::Released);
    }

    // Acquire, renew, release, acquire, release: five EXECs per key, each on its key's master.
    for (node, before) in execs_before.into_iter().enumerate() {
        let keys_here = owners.iter().filter(|&&o| o == node).count() as u64;
        assert!(keys_here >= 2, "every master serves two of the keys");
        assert_eq!(
            cluster.command_calls(node, "exec") - before,
            5 * keys_here,
            "EXECs on node {node}"
        );
    }
}

/// Dedicated connections are pooled per master: 300 sequential acquire + release cycles over
/// keys of every master open one connection on each master. Prints the cycle rate next to
/// ScriptedLock's on the same keys (run with --nocapture); a 2-core machine runs the three
/// masters and the client, so the figures are relative only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pooled_connections_one_per_master_and_cost() {
    let cluster = RedisCluster::start(3);
    let store = cluster.store().await;
    let keys = keys_on_every_master(&cluster, "pool");
    let locks = watch_lock(&store);
    let connections = |cluster: &RedisCluster| -> Vec<u64> {
        (0..3)
            .map(|n| cluster.info_field(n, "stats", "total_connections_received"))
            .collect()
    };
    let before = connections(&cluster);
    let started = Instant::now();
    for i in 0..300 {
        let key = &keys[i % keys.len()];
        let held = acquired(locks.try_acquire(key, ms(5_000)).await);
        assert_eq!(locks.release(&held).await.unwrap(), Release::Released);
    }
    let watch_rate = 300.0 / started.elapsed().as_secs_f64();
    let after = connections(&cluster);
    for (node, (after, before)) in after.iter().zip(&before).enumerate() {
        // One dedicated WATCH connection, and the INFO connection of `after` itself.
        assert_eq!(
            after - before,
            2,
            "node {node}: 600 transactions opened {} connections",
            (after - before).saturating_sub(1)
        );
    }

    let scripted = ScriptedLock::with_options(store.clone(), Options::default().unit(Unit::Millis));
    let started = Instant::now();
    for i in 0..300 {
        let key = &keys[i % keys.len()];
        let held = acquired(scripted.try_acquire(key, ms(5_000)).await);
        assert_eq!(scripted.release(&held).await.unwrap(), Release::Released);
    }
    let scripted_rate = 300.0 / started.elapsed().as_secs_f64();
    println!(
        "acquire + release, sequential, 3-master cluster: WatchLock {watch_rate:.0} cycles/s, \
         ScriptedLock {scripted_rate:.0} cycles/s"
    );
}

/// Two clients (each its own `ClusterStore`), three tasks each, contend on keys of every
/// master: never two holders of one key, every release finds its own lock, every task gets in
/// every time. Then eight attempts at once on an expired old-client value of each master's key:
/// exactly one wins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn contending_clients_never_both_hold() {
    let cluster = RedisCluster::start(3);
    let clients = [cluster.store().await, cluster.store().await];
    let keys = Arc::new(keys_on_every_master(&cluster, "hot"));
    let inside: Arc<Vec<AtomicBool>> =
        Arc::new(keys.iter().map(|_| AtomicBool::new(false)).collect());
    let entries = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for t in 0..6 {
        let locks = WatchLock::with_options(
            clients[t % 2].clone(),
            Options::default()
                .unit(Unit::Millis)
                .poll_interval(ms(2))
                .acquire_timeout(Some(Duration::from_secs(20))),
        );
        let (keys, inside, entries) = (keys.clone(), inside.clone(), entries.clone());
        tasks.push(tokio::spawn(async move {
            for i in 0..20 {
                // Neighbouring tasks (of both clients) share keys.
                let k = (t / 2 + i) % keys.len();
                let held = locks
                    .acquire(&keys[k], ms(5_000))
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("{} not acquired within 20 s", keys[k]));
                assert!(
                    !inside[k].swap(true, Ordering::SeqCst),
                    "two holders of {} at once",
                    keys[k]
                );
                tokio::time::sleep(ms(2)).await;
                inside[k].store(false, Ordering::SeqCst);
                assert_eq!(locks.release(&held).await.unwrap(), Release::Released);
                entries.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(entries.load(Ordering::SeqCst), 6 * 20);

    // An old client's expired timestamp (no TTL): every contender sees it free at once.
    for key in keys.iter() {
        let master = &cluster.nodes[cluster.node_of_key(key)];
        let now: u64 = master
            .cli(&["TIME"])
            .lines()
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            master.cli(&["SET", key, &(now * 1000 - 1_000).to_string()]),
            "OK"
        );
        let attempts: Vec<_> = (0..8)
            .map(|i| {
                let locks = watch_lock(&clients[i % 2]);
                let key = key.clone();
                tokio::spawn(async move { locks.try_acquire(&key, ms(5_000)).await })
            })
            .collect();
        let mut winners = Vec::new();
        for attempt in attempts {
            if let TryAcquire::Acquired(h) = attempt.await.unwrap().unwrap() {
                winners.push(h);
            }
        }
        assert_eq!(winners.len(), 1, "{key}: exactly one winner: {winners:?}");
        assert_eq!(master.cli(&["GET", key]), winners[0].value().to_string());
    }
}

/// WatchLock and ScriptedLock share the wire format on the cluster too: each sees the other's
/// holding as busy, renews and releases it, and their fencing tokens keep increasing across
/// the two kinds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_and_scripted_locks_share_keys_on_the_cluster() {
    let cluster = RedisCluster::start(3);
    let store = cluster.store().await;
    let watch = watch_lock(&store);
    let scripted = ScriptedLock::with_options(store.clone(), Options::default().unit(Unit::Millis));
    for key in keys_on_every_master(&cluster, "mixed") {
        let by_watch = acquired(watch.try_acquire(&key, LONG).await);
        match scripted.try_acquire(&key, LONG).await.unwrap() {
            TryAcquire::Busy { holder, .. } => assert_eq!(holder, Some(by_watch.value())),
            other => panic!("{key}: ScriptedLock took a WatchLock holding: {other:?}"),
        }
        tokio::time::sleep(ms(2)).await;
        let renewed_by_scripted = renewed(scripted.renew(&by_watch, LONG).await);
        assert_eq!(renewed_by_scripted.fence(), by_watch.fence());
        assert_eq!(
            watch.release(&renewed_by_scripted).await.unwrap(),
            Release::Released,
            "{key}: WatchLock releases what ScriptedLock renewed"
        );

        let by_scripted = acquired(scripted.try_acquire(&key, LONG).await);
        assert!(by_scripted.fence() > by_watch.fence(), "{key}");
        match watch.try_acquire(&key, LONG).await.unwrap() {
            TryAcquire::Busy { holder, .. } => assert_eq!(holder, Some(by_scripted.value())),
            other => panic!("{key}: WatchLock took a ScriptedLock holding: {other:?}"),
        }
        tokio::time::sleep(ms(2)).await;
        let renewed_by_watch = renewed(watch.renew(&by_scripted, LONG).await);
        assert_eq!(
            scripted.release(&by_scripted).await.unwrap(),
            Release::HeldByOther,
            "{key}: the holding before the renewal no longer matches"
        );
        assert_eq!(
            scripted.release(&renewed_by_watch).await.unwrap(),
            Release::Released,
            "{key}: ScriptedLock releases what WatchLock renewed"
        );
        let last = acquired(watch.try_acquire(&key, LONG).await);
        assert!(last.fence() > by_scripted.fence(), "{key}");
        assert_eq!(watch.release(&last).await.unwrap(), Release::Released);
    }
}

/// Outcome counts of the contending tasks of [`slot_moves_while_held_and_contended`].
#[derive(Debug, Default)]
struct Tally {
    busy: AtomicU64,
    entries: AtomicU64,
    entries_after_release: AtomicU64,
}

/// One lock's slot moves to another master while a WatchLock holds it (renewing every 50 ms)
/// and four tasks keep trying to take it; then it moves back while the tasks cycle the lock.
/// Throughout: no operation fails, nobody takes the lock from its holder, never two holders;
/// the holder's lock lives on the new master with its token; the old master answered the
/// clients with `TRYAGAIN`/`ASK` during the move and `MOVED` after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slot_moves_while_held_and_contended() {
    let cluster = Arc::new(RedisCluster::start(3));
    let store = cluster.store().await;
    let key = "lock.resharded";
    let slot = key_slot(key);
    let from = cluster.node_of_slot(slot);
    let to = (from + 1) % cluster.nodes.len();
    for node in &cluster.nodes {
        assert_eq!(node.cli(&["CONFIG", "RESETSTAT"]), "OK");
    }

    let holder = watch_lock(&store);
    let held = acquired(holder.try_acquire(key, LONG).await);
    let released = Arc::new(AtomicBool::new(false));
    let inside = Arc::new(AtomicBool::new(false));
    let stop = Arc::new(AtomicBool::new(false));
    let tally = Arc::new(Tally::default());
    let mut contenders = Vec::new();
    for _ in 0..4 {
        // A lock object (and connection pool) per task, as separate clients would have.
        let locks = watch_lock(&store);
        let (released, inside, stop, tally) = (
            released.clone(),
            inside.clone(),
            stop.clone(),
            tally.clone(),
        );
        contenders.push(tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                match locks.try_acquire(key, ms(2_000)).await {
                    Ok(TryAcquire::Acquired(h)) => {
                        // The holder sets `released` before it sends its release.
                        assert!(
                            released.load(Ordering::SeqCst),
                            "a contender took the lock from its holder"
                        );
                        assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                        tokio::time::sleep(ms(3)).await;
                        inside.store(false, Ordering::SeqCst);
                        assert_eq!(locks.release(&h).await.unwrap(), Release::Released);
                        tally.entries.fetch_add(1, Ordering::SeqCst);
                        tally.entries_after_release.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(TryAcquire::Busy { .. }) => {
                        tally.busy.fetch_add(1, Ordering::SeqCst);
                        tokio::time::sleep(ms(5)).await;
                    }
                    Err(e) => panic!("try_acquire failed during the migration: {e}"),
                }
            }
        }));
    }

    // Phase 1: the slot moves while the lock is held; the holder keeps renewing.
    let migration = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.move_slot_step_by_step(slot, from, to, ms(150)))
    };
    let mut current = held.clone();
    let mut renewals = 0;
    while !migration.is_finished() {
        tokio::time::sleep(ms(50)).await;
        current = renewed(holder.renew(&current, LONG).await);
        assert_eq!(current.fence(), held.fence());
        renewals += 1;
    }
    migration.await.expect("migration panicked");
    assert_eq!(cluster.node_of_slot(slot), to, "the slot moved");
    current = renewed(holder.renew(&current, LONG).await);
    let new_master = &cluster.nodes[to];
    assert_eq!(new_master.cli(&["GET", key]), current.value().to_string());
    assert_eq!(
        new_master.cli(&["GET", &fence_key(key)]),
        held.fence().unwrap().to_string()
    );
    assert_eq!(
        cluster.nodes[from].cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]),
        "0"
    );
    let busy_while_held = tally.busy.load(Ordering::SeqCst);
    assert!(
        busy_while_held > 0,
        "the contenders never saw the lock busy"
    );
    assert_eq!(tally.entries.load(Ordering::SeqCst), 0);
    let (tryagain, ask, moved) = (
        cluster.error_replies(from, "TRYAGAIN"),
        cluster.error_replies(from, "ASK"),
        cluster.error_replies(from, "MOVED"),
    );
    assert!(
        tryagain + ask > 0,
        "the old master never refused a request during the move"
    );
    assert!(moved > 0, "the old master never redirected after the move");

    // Phase 2: released; the slot moves back while the contenders cycle the lock.
    released.store(true, Ordering::SeqCst);
    assert_eq!(holder.release(&current).await.unwrap(), Release::Released);
    tokio::time::sleep(ms(300)).await;
    let before_move_back = tally.entries.load(Ordering::SeqCst);
    let migration = {
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || cluster.move_slot_step_by_step(slot, to, from, ms(150)))
    };
    migration.await.expect("migration panicked");
    let after_move_back = tally.entries.load(Ordering::SeqCst);
    tokio::time::sleep(ms(500)).await;
    stop.store(true, Ordering::SeqCst);
    for task in contenders {
        task.await.expect("a contending task failed");
    }
    let entries = tally.entries.load(Ordering::SeqCst);
    eprintln!(
        "renewals during the move: {renewals}; busy answers while held: {busy_while_held}; \
         entries: {before_move_back} before the move back, {} during it, {} after it; old master \
         answered TRYAGAIN {tryagain}, ASK {ask}, MOVED {moved}",
        after_move_back - before_move_back,
        entries - after_move_back
    );
    assert!(renewals > 0, "the holder renewed during the move");
    assert!(before_move_back > 0, "nobody got in after the release");
    assert!(
        entries > after_move_back,
        "nobody got in after the slot moved back"
    );
    assert_eq!(cluster.node_of_slot(slot), from, "the slot moved back");
    // The fence key (lease + 60 s) moved back with the slot.
    assert_eq!(cluster.nodes[from].cli(&["EXISTS", &fence_key(key)]), "1");

    // A fresh acquisition on the slot's owner gets a higher token than the one issued before
    // both moves.
    let last = acquired(holder.try_acquire(key, LONG).await);
    assert!(last.fence() > held.fence());
    assert_eq!(holder.release(&last).await.unwrap(), Release::Released);
}

/// A transaction that a former owner refuses runs nothing: the slot moves between the watched
/// read and the `EXEC`; the old master answers `MOVED` to the queued write, `exec` reports an
/// aborted `EXEC`, nothing is written anywhere, and the next `watch` goes to the new owner,
/// where the same transaction commits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exec_refused_by_a_former_owner_runs_nothing() {
    use tairlock_legacy::watch::{Expiry, Read, TxOp, WatchConnection};
    let cluster = Arc::new(RedisCluster::start(3));
    let store = cluster.store().await;
    let key = "lock.exec-moved".to_owned();
    let keys = [key.clone(), fence_key(&key)];
    let slot = key_slot(&key);
    let from = cluster.node_of_slot(slot);
    let to = (from + 1) % cluster.nodes.len();
    let set = [TxOp::Set {
        key: key.clone(),
        value: b"1".to_vec(),
        expiry: Expiry::Millis(10_000),
        xx: false,
    }];
    let slot_keys =
        |node: usize| cluster.nodes[node].cli(&["CLUSTER", "COUNTKEYSINSLOT", &slot.to_string()]);

    let mut con = store.watch_connection().await.unwrap();
    let read = con.watch(&keys, &[Read::Get(key.clone())]).await.unwrap();
    assert_eq!(read, vec![tairlock::Reply::Nil]);
    let moved_before = cluster.error_replies(from, "MOVED");
    {
        // An empty slot: it moves at once.
        let cluster = cluster.clone();
        tokio::task::spawn_blocking(move || {
            cluster.move_slot_step_by_step(slot, from, to, Duration::ZERO)
        })
        .await
        .unwrap();
    }
    assert_eq!(con.exec(&set).await.unwrap(), None, "a refused EXEC");
    assert!(cluster.error_replies(from, "MOVED") > moved_before);
    assert_eq!((slot_keys(from), slot_keys(to)), ("0".into(), "0".into()));

    let read = con.watch(&keys, &[Read::Get(key.clone())]).await.unwrap();
    assert_eq!(read, vec![tairlock::Reply::Nil]);
    let replies = con
        .exec(&set)
        .await
        .unwrap()
        .expect("committed on the new owner");
    assert_eq!(replies, vec![tairlock::Reply::Status("OK".into())]);
    assert_eq!(cluster.nodes[to].cli(&["GET", &key]), "1");
    assert_eq!(slot_keys(from), "0");
}

/// A lock's keys split between two masters mid-migration (the fence key moved, the lock key
/// not yet): the watched reads meet `TRYAGAIN` and wait. A renewal gives up after its bound
/// (`Timeout`, nothing written) while the split lasts; one started during the split succeeds,
/// on the new owner, once the migration completes a second later.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_reads_wait_out_a_split_slot_within_a_bound() {
    let cluster = Arc::new(RedisCluster::start(3));
    let store = cluster.store().await;
    let locks = watch_lock(&store);
    let key = "lock.split";
    let slot = key_slot(key);
    let from = cluster.node_of_slot(slot);
    let to = (from + 1) % cluster.nodes.len();
    let held = acquired(locks.try_acquire(key, LONG).await);

    let migrate = |k: &str| assert_eq!(cluster.migrate_key(from, to, k), "OK", "MIGRATE {k}");
    cluster.begin_slot_move(slot, from, to);
    migrate(&fence_key(key));

    let started = Instant::now();
    let err = locks.renew(&held, LONG).await.unwrap_err();
    let waited = started.elapsed();
    assert_eq!(err.kind(), tairlock::ErrorKind::Timeout, "{err}");
    assert!(err.message().contains("TRYAGAIN"), "{err}");
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(8),
        "gave up after {waited:?}"
    );
    // Untouched: the lock key still on the source with the holder's value.
    assert_eq!(
        cluster.nodes[from].cli(&["GET", key]),
        held.value().to_string()
    );

    let renewal = {
        let (locks, held) = (locks.clone(), held.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            (locks.renew(&held, LONG).await, started.elapsed())
        })
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(
        !renewal.is_finished(),
        "the renewal waits while the slot is split"
    );
    migrate(key);
    cluster.finish_slot_move(slot, to);
    let (outcome, took) = renewal.await.unwrap();
    let current = renewed(outcome);
    assert!(took >= Duration::from_secs(1), "{took:?}");
    assert_eq!(current.fence(), held.fence());
    assert_eq!(
        cluster.nodes[to].cli(&["GET", key]),
        current.value().to_string()
    );
    assert_eq!(locks.release(&current).await.unwrap(), Release::Released);
    assert_eq!(cluster.nodes[to].cli(&["EXISTS", key]), "0");
}

/// The version reported for a cluster comes from its masters; probing finds WATCH working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detection_on_the_cluster_sees_watch_and_the_masters_version() {
    let cluster = RedisCluster::start(3);
    let store = cluster.store().await;
    let version = store.server_version().await.unwrap().expect("INFO answers");
    let info = cluster.nodes[0].cli(&["INFO", "server"]);
    assert!(
        info.contains(&format!("redis_version:{version}")),
        "{version} vs {info}"
    );
    let caps = tairlock_legacy::probe(&store).await.unwrap();
    assert!(caps.watch && caps.time && caps.scripting, "{caps:?}");
}
