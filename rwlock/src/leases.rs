//! The scripted lock's single steps, one script each, as [`Leases`]: the store and the options,
//! nothing local. [`RwLock`](crate::RwLock) exposes them; its holds renew and release through
//! them.

use std::time::Duration;

use tairlock::deadline::{Remaining, local_deadline};
use tairlock::scripts::{EXPIRE_UNLOCK, RENEW};
use tairlock::{Error, ErrorKind, Lease, Reply, Result, Script, Store, Ttl, Unlock};
use tokio::time::Instant;

use crate::decode::{array, blocker, int_at, lease_at, remaining, unexpected};
use crate::options::{Options, Preference};
use crate::scripts::{
    COUNT, DOWNGRADE, FAIR_WRITE_ACQUIRE, FAIR_WRITE_RELEASE, INSPECT, READ_ACQUIRE, READ_RELEASE,
    READ_RENEW, WRITE_ABANDON, WRITE_ACQUIRE,
};
use crate::types::{
    IntentInfo, QueuedWriter, ReadAttempt, ReadLease, ReaderInfo, RwInspection, RwKeys, RwState,
    WriteAttempt, WriteLease,
};

/// One store and the options: every single step of the scripted lock. The documentation of each
/// step is on its [`RwLock`](crate::RwLock) namesake.
pub(crate) struct Leases<S: Store> {
    store: S,
    options: Options,
}

impl<S: Store> Clone for Leases<S> {
    fn clone(&self) -> Self {
        Leases {
            store: self.store.clone(),
            options: self.options.clone(),
        }
    }
}

impl<S: Store> Leases<S> {
    pub(crate) fn new(store: S, options: Options) -> Self {
        Leases { store, options }
    }

    pub(crate) fn store(&self) -> &S {
        &self.store
    }

    pub(crate) fn options(&self) -> &Options {
        &self.options
    }

    /// The command the release scripts announce with on this store (see
    /// [`Store::pubsub`](tairlock::Store::pubsub)).
    pub(crate) fn publish_command(&self) -> String {
        self.store.pubsub().publish_command().to_owned()
    }

    /// The keys of the lock `name`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty name or one with braces.
    pub(crate) fn keys(&self, name: &str) -> Result<RwKeys> {
        let k = &self.options.keyspace;
        Ok(RwKeys {
            writer: k.key(name, ":w")?,
            readers: k.key(name, ":r")?,
            intent: k.key(name, ":wi")?,
            fence: k.key(name, ":fence")?,
            channel: k.key(name, ":released")?,
            intent_channel: k.key(name, ":intent")?,
            queue: k.key(name, ":wq")?,
            waiters: k.key(name, ":ww")?,
        })
    }

