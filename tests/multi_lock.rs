//! The multi-lock (issue #16, part 2) on real servers: `lock_many` and its `try_` and timed
//! variants, one guard for all.
//!
//! - Two clients asking for `[a, b]` and `[b, a]` never deadlock (names in different slots:
//!   taken one at a time in sorted order).
//! - A busy name, a key holding user data, a timeout and a cancellation each leave nothing of
//!   what was taken; bad input is refused before anything is sent.
//! - Names in one slot are taken by one script, all or none.
//! - The guard's watchdog renews every lease and reports the loss of any.
//! - A client killed (`SIGKILL`) mid-acquire leaves the key it took only until its lease ends.
//! - Names across the slots of a real cluster work.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::RedisServer;
use support::cluster::RedisCluster;
use support::proxy::{Proxy, Which};
use tairlock::keys::key_slot;
use tairlock::{ErrorKind, ExpireLock, Options, RedisStore, Store, Ttl, Unlock};

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

async fn is_missing<S: Store>(store: &S, name: &str) -> bool {
    store.pttl(&key(name)).await.unwrap() == Ttl::Missing
}

/// Wait up to `limit` for `name`'s key to be gone.
async fn gone_within<S: Store>(store: &S, name: &str, limit: Duration) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if is_missing(store, name).await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    false
}

/// A name whose lock key hashes to the same slot as `name`'s, and another name.
fn same_slot_as(name: &str) -> String {
    let slot = key_slot(&key(name));
    (0..1_000_000)
        .map(|i| format!("peer{i}"))
        .find(|n| key_slot(&key(n)) == slot)
        .expect("a slot collision within a million names")
}

fn evalsha_calls(server: &RedisServer) -> u64 {
    let stats: BTreeMap<String, u64> = server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let calls = rest.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            Some((name.to_owned(), calls.parse().ok()?))
        })
        .collect();
    stats.get("evalsha").copied().unwrap_or(0)
}

/// Two clients (separate connections, so no shared local queue) lock `[a, b]` and `[b, a]`
/// forty times each, concurrently: every call gets both locks, and the critical sections never
/// overlap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn opposite_orders_never_deadlock() {
    let server = RedisServer::start();
    assert_ne!(key_slot(&key("a")), key_slot(&key("b")), "one at a time");
    let inside = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for order in [["a", "b"], ["b", "a"]] {
        let locks = ExpireLock::new(server.store().await);
        let inside = inside.clone();
        clients.push(tokio::spawn(async move {
            for round in 0..40 {
                let guard = locks
                    .try_lock_many_for(&order, Duration::from_secs(20))
                    .await
                    .unwrap()
                    .unwrap_or_else(|| panic!("{order:?} round {round}: not acquired in 20 s"));
                assert_eq!(guard.names(), ["a", "b"]);
                assert!(!inside.swap(true, Ordering::SeqCst), "two holders at once");
                tokio::time::sleep(Duration::from_millis(2)).await;
                inside.store(false, Ordering::SeqCst);
                assert_eq!(
                    guard.release().await.unwrap(),
                    [Unlock::Released, Unlock::Released]
                );
            }
        }));
    }
    for client in clients {
        tokio::time::timeout(Duration::from_secs(60), client)
            .await
            .expect("deadlocked")
            .unwrap();
    }
}

/// A busy name makes the whole call come back empty, and what was taken before it is released
/// at once (not left to its 30 s lease).
#[tokio::test]
async fn a_busy_name_rolls_back_what_was_taken() {
    let server = RedisServer::start();
    let probe = server.store().await;
    let other = ExpireLock::new(server.store().await);
    let busy = other.lock("b").await.unwrap();
    let locks = ExpireLock::new(server.store().await);
    assert!(locks.try_lock_many(&["b", "a"]).await.unwrap().is_none());
    assert!(is_missing(&probe, "a").await, "a was left behind");
    let started = Instant::now();
    let timed = locks
        .try_lock_many_for(&["c", "b", "a"], Duration::from_millis(300))
        .await
        .unwrap();
    assert!(timed.is_none());
    assert!(started.elapsed() >= Duration::from_millis(250));
    assert!(is_missing(&probe, "a").await && is_missing(&probe, "c").await);
    assert!(!locks.is_locked("a").await.unwrap());
    // Once b is free, all three come.
    busy.release().await.unwrap();
    let guard = locks
        .try_lock_many(&["c", "b", "a", "a"])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(guard.names(), ["a", "b", "c"]);
    assert!(locks.is_locked("b").await.unwrap());
    guard.release().await.unwrap();
    assert!(!locks.is_locked("b").await.unwrap());
}

