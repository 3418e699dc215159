//! [`ScriptedLock`]: one Lua script per operation, on the legacy wire format.
//!
//! The same key and the same value as [`GetSetLock`](crate::GetSetLock) — a bare integer
//! timestamp `now + timeout + 1` in the configured [`Unit`](crate::Unit) under the key the old
//! code names — so old and new clients can share live lock keys during a rolling migration. What
//! changes is who judges and how:
//!
//! - **acquire** ([`scripts::ACQUIRE`](crate::scripts::ACQUIRE)): in one script, take the key
//!   if it is absent, or if it has no TTL (an old client wrote it) and its timestamp has passed
//!   *by the server's clock* (`TIME`); write the new timestamp with a TTL that ends with it, and
//!   move the fencing token. A key with a TTL is held while it exists, as for
//!   [`WatchLock`](crate::WatchLock): the timestamp can pass a millisecond before the key goes.
//!   No client clock is involved (F2), no `GETSET` of a loser can rewrite a winner (F3), and the
//!   check and the write cannot be split (F1).
//! - **release** ([`scripts::RELEASE`](crate::scripts::RELEASE)): compare-and-delete: delete
//!   only if the key still holds our timestamp, still carries a TTL, and the fence key still
//!   holds our token (F4, F4b).
//! - **renew** ([`scripts::RENEW`](crate::scripts::RENEW)): the same check, then a new
//!   timestamp and TTL; the token stays.
//!
//! # Recognising our own lock
//!
//! A timestamp is not unique (F5): two grants in the same unit write the same value, and an old
//! client can write any value. The value cannot carry more — old clients parse it as an integer
//! — so a holder is identified by three things together:
//!
//! 1. the **value** it wrote;
//! 2. the key's **TTL**: this crate always writes one, and old clients never can (`SETNX` does
//!    not set one, `GETSET` removes it), so a key without a TTL was last written by an old client;
//! 3. the **fencing token** in the fence key, which strictly increases per grant and which old
//!    clients never touch, so a later Watch or Scripted grant with the same timestamp still
//!    differs.
//!
//! # Key layout
//!
//! As [`WatchLock`](crate::WatchLock) (the two interoperate fully):
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `K`, exactly as named | string | `now + timeout + 1` in the unit, `now` the server's (decimal) | `PX` to the last millisecond of that timestamp (counted by Redis from the script's start: the key may go a little before the timestamp passes, never after) | acquire, renew; deleted by release |
//! | [`fence_key(K)`](crate::wire::fence_key): `{K}:fence` | string | last fencing token issued: `max(last + 1, server µs)` | lease + [`fence_retention`](crate::Options::fence_retention) | acquire; renew moves its TTL |
//!
//! # Sharing keys with old clients
//!
//! The new client is safe on its own side: it never deletes or renews anything but its own grant,
//! it never takes a key that still has a TTL, and it never takes an old client's lock whose
//! timestamp has not passed by the server's clock. It cannot fix
//! the old clients' side: an old client still judges by its own clock (F2), still deletes any
//! live lock in its release (F4b), and a losing `GETSET` of an old client still rewrites the
//! current timestamp (F3) — the lock then lasts until the old client's timestamp, has no TTL, and
//! this crate reports [`Release::Overwritten`] instead of deleting
//! it. The full matrix is in the crate docs; migrate the old clients away quickly.

use std::sync::Arc;
use std::time::Duration;

use tairlock::engine::Waiters;

use tairlock::deadline::{Remaining, local_deadline};
use tairlock::script::unexpected;
use tairlock::{Error, ErrorKind, Reply, Result, Script, Store};

use crate::options::{Holding, Options, Release, Renew, TryAcquire};
use crate::scripts::{ACQUIRE, RELEASE, RENEW};
use crate::wire::{fence_key, parse_value, validate_key};

