//! Fault tests against real servers (DESIGN.md §3, §11): a restart while a lock is held, a
//! `SCRIPT FLUSH` between calls (NOSCRIPT), a dropped connection, a server that is down, a port
//! with no server at all, and a server without sharded pub/sub asked to announce with it.
//!
//! What the lock API promises here: its scripts are retried once after a connection error (they
//! are safe to repeat), and `NOSCRIPT` is answered by loading the script and running it again. A
//! plain [`Store`] command is *not* retried (INCR is not idempotent), so the first plain command
//! on a connection the server dropped may fail with [`ErrorKind::Connection`]; the connection
//! manager has reconnected by the next one.

mod support;

use std::future::Future;
use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::store::redis::RedisOptions;
use tairlock::{Acquire, ErrorKind, ExpireLock, Lease, RedisStore, Result, Store, Unlock};

const TTL: Duration = Duration::from_secs(30);

#[track_caller]
fn acquired(outcome: Acquire) -> Lease {
    match outcome {
        Acquire::Acquired(lease) => lease,
        other => panic!("expected the lock to be acquired, got {other:?}"),
    }
}

/// Run `op`; if it fails with a connection error, run it once more. Returns the value and how
/// many connection errors were seen (at most one is tolerated: the dropped connection).
async fn with_one_reconnect<T, F, Fut>(server: &RedisServer, what: &str, mut op: F) -> (T, usize)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T>>,
{
    match op().await {
        Ok(value) => (value, 0),
        Err(e) if e.is_connection() => match op().await {
            Ok(value) => (value, 1),
            Err(e2) => server.fail(format!(
                "{what}: failed twice after a connection error: {e}, then {e2}"
            )),
        },
        Err(e) => server.fail(format!("{what}: {e}")),
    }
}

/// `calls=` of one line of `INFO commandstats`, 0 when the command was never called.
fn command_calls(server: &RedisServer, command: &str) -> u64 {
    stat(server, command, "calls")
}

fn stat(server: &RedisServer, command: &str, field: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) else {
        return 0;
    };
    line[prefix.len()..]
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| server.fail(format!("no {field} in {line:?}")))
}

#[tokio::test]
async fn restart_loses_the_lock_honestly_and_fencing_continues() {
    let mut server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    let before = acquired(server.check(locks.expire_lock("job", TTL).await, "acquire"));
    assert_eq!(
        server.cli(&["SCRIPT", "EXISTS", tairlock::scripts::EXPIRE_LOCK.sha1()]),
        "1"
    );

    server.restart();
    assert_eq!(
        server.cli(&["DBSIZE"]),
        "0",
        "no persistence: the restarted server is empty"
    );
    assert_eq!(
        server.cli(&["SCRIPT", "EXISTS", tairlock::scripts::EXPIRE_LOCK.sha1()]),
        "0",
        "the restarted server forgot every script"
    );

    // The lock is gone, and the old holder is told so (not "released"). The lock API retries its
    // script after the dropped connection and reloads it on NOSCRIPT, transparently.
    let (outcome, dropped) = with_one_reconnect(&server, "unlock after restart", || {
        locks.expire_unlock("job", &before)
    })
    .await;
    assert_eq!(outcome, Unlock::NotHeld);
    assert!(dropped <= 1);
    assert_eq!(
        command_calls(&server, "script|load"),
        1,
        "EXPIRE_UNLOCK was reloaded once"
    );
    assert_eq!(stat(&server, "evalsha", "failed_calls"), 1, "one NOSCRIPT");
    assert_eq!(
        locks.expire_unlock("job", &before).await.unwrap(),
        Unlock::NotHeld,
        "and stays so"
    );

    // A new acquire works (its script is loaded on first use too), with a larger fencing token
    // although the fence state was lost with the restart.
    let after = acquired(locks.expire_lock("job", TTL).await.unwrap());
    assert!(
        after.fence() > before.fence(),
        "{} after {}",
        after.fence(),
        before.fence()
    );
    assert_eq!(command_calls(&server, "script|load"), 2);
    let inspection = locks.inspect("job").await.unwrap();
    assert_eq!(
        inspection.holder.as_ref().map(Lease::value),
        Some(after.value())
    );
    assert_eq!(inspection.last_fence, Some(after.fence()));
    // The old lease cannot touch the new holder's lock.
    assert_eq!(
        locks.expire_unlock("job", &before).await.unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        locks.expire_unlock("job", &after).await.unwrap(),
        Unlock::Released
    );
}

