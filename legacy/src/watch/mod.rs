//! [`WatchLock`]: compare-and-set with `WATCH`/`MULTI`/`EXEC`, for servers without Lua.
//!
//! `WATCH` (Redis 2.2) makes `EXEC` a no-op when a watched key changed after the `WATCH`. That is
//! a compare-and-set without scripts, and it is all a lock needs:
//!
//! ```text
//! acquire  WATCH K F; GET K; PTTL K; GET F; TIME                  (one pipeline, one round trip)
//!          K absent, or K has no TTL and its timestamp has passed by server time:
//!              MULTI; SET K <now+timeout+1> PX <ms>; PEXPIREAT K <end>;
//!                     SET F <fence> PX <ms+retention>; PTTL K; EXEC  (one round trip)
//!          else: busy (the next WATCH on the connection resets it)
//! release  WATCH K F; GET K; PTTL K; GET F
//!          K == my value, K has a TTL, F == my fence:  MULTI; DEL K; EXEC
//!          else: not ours
//! renew    as release, with MULTI; SET K <new value> XX PX <ms>; PEXPIREAT K <end>;
//!                                  PEXPIRE F <ms+retention>; PTTL K; EXEC
//! ```
//!
//! (`UNWATCH` precedes each `WATCH` in its pipeline, so a pooled connection never carries an
//! earlier operation's watches.)
//!
//! An `EXEC` that comes back nil means someone wrote `K` or `F` in between; the operation reads
//! again. So the release cannot delete a lock someone else took in the meantime (F4, F4b), a
//! competitor's write cannot rewrite ours (F3), two recoveries cannot both succeed (F1), and the
//! fencing token moves in the very transaction that takes the lock (F11).
//!
//! Expiry is the server's: a lock this kind writes carries a TTL that ends exactly when its
//! timestamp says (`PEXPIREAT`, so even an `EXEC` delayed after the reads cannot stretch it; the
//! value is there for old clients reading the key); only a key an old client wrote (no TTL) is
//! judged by its timestamp, against the server's `TIME`. No client clock is
//! consulted in the [`Modern`](Profile::Modern) profile (F2 gone).
//!
//! A holding is relied on for the time the `PTTL K` inside the transaction reports, from when the
//! `EXEC` was sent ([`tairlock::deadline::local_deadline`]); in [`Classic`](Profile::Classic),
//! for the whole seconds `TTL K` reports less one (a server before 2.6 cuts the seconds down,
//! one since rounds them to the nearest).
//!
//! # Key layout
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `K`, exactly as named | string | `now + timeout + 1` in the [`Unit`](crate::Unit) (decimal), `now` the server's | until that timestamp passes (`PX`; `SETEX`, whole seconds, in [`Classic`](Profile::Classic)) | acquire, renew; deleted by release |
//! | [`fence_key(K)`](crate::wire::fence_key): `{K}:fence` | string | last fencing token issued (decimal) | lease + [`fence_retention`](crate::Options::fence_retention) (none in Classic) | acquire (renew moves its TTL) |
//!
//! The layout is [`ScriptedLock`](crate::ScriptedLock)'s too, so the two interoperate fully
//! (a holding of one can even be released by the other); with [`GetSetLock`](crate::GetSetLock)
//! clients see the interop matrix in the crate docs.
//!
//! # Fencing
//!
//! The token is `max(last + 1, server time in µs)`, written with the lock in one transaction,
//! the core's scheme: it strictly increases across grants, and keeps increasing after the fence
//! key has expired because it is anchored to the server clock (valid while the server clock
//! does not step back by more than the retention). In [`Classic`](Profile::Classic), without
//! `TIME`, it is a plain `INCR` counter that is never expired: one small key per lock name.
//!
//! # Cost
//!
//! Two round trips per operation (the watched reads, then `MULTI`…`EXEC`; one when the reads
//! decide "busy" or "not ours"), against one for a script; and each aborted `EXEC` costs two
//! more. They run on a dedicated connection, because `WATCH` state is per connection and the
//! store's multiplexed one is shared. Connections are pooled per `WatchLock` (clones share the
//! pool; [`pool_size`](crate::Options::pool_size) idle ones are kept); an empty pool costs a TCP
//! connect (and `AUTH`) first, and a burst of N concurrent operations opens up to N connections.
//!
//! # On a Redis Cluster
//!
//! [`ClusterStore`](tairlock::ClusterStore) is a [`WatchStore`] too ([`ClusterWatch`]): each
//! transaction runs on a dedicated connection to the master that owns the slot of `K` and `F`
//! (one slot: `F` carries `K`'s hash tag), found from `CLUSTER SLOTS` and corrected by `MOVED`;
//! a pooled connection keeps one connection per master it has used. While the slot migrates,
//! the watched reads back off and read again (bounded), and a transaction the old owner refuses
//! counts as an aborted `EXEC`: an operation succeeds only when its `EXEC` committed on the
//! slot's owner. Details, and what a migration does to each step, in [`cluster`].

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub mod cluster;
mod intercept;
mod memory;
mod redis;
mod store;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tairlock::deadline::{Remaining, local_deadline};
use tairlock::{Error, ErrorKind, Reply, Result, Ttl};

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use self::cluster::ClusterWatch;
pub use self::intercept::{InterceptConnection, WatchHook};
pub use self::memory::MemoryWatch;
pub use self::redis::RedisWatch;
pub use self::store::{Expiry, Read, TxOp, WatchConnection, WatchStore};

