//! The store conformance suite (DESIGN.md §3, §11): every atomic operation of the expire lock and
//! every plain command of the [`Store`] contract, each case run on the [`MemoryStore`] (virtual
//! clock) and on a [`RedisStore`] against a fresh `redis-server`.
//!
//! Replies are asserted exactly (shape and, where deterministic, content), and error replies by
//! kind *and* message, so passing on both stores means the two stores answer alike.

mod support;

use std::time::Duration;

use support::{Env, TestStore, backend_tests, strings};
use tairlock::scripts::{EXPIRE_LOCK, EXPIRE_UNLOCK, FORCE_UNLOCK, INSPECT, RENEW, RENEW_MANY};
use tairlock::{
    Acquire, ErrorKind, ExpireLock, Lease, Options, Packed, Renew, Reply, Result, Store, Ttl,
    Unlock,
};

/// A TTL that does not run out during a test.
const LONG_MS: u64 = 10_000;
/// A TTL that does: the test lets [`PAST_SHORT`] pass (instantly on the virtual clock).
const SHORT_MS: u64 = 100;
const PAST_SHORT: Duration = Duration::from_millis(250);
/// Fence retention used by the scripts when called directly.
const RETENTION_MS: u64 = 60_000;
/// How much a TTL may have run down between a write and a read on a real server.
const SLACK: Duration = Duration::from_secs(2);

const WRONGTYPE_MSG: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";
const NOT_INTEGER_MSG: &str = "ERR value is not an integer or out of range";
const NOT_A_LEASE_MSG: &str = "NOTLOCK lock key holds a value that is not a tairlock lease";
const NOT_A_FENCE_MSG: &str = "NOTLOCK fence key holds a value that is not a fencing token";

// ---------------------------------------------------------------------------------------------
// helpers

fn keys<S: Store>(env: &Env<S>, name: &str) -> Vec<String> {
    ExpireLock::new(env.store.clone())
        .keys(name)
        .unwrap()
        .both()
        .to_vec()
}

fn lock_key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

fn fence_key(name: &str) -> String {
    format!("tairlock:{{{name}}}:fence")
}

fn lock_args(ttl_ms: u64, nonce: &str) -> Vec<String> {
    vec![
        ttl_ms.to_string(),
        nonce.to_owned(),
        RETENTION_MS.to_string(),
    ]
}

fn renew_args(lease: &str, ttl_ms: u64, nonce: &str) -> Vec<String> {
    vec![
        lease.to_owned(),
        ttl_ms.to_string(),
        nonce.to_owned(),
        RETENTION_MS.to_string(),
    ]
}

/// `{1, lease, pttl}` → the lease.
#[track_caller]
fn granted(reply: &Reply) -> Lease {
    granted_with_time(reply).0
}

/// `{1, lease, pttl}` → the lease and the time it has left as the script reported it.
#[track_caller]
fn granted_with_time(reply: &Reply) -> (Lease, Duration) {
    match reply {
        Reply::Array(items) if items.len() == 3 && items[0] == Reply::Int(1) => {
            let text = items[1].as_str().expect("lease is a bulk string");
            let lease = Lease::parse(text).unwrap_or_else(|| panic!("not a lease: {text:?}"));
            let pttl = items[2]
                .as_int()
                .and_then(|ms| u64::try_from(ms).ok())
                .unwrap_or_else(|| panic!("no time left in {reply:?}"));
            (lease, Duration::from_millis(pttl))
        }
        other => panic!("expected {{1, lease, pttl}}, got {other:?}"),
    }
}

#[track_caller]
fn assert_err<T: std::fmt::Debug>(result: Result<T>, kind: ErrorKind, message: &str) {
    match result {
        Ok(v) => panic!("expected a {kind:?} error {message:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "error kind of {e}");
            assert_eq!(e.message(), message, "error message of {e}");
        }
    }
}

#[track_caller]
fn assert_ttl_near(ttl: Ttl, want: Duration) {
    match ttl {
        Ttl::Expires(left) => assert!(
            left <= want && want - left <= SLACK,
            "TTL {left:?} should be at most {want:?} and close to it"
        ),
        other => panic!("expected a TTL near {want:?}, got {other:?}"),
    }
}

async fn server_now<S: Store>(store: &S) -> Duration {
    store.time().await.unwrap()
}

/// Put a user's value of `kind` ("hash", "list", "string") under `key`, with a TTL on the string
/// so TTL preservation is checked too.
async fn put_user_data<S: TestStore>(store: &S, key: &str, kind: &str) {
    match kind {
        "hash" => {
            store.hset(key, "owner", b"alice").await;
            store.hset(key, "bin", &[0, 159, 146, 150]).await;
        }
        "list" => {
            store.rpush(key, b"first").await;
            store.rpush(key, &[0xff, 0x00]).await;
        }
        "string" => {
            store.set(key, b"user's own value").await.unwrap();
            assert!(store.pexpire(key, Duration::from_secs(300)).await.unwrap());
        }
        other => unreachable!("{other}"),
    }
}

// ---------------------------------------------------------------------------------------------
// EXPIRE_LOCK through Store::eval

async fn expire_lock_script_on_a_free_lock_grants_a_server_timed_lease<S: TestStore>(env: Env<S>) {
    let keys = keys(&env, "a");
    let before = server_now(&env.store).await;
    let reply = env
        .store
        .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "00aa11bb"))
        .await
        .unwrap();
    let after = server_now(&env.store).await;
    let lease = granted(&reply);
    assert_eq!(lease.nonce(), "00aa11bb");
    let expiry = lease.expires_at();
    assert!(
        expiry >= before + Duration::from_millis(LONG_MS) - Duration::from_millis(1)
            && expiry <= after + Duration::from_millis(LONG_MS),
        "expiry {expiry:?} is server time + ttl ({before:?}..{after:?})"
    );
    // The fence is the server time in µs on a fresh lock.
    assert!(
        lease.fence() as u128 >= before.as_micros() && lease.fence() as u128 <= after.as_micros()
    );
    assert_eq!(
        env.store.get(&keys[0]).await.unwrap(),
        Some(lease.value().as_bytes().to_vec())
    );
    assert_ttl_near(
        env.store.pttl(&keys[0]).await.unwrap(),
        Duration::from_millis(LONG_MS),
    );
    assert_eq!(
        env.store.get(&keys[1]).await.unwrap(),
        Some(lease.fence().to_string().into_bytes())
    );
    assert_ttl_near(
        env.store.pttl(&keys[1]).await.unwrap(),
        Duration::from_millis(LONG_MS + RETENTION_MS),
    );
}

async fn expire_lock_script_retried_with_the_same_nonce_returns_the_same_lease<S: TestStore>(
    env: Env<S>,
) {
    let keys = keys(&env, "a");
    let args = lock_args(LONG_MS, "c0ffee");
    let first = env.store.eval(&EXPIRE_LOCK, &keys, &args).await.unwrap();
    let fence_before = env.store.get(&keys[1]).await.unwrap();
    let (lease, left) = granted_with_time(&first);
    assert_ttl_near(Ttl::Expires(left), Duration::from_millis(LONG_MS));
    env.pass(PAST_SHORT).await;
    let second = env.store.eval(&EXPIRE_LOCK, &keys, &args).await.unwrap();
    let (again, left_again) = granted_with_time(&second);
    assert_eq!(
        again, lease,
        "a retried acquire is answered with the lease it already holds"
    );
    // With the time that lease has left, not a fresh length: the client dates its deadline
    // from it.
    assert!(
        left_again <= left - PAST_SHORT,
        "the repeat reports {left_again:?} left, the first {left:?}, {PAST_SHORT:?} apart"
    );
    assert_ttl_near(
        Ttl::Expires(left_again),
        Duration::from_millis(LONG_MS) - PAST_SHORT,
    );
    assert_eq!(
        env.store.get(&keys[1]).await.unwrap(),
        fence_before,
        "no new fence on a retry"
    );
}

