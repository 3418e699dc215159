//! The two-step Tair reader/writer recipe's flaws I–V (reference/semantics.md §2.5), each a
//! deterministic interleaving driven step by step on both stores: [`TwoStepRwLock`] violates,
//! and the scripted [`RwLock`] under the same schedule does not.
//!
//! The two-step recipe's steps are separate public methods; the test is the scheduler, calling
//! one client's step after another's exactly in the order of the step tables. Each scripted
//! operation is one atomic step, so "the same schedule" places it at each of the positions its
//! two-step counterpart's steps occupy.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{Env, TestStore, backend_tests};
use tairlock::Ttl;
use tairlock::clock::{SharedClock, SkewedClock, SystemClock};
use tairlock_rwlock::{
    Blocker, Options, Preference, ReadAttempt, RwLock, TwoStepRwLock, WriteAttempt,
};

const LEASE: Duration = Duration::from_secs(10);
const SHORT: Duration = Duration::from_millis(200);
const PAST_SHORT: Duration = Duration::from_millis(300);

/// A client clock: the store's virtual clock (memory) or the system clock (Redis), `ahead`.
fn client_clock<S: TestStore>(env: &Env<S>, ahead: Duration) -> SharedClock {
    let base: SharedClock = match env.virtual_clock() {
        Some(clock) => Arc::new(clock.clone()),
        None => Arc::new(SystemClock),
    };
    Arc::new(SkewedClock::ahead(base, ahead))
}

fn two_step<S: TestStore>(env: &Env<S>, ahead: Duration) -> TwoStepRwLock<S> {
    TwoStepRwLock::new(env.store.clone(), client_clock(env, ahead))
}

fn nonce() -> String {
    tairlock::new_nonce()
}

/// What the server says about the two-step lock: a live writer lock, and the reader count.
async fn two_step_state<S: TestStore>(lock: &TwoStepRwLock<S>) -> (bool, i64) {
    let keys = lock.keys("doc").unwrap();
    let writer = lock.store().get(&keys.writer).await.unwrap().is_some();
    (writer, lock.reader_count("doc").await.unwrap())
}

/// The scripted lock under a schedule with one reader step and one writer step: whichever goes
/// first gets in, the other is refused, and the server never shows both.
async fn scripted_admits_one_side<S: TestStore>(env: &Env<S>, reader_first: bool) {
    let (reader, writer) = (
        RwLock::new(env.store.clone()),
        RwLock::new(env.store.clone()),
    );
    let name = if reader_first { "doc-r" } else { "doc-w" };
    let (r, w) = (nonce(), nonce());
    if reader_first {
        assert!(matches!(
            reader.read_acquire(name, &r, LEASE).await.unwrap(),
            ReadAttempt::Acquired { .. }
        ));
        assert!(matches!(
            writer.write_acquire(name, &w, LEASE, None).await.unwrap(),
            WriteAttempt::Blocked {
                by: Blocker::Readers(1),
                ..
            }
        ));
    } else {
        assert!(matches!(
            writer.write_acquire(name, &w, LEASE, None).await.unwrap(),
            WriteAttempt::Acquired(_)
        ));
        assert!(matches!(
            reader.read_acquire(name, &r, LEASE).await.unwrap(),
            ReadAttempt::Blocked {
                by: Blocker::Writer,
                ..
            }
        ));
    }
    let state = reader.state(name).await.unwrap();
    let writer_in = state.writer != Ttl::Missing;
    assert!(
        !(writer_in && state.readers > 0),
        "scripted lock let both in: {state:?} {}",
        env.context()
    );
    assert_eq!(writer_in, !reader_first);
}

