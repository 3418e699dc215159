//! Behaviour of the scripted reader/writer lock (DESIGN.md §6, §7, §8) on both stores:
//! exclusion, per-reader leases, writer preference and intent, downgrade, refused upgrade,
//! reentrancy, fencing, watchdog renewal, waiting by notification, cancellation, and a user's
//! data under the lock's keys.

mod support;

use std::time::Duration;

use support::{Env, TestStore, backend_tests};
use tairlock::{ErrorKind, MemoryStore, Owner, RedisStore, Store, Ttl};
use tairlock_rwlock::{
    Blocker, Options, Preference, ReadAttempt, ReadGuard, Release, RwLock, WriteAttempt,
    WriteGuard, WriteLease,
};

const LONG: Duration = Duration::from_secs(30);
const SHORT: Duration = Duration::from_millis(400);
const PAST_SHORT: Duration = Duration::from_millis(600);
/// How long an operation that should be immediate may take on a loaded machine.
const PROMPT: Duration = Duration::from_secs(2);

fn locks<S: TestStore>(env: &Env<S>) -> RwLock<S> {
    RwLock::new(env.store.clone())
}

fn locks_with<S: TestStore>(env: &Env<S>, options: Options) -> RwLock<S> {
    RwLock::with_options(env.store.clone(), options)
}

fn nonce() -> String {
    tairlock::new_nonce()
}

#[track_caller]
fn admitted(attempt: ReadAttempt) -> usize {
    match attempt {
        ReadAttempt::Acquired { readers, .. } => readers,
        other => panic!("expected the reader to be admitted, got {other:?}"),
    }
}

#[track_caller]
fn taken(attempt: WriteAttempt) -> WriteLease {
    match attempt {
        WriteAttempt::Acquired(lease) => lease,
        other => panic!("expected the write lock to be taken, got {other:?}"),
    }
}

#[track_caller]
fn read_blocked_by(attempt: ReadAttempt) -> (Blocker, Option<Duration>) {
    match attempt {
        ReadAttempt::Blocked { by, remaining } => (by, remaining),
        other => panic!("expected the reader to be kept out, got {other:?}"),
    }
}

#[track_caller]
fn write_blocked_by(attempt: WriteAttempt) -> (Blocker, Option<Duration>) {
    match attempt {
        WriteAttempt::Blocked { by, remaining } => (by, remaining),
        other => panic!("expected the writer to be kept out, got {other:?}"),
    }
}

async fn readers_share_and_exclude_writers_and_writers_exclude_everyone<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let a = rw.try_read("doc").await.unwrap().expect("free");
    let b = rw.try_read("doc").await.unwrap().expect("readers share");
    assert_eq!(rw.readers("doc").await.unwrap(), 2, "{}", env.context());
    assert!(rw.try_write("doc").await.unwrap().is_none(), "readers in");
    assert_eq!(a.release().await.unwrap(), Release::Released);
    assert!(
        rw.try_write("doc").await.unwrap().is_none(),
        "one reader in"
    );
    assert_eq!(b.release().await.unwrap(), Release::Released);
    assert_eq!(rw.readers("doc").await.unwrap(), 0);

    let w = rw.try_write("doc").await.unwrap().expect("free again");
    assert!(w.fence() > 0);
    assert!(rw.try_read("doc").await.unwrap().is_none(), "writer in");
    assert!(rw.try_write("doc").await.unwrap().is_none(), "writer in");
    let state = rw.state("doc").await.unwrap();
    assert_eq!(state.readers, 0);
    assert!(matches!(state.writer, Ttl::Expires(_)), "{state:?}");
    assert_eq!(w.release().await.unwrap(), Release::Released);
    let state = rw.state("doc").await.unwrap();
    assert_eq!(
        (state.readers, state.writer, state.intent),
        (0, Ttl::Missing, Ttl::Missing)
    );
}

async fn crashed_reader_blocks_writers_no_longer_than_its_lease<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    // A reader takes a short lease and dies: it never releases, nobody renews.
    admitted(rw.read_acquire("doc", &nonce(), SHORT).await.unwrap());
    let (by, remaining) =
        write_blocked_by(rw.write_acquire("doc", &nonce(), LONG, None).await.unwrap());
    assert_eq!(by, Blocker::Readers(1));
    let remaining = remaining.expect("the readers' lease is known");
    assert!(remaining <= SHORT, "{remaining:?}");
    env.pass(PAST_SHORT).await;
    // Its lease has passed: the writer gets in, and the dead reader is gone from the count.
    assert_eq!(rw.readers("doc").await.unwrap(), 0);
    taken(rw.write_acquire("doc", &nonce(), LONG, None).await.unwrap());
}

