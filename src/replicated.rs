//! Replica-acknowledged locks: an [`ExpireLock`] whose grants, renewals and releases count only
//! once enough replicas have them.
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
//! [`ReplicatedLock::renew`] and [`ReplicatedLock::release`] send the renew and unlock scripts
//! the same way. A renewal the master applied but too few replicas acknowledged is reported as
//! [`ReplicatedRenew::NotAcknowledged`]: it is not undone, and the replicas may still hold the
//! old expiry. A release likewise reports [`ReplicatedRelease::NotAcknowledged`].
//!
//! [`ReplicatedLock::try_lock`] wraps an acknowledged acquisition in a [`ReplicatedGuard`]: its
//! watchdog renews at a third of the lease, with acknowledged renewals, and the guard counts as
//! held only while the last *acknowledged* renewal is still valid; it releases (acknowledged) on
//! [`ReplicatedGuard::release`] and, best effort, on drop.
//!
//! Needs a [`ReplicaStore`]: [`RedisStore`](crate::RedisStore) (master with replicas) and
//! [`ClusterStore`](crate::ClusterStore) (the replicas of the key's master). The embedded store
//! has no replicas and does not implement it, so `ReplicatedLock<MemoryStore>` does not compile.
//!
//! # Key layout
//!
//! Exactly the [`ExpireLock`]'s (`<prefix>{name}`, `<prefix>{name}:fence`): a replicated lock and
//! a plain one on the same name exclude each other; inspection and unacknowledged operations go
//! through [`ReplicatedLock::locks`].
//!
//! # Guarantees
//!
//! - An [`Acquired`](ReplicatedAcquire::Acquired) lease was on at least `n` replicas when the
//!   reply came back: a failover to one of those replicas keeps it.
//! - A [`Renewed`](ReplicatedRenew::Renewed) lease's new expiry was on at least `n` replicas: a
//!   failover to one of them keeps the lock until that expiry.
//! - A [`Released`](ReplicatedRelease::Released) release had reached at least `n` replicas: after
//!   a failover to one of them the lock is free.
//! - A [`ReplicatedGuard`] that is not [lost](ReplicatedGuard::is_lost) holds a lease that at
//!   least `n` replicas acknowledged with an expiry still ahead (its
//!   [`lease().deadline()`](crate::Lease::deadline)).
//!
//! # Not guaranteed
//!
//! - `WAIT` "does not make Redis a strongly consistent store": a failover may still promote a
//!   replica that had not acknowledged (Redis Sentinel and Cluster pick the most up-to-date one
//!   they can see, best effort). Use `n` = all replicas for the strongest form.
//! - An unacknowledged renewal is not rolled back: the master has the new lease and expiry, the
//!   replicas may have the old ones. After a failover to such a replica the lock ends at the old
//!   expiry, and the renewed lease (the one the caller now holds) does not match there: renewing
//!   or releasing with it reports [`HeldByOther`](ReplicatedRenew::HeldByOther) (a guard then
//!   reports itself lost).
//! - An unacknowledged release leaves the lock held on replicas that missed it: after a failover
//!   to one of them nobody can take the lock until the released lease's expiry.
//! - A refused acquisition may still be visible for a moment (until the rollback lands), and
//!   when the rollback itself fails the grant stays until its TTL ends; nobody holds its lease.
//! - `WAIT` blocks its connection: the replicated calls of one store handle (guards' watchdogs
//!   included) queue behind each other, each for up to the wait's timeout while replicas lag.

use std::time::Duration;

use crate::error::Result;
use crate::expire_lock::{
    Acquire, ExpireLock, Renew, Unlock, decode_acquire, decode_renew, decode_unlock,
};
use crate::guard::RenewalAttempt;
use crate::lease::{Lease, nonce};
use crate::script::{Reply, Script};
use crate::scripts::{EXPIRE_LOCK, EXPIRE_UNLOCK, RENEW};
use crate::store::{Acks, ReplicaStore, WaitFor};

mod guard;

