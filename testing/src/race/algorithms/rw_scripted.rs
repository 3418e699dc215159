//! `rw-scripted` and `rw-fair-writers`: the scripted reader/writer lock ([`RwLock`]): one
//! script per step, per-reader leases judged by server time, writer preference; in the second
//! row with its writers in fair mode ([`Options::fair`]).
//!
//! Three attempts in four read, one writes. A reader whose attempt got no answer repeats it
//! with the same nonce (a repeat of a read the server admitted finds its reader). A client that
//! decided to write keeps trying with
//! the same nonce until it gets in, re-asserting its intent (a short lease, half the race's
//! lease) with every refused attempt, as a waiting [`RwLock::write`](tairlock_rwlock::RwLock::write)
//! does; new readers stay out meanwhile. A crashed reader blocks writers until its own lease
//! ends; writers carry fencing tokens.
//!
//! In `rw-fair-writers` the writers queue on the server, and a write release hands the lock to
//! the first live queued writer in the same step. Each refused write attempt refreshes the
//! writer's place (a waiter lease of three race leases, as the `fair-expire-lock` row's) and,
//! under writer preference, the intent naming the first queued writer (for as long); a repeat
//! finds a grant a release made to it. A crashed writer's place, and a grant made to it, lapse
//! with its waiter lease. A refused fair writer waits as the library's waiting calls do:
//! subscribed to its wake channel before each attempt, it attempts again as soon as a message
//! comes there (a grant, or the last reader gone), and otherwise refreshes its place (and its
//! intent) within a third of its waiter lease.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::{Keyspace, Lease, Store};
use tairlock_rwlock::{Options, ReadAttempt, RwLock, WriteAttempt};

use super::wake::Wake;
use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, RaceStore, Step};

/// The prefix of a reader's holding value; the rest is its nonce.
const READ_MARK: &str = "read:";

/// The waiter lease of the race's fair writers, and the lease of their intent: three race
/// leases (300 ms at the default lease, the `fair-expire-lock` row's waiter lease), so a crashed
/// waiter holds the queue up for a few leases.
///
/// A waiting writer refreshes both within a third of it, and each refresh passes a pause point
/// where a scenario may stall it. Refreshed more often (with a waiter lease and an intent of
/// half a lease: every 17 ms), the head of the queue spent about 40% of its wait stalled there
/// under `short-stalls` (a fifth of the refreshes stall, for 20 to 90 ms), and a grant or a free
/// lock waited for it: half the row's handoffs measured those stalls, not the handoff.
fn waiter_lease(ttl: Duration) -> Duration {
    ttl * 3
}

/// The `rw-scripted` row of `tairlock race` ([`default`](Default::default)), or the
/// `rw-fair-writers` row ([`fair_writers`](Self::fair_writers)).
#[derive(Debug, Default)]
pub struct RwScripted {
    /// Whether the writers are in fair mode.
    fair: bool,
    /// The nonce of each client's write acquisition in progress, by (lock, client).
    writing: Mutex<HashMap<(String, usize), String>>,
    /// The nonce of each client's read attempt that got no answer, by (lock, client): the
    /// next attempt repeats it.
    reading: Mutex<HashMap<(String, usize), String>>,
}

impl RwScripted {
    /// The `rw-fair-writers` row: the same lock with its writers in fair mode.
    pub fn fair_writers() -> Self {
        RwScripted {
            fair: true,
            ..RwScripted::default()
        }
    }

    fn locks<S: Store>(&self, cx: &Client<S>, ttl: Duration) -> RwLock<RaceStore<S>> {
        // The race names its keys itself: no prefix, the race key is the lock name's hash tag.
        let keyspace = Keyspace::new("").expect("empty prefix is valid");
        let options = Options::default().keyspace(keyspace).intent_lease(ttl / 2);
        let options = if self.fair {
            options
                .fair(true)
                .waiter_lease(waiter_lease(ttl))
                .intent_lease(waiter_lease(ttl))
        } else {
            options
        };
        RwLock::with_options(cx.store().clone(), options)
    }

    /// Client `cx`'s handle for its fair writes (one for the trial: its wake channel is the
    /// handle's), subscribed to that channel for `lock` before the attempt.
    async fn listen<S: Store>(
        &self,
        cx: &Client<S>,
        lock: &str,
        ttl: Duration,
    ) -> Step<RwLock<RaceStore<S>>> {
        let listener = listener(cx, || self.locks(cx, ttl));
        let rw = &listener.rw;
        Wake::listen(&listener.wake, cx, || rw.fair_wake_channel(lock)).await?;
        Ok(listener.rw.clone())
    }

    /// A pause point that forgets this client's acquisition in progress if the client dies
    /// there.
    async fn pause<S: Store>(&self, cx: &Client<S>, lock: &str, point: &'static str) -> Step<()> {
        let paused = cx.pause(point).await;
        if paused.is_err() {
            let key = (lock.to_owned(), cx.id());
            self.writing.lock().remove(&key);
            self.reading.lock().remove(&key);
        }
        paused
    }
}

