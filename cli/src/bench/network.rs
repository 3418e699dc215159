//! `tairlock bench --latency D`: the run through a network of D each way. Every connection of
//! the run — the bare floor connection, every store and client, their pub/sub connections — goes
//! through one fault proxy of [`tairlock_testing::proxy`] in front of the server, which delays
//! every forwarded chunk by D in both directions. So the floor and the scenarios cross the same
//! proxy and the same network, and their ratios compare like with like.

use std::net::{SocketAddr, ToSocketAddrs};
use std::time::Duration;

use tairlock_testing::proxy::{Proxy, Which};

/// A proxy adding a latency in front of one server, and the URL that reaches the server through
/// it. The proxy stops when this is dropped.
#[derive(Debug)]
pub struct Network {
    proxy: Proxy,
    url: String,
    one_way: Duration,
}

impl Network {
    /// A proxy in front of the server of `url` (a `redis://` URL: the proxy reads plain RESP),
    /// adding `one_way` each way.
    ///
    /// # Errors
    ///
    /// A URL that is not `redis://`, or whose host does not resolve.
    pub fn new(url: &str, one_way: Duration) -> Result<Network, String> {
        let (upstream, rewrite) = parse(url)?;
        let proxy = Proxy::start_to(upstream);
        proxy.latency(Which::All, one_way);
        let url = rewrite(proxy.port());
        Ok(Network {
            proxy,
            url,
            one_way,
        })
    }

    /// The URL that reaches the server through the proxy (credentials and database kept).
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The latency added each way.
    pub fn one_way(&self) -> Duration {
        self.one_way
    }

    /// Connections the proxy accepted.
    pub fn connections(&self) -> usize {
        self.proxy.connections().len()
    }
}

type Rewrite = Box<dyn Fn(u16) -> String>;

/// The server's address in `url`, and a function that writes the same URL for a proxy on
/// `127.0.0.1:<port>`.
fn parse(url: &str) -> Result<(SocketAddr, Rewrite), String> {
    let Some(rest) = url.strip_prefix("redis://") else {
        return Err(format!(
            "--latency needs a redis:// server URL (the proxy forwards plain RESP), not {}",
            url.split("://").next().unwrap_or(url)
        ));
    };
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (credentials, hostport) = match authority.rsplit_once('@') {
        Some((credentials, hostport)) => (format!("{credentials}@"), hostport),
        None => (String::new(), authority),
    };
    let (host, port) = match hostport.rsplit_once(':') {
        Some((host, port)) if !port.contains(']') => (host, port),
        _ => (hostport, "6379"),
    };
    let port: u16 = port
        .parse()
        .map_err(|_| format!("bad port {port:?} in the server URL"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let host = if host.is_empty() { "127.0.0.1" } else { host };
    let upstream = (host, port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}:{port}: {e}"))?
        .next()
        .ok_or_else(|| format!("{host}:{port} resolves to no address"))?;
    let tail = tail.to_owned();
    Ok((
        upstream,
        Box::new(move |proxy_port| format!("redis://{credentials}127.0.0.1:{proxy_port}{tail}")),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn through(url: &str) -> (SocketAddr, String) {
        let (addr, rewrite) = parse(url).unwrap();
        (addr, rewrite(7000))
    }

    #[test]
    fn the_proxy_url_keeps_credentials_and_database() {
        let (addr, url) = through("redis://user:pw@127.0.0.1:6380/2?protocol=resp3");
        assert_eq!(addr, "127.0.0.1:6380".parse().unwrap());
        assert_eq!(url, "redis://user:pw@127.0.0.1:7000/2?protocol=resp3");
        let (addr, url) = through("redis://127.0.0.1");
        assert_eq!(addr.port(), 6379);
        assert_eq!(url, "redis://127.0.0.1:7000");
        let (addr, _) = through("redis://[::1]:6390");
        assert_eq!(addr, "[::1]:6390".parse().unwrap());
    }

    #[test]
    fn only_plain_redis_urls_go_through_the_proxy() {
        for bad in [
            "rediss://127.0.0.1:6379",
            "redis+unix:///tmp/r.sock",
            "127.0.0.1:6379",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(parse("redis://127.0.0.1:notaport").is_err());
    }
}