async fn expire_lock_script_on_a_held_lock_reports_the_holder_and_its_pttl<S: TestStore>(
    env: Env<S>,
) {
    let keys = keys(&env, "a");
    let mine = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
            .await
            .unwrap(),
    );
    let reply = env
        .store
        .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "02"))
        .await
        .unwrap();
    match reply.as_array() {
        Some([Reply::Int(0), Reply::Data(holder), Reply::Int(pttl)]) => {
            assert_eq!(holder, mine.value().as_bytes());
            assert!(*pttl > 0 && *pttl <= LONG_MS as i64, "pttl {pttl}");
        }
        _ => panic!("expected {{0, holder, pttl}}, got {reply:?}"),
    }
    assert_eq!(
        env.store.get(&keys[0]).await.unwrap(),
        Some(mine.value().as_bytes().to_vec())
    );
}

async fn expire_lock_script_after_expiry_grants_a_new_lease_with_a_higher_fence<S: TestStore>(
    env: Env<S>,
) {
    let keys = keys(&env, "a");
    let old = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(SHORT_MS, "01"))
            .await
            .unwrap(),
    );
    env.pass(PAST_SHORT).await;
    assert_eq!(
        env.store.pttl(&keys[0]).await.unwrap(),
        Ttl::Missing,
        "the lease expired"
    );
    let new = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "02"))
            .await
            .unwrap(),
    );
    assert!(new.fence() > old.fence());
    assert_eq!(new.nonce(), "02");
}

// ---------------------------------------------------------------------------------------------
// EXPIRE_UNLOCK through Store::eval

async fn expire_unlock_script_covers_absent_mine_other_expired_and_retried<S: TestStore>(
    env: Env<S>,
) {
    let keys = keys(&env, "a");
    let lock = vec![keys[0].clone()];
    let bogus = "tl1:1:1:ffff".to_owned();
    // absent
    assert_eq!(
        env.store
            .eval(&EXPIRE_UNLOCK, &lock, std::slice::from_ref(&bogus))
            .await
            .unwrap(),
        Reply::Int(-1)
    );
    // held by another: wrong credential, nothing deleted
    let lease = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
            .await
            .unwrap(),
    );
    assert_eq!(
        env.store
            .eval(&EXPIRE_UNLOCK, &lock, std::slice::from_ref(&bogus))
            .await
            .unwrap(),
        Reply::Int(0)
    );
    assert_eq!(
        env.store.get(&keys[0]).await.unwrap(),
        Some(lease.value().as_bytes().to_vec())
    );
    // mine
    let mine = vec![lease.value().to_owned()];
    assert_eq!(
        env.store.eval(&EXPIRE_UNLOCK, &lock, &mine).await.unwrap(),
        Reply::Int(1)
    );
    assert_eq!(env.store.key_type(&keys[0]).await.unwrap(), "none");
    assert!(
        env.store.get(&keys[1]).await.unwrap().is_some(),
        "the fence outlives the lease"
    );
    // retried
    assert_eq!(
        env.store.eval(&EXPIRE_UNLOCK, &lock, &mine).await.unwrap(),
        Reply::Int(-1)
    );
    // expired
    let short = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(SHORT_MS, "02"))
            .await
            .unwrap(),
    );
    env.pass(PAST_SHORT).await;
    let short = vec![short.value().to_owned()];
    assert_eq!(
        env.store.eval(&EXPIRE_UNLOCK, &lock, &short).await.unwrap(),
        Reply::Int(-1)
    );
}

// ---------------------------------------------------------------------------------------------
// RENEW through Store::eval

async fn renew_script_covers_absent_mine_other_expired_and_retried<S: TestStore>(env: Env<S>) {
    let keys = keys(&env, "a");
    let bogus = "tl1:1:1:ffff";
    // absent
    let reply = env
        .store
        .eval(&RENEW, &keys, &renew_args(bogus, LONG_MS, "n1"))
        .await
        .unwrap();
    assert_eq!(reply, Reply::Array(vec![Reply::Int(-1)]));
    assert_eq!(
        env.store.key_type(&keys[0]).await.unwrap(),
        "none",
        "renew creates nothing"
    );
    // held by another (wrong credential)
    let lease = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
            .await
            .unwrap(),
    );
    let reply = env
        .store
        .eval(&RENEW, &keys, &renew_args(bogus, LONG_MS, "n2"))
        .await
        .unwrap();
    assert_eq!(reply, Reply::Array(vec![Reply::Int(0)]));
    assert_eq!(
        env.store.get(&keys[0]).await.unwrap(),
        Some(lease.value().as_bytes().to_vec())
    );
    // mine: a new lease, same fence, new nonce, expiry moved by the new ttl
    env.pass(Duration::from_millis(5)).await;
    let args = renew_args(lease.value(), 2 * LONG_MS, "0b");
    let reply = env.store.eval(&RENEW, &keys, &args).await.unwrap();
    let renewed = granted(&reply);
    assert_eq!(renewed.fence(), lease.fence());
    assert_eq!(renewed.nonce(), "0b");
    assert!(renewed.expires_at() > lease.expires_at());
    assert_eq!(
        env.store.get(&keys[0]).await.unwrap(),
        Some(renewed.value().as_bytes().to_vec())
    );
    assert_ttl_near(
        env.store.pttl(&keys[0]).await.unwrap(),
        Duration::from_millis(2 * LONG_MS),
    );
    assert_eq!(
        env.store.get(&keys[1]).await.unwrap(),
        Some(lease.fence().to_string().into_bytes())
    );
    assert_ttl_near(
        env.store.pttl(&keys[1]).await.unwrap(),
        Duration::from_millis(2 * LONG_MS + RETENTION_MS),
    );
    // retried with the same new nonce: answered with the lease it already installed, and the
    // time that lease has left (not a fresh length)
    let (_, left) = granted_with_time(&reply);
    env.pass(PAST_SHORT).await;
    let (again, left_again) =
        granted_with_time(&env.store.eval(&RENEW, &keys, &args).await.unwrap());
    assert_eq!(again, renewed);
    assert!(
        left_again <= left - PAST_SHORT,
        "the repeat reports {left_again:?} left, the first {left:?}, {PAST_SHORT:?} apart"
    );
    // the old lease no longer matches
    let stale = env
        .store
        .eval(&RENEW, &keys, &renew_args(lease.value(), LONG_MS, "0c"))
        .await
        .unwrap();
    assert_eq!(stale, Reply::Array(vec![Reply::Int(0)]));
    // expired
    let keys_b = self::keys(&env, "b");
    let short = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys_b, &lock_args(SHORT_MS, "02"))
            .await
            .unwrap(),
    );
    env.pass(PAST_SHORT).await;
    let reply = env
        .store
        .eval(&RENEW, &keys_b, &renew_args(short.value(), LONG_MS, "0d"))
        .await
        .unwrap();
    assert_eq!(reply, Reply::Array(vec![Reply::Int(-1)]));
}

// ---------------------------------------------------------------------------------------------
// RENEW_MANY through Store::eval

/// `{code, expiry, pttl}` of lease `i` in a `RENEW_MANY` reply (`{code, expiry, pttl, fence pttl}`
/// per lease).
#[track_caller]
fn renewed_at(reply: &Reply, i: usize) -> (i64, i64, i64) {
    let items = reply.as_array().expect("an array");
    let int = |j: usize| items[4 * i + j].as_int().expect("an integer");
    (int(0), int(1), int(2))
}

/// The fence key's time left that lease `i`'s outcome in a `RENEW_MANY` reply reports (0: not
/// refreshed by the call).
#[track_caller]
fn fence_refreshed_at(reply: &Reply, i: usize) -> i64 {
    let items = reply.as_array().expect("an array");
    items[4 * i + 3].as_int().expect("an integer")
}

