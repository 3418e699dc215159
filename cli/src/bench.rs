//! `tairlock bench`: throughput and latency of each primitive, as ratios to the round-trip floor
//! measured in the same run.
//!
//! The floor is one cycle of the cheapest correct lock there is, sent by a bare redis-rs
//! multiplexed connection — what a hand-written client does, so every ratio includes every
//! client-side cost of this crate: raw `SET key val NX PX` plus an `EVALSHA` compare-and-delete
//! (through the store where there is no single server); and a bare `PING`. Every scenario
//! reports ops/s, p50 and p99 latency, its ratio to the floor where that means something, and the
//! commands it sent per operation (round trips: a script is one command whatever it runs inside;
//! on Redis the notifier's SUBSCRIBE/UNSUBSCRIBE, from `INFO commandstats`, are added).
//!
//! | scenario | one op is | ratio to |
//! |---|---|---|
//! | `floor-cycle` | SET NX PX + EVALSHA compare-and-delete on a bare redis-rs connection | itself (1.0) |
//! | `ping` | PING | — |
//! | `expire-lock-cycle` | `expire_lock` + `expire_unlock` (its release is `DELIFEQ` where the server has it: Valkey 9+) | floor cycle |
//! | `expire-lock-cycle-scripted` | the same with the release always by the `EXPIRE_UNLOCK` script | floor cycle |
//! | `reentrant-reacquire` | re-entry + release of a held reentrant lock | — (zero commands) |
//! | `rw-read-cycle` | RW read acquire + read release | floor cycle |
//! | `legacy-getset-cycle` | GetSetLock (ms unit) acquire + release: SETNX; GET + DEL | floor cycle |
//! | `legacy-scripted-cycle` | ScriptedLock acquire + release | floor cycle |
//! | `contended-handoff` | one acquisition by one of 8 workers holding 1 ms; latency = release → next holder | PING |
//! | `contended-separate-clients` | the same, each worker its own client (its own connection on Redis), as separate processes | PING |
//! | `contended-fair` | the same in fair mode ([`Options::fair`]) | PING |
//! | `contended-poll-setnx` | the same with SET NX PX and a 10 ms sleep-retry loop | PING |
//! | `contended-poll-getset` | the same with GetSetLock at its 10 ms poll | PING |
//! | `semaphore-cycle` | [`Semaphore`](tairlock::Semaphore) attempt + release of one of 3 permits (the note has each one's p50) | floor cycle |
//! | `contended-semaphore` | one acquisition by one of 8 clients (own connections) of 3 permits, holding 1 ms; latency = the wait | — |
//! | `local-waiters-N` | one handoff among N waiters in one client | — (commands per handoff) |
//! | `many-keys-throughput` | one script call, 64 tasks over 1,000 keys | — (compare `redis-benchmark-evalsha`) |
//! | `redis-benchmark-evalsha` | `redis-benchmark -n 200000 -c 50` EVALSHA on the same server | — |
//! | `memory-per-lock`, `memory-per-rwlock` | `MEMORY USAGE` of a held lock's keys; of an RW lock with 8 readers | — |
//! | `redlock-cycle` (`--redlock` only, see [`redlock`]) | `Redlock::try_acquire` + `release` over N servers | floor cycle on the first server |
//!
//! Every contended scenario also reports `same_worker_pct` (acquisitions by the worker that held
//! the lock last) and `max_wait_ms` (the longest single wait); `commands_per_op` is per
//! acquisition there.
//!
//! On a Redis Cluster (`--cluster`) every scenario runs through a
//! [`ClusterStore`]; `redis-benchmark-evalsha` and the `memory-per-*` rows are skipped (no
//! single server to point them at) and `commands_per_op` counts the client's commands only.

use std::collections::HashMap;
use std::future::Future;
use std::io::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;
use serde::Serialize;
use tairlock::scripts::EXPIRE_UNLOCK;
use tairlock::store::memory::{CommandResult, Db};
use tairlock::{
    Acquire, ClusterStore, ExpireLock, Keyspace, MemoryStore, Options, Owner, RedisStore, Redlock,
    RedlockOptions, ReentrantLock, Reply, Script, Store, Ttl,
};

mod semaphore;

/// The floor's compare-and-delete.
static FLOOR_CAD: Script = Script::new(
    "floor_cad",
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    floor_cad,
);

fn floor_cad(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    if db.get(&keys[0])?.as_deref() == Some(args[0].as_bytes()) {
        return Ok(Reply::Int(i64::from(db.del(&keys[0]))));
    }
    Ok(Reply::Int(0))
}