/// The scripted lock on the legacy wire format. See the [module docs](self).
///
/// Cheap to clone; one value serves any number of keys.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tairlock::MemoryStore;
/// use tairlock_legacy::{Release, ScriptedLock, TryAcquire};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = ScriptedLock::new(MemoryStore::new());
/// let TryAcquire::Acquired(holding) = locks.try_acquire("lock.orderid", Duration::from_secs(10)).await? else {
///     panic!("nobody else holds it");
/// };
/// // The key holds a bare Unix timestamp, as old clients expect.
/// let stored = tairlock::Store::get(locks.store(), "lock.orderid").await?.unwrap();
/// assert_eq!(stored, holding.value().to_string().into_bytes());
/// assert_eq!(locks.release(&holding).await?, Release::Released);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedLock<S> {
    store: S,
    options: Options,
    waiters: Arc<Waiters>,
}

impl<S: Store> ScriptedLock<S> {
    /// Locks on `store` with default [`Options`].
    pub fn new(store: S) -> Self {
        ScriptedLock::with_options(store, Options::default())
    }

    /// Locks on `store` with `options`.
    pub fn with_options(store: S, options: Options) -> Self {
        ScriptedLock {
            store,
            options,
            waiters: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// Take the lock if it is free, or if an old client's lock on it (a key without a TTL) has a
    /// timestamp that has passed by the server's clock; a key with a TTL is held while it exists.
    /// One round trip.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: empty key, zero or overlong lease; nothing is sent.
    /// - [`ErrorKind::WrongType`]: the lock or fence key holds data that is not a lock;
    ///   nothing is written.
    /// - Connection and server errors (an acquisition is not retried: without an owner id in
    ///   the value, a retry could not recognise its own first attempt).
    ///
    /// # Cancel safety
    ///
    /// If dropped after the request was sent, the lock may be held for nobody until its TTL ends.
    pub async fn try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        validate_key(key)?;
        let unit = self.options.unit;
        let args = [
            unit.millis().to_string(),
            unit.timeout(lease)?.to_string(),
            self.options.retention_ms().to_string(),
        ];
        let sent = tokio::time::Instant::now();
        let reply = self.store.eval(&ACQUIRE, &keys(key), &args).await?;
        let items = reply
            .as_array()
            .ok_or_else(|| unexpected(&ACQUIRE, &reply))?;
        let text_int = |i: usize| {
            items
                .get(i)
                .and_then(Reply::as_str)
                .and_then(|s| parse_value(s.as_bytes()))
        };
        let int = |i: usize| items.get(i).and_then(Reply::as_int);
        match int(0) {
            Some(1) => {
                let (Some(value), Some(fence)) = (text_int(1), text_int(2)) else {
                    return Err(unexpected(&ACQUIRE, &reply));
                };
                Ok(TryAcquire::Acquired(Holding {
                    key: key.to_owned(),
                    value,
                    unit,
                    fence: Some(fence),
                    deadline: local_deadline(sent, Remaining::at(items, 3, &ACQUIRE)?),
                }))
            }
            Some(0) => Ok(TryAcquire::Busy {
                holder: text_int(1),
                remaining: int(2).map(|ms| Duration::from_millis(ms.max(0) as u64)),
            }),
            _ => Err(unexpected(&ACQUIRE, &reply)),
        }
    }

    /// [`try_acquire`](Self::try_acquire) until acquired, sleeping
    /// [`poll_interval`](Options::poll_interval) (jittered: half to all of it) or the holder's
    /// remaining time, if shorter, between attempts; `None` once
    /// [`acquire_timeout`](Options::acquire_timeout) has passed. The waiting is the core's
    /// [engine](tairlock::engine): the acquires of this value (and its clones) for one key queue
    /// locally, first come first served, and only the head sends.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), except that transient errors
    /// ([`Error::is_transient`](tairlock::Error::is_transient): no answer, a failover) are
    /// retried with backoff until `acquire_timeout` (without one, until they last a minute in a
    /// row). A lock an unanswered attempt took cannot be recognised as ours (the value has no
    /// owner id): it is waited out like anyone's.
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self, key: &str, lease: Duration) -> Result<Option<Holding>> {
        crate::waiting::acquire(self, key, lease).await
    }

