//! RAII guards for the scripted [`RwLock`](crate::RwLock), and the reentrancy slots behind them.
//!
//! A guard stands for one level of one owner's hold. Every guard of one hold shares a slot: the
//! server hold (a reader's or the writer's lease, renewed by a watchdog) and a depth. Only the
//! outermost acquire reaches the server, and only the release of the last guard does.

use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use tairlock::{Error, ErrorKind, Lease, Result, Store};

use crate::hold::Credential;
use crate::registry::Slot;
pub use crate::types::Release;

/// Marks a guard that may move between threads (async API): `Send`.
#[derive(Debug)]
pub struct GuardSend(());

/// Marks a guard keyed by its thread (the blocking API's reentrancy): `!Send`, because a
/// thread's hold must stay on that thread.
#[derive(Debug)]
pub struct GuardNoSend(PhantomData<*const ()>);

macro_rules! common_guard_methods {
    () => {
        /// The lock's name.
        pub fn name(&self) -> &str {
            self.slot.hold.name()
        }

        /// Whether the lease is lost: a renewal found it gone, or its local deadline passed
        /// without a renewal landing. Once true, stays true.
        pub fn is_lost(&self) -> bool {
            self.slot.hold.is_lost()
        }

        /// The local instant by which the lease ends unless a renewal lands first: the watchdog
        /// moves it with every renewal (`tairlock run` stops its command before it passes).
        pub fn deadline(&self) -> Option<tokio::time::Instant> {
            self.slot.hold.deadline()
        }

        /// Resolves when the lease is lost (see [`is_lost`](Self::is_lost)).
        ///
        /// # Cancel safety
        ///
        /// Cancel safe: dropping it changes nothing.
        pub async fn lost(&self) {
            self.slot.hold.lost().await
        }

        /// How many guards of this owner stand on the hold (1 unless re-entered).
        pub fn depth(&self) -> usize {
            self.slot.depth()
        }
    };
}

/// A held read lock (or a read taken inside this owner's write lock).
///
/// A guard stands for one level of one owner's hold: only the owner's outermost acquire reached
/// the server, and only the release of its last guard does.
///
/// Release it with [`release`](Self::release) to learn the outcome. Dropping it releases in the
/// background (it never blocks); if that cannot be done, the lease's TTL frees the lock.
/// `M` is [`GuardSend`] for the async API and [`GuardNoSend`] for the thread-keyed blocking API.
#[must_use = "the read lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct ReadGuard<S: Store, M = GuardSend> {
    slot: Arc<Slot<S>>,
    armed: bool,
    _marker: PhantomData<M>,
}

/// A held write lock, with its fencing token. Like [`ReadGuard`], one level of one owner's
/// hold.
///
/// Release it with [`release`](Self::release), or turn it into a read lock with
/// [`downgrade`](Self::downgrade). Dropping it releases in the background (it never blocks).
#[must_use = "the write lock is released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct WriteGuard<S: Store, M = GuardSend> {
    slot: Arc<Slot<S>>,
    armed: bool,
    _marker: PhantomData<M>,
}

impl<S: Store, M> ReadGuard<S, M> {
    pub(crate) fn new(slot: Arc<Slot<S>>) -> Self {
        ReadGuard {
            slot,
            armed: true,
            _marker: PhantomData,
        }
    }

    common_guard_methods!();

    /// Whether this read is served by the owner's write lock (a read taken while holding the
    /// write lock): the lock stays write-locked until the owner's last guard is released.
    pub fn is_inside_write(&self) -> bool {
        self.slot.hold.is_write()
    }

    /// Leave this level; on the owner's last, give the lease back and report it.
    ///
    /// # Errors
    ///
    /// Store errors on the final release (the reentrancy entry is already gone; the lease's TTL
    /// frees the lock).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the final release runs as a task of its own and completes even if this
    /// future is dropped.
    pub async fn release(mut self) -> Result<Release> {
        self.armed = false;
        self.slot.release().await
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When the final release is called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(mut self) -> Result<Release> {
        self.armed = false;
        let slot = self.slot.clone();
        let runtime = slot.hold.leases().store().runtime();
        tairlock::blocking::block_on(
            runtime,
            "blocking_release",
            async move { slot.release().await },
        )
    }
}

impl<S: Store, M> WriteGuard<S, M> {
    pub(crate) fn new(slot: Arc<Slot<S>>) -> Self {
        WriteGuard {
            slot,
            armed: true,
            _marker: PhantomData,
        }
    }

