//! Replica acknowledgements on a cluster when the cluster client resends a script + `WAIT`
//! pipeline (issue 12, item 5).
//!
//! The cluster client repeats a request after an I/O error, on a new connection, without the
//! caller knowing. A repeated acquire (or renew) finds its own earlier write in place; if it then
//! wrote nothing, the `WAIT` after it would count every connected replica at once (a connection
//! that wrote nothing has nothing to wait for) and report acknowledgements for a grant no replica
//! has. The scripts therefore re-apply the key's expiry on a repeat: a write of the new
//! connection's own, after the grant in the replication stream, which the `WAIT` then counts.
//!
//! The fault: the lock's replica is asleep (`DEBUG SLEEP`), so it acknowledges nothing; the call
//! is blocked in its `WAIT`; `CLIENT KILL TYPE normal` on the master cuts its connection; the
//! cluster client resends. An outcome that claims the replica's acknowledgement is checked
//! against the replica's offset as the master saw it when the call returned.
//!
//! Measured on Redis 7.0: the server itself sets a connection's `WAIT` offset to the master's
//! current offset after *any* script, even one that wrote nothing, so there the resent `WAIT`
//! covers the grant with or without the scripts' repeat write, and the cluster test passes
//! either way. Where a script that writes nothing leaves that offset alone (a fresh connection's
//! `WAIT` then returns at once, which `a_wait_after_no_write_counts_every_replica` shows for a
//! plain read), the repeat write is what makes the `WAIT` count; the standalone test checks that
//! the repeat writes to the replication stream.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use support::cluster::RedisCluster;
use tairlock::store::WaitFor;
use tairlock::{
    ClusterStore, ExpireLock, RedisStore, ReplicatedAcquire, ReplicatedLock, ReplicatedRenew,
    Reply, Store,
};

const LONG: Duration = Duration::from_secs(30);
/// How long the replica sleeps; longer than the wait's timeout.
const SLEEP_SECS: u64 = 4;
const WAIT: Duration = Duration::from_millis(2500);

/// The replica's acknowledged offset in the master's `INFO replication` (`slave0:…,offset=N`).
fn replica_offset(cluster: &RedisCluster, master: usize) -> u64 {
    let info = cluster.nodes[master].cli(&["INFO", "replication"]);
    info.lines()
        .find(|l| l.starts_with("slave0:"))
        .and_then(|l| l.split(',').find_map(|kv| kv.strip_prefix("offset=")))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| cluster.fail(format!("no replica offset in {info}")))
}

/// Put the node on `port` to sleep for `secs` on a thread of its own; it answers when awake.
fn sleep_node(port: u16, secs: u64) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let mut con = client.get_connection().unwrap();
        con.set_read_timeout(Some(Duration::from_secs(secs + 10)))
            .unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(secs)
            .query(&mut con)
            .unwrap();
    })
}

