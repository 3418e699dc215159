//! The expire lock's fair mode (issue #13 §2): a FIFO of waiters on the server with direct
//! handoff, on the embedded store and on a real server (the cluster has its own test in
//! tests/cluster.rs). Every waiter here is a separate `ExpireLock` value: a separate client, as
//! separate processes would be.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::{Env, TestStore};
use tairlock::scripts::{FAIR_LOCK, FAIR_UNLOCK};
use tairlock::{ExpireLock, Options, Reply, Store, Unlock, WaitStrategy};
use tokio::time::Instant;

const NAME: &str = "fair-job";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn fair() -> Options {
    Options::default().fair(true).waiter_lease(ms(600))
}

/// `name::{memory,redis}` from `async fn name(env)`.
macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            use super::support::Env;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(Env::memory_real_time()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(Env::redis().await).await;
            }
        }
    )+};
}

on_both_stores!(
    a_release_hands_the_lock_to_the_waiters_in_arrival_order,
    a_release_with_an_empty_queue_frees_the_lock,
    a_waiter_that_crashed_while_queued_is_skipped,
    a_waiter_that_crashed_after_its_grant_delays_the_next_by_its_waiter_lease_at_most,
    a_lost_announcement_costs_at_most_a_third_of_the_waiter_lease,
    timeout_and_cancel_leave_the_queue,
    a_waiter_leaving_after_its_grant_hands_the_lock_on,
    a_single_attempt_does_not_queue,
    the_fair_scripts_are_safe_to_repeat,
    fair_and_plain_clients_mixed_never_overlap,
    data_that_is_not_a_queue_is_an_error_and_untouched,
);

/// The queue's two keys, for the default keyspace.
fn queue_keys() -> [String; 2] {
    let lock = format!("tairlock:{{{NAME}}}");
    [format!("{lock}:fairq"), format!("{lock}:fairw")]
}

async fn queue_is_empty<S: Store>(store: &S) -> bool {
    let [q, w] = queue_keys();
    store.key_type(&q).await.unwrap() == "none" && store.key_type(&w).await.unwrap() == "none"
}

/// A waiter that joins the queue under `nonce` and then does nothing (a crashed process).
async fn crashed_waiter<S: Store>(store: &S, nonce: &str, waiter_lease: Duration) {
    let lock = format!("tairlock:{{{NAME}}}");
    let [q, w] = queue_keys();
    let keys = [lock.clone(), format!("{lock}:fence"), q, w];
    let args = [
        "30000".to_owned(),
        nonce.to_owned(),
        "60000".to_owned(),
        waiter_lease.as_millis().to_string(),
        format!("{lock}:released:w:crashed"),
        "1".to_owned(),
    ];
    let reply = store.eval(&FAIR_LOCK, &keys, &args).await.unwrap();
    assert_eq!(reply.as_array().unwrap()[0].as_int(), Some(0), "{reply:?}");
}

async fn a_release_hands_the_lock_to_the_waiters_in_arrival_order<S: TestStore>(env: Env<S>) {
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    let first_fence = guard.lease().fence();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let (locks, order) = (env.locks_with(fair()), order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locks.lock(NAME).await.unwrap();
            order.lock().push((i, guard.lease().fence()));
            tokio::time::sleep(ms(10)).await;
            guard.release().await.unwrap();
        }));
        // Arrive one after the other, each queued before the next comes.
        tokio::time::sleep(ms(100)).await;
    }
    guard.release().await.unwrap();
    // Handed over in the release itself: the lock is never free while anyone waits.
    let held = holder.inspect(NAME).await.unwrap();
    assert!(held.holder.is_some(), "{held:?}");
    for w in waiters {
        w.await.unwrap();
    }
    let order = order.lock().clone();
    let who: Vec<_> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, vec![0, 1, 2, 3], "{}", env.context());
    let mut fences = vec![first_fence];
    fences.extend(order.iter().map(|(_, f)| *f));
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert!(queue_is_empty(&env.store).await);
}