/// Dropping a waiting `lock_many` releases, in the background, the name it had taken.
#[tokio::test]
async fn a_cancelled_acquire_releases_what_it_took() {
    let server = RedisServer::start();
    let probe = server.store().await;
    let other = ExpireLock::new(server.store().await);
    let busy = other.lock("y").await.unwrap();
    let locks = ExpireLock::new(server.store().await);
    let waiting = tokio::spawn(async move { locks.lock_many(&["y", "x"]).await });
    let deadline = Instant::now() + Duration::from_secs(10);
    while is_missing(&probe, "x").await {
        assert!(Instant::now() < deadline, "x was never taken");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());
    assert!(
        gone_within(&probe, "x", Duration::from_secs(5)).await,
        "x stayed held after the cancelled call (its lease is 30 s)"
    );
    busy.release().await.unwrap();
}

/// Bad input: nothing is sent for an empty list or a bad name; a key holding user data is an
/// error, the data stays, and the name taken before it is released.
#[tokio::test]
async fn bad_input_is_refused_and_changes_nothing() {
    let server = RedisServer::start();
    let probe = server.store().await;
    let locks = ExpireLock::new(server.store().await);
    let no_names: [&str; 0] = [];
    let empty = locks.try_lock_many(&no_names).await.unwrap_err();
    assert_eq!(empty.kind(), ErrorKind::InvalidInput);
    let braces = locks.try_lock_many(&["a", "b{c}"]).await.unwrap_err();
    assert_eq!(braces.kind(), ErrorKind::InvalidInput);
    assert!(is_missing(&probe, "a").await);
    server.cli(&["HSET", &key("user"), "field", "value"]);
    let wrong = locks.lock_many(&["a", "user"]).await.unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::WrongType, "{wrong}");
    assert!(is_missing(&probe, "a").await, "a was left behind");
    assert_eq!(server.cli(&["HGET", &key("user"), "field"]), "value");
    assert_eq!(
        locks.is_locked("user").await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    // In one slot: the script refuses, nothing written.
    let peer = same_slot_as("user");
    let wrong = locks.lock_many(&[&peer, "user"]).await.unwrap_err();
    assert_eq!(wrong.kind(), ErrorKind::WrongType, "{wrong}");
    assert!(is_missing(&probe, &peer).await);
    assert_eq!(server.cli(&["HGET", &key("user"), "field"]), "value");
}

