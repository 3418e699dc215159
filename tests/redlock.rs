//! Redlock over 3 and 5 independent servers that the test starts itself (issue #8): killing a
//! minority keeps locking working, killing a majority makes acquire fail cleanly within its
//! timeout, and the delayed-restart rule keeps a restarted empty server from letting two holders
//! in (while breaking the rule does let them in).

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::{RedisStore, Redlock, RedlockOptions};

fn options() -> RedlockOptions {
    // Generous per-server bound: debug builds on a loaded 2-core machine.
    RedlockOptions::default()
        .server_timeout(Duration::from_millis(250))
        .retry_delay(Duration::from_millis(40))
}

async fn redlock(servers: &[RedisServer]) -> Redlock<RedisStore> {
    let mut stores = Vec::new();
    for s in servers {
        stores.push(s.store().await);
    }
    Redlock::new(stores, options()).unwrap()
}

const TTL: Duration = Duration::from_secs(10);
const TIMEOUT: Duration = Duration::from_millis(800);

async fn kill_minority_then_majority(n: usize) {
    let mut servers: Vec<RedisServer> = (0..n).map(|_| RedisServer::start()).collect();
    let a = redlock(&servers).await;
    let b = redlock(&servers).await;
    assert_eq!(a.quorum(), n / 2 + 1);

    let lease = a.acquire("job", TTL, TIMEOUT).await.unwrap().unwrap();
    assert_eq!(lease.granted(), n);
    assert!(lease.remaining() > TTL - Duration::from_secs(1));
    assert!(b.try_acquire("job", TTL).await.unwrap().is_none());
    assert_eq!(a.release(&lease).await, n);

    // Kill a minority: locking still works, and still excludes.
    for s in servers.iter_mut().take(n - a.quorum()) {
        s.stop();
    }
    let lease = a.acquire("job", TTL, TIMEOUT).await.unwrap().unwrap();
    assert_eq!(lease.granted(), a.quorum());
    // Not in time is `None`, as for every lock kind.
    assert!(b.acquire("job", TTL, TIMEOUT).await.unwrap().is_none());
    let extended = a
        .renew(&lease, TTL)
        .await
        .unwrap()
        .expect("extend on a majority");
    assert!(extended.deadline() >= lease.deadline());
    assert_eq!(a.release(&extended).await, a.quorum());
    assert!(b.try_acquire("job", TTL).await.unwrap().is_some());

    // Kill one more: a majority is down; acquire gives up cleanly within its timeout.
    servers[n - a.quorum()].stop();
    let started = Instant::now();
    let got = a.acquire("other", TTL, TIMEOUT).await.unwrap();
    let took = started.elapsed();
    assert!(got.is_none(), "a majority is down, yet {got:?}");
    assert!(
        took < TIMEOUT + Duration::from_millis(500),
        "acquire took {took:?} for a {TIMEOUT:?} timeout"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_minority_and_majority_down() {
    kill_minority_then_majority(3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn five_servers_minority_and_majority_down() {
    kill_minority_then_majority(5).await;
}

/// A holds servers 0 and 1 (server 2 was down). Server 1 crashes and comes back empty; with
/// server 2 back too, B can form a majority {1, 2}. Restarted at once, B gets in while A is
/// still valid (two holders); restarted only after the longest TTL (the delayed-restart rule),
/// B gets in only after A's validity has ended.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_without_persistence_needs_the_delayed_restart_rule() {
    const SHORT_TTL: Duration = Duration::from_millis(1500);
    for follow_rule in [false, true] {
        let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
        let a = redlock(&servers).await;
        let b = redlock(&servers).await;
        servers[2].stop();
        let lease = a.acquire("job", SHORT_TTL, TIMEOUT).await.unwrap().unwrap();
        assert_eq!(lease.granted(), 2);
        servers[2].restart();
        servers[1].stop();
        if follow_rule {
            tokio::time::sleep(SHORT_TTL).await;
        }
        servers[1].restart();
        let got = b
            .acquire("job", SHORT_TTL, Duration::from_secs(5))
            .await
            .unwrap()
            .expect("B gets in within 5 s");
        let overlap = tokio::time::Instant::now() < lease.deadline();
        if follow_rule {
            assert!(!overlap, "B acquired while A's lease was still valid");
        } else {
            assert!(
                overlap,
                "breaking the rule should let B in while A is valid"
            );
        }
        b.release(&got).await;
    }
}
