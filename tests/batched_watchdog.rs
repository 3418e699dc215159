//! The batched watchdog on a real server: many guards of one lock handle renewed by one task,
//! many leases per `RENEW_MANY` call, each lease's outcome its own guard's.

mod support;

use std::time::Duration;

use support::RedisServer;
use tairlock::{ExpireLock, LockGuard, Options, RedisStore, Store};
use tairlock_testing::proxy::{Proxy, Which};
use tokio::time::Instant;

/// `EVALSHA` calls since the last `CONFIG RESETSTAT`, from `INFO commandstats`.
fn evalsha_calls(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

async fn hold<S: Store>(locks: &ExpireLock<S>, n: usize) -> Vec<LockGuard<S>> {
    let mut guards = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let tasks: Vec<_> = chunk
            .iter()
            .map(|&i| {
                let locks = locks.clone();
                tokio::spawn(async move { locks.lock(&format!("many:{i}")).await })
            })
            .collect();
        for task in tasks {
            guards.push(task.await.unwrap().unwrap());
        }
    }
    guards
}

/// Each guard's lock is held by its holding on the server: a lease of its fence, expiring
/// (the lease itself rotates with every renewal; the release at the end of each test shows
/// the guard had the one in effect).
async fn all_held(store: &RedisStore, guards: &[LockGuard<RedisStore>]) {
    let locks = ExpireLock::new(store.clone());
    for guard in guards {
        let inspection = locks.inspect(guard.name()).await.unwrap();
        let holder = inspection.holder.expect("held");
        assert_eq!(holder.fence(), guard.fence(), "{}", guard.name());
        assert!(matches!(inspection.ttl, tairlock::store::Ttl::Expires(_)));
    }
}

async fn release_all(guards: Vec<LockGuard<RedisStore>>) {
    for guard in guards {
        let name = guard.name().to_owned();
        assert_eq!(
            guard.release().await.unwrap(),
            tairlock::Unlock::Released,
            "{name}: the guard's lease was not the one in effect"
        );
    }
}

/// 2,000 guards of 600 ms leases (renewed every 200 ms) held for 2.4 s, a dozen renewal
/// intervals: none is lost, and the renewals took far fewer script calls than leases ×
/// intervals (24,000 renewals; one call per lease each would be 24,000 calls).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_leases_are_renewed_in_batches_and_none_is_lost() {
    let server = RedisServer::start();
    let store = server.store().await;
    let lease = Duration::from_millis(600);
    let locks = ExpireLock::with_options(store.clone(), Options::default().watchdog_lease(lease));
    let guards = hold(&locks, 2_000).await;
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    let held = Duration::from_millis(2_400);
    tokio::time::sleep(held).await;
    let calls = evalsha_calls(&server);
    let lost = guards.iter().filter(|g| g.is_lost()).count();
    assert_eq!(lost, 0, "guards lost while the server answered");
    let renewals = guards.len() as u64 * (held.as_millis() / (lease / 3).as_millis()) as u64;
    println!("{calls} script calls for about {renewals} renewals");
    assert!(calls > 0, "nothing was renewed");
    assert!(
        calls * 20 < renewals,
        "{calls} script calls for about {renewals} renewals: not batched"
    );
    all_held(&store, &guards).await;
    release_all(guards).await;
}

/// One lease deleted from under the batch: its guard, and only its guard, is lost within a
/// renewal interval or two; the others of the same batches stay held and renewed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_deleted_under_the_batch_is_lost_for_its_guard_only() {
    let server = RedisServer::start();
    let store = server.store().await;
    let lease = Duration::from_millis(300);
    let locks = ExpireLock::with_options(store.clone(), Options::default().watchdog_lease(lease));
    let guards = hold(&locks, 50).await;
    let victim = &guards[17];
    let key = locks.keys(victim.name()).unwrap().lock;
    assert_eq!(server.cli(&["DEL", &key]), "1");
    tokio::time::timeout(lease, victim.lost())
        .await
        .expect("the guard whose lease was deleted is told");
    assert!(victim.is_lost());
    // Several more renewal intervals: the rest are renewed (past their first leases).
    tokio::time::sleep(lease * 2).await;
    let others: Vec<_> = guards
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 17)
        .map(|(_, g)| g)
        .collect();
    assert!(
        others.iter().all(|g| !g.is_lost()),
        "another guard was reported lost"
    );
    assert_eq!(
        server.cli(&["EXISTS", &key]),
        "0",
        "the lost lease stays gone"
    );
    let others: Vec<_> = guards
        .into_iter()
        .enumerate()
        .filter_map(|(i, g)| (i != 17).then_some(g))
        .collect();
    all_held(&store, &others).await;
    release_all(others).await;
    assert_eq!(
        server.cli(&["EXISTS", &key]),
        "0",
        "the lost lease stays gone"
    );
}

/// A batch whose replies are lost (the fault proxy drops the call's and its immediate repeat's):
/// nothing is declared lost, a later batch repeats the renewals with the same nonces (a new
/// nonce would find the lease the lost call made, another's) and every guard stays held. With
/// the server out of reach altogether, a guard is lost at its own deadline and never before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_whose_reply_is_lost_loses_nothing_before_its_deadline() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    // A reply that does not come fails the call in 100 ms (the default is 2 s).
    let mut options = tairlock::store::RedisOptions::default();
    options.response_timeout = Duration::from_millis(100);
    let store = proxy.store_with(options).await;
    let lease = Duration::from_millis(1_500);
    let locks = ExpireLock::with_options(store.clone(), Options::default().watchdog_lease(lease));
    let guards = hold(&locks, 200).await;
    // One round of renewals first: the script's first `EVALSHA` meets `NOSCRIPT` and runs
    // nothing, which would hide a lost reply.
    tokio::time::sleep(lease / 2).await;
    let sha = tairlock::scripts::RENEW_MANY.sha1().to_owned();
    // The call and its immediate repeat: the next batch repeats them, with the same nonces.
    proxy.drop_replies_matching(Which::All, sha.as_bytes(), 2);
    tokio::time::sleep(lease * 2).await;
    assert!(
        proxy.faults().get("drop_reply").copied().unwrap_or(0) >= 2,
        "{:?}",
        proxy.faults()
    );
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "a guard was lost over a lost reply"
    );
    all_held(&store, &guards).await;

    // Now nothing comes back at all: each guard is lost at its deadline, not before.
    let deadlines: Vec<Instant> = guards
        .iter()
        .map(|g| g.lease().deadline().unwrap())
        .collect();
    proxy.black_hole(Which::All);
    let latest = *deadlines.iter().max().unwrap();
    while Instant::now() < latest + Duration::from_millis(100) {
        for (guard, deadline) in guards.iter().zip(&deadlines) {
            // A renewal may land just before the black hole: the deadline only moves later.
            let now = Instant::now();
            if guard.is_lost() {
                assert!(
                    now >= *deadline,
                    "{} lost {:?} before its deadline",
                    guard.name(),
                    *deadline - now
                );
            }
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        guards.iter().all(LockGuard::is_lost),
        "past every deadline without an answer, every guard is lost"
    );
    proxy.heal(Which::All);
}
