//! [`Semaphore`]: the lock type, its one-step operations, and its steps for the engine.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::options::SemaphoreOptions;
use crate::blocking;
use crate::deadline::{Remaining, local_deadline};
use crate::engine::Waiters;
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::ttl_ms;
use crate::script::{Reply, Script};
use crate::script::{array, unexpected};
use crate::scripts::{SEM_ACQUIRE, SEM_INSPECT, SEM_RELEASE, SEM_RENEW, SEM_SET_LIMIT};
use crate::store::Store;

/// The keys of one semaphore (see the [layout](super#key-layout)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreKeys {
    /// The zset of holders: nonce → lease end (ms, server time).
    pub holders: String,
    /// The hash of holdings: nonce → `<permits>:<fence>`.
    pub holdings: String,
    /// The last fencing token issued.
    pub fence: String,
    /// The pub/sub channel releases are announced on.
    pub channel: String,
    /// The fair mode's queue: waiter nonce → arrival (µs, server time).
    pub queue: String,
    /// The fair mode's waiters: waiter nonce → `<place ends ms>:<permits>`.
    pub waiters: String,
    /// The limit the semaphore was given (see [the limit](super#the-limit-and-changing-it)).
    pub limit: String,
}

impl SemaphoreKeys {
    /// Holders, holdings, fence and limit: [`SEM_RENEW`]'s and [`SEM_INSPECT`]'s keys.
    fn four(&self) -> [String; 4] {
        [
            self.holders.clone(),
            self.holdings.clone(),
            self.fence.clone(),
            self.limit.clone(),
        ]
    }

    /// [`SEM_ACQUIRE`]'s keys.
    fn six(&self) -> [String; 6] {
        [
            self.holders.clone(),
            self.holdings.clone(),
            self.fence.clone(),
            self.queue.clone(),
            self.waiters.clone(),
            self.limit.clone(),
        ]
    }
}

/// Permits held under one nonce, from [`Semaphore::attempt`]: the credential that renews and
/// releases them ([`Semaphore::renew`], [`Semaphore::release`]). Only an acquisition makes one:
/// a holder's nonce read from [`Semaphore::inspect`] is not a credential (an operator gives
/// those permits back with [`Semaphore::force_release`]).
///
/// ```compile_fail
/// # use tairlock::semaphore::Permit;
/// # let deadline = tokio::time::Instant::now();
/// let forged = Permit { nonce: "someone's".into(), permits: 1, fence: 1, expiry_ms: 0, deadline };
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Permit {
    /// The holder's nonce: the only way to renew or release these permits.
    pub nonce: String,
    /// How many permits it holds (as the server recorded them).
    pub permits: u32,
    /// The fencing token of this acquisition.
    pub fence: u64,
    /// The lease's end by the server's clock (ms since the epoch).
    pub expiry_ms: u64,
    /// The local instant the lease must stop being relied on (the
    /// [deadline rule](crate::deadline::local_deadline): the request's send time plus the lease's
    /// time left as the server's answer reported it, less drift).
    pub deadline: Instant,
}

/// The outcome of one [`Semaphore::attempt`]. Contention is an outcome, not an error.
#[must_use = "acquired permits are held until released or their lease ends"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PermitAttempt {
    /// Ours.
    Acquired(Permit),
    /// The permits do not fit under the limit now.
    Busy {
        /// Until the earliest holder's lease ends unless renewed.
        remaining: Duration,
        /// The permits held by live holders.
        in_use: u32,
    },
}

/// One live holder, in a [`SemaphoreInspection`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Holder {
    /// The holder's nonce.
    pub nonce: String,
    /// The permits it holds.
    pub permits: u32,
    /// Its fencing token.
    pub fence: u64,
    /// Its lease left, by the server's clock.
    pub remaining: Duration,
}