async fn waiting_writer_keeps_new_readers_out_under_writer_preference<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let (r1, w) = (nonce(), nonce());
    admitted(rw.read_acquire("doc", &r1, LONG).await.unwrap());
    let (by, _) = write_blocked_by(
        rw.write_acquire("doc", &w, LONG, Some(Duration::from_secs(5)))
            .await
            .unwrap(),
    );
    assert_eq!(by, Blocker::Readers(1));
    // The writer waits: a new reader stays out, and so does another writer.
    let (by, remaining) = read_blocked_by(rw.read_acquire("doc", &nonce(), LONG).await.unwrap());
    assert_eq!(by, Blocker::Intent);
    assert!(remaining.unwrap() <= Duration::from_secs(5));
    let (by, _) = write_blocked_by(
        rw.write_acquire("doc", &nonce(), LONG, Some(Duration::from_secs(5)))
            .await
            .unwrap(),
    );
    assert_eq!(by, Blocker::Intent);
    let inspection = rw.inspect("doc").await.unwrap();
    assert_eq!(
        inspection.intent.as_ref().map(|i| i.nonce.as_str()),
        Some(w.as_str())
    );
    // The reader inside leaves; the waiting writer's next attempt gets in and clears its intent.
    assert!(rw.read_release("doc", &r1).await.unwrap());
    taken(
        rw.write_acquire("doc", &w, LONG, Some(Duration::from_secs(5)))
            .await
            .unwrap(),
    );
    assert_eq!(rw.state("doc").await.unwrap().intent, Ttl::Missing);
}

async fn reader_preference_lets_readers_pass_a_waiting_writer<S: TestStore>(env: Env<S>) {
    let rw = locks_with(&env, Options::default().preference(Preference::Reader));
    admitted(rw.read_acquire("doc", &nonce(), LONG).await.unwrap());
    // A waiting writer under reader preference announces nothing...
    let attempt = rw
        .try_write_for("doc", Duration::from_millis(50))
        .await
        .unwrap();
    assert!(attempt.is_none());
    assert_eq!(rw.state("doc").await.unwrap().intent, Ttl::Missing);
    // ... and even an intent left by a writer-preferring client does not stop readers here.
    let writer_preferring = locks(&env);
    write_blocked_by(
        writer_preferring
            .write_acquire("doc", &nonce(), LONG, Some(LONG))
            .await
            .unwrap(),
    );
    assert_eq!(
        admitted(rw.read_acquire("doc", &nonce(), LONG).await.unwrap()),
        2
    );
}

async fn writer_that_gives_up_stops_keeping_readers_out<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    admitted(rw.read_acquire("doc", &nonce(), LONG).await.unwrap());
    // A writer announces a short intent and dies: readers stay out only until it lapses.
    write_blocked_by(
        rw.write_acquire("doc", &nonce(), LONG, Some(SHORT))
            .await
            .unwrap(),
    );
    read_blocked_by(rw.read_acquire("doc", &nonce(), LONG).await.unwrap());
    env.pass(PAST_SHORT).await;
    assert_eq!(
        admitted(rw.read_acquire("doc", &nonce(), LONG).await.unwrap()),
        2
    );

    // A writer that gives up explicitly withdraws its intent at once.
    let w = nonce();
    write_blocked_by(rw.write_acquire("doc", &w, LONG, Some(LONG)).await.unwrap());
    read_blocked_by(rw.read_acquire("doc", &nonce(), LONG).await.unwrap());
    assert_eq!(rw.write_abandon("doc", &w).await.unwrap(), 1);
    assert_eq!(
        admitted(rw.read_acquire("doc", &nonce(), LONG).await.unwrap()),
        3
    );

    // And so does a timed write that runs out of time.
    let gave_up = rw
        .try_write_for("doc", Duration::from_millis(100))
        .await
        .unwrap();
    assert!(gave_up.is_none());
    assert_eq!(rw.state("doc").await.unwrap().intent, Ttl::Missing);
    assert_eq!(
        admitted(rw.read_acquire("doc", &nonce(), LONG).await.unwrap()),
        4
    );
}