// Set in the options, which every kind shares; named here too, where it is used.
pub use crate::options::Profile;

use crate::options::{Holding, Options, Release, Renew, TryAcquire};
use crate::wire::{fence_key, held_for, not_a_timestamp, parse_value, validate_key};

/// How many times one operation re-reads after an aborted `EXEC` before giving up.
const MAX_ABORTS: u32 = 16;

/// The `WATCH`/`MULTI`/`EXEC` lock. See the [module docs](self).
///
/// Cheap to clone; clones share the connection pool.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tairlock::MemoryStore;
/// use tairlock_legacy::{Release, WatchLock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = WatchLock::new(MemoryStore::new());
/// let holding = locks
///     .try_acquire("lock.orderid", Duration::from_secs(10))
///     .await?
///     .holding()
///     .expect("nobody else holds it");
/// assert!(holding.fence().is_some());
/// assert_eq!(locks.release(&holding).await?, Release::Released);
/// # Ok(())
/// # }
/// ```
pub struct WatchLock<S: WatchStore> {
    store: S,
    options: Options,
    pool: Arc<parking_lot::Mutex<Vec<S::Connection>>>,
    waiters: Arc<tairlock::engine::Waiters>,
}

impl<S: WatchStore> Clone for WatchLock<S> {
    fn clone(&self) -> Self {
        WatchLock {
            store: self.store.clone(),
            options: self.options.clone(),
            pool: self.pool.clone(),
            waiters: self.waiters.clone(),
        }
    }
}

impl<S: WatchStore + fmt::Debug> fmt::Debug for WatchLock<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchLock")
            .field("store", &self.store)
            .field("options", &self.options)
            .field("idle_connections", &self.pool.lock().len())
            .finish()
    }
}

impl<S: WatchStore> WatchLock<S> {
    /// Locks on `store` with default [`Options`].
    pub fn new(store: S) -> Self {
        WatchLock::with_options(store, Options::default())
    }

