//! The batched watchdog: one task per lock handle renews the leases of every guard made by it
//! (and its clones), many leases per script call.
//!
//! A task per guard costs one timer and one script call per lease per renewal: 100,000 leases
//! of 3 s are 100,000 calls a second, a Redis core's whole capacity. Here the guards of one
//! [`ExpireLock`](crate::ExpireLock) handle wait in one queue ordered by when each is due;
//! one task on the store's runtime wakes when the first is due, takes every lease due within a
//! short window, and renews them with [`RENEW_MANY`]: up to [`BATCH`] leases per call on a store
//! whose keys all live on one server ([`Store::single_shard`]), the leases of one hash slot per
//! call otherwise. The calls of one round (at most [`ROUND`] leases) are sent together
//! (pipelined on the connection).
//!
//! Each lease keeps the rules of a guard's own watchdog ([`Liveness`]): its renewal is an
//! attempt with a nonce, repeated with the same nonce while no answer came; its outcome is
//! decoded on its own and its deadline is the [deadline rule](crate::deadline)'s, from the
//! first send of its attempt and the time the batch's answer reports for that lease; a lease
//! found gone or taken is lost for its own guard only, and a lease whose renewals go unanswered
//! is lost once its own deadline passes.
//!
//! A renewal refreshes the lock's fence key (which must outlive the lease by the fencing
//! retention) only when the guard's record of it says it might not: the record is the fence
//! key's time left as the last refresh's answer reported it, dated by the same rule, and unknown
//! until a first refresh. So a lease's fence key is read and written about once per half
//! retention rather than at every renewal. Each call's keys and arguments are written into one
//! buffer each ([`Packed`]), and a renewed lease is rewritten in place.
//!
//! [`Liveness`]: super::Liveness

use std::any::Any;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::Shared;
use super::queue::{Entry, Renewer};
use crate::deadline::{Remaining, local_deadline};
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::MAX_TTL;
use crate::observe::Loss;
use crate::script::{Packed, Reply, unexpected};
use crate::scripts::RENEW_MANY;
use crate::store::Store;

/// The most leases one [`RENEW_MANY`] call carries (about half a millisecond of server time).
pub(crate) const BATCH: usize = 256;

/// The most leases one round sends (its calls go out together): a watchdog that fell behind
/// renews the most urgent first, with bounded memory, rather than everything due at once.
const ROUND: usize = 16 * BATCH;

/// How much earlier than due a lease may be renewed to join a batch: at most this, and at most
/// a quarter of its renewal interval.
const WINDOW: Duration = Duration::from_millis(100);

/// The guard's entry in the queue.
fn entry<S: Store>(shared: &Arc<Shared<S>>) -> Entry {
    let any: Arc<dyn Any + Send + Sync> = shared.clone();
    Arc::downgrade(&any)
}

/// The guard behind `entry`, if it still lives (every entry of one queue is of one store type:
/// the queue belongs to one lock handle).
fn guard<S: Store>(entry: &Entry) -> Option<Arc<Shared<S>>> {
    entry.upgrade()?.downcast::<Shared<S>>().ok()
}

impl Renewer {
    /// Queue `shared`'s lease for renewal at `at`, starting the task if it is not running.
    pub(crate) fn schedule<S: Store>(self: &Arc<Self>, shared: &Arc<Shared<S>>, at: Instant) {
        let mut state = self.state.lock();
        let first = state.due.first_key_value().map(|((t, _), _)| *t);
        state.insert(at, entry(shared));
        // A runtime shut down ends its tasks: a new one is started on the next registration.
        if state.task.as_ref().is_none_or(JoinHandle::is_finished) {
            let store = shared.locks.store();
            let task = crate::blocking::spawn_handle(store.runtime())
                .spawn(run::<S>(self.clone(), store.single_shard()));
            state.task = Some(task);
        } else if first.is_none_or(|first| at < first) {
            self.wake.notify_one();
        }
    }

    /// Put back leases to renew later.
    fn schedule_all<S: Store>(&self, later: Vec<(Instant, Arc<Shared<S>>)>) {
        let mut state = self.state.lock();
        for (at, shared) in later {
            state.insert(at, entry(&shared));
        }
    }

    /// The leases due now (within their window), or when the first one is due; `None` (and the
    /// task is over) when nothing is queued.
    fn take_due<S: Store>(
        &self,
        now: Instant,
    ) -> Option<std::result::Result<Vec<Arc<Shared<S>>>, Instant>> {
        let mut state = self.state.lock();
        let Some(((first, _), _)) = state.due.first_key_value() else {
            state.task = None;
            return None;
        };
        if *first > now {
            return Some(Err(*first));
        }
        let mut taken = Vec::new();
        let mut early = Vec::new();
        while let Some(entry) = state.due.first_entry() {
            let (at, _) = *entry.key();
            if at > now + WINDOW || taken.len() >= ROUND {
                break;
            }
            let Some(shared) = guard::<S>(&entry.remove()) else {
                continue;
            };
            if shared.live.is_stopped() {
                continue;
            }
            if at > now + (shared.ttl / 12).min(WINDOW) {
                early.push((at, shared));
            } else {
                taken.push(shared);
            }
        }
        for (at, shared) in early {
            state.insert(at, entry(&shared));
        }
        Some(Ok(taken))
    }
}