    /// Compare-and-delete: delete the lock only if it is still exactly this holding's. One round
    /// trip; safe to repeat (and retried once after a dropped connection).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a holding without a fencing token (a
    /// [`GetSetLock`](crate::GetSetLock) one); [`ErrorKind::WrongType`]; connection errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping it may or may not release the lock; the TTL frees it in any case.
    pub async fn release(&self, holding: &Holding) -> Result<Release> {
        let fence = fence_of(holding)?;
        let args = [holding.value_text(), fence.to_string()];
        let reply = self.eval_retrying(&RELEASE, holding.key(), &args).await?;
        match reply.as_int() {
            Some(1) => Ok(Release::Released),
            Some(0) => Ok(Release::HeldByOther),
            Some(-1) => Ok(Release::NotHeld),
            Some(-2) => Ok(Release::Overwritten),
            _ => Err(unexpected(&RELEASE, &reply)),
        }
    }

    /// Extend this holding's lock to `lease` from now (server time): a new timestamp, the same
    /// token. The returned holding replaces `holding` (which stops matching once the timestamp
    /// has moved: a renewal within the same unit writes the same one). One round trip.
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release), and [`ErrorKind::InvalidInput`] for a zero or overlong
    /// lease.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the lock may carry a timestamp the caller never saw; the old
    /// holding then no longer matches, and the lock frees itself when the new timestamp passes.
    pub async fn renew(&self, holding: &Holding, lease: Duration) -> Result<Renew> {
        let fence = fence_of(holding)?;
        let unit = self.options.unit;
        let args = [
            holding.value_text(),
            fence.to_string(),
            unit.millis().to_string(),
            unit.timeout(lease)?.to_string(),
            self.options.retention_ms().to_string(),
        ];
        let sent = tokio::time::Instant::now();
        // Not retried: a lost reply would leave the lock renewed under a value we never saw.
        let reply = self.store.eval(&RENEW, &keys(holding.key()), &args).await?;
        let items = reply.as_array().ok_or_else(|| unexpected(&RENEW, &reply))?;
        match items.first().and_then(Reply::as_int) {
            Some(1) => {
                let value = items
                    .get(1)
                    .and_then(Reply::as_str)
                    .and_then(|s| parse_value(s.as_bytes()));
                let Some(value) = value else {
                    return Err(unexpected(&RENEW, &reply));
                };
                Ok(Renew::Renewed(Holding {
                    key: holding.key().to_owned(),
                    value,
                    unit,
                    fence: Some(fence),
                    deadline: local_deadline(sent, Remaining::at(items, 2, &RENEW)?),
                }))
            }
            Some(0) => Ok(Renew::HeldByOther),
            Some(-1) => Ok(Renew::NotHeld),
            Some(-2) => Ok(Renew::Overwritten),
            _ => Err(unexpected(&RENEW, &reply)),
        }
    }

    /// Blocking twin of [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_try_acquire",
            self.try_acquire(key, lease),
        )
    }

    /// Blocking twin of [`acquire`](Self::acquire).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_acquire(&self, key: &str, lease: Duration) -> Result<Option<Holding>> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_acquire",
            self.acquire(key, lease),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(&self, holding: &Holding) -> Result<Release> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_release",
            self.release(holding),
        )
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Errors
    ///
    /// As [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(&self, holding: &Holding, lease: Duration) -> Result<Renew> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_renew",
            self.renew(holding, lease),
        )
    }

    async fn eval_retrying(
        &self,
        script: &'static Script,
        key: &str,
        args: &[String],
    ) -> Result<Reply> {
        let keys = keys(key);
        match self.store.eval(script, &keys, args).await {
            Err(e) if e.is_connection() => self.store.eval(script, &keys, args).await,
            other => other,
        }
    }
}

fn keys(key: &str) -> [String; 2] {
    [key.to_owned(), fence_key(key)]
}

fn fence_of(holding: &Holding) -> Result<u64> {
    holding.fence().ok_or_else(|| {
        Error::new(
            ErrorKind::InvalidInput,
            "this holding has no fencing token: it is not a WatchLock or ScriptedLock holding",
        )
    })
}

impl<S: Store> crate::waiting::TryStep for ScriptedLock<S> {
    type Store = S;

    fn store(&self) -> &S {
        &self.store
    }

    fn options(&self) -> &Options {
        &self.options
    }

    fn waiters(&self) -> &Waiters {
        &self.waiters
    }

    async fn try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        ScriptedLock::try_acquire(self, key, lease).await
    }
}
