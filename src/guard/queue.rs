//! The queue of the batched watchdog (see [`batch`](super::batch)): each guard by when its lease
//! is due for renewal, and the task that renews them. Held by the lock handle, so the guards of
//! its clones share it; it names no lock kind (its entries are the guards' shared state, behind
//! `dyn Any`), so the handle can hold it without the guards' module depending on itself.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Weak;

use parking_lot::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// One guard's shared state, weakly: a guard released or dropped meanwhile is skipped.
pub(crate) type Entry = Weak<dyn Any + Send + Sync>;

/// The queue of leases to renew, and the task that renews them.
#[derive(Default)]
pub(crate) struct Renewer {
    pub(super) state: Mutex<State>,
    /// Woken when a lease is queued ahead of the one the task sleeps for.
    pub(super) wake: tokio::sync::Notify,
}

#[derive(Default)]
pub(super) struct State {
    /// Each guard by when its lease is due (and a number, for uniqueness).
    pub(super) due: BTreeMap<(Instant, u64), Entry>,
    next: u64,
    /// The task, while it runs; it ends when nothing is queued.
    pub(super) task: Option<JoinHandle<()>>,
}

impl State {
    /// Queue `entry` for `at`.
    pub(super) fn insert(&mut self, at: Instant, entry: Entry) {
        let id = self.next;
        self.next += 1;
        self.due.insert((at, id), entry);
    }
}

impl fmt::Debug for Renewer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Renewer")
            .field("queued", &self.state.lock().due.len())
            .finish()
    }
}
