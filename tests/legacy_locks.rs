//! WatchLock and ScriptedLock (DESIGN.md §5): one contract, checked on both kinds and both
//! stores: the legacy wire format with a server timestamp and a matching TTL, busy/free,
//! owner-checked release and renewal, fencing tokens, old clients' keys, bad input. Then what is
//! particular to each: the Classic WATCH profile, connection pooling, and the exact TTL of the
//! scripts.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::{Env, TestStore};
use tairlock::clock::{Clock, VirtualClock};
use tairlock::{ErrorKind, Store, Ttl};
use tairlock_legacy::wire::fence_key;
use tairlock_legacy::{
    Holding, LegacyLock, Options, Profile, Release, Renew, ScriptedLock, Strategy, TryAcquire,
    Unit, WatchLock, WatchStore,
};

const KEY: &str = "lock.orderid";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn lock<S: WatchStore>(env: &Env<S>, strategy: Strategy, unit: Unit) -> LegacyLock<S> {
    LegacyLock::with_strategy(env.store.clone(), Options::default().unit(unit), strategy)
}

#[track_caller]
fn acquired(outcome: tairlock::Result<TryAcquire>) -> Holding {
    match outcome {
        Ok(TryAcquire::Acquired(h)) => h,
        other => panic!("expected the lock to be acquired, got {other:?}"),
    }
}

async fn stored<S: Store>(store: &S, key: &str) -> Option<u64> {
    store
        .get(key)
        .await
        .unwrap()
        .map(|v| String::from_utf8(v).unwrap().parse().unwrap())
}

fn expires(ttl: Ttl) -> Duration {
    match ttl {
        Ttl::Expires(d) => d,
        other => panic!("expected a TTL, got {other:?}"),
    }
}

/// `name::{watch,scripted}_{memory,redis}` from `async fn name(env, strategy)`.
macro_rules! for_both_kinds {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            use super::support::Env;
            use tairlock_legacy::{Profile, Strategy};

            #[tokio::test]
            async fn watch_memory() {
                super::$name(Env::memory(), Strategy::Watch(Profile::Modern)).await;
            }

            #[tokio::test]
            async fn watch_redis() {
                super::$name(Env::redis().await, Strategy::Watch(Profile::Modern)).await;
            }

            #[tokio::test]
            async fn scripted_memory() {
                super::$name(Env::memory(), Strategy::Scripted).await;
            }

            #[tokio::test]
            async fn scripted_redis() {
                super::$name(Env::redis().await, Strategy::Scripted).await;
            }
        }
    )+};
}

for_both_kinds!(
    acquire_writes_a_server_timestamp_whose_ttl_ends_with_it,
    busy_while_held_and_free_after_release,
    fencing_tokens_increase_across_grants_even_after_the_fence_key_expires,
    renew_moves_timestamp_and_ttl_keeps_the_token_and_retires_the_old_holding,
    release_and_renew_after_expiry_report_not_held_and_touch_nothing,
    an_old_clients_timestamp_is_judged_by_server_time,
    a_key_with_a_ttl_is_held_while_it_exists_whatever_its_timestamp,
    a_holding_is_relied_on_no_longer_than_its_key_lives,
    release_and_renew_refuse_a_key_an_old_client_rewrote,
    data_that_is_not_a_lock_is_an_error_and_untouched,
    a_holding_without_a_token_or_bad_input_is_rejected,
    concurrent_attempts_grant_exactly_one_lock,
);

