//! The scripted reader/writer lock: options, keys, and its single steps (one script each).

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
#[cfg(doc)]
use tairlock::ErrorKind;
use tairlock::expire_lock::lease_at;
use tairlock::script::{array, int_at, unexpected};
use tairlock::scripts::{EXPIRE_UNLOCK, RENEW};
use tairlock::{Keyspace, Lease, Reply, Result, Script, Store, Ttl, Unlock};
use tokio::time::Instant;

use crate::guard::Slot;
use crate::scripts::{
    COUNT, DOWNGRADE, INSPECT, READ_ACQUIRE, READ_RELEASE, READ_RENEW, WRITE_ABANDON, WRITE_ACQUIRE,
};

/// Who goes first when readers and a writer both want the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preference {
    /// A waiting writer announces its intent, and new readers stay out until it has had its
    /// turn (Go's `sync.RWMutex`, glibc's writer-preferring rwlock). Readers that already hold
    /// the lock keep it, and an owner's reentrant reads are served locally, so they never wait.
    /// The default.
    #[default]
    Writer,
    /// Readers enter whenever no writer *holds* the lock (Redisson's `RReadWriteLock`): the most
    /// read throughput, and a writer may starve under continuous reads.
    Reader,
}

/// Settings of an [`RwLock`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Key prefix (default `tairlock:`).
    pub keyspace: Keyspace,
    /// Writer or reader preference (default writer).
    pub preference: Preference,
    /// The lease of read and write holds, renewed by the watchdog at a third of its length while
    /// the guard lives (default 30 s). A crashed holder blocks others for at most this long.
    pub watchdog_lease: Duration,
    /// How long a waiting writer's intent lasts unless re-asserted (default 1 s). A waiting
    /// writer re-asserts it at a third of this; one that gives up, crashes or is cancelled
    /// keeps new readers out for at most this long.
    pub intent_lease: Duration,
    /// How long the last fencing token is kept after a write lease ends (default 60 s).
    pub fence_retention: Duration,
    /// How waiting acquires wait (default: by release notification).
    pub wait: tairlock::WaitStrategy,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            keyspace: Keyspace::default(),
            preference: Preference::Writer,
            watchdog_lease: Duration::from_secs(30),
            intent_lease: Duration::from_secs(1),
            fence_retention: Duration::from_secs(60),
            wait: tairlock::WaitStrategy::default(),
        }
    }
}

impl Options {
    /// Use this keyspace.
    pub fn keyspace(mut self, keyspace: Keyspace) -> Self {
        self.keyspace = keyspace;
        self
    }

    /// Writer or reader preference.
    pub fn preference(mut self, preference: Preference) -> Self {
        self.preference = preference;
        self
    }

    /// The lease of read and write holds (renewed by the watchdog).
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long a waiting writer's intent lasts unless re-asserted.
    pub fn intent_lease(mut self, lease: Duration) -> Self {
        self.intent_lease = lease;
        self
    }

    /// Keep the last fencing token this long after a write lease ends.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// How to wait for a busy lock.
    pub fn wait(mut self, wait: tairlock::WaitStrategy) -> Self {
        self.wait = wait;
        self
    }
}

/// The keys of one reader/writer lock; all share the hash tag `{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwKeys {
    /// The write lease: `<prefix>{name}:w`.
    pub writer: String,
    /// The readers (a sorted set, nonce → lease expiry): `<prefix>{name}:r`.
    pub readers: String,
    /// A waiting writer's intent: `<prefix>{name}:wi`.
    pub intent: String,
    /// The last fencing token issued: `<prefix>{name}:fence`.
    pub fence: String,
    /// The pub/sub channel releases are announced on: `<prefix>{name}:released`.
    pub channel: String,
}

/// What kept an acquisition out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blocker {
    /// A writer holds the lock.
    Writer,
    /// A writer is waiting (writer preference): readers, and other writers, stay out.
    Intent,
    /// Live readers hold the lock (writers only).
    Readers(usize),
}

/// A reader's lease: its nonce is its identity and credential on the readers set.
#[derive(Clone, PartialEq, Eq)]
pub struct ReadLease {
    nonce: String,
    expires_at: Duration,
    deadline: Instant,
}

