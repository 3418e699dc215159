//! A [`RedisStore`](super::RedisStore) behind Redis Sentinel (the `sentinel` feature).
//!
//! [`RedisStore::connect_sentinel`](super::RedisStore::connect_sentinel) asks the sentinels, in the order given, for the master of a
//! name (`SENTINEL GET-MASTER-ADDR-BY-NAME`), connects to it and checks with `ROLE` that it is a
//! master. The store then works as on one server, and follows failovers:
//!
//! - The store keeps one subscription to `+switch-master` on a sentinel (the next one when it
//!   drops); when a sentinel announces a switch of its master, it asks the sentinels and moves
//!   every later command there. A demoted master accepts writes until Sentinel reconfigures it,
//!   seconds after the switch, so waiting for an error would not do.
//! - When a command fails without an answer (the connection dropped: Sentinel kills the clients
//!   of a demoted master) or with `READONLY` (a demoted master still addressed as one), the store
//!   also asks, in the background, and, if they name another master that says it is one, moves
//!   every later command there. The failed command's error is returned as it is: a plain command is
//!   never repeated (it may have run), while the lock kinds repeat their own scripts, which are
//!   safe to repeat, and [`lock`](crate::ExpireLock::lock) waits through the failover.
//! - The release notifications' pub/sub connection asks the sentinels for the master before
//!   every (re)connection, so after a failover the subscriptions are made again on the new
//!   master.
//!
//! What a failover keeps is Redis's replication's business: a lock written on the old master
//! and not yet replicated is lost with it. [`ReplicatedLock`](crate::ReplicatedLock) makes
//! acquisitions wait for replica acknowledgements, so the promoted replica has them.

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::RwLock;

use super::link::{Link, RedisOptions, connect_link};
use super::url::{is_tls_url, redact};
use crate::error::{Error, ErrorKind, Result};

/// How to reach the master that the sentinels name.
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct SentinelOptions {
    /// Timeouts and TLS settings, for the sentinels and the masters alike. The masters are
    /// reached over TLS when the first sentinel URL is `rediss://` (with its `#insecure`, if
    /// any).
    pub redis: RedisOptions,
    /// The master's ACL user (`None`: the default user).
    pub master_username: Option<String>,
    /// The master's password (`None`: no `AUTH`). Credentials in the sentinel URLs are the
    /// sentinels' own.
    pub master_password: Option<String>,
    /// The master's database.
    pub master_db: i64,
}

/// The sentinels of one master name.
pub(crate) struct Sentinels {
    clients: Vec<redis::Client>,
    urls: Vec<String>,
    master: String,
    /// `rediss` or `redis`, and `/#insecure` or nothing: how masters are reached.
    scheme: &'static str,
    fragment: &'static str,
    options: SentinelOptions,
    /// One look-up at a time; the time of the last one.
    refresh: tokio::sync::Mutex<Option<Instant>>,
}

/// Look-ups closer together than this are answered by the last one.
const MIN_REFRESH: Duration = Duration::from_millis(100);

impl Sentinels {
    /// The sentinels at `urls` of the master named `master`, and the connections to the master
    /// they name (checked to be one).
    pub(crate) async fn connect<S: AsRef<str>>(
        urls: &[S],
        master: &str,
        options: SentinelOptions,
    ) -> Result<(Arc<Self>, Link)> {
        let sentinels = Arc::new(Sentinels::new(urls, master, options)?);
        let link = sentinels.connect_master().await?;
        Ok((sentinels, link))
    }

    /// The timeouts and TLS settings for the sentinels and the masters.
    pub(crate) fn redis_options(&self) -> &RedisOptions {
        &self.options.redis
    }

    /// Start the [`watch`] of a store whose connections are in `cell` and whose notifier
    /// (once made) is in `notifier`; it ends when the store is dropped.
    pub(crate) fn start_watch(
        self: &Arc<Self>,
        cell: &Arc<RwLock<Arc<Link>>>,
        notifier: &Arc<tokio::sync::OnceCell<crate::notify::Notifier>>,
    ) {
        tokio::spawn(watch(
            Arc::downgrade(self),
            Arc::downgrade(cell),
            Arc::downgrade(notifier),
        ));
    }

    fn new<S: AsRef<str>>(urls: &[S], master: &str, options: SentinelOptions) -> Result<Self> {
        if urls.is_empty() {
            return Err(Error::invalid("Sentinel needs at least one sentinel URL"));
        }
        if master.is_empty() {
            return Err(Error::invalid("Sentinel needs a master name"));
        }
        let urls: Vec<String> = urls.iter().map(|u| u.as_ref().trim().to_owned()).collect();
        let clients = urls
            .iter()
            .map(|url| super::tls::client(url, &options.redis.tls))
            .collect::<Result<Vec<_>>>()?;
        let tls = is_tls_url(&urls[0]);
        Ok(Sentinels {
            clients,
            urls: urls.iter().map(|u| redact(u)).collect(),
            master: master.to_owned(),
            scheme: if tls { "rediss" } else { "redis" },
            fragment: if tls && urls[0].ends_with("#insecure") {
                "/#insecure"
            } else {
                ""
            },
            options,
            refresh: tokio::sync::Mutex::new(None),
        })
    }