/// One row of the bench table (and one object of `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// Scenario name.
    pub scenario: String,
    /// `memory` or `redis`.
    pub store: String,
    /// Operations per second (see the scenario table for what one op is).
    pub ops_per_sec: Option<f64>,
    /// Median latency of one op, µs.
    pub p50_us: Option<f64>,
    /// 99th percentile latency, µs.
    pub p99_us: Option<f64>,
    /// Ratio to the floor (null where it has no meaning).
    pub ratio_to_floor: Option<f64>,
    /// Server commands per operation (for a contended scenario: per acquisition).
    pub commands_per_op: Option<f64>,
    /// Contended scenarios: the share of acquisitions by the worker that held the lock last, %.
    pub same_worker_pct: Option<f64>,
    /// Contended scenarios: the longest one worker waited for one acquisition, ms.
    pub max_wait_ms: Option<f64>,
    /// Anything else worth knowing (max wait, same-worker share, bytes, ...).
    pub note: String,
}

/// Settings of one bench run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// How long each timed scenario runs.
    pub duration: Duration,
    /// Scenarios to run, by name (all if empty).
    pub only: Vec<String>,
}

/// Every scenario name, in table order.
pub const SCENARIOS: [&str; 22] = [
    "floor-cycle",
    "ping",
    "expire-lock-cycle",
    "expire-lock-cycle-scripted",
    "reentrant-reacquire",
    "rw-read-cycle",
    "legacy-getset-cycle",
    "legacy-scripted-cycle",
    "contended-handoff",
    "contended-separate-clients",
    "contended-fair",
    "contended-poll-setnx",
    "contended-poll-getset",
    "semaphore-cycle",
    "contended-semaphore",
    "local-waiters-1",
    "local-waiters-8",
    "local-waiters-32",
    "many-keys-throughput",
    "redis-benchmark-evalsha",
    "memory-per-lock",
    "memory-per-rwlock",
];

/// What the bench needs beyond the store contract: a ping and a command counter.
pub trait BenchStore: Store {
    /// One round trip that does nothing.
    fn ping(&self) -> impl Future<Output = tairlock::Result<()>> + Send;
    /// Server commands so far (monotonic), if the store can tell.
    fn commands(&self) -> impl Future<Output = Option<u64>> + Send;
    /// `MEMORY USAGE key`, if the store can tell.
    fn memory_usage(&self, key: &str) -> impl Future<Output = Option<u64>> + Send;
    /// `host port` of the server, for redis-benchmark.
    fn host_port(&self) -> Option<(String, u16)>;
    /// Store name.
    fn label(&self) -> &'static str;
    /// Another client of the same store, as a separate process would have (its own connection
    /// where the store has one), its commands counted with this one's.
    fn another(&self) -> impl Future<Output = tairlock::Result<Self>> + Send
    where
        Self: Sized;
    /// A bare redis-rs multiplexed connection to the server, for the floor: what a hand-written
    /// client uses. `None` where there is no single server (embedded store, cluster).
    fn bare(&self) -> impl Future<Output = Option<redis::aio::MultiplexedConnection>> + Send;
}

/// A store with every command it sends counted (a script call is one command, whatever it runs
/// inside: this counts round trips).
#[derive(Debug, Clone)]
pub struct Counted<S> {
    inner: S,
    count: Arc<AtomicU64>,
}

impl<S: Store> Counted<S> {
    /// Count the commands sent to `inner`.
    pub fn new(inner: S) -> Self {
        Counted {
            inner,
            count: Arc::default(),
        }
    }

    fn tick(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
    }
}

macro_rules! counted {
    ($($name:ident($($arg:ident: $ty:ty),*) -> $out:ty;)*) => {
        $(
            async fn $name(&self, $($arg: $ty),*) -> tairlock::Result<$out> {
                self.tick();
                self.inner.$name($($arg),*).await
            }
        )*
    };
}

impl<S: Store> Store for Counted<S> {
    counted! {
        get(key: &str) -> Option<Vec<u8>>;
        set_nx(key: &str, value: &[u8]) -> bool;
        set_nx_px(key: &str, value: &[u8], ttl: Duration) -> bool;
        set(key: &str, value: &[u8]) -> ();
        getset(key: &str, value: &[u8]) -> Option<Vec<u8>>;
        getdel(key: &str) -> Option<Vec<u8>>;
        del(key: &str) -> bool;
        incr(key: &str) -> i64;
        decr(key: &str) -> i64;
        expire(key: &str, seconds: u64) -> bool;
        pexpire(key: &str, ttl: Duration) -> bool;
        pttl(key: &str) -> Ttl;
        key_type(key: &str) -> String;
        time() -> Duration;
    }

    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> tairlock::Result<Reply> {
        self.tick();
        self.inner.eval(script, keys, args).await
    }

    /// Counted as one command: the script, or a `DELIFEQ` that found its lease (every release
    /// here does; one that does not is followed by the script, uncounted, and a native
    /// release's announcement follows it unawaited, uncounted too).
    async fn compare_and_delete(
        &self,
        keys: &[String],
        args: &[String],
    ) -> tairlock::Result<Reply> {
        self.tick();
        self.inner.compare_and_delete(keys, args).await
    }

