//! `rediss://` against a real TLS-enabled `redis-server` (issue 14, item 1).
//!
//! Each test generates its certificates with the `openssl` command (a CA, a server certificate
//! for 127.0.0.1 signed by it, a client certificate signed by it, and an unrelated second CA),
//! then starts `redis-server` with a TLS port beside its plain one (the harness checks readiness
//! on the plain port; every connection under test goes to the TLS port).
//!
//! - `verified_against_the_ca`: a store trusting the test CA locks, releases, and a waiter is
//!   woken by the release notification over TLS.
//! - `mutual_tls`: with `--tls-auth-clients yes`, a store without a client certificate is
//!   refused with a connection error; with one, it locks.
//! - `wrong_ca_is_refused`: a store trusting another CA is refused with a clear connection error,
//!   in bounded time, without a panic.
//! - `plain_url_to_tls_port_is_refused`: `redis://` to the TLS port fails in bounded time and the
//!   message suggests `rediss://`.
//! - `insecure_fragment`: `rediss://…/#insecure` connects without any CA.
//! - `self_signed_ca_certificate_trusted_exactly_is_accepted`: a server presenting the most
//!   common self-signed certificate (`CA:TRUE`, its own CA), which rustls's chain check refuses
//!   (`CaUsedAsEndEntity`), is accepted when that very certificate is the one trusted (the exact
//!   pin): a store locks, releases and wakes a waiter through it, with and without a client
//!   certificate, and its relay goes with it.
//! - `self_signed_ca_certificate_not_among_the_trusted_ones_is_refused`: trusting a CA, or
//!   another self-signed certificate, is refused with a message that says what would be
//!   accepted.
//! - `tls_cluster`: a `ClusterStore` over `rediss://` seed URLs of a `--tls-cluster yes`
//!   cluster (every node's clients and bus on TLS only) locks, releases and wakes a waiter by
//!   sharded pub/sub over TLS.
//! - `tls_options_need_rediss`: TLS options with a `redis://` URL are an `InvalidInput` error.

mod support;

use std::time::{Duration, Instant};

use support::tls::Certs;
use tairlock::notify::PubSub;
use tairlock::store::{ClusterOptions, RedisOptions, TlsOptions};
use tairlock::{Acquire, ClusterStore, ErrorKind, ExpireLock, RedisStore, Store, Unlock};

/// Connects in bounded time: a refusal must not hang.
async fn connect(url: &str, options: RedisOptions) -> tairlock::Result<RedisStore> {
    tokio::time::timeout(
        Duration::from_secs(20),
        RedisStore::connect_with(url, options),
    )
    .await
    .expect("connecting neither succeeded nor failed within 20 s")
}

async fn lock_and_release(store: RedisStore) {
    let locks = ExpireLock::new(store);
    let lease = match locks
        .expire_lock("tls:a", Duration::from_secs(10))
        .await
        .unwrap()
    {
        Acquire::Acquired(lease) => lease,
        other => panic!("lock not acquired over TLS: {other:?}"),
    };
    assert_eq!(
        locks.expire_unlock("tls:a", &lease).await.unwrap(),
        Unlock::Released
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verified_against_the_ca() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server(false);
    let url = format!("rediss://127.0.0.1:{port}");
    let store = connect(&url, certs.trusting("ca.crt")).await.unwrap();
    assert_eq!(store.url(), format!("rediss://127.0.0.1:{port}/0"));
    lock_and_release(store.clone()).await;
    a_release_wakes_a_waiter(store).await;
}

/// Release notifications travel over the connection under test too: a waiter is woken by the
/// release long before the holder's 30 s lease would end.
async fn a_release_wakes_a_waiter(store: RedisStore) {
    let locks = ExpireLock::new(store);
    let holder = locks
        .lock_with_lease("tls:b", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            let guard = locks.lock("tls:b").await.unwrap();
            guard.release().await.unwrap();
            started.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.release().await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter was not woken")
        .unwrap();
    assert!(waited < Duration::from_secs(20), "waited {waited:?}");
}

#[tokio::test]
async fn mutual_tls() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server(true);
    let url = format!("rediss://127.0.0.1:{port}");

    let refused = connect(&url, certs.trusting("ca.crt")).await.unwrap_err();
    assert_eq!(refused.kind(), ErrorKind::Connection, "{refused}");
    assert!(
        refused.to_string().contains("CertificateRequired"),
        "{refused}"
    );

    let mut options = certs.trusting("ca.crt");
    options.tls = options
        .tls
        .client_auth_files(certs.path("client.crt"), certs.path("client.key"))
        .unwrap();
    lock_and_release(connect(&url, options).await.unwrap()).await;
}

#[tokio::test]
async fn wrong_ca_is_refused() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server(false);
    let url = format!("rediss://127.0.0.1:{port}");
    let err = connect(&url, certs.trusting("other-ca.crt"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    let message = err.to_string();
    assert!(
        message.contains("UnknownIssuer") && message.contains(&format!("127.0.0.1:{port}")),
        "unclear: {message}"
    );
}

#[tokio::test]
async fn plain_url_to_tls_port_is_refused() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server(false);
    let err = connect(
        &format!("redis://127.0.0.1:{port}"),
        RedisOptions::default(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err.kind(), ErrorKind::Connection | ErrorKind::Timeout),
        "{err}"
    );
    assert!(err.to_string().contains("rediss://"), "no hint: {err}");
}

#[tokio::test]
async fn insecure_fragment() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server(false);
    let url = format!("rediss://127.0.0.1:{port}/#insecure");
    lock_and_release(connect(&url, RedisOptions::default()).await.unwrap()).await;
}

