//! GetSetLock (DESIGN.md §5): the jeffkit algorithm verbatim, on both stores. Its flaws are
//! demonstrated in `legacy_races.rs`; here: the protocol itself, nil handling (F6), units,
//! waiting, and bad input.
//!
//! GetSetLock judges time by its client clock only, so on both stores the clients run on a
//! virtual clock the test moves (on the memory store it is the store's clock too).

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{Env, TestStore};
use tairlock::clock::{Clock, TokioClock, VirtualClock};
use tairlock::{ErrorKind, MemoryStore, Store, Ttl};
use tairlock_legacy::{GetSetLock, Options, Release, TryAcquire, Unit, WatchStore};
use tairlock_testing::gated::Gate;

const KEY: &str = "lock.orderid";

/// A client clock for `env`: the store's own virtual clock on memory, a fresh one on Redis.
fn client_clock<S: TestStore>(env: &Env<S>) -> VirtualClock {
    env.virtual_clock().cloned().unwrap_or_default()
}

fn locks<S: Store>(store: S, clock: &VirtualClock, unit: Unit) -> GetSetLock<S> {
    GetSetLock::with_options(
        store,
        Options::default().unit(unit).clock(Arc::new(clock.clone())),
    )
}

async fn stored<S: Store>(store: &S) -> Option<u64> {
    store
        .get(KEY)
        .await
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap().parse().unwrap())
}

macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                super::$name(super::support::Env::memory()).await;
            }

            #[tokio::test]
            async fn redis() {
                super::$name(super::support::Env::redis().await).await;
            }
        }
    )+};
}

on_both_stores!(
    acquire_writes_now_plus_timeout_plus_one_seconds_without_a_ttl,
    contended_attempt_reports_the_holders_timestamp_and_time_left,
    expired_lock_is_taken_over_with_getset,
    release_deletes_only_while_the_stored_timestamp_is_in_the_future,
    nil_get_after_a_failed_setnx_retries_setnx_at_once,
    nil_getset_after_a_vanished_key_counts_as_acquired,
    a_users_string_under_the_key_is_an_error_and_never_overwritten,
    a_key_of_another_type_is_wrongtype_and_untouched,
    bad_input_is_rejected_before_anything_is_sent,
);

async fn acquire_writes_now_plus_timeout_plus_one_seconds_without_a_ttl<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
) {
    let clock = client_clock(&env);
    clock.set(Duration::from_millis(1_700_000_000_400));
    let l = locks(env.store.clone(), &clock, Unit::Seconds);
    let held = l
        .try_acquire(KEY, Duration::from_secs(10))
        .await
        .unwrap()
        .holding()
        .unwrap();
    assert_eq!(held.value(), 1_700_000_011, "now + timeout + 1, in seconds");
    assert_eq!(held.fence(), None, "the original has no fencing token");
    assert_eq!(stored(&env.store).await, Some(1_700_000_011));
    assert_eq!(
        env.store.pttl(KEY).await.unwrap(),
        Ttl::Persistent,
        "SETNX sets no TTL"
    );
    assert_eq!(held.expires_at(), Duration::from_secs(1_700_000_012));

    let ms = locks(env.store.clone(), &clock, Unit::Millis);
    let other = ms
        .try_acquire("lock.other", Duration::from_millis(250))
        .await
        .unwrap();
    assert_eq!(
        other.holding().unwrap().value(),
        1_700_000_000_400 + 250 + 1,
        "in ms"
    );
}

