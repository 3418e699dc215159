//! [`RwLock`]: the store, the options and the local state (queues, owner registry). Its single
//! steps are `Leases`'; its guard-returning acquires are in `acquire.rs`.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tairlock::{Lease, Result, Store, Unlock};

use crate::leases::Leases;
use crate::options::Options;
use crate::registry::Local;
use crate::types::{
    ReadAttempt, ReadLease, RwInspection, RwKeys, RwState, WriteAttempt, WriteLease,
};

/// Reader/writer locks on one store: the scripted, atomic, crash-safe one. See the
/// [crate docs](crate).
///
/// Cheap to clone (clones share the local queues and reentrancy maps); one value serves any
/// number of lock names. Separate `RwLock` values act like separate processes.
///
/// # Examples
///
/// A waiting writer keeps new readers out (writer preference, the default):
///
/// ```
/// use std::time::Duration;
/// use tairlock::MemoryStore;
/// use tairlock_rwlock::RwLock;
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = RwLock::new(MemoryStore::new());
/// let reader = locks.read("catalog").await?;
///
/// let writer = tokio::spawn({
///     let locks = locks.clone();
///     async move { locks.write("catalog").await?.release().await }
/// });
/// tokio::time::sleep(Duration::from_millis(50)).await; // the writer is waiting now
/// assert!(locks.try_read("catalog").await?.is_none(), "new readers wait behind the writer");
///
/// reader.release().await?;
/// writer.await.unwrap()?; // in as soon as the reader left
/// assert_eq!(locks.readers("catalog").await?, 0);
/// # Ok(())
/// # }
/// ```
pub struct RwLock<S: Store> {
    pub(crate) leases: Leases<S>,
    pub(crate) local: Arc<Local<S>>,
}

impl<S: Store> Clone for RwLock<S> {
    fn clone(&self) -> Self {
        RwLock {
            leases: self.leases.clone(),
            local: self.local.clone(),
        }
    }
}

