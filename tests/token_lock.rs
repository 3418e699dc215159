//! The token lock (`TokenLock`): its scripts' contract and its API, on both stores
//! (`backend_tests!`), and its guards, waiting and repeats on a real server.
//!
//! - the scripts: every state of the key (absent, this token, another token, another token
//!   without a TTL, another type) for acquire, release and renew, the fence key's states, and
//!   reply shapes identical on the memory store and on Redis;
//! - the deadline of a repeated acquire comes from the time its answer reports left;
//! - bad input (empty key or token, zero or overlong lease, a user's hash under the key, a
//!   user's string under the fence key) is an error and changes nothing;
//! - guards: watchdog renewal, loss, release outcomes, `with_lock`, waiting woken by our own
//!   release and, for a foreign holder that announces nothing, by the recheck interval;
//! - a reply lost after the server applied an acquire, renew or release: the repeat finds it.

mod support;

use std::time::Duration;

use support::proxy::{Proxy, Which};
use support::{Env, RedisServer, TestStore, backend_tests, strings};
use tairlock::scripts::{INSPECT, TOKEN_ACQUIRE, TOKEN_RELEASE, TOKEN_RENEW};
use tairlock::store::redis::RedisOptions;
use tairlock::{
    ErrorKind, MemoryStore, Reply, Result, Store, TokenAttempt, TokenLock, TokenOptions,
    TokenRenew, Ttl, Unlock,
};
use tokio::time::Instant;

const LONG_MS: u64 = 10_000;
const LONG: Duration = Duration::from_millis(LONG_MS);
const RETENTION_MS: u64 = 60_000;
/// How much a TTL may run down between a write and a read on a loaded machine.
const SLACK: Duration = Duration::from_secs(2);

fn keys(key: &str) -> Vec<String> {
    vec![key.to_owned(), tairlock::keys::companion_key(key, ":fence")]
}

fn acquire_args(token: &str, ttl_ms: u64) -> Vec<String> {
    strings([token, &ttl_ms.to_string(), &RETENTION_MS.to_string()])
}

fn int(reply: &Reply, i: usize) -> i64 {
    reply.as_array().unwrap()[i].as_int().unwrap()
}

#[track_caller]
fn assert_ms_near(ms: i64, want: Duration) {
    let got = Duration::from_millis(u64::try_from(ms).expect("a TTL"));
    assert!(
        got <= want && want - got <= SLACK,
        "{got:?} should be at most {want:?} and close to it"
    );
}

#[track_caller]
fn assert_err<T: std::fmt::Debug>(result: Result<T>, kind: ErrorKind, message: &str) {
    match result {
        Ok(v) => panic!("expected a {kind:?} error {message:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "error kind of {e}");
            assert!(
                e.message().contains(message),
                "error message {:?} should contain {message:?}",
                e.message()
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The scripts, through Store::eval

async fn acquire_script_takes_repeats_and_refuses<S: TestStore>(env: Env<S>) {
    let keys = keys("jobs.nightly");
    let before = env.store.time().await.unwrap();
    let first = env
        .store
        .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("t1", LONG_MS))
        .await
        .unwrap();
    assert_eq!(int(&first, 0), 1, "{first:?}");
    assert_ms_near(int(&first, 1), LONG);
    let fence = int(&first, 2);
    assert!(
        fence as u128 >= before.as_micros(),
        "a fresh fence is the server time in µs"
    );
    // The wire format: the bare token under the key exactly as named, with the lease as TTL.
    assert_eq!(env.store.get(&keys[0]).await.unwrap(), Some(b"t1".to_vec()));
    assert_eq!(
        env.store.get(&keys[1]).await.unwrap(),
        Some(fence.to_string().into_bytes())
    );
    match env.store.pttl(&keys[1]).await.unwrap() {
        Ttl::Expires(left) => assert!(left > LONG + Duration::from_secs(50), "{left:?}"),
        other => panic!("the fence key expires: {other:?}"),
    }
    // A repeat with the same token: ours, the same fence, nothing new issued.
    env.pass(Duration::from_secs(3)).await;
    let again = env
        .store
        .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("t1", LONG_MS))
        .await
        .unwrap();
    assert_eq!((int(&again, 0), int(&again, 2)), (1, fence), "{again:?}");
    assert_ms_near(int(&again, 1), LONG - Duration::from_secs(3));
    // Another token: busy, with the time left.
    let other = env
        .store
        .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("t2", LONG_MS))
        .await
        .unwrap();
    assert_eq!(other.as_array().unwrap().len(), 2, "{other:?}");
    assert_eq!(int(&other, 0), 0);
    assert_ms_near(int(&other, 1), LONG - Duration::from_secs(3));
    // Expired: the next holder gets a larger fence.
    env.pass(LONG + Duration::from_millis(10)).await;
    let next = env
        .store
        .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("t2", LONG_MS))
        .await
        .unwrap();
    assert_eq!(int(&next, 0), 1);
    assert!(int(&next, 2) > fence);
}

