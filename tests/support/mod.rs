//! Shared support for the integration tests.
//!
//! - [`RedisServer`]: a real `redis-server` per test on a free loopback port (see `server.rs`).
//! - [`Env`] and [`backend_tests!`]: one generic test body, run once on a [`MemoryStore`] (on a
//!   [`VirtualClock`] the test advances) and once on a [`RedisStore`] against a fresh server.
//! - [`TestStore`]: what a test needs beyond the [`Store`] contract (writing a user's hash or
//!   list, reading it back), implemented on both stores.
//! - [`deadline_audit`]: every grant and renewal a client's store answers, its lease's end on
//!   the server bounded from above, for holding guards' deadlines against.
//!
//! Every test file declares `mod support;`; not every helper is used by every file.
#![allow(dead_code, unreachable_pub, unused_imports, unused_macros)]

pub mod cluster;
pub mod deadline_audit;
/// The fault-injection proxy, from the public testing crate.
pub use tairlock_testing::proxy;
pub mod sentinel;
pub mod server;
pub mod tls;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

pub use self::server::RedisServer;
use tairlock::clock::{SystemClock, VirtualClock};
use tairlock::{ExpireLock, MemoryStore, Options, RedisStore, Store, Ttl};

/// Run generic test bodies on both stores.
///
/// `backend_tests!(a, b);` expects `async fn a<S: TestStore>(env: Env<S>)` (and `b`) in the same
/// module and generates `a::memory` (a [`MemoryStore`] on a fresh [`VirtualClock`]) and
/// `a::redis` (a [`RedisStore`] on a fresh [`RedisServer`], real time) as `#[tokio::test]`s.
///
/// `backend_tests!(store: c, d);` does the same for bodies that take only the store:
/// `async fn c<S: Store>(store: S)`.
macro_rules! backend_tests {
    (store: $($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn memory() {
                    let env = $crate::support::Env::memory();
                    super::$name(env.store.clone()).await;
                }

                #[tokio::test]
                async fn redis() {
                    let env = $crate::support::Env::redis().await;
                    super::$name(env.store.clone()).await;
                }
            }
        )+
    };
    ($($name:ident),+ $(,)?) => {
        $(
            mod $name {
                #[tokio::test]
                async fn memory() {
                    super::$name($crate::support::Env::memory()).await;
                }

                #[tokio::test]
                async fn redis() {
                    super::$name($crate::support::Env::redis().await).await;
                }
            }
        )+
    };
}
pub(crate) use backend_tests;

/// The plain commands of a [`Store`] wrapper, forwarded to its field `inner`, inside an
/// `impl Store for …` block: a test wrapper writes only the methods it changes (`eval`, …).
/// Remember `runtime`, `pubsub` and `notifier` where the wrapper must keep the inner store's.
///
/// A new wrapper is an [`Intercept`](tairlock::store::intercept::Intercept) with a hook instead
/// (`watchdog.rs`, `unanswered_replies.rs`, the gated store and the race's store in
/// `tairlock-testing`). This macro is left for the one
/// wrapper that fakes a capability its inner store lacks (`malformed_replies.rs`'s `Garbled`
/// answers `ReplicaStore::eval_wait` on the embedded store, which has no replicas).
macro_rules! forward_plain_commands {
    () => {
        async fn get(&self, key: &str) -> ::tairlock::Result<Option<Vec<u8>>> {
            self.inner.get(key).await
        }
        async fn set_nx(&self, key: &str, value: &[u8]) -> ::tairlock::Result<bool> {
            self.inner.set_nx(key, value).await
        }
        async fn set_nx_px(
            &self,
            key: &str,
            value: &[u8],
            ttl: ::std::time::Duration,
        ) -> ::tairlock::Result<bool> {
            self.inner.set_nx_px(key, value, ttl).await
        }
        async fn set(&self, key: &str, value: &[u8]) -> ::tairlock::Result<()> {
            self.inner.set(key, value).await
        }
        async fn getset(&self, key: &str, value: &[u8]) -> ::tairlock::Result<Option<Vec<u8>>> {
            self.inner.getset(key, value).await
        }
        async fn getdel(&self, key: &str) -> ::tairlock::Result<Option<Vec<u8>>> {
            self.inner.getdel(key).await
        }
        async fn del(&self, key: &str) -> ::tairlock::Result<bool> {
            self.inner.del(key).await
        }
        async fn incr(&self, key: &str) -> ::tairlock::Result<i64> {
            self.inner.incr(key).await
        }
        async fn decr(&self, key: &str) -> ::tairlock::Result<i64> {
            self.inner.decr(key).await
        }
        async fn expire(&self, key: &str, seconds: u64) -> ::tairlock::Result<bool> {
            self.inner.expire(key, seconds).await
        }
        async fn pexpire(&self, key: &str, ttl: ::std::time::Duration) -> ::tairlock::Result<bool> {
            self.inner.pexpire(key, ttl).await
        }
        async fn pttl(&self, key: &str) -> ::tairlock::Result<::tairlock::Ttl> {
            self.inner.pttl(key).await
        }
        async fn key_type(&self, key: &str) -> ::tairlock::Result<String> {
            self.inner.key_type(key).await
        }
        async fn time(&self) -> ::tairlock::Result<::std::time::Duration> {
            self.inner.time().await
        }
    };
}
pub(crate) use forward_plain_commands;

