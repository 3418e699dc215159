//! `token-lock`: the core crate's `TokenLock`, the wire format of redis-py, node redlock and
//! redis-semaphore — and of [`naive-setnx-expire`](super::naive), its broken neighbour.
//!
//! Both rows keep a lock as a bare key holding the client's token, with a TTL. The format is not
//! what breaks the naive recipe; its steps are:
//!
//! | step | `naive-setnx-expire` | `token-lock` |
//! |---|---|---|
//! | acquire | `SETNX key token`, then `EXPIRE key ttl` (two round trips: a crash between them leaves a key without a TTL, stuck for ever) | `SET key token NX PX ttl` in one script (the key never exists without its TTL) |
//! | release | `GET key`, compare, then `DEL key` (a pause between them past the lease deletes the next holder's lock: a foreign deletion, then two holders) | compare-and-delete in one script: it deletes only this very token |
//! | fencing | none | a token from a side counter, moved in the acquiring script |
//!
//! So the format is safe only with exact, atomic steps: the race keeps this row's zeros (no
//! foreign deletion, no stuck lock, no stale write accepted, and no overlap but under long
//! stalls) in every scenario where the naive one shows its flaws.

use std::time::Duration;

use tairlock::{Store, TokenAttempt, TokenLock};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding};
use crate::race::client::{Client, RaceStore, Step};

/// See the [module docs](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenLockAlgorithm;

fn locks<S: Store>(cx: &Client<S>) -> TokenLock<RaceStore<S>> {
    TokenLock::new(cx.store().clone())
}

impl<S: Store> Algorithm<S> for TokenLockAlgorithm {
    fn name(&self) -> &'static str {
        "token-lock"
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
            // The same kind of token the naive row writes, under the same key.
            let token = cx.unique_token();
            cx.pause("acquire:before").await?;
            Ok(match locks(cx).attempt(lock, &token, ttl).await? {
                TokenAttempt::Acquired(held) => Attempt::Acquired(Holding {
                    value: token.into_bytes(),
                    fence: Some(held.fence()),
                    deadline: held.deadline(),
                }),
                TokenAttempt::Busy { remaining } => Attempt::Busy {
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
            let token = String::from_utf8(holding.value).expect("our tokens are text");
            // Compare-and-delete: it can only ever delete this very token.
            locks(cx).release(lock, &token).await?;
            Ok(())
        })
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        // The lock key exactly as named, and the fence key beside it (see `tairlock::token`).
        vec![
            lock.to_owned(),
            tairlock::keys::companion_key(lock, ":fence"),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::race::{RaceConfig, run_embedded};

    #[test]
    fn the_token_lock_keeps_the_zeros_its_naive_neighbour_breaks() {
        let config = RaceConfig {
            trials: 4,
            algorithms: vec!["naive-setnx-expire".to_owned(), "token-lock".to_owned()],
            ..RaceConfig::default()
        };
        let rows = run_embedded(&config, |_| {}).unwrap();
        assert_eq!(
            rows.len(),
            2 * crate::race::Scenario::ALL.len(),
            "2 algorithms x every scenario"
        );
        let row = |algorithm: &str, scenario: &str| {
            rows.iter()
                .find(|r| r.algorithm == algorithm && r.scenario == scenario)
                .unwrap_or_else(|| panic!("{algorithm} {scenario}"))
        };
        for row in rows.iter().filter(|r| r.algorithm == "token-lock") {
            assert!(row.acquisitions > 0, "{row:?}");
            assert_eq!(
                row.foreign_deletions + row.stale_writes_accepted + row.stuck_locks,
                0,
                "{row:?}"
            );
            if row.scenario != "long-stalls" {
                assert_eq!(row.overlaps, 0, "{row:?}");
            }
            assert_eq!(row.verdict, "ok", "{row:?}");
        }
        // The same format, two-step: its flaws, in the same trials.
        assert!(row("naive-setnx-expire", "short-stalls").foreign_deletions > 0);
        assert!(row("naive-setnx-expire", "crashes").stuck_locks > 0);
        assert!(row("naive-setnx-expire", "long-stalls").stale_writes_accepted > 0);
    }
}