impl ReadLease {
    /// The reader's nonce (its member in the readers set).
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// When the server drops this reader unless renewed, as server time since the epoch.
    pub fn expires_at(&self) -> Duration {
        self.expires_at
    }

    /// The local instant by which this client must stop relying on the lease (request sent +
    /// lease − 1% − 2 ms).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl fmt::Debug for ReadLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadLease")
            .field("nonce", &short(&self.nonce))
            .field("expires_at_ms", &self.expires_at.as_millis())
            .finish()
    }
}

/// A writer's lease (the core's [`Lease`] format, with a fencing token) and its local deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteLease {
    lease: Lease,
    deadline: Instant,
}

impl WriteLease {
    /// The lease stored in the writer key.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The fencing token.
    pub fn fence(&self) -> u64 {
        self.lease.fence()
    }

    /// The local instant by which this client must stop relying on the lease.
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// The outcome of one [`RwLock::read_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAttempt {
    /// Admitted.
    Acquired {
        /// The reader's lease.
        lease: ReadLease,
        /// Live readers now, this one included.
        readers: usize,
    },
    /// Kept out.
    Blocked {
        /// By whom.
        by: Blocker,
        /// How long until the blocker's lease (or intent) ends unless renewed, when known.
        remaining: Option<Duration>,
    },
}

/// The outcome of one [`RwLock::write_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteAttempt {
    /// Taken.
    Acquired(WriteLease),
    /// Kept out.
    Blocked {
        /// By whom.
        by: Blocker,
        /// How long until the blocker's lease (or intent; for readers, the longest reader
        /// lease) ends unless renewed, when known.
        remaining: Option<Duration>,
    },
}

/// One live reader, from [`RwLock::inspect`].
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderInfo {
    /// The reader's nonce.
    pub nonce: String,
    /// Its lease expiry, server time since the epoch.
    pub expires_at: Duration,
    /// Its remaining lease (at the snapshot's server time).
    pub remaining: Duration,
}

impl fmt::Debug for ReaderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderInfo")
            .field("nonce", &short(&self.nonce))
            .field("remaining", &self.remaining)
            .finish()
    }
}

/// A waiting writer's intent, from [`RwLock::inspect`].
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentInfo {
    /// The waiting writer's acquisition nonce.
    pub nonce: String,
    /// How long the intent lasts unless re-asserted.
    pub remaining: Duration,
}

impl fmt::Debug for IntentInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntentInfo")
            .field("nonce", &short(&self.nonce))
            .field("remaining", &self.remaining)
            .finish()
    }
}

/// One atomic snapshot of a reader/writer lock, from [`RwLock::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwInspection {
    /// The lock's keys.
    pub keys: RwKeys,
    /// The server's time at the snapshot, since the epoch.
    pub server_time: Duration,
    /// The writer's lease, when a writer holds the lock.
    pub writer: Option<Lease>,
    /// The writer key's time to live.
    pub writer_ttl: Ttl,
    /// The live readers, earliest expiry first.
    pub readers: Vec<ReaderInfo>,
    /// A waiting writer's intent, if one is up.
    pub intent: Option<IntentInfo>,
    /// The last fencing token issued, while retained.
    pub last_fence: Option<u64>,
    /// Keys that hold data that is not this lock's, as `(key, Redis type)`.
    pub foreign: Vec<(String, String)>,
}

impl RwInspection {
    /// Whether any of the lock's keys exists (a writer, a live reader, an intent).
    pub fn is_active(&self) -> bool {
        self.writer.is_some() || !self.readers.is_empty() || self.intent.is_some()
    }
}

/// The live readers and the writer's state, from [`RwLock::state`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwState {
    /// Live readers.
    pub readers: usize,
    /// The writer key's time to live ([`Ttl::Missing`] when no writer holds the lock).
    pub writer: Ttl,
    /// The intent key's time to live ([`Ttl::Missing`] when no writer waits).
    pub intent: Ttl,
}

/// Identifies an owner of reentrant holds: a thread (blocking API) or an explicit
/// [`Owner`](tairlock::Owner) (async API).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum OwnerKey {
    Thread(std::thread::ThreadId),
    Owner(u64),
}