    async fn notifier(&self) -> Option<tairlock::notify::Notifier> {
        self.inner.notifier().await
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner.runtime()
    }

    fn pubsub(&self) -> tairlock::notify::PubSub {
        self.inner.pubsub()
    }
}

impl BenchStore for Counted<MemoryStore> {
    async fn ping(&self) -> tairlock::Result<()> {
        self.tick();
        self.inner.time().await.map(|_| ())
    }

    async fn commands(&self) -> Option<u64> {
        Some(self.count.load(Ordering::Relaxed))
    }

    async fn memory_usage(&self, _key: &str) -> Option<u64> {
        None
    }

    fn host_port(&self) -> Option<(String, u16)> {
        None
    }

    fn label(&self) -> &'static str {
        "memory"
    }

    /// The embedded store has no connections: another client is another lock value on it.
    async fn another(&self) -> tairlock::Result<Self> {
        Ok(self.clone())
    }

    async fn bare(&self) -> Option<redis::aio::MultiplexedConnection> {
        None
    }
}

impl BenchStore for Counted<RedisStore> {
    async fn ping(&self) -> tairlock::Result<()> {
        self.tick();
        self.inner
            .command::<String>(&redis::cmd("PING"))
            .await
            .map(|_| ())
    }

    /// Commands this client sent, plus the pub/sub (un)subscriptions its notifier sent on its
    /// own connection (from `INFO commandstats`; scripts never send those).
    async fn commands(&self) -> Option<u64> {
        let info: String = self
            .inner
            .command(redis::cmd("INFO").arg("commandstats"))
            .await
            .ok()?;
        let pubsub: u64 = info
            .lines()
            .filter(|l| {
                l.starts_with("cmdstat_subscribe:") || l.starts_with("cmdstat_unsubscribe:")
            })
            .filter_map(|l| l.split_once("calls=").map(|(_, rest)| rest))
            .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
            .sum();
        Some(self.count.load(Ordering::Relaxed) + pubsub)
    }

    async fn memory_usage(&self, key: &str) -> Option<u64> {
        self.inner
            .command(redis::cmd("MEMORY").arg("USAGE").arg(key))
            .await
            .ok()
    }

    fn host_port(&self) -> Option<(String, u16)> {
        let url = self.inner.url();
        let rest = url.split("://").nth(1)?;
        let rest = rest.rsplit('@').next()?;
        let hostport = rest.split('/').next()?;
        let (host, port) = hostport.rsplit_once(':')?;
        Some((host.to_owned(), port.parse().ok()?))
    }

    fn label(&self) -> &'static str {
        "redis"
    }

    async fn another(&self) -> tairlock::Result<Self> {
        Ok(Counted {
            inner: RedisStore::from_client(self.inner.client(), Default::default()).await?,
            count: self.count.clone(),
        })
    }

    async fn bare(&self) -> Option<redis::aio::MultiplexedConnection> {
        // The store's own client: its credentials and TLS settings, not the redacted URL.
        let client = self.inner.client();
        client.get_multiplexed_async_connection().await.ok()
    }
}

impl BenchStore for Counted<ClusterStore> {
    async fn ping(&self) -> tairlock::Result<()> {
        self.tick();
        self.inner
            .command::<String>(&redis::cmd("PING"))
            .await
            .map(|_| ())
    }

    /// Commands this client sent (the notifier's subscriptions are not counted on a cluster).
    async fn commands(&self) -> Option<u64> {
        Some(self.count.load(Ordering::Relaxed))
    }

    async fn memory_usage(&self, _key: &str) -> Option<u64> {
        None
    }

    fn host_port(&self) -> Option<(String, u16)> {
        None
    }

    fn label(&self) -> &'static str {
        "cluster"
    }

    /// Workers share the cluster client (its connections are per node); each has its own lock
    /// value, so its own local queue and wake channel.
    async fn another(&self) -> tairlock::Result<Self> {
        Ok(self.clone())
    }

    async fn bare(&self) -> Option<redis::aio::MultiplexedConnection> {
        None
    }
}