async fn acquire_script_waits_out_a_key_without_ttl<S: TestStore>(env: Env<S>) {
    // redis-py's `Lock(timeout=None)`: `SET NX` without an expiry.
    let keys = keys("py-lock");
    assert!(env.store.set_nx(&keys[0], b"0123abcd").await.unwrap());
    let reply = env
        .store
        .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("t1", LONG_MS))
        .await
        .unwrap();
    assert_eq!(reply, Reply::Array(vec![Reply::Int(0), Reply::Int(-1)]));
    assert_eq!(env.store.key_type(&keys[1]).await.unwrap(), "none");
}

async fn release_script_deletes_only_its_own_token<S: TestStore>(env: Env<S>) {
    let keys = keys("k");
    let release = |token: &str| {
        let args = strings([token]);
        let store = env.store.clone();
        let key = keys[0].clone();
        async move { store.eval(&TOKEN_RELEASE, &[key], &args).await.unwrap() }
    };
    assert_eq!(release("t1").await, Reply::Int(-1), "absent");
    env.store
        .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("t1", LONG_MS))
        .await
        .unwrap();
    assert_eq!(release("t2").await, Reply::Int(0), "another token");
    assert_eq!(env.store.get(&keys[0]).await.unwrap(), Some(b"t1".to_vec()));
    assert_eq!(release("t1").await, Reply::Int(1), "its own");
    assert_eq!(env.store.key_type(&keys[0]).await.unwrap(), "none");
    assert_eq!(
        release("t1").await,
        Reply::Int(-1),
        "a repeat deletes nothing"
    );
    // The fence key outlives the release: tokens keep increasing.
    assert_eq!(env.store.key_type(&keys[1]).await.unwrap(), "string");
}

async fn renew_script_moves_only_its_own_expiry<S: TestStore>(env: Env<S>) {
    let keys = keys("k");
    let renew = |token: &str, ttl_ms: u64| {
        let args = acquire_args(token, ttl_ms);
        let (store, keys) = (env.store.clone(), keys.clone());
        async move { store.eval(&TOKEN_RENEW, &keys, &args).await.unwrap() }
    };
    assert_eq!(
        renew("t1", LONG_MS).await,
        Reply::Array(vec![Reply::Int(-1)])
    );
    env.store
        .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("t1", 1_000))
        .await
        .unwrap();
    assert_eq!(
        renew("t2", LONG_MS).await,
        Reply::Array(vec![Reply::Int(0)])
    );
    assert!(
        matches!(env.store.pttl(&keys[0]).await.unwrap(), Ttl::Expires(t) if t <= Duration::from_secs(1))
    );
    let renewed = renew("t1", LONG_MS).await;
    assert_eq!(int(&renewed, 0), 1);
    assert_ms_near(int(&renewed, 1), LONG);
    match env.store.pttl(&keys[1]).await.unwrap() {
        Ttl::Expires(left) => assert!(left > LONG + Duration::from_secs(50), "{left:?}"),
        other => panic!("the fence key expires: {other:?}"),
    }
    assert_eq!(env.store.get(&keys[0]).await.unwrap(), Some(b"t1".to_vec()));
}

