//! Reentrant locks: a local owner → (lock, count) map in front of the expire lock.
//!
//! Only the outermost acquire and the final release reach the server; re-entry by the same
//! owner costs no round trip.
//!
//! | API | owner | guard |
//! |---|---|---|
//! | `blocking_lock`, `blocking_try_lock`, `blocking_try_lock_for`, `blocking_lock_with_lease`; depth: `thread_held_depth` | the calling thread (one map per `ReentrantLock`, via the `thread_local` crate) | [`ReentrantGuard`], `!Send`: a thread's hold must stay on that thread |
//! | [`lock_as`](ReentrantLock::lock_as), `try_lock_as`, `try_lock_for_as`, `lock_with_lease_as`; depth: `held_depth` | an explicit [`Owner`] handle the caller creates and passes | [`OwnedReentrantGuard`], `Send` |
//!
//! Methods that take an [`Owner`] end in `_as`, as the reader/writer lock's do.
//!
//! Async code must not use the thread as the owner (tasks move between threads, and futures
//! joined in one task share it), nor a task id: hence the explicit handle.
//!
//! Re-entry is refused with [`ErrorKind::LeaseLost`] once the
//! lease is lost (its watchdog found it gone, or its local deadline passed). The map entry is
//! *finished* (depth 0, its guard taken out) before the final release is sent, so a failed
//! release never leaves it claiming ownership; the lease's TTL frees the lock then. A finished
//! entry is not removed: it stays in the owner's map, claiming nothing, until the owner's next
//! acquire of that name replaces it (so the map holds one small entry per name the owner has
//! used; dropping the [`Owner`] frees an owner's, dropping the `ReentrantLock` and its clones
//! frees the threads').
//!
//! ```compile_fail
//! // A thread-keyed guard cannot move to another thread.
//! fn must_be_send<T: Send>(_: T) {}
//! let locks = tairlock::ReentrantLock::new(tairlock::ExpireLock::new(tairlock::MemoryStore::new()));
//! let guard = locks.blocking_lock("a").unwrap();
//! must_be_send(guard);
//! ```

use std::cell::RefCell;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use thread_local::ThreadLocal;

use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::{ExpireLock, Unlock};
use crate::guard::LockGuard;
use crate::store::Store;
use crate::sync::Mutex;

/// How many levels one owner holds one lock at: the reentrancy count behind every reentrant
/// hold (this crate's [`ReentrantLock`] and `tairlock-rwlock`'s owner-keyed holds).
///
/// It starts at 1 (the outermost acquire). [`enter`](Self::enter) adds a level unless the count
/// is finished (back at 0: the final release is under way) or the caller's check refuses;
/// [`exit`](Self::exit) removes one and says when it was the last. The check runs with the
/// count locked, so a concurrent last exit cannot slip between it and the increment.
#[derive(Debug)]
pub struct Depth {
    depth: Mutex<usize>,
}

impl Default for Depth {
    fn default() -> Self {
        Depth::new()
    }
}

impl Depth {
    /// A count of 1: the outermost level.
    pub fn new() -> Self {
        Depth {
            depth: Mutex::new(1),
        }
    }

    /// Enter one more level: `Ok(true)` if entered, `Ok(false)` when the count is finished or
    /// `check` answers false (the hold is gone), `check`'s error when it refuses.
    ///
    /// # Errors
    ///
    /// Whatever `check` returns (a lost lease, a refused upgrade, ...).
    pub fn enter(&self, check: impl FnOnce() -> Result<bool>) -> Result<bool> {
        let mut depth = self.depth.lock();
        if *depth == 0 || !check()? {
            return Ok(false);
        }
        *depth += 1;
        Ok(true)
    }

    /// Leave one level: true when it was the last (the caller releases the hold then).
    pub fn exit(&self) -> bool {
        let mut depth = self.depth.lock();
        *depth = depth.saturating_sub(1);
        *depth == 0
    }

    /// Levels held now (0: finished).
    pub fn get(&self) -> usize {
        *self.depth.lock()
    }
}

/// One owner's hold on one lock: the real guard and the depth.
pub(crate) struct Slot<S: Store> {
    guard: Mutex<Option<LockGuard<S>>>,
    depth: Depth,
}