async fn cancelled_write_leaves_no_intent_behind<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let reader = rw.read("doc").await.unwrap();
    let waiting = tokio::time::timeout(Duration::from_millis(100), rw.write("doc")).await;
    assert!(waiting.is_err(), "the writer was still waiting");
    // The cancelled acquire withdraws its intent in the background.
    let deadline = tokio::time::Instant::now() + PROMPT;
    while rw.state("doc").await.unwrap().intent != Ttl::Missing {
        assert!(tokio::time::Instant::now() < deadline, "intent left behind");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(rw.try_read("doc").await.unwrap().is_some());
    reader.release().await.unwrap();
}

/// Poll until the lock is free (no reader, writer or intent), or fail after `within`.
async fn wait_until_free<S: TestStore>(rw: &RwLock<S>, within: Duration, what: &str) {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let state = rw.state("doc").await.unwrap();
        if (state.readers, state.writer, state.intent) == (0, Ttl::Missing, Ttl::Missing) {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "{what}: {state:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn cancelled_release_and_downgrade_still_give_the_lock_back<S: TestStore>(env: Env<S>) {
    // Each future is polled once, then dropped. The leases are 30 s: only a release that
    // completes on its own frees the lock in time.
    let rw = locks(&env);
    let r = rw.read("doc").await.unwrap();
    let _ = tokio::time::timeout(Duration::ZERO, r.release()).await;
    wait_until_free(&rw, PROMPT, "cancelled read release").await;
    let w = rw.write("doc").await.unwrap();
    let _ = tokio::time::timeout(Duration::ZERO, w.release()).await;
    wait_until_free(&rw, PROMPT, "cancelled write release").await;
    // A downgrade the server may or may not have applied: at worst its reader lives out one
    // (unrenewed) lease.
    let lease = Duration::from_secs(1);
    let rw = locks_with(&env, Options::default().watchdog_lease(lease));
    let w = rw.write("doc").await.unwrap();
    let _ = tokio::time::timeout(Duration::ZERO, w.downgrade()).await;
    wait_until_free(&rw, lease + PROMPT, "cancelled downgrade").await;
}

async fn downgrade_turns_the_write_lock_into_a_read_lock_atomically<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let other = locks(&env);
    let w = rw.write("doc").await.unwrap();
    assert!(other.try_read("doc").await.unwrap().is_none());
    let r = w.downgrade().await.unwrap();
    assert!(!r.is_inside_write());
    let state = rw.state("doc").await.unwrap();
    assert_eq!((state.readers, state.writer), (1, Ttl::Missing));
    // Other readers may join; writers still wait.
    let joined = other.try_read("doc").await.unwrap().expect("readers share");
    assert!(other.try_write("doc").await.unwrap().is_none());
    assert_eq!(rw.readers("doc").await.unwrap(), 2);
    assert_eq!(r.release().await.unwrap(), Release::Released);
    assert_eq!(joined.release().await.unwrap(), Release::Released);
    assert!(other.try_write("doc").await.unwrap().is_some());
}

async fn upgrade_is_refused_with_a_clear_error<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let me = Owner::new();
    let read = rw.read_as(&me, "doc").await.unwrap();
    for err in [
        rw.write_as(&me, "doc").await.unwrap_err(),
        rw.try_write_as(&me, "doc").await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
        assert!(err.message().contains("upgrade"), "{err}");
    }
    // Nothing changed: still one reader, and it is ours.
    assert_eq!(rw.readers("doc").await.unwrap(), 1);
    assert_eq!(rw.held_depth(&me, "doc"), 1);
    assert_eq!(read.release().await.unwrap(), Release::Released);
    // Once the read is gone, the same owner may write.
    assert!(rw.try_write_as(&me, "doc").await.unwrap().is_some());
}

