//! The store on a Redis Cluster.
//!
//! One `redis::cluster_async::ClusterConnection` (cheap to clone, shared by every lock of a
//! client): it learns the slot map from the seed nodes, sends each command to the master of its
//! key's slot, follows `MOVED`/`ASK` redirections and retries `TRYAGAIN`/`CLUSTERDOWN` while a slot
//! migrates or a failover completes. Scripts run by `EVALSHA`, routed by their first key; on
//! `NOSCRIPT` the script is loaded on every node and run again.
//!
//! # Hash slots
//!
//! Every multi-key script of every lock kind declares keys under one hash tag
//! (`<prefix>{name}…`), so they live in one slot and never meet `CROSSSLOT`. [`ClusterStore`]
//! checks that before sending ([`check_one_slot`](crate::slot::check_one_slot)) and answers
//! [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) instead of a server error when a
//! caller's own keys would not.
//!
//! # Release notifications
//!
//! On Redis 7.0 and later (found out at connect with `COMMAND INFO SPUBLISH`, or forced with
//! [`ClusterOptions::pubsub`]) releases are announced with **sharded pub/sub**: the release
//! scripts `SPUBLISH` on the lock's channel, which shares the lock's hash tag and slot, so the
//! message stays within that shard; the store's [`Notifier`](crate::notify::Notifier)
//! `SSUBSCRIBE`s on the master of each watched channel's slot and follows the channel when its
//! slot moves (details in [`notify`](crate::notify)).
//!
//! The question goes to one node. During a rolling upgrade the nodes may differ: a release
//! script asked to `SPUBLISH` on a node without it announces with `PUBLISH` instead (the release
//! itself never fails for it), and waiters that listen the other way wait out the holder's
//! lease.
//!
//! On older servers they use classic `PUBLISH`, which the cluster broadcasts to every node, and
//! the notifier is one ordinary pub/sub connection to the first seed node that answers. If that
//! node goes away, waiters fall back to timed retries (bounded by the holder's remaining lease)
//! while the subscriber reconnects, to the next seed node in turn.
//!
//! Either way the notifier's connection is made in the background on first use, and a waiter
//! waits for it (and for its subscription) only within its own patience and
//! [`SUBSCRIBE_LIMIT`](crate::notify::SUBSCRIBE_LIMIT).
//!
//! Every client of one lock must announce the same way (they do when they run against the same
//! cluster with the same setting): a waiter subscribed one way does not hear releases announced
//! the other way, and then waits for the holder's lease to end instead.
//!
//! # Not guaranteed
//!
//! Redis Cluster replicates asynchronously: a lock written on a master that fails before its
//! replica has the write is lost on failover, exactly as with one master and a replica. See
//! [`ReplicatedLock`](crate::replicated::ReplicatedLock) for acquisitions that wait for replicas.

use std::fmt;
use std::time::Duration;

use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;

use super::{Store, Ttl};
use crate::error::{Error, Result};
use crate::notify::PubSub;
use crate::script::{Packed, Reply, Script};

/// Connection settings for [`ClusterStore`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ClusterOptions {
    /// How long one command may take on one node before it fails with a timeout.
    pub response_timeout: Duration,
    /// How long one connection attempt may take.
    pub connection_timeout: Duration,
    /// How many times a command is retried on `MOVED`/`ASK`/`TRYAGAIN`/`CLUSTERDOWN` or a
    /// connection error.
    pub retries: u32,
    /// How releases are announced and heard; `None` (the default) picks
    /// [`PubSub::Sharded`] when the server knows `SPUBLISH` (Redis 7.0+) and
    /// [`PubSub::Classic`] otherwise.
    pub pubsub: Option<PubSub>,
    /// The CA and client certificate of `rediss://` seed URLs (see
    /// [`TlsOptions`](super::TlsOptions)); every node is reached the same way.
    pub tls: super::TlsOptions,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(2),
            retries: 8,
            pubsub: None,
            tls: super::TlsOptions::default(),
        }
    }
}

/// The Redis Cluster store. See the [module docs](self).
#[derive(Clone)]
pub struct ClusterStore {
    con: ClusterConnection,
    /// A second connection for commands that block their node connection (`WAIT`), with no
    /// response timeout of its own (callers bound it).
    blocking_con: ClusterConnection,
    runtime: tokio::runtime::Handle,
    urls: Vec<String>,
    options: ClusterOptions,
    /// How releases are announced, decided at connect.
    pubsub: PubSub,
    notifier: std::sync::Arc<tokio::sync::OnceCell<crate::notify::Notifier>>,
    /// The application's settings, applied to every cluster client the store builds.
    customize: Option<Customize>,
    /// The runtime a [`blocking_connect`](Self::blocking_connect)ed store owns.
    owned: Option<std::sync::Arc<tokio::runtime::Runtime>>,
}