/// A read-only snapshot of one semaphore, from [`Semaphore::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct SemaphoreInspection {
    /// The holders key.
    pub key: String,
    /// The live holders, the earliest lease end first.
    pub holders: Vec<Holder>,
    /// The permits the live holders hold.
    pub in_use: u32,
    /// The last fencing token issued, while the fence state is retained.
    pub last_fence: Option<u64>,
    /// The limit stored with the semaphore, while it is kept (see [the
    /// limit](super#the-limit-and-changing-it)).
    pub limit: Option<u32>,
    /// A key of the layout holds something that is not ours (its type is wrong).
    pub foreign: bool,
}

/// What a release by nonce found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Given {
    /// The permits were held, and are back.
    Released,
    /// Nothing was held under the nonce (released already, or its lease passed).
    NotHeld,
    /// The first request got no answer and its repeat found nothing: the first one released
    /// the permits, or they were gone already. The nonce is gone either way.
    Unanswered,
}

/// A counting semaphore with per-permit leases on one store. See the [module docs](super).
///
/// Cheap to clone; one value serves any number of semaphore names, all with the same limit.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tairlock::{MemoryStore, Semaphore};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let builds = Semaphore::new(MemoryStore::new(), 3); // at most 3 permits per name
/// let big = builds.acquire("builds", 2).await?;
/// let small = builds.acquire("builds", 1).await?;
/// assert_eq!(builds.available("builds").await?, 0);
/// assert!(builds.try_acquire_for("builds", 1, Duration::from_millis(20)).await?.is_none());
/// assert!(big.fence() != small.fence(), "each holder its own fencing token");
/// big.release().await?;
/// small.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Semaphore<S> {
    pub(super) store: S,
    pub(super) limit: u32,
    pub(super) options: SemaphoreOptions,
    pub(super) local: Arc<Waiters>,
}

impl<S: Store> Semaphore<S> {
    /// Semaphores of `limit` permits on `store`, with default options. A limit of 0 is refused
    /// by every call that counts against it.
    pub fn new(store: S, limit: u32) -> Self {
        Semaphore::with_options(store, limit, SemaphoreOptions::default())
    }

    /// Semaphores of `limit` permits on `store` with `options`.
    pub fn with_options(store: S, limit: u32, options: SemaphoreOptions) -> Self {
        Semaphore {
            store,
            limit,
            options,
            local: Arc::default(),
        }
    }

    /// The same semaphores counted against another limit: for a semaphore whose stored limit
    /// was changed ([`set_limit`](Self::set_limit); see [the
    /// limit](super#the-limit-and-changing-it)). A semaphore that stores another limit refuses
    /// this handle's acquires.
    pub fn with_limit(&self, limit: u32) -> Self {
        Semaphore {
            limit,
            ..self.clone()
        }
    }

    /// The limit this handle counts against.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The options.
    pub fn options(&self) -> &SemaphoreOptions {
        &self.options
    }

    /// The keys of the semaphore `name`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty name or one with braces.
    pub fn keys(&self, name: &str) -> Result<SemaphoreKeys> {
        let ks = &self.options.keyspace;
        Ok(SemaphoreKeys {
            holders: ks.key(name, ":sem")?,
            holdings: ks.key(name, ":sem:h")?,
            fence: ks.key(name, ":sem:fence")?,
            channel: ks.key(name, ":sem:released")?,
            queue: ks.key(name, ":sem:q")?,
            waiters: ks.key(name, ":sem:qw")?,
            limit: ks.key(name, ":sem:n")?,
        })
    }

    /// Check `permits` against the limit: at least 1, at most the limit, and a limit of at
    /// least 1.
    pub(super) fn check_permits(&self, permits: u32) -> Result<()> {
        self.check_limit()?;
        if permits == 0 {
            return Err(Error::invalid("acquire at least 1 permit"));
        }
        if permits > self.limit {
            return Err(Error::invalid(format!(
                "{permits} permits can never fit under a limit of {}",
                self.limit
            )));
        }
        Ok(())
    }

    fn check_limit(&self) -> Result<()> {
        if self.limit == 0 {
            return Err(Error::invalid("a semaphore's limit must be at least 1"));
        }
        Ok(())
    }