pub(crate) type HoldKey = (OwnerKey, String);

/// Per-client local state: the engine's waiters (a FIFO queue per lock name), and the reentrant
/// holds of every owner.
pub(crate) struct Local<S: Store> {
    pub(crate) waiters: tairlock::engine::Waiters,
    holds: Mutex<HashMap<HoldKey, Arc<Slot<S>>>>,
}

impl<S: Store> Default for Local<S> {
    fn default() -> Self {
        Local {
            waiters: Default::default(),
            holds: Mutex::default(),
        }
    }
}

impl<S: Store> Local<S> {
    pub(crate) fn find(&self, key: &HoldKey) -> Option<Arc<Slot<S>>> {
        self.holds.lock().get(key).cloned()
    }

    /// Register `slot` as `key`'s hold unless another live one got there first; true if
    /// registered.
    pub(crate) fn register(&self, key: HoldKey, slot: &Arc<Slot<S>>) -> bool {
        let mut holds = self.holds.lock();
        if holds.get(&key).is_some_and(|s| s.depth() > 0) {
            return false;
        }
        holds.insert(key, slot.clone());
        true
    }

    /// Remove `key`'s entry if it is `slot`.
    pub(crate) fn unregister(&self, key: &HoldKey, slot: &Slot<S>) {
        let mut holds = self.holds.lock();
        if holds
            .get(key)
            .is_some_and(|s| std::ptr::eq(Arc::as_ptr(s), slot))
        {
            holds.remove(key);
        }
    }
}

/// Reader/writer locks on one store: the scripted, atomic, crash-safe one. See the
/// [crate docs](crate).
///
/// Cheap to clone (clones share the local queues and reentrancy maps); one value serves any
/// number of lock names. Separate `RwLock` values act like separate processes.
pub struct RwLock<S: Store> {
    store: S,
    options: Options,
    pub(crate) local: Arc<Local<S>>,
}

impl<S: Store> Clone for RwLock<S> {
    fn clone(&self) -> Self {
        RwLock {
            store: self.store.clone(),
            options: self.options.clone(),
            local: self.local.clone(),
        }
    }
}

impl<S: Store> fmt::Debug for RwLock<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl<S: Store> RwLock<S> {
    /// Reader/writer locks on `store` with default options.
    pub fn new(store: S) -> Self {
        RwLock::with_options(store, Options::default())
    }

