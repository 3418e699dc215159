//! A `RedisStore` behind Redis Sentinel, through a real failover (issue 14, item 2).
//!
//! One master, one replica and three sentinels (`redis-server sentinel.conf --sentinel`), all on
//! free loopback ports; the failover is forced with `SENTINEL FAILOVER`, which needs no quorum
//! and no waiting for a down-after period.
//!
//! - `follows_the_master_through_a_failover`: a store made with `connect_sentinel` locks on the
//!   master; a `ReplicatedLock` acquisition (acknowledged by the replica) is held across the
//!   failover, and its release on the promoted master finds it; a waiter blocked on a lock
//!   across the failover gets it after the holder releases on the new master (woken through the
//!   notifier's subscription, made again on the new master); a new lock is taken on the new
//!   master, and the store's address is the new master's.
//! - `unknown_master_name_is_refused`: a name the sentinels do not know is a clear connection
//!   error, in bounded time.

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::store::{SentinelOptions, WaitFor};
use tairlock::{
    Acquire, ErrorKind, ExpireLock, RedisStore, ReplicatedAcquire, ReplicatedLock, Unlock,
};

const MASTER: &str = "locks";

/// One `redis-server --sentinel` process, killed on drop.
struct Sentinel {
    port: u16,
    child: Child,
    dir: PathBuf,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.dir.join("sentinel.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(30).collect();
            eprintln!("--- sentinel {} log (tail) ---", self.port);
            for line in tail.iter().rev() {
                eprintln!("{line}");
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Sentinel {
    fn start(master_port: u16) -> Sentinel {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "tairlock-sentinel-{}-{}",
            std::process::id(),
            N.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).expect("create the sentinel dir");
        let port = free_port();
        let conf = dir.join("sentinel.conf");
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndir {dir}\nlogfile {dir}/sentinel.log\n\
                 sentinel monitor {MASTER} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER} 2000\n\
                 sentinel failover-timeout {MASTER} 10000\n",
                dir = dir.display()
            ),
        )
        .expect("write sentinel.conf");
        let bin = std::env::var("REDIS_SERVER_BIN").unwrap_or_else(|_| "redis-server".into());
        let child = Command::new(bin)
            .arg(&conf)
            .arg("--sentinel")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let sentinel = Sentinel { port, child, dir };
        let deadline = Instant::now() + Duration::from_secs(10);
        while sentinel.cli(&["PING"]).trim() != "PONG" {
            assert!(
                Instant::now() < deadline,
                "sentinel on {port} did not start"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        sentinel
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port this sentinel names as the master.
    fn master_port(&self) -> Option<u16> {
        let out = self.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
        out.lines().nth(1)?.trim().parse().ok()
    }
}

/// Poll `done` every 100 ms for up to `limit`; false if it never held.
fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if done() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}

/// A master, a replica in sync with it, and three sentinels that know both.
fn setup() -> (RedisServer, RedisServer, Vec<Sentinel>) {
    let master = RedisServer::start();
    let master_port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &master_port]);
    assert!(
        eventually(Duration::from_secs(20), || replica
            .cli(&["INFO", "replication"])
            .contains("master_link_status:up")),
        "the replica did not sync"
    );
    let sentinels: Vec<Sentinel> = (0..3).map(|_| Sentinel::start(master.port())).collect();
    // A sentinel learns of the replica from the master's INFO, asked when it connects.
    for s in &sentinels {
        assert!(
            eventually(Duration::from_secs(20), || s
                .cli(&["SENTINEL", "REPLICAS", MASTER])
                .contains(&replica.port().to_string())),
            "sentinel {} did not discover the replica",
            s.port
        );
    }
    (master, replica, sentinels)
}

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
