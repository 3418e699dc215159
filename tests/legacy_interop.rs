//! The interop matrix (tairlock-legacy crate docs, `docs/legacy-migration.md`): old and new
//! clients on one key against a real server, one test per row and column.
//!
//! "Old" is GetSetLock (the original protocol, client clock); "new" is WatchLock or
//! ScriptedLock, each row run for both. All clients use milliseconds and the system clock, like
//! NTP-synchronised clients of a local server, unless a test skews one.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::RedisServer;
use tairlock::clock::{SharedClock, SkewedClock, SystemClock};
use tairlock::{RedisStore, Store, Ttl};
use tairlock_legacy::{
    GetSetLock, Holding, LegacyLock, Options, Profile, Release, Renew, Strategy, TryAcquire, Unit,
};
use tairlock_testing::gated::Gate;

const KEY: &str = "lock.orderid";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn options(clock: SharedClock) -> Options {
    Options::default().unit(Unit::Millis).clock(clock)
}

fn old<S: Store>(store: S) -> GetSetLock<S> {
    GetSetLock::with_options(store, options(Arc::new(SystemClock)))
}

fn new(store: RedisStore, strategy: Strategy) -> LegacyLock<RedisStore> {
    LegacyLock::with_strategy(store, options(Arc::new(SystemClock)), strategy)
}

#[track_caller]
fn acquired(outcome: tairlock::Result<TryAcquire>) -> Holding {
    match outcome {
        Ok(TryAcquire::Acquired(h)) => h,
        other => panic!("expected the lock to be acquired, got {other:?}"),
    }
}

#[track_caller]
fn busy(outcome: tairlock::Result<TryAcquire>) {
    match outcome {
        Ok(TryAcquire::Busy { .. }) => {}
        other => panic!("expected busy, got {other:?}"),
    }
}

async fn stored(store: &RedisStore) -> Option<u64> {
    store
        .get(KEY)
        .await
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap().parse().unwrap())
}

/// `name::{scripted, watch}`: the row for old + ScriptedLock and for old + WatchLock.
macro_rules! for_both_new_kinds {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            use tairlock_legacy::{Profile, Strategy};

            #[tokio::test]
            async fn scripted() {
                super::$name(Strategy::Scripted).await;
            }

            #[tokio::test]
            async fn watch() {
                super::$name(Strategy::Watch(Profile::Modern)).await;
            }
        }
    )+};
}

for_both_new_kinds!(
    old_and_new_clients_exclude_each_other_with_synchronised_clocks,
    new_client_takes_over_an_old_lock_once_its_timestamp_passes_by_server_time,
    old_client_release_deletes_a_new_clients_lock,
    new_client_release_never_deletes_an_old_clients_lock,
    old_losing_getset_sets_the_new_holders_lease_to_the_losers_timestamp,
    old_client_with_a_fast_clock_takes_over_a_live_new_lock,
);

/// Column "can two hold at once?": no, while clocks agree.
async fn old_and_new_clients_exclude_each_other_with_synchronised_clocks(strategy: Strategy) {
    let server = RedisServer::start();
    let store = server.store().await;
    let (o, n) = (old(store.clone()), new(store.clone(), strategy));
    let held = acquired(n.try_acquire(KEY, ms(5_000)).await);
    busy(o.try_acquire(KEY, ms(5_000)).await);
    assert_eq!(
        stored(&store).await,
        Some(held.value()),
        "the old client wrote nothing"
    );
    assert_eq!(n.release(&held).await.unwrap(), Release::Released);
    let old_held = acquired(o.try_acquire(KEY, ms(5_000)).await);
    busy(n.try_acquire(KEY, ms(5_000)).await);
    assert_eq!(
        stored(&store).await,
        Some(old_held.value()),
        "the new client wrote nothing"
    );
    assert_eq!(o.release(&old_held).await.unwrap(), Release::Released);
}