/// A call with packed keys and arguments runs the script as the same call unpacked: a grant
/// made through one is repeated (same nonce, same lease) through the other, and a renewal of
/// many leases packed renews each.
async fn a_packed_call_runs_the_script_as_the_unpacked_call<S: TestStore>(env: Env<S>) {
    let (keys_p, args_p) = (keys(&env, "p"), lock_args(LONG_MS, "0a"));
    let packed = |items: &[String]| {
        let mut out = Packed::default();
        for item in items {
            out.push(item);
        }
        out
    };
    let first = granted(
        &env.store
            .eval_packed(&EXPIRE_LOCK, &packed(&keys_p), &packed(&args_p))
            .await
            .unwrap(),
    );
    let repeat = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys_p, &args_p)
            .await
            .unwrap(),
    );
    assert_eq!(
        first.value(),
        repeat.value(),
        "the repeat finds the packed call's lease"
    );
    let mut all_keys = Vec::new();
    let mut args = vec![RETENTION_MS.to_string()];
    for (name, nonce) in [("q", "0b"), ("r", "0c")] {
        let lease = granted(
            &env.store
                .eval(&EXPIRE_LOCK, &keys(&env, name), &lock_args(LONG_MS, nonce))
                .await
                .unwrap(),
        );
        all_keys.extend(keys(&env, name));
        args.extend([
            lease.value().to_owned(),
            LONG_MS.to_string(),
            format!("f{nonce}"),
            "1".to_owned(),
        ]);
    }
    let reply = env
        .store
        .eval_packed(&RENEW_MANY, &packed(&all_keys), &packed(&args))
        .await
        .unwrap();
    for (i, name) in ["q", "r"].iter().enumerate() {
        assert_eq!(renewed_at(&reply, i).0, 1, "{name}: {reply:?}");
        let stored = env.store.get(&lock_key(name)).await.unwrap().unwrap();
        assert!(stored.ends_with(format!(":f0{}", (b'b' + i as u8) as char).as_bytes()));
    }
}

/// One call renews each lease as `RENEW` would and answers each on its own: renewed (a new
/// lease of the same fence and the new nonce, which the client builds from the expiry; its
/// fence key refreshed when asked, untouched when not), held by another, not held, a user's
/// data (nothing written for it), and a repeat whose reply was lost (the lease it made, with the
/// time it has left); the others of the batch renew.
async fn renew_many_script_answers_each_lease_on_its_own<S: TestStore>(env: Env<S>) {
    let names = ["a", "b", "c", "d", "e"];
    let mut leases = Vec::new();
    for (i, name) in names.iter().enumerate() {
        leases.push(granted(
            &env.store
                .eval(
                    &EXPIRE_LOCK,
                    &keys(&env, name),
                    &lock_args(LONG_MS, &format!("0{i}")),
                )
                .await
                .unwrap(),
        ));
    }
    // c is gone; d holds a user's hash; e's lease is taken by another holder.
    env.store.del(&lock_key("c")).await.unwrap();
    env.store.del(&lock_key("d")).await.unwrap();
    env.store.hset(&lock_key("d"), "f", b"v").await;
    env.store.del(&lock_key("e")).await.unwrap();
    let other = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys(&env, "e"), &lock_args(LONG_MS, "0e"))
            .await
            .unwrap(),
    );
    env.pass(Duration::from_millis(5)).await;
    let mut all_keys = Vec::new();
    let mut args = vec![RETENTION_MS.to_string()];
    for (name, lease) in names.iter().zip(&leases) {
        // b's fence key is left alone; every other lease asks for its fence key's refresh.
        all_keys.extend(keys(&env, name));
        args.extend([
            lease.value().to_owned(),
            (2 * LONG_MS).to_string(),
            format!("b{name}"),
            if *name == "b" { "0" } else { "1" }.to_owned(),
        ]);
    }
    let reply = env.store.eval(&RENEW_MANY, &all_keys, &args).await.unwrap();
    assert_eq!(reply.as_array().unwrap().len(), 20, "{reply:?}");
    // a, b: renewed to the new length, same fence, the new nonce
    for (i, name) in ["a", "b"].iter().enumerate() {
        let (code, expiry, pttl) = renewed_at(&reply, i);
        assert_eq!(code, 1, "{name}: {reply:?}");
        assert_eq!(
            pttl,
            (2 * LONG_MS) as i64,
            "{name}: the length set, as PTTL reads it"
        );
        let built = format!("tl1:{expiry}:{}:b{name}", leases[i].fence());
        assert_eq!(
            env.store.get(&lock_key(name)).await.unwrap(),
            Some(built.into_bytes()),
            "{name}: the lease the client builds is the one stored"
        );
        assert_ttl_near(
            env.store.pttl(&lock_key(name)).await.unwrap(),
            Duration::from_millis(2 * LONG_MS),
        );
        if *name == "a" {
            // Asked: the fence key is refreshed, to outlive the lease by 1.5 retentions, and
            // the reply says for how long.
            let refreshed = 2 * LONG_MS + RETENTION_MS + RETENTION_MS / 2;
            assert_eq!(fence_refreshed_at(&reply, i), refreshed as i64, "{reply:?}");
            assert_ttl_near(
                env.store.pttl(&fence_key(name)).await.unwrap(),
                Duration::from_millis(refreshed),
            );
        } else {
            // Not asked: untouched (as the grant set it), and the reply says 0.
            assert_eq!(fence_refreshed_at(&reply, i), 0, "{reply:?}");
            assert_ttl_near(
                env.store.pttl(&fence_key(name)).await.unwrap(),
                Duration::from_millis(LONG_MS + RETENTION_MS),
            );
        }
        assert_eq!(
            env.store.get(&fence_key(name)).await.unwrap(),
            Some(leases[i].fence().to_string().into_bytes())
        );
    }
    assert_eq!(renewed_at(&reply, 2), (-1, 0, 0), "c is not held");
    assert_eq!(env.store.key_type(&lock_key("c")).await.unwrap(), "none");
    assert_eq!(renewed_at(&reply, 3), (-2, 0, 0), "d holds a user's data");
    assert_eq!(env.store.key_type(&lock_key("d")).await.unwrap(), "hash");
    assert_eq!(
        renewed_at(&reply, 4),
        (0, 0, 0),
        "e is held by another lease"
    );
    assert_eq!(
        env.store.get(&lock_key("e")).await.unwrap(),
        Some(other.value().as_bytes().to_vec())
    );
    // The same call again (its reply lost): a and b answer the leases the first call made,
    // with the time they have left; nothing else changes.
    let (_, expiry_a, _) = renewed_at(&reply, 0);
    env.pass(PAST_SHORT).await;
    let again = env.store.eval(&RENEW_MANY, &all_keys, &args).await.unwrap();
    let (code, expiry, left) = renewed_at(&again, 0);
    assert_eq!((code, expiry), (1, expiry_a), "{again:?}");
    assert!(
        Duration::from_millis(left as u64) <= Duration::from_millis(2 * LONG_MS) - PAST_SHORT,
        "the repeat reports the time left, {left} ms"
    );
    assert_eq!(
        fence_refreshed_at(&again, 0),
        0,
        "a repeat refreshes no fence key"
    );
    assert_eq!(renewed_at(&again, 1).0, 1);
    assert_eq!(
        (2..5).map(|i| renewed_at(&again, i).0).collect::<Vec<_>>(),
        vec![-1, -2, 0]
    );
    // A fence key holding a user's data refuses that lease only, when the call reads it (asked
    // to refresh it); a call that leaves the fence key alone does not read it.
    env.store.set(&fence_key("a"), b"abc").await.unwrap();
    let stored = |name: &'static str| {
        let store = env.store.clone();
        async move {
            let value = store.get(&lock_key(name)).await.unwrap().unwrap();
            Lease::parse(std::str::from_utf8(&value).unwrap()).unwrap()
        }
    };
    let (lease_a, lease_b) = (stored("a").await, stored("b").await);
    let mut pair = keys(&env, "a");
    pair.extend(keys(&env, "b"));
    let (retention, ttl) = (RETENTION_MS.to_string(), LONG_MS.to_string());
    let args = strings([
        &retention,
        lease_a.value(),
        &ttl,
        "c1",
        "1",
        lease_b.value(),
        &ttl,
        "c2",
        "1",
    ]);
    let reply = env.store.eval(&RENEW_MANY, &pair, &args).await.unwrap();
    assert_eq!(renewed_at(&reply, 0), (-2, 0, 0));
    assert_eq!(
        env.store.get(&lock_key("a")).await.unwrap(),
        Some(lease_a.value().as_bytes().to_vec()),
        "nothing written for the refused lease"
    );
    assert_eq!(renewed_at(&reply, 1).0, 1);
    let args = strings([&retention, lease_a.value(), &ttl, "c3", "0"]);
    let reply = env
        .store
        .eval(&RENEW_MANY, &keys(&env, "a"), &args)
        .await
        .unwrap();
    assert_eq!(renewed_at(&reply, 0).0, 1, "{reply:?}");
    assert_eq!(
        env.store.get(&fence_key("a")).await.unwrap(),
        Some(b"abc".to_vec()),
        "the fence key was neither read nor written"
    );
}