impl<S: Store> Slot<S> {
    pub(crate) fn new(guard: LockGuard<S>) -> Arc<Self> {
        Arc::new(Slot {
            guard: Mutex::new(Some(guard)),
            depth: Depth::new(),
        })
    }

    /// Enter again if still held: true on success, an error if the lease is lost, false if the
    /// slot is finished (depth 0).
    pub(crate) fn reenter(&self) -> Result<bool> {
        self.depth.enter(|| {
            let guard = self.guard.lock();
            match guard.as_ref() {
                Some(g) if g.is_lost() => Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!("re-entry refused: the lease on {} is lost", g.name()),
                )),
                Some(_) => Ok(true),
                None => Ok(false),
            }
        })
    }

    /// Leave one level; the real guard when this was the last.
    pub(crate) fn exit(&self) -> Option<LockGuard<S>> {
        if self.depth.exit() {
            self.guard.lock().take()
        } else {
            None
        }
    }

    pub(crate) fn fence(&self) -> Option<u64> {
        self.guard.lock().as_ref().map(LockGuard::fence)
    }

    fn is_lost(&self) -> bool {
        self.guard.lock().as_ref().is_none_or(LockGuard::is_lost)
    }
}

type Slots<S> = HashMap<String, Arc<Slot<S>>>;

/// Reentrant expire locks. See the [module docs](self).
///
/// # Examples
///
/// Blocking code, owned by the thread:
///
/// ```
/// use tairlock::{ExpireLock, MemoryStore, ReentrantLock};
///
/// # fn main() -> tairlock::Result<()> {
/// let locks = ReentrantLock::new(ExpireLock::new(MemoryStore::new()));
/// let outer = locks.blocking_lock("inventory")?;
/// let inner = locks.blocking_lock("inventory")?; // re-entry: no round trip
/// assert_eq!(locks.thread_held_depth("inventory"), 2);
/// drop(inner);
/// outer.release()?; // the outermost release gives the lock back
/// assert!(!locks.blocking_is_locked("inventory")?);
/// # Ok(())
/// # }
/// ```
///
/// Async code passes an explicit [`Owner`] to the methods ending in `_as`
/// ([`lock_as`](Self::lock_as), ...).
pub struct ReentrantLock<S: Store> {
    locks: ExpireLock<S>,
    threads: Arc<ThreadLocal<RefCell<Slots<S>>>>,
    /// This client's identity (shared by clones, like `threads`). An [`Owner`]'s holds are
    /// keyed by it as well as by the lock key: holding `x` through one client (say, one server)
    /// must not make the owner a holder of `x` through another, which would skip the server.
    client: u64,
}

impl<S: Store> Clone for ReentrantLock<S> {
    fn clone(&self) -> Self {
        ReentrantLock {
            locks: self.locks.clone(),
            threads: self.threads.clone(),
            client: self.client,
        }
    }
}

impl<S: Store> fmt::Debug for ReentrantLock<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantLock").finish_non_exhaustive()
    }
}

