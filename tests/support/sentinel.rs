//! Redis Sentinel test material (issue 14): `redis-server sentinel.conf --sentinel` processes on
//! free loopback ports, and [`setup`]: one master, one replica in sync with it, and three
//! sentinels that know both.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::RedisServer;

/// The master name the sentinels monitor.
pub const MASTER: &str = "locks";

/// One `redis-server --sentinel` process, killed on drop.
pub struct Sentinel {
    pub port: u16,
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
    pub fn start(master_port: u16) -> Sentinel {
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

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-h", "127.0.0.1", "-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("run redis-cli");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// The port this sentinel names as the master.
    pub fn master_port(&self) -> Option<u16> {
        let out = self.cli(&["SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER]);
        out.lines().nth(1)?.trim().parse().ok()
    }
}

/// Poll `done` every 100 ms for up to `limit`; false if it never held.
pub fn eventually(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
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
pub fn setup() -> (RedisServer, RedisServer, Vec<Sentinel>) {
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