    fn retention_ms(&self) -> String {
        (self.options.fence_retention.min(crate::MAX_TTL).as_millis() as u64).to_string()
    }

    /// The scripts sent through here are safe to repeat (a holder is named by its nonce;
    /// inspect only reads), so one repeat after no answer is harmless.
    async fn eval_retrying(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        match self.store.eval(script, keys, args).await {
            Err(e) if e.is_unanswered() => self.store.eval(script, keys, args).await,
            other => other,
        }
    }

    /// One attempt to take `permits` of the semaphore `name` for `ttl`, as the holder `nonce`;
    /// the building block of [`acquire`](Self::acquire) and friends, which also renew and
    /// release. One round trip.
    ///
    /// Safe to repeat with the same nonce: a repeat finds the permits the first attempt took
    /// (same count and fencing token, whatever `permits` the repeat asks for) and moves their
    /// lease to `ttl` from now, rather than taking more.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: empty name or nonce, 0 permits, a limit of 0, more
    ///   permits than the limit, `ttl` under 1 ms or over [`MAX_TTL`](crate::MAX_TTL); nothing
    ///   is sent.
    /// - [`ErrorKind::WrongType`]: a key of the layout holds data that is not ours; nothing is
    ///   changed.
    /// - [`ErrorKind::InvalidInput`] too when the semaphore stores another limit than this
    ///   handle's (see [the limit](super#the-limit-and-changing-it)); nothing is changed.
    /// - Store errors when no answer came after one repeat.
    ///
    /// # Cancel safety
    ///
    /// If dropped after the request was sent, the permits may have been taken; repeat with the
    /// same nonce and [`release`](Self::release) them, or [`abandon`](Self::abandon) the
    /// nonce, or their lease frees them.
    pub async fn attempt(
        &self,
        name: &str,
        permits: u32,
        ttl: Duration,
        nonce: &str,
    ) -> Result<PermitAttempt> {
        self.attempt_as(name, permits, ttl, nonce, false).await
    }

    /// In [fair mode](SemaphoreOptions::fair), [`attempt`](Self::attempt) that, refused, takes
    /// (or refreshes) the caller's place in the queue for the
    /// [waiter lease](SemaphoreOptions::waiter_lease); admitted, leaves it. A waiting call
    /// repeats it under one nonce within the waiter lease, and
    /// [`abandon`](Self::abandon)s that nonce when it gives up (which leaves the queue).
    /// Without fair mode it is [`attempt`](Self::attempt).
    ///
    /// # Errors
    ///
    /// As [`attempt`](Self::attempt).
    ///
    /// # Cancel safety
    ///
    /// As [`attempt`](Self::attempt); a place taken lapses with the waiter lease.
    pub async fn attempt_queued(
        &self,
        name: &str,
        permits: u32,
        ttl: Duration,
        nonce: &str,
    ) -> Result<PermitAttempt> {
        self.attempt_as(name, permits, ttl, nonce, true).await
    }

    pub(super) async fn attempt_as(
        &self,
        name: &str,
        permits: u32,
        ttl: Duration,
        nonce: &str,
        queue: bool,
    ) -> Result<PermitAttempt> {
        self.check_permits(permits)?;
        let keys = self.keys(name)?;
        let ttl_ms = ttl_ms(ttl)?;
        if nonce.is_empty() {
            return Err(Error::invalid("a holder's nonce may not be empty"));
        }
        let mode = match (self.options.fair, queue) {
            (false, _) => "0",
            (true, true) => "wait",
            (true, false) => "once",
        };
        let waiter_lease = match self.options.fair {
            true => crate::expire_lock::ttl_ms(self.options.waiter_lease)?,
            false => 0,
        };
        let args = [
            nonce.to_owned(),
            permits.to_string(),
            self.limit.to_string(),
            ttl_ms.to_string(),
            self.retention_ms(),
            mode.to_owned(),
            waiter_lease.to_string(),
        ];
        let sent = Instant::now();
        let reply = self.eval_retrying(&SEM_ACQUIRE, &keys.six(), &args).await?;
        let items = array(&reply, &SEM_ACQUIRE)?;
        let int = |i: usize| items.get(i).and_then(Reply::as_int);
        let bad = || unexpected(&SEM_ACQUIRE, &reply);
        match int(0) {
            Some(1) => Ok(PermitAttempt::Acquired(Permit {
                nonce: nonce.to_owned(),
                permits: int(4)
                    .unwrap_or(i64::from(permits))
                    .clamp(0, i64::from(u32::MAX)) as u32,
                fence: int(2).ok_or_else(bad)? as u64,
                expiry_ms: int(1).ok_or_else(bad)? as u64,
                deadline: local_deadline(sent, Remaining::at(items, 5, &SEM_ACQUIRE)?),
            })),
            Some(0) => Ok(PermitAttempt::Busy {
                remaining: Duration::from_millis(int(1).unwrap_or(0).max(0) as u64),
                in_use: int(2).unwrap_or(0).clamp(0, i64::from(u32::MAX)) as u32,
            }),
            _ => Err(bad()),
        }
    }