    /// Locks on `store` with `options`.
    pub fn with_options(store: S, options: Options) -> Self {
        WatchLock {
            store,
            options,
            pool: Arc::new(parking_lot::Mutex::new(Vec::new())),
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

    /// One acquisition attempt, not yet started: drive it with [`WatchAttempt::step`] to pause
    /// between its watched reads and its `EXEC`, or to the end with [`WatchAttempt::run`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty key or a zero or overlong lease.
    pub fn attempt(&self, key: &str, lease: Duration) -> Result<WatchAttempt<'_, S>> {
        validate_key(key)?;
        let timeout = self.options.unit.timeout(lease)?;
        Ok(WatchAttempt {
            txn: Txn::new(self, key, Op::Acquire { timeout }),
        })
    }

    /// Take the lock if it is free, or if an old client's timestamp on it has passed.
    ///
    /// Reads, then `EXEC`s; re-reads when the `EXEC` aborts because someone wrote first.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: as [`attempt`](Self::attempt).
    /// - [`ErrorKind::WrongType`]: the lock or fence key holds something that is not ours;
    ///   nothing is written.
    /// - [`ErrorKind::Timeout`]: the keys kept changing under `WATCH` for 16 reads in a row.
    /// - Connection and server errors.
    ///
    /// # Cancel safety
    ///
    /// If dropped after the `EXEC` was sent, the lock may be held for nobody until its TTL ends.
    /// Dropped earlier, nothing was written (the connection is closed, not pooled).
    pub async fn try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        self.attempt(key, lease)?.run().await
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

    /// A release, not yet started; see [`release`](Self::release).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a holding without a fencing token (a
    /// [`GetSetLock`](crate::GetSetLock) one).
    pub fn release_attempt(&self, holding: &Holding) -> Result<WatchRelease<'_, S>> {
        let (value, fence) = credential(holding)?;
        Ok(WatchRelease {
            txn: Txn::new(self, holding.key(), Op::Release { value, fence }),
        })
    }

    /// Delete the lock only if it is still exactly ours: our timestamp, our fencing token, and
    /// a TTL (an old client's write removes it). Safe to repeat.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire), and [`ErrorKind::InvalidInput`] as
    /// [`release_attempt`](Self::release_attempt).
    ///
    /// # Cancel safety
    ///
    /// Dropping it may or may not release the lock; the TTL frees it in any case.
    pub async fn release(&self, holding: &Holding) -> Result<Release> {
        self.release_attempt(holding)?.run().await
    }

    /// Extend our lock to `lease` from now (server time): a new timestamp, the same fencing
    /// token. The returned holding replaces `holding` (which stops matching once the timestamp
    /// has moved: a renewal within the same unit writes the same one).
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release).
    ///
    /// # Cancel safety
    ///
    /// If dropped after the `EXEC` was sent, the lock may carry a timestamp the caller never saw;
    /// the old holding then no longer matches and the lock frees itself when the new one ends.
    pub async fn renew(&self, holding: &Holding, lease: Duration) -> Result<Renew> {
        let (value, fence) = credential(holding)?;
        let timeout = self.options.unit.timeout(lease)?;
        let mut txn = Txn::new(
            self,
            holding.key(),
            Op::Renew {
                value,
                fence,
                timeout,
            },
        );
        match txn.run().await? {
            Outcome::Renew(r) => Ok(r),
            _ => unreachable!("a renew transaction ends in a renew outcome"),
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

    async fn connection(&self) -> Result<S::Connection> {
        let idle = self.pool.lock().pop();
        match idle {
            Some(con) => Ok(con),
            None => self.store.watch_connection().await,
        }
    }

    fn recycle(&self, con: S::Connection) {
        let mut pool = self.pool.lock();
        if pool.len() < self.options.pool_size {
            pool.push(con);
        }
    }
}

fn credential(holding: &Holding) -> Result<(u64, u64)> {
    match holding.fence() {
        Some(fence) => Ok((holding.value(), fence)),
        None => Err(Error::new(
            ErrorKind::InvalidInput,
            "this holding has no fencing token: it is not a WatchLock or ScriptedLock holding",
        )),
    }
}

/// One [`WatchLock`] acquisition, in two kinds of steps: the watched reads, then `MULTI`/`EXEC`.
#[derive(Debug)]
pub struct WatchAttempt<'a, S: WatchStore> {
    txn: Txn<'a, S>,
}

impl<S: WatchStore> WatchAttempt<'_, S> {
    /// What the next [`step`](Self::step) sends: `"WATCH"` (`WATCH`, then the reads) or
    /// `"EXEC"` (`MULTI`, the writes, `EXEC`); `None` when finished.
    pub fn next_step(&self) -> Option<&'static str> {
        self.txn.next_step()
    }

    /// Run the next step. `Some(outcome)` when the attempt has finished; after an aborted
    /// `EXEC` the next step is `"WATCH"` again.
    ///
    /// # Errors
    ///
    /// As [`WatchLock::try_acquire`].
    pub async fn step(&mut self) -> Result<Option<TryAcquire>> {
        Ok(self.txn.step().await?.map(|o| match o {
            Outcome::Acquire(a) => a,
            _ => unreachable!("an acquire transaction ends in an acquire outcome"),
        }))
    }

    /// Run the remaining steps.
    ///
    /// # Errors
    ///
    /// As [`WatchLock::try_acquire`].
    pub async fn run(mut self) -> Result<TryAcquire> {
        loop {
            if let Some(outcome) = self.step().await? {
                return Ok(outcome);
            }
        }
    }
}