impl<S: Store> ReentrantLock<S> {
    /// Reentrant locks over `locks` (its options decide lease, watchdog and waiting).
    pub fn new(locks: ExpireLock<S>) -> Self {
        static NEXT_CLIENT: AtomicU64 = AtomicU64::new(1);
        ReentrantLock {
            locks,
            threads: Arc::new(ThreadLocal::new()),
            client: NEXT_CLIENT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The underlying expire locks.
    pub fn locks(&self) -> &ExpireLock<S> {
        &self.locks
    }

    /// The calling thread's hold on `name` if it has one: re-entered (no round trip).
    fn thread_reenter(&self, name: &str) -> Result<Option<ReentrantGuard<S>>> {
        let slots = self.threads.get_or(|| RefCell::new(HashMap::new()));
        let existing = slots.borrow().get(name).cloned();
        if let Some(slot) = existing
            && slot.reenter()?
        {
            return Ok(Some(ReentrantGuard {
                slot: Some(slot),
                _not_send: PhantomData,
            }));
        }
        Ok(None)
    }

    /// Record `guard` as the calling thread's outermost hold on `name`.
    fn thread_hold(&self, name: &str, guard: LockGuard<S>) -> ReentrantGuard<S> {
        let slots = self.threads.get_or(|| RefCell::new(HashMap::new()));
        let slot = Slot::new(guard);
        slots.borrow_mut().insert(name.to_owned(), slot.clone());
        ReentrantGuard {
            slot: Some(slot),
            _not_send: PhantomData,
        }
    }

    /// For the calling thread: re-enter `name`, or acquire it with `acquire` (blocking).
    #[track_caller]
    fn blocking_acquire(
        &self,
        name: &str,
        what: &str,
        acquire: impl Future<Output = Result<Option<LockGuard<S>>>>,
    ) -> Result<Option<ReentrantGuard<S>>> {
        if let Some(guard) = self.thread_reenter(name)? {
            return Ok(Some(guard));
        }
        let guard = crate::blocking::block_on(self.locks.store().runtime(), what, acquire)?;
        Ok(guard.map(|g| self.thread_hold(name, g)))
    }

    /// Take `name` for the calling thread, waiting as [`ExpireLock::lock`] does; re-entry by the
    /// same thread returns at once without a round trip.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] on re-entry after the lease was lost; acquire errors.
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime (use [`lock_as`](Self::lock_as) with an
    /// [`Owner`]).
    #[track_caller]
    pub fn blocking_lock(&self, name: &str) -> Result<ReentrantGuard<S>> {
        let locks = &self.locks;
        let guard = self.blocking_acquire(name, "blocking_lock", async {
            locks.lock(name).await.map(Some)
        })?;
        Ok(guard.expect("waiting forever ends only with the lock"))
    }

    /// Blocking, thread-keyed twin of [`try_lock_as`](Self::try_lock_as): re-entry, or one
    /// attempt.
    ///
    /// # Errors
    ///
    /// As [`blocking_lock`](Self::blocking_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock(&self, name: &str) -> Result<Option<ReentrantGuard<S>>> {
        self.blocking_acquire(name, "blocking_try_lock", self.locks.try_lock(name))
    }

    /// Blocking, thread-keyed twin of [`try_lock_for_as`](Self::try_lock_for_as).
    ///
    /// # Errors
    ///
    /// As [`blocking_lock`](Self::blocking_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock_for(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<ReentrantGuard<S>>> {
        self.blocking_acquire(
            name,
            "blocking_try_lock_for",
            self.locks.try_lock_for(name, timeout),
        )
    }

    /// Blocking, thread-keyed twin of [`lock_with_lease_as`](Self::lock_with_lease_as).
    ///
    /// # Errors
    ///
    /// As [`blocking_lock`](Self::blocking_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_lock_with_lease(
        &self,
        name: &str,
        lease: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<ReentrantGuard<S>>> {
        self.blocking_acquire(
            name,
            "blocking_lock_with_lease",
            self.locks.lock_with_lease(name, lease, timeout),
        )
    }

    /// How deep `owner` holds `name` through this client (0: not at all).
    pub fn held_depth(&self, owner: &Owner, name: &str) -> usize {
        owner
            .with_slots::<S, _>(|slots| {
                slots
                    .get(&self.client)
                    .and_then(|s| s.get(name))
                    .map(|slot| slot.depth.get())
            })
            .unwrap_or(0)
    }

    /// How deep the calling thread holds `name` (0: not at all).
    pub fn thread_held_depth(&self, name: &str) -> usize {
        self.threads
            .get()
            .and_then(|slots| slots.borrow().get(name).map(|s| s.depth.get()))
            .unwrap_or(0)
    }

    /// Whether anyone (this process or another) holds `name`: [`ExpireLock::is_locked`].
    ///
    /// # Errors
    ///
    /// As [`ExpireLock::is_locked`].
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        self.locks.is_locked(name).await
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, name: &str) -> Result<bool> {
        self.locks.blocking_is_locked(name)
    }