    /// The master's address, from the first sentinel that knows it.
    async fn master_addr(&self) -> Result<(String, u16)> {
        let redis = &self.options.redis;
        let config = redis::AsyncConnectionConfig::new()
            .set_connection_timeout(Some(redis.connection_timeout))
            .set_response_timeout(Some(redis.response_timeout));
        let mut errors = Vec::new();
        for (client, url) in self.clients.iter().zip(&self.urls) {
            let asked = async {
                let mut con = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                redis::cmd("SENTINEL")
                    .arg("GET-MASTER-ADDR-BY-NAME")
                    .arg(&self.master)
                    .query_async::<Option<(String, u16)>>(&mut con)
                    .await
            };
            let bound = redis.connection_timeout + redis.response_timeout;
            match tokio::time::timeout(bound, asked).await {
                Ok(Ok(Some(addr))) => return Ok(addr),
                Ok(Ok(None)) => errors.push(format!("{url}: no master named {:?}", self.master)),
                Ok(Err(e)) => errors.push(format!("{url}: {e}")),
                Err(_) => errors.push(format!("{url}: no answer within {bound:?}")),
            }
        }
        Err(Error::new(
            ErrorKind::Connection,
            format!(
                "no sentinel named the master {:?}: {}",
                self.master,
                errors.join("; ")
            ),
        ))
    }

    /// A client for the master at `host:port`.
    fn master_client(&self, host: &str, port: u16) -> Result<redis::Client> {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        let url = format!("{}://{host}:{port}{}", self.scheme, self.fragment);
        let client = super::tls::client(&url, &self.options.redis.tls)?;
        let mut settings = client
            .get_connection_info()
            .redis_settings()
            .clone()
            .set_db(self.options.master_db);
        if let Some(user) = &self.options.master_username {
            settings = settings.set_username(user);
        }
        if let Some(password) = &self.options.master_password {
            settings = settings.set_password(password);
        }
        let info = client
            .get_connection_info()
            .clone()
            .set_redis_settings(settings);
        redis::Client::open(info)
            .map_err(|e| Error::invalid(format!("cannot make a client for {url}: {e}")))
    }

    /// Connect to the master the sentinels name, and check that it says it is one.
    async fn connect_master(&self) -> Result<Link> {
        let (host, port) = self.master_addr().await?;
        self.connect_at(&host, port).await
    }

    async fn connect_at(&self, host: &str, port: u16) -> Result<Link> {
        let client = self.master_client(host, port)?;
        let link = connect_link(client, &self.options.redis, &self.options.redis.tls).await?;
        let mut con = link.con.clone();
        let role: redis::Value = redis::cmd("ROLE").query_async(&mut con).await?;
        let is_master = matches!(&role, redis::Value::Array(items)
            if matches!(items.first(), Some(redis::Value::BulkString(r)) if r == b"master"));
        if !is_master {
            return Err(Error::new(
                ErrorKind::Connection,
                format!(
                    "the sentinels named {host}:{port} the master {:?}, but it is not a master \
                     (a failover in progress?)",
                    self.master
                ),
            ));
        }
        Ok(link)
    }

    /// Ask the sentinels for the master; if they name another one than `cell` holds and it
    /// answers as a master, put its connections in `cell`. Failures leave `cell` as it is (the
    /// next failed command asks again).
    ///
    /// True if it moved. Without `force`, returns at once when a look-up is in progress or the
    /// last one was under [`MIN_REFRESH`] ago; `force` (a sentinel announced a switch) waits
    /// for the look-up in progress and asks anyway.
    async fn follow_cell(&self, cell: &RwLock<Arc<Link>>, force: bool) -> bool {
        let before = cell.read().clone();
        let mut last = if force {
            self.refresh.lock().await
        } else {
            match self.refresh.try_lock() {
                Ok(last) => last,
                // A look-up is in progress: it will move the store if there is anywhere to go.
                Err(_) => return false,
            }
        };
        if !Arc::ptr_eq(&before, &cell.read()) {
            return false; // moved while we waited for the look-up in progress
        }
        if !force && last.is_some_and(|at| at.elapsed() < MIN_REFRESH) {
            return false;
        }
        *last = Some(Instant::now());
        let Ok((host, port)) = self.master_addr().await else {
            return false;
        };
        if same_addr(before.client.get_connection_info().addr(), &host, port) {
            return false;
        }
        match self.connect_at(&host, port).await {
            Ok(link) => {
                *cell.write() = Arc::new(link);
                true
            }
            Err(_) => false,
        }
    }