/// Leases across protocols: an old lock (no TTL) lasts until its timestamp passes by the
/// server's clock; then the new client takes it over.
async fn new_client_takes_over_an_old_lock_once_its_timestamp_passes_by_server_time(
    strategy: Strategy,
) {
    let server = RedisServer::start();
    let store = server.store().await;
    let (o, n) = (old(store.clone()), new(store.clone(), strategy));
    let old_held = acquired(o.try_acquire(KEY, ms(100)).await);
    assert_eq!(store.pttl(KEY).await.unwrap(), Ttl::Persistent);
    busy(n.try_acquire(KEY, ms(5_000)).await);
    tokio::time::sleep(ms(150)).await;
    let held = acquired(n.try_acquire(KEY, ms(5_000)).await);
    assert!(held.fence().is_some());
    assert!(matches!(store.pttl(KEY).await.unwrap(), Ttl::Expires(_)));
    // And the old client's late release is what the next test is about: here it has expired.
    assert!(
        old_held
            .unit()
            .is_expired(old_held.value(), SystemClock.now_duration())
    );
}

/// Column "old deletes new's lock?": yes. The old release deletes any lock whose timestamp is
/// still in its future (F4b): an old holder whose lease ran out deletes the new holder's lock.
async fn old_client_release_deletes_a_new_clients_lock(strategy: Strategy) {
    let server = RedisServer::start();
    let store = server.store().await;
    let (o, n) = (old(store.clone()), new(store.clone(), strategy));
    let old_held = acquired(o.try_acquire(KEY, ms(100)).await);
    tokio::time::sleep(ms(150)).await;
    let held = acquired(n.try_acquire(KEY, ms(5_000)).await);
    assert_eq!(o.release(&old_held).await.unwrap(), Release::Released);
    assert_eq!(
        store.get(KEY).await.unwrap(),
        None,
        "the old release deleted the new lock"
    );
    assert_eq!(n.release(&held).await.unwrap(), Release::NotHeld);
}

/// Column "new deletes old's lock?": never. Neither after its own lease ran out and an old
/// client acquired, nor with a holding whose timestamp happens to equal the old client's.
async fn new_client_release_never_deletes_an_old_clients_lock(strategy: Strategy) {
    let server = RedisServer::start();
    let store = server.store().await;
    let (o, n) = (old(store.clone()), new(store.clone(), strategy));
    let held = acquired(n.try_acquire(KEY, ms(100)).await);
    tokio::time::sleep(ms(150)).await;
    let old_held = acquired(o.try_acquire(KEY, ms(5_000)).await);
    assert_eq!(n.release(&held).await.unwrap(), Release::Overwritten);
    assert_eq!(n.renew(&held, ms(5_000)).await.unwrap(), Renew::Overwritten);
    // Same timestamp, same token: still not ours, because an old client wrote the key (no TTL).
    let lookalike = Holding::new(KEY, old_held.value(), Unit::Millis, held.fence());
    assert_eq!(n.release(&lookalike).await.unwrap(), Release::Overwritten);
    assert_eq!(
        stored(&store).await,
        Some(old_held.value()),
        "the old client's lock stands"
    );
    assert_eq!(o.release(&old_held).await.unwrap(), Release::Released);
}

/// Column "an old client's losing GETSET on a new client's lock" (F3 across protocols): the old
/// client saw an expired timestamp, the new client took the lock, the old GETSET lands after:
/// it loses, but the key now holds its (shorter) timestamp, without a TTL. The new holder's
/// release reports Overwritten and leaves it; the key frees itself when that timestamp passes.
async fn old_losing_getset_sets_the_new_holders_lease_to_the_losers_timestamp(strategy: Strategy) {
    let server = RedisServer::start();
    let store = server.store().await;
    let gate = Gate::new();
    let o = old(gate.client("old", store.clone()));
    let n = new(store.clone(), strategy);
    let now = Unit::Millis.floor(SystemClock.now_duration());
    store
        .set(KEY, (now - 1_000).to_string().as_bytes())
        .await
        .unwrap();
    let loser = tokio::spawn(async move { o.try_acquire(KEY, ms(100)).await });
    gate.step("old", "SETNX").await;
    gate.step("old", "GET").await; // Expired: it will GETSET.
    let held = acquired(n.try_acquire(KEY, ms(5_000)).await);
    gate.step("old", "GETSET").await;
    busy(gate.join(loser).await);
    let rewritten = stored(&store).await.unwrap();
    assert_ne!(rewritten, held.value());
    assert!(
        rewritten < held.value(),
        "the lease became the loser's, shorter timestamp"
    );
    assert_eq!(
        store.pttl(KEY).await.unwrap(),
        Ttl::Persistent,
        "and lost its TTL"
    );
    assert_eq!(n.release(&held).await.unwrap(), Release::Overwritten);
    assert_eq!(stored(&store).await, Some(rewritten), "not deleted");
    let other = new(store.clone(), strategy);
    busy(other.try_acquire(KEY, ms(5_000)).await);
    tokio::time::sleep(ms(150)).await; // Past the loser's timestamp, by server time.
    let next = acquired(other.try_acquire(KEY, ms(5_000)).await);
    assert!(next.fence() > held.fence());
}

