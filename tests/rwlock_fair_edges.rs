//! The RwLock's fair writers at their edges (issue 26 §4), on the embedded store and on a real
//! server: a fair release respects a plain writer's intent, the first queued writer leaving a
//! free lock wakes the next, and a waiting fair writer under reader preference tells idle shared
//! read holds to go, as a plain writer does.

mod support;

use std::time::Duration;

use support::RedisServer;
use tairlock::{MemoryStore, RedisStore, Reply, Store};
use tairlock_rwlock::scripts::{FAIR_WRITE_ACQUIRE, FAIR_WRITE_RELEASE};
use tairlock_rwlock::{Options, Preference, RwLock};
use tokio::time::Instant;

const NAME: &str = "fair-edge";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn key(suffix: &str) -> String {
    format!("tairlock:{{{NAME}}}:{suffix}")
}

/// Two stores on one keyspace: two clients (two connections on Redis).
struct Pair<S> {
    a: S,
    b: S,
    _server: Option<RedisServer>,
}

fn memory() -> Pair<MemoryStore> {
    let store = MemoryStore::new();
    Pair {
        a: store.clone(),
        b: store,
        _server: None,
    }
}

async fn redis() -> Pair<RedisStore> {
    let server = RedisServer::start();
    let (a, b) = (server.store().await, server.store().await);
    Pair {
        a,
        b,
        _server: Some(server),
    }
}

macro_rules! both {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(super::memory()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(super::redis().await).await;
            }
        }
    )+};
}

both!(
    a_fair_release_respects_a_plain_writers_intent,
    the_first_queued_writer_leaving_a_free_lock_wakes_the_next,
    a_waiting_fair_writer_under_reader_preference_ends_idle_shared_holds,
    abandoning_or_leaving_as_of_a_snapshot_leaves_a_newer_lease_alone,
);

/// A fair writer that queues under `nonce` (waiter lease 10 s; an intent of `intent_ms`, 0 for
/// reader preference) and then does nothing but, later, leave.
async fn idle_writer<S: Store>(store: &S, nonce: &str, intent_ms: &str) {
    let keys = [
        key("w"),
        key("r"),
        key("wi"),
        key("fence"),
        key("wq"),
        key("ww"),
    ];
    let args = [
        nonce,
        "30000",
        intent_ms,
        "60000",
        "10000",
        &format!("{}:w:idle", key("released")),
        "1",
        &key("intent"),
        "PUBLISH",
    ]
    .map(str::to_owned);
    let reply = store.eval(&FAIR_WRITE_ACQUIRE, &keys, &args).await.unwrap();
    assert_eq!(reply.as_array().unwrap()[0].as_int(), Some(0), "{reply:?}");
}

async fn leave<S: Store>(store: &S, nonce: &str, intent_ms: &str) -> Reply {
    let keys = [key("w"), key("wi"), key("fence"), key("wq"), key("ww")];
    let args = [
        nonce,
        "nonce",
        "60000",
        &key("released"),
        "PUBLISH",
        intent_ms,
    ]
    .map(str::to_owned);
    store.eval(&FAIR_WRITE_RELEASE, &keys, &args).await.unwrap()
}

async fn writer_value<S: Store>(store: &S) -> Option<String> {
    store
        .get(&key("w"))
        .await
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap())
}

/// A fair writer holds; a plain writer waits with its intent up; a fair writer is queued. The
/// fair release must not grant past the plain writer's intent ("fair writers respect a plain
/// writer's intent"): the plain writer gets the lock.
async fn a_fair_release_respects_a_plain_writers_intent<S: Store>(p: Pair<S>) {
    let fair = RwLock::with_options(p.a.clone(), Options::default().fair(true));
    let plain = RwLock::new(p.b.clone());
    let held = fair.write(NAME).await.unwrap();
    let waiting = tokio::spawn({
        let plain = plain.clone();
        async move { plain.write(NAME).await.unwrap() }
    });
    let deadline = Instant::now() + Duration::from_secs(5);
    while p.a.get(&key("wi")).await.unwrap().is_none() {
        assert!(
            Instant::now() < deadline,
            "the plain writer raised no intent"
        );
        tokio::time::sleep(ms(10)).await;
    }
    idle_writer(&p.a, "cafe01", "5000").await;
    let intent = p.a.get(&key("wi")).await.unwrap().unwrap();
    assert_ne!(intent, b"cafe01", "the plain writer's intent stays up");
    held.release().await.unwrap();
    let granted = writer_value(&p.a).await;
    assert!(
        !granted.as_deref().is_some_and(|w| w.ends_with(":cafe01")),
        "granted past the plain writer's intent: {granted:?}"
    );
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the plain writer never got the lock")
        .unwrap();
    guard.release().await.unwrap();
    let left = leave(&p.a, "cafe01", "5000").await;
    assert_eq!(left.as_array().unwrap()[0].as_int(), Some(-1));
}

