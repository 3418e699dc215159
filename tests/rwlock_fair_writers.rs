//! The RwLock's fair mode for writers (issue #13 §2, [`Options::fair`]): a FIFO of waiting
//! writers on the server with direct writer → writer handoff, on the embedded store and on a
//! real server. Every client here is a separate `RwLock` value; on Redis each also has its own
//! `RedisStore` (its own connections), as separate processes would.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::{Env, TestStore};
use tairlock::{MemoryStore, RedisStore, Reply, Store, WaitStrategy};
use tairlock_rwlock::scripts::{FAIR_WRITE_ACQUIRE, FAIR_WRITE_RELEASE};
use tairlock_rwlock::{Options, Preference, RwLock};
use tokio::time::Instant;

const NAME: &str = "fair-doc";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn fair() -> Options {
    Options::default().fair(true).waiter_lease(ms(600))
}

/// A store of its own for another client: a new connection on Redis.
trait Another: TestStore + Sized {
    fn another(env: &Env<Self>) -> impl Future<Output = Self> + Send;
}

impl Another for MemoryStore {
    async fn another(env: &Env<Self>) -> Self {
        env.store.clone()
    }
}

impl Another for RedisStore {
    async fn another(env: &Env<Self>) -> Self {
        env.server().store().await
    }
}

async fn client<S: Another>(env: &Env<S>, options: Options) -> RwLock<S> {
    RwLock::with_options(S::another(env).await, options)
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
    writers_are_served_in_arrival_order_by_direct_handoff,
    a_release_with_an_empty_queue_frees_the_lock,
    a_queued_writer_that_crashed_is_skipped,
    a_granted_writer_that_died_delays_the_next_by_its_waiter_lease_at_most,
    timeout_and_cancel_leave_the_queue,
    a_single_attempt_does_not_queue,
    readers_do_not_barge_ahead_of_a_queued_fair_writer,
    the_last_reader_wakes_the_head_writer_at_once,
    under_reader_preference_only_writers_line_up,
    fair_and_plain_writers_never_overlap,
    the_fair_scripts_are_safe_to_repeat,
    data_that_is_not_a_queue_is_an_error_and_untouched,
);

/// The queue's two keys, for the default keyspace.
fn queue_keys() -> [String; 2] {
    let base = format!("tairlock:{{{NAME}}}");
    [format!("{base}:wq"), format!("{base}:ww")]
}

fn key(suffix: &str) -> String {
    format!("tairlock:{{{NAME}}}:{suffix}")
}

async fn queue_is_empty<S: Store>(store: &S) -> bool {
    let [q, w] = queue_keys();
    store.key_type(&q).await.unwrap() == "none" && store.key_type(&w).await.unwrap() == "none"
}

/// The acquire script's keys.
fn acquire_keys() -> Vec<String> {
    let [q, w] = queue_keys();
    vec![key("w"), key("r"), key("wi"), key("fence"), q, w]
}

/// The acquire script's arguments for a waiting writer `nonce` with `waiter_lease`.
fn acquire_args(nonce: &str, waiter_lease: Duration) -> Vec<String> {
    vec![
        nonce.to_owned(),
        "30000".to_owned(),
        "1000".to_owned(),
        "60000".to_owned(),
        waiter_lease.as_millis().to_string(),
        format!("{}:w:crashed", key("released")),
        "1".to_owned(),
        key("intent"),
        "PUBLISH".to_owned(),
    ]
}

fn release_keys() -> Vec<String> {
    let [q, w] = queue_keys();
    vec![key("w"), key("wi"), key("fence"), q, w]
}

fn release_args(what: &str, by: &str) -> Vec<String> {
    vec![
        what.to_owned(),
        by.to_owned(),
        "60000".to_owned(),
        key("released"),
        "PUBLISH".to_owned(),
        "1000".to_owned(),
    ]
}

