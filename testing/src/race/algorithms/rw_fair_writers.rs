//! `rw-fair-writers`: the scripted reader/writer lock ([`RwLock`]) with its writers in fair mode
//! ([`Options::fair`](tairlock_rwlock::Options::fair)) — a FIFO of writers on the server, and
//! write releases that hand the lock to the first live queued writer in the same step.
//!
//! As `rw-scripted`: three attempts in four read, one writes, and a client that decided to write
//! keeps trying with the same nonce until it gets in. Each refused write attempt refreshes the
//! writer's place in the queue (a waiter lease of half the race's lease) and, under writer
//! preference, the intent
//! naming the first queued writer, so new readers stay out; a repeat finds a grant a release
//! made to it. A crashed writer's place, and a grant made to it, lapse with its waiter lease; a
//! crashed reader blocks writers until its own lease ends. Writers carry fencing tokens.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::{Keyspace, Lease, Store};
use tairlock_rwlock::{Options, ReadAttempt, RwLock, WriteAttempt};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding};
use crate::race::client::{Client, RaceStore, Step};

/// The prefix of a reader's holding value; the rest is its nonce.
const READ_MARK: &str = "read:";

/// The waiter lease of the race's fair writers: short against the race's leases, so a crashed
/// waiter holds the queue up briefly.
fn waiter_lease(ttl: Duration) -> Duration {
    ttl / 2
}

/// The `rw-fair-writers` row of `tairlock race`.
#[derive(Debug, Default)]
pub struct RwFairWriters {
    /// The nonce of each client's write acquisition in progress, by (lock, client).
    writing: Mutex<HashMap<(String, usize), String>>,
}

fn locks<S: Store>(cx: &Client<S>, ttl: Duration) -> RwLock<RaceStore<S>> {
    // The race names its keys itself: no prefix, the race key is the lock name's hash tag.
    let keyspace = Keyspace::new("").expect("empty prefix is valid");
    let options = Options::default()
        .keyspace(keyspace)
        .intent_lease(ttl / 2)
        .fair(true)
        .waiter_lease(waiter_lease(ttl));
    RwLock::with_options(cx.store().clone(), options)
}

impl RwFairWriters {
    /// A pause point that forgets this client's write in progress if the client dies there: its
    /// place in the queue (and a grant made to it) lapses with the waiter lease.
    async fn pause<S: Store>(&self, cx: &Client<S>, lock: &str, point: &'static str) -> Step<()> {
        let paused = cx.pause(point).await;
        if paused.is_err() {
            self.writing.lock().remove(&(lock.to_owned(), cx.id()));
        }
        paused
    }
}

impl<S: Store> Algorithm<S> for RwFairWriters {
    fn name(&self) -> &'static str {
        "rw-fair-writers"
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
            let rw = locks(cx, ttl);
            let key = (lock.to_owned(), cx.id());
            let pending = self.writing.lock().get(&key).cloned();
            let write = pending.is_some() || cx.with_rng(|rng| rand::Rng::random_bool(rng, 0.25));
            if !write {
                cx.pause("read:before-acquire").await?;
                let nonce = tairlock::new_nonce();
                return match rw.read_acquire(lock, &nonce, ttl).await? {
                    ReadAttempt::Acquired { lease, .. } => Ok(Attempt::Acquired(Holding {
                        value: format!("{READ_MARK}{nonce}").into_bytes(),
                        fence: None,
                        deadline: lease.deadline(),
                    })),
                    ReadAttempt::Blocked { remaining, .. } => Ok(Attempt::Busy {
                        retry_after: remaining,
                    }),
                };
            }
            let nonce = pending.unwrap_or_else(tairlock::new_nonce);
            self.writing.lock().insert(key.clone(), nonce.clone());
            self.pause(cx, lock, "write:before-acquire").await?;
            match rw
                .fair_write_acquire(lock, &nonce, ttl, Some(ttl / 2), true)
                .await?
            {
                WriteAttempt::Acquired(lease) => {
                    self.writing.lock().remove(&key);
                    Ok(Attempt::Acquired(Holding {
                        value: lease.lease().value().as_bytes().to_vec(),
                        fence: Some(lease.fence()),
                        deadline: lease.deadline(),
                    }))
                }
                // Refresh the place well within the waiter lease (which also finds a grant).
                WriteAttempt::Blocked { remaining, .. } => Ok(Attempt::Busy {
                    retry_after: Some(
                        remaining
                            .unwrap_or(waiter_lease(ttl))
                            .min(waiter_lease(ttl) / 3),
                    ),
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
        Box::pin(async move {
            let rw = locks(cx, Duration::from_millis(100));
            cx.pause("release:before").await?;
            let value = String::from_utf8(holding.value).expect("holdings are text");
            match value.strip_prefix(READ_MARK) {
                Some(nonce) => {
                    rw.read_release(lock, nonce).await?;
                }
                None => {
                    let lease = Lease::parse(&value).expect("our own lease parses");
                    // Compare-and-delete, then a grant to the first live queued writer in the
                    // same step: it can only ever delete this very lease.
                    rw.fair_write_release(lock, &lease).await?;
                }
            }
            Ok(())
        })
    }

    fn is_shared(&self, holding: &Holding) -> bool {
        holding.value.starts_with(READ_MARK.as_bytes())
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        [":w", ":r", ":wi", ":fence", ":wq", ":ww"]
            .iter()
            .map(|suffix| format!("{{{lock}}}{suffix}"))
            .collect()
    }
}