async fn reentrant_reads_never_wait_behind_a_waiting_writer<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let me = Owner::new();
    let outer = rw.read_as(&me, "doc").await.unwrap();
    // Another client's writer waits for our read, keeping new readers out.
    let writer_client = locks(&env);
    let writer = tokio::spawn(async move {
        let w = writer_client.write("doc").await.unwrap();
        w.release().await.unwrap()
    });
    let deadline = tokio::time::Instant::now() + PROMPT;
    while rw.state("doc").await.unwrap().intent == Ttl::Missing {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the writer never waited"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        rw.try_read("doc").await.unwrap().is_none(),
        "a new reader waits"
    );
    // Our re-entry is served locally: no wait, no round trip, no second reader.
    let inner = tokio::time::timeout(PROMPT, rw.read_as(&me, "doc"))
        .await
        .expect("a reentrant read must not wait for the waiting writer")
        .unwrap();
    assert_eq!(inner.depth(), 2);
    assert_eq!(rw.readers("doc").await.unwrap(), 1);
    assert_eq!(inner.release().await.unwrap(), Release::StillHeld);
    assert!(!writer.is_finished());
    assert_eq!(outer.release().await.unwrap(), Release::Released);
    assert_eq!(
        tokio::time::timeout(PROMPT, writer).await.unwrap().unwrap(),
        Release::Released
    );
}

async fn reentrant_write_serves_nested_writes_and_reads<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let me = Owner::new();
    let outer = rw.write_as(&me, "doc").await.unwrap();
    let inner = rw.write_as(&me, "doc").await.unwrap();
    assert_eq!(inner.fence(), outer.fence(), "one hold");
    let read = rw.read_as(&me, "doc").await.unwrap();
    assert!(read.is_inside_write());
    assert_eq!(rw.held_depth(&me, "doc"), 3);
    let state = rw.state("doc").await.unwrap();
    assert_eq!(state.readers, 0, "the read is served by the write hold");
    // A nested write cannot be downgraded alone.
    let err = inner.downgrade().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    assert_eq!(read.release().await.unwrap(), Release::StillHeld);
    assert!(locks(&env).try_read("doc").await.unwrap().is_none());
    assert_eq!(outer.release().await.unwrap(), Release::Released);
    assert_eq!(rw.held_depth(&me, "doc"), 0);
    assert!(locks(&env).try_read("doc").await.unwrap().is_some());
}

async fn write_acquires_issue_strictly_increasing_fences<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let mut last = 0;
    for _ in 0..5 {
        let w = rw.write("doc").await.unwrap();
        assert!(w.fence() > last, "{} after {last}", w.fence());
        last = w.fence();
        let r = w.downgrade().await.unwrap();
        r.release().await.unwrap();
    }
    assert_eq!(rw.inspect("doc").await.unwrap().last_fence, Some(last));
}

async fn retried_acquires_with_the_same_nonce_are_idempotent<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let r = nonce();
    assert_eq!(admitted(rw.read_acquire("doc", &r, LONG).await.unwrap()), 1);
    assert_eq!(admitted(rw.read_acquire("doc", &r, LONG).await.unwrap()), 1);
    assert!(rw.read_release("doc", &r).await.unwrap());
    assert!(
        !rw.read_release("doc", &r).await.unwrap(),
        "a retried release"
    );
    let w = nonce();
    let first = taken(rw.write_acquire("doc", &w, LONG, None).await.unwrap());
    let again = taken(rw.write_acquire("doc", &w, LONG, None).await.unwrap());
    assert_eq!(first.lease().value(), again.lease().value());
}

/// How long a repeat comes after the first send in the tests of repeated grants.
const LATER: Duration = Duration::from_secs(2);

/// A repeated grant (the same nonce, after a first send whose reply was lost) answers the lease
/// the first send made: its local deadline must be dated from the time that lease has left, not
/// from the length asked for. `before` is taken just before the repeat is sent; the server's
/// expiry is at most `LONG - LATER` after it.
#[track_caller]
fn dated_from_what_is_left(
    deadline: tokio::time::Instant,
    before: tokio::time::Instant,
    what: &str,
) {
    let relied = deadline.saturating_duration_since(before);
    assert!(
        relied <= LONG - LATER,
        "{what}: relied on for {relied:?} after the repeat, but the lease its first send made \
         had at most {:?} left",
        LONG - LATER
    );
}

