//! A writer's intent is announced on a channel of its own (issue #19 follow-up): shared read
//! holds hear it and give their hold back, but readers and writers waiting for the lock listen
//! for releases only, so an announcement wakes none of them and costs them no attempt.
//!
//! Attempts are counted with the server's `INFO commandstats` (script calls), on a real server.

mod support;

use std::time::Duration;

use support::RedisServer;
use tairlock_rwlock::{Options, RwLock};

/// A lease far longer than the test: only a notification could wake a waiter before it ends.
const LONG: Duration = Duration::from_secs(30);
/// How long a waiter is watched for a retry it should not make (generous on a loaded machine).
const QUIET: Duration = Duration::from_millis(1500);

/// Script calls the server has run so far (`EVALSHA` and `EVAL`).
fn script_calls(server: &RedisServer) -> u64 {
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

/// A client on its own connection.
async fn client(server: &RedisServer) -> RwLock<tairlock::RedisStore> {
    let store = server.store().await;
    RwLock::with_options(store, Options::default().intent_lease(LONG))
}

/// Waits until no script call comes for a while: the waiters have settled into their sleep.
async fn settled(server: &RedisServer) -> u64 {
    let mut last = script_calls(server);
    loop {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let now = script_calls(server);
        if now == last {
            return now;
        }
        last = now;
    }
}

/// A reader waiting behind a writer's intent, and a writer waiting behind live readers, are not
/// woken when another writer raises and announces its intent: no attempt follows it. (Before
/// the intent had a channel of its own, both heard `intent` on the release channel, tried again
/// and were refused.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiters_are_not_woken_by_a_writers_intent() {
    let server = RedisServer::start();
    let (a, b, c) = (
        client(&server).await,
        client(&server).await,
        client(&server).await,
    );
    // A reader inside for the whole test (single steps: no watchdog sends anything).
    assert!(matches!(
        a.read_acquire("doc", "aa01", LONG).await.unwrap(),
        tairlock_rwlock::ReadAttempt::Acquired { .. }
    ));
    // A waiting writer raises its intent (announced now, before anyone waits).
    assert!(matches!(
        a.write_acquire("doc", "bb02", LONG, Some(LONG))
            .await
            .unwrap(),
        tairlock_rwlock::WriteAttempt::Blocked { .. }
    ));
    // A reader waits behind that intent, a writer behind the intent and the reader; both for
    // about 30 s unless notified.
    let reader = tokio::spawn(async move { b.read("doc").await });
    let writer = tokio::spawn(async move { c.write("doc").await });
    let before = settled(&server).await;
    assert!(!reader.is_finished() && !writer.is_finished());

    // The first intent goes away unannounced (as if it lapsed); another writer raises its own
    // against the live reader, and announces it.
    server.cli(&["DEL", "tairlock:{doc}:wi"]);
    let announced = a
        .write_acquire("doc", "cc03", LONG, Some(LONG))
        .await
        .unwrap();
    assert!(matches!(
        announced,
        tairlock_rwlock::WriteAttempt::Blocked { .. }
    ));
    tokio::time::sleep(QUIET).await;
    // The one script call since the waiters settled is the announcing `write_acquire`.
    assert_eq!(
        script_calls(&server) - before,
        1,
        "waiters tried again after a writer's intent"
    );
    assert!(!reader.is_finished() && !writer.is_finished());
    reader.abort();
    writer.abort();
}