// ---------------------------------------------------------------------------------------------
// FORCE_UNLOCK and INSPECT through Store::eval

async fn force_unlock_script_deletes_any_lease_and_keeps_the_fence<S: TestStore>(env: Env<S>) {
    let keys = keys(&env, "a");
    let lock = vec![keys[0].clone()];
    assert_eq!(
        env.store.eval(&FORCE_UNLOCK, &lock, &[]).await.unwrap(),
        Reply::Int(-1)
    );
    let lease = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
            .await
            .unwrap(),
    );
    assert_eq!(
        env.store.eval(&FORCE_UNLOCK, &lock, &[]).await.unwrap(),
        Reply::Int(1)
    );
    assert_eq!(env.store.key_type(&keys[0]).await.unwrap(), "none");
    assert_eq!(
        env.store.get(&keys[1]).await.unwrap(),
        Some(lease.fence().to_string().into_bytes())
    );
    assert_eq!(
        env.store.eval(&FORCE_UNLOCK, &lock, &[]).await.unwrap(),
        Reply::Int(-1)
    );
}

async fn inspect_script_reports_type_value_pttl_and_fence<S: TestStore>(env: Env<S>) {
    let keys = keys(&env, "a");
    let reply = env.store.eval(&INSPECT, &keys, &[]).await.unwrap();
    assert_eq!(
        reply,
        Reply::Array(vec![
            Reply::data("none"),
            Reply::Nil,
            Reply::Int(-2),
            Reply::Nil
        ])
    );
    let lease = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
            .await
            .unwrap(),
    );
    let reply = env.store.eval(&INSPECT, &keys, &[]).await.unwrap();
    match reply.as_array() {
        Some(
            [
                Reply::Data(t),
                Reply::Data(v),
                Reply::Int(pttl),
                Reply::Data(f),
            ],
        ) => {
            assert_eq!(t, b"string");
            assert_eq!(v, lease.value().as_bytes());
            assert!(*pttl > 0 && *pttl <= LONG_MS as i64);
            assert_eq!(f, lease.fence().to_string().as_bytes());
        }
        _ => panic!("unexpected inspect reply {reply:?}"),
    }
    env.store
        .eval(&EXPIRE_UNLOCK, &keys[..1], &[lease.value().to_owned()])
        .await
        .unwrap();
    let reply = env.store.eval(&INSPECT, &keys, &[]).await.unwrap();
    assert_eq!(
        reply,
        Reply::Array(vec![
            Reply::data("none"),
            Reply::Nil,
            Reply::Int(-2),
            Reply::data(lease.fence().to_string())
        ]),
        "the fence is retained after release"
    );
}

// ---------------------------------------------------------------------------------------------
// Wrong types: a user's data under the lock key or the fence key

async fn scripts_refuse_a_users_data_under_the_lock_key_and_change_nothing<S: TestStore>(
    env: Env<S>,
) {
    for (i, kind) in ["hash", "list", "string"].into_iter().enumerate() {
        let name = format!("user{i}");
        let keys = keys(&env, &name);
        put_user_data(&env.store, &keys[0], kind).await;
        let before = env.store.snapshot(&keys[0]).await;
        let message = match kind {
            "string" => NOT_A_LEASE_MSG.to_owned(),
            other => format!("WRONGTYPE lock key holds a {other}"),
        };
        let bogus = "tl1:1:1:ffff";
        assert_err(
            env.store
                .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
                .await,
            ErrorKind::WrongType,
            &message,
        );
        assert_err(
            env.store
                .eval(&EXPIRE_UNLOCK, &keys[..1], &strings([bogus]))
                .await,
            ErrorKind::WrongType,
            &message,
        );
        assert_err(
            env.store
                .eval(&RENEW, &keys, &renew_args(bogus, LONG_MS, "02"))
                .await,
            ErrorKind::WrongType,
            &message,
        );
        assert_err(
            env.store.eval(&FORCE_UNLOCK, &keys[..1], &[]).await,
            ErrorKind::WrongType,
            &message,
        );
        let inspected = env.store.eval(&INSPECT, &keys, &[]).await.unwrap();
        let value = match kind {
            "string" => Reply::data("user's own value"),
            _ => Reply::Nil,
        };
        let items = inspected.as_array().expect("inspect replies with an array");
        assert_eq!(items.len(), 4, "{inspected:?}");
        assert_eq!(items[0], Reply::data(kind));
        assert_eq!(items[1], value);
        assert!(
            items[2].as_int().is_some_and(|t| t == -1 || t > 0),
            "{inspected:?}"
        );
        assert_eq!(items[3], Reply::Nil);
        env.store
            .snapshot(&keys[0])
            .await
            .assert_intact(&before, SLACK, kind);
        assert_eq!(
            env.store.key_type(&keys[1]).await.unwrap(),
            "none",
            "no fence was written"
        );
    }
}

