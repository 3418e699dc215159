//! Where a command connects, parsed once from its flags: the embedded store, one Redis server,
//! a Redis Cluster, or the master a set of sentinels names, with the TLS files and the cluster's
//! pub/sub choice. Every command builds its store from a [`Target`] with [`Target::on`].

use std::future::Future;

use tairlock::notify::PubSub;
use tairlock::store::{ClusterOptions, RedisOptions, SentinelOptions, TlsOptions};
use tairlock::{ClusterStore, MemoryStore, RedisStore};
use tairlock_legacy::WatchStore;

/// Which servers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// The embedded store, in this process.
    Memory,
    /// One Redis server, by URL.
    Redis(String),
    /// A Redis Cluster, by its seed nodes' URLs.
    Cluster(Vec<String>),
    /// The master these sentinels name.
    Sentinel {
        /// The sentinels' URLs.
        sentinels: Vec<String>,
        /// The master's name, as the sentinels know it.
        master: String,
    },
}

/// A command's store: where, and how to connect.
#[derive(Debug, Clone)]
pub struct Target {
    /// Which servers.
    pub endpoint: Endpoint,
    /// CA and client certificate for `rediss://` servers.
    pub tls: TlsOptions,
    /// How releases are announced on a cluster (`None`: sharded on Redis 7.0+, else classic).
    pub pubsub: Option<PubSub>,
}

/// Something to do with a connected store, whatever its type.
pub trait StoreJob {
    /// What it produces.
    type Output;
    /// Do it on `store`.
    fn run<S: WatchStore>(
        self,
        store: S,
    ) -> impl Future<Output = tairlock::Result<Self::Output>> + Send;
}

impl Target {
    /// The embedded store.
    pub fn memory() -> Target {
        Target::at(Endpoint::Memory)
    }

    /// `endpoint`, without TLS files and with the default pub/sub choice.
    pub fn at(endpoint: Endpoint) -> Target {
        Target {
            endpoint,
            tls: TlsOptions::default(),
            pubsub: None,
        }
    }

    /// Whether commands run against real servers (real time), not the embedded store.
    pub fn is_remote(&self) -> bool {
        self.endpoint != Endpoint::Memory
    }

    /// Options for one server (also each Redlock master).
    pub fn redis_options(&self) -> RedisOptions {
        let mut options = RedisOptions::default();
        options.tls = self.tls.clone();
        options
    }

    /// Options for a cluster.
    pub fn cluster_options(&self) -> ClusterOptions {
        let mut options = ClusterOptions::default();
        options.pubsub = self.pubsub;
        options.tls = self.tls.clone();
        options
    }

    /// Options for a sentinel-managed master.
    pub fn sentinel_options(&self) -> SentinelOptions {
        let mut options = SentinelOptions::default();
        options.redis = self.redis_options();
        options
    }

    /// Where, for messages.
    pub fn describe(&self) -> String {
        match &self.endpoint {
            Endpoint::Memory => "embedded store".to_owned(),
            Endpoint::Redis(url) => format!("redis {url}"),
            Endpoint::Cluster(urls) => format!("cluster {}", urls.join(",")),
            Endpoint::Sentinel { sentinels, master } => {
                format!(
                    "redis master {master:?} of sentinels {}",
                    sentinels.join(",")
                )
            }
        }
    }

    /// Connect to the one server: `--redis`, or the master the sentinels name.
    ///
    /// # Errors
    ///
    /// Connection errors; [`InvalidInput`](tairlock::ErrorKind::InvalidInput) for a target
    /// that is not one server.
    pub async fn connect_redis(&self) -> tairlock::Result<RedisStore> {
        match &self.endpoint {
            Endpoint::Redis(url) => RedisStore::connect_with(url, self.redis_options()).await,
            Endpoint::Sentinel { sentinels, master } => {
                RedisStore::connect_sentinel(sentinels, master, self.sentinel_options()).await
            }
            _ => Err(tairlock::Error::new(
                tairlock::ErrorKind::InvalidInput,
                format!("{} is not one server", self.describe()),
            )),
        }
    }

    /// Connect to the cluster.
    ///
    /// # Errors
    ///
    /// Connection errors; [`InvalidInput`](tairlock::ErrorKind::InvalidInput) for a target
    /// that is not a cluster.
    pub async fn connect_cluster(&self) -> tairlock::Result<ClusterStore> {
        match &self.endpoint {
            Endpoint::Cluster(urls) => {
                ClusterStore::connect_with(urls, self.cluster_options()).await
            }
            _ => Err(tairlock::Error::new(
                tairlock::ErrorKind::InvalidInput,
                format!("{} is not a cluster", self.describe()),
            )),
        }
    }

    /// Connect and run `job` on the store.
    ///
    /// # Errors
    ///
    /// Connection errors; the job's.
    ///
    /// # Cancel safety
    ///
    /// As the job's.
    pub async fn on<J: StoreJob>(&self, job: J) -> tairlock::Result<J::Output> {
        match &self.endpoint {
            Endpoint::Memory => job.run(MemoryStore::new()).await,
            Endpoint::Cluster(_) => job.run(self.connect_cluster().await?).await,
            Endpoint::Redis(_) | Endpoint::Sentinel { .. } => {
                job.run(self.connect_redis().await?).await
            }
        }
    }
}