async fn contended_attempt_reports_the_holders_timestamp_and_time_left<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
) {
    let clock = client_clock(&env);
    let l = locks(env.store.clone(), &clock, Unit::Millis);
    let held = l
        .try_acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
        .holding()
        .unwrap();
    clock.advance(Duration::from_millis(30));
    match l
        .try_acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
    {
        TryAcquire::Busy { holder, remaining } => {
            assert_eq!(holder, Some(held.value()));
            // value = now + 100 + 1, expired once now > value: 102 - 30 = 72 ms left.
            assert_eq!(remaining, Some(Duration::from_millis(72)));
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(
        stored(&env.store).await,
        Some(held.value()),
        "a busy attempt writes nothing"
    );
}

async fn expired_lock_is_taken_over_with_getset<S: TestStore + WatchStore>(env: Env<S>) {
    let clock = client_clock(&env);
    let gate = Gate::new();
    let first = locks(gate.client("C1", env.store.clone()), &clock, Unit::Millis);
    let second = locks(gate.client("C2", env.store.clone()), &clock, Unit::Millis);
    gate.open("C1");
    let old = first
        .try_acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
        .holding()
        .unwrap();
    // Expired once now > value = start + 101, i.e. from start + 102 on; at 101 it is live.
    clock.advance(Duration::from_millis(101));
    assert!(
        !first
            .try_acquire(KEY, Duration::from_millis(100))
            .await
            .unwrap()
            .is_acquired()
    );
    clock.advance(Duration::from_millis(1));
    let t = tokio::spawn(async move { second.try_acquire(KEY, Duration::from_millis(100)).await });
    gate.step("C2", "SETNX").await;
    gate.step("C2", "GET").await;
    gate.step("C2", "GETSET").await;
    let new = gate.join(t).await.unwrap().holding().expect("taken over");
    assert_eq!(new.value(), old.value() + 102);
    assert_eq!(stored(&env.store).await, Some(new.value()));
    assert_eq!(gate.commands_of("C2"), ["SETNX", "GET", "GETSET"]);
}

async fn release_deletes_only_while_the_stored_timestamp_is_in_the_future<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
) {
    let clock = client_clock(&env);
    let l = locks(env.store.clone(), &clock, Unit::Millis);
    let held = l
        .try_acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
        .holding()
        .unwrap();
    assert_eq!(l.release(&held).await.unwrap(), Release::Released);
    assert_eq!(stored(&env.store).await, None);
    assert_eq!(l.release(&held).await.unwrap(), Release::NotHeld);

    let held = l
        .try_acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
        .holding()
        .unwrap();
    // At now == value the lock is not expired, yet `now < value` fails: the boundary unit (F8).
    clock.advance(Duration::from_millis(101));
    assert!(!held.unit().is_expired(held.value(), clock.now()));
    assert_eq!(l.release(&held).await.unwrap(), Release::Expired);
    assert_eq!(
        stored(&env.store).await,
        Some(held.value()),
        "left for the next taker"
    );
}

/// F6: the holder releases between our SETNX and our GET; the GET returns nil; jeffkit (via a
/// Python 2 quirk) retried, and so does GetSetLock — with SETNX, at once, no sleep.
async fn nil_get_after_a_failed_setnx_retries_setnx_at_once<S: TestStore + WatchStore>(
    env: Env<S>,
) {
    let clock = client_clock(&env);
    let gate = Gate::new();
    let holder = locks(gate.client("H", env.store.clone()), &clock, Unit::Millis);
    let waiter = locks(gate.client("W", env.store.clone()), &clock, Unit::Millis);
    gate.open("H");
    let held = holder
        .try_acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
        .holding()
        .unwrap();
    let t = tokio::spawn(async move { waiter.try_acquire(KEY, Duration::from_millis(100)).await });
    gate.step("W", "SETNX").await; // 0: held.
    assert_eq!(holder.release(&held).await.unwrap(), Release::Released);
    gate.step("W", "GET").await; // nil
    gate.step("W", "SETNX").await; // 1
    assert!(gate.join(t).await.unwrap().is_acquired());
    assert_eq!(gate.commands_of("W"), ["SETNX", "GET", "SETNX"]);
}

/// F6, second half: the key vanishes between our GET (expired) and our GETSET; the GETSET
/// returns nil, having just created the key atomically: acquired.
async fn nil_getset_after_a_vanished_key_counts_as_acquired<S: TestStore + WatchStore>(
    env: Env<S>,
) {
    let clock = client_clock(&env);
    let gate = Gate::new();
    let waiter = locks(gate.client("W", env.store.clone()), &clock, Unit::Millis);
    let expired = Unit::Millis.floor(clock.now()) - 1_000;
    env.store
        .set(KEY, expired.to_string().as_bytes())
        .await
        .unwrap();
    let t = tokio::spawn(async move { waiter.try_acquire(KEY, Duration::from_millis(100)).await });
    gate.step("W", "SETNX").await;
    gate.step("W", "GET").await;
    env.store.del(KEY).await.unwrap();
    gate.step("W", "GETSET").await;
    let held = t
        .await
        .unwrap()
        .unwrap()
        .holding()
        .expect("GETSET on an absent key acquires");
    assert_eq!(stored(&env.store).await, Some(held.value()));
}

async fn a_users_string_under_the_key_is_an_error_and_never_overwritten<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
) {
    let clock = client_clock(&env);
    let l = locks(env.store.clone(), &clock, Unit::Seconds);
    env.store.set(KEY, b"not a timestamp").await.unwrap();
    let err = l
        .try_acquire(KEY, Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    let err = l.release_key(KEY).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    assert_eq!(
        env.store.get(KEY).await.unwrap().as_deref(),
        Some(&b"not a timestamp"[..])
    );
}

async fn a_key_of_another_type_is_wrongtype_and_untouched<S: TestStore + WatchStore>(env: Env<S>) {
    let clock = client_clock(&env);
    let l = locks(env.store.clone(), &clock, Unit::Seconds);
    env.store.hset(KEY, "f", b"v").await;
    let before = env.store.snapshot(KEY).await;
    assert_eq!(
        l.try_acquire(KEY, Duration::from_secs(1))
            .await
            .unwrap_err()
            .kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        l.release_key(KEY).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    env.store
        .snapshot(KEY)
        .await
        .assert_intact(&before, Duration::ZERO, "the user's hash");
}

async fn bad_input_is_rejected_before_anything_is_sent<S: TestStore + WatchStore>(env: Env<S>) {
    let clock = client_clock(&env);
    let l = locks(env.store.clone(), &clock, Unit::Seconds);
    for err in [
        l.try_acquire("", Duration::from_secs(1)).await.unwrap_err(),
        l.try_acquire(KEY, Duration::ZERO).await.unwrap_err(),
        l.try_acquire(KEY, Duration::MAX).await.unwrap_err(),
        l.release_key("").await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    }
    assert_eq!(env.store.dbsize().await, 0);
}

/// The whole loop on paused time: it polls every 10 ms while the holder's timestamp is live,
/// takes the lock over once it has passed, and gives up after the acquire timeout.
#[tokio::test(start_paused = true)]
async fn acquire_polls_until_the_timestamp_passes_or_the_acquire_timeout() {
    let clock = Arc::new(TokioClock::new());
    let store = MemoryStore::with_clock(clock.clone());
    let options = Options::default().unit(Unit::Millis).clock(clock.clone());
    let holder = GetSetLock::with_options(store.clone(), options.clone());
    let held = holder
        .try_acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
        .holding()
        .unwrap();

    let impatient = GetSetLock::with_options(
        store.clone(),
        options
            .clone()
            .acquire_timeout(Some(Duration::from_millis(50))),
    );
    let start = tokio::time::Instant::now();
    assert_eq!(
        impatient
            .acquire(KEY, Duration::from_millis(100))
            .await
            .unwrap(),
        None
    );
    assert_eq!(start.elapsed(), Duration::from_millis(50));

    let patient = GetSetLock::with_options(store.clone(), options);
    let got = patient
        .acquire(KEY, Duration::from_millis(100))
        .await
        .unwrap()
        .unwrap();
    assert!(held.unit().is_expired(held.value(), clock.now()));
    // Expired from 102 ms after the start on; found at the next 10 ms poll.
    assert_eq!(start.elapsed(), Duration::from_millis(110));
    assert_eq!(got.value(), Unit::Millis.floor(clock.now()) + 101);
}