/// I. C1 probes (no writer); C2 reads rc = 0 and takes the lock; C1 INCRs: both inside.
async fn flaw_i_reader_and_writer_both_enter<S: TestStore>(env: Env<S>) {
    let (c1, c2) = (
        two_step(&env, Duration::ZERO),
        two_step(&env, Duration::ZERO),
    );
    assert!(c1.probe_writer("doc").await.unwrap(), "step 1: no writer");
    assert_eq!(c2.reader_count("doc").await.unwrap(), 0, "step 2: rc = 0");
    let write = c2.expire_lock("doc", LEASE).await.unwrap();
    assert!(write.is_some(), "step 3: C2 writes");
    assert_eq!(c1.enter_read("doc").await.unwrap(), 1, "step 4: C1 reads");
    assert_eq!(
        two_step_state(&c1).await,
        (true, 1),
        "violation: a writer and a reader inside together {}",
        env.context()
    );
    // Same schedule, scripted: the reader's one step at step 1, or at step 4.
    scripted_admits_one_side(&env, true).await;
    scripted_admits_one_side(&env, false).await;
}

/// II. C2 reads rc = 0; C1 probes and INCRs; C2 takes the lock: both inside.
async fn flaw_ii_writer_checks_first_and_both_enter<S: TestStore>(env: Env<S>) {
    let (c1, c2) = (
        two_step(&env, Duration::ZERO),
        two_step(&env, Duration::ZERO),
    );
    assert_eq!(c2.reader_count("doc").await.unwrap(), 0, "step 1: rc = 0");
    assert!(c1.probe_writer("doc").await.unwrap(), "step 2: no writer");
    assert_eq!(c1.enter_read("doc").await.unwrap(), 1, "step 3: C1 reads");
    assert!(
        c2.expire_lock("doc", LEASE).await.unwrap().is_some(),
        "step 4: C2 writes"
    );
    assert_eq!(
        two_step_state(&c1).await,
        (true, 1),
        "violation {}",
        env.context()
    );
    // Same schedule, scripted: the writer's one step at step 1, or at step 4.
    scripted_admits_one_side(&env, false).await;
    scripted_admits_one_side(&env, true).await;
}

/// III. C1 INCRs and crashes: rc never returns to 0 and has no TTL, so writers starve forever.
/// The scripted reader's lease ends and the writer gets in.
async fn flaw_iii_crashed_reader_starves_writers_forever<S: TestStore>(env: Env<S>) {
    let (c1, c2) = (
        two_step(&env, Duration::ZERO),
        two_step(&env, Duration::ZERO),
    );
    assert!(c1.try_read("doc").await.unwrap(), "C1 reads, then crashes");
    assert!(c2.try_write("doc", LEASE).await.unwrap().is_none());
    let count_key = c1.keys("doc").unwrap().count;
    assert_eq!(
        env.store.pttl(&count_key).await.unwrap(),
        Ttl::Persistent,
        "the count never expires {}",
        env.context()
    );
    // Far longer than any lease (a virtual day on the embedded store).
    let later = if env.is_redis() {
        PAST_SHORT
    } else {
        Duration::from_secs(86_400)
    };
    env.pass(later).await;
    assert!(
        c2.try_write("doc", LEASE).await.unwrap().is_none(),
        "violation: the writer still starves"
    );
    assert_eq!(c2.reader_count("doc").await.unwrap(), 1);

    // Scripted, same schedule: the reader takes a lease and crashes.
    let rw = RwLock::new(env.store.clone());
    assert!(matches!(
        rw.read_acquire("doc2", &nonce(), SHORT).await.unwrap(),
        ReadAttempt::Acquired { .. }
    ));
    assert!(matches!(
        rw.write_acquire("doc2", &nonce(), LEASE, None)
            .await
            .unwrap(),
        WriteAttempt::Blocked { .. }
    ));
    env.pass(PAST_SHORT).await;
    assert!(matches!(
        rw.write_acquire("doc2", &nonce(), LEASE, None)
            .await
            .unwrap(),
        WriteAttempt::Acquired(_)
    ));
}