    common_guard_methods!();

    /// The current write lease (it rotates with every renewal; `None` once downgraded away).
    pub fn lease(&self) -> Option<Lease> {
        match self.slot.hold.credential() {
            Credential::Write(lease) => Some(lease),
            Credential::Read(_) => None,
        }
    }

    /// The fencing token of this write hold: pass it with every write to the protected
    /// resource, and have the resource reject tokens lower than the highest it has seen.
    pub fn fence(&self) -> u64 {
        self.lease().map_or(0, |l| l.fence())
    }

    /// Turn this write lock into a read lock in one atomic step: no other writer can take the
    /// lock in between, and waiting readers may enter at once.
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`] when the owner holds the write lock more than once (nested
    ///   guards): downgrading would change the outer holds too. This guard's level is given up.
    /// - [`ErrorKind::LeaseLost`] when the write lease is gone; store errors. The hold is given
    ///   up then. The downgrade is safe to repeat and is retried once after a timeout or a
    ///   dropped connection; when it still gets no answer, the server may hold either the write
    ///   lease or the new reader, and the background release gives back both.
    ///
    /// # Cancel safety
    ///
    /// If dropped midway, the hold is given back in the background: the write lease, or the
    /// reader the server already added, whichever it holds.
    pub async fn downgrade(mut self) -> Result<ReadGuard<S, M>> {
        let slot = self.slot.clone();
        if slot.depth() != 1 {
            self.armed = false;
            slot.release_in_background();
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!(
                    "cannot downgrade {}: this owner holds the write lock {} times; release the \
                     inner guards first",
                    slot.hold.name(),
                    slot.depth()
                ),
            ));
        }
        // `self` stays armed while the downgrade is in flight: if this future is dropped, the
        // guard's drop gives back whatever the hold is by then.
        let outcome = slot.hold.downgrade().await;
        self.armed = false;
        match outcome {
            Ok(()) => Ok(ReadGuard::new(slot)),
            Err(e) => {
                slot.release_in_background();
                Err(e)
            }
        }
    }

    /// Blocking twin of [`downgrade`](Self::downgrade).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_downgrade(self) -> Result<ReadGuard<S, M>> {
        let runtime = self.slot.hold.leases().store().runtime();
        tairlock::blocking::block_on(runtime, "blocking_downgrade", self.downgrade())
    }

    /// Leave this level; on the owner's last, release the write lock and report it.
    ///
    /// # Errors
    ///
    /// Store errors on the final release (the lease's TTL frees the lock then).
    ///
    /// # Cancel safety
    ///
    /// As [`ReadGuard::release`].
    pub async fn release(mut self) -> Result<Release> {
        self.armed = false;
        self.slot.release().await
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When the final release is called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(mut self) -> Result<Release> {
        self.armed = false;
        let slot = self.slot.clone();
        let runtime = slot.hold.leases().store().runtime();
        tairlock::blocking::block_on(
            runtime,
            "blocking_release",
            async move { slot.release().await },
        )
    }
}

impl<S: Store, M> Drop for ReadGuard<S, M> {
    fn drop(&mut self) {
        if self.armed {
            self.slot.release_in_background();
        }
    }
}

impl<S: Store, M> Drop for WriteGuard<S, M> {
    fn drop(&mut self) {
        if self.armed {
            self.slot.release_in_background();
        }
    }
}

impl<S: Store, M> fmt::Debug for ReadGuard<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadGuard")
            .field("name", &self.name())
            .field("depth", &self.depth())
            .field("inside_write", &self.is_inside_write())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<S: Store, M> fmt::Debug for WriteGuard<S, M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WriteGuard")
            .field("name", &self.name())
            .field("lease", &self.lease())
            .field("depth", &self.depth())
            .field("lost", &self.is_lost())
            .finish()
    }
}
