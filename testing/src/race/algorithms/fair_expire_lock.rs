//! `fair-expire-lock`: the core crate's expire lock in fair mode — a FIFO of waiters on the
//! server, and releases that hand the lock to the first live waiter in the same step.
//!
//! Each client keeps one nonce per acquisition, so that its repeated attempts keep one place in
//! the queue and find a grant made to it. A crashed client's place (and a grant made to it)
//! lapses with its waiter lease.
//!
//! A refused client waits as the library's waiting calls do: subscribed to its wake channel
//! before each attempt, it attempts again as soon as a release announces a grant there (that
//! attempt finds the grant and confirms it), and otherwise refreshes its place within a third of
//! its waiter lease. (Polling alone, the head of the queue learns of its grant only at its next
//! refresh, each refresh a pause point where a scenario may stall it: a handoff then measures
//! that polling interval and those stalls rather than the release.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use tairlock::{ExpireLock, FairAttempt, Keyspace, Options, Store};

use super::wake::Wake;
use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, RaceStore, Step};

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct FairExpireLock {
    /// Each client's current acquisition nonce.
    nonces: parking_lot::Mutex<HashMap<usize, String>>,
}

/// The waiter lease of the race's fair clients: short against the race's leases, so a crashed
/// waiter holds the queue up briefly.
const WAITER_LEASE: Duration = Duration::from_millis(300);

fn locks<S: Store>(cx: &Client<S>) -> ExpireLock<super::super::client::RaceStore<S>> {
    // The race names its keys itself: no prefix, the race key is the lock name's hash tag.
    let keyspace = Keyspace::new("").expect("empty prefix is valid");
    let options = Options::default()
        .keyspace(keyspace)
        .fair(true)
        .waiter_lease(WAITER_LEASE);
    ExpireLock::with_options(cx.store().clone(), options)
}

/// A client's lock handle for the trial (one handle: its wake channel is the handle's), and its
/// subscription to that channel.
struct Listener<S: Store> {
    locks: ExpireLock<RaceStore<S>>,
    wake: parking_lot::Mutex<Wake>,
}

fn listener<S: Store>(cx: &Client<S>) -> Arc<Listener<S>> {
    cx.keep(|| {
        Arc::new(Listener {
            locks: locks(cx),
            wake: parking_lot::Mutex::default(),
        })
    })
}

impl<S: Store> Algorithm<S> for FairExpireLock {
    fn name(&self) -> &'static str {
        "fair-expire-lock"
    }

    fn expectation(&self) -> Expectation {
        Expectation::Safe
    }

    fn fenced(&self) -> bool {
        true
    }

    fn try_acquire<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Step<Attempt>> {
        Box::pin(async move {
            let nonce = self
                .nonces
                .lock()
                .entry(cx.id())
                .or_insert_with(tairlock::new_nonce)
                .clone();
            let listener = listener(cx);
            let locks = &listener.locks;
            Wake::listen(&listener.wake, cx, || locks.fair_wake_channel(lock)).await?;
            cx.pause("acquire:before").await?;
            match locks.fair_attempt(lock, ttl, &nonce, true).await? {
                FairAttempt::Acquired(lease) => {
                    self.nonces.lock().remove(&cx.id());
                    Ok(Attempt::Acquired(Holding {
                        value: lease.value().as_bytes().to_vec(),
                        fence: Some(lease.fence()),
                        deadline: lease.deadline().expect("an acquired lease has a deadline"),
                    }))
                }
                // Refresh the place well within the waiter lease (which also finds a grant).
                FairAttempt::Busy { remaining } => Ok(Attempt::Busy {
                    retry_after: Some(remaining.unwrap_or(WAITER_LEASE).min(WAITER_LEASE / 3)),
                }),
            }
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        holding: Holding,
    ) -> BoxFuture<'a, Step<()>> {
        // Compare-and-delete, then a grant to the next waiter in the same step.
        Box::pin(super::expire_lock::release_lease(
            cx,
            locks(cx),
            lock,
            holding,
        ))
    }

    fn woken<'a>(&'a self, cx: &'a Client<S>, _lock: &'a str) -> Option<BoxFuture<'a, ()>> {
        listener(cx).wake.lock().message()
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        let key = format!("{{{lock}}}");
        vec![
            key.clone(),
            format!("{key}:fairq"),
            format!("{key}:fairw"),
            // The record of a grant not confirmed yet (a crashed waiter's lingers a waiter lease).
            format!("{key}:fairg"),
        ]
    }

    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        Some(LeaseAt::Value {
            key: format!("{{{lock}}}"),
            value: holding.value.clone(),
        })
    }
}