/// `tairlock bench --redlock URL,URL,…`: `floor-cycle` on the first server, then
/// `redlock-cycle` — one [`Redlock::try_acquire`] + [`Redlock::release`] over every server
/// (requests to the servers go out concurrently), its ratio to that floor. `config.only`
/// selects between the two (both if empty).
///
/// # Errors
///
/// Store errors, or a cycle that did not get a majority (another client holds the bench key).
pub async fn redlock(
    servers: Vec<RedisStore>,
    config: &BenchConfig,
    mut progress: impl FnMut(usize, usize, &str),
) -> tairlock::Result<Vec<BenchRow>> {
    let n = servers.len();
    let first = servers.first().cloned().ok_or_else(|| {
        tairlock::Error::new(
            tairlock::ErrorKind::InvalidInput,
            "redlock needs at least one server",
        )
    })?;
    let want = |name: &str| config.only.is_empty() || config.only.iter().any(|o| o == name);
    let mut rows = Vec::new();
    let mut floor_cycle = None;
    if want("floor-cycle") {
        let floor_config = BenchConfig {
            duration: config.duration,
            only: vec!["floor-cycle".to_owned()],
        };
        let floor = run(Counted::new(first), &floor_config, |_, _, name| {
            progress(0, 2, name)
        })
        .await?;
        floor_cycle = floor
            .first()
            .and_then(|r| r.ops_per_sec)
            .map(|ops| 1.0 / ops);
        rows.extend(floor);
    }
    if want("redlock-cycle") {
        progress(1, 2, "redlock-cycle");
        let options = RedlockOptions::default()
            .keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix"));
        let redlock = Redlock::new(servers, options)?;
        let quorum = redlock.quorum();
        let ttl = Duration::from_secs(10);
        let mut s = timed(config.duration, |_| async {
            let Some(lease) = redlock.try_acquire("redlock-cycle", ttl).await? else {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::Server,
                    "bench redlock not granted by a majority (held elsewhere, or servers down)",
                ));
            };
            redlock.release(&lease).await;
            Ok(())
        })
        .await?;
        rows.push(BenchRow {
            scenario: "redlock-cycle".to_owned(),
            store: "redlock".to_owned(),
            ops_per_sec: Some(s.ops_per_sec()),
            p50_us: s.pct(0.5),
            p99_us: s.pct(0.99),
            ratio_to_floor: floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f),
            // SET NX PX and a compare-and-delete script on each server.
            commands_per_op: Some(2.0 * n as f64),
            same_worker_pct: None,
            max_wait_ms: None,
            note: format!("{n} servers, quorum {quorum}"),
        });
    }
    Ok(rows)
}

struct Samples {
    latencies: Vec<Duration>,
    elapsed: Duration,
    ops: u64,
}

impl Samples {
    fn pct(&mut self, p: f64) -> Option<f64> {
        if self.latencies.is_empty() {
            return None;
        }
        self.latencies.sort();
        let i = ((self.latencies.len() - 1) as f64 * p).round() as usize;
        Some(self.latencies[i].as_secs_f64() * 1e6)
    }

    fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Run `op` back to back for `duration` (after a short warm-up), timing each call.
async fn timed<F, Fut>(duration: Duration, mut op: F) -> tairlock::Result<Samples>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = tairlock::Result<()>>,
{
    for i in 0..50 {
        op(u64::MAX - i).await?;
    }
    let mut latencies = Vec::new();
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < duration {
        let t = Instant::now();
        op(i).await?;
        latencies.push(t.elapsed());
        i += 1;
    }
    Ok(Samples {
        latencies,
        elapsed: start.elapsed(),
        ops: i,
    })
}

fn options() -> Options {
    Options::default().keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix"))
}

fn locks<S: Store>(store: &S) -> ExpireLock<S> {
    ExpireLock::with_options(store.clone(), options())
}

/// Run the selected scenarios. `progress(i, n, name)` is called as each starts.
///
/// # Errors
///
/// Store errors.
pub async fn run<S: BenchStore>(
    store: S,
    config: &BenchConfig,
    mut progress: impl FnMut(usize, usize, &str),
) -> tairlock::Result<Vec<BenchRow>> {
    let selected: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| config.only.is_empty() || config.only.iter().any(|o| o == s))
        .collect();
    let mut rows: Vec<BenchRow> = Vec::new();
    let mut floor_cycle: Option<f64> = None;
    let mut ping_p50: Option<f64> = None;
    let d = config.duration;
    for (i, name) in selected.iter().enumerate() {
        progress(i, selected.len(), name);
        let before = store.commands().await;
        let (mut row, ops) = match *name {
            "floor-cycle" => {
                let token = tairlock::new_nonce();
                let key = "tairlock-bench:floor";
                let (mut s, commands) = match store.bare().await {
                    // A bare redis-rs multiplexed connection: SET NX PX, then the
                    // compare-and-delete by EVALSHA (loaded once), as a hand-written client does.
                    Some(conn) => {
                        let cad = redis::Script::new(FLOOR_CAD.lua());
                        let s = timed(d, |_| {
                            let (mut conn, cad, token) = (conn.clone(), &cad, &token);
                            async move {
                                let _: Option<String> = redis::cmd("SET")
                                    .arg(key)
                                    .arg(token)
                                    .arg("NX")
                                    .arg("PX")
                                    .arg(10_000)
                                    .query_async(&mut conn)
                                    .await
                                    .map_err(bare_error)?;
                                let _: i64 = cad
                                    .key(key)
                                    .arg(token)
                                    .invoke_async(&mut conn)
                                    .await
                                    .map_err(bare_error)?;
                                Ok(())
                            }
                        })
                        .await?;
                        (s, Some(2.0))
                    }
                    // No single server: the same two commands through the store.
                    None => {
                        let s = timed(d, |_| async {
                            store
                                .set_nx_px(key, token.as_bytes(), Duration::from_secs(10))
                                .await?;
                            let keys = [key.to_owned()];
                            store
                                .eval(&FLOOR_CAD, &keys, std::slice::from_ref(&token))
                                .await?;
                            Ok(())
                        })
                        .await?;
                        (s, None)
                    }
                };
                floor_cycle = Some(1.0 / s.ops_per_sec());
                let mut r = row(
                    name,
                    &store,
                    Some(s.ops_per_sec()),
                    s.pct(0.5),
                    s.pct(0.99),
                    Some(1.0),
                );
                r.commands_per_op = commands;
                (r, s.ops + 50)
            }
            "ping" => {
                let mut s = timed(d, |_| store.ping()).await?;
                ping_p50 = s.pct(0.5);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        None,
                    ),
                    s.ops + 50,
                )
            }
            "expire-lock-cycle" | "expire-lock-cycle-scripted" => {
                let locks = locks(&store);
                let ttl = Duration::from_secs(10);
                let scripted = *name == "expire-lock-cycle-scripted";
                let keys = locks.keys("cycle")?;
                let publish = store.pubsub().publish_command().to_owned();
                let mut s = timed(d, |_| async {
                    let Acquire::Acquired(lease) = locks.expire_lock("cycle", ttl).await? else {
                        return Err(tairlock::Error::new(
                            tairlock::ErrorKind::Server,
                            "bench lock unexpectedly held",
                        ));
                    };
                    if scripted {
                        let args = [
                            lease.value().to_owned(),
                            keys.channel.clone(),
                            publish.clone(),
                        ];
                        let reply = store
                            .eval(&EXPIRE_UNLOCK, std::slice::from_ref(&keys.lock), &args)
                            .await?;
                        if reply.as_int() != Some(1) {
                            return Err(tairlock::Error::new(
                                tairlock::ErrorKind::Server,
                                format!("bench release not released: {reply:?}"),
                            ));
                        }
                    } else {
                        locks.expire_unlock("cycle", &lease).await?;
                    }
                    Ok(())
                })
                .await?;
                let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        ratio,
                    ),
                    s.ops + 50,
                )
            }
            "reentrant-reacquire" => {
                let locks = ReentrantLock::new(locks(&store));
                let owner = Owner::new();
                let outer = locks.lock(&owner, "reentrant").await?;
                let before_inner = store.commands().await;
                let mut s = timed(d, |_| async {
                    let inner = locks.lock(&owner, "reentrant").await?;
                    inner.release().await?;
                    Ok(())
                })
                .await?;
                let after_inner = store.commands().await;
                outer.release().await?;
                let mut r = row(
                    name,
                    &store,
                    Some(s.ops_per_sec()),
                    s.pct(0.5),
                    s.pct(0.99),
                    None,
                );
                r.commands_per_op = per_op(before_inner, after_inner, s.ops + 50);
                rows.push(r);
                continue;
            }
            "rw-read-cycle" => {
                let rw = tairlock_rwlock::RwLock::with_options(
                    store.clone(),
                    tairlock_rwlock::Options::default()
                        .keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix")),
                );
                let lease = Duration::from_secs(10);
                let mut s = timed(d, |i| {
                    let rw = &rw;
                    async move {
                        let nonce = format!("r{i}");
                        rw.read_acquire("rw", &nonce, lease).await?;
                        rw.read_release("rw", &nonce).await?;
                        Ok(())
                    }
                })
                .await?;
                let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        ratio,
                    ),
                    s.ops + 50,
                )
            }
            "legacy-getset-cycle" | "legacy-scripted-cycle" => {
                let options =
                    tairlock_legacy::Options::default().unit(tairlock_legacy::Unit::Millis);
                let getset =
                    tairlock_legacy::GetSetLock::with_options(store.clone(), options.clone());
                let scripted = tairlock_legacy::ScriptedLock::with_options(store.clone(), options);
                let lease = Duration::from_secs(10);
                let scripted_row = *name == "legacy-scripted-cycle";
                let mut s = timed(d, |_| {
                    let (getset, scripted) = (&getset, &scripted);
                    async move {
                        let key = "tairlock-bench:legacy";
                        let attempt = if scripted_row {
                            scripted.try_acquire(key, lease).await?
                        } else {
                            getset.try_acquire(key, lease).await?
                        };
                        let tairlock_legacy::TryAcquire::Acquired(holding) = attempt else {
                            return Err(tairlock::Error::new(
                                tairlock::ErrorKind::Server,
                                "bench lock unexpectedly held",
                            ));
                        };
                        if scripted_row {
                            scripted.release(&holding).await?;
                        } else {
                            getset.release(&holding).await?;
                        }
                        Ok(())
                    }
                })
                .await?;
                let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        ratio,
                    ),
                    s.ops + 50,
                )
            }
            "contended-handoff" => contended(&store, 8, d, Handoff::Notify, ping_p50).await?,
            "contended-separate-clients" => {
                let how = Handoff::Separate { fair: false };
                contended(&store, 8, d, how, ping_p50).await?
            }
            "contended-fair" => {
                let how = Handoff::Separate { fair: true };
                contended(&store, 8, d, how, ping_p50).await?
            }
            "contended-poll-getset" => {
                contended(&store, 8, d, Handoff::PollGetSet, ping_p50).await?
            }
            "contended-poll-setnx" => contended(&store, 8, d, Handoff::PollSetNx, ping_p50).await?,
            "semaphore-cycle" => semaphore::cycle(&store, d, floor_cycle).await?,
            "contended-semaphore" => semaphore::contended(&store, d).await?,
            "local-waiters-1" => contended(&store, 1 + 1, d, Handoff::Notify, ping_p50).await?,
            "local-waiters-8" => contended(&store, 8 + 1, d, Handoff::Notify, ping_p50).await?,
            "local-waiters-32" => contended(&store, 32 + 1, d, Handoff::Notify, ping_p50).await?,
            "many-keys-throughput" => many_keys(&store, d).await?,
            "redis-benchmark-evalsha" => match redis_benchmark(&store).await {
                Some(r) => (r, 0),
                None => continue,
            },
            "memory-per-lock" => match memory_per_lock(&store).await? {
                Some(r) => (r, 0),
                None => continue,
            },
            "memory-per-rwlock" => match memory_per_rwlock(&store).await? {
                Some(r) => (r, 0),
                None => continue,
            },
            _ => continue,
        };
        if ops > 0 && row.commands_per_op.is_none() {
            let after = store.commands().await;
            row.commands_per_op = per_op(before, after, ops);
        }
        rows.push(row);
    }
    Ok(rows)
}