async fn scripts_refuse_a_users_data_under_the_fence_key_and_change_nothing<S: TestStore>(
    env: Env<S>,
) {
    for (i, kind) in ["hash", "list", "string"].into_iter().enumerate() {
        // A free lock: only expire_lock reads the fence key.
        let keys = keys(&env, &format!("free{i}"));
        put_user_data(&env.store, &keys[1], kind).await;
        let before = env.store.snapshot(&keys[1]).await;
        let message = match kind {
            "string" => NOT_A_FENCE_MSG.to_owned(),
            other => format!("WRONGTYPE fence key holds a {other}"),
        };
        assert_err(
            env.store
                .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
                .await,
            ErrorKind::WrongType,
            &message,
        );
        assert_eq!(
            env.store.key_type(&keys[0]).await.unwrap(),
            "none",
            "no lease was written"
        );
        let bogus = strings(["tl1:1:1:ffff"]);
        assert_eq!(
            env.store
                .eval(&EXPIRE_UNLOCK, &keys[..1], &bogus)
                .await
                .unwrap(),
            Reply::Int(-1)
        );
        let renew = renew_args("tl1:1:1:ffff", LONG_MS, "02");
        assert_eq!(
            env.store.eval(&RENEW, &keys, &renew).await.unwrap(),
            Reply::Array(vec![Reply::Int(-1)])
        );
        assert_eq!(
            env.store
                .eval(&FORCE_UNLOCK, &keys[..1], &[])
                .await
                .unwrap(),
            Reply::Int(-1)
        );
        let fence = match kind {
            "string" => Reply::data("user's own value"),
            _ => Reply::Nil,
        };
        let inspected = env.store.eval(&INSPECT, &keys, &[]).await.unwrap();
        assert_eq!(
            inspected,
            Reply::Array(vec![Reply::data("none"), Reply::Nil, Reply::Int(-2), fence])
        );
        env.store
            .snapshot(&keys[1])
            .await
            .assert_intact(&before, SLACK, kind);

        // A held lock whose fence key was replaced by a user's data: renew refuses it.
        let keys = self::keys(&env, &format!("held{i}"));
        let lease = granted(
            &env.store
                .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "03"))
                .await
                .unwrap(),
        );
        env.store.del(&keys[1]).await.unwrap();
        put_user_data(&env.store, &keys[1], kind).await;
        let before = env.store.snapshot(&keys[1]).await;
        let lock_before = env.store.snapshot(&keys[0]).await;
        let renew = renew_args(lease.value(), 2 * LONG_MS, "04");
        assert_err(
            env.store.eval(&RENEW, &keys, &renew).await,
            ErrorKind::WrongType,
            &message,
        );
        env.store.snapshot(&keys[0]).await.assert_intact(
            &lock_before,
            SLACK,
            "lock after refused renew",
        );
        env.store
            .snapshot(&keys[1])
            .await
            .assert_intact(&before, SLACK, kind);
    }
}

async fn scripts_accept_only_exact_fencing_tokens_in_the_fence_key<S: TestStore>(env: Env<S>) {
    // A token must be digits and at most 2^53 - 1, the largest integer a Lua number holds
    // exactly; a larger value would be rounded by the Lua script and not by the native body.
    for (i, value) in [
        "9007199254740992",
        "18446744073709551615",
        "123456789012345678901234567890",
    ]
    .into_iter()
    .enumerate()
    {
        let keys = keys(&env, &format!("big{i}"));
        env.store.set(&keys[1], value.as_bytes()).await.unwrap();
        let before = env.store.snapshot(&keys[1]).await;
        assert_err(
            env.store
                .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "01"))
                .await,
            ErrorKind::WrongType,
            NOT_A_FENCE_MSG,
        );
        assert_eq!(
            env.store.key_type(&keys[0]).await.unwrap(),
            "none",
            "{value}: no lease written"
        );
        env.store
            .snapshot(&keys[1])
            .await
            .assert_intact(&before, SLACK, value);

        // Renewing a held lease whose fence key was overwritten with it: refused too.
        env.store.del(&keys[1]).await.unwrap();
        let lease = granted(
            &env.store
                .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "02"))
                .await
                .unwrap(),
        );
        env.store.set(&keys[1], value.as_bytes()).await.unwrap();
        let lock_before = env.store.snapshot(&keys[0]).await;
        assert_err(
            env.store
                .eval(&RENEW, &keys, &renew_args(lease.value(), LONG_MS, "03"))
                .await,
            ErrorKind::WrongType,
            NOT_A_FENCE_MSG,
        );
        env.store
            .snapshot(&keys[0])
            .await
            .assert_intact(&lock_before, SLACK, "the lease");
    }
    // The largest token is accepted, and the next one is one more.
    let keys = keys(&env, "max");
    env.store.set(&keys[1], b"9007199254740991").await.unwrap();
    let lease = granted(
        &env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "04"))
            .await
            .unwrap(),
    );
    assert_eq!(lease.fence(), 1 << 53);
}

async fn renew_script_refuses_a_malformed_lease_even_when_it_matches<S: TestStore>(env: Env<S>) {
    // Values that start like a lease but are not one: the lease argument matches the stored
    // value exactly, so only the lease format check stands between them and a renewal.
    for (i, value) in [
        "tl1:bogus",
        "tl1:1:x:ab",
        "tl1:x:1:ab",
        "tl1:1:45",
        "tl1::1:ab",
    ]
    .into_iter()
    .enumerate()
    {
        let keys = keys(&env, &format!("m{i}"));
        env.store.set(&keys[0], value.as_bytes()).await.unwrap();
        let before = env.store.snapshot(&keys[0]).await;
        assert_err(
            env.store
                .eval(&RENEW, &keys, &renew_args(value, LONG_MS, "05"))
                .await,
            ErrorKind::WrongType,
            NOT_A_LEASE_MSG,
        );
        env.store
            .snapshot(&keys[0])
            .await
            .assert_intact(&before, SLACK, value);
        assert_eq!(
            env.store.key_type(&keys[1]).await.unwrap(),
            "none",
            "{value}: no fence written"
        );
    }
    // A well-formed stored lease keeps its fence digits verbatim, as the Lua script copies them.
    let keys = keys(&env, "digits");
    env.store.set(&keys[0], b"tl1:1:007:ab").await.unwrap();
    let reply = env
        .store
        .eval(&RENEW, &keys, &renew_args("tl1:1:007:ab", LONG_MS, "06"))
        .await
        .unwrap();
    let renewed = granted(&reply);
    assert!(renewed.value().contains(":007:06"), "{}", renewed.value());
    assert_eq!(
        env.store.get(&keys[1]).await.unwrap(),
        Some(b"007".to_vec())
    );
}

// ---------------------------------------------------------------------------------------------
// The same states through ExpireLock

async fn expire_lock_api_walks_every_state<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ttl = Duration::from_millis(LONG_MS);
    // absent
    let insp = locks.inspect("a").await.unwrap();
    assert_eq!(
        (
            insp.key_type.as_str(),
            insp.holder.clone(),
            insp.foreign,
            insp.ttl
        ),
        ("none", None, false, Ttl::Missing)
    );
    assert_eq!(insp.last_fence, None);
    let ghost = Lease::parse("tl1:1:1:ffff").unwrap();
    assert_eq!(
        locks.expire_unlock("a", &ghost).await.unwrap(),
        Unlock::NotHeld
    );
    assert_eq!(locks.renew("a", &ghost, ttl).await.unwrap(), Renew::NotHeld);
    assert!(!locks.force_unlock("a").await.unwrap());
    // held by me
    let lease = locks
        .expire_lock("a", ttl)
        .await
        .unwrap()
        .lease()
        .expect("free lock is granted");
    assert!(
        lease.deadline().is_some(),
        "an acquired lease has a local deadline"
    );
    let insp = locks.inspect("a").await.unwrap();
    assert_eq!(insp.key, lock_key("a"));
    assert_eq!(insp.holder.as_ref().map(Lease::value), Some(lease.value()));
    assert_eq!(insp.last_fence, Some(lease.fence()));
    assert!(!insp.foreign);
    assert_ttl_near(insp.ttl, ttl);
    // held by another: wrong credential
    match locks.expire_lock("a", ttl).await.unwrap() {
        Acquire::Held { holder, remaining } => {
            assert_eq!(holder.value(), lease.value());
            assert!(
                remaining.is_some_and(|r| r <= ttl && r > Duration::ZERO),
                "{remaining:?}"
            );
        }
        other => panic!("expected Held, got {other:?}"),
    }
    assert_eq!(
        locks.expire_unlock("a", &ghost).await.unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        locks.renew("a", &ghost, ttl).await.unwrap(),
        Renew::HeldByOther
    );
    // renew rotates the nonce and keeps the fence
    let Renew::Renewed(renewed) = locks.renew("a", &lease, ttl).await.unwrap() else {
        panic!("the holder renews");
    };
    assert_eq!(renewed.fence(), lease.fence());
    assert_ne!(renewed.nonce(), lease.nonce());
    assert_eq!(
        locks.expire_unlock("a", &lease).await.unwrap(),
        Unlock::HeldByOther,
        "old lease is stale"
    );
    assert_eq!(
        locks.expire_unlock("a", &renewed).await.unwrap(),
        Unlock::Released
    );
    assert_eq!(
        locks.expire_unlock("a", &renewed).await.unwrap(),
        Unlock::NotHeld,
        "retried unlock"
    );
    // expired
    let short = locks
        .expire_lock("a", Duration::from_millis(SHORT_MS))
        .await
        .unwrap()
        .lease()
        .unwrap();
    assert!(short.fence() > lease.fence());
    env.pass(PAST_SHORT).await;
    assert_eq!(
        locks.expire_unlock("a", &short).await.unwrap(),
        Unlock::NotHeld
    );
    assert_eq!(locks.renew("a", &short, ttl).await.unwrap(), Renew::NotHeld);
    assert_eq!(locks.inspect("a").await.unwrap().holder, None);
    // force_unlock of a held lock
    let _lease = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
    assert!(locks.force_unlock("a").await.unwrap());
    assert_eq!(locks.inspect("a").await.unwrap().key_type, "none");
}