async fn a_repeated_read_acquire_is_relied_on_only_while_its_first_lease_lasts<S: TestStore>(
    env: Env<S>,
) {
    let rw = locks(&env);
    let r = nonce();
    let ReadAttempt::Acquired { lease: first, .. } =
        rw.read_acquire("doc", &r, LONG).await.unwrap()
    else {
        panic!("free");
    };
    env.pass(LATER).await;
    let before = tokio::time::Instant::now();
    let ReadAttempt::Acquired { lease: again, .. } =
        rw.read_acquire("doc", &r, LONG).await.unwrap()
    else {
        panic!("a repeat is the same admission");
    };
    assert_eq!(again.expires_at(), first.expires_at(), "{}", env.context());
    dated_from_what_is_left(again.deadline(), before, "read acquire repeat");
}

async fn a_repeated_write_acquire_is_relied_on_only_while_its_first_lease_lasts<S: TestStore>(
    env: Env<S>,
) {
    let rw = locks(&env);
    let w = nonce();
    let first = taken(rw.write_acquire("doc", &w, LONG, None).await.unwrap());
    env.pass(LATER).await;
    let before = tokio::time::Instant::now();
    let again = taken(rw.write_acquire("doc", &w, LONG, None).await.unwrap());
    assert_eq!(again.lease(), first.lease(), "{}", env.context());
    dated_from_what_is_left(again.deadline(), before, "write acquire repeat");
}

async fn a_repeated_downgrade_is_relied_on_only_while_its_reader_lasts<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let w = taken(rw.write_acquire("doc", &nonce(), LONG, None).await.unwrap());
    let r = nonce();
    let first = rw
        .downgrade_lease("doc", w.lease(), &r, LONG)
        .await
        .unwrap()
        .expect("downgraded");
    env.pass(LATER).await;
    let before = tokio::time::Instant::now();
    let again = rw
        .downgrade_lease("doc", w.lease(), &r, LONG)
        .await
        .unwrap()
        .expect("a repeat is the same downgrade");
    assert_eq!(again.expires_at(), first.expires_at(), "{}", env.context());
    dated_from_what_is_left(again.deadline(), before, "downgrade repeat");
}

/// A renewal's deadline is dated from the time its answer reports, which is the whole new
/// lease: never later than the server's expiry, never much earlier.
async fn renewals_are_relied_on_for_the_lease_they_report<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let r = nonce();
    admitted(rw.read_acquire("doc", &r, SHORT).await.unwrap());
    let before = tokio::time::Instant::now();
    let renewed = rw
        .read_renew("doc", &r, LONG)
        .await
        .unwrap()
        .expect("renewed");
    let relied = renewed.deadline().saturating_duration_since(before);
    assert!(
        relied <= LONG && relied >= LONG - LONG / 50 - PROMPT,
        "read renewal relied on for {relied:?} {}",
        env.context()
    );
    rw.read_release("doc", &r).await.unwrap();
    let w = taken(
        rw.write_acquire("doc", &nonce(), SHORT, None)
            .await
            .unwrap(),
    );
    let before = tokio::time::Instant::now();
    let renewed = rw
        .write_renew("doc", w.lease(), LONG)
        .await
        .unwrap()
        .expect("renewed");
    let relied = renewed.deadline().saturating_duration_since(before);
    assert!(
        relied <= LONG && relied >= LONG - LONG / 50 - PROMPT,
        "write renewal relied on for {relied:?} {}",
        env.context()
    );
}

async fn expired_read_is_reported_lost_on_release<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let r = nonce();
    admitted(rw.read_acquire("doc", &r, SHORT).await.unwrap());
    env.pass(PAST_SHORT).await;
    assert!(
        rw.read_renew("doc", &r, LONG).await.unwrap().is_none(),
        "gone for good"
    );
    assert!(!rw.read_release("doc", &r).await.unwrap());
}