pub use self::guard::ReplicatedGuard;

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
        /// How long until it expires unless renewed; `None` when the lock key has no time to
        /// live (see [`Acquire::Held`]).
        remaining: Option<Duration>,
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

/// The outcome of [`ReplicatedLock::renew`].
#[must_use = "a renewal rotates the lease: the old one no longer matches on the master"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplicatedRenew {
    /// Renewed, and at least the required number of replicas acknowledged the new expiry.
    Renewed {
        /// The new lease (same fence, new expiry, new nonce).
        lease: Lease,
        /// The acknowledgements counted.
        acks: Acks,
    },
    /// The master renewed the lease, but too few replicas acknowledged it within the timeout.
    ///
    /// Not undone: `lease` is in effect on the master (the old one no longer matches there) and
    /// is the one to renew or release with next. The replicas may still hold the old lease and
    /// its old expiry, so until a renewal is acknowledged, count on the *old* lease's
    /// [`deadline`](Lease::deadline) only.
    NotAcknowledged {
        /// The new lease, in effect on the master.
        lease: Lease,
        /// The acknowledgements counted.
        acks: Acks,
        /// How many were required.
        required: usize,
    },
    /// No lease is held: ours expired. Nothing was written.
    NotHeld,
    /// Another lease holds the lock: ours expired and someone else took it (or, after a failover,
    /// the new master has an older lease of ours). Nothing was written.
    HeldByOther,
}

impl ReplicatedRenew {
    /// The lease now in effect on the master, whether or not replicas acknowledged it.
    pub fn lease(self) -> Option<Lease> {
        match self {
            ReplicatedRenew::Renewed { lease, .. }
            | ReplicatedRenew::NotAcknowledged { lease, .. } => Some(lease),
            ReplicatedRenew::NotHeld | ReplicatedRenew::HeldByOther => None,
        }
    }

    /// Whether renewed and acknowledged by the required replicas.
    pub fn is_acknowledged(&self) -> bool {
        matches!(self, ReplicatedRenew::Renewed { .. })
    }
}

/// The outcome of [`ReplicatedLock::release`] and [`ReplicatedGuard::release`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicatedRelease {
    /// Our lease was deleted, and at least the required number of replicas acknowledged it.
    Released {
        /// The acknowledgements counted.
        acks: Acks,
    },
    /// Our lease was deleted on the master, but too few replicas acknowledged that within the
    /// timeout: after a failover to one of them the lock stays held (by a lease nobody uses)
    /// until its expiry.
    NotAcknowledged {
        /// The acknowledgements counted.
        acks: Acks,
        /// How many were required.
        required: usize,
    },
    /// No lease is held (it expired, was released already, or never existed).
    NotHeld,
    /// Another lease holds the lock; nothing was deleted.
    HeldByOther,
}

impl ReplicatedRelease {
    /// The outcome on the master, acknowledged or not.
    pub fn unlock(self) -> Unlock {
        match self {
            ReplicatedRelease::Released { .. } | ReplicatedRelease::NotAcknowledged { .. } => {
                Unlock::Released
            }
            ReplicatedRelease::NotHeld => Unlock::NotHeld,
            ReplicatedRelease::HeldByOther => Unlock::HeldByOther,
        }
    }

    /// Whether released and acknowledged by the required replicas.
    pub fn is_acknowledged(&self) -> bool {
        matches!(self, ReplicatedRelease::Released { .. })
    }
}

/// Expire locks whose acquisitions, renewals and releases wait for replicas. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct ReplicatedLock<S: ReplicaStore> {
    locks: ExpireLock<S>,
    wait: WaitFor,
}

impl<S: ReplicaStore> ReplicatedLock<S> {
    /// Acquisitions, renewals and releases through `locks` that require `wait` (e.g.
    /// `WaitFor::replicas(1, Duration::from_millis(200))`).
    pub fn new(locks: ExpireLock<S>, wait: WaitFor) -> Self {
        ReplicatedLock { locks, wait }
    }

