//! The store on a real Redis (or Valkey) server.
//!
//! One multiplexed connection with reconnect (`redis::aio::ConnectionManager`): cheap to clone,
//! shared by every lock of a client. Scripts run by `EVALSHA`; when the server answers
//! `NOSCRIPT` (Redis 7+ forgets scripts on every restart, failover and `SCRIPT FLUSH`) the script
//! is loaded with `SCRIPT LOAD` and run again, which cannot double-apply it because `NOSCRIPT` is
//! answered before anything runs.
//!
//! A dropped connection is reported as an [`ErrorKind::Connection`](crate::ErrorKind) error and
//! the manager reconnects in the background; plain commands are not retried here (INCR is not
//! idempotent), while the lock kinds retry their own scripts, which are written to be safe to
//! repeat.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::RwLock;

use redis::aio::ConnectionManager;

use super::link::{Link, connect_link, describe, manager_config};
use super::{ReplicaStore, Store, Ttl};
use crate::error::{Error, Result};
use crate::script::{Packed, Reply, Script};

// Defined with the connections it configures; named here too, beside the store.
pub use super::link::RedisOptions;

/// The Redis store. See the [module docs](self).
///
/// A handle: one pointer, cloned by every lock handle and guard made from it, all sharing one
/// connection.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    /// The server's connections; replaced as a whole when Sentinel names a new master.
    link: Arc<RwLock<Arc<Link>>>,
    runtime: tokio::runtime::Handle,
    /// Set by [`RedisStore::blocking_connect`]: the runtime this store owns.
    _owned: Option<Arc<tokio::runtime::Runtime>>,
    notifier: Arc<tokio::sync::OnceCell<crate::notify::Notifier>>,
    options: RedisOptions,
    /// Whether releases use `DELIFEQ` (see [`Store::compare_and_delete`]), detected once.
    native: super::native::Native,
    /// Set by [`RedisStore::connect_sentinel`]: where to ask for the master after a failure.
    #[cfg(feature = "sentinel")]
    sentinel: Option<Arc<super::sentinel::Sentinels>>,
}

/// What a new store is made of besides its first connections.
struct Parts {
    runtime: tokio::runtime::Handle,
    owned: Option<Arc<tokio::runtime::Runtime>>,
    #[cfg(feature = "sentinel")]
    sentinel: Option<Arc<super::sentinel::Sentinels>>,
}

impl Parts {
    /// On the current runtime, nothing else.
    fn current() -> Self {
        Parts {
            runtime: tokio::runtime::Handle::current(),
            owned: None,
            #[cfg(feature = "sentinel")]
            sentinel: None,
        }
    }