/// The replica of `master` streams again (its link is up and the master sees it online).
fn wait_streaming(cluster: &RedisCluster, master: usize, replica: usize) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let up = cluster.nodes[replica]
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up");
        let online = cluster.nodes[master]
            .cli(&["INFO", "replication"])
            .contains("state=online");
        if up && online {
            return;
        }
        if Instant::now() > deadline {
            cluster.fail("the replica did not come back");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Run `op` while the replica sleeps, cutting the master's client connections once the call
/// blocks in `WAIT`. Returns the outcome, the offset the master had before the call, and the
/// replica's acknowledged offset when the call returned.
async fn under_fault<T: Send + 'static>(
    cluster: &RedisCluster,
    master: usize,
    replica: usize,
    op: impl std::future::Future<Output = tairlock::Result<T>> + Send + 'static,
) -> (T, u64, u64) {
    let sleeper = sleep_node(cluster.nodes[replica].port(), SLEEP_SECS);
    // The replica is asleep once its acknowledged offset stops following the master's.
    std::thread::sleep(Duration::from_millis(300));
    let before = cluster.info_field(master, "replication", "master_repl_offset");
    let evals = cluster.command_calls(master, "eval");
    let call = tokio::spawn(op);
    let deadline = Instant::now() + Duration::from_secs(2);
    while cluster.info_field(master, "clients", "blocked_clients") == 0 {
        if Instant::now() > deadline {
            cluster.fail("the call never blocked in WAIT");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    cluster.nodes[master].cli(&["CLIENT", "KILL", "TYPE", "normal"]);
    let outcome = tokio::time::timeout(Duration::from_secs(20), call)
        .await
        .expect("the call returns")
        .expect("the call does not panic");
    let acked = replica_offset(cluster, master);
    let outcome = outcome.unwrap_or_else(|e| cluster.fail(format!("the call failed: {e}")));
    assert!(
        cluster.command_calls(master, "eval") >= evals + 2,
        "the cluster client resent the script"
    );
    sleeper.join().unwrap();
    wait_streaming(cluster, master, replica);
    (outcome, before, acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resent_acquire_or_renew_claims_no_ack_the_replica_lacks() {
    let cluster = RedisCluster::start_with_replicas(3, 1, &["--enable-debug-command", "yes"]);
    let store: ClusterStore = cluster.store().await;
    let locks = ReplicatedLock::new(ExpireLock::new(store), WaitFor::replicas(1, WAIT));
    let name = "acks";
    let master = cluster.node_of_key("tairlock:{acks}");
    let replica = cluster.replicas_of(master)[0];

    let op = {
        let locks = locks.clone();
        async move { locks.acquire(name, LONG).await }
    };
    let (acquired, before, acked) = under_fault(&cluster, master, replica, op).await;
    match &acquired {
        ReplicatedAcquire::Acquired { acks, .. } => assert!(
            acked > before,
            "Acquired with {acks:?}, but the replica's offset {acked} does not cover the grant \
             (the master was at {before} before it)"
        ),
        ReplicatedAcquire::NotAcknowledged { rolled_back, .. } => {
            assert!(rolled_back, "{acquired:?}");
        }
        other => cluster.fail(format!("unexpected: {other:?}")),
    }
    // An acquisition the replica did acknowledge (Valkey answers the resent WAIT after the
    // replica woke) still holds the lock: give it back before the renewal half.
    if let ReplicatedAcquire::Acquired { lease, .. } = &acquired
        && let Err(e) = locks.release(name, lease).await
    {
        cluster.fail(format!("releasing the acknowledged grant: {e}"));
    }

    // The same for a renewal of an acknowledged lease.
    let lease = match locks.acquire(name, LONG).await.unwrap() {
        ReplicatedAcquire::Acquired { lease, .. } => lease,
        other => cluster.fail(format!("the replica is back, yet: {other:?}")),
    };
    let op = {
        let locks = locks.clone();
        async move { locks.renew(name, &lease, LONG).await }
    };
    let (renewed, before, acked) = under_fault(&cluster, master, replica, op).await;
    match &renewed {
        ReplicatedRenew::Renewed { acks, .. } => assert!(
            acked > before,
            "Renewed with {acks:?}, but the replica's offset {acked} does not cover the renewal \
             (the master was at {before} before it)"
        ),
        ReplicatedRenew::NotAcknowledged { .. } => {}
        other => cluster.fail(format!("unexpected: {other:?}")),
    }
}

/// A master and one replica with its link up (debug commands enabled on the replica).
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&[
        "--replicaof",
        "127.0.0.1",
        &port,
        "--enable-debug-command",
        "yes",
    ]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica
        .cli(&["INFO", "replication"])
        .contains("master_link_status:up")
        || !master
            .cli(&["INFO", "replication"])
            .contains("state=online")
    {
        assert!(Instant::now() < deadline, "the replica did not link up");
        std::thread::sleep(Duration::from_millis(50));
    }
    (master, replica)
}

fn master_offset(master: &RedisServer) -> u64 {
    master
        .cli(&["INFO", "replication"])
        .lines()
        .find_map(|l| l.strip_prefix("master_repl_offset:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("master_repl_offset")
}

/// Run `script` with these keys and arguments and return its reply and how far the master's
/// replication offset moved.
async fn offset_moved(
    master: &RedisServer,
    store: &RedisStore,
    script: &'static tairlock::Script,
    keys: &[String],
    args: &[String],
) -> (Reply, u64) {
    let before = master_offset(master);
    let reply = master.check(store.eval(script, keys, args).await, script.name());
    (reply, master_offset(master) - before)
}

/// `{1, lease, pttl}` of a repeat: the first reply's lease, with no more time left than the first
/// reported (the time that lease has left, not a fresh length).
#[track_caller]
fn assert_same_grant(again: &Reply, first: &Reply, what: &str) {
    let (again, first) = (again.as_array().unwrap(), first.as_array().unwrap());
    assert_eq!(again[..2], first[..2], "{what}");
    assert!(
        again[2].as_int().unwrap() <= first[2].as_int().unwrap(),
        "{what}"
    );
}

/// A repeated acquire and a repeated renewal (same nonce, after the first was applied) write to
/// the replication stream, keeping the key's expiry: so a `WAIT` after the repeat has something
/// of its own connection to wait for, which comes after the grant.
#[tokio::test]
async fn a_repeated_acquire_or_renew_writes_to_the_replication_stream() {
    let (master, replica) = master_and_replica();
    let store = master.store().await;
    let k = ExpireLock::new(store.clone()).keys("job").unwrap();
    let keys = vec![k.lock.clone(), k.fence.clone()];
    let args = vec!["30000".to_owned(), "ab01".to_owned(), "60000".to_owned()];
    let script = &tairlock::scripts::EXPIRE_LOCK;
    let (first, moved) = offset_moved(&master, &store, script, &keys, &args).await;
    assert!(moved > 0, "the grant is replicated");
    let (again, moved) = offset_moved(&master, &store, script, &keys, &args).await;
    assert_same_grant(&again, &first, "the repeat answers the same grant");
    assert!(moved > 0, "the repeat writes to the replication stream");
    let pttl = |server: &RedisServer| -> i64 { server.cli(&["PTTL", &k.lock]).parse().unwrap() };
    let deadline = Instant::now() + Duration::from_secs(5);
    while replica.cli(&["EXISTS", &k.lock]) != "1" {
        assert!(Instant::now() < deadline, "the replica has the grant");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        (pttl(&master) - pttl(&replica)).abs() < 1000 && pttl(&master) > 28_000,
        "the repeat keeps the expiry: master {} replica {}",
        pttl(&master),
        pttl(&replica)
    );

    let lease = first.as_array().unwrap()[1].as_str().unwrap().to_owned();
    let args = vec![
        lease,
        "30000".to_owned(),
        "ab02".to_owned(),
        "60000".to_owned(),
    ];
    let script = &tairlock::scripts::RENEW;
    let (first, moved) = offset_moved(&master, &store, script, &keys, &args).await;
    assert!(moved > 0);
    let (again, moved) = offset_moved(&master, &store, script, &keys, &args).await;
    assert_same_grant(&again, &first, "the repeat answers the same renewal");
    assert!(
        moved > 0,
        "the repeated renewal writes to the replication stream"
    );
}

/// Why the repeat must write: a `WAIT` on a connection that wrote nothing counts every
/// connected replica at once, even one that lacks the latest writes (here, asleep).
#[test]
fn a_wait_after_no_write_counts_every_replica() {
    let (master, replica) = master_and_replica();
    let sleeper = sleep_node(replica.port(), 2);
    std::thread::sleep(Duration::from_millis(300));
    master.cli(&["SET", "fresh", "1"]);
    let start = Instant::now();
    // `cli` runs each command on a fresh connection: this WAIT follows no write of its own.
    assert_eq!(master.cli(&["WAIT", "1", "1000"]), "1");
    assert!(
        start.elapsed() < Duration::from_millis(900),
        "answered at once"
    );
    sleeper.join().unwrap();
}
