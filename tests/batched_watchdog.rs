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
    command_calls(server, "evalsha")
}

/// Calls of `command` (lowercase; the commands a script runs count too) since the last
/// `CONFIG RESETSTAT`, from `INFO commandstats`.
fn command_calls(server: &RedisServer, command: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

/// `calls` script calls renewed `guards` leases of `lease` held `held` (a renewal every third of
/// the lease): far fewer calls than renewals, as one call per batch makes.
#[track_caller]
fn assert_batched(calls: u64, guards: usize, held: Duration, lease: Duration) {
    let renewals = guards as u64 * (held.as_millis() / (lease / 3).as_millis()) as u64;
    println!("{calls} script calls for about {renewals} renewals");
    assert!(calls > 0, "nothing was renewed");
    assert!(
        calls * 20 < renewals,
        "{calls} script calls for about {renewals} renewals: not batched"
    );
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
    assert_batched(calls, guards.len(), held, lease);
    all_held(&store, &guards).await;
    release_all(guards).await;
}

/// Fair-mode guards are renewed in batches too (their leases are the expire lock's): 500 guards
/// of 600 ms leases held 1.2 s take a few script calls per round, not one per lease; and a fair
/// waiter queued behind one of them gets it when it is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fair_guards_are_renewed_in_batches() {
    let server = RedisServer::start();
    let store = server.store().await;
    let lease = Duration::from_millis(600);
    let options = Options::default().watchdog_lease(lease).fair(true);
    let locks = ExpireLock::with_options(store.clone(), options.clone());
    let guards = hold(&locks, 500).await;
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    let held = Duration::from_millis(1_200);
    tokio::time::sleep(held).await;
    let calls = evalsha_calls(&server);
    assert_eq!(
        guards.iter().filter(|g| g.is_lost()).count(),
        0,
        "fair guards lost"
    );
    assert_batched(calls, guards.len(), held, lease);
    all_held(&store, &guards).await;
    // A waiter of another client queues behind the first guard and gets it on its release.
    let other = ExpireLock::with_options(server.store().await, options);
    let name = guards[0].name().to_owned();
    let waiter = tokio::spawn(async move { other.lock(&name).await.map(|g| g.fence()) });
    tokio::time::sleep(Duration::from_millis(100)).await;
    release_all(guards).await;
    let fence = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("the waiter got the lock")
        .unwrap()
        .unwrap();
    assert!(fence > 0);
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

/// The fence key is refreshed only when it might not outlive the renewed lease by the
/// retention, as the last refresh reported its time left: 200 guards of 300 ms leases
/// (renewed every 100 ms) with a 1 s retention, held 2 s, write their fence keys about once per
/// half retention, not at every renewal, and no renewal reads a fence key's time to live; yet
/// every fence key outlives its lease by the retention throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fence_keys_are_refreshed_once_per_half_retention_not_at_every_renewal() {
    let server = RedisServer::start();
    let store = server.store().await;
    let (lease, retention) = (Duration::from_millis(300), Duration::from_secs(1));
    let locks = ExpireLock::with_options(
        store.clone(),
        Options::default()
            .watchdog_lease(lease)
            .fence_retention(retention),
    );
    let guards = hold(&locks, 200).await;
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
    let held = Duration::from_secs(2);
    let start = Instant::now();
    let mut samples = 0;
    while start.elapsed() < held {
        tokio::time::sleep(Duration::from_millis(150)).await;
        for guard in guards.iter().step_by(20) {
            let keys = locks.keys(guard.name()).unwrap();
            let ms = |ttl: tairlock::store::Ttl| match ttl {
                tairlock::store::Ttl::Expires(left) => left,
                other => panic!("{}: a key without a lease: {other:?}", guard.name()),
            };
            let lock_left = ms(store.pttl(&keys.lock).await.unwrap());
            let fence_left = ms(store.pttl(&keys.fence).await.unwrap());
            // Two reads apart, within tens of ms; the margin is that, not the rule's.
            assert!(
                fence_left + Duration::from_millis(50) >= lock_left + retention,
                "{}: the fence key lasts {fence_left:?}, the lease {lock_left:?}",
                guard.name()
            );
            samples += 1;
        }
    }
    assert!(guards.iter().all(|g| !g.is_lost()), "a guard was lost");
    let renewals = guards.len() as u64 * (held.as_millis() / (lease / 3).as_millis()) as u64;
    // Each renewal sets the lock key; a refresh sets the fence key too. The batch reads no
    // fence key's time to live (only the test's own PTTLs above count).
    let sets = command_calls(&server, "set");
    let refreshes = sets.saturating_sub(renewals * 9 / 10);
    println!("{sets} SETs for about {renewals} renewals; {samples} samples");
    assert_eq!(
        command_calls(&server, "pttl"),
        2 * samples,
        "a renewal read a fence key's time to live"
    );
    // One refresh per guard per half retention (4 in 2 s), and the first renewal's; allow a
    // few more for batches that join early.
    let most = guards.len() as u64 * (held.as_millis() / (retention / 2).as_millis() + 3) as u64;
    assert!(
        refreshes <= most,
        "{sets} SETs for about {renewals} renewals: {refreshes} fence refreshes, more than {most}"
    );
    release_all(guards).await;
}
