//! `redlock`: the core crate's [`Redlock`] over independent masters
//! (`tairlock race --redlock URL,URL,URL`).
//!
//! Redlock has no fencing token (there is no single counter; the lease value is random), so the
//! race's resource cannot reject a paused holder's late write: under long stalls its rows count
//! stale writes exactly as an unfenced recipe's do. Its expectation is therefore
//! [`Expectation::Unfenced`]: zero foreign deletions and stuck locks in every scenario and zero
//! overlaps but under long stalls, stale writes allowed (and reported).
//!
//! The commands go to the Redlock's own servers, not through the race's audited store: its
//! release is a compare-and-delete script on every server, which can only delete its own value,
//! so there is no `DEL` to audit. The race's store (the first server) is only used to clean up.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::{Keyspace, RedisStore, Redlock, RedlockLease, RedlockOptions, Store};

use super::{Algorithm, Attempt, BoxFuture, Expectation, Holding, LeaseAt, ServerEnd};
use crate::race::client::{Client, Step};

/// See the [module docs](self).
#[derive(Debug, Clone)]
pub struct RedlockAlgorithm {
    redlock: Arc<Redlock<RedisStore>>,
    /// The leases held now, by value (a [`Holding`] carries only the value).
    held: Arc<Mutex<HashMap<Vec<u8>, RedlockLease>>>,
}

impl RedlockAlgorithm {
    /// Redlock over these servers (independent masters), keys named by the race itself.
    ///
    /// # Errors
    ///
    /// An empty list.
    pub fn new(servers: Vec<RedisStore>) -> tairlock::Result<Self> {
        let keyspace = Keyspace::new("").expect("empty prefix is valid");
        let options = RedlockOptions::default()
            .keyspace(keyspace)
            .server_timeout(Duration::from_millis(50));
        Ok(RedlockAlgorithm {
            redlock: Arc::new(Redlock::new(servers, options)?),
            held: Arc::default(),
        })
    }

    fn key(lock: &str) -> String {
        format!("{{{lock}}}:redlock")
    }
}

impl<S: Store> Algorithm<S> for RedlockAlgorithm {
    fn name(&self) -> &'static str {
        "redlock"
    }

    fn expectation(&self) -> Expectation {
        Expectation::Unfenced
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
            cx.pause("acquire:before").await?;
            match self.redlock.try_acquire(lock, ttl).await? {
                Some(lease) => {
                    let value = lease.value().as_bytes().to_vec();
                    let deadline = lease.deadline();
                    self.held.lock().insert(value.clone(), lease);
                    Ok(Attempt::Acquired(Holding {
                        value,
                        fence: None,
                        deadline,
                    }))
                }
                None => Ok(Attempt::Busy { retry_after: None }),
            }
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        _lock: &'a str,
        holding: Holding,
    ) -> BoxFuture<'a, Step<()>> {
        Box::pin(async move {
            let lease = self.held.lock().remove(&holding.value);
            cx.pause("release:before").await?;
            if let Some(lease) = lease {
                // Compare-and-delete on every server: it can only delete this very value.
                self.redlock.release(&lease).await;
            }
            Ok(())
        })
    }

    fn keys(&self, lock: &str) -> Vec<String> {
        vec![Self::key(lock)]
    }

    /// The lease is the value on each server; the lock lasts while a majority holds it.
    fn lease_end<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        holding: &'a Holding,
    ) -> BoxFuture<'a, tairlock::Result<Option<ServerEnd>>> {
        Box::pin(async move {
            let at = LeaseAt::Value {
                key: Self::key(lock),
                value: holding.value.clone(),
            };
            let mut ends = Vec::new();
            for server in self.redlock.servers() {
                ends.push(cx.read_lease_on(server, &at).await?);
            }
            let quorum = self.redlock.servers().len() / 2 + 1;
            Ok(Some(ServerEnd::quorum(&ends, quorum)))
        })
    }

    /// Stuck on any server: a key without expiry there.
    fn stuck<'a>(&'a self, _store: &'a S, lock: &'a str) -> BoxFuture<'a, tairlock::Result<u64>> {
        Box::pin(async move {
            let key = Self::key(lock);
            let mut stuck = 0;
            for server in self.redlock.servers() {
                if server.pttl(&key).await? == tairlock::Ttl::Persistent {
                    stuck += 1;
                }
                server.del(&key).await?;
            }
            Ok(stuck)
        })
    }
}