/// A fair writer's handle for the trial, and its subscription to its wake channel.
struct Listener<S: Store> {
    rw: RwLock<RaceStore<S>>,
    wake: Mutex<Wake>,
}

fn listener<S: Store>(
    cx: &Client<S>,
    rw: impl FnOnce() -> RwLock<RaceStore<S>>,
) -> Arc<Listener<S>> {
    cx.keep(|| {
        Arc::new(Listener {
            rw: rw(),
            wake: Mutex::default(),
        })
    })
}

impl<S: Store> Algorithm<S> for RwScripted {
    fn name(&self) -> &'static str {
        if self.fair {
            "rw-fair-writers"
        } else {
            "rw-scripted"
        }
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
            let rw = self.locks(cx, ttl);
            let key = (lock.to_owned(), cx.id());
            let pending = self.writing.lock().get(&key).cloned();
            let unanswered = self.reading.lock().get(&key).cloned();
            let write = unanswered.is_none()
                && (pending.is_some() || cx.with_rng(|rng| rand::Rng::random_bool(rng, 0.25)));
            if !write {
                self.pause(cx, lock, "read:before-acquire").await?;
                let nonce = unanswered.unwrap_or_else(tairlock::new_nonce);
                self.reading.lock().insert(key.clone(), nonce.clone());
                let attempt = rw.read_acquire(lock, &nonce, ttl).await?;
                self.reading.lock().remove(&key);
                return match attempt {
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
            let rw = if self.fair {
                self.listen(cx, lock, ttl).await?
            } else {
                rw
            };
            self.pause(cx, lock, "write:before-acquire").await?;
            let attempt = if self.fair {
                rw.fair_write_acquire(lock, &nonce, ttl, Some(waiter_lease(ttl)), true)
                    .await?
            } else {
                rw.write_acquire(lock, &nonce, ttl, Some(ttl / 2)).await?
            };
            match attempt {
                WriteAttempt::Acquired(lease) => {
                    self.writing.lock().remove(&key);
                    Ok(Attempt::Acquired(Holding {
                        value: lease.lease().value().as_bytes().to_vec(),
                        fence: Some(lease.fence()),
                        deadline: lease.deadline(),
                    }))
                }
                // A fair writer refreshes its place well within the waiter lease (which also
                // finds a grant).
                WriteAttempt::Blocked { remaining, .. } if self.fair => Ok(Attempt::Busy {
                    retry_after: Some(
                        remaining
                            .unwrap_or(waiter_lease(ttl))
                            .min(waiter_lease(ttl) / 3),
                    ),
                }),
                WriteAttempt::Blocked { remaining, .. } => Ok(Attempt::Busy {
                    retry_after: remaining,
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
            let rw = self.locks(cx, cx.plan().lease);
            cx.pause("release:before").await?;
            let value = String::from_utf8(holding.value).expect("holdings are text");
            match value.strip_prefix(READ_MARK) {
                Some(nonce) => {
                    rw.read_release(lock, nonce).await?;
                }
                None => {
                    let lease = Lease::parse(&value).expect("our own lease parses");
                    // Compare-and-delete (for fair writers, then a grant to the first live
                    // queued writer in the same step): it can only ever delete this very lease.
                    if self.fair {
                        rw.fair_write_release(lock, &lease).await?;
                    } else {
                        rw.write_release(lock, &lease).await?;
                    }
                }
            }
            Ok(())
        })
    }

    fn woken<'a>(&'a self, cx: &'a Client<S>, lock: &'a str) -> Option<BoxFuture<'a, ()>> {
        // A fair writer waiting for its turn (readers poll).
        if !self.fair
            || !self
                .writing
                .lock()
                .contains_key(&(lock.to_owned(), cx.id()))
        {
            return None;
        }
        listener(cx, || self.locks(cx, cx.plan().lease))
            .wake
            .lock()
            .message()
    }

    fn is_shared(&self, holding: &Holding) -> bool {
        holding.value.starts_with(READ_MARK.as_bytes())
    }

    /// A writer's lease is the writer key's value; a reader's, its member of the readers' set.
    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        Some(match holding.value.strip_prefix(READ_MARK.as_bytes()) {
            Some(nonce) => LeaseAt::Member {
                key: format!("{{{lock}}}:r"),
                member: nonce.to_vec(),
            },
            None => LeaseAt::Value {
                key: format!("{{{lock}}}:w"),
                value: holding.value.clone(),
            },
        })
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        let queue: &[&str] = if self.fair { &[":wq", ":ww"] } else { &[] };
        [":w", ":r", ":wi", ":fence"]
            .iter()
            .chain(queue)
            .map(|suffix| format!("{{{lock}}}{suffix}"))
            .collect()
    }
}