    /// Reader/writer locks on `store` with `options`.
    pub fn with_options(store: S, options: Options) -> Self {
        RwLock {
            store,
            options,
            local: Arc::default(),
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

    /// The command the release scripts announce with on this store (see
    /// [`Store::pubsub`](tairlock::Store::pubsub)).
    fn publish_command(&self) -> String {
        self.store.pubsub().publish_command().to_owned()
    }

    /// The keys of the lock `name`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty name or one with braces.
    pub fn keys(&self, name: &str) -> Result<RwKeys> {
        let k = &self.options.keyspace;
        Ok(RwKeys {
            writer: k.key(name, ":w")?,
            readers: k.key(name, ":r")?,
            intent: k.key(name, ":wi")?,
            fence: k.key(name, ":fence")?,
            channel: k.key(name, ":released")?,
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
    pub async fn read_acquire(
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
                lease: ReadLease {
                    nonce: nonce.to_owned(),
                    expires_at: Duration::from_millis(int_at(items, 1).unwrap_or(0).max(0) as u64),
                    deadline: deadline(sent, lease),
                },
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
    /// (re-asserting it when this nonce's intent is already up), so new readers stay out. One
    /// round trip; safe to repeat with the same nonce.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn write_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        intent: Option<Duration>,
    ) -> Result<WriteAttempt> {
        let keys = self.keys(name)?;
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
                ],
            )
            .await?;
        let items = array(&reply, &WRITE_ACQUIRE)?;
        match int_at(items, 0) {
            Some(1) => Ok(WriteAttempt::Acquired(WriteLease {
                lease: lease_at(items, 1, &WRITE_ACQUIRE)?,
                deadline: deadline(sent, lease),
            })),
            Some(0) => Ok(WriteAttempt::Blocked {
                by: blocker(items, &WRITE_ACQUIRE, &reply)?,
                remaining: remaining(int_at(items, 2)),
            }),
            _ => Err(unexpected(&WRITE_ACQUIRE, &reply)),
        }
    }

    /// Single step: remove the reader `nonce`. True when it was a live reader; false when its
    /// lease had already passed (or it was released already). When it was the last live reader,
    /// waiting writers are notified.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn read_release(&self, name: &str, nonce: &str) -> Result<bool> {
        let keys = self.keys(name)?;
        let reply = self
            .eval(
                &READ_RELEASE,
                &[keys.readers],
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
    pub async fn write_release(&self, name: &str, lease: &Lease) -> Result<Unlock> {
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
    pub async fn read_renew(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
    ) -> Result<Option<ReadLease>> {
        let keys = self.keys(name)?;
        let lease_ms = tairlock::ttl_ms(lease)?;
        let sent = Instant::now();
        let reply = self
            .eval(
                &READ_RENEW,
                &[keys.readers],
                &[nonce.to_owned(), lease_ms.to_string()],
            )
            .await?;
        let items = array(&reply, &READ_RENEW)?;
        match int_at(items, 0) {
            Some(1) => Ok(Some(ReadLease {
                nonce: nonce.to_owned(),
                expires_at: Duration::from_millis(int_at(items, 1).unwrap_or(0).max(0) as u64),
                deadline: deadline(sent, lease),
            })),
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
    pub async fn write_renew(
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
            Some(1) => Ok(Some(WriteLease {
                lease: lease_at(items, 1, &RENEW)?,
                deadline: deadline(sent, lease),
            })),
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
    pub async fn write_abandon(&self, name: &str, nonce: &str) -> Result<u64> {
        let keys = self.keys(name)?;
        let reply = self
            .eval(
                &WRITE_ABANDON,
                &[keys.writer, keys.intent],
                &[nonce.to_owned(), keys.channel, self.publish_command()],
            )
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
    pub async fn downgrade_lease(
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
            Some(1) => Ok(Some(ReadLease {
                nonce: nonce.to_owned(),
                expires_at: Duration::from_millis(int_at(items, 1).unwrap_or(0).max(0) as u64),
                deadline: deadline(sent, read_lease),
            })),
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
    pub async fn state(&self, name: &str) -> Result<RwState> {
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
    pub async fn readers(&self, name: &str) -> Result<usize> {
        Ok(self.state(name).await?.readers)
    }

    /// One atomic, read-only snapshot of the lock `name`: the writer, every live reader with its
    /// remaining lease, a waiting writer's intent, the last fencing token.
    ///
    /// # Errors
    ///
    /// Invalid name; store errors.
    pub async fn inspect(&self, name: &str) -> Result<RwInspection> {
        let keys = self.keys(name)?;
        let reply = self
            .eval(
                &INSPECT,
                &[
                    keys.writer.clone(),
                    keys.readers.clone(),
                    keys.intent.clone(),
                    keys.fence.clone(),
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
        Ok(RwInspection {
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

/// The first characters of a nonce, for logs and `Debug` (the nonce is a credential).
pub(crate) fn short(nonce: &str) -> String {
    format!("{}…", &nonce[..nonce.len().min(8)])
}

/// The local instant by which a lease of `ttl` requested at `sent` must be considered gone: the
/// core's drift rule ([`local_deadline`](tairlock::engine::local_deadline)).
pub(crate) fn deadline(sent: Instant, ttl: Duration) -> Instant {
    tairlock::engine::local_deadline(sent, ttl)
}

fn remaining(pttl: Option<i64>) -> Option<Duration> {
    pttl.filter(|ms| *ms >= 0)
        .map(|ms| Duration::from_millis(ms as u64))
}

fn blocker(items: &[Reply], script: &Script, reply: &Reply) -> Result<Blocker> {
    match items.get(1).and_then(Reply::as_str) {
        Some("writer") => Ok(Blocker::Writer),
        Some("intent") => Ok(Blocker::Intent),
        Some("readers") => Ok(Blocker::Readers(
            int_at(items, 3).unwrap_or(0).max(0) as usize
        )),
        _ => Err(unexpected(script, reply)),
    }
}