async fn waiting_writer_is_woken_by_the_last_readers_release<S: TestStore>(env: Env<S>) {
    // Leases are long: only a notification gets the writer in promptly.
    let rw = locks(&env);
    let a = rw.read("doc").await.unwrap();
    let b = rw.read("doc").await.unwrap();
    let writer_client = locks(&env);
    let writer = tokio::spawn(async move {
        let w = writer_client.write("doc").await.unwrap();
        let at = tokio::time::Instant::now();
        w.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    a.release().await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!writer.is_finished(), "one reader is still in");
    let released = tokio::time::Instant::now();
    b.release().await.unwrap();
    let entered = tokio::time::timeout(PROMPT, writer).await.unwrap().unwrap();
    assert!(
        entered - released < Duration::from_secs(1),
        "woken after {:?} (the leases are 30 s: only a notification is this fast)",
        entered - released
    );
}

async fn waiting_reader_is_woken_by_the_write_release<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let w = rw.write("doc").await.unwrap();
    let reader_client = locks(&env);
    let reader = tokio::spawn(async move {
        let r = reader_client.read("doc").await.unwrap();
        let at = tokio::time::Instant::now();
        r.release().await.unwrap();
        at
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!reader.is_finished());
    let released = tokio::time::Instant::now();
    w.release().await.unwrap();
    let entered = tokio::time::timeout(PROMPT, reader).await.unwrap().unwrap();
    assert!(
        entered - released < Duration::from_secs(1),
        "woken after {:?} (the lease is 30 s)",
        entered - released
    );
}

async fn put_user_data<S: TestStore>(store: &S, key: &str, kind: &str) {
    match kind {
        "hash" => store.hset(key, "field", b"user data").await,
        "list" => store.rpush(key, b"user data").await,
        _ => store.set(key, b"user data").await.unwrap(),
    }
}

async fn users_data_under_any_key_of_the_lock_is_refused_and_untouched<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    let keys = rw.keys("doc").unwrap();
    // (key, kind of user data): a string is foreign wherever we expect a sorted set, and
    // wherever our strings have a format of their own.
    let cases = [
        (&keys.writer, "hash"),
        (&keys.writer, "string"),
        (&keys.readers, "list"),
        (&keys.readers, "string"),
        (&keys.intent, "hash"),
        (&keys.intent, "string"),
        (&keys.fence, "hash"),
        (&keys.fence, "string"),
    ];
    for (key, kind) in cases {
        put_user_data(&env.store, key, kind).await;
        let before = env.store.snapshot(key).await;
        let what = format!("user {kind} at {key} {}", env.context());
        // Every operation that reads this key must refuse; readers never read the fence key.
        let mut errors = Vec::new();
        if key != &keys.fence {
            errors.push(rw.read_acquire("doc", &nonce(), LONG).await.err());
        }
        errors.push(
            rw.write_acquire("doc", &nonce(), LONG, Some(LONG))
                .await
                .err(),
        );
        if key == &keys.readers {
            errors.push(rw.read_release("doc", &nonce()).await.err());
            errors.push(rw.read_renew("doc", &nonce(), LONG).await.err());
            errors.push(rw.state("doc").await.err());
        }
        if key == &keys.writer || key == &keys.intent {
            errors.push(rw.write_abandon("doc", &nonce()).await.err());
        }
        for (i, err) in errors.into_iter().enumerate() {
            let err = err.unwrap_or_else(|| panic!("{what}: operation {i} was not refused"));
            assert_eq!(err.kind(), ErrorKind::WrongType, "{what}: {err}");
        }
        env.store
            .snapshot(key)
            .await
            .assert_intact(&before, Duration::from_secs(2), &what);
        env.store.del(key).await.unwrap();
    }
    // Nothing of ours was left behind either.
    assert_eq!(env.store.dbsize().await, 0, "{}", env.context());
}

async fn inspect_shows_the_writer_the_live_readers_with_their_leases_and_the_intent<
    S: TestStore,