fn bare_error(e: redis::RedisError) -> tairlock::Error {
    tairlock::Error::new(tairlock::ErrorKind::Server, format!("bare client: {e}"))
}

fn per_op(before: Option<u64>, after: Option<u64>, ops: u64) -> Option<f64> {
    let (b, a) = (before?, after?);
    Some(a.saturating_sub(b) as f64 / ops.max(1) as f64)
}

fn row<S: BenchStore>(
    name: &str,
    store: &S,
    ops: Option<f64>,
    p50: Option<f64>,
    p99: Option<f64>,
    ratio: Option<f64>,
) -> BenchRow {
    BenchRow {
        scenario: name.to_owned(),
        store: store.label().to_owned(),
        ops_per_sec: ops,
        p50_us: p50,
        p99_us: p99,
        ratio_to_floor: ratio,
        commands_per_op: None,
        same_worker_pct: None,
        max_wait_ms: None,
        note: String::new(),
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Handoff {
    Notify,
    /// Each worker its own client (its own connection on Redis), as separate processes; fair
    /// mode or not.
    Separate {
        fair: bool,
    },
    PollSetNx,
    PollGetSet,
}

/// `workers` tasks contend for one key, each holding 1 ms per acquisition. Latency is the
/// handoff: from a release to the next acquisition.
async fn contended<S: BenchStore>(
    store: &S,
    workers: usize,
    d: Duration,
    how: Handoff,
    ping_p50: Option<f64>,
) -> tairlock::Result<(BenchRow, u64)> {
    let name = format!("handoff-{}-{}", workers, tairlock::new_nonce());
    let locks = locks(store);
    let getset = tairlock_legacy::GetSetLock::with_options(
        store.clone(),
        tairlock_legacy::Options::default().unit(tairlock_legacy::Unit::Millis),
    );
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let per_worker: Arc<Mutex<HashMap<usize, u64>>> = Arc::default();
    let last_worker: Arc<Mutex<(Option<usize>, u64)>> = Arc::default();
    let max_wait: Arc<Mutex<Duration>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (locks, store, name, getset) =
            (locks.clone(), store.clone(), name.clone(), getset.clone());
        let (released_at, handoffs, per_worker, last_worker, max_wait, stop) = (
            released_at.clone(),
            handoffs.clone(),
            per_worker.clone(),
            last_worker.clone(),
            max_wait.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let key = format!("tairlock-bench:poll:{name}");
            let locks = match how {
                Handoff::Separate { fair } => {
                    ExpireLock::with_options(store.another().await?, options().fair(fair))
                }
                _ => locks,
            };
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let token = tairlock::new_nonce();
                let mut legacy = None;
                let guard = match how {
                    Handoff::PollGetSet => {
                        match getset.acquire(&key, Duration::from_secs(5)).await? {
                            Some(h) => legacy = Some(h),
                            None => continue,
                        }
                        None
                    }
                    Handoff::Notify | Handoff::Separate { .. } => match locks
                        .lock_with_lease(
                            &name,
                            Duration::from_secs(5),
                            Some(Duration::from_millis(500)),
                        )
                        .await?
                    {
                        Some(g) => Some(g),
                        None => continue,
                    },
                    Handoff::PollSetNx => {
                        while !store
                            .set_nx_px(&key, token.as_bytes(), Duration::from_secs(5))
                            .await?
                        {
                            if stop.load(Ordering::Relaxed) {
                                return Ok::<(), tairlock::Error>(());
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        None
                    }
                };
                let got = Instant::now();
                {
                    let mut mw = max_wait.lock();
                    *mw = (*mw).max(got - asked);
                }
                if let Some(at) = released_at.lock().take() {
                    handoffs.lock().push(got - at);
                }
                *per_worker.lock().entry(w).or_default() += 1;
                {
                    let mut lw = last_worker.lock();
                    if lw.0 == Some(w) {
                        lw.1 += 1;
                    }
                    lw.0 = Some(w);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                match guard {
                    Some(g) => {
                        // Stamp before the release's reply: the next holder may be told first.
                        *released_at.lock() = Some(Instant::now());
                        g.release().await?;
                    }
                    None => {
                        *released_at.lock() = Some(Instant::now());
                        match &legacy {
                            Some(holding) => {
                                getset.release(holding).await?;
                            }
                            None => {
                                store
                                    .eval(
                                        &FLOOR_CAD,
                                        std::slice::from_ref(&key),
                                        std::slice::from_ref(&token),
                                    )
                                    .await?;
                            }
                        }
                    }
                }
            }
            Ok(())
        }));
    }
    tokio::time::sleep(d).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("bench worker panicked")?;
    }
    let elapsed = start.elapsed();
    let acquisitions: u64 = per_worker.lock().values().sum();
    let served = per_worker.lock().len();
    let same = last_worker.lock().1;
    let mut samples = Samples {
        latencies: std::mem::take(&mut *handoffs.lock()),
        elapsed,
        ops: acquisitions,
    };
    let p50 = samples.pct(0.5);
    let max_wait_ms = max_wait.lock().as_secs_f64() * 1e3;
    let same_pct = 100.0 * same as f64 / acquisitions.max(1) as f64;
    let mut r = BenchRow {
        scenario: String::new(),
        store: store.label().to_owned(),
        ops_per_sec: Some(samples.ops_per_sec()),
        p50_us: p50,
        p99_us: samples.pct(0.99),
        ratio_to_floor: match (p50, ping_p50) {
            (Some(h), Some(p)) if p > 0.0 => Some(h / p),
            _ => None,
        },
        commands_per_op: None,
        same_worker_pct: Some(same_pct),
        max_wait_ms: Some(max_wait_ms),
        note: format!(
            "{served}/{workers} workers served, max wait {max_wait_ms:.1} ms, same-worker \
             re-acquisition {same_pct:.1}%"
        ),
    };
    r.scenario = match (how, workers) {
        (Handoff::PollSetNx, _) => "contended-poll-setnx".to_owned(),
        (Handoff::PollGetSet, _) => "contended-poll-getset".to_owned(),
        (Handoff::Separate { fair: false }, _) => "contended-separate-clients".to_owned(),
        (Handoff::Separate { fair: true }, _) => "contended-fair".to_owned(),
        (Handoff::Notify, 8) => "contended-handoff".to_owned(),
        (Handoff::Notify, n) => format!("local-waiters-{}", n - 1),
    };
    Ok((r, acquisitions))
}