async fn scripts_refuse_users_data_and_change_nothing<S: TestStore>(env: Env<S>) {
    let keys = keys("k");
    env.store.hset(&keys[0], "owner", b"alice").await;
    let lock_before = env.store.snapshot(&keys[0]).await;
    for (script, args) in [
        (&TOKEN_ACQUIRE, acquire_args("t1", LONG_MS)),
        (&TOKEN_RENEW, acquire_args("t1", LONG_MS)),
        (&TOKEN_RELEASE, strings(["t1"])),
    ] {
        let keys = if script.name() == "token_release" {
            &keys[..1]
        } else {
            &keys[..]
        };
        assert_err(
            env.store.eval(script, keys, &args).await,
            ErrorKind::WrongType,
            "WRONGTYPE lock key holds a hash",
        );
    }
    env.store
        .snapshot(&keys[0])
        .await
        .assert_intact(&lock_before, SLACK, "the user's hash");
    assert_eq!(env.store.key_type(&keys[1]).await.unwrap(), "none");
    // A user's string under the fence key: refused, the lock key stays free.
    env.store.del(&keys[0]).await.unwrap();
    env.store.set(&keys[1], b"not a fence").await.unwrap();
    for script in [&TOKEN_ACQUIRE, &TOKEN_RENEW] {
        assert_err(
            env.store
                .eval(script, &keys, &acquire_args("t1", LONG_MS))
                .await,
            ErrorKind::WrongType,
            "NOTLOCK fence key holds a value that is not a fencing token",
        );
    }
    assert_eq!(env.store.key_type(&keys[0]).await.unwrap(), "none");
    assert_eq!(
        env.store.get(&keys[1]).await.unwrap(),
        Some(b"not a fence".to_vec())
    );
}

backend_tests!(
    acquire_script_takes_repeats_and_refuses,
    acquire_script_waits_out_a_key_without_ttl,
    release_script_deletes_only_its_own_token,
    renew_script_moves_only_its_own_expiry,
    scripts_refuse_users_data_and_change_nothing,
    api_walks_every_state,
    api_refuses_bad_input_and_changes_nothing,
    a_repeated_acquire_is_dated_from_the_time_it_reports_left,
);

/// A transcript of every token script in every state, with times and fences blurred.
async fn transcript<S: TestStore>(env: &Env<S>) -> Vec<std::result::Result<Reply, String>> {
    fn shape(reply: Reply) -> Reply {
        match reply {
            Reply::Int(i) if i > 1 => Reply::Int(2),
            Reply::Data(d) if d.len() > 12 && d.iter().all(u8::is_ascii_digit) => {
                Reply::data("<fence>")
            }
            Reply::Array(items) => Reply::Array(items.into_iter().map(shape).collect()),
            other => other,
        }
    }
    let keys = keys("x");
    let mut out = Vec::new();
    let steps: Vec<(&'static tairlock::Script, Vec<String>, Vec<String>)> = vec![
        (&INSPECT, keys.clone(), vec![]),
        (&TOKEN_RELEASE, keys[..1].to_vec(), strings(["a"])),
        (&TOKEN_RENEW, keys.clone(), acquire_args("a", LONG_MS)),
        (&TOKEN_ACQUIRE, keys.clone(), acquire_args("a", LONG_MS)),
        (&TOKEN_ACQUIRE, keys.clone(), acquire_args("a", LONG_MS)),
        (&TOKEN_ACQUIRE, keys.clone(), acquire_args("b", LONG_MS)),
        (&INSPECT, keys.clone(), vec![]),
        (&TOKEN_RENEW, keys.clone(), acquire_args("b", LONG_MS)),
        (&TOKEN_RENEW, keys.clone(), acquire_args("a", LONG_MS)),
        (&TOKEN_RELEASE, keys[..1].to_vec(), strings(["b", "ch"])),
        (&TOKEN_RELEASE, keys[..1].to_vec(), strings(["a", "ch"])),
        (&TOKEN_RELEASE, keys[..1].to_vec(), strings(["a", "ch"])),
    ];
    for (script, k, a) in steps {
        out.push(
            env.store
                .eval(script, &k, &a)
                .await
                .map(shape)
                .map_err(|e| e.to_string()),
        );
    }
    env.store.rpush(&keys[0], b"user").await;
    out.push(
        env.store
            .eval(&TOKEN_ACQUIRE, &keys, &acquire_args("a", LONG_MS))
            .await
            .map(shape)
            .map_err(|e| e.to_string()),
    );
    out
}

#[tokio::test]
async fn token_script_replies_have_identical_shapes_on_both_stores() {
    let memory = Env::memory();
    let redis = Env::redis().await;
    let on_memory = transcript(&memory).await;
    let on_redis = transcript(&redis).await;
    assert_eq!(on_memory.len(), on_redis.len());
    for (i, (m, r)) in on_memory.iter().zip(&on_redis).enumerate() {
        assert_eq!(m, r, "step {i} differs{}", redis.context());
    }
}

// ---------------------------------------------------------------------------------------------
// The API on both stores

