//! The fault-injection proxy of `tests/support/proxy.rs`, checked fault by fault against a real
//! `redis-server`: what each fault does to a [`RedisStore`] (or a raw socket) and to the server.

mod support;

use std::io::{ErrorKind as IoKind, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use support::RedisServer;
use support::proxy::{Proxy, Which};
use tairlock::RedisStore;
use tairlock::store::redis::RedisOptions;

fn short_timeouts(response: Duration) -> RedisOptions {
    let mut options = RedisOptions::default();
    options.response_timeout = response;
    options.connection_timeout = Duration::from_millis(500);
    options
}

async fn set(store: &RedisStore, key: &str, value: &str) -> tairlock::Result<()> {
    store
        .command::<()>(redis::cmd("SET").arg(key).arg(value))
        .await
}

async fn ping(store: &RedisStore) -> tairlock::Result<String> {
    store.command(&redis::cmd("PING")).await
}

/// Run `PING` until it succeeds (a reset connection is re-made by the next command or two).
async fn until_ping(store: &RedisStore) -> usize {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut failures = 0;
    loop {
        match ping(store).await {
            Ok(pong) => {
                assert_eq!(pong, "PONG");
                return failures;
            }
            Err(e) if Instant::now() < deadline => {
                assert!(e.is_unanswered(), "only no-answer errors expected, got {e}");
                failures += 1;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the store did not recover within 10 s: {e}"),
        }
    }
}

/// A raw client socket through the proxy, with a read timeout.
fn raw(proxy: &Proxy) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", proxy.port())).expect("connect to the proxy");
    stream
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    stream
}

/// Read what arrives within the socket's read timeout (an empty vec on silence).
fn read_some(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    let mut buf = vec![0u8; 4096];
    match stream.read(&mut buf) {
        Ok(n) => Ok(buf[..n].to_vec()),
        Err(e) if matches!(e.kind(), IoKind::WouldBlock | IoKind::TimedOut) => Ok(Vec::new()),
        Err(e) => Err(e),
    }
}

/// Read until `want` has arrived (or 5 s pass).
fn read_until(stream: &mut TcpStream, want: &[u8]) -> Vec<u8> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = Vec::new();
    while !got.windows(want.len()).any(|w| w == want) {
        assert!(
            Instant::now() < deadline,
            "waited 5 s for {:?}, got {:?}",
            String::from_utf8_lossy(want),
            String::from_utf8_lossy(&got)
        );
        got.extend(read_some(stream).expect("read through the proxy"));
    }
    got
}

async fn round_trip(store: &RedisStore) -> Duration {
    let start = Instant::now();
    ping(store).await.expect("PING");
    start.elapsed()
}

#[tokio::test]
async fn latency_delays_each_direction_and_heal_ends_it() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let store = proxy.store().await;
    ping(&store).await.unwrap();

    proxy.latency(Which::All, Duration::from_millis(400));
    for _ in 0..2 {
        let took = round_trip(&store).await;
        assert!(
            took >= Duration::from_millis(800),
            "a round trip with 400 ms each way took {took:?}"
        );
    }
    // A command sent meanwhile on another connection is slowed too: the rule covers new ones.
    let late = proxy.store().await;
    let took = round_trip(&late).await;
    assert!(
        took >= Duration::from_millis(800),
        "new connection: {took:?}"
    );

    proxy.heal(Which::All);
    let took = round_trip(&store).await;
    assert!(
        took < Duration::from_millis(800),
        "healed, a round trip took {took:?}"
    );
    assert_eq!(proxy.faults().get("latency"), Some(&1));
    assert!(proxy.connections().iter().all(|c| c.open && !c.is_pubsub));
}

#[tokio::test]
async fn a_dropped_reply_times_out_although_the_server_applied_the_command() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let store = proxy
        .store_with(short_timeouts(Duration::from_millis(300)))
        .await;
    ping(&store).await.unwrap();

    proxy.drop_replies(Which::Data, 1);
    let err = set(&store, "k", "applied").await.unwrap_err();
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    assert_eq!(
        server.cli(&["GET", "k"]),
        "applied",
        "the server applied it"
    );
    assert_eq!(proxy.faults().get("drop_reply"), Some(&1));

    // The next reply due on that connection resets it (its client still waits for the lost
    // reply); the store's next connection works, and nothing else was dropped.
    let failures = until_ping(&store).await;
    assert!(
        failures >= 1,
        "the connection that lost a reply must not carry on"
    );
    assert_eq!(proxy.faults().get("reset_after_lost_reply"), Some(&1));
    set(&store, "k2", "v2").await.unwrap();
    assert_eq!(server.cli(&["GET", "k2"]), "v2");
    assert_eq!(proxy.faults().get("drop_reply"), Some(&1));
}