/// 64 tasks on one client over 1,000 keys, each cycling acquire + release on random keys. One op
/// is one script call (a cycle is two).
async fn many_keys<S: BenchStore>(store: &S, d: Duration) -> tairlock::Result<(BenchRow, u64)> {
    let locks = locks(store);
    let ops = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (locks, ops, stop, latencies) =
            (locks.clone(), ops.clone(), stop.clone(), latencies.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let key = format!("k{}", rand::rng().random_range(0..1000));
                let t = Instant::now();
                if let Acquire::Acquired(lease) =
                    locks.expire_lock(&key, Duration::from_secs(10)).await?
                {
                    mine.push(t.elapsed());
                    let t = Instant::now();
                    locks.expire_unlock(&key, &lease).await?;
                    mine.push(t.elapsed());
                    ops.fetch_add(2, Ordering::Relaxed);
                } else {
                    mine.push(t.elapsed());
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            }
            latencies.lock().extend(mine);
            Ok::<(), tairlock::Error>(())
        }));
    }
    tokio::time::sleep(d).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("bench worker panicked")?;
    }
    let mut s = Samples {
        latencies: std::mem::take(&mut *latencies.lock()),
        elapsed: start.elapsed(),
        ops: ops.load(Ordering::Relaxed),
    };
    let ops = s.ops;
    Ok((
        row(
            "many-keys-throughput",
            store,
            Some(s.ops_per_sec()),
            s.pct(0.5),
            s.pct(0.99),
            None,
        ),
        ops,
    ))
}