/// Names whose keys share a slot are taken by one script: one `EVALSHA`, all or none.
#[tokio::test]
async fn names_in_one_slot_are_taken_by_one_script() {
    let server = RedisServer::start();
    let probe = server.store().await;
    let peer = same_slot_as("slot");
    let names = ["slot", peer.as_str()];
    let locks = ExpireLock::new(server.store().await);
    // Load the script once.
    locks
        .lock_many(&names)
        .await
        .unwrap()
        .release()
        .await
        .unwrap();
    let before = evalsha_calls(&server);
    let guard = locks.try_lock_many(&names).await.unwrap().unwrap();
    assert_eq!(evalsha_calls(&server) - before, 1, "one script for both");
    let fences = guard.fences();
    assert!(fences.iter().all(|f| *f > 0));
    assert!(!is_missing(&probe, "slot").await && !is_missing(&probe, &peer).await);
    guard.release().await.unwrap();
    // A busy one: nothing taken, nothing to roll back.
    let other = ExpireLock::new(server.store().await);
    let busy = other.lock(&peer).await.unwrap();
    let before = evalsha_calls(&server);
    assert!(locks.try_lock_many(&names).await.unwrap().is_none());
    assert_eq!(evalsha_calls(&server) - before, 1);
    assert!(is_missing(&probe, "slot").await);
    // Waiting: taken once the holder lets go.
    let waiting = {
        let locks = locks.clone();
        let names = [names[0].to_owned(), names[1].to_owned()];
        tokio::spawn(async move {
            locks
                .try_lock_many_for(&[&names[0], &names[1]], Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    busy.release().await.unwrap();
    let guard = waiting.await.unwrap().unwrap().expect("taken once free");
    guard.release().await.unwrap();
}

/// A 300 ms lease held for a second: every key renewed; then one key deleted behind the
/// guard's back: the guard reports the loss, and its release says which one was gone.
#[tokio::test]
async fn the_watchdog_renews_every_lease_and_reports_the_loss_of_any() {
    let server = RedisServer::start();
    let probe = server.store().await;
    let locks = ExpireLock::with_options(
        server.store().await,
        Options::default().watchdog_lease(Duration::from_millis(300)),
    );
    let guard = locks.lock_many(&["r1", "r2", "r3"]).await.unwrap();
    let first = guard.leases();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!guard.is_lost());
    for name in ["r1", "r2", "r3"] {
        assert!(!is_missing(&probe, name).await, "{name} was not renewed");
    }
    let renewed = guard.leases();
    assert!(
        first
            .iter()
            .zip(&renewed)
            .all(|(a, b)| a.nonce() != b.nonce())
    );
    assert_eq!(
        guard.fences(),
        first.iter().map(|l| l.fence()).collect::<Vec<_>>()
    );
    assert!(probe.del(&key("r2")).await.unwrap());
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the loss of r2 was not reported");
    assert!(guard.is_lost());
    assert_eq!(
        guard.release().await.unwrap(),
        [Unlock::Released, Unlock::NotHeld, Unlock::Released]
    );
}

/// The child half of [`a_killed_client_leaves_keys_only_until_their_ttl`]: runs only when
/// that test starts it (with the server's URL), takes `k1`, waits for `k2` forever.
#[test]
#[ignore = "started by a_killed_client_leaves_keys_only_until_their_ttl"]
fn killed_child() {
    let Ok(url) = std::env::var("TAIRLOCK_MULTI_CHILD_URL") else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let locks = ExpireLock::with_options(
            RedisStore::connect(&url).await.unwrap(),
            Options::default().watchdog_lease(Duration::from_secs(1)),
        );
        let _never = locks.lock_many(&["k1", "k2"]).await;
        unreachable!("k2 is held by the parent");
    });
}

/// A client `SIGKILL`ed while it holds `k1` and waits for `k2`: `k1` stays no longer than its
/// 1 s lease (nobody renews it), and then both can be taken.
#[tokio::test]
async fn a_killed_client_leaves_keys_only_until_their_ttl() {
    let server = RedisServer::start();
    let probe = server.store().await;
    let parent = ExpireLock::new(server.store().await);
    let k2 = parent.lock("k2").await.unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "killed_child", "--ignored", "--nocapture"])
        .env("TAIRLOCK_MULTI_CHILD_URL", server.url())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while is_missing(&probe, "k1").await {
        assert!(Instant::now() < deadline, "the child never took k1");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Held across renewals while the child waits for k2.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(
        !is_missing(&probe, "k1").await,
        "k1 was not renewed while waiting"
    );
    child.kill().unwrap();
    child.wait().unwrap();
    let killed = Instant::now();
    match probe.pttl(&key("k1")).await.unwrap() {
        Ttl::Expires(left) => assert!(left <= Duration::from_secs(1), "{left:?}"),
        Ttl::Missing => {}
        Ttl::Persistent => panic!("k1 never expires"),
    }
    assert!(gone_within(&probe, "k1", Duration::from_secs(5)).await);
    assert!(killed.elapsed() < Duration::from_secs(5));
    k2.release().await.unwrap();
    let both = parent.try_lock_many(&["k1", "k2"]).await.unwrap().unwrap();
    both.release().await.unwrap();
}