/// The task: renew what is due, sleep until the next is, end when nothing is queued.
async fn run<S: Store>(renewer: Arc<Renewer>, single_shard: bool) {
    loop {
        let due = match renewer.take_due::<S>(Instant::now()) {
            None => return,
            Some(Err(first)) => {
                tokio::select! {
                    () = tokio::time::sleep_until(first) => {}
                    () = renewer.wake.notified() => {}
                }
                continue;
            }
            Some(Ok(due)) => due,
        };
        let batches = batches(due, single_shard);
        let rounds = futures_util::future::join_all(batches.into_iter().map(renew)).await;
        renewer.schedule_all(rounds.into_iter().flatten().collect());
    }
}

/// Split `due` into the batches of one call each: [`BATCH`] leases at most, and one hash slot
/// each unless the store is one server.
fn batches<S: Store>(mut due: Vec<Arc<Shared<S>>>, single_shard: bool) -> Vec<Vec<Arc<Shared<S>>>> {
    if single_shard {
        let mut out = Vec::with_capacity(due.len().div_ceil(BATCH));
        while !due.is_empty() {
            let rest = due.split_off(due.len().min(BATCH));
            out.push(std::mem::replace(&mut due, rest));
        }
        return out;
    }
    let mut by_slot: BTreeMap<u16, Vec<Arc<Shared<S>>>> = BTreeMap::new();
    for shared in due {
        // The lock's keys share its hash tag: the slot of the name's tag is theirs.
        let slot = match shared.locks.keys(&shared.name) {
            Ok(keys) => crate::slot::key_slot(&keys.lock),
            Err(_) => 0,
        };
        by_slot.entry(slot).or_default().push(shared);
    }
    by_slot
        .into_values()
        .flat_map(|slot| batches(slot, true))
        .collect()
}

/// What one lease of a batch found.
enum Found {
    /// Renewed to expire at `expiry` (server ms), with `remaining` left as the reply reports,
    /// and the fence key's time left when the call refreshed it.
    Renewed {
        expiry: u64,
        remaining: Remaining,
        fence: Option<Remaining>,
    },
    Gone(Loss),
    Refused(Error),
}

