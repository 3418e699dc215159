//! Release notifications under network faults, through the fault-injection proxy (issue 12,
//! items 3 and 7).
//!
//! - A pub/sub connection the network stalls (accepted, never answered: an idle-timeout load
//!   balancer, an IP moved by a failover without resets) holds up no acquire: a free lock is
//!   taken without subscribing at all, a busy one waits for its subscription at most within its
//!   patience (and a limit for `lock()`), then polls.
//! - An uncontended `lock()` + `release()` sends no `SUBSCRIBE`.
//! - A subscription asked for while the subscriber reconnects is not lost.
//! - A pub/sub connection that goes silent (black-holed: no reset, no bytes) is noticed by the
//!   keep-alive and made again, and its waiters are woken, instead of sleeping out the lease.
//!
//! Issue 26, section 3:
//!
//! - The keep-alive counts only real round trips: a hot channel whose watchers keep leaving and
//!   coming back (no-op work for the subscriber) no longer puts the `PING` off for good.
//! - While the pub/sub connection is refused (`maxclients`), contending many distinct names keeps
//!   the notifier's channels and backlog bounded by the waits in progress, and the connection,
//!   once made, subscribes only the watched channels, in batches.
//! - The subscriber runs on the store's runtime, and is started again if it is gone: a runtime
//!   that first needed notifications and then shut down leaves nothing pending forever.
//! - A fair waiter that waits for its subscription keeps its place: it refreshes it meanwhile.
//! - The sharded subscriber probes its node connections: one the network silences is noticed,
//!   and its shard's channels are subscribed again. While its cluster connection cannot be made,
//!   it stays as bounded as the classic one.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::RedisServer;
use support::cluster::RedisCluster;
use support::proxy::{Proxy, Which};
use tairlock::notify::{Notifier, PubSub, SUBSCRIBE_BATCH, Watch};
use tairlock::store::ClusterOptions;
use tairlock::store::redis::RedisOptions;
use tairlock::{ClusterStore, ExpireLock, Options, RedisStore, Store, Unlock};

/// `calls=` of one line of `INFO commandstats`, 0 when the command was never called.
fn calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn store_at(url: &str) -> RedisStore {
    RedisStore::connect(url)
        .await
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_subscription_connection_holds_up_no_acquire() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // The data connection is the proxy's first; every later one (the pub/sub connection) is
    // accepted and never answered.
    let store = store_at(&proxy.url()).await;
    proxy.stall_new_connections(true);
    let locks = ExpireLock::new(store);
    let holder = ExpireLock::new(server.store().await);

    // A free lock: taken at once, nothing waits for a subscription.
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(10), locks.lock("free"))
        .await
        .expect("lock() on a free lock hung on the stalled pub/sub connection")
        .unwrap();
    let took = started.elapsed();
    println!("lock(free) with the pub/sub connection stalled: {took:?}");
    assert!(took < Duration::from_secs(1), "lock(free) took {took:?}");
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);

    // A busy lock: try_lock_for gives up on time, whatever the subscription does.
    let held = holder
        .lock_with_lease("busy", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        locks.try_lock_for("busy", Duration::from_millis(200)),
    )
    .await
    .expect("try_lock_for(200 ms) hung on the stalled pub/sub connection")
    .unwrap();
    let took = started.elapsed();
    println!("try_lock_for(200 ms) on a busy lock, pub/sub stalled: {took:?}");
    assert!(got.is_none());
    assert!(
        took < Duration::from_millis(600),
        "try_lock_for(200 ms) took {took:?}"
    );

    // lock() on a busy lock stops waiting for its subscription after a bounded time and polls:
    // it gets the lock soon after the release.
    let l = locks.clone();
    let waiting = tokio::spawn(async move { l.lock("busy").await });
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(!waiting.is_finished());
    let released = Instant::now();
    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("lock() on a busy lock waited on the stalled subscription past the release")
        .unwrap()
        .unwrap();
    println!(
        "lock(busy) after the release, pub/sub stalled: {:?}",
        released.elapsed()
    );
    assert!(released.elapsed() < Duration::from_secs(5));
    guard.release().await.unwrap();

    // The RwLock waits the same way.
    let rw = tairlock_rwlock::RwLock::new(locks.store().clone());
    let started = Instant::now();
    let w = tokio::time::timeout(Duration::from_secs(10), rw.write("free-rw"))
        .await
        .expect("write() on a free lock hung on the stalled pub/sub connection")
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(1),
        "write(free) took {:?}",
        started.elapsed()
    );
    let other = tairlock_rwlock::RwLock::new(server.store().await);
    let r = other.read("busy-rw").await.unwrap();
    let started = Instant::now();
    let got = tokio::time::timeout(
        Duration::from_secs(10),
        rw.try_write_for("busy-rw", Duration::from_millis(200)),
    )
    .await
    .expect("try_write_for(200 ms) hung on the stalled pub/sub connection")
    .unwrap();
    let took = started.elapsed();
    println!("try_write_for(200 ms) on a read-held lock, pub/sub stalled: {took:?}");
    assert!(got.is_none());
    assert!(
        took < Duration::from_millis(600),
        "try_write_for(200 ms) took {took:?}"
    );
    r.release().await.unwrap();
    w.release().await.unwrap();
    assert!(proxy.connections().iter().any(|c| c.stalled));
}