/// On a real cluster: names on different masters are taken one at a time, names in one slot
/// by one script; both renew and release.
#[tokio::test]
async fn names_across_cluster_slots_work() {
    let cluster = RedisCluster::start(3);
    let locks = ExpireLock::with_options(
        cluster.store().await,
        Options::default().watchdog_lease(Duration::from_millis(600)),
    );
    let names: Vec<String> = cluster
        .one_key_per_master((0..200).map(|i| key(&format!("spread{i}"))))
        .iter()
        .map(|k| k["tairlock:{".len()..k.len() - 1].to_owned())
        .collect();
    assert_eq!(names.len(), 3);
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let guard = locks.lock_many(&names).await.unwrap();
    let other = ExpireLock::new(cluster.store().await);
    for name in &names {
        assert!(other.is_locked(name).await.unwrap());
    }
    assert!(
        other
            .try_lock_many(&[names[2], "free"])
            .await
            .unwrap()
            .is_none()
    );
    assert!(!other.is_locked("free").await.unwrap(), "rolled back");
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert!(!guard.is_lost(), "not renewed across masters");
    assert_eq!(guard.release().await.unwrap(), [Unlock::Released; 3]);
    let peer = same_slot_as("tagged");
    let one_slot = other
        .try_lock_many(&["tagged", &peer])
        .await
        .unwrap()
        .unwrap();
    assert_eq!(one_slot.release().await.unwrap(), [Unlock::Released; 2]);
}

/// A reply with each lease reduced to its nonce and a PTTL to "pttl", so that the two stores'
/// replies compare equal; an error to its kind.
fn shape(reply: tairlock::Result<tairlock::Reply>) -> String {
    use tairlock::Reply;
    fn one(r: &Reply) -> String {
        match r {
            Reply::Data(_) => {
                let text = r.as_str().unwrap_or_default();
                match tairlock::Lease::parse(text) {
                    Some(lease) => format!("lease:{}", lease.nonce()),
                    None => text.to_owned(),
                }
            }
            Reply::Int(i) if *i > 2 => "pttl".to_owned(),
            Reply::Array(items) => {
                let inner: Vec<String> = items.iter().map(one).collect();
                format!("[{}]", inner.join(","))
            }
            other => format!("{other:?}"),
        }
    }
    match reply {
        Ok(r) => one(&r),
        Err(e) => format!("error:{:?}", e.kind()),
    }
}

/// `LOCK_MANY`'s Lua and native bodies answer alike: a grant, a repeat, a busy lock (index
/// and holder), a partial repeat, and every kind of foreign data (nothing written then).
#[tokio::test]
async fn the_lock_many_script_is_the_same_on_both_stores() {
    use tairlock::MemoryStore;
    use tairlock::scripts::LOCK_MANY;
    let server = RedisServer::start();
    let redis = server.store().await;
    let memory = MemoryStore::new();
    let keys: Vec<String> = ["p", "q"]
        .iter()
        .flat_map(|n| [key(n), format!("{}:fence", key(n))])
        .collect();
    let args = |nonce: &str| vec!["30000".to_owned(), nonce.to_owned(), "60000".to_owned()];
    let mut transcript: Vec<(String, String)> = Vec::new();
    macro_rules! on_both {
        ($store:ident => $body:expr) => {{
            let a = {
                let $store = &redis;
                $body
            };
            let b = {
                let $store = &memory;
                $body
            };
            transcript.push((a, b));
        }};
    }
    on_both!(s => shape(s.eval(&LOCK_MANY, &keys, &args("a1")).await));
    on_both!(s => shape(s.eval(&LOCK_MANY, &keys, &args("a1")).await));
    on_both!(s => shape(s.eval(&LOCK_MANY, &keys, &args("a2")).await));
    on_both!(s => {
        s.del(&keys[2]).await.unwrap();
        shape(s.eval(&LOCK_MANY, &keys, &args("a1")).await)
    });
    on_both!(s => {
        s.del(&keys[0]).await.unwrap();
        shape(s.eval(&LOCK_MANY, &keys, &args("a2")).await)
    });
    on_both!(s => {
        s.del(&keys[0]).await.unwrap();
        s.del(&keys[2]).await.unwrap();
        s.set(&keys[2], b"user data").await.unwrap();
        let out = shape(s.eval(&LOCK_MANY, &keys, &args("a3")).await);
        format!("{out} p-left:{:?}", s.pttl(&keys[0]).await.unwrap())
    });
    on_both!(s => {
        s.del(&keys[2]).await.unwrap();
        s.set(&keys[3], b"not a token").await.unwrap();
        shape(s.eval(&LOCK_MANY, &keys, &args("a3")).await)
    });
    on_both!(s => {
        s.del(&keys[3]).await.unwrap();
        shape(s.eval(&LOCK_MANY, &keys[..2], &args("a4")).await)
    });
    for (i, (on_redis, on_memory)) in transcript.iter().enumerate() {
        assert_eq!(on_redis, on_memory, "step {i}");
    }
    assert_eq!(transcript[0].0, "[Int(1),lease:a1,pttl,lease:a1,pttl]");
    assert_eq!(transcript[1].0, "[Int(1),lease:a1,pttl,lease:a1,pttl]");
    assert_eq!(transcript[2].0, "[Int(0),Int(1),lease:a1,pttl]");
    assert_eq!(
        transcript[3].0, "[Int(1),lease:a1,pttl,lease:a1,pttl]",
        "a partial repeat"
    );
    assert_eq!(transcript[4].0, "[Int(0),Int(2),lease:a1,pttl]");
    assert_eq!(transcript[5].0, "error:WrongType p-left:Missing");
    assert_eq!(transcript[6].0, "error:WrongType");
    assert_eq!(transcript[7].0, "[Int(1),lease:a4,pttl]");
}