async fn api_walks_every_state<S: TestStore>(env: Env<S>) {
    let locks = TokenLock::new(env.store.clone());
    let (mine, theirs) = (tairlock::new_nonce(), tairlock::new_nonce());
    assert!(!locks.is_locked("orders").await.unwrap());
    let held = locks
        .attempt("orders", &mine, LONG)
        .await
        .unwrap()
        .holding()
        .expect("free");
    assert_eq!((held.key(), held.token()), ("orders", mine.as_str()));
    assert!(locks.is_locked("orders").await.unwrap());
    let busy = locks.attempt("orders", &theirs, LONG).await.unwrap();
    assert!(
        matches!(busy, TokenAttempt::Busy { remaining: Some(r) } if r <= LONG),
        "{busy:?}"
    );
    let seen = locks.inspect("orders").await.unwrap();
    assert_eq!(seen.token(), Some(mine.as_str()));
    assert_eq!(seen.last_fence, Some(held.fence()));
    assert_eq!(seen.fence_key, "{orders}:fence");
    assert!(seen.is_held() && !seen.foreign);
    assert_eq!(
        locks.release("orders", &theirs).await.unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        locks.renew("orders", &theirs, LONG).await.unwrap(),
        TokenRenew::HeldByOther
    );
    assert!(matches!(
        locks.renew("orders", &mine, LONG).await.unwrap(),
        TokenRenew::Renewed { .. }
    ));
    assert_eq!(
        locks.release("orders", &mine).await.unwrap(),
        Unlock::Released
    );
    assert_eq!(
        locks.release("orders", &mine).await.unwrap(),
        Unlock::NotHeld
    );
    assert_eq!(
        locks.renew("orders", &mine, LONG).await.unwrap(),
        TokenRenew::NotHeld
    );
    // A foreign client's key (redis-py, redlock): busy for us, and forced out exactly.
    assert!(
        env.store
            .set_nx_px("orders", b"5f1d3a", Duration::from_secs(30))
            .await
            .unwrap()
    );
    assert!(
        !locks
            .attempt("orders", &mine, LONG)
            .await
            .unwrap()
            .is_acquired()
    );
    assert!(locks.force_unlock("orders").await.unwrap());
    assert!(!locks.force_unlock("orders").await.unwrap());
    let next = locks
        .attempt("orders", &theirs, LONG)
        .await
        .unwrap()
        .holding()
        .unwrap();
    assert!(next.fence() > held.fence(), "our fences keep increasing");
}

async fn api_refuses_bad_input_and_changes_nothing<S: TestStore>(env: Env<S>) {
    let locks = TokenLock::new(env.store.clone());
    let t = tairlock::new_nonce();
    for result in [
        locks.attempt("", &t, LONG).await.map(|_| ()),
        locks.attempt("k", "", LONG).await.map(|_| ()),
        locks.attempt("k", &t, Duration::ZERO).await.map(|_| ()),
        locks.attempt("k", &t, Duration::MAX).await.map(|_| ()),
        locks.release("", &t).await.map(|_| ()),
        locks.release("k", "").await.map(|_| ()),
        locks.renew("k", &t, Duration::ZERO).await.map(|_| ()),
        locks.inspect("").await.map(|_| ()),
        locks.try_lock("").await.map(|_| ()),
        locks
            .lock_with_lease("k", Duration::ZERO, None)
            .await
            .map(|_| ()),
    ] {
        assert!(result.unwrap_err().is_invalid_input());
    }
    assert_eq!(env.store.dbsize().await, 0, "nothing written");
    env.store.hset("k", "f", b"v").await;
    let before = env.store.snapshot("k").await;
    assert!(
        locks
            .attempt("k", &t, LONG)
            .await
            .unwrap_err()
            .is_wrong_type()
    );
    assert!(locks.try_lock("k").await.unwrap_err().is_wrong_type());
    assert!(locks.is_locked("k").await.unwrap_err().is_wrong_type());
    assert!(locks.force_unlock("k").await.unwrap_err().is_wrong_type());
    assert!(locks.release("k", &t).await.unwrap_err().is_wrong_type());
    env.store
        .snapshot("k")
        .await
        .assert_intact(&before, SLACK, "the user's hash");
    assert_eq!(env.store.dbsize().await, 1, "no fence key was written");
}