/// One [`WatchLock`] release, in steps as [`WatchAttempt`].
#[derive(Debug)]
pub struct WatchRelease<'a, S: WatchStore> {
    txn: Txn<'a, S>,
}

impl<S: WatchStore> WatchRelease<'_, S> {
    /// As [`WatchAttempt::next_step`].
    pub fn next_step(&self) -> Option<&'static str> {
        self.txn.next_step()
    }

    /// As [`WatchAttempt::step`].
    ///
    /// # Errors
    ///
    /// As [`WatchLock::release`].
    pub async fn step(&mut self) -> Result<Option<Release>> {
        Ok(self.txn.step().await?.map(|o| match o {
            Outcome::Release(r) => r,
            _ => unreachable!("a release transaction ends in a release outcome"),
        }))
    }

    /// Run the remaining steps.
    ///
    /// # Errors
    ///
    /// As [`WatchLock::release`].
    pub async fn run(mut self) -> Result<Release> {
        loop {
            if let Some(outcome) = self.step().await? {
                return Ok(outcome);
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Op {
    Acquire {
        timeout: u64,
    },
    Release {
        value: u64,
        fence: u64,
    },
    Renew {
        value: u64,
        fence: u64,
        timeout: u64,
    },
}

#[derive(Debug)]
enum Outcome {
    Acquire(TryAcquire),
    Release(Release),
    Renew(Renew),
}

/// What the watched reads saw.
#[derive(Debug, Clone)]
struct Observed {
    value: Option<u64>,
    ttl: Ttl,
    last_fence: Option<u64>,
    /// The judging clock: the server's (Modern) or the client's (Classic).
    now: Duration,
}

/// What to do after the reads.
enum Plan {
    Finish(Outcome),
    Commit(Vec<TxOp>, Pending),
}

/// How to interpret the replies of a successful `EXEC`.
#[derive(Debug, Clone, Copy)]
enum Pending {
    Acquired { value: u64, fence: Option<u64> },
    Released,
    Renewed { value: u64, fence: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Read,
    Exec,
    Done,
}

/// The shared state machine of every `WatchLock` operation.
struct Txn<'a, S: WatchStore> {
    lock: &'a WatchLock<S>,
    key: String,
    fence_key: String,
    op: Op,
    stage: Stage,
    con: Option<S::Connection>,
    queued: Option<(Vec<TxOp>, Pending)>,
    aborts: u32,
}

impl<S: WatchStore> fmt::Debug for Txn<'_, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Txn")
            .field("key", &self.key)
            .field("op", &self.op)
            .field("stage", &self.stage)
            .field("aborts", &self.aborts)
            .finish_non_exhaustive()
    }
}

impl<'a, S: WatchStore> Txn<'a, S> {
    fn new(lock: &'a WatchLock<S>, key: &str, op: Op) -> Self {
        Txn {
            lock,
            key: key.to_owned(),
            fence_key: fence_key(key),
            op,
            stage: Stage::Read,
            con: None,
            queued: None,
            aborts: 0,
        }
    }

    fn next_step(&self) -> Option<&'static str> {
        match self.stage {
            Stage::Read => Some("WATCH"),
            Stage::Exec => Some("EXEC"),
            Stage::Done => None,
        }
    }

    async fn run(&mut self) -> Result<Outcome> {
        loop {
            if let Some(outcome) = self.step().await? {
                return Ok(outcome);
            }
        }
    }

    async fn step(&mut self) -> Result<Option<Outcome>> {
        match self.stage {
            Stage::Read => {
                let mut con = match self.con.take() {
                    Some(con) => con,
                    None => self.lock.connection().await?,
                };
                // On any error the connection may still watch keys: drop it, never pool it.
                let observed = self.read(&mut con).await?;
                match self.plan(&observed)? {
                    Plan::Finish(outcome) => {
                        // No UNWATCH round trip: the next `watch` on this connection resets it.
                        self.lock.recycle(con);
                        self.stage = Stage::Done;
                        Ok(Some(outcome))
                    }
                    Plan::Commit(ops, pending) => {
                        self.con = Some(con);
                        self.queued = Some((ops, pending));
                        self.stage = Stage::Exec;
                        Ok(None)
                    }
                }
            }
            Stage::Exec => {
                let mut con = self.con.take().expect("a read step left a connection");
                let (ops, pending) = self.queued.take().expect("a read step queued");
                let sent = tokio::time::Instant::now();
                let replies = con.exec(&ops).await?;
                match replies {
                    None => {
                        // Someone wrote K or F after our WATCH: nothing ran; read again.
                        self.aborts += 1;
                        if self.aborts >= MAX_ABORTS {
                            self.lock.recycle(con);
                            self.stage = Stage::Done;
                            return Err(Error::new(
                                ErrorKind::Timeout,
                                format!(
                                    "lock key {:?} kept changing under WATCH ({MAX_ABORTS} aborted EXECs)",
                                    self.key
                                ),
                            ));
                        }
                        self.con = Some(con);
                        self.stage = Stage::Read;
                        Ok(None)
                    }
                    Some(replies) => {
                        self.lock.recycle(con);
                        self.stage = Stage::Done;
                        Ok(Some(self.finish(pending, &replies, sent)?))
                    }
                }
            }
            Stage::Done => panic!("a WatchLock operation was stepped after it finished"),
        }
    }

    async fn read(&self, con: &mut S::Connection) -> Result<Observed> {
        let profile = self.lock.options.profile;
        let mut reads = vec![
            Read::Get(self.key.clone()),
            match profile {
                Profile::Modern => Read::Pttl(self.key.clone()),
                Profile::Classic => Read::Ttl(self.key.clone()),
            },
            Read::Get(self.fence_key.clone()),
        ];
        if profile == Profile::Modern {
            reads.push(Read::Time);
        }
        let replies = con
            .watch(&[self.key.clone(), self.fence_key.clone()], &reads)
            .await?;
        let bad = || {
            Error::new(
                ErrorKind::Server,
                format!("unexpected replies to the WatchLock reads: {replies:?}"),
            )
        };
        let bulk = |i: usize| match replies.get(i) {
            Some(Reply::Nil) => Ok(None),
            Some(Reply::Data(d)) => Ok(Some(d.clone())),
            _ => Err(bad()),
        };
        let raw = bulk(0)?;
        let ttl = match (profile, replies.get(1).and_then(Reply::as_int)) {
            (_, Some(n)) if n < 0 => Ttl::from_pttl(n),
            (Profile::Modern, Some(ms)) => Ttl::Expires(Duration::from_millis(ms as u64)),
            (Profile::Classic, Some(s)) => Ttl::Expires(Duration::from_secs(s as u64)),
            (_, None) => return Err(bad()),
        };
        let fence_raw = bulk(2)?;
        let now = match profile {
            Profile::Modern => {
                let time = replies.get(3).and_then(Reply::as_array).ok_or_else(bad)?;
                let part = |i: usize| {
                    time.get(i)
                        .and_then(Reply::as_str)
                        .and_then(|s| s.parse::<u64>().ok())
                        .ok_or_else(bad)
                };
                tairlock::store::server_time(part(0)?, part(1)?)?
            }
            Profile::Classic => self.lock.options.clock.now(),
        };
        let value = match raw {
            None => None,
            Some(raw) => Some(parse_value(&raw).ok_or_else(|| not_a_timestamp(&self.key))?),
        };
        let last_fence = match fence_raw {
            None => None,
            Some(raw) => Some(parse_value(&raw).ok_or_else(|| {
                Error::new(
                    ErrorKind::WrongType,
                    format!(
                        "NOTLOCK fence key {:?} holds a value that is not a fencing token",
                        self.fence_key
                    ),
                )
            })?),
        };
        Ok(Observed {
            value,
            ttl,
            last_fence,
            now,
        })
    }

    fn plan(&self, seen: &Observed) -> Result<Plan> {
        let unit = self.lock.options.unit;
        match self.op {
            Op::Acquire { timeout } => {
                // Written by a Watch or Scripted client (a TTL): held while it exists; by an old
                // client (no TTL): judged by its timestamp. The rule ScriptedLock's script follows.
                if let Some(v) = seen.value
                    && let Some(left) = held_for(v, seen.ttl, unit.millis(), seen.now)
                {
                    return Ok(Plan::Finish(Outcome::Acquire(TryAcquire::Busy {
                        holder: Some(v),
                        remaining: Some(left),
                    })));
                }
                let value = unit.value(seen.now, timeout);
                let (ops, fence) = self.write_ops(value, seen, None, false);
                Ok(Plan::Commit(ops, Pending::Acquired { value, fence }))
            }
            Op::Release { value, fence } => match self.ownership(seen, value, fence) {
                Err(outcome) => Ok(Plan::Finish(Outcome::Release(outcome))),
                Ok(()) => Ok(Plan::Commit(
                    vec![TxOp::Del {
                        key: self.key.clone(),
                    }],
                    Pending::Released,
                )),
            },
            Op::Renew {
                value,
                fence,
                timeout,
            } => match self.ownership(seen, value, fence) {
                Err(outcome) => Ok(Plan::Finish(Outcome::Renew(match outcome {
                    Release::NotHeld | Release::Released | Release::Expired => Renew::NotHeld,
                    Release::HeldByOther => Renew::HeldByOther,
                    Release::Overwritten => Renew::Overwritten,
                }))),
                Ok(()) => {
                    let new_value = unit.value(seen.now, timeout);
                    let (ops, _) = self.write_ops(new_value, seen, Some(fence), true);
                    Ok(Plan::Commit(
                        ops,
                        Pending::Renewed {
                            value: new_value,
                            fence,
                        },
                    ))
                }
            },
        }
    }

    /// Whether the key is still exactly ours: `Err` says why not.
    fn ownership(&self, seen: &Observed, value: u64, fence: u64) -> Result<(), Release> {
        match (seen.value, seen.ttl) {
            (None, _) | (Some(_), Ttl::Missing) => Err(Release::NotHeld),
            // No TTL: an old client's SETNX or GETSET wrote it after us.
            (Some(_), Ttl::Persistent) => Err(Release::Overwritten),
            (Some(v), Ttl::Expires(_)) if v != value => Err(Release::HeldByOther),
            (Some(_), Ttl::Expires(_)) if seen.last_fence != Some(fence) => {
                Err(Release::HeldByOther)
            }
            (Some(_), Ttl::Expires(_)) => Ok(()),
        }
    }

    /// The writes that put `value` into the lock key: for an acquisition also a new fencing
    /// token (returned when computed here), for a renewal (`keep`) the fence key's TTL.
    fn write_ops(
        &self,
        value: u64,
        seen: &Observed,
        keep: Option<u64>,
        xx: bool,
    ) -> (Vec<TxOp>, Option<u64>) {
        let unit = self.lock.options.unit;
        let left = unit.remaining(value, seen.now);
        let value_bytes = value.to_string().into_bytes();
        match self.lock.options.profile {
            Profile::Modern => {
                // The key lives through the last millisecond before its timestamp expires, by
                // an absolute PEXPIREAT: however late the EXEC runs, TTL and timestamp agree.
                let now_ms = seen.now.as_millis() as u64;
                let last_ms = (unit.expires_at(value).as_millis() as u64).saturating_sub(1);
                let px = last_ms.saturating_sub(now_ms).max(1);
                let fence_ttl = Expiry::Millis(px + self.lock.options.retention_ms());
                let mut ops = vec![
                    TxOp::Set {
                        key: self.key.clone(),
                        value: value_bytes,
                        expiry: Expiry::Millis(px),
                        xx,
                    },
                    TxOp::Expire {
                        key: self.key.clone(),
                        expiry: Expiry::At(last_ms),
                    },
                ];
                let fence = match keep {
                    Some(_) => {
                        ops.push(TxOp::Expire {
                            key: self.fence_key.clone(),
                            expiry: fence_ttl,
                        });
                        None
                    }
                    None => {
                        let now_us = seen.now.as_micros() as u64;
                        let fence = seen.last_fence.map_or(0, |l| l + 1).max(now_us);
                        ops.push(TxOp::Set {
                            key: self.fence_key.clone(),
                            value: fence.to_string().into_bytes(),
                            expiry: fence_ttl,
                            xx: false,
                        });
                        Some(fence)
                    }
                };
                // Last: the time the key has left after the writes, the holding's deadline.
                ops.push(TxOp::Pttl {
                    key: self.key.clone(),
                });
                (ops, fence)
            }
            Profile::Classic => {
                let secs = left.as_millis().div_ceil(1000).max(1) as u64;
                let mut ops = vec![TxOp::Set {
                    key: self.key.clone(),
                    value: value_bytes,
                    expiry: Expiry::Seconds(secs),
                    xx: false,
                }];
                if keep.is_none() {
                    ops.push(TxOp::Incr {
                        key: self.fence_key.clone(),
                    });
                }
                ops.push(TxOp::Ttl {
                    key: self.key.clone(),
                });
                (ops, None)
            }
        }
    }

    /// The outcome of a committed transaction whose `EXEC` was sent at `sent`.
    fn finish(
        &self,
        pending: Pending,
        replies: &[Reply],
        sent: tokio::time::Instant,
    ) -> Result<Outcome> {
        let unit = self.lock.options.unit;
        let unexpected = || {
            Error::new(
                ErrorKind::Server,
                format!("unexpected EXEC replies from the WatchLock transaction: {replies:?}"),
            )
        };
        // The time the key has left after the writes, as the transaction's last reply reports
        // it; `None` when the key is gone (an EXEC that ran after the end it wrote).
        let left = || -> Result<Option<Remaining>> {
            let reported = replies
                .last()
                .and_then(Reply::as_int)
                .ok_or_else(unexpected)?;
            Ok(match self.lock.options.profile {
                Profile::Modern => Remaining::from_server_ms(reported),
                // Whole seconds, cut down (before 2.6) or rounded to the nearest (since): at
                // least one second less is surely left.
                Profile::Classic => u64::try_from(reported).ok().and_then(|secs| {
                    Remaining::from_server_ms(secs.saturating_sub(1) as i64 * 1000)
                }),
            })
        };
        let holding = |value: u64, fence: u64, left: Remaining| Holding {
            key: self.key.clone(),
            value,
            unit,
            fence: Some(fence),
            deadline: local_deadline(sent, left),
        };
        Ok(match pending {
            Pending::Acquired { value, fence } => {
                let fence = match fence {
                    Some(f) => f,
                    // Classic: the INCR's reply.
                    None => replies
                        .get(1)
                        .and_then(Reply::as_int)
                        .ok_or_else(unexpected)? as u64,
                };
                match left()? {
                    Some(left) => {
                        Outcome::Acquire(TryAcquire::Acquired(holding(value, fence, left)))
                    }
                    // Written and gone at once: nothing is held.
                    None => Outcome::Acquire(TryAcquire::Busy {
                        holder: None,
                        remaining: None,
                    }),
                }
            }
            Pending::Released => match replies.first().and_then(Reply::as_int) {
                Some(1) => Outcome::Release(Release::Released),
                Some(_) => Outcome::Release(Release::NotHeld),
                None => return Err(unexpected()),
            },
            Pending::Renewed { value, fence } => match replies.first() {
                Some(Reply::Nil) => Outcome::Renew(Renew::NotHeld),
                Some(_) => match left()? {
                    Some(left) => Outcome::Renew(Renew::Renewed(holding(value, fence, left))),
                    None => Outcome::Renew(Renew::NotHeld),
                },
                None => return Err(unexpected()),
            },
        })
    }
}

impl<S: WatchStore> crate::waiting::TryStep for WatchLock<S> {
    type Store = S;

    fn store(&self) -> &S {
        &self.store
    }

    fn options(&self) -> &Options {
        &self.options
    }

    fn waiters(&self) -> &tairlock::engine::Waiters {
        &self.waiters
    }

    async fn try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        WatchLock::try_acquire(self, key, lease).await
    }
}