/// `redis-benchmark -n 200000 -c 50` running the floor's EVALSHA on the same server.
async fn redis_benchmark<S: BenchStore>(store: &S) -> Option<BenchRow> {
    let (host, port) = store.host_port()?;
    // Make sure the script is loaded so EVALSHA finds it.
    store
        .eval(
            &FLOOR_CAD,
            &["tairlock-bench:rb".to_owned()],
            &["x".to_owned()],
        )
        .await
        .ok()?;
    let out = tokio::process::Command::new("redis-benchmark")
        .args([
            "-h",
            &host,
            "-p",
            &port.to_string(),
            "-n",
            "200000",
            "-c",
            "50",
            "-r",
            "1000",
            "-q",
        ])
        .args([
            "EVALSHA",
            FLOOR_CAD.sha1(),
            "1",
            "tairlock-bench:rb:__rand_int__",
            "x",
        ])
        .output()
        .await
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    // "EVALSHA ...: 123456.78 requests per second, p50=0.183 msec"
    let rps: f64 = text
        .split("requests per second")
        .next()?
        .rsplit(':')
        .next()?
        .trim()
        .parse()
        .ok()?;
    let p50 = text
        .split("p50=")
        .nth(1)
        .and_then(|s| s.split_whitespace().next())
        .and_then(|ms| ms.parse::<f64>().ok())
        .map(|ms| ms * 1000.0);
    let mut r = row("redis-benchmark-evalsha", store, Some(rps), p50, None, None);
    r.commands_per_op = Some(1.0);
    r.note = "redis-benchmark -n 200000 -c 50 -r 1000 EVALSHA (compare-and-delete)".to_owned();
    Some(r)
}

/// `MEMORY USAGE` of a held lock's keys.
async fn memory_per_lock<S: BenchStore>(store: &S) -> tairlock::Result<Option<BenchRow>> {
    let locks = locks(store);
    let Acquire::Acquired(lease) = locks
        .expire_lock("memory-probe", Duration::from_secs(10))
        .await?
    else {
        return Ok(None);
    };
    let keys = locks.keys("memory-probe")?;
    let (a, b) = (
        store.memory_usage(&keys.lock).await,
        store.memory_usage(&keys.fence).await,
    );
    locks.expire_unlock("memory-probe", &lease).await?;
    let (Some(a), Some(b)) = (a, b) else {
        return Ok(None);
    };
    let mut r = row("memory-per-lock", store, None, None, None, None);
    r.note = format!(
        "{} bytes while held ({a} lock key + {b} fence key); {b} bytes retained for 60 s after release",
        a + b
    );
    Ok(Some(r))
}

/// `MEMORY USAGE` of an RW lock's keys with 8 live readers.
async fn memory_per_rwlock<S: BenchStore>(store: &S) -> tairlock::Result<Option<BenchRow>> {
    let rw = tairlock_rwlock::RwLock::with_options(
        store.clone(),
        tairlock_rwlock::Options::default()
            .keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix")),
    );
    let nonces: Vec<String> = (0..8).map(|_| tairlock::new_nonce()).collect();
    for n in &nonces {
        rw.read_acquire("memory-probe-rw", n, Duration::from_secs(10))
            .await?;
    }
    let keys = rw.keys("memory-probe-rw")?;
    let readers = store.memory_usage(&keys.readers).await;
    for n in &nonces {
        rw.read_release("memory-probe-rw", n).await?;
    }
    let Some(readers) = readers else {
        return Ok(None);
    };
    let mut r = row("memory-per-rwlock", store, None, None, None, None);
    r.note = format!(
        "{readers} bytes for 8 readers (one sorted set: nonce -> lease expiry); no writer key while only reading"
    );
    Ok(Some(r))
}

/// The rows as an aligned table.
pub fn table(rows: &[BenchRow]) -> String {
    let f =
        |v: Option<f64>, prec: usize| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.prec$}"));
    let mut out = format!(
        "{:<24} {:>6} {:>12} {:>10} {:>10} {:>9} {:>9}  note\n",
        "scenario", "store", "ops/s", "p50 µs", "p99 µs", "ratio", "cmds/op"
    );
    for r in rows {
        out.push_str(&format!(
            "{:<24} {:>6} {:>12} {:>10} {:>10} {:>9} {:>9}  {}\n",
            r.scenario,
            r.store,
            f(r.ops_per_sec, 0),
            f(r.p50_us, 1),
            f(r.p99_us, 1),
            f(r.ratio_to_floor, 2),
            f(r.commands_per_op, 2),
            r.note
        ));
    }
    out
}

/// A progress bar on stderr.
pub fn progress_bar(i: usize, n: usize, name: &str) {
    let width = 24;
    let done = width * i / n.max(1);
    eprint!(
        "\r[{}{}] {}/{} {:<26}",
        "#".repeat(done),
        ".".repeat(width - done),
        i + 1,
        n,
        name
    );
    let _ = std::io::stderr().flush();
}