#[tokio::test]
async fn first_plain_command_after_a_restart_fails_at_most_once() {
    let mut server = RedisServer::start();
    let store = server.store().await;
    store.set("k", b"v").await.unwrap();
    server.restart();
    let (value, dropped) =
        with_one_reconnect(&server, "GET after restart", || store.get("k")).await;
    assert_eq!(value, None, "the restarted server is empty");
    assert!(dropped <= 1);
    // Reconnected: no more errors.
    for _ in 0..5 {
        assert!(store.incr("n").await.unwrap() > 0);
    }
    assert_eq!(store.get("n").await.unwrap(), Some(b"5".to_vec()));
}

#[tokio::test]
async fn script_flush_between_calls_is_handled_by_reloading() {
    let server = RedisServer::start();
    let store = server.store().await;
    let locks = ExpireLock::new(store.clone());
    let lease = acquired(locks.expire_lock("job", TTL).await.unwrap());
    let renewed = match locks.renew("job", &lease, TTL).await.unwrap() {
        tairlock::Renew::Renewed(lease) => lease,
        other => panic!("renew: {other:?}"),
    };
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");

    // Two different scripts after the flush: each is reloaded once.
    assert_eq!(
        locks.expire_unlock("job", &lease).await.unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        locks.expire_unlock("job", &renewed).await.unwrap(),
        Unlock::Released
    );
    let again = acquired(locks.expire_lock("job", TTL).await.unwrap());
    assert!(again.fence() > lease.fence());
    assert_eq!(
        command_calls(&server, "script|load"),
        2,
        "{}",
        server.cli(&["INFO", "commandstats"])
    );
    assert_eq!(
        stat(&server, "evalsha", "failed_calls"),
        2,
        "one NOSCRIPT per script"
    );
    // On Valkey 9+ the release that finds its lease is a DELIFEQ (the other one, finding
    // another lease, is a DELIFEQ and then the script).
    let valkey = u64::from(server.is_valkey());
    assert_eq!(command_calls(&server, "evalsha"), 5 - valkey);
    assert_eq!(command_calls(&server, "delifeq"), 2 * valkey);
    assert_eq!(
        command_calls(&server, "eval"),
        0,
        "scripts are never sent in full per call"
    );

    // Flushing again while a direct Store::eval is the next call: same behaviour.
    assert_eq!(server.cli(&["SCRIPT", "FLUSH"]), "OK");
    let keys = locks.keys("job").unwrap();
    let reply = store
        .eval(&tairlock::scripts::INSPECT, &keys.both(), &[])
        .await
        .unwrap();
    assert_eq!(reply.as_array().map(<[_]>::len), Some(4));
    assert_eq!(command_calls(&server, "script|load"), 3);
}

#[tokio::test]
async fn dropped_connection_is_retried_by_the_lock_api() {
    let server = RedisServer::start();
    let store = server.store().await;
    let locks = ExpireLock::new(store.clone());
    let lease = acquired(locks.expire_lock("job", TTL).await.unwrap());
    // Kill every normal client connection (the store's; `cli` uses its own and is skipped).
    let killed: u64 = server
        .cli(&["CLIENT", "KILL", "TYPE", "normal"])
        .parse()
        .unwrap();
    assert!(killed >= 1, "the store's connection was killed");
    let (outcome, dropped) =
        with_one_reconnect(&server, "unlock after a dropped connection", || {
            locks.expire_unlock("job", &lease)
        })
        .await;
    assert_eq!(
        outcome,
        Unlock::Released,
        "the retried compare-and-delete still releases"
    );
    assert!(dropped <= 1);
    assert_eq!(server.cli(&["EXISTS", "tairlock:{job}"]), "0");
}

#[tokio::test]
async fn lock_operations_fail_with_connection_while_the_server_is_down_and_recover() {
    let mut server = RedisServer::start();
    let mut options = RedisOptions::default();
    options.reconnect_retries = 0;
    let store = server.check(
        RedisStore::connect_with(&server.url(), options).await,
        "connect",
    );
    let locks = ExpireLock::new(store);
    let lease = acquired(locks.expire_lock("job", TTL).await.unwrap());
    server.stop();
    let started = Instant::now();
    let err = locks.expire_unlock("job", &lease).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "failed in {:?}",
        started.elapsed()
    );
    let err = locks.expire_lock("job", TTL).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");

    server.restart();
    let (outcome, _) = with_one_reconnect(&server, "unlock after the server is back", || {
        locks.expire_unlock("job", &lease)
    })
    .await;
    assert_eq!(
        outcome,
        Unlock::NotHeld,
        "the lock did not survive the restart"
    );
    assert!(locks.expire_lock("job", TTL).await.unwrap().is_acquired());
}

fn dead_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