async fn acquire_writes_a_server_timestamp_whose_ttl_ends_with_it<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Seconds);
    let before = env.store.time().await.unwrap();
    let held = acquired(l.try_acquire(KEY, Duration::from_secs(10)).await);
    let after = env.store.time().await.unwrap();
    assert!(
        (Unit::Seconds.value(before, 10)..=Unit::Seconds.value(after, 10)).contains(&held.value()),
        "now + timeout + 1 by the server's clock, in seconds"
    );
    assert_eq!(
        stored(&env.store, KEY).await,
        Some(held.value()),
        "a bare integer"
    );
    // The key ends exactly when its timestamp does: at (value + 1) s, by server time. (Time
    // first: the TTL, read later, can only be shorter.)
    let now = env.store.time().await.unwrap();
    let ttl = expires(env.store.pttl(KEY).await.unwrap());
    let until_expiry = held.expires_at().saturating_sub(now);
    assert!(ttl <= until_expiry, "{ttl:?} <= {until_expiry:?}");
    assert!(
        ttl + Duration::from_millis(50) >= until_expiry,
        "{ttl:?} ~ {until_expiry:?}"
    );
    let fence = held.fence().expect("a fencing token");
    assert_eq!(stored(&env.store, &fence_key(KEY)).await, Some(fence));
    let fence_ttl = expires(env.store.pttl(&fence_key(KEY)).await.unwrap());
    assert!(
        fence_ttl >= ttl + Duration::from_secs(59),
        "lease + 60 s retention: {fence_ttl:?}"
    );
}

async fn busy_while_held_and_free_after_release<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let held = acquired(l.try_acquire(KEY, ms(5_000)).await);
    match l.try_acquire(KEY, ms(100)).await.unwrap() {
        TryAcquire::Busy { holder, remaining } => {
            assert_eq!(holder, Some(held.value()));
            let remaining = remaining.expect("the remaining time is known");
            assert!(
                remaining <= ms(5_002) && remaining >= ms(4_000),
                "{remaining:?}"
            );
        }
        other => panic!("expected busy, got {other:?}"),
    }
    assert_eq!(l.release(&held).await.unwrap(), Release::Released);
    assert_eq!(env.store.get(KEY).await.unwrap(), None);
    assert_eq!(
        l.release(&held).await.unwrap(),
        Release::NotHeld,
        "a repeated release is harmless"
    );
    let again = acquired(l.try_acquire(KEY, ms(100)).await);
    assert!(again.fence() > held.fence());
}

async fn fencing_tokens_increase_across_grants_even_after_the_fence_key_expires<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let mut last = 0;
    for round in 0..4 {
        if round == 2 {
            // As if the retention had passed: the token is anchored to server time.
            env.store.del(&fence_key(KEY)).await.unwrap();
            env.pass(ms(1)).await;
        }
        let held = acquired(l.try_acquire(KEY, ms(1_000)).await);
        let fence = held.fence().unwrap();
        assert!(fence > last, "round {round}: {fence} > {last}");
        last = fence;
        assert_eq!(l.release(&held).await.unwrap(), Release::Released);
    }
}

async fn renew_moves_timestamp_and_ttl_keeps_the_token_and_retires_the_old_holding<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let held = acquired(l.try_acquire(KEY, ms(200)).await);
    env.pass(ms(50)).await;
    let renewed = match l.renew(&held, ms(5_000)).await.unwrap() {
        Renew::Renewed(h) => h,
        other => panic!("expected renewed, got {other:?}"),
    };
    assert!(
        renewed.value() >= held.value() + 4_800,
        "{} vs {}",
        renewed.value(),
        held.value()
    );
    assert_eq!(renewed.fence(), held.fence(), "the token stays");
    assert_eq!(stored(&env.store, KEY).await, Some(renewed.value()));
    assert!(expires(env.store.pttl(KEY).await.unwrap()) > ms(4_000));
    env.pass(ms(250)).await; // Past the original lease: still held.
    assert_eq!(
        l.release(&held).await.unwrap(),
        Release::HeldByOther,
        "the old holding is retired"
    );
    assert_eq!(l.renew(&held, ms(100)).await.unwrap(), Renew::HeldByOther);
    assert_eq!(l.release(&renewed).await.unwrap(), Release::Released);
}