/// A plain writer holds; an idle fair writer is first in the queue and a waiting fair `write`
/// second (reader preference: no intent to re-assert, so it refreshes only every third of its
/// waiter lease). The plain writer releases (granting nothing), then the first queued writer
/// leaves: the second is woken and takes the lock at once, not at its next refresh.
async fn the_first_queued_writer_leaving_a_free_lock_wakes_the_next<S: Store>(p: Pair<S>) {
    let plain = RwLock::new(p.a.clone());
    let held = plain.write(NAME).await.unwrap();
    idle_writer(&p.a, "cafe01", "0").await;
    // Refreshes its place every 3 s.
    let fair = RwLock::with_options(
        p.b.clone(),
        Options::default()
            .fair(true)
            .waiter_lease(ms(9000))
            .preference(Preference::Reader),
    );
    let waiting = tokio::spawn(async move { fair.write(NAME).await.unwrap() });
    tokio::time::sleep(ms(300)).await;
    held.release().await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert!(!waiting.is_finished(), "the idle writer is first");
    let left = leave(&p.a, "cafe01", "0").await;
    assert_eq!(left.as_array().unwrap()[0].as_int(), Some(-1));
    let left = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(5), waiting)
        .await
        .expect("the next writer never took the lock")
        .unwrap();
    let took = left.elapsed();
    assert!(
        took < ms(1000),
        "the free lock idled {took:?} after the first writer left"
    );
    guard.release().await.unwrap();
}

/// Under reader preference, another client's idle shared read hold lingers (10 s). A waiting
/// fair writer announces itself as a plain one does, so the idle hold goes at once and the
/// writer gets in well before the linger ends.
async fn a_waiting_fair_writer_under_reader_preference_ends_idle_shared_holds<S: Store>(
    p: Pair<S>,
) {
    let linger = Duration::from_secs(10);
    let readers = RwLock::with_options(
        p.a.clone(),
        Options::default()
            .share_reads(true)
            .linger(linger)
            .preference(Preference::Reader),
    );
    let writers = RwLock::with_options(
        p.b.clone(),
        Options::default().fair(true).preference(Preference::Reader),
    );
    readers.read(NAME).await.unwrap().release().await.unwrap();
    assert_eq!(readers.readers(NAME).await.unwrap(), 1, "lingering");
    let started = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(2), writers.write(NAME))
        .await
        .unwrap_or_else(|_| panic!("the fair writer waited out the {linger:?} linger"))
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(2));
    assert_eq!(
        readers.readers(NAME).await.unwrap(),
        0,
        "the idle hold went"
    );
    guard.release().await.unwrap();
}

/// An operator's abandon or leave "as of" a snapshot whose last fencing token was `F`: a lease
/// held under the nonce with a larger token (taken after the snapshot) stays; with `F` or more,
/// it goes as with the unbounded steps.
async fn abandoning_or_leaving_as_of_a_snapshot_leaves_a_newer_lease_alone<S: Store>(p: Pair<S>) {
    let rw = RwLock::with_options(p.a.clone(), Options::default().fair(true));
    let take = |nonce: &'static str| {
        let rw = rw.clone();
        async move {
            match rw
                .fair_write_acquire(NAME, nonce, Duration::from_secs(30), None, true)
                .await
                .unwrap()
            {
                tairlock_rwlock::WriteAttempt::Acquired(lease) => lease,
                other => panic!("not taken: {other:?}"),
            }
        }
    };
    let lease = take("cafe01").await;
    let before = lease.fence() - 1;
    assert_eq!(
        rw.write_abandon_as_of(NAME, "cafe01", before)
            .await
            .unwrap(),
        0
    );
    assert_eq!(
        rw.fair_write_leave_as_of(NAME, "cafe01", before)
            .await
            .unwrap(),
        tairlock::Unlock::HeldByOther
    );
    assert_eq!(
        rw.inspect(NAME).await.unwrap().writer.as_ref(),
        Some(lease.lease())
    );
    assert_eq!(
        rw.write_abandon_as_of(NAME, "cafe01", lease.fence())
            .await
            .unwrap(),
        1
    );
    assert_eq!(rw.inspect(NAME).await.unwrap().writer, None);
    let lease = take("cafe02").await;
    assert_eq!(
        rw.fair_write_leave_as_of(NAME, "cafe02", lease.fence())
            .await
            .unwrap(),
        tairlock::Unlock::Released
    );
    assert_eq!(rw.inspect(NAME).await.unwrap().writer, None);
}
