//! `legacy-watch`: `tairlock-legacy`'s `WatchLock`, compare-and-set with `WATCH`/`MULTI`/`EXEC`
//! and no scripts, on the legacy wire format (a bare millisecond timestamp under the lock key).
//! Expiry by the server's TTL and `TIME`; owner-checked release; the fencing token moves in the
//! acquiring transaction. Pause points sit between the watched reads and the `EXEC`, where a
//! stall lets others write: the `EXEC` then aborts and the operation reads again.

use std::time::Duration;

use tairlock_legacy::wire::fence_key;
use tairlock_legacy::{Options, TryAcquire, Unit, WatchLock, WatchStore};

use super::legacy_scripted::legacy_holding;
use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, RaceStore, Step};

/// The `legacy-watch` row of the race: `WatchLock` with millisecond timestamps.
#[derive(Debug, Clone, Copy, Default)]
pub struct LegacyWatch;

fn locks<S: WatchStore>(cx: &Client<S>) -> WatchLock<RaceStore<S>> {
    let options = Options::default()
        .unit(Unit::Millis)
        .clock(cx.clock().clone());
    WatchLock::with_options(cx.store().clone(), options)
}

fn point(step: Option<&'static str>, acquire: bool) -> &'static str {
    match (step, acquire) {
        (Some("WATCH"), true) => "acquire:before-watch",
        (_, true) => "acquire:before-exec",
        (Some("WATCH"), false) => "release:before-watch",
        (_, false) => "release:before-exec",
    }
}

impl<S: WatchStore> Algorithm<S> for LegacyWatch {
    fn name(&self) -> &'static str {
        "legacy-watch"
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
            let locks = locks(cx);
            let mut attempt = locks.attempt(lock, ttl)?;
            let outcome = loop {
                cx.pause(point(attempt.next_step(), true)).await?;
                if let Some(outcome) = attempt.step().await? {
                    break outcome;
                }
            };
            Ok(match outcome {
                TryAcquire::Acquired(h) => Attempt::Acquired(Holding {
                    value: h.value_text().into_bytes(),
                    fence: h.fence(),
                    deadline: h.deadline(),
                }),
                TryAcquire::Busy { remaining, .. } => Attempt::Busy {
                    retry_after: remaining,
                },
            })
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        holding: Holding,
    ) -> BoxFuture<'a, Step<()>> {
        Box::pin(async move {
            let locks = locks(cx);
            let held = legacy_holding(lock, &holding);
            let mut release = locks.release_attempt(&held)?;
            loop {
                cx.pause(point(release.next_step(), false)).await?;
                if release.step().await?.is_some() {
                    return Ok(());
                }
            }
        })
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        vec![lock.to_owned(), fence_key(lock)]
    }

    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        Some(LeaseAt::Value {
            key: lock.to_owned(),
            value: holding.value.clone(),
        })
    }
}