async fn release_and_renew_after_expiry_report_not_held_and_touch_nothing<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let held = acquired(l.try_acquire(KEY, ms(50)).await);
    env.pass(ms(120)).await;
    assert_eq!(
        env.store.get(KEY).await.unwrap(),
        None,
        "the server's TTL removed it"
    );
    assert_eq!(l.release(&held).await.unwrap(), Release::NotHeld);
    assert_eq!(l.renew(&held, ms(100)).await.unwrap(), Renew::NotHeld);
    assert_eq!(
        env.store.get(KEY).await.unwrap(),
        None,
        "renewal did not re-create it"
    );
    // Someone else's grant now: the stale holding touches nothing.
    let next = acquired(l.try_acquire(KEY, ms(5_000)).await);
    assert_eq!(l.release(&held).await.unwrap(), Release::HeldByOther);
    assert_eq!(l.renew(&held, ms(100)).await.unwrap(), Renew::HeldByOther);
    assert_eq!(stored(&env.store, KEY).await, Some(next.value()));
}

/// An old client's key has no TTL: its timestamp is judged against the server's clock.
async fn an_old_clients_timestamp_is_judged_by_server_time<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let now = Unit::Millis.floor(env.store.time().await.unwrap());
    env.store
        .set(KEY, (now + 10_000).to_string().as_bytes())
        .await
        .unwrap();
    match l.try_acquire(KEY, ms(100)).await.unwrap() {
        TryAcquire::Busy { holder, remaining } => {
            assert_eq!(holder, Some(now + 10_000));
            let remaining = remaining.unwrap();
            assert!(
                remaining <= ms(10_001) && remaining > ms(9_000),
                "{remaining:?}"
            );
        }
        other => panic!("a live old lock must be busy, got {other:?}"),
    }
    env.store
        .set(KEY, (now - 1).to_string().as_bytes())
        .await
        .unwrap();
    let held = acquired(l.try_acquire(KEY, ms(100)).await);
    assert!(
        matches!(env.store.pttl(KEY).await.unwrap(), Ttl::Expires(_)),
        "now with a TTL"
    );
    assert_eq!(l.release(&held).await.unwrap(), Release::Released);
}

/// A key with a TTL was written by a Watch or Scripted client: it is held while it exists,
/// whatever its timestamp says. The two can disagree: inside a script Redis judges expiry by
/// the script's start, while the script judges the timestamp by the `TIME` it reads later, so
/// a lock's timestamp can pass a millisecond before its key goes; taking the key then
/// overwrites a lease its holder still relies on (issue #26: a false BROKEN in `tairlock race
/// --algorithm legacy-scripted` on Redis). The gap is made wide here: a timestamp a second in
/// the past, 10 s left on the key.
async fn a_key_with_a_ttl_is_held_while_it_exists_whatever_its_timestamp<
    S: TestStore + WatchStore,
>(
    env: Env<S>,
    strategy: Strategy,
) {
    for unit in [Unit::Millis, Unit::Seconds] {
        let l = lock(&env, strategy, unit);
        let now = unit.floor(env.store.time().await.unwrap());
        let passed = now - 2;
        env.store
            .set(KEY, passed.to_string().as_bytes())
            .await
            .unwrap();
        assert!(env.store.pexpire(KEY, ms(10_000)).await.unwrap());
        match l.try_acquire(KEY, ms(100)).await.unwrap() {
            TryAcquire::Busy { holder, remaining } => {
                assert_eq!(holder, Some(passed));
                let remaining = remaining.expect("the key's TTL");
                assert!(
                    remaining <= ms(10_000) && remaining > ms(9_000),
                    "{unit:?}: busy for the key's TTL, not its timestamp: {remaining:?} {}",
                    env.context()
                );
            }
            other => panic!(
                "{unit:?}: a key with a TTL must be held, whatever its timestamp; got {other:?} {}",
                env.context()
            ),
        }
        assert_eq!(stored(&env.store, KEY).await, Some(passed), "untouched");
        assert!(
            expires(env.store.pttl(KEY).await.unwrap()) > ms(9_000),
            "its TTL untouched"
        );
        env.store.del(KEY).await.unwrap();
    }
}