async fn a_release_with_an_empty_queue_frees_the_lock<S: TestStore>(env: Env<S>) {
    let locks = env.locks_with(fair());
    let guard = locks.lock(NAME).await.unwrap();
    let lease = guard.lease();
    guard.release().await.unwrap();
    assert!(locks.inspect(NAME).await.unwrap().holder.is_none());
    assert_eq!(
        locks.expire_unlock(NAME, &lease).await.unwrap(),
        Unlock::NotHeld
    );
    assert!(queue_is_empty(&env.store).await);
    // Free for anyone, fair or not.
    assert!(env.locks().try_lock(NAME).await.unwrap().is_some());
}

async fn a_waiter_that_crashed_while_queued_is_skipped<S: TestStore>(env: Env<S>) {
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    crashed_waiter(&env.store, "deadbeef", ms(200)).await;
    let waiter = env.locks_with(fair());
    let next = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    // The crashed waiter's lease runs out while the lock is held.
    tokio::time::sleep(ms(400)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = next.await.unwrap();
    let took = released.elapsed();
    assert!(
        took < ms(300),
        "the live waiter got the lock after {took:?}"
    );
    next.release().await.unwrap();
    assert!(queue_is_empty(&env.store).await);
}

async fn a_waiter_that_crashed_after_its_grant_delays_the_next_by_its_waiter_lease_at_most<
    S: TestStore,
>(
    env: Env<S>,
) {
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    crashed_waiter(&env.store, "deadbeef", ms(500)).await;
    let waiter = env.locks_with(fair());
    let next = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    tokio::time::sleep(ms(100)).await;
    let released = Instant::now();
    // The grant goes to the crashed waiter (still within its lease), for its waiter lease.
    guard.release().await.unwrap();
    let granted = holder.inspect(NAME).await.unwrap().holder.expect("granted");
    assert_eq!(granted.nonce(), "deadbeef");
    let next = next.await.unwrap();
    let took = released.elapsed();
    assert!(
        took >= ms(300) && took < ms(500) + ms(1000),
        "the live waiter got the lock after {took:?} (the dead grant lasts 500 ms)"
    );
    assert!(next.lease().fence() > granted.fence());
    next.release().await.unwrap();
}

async fn a_lost_announcement_costs_at_most_a_third_of_the_waiter_lease<S: TestStore>(env: Env<S>) {
    // A waiter that never listens (polling every 10 s) hears no announcement at all; it still
    // finds its grant at its next refresh, a third of its waiter lease (200 ms) — not after the
    // 10 s poll, and not after the holder's 30 s lease.
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    let deaf = env.locks_with(fair().wait(WaitStrategy::Poll {
        min: Duration::from_secs(10),
        max: Duration::from_secs(10),
    }));
    let next = tokio::spawn(async move { deaf.lock(NAME).await.unwrap() });
    tokio::time::sleep(ms(100)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = next.await.unwrap();
    let took = released.elapsed();
    assert!(took < ms(600), "took {took:?}");
    next.release().await.unwrap();
}

async fn timeout_and_cancel_leave_the_queue<S: TestStore>(env: Env<S>) {
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    let late = env.locks_with(fair());
    assert!(late.try_lock_for(NAME, ms(200)).await.unwrap().is_none());
    assert!(
        queue_is_empty(&env.store).await,
        "a timed-out waiter stayed"
    );
    let cancelled = env.locks_with(fair());
    let task = tokio::spawn(async move { cancelled.lock(NAME).await.map(drop) });
    tokio::time::sleep(ms(200)).await;
    assert!(
        !queue_is_empty(&env.store).await,
        "the waiter should be queued"
    );
    task.abort();
    let _ = task.await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !queue_is_empty(&env.store).await {
        assert!(Instant::now() < deadline, "a cancelled waiter stayed");
        tokio::time::sleep(ms(10)).await;
    }
    // Nobody left to hand to: the release frees the lock.
    guard.release().await.unwrap();
    assert!(holder.inspect(NAME).await.unwrap().holder.is_none());
}

async fn a_waiter_leaving_after_its_grant_hands_the_lock_on<S: TestStore>(env: Env<S>) {
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    crashed_waiter(&env.store, "cafe01", ms(5000)).await;
    let waiter = env.locks_with(fair());
    let next = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    tokio::time::sleep(ms(100)).await;
    guard.release().await.unwrap();
    assert_eq!(
        holder.inspect(NAME).await.unwrap().holder.unwrap().nonce(),
        "cafe01"
    );
    // "cafe01" gives up after its grant was made: leaving releases the grant and hands it on.
    let lock = format!("tairlock:{{{NAME}}}");
    let [q, w] = queue_keys();
    let keys = [lock.clone(), format!("{lock}:fence"), q, w];
    let args = [
        "cafe01".to_owned(),
        "nonce".to_owned(),
        "60000".to_owned(),
        format!("{lock}:released"),
        "PUBLISH".to_owned(),
    ];
    let started = Instant::now();
    let reply = env.store.eval(&FAIR_UNLOCK, &keys, &args).await.unwrap();
    assert_eq!(reply, Reply::Array(vec![Reply::Int(1), Reply::Int(1)]));
    let next = next.await.unwrap();
    assert!(started.elapsed() < ms(1000));
    next.release().await.unwrap();
    // Repeating the leave finds nothing of its own.
    let again = env.store.eval(&FAIR_UNLOCK, &keys, &args).await.unwrap();
    assert_eq!(again, Reply::Array(vec![Reply::Int(-1), Reply::Int(0)]));
}

async fn a_single_attempt_does_not_queue<S: TestStore>(env: Env<S>) {
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    let other = env.locks_with(fair());
    assert!(other.try_lock(NAME).await.unwrap().is_none());
    assert!(queue_is_empty(&env.store).await);
    guard.release().await.unwrap();
}

async fn the_fair_scripts_are_safe_to_repeat<S: TestStore>(env: Env<S>) {
    let lock = format!("tairlock:{{{NAME}}}");
    let [q, w] = queue_keys();
    let keys = [lock.clone(), format!("{lock}:fence"), q, w];
    let acquire = |nonce: &str| {
        [
            "30000".to_owned(),
            nonce.to_owned(),
            "60000".to_owned(),
            "600".to_owned(),
            format!("{lock}:released:w:x"),
            "1".to_owned(),
        ]
    };
    let first = env
        .store
        .eval(&FAIR_LOCK, &keys, &acquire("aa"))
        .await
        .unwrap();
    let again = env
        .store
        .eval(&FAIR_LOCK, &keys, &acquire("aa"))
        .await
        .unwrap();
    let fence = |r: &Reply| {
        let lease = tairlock::Lease::parse(r.as_array().unwrap()[1].as_str().unwrap()).unwrap();
        (lease.nonce().to_owned(), lease.fence())
    };
    assert_eq!(fence(&first), fence(&again), "a repeat finds its own lease");
    // A waiter repeating its attempt keeps one place.
    for _ in 0..2 {
        let busy = env
            .store
            .eval(&FAIR_LOCK, &keys, &acquire("bb"))
            .await
            .unwrap();
        assert_eq!(busy.as_array().unwrap()[0].as_int(), Some(0));
    }
    let lease = again.as_array().unwrap()[1].as_str().unwrap().to_owned();
    let release = [
        lease,
        "lease".to_owned(),
        "60000".to_owned(),
        format!("{lock}:released"),
        "PUBLISH".to_owned(),
    ];
    let out = env.store.eval(&FAIR_UNLOCK, &keys, &release).await.unwrap();
    assert_eq!(out, Reply::Array(vec![Reply::Int(1), Reply::Int(1)]));
    // The repeat finds the lock granted to "bb": nothing of ours to delete.
    let out = env.store.eval(&FAIR_UNLOCK, &keys, &release).await.unwrap();
    assert_eq!(out, Reply::Array(vec![Reply::Int(0), Reply::Int(0)]));
    let granted = env
        .store
        .eval(&FAIR_LOCK, &keys, &acquire("bb"))
        .await
        .unwrap();
    assert_eq!(granted.as_array().unwrap()[0].as_int(), Some(1));
    assert!(fence(&granted).1 > fence(&first).1);
    assert!(queue_is_empty(&env.store).await);
}

async fn fair_and_plain_clients_mixed_never_overlap<S: TestStore>(env: Env<S>) {
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for i in 0..6 {
        let locks: ExpireLock<S> = if i % 2 == 0 {
            env.locks_with(fair())
        } else {
            env.locks()
        };
        let (inside, done) = (inside.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            for _ in 0..8 {
                let guard = locks.lock(NAME).await.unwrap();
                assert_eq!(
                    inside.fetch_add(1, Ordering::SeqCst),
                    0,
                    "two holders at once"
                );
                tokio::time::sleep(ms(2)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                guard.release().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for w in workers {
        tokio::time::timeout(Duration::from_secs(60), w)
            .await
            .expect("every worker finishes")
            .unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 48);
}

async fn data_that_is_not_a_queue_is_an_error_and_untouched<S: TestStore>(env: Env<S>) {
    let [q, w] = queue_keys();
    let locks = env.locks_with(fair());
    for (key, what) in [(&q, "queue"), (&w, "waiters")] {
        env.store.set(key, b"user data").await.unwrap();
        let err = locks
            .lock_with_lease(NAME, ms(1000), None)
            .await
            .unwrap_err();
        assert!(err.is_wrong_type(), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("{what} key holds a string")),
            "{}: {err}",
            env.kind()
        );
        assert_eq!(env.store.get(key).await.unwrap().unwrap(), b"user data");
        assert!(locks.inspect(NAME).await.unwrap().holder.is_none());
        env.store.del(key).await.unwrap();
    }
}

/// Calls of each command the server ran since the last `CONFIG RESETSTAT` (`INFO commandstats`),
/// scripts' inner commands included, by lowercase name.
fn command_calls(server: &support::RedisServer) -> std::collections::BTreeMap<String, u64> {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// The server calls one uncontended lock + release cycle makes inside its scripts, per cycle,
/// by `INFO commandstats`.
async fn calls_per_cycle(
    env: &Env<tairlock::RedisStore>,
    locks: &ExpireLock<tairlock::RedisStore>,
) -> std::collections::BTreeMap<String, f64> {
    // The scripts loaded, the fence key in place (as after any earlier holder).
    locks
        .lock_with_lease(NAME, ms(5000), None)
        .await
        .unwrap()
        .unwrap()
        .release()
        .await
        .unwrap();
    assert_eq!(env.server().cli(&["CONFIG", "RESETSTAT"]), "OK");
    const CYCLES: u64 = 20;
    for _ in 0..CYCLES {
        let guard = locks
            .lock_with_lease(NAME, ms(5000), None)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    }
    command_calls(env.server())
        .into_iter()
        .filter(|(name, _)| !name.starts_with("config"))
        .map(|(name, calls)| (name, calls as f64 / CYCLES as f64))
        .collect()
}

/// With nobody queued, the fair scripts look at no queue (issue #29: the fair cycle cost 22 inner
/// commands against the plain cycle's 11), and each key is read once with no type check before
/// it (a `GET` of a key of another type fails, and only then is its type asked for), nor a
/// `PTTL` after a `SET … PX` (the length just set is the time the new lease has left): the
/// plain cycle makes 6 server calls inside its scripts (before: 10), the fair one the same 6
/// and one `EXISTS` per script (before: 3 `TYPE` and a `PTTL` more). On Valkey the plain release
/// is a native `DELIFEQ` instead of its script.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncontended_cycle_reads_each_key_once_and_the_fair_one_no_queue() {
    let env = Env::redis().await;
    let expected = |fair: bool| {
        let mut calls = std::collections::BTreeMap::from([
            // The lock and the fence on acquiring, the lock on releasing.
            ("get".to_owned(), 3.0),
            // The fencing token's clock, on acquiring only.
            ("time".to_owned(), 1.0),
            // The lease and the fence.
            ("set".to_owned(), 2.0),
            ("del".to_owned(), 1.0),
            // The release announcement (nobody listens).
            ("publish".to_owned(), 1.0),
            ("evalsha".to_owned(), 2.0),
        ]);
        if fair {
            // Whether anyone is queued, once per script.
            calls.insert("exists".to_owned(), 2.0);
        }
        calls
    };
    let mut plain_expected = expected(false);
    if env.server().is_valkey() {
        // The plain release is one native DELIFEQ, no script (the fair one stays a script).
        plain_expected.remove("del");
        plain_expected.insert("delifeq".to_owned(), 1.0);
        plain_expected.insert("get".to_owned(), 2.0);
        plain_expected.insert("evalsha".to_owned(), 1.0);
    }
    let plain = calls_per_cycle(&env, &env.locks()).await;
    assert_eq!(plain, plain_expected);
    let fair_calls = calls_per_cycle(&env, &env.locks_with(fair())).await;
    assert_eq!(fair_calls, expected(true));
    assert!(queue_is_empty(&env.store).await);
}
