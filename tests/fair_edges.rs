//! The expire lock's fair mode at its edges (issue 26 §4), on the embedded store and on a real
//! server: nonces the lease format cannot carry, a head waiter leaving a free lock, and a grant
//! that a force unlock deleted before its waiter read the announcement.

mod support;

use std::time::Duration;

use support::{Env, TestStore};
use tairlock::{ErrorKind, ExpireLock, Options, Store};
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

on_both_stores!(a_nonce_the_lease_cannot_carry_is_refused_and_nothing_written,);

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