/// A holding is relied on no longer than its key lives: its deadline is dated from the request
/// that took or renewed it and the time to live the server reported in the same answer.
async fn a_holding_is_relied_on_no_longer_than_its_key_lives<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let lease = Duration::from_secs(10);
    let held = acquired(l.try_acquire(KEY, lease).await);
    let check = |held: &Holding, before: tokio::time::Instant, ttl: Duration, what: &str| {
        // The key lives at least `ttl` after `before` (the PTTL was read after it).
        let relied = held.deadline().saturating_duration_since(before);
        assert!(
            relied <= ttl,
            "{what}: relied on for {relied:?}, the key had {ttl:?} left {}",
            env.context()
        );
        assert!(
            relied + ms(500) >= ttl.mul_f64(0.99),
            "{what}: relied on for {relied:?} only, the key had {ttl:?} left {}",
            env.context()
        );
    };
    let before = tokio::time::Instant::now();
    check(
        &held,
        before,
        expires(env.store.pttl(KEY).await.unwrap()),
        "acquire",
    );
    let Renew::Renewed(renewed) = l.renew(&held, lease).await.unwrap() else {
        panic!("ours to renew");
    };
    let before = tokio::time::Instant::now();
    check(
        &renewed,
        before,
        expires(env.store.pttl(KEY).await.unwrap()),
        "renew",
    );
    assert_eq!(l.release(&renewed).await.unwrap(), Release::Released);
}

/// A key without a TTL was written by an old client after us (a takeover, or a losing GETSET
/// that rewrote our timestamp, F3): never deleted, never renewed.
async fn release_and_renew_refuse_a_key_an_old_client_rewrote<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let held = acquired(l.try_acquire(KEY, ms(5_000)).await);
    // Even the same timestamp, rewritten by GETSET (which drops the TTL), is not ours any more.
    let old = env
        .store
        .getset(KEY, held.value_text().as_bytes())
        .await
        .unwrap();
    assert_eq!(old, Some(held.value_text().into_bytes()));
    assert_eq!(env.store.pttl(KEY).await.unwrap(), Ttl::Persistent);
    assert_eq!(l.release(&held).await.unwrap(), Release::Overwritten);
    assert_eq!(l.renew(&held, ms(5_000)).await.unwrap(), Renew::Overwritten);
    let other = held.value() + 7;
    env.store
        .getset(KEY, other.to_string().as_bytes())
        .await
        .unwrap();
    assert_eq!(l.release(&held).await.unwrap(), Release::Overwritten);
    assert_eq!(
        stored(&env.store, KEY).await,
        Some(other),
        "the old client's value stays"
    );
}