/// Renew one batch (one call); return the leases to renew again, with when.
async fn renew<S: Store>(members: Vec<Arc<Shared<S>>>) -> Vec<(Instant, Arc<Shared<S>>)> {
    let mut later = Vec::with_capacity(members.len());
    // Each lease's renewal lock, held for the call: a release waits for the answer (so it
    // deletes the lease in effect), and a lease another renewal holds (a caller's `renew`) is
    // put back briefly.
    let locked: Vec<_> = members.iter().map(|m| m.live.try_renewing()).collect();
    let mut sent = Vec::with_capacity(members.len());
    // Every key and argument is written into one buffer each (six strings per lease).
    let mut keys = Packed::with_capacity(2 * members.len(), 48 * members.len());
    let mut args = Packed::with_capacity(1 + 3 * members.len(), 96 * members.len());
    for (shared, lock) in members.iter().zip(&locked) {
        if lock.is_none() {
            later.push((Instant::now() + shared.retry_pause(), shared.clone()));
            continue;
        }
        if shared.live.is_stopped() {
            continue;
        }
        // Past `Options::max_hold`, renew no more; before it, never past it.
        let Some(ttl) = shared.live.capped_ttl(shared.ttl) else {
            continue;
        };
        if args.is_empty() {
            args.push(&shared.locks.retention_ms());
        }
        let retention = shared.locks.options().fence_retention.min(MAX_TTL);
        // The lock's two keys (its name was checked when it was acquired).
        let keyspace = &shared.locks.options().keyspace;
        keys.push_concat(&keyspace.key_parts(&shared.name, ""));
        keys.push_concat(&keyspace.key_parts(&shared.name, ":fence"));
        // The lease's value goes into the call as it is (its renewal keeps its fence).
        args.push(shared.lease.lock().value());
        let (first_sent, ttl_ms) = shared.live.renewal_attempt_with(ttl, |attempt| {
            // Whole milliseconds, rounded up (as every lease length is sent); at least 1 ms,
            // and no longer than the guard's lease, which was checked when it was acquired.
            let ttl_ms = attempt.ttl.as_micros().div_ceil(1000).max(1) as u64;
            args.push_fmt(format_args!("{ttl_ms}"));
            args.push(&attempt.nonce);
            (attempt.sent, ttl_ms)
        });
        let nonce_arg = args.len() - 1;
        // The fence key is refreshed when it might not outlive the renewed lease by the
        // retention (its time left as the last refresh reported it; unknown at first).
        let lasts = Duration::from_millis(ttl_ms) + retention;
        let fence_until = *shared.fence_until.lock();
        let refresh = fence_until.is_none_or(|until| until < Instant::now() + lasts);
        args.push(if refresh { "1" } else { "0" });
        sent.push(Sent {
            shared,
            first_sent,
            nonce_arg,
        });
    }
    let Some(first) = sent.first() else {
        return later;
    };
    let call = first
        .shared
        .locks
        .eval_packed_retrying(&RENEW_MANY, &keys, &args);
    let mut call = std::pin::pin!(call);
    // Not answered by the earliest deadline of the batch (a paused or unreachable server):
    // the leases past theirs are lost then, and the answer is still awaited.
    let earliest = sent.iter().filter_map(|s| s.shared.live.deadline()).min();
    let reply = match earliest {
        Some(deadline) => tokio::select! {
            reply = call.as_mut() => reply,
            () = tokio::time::sleep_until(deadline) => {
                for Sent { shared, .. } in &sent {
                    if shared.live.past_deadline() {
                        shared.live.lose(Loss::Deadline);
                    }
                }
                call.await
            }
        },
        None => call.await,
    };
    let found = reply.and_then(|reply| decode(&reply, &sent));
    let now = Instant::now();
    match found {
        Err(e) => {
            let outcome: Result<()> = Err(e);
            for Sent { shared, .. } in sent {
                // Unanswered: the attempt stays pending, repeated with its nonce.
                shared.live.renewal_outcome(&outcome);
                if shared.live.past_deadline() {
                    shared.live.lose(Loss::Deadline);
                } else {
                    later.push((now + shared.retry_pause(), shared.clone()));
                }
            }
        }
        Ok(found) => {
            for (sent, found) in sent.into_iter().zip(found) {
                let Sent {
                    shared,
                    first_sent,
                    nonce_arg,
                    ..
                } = sent;
                match found {
                    Found::Renewed {
                        expiry,
                        remaining,
                        fence,
                    } => {
                        shared.live.renewal_outcome(&Ok(()));
                        if let Some(fence) = fence {
                            *shared.fence_until.lock() = Some(local_deadline(first_sent, fence));
                        }
                        let renewal = shared.adopt_renewal(
                            expiry,
                            nonce_of(&args, nonce_arg),
                            first_sent,
                            remaining,
                        );
                        if renewal == super::Renewal::Renewed {
                            // A repeat's lease has less left than a fresh one (it runs from the
                            // first send): the next renewal comes sooner then.
                            let left = shared
                                .live
                                .deadline()
                                .map_or(Duration::ZERO, |d| d.saturating_duration_since(now));
                            later.push((now + (shared.ttl / 3).min(left / 2), shared.clone()));
                        }
                    }
                    Found::Gone(reason) => {
                        shared.live.renewal_outcome(&Ok(()));
                        shared.live.lose(reason);
                    }
                    Found::Refused(e) => {
                        shared.live.renewal_outcome::<()>(&Err(e));
                        if shared.live.past_deadline() {
                            shared.live.lose(Loss::Deadline);
                        } else {
                            later.push((now + shared.retry_pause(), shared.clone()));
                        }
                    }
                }
            }
        }
    }
    drop(locked);
    later
}

/// One lease of a batch as sent.
struct Sent<'a, S> {
    shared: &'a Arc<Shared<S>>,
    /// When the first request of this attempt (this nonce) was sent.
    first_sent: Instant,
    /// Where the attempt's nonce is among the call's arguments.
    nonce_arg: usize,
}

/// The nonce of the lease sent at `nonce_arg`.
fn nonce_of(args: &Packed, nonce_arg: usize) -> &str {
    args.get(nonce_arg).unwrap_or_default()
}

/// Decode a [`RENEW_MANY`] reply: each lease's outcome; a renewed lease's expiry and the time
/// the reply reports it has left (its deadline is dated from the first send of its attempt).
fn decode<S>(reply: &Reply, sent: &[Sent<'_, S>]) -> Result<Vec<Found>> {
    let Reply::Array(items) = reply else {
        return Err(unexpected(&RENEW_MANY, reply));
    };
    if items.len() != 4 * sent.len() {
        return Err(unexpected(&RENEW_MANY, reply));
    }
    let mut out = Vec::with_capacity(sent.len());
    for item in items.chunks(4) {
        let int = |i: usize| {
            item[i]
                .as_int()
                .ok_or_else(|| unexpected(&RENEW_MANY, reply))
        };
        out.push(match int(0)? {
            1 => Found::Renewed {
                expiry: u64::try_from(int(1)?).map_err(|_| unexpected(&RENEW_MANY, reply))?,
                remaining: Remaining::from_server_ms(int(2)?)
                    .ok_or_else(|| unexpected(&RENEW_MANY, reply))?,
                // 0: not refreshed by this call.
                fence: match int(3)? {
                    0 => None,
                    ms => Some(
                        Remaining::from_server_ms(ms)
                            .ok_or_else(|| unexpected(&RENEW_MANY, reply))?,
                    ),
                },
            },
            0 => Found::Gone(Loss::HeldByOther),
            -1 => Found::Gone(Loss::Gone),
            -2 => Found::Refused(Error::new(
                ErrorKind::WrongType,
                "a key of the lock holds data that is not a tairlock lease",
            )),
            _ => return Err(unexpected(&RENEW_MANY, reply)),
        });
    }
    Ok(out)
}
