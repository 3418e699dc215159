//! `expire-lock`: the scripted Tair-style lock of the core crate, one script per step.

use std::time::Duration;

use tairlock::{Acquire, ExpireLock, Keyspace, Lease, Options, Store};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt};
use crate::race::client::{Client, Step};

/// See the [module docs](self).
#[derive(Debug, Clone, Default)]
pub struct ExpireLockAlgorithm;

fn locks<S: Store>(cx: &Client<S>) -> ExpireLock<super::super::client::RaceStore<S>> {
    // The race names its keys itself: no prefix, the race key is the lock name's hash tag.
    let keyspace = Keyspace::new("").expect("empty prefix is valid");
    ExpireLock::with_options(cx.store().clone(), Options::default().keyspace(keyspace))
}

impl<S: Store> Algorithm<S> for ExpireLockAlgorithm {
    fn name(&self) -> &'static str {
        "expire-lock"
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
            match locks(cx).expire_lock(lock, ttl).await? {
                Acquire::Acquired(lease) => Ok(Attempt::Acquired(Holding {
                    value: lease.value().as_bytes().to_vec(),
                    fence: Some(lease.fence()),
                    deadline: lease.deadline().expect("an acquired lease has a deadline"),
                })),
                Acquire::Held { remaining, .. } => Ok(Attempt::Busy {
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
        // Compare-and-delete: it can only ever delete this very lease.
        Box::pin(release_lease(cx, locks(cx), lock, holding))
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        vec![format!("{{{lock}}}")]
    }

    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        Some(LeaseAt::Value {
            key: format!("{{{lock}}}"),
            value: holding.value.clone(),
        })
    }
}

/// The release step of the expire-lock rows, plain and fair (`locks` says which): pause, then
/// `expire_unlock` of the client's own lease.
pub(super) async fn release_lease<S: Store>(
    cx: &Client<S>,
    locks: ExpireLock<super::super::client::RaceStore<S>>,
    lock: &str,
    holding: Holding,
) -> Step<()> {
    cx.pause("release:before").await?;
    let value = String::from_utf8(holding.value).expect("leases are text");
    let lease = Lease::parse(&value).expect("our own lease parses");
    locks.expire_unlock(lock, &lease).await?;
    Ok(())
}