    /// On `runtime`, which the store keeps alive (the `blocking_*` constructors' own).
    fn owning(runtime: &Arc<tokio::runtime::Runtime>) -> Self {
        Parts {
            runtime: runtime.handle().clone(),
            owned: Some(runtime.clone()),
            #[cfg(feature = "sentinel")]
            sentinel: None,
        }
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.inner.link.read().url)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connect to `url` (`redis://[user:pass@]host:port/db`, or `rediss://` for TLS with the
    /// `tls` feature) with default options.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for a malformed URL (or a
    /// `rediss://` one without the `tls` feature),
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the server cannot be reached
    /// or its TLS handshake fails (an untrusted certificate, a refused client certificate, a
    /// `redis://` URL to a TLS port).
    pub async fn connect(url: &str) -> Result<Self> {
        RedisStore::connect_with(url, RedisOptions::default()).await
    }

    /// Connect with explicit options.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect); also
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for TLS options with a
    /// `redis://` URL.
    pub async fn connect_with(url: &str, options: RedisOptions) -> Result<Self> {
        RedisStore::connect_parts(url, options, Parts::current()).await
    }

    async fn connect_parts(url: &str, options: RedisOptions, parts: Parts) -> Result<Self> {
        let client = super::tls::client(url, &options.tls)?;
        let link = connect_link(client, &options, &options.tls).await?;
        let link = Arc::new(RwLock::new(Arc::new(link)));
        Ok(RedisStore::assemble_with(link, options, parts))
    }

    /// Connect with a `redis::Client` the application built (its address, credentials, database,
    /// protocol and TLS settings are used as they are; `options.tls` is ignored).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Connection`](crate::ErrorKind::Connection) when the server cannot be reached.
    pub async fn from_client(client: redis::Client, options: RedisOptions) -> Result<Self> {
        let link = connect_link(client, &options, &Default::default()).await?;
        Ok(RedisStore::assemble(link, options))
    }

    /// Use a connection manager the application already has (its reconnect and timeout settings
    /// stay its own), with the `redis::Client` it was made from: that client makes the store's
    /// dedicated connections (release notifications, `WAIT`), with `options`' timeouts.
    ///
    /// Nothing is sent to the server.
    pub fn from_manager(
        con: ConnectionManager,
        client: redis::Client,
        options: RedisOptions,
    ) -> Self {
        let url = describe(&client);
        RedisStore::assemble(Link::new(con, client, url), options)
    }

    fn assemble(link: Link, options: RedisOptions) -> Self {
        RedisStore::assemble_with(
            Arc::new(RwLock::new(Arc::new(link))),
            options,
            Parts::current(),
        )
    }

    fn assemble_with(link: Arc<RwLock<Arc<Link>>>, options: RedisOptions, parts: Parts) -> Self {
        RedisStore {
            inner: Arc::new(Inner {
                link,
                runtime: parts.runtime,
                _owned: parts.owned,
                notifier: Default::default(),
                options,
                native: Default::default(),
                #[cfg(feature = "sentinel")]
                sentinel: parts.sentinel,
            }),
        }
    }

    /// The current server's connections.
    pub(crate) fn link(&self) -> Arc<Link> {
        self.inner.link.read().clone()
    }

    /// After a failed command: with Sentinel, a dropped connection or a `READONLY` answer may
    /// mean a failover, so ask the sentinels for the master, in the background, and move there
    /// if it changed. The error is returned at once, as it is (a command is never repeated
    /// here); a caller that tries again a moment later finds the new master.
    async fn after<T>(&self, result: Result<T>) -> Result<T> {
        #[cfg(feature = "sentinel")]
        if let (Err(e), Some(sentinel)) = (&result, &self.inner.sentinel)
            && (e.is_unanswered() || e.code() == Some("READONLY"))
        {
            let (sentinel, store) = (sentinel.clone(), self.clone());
            self.inner.runtime.spawn(async move {
                sentinel
                    .follow(&store.inner.link, &store.inner.notifier)
                    .await
            });
        }
        result
    }

    /// Connect from blocking code: the store owns a small multi-thread runtime (one worker) that
    /// drives its connection, and the `blocking_*` methods of every lock kind run on it.
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime (use [`connect`](Self::connect) there).
    #[track_caller]
    pub fn blocking_connect(url: &str) -> Result<Self> {
        RedisStore::blocking_connect_with(url, RedisOptions::default())
    }

    /// Blocking twin of [`connect_with`](Self::connect_with), with its own runtime as
    /// [`blocking_connect`](Self::blocking_connect).
    ///
    /// # Errors
    ///
    /// As [`connect`](Self::connect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_connect_with(url: &str, options: RedisOptions) -> Result<Self> {
        let runtime = owned_runtime()?;
        crate::blocking::block_on(
            Some(runtime.handle().clone()),
            "RedisStore::blocking_connect",
            RedisStore::connect_parts(url, options, Parts::owning(&runtime)),
        )
    }

    /// The `redis` client this store connects with, for dedicated connections (`WATCH`
    /// transactions, pub/sub) that must not share the multiplexed one. Behind Sentinel, the
    /// current master's (another one after a failover).
    pub fn client(&self) -> redis::Client {
        self.link().client.clone()
    }

    /// The server's address (`redis[s]://[user@]host:port/db`), without any password. Behind
    /// Sentinel, the current master's.
    pub fn url(&self) -> String {
        self.link().url.clone()
    }

    /// Send any command (for tools and tests: `INFO`, `SCRIPT FLUSH`, ...).
    ///
    /// # Errors
    ///
    /// Whatever the server answers.
    pub async fn command<T: redis::FromRedisValue>(&self, cmd: &redis::Cmd) -> Result<T> {
        let mut con = self.link().con.clone();
        let result = cmd.query_async(&mut con).await.map_err(Error::from);
        self.after(result).await
    }

    /// `SCRIPT LOAD` every given script now, so the first lock operation does not pay for it.
    ///
    /// # Errors
    ///
    /// Whatever the server answers.
    pub async fn preload(&self, scripts: &[&'static Script]) -> Result<()> {
        for script in scripts {
            let mut con = self.link().con.clone();
            let loaded = script.redis().prepare_invoke().load_async(&mut con).await;
            self.after(loaded.map_err(Error::from)).await?;
        }
        Ok(())
    }
}

impl Store for RedisStore {
    fn single_shard(&self) -> bool {
        true
    }

    super::commands::plain_commands!();

    async fn time(&self) -> Result<Duration> {
        let (secs, micros): (u64, u64) = self.command(&redis::cmd("TIME")).await?;
        super::server_time(secs, micros)
    }

    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        let mut con = self.link().con.clone();
        let value = super::commands::eval_sha(&mut con, script, keys, args).await;
        let value = self.after(value.map_err(Error::from)).await?;
        Ok(Reply::from(value))
    }

    async fn eval_packed(
        &self,
        script: &'static Script,
        keys: &Packed,
        args: &Packed,
    ) -> Result<Reply> {
        let mut con = self.link().con.clone();
        let value = super::commands::eval_sha_packed(&mut con, script, keys, args).await;
        let value = self.after(value.map_err(Error::from)).await?;
        Ok(Reply::from(value))
    }

