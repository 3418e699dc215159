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

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use support::proxy::{Proxy, Which};
use tairlock::store::redis::RedisOptions;
use tairlock::{ExpireLock, RedisStore, Store, Unlock};

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