    /// For `owner`: re-enter `name`, or acquire it with `acquire`.
    async fn acquire_as(
        &self,
        owner: &Owner,
        name: &str,
        acquire: impl Future<Output = Result<Option<LockGuard<S>>>>,
    ) -> Result<Option<OwnedReentrantGuard<S>>> {
        // Keyed by client as well as by name (see `client`); looked up without allocating.
        let existing = owner
            .with_slots::<S, _>(|slots| slots.get(&self.client).and_then(|s| s.get(name)).cloned());
        if let Some(slot) = existing
            && slot.reenter()?
        {
            return Ok(Some(OwnedReentrantGuard { slot: Some(slot) }));
        }
        // Owners are meant to be used from one task at a time; if two futures of one owner race
        // here, each acquires in turn (the second waits for the first's release).
        let Some(guard) = acquire.await? else {
            return Ok(None);
        };
        let slot = Slot::new(guard);
        owner.with_slots::<S, _>(|slots| {
            slots
                .entry(self.client)
                .or_default()
                .insert(name.to_owned(), slot.clone())
        });
        Ok(Some(OwnedReentrantGuard { slot: Some(slot) }))
    }

    /// Take `name` for `owner`, waiting as [`ExpireLock::lock`] does; re-entry by the same owner
    /// returns at once without a round trip.
    ///
    /// # Errors
    ///
    /// As [`blocking_lock`](Self::blocking_lock).
    ///
    /// # Cancel safety
    ///
    /// As [`ExpireLock::lock`]; a cancelled re-entry changes nothing.
    pub async fn lock_as(&self, owner: &Owner, name: &str) -> Result<OwnedReentrantGuard<S>> {
        let guard = self
            .acquire_as(owner, name, async { self.locks.lock(name).await.map(Some) })
            .await?;
        Ok(guard.expect("waiting forever ends only with the lock"))
    }

    /// Re-enter `name` for `owner` (no round trip), or make one attempt: `None` if someone else
    /// holds it.
    ///
    /// # Errors
    ///
    /// As [`ExpireLock::try_lock`]; [`ErrorKind::LeaseLost`] on re-entry after the lease was
    /// lost.
    ///
    /// # Cancel safety
    ///
    /// As [`lock_as`](Self::lock_as).
    pub async fn try_lock_as(
        &self,
        owner: &Owner,
        name: &str,
    ) -> Result<Option<OwnedReentrantGuard<S>>> {
        self.acquire_as(owner, name, self.locks.try_lock(name))
            .await
    }

    /// Re-enter `name` for `owner`, or wait up to `timeout` for it: `None` if it did not come
    /// free in time.
    ///
    /// # Errors
    ///
    /// As [`try_lock_as`](Self::try_lock_as).
    ///
    /// # Cancel safety
    ///
    /// As [`lock_as`](Self::lock_as).
    pub async fn try_lock_for_as(
        &self,
        owner: &Owner,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<OwnedReentrantGuard<S>>> {
        self.acquire_as(owner, name, self.locks.try_lock_for(name, timeout))
            .await
    }

    /// Re-enter `name` for `owner`, or wait up to `timeout` (forever if `None`) for it with a
    /// fixed `lease` and no watchdog ([`ExpireLock::lock_with_lease`]). A re-entry keeps the
    /// outermost hold's lease: `lease` applies only to a new hold.
    ///
    /// # Errors
    ///
    /// As [`try_lock_as`](Self::try_lock_as).
    ///
    /// # Cancel safety
    ///
    /// As [`lock_as`](Self::lock_as).
    pub async fn lock_with_lease_as(
        &self,
        owner: &Owner,
        name: &str,
        lease: Duration,
        timeout: Option<Duration>,
    ) -> Result<Option<OwnedReentrantGuard<S>>> {
        self.acquire_as(
            owner,
            name,
            self.locks.lock_with_lease(name, lease, timeout),
        )
        .await
    }
}

/// A thread's hold on a reentrant lock; `!Send`. Dropping the outermost guard releases the lock
/// in the background; [`release`](Self::release) reports the outcome.
#[must_use = "the hold is given up as soon as the guard is dropped"]
pub struct ReentrantGuard<S: Store> {
    /// Taken by `release`, so `Drop` does not leave a level twice.
    slot: Option<Arc<Slot<S>>>,
    _not_send: PhantomData<*const ()>,
}

impl<S: Store> fmt::Debug for ReentrantGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReentrantGuard")
            .field("depth", &self.slot().depth.get())
            .finish()
    }
}

impl<S: Store> ReentrantGuard<S> {
    fn slot(&self) -> &Slot<S> {
        self.slot.as_ref().expect("present until release")
    }