async fn expire_lock_api_reports_wrong_type_for_users_data<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ttl = Duration::from_millis(LONG_MS);
    for (i, kind) in ["hash", "list", "string"].into_iter().enumerate() {
        let name = format!("u{i}");
        put_user_data(&env.store, &lock_key(&name), kind).await;
        let lease = Lease::parse("tl1:1:1:ffff").unwrap();
        assert_eq!(
            locks.expire_lock(&name, ttl).await.unwrap_err().kind(),
            ErrorKind::WrongType
        );
        assert_eq!(
            locks.expire_unlock(&name, &lease).await.unwrap_err().kind(),
            ErrorKind::WrongType
        );
        assert_eq!(
            locks.renew(&name, &lease, ttl).await.unwrap_err().kind(),
            ErrorKind::WrongType
        );
        assert_eq!(
            locks.force_unlock(&name).await.unwrap_err().kind(),
            ErrorKind::WrongType
        );
        let insp = locks.inspect(&name).await.unwrap();
        assert!(insp.foreign && insp.holder.is_none(), "{insp:?}");
        assert_eq!(insp.key_type, kind);
    }
}

// ---------------------------------------------------------------------------------------------
// Fencing

async fn fence_tokens_strictly_increase_across_acquire_release_cycles<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ttl = Duration::from_millis(LONG_MS);
    let mut last = 0;
    for _ in 0..10 {
        let lease = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
        assert!(lease.fence() > last, "{} after {last}", lease.fence());
        last = lease.fence();
        // Renewal keeps the token.
        let Renew::Renewed(lease) = locks.renew("a", &lease, ttl).await.unwrap() else {
            panic!("renew");
        };
        assert_eq!(lease.fence(), last);
        assert_eq!(locks.inspect("a").await.unwrap().last_fence, Some(last));
        assert_eq!(
            locks.expire_unlock("a", &lease).await.unwrap(),
            Unlock::Released
        );
    }
    // Another lock's tokens do not disturb this one's.
    let other = locks.expire_lock("b", ttl).await.unwrap().lease().unwrap();
    let next = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
    assert!(next.fence() > last);
    assert!(other.fence() > 0);
}

async fn fence_tokens_keep_increasing_after_the_fence_state_expires<S: TestStore>(env: Env<S>) {
    let retention = Duration::from_millis(100);
    let locks = env.locks_with(Options::default().fence_retention(retention));
    let ttl = Duration::from_millis(SHORT_MS);
    let mut seen = Vec::new();
    for _ in 0..3 {
        let lease = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
        assert_ttl_near(
            env.store.pttl(&fence_key("a")).await.unwrap(),
            ttl + retention,
        );
        seen.push(lease.fence());
        assert_eq!(
            locks.expire_unlock("a", &lease).await.unwrap(),
            Unlock::Released
        );
        // Let the fence key expire (lease + retention), then check it is really gone.
        env.pass(ttl + retention + Duration::from_millis(100)).await;
        assert_eq!(env.store.pttl(&fence_key("a")).await.unwrap(), Ttl::Missing);
        assert_eq!(locks.inspect("a").await.unwrap().last_fence, None);
    }
    let lease = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
    assert!(
        seen.iter().all(|f| lease.fence() > *f),
        "{} after {seen:?}",
        lease.fence()
    );
    assert!(seen.windows(2).all(|w| w[0] < w[1]), "{seen:?}");
}