/// See [`ClusterStore::connect_customized`].
type Customize = std::sync::Arc<
    dyn Fn(redis::cluster::ClusterClientBuilder) -> redis::cluster::ClusterClientBuilder
        + Send
        + Sync,
>;

impl fmt::Debug for ClusterStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterStore")
            .field("urls", &self.urls)
            .finish_non_exhaustive()
    }
}

impl ClusterStore {
    /// Connect to the cluster that these seed nodes belong to (`redis://host:port` each; any
    /// subset of the nodes will do) with default options.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for no URL or a malformed one,
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no seed node answers.
    pub async fn connect<S: AsRef<str>>(urls: &[S]) -> Result<Self> {
        ClusterStore::connect_with(urls, ClusterOptions::default()).await
    }

    /// Connect with explicit options.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_with<S: AsRef<str>>(urls: &[S], options: ClusterOptions) -> Result<Self> {
        ClusterStore::open(urls, options, None, None).await
    }

    /// Connect with the application's own cluster client settings: `customize` is applied to
    /// every `redis` cluster client builder the store makes (its command connection, its
    /// connection for `WAIT`, its sharded pub/sub connection), after the store's own settings
    /// from `options`, so it can add credentials providers, TCP settings, a DNS resolver and
    /// the like, or override the store's timeouts (the `WAIT` connection's response timeout is
    /// set after it: `WAIT` may take as long as it was told to).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    pub async fn connect_customized<S, F>(
        urls: &[S],
        options: ClusterOptions,
        customize: F,
    ) -> Result<Self>
    where
        S: AsRef<str>,
        F: Fn(redis::cluster::ClusterClientBuilder) -> redis::cluster::ClusterClientBuilder
            + Send
            + Sync
            + 'static,
    {
        ClusterStore::open(urls, options, Some(std::sync::Arc::new(customize)), None).await
    }

    /// Use a cluster connection the application already has for every command; the seed URLs
    /// and `options` make the store's own dedicated connections (`WAIT`, release
    /// notifications, [`node_client`](Self::node_client)).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect) (the store's `WAIT` connection is made here).
    pub async fn from_connection<S: AsRef<str>>(
        con: ClusterConnection,
        urls: &[S],
        options: ClusterOptions,
    ) -> Result<Self> {
        ClusterStore::open(urls, options, None, Some(con)).await
    }

    async fn open<S: AsRef<str>>(
        urls: &[S],
        options: ClusterOptions,
        customize: Option<Customize>,
        con: Option<ClusterConnection>,
    ) -> Result<Self> {
        let urls: Vec<String> = urls.iter().map(|u| u.as_ref().to_owned()).collect();
        if urls.is_empty() {
            return Err(Error::invalid(
                "a cluster store needs at least one seed URL",
            ));
        }
        let redacted: Vec<String> = urls.iter().map(|u| super::url::redact(u)).collect();
        // Checks each URL against the TLS options (and installs the TLS crypto provider).
        for url in &urls {
            super::tls::client(url, &options.tls)?;
        }
        let build = |response_timeout: Option<Duration>| {
            let mut b = builder(
                &urls,
                &options,
                options.response_timeout,
                customize.as_ref(),
            );
            if let Some(timeout) = response_timeout {
                b = b.response_timeout(timeout);
            }
            b.build()
                .map_err(|e| Error::invalid(format!("bad cluster urls {redacted:?}: {e}")))
        };
        let connect = |client: ClusterClient| {
            let redacted = redacted.clone();
            async move {
                client.get_async_connection().await.map_err(|e| {
                    let e = Error::from(e);
                    let hint = super::tls::refusal_hint(e.message()).unwrap_or("");
                    Error::new(
                        e.kind(),
                        format!(
                            "cannot connect to cluster {redacted:?}: {}{hint}",
                            e.message()
                        ),
                    )
                })
            }
        };
        let con = match con {
            Some(con) => con,
            None => connect(build(None)?).await?,
        };
        // `WAIT` may legitimately take as long as its own timeout: the caller bounds it.
        let blocking_con = connect(build(Some(Duration::from_secs(24 * 3600)))?).await?;
        let pubsub = match options.pubsub {
            Some(pubsub) => pubsub,
            None => detect_pubsub(&con).await?,
        };
        Ok(ClusterStore {
            con,
            blocking_con,
            runtime: tokio::runtime::Handle::current(),
            urls,
            options,
            pubsub,
            notifier: Default::default(),
            customize,
            owned: None,
        })
    }

    /// Blocking twin of [`connect`](Self::connect): the store owns a small multi-thread runtime
    /// (one worker) that drives its connections, as
    /// [`RedisStore::blocking_connect`](crate::RedisStore::blocking_connect)'s does.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_connect<S: AsRef<str>>(urls: &[S]) -> Result<Self> {
        ClusterStore::blocking_connect_with(urls, ClusterOptions::default())
    }

    /// Blocking twin of [`connect_with`](Self::connect_with).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_connect_with<S: AsRef<str>>(
        urls: &[S],
        options: ClusterOptions,
    ) -> Result<Self> {
        let runtime = super::redis::owned_runtime()?;
        let mut store = crate::blocking::block_on(
            Some(runtime.handle().clone()),
            "ClusterStore::blocking_connect",
            ClusterStore::connect_with(urls, options),
        )?;
        store.owned = Some(runtime);
        Ok(store)
    }

    /// The seed URLs, with any password removed.
    pub fn urls(&self) -> Vec<String> {
        self.urls.iter().map(|u| super::url::redact(u)).collect()
    }

    /// Send any command, routed by the `redis` crate's cluster rules (by key; keyless commands
    /// to a random node or to all of them, depending on the command).
    ///
    /// # Errors
    ///
    /// Whatever the server answers.
    pub async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut con = self.con.clone();
        Ok(cmd.query_async(&mut con).await?)
    }

    /// `SCRIPT LOAD` every given script on every node now.
    ///
    /// # Errors
    ///
    /// Whatever the servers answer.
    pub async fn preload(&self, scripts: &[&'static Script]) -> Result<()> {
        for script in scripts {
            let mut con = self.con.clone();
            script.redis().prepare_invoke().load_async(&mut con).await?;
        }
        Ok(())
    }
}

