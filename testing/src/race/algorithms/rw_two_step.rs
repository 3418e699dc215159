//! `rw-two-step`: the two-step Tair reader/writer recipe, verbatim
//! ([`TwoStepRwLock`]), its steps interleaved by the scenario.
//!
//! ```text
//! reader:  expireUnlock(w, now)  -- probe: "unlock" the write lock as of my clock's now
//!          INCR rc               -- ... read ...
//!          DECR rc
//! writer:  GET rc == 0 ?         -- nobody reading?
//!          expireLock(w, ttl)    -- SET w <my clock + ttl> NX PX ttl ... write ...
//!          expireUnlock(w, E)
//! ```
//!
//! Three attempts in four read, one writes. Flaws the race provokes: a stall between a
//! reader's probe and its `INCR`, or between a writer's `GET rc` and its `expireLock`, lets a
//! reader and a writer in together (I, II: overlaps); a reader that crashes inside leaves `rc`
//! above 0 with no TTL, so no writer can ever get in again (III: a stuck lock); a reader whose
//! clock runs ahead deletes a live writer's lock with its probe (IV: foreign deletions and
//! overlaps under clock skew); no fencing token.

use std::time::Duration;

use tairlock::{Keyspace, Store, Ttl};
use tairlock_rwlock::{TwoStepRwLock, TwoStepWrite};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, RaceStore, Step};

/// The value a reader's holding carries: it is in no key, so it never matches a deletion.
const READ_MARK: &[u8] = b"read:";

/// The `rw-two-step` row of `tairlock race`.
#[derive(Debug, Clone, Copy, Default)]
pub struct RwTwoStep;

fn recipe<S: Store>(cx: &Client<S>) -> TwoStepRwLock<RaceStore<S>> {
    // The race names its keys itself: no prefix, the race key is the lock name's hash tag.
    let keyspace = Keyspace::new("").expect("empty prefix is valid");
    TwoStepRwLock::with_keyspace(cx.store().clone(), cx.clock().clone(), keyspace)
}

impl<S: Store> Algorithm<S> for RwTwoStep {
    fn name(&self) -> &'static str {
        "rw-two-step"
    }

    fn expectation(&self) -> Expectation {
        Expectation::Flawed
    }

    fn fenced(&self) -> bool {
        false
    }

    fn try_acquire<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Step<Attempt>> {
        Box::pin(async move {
            let recipe = recipe(cx);
            let read = cx.with_rng(|rng| rand::Rng::random_bool(rng, 0.75));
            if read {
                cx.pause("read:before-probe").await?;
                if !recipe.probe_writer(lock).await? {
                    return Ok(Attempt::Busy { retry_after: None });
                }
                cx.pause("read:between-probe-and-incr").await?;
                recipe.enter_read(lock).await?;
                let mut value = READ_MARK.to_vec();
                value.extend_from_slice(cx.unique_token().as_bytes());
                return Ok(Attempt::Acquired(Holding {
                    value,
                    fence: None,
                    // A two-step reader has no lease at all; the race's lease is its budget.
                    deadline: tokio::time::Instant::now() + ttl,
                }));
            }
            cx.pause("write:before-count").await?;
            if recipe.reader_count(lock).await? != 0 {
                return Ok(Attempt::Busy { retry_after: None });
            }
            cx.pause("write:between-count-and-lock").await?;
            let sent = tokio::time::Instant::now();
            match recipe.expire_lock(lock, ttl).await? {
                Some(write) => Ok(Attempt::Acquired(Holding {
                    value: write.expiry_ms().to_string().into_bytes(),
                    fence: None,
                    // `SET NX PX` lands after it was sent: its lease ends no earlier (less the
                    // drift every deadline allows for).
                    deadline: crate::race::algorithm::sent_plus(sent, ttl),
                })),
                None => Ok(Attempt::Busy { retry_after: None }),
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
            let recipe = recipe(cx);
            if holding.value.starts_with(READ_MARK) {
                cx.pause("read:before-decr").await?;
                recipe.exit_read(lock).await?;
                return Ok(());
            }
            cx.pause("write:before-unlock").await?;
            let expiry = std::str::from_utf8(&holding.value)
                .ok()
                .and_then(|v| v.parse().ok())
                .expect("a writer's holding is its expiry");
            // Threshold unlock: deletes the lock if it expires no later than ours did.
            recipe
                .write_unlock(lock, &TwoStepWrite::new(expiry))
                .await?;
            Ok(())
        })
    }

    fn is_shared(&self, holding: &Holding) -> bool {
        holding.value.starts_with(READ_MARK)
    }

    /// A writer's lease is its key's; a reader has none (a count without a TTL).
    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        (!holding.value.starts_with(READ_MARK)).then(|| LeaseAt::Value {
            key: format!("{{{lock}}}:w"),
            value: holding.value.clone(),
        })
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        vec![format!("{{{lock}}}:w"), format!("{{{lock}}}:rc")]
    }

    /// Stuck: the write lock never expires (it always has a TTL), or the reader count is left
    /// above (or below) 0 with no TTL — then `GET rc == 0` is never true again.
    fn stuck<'a>(&'a self, store: &'a S, lock: &'a str) -> BoxFuture<'a, tairlock::Result<u64>> {
        Box::pin(async move {
            let (writer, count) = (format!("{{{lock}}}:w"), format!("{{{lock}}}:rc"));
            let mut stuck = 0;
            if store.pttl(&writer).await? == Ttl::Persistent {
                stuck += 1;
            }
            let pinned = store
                .get(&count)
                .await?
                .is_some_and(|v| v.as_slice() != b"0");
            if pinned && store.pttl(&count).await? == Ttl::Persistent {
                stuck += 1;
            }
            Ok(stuck)
        })
    }
}