/// III, patched: "the first reader also sets a TTL on rc" turns the starvation into an overlap
/// and a negative count (the TTL scaled from 30 s to 1 s).
async fn flaw_iii_patched_with_a_ttl_overlaps_and_goes_negative<S: TestStore>(env: Env<S>) {
    let ttl = Duration::from_millis(1000);
    let (c1, c2, c3) = (
        two_step(&env, Duration::ZERO),
        two_step(&env, Duration::ZERO),
        two_step(&env, Duration::ZERO),
    );
    let count_key = c1.keys("doc").unwrap().count;
    assert!(c1.probe_writer("doc").await.unwrap());
    assert_eq!(c1.enter_read("doc").await.unwrap(), 1);
    assert!(
        env.store.pexpire(&count_key, ttl).await.unwrap(),
        "the patch"
    );
    // C1 crashes. Later C3 reads; its INCR returns 2, so it sets no TTL.
    env.pass(Duration::from_millis(400)).await;
    assert!(c3.probe_writer("doc").await.unwrap());
    assert_eq!(c3.enter_read("doc").await.unwrap(), 2);
    // The key expires under C3's read; a writer sees nil = 0 and writes beside C3.
    env.pass(Duration::from_millis(700)).await;
    let write = c2.try_write("doc", LEASE).await.unwrap();
    assert!(
        write.is_some(),
        "violation: the writer enters while C3 reads {}",
        env.context()
    );
    c2.write_unlock("doc", &write.unwrap()).await.unwrap();
    // C3 leaves: the count goes negative and `== 0` is never true again.
    assert_eq!(c3.exit_read("doc").await.unwrap(), -1);
    assert!(c2.try_write("doc", LEASE).await.unwrap().is_none());
}

/// IV. A reader whose clock is 15 s fast probes with a "now" past the writer's expiry: the
/// threshold unlock deletes the live write lock, and the reader reads beside the writer.
async fn flaw_iv_fast_reader_clock_deletes_a_live_writers_lock<S: TestStore>(env: Env<S>) {
    let writer = two_step(&env, Duration::ZERO);
    let reader = two_step(&env, Duration::from_secs(15));
    let write = writer
        .expire_lock("doc", LEASE)
        .await
        .unwrap()
        .expect("writer in");
    env.pass(Duration::from_millis(50)).await;
    assert!(
        writer.now_ms() < write.expiry_ms(),
        "the writer's lease is live by true time"
    );
    assert!(
        reader.probe_writer("doc").await.unwrap(),
        "the probe 'unlocks' the live writer"
    );
    assert_eq!(reader.enter_read("doc").await.unwrap(), 1);
    assert_eq!(
        two_step_state(&writer).await,
        (false, 1),
        "violation: the live writer's lock is gone and a reader is in {}",
        env.context()
    );
    // The writer cannot even tell: its own unlock reports success.
    assert!(writer.write_unlock("doc", &write).await.unwrap());

    // Scripted, same schedule: expiry is the server's; a reader's clock decides nothing.
    let rw = RwLock::new(env.store.clone());
    let w = rw.write("doc2").await.unwrap();
    env.pass(Duration::from_millis(50)).await;
    assert!(rw.try_read("doc2").await.unwrap().is_none());
    let inspection = rw.inspect("doc2").await.unwrap();
    assert_eq!(
        inspection.writer.map(|l| l.value().to_owned()),
        w.lease().map(|l| l.value().to_owned()),
        "the writer's lease is intact"
    );
    w.release().await.unwrap();
}