    /// Move the lease of the permits `permit` (from [`attempt`](Self::attempt)) to `ttl` from
    /// now (server time). Returns the new local deadline (dated, as every lease, from this
    /// call's send time and the time left the server reports), or `None` when the holder is gone
    /// (released, or its lease passed: an expired holder cannot come back). Safe to repeat. One
    /// round trip.
    ///
    /// # Errors
    ///
    /// As [`attempt`](Self::attempt).
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the lease may or may not have moved; repeat it.
    pub async fn renew(
        &self,
        name: &str,
        permit: &Permit,
        ttl: Duration,
    ) -> Result<Option<Instant>> {
        let nonce = &permit.nonce;
        let keys = self.keys(name)?;
        let ttl_ms = ttl_ms(ttl)?;
        let args = [nonce.to_owned(), ttl_ms.to_string(), self.retention_ms()];
        let sent = Instant::now();
        let reply = self.eval_retrying(&SEM_RENEW, &keys.four(), &args).await?;
        let items = array(&reply, &SEM_RENEW)?;
        match items.first().and_then(Reply::as_int) {
            Some(1) => Ok(Some(local_deadline(
                sent,
                Remaining::at(items, 2, &SEM_RENEW)?,
            ))),
            Some(-1) => Ok(None),
            _ => Err(unexpected(&SEM_RENEW, &reply)),
        }
    }

    /// Give back the permits `permit` (from [`attempt`](Self::attempt)) and wake the waiters.
    /// Returns whether they were held (false: released already, or their lease passed). Safe
    /// to repeat. One round trip (two when the first gets no answer: a repeat that then finds
    /// nothing reports them released, as the first request may have: the nonce is gone either
    /// way).
    ///
    /// # Errors
    ///
    /// As [`attempt`](Self::attempt).
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the permits may or may not be back; repeat it, or their lease
    /// frees them.
    pub async fn release(&self, name: &str, permit: &Permit) -> Result<bool> {
        Ok(self.give_back(name, &permit.nonce).await? != Given::NotHeld)
    }

    /// Undo what the acquisition `nonce` (the caller's, from [`attempt`](Self::attempt) or
    /// [`attempt_queued`](Self::attempt_queued)) left behind: its place in the queue, and the
    /// permits an attempt under it took, also one whose reply never came. For a caller of the
    /// single steps that gives up. Returns whether permits were held under it. Safe to repeat.
    ///
    /// # Errors
    ///
    /// As [`attempt`](Self::attempt).
    ///
    /// # Cancel safety
    ///
    /// As [`release`](Self::release).
    pub async fn abandon(&self, name: &str, nonce: &str) -> Result<bool> {
        if nonce.is_empty() {
            return Err(Error::invalid("a holder's nonce may not be empty"));
        }
        Ok(self.give_back(name, nonce).await? != Given::NotHeld)
    }