async fn a_repeated_acquire_is_dated_from_the_time_it_reports_left<S: TestStore>(env: Env<S>) {
    let locks = TokenLock::new(env.store.clone());
    let token = tairlock::new_nonce();
    locks
        .attempt("k", &token, LONG)
        .await
        .unwrap()
        .holding()
        .unwrap();
    // The first attempt's reply was lost, and its lease has mostly run by the repeat.
    assert!(
        env.store
            .pexpire("k", Duration::from_secs(1))
            .await
            .unwrap()
    );
    let sent = Instant::now();
    let again = locks
        .attempt("k", &token, LONG)
        .await
        .unwrap()
        .holding()
        .unwrap();
    assert!(
        again.deadline() <= sent + Duration::from_secs(1) + Duration::from_millis(50),
        "the repeat's deadline is {:?} after it was sent: dated from the lease asked for, not \
         from the second the answer reported left",
        again.deadline() - sent
    );
    assert!(again.deadline() > sent + Duration::from_millis(500));
}

// ---------------------------------------------------------------------------------------------
// Guards and waiting, on a real server

fn options() -> TokenOptions {
    TokenOptions::default().recheck(Duration::from_millis(20))
}

#[tokio::test]
async fn the_watchdog_keeps_a_short_lease_alive_and_release_is_exact() {
    let server = RedisServer::start();
    let locks = TokenLock::with_options(
        server.store().await,
        options().watchdog_lease(Duration::from_millis(600)),
    );
    let guard = locks.lock("wd").await.unwrap();
    assert!(guard.is_renewed());
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert!(!guard.is_lost(), "renewed past two leases");
    assert!(locks.try_lock("wd").await.unwrap().is_none());
    assert_eq!(
        server.store().await.get("wd").await.unwrap(),
        Some(guard.token().as_bytes().to_vec())
    );
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    assert!(!locks.is_locked("wd").await.unwrap());
}

#[tokio::test]
async fn a_guard_whose_key_was_taken_is_lost_and_its_release_deletes_nothing() {
    let server = RedisServer::start();
    let store = server.store().await;
    let locks = TokenLock::with_options(
        store.clone(),
        options().watchdog_lease(Duration::from_millis(600)),
    );
    let guard = locks.lock("taken").await.unwrap();
    // An operator deletes it and a foreign client takes it.
    store.del("taken").await.unwrap();
    assert!(
        store
            .set_nx_px("taken", b"their-token", Duration::from_secs(30))
            .await
            .unwrap()
    );
    tokio::time::timeout(Duration::from_secs(3), guard.lost())
        .await
        .expect("the next renewal finds it taken");
    assert_eq!(guard.release().await.unwrap(), Unlock::HeldByOther);
    assert_eq!(
        store.get("taken").await.unwrap(),
        Some(b"their-token".to_vec())
    );
}

#[tokio::test]
async fn a_fixed_lease_expires_and_with_lock_stops_a_lost_section() {
    let server = RedisServer::start();
    let locks = TokenLock::with_options(server.store().await, options());
    let fixed = locks
        .lock_with_lease("fixed", Duration::from_millis(300), Some(Duration::ZERO))
        .await
        .unwrap()
        .unwrap();
    assert!(!fixed.is_renewed());
    tokio::time::timeout(Duration::from_secs(2), fixed.lost())
        .await
        .expect("lost at its deadline");
    assert!(
        locks
            .try_lock_for("fixed", Duration::from_secs(2))
            .await
            .unwrap()
            .is_some()
    );
    let fence = locks
        .with_lock("section", |holding| async move { holding.fence() })
        .await
        .unwrap();
    assert!(fence > 0);
    // The key deleted under a running section: the next renewal finds it gone, and the
    // section is stopped (its future dropped) with a LeaseLost error.
    let store = server.store().await;
    let short = TokenLock::with_options(
        store.clone(),
        options().watchdog_lease(Duration::from_millis(600)),
    );
    let stopped = tokio::time::timeout(
        Duration::from_secs(5),
        short.with_lock("section", |holding| {
            let store = store.clone();
            async move {
                store.del(holding.key()).await.unwrap();
                std::future::pending::<()>().await;
            }
        }),
    )
    .await
    .expect("the lost section is stopped within a renewal interval");
    assert_eq!(stopped.unwrap_err().kind(), ErrorKind::LeaseLost);
}