    /// Single step: admit one reader with `nonce` for `lease`, unless a writer holds the lock
    /// (or, under [`Preference::Writer`], waits for it). One round trip; safe to repeat with the
    /// same nonce (a repeat returns the same admission).
    ///
    /// Guards ([`read`](Self::read) and friends) are built on this; use it directly only to
    /// drive the protocol step by step (tests, `tairlock race`).
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: bad name or lease; nothing is sent.
    /// - [`ErrorKind::WrongType`]: a key holds data that is not this lock's; nothing changed.
    /// - Store errors (one retry after a dropped connection).
    pub(crate) async fn read_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
    ) -> Result<ReadAttempt> {
        let keys = self.keys(name)?;
        let lease_ms = tairlock::ttl_ms(lease)?;
        let honour = match self.options.preference {
            Preference::Writer => "1",
            Preference::Reader => "0",
        };
        let sent = Instant::now();
        let reply = self
            .eval(
                &READ_ACQUIRE,
                &[keys.writer, keys.readers, keys.intent],
                &[nonce.to_owned(), lease_ms.to_string(), honour.to_owned()],
            )
            .await?;
        let items = array(&reply, &READ_ACQUIRE)?;
        match int_at(items, 0) {
            Some(1) => Ok(ReadAttempt::Acquired {
                lease: read_grant(nonce, items, 3, sent, &READ_ACQUIRE)?,
                readers: int_at(items, 2).unwrap_or(1).max(0) as usize,
            }),
            Some(0) => Ok(ReadAttempt::Blocked {
                by: blocker(items, &READ_ACQUIRE, &reply)?,
                remaining: remaining(int_at(items, 2)),
            }),
            _ => Err(unexpected(&READ_ACQUIRE, &reply)),
        }
    }

    /// Single step: take the write lock with `nonce` for `lease` if no writer holds it and no
    /// live reader is in (and no other writer's intent is up); the lease carries a fencing
    /// token. When refused and `intent` is given, announce this writer's intent for that long
    /// (re-asserting it when this nonce's intent is already up), so new readers stay out. When
    /// refused by live readers with no intent given and `announce_idle`, announce on the intent
    /// channel that idle shared read holds should go (reader preference). One round trip; safe
    /// to repeat with the same nonce (a repeated announcement is only a repeated hint).
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire); a nonce that is not hex (it becomes the
    /// lease's nonce and the intent's value) is [`ErrorKind::InvalidInput`] too.
    pub(crate) async fn write_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        intent: Option<Duration>,
        announce_idle: bool,
    ) -> Result<WriteAttempt> {
        let keys = self.keys(name)?;
        writer_nonce(nonce)?;
        let lease_ms = tairlock::ttl_ms(lease)?;
        let intent_ms = match intent {
            Some(d) => tairlock::ttl_ms(d)?,
            None => 0,
        };
        let sent = Instant::now();
        let reply = self
            .eval(
                &WRITE_ACQUIRE,
                &[keys.writer, keys.readers, keys.intent, keys.fence],
                &[
                    nonce.to_owned(),
                    lease_ms.to_string(),
                    intent_ms.to_string(),
                    self.retention_ms(),
                    keys.intent_channel,
                    self.publish_command(),
                    if announce_idle { "1" } else { "0" }.to_owned(),
                ],
            )
            .await?;
        let items = array(&reply, &WRITE_ACQUIRE)?;
        match int_at(items, 0) {
            Some(1) => Ok(WriteAttempt::Acquired(write_grant(
                items,
                sent,
                &WRITE_ACQUIRE,
            )?)),
            Some(0) => Ok(WriteAttempt::Blocked {
                by: blocker(items, &WRITE_ACQUIRE, &reply)?,
                remaining: remaining(int_at(items, 2)),
            }),
            _ => Err(unexpected(&WRITE_ACQUIRE, &reply)),
        }
    }

    /// Single step of the fair mode: one fair writer's attempt under `nonce` (the same for
    /// every attempt of one acquisition). The write lock when it is free for writing and no live
    /// fair writer is queued ahead, or when a release granted it to `nonce` (confirmed now: the
    /// lease becomes `lease` long, same fencing token); else refused, and — with `queue` — this
    /// writer joins the queue or refreshes its place for
    /// [`Options::waiter_lease`](crate::Options::waiter_lease), and under writer preference the
    /// intent names the first queued writer for `intent`. With `announce_idle` (a waiting
    /// writer under reader preference, once per wait), refused by live readers, it announces
    /// `idle` on the intent channel, as [`write_acquire`](Self::write_acquire) does. One round
    /// trip; safe to repeat.
    ///
    /// # Errors
    ///
    /// As [`write_acquire`](Self::write_acquire).
    #[allow(clippy::too_many_arguments, reason = "one per argument of the script")]
    pub(crate) async fn fair_write_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        intent: Option<Duration>,
        queue: bool,
        wake: &str,
        announce_idle: bool,
    ) -> Result<WriteAttempt> {
        let keys = self.keys(name)?;
        writer_nonce(nonce)?;
        let lease_ms = tairlock::ttl_ms(lease)?;
        let intent_ms = match intent {
            Some(d) => tairlock::ttl_ms(d)?,
            None => 0,
        };
        let waiter_ms = tairlock::ttl_ms(self.options.waiter_lease)?;
        let sent = Instant::now();
        let reply = self
            .eval(
                &FAIR_WRITE_ACQUIRE,
                &[
                    keys.writer,
                    keys.readers,
                    keys.intent,
                    keys.fence,
                    keys.queue,
                    keys.waiters,
                ],
                &[
                    nonce.to_owned(),
                    lease_ms.to_string(),
                    intent_ms.to_string(),
                    self.retention_ms(),
                    waiter_ms.to_string(),
                    wake.to_owned(),
                    if queue { "1" } else { "0" }.to_owned(),
                    keys.intent_channel,
                    self.publish_command(),
                    if announce_idle { "1" } else { "0" }.to_owned(),
                ],
            )
            .await?;
        let items = array(&reply, &FAIR_WRITE_ACQUIRE)?;
        match int_at(items, 0) {
            Some(1) => Ok(WriteAttempt::Acquired(write_grant(
                items,
                sent,
                &FAIR_WRITE_ACQUIRE,
            )?)),
            Some(0) => Ok(WriteAttempt::Blocked {
                by: blocker(items, &FAIR_WRITE_ACQUIRE, &reply)?,
                remaining: remaining(int_at(items, 2)),
            }),
            _ => Err(unexpected(&FAIR_WRITE_ACQUIRE, &reply)),
        }
    }

    /// Single step of the fair mode: release the write lock if it holds exactly `lease`, and
    /// grant it in the same step to the first live queued fair writer (woken on its wake
    /// channel); with nobody queued, waiting readers and plain writers are notified.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn fair_write_release(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        let released = self
            .fair_write_release_by(name, lease.value(), "lease", None)
            .await?;
        Ok(unlock_of(released))
    }

    /// Single step of the fair mode: the fair writer `nonce` leaves the queue, withdraws its
    /// intent, and gives back (handing it on) a write lock it was granted or took under that
    /// nonce. For a fair writer that gives up waiting or is cancelled.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn fair_write_leave(&self, name: &str, nonce: &str) -> Result<Unlock> {
        self.fair_write_leave_as_of(name, nonce, None).await
    }

    /// [`fair_write_leave`](Self::fair_write_leave); with `last_fence`, a write lock held under
    /// the nonce whose fencing token is larger (taken or granted after a snapshot that saw
    /// `last_fence` last) is left alone.
    pub(crate) async fn fair_write_leave_as_of(
        &self,
        name: &str,
        nonce: &str,
        last_fence: Option<u64>,
    ) -> Result<Unlock> {
        let released = self
            .fair_write_release_by(name, nonce, "nonce", last_fence)
            .await?;
        Ok(unlock_of(released))
    }

    /// [`FAIR_WRITE_RELEASE`] by lease value or by nonce (`by`, bounded by `last_fence`); the
    /// `released` part of its reply.
    async fn fair_write_release_by(
        &self,
        name: &str,
        what: &str,
        by: &str,
        last_fence: Option<u64>,
    ) -> Result<i64> {
        let keys = self.keys(name)?;
        let intent_ms = match self.options.preference {
            Preference::Writer => tairlock::ttl_ms(self.options.intent_lease)?,
            Preference::Reader => 0,
        };
        let mut args = vec![
            what.to_owned(),
            by.to_owned(),
            self.retention_ms(),
            keys.channel,
            self.publish_command(),
            intent_ms.to_string(),
        ];
        args.extend(last_fence.map(|f| f.to_string()));
        let reply = self
            .eval(
                &FAIR_WRITE_RELEASE,
                &[
                    keys.writer,
                    keys.intent,
                    keys.fence,
                    keys.queue,
                    keys.waiters,
                ],
                &args,
            )
            .await?;
        array(&reply, &FAIR_WRITE_RELEASE)?
            .first()
            .and_then(Reply::as_int)
            .ok_or_else(|| unexpected(&FAIR_WRITE_RELEASE, &reply))
    }

    /// Single step: remove the reader `nonce`. True when it was a live reader; false when its
    /// lease had already passed (or it was released already). When it was the last live reader,
    /// waiting writers are notified.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn read_release(&self, name: &str, nonce: &str) -> Result<bool> {
        let keys = self.keys(name)?;
        let reply = self
            .eval(
                &READ_RELEASE,
                &[keys.readers, keys.queue, keys.waiters],
                &[nonce.to_owned(), keys.channel, self.publish_command()],
            )
            .await?;
        match reply.as_int() {
            Some(1) => Ok(true),
            Some(-1) => Ok(false),
            _ => Err(unexpected(&READ_RELEASE, &reply)),
        }
    }

    /// Single step: release the write lock if it holds exactly `lease` (the core's
    /// compare-and-delete, on the writer key); waiting readers and writers are notified.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn write_release(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        let keys = self.keys(name)?;
        let reply = self
            .eval(
                &EXPIRE_UNLOCK,
                &[keys.writer],
                &[
                    lease.value().to_owned(),
                    keys.channel,
                    self.publish_command(),
                ],
            )
            .await?;
        match reply.as_int() {
            Some(1) => Ok(Unlock::Released),
            Some(0) => Ok(Unlock::HeldByOther),
            Some(-1) => Ok(Unlock::NotHeld),
            _ => Err(unexpected(&EXPIRE_UNLOCK, &reply)),
        }
    }

    /// Single step: move the reader `nonce`'s lease to `lease` from now (server time). `None`
    /// when the reader is gone (its lease passed): it cannot come back.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn read_renew(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
    ) -> Result<Option<ReadLease>> {
        self.read_renew_as(name, nonce, lease, Instant::now()).await
    }

    /// [`read_renew`](Self::read_renew) dated from `sent`: a repeat of a renewal whose reply
    /// was lost is dated from the first send.
    pub(crate) async fn read_renew_as(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        sent: Instant,
    ) -> Result<Option<ReadLease>> {
        let keys = self.keys(name)?;
        let lease_ms = tairlock::ttl_ms(lease)?;
        let reply = self
            .eval(
                &READ_RENEW,
                &[keys.readers],
                &[nonce.to_owned(), lease_ms.to_string()],
            )
            .await?;
        let items = array(&reply, &READ_RENEW)?;
        match int_at(items, 0) {
            Some(1) => Ok(Some(read_grant(nonce, items, 2, sent, &READ_RENEW)?)),
            Some(-1) => Ok(None),
            _ => Err(unexpected(&READ_RENEW, &reply)),
        }
    }

    /// Single step: extend a held write lease to `lease` from now (the core's renewal, on the
    /// writer key). The lease rotates; the fencing token stays. `None` when the lease is gone.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn write_renew(
        &self,
        name: &str,
        current: &Lease,
        lease: Duration,
    ) -> Result<Option<WriteLease>> {
        self.write_renew_as(name, current, lease, tairlock::new_nonce(), Instant::now())
            .await
    }

    /// [`write_renew`](Self::write_renew) with the renewed lease's `nonce`, dated from `sent`:
    /// a repeat of a renewal whose reply was lost uses the same nonce and the first send time.
    pub(crate) async fn write_renew_as(
        &self,
        name: &str,
        current: &Lease,
        lease: Duration,
        nonce: String,
        sent: Instant,
    ) -> Result<Option<WriteLease>> {
        let keys = self.keys(name)?;
        let lease_ms = tairlock::ttl_ms(lease)?;
        let reply = self
            .eval(
                &RENEW,
                &[keys.writer, keys.fence],
                &[
                    current.value().to_owned(),
                    lease_ms.to_string(),
                    nonce,
                    self.retention_ms(),
                ],
            )
            .await?;
        let items = array(&reply, &RENEW)?;
        match int_at(items, 0) {
            Some(1) => Ok(Some(write_grant(items, sent, &RENEW)?)),
            Some(0 | -1) => Ok(None),
            _ => Err(unexpected(&RENEW, &reply)),
        }
    }

    /// Single step: undo what the write acquisition `nonce` left behind — the write lock if it
    /// took it (before any renewal), and its intent if it announced one — and notify waiters.
    /// For a writer that gives up waiting or is cancelled. Returns how many keys were deleted.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn write_abandon(&self, name: &str, nonce: &str) -> Result<u64> {
        self.write_abandon_as_of(name, nonce, None).await
    }

    /// [`write_abandon`](Self::write_abandon); with `last_fence`, a write lock whose fencing
    /// token is larger (issued after a snapshot that saw `last_fence` last) is left alone.
    pub(crate) async fn write_abandon_as_of(
        &self,
        name: &str,
        nonce: &str,
        last_fence: Option<u64>,
    ) -> Result<u64> {
        let keys = self.keys(name)?;
        let mut args = vec![nonce.to_owned(), keys.channel, self.publish_command()];
        args.extend(last_fence.map(|f| f.to_string()));
        let reply = self
            .eval(&WRITE_ABANDON, &[keys.writer, keys.intent], &args)
            .await?;
        reply
            .as_int()
            .map(|n| n.max(0) as u64)
            .ok_or_else(|| unexpected(&WRITE_ABANDON, &reply))
    }

    /// Single step: turn the write lock held with `lease` into a read lock with `nonce` for
    /// `read_lease`, atomically (no writer can slip in between); waiting readers are notified.
    /// `None` when the write lease is gone.
    ///
    /// Safe to repeat with the same `nonce`: once the downgrade happened, a repeat finds its
    /// reader and answers the same (with the reader's expiry), so a call that got no answer (a
    /// timeout or a dropped connection) is repeated here once more than other single steps.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub(crate) async fn downgrade_lease(
        &self,
        name: &str,
        lease: &Lease,
        nonce: &str,
        read_lease: Duration,
    ) -> Result<Option<ReadLease>> {
        let keys = self.keys(name)?;
        let lease_ms = tairlock::ttl_ms(read_lease)?;
        let sent = Instant::now();
        let script_keys = [keys.writer, keys.readers];
        let args = [
            lease.value().to_owned(),
            nonce.to_owned(),
            lease_ms.to_string(),
            keys.channel,
            self.publish_command(),
        ];
        let reply = match self.eval(&DOWNGRADE, &script_keys, &args).await {
            Err(e) if e.is_unanswered() => self.eval(&DOWNGRADE, &script_keys, &args).await,
            other => other,
        }?;
        let items = array(&reply, &DOWNGRADE)?;
        match int_at(items, 0) {
            Some(1) => Ok(Some(read_grant(nonce, items, 3, sent, &DOWNGRADE)?)),
            Some(0 | -1) => Ok(None),
            _ => Err(unexpected(&DOWNGRADE, &reply)),
        }
    }

    /// How many readers hold the lock `name` now, and whether a writer holds or waits for it.
    /// One round trip, read-only.
    ///
    /// # Errors
    ///
    /// Invalid name; [`ErrorKind::WrongType`] when the readers key holds a user's data; store
    /// errors.
    pub(crate) async fn state(&self, name: &str) -> Result<RwState> {
        let keys = self.keys(name)?;
        let reply = self
            .eval(&COUNT, &[keys.writer, keys.readers, keys.intent], &[])
            .await?;
        let items = array(&reply, &COUNT)?;
        let at = |i| int_at(items, i).ok_or_else(|| unexpected(&COUNT, &reply));
        Ok(RwState {
            readers: at(0)?.max(0) as usize,
            writer: Ttl::from_pttl(at(1)?),
            intent: Ttl::from_pttl(at(2)?),
        })
    }

    /// How many readers hold the lock `name` now (live leases only). One round trip.
    ///
    /// # Errors
    ///
    /// As [`state`](Self::state).
    pub(crate) async fn readers(&self, name: &str) -> Result<usize> {
        Ok(self.state(name).await?.readers)
    }

    /// One atomic, read-only snapshot of the lock `name`: the writer, every live reader with its
    /// remaining lease, a waiting writer's intent, the last fencing token.
    ///
    /// # Errors
    ///
    /// Invalid name; store errors.
    pub(crate) async fn inspect(&self, name: &str) -> Result<RwInspection> {
        let keys = self.keys(name)?;
        let reply = self
            .eval(
                &INSPECT,
                &[
                    keys.writer.clone(),
                    keys.readers.clone(),
                    keys.intent.clone(),
                    keys.fence.clone(),
                    keys.queue.clone(),
                    keys.waiters.clone(),
                ],
                &[],
            )
            .await?;
        let items = array(&reply, &INSPECT)?;
        let bad = || unexpected(&INSPECT, &reply);
        let text = |i: usize| items.get(i).and_then(Reply::as_str).map(str::to_owned);
        let now = int_at(items, 0).ok_or_else(bad)?.max(0) as u64;
        let mut foreign = Vec::new();
        let mut check = |key: &str, t: Option<String>, want: &str| {
            let t = t.unwrap_or_default();
            if t != "none" && t != want {
                foreign.push((key.to_owned(), t));
            }
        };
        check(&keys.writer, text(1), "string");
        check(&keys.readers, text(4), "zset");
        check(&keys.intent, text(6), "string");
        check(&keys.fence, text(9), "string");
        if items.len() > 11 {
            check(&keys.queue, text(11), "zset");
        }
        let writer_value = text(2);
        let writer = writer_value.as_deref().and_then(Lease::parse);
        if writer.is_none() && writer_value.is_some() {
            foreign.push((keys.writer.clone(), "string".to_owned()));
        }
        let mut readers = Vec::new();
        if let Some(flat) = items.get(5).and_then(Reply::as_array) {
            for pair in flat.chunks(2) {
                let (Some(nonce), Some(score)) = (
                    pair.first().and_then(Reply::as_str),
                    pair.get(1).and_then(Reply::as_str),
                ) else {
                    continue;
                };
                let expiry = score.parse::<f64>().unwrap_or(0.0).max(0.0) as u64;
                readers.push(ReaderInfo {
                    nonce: nonce.to_owned(),
                    expires_at: Duration::from_millis(expiry),
                    remaining: Duration::from_millis(expiry.saturating_sub(now)),
                });
            }
        }
        let intent = match (text(7), int_at(items, 8)) {
            (Some(nonce), Some(pttl)) => Some(IntentInfo {
                nonce,
                remaining: Duration::from_millis(pttl.max(0) as u64),
            }),
            _ => None,
        };
        let mut queue = Vec::new();
        if let Some(flat) = items.get(12).and_then(Reply::as_array) {
            for pair in flat.chunks(2) {
                let Some(nonce) = pair.first().and_then(Reply::as_str) else {
                    continue;
                };
                let ends = pair
                    .get(1)
                    .and_then(Reply::as_str)
                    .and_then(|e| e.split(':').next())
                    .and_then(|e| e.parse::<u64>().ok())
                    .unwrap_or(0);
                queue.push(QueuedWriter {
                    nonce: nonce.to_owned(),
                    remaining: Duration::from_millis(ends.saturating_sub(now)),
                });
            }
        }
        Ok(RwInspection {
            queue,
            server_time: Duration::from_millis(now),
            writer,
            writer_ttl: Ttl::from_pttl(int_at(items, 3).unwrap_or(-2)),
            readers,
            intent,
            last_fence: text(10).and_then(|f| f.parse().ok()),
            foreign,
            keys,
        })
    }

    pub(crate) fn retention_ms(&self) -> String {
        (self
            .options
            .fence_retention
            .min(tairlock::MAX_TTL)
            .as_millis() as u64)
            .to_string()
    }

    /// Every script here is safe to repeat (nonces make acquires and renewals idempotent;
    /// releases compare), so one repeat after no answer (a dropped connection or a timeout: the
    /// script may have run) is harmless.
    async fn eval(
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
}