#[tokio::test]
async fn connecting_to_a_port_with_no_server_is_a_connection_error() {
    let url = format!("redis://127.0.0.1:{}", dead_port());
    let mut options = RedisOptions::default();
    options.reconnect_retries = 0;
    let started = Instant::now();
    let err = RedisStore::connect_with(&url, options).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(err.is_connection());
    assert!(
        err.to_string().to_lowercase().contains("refused"),
        "a clear message: {err}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no retries asked: {:?}",
        started.elapsed()
    );

    // With the default options the connection manager retries with backoff before giving up.
    let err = RedisStore::connect(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
    assert!(
        err.to_string().to_lowercase().contains("refused"),
        "a clear message: {err}"
    );
}

#[test]
fn blocking_connect_to_a_port_with_no_server_is_a_connection_error() {
    let url = format!("redis://127.0.0.1:{}", dead_port());
    let err = RedisStore::blocking_connect(&url).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Connection, "{err}");
}

#[tokio::test]
async fn a_malformed_url_is_invalid_input() {
    for url in [
        "not a url",
        "http://127.0.0.1:6379",
        "redis://127.0.0.1:notaport",
    ] {
        let err = RedisStore::connect(url).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{url}: {err}");
    }
}

#[tokio::test]
async fn a_server_without_scripting_is_a_clear_server_error_and_writes_nothing() {
    // Extra server arguments survive a restart (same port, same args).
    let mut server = RedisServer::start_with_args(&["--rename-command", "EVALSHA", ""]);
    let port = server.port();
    server.restart();
    assert_eq!(server.port(), port);
    assert!(
        server
            .cli(&["EVALSHA", "0", "0"])
            .starts_with("ERR unknown command")
    );

    let locks = ExpireLock::new(server.store().await);
    let err = locks.expire_lock("job", TTL).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server, "{err}");
    assert!(err.message().contains("unknown command 'EVALSHA'"), "{err}");
    assert_eq!(server.cli(&["DBSIZE"]), "0");
}

/// A release asked to announce with `SPUBLISH` on a server that has no such command (an older
/// node in the middle of a rolling upgrade; here `SPUBLISH` is renamed away) still releases,
/// without an error, and announces with a classic `PUBLISH` that a classic subscriber hears.
#[tokio::test]
async fn a_release_on_a_server_without_spublish_announces_classically() {
    use tairlock::scripts::EXPIRE_UNLOCK;
    let server = RedisServer::start_with_args(&["--rename-command", "SPUBLISH", ""]);
    let store = server.store().await;
    let locks = ExpireLock::new(store.clone());
    let keys = locks.keys("upgrade").unwrap();
    let notifier = store.notifier().await.expect("a notifier");
    for _ in 0..2 {
        let lease = acquired(locks.expire_lock("upgrade", TTL).await.unwrap());
        let watch = notifier.watch(&keys.channel).await.unwrap();
        let heard = watch.notified();
        tokio::pin!(heard);
        heard.as_mut().enable();
        let reply = store
            .eval(
                &EXPIRE_UNLOCK,
                std::slice::from_ref(&keys.lock),
                &[
                    lease.value().to_owned(),
                    keys.channel.clone(),
                    "SPUBLISH".to_owned(),
                ],
            )
            .await
            .unwrap();
        assert_eq!(reply.as_int(), Some(1), "released");
        tokio::time::timeout(Duration::from_secs(2), heard)
            .await
            .expect("the classic subscriber heard the release");
        assert!(locks.inspect("upgrade").await.unwrap().holder.is_none());
    }
    // The reader/writer lock's releases behave the same.
    let rw = tairlock_rwlock::RwLock::new(store.clone());
    let rw_keys = rw.keys("upgrade-rw").unwrap();
    let admitted = rw.read_acquire("upgrade-rw", "abcd01", TTL).await.unwrap();
    assert!(
        matches!(admitted, tairlock_rwlock::ReadAttempt::Acquired { .. }),
        "{admitted:?}"
    );
    let watch = notifier.watch(&rw_keys.channel).await.unwrap();
    let heard = watch.notified();
    tokio::pin!(heard);
    heard.as_mut().enable();
    let reply = store
        .eval(
            &tairlock_rwlock::scripts::READ_RELEASE,
            std::slice::from_ref(&rw_keys.readers),
            &[
                "abcd01".to_owned(),
                rw_keys.channel.clone(),
                "SPUBLISH".to_owned(),
            ],
        )
        .await
        .unwrap();
    assert_eq!(reply.as_int(), Some(1), "the reader left");
    tokio::time::timeout(Duration::from_secs(2), heard)
        .await
        .expect("the classic subscriber heard the last reader leave");
    assert_eq!(rw.readers("upgrade-rw").await.unwrap(), 0);
}