#[tokio::test]
async fn a_waiter_is_woken_by_our_release_and_rechecks_a_silent_foreign_release() {
    let server = RedisServer::start();
    let store = server.store().await;
    let locks = TokenLock::with_options(store.clone(), options().recheck(Duration::from_secs(5)));
    // Our holder: its release announces, and the waiter takes over at once although its recheck
    // interval is 5 s and the holder's lease 30 s.
    let holder = locks.lock("w").await.unwrap();
    let waiter = {
        let locks =
            TokenLock::with_options(store.clone(), options().recheck(Duration::from_secs(5)));
        tokio::spawn(async move { locks.lock("w").await.map(|g| (g, Instant::now())) })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    holder.release().await.unwrap();
    let (guard, got) = waiter.await.unwrap().unwrap();
    assert!(
        got - released < Duration::from_secs(2),
        "woken by the release: {:?}",
        got - released
    );
    guard.release().await.unwrap();
    // A foreign holder (30 s TTL) releases silently: a waiter rechecking every 50 ms has it
    // within a recheck, not at the TTL.
    assert!(
        store
            .set_nx_px("w", b"foreign", Duration::from_secs(30))
            .await
            .unwrap()
    );
    let quick =
        TokenLock::with_options(store.clone(), options().recheck(Duration::from_millis(50)));
    let waiter = tokio::spawn(async move { quick.lock("w").await.map(|g| (g, Instant::now())) });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let released = Instant::now();
    assert!(store.del("w").await.unwrap());
    let (guard, got) = waiter.await.unwrap().unwrap();
    assert!(
        got - released < Duration::from_secs(2),
        "found by a recheck: {:?}",
        got - released
    );
    guard.release().await.unwrap();
}

#[test]
fn blocking_twins_take_and_release() {
    let server = RedisServer::start();
    let url = server.url();
    let store = tairlock::RedisStore::blocking_connect(&url).unwrap();
    let locks = TokenLock::new(store);
    let guard = locks.blocking_lock("b").unwrap();
    assert!(locks.blocking_try_lock("b").unwrap().is_none());
    assert!(locks.blocking_is_locked("b").unwrap());
    guard.blocking_renew(Duration::from_secs(5)).unwrap();
    assert_eq!(guard.blocking_release().unwrap(), Unlock::Released);
    let fence = locks
        .blocking_with_lock("b", |h| async move { h.fence() })
        .unwrap();
    assert!(fence > 0);
}

// ---------------------------------------------------------------------------------------------
// Replies lost after the server applied the script

/// Repeat `op` while its error is transient (no answer, a reconnect), as a waiting call does.
async fn until_answered<T, F, Fut>(mut op: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    for _ in 0..50 {
        match op().await {
            Ok(v) => return v,
            Err(e) if e.is_transient() => tokio::time::sleep(Duration::from_millis(50)).await,
            Err(e) => panic!("{e}"),
        }
    }
    panic!("no answer after 50 repeats")
}

#[tokio::test]
async fn a_lost_reply_is_repeated_with_the_same_token_and_finds_what_it_did() {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut options = RedisOptions::default();
    options.response_timeout = Duration::from_millis(400);
    let store = proxy.store_with(options).await;
    let direct = server.store().await;
    direct.preload(&tairlock::scripts::TOKEN).await.unwrap();
    let locks = TokenLock::new(store);
    let token = tairlock::new_nonce();
    // Acquire: the first reply is dropped after the server applied it; the repeat (same token)
    // finds the lock ours instead of busy.
    proxy.drop_replies(Which::All, 1);
    let held = until_answered(|| locks.attempt("lost", &token, LONG)).await;
    assert!(held.is_acquired(), "{held:?}");
    assert_eq!(proxy.faults().get("drop_reply").copied(), Some(1));
    let fence = direct.get("{lost}:fence").await.unwrap();
    assert!(fence.is_some());
    // Renew, likewise: still ours, the fence untouched.
    proxy.drop_replies(Which::All, 1);
    let renewed = until_answered(|| locks.renew("lost", &token, LONG)).await;
    assert!(matches!(renewed, TokenRenew::Renewed { .. }), "{renewed:?}");
    assert_eq!(direct.get("{lost}:fence").await.unwrap(), fence);
    // Release: the repeat finds it gone, and deletes nothing else.
    proxy.drop_replies(Which::All, 1);
    let released = until_answered(|| locks.release("lost", &token)).await;
    assert_eq!(released, Unlock::NotHeld);
    assert_eq!(direct.key_type("lost").await.unwrap(), "none");
    assert_eq!(proxy.faults().get("drop_reply").copied(), Some(3));
}

#[tokio::test]
async fn memory_store_guards_work_without_a_server() {
    let locks = TokenLock::new(MemoryStore::new());
    let guard = locks.lock("m").await.unwrap();
    assert!(locks.try_lock("m").await.unwrap().is_none());
    drop(guard);
    // The dropped guard releases in the background.
    let again = locks
        .try_lock_for("m", Duration::from_secs(2))
        .await
        .unwrap();
    assert!(again.is_some());
}