async fn data_that_is_not_a_lock_is_an_error_and_untouched<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    env.store.hset(KEY, "f", b"v").await;
    let before = env.store.snapshot(KEY).await;
    assert_eq!(
        l.try_acquire(KEY, ms(100)).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    let fake = Holding::new(KEY, 1, Unit::Millis, Some(1));
    assert_eq!(
        l.release(&fake).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    env.store
        .snapshot(KEY)
        .await
        .assert_intact(&before, Duration::ZERO, "the user's hash");

    env.store.set("text", b"hello").await.unwrap();
    assert_eq!(
        l.try_acquire("text", ms(100)).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        env.store.get("text").await.unwrap().as_deref(),
        Some(&b"hello"[..])
    );

    env.store.rpush(&fence_key("guarded"), b"x").await;
    assert_eq!(
        l.try_acquire("guarded", ms(100)).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        env.store.get("guarded").await.unwrap(),
        None,
        "nothing written"
    );
    env.store.set(&fence_key("fenced"), b"nope").await.unwrap();
    assert_eq!(
        l.try_acquire("fenced", ms(100)).await.unwrap_err().kind(),
        ErrorKind::WrongType
    );
    assert_eq!(
        env.store.get("fenced").await.unwrap(),
        None,
        "nothing written"
    );
}

async fn a_holding_without_a_token_or_bad_input_is_rejected<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    let getset_holding = Holding::new(KEY, 1, Unit::Millis, None);
    assert_eq!(
        l.release(&getset_holding).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        l.renew(&getset_holding, ms(1)).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        l.try_acquire("", ms(1)).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        l.try_acquire(KEY, Duration::ZERO).await.unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(env.store.dbsize().await, 0);
}

async fn concurrent_attempts_grant_exactly_one_lock<S: TestStore + WatchStore>(
    env: Env<S>,
    strategy: Strategy,
) {
    let l = lock(&env, strategy, Unit::Millis);
    // An expired old-client value: every contender sees it expired at once.
    let now = Unit::Millis.floor(env.store.time().await.unwrap());
    env.store
        .set(KEY, (now - 1_000).to_string().as_bytes())
        .await
        .unwrap();
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let l = l.clone();
            tokio::spawn(async move { l.try_acquire(KEY, ms(5_000)).await })
        })
        .collect();
    let mut winners = Vec::new();
    for t in tasks {
        if let TryAcquire::Acquired(h) = t.await.unwrap().unwrap() {
            winners.push(h);
        }
    }
    assert_eq!(winners.len(), 1, "exactly one winner: {winners:?}");
    assert_eq!(stored(&env.store, KEY).await, Some(winners[0].value()));
}

// ---------------------------------------------------------------------------------------------
// WatchLock specifics.

mod classic_profile {
    use super::*;

    /// Redis 2.2-2.6.11 commands only: SETEX (whole seconds), TTL, an INCR fence that is never
    /// expired, and the client clock for timestamps.
    async fn classic_profile_uses_setex_an_incr_fence_and_the_client_clock<
        S: TestStore + WatchStore,
    >(
        env: Env<S>,
    ) {
        let clock = VirtualClock::new(env.store.time().await.unwrap());
        let options = Options::default()
            .unit(Unit::Seconds)
            .profile(Profile::Classic)
            .clock(Arc::new(clock.clone()));
        let l = WatchLock::with_options(env.store.clone(), options);
        let held = acquired(l.try_acquire(KEY, Duration::from_secs(10)).await);
        assert_eq!(held.value(), Unit::Seconds.value(clock.now(), 10));
        assert_eq!(held.fence(), Some(1), "INCR");
        let ttl = expires(env.store.pttl(KEY).await.unwrap());
        assert!(
            ttl > Duration::from_secs(9) && ttl <= Duration::from_secs(12),
            "{ttl:?}"
        );
        assert_eq!(
            env.store.pttl(&fence_key(KEY)).await.unwrap(),
            Ttl::Persistent
        );
        assert!(
            !l.try_acquire(KEY, Duration::from_secs(1))
                .await
                .unwrap()
                .is_acquired()
        );
        let renewed = match l.renew(&held, Duration::from_secs(20)).await.unwrap() {
            Renew::Renewed(h) => h,
            other => panic!("{other:?}"),
        };
        assert_eq!(renewed.fence(), Some(1));
        assert_eq!(l.release(&renewed).await.unwrap(), Release::Released);
        let next = acquired(l.try_acquire(KEY, Duration::from_secs(10)).await);
        assert_eq!(next.fence(), Some(2));
    }

    #[tokio::test]
    async fn memory() {
        classic_profile_uses_setex_an_incr_fence_and_the_client_clock(Env::memory()).await;
    }

    #[tokio::test]
    async fn redis() {
        classic_profile_uses_setex_an_incr_fence_and_the_client_clock(Env::redis().await).await;
    }
}