    /// The underlying expire locks: inspection, and operations that need no acknowledgement.
    pub fn locks(&self) -> &ExpireLock<S> {
        &self.locks
    }

    /// What each acquisition, renewal and release waits for.
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
    /// As [`ExpireLock::expire_lock`]; [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when no
    /// reply came within the wait's timeout plus two seconds (the grant may exist; its TTL frees
    /// it).
    ///
    /// # Cancel safety
    ///
    /// As [`ExpireLock::expire_lock`]: a dropped call may leave a grant nobody holds, freed by
    /// its TTL.
    pub async fn acquire(&self, name: &str, ttl: Duration) -> Result<ReplicatedAcquire> {
        let (keys, args) = self.locks.acquire_request(name, ttl, nonce())?;
        let sent = tokio::time::Instant::now();
        let (reply, acks, repeated) = self
            .eval_acked(&EXPIRE_LOCK, &keys, &args, self.wait, true)
            .await?;
        let (lease, acks) = match decode_acquire(&reply, sent)? {
            Acquire::Held { holder, remaining } => {
                return Ok(ReplicatedAcquire::Held { holder, remaining });
            }
            // The repeat may have found the lost attempt's grant in place and written nothing,
            // so its WAIT proves nothing about the grant: an acknowledged renewal of it does.
            Acquire::Acquired(lease) if repeated => {
                match self.renew_waiting(name, &lease, ttl, self.wait).await? {
                    ReplicatedRenew::Renewed { lease, acks } => {
                        return Ok(ReplicatedAcquire::Acquired { lease, acks });
                    }
                    ReplicatedRenew::NotAcknowledged { lease, acks, .. } => (lease, acks),
                    // The grant is already gone (force-unlocked, or expired meanwhile): not
                    // held, nothing left to roll back.
                    ReplicatedRenew::NotHeld | ReplicatedRenew::HeldByOther => {
                        return Ok(ReplicatedAcquire::NotAcknowledged {
                            acks: Acks { replicas: 0 },
                            required: self.wait.replicas,
                            rolled_back: true,
                        });
                    }
                }
            }
            Acquire::Acquired(lease) => (lease, acks),
        };
        if acks.replicas >= self.wait.replicas {
            return Ok(ReplicatedAcquire::Acquired { lease, acks });
        }
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

    /// Extend a held lease to `ttl` from now (server time) and wait for
    /// [`wait_for`](Self::wait_for) to acknowledge the new expiry.
    ///
    /// One round trip (the renew script + `WAIT` pipelined); it takes up to the wait's timeout
    /// when replicas lag. The lease rotates as with [`ExpireLock::renew`]: use the returned one
    /// from now on, also when the renewal was
    /// [not acknowledged](ReplicatedRenew::NotAcknowledged) (the master has it; the replicas
    /// may still have the old lease and expiry, so rely on the old lease's deadline until a
    /// renewal is acknowledged).
    ///
    /// # Errors
    ///
    /// As [`ExpireLock::renew`]; [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when no reply
    /// came within the wait's timeout plus two seconds (the renewal may have been applied).
    ///
    /// # Cancel safety
    ///
    /// As [`ExpireLock::renew`]: if the future is dropped after sending, the lock may hold a
    /// lease the caller never saw; the old lease then no longer matches and the lock frees
    /// itself after `ttl`.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// use std::time::Duration;
    /// use tairlock::store::WaitFor;
    /// use tairlock::{ExpireLock, RedisStore, ReplicatedLock, ReplicatedRelease, ReplicatedRenew};
    ///
    /// # #[tokio::main]
    /// # async fn main() -> tairlock::Result<()> {
    /// let store = RedisStore::connect("redis://127.0.0.1:6379").await?;
    /// let locks = ReplicatedLock::new(
    ///     ExpireLock::new(store),
    ///     WaitFor::replicas(1, Duration::from_millis(200)),
    /// );
    /// let ttl = Duration::from_secs(10);
    /// let Some(lease) = locks.acquire("job", ttl).await?.lease() else {
    ///     return Ok(()); // busy, or refused by the replicas
    /// };
    /// // ... later, still working:
    /// let lease = match locks.renew("job", &lease, ttl).await? {
    ///     ReplicatedRenew::Renewed { lease, .. } => lease,
    ///     ReplicatedRenew::NotAcknowledged { lease: current, .. } => {
    ///         // The master has the new expiry, the replicas may not: only the old lease's
    ///         // deadline counts. Stop by then unless a later renewal is acknowledged.
    ///         let _stop_by = lease.deadline();
    ///         current
    ///     }
    ///     ReplicatedRenew::NotHeld | ReplicatedRenew::HeldByOther => return Ok(()), // lost
    /// };
    /// match locks.release("job", &lease).await? {
    ///     ReplicatedRelease::Released { acks } => println!("free on {} replicas", acks.replicas),
    ///     other => println!("released: {other:?}"),
    /// }
    /// # Ok(())
    /// # }
    /// ```
    pub async fn renew(&self, name: &str, lease: &Lease, ttl: Duration) -> Result<ReplicatedRenew> {
        self.renew_waiting(name, lease, ttl, self.wait).await
    }

    /// Delete the lock `name` only if it holds exactly `lease`, and wait for
    /// [`wait_for`](Self::wait_for) to acknowledge the deletion.
    ///
    /// One round trip (the unlock script + `WAIT` pipelined), announcing the release to waiters
    /// exactly as [`ExpireLock::expire_unlock`] does. A release that was
    /// [not acknowledged](ReplicatedRelease::NotAcknowledged) is not undone: the master has
    /// freed the lock; replicas that missed it keep it until the lease's expiry.
    ///
    /// # Errors
    ///
    /// As [`ExpireLock::expire_unlock`]; [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) when
    /// no reply came within the wait's timeout plus two seconds (the lock may have been
    /// released).
    ///
    /// # Cancel safety
    ///
    /// Dropping the future may or may not release the lock; the TTL frees it in any case.
    ///
    /// # Examples
    ///
    /// See [`renew`](Self::renew).
    pub async fn release(&self, name: &str, lease: &Lease) -> Result<ReplicatedRelease> {
        let (keys, args) = self.locks.unlock_request(name, lease)?;
        // A repeat that deletes made the deletion itself, so its WAIT counts it; one that finds
        // the lease gone (the lost attempt deleted it) reports `NotHeld`, which claims no acks.
        let (reply, acks, _) = self
            .eval_acked(&EXPIRE_UNLOCK, &keys, &args, self.wait, true)
            .await?;
        Ok(match decode_unlock(&reply)? {
            Unlock::Released if acks.replicas >= self.wait.replicas => {
                ReplicatedRelease::Released { acks }
            }
            Unlock::Released => ReplicatedRelease::NotAcknowledged {
                acks,
                required: self.wait.replicas,
            },
            Unlock::NotHeld => ReplicatedRelease::NotHeld,
            Unlock::HeldByOther => ReplicatedRelease::HeldByOther,
        })
    }

    /// [`renew`](Self::renew) with its own wait.
    async fn renew_waiting(
        &self,
        name: &str,
        lease: &Lease,
        ttl: Duration,
        wait: WaitFor,
    ) -> Result<ReplicatedRenew> {
        let attempt = RenewalAttempt {
            nonce: nonce(),
            sent: tokio::time::Instant::now(),
            ttl,
            repeat: false,
        };
        self.renew_attempt(name, lease, &attempt, wait, false).await
    }

    /// One renewal as `attempt`: its nonce, its length, dated from its first send (the guard's
    /// watchdog repeats a renewal whose reply was lost with the same nonce, and bounds the
    /// `WAIT` by the validity left).
    ///
    /// A reply that came from a repeat (here, or a repeat of an earlier attempt) may have found
    /// the lost attempt's renewal in place and written nothing, so its `WAIT` proves nothing.
    /// Then, with `settle_repeat`, the renewed lease comes back as
    /// [`NotAcknowledged`](ReplicatedRenew::NotAcknowledged) (the caller adopts it and renews
    /// again with a new nonce); without, it is renewed once more here (a write of this
    /// connection's own, not repeated) and that is counted.
    pub(crate) async fn renew_attempt(
        &self,
        name: &str,
        lease: &Lease,
        attempt: &RenewalAttempt,
        wait: WaitFor,
        settle_repeat: bool,
    ) -> Result<ReplicatedRenew> {
        let mut lease = lease.clone();
        let (mut nonce_now, mut sent, mut repeat) =
            (attempt.nonce.clone(), attempt.sent, attempt.repeat);
        let mut retry = true;
        loop {
            let (keys, args) = self
                .locks
                .renew_request(name, &lease, attempt.ttl, nonce_now)?;
            let (reply, acks, repeated) =
                self.eval_acked(&RENEW, &keys, &args, wait, retry).await?;
            match decode_renew(&reply, sent)? {
                Renew::Renewed(renewed) if (repeated || repeat) && settle_repeat => {
                    return Ok(ReplicatedRenew::NotAcknowledged {
                        lease: renewed,
                        acks: Acks { replicas: 0 },
                        required: wait.replicas,
                    });
                }
                Renew::Renewed(renewed) if repeated || repeat => {
                    lease = renewed;
                    (nonce_now, sent, repeat, retry) =
                        (nonce(), tokio::time::Instant::now(), false, false);
                }
                Renew::Renewed(lease) if acks.replicas >= wait.replicas => {
                    return Ok(ReplicatedRenew::Renewed { lease, acks });
                }
                Renew::Renewed(lease) => {
                    return Ok(ReplicatedRenew::NotAcknowledged {
                        lease,
                        acks,
                        required: wait.replicas,
                    });
                }
                Renew::NotHeld => return Ok(ReplicatedRenew::NotHeld),
                Renew::HeldByOther => return Ok(ReplicatedRenew::HeldByOther),
            }
        }
    }

    /// One script + `WAIT`; with `retry`, once more when no answer came (a dropped connection or
    /// a timeout; every expire script sent here is safe to repeat). The flag says the reply came from the repeat, whose `WAIT`
    /// runs on a new connection and may not count the lost attempt's write.
    async fn eval_acked(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
        wait: WaitFor,
        retry: bool,
    ) -> Result<(Reply, Acks, bool)> {
        let store = self.locks.store();
        match store.eval_wait(script, keys, args, wait).await {
            Err(e) if retry && e.is_unanswered() => {
                let (reply, acks) = store.eval_wait(script, keys, args, wait).await?;
                Ok((reply, acks, true))
            }
            other => other.map(|(reply, acks)| (reply, acks, false)),
        }
    }
}

impl<S: ReplicaStore> ReplicatedLock<S> {
    /// Blocking twin of [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_acquire(&self, name: &str, ttl: Duration) -> Result<ReplicatedAcquire> {
        crate::blocking::block_on(
            self.locks().store().runtime(),
            "blocking_acquire",
            self.acquire(name, ttl),
        )
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(
        &self,
        name: &str,
        lease: &Lease,
        ttl: Duration,
    ) -> Result<ReplicatedRenew> {
        crate::blocking::block_on(
            self.locks().store().runtime(),
            "blocking_renew",
            self.renew(name, lease, ttl),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(&self, name: &str, lease: &Lease) -> Result<ReplicatedRelease> {
        crate::blocking::block_on(
            self.locks().store().runtime(),
            "blocking_release",
            self.release(name, lease),
        )
    }
}

impl<S: ReplicaStore> ReplicatedLock<S> {
    /// Whether `name` is held, as the master sees it ([`ExpireLock::is_locked`]).
    ///
    /// # Errors
    ///
    /// As [`ExpireLock::is_locked`].
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        self.locks().is_locked(name).await
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, name: &str) -> Result<bool> {
        self.locks().blocking_is_locked(name)
    }
}