impl<S: Store> fmt::Debug for RwLock<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RwLock")
            .field("options", self.options())
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
            leases: Leases::new(store, options),
            local: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        self.leases.store()
    }

    /// The options.
    pub fn options(&self) -> &Options {
        self.leases.options()
    }

    /// The keys of the lock `name`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput) for an empty name or one with braces.
    pub fn keys(&self, name: &str) -> Result<RwKeys> {
        self.leases.keys(name)
    }

    /// Single step: admit one reader with `nonce` for `lease`, unless a writer holds the lock
    /// (or, under [`Preference::Writer`](crate::Preference::Writer), waits for it). One round trip; safe to repeat with the
    /// same nonce (a repeat returns the same admission, with the time it has left: the lease's
    /// [`deadline`](crate::ReadLease::deadline) is dated from that, never from `lease`).
    ///
    /// Guards ([`read`](Self::read) and friends) are built on this; use it directly only to
    /// drive the protocol step by step (tests, `tairlock race`).
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput): bad name or lease; nothing is sent.
    /// - [`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType): a key holds data that is not this lock's; nothing changed.
    /// - Store errors (one retry after a dropped connection).
    pub async fn read_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
    ) -> Result<ReadAttempt> {
        self.leases.read_acquire(name, nonce, lease).await
    }

    /// Single step: take the write lock with `nonce` for `lease` if no writer holds it and no
    /// live reader is in (and no other writer's intent is up); the lease carries a fencing
    /// token. When refused and `intent` is given, announce this writer's intent for that long
    /// (re-asserting it when this nonce's intent is already up), so new readers stay out. One
    /// round trip; safe to repeat with the same nonce (a repeat returns the lease the first call
    /// wrote, with the time it has left).
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire); a nonce that is not hex (it becomes the
    /// lease's nonce and the intent's value) is
    /// [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput) too.
    pub async fn write_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        intent: Option<Duration>,
    ) -> Result<WriteAttempt> {
        self.leases
            .write_acquire(name, nonce, lease, intent, false)
            .await
    }

    /// Single step: remove the reader `nonce`. True when it was a live reader; false when its
    /// lease had already passed (or it was released already). When it was the last live reader,
    /// waiting writers are notified.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn read_release(&self, name: &str, nonce: &str) -> Result<bool> {
        self.leases.read_release(name, nonce).await
    }

    /// Single step: release the write lock if it holds exactly `lease` (the core's
    /// compare-and-delete, on the writer key); waiting readers and writers are notified.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn write_release(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        self.leases.write_release(name, lease).await
    }

    /// Single step of the fair mode ([`Options::fair`](crate::Options::fair)): one fair writer's
    /// attempt under `nonce`, the same for every attempt of one acquisition. The write lock when
    /// no writer holds it, no live reader is in, no plain writer's intent is up and no live fair
    /// writer is queued ahead — or when a release granted it to `nonce` (confirmed now: the lease
    /// becomes `lease` long, the fencing token stays). Else refused, and with `queue` this writer
    /// joins the server-side queue or refreshes its place for
    /// [`Options::waiter_lease`](crate::Options::waiter_lease) (repeat within it to keep the
    /// place and to find a grant whose announcement was lost); with `intent`, the intent names
    /// the first queued writer for that long, so new readers stay out. One round trip; safe to
    /// repeat with the same nonce.
    ///
    /// Guards ([`write`](Self::write) and friends, with [`Options::fair`](crate::Options::fair))
    /// are built on this; use it directly only to drive the protocol step by step (tests,
    /// `tairlock race`).
    ///
    /// # Errors
    ///
    /// As [`write_acquire`](Self::write_acquire).
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the write lock (or a place in the queue) may be held under
    /// `nonce`: repeat the attempt, or [`fair_write_leave`](Self::fair_write_leave) with it.
    pub async fn fair_write_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        intent: Option<Duration>,
        queue: bool,
    ) -> Result<WriteAttempt> {
        let wake = self.fair_wake_channel(name)?;
        self.leases
            .fair_write_acquire(name, nonce, lease, intent, queue, &wake, false)
            .await
    }

    /// Single step of the fair mode: release the write lock if it holds exactly `lease`, and
    /// grant it in the same step to the first live queued fair writer, which alone is woken;
    /// with nobody queued, waiting readers and plain writers are notified. Safe to repeat.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn fair_write_release(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        self.leases.fair_write_release(name, lease).await
    }

    /// Single step of the fair mode: the fair writer `nonce` leaves the queue, withdraws its
    /// intent, and gives back (handing it on) a write lock a release granted it, or that it took,
    /// under that nonce. For a fair writer that gives up waiting or is cancelled. Safe to repeat.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn fair_write_leave(&self, name: &str, nonce: &str) -> Result<Unlock> {
        self.leases.fair_write_leave(name, nonce).await
    }

    /// [`fair_write_leave`](Self::fair_write_leave) for an operator working from a snapshot
    /// ([`inspect`](Self::inspect)) whose last fencing token was `last_fence`: the place and
    /// the intent go, but a write lock held under the nonce is given back only if its fencing
    /// token is no larger (one taken or granted after the snapshot is left alone).
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn fair_write_leave_as_of(
        &self,
        name: &str,
        nonce: &str,
        last_fence: u64,
    ) -> Result<Unlock> {
        self.leases
            .fair_write_leave_as_of(name, nonce, Some(last_fence))
            .await
    }

    /// This client's wake channel for the fair writers of `name`: a grant to one of its queued
    /// writers is announced there (and the last reader's release, when its first queued writer
    /// may go). For code that drives [`fair_write_acquire`](Self::fair_write_acquire) itself:
    /// listen here (subscribed *before* the attempt) and attempt again on a message, rather than
    /// only at the end of a polling interval, as the waiting calls do.
    ///
    /// # Errors
    ///
    /// Invalid name.
    pub fn fair_wake_channel(&self, name: &str) -> Result<String> {
        let channel = self.keys(name)?.channel;
        Ok(format!("{channel}:w:{}", self.local.waiters.id()))
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
        self.leases.read_renew(name, nonce, lease).await
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
        self.leases.write_renew(name, current, lease).await
    }

    /// Single step: undo what the write acquisition `nonce` left behind — the write lock if it
    /// took it (before any renewal), and its intent if it announced one — and notify waiters.
    /// For a writer that gives up waiting or is cancelled. Returns how many keys were deleted.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn write_abandon(&self, name: &str, nonce: &str) -> Result<u64> {
        self.leases.write_abandon(name, nonce).await
    }

    /// [`write_abandon`](Self::write_abandon) for an operator working from a snapshot
    /// ([`inspect`](Self::inspect)) whose last fencing token was `last_fence`: the write lock is
    /// deleted only if its fencing token is no larger. A writer that took the lock after the
    /// snapshot holds it under the nonce the snapshot saw (a fair writer, whose intent or place
    /// it was), and is left alone; its intent goes.
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    pub async fn write_abandon_as_of(
        &self,
        name: &str,
        nonce: &str,
        last_fence: u64,
    ) -> Result<u64> {
        self.leases
            .write_abandon_as_of(name, nonce, Some(last_fence))
            .await
    }

    /// Single step: turn the write lock held with `lease` into a read lock with `nonce` for
    /// `read_lease`, atomically (no writer can slip in between); waiting readers are notified.
    /// `None` when the write lease is gone.
    ///
    /// Safe to repeat with the same `nonce`: once the downgrade happened, a repeat finds its
    /// reader and answers the same (with the reader's expiry and the time it has left), so a
    /// call that got no answer (a timeout or a dropped connection) is repeated here once more
    /// than other single steps.
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
        self.leases
            .downgrade_lease(name, lease, nonce, read_lease)
            .await
    }

    /// How many readers hold the lock `name` now, and whether a writer holds or waits for it.
    /// One round trip, read-only.
    ///
    /// # Errors
    ///
    /// Invalid name; [`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType) when the readers key holds a user's data; store
    /// errors.
    pub async fn state(&self, name: &str) -> Result<RwState> {
        self.leases.state(name).await
    }

    /// How many readers hold the lock `name` now (live leases only). One round trip.
    ///
    /// # Errors
    ///
    /// As [`state`](Self::state).
    pub async fn readers(&self, name: &str) -> Result<usize> {
        self.leases.readers(name).await
    }

    /// One atomic, read-only snapshot of the lock `name`: the writer, every live reader with its
    /// remaining lease, a waiting writer's intent, the last fencing token.
    ///
    /// # Errors
    ///
    /// Invalid name; store errors.
    pub async fn inspect(&self, name: &str) -> Result<RwInspection> {
        self.leases.inspect(name).await
    }

    /// Blocking twin of [`read_acquire`](Self::read_acquire).
    ///
    /// # Errors
    ///
    /// As [`read_acquire`](Self::read_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_read_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
    ) -> Result<ReadAttempt> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_read_acquire",
            self.read_acquire(name, nonce, lease),
        )
    }

    /// Blocking twin of [`write_acquire`](Self::write_acquire).
    ///
    /// # Errors
    ///
    /// As [`write_acquire`](Self::write_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_write_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        intent: Option<Duration>,
    ) -> Result<WriteAttempt> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_write_acquire",
            self.write_acquire(name, nonce, lease, intent),
        )
    }

    /// Blocking twin of [`read_release`](Self::read_release).
    ///
    /// # Errors
    ///
    /// As [`read_release`](Self::read_release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_read_release(&self, name: &str, nonce: &str) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_read_release",
            self.read_release(name, nonce),
        )
    }

    /// Blocking twin of [`write_release`](Self::write_release).
    ///
    /// # Errors
    ///
    /// As [`write_release`](Self::write_release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_write_release(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_write_release",
            self.write_release(name, lease),
        )
    }

    /// Blocking twin of [`fair_write_acquire`](Self::fair_write_acquire).
    ///
    /// # Errors
    ///
    /// As [`fair_write_acquire`](Self::fair_write_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_fair_write_acquire(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
        intent: Option<Duration>,
        queue: bool,
    ) -> Result<WriteAttempt> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_fair_write_acquire",
            self.fair_write_acquire(name, nonce, lease, intent, queue),
        )
    }

    /// Blocking twin of [`fair_write_release`](Self::fair_write_release).
    ///
    /// # Errors
    ///
    /// As [`fair_write_release`](Self::fair_write_release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_fair_write_release(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_fair_write_release",
            self.fair_write_release(name, lease),
        )
    }

    /// Blocking twin of [`fair_write_leave`](Self::fair_write_leave).
    ///
    /// # Errors
    ///
    /// As [`fair_write_leave`](Self::fair_write_leave).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_fair_write_leave(&self, name: &str, nonce: &str) -> Result<Unlock> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_fair_write_leave",
            self.fair_write_leave(name, nonce),
        )
    }

    /// Blocking twin of [`read_renew`](Self::read_renew).
    ///
    /// # Errors
    ///
    /// As [`read_renew`](Self::read_renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_read_renew(
        &self,
        name: &str,
        nonce: &str,
        lease: Duration,
    ) -> Result<Option<ReadLease>> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_read_renew",
            self.read_renew(name, nonce, lease),
        )
    }

    /// Blocking twin of [`write_renew`](Self::write_renew).
    ///
    /// # Errors
    ///
    /// As [`write_renew`](Self::write_renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_write_renew(
        &self,
        name: &str,
        current: &Lease,
        lease: Duration,
    ) -> Result<Option<WriteLease>> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_write_renew",
            self.write_renew(name, current, lease),
        )
    }

    /// Blocking twin of [`write_abandon`](Self::write_abandon).
    ///
    /// # Errors
    ///
    /// As [`write_abandon`](Self::write_abandon).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_write_abandon(&self, name: &str, nonce: &str) -> Result<u64> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_write_abandon",
            self.write_abandon(name, nonce),
        )
    }

    /// Blocking twin of [`write_abandon_as_of`](Self::write_abandon_as_of).
    ///
    /// # Errors
    ///
    /// As [`write_abandon_as_of`](Self::write_abandon_as_of).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_write_abandon_as_of(
        &self,
        name: &str,
        nonce: &str,
        last_fence: u64,
    ) -> Result<u64> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_write_abandon_as_of",
            self.write_abandon_as_of(name, nonce, last_fence),
        )
    }

    /// Blocking twin of [`fair_write_leave_as_of`](Self::fair_write_leave_as_of).
    ///
    /// # Errors
    ///
    /// As [`fair_write_leave_as_of`](Self::fair_write_leave_as_of).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_fair_write_leave_as_of(
        &self,
        name: &str,
        nonce: &str,
        last_fence: u64,
    ) -> Result<Unlock> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_fair_write_leave_as_of",
            self.fair_write_leave_as_of(name, nonce, last_fence),
        )
    }

    /// Blocking twin of [`downgrade_lease`](Self::downgrade_lease).
    ///
    /// # Errors
    ///
    /// As [`downgrade_lease`](Self::downgrade_lease).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_downgrade_lease(
        &self,
        name: &str,
        lease: &Lease,
        nonce: &str,
        read_lease: Duration,
    ) -> Result<Option<ReadLease>> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_downgrade_lease",
            self.downgrade_lease(name, lease, nonce, read_lease),
        )
    }

    /// Blocking twin of [`state`](Self::state).
    ///
    /// # Errors
    ///
    /// As [`state`](Self::state).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_state(&self, name: &str) -> Result<RwState> {
        tairlock::blocking::block_on(self.store().runtime(), "blocking_state", self.state(name))
    }

    /// Blocking twin of [`readers`](Self::readers).
    ///
    /// # Errors
    ///
    /// As [`readers`](Self::readers).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_readers(&self, name: &str) -> Result<usize> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_readers",
            self.readers(name),
        )
    }

    /// Blocking twin of [`inspect`](Self::inspect).
    ///
    /// # Errors
    ///
    /// As [`inspect`](Self::inspect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_inspect(&self, name: &str) -> Result<RwInspection> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_inspect",
            self.inspect(name),
        )
    }
}