/// Column "can two hold at once?", the old client's flaw F2: its clock runs ahead of the
/// server by more than the lease left, so it takes a live new lock over. The new client cannot
/// prevent that, but it does not make it worse: its release leaves the old client's lock.
async fn old_client_with_a_fast_clock_takes_over_a_live_new_lock(strategy: Strategy) {
    let server = RedisServer::start();
    let store = server.store().await;
    let fast: SharedClock = Arc::new(SkewedClock::ahead(Arc::new(SystemClock), ms(10_000)));
    let o = GetSetLock::with_options(store.clone(), options(fast));
    let n = new(store.clone(), strategy);
    let held = acquired(n.try_acquire(KEY, ms(5_000)).await);
    let old_held = acquired(o.try_acquire(KEY, ms(5_000)).await);
    assert!(
        !held
            .unit()
            .is_expired(held.value(), SystemClock.now_duration()),
        "two holders: the new lock was live"
    );
    assert_eq!(n.release(&held).await.unwrap(), Release::Overwritten);
    assert_eq!(stored(&store).await, Some(old_held.value()));
}

/// Row "Watch + Scripted": one format, one fence key: they exclude each other, a holding of one
/// is released by the other, and fencing tokens increase across both.
#[tokio::test]
async fn watch_and_scripted_clients_share_keys_fully() {
    let server = RedisServer::start();
    let store = server.store().await;
    let w = new(store.clone(), Strategy::Watch(Profile::Modern));
    let s = new(store.clone(), Strategy::Scripted);
    let by_watch = acquired(w.try_acquire(KEY, ms(5_000)).await);
    busy(s.try_acquire(KEY, ms(5_000)).await);
    let stale = Holding::new(
        KEY,
        by_watch.value(),
        Unit::Millis,
        by_watch.fence().map(|f| f - 1),
    );
    assert_eq!(
        s.release(&stale).await.unwrap(),
        Release::HeldByOther,
        "same timestamp, other token"
    );
    assert_eq!(
        s.release(&by_watch).await.unwrap(),
        Release::Released,
        "the exact holding"
    );
    let by_script = acquired(s.try_acquire(KEY, ms(5_000)).await);
    busy(w.try_acquire(KEY, ms(5_000)).await);
    assert!(by_script.fence() > by_watch.fence());
    tokio::time::sleep(ms(5)).await; // So the renewed timestamp differs.
    let renewed = match w.renew(&by_script, ms(5_000)).await.unwrap() {
        Renew::Renewed(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(
        w.release(&by_script).await.unwrap(),
        Release::HeldByOther,
        "renewal retired it"
    );
    assert_eq!(s.release(&renewed).await.unwrap(), Release::Released);
    let next = acquired(w.try_acquire(KEY, ms(5_000)).await);
    assert!(next.fence() > by_script.fence());
}

/// `SystemClock::now` without importing the trait at every call site.
trait NowDuration {
    fn now_duration(&self) -> Duration;
}

impl NowDuration for SystemClock {
    fn now_duration(&self) -> Duration {
        tairlock::clock::Clock::now(self)
    }
}