>(
    env: Env<S>,
) {
    let rw = locks(&env);
    let free = rw.inspect("doc").await.unwrap();
    assert!(!free.is_active());
    assert!(free.foreign.is_empty());
    let (a, b) = (nonce(), nonce());
    admitted(rw.read_acquire("doc", &a, LONG).await.unwrap());
    admitted(rw.read_acquire("doc", &b, SHORT).await.unwrap());
    let w = nonce();
    write_blocked_by(rw.write_acquire("doc", &w, LONG, Some(LONG)).await.unwrap());
    let seen = rw.inspect("doc").await.unwrap();
    let readers: Vec<_> = seen.readers.iter().map(|r| r.nonce.clone()).collect();
    assert_eq!(readers, vec![b.clone(), a.clone()], "earliest expiry first");
    assert!(seen.readers[0].remaining <= SHORT);
    assert!(seen.readers[1].remaining > SHORT && seen.readers[1].remaining <= LONG);
    assert_eq!(
        seen.intent.as_ref().map(|i| i.nonce.as_str()),
        Some(w.as_str())
    );
    assert!(seen.writer.is_none());
    // The short reader expires: it disappears from the snapshot; then the writer gets in.
    env.pass(PAST_SHORT).await;
    assert_eq!(rw.inspect("doc").await.unwrap().readers.len(), 1);
    assert!(rw.read_release("doc", &a).await.unwrap());
    let lease = taken(rw.write_acquire("doc", &w, LONG, Some(LONG)).await.unwrap());
    let seen = rw.inspect("doc").await.unwrap();
    assert_eq!(seen.writer.as_ref(), Some(lease.lease()));
    assert!(matches!(seen.writer_ttl, Ttl::Expires(d) if d <= LONG));
    assert_eq!(seen.last_fence, Some(lease.fence()));
    assert!(seen.intent.is_none() && seen.readers.is_empty());
}

/// A writer's nonce becomes the intent key's value and the lease's nonce, both hex by format:
/// a nonce that is not hex is refused before anything is sent. (It used to take the lock with
/// a lease its own client could not parse, or leave an intent that made every later acquire
/// of the lock fail with `NOTLOCK`.)
async fn a_writer_nonce_that_is_not_hex_is_refused_and_writes_nothing<S: TestStore>(env: Env<S>) {
    let rw = locks(&env);
    for bad in ["writer-1", "", "ab cd"] {
        let err = rw
            .write_acquire("doc", bad, LONG, Some(LONG))
            .await
            .unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{bad:?}: {err}");
    }
    assert_eq!(env.store.dbsize().await, 0, "{}", env.context());
    // Against a live reader, where a refused writer raises its intent: nothing raised.
    let reader = nonce();
    admitted(rw.read_acquire("doc", &reader, LONG).await.unwrap());
    let err = rw
        .write_acquire("doc", "writer-1", LONG, Some(LONG))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert_eq!(
        admitted(rw.read_acquire("doc", &nonce(), LONG).await.unwrap()),
        2
    );
    assert!(rw.inspect("doc").await.unwrap().intent.is_none());
}

backend_tests!(
    inspect_shows_the_writer_the_live_readers_with_their_leases_and_the_intent,
    readers_share_and_exclude_writers_and_writers_exclude_everyone,
    crashed_reader_blocks_writers_no_longer_than_its_lease,
    waiting_writer_keeps_new_readers_out_under_writer_preference,
    reader_preference_lets_readers_pass_a_waiting_writer,
    writer_that_gives_up_stops_keeping_readers_out,
    cancelled_write_leaves_no_intent_behind,
    cancelled_release_and_downgrade_still_give_the_lock_back,
    downgrade_turns_the_write_lock_into_a_read_lock_atomically,
    upgrade_is_refused_with_a_clear_error,
    reentrant_reads_never_wait_behind_a_waiting_writer,
    reentrant_write_serves_nested_writes_and_reads,
    write_acquires_issue_strictly_increasing_fences,
    retried_acquires_with_the_same_nonce_are_idempotent,
    a_repeated_read_acquire_is_relied_on_only_while_its_first_lease_lasts,
    a_repeated_write_acquire_is_relied_on_only_while_its_first_lease_lasts,
    a_repeated_downgrade_is_relied_on_only_while_its_reader_lasts,
    renewals_are_relied_on_for_the_lease_they_report,
    expired_read_is_reported_lost_on_release,
    waiting_writer_is_woken_by_the_last_readers_release,
    waiting_reader_is_woken_by_the_write_release,
    users_data_under_any_key_of_the_lock_is_refused_and_untouched,
    a_writer_nonce_that_is_not_hex_is_refused_and_writes_nothing,
);

