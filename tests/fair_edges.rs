//! The expire lock's fair mode at its edges (issue 26 §4), on the embedded store and on a real
//! server: nonces the lease format cannot carry, a head waiter leaving a free lock, and a grant
//! that a force unlock deleted before its waiter read the announcement.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use support::{Env, TestStore};
use tairlock::scripts::{FAIR_LOCK, FAIR_UNLOCK};
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{ErrorKind, ExpireLock, LockGuard, MemoryStore, Options, Reply, Store};
use tokio::time::Instant;

const NAME: &str = "fair-edge";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn fair() -> Options {
    Options::default().fair(true).waiter_lease(ms(3000))
}

/// Every key of the lock in the default keyspace.
fn keys() -> Vec<String> {
    let lock = format!("tairlock:{{{NAME}}}");
    ["", ":fence", ":fairq", ":fairw", ":fairg"]
        .iter()
        .map(|suffix| format!("{lock}{suffix}"))
        .collect()
}

async fn nothing_written<S: Store>(store: &S) -> bool {
    for key in keys() {
        if store.key_type(&key).await.unwrap() != "none" {
            return false;
        }
    }
    true
}

/// `name::{memory,redis}` from `async fn name(env)`.
macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(super::support::Env::memory_real_time()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(super::support::Env::redis().await).await;
            }
        }
    )+};
}

on_both_stores!(
    a_nonce_the_lease_cannot_carry_is_refused_and_nothing_written,
    the_first_waiter_leaving_a_free_lock_wakes_the_next,
    a_grant_is_recorded_until_confirmed_or_forced_and_foreign_data_is_refused,
);

/// The four keys of the fair scripts, as the lock passes them (the grant record is optional).
fn fair_keys() -> Vec<String> {
    keys()[..4].to_vec()
}

/// A waiter that joins the queue under `nonce` and then does nothing but, later, leave.
async fn idle_waiter<S: Store>(store: &S, nonce: &str, waiter_lease: Duration) {
    let lock = format!("tairlock:{{{NAME}}}");
    let args = [
        "30000".to_owned(),
        nonce.to_owned(),
        "60000".to_owned(),
        waiter_lease.as_millis().to_string(),
        format!("{lock}:released:w:idle"),
        "1".to_owned(),
    ];
    let reply = store.eval(&FAIR_LOCK, &fair_keys(), &args).await.unwrap();
    assert_eq!(reply.as_array().unwrap()[0].as_int(), Some(0), "{reply:?}");
}

async fn leave<S: Store>(store: &S, nonce: &str) -> Reply {
    let args = [
        nonce.to_owned(),
        "nonce".to_owned(),
        "60000".to_owned(),
        format!("tairlock:{{{NAME}}}:released"),
        "PUBLISH".to_owned(),
    ];
    store.eval(&FAIR_UNLOCK, &fair_keys(), &args).await.unwrap()
}

/// The lock is free (a plain client released it: no grant) while an idle waiter is first in the
/// queue and a waiting `lock` is second. The first leaves: the second is woken and takes the
/// lock at once, rather than at its next refresh (a third of its waiter lease later).
async fn the_first_waiter_leaving_a_free_lock_wakes_the_next<S: TestStore>(env: Env<S>) {
    let plain = env.locks();
    let guard = plain.lock(NAME).await.unwrap();
    idle_waiter(&env.store, "cafe01", ms(10_000)).await;
    // Refreshes its place every 3 s.
    let waiter = env.locks_with(Options::default().fair(true).waiter_lease(ms(9000)));
    let task = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    tokio::time::sleep(ms(300)).await;
    guard.release().await.unwrap();
    tokio::time::sleep(ms(300)).await;
    assert!(!task.is_finished(), "the idle waiter is first");
    assert_eq!(
        leave(&env.store, "cafe01").await,
        Reply::Array(vec![Reply::Int(-1), Reply::Int(0)])
    );
    let left = Instant::now();
    let guard = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the next waiter never took the lock")
        .unwrap();
    let took = left.elapsed();
    assert!(
        took < ms(1000),
        "the free lock idled {took:?} after the first waiter left {}",
        env.context()
    );
    guard.release().await.unwrap();
}