/// V. Two readers overlap in turn; a writer polling between every step never sees rc = 0.
async fn flaw_v_continuous_reads_starve_the_writer<S: TestStore>(env: Env<S>) {
    let (r1, r2, w) = (
        two_step(&env, Duration::ZERO),
        two_step(&env, Duration::ZERO),
        two_step(&env, Duration::ZERO),
    );
    const ROUNDS: usize = 25;
    let mut writer_attempts = 0;
    assert!(r1.try_read("doc").await.unwrap());
    for _ in 0..ROUNDS {
        assert!(r2.try_read("doc").await.unwrap());
        writer_attempts += 1;
        assert!(w.try_write("doc", LEASE).await.unwrap().is_none());
        r1.read_unlock("doc").await.unwrap();
        writer_attempts += 1;
        assert!(w.try_write("doc", LEASE).await.unwrap().is_none());
        assert!(r1.try_read("doc").await.unwrap());
        r2.read_unlock("doc").await.unwrap();
        writer_attempts += 1;
        assert!(w.try_write("doc", LEASE).await.unwrap().is_none());
    }
    assert_eq!(
        writer_attempts,
        3 * ROUNDS,
        "violation: the writer starved through every attempt"
    );

    // Scripted with writer preference, same schedule: the waiting writer's intent keeps r1 out
    // when it comes back, and the writer is in before the first round ends.
    let rw = RwLock::new(env.store.clone());
    let (n1, n2, nw) = (nonce(), nonce(), nonce());
    let intent = Some(Duration::from_secs(5));
    assert!(matches!(
        rw.read_acquire("doc2", &n1, LEASE).await.unwrap(),
        ReadAttempt::Acquired { .. }
    ));
    assert!(matches!(
        rw.read_acquire("doc2", &n2, LEASE).await.unwrap(),
        ReadAttempt::Acquired { .. }
    ));
    assert!(matches!(
        rw.write_acquire("doc2", &nw, LEASE, intent).await.unwrap(),
        WriteAttempt::Blocked { .. }
    ));
    assert!(rw.read_release("doc2", &n1).await.unwrap());
    assert!(matches!(
        rw.write_acquire("doc2", &nw, LEASE, intent).await.unwrap(),
        WriteAttempt::Blocked { .. }
    ));
    assert!(matches!(
        rw.read_acquire("doc2", &n1, LEASE).await.unwrap(),
        ReadAttempt::Blocked {
            by: Blocker::Intent,
            ..
        }
    ));
    assert!(rw.read_release("doc2", &n2).await.unwrap());
    assert!(
        matches!(
            rw.write_acquire("doc2", &nw, LEASE, intent).await.unwrap(),
            WriteAttempt::Acquired(_)
        ),
        "the writer is in within the first round {}",
        env.context()
    );

    // The preference is the fix: switched to reader preference, the same schedule starves the
    // scripted writer too (for as long as the reads go on).
    let rp = RwLock::with_options(
        env.store.clone(),
        Options::default().preference(Preference::Reader),
    );
    let (n1, n2, nw) = (nonce(), nonce(), nonce());
    assert!(matches!(
        rp.read_acquire("doc3", &n1, LEASE).await.unwrap(),
        ReadAttempt::Acquired { .. }
    ));
    for _ in 0..ROUNDS {
        assert!(matches!(
            rp.read_acquire("doc3", &n2, LEASE).await.unwrap(),
            ReadAttempt::Acquired { .. }
        ));
        assert!(matches!(
            rp.write_acquire("doc3", &nw, LEASE, None).await.unwrap(),
            WriteAttempt::Blocked { .. }
        ));
        assert!(rp.read_release("doc3", &n1).await.unwrap());
        assert!(matches!(
            rp.read_acquire("doc3", &n1, LEASE).await.unwrap(),
            ReadAttempt::Acquired { .. }
        ));
        assert!(rp.read_release("doc3", &n2).await.unwrap());
    }
}

backend_tests!(
    flaw_i_reader_and_writer_both_enter,
    flaw_ii_writer_checks_first_and_both_enter,
    flaw_iii_crashed_reader_starves_writers_forever,
    flaw_iii_patched_with_a_ttl_overlaps_and_goes_negative,
    flaw_iv_fast_reader_clock_deletes_a_live_writers_lock,
    flaw_v_continuous_reads_starve_the_writer,
);

/// The two-step probe refuses a writer key that holds somebody's data instead of deleting it.
async fn two_step_probe_refuses_foreign_writer_values<S: TestStore>(env: Env<S>) {
    let lock = two_step(&env, Duration::ZERO);
    let key = lock.keys("doc").unwrap().writer;
    env.store.set(&key, b"not a timestamp").await.unwrap();
    let err = lock.probe_writer("doc").await.unwrap_err();
    assert!(err.is_wrong_type(), "{err}");
    assert_eq!(
        env.store.get(&key).await.unwrap().as_deref(),
        Some(&b"not a timestamp"[..])
    );
}

backend_tests!(two_step_probe_refuses_foreign_writer_values);