    async fn compare_and_delete(&self, keys: &[String], args: &[String]) -> Result<Reply> {
        let mut con = self.link().con.clone();
        if let (Some(lock), Some(lease)) = (keys.first(), args.first())
            && self.inner.native.delifeq(&mut con).await
        {
            let released = super::native::release(
                &self.inner.native,
                &mut con,
                lock,
                lease,
                args.get(1).map(String::as_str),
                args.get(2).map(String::as_str),
            )
            .await;
            match released {
                super::native::Outcome::Deleted => return Ok(Reply::Int(1)),
                super::native::Outcome::Unanswered(e) | super::native::Outcome::Transient(e) => {
                    return self.after(Err(e)).await;
                }
                super::native::Outcome::Script => {}
            }
        }
        self.eval(&crate::scripts::EXPIRE_UNLOCK, keys, args).await
    }

    async fn notifier(&self) -> Option<crate::notify::Notifier> {
        // One pub/sub connection per store handle (and its clones), made in the background on
        // first use (nothing here waits for the server). While it cannot be made, waiters
        // poll, bounded by the holder's remaining time.
        let timeouts = crate::notify::Timeouts {
            connect: self.inner.options.connection_timeout,
            response: self.inner.options.response_timeout,
        };
        Some(
            self.inner
                .notifier
                .get_or_init(|| async {
                    #[cfg(feature = "sentinel")]
                    if let Some(sentinel) = &self.inner.sentinel {
                        // Each (re)connection asks the sentinels for the master first, so a
                        // failover moves the subscriptions to the new master.
                        return crate::notify::Notifier::redis_resolved(
                            sentinel.resolver(&self.inner.link),
                            timeouts,
                            self.runtime(),
                        );
                    }
                    crate::notify::Notifier::redis(
                        vec![self.link().client.clone()],
                        timeouts,
                        self.runtime(),
                    )
                })
                .await
                .clone(),
        )
    }

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        Some(self.inner.runtime.clone())
    }
}

impl ReplicaStore for RedisStore {
    async fn eval_wait(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
        wait: super::WaitFor,
    ) -> Result<(Reply, super::Acks)> {
        let link = self.link();
        let con = link
            .wait_con
            .get_or_try_init(|| async {
                // No response timeout of its own: `WAIT` may take as long as it was told to, and
                // `run_wait_pipeline` bounds it.
                let config = manager_config(&self.inner.options).set_response_timeout(None);
                ConnectionManager::new_with_config(link.client.clone(), config).await
            })
            .await;
        let mut con = self.after(con.cloned().map_err(Error::from)).await?;
        let pipe = super::wait_pipeline(script, keys, args, &wait);
        let result = super::run_wait_pipeline(&mut con, pipe, &wait).await;
        self.after(result).await
    }
}

impl RedisStore {
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

    /// Connect to the master that these sentinels (`redis://host:port` each, usually port 26379)
    /// name `master`, and follow it through failovers (see [`sentinel`](super::sentinel)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) for no sentinel URL or a
    /// malformed one; [`ErrorKind::Connection`](crate::ErrorKind::Connection) when no sentinel
    /// answers, none knows `master`, or the server they name cannot be reached or is not a
    /// master.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    pub async fn connect_sentinel<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
        options: super::sentinel::SentinelOptions,
    ) -> Result<Self> {
        RedisStore::connect_sentinel_parts(sentinels, master, options, Parts::current()).await
    }

    #[cfg(feature = "sentinel")]
    async fn connect_sentinel_parts<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
        options: super::sentinel::SentinelOptions,
        parts: Parts,
    ) -> Result<Self> {
        let (sentinels, link) =
            super::sentinel::Sentinels::connect(sentinels, master, options).await?;
        let parts = Parts {
            sentinel: Some(sentinels.clone()),
            ..parts
        };
        let link = Arc::new(RwLock::new(Arc::new(link)));
        let store = RedisStore::assemble_with(link, sentinels.redis_options().clone(), parts);
        sentinels.start_watch(&store.inner.link, &store.inner.notifier);
        Ok(store)
    }

    /// Blocking twin of [`connect_sentinel`](Self::connect_sentinel), with its own runtime as
    /// [`blocking_connect`](Self::blocking_connect) (the Sentinel watch runs on it).
    ///
    /// # Errors
    ///
    /// As [`connect_sentinel`](Self::connect_sentinel).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[cfg(feature = "sentinel")]
    #[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
    #[track_caller]
    pub fn blocking_connect_sentinel<S: AsRef<str>>(
        sentinels: &[S],
        master: &str,
        options: super::sentinel::SentinelOptions,
    ) -> Result<Self> {
        let runtime = owned_runtime()?;
        crate::blocking::block_on(
            Some(runtime.handle().clone()),
            "RedisStore::blocking_connect_sentinel",
            RedisStore::connect_sentinel_parts(sentinels, master, options, Parts::owning(&runtime)),
        )
    }
}

/// The small multi-thread runtime (one worker) a store made by a `blocking_connect` owns.
pub(crate) fn owned_runtime() -> Result<Arc<tokio::runtime::Runtime>> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("tairlock-io")
        .enable_all()
        .build()
        .map(Arc::new)
        .map_err(|e| {
            Error::new(
                crate::ErrorKind::Connection,
                format!("cannot start the I/O runtime: {e}"),
            )
        })
}