    /// Give back the permits of the holder `nonce` whoever holds them, for operators (the
    /// nonces are in [`inspect`](Self::inspect)): the holder is not told, and keeps running
    /// with permits it no longer has until its next renewal finds them gone; only fencing
    /// protects the resource then. A waiter `nonce` leaves the queue. Returns whether permits
    /// were held under it. Safe to repeat (a nonce names one acquisition).
    ///
    /// # Errors
    ///
    /// As [`attempt`](Self::attempt).
    ///
    /// # Cancel safety
    ///
    /// As [`release`](Self::release).
    pub async fn force_release(&self, name: &str, nonce: &str) -> Result<bool> {
        if nonce.is_empty() {
            return Err(Error::invalid("a holder's nonce may not be empty"));
        }
        Ok(self.give_back(name, nonce).await? != Given::NotHeld)
    }

    /// [`SEM_RELEASE`] of `nonce` (which also leaves the queue), repeated once after no answer.
    pub(super) async fn give_back(&self, name: &str, nonce: &str) -> Result<Given> {
        let keys = self.keys(name)?;
        let args = [
            nonce.to_owned(),
            keys.channel.clone(),
            self.store.pubsub().publish_command().to_owned(),
        ];
        let keys = [keys.holders, keys.holdings, keys.queue, keys.waiters];
        let (reply, repeated) = match self.store.eval(&SEM_RELEASE, &keys, &args).await {
            Err(e) if e.is_unanswered() => {
                (self.store.eval(&SEM_RELEASE, &keys, &args).await?, true)
            }
            other => (other?, false),
        };
        match (reply.as_int(), repeated) {
            (Some(1), _) => Ok(Given::Released),
            (Some(-1), false) => Ok(Given::NotHeld),
            (Some(-1), true) => Ok(Given::Unanswered),
            _ => Err(unexpected(&SEM_RELEASE, &reply)),
        }
    }

    /// Change the limit stored with the semaphore `name` to `limit`, for operators: from now on
    /// it admits callers against `limit`, and refuses callers that count against another one
    /// ([`ErrorKind::InvalidInput`]: give them [`with_limit`](Self::with_limit)`(limit)`).
    /// Live holders keep their permits and renew them as before, also when they are more than
    /// `limit` now: shrinking refuses new holders until enough have left. Returns the previous
    /// limit, `None` when none was stored. One round trip.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a limit of 0 or an invalid name, nothing sent;
    /// [`ErrorKind::WrongType`] when a key of the layout holds data that is not ours, nothing
    /// changed; store errors.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the limit may or may not have changed; repeat it.
    pub async fn set_limit(&self, name: &str, limit: u32) -> Result<Option<u32>> {
        if limit == 0 {
            return Err(Error::invalid("a semaphore's limit must be at least 1"));
        }
        let keys = self.keys(name)?;
        let args = [limit.to_string(), self.retention_ms()];
        let reply = self
            .eval_retrying(&SEM_SET_LIMIT, &[keys.fence, keys.limit], &args)
            .await?;
        match reply.as_int() {
            Some(0) => Ok(None),
            Some(previous) if previous > 0 => {
                Ok(Some(previous.clamp(0, i64::from(u32::MAX)) as u32))
            }
            _ => Err(unexpected(&SEM_SET_LIMIT, &reply)),
        }
    }