#[tokio::test]
async fn drop_replies_counts_commands_and_spares_the_others() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut a = raw(&proxy);
    let mut b = raw(&proxy);
    a.write_all(b"PING\r\n").unwrap();
    read_until(&mut a, b"+PONG\r\n");
    b.write_all(b"PING\r\n").unwrap();
    read_until(&mut b, b"+PONG\r\n");

    // Two commands of connection 0 in one pipeline: both applied, both replies dropped.
    proxy.drop_replies(Which::Nth(0), 2);
    a.write_all(b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$1\r\n1\r\nINCR y\r\n")
        .unwrap();
    b.write_all(b"INCR z\r\n").unwrap();
    assert_eq!(
        read_until(&mut b, b":1\r\n"),
        b":1\r\n",
        "connection 1 is spared"
    );
    assert_eq!(read_some(&mut a).unwrap(), b"", "both replies dropped");
    assert_eq!(server.cli(&["GET", "x"]), "1");
    assert_eq!(server.cli(&["GET", "y"]), "1");
    assert_eq!(proxy.faults().get("drop_reply"), Some(&2));

    // The third command's reply is due: the connection is reset instead.
    a.write_all(b"INCR y\r\n").unwrap();
    let end = read_some(&mut a);
    assert!(
        matches!(&end, Err(e) if e.kind() == IoKind::ConnectionReset),
        "expected a reset, got {end:?}"
    );
    assert_eq!(server.cli(&["GET", "y"]), "2", "the server applied it too");
}

#[tokio::test]
async fn reset_gives_a_connection_error_and_the_store_reconnects() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let store = proxy.store().await;
    ping(&store).await.unwrap();
    let mut sock = raw(&proxy);
    sock.write_all(b"PING\r\n").unwrap();
    read_until(&mut sock, b"+PONG\r\n");

    proxy.reset(Which::All);
    let end = read_some(&mut sock);
    assert!(
        matches!(&end, Err(e) if e.kind() == IoKind::ConnectionReset),
        "a reset is an RST: {end:?}"
    );
    let err = ping(&store).await.unwrap_err();
    assert!(
        err.is_connection(),
        "expected a connection error, got {err}"
    );
    until_ping(&store).await;
    assert_eq!(proxy.faults().get("reset"), Some(&2));
    let open: Vec<_> = proxy.connections().iter().map(|c| c.open).collect();
    assert_eq!(open, [false, false, true], "two reset, one new");
}

#[tokio::test]
async fn a_black_hole_holds_a_command_and_heal_discards_it() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let store = proxy
        .store_with(short_timeouts(Duration::from_millis(300)))
        .await;
    ping(&store).await.unwrap();

    proxy.black_hole(Which::All);
    let err = set(&store, "k", "held").await.unwrap_err();
    assert!(err.is_timeout(), "expected a timeout, got {err}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        server.cli(&["EXISTS", "k"]),
        "0",
        "the command never reached the server"
    );
    assert!(proxy.connections()[0].open, "the socket stays open");

    proxy.heal(Which::All);
    assert_eq!(proxy.faults().get("reset_on_heal"), Some(&1));
    until_ping(&store).await;
    assert_eq!(
        server.cli(&["EXISTS", "k"]),
        "0",
        "held bytes were discarded"
    );
    set(&store, "k", "after").await.unwrap();
    assert_eq!(server.cli(&["GET", "k"]), "after");
}

#[tokio::test]
async fn stalled_new_connections_hang_while_open_ones_work() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let store = proxy.store().await;

    proxy.stall_new_connections(true);
    let start = Instant::now();
    let stalled = tokio::time::timeout(
        Duration::from_secs(5),
        RedisStore::connect_with(&proxy.url(), short_timeouts(Duration::from_millis(300))),
    )
    .await
    .expect("the connection timeout bounds the attempt");
    assert!(stalled.is_err(), "a stalled connection must not connect");
    assert!(start.elapsed() >= Duration::from_millis(400));
    assert_eq!(
        ping(&store).await.unwrap(),
        "PONG",
        "the open connection works"
    );
    let conns = proxy.connections();
    assert!(
        !conns[0].stalled && conns[1..].iter().all(|c| c.stalled),
        "{conns:?}"
    );
    assert!(proxy.faults()["stalled_connection"] >= 1);

    proxy.stall_new_connections(false);
    let fresh = proxy.store().await;
    assert_eq!(ping(&fresh).await.unwrap(), "PONG");
}