/// The relay directories of this process (`tairlock-pin-<pid>-…`).
fn relays() -> usize {
    let prefix = format!("tairlock-pin-{}-", std::process::id());
    std::fs::read_dir(std::env::temp_dir())
        .map(|dir| {
            dir.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with(&prefix))
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn self_signed_ca_certificate_trusted_exactly_is_accepted() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server_with("self-signed", "ca", false);
    let url = format!("rediss://127.0.0.1:{port}");
    let store = connect(&url, certs.trusting("self-signed.crt"))
        .await
        .unwrap();
    assert_eq!(store.url(), format!("rediss://127.0.0.1:{port}/0"));
    assert_eq!(relays(), 1, "the pinned connection goes through one relay");
    lock_and_release(store.clone()).await;
    a_release_wakes_a_waiter(store.clone()).await;

    // With a client certificate the server asks for, over the same pin.
    let (_mtls_server, mtls_port) = certs.server_with("self-signed", "ca", true);
    let mut options = certs.trusting("self-signed.crt");
    options.tls = options
        .tls
        .client_auth_files(certs.path("client.crt"), certs.path("client.key"))
        .unwrap();
    let mtls = connect(&format!("rediss://127.0.0.1:{mtls_port}"), options)
        .await
        .unwrap();
    lock_and_release(mtls.clone()).await;

    // The relays stop, and their private directories go, with the stores.
    drop((store, mtls));
    let deadline = Instant::now() + Duration::from_secs(10);
    while relays() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(relays(), 0, "a relay outlived its store");
}

#[tokio::test]
async fn self_signed_ca_certificate_not_among_the_trusted_ones_is_refused() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_server, port) = certs.server_with("self-signed", "self-signed", false);
    let url = format!("rediss://127.0.0.1:{port}");
    // Trusting a CA, and trusting another self-signed CA certificate: neither is the server's.
    for trusted in ["ca.crt", "other-self-signed.crt"] {
        let err = connect(&url, certs.trusting(trusted)).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
        let message = err.to_string();
        assert!(
            message.contains(&format!("127.0.0.1:{port}"))
                && message.contains("a CA certificate (CA:TRUE)")
                && message.contains("byte-for-byte"),
            "no hint for a self-signed CA certificate trusting {trusted}: {message}"
        );
    }
}

#[tokio::test]
async fn tls_options_need_rediss() {
    let certs = Certs::generate();
    let err = connect("redis://127.0.0.1:1", certs.trusting("ca.crt"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("rediss://"), "{err}");

    let missing = TlsOptions::default()
        .ca_file(certs.path("no-such.crt"))
        .unwrap_err();
    assert_eq!(missing.kind(), ErrorKind::InvalidInput);
    let not_pem = TlsOptions::default()
        .client_auth_files(certs.path("client.crt"), certs.path("client.crt"))
        .unwrap_err();
    assert!(not_pem.to_string().contains("private key"), "{not_pem}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_cluster() {
    if !support::tls::available() {
        return;
    }
    let certs = Certs::generate();
    let (_nodes, ports) = support::tls::tls_cluster(&certs);
    let urls: Vec<String> = ports
        .iter()
        .map(|p| format!("rediss://127.0.0.1:{p}"))
        .collect();
    let mut options = ClusterOptions::default();
    options.tls = TlsOptions::default().ca_file(certs.path("ca.crt")).unwrap();
    let store = tokio::time::timeout(
        Duration::from_secs(20),
        ClusterStore::connect_with(&urls, options),
    )
    .await
    .expect("no answer within 20 s")
    .unwrap();
    assert_eq!(store.pubsub(), PubSub::Sharded);
    let locks = ExpireLock::new(store);
    for name in ["tls:c1", "tls:c2", "tls:c3", "tls:c4"] {
        let lease = match locks
            .expire_lock(name, Duration::from_secs(10))
            .await
            .unwrap()
        {
            Acquire::Acquired(lease) => lease,
            other => panic!("not acquired on the TLS cluster: {other:?}"),
        };
        assert_eq!(
            locks.expire_unlock(name, &lease).await.unwrap(),
            Unlock::Released
        );
    }
    let holder = locks
        .lock_with_lease("tls:cw", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move { locks.lock("tls:cw").await.unwrap().release().await })
    };
    tokio::time::sleep(Duration::from_millis(500)).await;
    holder.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter was not woken over TLS")
        .unwrap()
        .unwrap();
}