/// A writer that joins the queue under `nonce` and then does nothing (a crashed process).
async fn crashed_writer<S: Store>(store: &S, nonce: &str, waiter_lease: Duration) {
    let reply = store
        .eval(
            &FAIR_WRITE_ACQUIRE,
            &acquire_keys(),
            &acquire_args(nonce, waiter_lease),
        )
        .await
        .unwrap();
    assert_eq!(reply.as_array().unwrap()[0].as_int(), Some(0), "{reply:?}");
}

/// Writers arriving one after the other get the lock in that order, each from the previous
/// holder's release (the lock is never free meanwhile), with rising fencing tokens.
async fn writers_are_served_in_arrival_order_by_direct_handoff<S: Another>(env: Env<S>) {
    served_in_arrival_order(&env, fair()).await;
}

async fn served_in_arrival_order<S: Another>(env: &Env<S>, options: Options) {
    let holder = client(env, options.clone()).await;
    let guard = holder.write(NAME).await.unwrap();
    let first_fence = guard.fence();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..4 {
        let (locks, order) = (client(env, options.clone()).await, order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locks.write(NAME).await.unwrap();
            order.lock().push((i, guard.fence()));
            tokio::time::sleep(ms(20)).await;
            guard.release().await.unwrap();
        }));
        // Arrive one after the other, each queued before the next comes.
        tokio::time::sleep(ms(150)).await;
    }
    if options.fair {
        // Four places, in arrival order, each refreshed within its waiter lease.
        let seen = holder.inspect(NAME).await.unwrap();
        assert_eq!(seen.queue.len(), 4, "{seen:?}");
        assert!(seen.queue.iter().all(|q| q.remaining > Duration::ZERO));
        let intent = seen.intent.as_ref().expect("a queued writer's intent");
        assert_eq!(
            intent.nonce, seen.queue[0].nonce,
            "the intent names the head"
        );
    }
    guard.release().await.unwrap();
    if options.fair {
        // Handed over in the release itself: the lock is never free while anyone waits.
        let held = holder.inspect(NAME).await.unwrap();
        assert!(held.writer.is_some(), "{held:?}");
    }
    for w in waiters {
        tokio::time::timeout(Duration::from_secs(30), w)
            .await
            .expect("every writer gets its turn")
            .unwrap();
    }
    let order = order.lock().clone();
    let who: Vec<_> = order.iter().map(|(i, _)| *i).collect();
    assert_eq!(who, vec![0, 1, 2, 3], "{}", env.context());
    let mut fences = vec![first_fence];
    fences.extend(order.iter().map(|(_, f)| *f));
    assert!(fences.windows(2).all(|w| w[0] < w[1]), "{fences:?}");
    assert!(queue_is_empty(&env.store).await);
    assert!(!holder.inspect(NAME).await.unwrap().is_active());
}

/// The same arrivals without the fair mode are not served in order (writers race for the lock
/// after each release): `FAIR_ORDER_CHECK_PLAIN=1` runs the order test with `fair(false)`, to
/// show that it fails there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_order_test_with_plain_writers_on_request() {
    if std::env::var_os("FAIR_ORDER_CHECK_PLAIN").is_none() {
        return;
    }
    let env = Env::redis().await;
    served_in_arrival_order(&env, fair().fair(false)).await;
}

async fn a_release_with_an_empty_queue_frees_the_lock<S: Another>(env: Env<S>) {
    let locks = client(&env, fair()).await;
    let guard = locks.write(NAME).await.unwrap();
    let lease = guard.lease().unwrap();
    guard.release().await.unwrap();
    assert!(!locks.inspect(NAME).await.unwrap().is_active());
    assert_eq!(
        locks.write_release(NAME, &lease).await.unwrap(),
        tairlock::Unlock::NotHeld
    );
    assert!(queue_is_empty(&env.store).await);
    // Free for anyone, readers and plain writers included.
    let plain = client(&env, Options::default()).await;
    let read = plain
        .try_read(NAME)
        .await
        .unwrap()
        .expect("free for readers");
    read.release().await.unwrap();
    assert!(plain.try_write(NAME).await.unwrap().is_some());
}

