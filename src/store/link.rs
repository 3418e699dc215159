//! The connections to one Redis server and how they are made: the settings, the connect, the
//! name a server is shown by. [`RedisStore`](super::RedisStore) holds one [`Link`] and the
//! Sentinel follower replaces it after a failover, so both build on this file.

use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};

use super::tls::TlsOptions;
use super::url::is_tls_url;
use crate::error::{Error, Result};

/// Connection settings for [`RedisStore`](super::RedisStore).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct RedisOptions {
    /// How long one command may take before it fails with a timeout.
    pub response_timeout: Duration,
    /// How long one connection attempt may take.
    pub connection_timeout: Duration,
    /// How many times the manager retries a reconnect before giving up until the next command.
    pub reconnect_retries: usize,
    /// The longest pause between two reconnect attempts (they back off exponentially from
    /// 50 ms). With the defaults a dead server is reported in well under a second.
    pub reconnect_max_delay: Duration,
    /// The CA and client certificate of a `rediss://` URL (see [`TlsOptions`]); giving any with
    /// a `redis://` URL is an error.
    pub tls: TlsOptions,
}

impl Default for RedisOptions {
    fn default() -> Self {
        RedisOptions {
            response_timeout: Duration::from_secs(2),
            connection_timeout: Duration::from_secs(2),
            reconnect_retries: 3,
            reconnect_max_delay: Duration::from_millis(400),
            tls: TlsOptions::default(),
        }
    }
}

/// The connections to one server.
pub(crate) struct Link {
    pub(crate) con: ConnectionManager,
    pub(crate) client: redis::Client,
    pub(crate) url: String,
    /// A second connection for `WAIT`, which blocks its connection; made on first use.
    pub(crate) wait_con: tokio::sync::OnceCell<ConnectionManager>,
    /// The relay every connection of `client` goes through when the server's certificate is
    /// pinned (see `pin`); it stops with the last holder of this link.
    #[cfg(all(feature = "tls", unix))]
    relay: Option<super::pin::Relay>,
}

impl Link {
    pub(crate) fn new(con: ConnectionManager, client: redis::Client, url: String) -> Self {
        Link {
            con,
            client,
            url,
            wait_con: tokio::sync::OnceCell::new(),
            #[cfg(all(feature = "tls", unix))]
            relay: None,
        }
    }
}

/// Connect to the server of `client`. A `rediss://` server refused because its certificate is a
/// CA certificate serving as its own is connected to again through the exact pin when `tls`
/// names trusted certificates (the one place every store connects through).
pub(crate) async fn connect_link(
    client: redis::Client,
    options: &RedisOptions,
    tls: &TlsOptions,
) -> Result<Link> {
    let url = describe(&client);
    let config = manager_config(options);
    match ConnectionManager::new_with_config(client.clone(), config.clone()).await {
        Ok(con) => Ok(Link::new(con, client, url)),
        #[cfg(all(feature = "tls", unix))]
        Err(e) if super::pin::applies(tls, &e.to_string()) => {
            let (pinned, relay) = super::pin::pinned_client(
                client.get_connection_info(),
                tls,
                &url,
                options.connection_timeout,
            )
            .await?;
            let con = ConnectionManager::new_with_config(pinned.clone(), config)
                .await
                .map_err(|e| connect_error(&url, e))?;
            let mut link = Link::new(con, pinned, url);
            link.relay = Some(relay);
            Ok(link)
        }
        Err(e) => {
            let _ = tls;
            Err(connect_error(&url, e))
        }
    }
}

/// The connection manager settings of `options`.
pub(crate) fn manager_config(options: &RedisOptions) -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_response_timeout(Some(options.response_timeout))
        .set_connection_timeout(Some(options.connection_timeout))
        .set_number_of_retries(options.reconnect_retries)
        .set_min_delay(Duration::from_millis(50))
        .set_max_delay(options.reconnect_max_delay)
}

/// A connection error naming the server, with a hint for the two TLS mix-ups.
fn connect_error(url: &str, e: redis::RedisError) -> Error {
    let e = Error::from(e);
    let hint = if is_tls_url(url) {
        super::tls::refusal_hint(e.message()).unwrap_or(
            " (the server's certificate, the CA given, or the client certificate it requires?)",
        )
    } else {
        " (if the server listens for TLS on that port, use a rediss:// URL)"
    };
    let hint = if e.kind() == crate::ErrorKind::Connection {
        hint
    } else {
        ""
    };
    Error::new(
        e.kind(),
        format!("cannot connect to {url}: {}{hint}", e.message()),
    )
}

/// `redis[s]://[user@]host:port/db` of a client, without its password.
pub(crate) fn describe(client: &redis::Client) -> String {
    let info = client.get_connection_info();
    let settings = info.redis_settings();
    let user = match settings.username() {
        Some(user) => format!("{user}@"),
        None => String::new(),
    };
    let db = settings.db();
    match info.addr() {
        redis::ConnectionAddr::Tcp(host, port) => format!("redis://{user}{host}:{port}/{db}"),
        redis::ConnectionAddr::TcpTls { host, port, .. } => {
            format!("rediss://{user}{host}:{port}/{db}")
        }
        other => format!("{other}"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn describe_names_the_server_without_the_password() {
        let client = redis::Client::open("redis://user:secret@127.0.0.1:6379/2").unwrap();
        assert_eq!(super::describe(&client), "redis://user@127.0.0.1:6379/2");
    }
}