/// Dedicated connections are pooled: many operations, one connection.
#[tokio::test]
async fn watch_lock_reuses_pooled_connections() {
    let env = Env::redis().await;
    let connections = || -> u64 {
        env.server()
            .cli(&["INFO", "stats"])
            .lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .expect("INFO stats has total_connections_received")
    };
    let before = connections();
    let l = WatchLock::with_options(env.store.clone(), Options::default().unit(Unit::Millis));
    for _ in 0..25 {
        let held = acquired(l.try_acquire(KEY, ms(1_000)).await);
        assert_eq!(l.release(&held).await.unwrap(), Release::Released);
    }
    // One dedicated WATCH connection, and the next INFO's own.
    let opened = connections() - before;
    assert_eq!(opened, 2, "50 transactions opened {opened} connections");
}

/// The memory store's WATCH emulation aborts EXEC on a change of value or expiry, as a server does.
#[tokio::test]
async fn memory_watch_aborts_exec_when_a_watched_key_changes() {
    use tairlock_legacy::watch::{Expiry, Read, TxOp, WatchConnection};
    let env = Env::memory();
    let store = env.store.clone();
    let set = |v: &str| TxOp::Set {
        key: "k".into(),
        value: v.as_bytes().to_vec(),
        expiry: Expiry::Millis(1_000),
        xx: false,
    };
    let mut con = store.watch_connection().await.unwrap();
    store.set("k", b"1").await.unwrap();
    for change in [
        Box::new(|s: &tairlock::MemoryStore| s.atomically(|db| db.set("k", "2", None)))
            as Box<dyn Fn(&tairlock::MemoryStore)>,
        Box::new(|s: &tairlock::MemoryStore| {
            s.atomically(|db| {
                db.pexpire("k", Duration::from_secs(5));
            })
        }),
        Box::new(|s: &tairlock::MemoryStore| {
            s.atomically(|db| {
                db.del("k");
            })
        }),
    ] {
        let replies = con
            .watch(&["k".into()], &[Read::Get("k".into())])
            .await
            .unwrap();
        assert_eq!(replies.len(), 1);
        change(&store);
        assert_eq!(con.exec(&[set("x")]).await.unwrap(), None, "aborted");
        assert_ne!(store.get("k").await.unwrap().as_deref(), Some(&b"x"[..]));
    }
    con.watch(&["k".into()], &[]).await.unwrap();
    let replies = con
        .exec(&[set("y")])
        .await
        .unwrap()
        .expect("unchanged: runs");
    assert_eq!(replies.len(), 1);
    assert_eq!(store.get("k").await.unwrap().as_deref(), Some(&b"y"[..]));
    // An expiry the server performs between WATCH and EXEC aborts too (Redis >= 6.0.9).
    con.watch(&["k".into()], &[]).await.unwrap();
    env.pass(Duration::from_secs(2)).await;
    assert_eq!(con.exec(&[set("z")]).await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// ScriptedLock specifics.

/// On a virtual clock the key's TTL and its timestamp end at the very same millisecond.
#[tokio::test]
async fn scripted_key_lives_exactly_as_long_as_its_timestamp() {
    let env = Env::memory();
    let clock = env.virtual_clock().unwrap().clone();
    clock.set(Duration::from_millis(1_700_000_000_250));
    let l = ScriptedLock::with_options(env.store.clone(), Options::default().unit(Unit::Seconds));
    let held = acquired(l.try_acquire(KEY, Duration::from_secs(2)).await);
    assert_eq!(held.value(), 1_700_000_003);
    // Expired once now > 1_700_000_003 s, i.e. at 1_700_000_004_000 ms.
    clock.set(Duration::from_millis(1_700_000_003_999));
    assert_eq!(stored(&env.store, KEY).await, Some(1_700_000_003));
    assert!(
        !l.try_acquire(KEY, Duration::from_secs(2))
            .await
            .unwrap()
            .is_acquired()
    );
    clock.set(Duration::from_millis(1_700_000_004_000));
    assert_eq!(
        env.store.get(KEY).await.unwrap(),
        None,
        "gone with its timestamp"
    );
}

/// Every operation's future can be spawned on a multi-thread runtime.
#[test]
fn lock_futures_are_send() {
    fn send<T: Send>(_: T) {}
    fn check<S: WatchStore>(store: S, holding: Holding) {
        let getset = tairlock_legacy::GetSetLock::new(store.clone());
        send(getset.try_acquire(KEY, ms(1)));
        send(getset.acquire(KEY, ms(1)));
        send(getset.release(&holding));
        let watch = WatchLock::new(store.clone());
        send(watch.try_acquire(KEY, ms(1)));
        send(watch.acquire(KEY, ms(1)));
        send(watch.release(&holding));
        send(watch.renew(&holding, ms(1)));
        let scripted = ScriptedLock::new(store.clone());
        send(scripted.acquire(KEY, ms(1)));
        send(scripted.release(&holding));
        send(scripted.renew(&holding, ms(1)));
        let any = LegacyLock::with_strategy(store.clone(), Options::default(), Strategy::Scripted);
        send(any.acquire(KEY, ms(1)));
        send(any.release(&holding));
        send(tairlock_legacy::probe(&store));
        send(LegacyLock::detect(store, Options::default()));
    }
    let _ = check::<tairlock::RedisStore>;
    let _ = check::<tairlock::MemoryStore>;
}

/// The blocking twins work from plain threads: on the embedded store (tairlock's background
/// runtime drives nothing there) and on a Redis store that owns its runtime.
#[test]
fn blocking_twins_work_without_a_runtime() {
    let memory = LegacyLock::with_strategy(
        tairlock::MemoryStore::new(),
        Options::default().unit(Unit::Millis),
        Strategy::Watch(Profile::Modern),
    );
    let held = memory
        .blocking_try_acquire(KEY, ms(5_000))
        .unwrap()
        .holding()
        .unwrap();
    assert!(
        !memory
            .blocking_try_acquire(KEY, ms(5_000))
            .unwrap()
            .is_acquired()
    );
    assert!(matches!(
        memory.blocking_renew(&held, ms(5_000)).unwrap(),
        Renew::Renewed(_)
    ));

    let server = support::RedisServer::start();
    let store = tairlock::RedisStore::blocking_connect(&server.url()).unwrap();
    for strategy in [
        Strategy::Scripted,
        Strategy::Watch(Profile::Modern),
        Strategy::GetSet,
    ] {
        let l = LegacyLock::with_strategy(
            store.clone(),
            Options::default().unit(Unit::Millis),
            strategy,
        );
        let held = l.blocking_acquire(KEY, ms(5_000)).unwrap().expect("free");
        assert_eq!(
            l.blocking_release(&held).unwrap(),
            Release::Released,
            "{strategy:?}"
        );
    }
}

/// The Watch and Scripted kinds wait in the core's engine: the waiters of one client for one
/// key line up locally, first come first served, and only the head polls. (Before, each polled
/// on its own, and whichever polled first after the release won.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_are_served_first_come_first_served() {
    const WAITERS: usize = 6;
    for strategy in [Strategy::Watch(Profile::Modern), Strategy::Scripted] {
        let env = Env::redis().await;
        let options = Options::default().unit(Unit::Millis).poll_interval(ms(5));
        let locks = LegacyLock::with_strategy(env.store.clone(), options, strategy);
        let first = acquired(locks.try_acquire(KEY, ms(10_000)).await);
        let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        for i in 0..WAITERS {
            let (locks, order) = (locks.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let holding = locks.acquire(KEY, ms(10_000)).await.unwrap();
                let holding = holding.expect("waits forever");
                order.lock().push(i);
                tokio::time::sleep(ms(5)).await;
                assert_eq!(locks.release(&holding).await.unwrap(), Release::Released);
            }));
            // Arrive one after the other.
            tokio::time::sleep(ms(40)).await;
        }
        assert_eq!(locks.release(&first).await.unwrap(), Release::Released);
        for w in waiters {
            w.await.unwrap();
        }
        let order = order.lock().clone();
        assert_eq!(order, (0..WAITERS).collect::<Vec<_>>(), "{strategy:?}");
    }
}