/// How time passes for a test's store.
#[derive(Debug, Clone)]
pub enum Time {
    /// A virtual clock: [`Env::pass`] advances it, instantly.
    Virtual(VirtualClock),
    /// Real time (a Redis server, or a memory store on the system clock): [`Env::pass`] sleeps.
    Real,
}

/// One store under test, with the means to let time pass and, on Redis, its server.
#[derive(Debug)]
pub struct Env<S> {
    /// The store.
    pub store: S,
    /// How [`pass`](Self::pass) moves time.
    pub time: Time,
    /// The server, when the store is a [`RedisStore`].
    pub server: Option<RedisServer>,
}

impl Env<MemoryStore> {
    /// A memory store on a fresh [`VirtualClock`].
    pub fn memory() -> Self {
        let clock = VirtualClock::default();
        Env {
            store: MemoryStore::with_clock(Arc::new(clock.clone())),
            time: Time::Virtual(clock),
            server: None,
        }
    }

    /// A memory store on the system clock.
    pub fn memory_real_time() -> Self {
        Env {
            store: MemoryStore::with_clock(Arc::new(SystemClock)),
            time: Time::Real,
            server: None,
        }
    }
}

impl Env<RedisStore> {
    /// A Redis store on a fresh server.
    pub async fn redis() -> Self {
        let server = RedisServer::start();
        let store = server.store().await;
        Env {
            store,
            time: Time::Real,
            server: Some(server),
        }
    }

    /// The server (always present on a Redis env).
    pub fn server(&self) -> &RedisServer {
        self.server.as_ref().expect("a redis env has a server")
    }
}

impl<S: TestStore> Env<S> {
    /// `"memory"` or `"redis"`, for messages.
    pub fn kind(&self) -> &'static str {
        S::KIND
    }

    /// Whether the store is a Redis server (real time, sleeps).
    pub fn is_redis(&self) -> bool {
        self.server.is_some()
    }

    /// Expire locks on this store, default options.
    pub fn locks(&self) -> ExpireLock<S> {
        ExpireLock::new(self.store.clone())
    }

    /// Expire locks on this store with these options.
    pub fn locks_with(&self, options: Options) -> ExpireLock<S> {
        ExpireLock::with_options(self.store.clone(), options)
    }

    /// Let `by` pass: advance the virtual clock, or sleep in real time.
    pub async fn pass(&self, by: Duration) {
        match &self.time {
            Time::Virtual(clock) => clock.advance(by),
            Time::Real => tokio::time::sleep(by).await,
        }
    }

    /// The virtual clock, if the store runs on one.
    pub fn virtual_clock(&self) -> Option<&VirtualClock> {
        match &self.time {
            Time::Virtual(clock) => Some(clock),
            Time::Real => None,
        }
    }

    /// A failure message suffix: the store kind and, on Redis, the server log.
    pub fn context(&self) -> String {
        match &self.server {
            Some(server) => format!("[{}]\n{}", S::KIND, server.log_section()),
            None => format!("[{}]", S::KIND),
        }
    }
}

/// What a key holds, read without changing it: for comparing a user's data before and after.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// No such key.
    None,
    /// A string.
    Str(Vec<u8>),
    /// A hash, by field.
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    /// A list, in order.
    List(Vec<Vec<u8>>),
    /// Some other type, by name.
    Other(String),
}

/// A key's type, content and TTL at one moment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// `TYPE`.
    pub key_type: String,
    /// The value.
    pub content: Content,
    /// `PTTL`.
    pub ttl: Ttl,
}

impl Snapshot {
    /// Assert that `self` (taken later) shows the same data as `before`, byte for byte, and the
    /// same TTL: the same class, and for an expiring key no later expiry and at most `slack`
    /// less time left (real time passes between the two reads on Redis).
    #[track_caller]
    pub fn assert_intact(&self, before: &Snapshot, slack: Duration, what: &str) {
        assert_eq!(self.key_type, before.key_type, "{what}: type changed");
        assert_eq!(self.content, before.content, "{what}: content changed");
        match (before.ttl, self.ttl) {
            (Ttl::Expires(a), Ttl::Expires(b)) => {
                assert!(b <= a, "{what}: TTL grew from {a:?} to {b:?}");
                assert!(a - b <= slack, "{what}: TTL shrank from {a:?} to {b:?}");
            }
            (a, b) => assert_eq!(a, b, "{what}: TTL changed"),
        }
    }
}

