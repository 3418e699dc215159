//! `legacy-getset`: the jeffkit SETNX/GETSET lock of `tairlock-legacy`, verbatim.
//!
//! ```text
//! acquire:  SETNX key ts           -- 1: ours
//!           GET key                -- expired by *this client's* clock? ...
//!           GETSET key ts          -- ... then take it, if the old value was still expired
//! release:  GET key                -- now < stored value? (anyone's value) ...
//!           DEL key                -- ... then delete, whatever the key holds by then
//! ```
//!
//! Timestamps in milliseconds (so the race's 100 ms lease works), each client's clock from the
//! race (skewed in `clock-skew`), a pause point before every command. Flaws the race provokes:
//! a fast clock takes live locks over (F2, overlaps, then its release deletes the other's lock);
//! a release paused past the lease deletes the next holder's lock (F4, F4b); a losing `GETSET`
//! shortens the winner's lease (F3); no fencing token (stale writes accepted). Its keys never
//! carry a TTL, yet a key a crashed or expired holder left behind is not stuck: any client takes
//! it over by its timestamp once that passes. Only a value that is not a timestamp would stop
//! everyone, and only that counts in `stuck_locks`.

use std::time::Duration;

use tairlock::Store;
use tairlock_legacy::wire::parse_value;
use tairlock_legacy::{GetSetLock, Options, TryAcquire, Unit};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, RaceStore, Step};

/// The `legacy-getset` row of the race; the module docs say what it provokes.
#[derive(Debug, Clone, Copy, Default)]
pub struct LegacyGetSet;

fn locks<S: Store>(cx: &Client<S>) -> GetSetLock<RaceStore<S>> {
    let options = Options::default()
        .unit(Unit::Millis)
        .clock(cx.clock().clone());
    GetSetLock::with_options(cx.store().clone(), options)
}

impl<S: Store> Algorithm<S> for LegacyGetSet {
    fn name(&self) -> &'static str {
        "legacy-getset"
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
            let locks = locks(cx);
            let mut attempt = locks.attempt(lock, ttl)?;
            let outcome = loop {
                cx.pause(match attempt.next_command() {
                    Some("SETNX") => "acquire:before-setnx",
                    Some("GET") => "acquire:before-get",
                    _ => "acquire:before-getset",
                })
                .await?;
                if let Some(outcome) = attempt.step().await? {
                    break outcome;
                }
            };
            Ok(match outcome {
                TryAcquire::Acquired(h) => Attempt::Acquired(Holding {
                    value: h.value_text().into_bytes(),
                    fence: None,
                    deadline: h.deadline(),
                }),
                // The original just polls; the engine's back-off stands in for its 10 ms.
                TryAcquire::Busy { .. } => Attempt::Busy { retry_after: None },
            })
        })
    }

    /// Its key has no TTL: the server never ends the lease (the audit reads it as never
    /// ending), the other clients' clocks do.
    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        Some(LeaseAt::Value {
            key: lock.to_owned(),
            value: holding.value.clone(),
        })
    }

    fn stuck<'a>(&'a self, store: &'a S, lock: &'a str) -> BoxFuture<'a, tairlock::Result<u64>> {
        Box::pin(async move {
            let value = store.get(lock).await?;
            Ok(u64::from(value.is_some_and(|v| parse_value(&v).is_none())))
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        _holding: Holding,
    ) -> BoxFuture<'a, Step<()>> {
        Box::pin(async move {
            let locks = locks(cx);
            // The original's release takes only the key (F4b).
            let mut release = locks.release_attempt(lock);
            loop {
                cx.pause(match release.next_command() {
                    Some("GET") => "release:before-get",
                    _ => "release:between-get-and-del",
                })
                .await?;
                if release.step().await?.is_some() {
                    return Ok(());
                }
            }
        })
    }
}