async fn fence_tokens_keep_increasing_after_the_fence_key_is_deleted<S: TestStore>(env: Env<S>) {
    let locks = env.locks();
    let ttl = Duration::from_millis(LONG_MS);
    let mut last = 0;
    for _ in 0..3 {
        let lease = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
        assert!(lease.fence() > last);
        last = lease.fence();
        locks.expire_unlock("a", &lease).await.unwrap();
        assert!(env.store.del(&fence_key("a")).await.unwrap());
        // Tokens are anchored to the store clock (µs): any later grant is larger.
        env.pass(Duration::from_millis(1)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Plain commands

async fn get_set_and_del_follow_redis<S: TestStore>(env: Env<S>) {
    let s = &env.store;
    assert_eq!(s.get("k").await.unwrap(), None);
    assert!(!s.del("k").await.unwrap());
    s.set("k", b"v1").await.unwrap();
    assert_eq!(s.get("k").await.unwrap(), Some(b"v1".to_vec()));
    // SET replaces the value and drops the TTL.
    assert!(s.pexpire("k", Duration::from_secs(100)).await.unwrap());
    s.set("k", &[0, 1, 255]).await.unwrap();
    assert_eq!(s.get("k").await.unwrap(), Some(vec![0, 1, 255]));
    assert_eq!(s.pttl("k").await.unwrap(), Ttl::Persistent);
    assert!(s.del("k").await.unwrap());
    assert_eq!(s.get("k").await.unwrap(), None);
    // Wrong type: GET errors, SET replaces, DEL deletes.
    s.hset("h", "f", b"v").await;
    assert_err(s.get("h").await, ErrorKind::WrongType, WRONGTYPE_MSG);
    s.set("h", b"now a string").await.unwrap();
    assert_eq!(s.key_type("h").await.unwrap(), "string");
    s.rpush("l", b"x").await;
    assert!(s.del("l").await.unwrap());
    assert_eq!(s.key_type("l").await.unwrap(), "none");
}

async fn set_nx_and_set_nx_px_set_only_absent_keys<S: TestStore>(env: Env<S>) {
    let s = &env.store;
    assert!(s.set_nx("k", b"1").await.unwrap());
    assert!(!s.set_nx("k", b"2").await.unwrap());
    assert_eq!(s.get("k").await.unwrap(), Some(b"1".to_vec()));
    assert_eq!(s.pttl("k").await.unwrap(), Ttl::Persistent);
    s.hset("h", "f", b"v").await;
    assert!(
        !s.set_nx("h", b"x").await.unwrap(),
        "SETNX on a hash is a no-op"
    );
    assert!(
        !s.set_nx_px("h", b"x", Duration::from_secs(1))
            .await
            .unwrap()
    );
    assert_eq!(s.key_type("h").await.unwrap(), "hash");

    assert!(
        s.set_nx_px("p", b"1", Duration::from_millis(SHORT_MS))
            .await
            .unwrap()
    );
    assert_ttl_near(s.pttl("p").await.unwrap(), Duration::from_millis(SHORT_MS));
    assert!(
        !s.set_nx_px("p", b"2", Duration::from_millis(LONG_MS))
            .await
            .unwrap()
    );
    env.pass(PAST_SHORT).await;
    assert_eq!(s.get("p").await.unwrap(), None, "expired");
    assert!(
        s.set_nx_px("p", b"3", Duration::from_millis(LONG_MS))
            .await
            .unwrap()
    );
    assert_eq!(s.get("p").await.unwrap(), Some(b"3".to_vec()));
    // A zero (or sub-millisecond) expiry is refused, as `SET ... PX 0` is.
    assert_err(
        s.set_nx_px("z", b"1", Duration::ZERO).await,
        ErrorKind::Server,
        "ERR invalid expire time in 'set' command",
    );
    assert_err(
        s.set_nx_px("z", b"1", Duration::from_micros(500)).await,
        ErrorKind::Server,
        "ERR invalid expire time in 'set' command",
    );
    assert_eq!(s.key_type("z").await.unwrap(), "none");
}

async fn getset_and_getdel_return_the_old_value<S: TestStore>(env: Env<S>) {
    let s = &env.store;
    assert_eq!(s.getset("k", b"1").await.unwrap(), None);
    assert!(s.pexpire("k", Duration::from_secs(100)).await.unwrap());
    assert_eq!(s.getset("k", b"2").await.unwrap(), Some(b"1".to_vec()));
    assert_eq!(
        s.pttl("k").await.unwrap(),
        Ttl::Persistent,
        "GETSET drops the TTL"
    );
    assert_eq!(s.getdel("k").await.unwrap(), Some(b"2".to_vec()));
    assert_eq!(s.getdel("k").await.unwrap(), None);
    assert_eq!(s.key_type("k").await.unwrap(), "none");
    s.hset("h", "f", b"v").await;
    let before = s.snapshot("h").await;
    assert_err(
        s.getset("h", b"x").await,
        ErrorKind::WrongType,
        WRONGTYPE_MSG,
    );
    assert_err(s.getdel("h").await, ErrorKind::WrongType, WRONGTYPE_MSG);
    s.snapshot("h").await.assert_intact(&before, SLACK, "hash");
}

async fn incr_and_decr_count_and_refuse_non_integers<S: TestStore>(env: Env<S>) {
    let s = &env.store;
    assert_eq!(s.incr("n").await.unwrap(), 1);
    assert_eq!(s.incr("n").await.unwrap(), 2);
    assert_eq!(s.decr("n").await.unwrap(), 1);
    assert_eq!(s.decr("m").await.unwrap(), -1);
    assert_eq!(
        s.decr("m").await.unwrap(),
        -2,
        "counters go below zero, as in Redis"
    );
    // INCR keeps the TTL.
    s.set("t", b"41").await.unwrap();
    assert!(
        s.pexpire("t", Duration::from_millis(LONG_MS))
            .await
            .unwrap()
    );
    assert_eq!(s.incr("t").await.unwrap(), 42);
    assert_ttl_near(s.pttl("t").await.unwrap(), Duration::from_millis(LONG_MS));
    // Not integers (Redis accepts only canonical decimal i64).
    for bad in [
        "abc",
        "",
        "1.5",
        "007",
        "+1",
        " 1",
        "-0",
        "9223372036854775808",
    ] {
        s.set("bad", bad.as_bytes()).await.unwrap();
        assert_err(s.incr("bad").await, ErrorKind::Server, NOT_INTEGER_MSG);
        assert_err(s.decr("bad").await, ErrorKind::Server, NOT_INTEGER_MSG);
        assert_eq!(
            s.get("bad").await.unwrap(),
            Some(bad.as_bytes().to_vec()),
            "{bad:?} unchanged"
        );
    }
    // Overflow.
    s.set("max", i64::MAX.to_string().as_bytes()).await.unwrap();
    assert_err(
        s.incr("max").await,
        ErrorKind::Server,
        "ERR increment or decrement would overflow",
    );
    s.set("min", i64::MIN.to_string().as_bytes()).await.unwrap();
    assert_err(
        s.decr("min").await,
        ErrorKind::Server,
        "ERR increment or decrement would overflow",
    );
    assert_eq!(
        s.get("min").await.unwrap(),
        Some(i64::MIN.to_string().into_bytes())
    );
    // Wrong type.
    s.rpush("l", b"x").await;
    assert_err(s.incr("l").await, ErrorKind::WrongType, WRONGTYPE_MSG);
    assert_err(s.decr("l").await, ErrorKind::WrongType, WRONGTYPE_MSG);
}

async fn expire_pexpire_and_pttl_follow_redis<S: TestStore>(env: Env<S>) {
    let s = &env.store;
    assert_eq!(s.pttl("k").await.unwrap(), Ttl::Missing);
    assert!(!s.expire("k", 10).await.unwrap());
    assert!(!s.pexpire("k", Duration::from_millis(10)).await.unwrap());
    assert_eq!(
        s.key_type("k").await.unwrap(),
        "none",
        "EXPIRE does not create keys"
    );
    s.set("k", b"v").await.unwrap();
    assert_eq!(s.pttl("k").await.unwrap(), Ttl::Persistent);
    assert!(s.expire("k", 100).await.unwrap());
    assert_ttl_near(s.pttl("k").await.unwrap(), Duration::from_secs(100));
    assert!(
        s.pexpire("k", Duration::from_millis(SHORT_MS))
            .await
            .unwrap()
    );
    assert_ttl_near(s.pttl("k").await.unwrap(), Duration::from_millis(SHORT_MS));
    env.pass(PAST_SHORT).await;
    assert_eq!(s.pttl("k").await.unwrap(), Ttl::Missing);
    assert_eq!(s.get("k").await.unwrap(), None);
    // A zero expiry deletes the key.
    s.set("z", b"v").await.unwrap();
    assert!(s.expire("z", 0).await.unwrap());
    assert_eq!(s.key_type("z").await.unwrap(), "none");
    s.set("z", b"v").await.unwrap();
    assert!(s.pexpire("z", Duration::ZERO).await.unwrap());
    assert_eq!(s.key_type("z").await.unwrap(), "none");
    // Other types expire too.
    s.hset("h", "f", b"v").await;
    assert!(
        s.pexpire("h", Duration::from_millis(SHORT_MS))
            .await
            .unwrap()
    );
    env.pass(PAST_SHORT).await;
    assert_eq!(s.key_type("h").await.unwrap(), "none");
}

async fn key_type_names_every_type<S: TestStore>(env: Env<S>) {
    let s = &env.store;
    assert_eq!(s.key_type("none").await.unwrap(), "none");
    s.set("s", b"v").await.unwrap();
    assert_eq!(s.key_type("s").await.unwrap(), "string");
    assert_eq!(s.incr("i").await.unwrap(), 1);
    assert_eq!(s.key_type("i").await.unwrap(), "string");
    s.hset("h", "f", b"v").await;
    assert_eq!(s.key_type("h").await.unwrap(), "hash");
    s.rpush("l", b"v").await;
    assert_eq!(s.key_type("l").await.unwrap(), "list");
}

async fn time_is_the_stores_clock<S: TestStore>(env: Env<S>) {
    let t1 = env.store.time().await.unwrap();
    match env.virtual_clock() {
        Some(clock) => {
            use tairlock::clock::Clock;
            assert_eq!(t1, clock.now());
            env.pass(Duration::from_secs(3)).await;
            assert_eq!(env.store.time().await.unwrap(), t1 + Duration::from_secs(3));
        }
        None => {
            let system = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap();
            let skew = system.abs_diff(t1);
            assert!(
                skew < Duration::from_secs(5),
                "server time {t1:?} vs system {system:?}"
            );
            env.pass(Duration::from_millis(20)).await;
            let t2 = env.store.time().await.unwrap();
            assert!(t2 >= t1 + Duration::from_millis(15), "{t1:?} then {t2:?}");
            assert!(
                t1.subsec_micros() > 0 || t2.subsec_micros() > 0,
                "TIME has µs resolution"
            );
        }
    }
}

backend_tests!(
    scripts_accept_only_exact_fencing_tokens_in_the_fence_key,
    renew_script_refuses_a_malformed_lease_even_when_it_matches,
    expire_lock_script_on_a_free_lock_grants_a_server_timed_lease,
    expire_lock_script_retried_with_the_same_nonce_returns_the_same_lease,
    expire_lock_script_on_a_held_lock_reports_the_holder_and_its_pttl,
    expire_lock_script_after_expiry_grants_a_new_lease_with_a_higher_fence,
    expire_unlock_script_covers_absent_mine_other_expired_and_retried,
    renew_script_covers_absent_mine_other_expired_and_retried,
    renew_many_script_answers_each_lease_on_its_own,
    a_packed_call_runs_the_script_as_the_unpacked_call,
    force_unlock_script_deletes_any_lease_and_keeps_the_fence,
    inspect_script_reports_type_value_pttl_and_fence,
    scripts_refuse_a_users_data_under_the_lock_key_and_change_nothing,
    scripts_refuse_a_users_data_under_the_fence_key_and_change_nothing,
    expire_lock_api_walks_every_state,
    expire_lock_api_reports_wrong_type_for_users_data,
    fence_tokens_strictly_increase_across_acquire_release_cycles,
    fence_tokens_keep_increasing_after_the_fence_state_expires,
    fence_tokens_keep_increasing_after_the_fence_key_is_deleted,
    get_set_and_del_follow_redis,
    set_nx_and_set_nx_px_set_only_absent_keys,
    getset_and_getdel_return_the_old_value,
    incr_and_decr_count_and_refuse_non_integers,
    expire_pexpire_and_pttl_follow_redis,
    key_type_names_every_type,
    time_is_the_stores_clock,
);

/// A body that takes only the store (the `store:` form of `backend_tests!`).
async fn binary_values_round_trip_unchanged<S: Store>(store: S) {
    let every_byte: Vec<u8> = (0..=255).collect();
    store.set("bin", &every_byte).await.unwrap();
    assert_eq!(store.get("bin").await.unwrap(), Some(every_byte.clone()));
    assert!(store.set_nx("empty", b"").await.unwrap());
    assert_eq!(store.get("empty").await.unwrap(), Some(Vec::new()));
    assert_eq!(store.key_type("empty").await.unwrap(), "string");
    assert_eq!(store.getdel("bin").await.unwrap(), Some(every_byte));
}

backend_tests!(store: binary_values_round_trip_unchanged);

// ---------------------------------------------------------------------------------------------
// Both stores side by side, and the memory store's clock edge cases

/// Replace what legitimately differs between stores (server time, random nonces) by
/// placeholders, keeping everything else of the reply.
fn shape(reply: &Reply) -> Reply {
    match reply {
        Reply::Data(d) => match std::str::from_utf8(d).ok().and_then(Lease::parse) {
            Some(lease) => Reply::data(format!("<lease nonce={}>", lease.nonce())),
            None if d.iter().all(u8::is_ascii_digit) && d.len() > 12 => Reply::data("<fence>"),
            None => reply.clone(),
        },
        Reply::Int(i) if *i > 0 => Reply::Int(1),
        Reply::Array(items) => Reply::Array(items.iter().map(shape).collect()),
        other => other.clone(),
    }
}

async fn script_transcript<S: TestStore>(
    env: &Env<S>,
) -> Vec<std::result::Result<Reply, (ErrorKind, String)>> {
    let keys = keys(env, "a");
    let mut out = Vec::new();
    let mut push = |r: Result<Reply>| {
        out.push(
            r.map(|r| shape(&r))
                .map_err(|e| (e.kind(), e.message().to_owned())),
        )
    };
    push(env.store.eval(&INSPECT, &keys, &[]).await);
    let first = env
        .store
        .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "aa"))
        .await;
    let lease = granted(first.as_ref().unwrap()).value().to_owned();
    push(first);
    push(
        env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "aa"))
            .await,
    );
    push(
        env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "bb"))
            .await,
    );
    push(env.store.eval(&INSPECT, &keys, &[]).await);
    push(
        env.store
            .eval(&RENEW, &keys, &renew_args("tl1:1:1:ff", LONG_MS, "cc"))
            .await,
    );
    let renewed = env
        .store
        .eval(&RENEW, &keys, &renew_args(&lease, LONG_MS, "dd"))
        .await;
    let lease = granted(renewed.as_ref().unwrap()).value().to_owned();
    push(renewed);
    push(
        env.store
            .eval(&EXPIRE_UNLOCK, &keys[..1], &strings(["tl1:1:1:ff"]))
            .await,
    );
    push(
        env.store
            .eval(&EXPIRE_UNLOCK, &keys[..1], std::slice::from_ref(&lease))
            .await,
    );
    push(env.store.eval(&EXPIRE_UNLOCK, &keys[..1], &[lease]).await);
    push(env.store.eval(&FORCE_UNLOCK, &keys[..1], &[]).await);
    push(env.store.eval(&INSPECT, &keys, &[]).await);
    env.store.hset(&keys[0], "f", b"v").await;
    push(
        env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "ee"))
            .await,
    );
    push(env.store.eval(&INSPECT, &keys, &[]).await);
    env.store.set(&keys[0], b"plain").await.unwrap();
    push(env.store.eval(&FORCE_UNLOCK, &keys[..1], &[]).await);
    env.store.set(&keys[1], b"nope").await.unwrap();
    env.store.del(&keys[0]).await.unwrap();
    push(
        env.store
            .eval(&EXPIRE_LOCK, &keys, &lock_args(LONG_MS, "ff"))
            .await,
    );
    out
}