/// What tests need from a store beyond the [`Store`] contract. Failures panic.
pub trait TestStore: Store + std::fmt::Debug {
    /// `"memory"` or `"redis"`.
    const KIND: &'static str;

    /// `HSET key field value`.
    fn hset(&self, key: &str, field: &str, value: &[u8]) -> impl Future<Output = ()> + Send;
    /// `RPUSH key value`.
    fn rpush(&self, key: &str, value: &[u8]) -> impl Future<Output = ()> + Send;
    /// `HGETALL key`.
    fn hgetall(&self, key: &str) -> impl Future<Output = BTreeMap<Vec<u8>, Vec<u8>>> + Send;
    /// `LRANGE key 0 -1`.
    fn lrange(&self, key: &str) -> impl Future<Output = Vec<Vec<u8>>> + Send;
    /// `DBSIZE`: the number of live keys.
    fn dbsize(&self) -> impl Future<Output = usize> + Send;

    /// The key's type, content and TTL.
    fn snapshot(&self, key: &str) -> impl Future<Output = Snapshot> + Send {
        async move {
            let key_type = self.key_type(key).await.expect("TYPE");
            let content = match key_type.as_str() {
                "none" => Content::None,
                "string" => Content::Str(self.get(key).await.expect("GET").unwrap_or_default()),
                "hash" => Content::Hash(self.hgetall(key).await),
                "list" => Content::List(self.lrange(key).await),
                other => Content::Other(other.to_owned()),
            };
            let ttl = self.pttl(key).await.expect("PTTL");
            Snapshot {
                key_type,
                content,
                ttl,
            }
        }
    }
}

impl TestStore for MemoryStore {
    const KIND: &'static str = "memory";

    async fn hset(&self, key: &str, field: &str, value: &[u8]) {
        self.atomically(|db| db.hset(key, field.as_bytes(), value))
            .expect("HSET on the memory store");
    }

    async fn rpush(&self, key: &str, value: &[u8]) {
        self.atomically(|db| db.rpush(key, value))
            .expect("RPUSH on the memory store");
    }

    async fn hgetall(&self, key: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.atomically(|db| db.hgetall(key))
            .expect("HGETALL on the memory store")
            .into_iter()
            .collect()
    }

    async fn lrange(&self, key: &str) -> Vec<Vec<u8>> {
        self.atomically(|db| db.lrange_all(key))
            .expect("LRANGE on the memory store")
    }

    async fn dbsize(&self) -> usize {
        self.atomically(|db| db.len())
    }
}

impl TestStore for RedisStore {
    const KIND: &'static str = "redis";

    async fn hset(&self, key: &str, field: &str, value: &[u8]) {
        let _: i64 = self
            .command(redis::cmd("HSET").arg(key).arg(field).arg(value))
            .await
            .expect("HSET on redis");
    }

    async fn rpush(&self, key: &str, value: &[u8]) {
        let _: i64 = self
            .command(redis::cmd("RPUSH").arg(key).arg(value))
            .await
            .expect("RPUSH on redis");
    }

    async fn hgetall(&self, key: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
        self.command(redis::cmd("HGETALL").arg(key))
            .await
            .expect("HGETALL on redis")
    }

    async fn lrange(&self, key: &str) -> Vec<Vec<u8>> {
        self.command(redis::cmd("LRANGE").arg(key).arg(0).arg(-1))
            .await
            .expect("LRANGE on redis")
    }

    async fn dbsize(&self) -> usize {
        self.command(&redis::cmd("DBSIZE"))
            .await
            .expect("DBSIZE on redis")
    }
}

/// Build a `Vec<String>` of script arguments.
pub fn strings<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Compile `source` as a library against the tairlock this test was built with; (success, stderr).
pub fn compile_snippet(name: &str, source: &str) -> (bool, String) {
    let deps = std::env::current_exe()
        .unwrap()
        .parent()
        .expect("the test binary lives in target/<profile>/deps")
        .to_path_buf();
    // The newest tairlock rlib beside this binary is the one it was linked with.
    let rlib: std::path::PathBuf = std::fs::read_dir(&deps)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("libtairlock-") && n.ends_with(".rlib"))
        })
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
        .expect("libtairlock-*.rlib beside the test binary");
    let dir = std::env::temp_dir().join(format!("tairlock-snippet-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("snippet.rs");
    std::fs::write(&file, source).unwrap();
    let out =
        std::process::Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".to_owned()))
            .args([
                "--edition",
                "2024",
                "--crate-type",
                "lib",
                "--emit",
                "metadata",
            ])
            .arg("--crate-name")
            .arg(name)
            .arg("--out-dir")
            .arg(&dir)
            .arg("--extern")
            .arg(format!("tairlock={}", rlib.display()))
            .arg("-L")
            .arg(format!("dependency={}", deps.display()))
            .arg(&file)
            .output()
            .expect("run rustc");
    let _ = std::fs::remove_dir_all(&dir);
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
