//! `legacy-scripted`: `tairlock-legacy`'s `ScriptedLock`, one script per operation on the
//! legacy wire format (a bare millisecond timestamp under the lock key), expiry by server time,
//! compare-and-delete release, a fencing token moved in the acquiring script.

use std::time::Duration;

use tairlock::Store;
use tairlock_legacy::wire::fence_key;
use tairlock_legacy::{Options, ScriptedLock, TryAcquire, Unit};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, RaceStore, Step};

/// The `legacy-scripted` row of the race: `ScriptedLock` with millisecond timestamps.
#[derive(Debug, Clone, Copy, Default)]
pub struct LegacyScripted;

fn locks<S: Store>(cx: &Client<S>) -> ScriptedLock<RaceStore<S>> {
    // The client clock is handed over but never read: the scripts judge by server time.
    let options = Options::default()
        .unit(Unit::Millis)
        .clock(cx.clock().clone());
    ScriptedLock::with_options(cx.store().clone(), options)
}

impl<S: Store> Algorithm<S> for LegacyScripted {
    fn name(&self) -> &'static str {
        "legacy-scripted"
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
            cx.pause("acquire:before").await?;
            Ok(match locks(cx).try_acquire(lock, ttl).await? {
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
            cx.pause("release:before").await?;
            let held = legacy_holding(lock, &holding);
            // Compare-and-delete of (timestamp, TTL, fencing token): only this very grant.
            locks(cx).release(&held).await?;
            Ok(())
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

/// The legacy holding back from the race's record of it.
pub(super) fn legacy_holding(lock: &str, holding: &Holding) -> tairlock_legacy::Holding {
    let value = std::str::from_utf8(&holding.value)
        .ok()
        .and_then(|v| v.parse().ok())
        .expect("a legacy holding's value is a decimal timestamp");
    tairlock_legacy::Holding::new(lock, value, Unit::Millis, holding.fence)
}