#[tokio::test]
async fn script_replies_have_identical_shapes_on_both_stores() {
    let memory = Env::memory();
    let redis = Env::redis().await;
    let on_memory = script_transcript(&memory).await;
    let on_redis = script_transcript(&redis).await;
    assert_eq!(on_memory.len(), on_redis.len());
    for (i, (m, r)) in on_memory.iter().zip(&on_redis).enumerate() {
        assert_eq!(
            m,
            r,
            "step {i} differs between the memory store and redis{}",
            redis.context()
        );
    }
}

#[tokio::test]
async fn memory_fence_tokens_survive_a_backward_clock_step_within_retention() {
    let env = Env::memory();
    let clock = env.virtual_clock().unwrap().clone();
    let locks = env.locks();
    let ttl = Duration::from_millis(LONG_MS);
    let first = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
    locks.expire_unlock("a", &first).await.unwrap();
    // The clock steps back 5 s (less than the 60 s retention): the `last + 1` rule holds.
    use tairlock::clock::Clock;
    clock.set(clock.now() - Duration::from_secs(5));
    let second = locks.expire_lock("a", ttl).await.unwrap().lease().unwrap();
    assert_eq!(second.fence(), first.fence() + 1);
    let third = locks.expire_lock("b", ttl).await.unwrap().lease().unwrap();
    assert!(
        third.fence() < first.fence(),
        "another lock's tokens follow the clock alone"
    );
}

#[tokio::test]
async fn memory_keys_live_through_their_expiry_millisecond_like_redis() {
    // Redis deletes a key once now > expiry (ms); the memory store must agree to the millisecond,
    // or the two stores would disagree about a lease at its very end.
    let env = Env::memory();
    let s = &env.store;
    assert!(
        s.set_nx_px("k", b"v", Duration::from_millis(10))
            .await
            .unwrap()
    );
    env.pass(Duration::from_millis(10)).await;
    assert_eq!(s.pttl("k").await.unwrap(), Ttl::Expires(Duration::ZERO));
    assert_eq!(s.get("k").await.unwrap(), Some(b"v".to_vec()));
    env.pass(Duration::from_millis(1)).await;
    assert_eq!(s.pttl("k").await.unwrap(), Ttl::Missing);
}