/// A reply lost after the server applied the step (a waiting call rides it; a single attempt
/// returns it): the repeat under the same nonce finds what was taken, in one script (the guard comes back) and one at a time (the rollback after a busy
/// name still deletes the lease whose grant went unanswered).
#[tokio::test]
async fn a_lost_reply_is_repeated_under_the_same_nonce() {
    use tairlock::scripts::{EXPIRE_LOCK, EXPIRE_UNLOCK, LOCK_MANY};
    let server = RedisServer::start();
    let probe = server.store().await;
    server.check(
        probe
            .preload(&[&LOCK_MANY, &EXPIRE_LOCK, &EXPIRE_UNLOCK])
            .await,
        "preload",
    );
    let proxy = Proxy::start(server.port());
    let mut options = tairlock::store::RedisOptions::default();
    options.response_timeout = Duration::from_millis(400);
    let locks = ExpireLock::new(proxy.store_with(options).await);
    let peer = same_slot_as("lost");
    proxy.drop_replies(Which::All, 1);
    let guard = locks
        .try_lock_many_for(&["lost", &peer], Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the repeat found its own grant");
    let dropped = || proxy.faults().get("drop_reply").copied().unwrap_or(0);
    assert_eq!(dropped(), 1, "no reply was dropped");
    assert_eq!(guard.release().await.unwrap(), [Unlock::Released; 2]);
    let other = ExpireLock::new(server.store().await);
    let busy = other.lock("m2").await.unwrap();
    proxy.drop_replies(Which::All, 1);
    let none = locks
        .try_lock_many_for(&["m1", "m2"], Duration::from_secs(1))
        .await
        .unwrap();
    assert!(none.is_none());
    assert_eq!(dropped(), 2, "no reply was dropped");
    assert!(is_missing(&probe, "m1").await, "m1 was left behind");
    busy.release().await.unwrap();
}

/// In fair mode the names are taken one at a time through their queues (never by the one
/// script), and a busy one still leaves nothing behind.
#[tokio::test]
async fn fair_mode_takes_names_through_their_queues() {
    let server = RedisServer::start();
    let probe = server.store().await;
    let fair = |store| ExpireLock::with_options(store, Options::default().fair(true));
    let locks = fair(server.store().await);
    let other = fair(server.store().await);
    let peer = same_slot_as("fa");
    let guard = locks.lock_many(&["fa", &peer]).await.unwrap();
    assert!(other.try_lock_many(&["fb", &peer]).await.unwrap().is_none());
    assert!(is_missing(&probe, "fb").await, "fb was left behind");
    let waiting = {
        let peer = peer.clone();
        tokio::spawn(async move {
            other
                .try_lock_many_for(&["fb", &peer], Duration::from_secs(10))
                .await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(guard.release().await.unwrap(), [Unlock::Released; 2]);
    let handed = waiting.await.unwrap().unwrap().expect("handed over");
    assert_eq!(handed.release().await.unwrap(), [Unlock::Released; 2]);
}
