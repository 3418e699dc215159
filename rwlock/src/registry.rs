//! The owner registry: each owner's reentrant holds ([`Slot`]: a server hold and a depth), the
//! shared read holds by lock name, and the per-client local state they live in.

use std::collections::HashMap;
use std::sync::{Arc, Weak};

use parking_lot::Mutex;
use tairlock::reentrant::Depth;
use tairlock::{Error, ErrorKind, Result, Store};

use crate::hold::Hold;
use crate::share::Shared;
use crate::types::Release;

/// Identifies an owner of reentrant holds: a thread (blocking API) or an explicit
/// [`Owner`](tairlock::Owner) (async API).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum OwnerKey {
    Thread(std::thread::ThreadId),
    Owner(u64),
}

pub(crate) type HoldKey = (OwnerKey, String);

/// Per-client local state: the engine's waiters (a FIFO queue per lock name), the reentrant
/// holds of every owner, and the shared read hold of each lock name (when reads are shared).
pub(crate) struct Local<S: Store> {
    pub(crate) waiters: tairlock::engine::Waiters,
    holds: Mutex<HashMap<HoldKey, Arc<Slot<S>>>>,
    shared: Mutex<HashMap<String, Arc<Shared<S>>>>,
}

impl<S: Store> Default for Local<S> {
    fn default() -> Self {
        Local {
            waiters: Default::default(),
            holds: Mutex::default(),
            shared: Mutex::default(),
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

    /// Join the shared read hold on `name`, no round trip: `None` when there is none, or it
    /// takes nobody any more (revoked, closed, lost; it is forgotten then).
    pub(crate) fn join_shared(&self, name: &str) -> Option<Arc<Shared<S>>> {
        let mut shared = self.shared.lock();
        let entry = shared.get(name)?;
        if entry.join() {
            return Some(entry.clone());
        }
        shared.remove(name);
        None
    }

    /// Make `entry` the shared read hold on `name`, replacing a finished one.
    pub(crate) fn install_shared(&self, name: &str, entry: &Arc<Shared<S>>) {
        self.shared.lock().insert(name.to_owned(), entry.clone());
    }

    /// A local writer wants `name`: revoke its shared read hold (released now when idle, else
    /// when its last local reader leaves; nobody joins it any more).
    pub(crate) fn revoke_shared(&self, name: &str) {
        let entry = self.shared.lock().remove(name);
        if let Some(entry) = entry {
            entry.revoke();
        }
    }

    /// The local readers on `name`'s shared read hold (0 without one).
    pub(crate) fn shared_readers(&self, name: &str) -> usize {
        self.shared
            .lock()
            .get(name)
            .filter(|e| e.is_open())
            .map_or(0, |e| e.readers())
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

/// One owner's hold on one lock: the server hold (its own, or a share of the client's shared
/// read hold) and how many guards stand on it.
pub(crate) struct Slot<S: Store> {
    pub(crate) hold: Arc<Hold<S>>,
    shared: Option<Arc<Shared<S>>>,
    /// The core's reentrancy count.
    depth: Depth,
    registered: Mutex<Option<(Weak<Local<S>>, HoldKey)>>,
}

impl<S: Store> Slot<S> {
    /// A slot on `hold`, a share of `shared` when given (whose hold `hold` then is).
    pub(crate) fn new(hold: Arc<Hold<S>>, shared: Option<Arc<Shared<S>>>) -> Arc<Self> {
        Arc::new(Slot {
            hold,
            shared,
            depth: Depth::new(),
            registered: Mutex::new(None),
        })
    }

    /// Remember where this slot is registered, so its last exit unregisters it.
    pub(crate) fn registered_at(&self, local: &Arc<Local<S>>, key: HoldKey) {
        *self.registered.lock() = Some((Arc::downgrade(local), key));
    }

    /// Enter again for `write` (else read): true on success, false if the slot is finished.
    ///
    /// # Errors
    ///
    /// A write wanted on a read hold (upgrade: refused, as waiting for it would deadlock on our
    /// own read); a lost lease.
    pub(crate) fn reenter(&self, write: bool) -> Result<bool> {
        self.depth.enter(|| {
            if write && !self.hold.is_write() {
                return Err(Error::new(
                    ErrorKind::InvalidInput,
                    format!(
                        "read→write upgrade refused on {}: this owner holds it for reading, and \
                         waiting for the write lock would wait for itself; release the read lock \
                         first, or take the write lock first and downgrade",
                        self.hold.name()
                    ),
                ));
            }
            if self.hold.is_lost() {
                return Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!(
                        "re-entry refused: the lease on {} is lost",
                        self.hold.name()
                    ),
                ));
            }
            Ok(true)
        })
    }

    /// Leave one level: true when it was the last (the caller then releases the hold). The
    /// reentrancy entry is removed *before* any release is sent, so a failed release never
    /// leaves it claiming ownership.
    pub(crate) fn exit(&self) -> bool {
        if !self.depth.exit() {
            return false;
        }
        let registered = self.registered.lock().take();
        if let Some((local, key)) = registered
            && let Some(local) = local.upgrade()
        {
            local.unregister(&key, self);
        }
        true
    }

    pub(crate) fn depth(&self) -> usize {
        self.depth.get()
    }

    /// Leave one level and, on the last, release the hold now (or leave the shared hold, which
    /// its last local reader releases or lets linger). The release runs as a task of its own,
    /// so it completes (the watchdog stopped, the lease given back) even if the caller stops
    /// waiting for it.
    pub(crate) async fn release(&self) -> Result<Release> {
        if !self.exit() {
            return Ok(Release::StillHeld);
        }
        if let Some(shared) = &self.shared {
            return shared.clone().leave().await;
        }
        let hold = self.hold.clone();
        tairlock::blocking::spawn_handle(hold.leases().store().runtime())
            .spawn(async move { hold.release(false).await })
            .await
            .unwrap_or_else(|e| {
                Err(Error::new(
                    ErrorKind::Server,
                    format!("the release of {} did not finish: {e}", self.hold.name()),
                ))
            })
    }

    /// Leave one level and, on the last, release the hold in the background (never blocks).
    pub(crate) fn release_in_background(&self) {
        if self.exit() {
            if let Some(shared) = &self.shared {
                shared.clone().leave_in_background();
                return;
            }
            let hold = self.hold.clone();
            tairlock::blocking::spawn_handle(hold.leases().store().runtime()).spawn(async move {
                let _ = hold.release(true).await;
            });
        }
    }
}
