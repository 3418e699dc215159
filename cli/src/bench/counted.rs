//! The counting store: every command a scenario sends is counted, and [`BenchStore`] adds
//! what a scenario needs beyond the [`Store`] contract (a bare round trip, the server's command
//! count, `MEMORY USAGE`, its address for `redis-benchmark`).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tairlock::{ClusterStore, MemoryStore, Packed, RedisStore, Reply, Script, Store, Ttl};

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
    /// A bare redis-rs pub/sub connection to the server, for a handoff's profile (when its
    /// announcement reaches a client). `None` where there is no single server.
    fn bare_pubsub(&self) -> impl Future<Output = Option<redis::aio::PubSub>> + Send {
        async { None }
    }
    /// The server's script calls so far and the time it spent in them, µs (`EVALSHA` and
    /// `EVAL` of `INFO commandstats`), if the store can tell.
    fn script_usec(&self) -> impl Future<Output = Option<(u64, u64)>> + Send {
        async { None }
    }
    /// Leases carried by renewal calls so far (`RENEW_MANY`'s each, one per `RENEW`).
    fn renewals(&self) -> u64;
}

/// A store with every command it sends counted (a script call is one command, whatever it runs
/// inside: this counts round trips).
#[derive(Debug, Clone)]
pub struct Counted<S> {
    inner: S,
    count: Arc<AtomicU64>,
    /// Leases carried by renewal calls (`RENEW_MANY`'s each, one per `RENEW`).
    renewals: Arc<AtomicU64>,
}

impl<S: Store> Counted<S> {
    /// Count the commands sent to `inner`.
    pub fn new(inner: S) -> Self {
        Counted {
            inner,
            count: Arc::default(),
            renewals: Arc::default(),
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
        if std::ptr::eq(script, &tairlock::scripts::RENEW_MANY) {
            self.renewals
                .fetch_add(keys.len() as u64 / 2, Ordering::Relaxed);
        } else if std::ptr::eq(script, &tairlock::scripts::RENEW) {
            self.renewals.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.eval(script, keys, args).await
    }

    async fn eval_packed(
        &self,
        script: &'static Script,
        keys: &Packed,
        args: &Packed,
    ) -> tairlock::Result<Reply> {
        self.tick();
        if std::ptr::eq(script, &tairlock::scripts::RENEW_MANY) {
            self.renewals
                .fetch_add(keys.len() as u64 / 2, Ordering::Relaxed);
        }
        self.inner.eval_packed(script, keys, args).await
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

    fn single_shard(&self) -> bool {
        self.inner.single_shard()
    }
}

impl BenchStore for Counted<MemoryStore> {
    fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

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
    fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

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
            renewals: self.renewals.clone(),
        })
    }

    async fn script_usec(&self) -> Option<(u64, u64)> {
        let info: String = self
            .inner
            .command(redis::cmd("INFO").arg("commandstats"))
            .await
            .ok()?;
        let field = |rest: &str, name: &str| -> Option<u64> {
            let (_, value) = rest
                .split(',')
                .find_map(|f| f.split_once('=').filter(|(k, _)| *k == name))?;
            value.parse().ok()
        };
        let mut total = (0, 0);
        for line in info.lines() {
            let Some(rest) = line
                .strip_prefix("cmdstat_evalsha:")
                .or_else(|| line.strip_prefix("cmdstat_eval:"))
            else {
                continue;
            };
            total.0 += field(rest, "calls")?;
            total.1 += field(rest, "usec")?;
        }
        Some(total)
    }

    async fn bare(&self) -> Option<redis::aio::MultiplexedConnection> {
        // The store's own client: its credentials and TLS settings, not the redacted URL.
        let client = self.inner.client();
        client.get_multiplexed_async_connection().await.ok()
    }

    async fn bare_pubsub(&self) -> Option<redis::aio::PubSub> {
        self.inner.client().get_async_pubsub().await.ok()
    }
}

impl BenchStore for Counted<ClusterStore> {
    fn renewals(&self) -> u64 {
        self.renewals.load(Ordering::Relaxed)
    }

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