/// The reader lease `nonce` a grant or renewal answered (`{1, expiry, …}`), relied on until the
/// deadline rule's instant for the remaining time the reply reports at `at`, the request having
/// been first sent at `sent`.
fn read_grant(
    nonce: &str,
    items: &[Reply],
    at: usize,
    sent: Instant,
    script: &Script,
) -> Result<ReadLease> {
    Ok(ReadLease {
        nonce: nonce.to_owned(),
        expires_at: Duration::from_millis(int_at(items, 1).unwrap_or(0).max(0) as u64),
        deadline: local_deadline(sent, Remaining::at(items, at, script)?),
    })
}

/// The write lease a grant or renewal answered (`{1, lease, pttl}`), relied on until the
/// deadline rule's instant for the writer key's `PTTL` the reply reports, the request having
/// been first sent at `sent`.
fn write_grant(items: &[Reply], sent: Instant, script: &Script) -> Result<WriteLease> {
    Ok(WriteLease {
        lease: lease_at(items, 1, script)?,
        deadline: local_deadline(sent, Remaining::at(items, 2, script)?),
    })
}

/// The `released` part of a release script's reply as an [`Unlock`].
fn unlock_of(released: i64) -> Unlock {
    match released {
        1 => Unlock::Released,
        0 => Unlock::HeldByOther,
        _ => Unlock::NotHeld,
    }
}

/// A writer's nonce is the lease's nonce and the intent key's value, both hex by format (the
/// scripts refuse anything else as foreign data): anything else is refused before it is sent.
fn writer_nonce(nonce: &str) -> Result<()> {
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("a writer's nonce must be hex digits, not {nonce:?}"),
        ));
    }
    Ok(())
}