    /// After a failed command of the store whose connections are in `cell` and whose notifier
    /// (once made) is in `notifier`: see the [module docs](self).
    pub(crate) async fn follow(
        &self,
        cell: &RwLock<Arc<Link>>,
        notifier: &tokio::sync::OnceCell<crate::notify::Notifier>,
    ) {
        if self.follow_cell(cell, false).await
            && let Some(notifier) = notifier.get()
        {
            notifier.reconnect();
        }
    }

    /// What the notifier asks before each (re)connection: the current master's client, after
    /// asking the sentinels whether it is still the master. Holds the store's connections
    /// (`cell`) weakly: the notifier lives inside the store, and must not keep it alive.
    pub(crate) fn resolver(
        self: &Arc<Self>,
        cell: &Arc<RwLock<Arc<Link>>>,
    ) -> crate::notify::classic::Resolver {
        let cell: Weak<RwLock<Arc<Link>>> = Arc::downgrade(cell);
        let sentinels = Arc::downgrade(self);
        Arc::new(move || {
            let (cell, sentinels) = (cell.clone(), sentinels.clone());
            Box::pin(async move {
                let (cell, sentinels) = (cell.upgrade()?, sentinels.upgrade()?);
                sentinels.follow_cell(&cell, false).await;
                let client = cell.read().client.clone();
                Some(client)
            })
        })
    }
}

/// The store's watch on the sentinels: subscribed to `+switch-master` on one sentinel at a
/// time (the next one when it drops or stops answering a `PING`), it moves the store to the new
/// master as soon as a sentinel announces a switch of ours, rather than at the next failed
/// command: a demoted master accepts writes until Sentinel reconfigures it, seconds later. It
/// also asks once after every (re)subscription, for a switch announced while it was away. Ends
/// when the store is dropped.
async fn watch(
    sentinels: Weak<Sentinels>,
    cell: Weak<RwLock<Arc<Link>>>,
    notifier: Weak<tokio::sync::OnceCell<crate::notify::Notifier>>,
) {
    let check = |force: bool| {
        let (sentinels, cell, notifier) = (sentinels.clone(), cell.clone(), notifier.clone());
        async move {
            let (Some(sentinels), Some(cell)) = (sentinels.upgrade(), cell.upgrade()) else {
                return false;
            };
            if sentinels.follow_cell(&cell, force).await
                && let Some(notifier) = notifier.upgrade()
                && let Some(notifier) = notifier.get()
            {
                notifier.reconnect();
            }
            true
        }
    };
    let mut next = 0;
    let mut delay = Duration::from_millis(100);
    loop {
        let Some(me) = sentinels.upgrade() else {
            return;
        };
        let client = me.clients[next % me.clients.len()].clone();
        next += 1;
        let (connect, response) = (
            me.options.redis.connection_timeout,
            me.options.redis.response_timeout,
        );
        let master = me.master.clone();
        drop(me);
        let subscribed = async {
            let mut pubsub = tokio::time::timeout(connect, client.get_async_pubsub())
                .await
                .ok()?
                .ok()?;
            tokio::time::timeout(response, pubsub.subscribe("+switch-master"))
                .await
                .ok()?
                .ok()?;
            Some(pubsub)
        };
        let Some(pubsub) = subscribed.await else {
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(2));
            if cell.strong_count() == 0 {
                return;
            }
            continue;
        };
        delay = Duration::from_millis(100);
        if !check(true).await {
            return;
        }
        let (mut sink, mut stream) = pubsub.split();
        let mut idle = Duration::ZERO;
        loop {
            match tokio::time::timeout(Duration::from_secs(1), stream.next()).await {
                Ok(Some(msg)) => {
                    idle = Duration::ZERO;
                    // "<name> <old ip> <old port> <new ip> <new port>"
                    let payload: String = msg.get_payload().unwrap_or_default();
                    if payload.split(' ').next() == Some(master.as_str()) && !check(true).await {
                        return;
                    }
                }
                Ok(None) => break,
                Err(_) => {
                    if cell.strong_count() == 0 {
                        return;
                    }
                    idle += Duration::from_secs(1);
                    if idle >= Duration::from_secs(10) {
                        idle = Duration::ZERO;
                        let ping = sink.ping::<redis::Value>();
                        if !matches!(tokio::time::timeout(response, ping).await, Ok(Ok(_))) {
                            break;
                        }
                    }
                }
            }
        }
    }
}

fn same_addr(addr: &redis::ConnectionAddr, host: &str, port: u16) -> bool {
    match addr {
        redis::ConnectionAddr::Tcp(h, p) => h == host && *p == port,
        redis::ConnectionAddr::TcpTls {
            host: h, port: p, ..
        } => h == host && *p == port,
        _ => false,
    }
}
