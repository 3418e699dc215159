//! `naive-setnx-expire`: the two-step recipe from the seed articles, verbatim.
//!
//! ```text
//! acquire:  SETNX key token      -- 1: ours ...
//!           EXPIRE key ttl       -- ... but only after a second round trip
//! release:  GET key == token ?   -- check ...
//!           DEL key              -- ... then delete, whatever the key holds by now
//! ```
//!
//! Flaws the race provokes: a crash between SETNX and EXPIRE leaves a key with no TTL (a stuck
//! lock nobody can take again), and so does a lost reply to SETNX (`reply-outages`); a pause
//! between GET and DEL past the lease deletes the next holder's lock (a foreign deletion, and
//! then two holders); another client's late EXPIRE can land on the next holder's key and end it
//! before that holder's own EXPIRE, which finds nothing and is not checked (a late deadline); no
//! fencing token.

use std::time::Duration;

use tairlock::Store;

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, Step};

/// See the [module docs](self).
#[derive(Debug, Clone, Copy, Default)]
pub struct NaiveSetnxExpire;

impl<S: Store> Algorithm<S> for NaiveSetnxExpire {
    fn name(&self) -> &'static str {
        "naive-setnx-expire"
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
            let token = cx.unique_token();
            cx.pause("acquire:before-setnx").await?;
            if !cx.store().set_nx(lock, token.as_bytes()).await? {
                return Ok(Attempt::Busy { retry_after: None });
            }
            cx.pause("acquire:between-setnx-and-expire").await?;
            let sent = tokio::time::Instant::now();
            cx.store().pexpire(lock, ttl).await?;
            Ok(Attempt::Acquired(Holding {
                value: token.into_bytes(),
                fence: None,
                // The lease starts when EXPIRE lands, not at SETNX: dated from its send, less
                // the drift every deadline allows for (a server dates EXPIRE by a clock it reads
                // once per batch of commands, up to a millisecond or so before it runs it).
                deadline: crate::race::algorithm::sent_plus(sent, ttl),
            }))
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        holding: Holding,
    ) -> BoxFuture<'a, Step<()>> {
        Box::pin(async move {
            cx.pause("release:before-get").await?;
            let current = cx.store().get(lock).await?;
            if current.as_deref() == Some(&holding.value[..]) {
                cx.pause("release:between-get-and-del").await?;
                cx.store().del(lock).await?;
            }
            Ok(())
        })
    }

    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        Some(LeaseAt::Value {
            key: lock.to_owned(),
            value: holding.value.clone(),
        })
    }
}