    /// A read-only snapshot of the semaphore `name`: its live holders with their permits,
    /// fencing tokens and remaining leases. One round trip.
    ///
    /// # Errors
    ///
    /// Invalid name; store errors.
    pub async fn inspect(&self, name: &str) -> Result<SemaphoreInspection> {
        let keys = self.keys(name)?;
        let reply = self.eval_retrying(&SEM_INSPECT, &keys.four(), &[]).await?;
        let items = array(&reply, &SEM_INSPECT)?;
        let bad = || unexpected(&SEM_INSPECT, &reply);
        let text = |i: usize| items.get(i).and_then(Reply::as_str);
        let (zt, ht) = (text(0).ok_or_else(bad)?, text(1).ok_or_else(bad)?);
        let lt = text(3).ok_or_else(bad)?;
        let mut holders = Vec::new();
        for item in items.iter().skip(5) {
            let fields = item.as_array().ok_or_else(bad)?;
            let int = |i: usize| fields.get(i).and_then(Reply::as_int);
            holders.push(Holder {
                nonce: fields
                    .first()
                    .and_then(Reply::as_str)
                    .ok_or_else(bad)?
                    .to_owned(),
                permits: int(1).ok_or_else(bad)?.clamp(0, i64::from(u32::MAX)) as u32,
                fence: fields
                    .get(2)
                    .and_then(Reply::as_str)
                    .and_then(|f| f.parse().ok())
                    .ok_or_else(bad)?,
                remaining: Duration::from_millis(int(3).ok_or_else(bad)?.max(0) as u64),
            });
        }
        Ok(SemaphoreInspection {
            key: keys.holders,
            in_use: holders
                .iter()
                .map(|h| h.permits)
                .fold(0, u32::saturating_add),
            holders,
            last_fence: text(2).and_then(|f| f.parse().ok()),
            limit: text(4).and_then(|l| l.parse().ok()),
            foreign: !matches!(zt, "none" | "zset")
                || !matches!(ht, "none" | "hash")
                || !matches!(lt, "none" | "string"),
        })
    }

    /// The permits free now: the limit the semaphore stores (this handle's when it stores none)
    /// less the permits live holders hold (0 when they hold more, after the limit shrank). One
    /// round trip, read-only.
    ///
    /// # Errors
    ///
    /// Invalid name, a limit of 0; [`ErrorKind::WrongType`] when a key of the layout holds
    /// data that is not ours; store errors.
    pub async fn available(&self, name: &str) -> Result<u32> {
        self.check_limit()?;
        let inspection = self.inspect(name).await?;
        if inspection.foreign {
            return Err(Error::new(
                ErrorKind::WrongType,
                format!("semaphore {name:?}: a key holds data that is not a semaphore's"),
            ));
        }
        let limit = inspection.limit.unwrap_or(self.limit);
        Ok(limit.saturating_sub(inspection.in_use))
    }

    /// Blocking twin of [`available`](Self::available).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_available(&self, name: &str) -> Result<u32> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_available",
            self.available(name),
        )
    }

    /// Blocking twin of [`inspect`](Self::inspect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_inspect(&self, name: &str) -> Result<SemaphoreInspection> {
        blocking::block_on(self.store.runtime(), "blocking_inspect", self.inspect(name))
    }

    /// Blocking twin of [`attempt`](Self::attempt).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_attempt(
        &self,
        name: &str,
        permits: u32,
        ttl: Duration,
        nonce: &str,
    ) -> Result<PermitAttempt> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_attempt",
            self.attempt(name, permits, ttl, nonce),
        )
    }

    /// Blocking twin of [`attempt_queued`](Self::attempt_queued).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_attempt_queued(
        &self,
        name: &str,
        permits: u32,
        ttl: Duration,
        nonce: &str,
    ) -> Result<PermitAttempt> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_attempt_queued",
            self.attempt_queued(name, permits, ttl, nonce),
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
        permit: &Permit,
        ttl: Duration,
    ) -> Result<Option<Instant>> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_renew",
            self.renew(name, permit, ttl),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(&self, name: &str, permit: &Permit) -> Result<bool> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_release",
            self.release(name, permit),
        )
    }

    /// Blocking twin of [`abandon`](Self::abandon).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_abandon(&self, name: &str, nonce: &str) -> Result<bool> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_abandon",
            self.abandon(name, nonce),
        )
    }

    /// Blocking twin of [`force_release`](Self::force_release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_force_release(&self, name: &str, nonce: &str) -> Result<bool> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_force_release",
            self.force_release(name, nonce),
        )
    }

    /// Blocking twin of [`set_limit`](Self::set_limit).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_set_limit(&self, name: &str, limit: u32) -> Result<Option<u32>> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_set_limit",
            self.set_limit(name, limit),
        )
    }
}