async fn a_queued_writer_that_crashed_is_skipped<S: Another>(env: Env<S>) {
    let holder = client(&env, fair()).await;
    let guard = holder.write(NAME).await.unwrap();
    crashed_writer(&env.store, "dead01", ms(200)).await;
    let waiter = client(&env, fair()).await;
    let next = tokio::spawn(async move { waiter.write(NAME).await.unwrap() });
    // The crashed writer's place runs out while the lock is held.
    tokio::time::sleep(ms(400)).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let next = next.await.unwrap();
    let took = released.elapsed();
    assert!(
        took < ms(300),
        "the live writer got the lock after {took:?}"
    );
    next.release().await.unwrap();
    assert!(queue_is_empty(&env.store).await);
    assert!(!holder.inspect(NAME).await.unwrap().is_active());
}

async fn a_granted_writer_that_died_delays_the_next_by_its_waiter_lease_at_most<S: Another>(
    env: Env<S>,
) {
    let holder = client(&env, fair()).await;
    let guard = holder.write(NAME).await.unwrap();
    crashed_writer(&env.store, "dead01", ms(500)).await;
    let waiter = client(&env, fair()).await;
    let next = tokio::spawn(async move { waiter.write(NAME).await.unwrap() });
    tokio::time::sleep(ms(100)).await;
    let released = Instant::now();
    // The grant goes to the crashed writer (still within its place's lease), for that lease.
    guard.release().await.unwrap();
    let granted = holder.inspect(NAME).await.unwrap().writer.expect("granted");
    assert_eq!(granted.nonce(), "dead01");
    let next = next.await.unwrap();
    let took = released.elapsed();
    assert!(
        took >= ms(300) && took < ms(500) + ms(1000),
        "the live writer got the lock after {took:?} (the dead grant lasts 500 ms)"
    );
    assert!(next.fence() > granted.fence());
    next.release().await.unwrap();
}

async fn timeout_and_cancel_leave_the_queue<S: Another>(env: Env<S>) {
    let holder = client(&env, fair()).await;
    let guard = holder.write(NAME).await.unwrap();
    let late = client(&env, fair()).await;
    assert!(late.try_write_for(NAME, ms(200)).await.unwrap().is_none());
    assert!(
        queue_is_empty(&env.store).await,
        "a timed-out writer stayed"
    );
    let state = holder.state(NAME).await.unwrap();
    assert_eq!(
        state.intent,
        tairlock::Ttl::Missing,
        "its intent stayed: {state:?}"
    );
    let cancelled = client(&env, fair()).await;
    let task = tokio::spawn(async move { cancelled.write(NAME).await.map(drop) });
    tokio::time::sleep(ms(200)).await;
    assert!(
        !queue_is_empty(&env.store).await,
        "the writer should be queued"
    );
    task.abort();
    let _ = task.await;
    let deadline = Instant::now() + Duration::from_secs(5);
    while !queue_is_empty(&env.store).await {
        assert!(Instant::now() < deadline, "a cancelled writer stayed");
        tokio::time::sleep(ms(10)).await;
    }
    // Nobody left to hand to: the release frees the lock.
    guard.release().await.unwrap();
    assert!(!holder.inspect(NAME).await.unwrap().is_active());
}

async fn a_single_attempt_does_not_queue<S: Another>(env: Env<S>) {
    let holder = client(&env, fair()).await;
    let guard = holder.write(NAME).await.unwrap();
    let other = client(&env, fair()).await;
    assert!(other.try_write(NAME).await.unwrap().is_none());
    assert!(queue_is_empty(&env.store).await);
    guard.release().await.unwrap();
    // Free now, and nobody is queued: a single attempt takes it.
    let taken = other.try_write(NAME).await.unwrap().expect("free");
    taken.release().await.unwrap();
}