#[tokio::test]
async fn an_uncontended_lock_and_release_send_no_subscribe() {
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    for _ in 0..3 {
        let guard = locks.lock("free").await.unwrap();
        assert_eq!(guard.release().await.unwrap(), Unlock::Released);
        let guard = locks
            .try_lock_for("free", Duration::from_secs(1))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    }
    // Six acquisitions and six releases: scripts, or DELIFEQ for the releases on Valkey 9+.
    assert!(calls(&server, "evalsha") + calls(&server, "delifeq") >= 12);
    assert_eq!(
        calls(&server, "subscribe"),
        0,
        "an uncontended lock subscribed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_subscription_asked_for_while_the_subscriber_reconnects_is_not_lost() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let store = store_at(&proxy.url()).await;
    let notifier = store
        .notifier()
        .await
        .expect("a redis store has a notifier");
    // A subscribed channel, so that the subscriber has something to subscribe again.
    let first = tokio::time::timeout(Duration::from_secs(10), notifier.watch("chan-first"))
        .await
        .expect("subscribing hung")
        .unwrap();
    // Slow every round trip from now on (the reconnection's included), so that the reconnection
    // takes a while, then drop the pub/sub connection.
    proxy.latency(Which::All, Duration::from_millis(250));
    proxy.reset(Which::PubSub);
    // Ask for new channels all through the reconnection.
    let mut watches = Vec::new();
    for i in 0..20 {
        let n = notifier.clone();
        watches.push(tokio::spawn(async move {
            let name = format!("chan-{i}");
            // A subscription may fail while the connection is down (a waiter then polls and
            // asks again on its next attempt); one that succeeds must deliver.
            let give_up = Instant::now() + Duration::from_secs(20);
            loop {
                match tokio::time::timeout(Duration::from_secs(20), n.watch(&name)).await {
                    Ok(Ok(watch)) => break (name, watch),
                    Ok(Err(_)) if Instant::now() < give_up => {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    Ok(Err(e)) => panic!("subscribing {name} kept failing: {e}"),
                    Err(_) => panic!("subscribing {name} hung"),
                }
            }
        }));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let mut watches = {
        let mut out = Vec::new();
        for w in watches {
            out.push(w.await.unwrap());
        }
        out
    };
    watches.push(("chan-first".to_owned(), first));
    // Listen on every channel, publish on every one, then see who heard.
    let mut heard: Vec<_> = watches
        .iter()
        .map(|(name, watch)| {
            let mut notified = Box::pin(watch.notified());
            notified.as_mut().enable();
            (name, notified)
        })
        .collect();
    for (name, _) in &watches {
        server.cli(&["PUBLISH", name, "released"]);
    }
    let mut deaf = Vec::new();
    for (name, notified) in &mut heard {
        if tokio::time::timeout(Duration::from_secs(3), notified.as_mut())
            .await
            .is_err()
        {
            deaf.push((*name).clone());
        }
    }
    assert!(
        deaf.is_empty(),
        "channels subscribed during the reconnection hear nothing: {deaf:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silently_dropped_subscription_is_noticed_and_its_waiter_woken() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut options = RedisOptions::default();
    // The keep-alive runs every 5 response timeouts: 2.5 s here.
    options.response_timeout = Duration::from_millis(500);
    let store = RedisStore::connect_with(&proxy.url(), options)
        .await
        .expect("connect through the proxy");
    let locks = ExpireLock::new(store);
    let holder = ExpireLock::new(server.store().await);
    let held = holder
        .lock_with_lease("busy", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let l = locks.clone();
    let waiting = tokio::spawn(async move { l.lock("busy").await });
    // Once the waiter listens, its pub/sub connection goes silent.
    let give_up = Instant::now() + Duration::from_secs(10);
    let pubsub = loop {
        if let Some(c) = proxy
            .connections()
            .into_iter()
            .find(|c| c.is_pubsub && c.open)
        {
            break c.index;
        }
        assert!(Instant::now() < give_up, "the waiter never subscribed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    proxy.black_hole(Which::Nth(pubsub));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    let guard = tokio::time::timeout(Duration::from_secs(15), waiting)
        .await
        .expect("the waiter slept on a dead subscription past the release")
        .unwrap()
        .unwrap();
    let took = released.elapsed();
    println!("lock after the release, its subscription black-holed: {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} of a 30 s lease"
    );
    guard.release().await.unwrap();
}

/// A first pub/sub connection wakes nobody: no watcher relied on a subscription before it. It
/// used to wake every watcher once subscribed, as after a lost connection, and a shared read
/// hold takes any wake on its intent channel for a writer's intent and gives itself up. Here the
/// first connection is held back (stalled, then let through) so the watch is registered, and
/// its wake armed, before the connection subscribes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_subscription_connection_wakes_nobody() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut options = RedisOptions::default();
    options.connection_timeout = Duration::from_millis(300);
    let store = RedisStore::connect_with(&proxy.url(), options)
        .await
        .expect("connect through the proxy");
    proxy.stall_new_connections(true);
    let notifier = tairlock::notify::notifier_by(store.notifier(), None)
        .await
        .expect("a notifier");
    let watch = notifier.register("tairlock:{quiet}:released");
    let woken = watch.notified();
    let mut woken = std::pin::pin!(woken);
    woken.as_mut().enable();
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert!(
        !watch.is_subscribed(),
        "subscribed through a stalled connection"
    );
    proxy.stall_new_connections(false);
    tokio::time::timeout(Duration::from_secs(10), watch.subscribed())
        .await
        .expect("subscribed once the network lets the connection through")
        .unwrap();
    assert!(
        tokio::time::timeout(Duration::from_millis(300), woken.as_mut())
            .await
            .is_err(),
        "a first connection woke a watcher: nothing was published"
    );
    // A message is still heard.
    let heard = watch.notified();
    let mut heard = std::pin::pin!(heard);
    heard.as_mut().enable();
    server.cli(&["PUBLISH", "tairlock:{quiet}:released", "released"]);
    tokio::time::timeout(Duration::from_secs(5), heard)
        .await
        .expect("the release is heard");
}

/// The index of the proxy's open pub/sub connection (other than `except`), waiting up to `limit`
/// for one.
fn pubsub_connection(proxy: &Proxy, except: Option<usize>, limit: Duration) -> Option<usize> {
    let give_up = Instant::now() + limit;
    loop {
        let found = proxy
            .connections()
            .into_iter()
            .find(|c| c.is_pubsub && c.open && Some(c.index) != except);
        if let Some(c) = found {
            return Some(c.index);
        }
        if Instant::now() > give_up {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Publish `payload` on `channel` and see whether `watch` hears that very message within a
/// second (other wake-ups, such as the one after a subscription made again, do not count).
async fn hears(server: &RedisServer, watch: &Watch, channel: &str, payload: &str) -> bool {
    let cursor = watch.cursor();
    server.cli(&["PUBLISH", channel, payload]);
    let give_up = tokio::time::Instant::now() + Duration::from_secs(1);
    loop {
        let woken = watch.notified();
        let mut woken = std::pin::pin!(woken);
        woken.as_mut().enable();
        if watch.messages_after(cursor).iter().any(|m| &**m == payload) {
            return true;
        }
        if tokio::time::timeout_at(give_up, woken).await.is_err() {
            return false;
        }
    }
}

/// A hot channel: its watcher leaves and another one comes at once, over and over, so that the
/// subscriber keeps being told about it (an unsubscribe of a channel rejoined during its
/// linger: no round trip). The keep-alive used to be put off by every such request, so the
/// `PING` never came and a pub/sub connection black-holed meanwhile went unnoticed for good: the
/// channel stayed "subscribed" and heard nothing. Only real round trips put it off now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watchers_that_come_and_go_do_not_put_off_the_keepalive() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut options = RedisOptions::default();
    // The keep-alive runs every 5 response timeouts: 2.5 s here.
    options.response_timeout = Duration::from_millis(500);
    let store = RedisStore::connect_with(&proxy.url(), options)
        .await
        .expect("connect through the proxy");
    let notifier = store.notifier().await.expect("a notifier");
    let channel = "tairlock:{hot}:released";
    let mut watch = tokio::time::timeout(Duration::from_secs(10), notifier.watch(channel))
        .await
        .expect("subscribing hung")
        .unwrap();
    assert!(hears(&server, &watch, channel, "before").await);
    let dead =
        pubsub_connection(&proxy, None, Duration::from_secs(5)).expect("a pub/sub connection");

    // The watchers come and go for longer than the linger (3 s) before the connection goes
    // silent, so that the subscriber hears about the channel all along, then for 15 s after.
    let started = Instant::now();
    let mut silent = None;
    let mut round = 0;
    let heard = loop {
        // The last watcher leaves, and the next one comes at once.
        drop(watch);
        watch = notifier.register(channel);
        round += 1;
        match silent {
            None if started.elapsed() > Duration::from_secs(4) => {
                proxy.black_hole(Which::Nth(dead));
                silent = Some(Instant::now());
            }
            None => {}
            Some(since) => {
                if watch.is_subscribed()
                    && hears(&server, &watch, channel, &format!("m{round}")).await
                {
                    break Some(since.elapsed());
                }
                if since.elapsed() > Duration::from_secs(15) {
                    break None;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let heard = heard.unwrap_or_else(|| {
        panic!(
            "a hot channel heard nothing for 15 s after its pub/sub connection went silent \
             (keep-alive 2.5 s): the watchers' comings and goings kept putting the PING off"
        )
    });
    println!("black-holed pub/sub connection noticed, channel heard again after {heard:?}");
    assert!(
        pubsub_connection(&proxy, Some(dead), Duration::ZERO).is_some(),
        "heard without a new pub/sub connection"
    );
}

/// `INFO section`, read over `con` (the only connection a test can count on while
/// `maxclients` refuses new ones).
async fn info(con: &mut redis::aio::MultiplexedConnection, section: &str) -> String {
    redis::cmd("INFO")
        .arg(section)
        .query_async(con)
        .await
        .unwrap()
}

/// The number after `prefix` on the line that starts with it (`connected_clients:`,
/// `cmdstat_subscribe:calls=`), 0 when there is no such line.
fn number_after(info: &str, prefix: &str) -> u64 {
    info.lines()
        .find_map(|l| l.strip_prefix(prefix))
        .and_then(|rest| rest.split([',', '\r']).next())
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or(0)
}

/// While the server refuses the pub/sub connection (`maxclients` reached), every distinct name a
/// waiter found busy used to stay registered, with a subscribe and an unsubscribe request queued
/// for it, without bound; the connection, once made, subscribed every one of them in a single
/// `SUBSCRIBE`. Now a name nobody waits for any more is let go at once, the backlog holds each
/// channel once, and the connection subscribes only the watched channels, in batches of
/// `SUBSCRIBE_BATCH`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_pubsub_connection_keeps_the_notifier_bounded_and_subscribes_in_batches() {
    const WATCHED: usize = 2 * SUBSCRIBE_BATCH + 10;
    const CONTENDED: usize = 2000;
    let server = RedisServer::start();
    let mut admin = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    let store = server.store().await;
    let locks = ExpireLock::new(store.clone());
    let holder = ExpireLock::new(server.store().await);
    let names = |prefix: &'static str, n: usize| (0..n).map(move |i| format!("{prefix}{i}"));
    let mut held = Vec::new();
    for name in names("watched-", WATCHED).chain(names("contended-", CONTENDED)) {
        held.push(
            holder
                .lock_with_lease(&name, Duration::from_secs(120), None)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    // Every connection from now on is refused.
    let clients = number_after(&info(&mut admin, "clients").await, "connected_clients:");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(clients)
        .query_async(&mut admin)
        .await
        .unwrap();

    // Waiters that stay: each keeps its channel registered (pending).
    let waiters: Vec<_> = names("watched-", WATCHED)
        .map(|name| {
            let locks = locks.clone();
            tokio::spawn(async move { locks.lock(&name).await })
        })
        .collect();
    // Many distinct names, each contended briefly by a waiter that gives up.
    let contended: Vec<String> = names("contended-", CONTENDED).collect();
    for batch in contended.chunks(200) {
        let tries = batch
            .iter()
            .map(|name| locks.try_lock_for(name, Duration::from_millis(60)));
        for got in futures_util::future::join_all(tries).await {
            assert!(got.unwrap().is_none());
        }
    }
    let notifier = store.notifier().await.expect("a notifier");
    // The waiters that gave up are let go as their watches drop; give the subscriber a moment.
    let settled = Instant::now() + Duration::from_secs(5);
    while (notifier.channels() > WATCHED || notifier.backlog() > 0) && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = number_after(&info(&mut admin, "stats").await, "rejected_connections:");
    println!(
        "pub/sub connection refused {refused} times; {CONTENDED} names contended: the notifier \
         keeps {} channels, backlog {}",
        notifier.channels(),
        notifier.backlog()
    );
    assert!(refused > 0, "the pub/sub connection was never refused");
    assert_eq!(
        notifier.channels(),
        WATCHED,
        "the notifier keeps channels nobody waits for while it cannot connect"
    );
    assert_eq!(notifier.backlog(), 0);

    // The server takes connections again: the watched channels, and only those, are
    // subscribed, in batches.
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("maxclients")
        .arg(10000)
        .query_async(&mut admin)
        .await
        .unwrap();
    let subscribed = async |admin: &mut redis::aio::MultiplexedConnection| -> Vec<String> {
        redis::cmd("PUBSUB")
            .arg("CHANNELS")
            .arg("tairlock:*")
            .query_async(admin)
            .await
            .unwrap()
    };
    let give_up = Instant::now() + Duration::from_secs(15);
    while subscribed(&mut admin).await.len() < WATCHED && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let mut channels = subscribed(&mut admin).await;
    channels.sort();
    let mut expected: Vec<String> = names("watched-", WATCHED)
        .map(|name| locks.keys(&name).unwrap().channel)
        .collect();
    expected.sort();
    assert_eq!(
        channels, expected,
        "subscribed after the outage: not the watched channels"
    );
    let subscribes = number_after(
        &info(&mut admin, "commandstats").await,
        "cmdstat_subscribe:calls=",
    );
    println!("{WATCHED} watched channels subscribed with {subscribes} SUBSCRIBE commands");
    assert_eq!(
        subscribes as usize,
        WATCHED.div_ceil(SUBSCRIBE_BATCH),
        "the watched channels were not subscribed in batches of {SUBSCRIBE_BATCH}"
    );

    // And they deliver: each waiter gets its lock once released.
    for guard in held {
        guard.release().await.unwrap();
    }
    for waiter in waiters {
        let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("a waiter missed its release")
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
    }
}

/// A multi-thread runtime with two workers, for the tests that shut runtimes down.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// A waiter busy for a while on `name`, on a runtime of its own that is shut down after it: the
/// first wait on the store, which starts its notifier.
fn first_wait_on_a_runtime_that_ends(locks: &ExpireLock<RedisStore>, name: &str) {
    let short = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    short.block_on(async {
        let got = locks
            .try_lock_for(name, Duration::from_millis(500))
            .await
            .unwrap();
        assert!(got.is_none());
    });
    drop(short);
}

/// After the first waiter's runtime shut down: a new channel still gets subscribed (it used to
/// stay pending forever, each busy acquire then waiting out the subscribe limit), and a waiter on
/// the channel the first one left lingering is woken by the release.
fn notifications_still_work(
    rt: &tokio::runtime::Runtime,
    server: &RedisServer,
    locks: &ExpireLock<RedisStore>,
    held: tairlock::LockGuard<RedisStore>,
) {
    rt.block_on(async {
        let notifier: Notifier = locks.store().notifier().await.unwrap();
        let watch = tokio::time::timeout(Duration::from_secs(10), notifier.watch("fresh"))
            .await
            .expect("a subscription after the first waiter's runtime ended stays pending")
            .unwrap();
        assert!(hears(server, &watch, "fresh", "hello").await);
        let l = locks.clone();
        let waiting = tokio::spawn(async move { l.lock("first").await });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = Instant::now();
        assert_eq!(held.release().await.unwrap(), Unlock::Released);
        let guard = tokio::time::timeout(Duration::from_secs(10), waiting)
            .await
            .expect("the waiter slept past the release")
            .unwrap()
            .unwrap();
        let took = released.elapsed();
        assert!(
            took < Duration::from_secs(2),
            "woken {took:?} after the release"
        );
        guard.release().await.unwrap();
    });
}

/// The notifier's task used to run on the runtime of the first waiter that needed it; when that
/// runtime shut down, the task was gone and every channel stayed pending. It runs on the
/// store's runtime now.
#[test]
fn the_notifier_outlives_the_runtime_of_its_first_waiter() {
    let server = RedisServer::start();
    let rt = runtime();
    let locks = ExpireLock::new(rt.block_on(server.store()));
    let holder = ExpireLock::new(rt.block_on(server.store()));
    let held = rt
        .block_on(holder.lock_with_lease("first", Duration::from_secs(30), None))
        .unwrap()
        .unwrap();
    first_wait_on_a_runtime_that_ends(&locks, "first");
    notifications_still_work(&rt, &server, &locks, held);
}

/// When the notifier's task is gone anyway (here the store's own runtime shut down: the store
/// was assembled on a short-lived runtime around a connection that lives elsewhere), the next
/// registration notices and starts it again, rather than leaving every channel pending.
#[test]
fn a_notifier_whose_task_is_gone_starts_it_again() {
    let server = RedisServer::start();
    let rt = runtime();
    let client = redis::Client::open(server.url()).unwrap();
    let con = rt
        .block_on(redis::aio::ConnectionManager::new(client.clone()))
        .unwrap();
    let holder = ExpireLock::new(rt.block_on(server.store()));
    let held = rt
        .block_on(holder.lock_with_lease("first", Duration::from_secs(30), None))
        .unwrap()
        .unwrap();
    let locks = {
        let short = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = short
            .block_on(async { RedisStore::from_manager(con, client, RedisOptions::default()) });
        let locks = ExpireLock::new(store);
        short.block_on(async {
            let got = locks
                .try_lock_for("first", Duration::from_millis(500))
                .await
                .unwrap();
            assert!(got.is_none());
        });
        locks
    };
    notifications_still_work(&rt, &server, &locks, held);
}

/// A fair waiter queued by its first busy attempt then waits for its subscription; on a pub/sub
/// connection that does not come through, it used to wait up to the subscribe limit (2 s)
/// without refreshing its place, which lapsed meanwhile (waiter lease 900 ms here): a waiter
/// that came after it got the lock first. It refreshes its place while it waits now, and keeps
/// its turn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fair_waiter_keeps_its_place_while_its_subscription_is_slow() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let fair = || {
        Options::default()
            .fair(true)
            .waiter_lease(Duration::from_millis(900))
    };
    // The first waiter's data connection goes through; its pub/sub connection never answers.
    let slow = ExpireLock::with_options(proxy.store().await, fair());
    proxy.stall_new_connections(true);
    let holder = ExpireLock::with_options(server.store().await, fair());
    let later = ExpireLock::with_options(server.store().await, fair());
    let held = holder
        .lock_with_lease("turn", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let waiter = |locks: ExpireLock<RedisStore>, who: &'static str| {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = locks.lock("turn").await.unwrap();
            order.lock().push(who);
            tokio::time::sleep(Duration::from_millis(100)).await;
            guard.release().await.unwrap();
        })
    };
    let first = waiter(slow, "first");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let second = waiter(later, "second");
    // Past the first waiter's lease, within the subscribe limit.
    tokio::time::sleep(Duration::from_millis(1200)).await;
    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    for w in [first, second] {
        tokio::time::timeout(Duration::from_secs(20), w)
            .await
            .expect("a fair waiter never got the lock")
            .unwrap();
    }
    assert_eq!(
        *order.lock(),
        ["first", "second"],
        "the first waiter lost its place while it waited for its subscription"
    );
    assert!(proxy.connections().iter().any(|c| c.stalled));
}

/// The index in `cluster.nodes` of the node that serves `key`, by the ports `CLUSTER SLOTS`
/// names (`ports[i]` is what node `i` announces).
fn node_serving(cluster: &RedisCluster, ports: &[u16], key: &str) -> usize {
    let slot: u16 = cluster.nodes[0]
        .cli(&["CLUSTER", "KEYSLOT", key])
        .parse()
        .unwrap();
    let mut con = redis::Client::open(cluster.nodes[0].url())
        .unwrap()
        .get_connection()
        .unwrap();
    let ranges: Vec<Vec<redis::Value>> =
        redis::cmd("CLUSTER").arg("SLOTS").query(&mut con).unwrap();
    let port = ranges
        .iter()
        .find_map(|range| {
            let lo: u16 = redis::from_redis_value_ref(&range[0]).unwrap();
            let hi: u16 = redis::from_redis_value_ref(&range[1]).unwrap();
            let master: Vec<redis::Value> = redis::from_redis_value_ref(&range[2]).unwrap();
            (lo..=hi)
                .contains(&slot)
                .then(|| redis::from_redis_value_ref::<u16>(&master[1]).unwrap())
        })
        .unwrap_or_else(|| cluster.fail(format!("slot {slot} is not served")));
    ports
        .iter()
        .position(|p| *p == port)
        .unwrap_or_else(|| cluster.fail(format!("slot {slot} served on unknown port {port}")))
}

/// A 3-master cluster whose nodes announce a fault proxy in front of each of them
/// (`cluster-announce-port`), so that every client connection goes through one: `proxies[i]`
/// is node `i`'s.
fn proxied_cluster() -> (RedisCluster, Vec<Proxy>) {
    let cluster = RedisCluster::start(3);
    let proxies: Vec<Proxy> = cluster
        .nodes
        .iter()
        .map(|n| Proxy::start(n.port()))
        .collect();
    for (node, proxy) in cluster.nodes.iter().zip(&proxies) {
        let bus = (node.port() + 10000).to_string();
        assert_eq!(
            node.cli(&["CONFIG", "SET", "cluster-announce-bus-port", &bus]),
            "OK"
        );
        let port = proxy.port().to_string();
        assert_eq!(
            node.cli(&["CONFIG", "SET", "cluster-announce-port", &port]),
            "OK"
        );
    }
    // Every node names the proxies once the announcements have gone round.
    let give_up = Instant::now() + Duration::from_secs(20);
    while !cluster.nodes.iter().all(|node| {
        let slots = node.cli(&["CLUSTER", "SLOTS"]);
        proxies
            .iter()
            .all(|p| slots.lines().any(|l| l.trim() == p.port().to_string()))
            && cluster
                .nodes
                .iter()
                .all(|n| !slots.lines().any(|l| l.trim() == n.port().to_string()))
    }) {
        if Instant::now() > give_up {
            cluster.fail("the nodes never announced their proxies");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (cluster, proxies)
}

/// A node connection of the sharded subscriber that a network device stops forwarding (no
/// reset: the cluster client never learns it is gone) used to lose that shard's messages for
/// good, its channels still marked subscribed: a waiter slept out the holder's whole lease. The
/// subscriber now probes every master when no other round trip came for 5 response timeouts,
/// and a silent one makes it connect again and subscribe every watched channel again. Every
/// node announces a fault proxy in front of it, so every client connection goes through one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_node_connection_of_the_sharded_subscriber_is_noticed() {
    let (cluster, proxies) = proxied_cluster();
    let ports: Vec<u16> = proxies.iter().map(Proxy::port).collect();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let mut options = ClusterOptions::default();
    // The probe runs every 5 response timeouts: 2.5 s here.
    options.response_timeout = Duration::from_millis(500);
    let store = ClusterStore::connect_with(&urls, options).await.unwrap();
    assert_eq!(store.pubsub(), PubSub::Sharded);
    let locks = ExpireLock::new(store);
    let holder = ExpireLock::new(ClusterStore::connect(&urls).await.unwrap());
    let name = "silent";
    let node = node_serving(&cluster, &ports, &format!("tairlock:{{{name}}}"));
    let held = holder
        .lock_with_lease(name, Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let l = locks.clone();
    let waiting = tokio::spawn(async move { l.lock(name).await });
    let subscribed = pubsub_connection(&proxies[node], None, Duration::from_secs(10))
        .unwrap_or_else(|| cluster.fail("the waiter never subscribed on its shard"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    proxies[node].black_hole(Which::Nth(subscribed));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let released = Instant::now();
    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    let guard = tokio::time::timeout(Duration::from_secs(40), waiting)
        .await
        .expect("the waiter never got the lock")
        .unwrap()
        .unwrap();
    let took = released.elapsed();
    println!("lock after the release, its shard's subscription black-holed: {took:?}");
    assert!(
        took < Duration::from_secs(10),
        "took {took:?} of a 30 s lease: the silent node connection went unnoticed"
    );
    guard.release().await.unwrap();
}

/// The sharded subscriber while its cluster connection cannot be made (every node's proxy
/// stalls new connections; the stores' own connections were made before): many distinct names
/// contended meanwhile leave only the watched channels registered and nothing in the backlog
/// (the sharded subscriber used to spawn one task per request, each waiting for the connection,
/// and to keep every channel for its 3 s linger), and once the network lets connections through,
/// exactly the watched channels are subscribed, each on its shard, and deliver.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_keeps_the_sharded_subscriber_bounded() {
    const WATCHED: usize = 2 * SUBSCRIBE_BATCH + 10;
    const CONTENDED: usize = 600;
    let (cluster, proxies) = proxied_cluster();
    let urls: Vec<String> = proxies.iter().map(Proxy::url).collect();
    let store = ClusterStore::connect(&urls).await.unwrap();
    assert_eq!(store.pubsub(), PubSub::Sharded);
    let locks = ExpireLock::new(store.clone());
    let holder = ExpireLock::new(ClusterStore::connect(&urls).await.unwrap());
    let names = |prefix: &'static str, n: usize| (0..n).map(move |i| format!("{prefix}{i}"));
    let mut held = Vec::new();
    for name in names("watched-", WATCHED).chain(names("contended-", CONTENDED)) {
        held.push(
            holder
                .lock_with_lease(&name, Duration::from_secs(120), None)
                .await
                .unwrap()
                .unwrap(),
        );
    }
    for proxy in &proxies {
        proxy.stall_new_connections(true);
    }
    let waiters: Vec<_> = names("watched-", WATCHED)
        .map(|name| {
            let locks = locks.clone();
            tokio::spawn(async move { locks.lock(&name).await })
        })
        .collect();
    let contended: Vec<String> = names("contended-", CONTENDED).collect();
    for batch in contended.chunks(200) {
        let tries = batch
            .iter()
            .map(|name| locks.try_lock_for(name, Duration::from_millis(60)));
        for got in futures_util::future::join_all(tries).await {
            assert!(got.unwrap().is_none());
        }
    }
    let notifier = store.notifier().await.expect("a notifier");
    // Well within the 3 s linger: the channels of the waiters that gave up are let go at once.
    let settled = Instant::now() + Duration::from_secs(1);
    while (notifier.channels() > WATCHED || notifier.backlog() > 0) && Instant::now() < settled {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    println!(
        "cluster unreachable for the subscriber; {CONTENDED} names contended: the notifier keeps \
         {} channels, backlog {}",
        notifier.channels(),
        notifier.backlog()
    );
    assert_eq!(notifier.channels(), WATCHED);
    assert_eq!(notifier.backlog(), 0);

    for proxy in &proxies {
        proxy.stall_new_connections(false);
    }
    let mut expected: Vec<String> = names("watched-", WATCHED)
        .map(|name| locks.keys(&name).unwrap().channel)
        .collect();
    expected.sort();
    let subscribed = || {
        let mut all: Vec<String> = cluster
            .nodes
            .iter()
            .flat_map(|node| {
                let listed = node.cli(&["PUBSUB", "SHARDCHANNELS", "tairlock:*"]);
                listed
                    .lines()
                    .map(str::trim)
                    .filter(|l| !l.is_empty())
                    .map(str::to_owned)
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort();
        all
    };
    let give_up = Instant::now() + Duration::from_secs(20);
    while subscribed() != expected && Instant::now() < give_up {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        subscribed(),
        expected,
        "subscribed after the outage: not the watched channels"
    );
    for guard in held {
        guard.release().await.unwrap();
    }
    for waiter in waiters {
        let guard = tokio::time::timeout(Duration::from_secs(20), waiter)
            .await
            .expect("a waiter missed its release")
            .unwrap()
            .unwrap();
        guard.release().await.unwrap();
    }
}