/// Real time on both stores: the watchdog renews by tokio time, and the leases expire by the
/// store's clock, which must move with it.
async fn watchdog_keeps_read_and_write_leases_alive<S: Store>(store: S) {
    let lease = Duration::from_millis(600);
    let rw = RwLock::with_options(store.clone(), Options::default().watchdog_lease(lease));
    let other = RwLock::new(store);
    let r = rw.read("doc").await.unwrap();
    tokio::time::sleep(lease * 2).await;
    assert!(!r.is_lost());
    assert_eq!(
        rw.readers("doc").await.unwrap(),
        1,
        "renewed past its first lease"
    );
    assert!(other.try_write("doc").await.unwrap().is_none());
    assert_eq!(r.release().await.unwrap(), Release::Released);

    let w = rw.write("doc").await.unwrap();
    let fence = w.fence();
    tokio::time::sleep(lease * 2).await;
    assert!(!w.is_lost());
    assert_eq!(w.fence(), fence, "renewal keeps the token");
    assert!(other.try_read("doc").await.unwrap().is_none());
    let r = w.downgrade().await.unwrap();
    tokio::time::sleep(lease * 2).await;
    assert!(!r.is_lost(), "the downgraded read is renewed too");
    assert_eq!(rw.readers("doc").await.unwrap(), 1);
    assert_eq!(r.release().await.unwrap(), Release::Released);
}

#[tokio::test]
async fn watchdog_keeps_read_and_write_leases_alive_on_memory() {
    watchdog_keeps_read_and_write_leases_alive(Env::memory_real_time().store).await;
}

#[tokio::test]
async fn watchdog_keeps_read_and_write_leases_alive_on_redis() {
    let server = support::RedisServer::start();
    watchdog_keeps_read_and_write_leases_alive(server.store().await).await;
}

#[tokio::test]
async fn lost_read_lease_is_reported_to_the_guard() {
    let env = Env::memory();
    let clock = env.virtual_clock().unwrap().clone();
    let rw = RwLock::with_options(
        env.store.clone(),
        Options::default().watchdog_lease(Duration::from_millis(300)),
    );
    let r = rw.read("doc").await.unwrap();
    // The store's clock jumps past the lease before the first renewal.
    clock.advance(Duration::from_secs(5));
    tokio::time::timeout(PROMPT, r.lost()).await.unwrap();
    assert!(r.is_lost());
    assert_eq!(r.release().await.unwrap(), Release::Lost);
}

fn blocking_api_is_thread_reentrant<S: Store>(rw: RwLock<S>) {
    let outer = rw.blocking_read("doc").unwrap();
    let inner = rw.blocking_read("doc").unwrap();
    assert_eq!(rw.thread_held_depth("doc"), 2);
    let err = rw.blocking_write("doc").unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput);
    // Another thread is another owner: it shares the read, and cannot write.
    std::thread::scope(|s| {
        s.spawn(|| {
            assert_eq!(rw.thread_held_depth("doc"), 0);
            assert!(rw.blocking_try_write("doc").unwrap().is_none());
            let r = rw.blocking_try_read("doc").unwrap().expect("readers share");
            assert_eq!(r.blocking_release().unwrap(), Release::Released);
        });
    });
    assert_eq!(inner.blocking_release().unwrap(), Release::StillHeld);
    assert_eq!(outer.blocking_release().unwrap(), Release::Released);
    let w = rw.blocking_write("doc").unwrap();
    let nested = rw
        .blocking_try_write("doc")
        .unwrap()
        .expect("reentrant write");
    assert_eq!(nested.blocking_release().unwrap(), Release::StillHeld);
    let r = w.blocking_downgrade().unwrap();
    assert_eq!(r.blocking_release().unwrap(), Release::Released);
}

#[test]
fn blocking_api_is_thread_reentrant_on_memory() {
    blocking_api_is_thread_reentrant(RwLock::new(MemoryStore::new()));
}

#[test]
fn blocking_api_is_thread_reentrant_on_redis() {
    let server = support::RedisServer::start();
    let store = RedisStore::blocking_connect(&server.url()).unwrap();
    blocking_api_is_thread_reentrant(RwLock::new(store));
}

#[tokio::test]
#[should_panic(expected = "inside an async runtime")]
async fn blocking_read_panics_inside_an_async_runtime() {
    let _ = RwLock::new(MemoryStore::new()).blocking_read("doc");
}

#[test]
fn async_guards_and_locks_are_send_and_sync() {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<RwLock<MemoryStore>>();
    send_sync::<ReadGuard<MemoryStore>>();
    send_sync::<WriteGuard<RedisStore>>();
    send_sync::<tairlock_rwlock::TwoStepRwLock<RedisStore>>();
}