/// A cluster client builder for `urls` with `options` and this response timeout.
fn builder(
    urls: &[String],
    options: &ClusterOptions,
    response_timeout: Duration,
    customize: Option<&Customize>,
) -> redis::cluster::ClusterClientBuilder {
    let builder = ClusterClient::builder(urls.iter().map(String::as_str))
        .response_timeout(response_timeout)
        .connection_timeout(options.connection_timeout)
        .retries(options.retries)
        .min_retry_wait(10)
        .max_retry_wait(500);
    #[cfg(feature = "tls")]
    let builder = if options.tls.is_default() {
        builder
    } else {
        builder.certs(super::tls::certificates(&options.tls))
    };
    match customize {
        Some(customize) => customize(builder),
        None => builder,
    }
}

/// Sharded pub/sub if the cluster's servers know `SPUBLISH` (Redis 7.0+), else classic; classic
/// too when `COMMAND INFO` itself is refused (an ACL, a renamed command): only a connection
/// failure is an error.
async fn detect_pubsub(con: &ClusterConnection) -> Result<PubSub> {
    let mut con = con.clone();
    let info: redis::Value = match redis::cmd("COMMAND")
        .arg("INFO")
        .arg("SPUBLISH")
        .query_async(&mut con)
        .await
    {
        Ok(info) => info,
        Err(e) => {
            let e = Error::from(e);
            if e.is_unanswered() {
                return Err(e);
            }
            return Ok(PubSub::Classic);
        }
    };
    let known = matches!(&info, redis::Value::Array(items)
        if items.first().is_some_and(|i| !matches!(i, redis::Value::Nil)));
    Ok(if known {
        PubSub::Sharded
    } else {
        PubSub::Classic
    })
}

impl Store for ClusterStore {
    super::commands::plain_commands!();

    async fn time(&self) -> Result<Duration> {
        // Keyless: answered by a random node. Scripts read the clock of their own key's master.
        let (secs, micros): (u64, u64) = self.command(&redis::cmd("TIME")).await?;
        super::server_time(secs, micros)
    }

    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        crate::slot::check_one_slot(keys)?;
        let mut con = self.con.clone();
        let value = super::commands::eval_sha(&mut con, script, keys, args).await?;
        Ok(Reply::from(value))
    }

    async fn eval_packed(
        &self,
        script: &'static Script,
        keys: &Packed,
        args: &Packed,
    ) -> Result<Reply> {
        crate::slot::check_one_slot_of(keys.iter())?;
        let mut con = self.con.clone();
        let value = super::commands::eval_sha_packed(&mut con, script, keys, args).await?;
        Ok(Reply::from(value))
    }

    fn pubsub(&self) -> PubSub {
        self.pubsub
    }

    async fn notifier(&self) -> Option<crate::notify::Notifier> {
        // The notifier's task runs on the store's runtime, not on whichever runtime first
        // needed it (which may shut down first).
        let timeouts = crate::notify::Timeouts {
            connect: self.options.connection_timeout,
            response: self.options.response_timeout,
        };
        self.notifier
            .get_or_try_init(|| async {
                if self.pubsub == PubSub::Sharded {
                    let builder = builder(
                        &self.urls,
                        &self.options,
                        self.options.response_timeout,
                        self.customize.as_ref(),
                    );
                    return crate::notify::Notifier::sharded(builder, timeouts, self.runtime());
                }
                // One classic connection, to the first seed node that answers (made in the
                // background; the next seed when it drops).
                let clients = self
                    .urls
                    .iter()
                    .map(|url| super::tls::client(url, &self.options.tls))
                    .collect::<Result<Vec<_>>>()?;
                if clients.is_empty() {
                    return Err(Error::invalid("no seed URL"));
                }
                Ok(crate::notify::Notifier::redis(
                    clients,
                    timeouts,
                    self.runtime(),
                ))
            })
            .await
            .ok()
            .cloned()
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        Some(self.runtime.clone())
    }
}

