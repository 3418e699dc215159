//! `semaphore`: the core crate's counting semaphore ([`Semaphore`]) with
//! [`LIMIT`] permits among the race's clients, one script per step, a lease per holder judged
//! by server time.
//!
//! Each client takes one permit; an attempt that got no answer is repeated with the same nonce. Its overlap is an acquisition that finds [`LIMIT`] holders
//! inside already: more than N at once, the semaphore's one safety property. Up to N holders
//! are meant to be inside together, so they write nothing to the race's single fenced resource
//! (whose check is for one holder at a time); each holding still carries its fencing token. A
//! crashed holder's permit comes back when its lease ends; a holder's removal by another
//! client is no string change the race's audit sees (as a reader's), so it is checked by the
//! loom model (`loom_semaphore_holds`), not here.

use std::collections::HashMap;
use std::time::Duration;

use tairlock::semaphore::PermitAttempt;
use tairlock::{Keyspace, Semaphore, SemaphoreOptions, Store};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, RaceStore, Step};

/// The permits of the race's semaphore.
pub const LIMIT: u32 = 3;

/// The prefix of a holding's value; the rest is the holder's nonce.
const MARK: &str = "permit:";

/// See the [module docs](self).
#[derive(Debug, Default)]
pub struct SemaphoreAlgorithm {
    /// The nonce of each client's attempt that got no answer, by (lock, client): the next
    /// attempt repeats it.
    unanswered: parking_lot::Mutex<HashMap<(String, usize), String>>,
}

fn semaphore<S: Store>(cx: &Client<S>) -> Semaphore<RaceStore<S>> {
    // The race names its keys itself: no prefix, the race key is the semaphore name's hash tag.
    let keyspace = Keyspace::new("").expect("empty prefix is valid");
    Semaphore::with_options(
        cx.store().clone(),
        LIMIT,
        SemaphoreOptions::default().keyspace(keyspace),
    )
}

impl<S: Store> Algorithm<S> for SemaphoreAlgorithm {
    fn name(&self) -> &'static str {
        "semaphore"
    }

    fn expectation(&self) -> Expectation {
        Expectation::Safe
    }

    fn fenced(&self) -> bool {
        true
    }

    fn capacity(&self) -> usize {
        LIMIT as usize
    }

    fn try_acquire<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Step<Attempt>> {
        Box::pin(async move {
            let key = (lock.to_owned(), cx.id());
            if let Err(crashed) = cx.pause("acquire:before").await {
                self.unanswered.lock().remove(&key);
                return Err(crashed);
            }
            let nonce = self
                .unanswered
                .lock()
                .entry(key.clone())
                .or_insert_with(tairlock::new_nonce)
                .clone();
            let attempt = semaphore(cx).attempt(lock, 1, ttl, &nonce).await?;
            self.unanswered.lock().remove(&key);
            match attempt {
                PermitAttempt::Acquired(permit) => Ok(Attempt::Acquired(Holding {
                    value: format!("{MARK}{nonce}").into_bytes(),
                    fence: Some(permit.fence),
                    deadline: permit.deadline,
                })),
                PermitAttempt::Busy { remaining, .. } => Ok(Attempt::Busy {
                    retry_after: Some(remaining).filter(|r| !r.is_zero()),
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
            cx.pause("release:before").await?;
            let value = String::from_utf8(holding.value).expect("holdings are text");
            let nonce = value.strip_prefix(MARK).expect("our own holding");
            // By nonce (the acquisition's own): it can only ever remove this very holder.
            semaphore(cx).abandon(lock, nonce).await?;
            Ok(())
        })
    }

    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        Some(LeaseAt::Member {
            key: format!("{{{lock}}}:sem"),
            member: holding.value.strip_prefix(MARK.as_bytes())?.to_vec(),
        })
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        [":sem", ":sem:h", ":sem:fence"]
            .iter()
            .map(|suffix| format!("{{{lock}}}{suffix}"))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use crate::race::{RaceConfig, run_embedded};

    #[test]
    fn the_semaphore_holds_its_zeros_in_every_scenario() {
        let config = RaceConfig {
            trials: 4,
            algorithms: vec!["semaphore".to_owned()],
            ..RaceConfig::default()
        };
        let rows = run_embedded(&config, |_| {}).unwrap();
        assert_eq!(rows.len(), 5);
        for row in &rows {
            assert!(row.acquisitions > 0, "{row:?}");
            assert!(!row.broken(), "{row:?}");
            assert_eq!(row.verdict, "ok", "{row:?}");
        }
        let long = rows.iter().find(|r| r.scenario == "long-stalls").unwrap();
        assert!(
            long.overlaps > 0,
            "long stalls put more than N holders inside with any lease: {long:?}"
        );
    }
}
