//! Replica-acknowledged acquisition: an [`ExpireLock`] whose grants count only once enough
//! replicas have them.
//!
//! Redis replicates asynchronously. A lock granted by a master that dies before its replica
//! received the write is simply gone after the replica is promoted, and a second client then gets
//! the same lock while the first still holds it. [`ReplicatedLock::acquire`] closes the common
//! case of that window: it sends the acquire script and `WAIT n timeout` (or
//! `WAITAOF 0 n timeout`) **in one pipeline on the connection to the lock key's master**, so the
//! `WAIT` counts exactly the replicas that have this grant. With fewer than `n` acknowledgements
//! the grant is rolled back (compare-and-delete with the new lease) and reported as
//! [`ReplicatedAcquire::NotAcknowledged`].
//!
//! Works on [`RedisStore`](crate::RedisStore) (master with replicas) and
//! [`ClusterStore`](crate::ClusterStore) (the replicas of the key's master); the embedded store
//! has no replicas and answers [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput).
//!
//! # Key layout
//!
//! Exactly the [`ExpireLock`]'s (`<prefix>{name}`, `<prefix>{name}:fence`): a replicated lock and
//! a plain one on the same name exclude each other; release, renew and inspect go through
//! [`ReplicatedLock::locks`].
//!
//! # Guarantees
//!
//! - An [`Acquired`](ReplicatedAcquire::Acquired) lease was on at least `n` replicas when the
//!   reply came back: a failover to one of those replicas keeps it.
//!
//! # Not guaranteed
//!
//! - `WAIT` "does not make Redis a strongly consistent store": a failover may still promote a
//!   replica that had not acknowledged (Redis Sentinel and Cluster pick the most up-to-date one
//!   they can see, best effort). Use `n` = all replicas for the strongest form.
//! - Renewals and releases are not acknowledged by replicas: after a failover a renewed lease may
//!   end at its pre-renewal expiry on the new master. Keep the watchdog's margin.
//! - A refused acquisition may still be visible for a moment (until the rollback lands), and
//!   when the rollback itself fails the grant stays until its TTL ends; nobody holds its lease.

use std::time::Duration;

use crate::error::Result;
use crate::expire_lock::{Acquire, ExpireLock, Unlock, decode_acquire};
use crate::lease::{Lease, nonce};
use crate::scripts::EXPIRE_LOCK;
use crate::store::{Acks, Store, WaitFor};

/// The outcome of [`ReplicatedLock::acquire`].
#[must_use = "an acquired lease is the only way to unlock the lock"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicatedAcquire {
    /// Taken, and at least the required number of replicas acknowledged it.
    Acquired {
        /// The lease.
        lease: Lease,
        /// The acknowledgements counted.
        acks: Acks,
    },
    /// Someone else holds it (nothing was written; no replica was waited for).
    Held {
        /// The holder's lease.
        holder: Lease,
        /// How long until it expires unless renewed.
        remaining: Duration,
    },
    /// The script granted the lock but too few replicas acknowledged within the timeout: the
    /// grant was rolled back (or, if `rolled_back` is false, the rollback failed and the grant
    /// ends with its TTL). The caller does not hold the lock.
    NotAcknowledged {
        /// The acknowledgements counted.
        acks: Acks,
        /// How many were required.
        required: usize,
        /// Whether the rollback deleted the grant.
        rolled_back: bool,
    },
}

impl ReplicatedAcquire {
    /// The lease, if acquired and acknowledged.
    pub fn lease(self) -> Option<Lease> {
        match self {
            ReplicatedAcquire::Acquired { lease, .. } => Some(lease),
            _ => None,
        }
    }

    /// Whether the lock was acquired and acknowledged.
    pub fn is_acquired(&self) -> bool {
        matches!(self, ReplicatedAcquire::Acquired { .. })
    }
}

/// Expire locks whose acquisitions wait for replicas. See the [module docs](self).
#[derive(Debug, Clone)]
pub struct ReplicatedLock<S> {
    locks: ExpireLock<S>,
    wait: WaitFor,
}

impl<S: Store> ReplicatedLock<S> {
    /// Acquisitions through `locks` that require `wait` (e.g.
    /// `WaitFor::replicas(1, Duration::from_millis(200))`).
    pub fn new(locks: ExpireLock<S>, wait: WaitFor) -> Self {
        ReplicatedLock { locks, wait }
    }

    /// The underlying expire locks: release, renew, inspect.
    pub fn locks(&self) -> &ExpireLock<S> {
        &self.locks
    }

    /// What each acquisition waits for.
    pub fn wait_for(&self) -> WaitFor {
        self.wait
    }

    /// Take the lock `name` for `ttl` if nobody holds it, and keep it only if
    /// [`wait_for`](Self::wait_for) is met.
    ///
    /// One round trip (script + `WAIT` pipelined), plus one for the rollback when refused. The
    /// call takes up to the wait's timeout when replicas lag.
    ///
    /// # Errors
    ///
    /// As [`ExpireLock::expire_lock`]; [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput)
    /// on a store without replicas; [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when no
    /// reply came within the wait's timeout plus two seconds (the grant may exist; its TTL frees
    /// it).
    ///
    /// # Cancel safety
    ///
    /// As [`ExpireLock::expire_lock`]: a dropped call may leave a grant nobody holds, freed by
    /// its TTL.
    pub async fn acquire(&self, name: &str, ttl: Duration) -> Result<ReplicatedAcquire> {
        let (keys, args) = self.locks.acquire_request(name, ttl, nonce())?;
        let store = self.locks.store();
        let sent = tokio::time::Instant::now();
        // Safe to repeat once after a dropped connection: the nonce makes the script idempotent.
        let (reply, acks) = match store.eval_wait(&EXPIRE_LOCK, &keys, &args, self.wait).await {
            Err(e) if e.is_connection() => {
                store
                    .eval_wait(&EXPIRE_LOCK, &keys, &args, self.wait)
                    .await?
            }
            other => other?,
        };
        match decode_acquire(&reply, sent, ttl)? {
            Acquire::Held { holder, remaining } => {
                Ok(ReplicatedAcquire::Held { holder, remaining })
            }
            Acquire::Acquired(lease) if acks.replicas >= self.wait.replicas => {
                Ok(ReplicatedAcquire::Acquired { lease, acks })
            }
            Acquire::Acquired(lease) => {
                let rolled_back = matches!(
                    self.locks.expire_unlock(name, &lease).await,
                    Ok(Unlock::Released)
                );
                Ok(ReplicatedAcquire::NotAcknowledged {
                    acks,
                    required: self.wait.replicas,
                    rolled_back,
                })
            }
        }
    }
}