#[tokio::test]
async fn pubsub_connections_are_told_apart_and_messages_are_not_replies() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let store = proxy.store().await;
    ping(&store).await.unwrap();
    let mut sub = raw(&proxy);
    sub.write_all(b"SUBSCRIBE one\r\n").unwrap();
    read_until(&mut sub, b":1\r\n");
    let conns = proxy.connections();
    assert_eq!(
        conns.iter().map(|c| c.is_pubsub).collect::<Vec<_>>(),
        [false, true]
    );

    // Latency on the pub/sub connection leaves the data connection fast.
    proxy.latency(Which::PubSub, Duration::from_secs(1));
    assert!(round_trip(&store).await < Duration::from_secs(2));
    proxy.heal(Which::PubSub);

    // The confirmation of a second SUBSCRIBE is dropped; a message on the first channel is a
    // push, not a reply: it passes, and the connection lives on.
    proxy.drop_replies(Which::PubSub, 1);
    sub.write_all(b"SUBSCRIBE two\r\n").unwrap();
    assert_eq!(read_some(&mut sub).unwrap(), b"", "confirmation dropped");
    let receivers: i64 = store
        .command(redis::cmd("PUBLISH").arg("two").arg("hi"))
        .await
        .unwrap();
    assert_eq!(receivers, 1, "the server did subscribe");
    let got = read_until(&mut sub, b"hi\r\n");
    assert!(got.starts_with(b"*3\r\n$7\r\nmessage\r\n"), "{got:?}");
    assert!(proxy.connections()[1].open);

    // A black-holed subscriber misses a message; the data connection still works; healing
    // resets the subscriber, which lost bytes.
    proxy.black_hole(Which::PubSub);
    let receivers: i64 = store
        .command(redis::cmd("PUBLISH").arg("one").arg("lost"))
        .await
        .unwrap();
    assert_eq!(receivers, 1);
    assert_eq!(read_some(&mut sub).unwrap(), b"");
    proxy.heal(Which::PubSub);
    let end = read_some(&mut sub);
    assert!(
        matches!(&end, Err(e) if e.kind() == IoKind::ConnectionReset),
        "{end:?}"
    );
    assert_eq!(proxy.faults().get("reset_on_heal"), Some(&1));
}

#[test]
fn dropping_the_proxy_closes_its_connections() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut sock = raw(&proxy);
    sock.write_all(b"PING\r\n").unwrap();
    read_until(&mut sock, b"+PONG\r\n");
    let port = proxy.port();
    drop(proxy);
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let end = sock.read(&mut [0u8; 64]);
    assert!(
        matches!(&end, Ok(0)) || matches!(&end, Err(e) if e.kind() == IoKind::ConnectionReset),
        "the client's connection ends: {end:?}"
    );
    assert!(
        TcpStream::connect(("127.0.0.1", port)).is_err(),
        "no longer listening"
    );
}

#[tokio::test]
async fn drop_replies_matching_picks_commands_and_heal_cancels_pending_drops() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut sock = raw(&proxy);
    proxy.drop_replies_matching(Which::All, b"needle", 1);
    sock.write_all(b"SET plain 1\r\n").unwrap();
    assert_eq!(
        read_until(&mut sock, b"+OK\r\n"),
        b"+OK\r\n",
        "not matching: answered"
    );
    sock.write_all(b"SET haystack-needle 2\r\n").unwrap();
    assert_eq!(read_some(&mut sock).unwrap(), b"", "matching: dropped");
    assert_eq!(server.cli(&["GET", "haystack-needle"]), "2");

    let mut other = raw(&proxy);
    proxy.drop_replies(Which::All, 5);
    proxy.heal(Which::All);
    other.write_all(b"PING\r\n").unwrap();
    assert_eq!(
        read_until(&mut other, b"+PONG\r\n"),
        b"+PONG\r\n",
        "heal ended the drops"
    );
    assert_eq!(proxy.faults().get("drop_reply"), Some(&1));
}