    /// The fencing token of the hold.
    pub fn fence(&self) -> Option<u64> {
        self.slot().fence()
    }

    /// Whether the lease is lost.
    pub fn is_lost(&self) -> bool {
        self.slot().is_lost()
    }

    /// Leave one level; on the last, release the lock and report it (`None` while outer levels
    /// still hold it).
    ///
    /// # Errors
    ///
    /// Store errors on the final release (the local entry is already finished then: it claims
    /// nothing).
    ///
    /// # Panics
    ///
    /// When the final release is called from inside an async runtime.
    #[track_caller]
    pub fn release(mut self) -> Result<Option<Unlock>> {
        let last = self.slot.take().and_then(|slot| slot.exit());
        last.map(LockGuard::blocking_release).transpose()
    }
}

impl<S: Store> Drop for ReentrantGuard<S> {
    fn drop(&mut self) {
        // The real guard's Drop releases in the background; it never blocks and never touches
        // thread-locals, so this is safe in a thread's TLS destructors too.
        if let Some(slot) = self.slot.take() {
            drop(slot.exit());
        }
    }
}

/// The owner of reentrant holds in async code: create one per logical owner (a request, a job)
/// and pass it to [`ReentrantLock::lock_as`]. Clones are the same owner.
#[derive(Clone)]
pub struct Owner {
    id: u64,
    /// client id (see [`ReentrantLock`]) → name → hold; typed by the store on first use.
    slots: Arc<Mutex<Option<Box<dyn std::any::Any + Send + Sync>>>>,
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Owner").field("id", &self.id).finish()
    }
}

impl Default for Owner {
    fn default() -> Self {
        Owner::new()
    }
}

impl Owner {
    /// A new owner, distinct from every other.
    pub fn new() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Owner {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            slots: Arc::new(Mutex::new(None)),
        }
    }

    /// This owner's number.
    pub fn id(&self) -> u64 {
        self.id
    }

    pub(crate) fn with_slots<S: Store, T>(
        &self,
        f: impl FnOnce(&mut HashMap<u64, Slots<S>>) -> T,
    ) -> T {
        let mut any = self.slots.lock();
        let entry = any.get_or_insert_with(|| Box::new(HashMap::<u64, Slots<S>>::new()));
        let slots = entry
            .downcast_mut::<HashMap<u64, Slots<S>>>()
            .expect("an Owner is used with locks of one store type");
        f(slots)
    }
}

/// An [`Owner`]'s hold on a reentrant lock; `Send`.
#[must_use = "the hold is given up as soon as the guard is dropped"]
pub struct OwnedReentrantGuard<S: Store> {
    /// Taken by `release`, so `Drop` does not leave a level twice.
    slot: Option<Arc<Slot<S>>>,
}

impl<S: Store> fmt::Debug for OwnedReentrantGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OwnedReentrantGuard")
            .field("depth", &self.slot().depth.get())
            .finish()
    }
}

impl<S: Store> OwnedReentrantGuard<S> {
    fn slot(&self) -> &Slot<S> {
        self.slot.as_ref().expect("present until release")
    }

    /// The fencing token of the hold.
    pub fn fence(&self) -> Option<u64> {
        self.slot().fence()
    }

    /// Whether the lease is lost.
    pub fn is_lost(&self) -> bool {
        self.slot().is_lost()
    }

    /// Leave one level; on the last, release the lock and report it (`None` while outer levels
    /// still hold it).
    ///
    /// # Errors
    ///
    /// Store errors on the final release (the owner's entry is already finished then: it claims
    /// nothing).
    pub async fn release(mut self) -> Result<Option<Unlock>> {
        let last = self.slot.take().and_then(|slot| slot.exit());
        match last {
            Some(guard) => Ok(Some(guard.release().await?)),
            None => Ok(None),
        }
    }
}

impl<S: Store> Drop for OwnedReentrantGuard<S> {
    fn drop(&mut self) {
        if let Some(slot) = self.slot.take() {
            drop(slot.exit());
        }
    }
}

impl<S: Store> OwnedReentrantGuard<S> {
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
    pub fn blocking_release(mut self) -> Result<Option<Unlock>> {
        let last = self.slot.take().and_then(|slot| slot.exit());
        last.map(LockGuard::blocking_release).transpose()
    }
}