/// A queued fair writer is a waiting writer: new readers stay out until it has had its turn,
/// though the writer it waits for holds on, and readers waiting meanwhile come in after it.
async fn readers_do_not_barge_ahead_of_a_queued_fair_writer<S: Another>(env: Env<S>) {
    let holder = client(&env, fair()).await;
    let guard = holder.write(NAME).await.unwrap();
    let writer = client(&env, fair()).await;
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let queued = {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = writer.write(NAME).await.unwrap();
            order.lock().push("writer");
            tokio::time::sleep(ms(100)).await;
            guard.release().await.unwrap();
        })
    };
    tokio::time::sleep(ms(200)).await;
    let reader = client(&env, fair()).await;
    let reading = {
        let order = order.clone();
        tokio::spawn(async move {
            let guard = reader.read(NAME).await.unwrap();
            order.lock().push("reader");
            guard.release().await.unwrap();
        })
    };
    tokio::time::sleep(ms(100)).await;
    guard.release().await.unwrap();
    // Between the writer's turns no reader got in: the intent stood for the queued writer.
    let late = client(&env, fair()).await;
    assert!(late.try_read(NAME).await.unwrap().is_none());
    queued.await.unwrap();
    reading.await.unwrap();
    assert_eq!(*order.lock(), ["writer", "reader"], "{}", env.context());
    // Readers are in again once no writer waits.
    let read = late
        .try_read(NAME)
        .await
        .unwrap()
        .expect("free for readers");
    read.release().await.unwrap();

    // Behind live readers too: a queued fair writer keeps new readers out.
    let inside = holder.read(NAME).await.unwrap();
    let writer = client(&env, fair()).await;
    let queued = tokio::spawn(async move { writer.write(NAME).await.unwrap() });
    tokio::time::sleep(ms(200)).await;
    assert!(late.try_read(NAME).await.unwrap().is_none());
    inside.release().await.unwrap();
    queued.await.unwrap().release().await.unwrap();
}

/// The head writer waits for live readers on its own wake channel; the last reader's release
/// announces there too, so it gets in at once, not at its next refresh.
async fn the_last_reader_wakes_the_head_writer_at_once<S: Another>(env: Env<S>) {
    // Long waiter and intent leases: a refresh comes only every 10 s.
    let options = Options::default()
        .fair(true)
        .waiter_lease(Duration::from_secs(30))
        .intent_lease(Duration::from_secs(30));
    let reader = client(&env, options.clone()).await;
    let inside = reader.read(NAME).await.unwrap();
    let writer = client(&env, options).await;
    let queued = tokio::spawn(async move { writer.write(NAME).await.unwrap() });
    tokio::time::sleep(ms(300)).await;
    let released = Instant::now();
    inside.release().await.unwrap();
    let got = queued.await.unwrap();
    let took = released.elapsed();
    assert!(took < ms(2000), "the writer got in after {took:?}");
    got.release().await.unwrap();
}

/// Reader preference with fair writers: writers are served in arrival order among themselves,
/// and raise no intent, so readers keep coming in while writers wait.
async fn under_reader_preference_only_writers_line_up<S: Another>(env: Env<S>) {
    let options = fair().preference(Preference::Reader);
    let holder = client(&env, options.clone()).await;
    let guard = holder.write(NAME).await.unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for i in 0..3 {
        let (locks, order) = (client(&env, options.clone()).await, order.clone());
        waiters.push(tokio::spawn(async move {
            let guard = locks.write(NAME).await.unwrap();
            order.lock().push(i);
            guard.release().await.unwrap();
        }));
        tokio::time::sleep(ms(150)).await;
    }
    assert_eq!(
        holder.state(NAME).await.unwrap().intent,
        tairlock::Ttl::Missing
    );
    guard.release().await.unwrap();
    for w in waiters {
        w.await.unwrap();
    }
    assert_eq!(*order.lock(), [0, 1, 2]);
    // A reader inside, a fair writer waiting: another reader still comes in.
    let inside = holder.read(NAME).await.unwrap();
    let writer = client(&env, options.clone()).await;
    let queued = tokio::spawn(async move { writer.write(NAME).await.unwrap() });
    tokio::time::sleep(ms(200)).await;
    let another = client(&env, options).await;
    let second = another
        .try_read(NAME)
        .await
        .unwrap()
        .expect("reader preference");
    second.release().await.unwrap();
    inside.release().await.unwrap();
    queued.await.unwrap().release().await.unwrap();
}

