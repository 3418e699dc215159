//! The flags several commands share: how to reach the servers ([`ConnArgs`], [`PubSubArg`]),
//! and a lock's key with its server ([`KeyArgs`], for `inspect` and `unlock`).

use clap::Args;
use tairlock::Keyspace;
use tairlock::store::TlsOptions;

use crate::target::{Endpoint, Target};

/// A lock's key and where it lives: the flags of `inspect` and `unlock`.
#[derive(Args, Debug)]
pub struct KeyArgs {
    /// The lock name (e.g. orders:42) or its full key (e.g. 'tairlock:{orders:42}').
    pub(crate) key: String,
    /// The Redis server.
    #[arg(long, env = "TAIRLOCK_REDIS", default_value = "redis://127.0.0.1:6379")]
    pub(crate) redis: String,
    /// A Redis Cluster instead of one server, given seed node URLs (comma-separated or
    /// repeated); overrides --redis.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub(crate) cluster: Vec<String>,
    /// How a forced unlock announces the release on the cluster (it must match the waiters'):
    /// `auto` (sharded pub/sub on Redis 7.0+, classic before), `classic` or `sharded`.
    #[arg(long, value_enum, default_value = "auto", requires = "cluster")]
    pub(crate) pubsub: PubSubArg,
    /// Key prefix of the locks.
    #[arg(long, default_value = tairlock::keys::DEFAULT_PREFIX)]
    pub(crate) prefix: String,
    /// Print JSON.
    #[arg(long)]
    pub(crate) json: bool,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
}

/// How to reach the servers: TLS files and Sentinel (every command that talks to Redis).
#[derive(Args, Debug, Clone, Default)]
pub struct ConnArgs {
    /// CA certificate (PEM) that rediss:// servers must be signed by, instead of the system's
    /// trust store.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for servers that require one (`tls-auth-clients yes`); with
    /// --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM); with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Find the master through these sentinels (comma-separated or repeated; with --master)
    /// instead of --redis. rediss:// sentinels mean TLS masters too.
    #[arg(long, value_delimiter = ',', num_args = 1.., requires = "master")]
    sentinel: Vec<String>,
    /// The master's name, as the sentinels know it (with --sentinel).
    #[arg(long, requires = "sentinel")]
    master: Option<String>,
}

impl ConnArgs {
    /// Whether the master is found through sentinels (--sentinel with --master).
    pub(crate) fn sentinel_given(&self) -> bool {
        !self.sentinel.is_empty() && self.master.is_some()
    }

    /// These flags as command-line arguments, to repeat them in another command.
    pub(crate) fn flags(&self) -> Vec<String> {
        let mut out = Vec::new();
        let files = [
            ("--tls-ca", &self.tls_ca),
            ("--tls-cert", &self.tls_cert),
            ("--tls-key", &self.tls_key),
        ];
        for (flag, file) in files {
            if let Some(file) = file {
                out.push(flag.to_owned());
                out.push(file.display().to_string());
            }
        }
        if let (true, Some(master)) = (self.sentinel_given(), &self.master) {
            out.push("--sentinel".to_owned());
            out.push(self.sentinel.join(","));
            out.push("--master".to_owned());
            out.push(master.clone());
        }
        out
    }

    fn tls(&self) -> tairlock::Result<TlsOptions> {
        let mut tls = TlsOptions::default();
        if let Some(ca) = &self.tls_ca {
            tls = tls.ca_file(ca)?;
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls.client_auth_files(cert, key)?;
        }
        Ok(tls)
    }

    /// The one target these flags and `servers` name: the sentinels' master, else a cluster,
    /// else one server, else the embedded store. --sentinel picks the one server itself: it is
    /// refused with the flags in `others` that pick others.
    pub(crate) fn target(
        &self,
        redis: Option<&str>,
        cluster: &[String],
        pubsub: PubSubArg,
        others: &[(&str, bool)],
    ) -> Result<Target, String> {
        let tls = self.tls().map_err(|e| e.to_string())?;
        let endpoint = match &self.master {
            Some(master) if !self.sentinel.is_empty() => {
                if let Some((flag, _)) = others.iter().find(|(_, given)| *given) {
                    return Err(format!("--sentinel cannot be combined with {flag}"));
                }
                Endpoint::Sentinel {
                    sentinels: self.sentinel.clone(),
                    master: master.clone(),
                }
            }
            _ if !cluster.is_empty() => Endpoint::Cluster(cluster.to_vec()),
            _ => match redis {
                Some(url) => Endpoint::Redis(url.to_owned()),
                None => Endpoint::Memory,
            },
        };
        Ok(Target {
            endpoint,
            tls,
            pubsub: pubsub.choice(),
        })
    }
}

/// `--pubsub`: how releases are announced on a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PubSubArg {
    /// Sharded pub/sub where the servers have it (Redis 7.0+), else classic.
    Auto,
    /// `PUBLISH`/`SUBSCRIBE`.
    Classic,
    /// `SPUBLISH`/`SSUBSCRIBE`.
    Sharded,
}

impl PubSubArg {
    fn choice(self) -> Option<tairlock::notify::PubSub> {
        match self {
            PubSubArg::Auto => None,
            PubSubArg::Classic => Some(tairlock::notify::PubSub::Classic),
            PubSubArg::Sharded => Some(tairlock::notify::PubSub::Sharded),
        }
    }
}

impl KeyArgs {
    /// The target of `inspect` and `unlock`: --redis always has a value there.
    pub(crate) fn target(&self) -> Result<Target, String> {
        self.conn.target(
            Some(&self.redis),
            &self.cluster,
            self.pubsub,
            &[("--cluster", !self.cluster.is_empty())],
        )
    }
}

/// The keyspace and name of a key argument, or a usage error.
pub(crate) fn keyspace_of(prefix: String, name: &str) -> Result<Keyspace, String> {
    Keyspace::new(prefix)
        .and_then(|k| Keyspace::validate(name).map(|()| k))
        .map_err(|e| e.to_string())
}