/// A release that grants records the grant (`<nonce>:<wake channel>`, for the grant's length)
/// in `:fairg`; a force unlock of the granted lease deletes it with the lock. A user's data under
/// that key makes the force unlock (and the fair release) an error that changes nothing.
async fn a_grant_is_recorded_until_confirmed_or_forced_and_foreign_data_is_refused<S: TestStore>(
    env: Env<S>,
) {
    let grant_key = &keys()[4];
    let holder = env.locks_with(fair());
    let guard = holder.lock(NAME).await.unwrap();
    idle_waiter(&env.store, "cafe01", ms(10_000)).await;
    guard.release().await.unwrap();
    let record = env.store.get(grant_key).await.unwrap().unwrap();
    let wake = format!("tairlock:{{{NAME}}}:released:w:idle");
    assert_eq!(String::from_utf8(record).unwrap(), format!("cafe01:{wake}"));
    assert!(
        matches!(env.store.pttl(grant_key).await.unwrap(), tairlock::Ttl::Expires(t) if t <= ms(10_000))
    );
    assert!(holder.force_unlock(NAME).await.unwrap());
    assert_eq!(env.store.key_type(grant_key).await.unwrap(), "none");
    assert_eq!(env.store.key_type(&keys()[0]).await.unwrap(), "none");
    // A user's data under the record's key: refused, nothing deleted.
    let guard = holder.lock(NAME).await.unwrap();
    for junk in [&b"not a record"[..], b":no-nonce"] {
        env.store.set(grant_key, junk).await.unwrap();
        let err = holder.force_unlock(NAME).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
        assert!(holder.is_locked(NAME).await.unwrap());
    }
    env.store.del(grant_key).await.unwrap();
    env.store.hset(grant_key, "f", b"v").await;
    let err = holder.force_unlock(NAME).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    let err = guard.release().await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::WrongType, "{err}");
    assert!(holder.is_locked(NAME).await.unwrap());
    assert_eq!(env.store.key_type(grant_key).await.unwrap(), "hash");
}

/// Right after a release granted the lock to a waiter (and announced it), and before the waiter
/// reads the announcement, an operator force-unlocks the lock and another client takes it.
struct ForceAfterGrant {
    armed: AtomicBool,
    admin: ExpireLock<MemoryStore>,
    taken: Mutex<Option<LockGuard<MemoryStore>>>,
}

impl Hook for ForceAfterGrant {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let Command::Eval { script, .. } = command else {
            return run;
        };
        if !std::ptr::eq(script, &FAIR_UNLOCK) {
            return run;
        }
        Box::pin(async move {
            let reply = run.await;
            if self.armed.swap(false, Ordering::SeqCst) {
                assert!(self.admin.force_unlock(NAME).await.unwrap());
                let other = self.admin.try_lock(NAME).await.unwrap();
                *self.taken.lock() = Some(other.expect("the lock is free after the force"));
            }
            reply
        })
    }
}

/// The waiter's grant was deleted by a force unlock before it read the announcement: it must
/// not hold in one hop (it would overlap the next holder until its confirmation is refused),
/// but wait for the lock like anyone else. On one thread, so that nothing runs between the
/// release, the force unlock and the other client's acquisition.
#[tokio::test]
async fn a_grant_force_unlocked_before_its_waiter_read_it_is_not_taken() {
    let store = MemoryStore::new();
    let hook = Arc::new(ForceAfterGrant {
        armed: AtomicBool::new(false),
        admin: ExpireLock::new(store.clone()),
        taken: Mutex::new(None),
    });
    let holder = ExpireLock::with_options(Intercept::shared(store.clone(), hook.clone()), fair());
    let guard = holder.lock(NAME).await.unwrap();
    let waiter = ExpireLock::with_options(store.clone(), fair());
    let task = tokio::spawn(async move { waiter.lock(NAME).await.unwrap() });
    tokio::time::sleep(ms(200)).await;
    assert_eq!(store.key_type(&keys()[2]).await.unwrap(), "zset", "queued");
    hook.armed.store(true, Ordering::SeqCst);
    guard.release().await.unwrap();
    let other = hook
        .taken
        .lock()
        .take()
        .expect("taken after the force unlock");
    tokio::time::sleep(ms(300)).await;
    assert!(
        !task.is_finished(),
        "the waiter holds a grant a force unlock deleted, while another client holds the lock"
    );
    assert!(!other.is_lost());
    // It waits its turn: the other client's release hands it the lock.
    other.release().await.unwrap();
    let next = tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the waiter never took the lock")
        .unwrap();
    assert!(!next.is_lost());
    next.release().await.unwrap();
}

/// An empty nonce took the lock and then failed to parse its own lease (held for the full
/// lease); two callers with `""` shared one lease; `ab:cd` was stored. Each is refused before
/// anything is sent.
async fn a_nonce_the_lease_cannot_carry_is_refused_and_nothing_written<S: TestStore>(env: Env<S>) {
    let locks = env.locks_with(fair());
    for nonce in ["", "ab:cd", "xyz", "00ff 00"] {
        for queue in [false, true] {
            let err = locks
                .fair_attempt(NAME, Duration::from_secs(30), nonce, queue)
                .await
                .unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidInput, "{nonce:?}: {err}");
            assert!(
                nothing_written(&env.store).await,
                "{nonce:?} wrote something"
            );
        }
        let err = locks.fair_leave(NAME, nonce).await.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{nonce:?}: {err}");
    }
    // A hex nonce is taken as before.
    let nonce = tairlock::new_nonce();
    let got = locks
        .fair_attempt(NAME, Duration::from_secs(30), &nonce, false)
        .await
        .unwrap();
    assert!(matches!(got, tairlock::FairAttempt::Acquired(ref l) if l.nonce() == nonce));
}