async fn fair_and_plain_writers_never_overlap<S: Another>(env: Env<S>) {
    let inside = Arc::new(AtomicUsize::new(0));
    let done = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for i in 0..6 {
        let options = if i % 2 == 0 {
            fair()
        } else {
            Options::default()
        };
        let locks = client(&env, options).await;
        let (inside, done) = (inside.clone(), done.clone());
        workers.push(tokio::spawn(async move {
            for round in 0..6 {
                if (i + round) % 3 == 0 {
                    // A reader now and then: no writer may be inside with it.
                    let guard = locks.read(NAME).await.unwrap();
                    let before = inside.fetch_add(1, Ordering::SeqCst);
                    assert!(before < 1000, "a reader with a writer inside");
                    tokio::time::sleep(ms(2)).await;
                    inside.fetch_sub(1, Ordering::SeqCst);
                    guard.release().await.unwrap();
                    continue;
                }
                let guard = locks.write(NAME).await.unwrap();
                assert_eq!(
                    inside.fetch_add(1000, Ordering::SeqCst),
                    0,
                    "a writer with anyone else inside"
                );
                tokio::time::sleep(ms(2)).await;
                inside.fetch_sub(1000, Ordering::SeqCst);
                guard.release().await.unwrap();
                done.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for w in workers {
        tokio::time::timeout(Duration::from_secs(90), w)
            .await
            .expect("every worker finishes")
            .unwrap();
    }
    assert_eq!(done.load(Ordering::SeqCst), 24);
    assert!(queue_is_empty(&env.store).await);
}

async fn the_fair_scripts_are_safe_to_repeat<S: Another>(env: Env<S>) {
    let store = &env.store;
    let eval = |args: Vec<String>| async move {
        store
            .eval(&FAIR_WRITE_ACQUIRE, &acquire_keys(), &args)
            .await
            .unwrap()
    };
    let first = eval(acquire_args("aa", ms(600))).await;
    let again = eval(acquire_args("aa", ms(600))).await;
    let lease =
        |r: &Reply| tairlock::Lease::parse(r.as_array().unwrap()[1].as_str().unwrap()).unwrap();
    assert_eq!(lease(&first).nonce(), lease(&again).nonce());
    assert_eq!(lease(&first).fence(), lease(&again).fence(), "one fence");
    // A writer repeating its attempt keeps one place.
    for _ in 0..2 {
        let busy = eval(acquire_args("bb", ms(600))).await;
        assert_eq!(busy.as_array().unwrap()[0].as_int(), Some(0));
    }
    let [q, _] = queue_keys();
    assert_eq!(
        store.key_type(&q).await.unwrap(),
        "zset",
        "bb is queued once"
    );
    let release = release_args(again.as_array().unwrap()[1].as_str().unwrap(), "lease");
    let out = store
        .eval(&FAIR_WRITE_RELEASE, &release_keys(), &release)
        .await
        .unwrap();
    assert_eq!(out, Reply::Array(vec![Reply::Int(1), Reply::Int(1)]));
    // The repeat finds the lock granted to "bb": nothing of ours to delete.
    let out = store
        .eval(&FAIR_WRITE_RELEASE, &release_keys(), &release)
        .await
        .unwrap();
    assert_eq!(out, Reply::Array(vec![Reply::Int(0), Reply::Int(0)]));
    let granted = eval(acquire_args("bb", ms(600))).await;
    assert_eq!(granted.as_array().unwrap()[0].as_int(), Some(1));
    assert!(lease(&granted).fence() > lease(&first).fence());
    // Confirming the grant again keeps the fence.
    let confirmed = eval(acquire_args("bb", ms(600))).await;
    assert_eq!(lease(&confirmed).fence(), lease(&granted).fence());
    assert!(queue_is_empty(store).await);
    // Leaving by nonce releases it; a repeat finds nothing.
    let leave = release_args("bb", "nonce");
    let out = store
        .eval(&FAIR_WRITE_RELEASE, &release_keys(), &leave)
        .await
        .unwrap();
    assert_eq!(out, Reply::Array(vec![Reply::Int(1), Reply::Int(0)]));
    let out = store
        .eval(&FAIR_WRITE_RELEASE, &release_keys(), &leave)
        .await
        .unwrap();
    assert_eq!(out, Reply::Array(vec![Reply::Int(-1), Reply::Int(0)]));
}

async fn data_that_is_not_a_queue_is_an_error_and_untouched<S: Another>(env: Env<S>) {
    let [q, w] = queue_keys();
    let locks = client(&env, fair()).await;
    for (key, what) in [(&q, "queue"), (&w, "waiters")] {
        env.store.set(key, b"user data").await.unwrap();
        let err = locks.try_write(NAME).await.unwrap_err();
        assert!(err.is_wrong_type(), "{err}");
        assert!(
            err.to_string()
                .contains(&format!("{what} key holds a string")),
            "{}: {err}",
            env.kind()
        );
        assert_eq!(env.store.get(key).await.unwrap().unwrap(), b"user data");
        assert!(!locks.inspect(NAME).await.unwrap().is_active());
        env.store.del(key).await.unwrap();
    }
    // A poll-waiting fair writer still works with the keys clean.
    let polling = client(
        &env,
        fair().wait(WaitStrategy::Poll {
            min: ms(10),
            max: ms(50),
        }),
    )
    .await;
    polling.write(NAME).await.unwrap().release().await.unwrap();
}

/// Script calls the server has run so far (`EVALSHA` and `EVAL`).
fn script_calls(server: &support::RedisServer) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    ["cmdstat_evalsha:", "cmdstat_eval:"]
        .iter()
        .filter_map(|prefix| info.lines().find(|l| l.starts_with(prefix)))
        .filter_map(|line| {
            line.split([':', ','])
                .find_map(|kv| kv.strip_prefix("calls="))
                .and_then(|n| n.parse::<u64>().ok())
        })
        .sum()
}

/// Waits until no script call comes for a while: the waiters have settled into their sleep.
async fn settled(server: &support::RedisServer) -> u64 {
    let mut last = script_calls(server);
    loop {
        tokio::time::sleep(ms(300)).await;
        let now = script_calls(server);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// A fair release wakes exactly the writer it granted the lock to, on that client's wake
/// channel: it gets in at once (its next refresh is 10 s away), and the writer queued behind it
/// makes no attempt. Script calls are counted on a real server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handoff_wakes_only_the_writer_it_granted() {
    let env = Env::redis().await;
    let server = env.server();
    // Loaded up front: a script's first call on a server is two (a refused EVALSHA, then EVAL).
    env.store
        .preload(&tairlock_rwlock::scripts::FAIR)
        .await
        .unwrap();
    let options = Options::default()
        .fair(true)
        .waiter_lease(Duration::from_secs(30))
        .intent_lease(Duration::from_secs(30));
    let holder = client(&env, options.clone()).await;
    let guard = holder.write(NAME).await.unwrap();
    let (got_tx, got_rx) = tokio::sync::oneshot::channel();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let first = client(&env, options.clone()).await;
    let first = tokio::spawn(async move {
        let guard = first.write(NAME).await.unwrap();
        got_tx.send(Instant::now()).unwrap();
        done_rx.await.unwrap();
        guard.release().await.unwrap();
    });
    tokio::time::sleep(ms(200)).await;
    let second = client(&env, options).await;
    let second = tokio::spawn(async move { second.write(NAME).await.unwrap() });
    let before = settled(server).await;
    let released = Instant::now();
    guard.release().await.unwrap();
    let got = got_rx.await.unwrap();
    let took = got.duration_since(released);
    assert!(took < ms(2000), "the granted writer got in after {took:?}");
    let after = settled(server).await;
    assert_eq!(
        after - before,
        2,
        "the release and the granted writer's confirmation, nothing else"
    );
    done_tx.send(()).unwrap();
    first.await.unwrap();
    second.await.unwrap().release().await.unwrap();
    assert!(queue_is_empty(&env.store).await);
}