impl super::ReplicaStore for ClusterStore {
    async fn eval_wait(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
        wait: super::WaitFor,
    ) -> Result<(Reply, super::Acks)> {
        crate::slot::check_one_slot(keys)?;
        if keys.is_empty() {
            return Err(Error::invalid(
                "eval_wait needs a key: it routes the pipeline to that key's master",
            ));
        }
        // One pipeline, routed as a whole to the master of its first keyed command: the script
        // and the WAIT that follows it run on the same node connection, so WAIT counts the
        // replicas that have the script's writes. After an I/O error the cluster client resends
        // the whole pipeline on a new connection; a repeated acquire or renewal then writes
        // (it re-applies the key's expiry), so that WAIT too waits for the grant.
        let pipe = super::wait_pipeline(script, keys, args, &wait);
        let mut con = self.blocking_con.clone();
        super::run_wait_pipeline(&mut con, pipe, &wait).await
    }
}

/// Dedicated connections to one node, for state that lives on one server connection.
///
/// The shared cluster connection routes each command by its own key, so two commands of one
/// caller may travel on different node connections, and a `WATCH`, a `MULTI` block or client
/// tracking set up through it applies to no connection the caller controls. Callers that need
/// such state (the legacy crate's `WatchLock` on a cluster) open a connection of their own to
/// the node that owns the keys, with the client this gives them.
impl ClusterStore {
    /// A `redis` client for the node at `host:port`, as the cluster names it (`CLUSTER SLOTS`,
    /// a `MOVED` reply), connecting the way the cluster client does: with the first seed URL's
    /// scheme and TLS settings, username, password and protocol, on database 0. An empty host
    /// (what a node may report for itself when it does not know its own address) stands for the
    /// first seed URL's host.
    ///
    /// Nothing is sent until the caller connects; the caller owns the connection, its timeouts
    /// and its lifetime.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) when the first seed URL is a
    /// Unix socket or does not parse (neither happens for a store that connected: the cluster
    /// client accepts only TCP seed URLs).
    pub fn node_client(&self, host: &str, port: u16) -> Result<redis::Client> {
        use redis::ConnectionAddr;
        let seed = self
            .urls
            .first()
            .ok_or_else(|| Error::invalid("a cluster store needs at least one seed URL"))?;
        let info = super::tls::client(seed, &self.options.tls)?
            .get_connection_info()
            .clone();
        let addr = match info.addr() {
            ConnectionAddr::Tcp(seed_host, _) => ConnectionAddr::Tcp(
                if host.is_empty() { seed_host } else { host }.to_owned(),
                port,
            ),
            ConnectionAddr::TcpTls {
                host: seed_host,
                insecure,
                tls_params,
                ..
            } => ConnectionAddr::TcpTls {
                host: if host.is_empty() { seed_host } else { host }.to_owned(),
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => {
                return Err(Error::invalid(format!(
                    "seed url {} is not a TCP address",
                    super::url::redact(seed)
                )));
            }
        };
        let settings = info.redis_settings().clone().set_db(0);
        let info = info.set_addr(addr).set_redis_settings(settings);
        redis::Client::open(info).map_err(|e| {
            Error::invalid(format!("cannot make a client for node {host}:{port}: {e}"))
        })
    }
}

impl ClusterStore {
    /// Blocking twin of [`command`](Self::command).
    ///
    /// # Errors
    ///
    /// As [`command`](Self::command).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        crate::blocking::block_on(
            crate::Store::runtime(self),
            "blocking_command",
            self.command(cmd),
        )
    }

    /// Blocking twin of [`preload`](Self::preload).
    ///
    /// # Errors
    ///
    /// As [`preload`](Self::preload).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_preload(&self, scripts: &[&'static Script]) -> Result<()> {
        crate::blocking::block_on(
            crate::Store::runtime(self),
            "blocking_preload",
            self.preload(scripts),
        )
    }
}
