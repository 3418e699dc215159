//! The one place in-process shared state gets its synchronisation primitives from.
//!
//! Under `--cfg tairlock_loom` these become loom's, so the loom models
//! (`src/loom_models/`, run by `scripts/loom.sh`) can explore every interleaving of the embedded
//! store and of the reentrancy map; otherwise they are parking_lot's. The cfg is namespaced
//! because tokio must never be built under plain `cfg(loom)`: only the primitives re-exported
//! here change, everything else (tokio, redis, parking_lot elsewhere) builds as usual.
//!
//! | primitive | normal build | `tairlock_loom` | used by |
//! |---|---|---|---|
//! | [`Arc`] | `std::sync::Arc` | `loom::sync::Arc` | the engine's local wait queues only: their handles come and go as waiters do, and the model of the map checks that a name's queue goes with the last one |
//! | [`Mutex`] | `parking_lot::Mutex` | `loom::sync::Mutex` behind parking_lot's signature | the embedded store's keyspace (one critical section per command or script), the reentrancy map's slots and owner maps, the engine's map of local wait queues (which name has one, and how many waiters hold a place in it) |
//!
//! What deliberately stays outside the shim, and why that is sound under loom (whose model
//! threads all run on one OS thread, one at a time, switching only at loom operations):
//!
//! - Locks held for a few instructions with no loom operation inside (the release-notification
//!   hub, a guard's lease cell, each local wait queue's own async mutex): never held across a switch point, so
//!   never contended inside a model, so invisible to it without changing any outcome.
//! - `static` id counters (`Owner` and client ids): statics need a `const` constructor, which
//!   loom's atomics lack; they only hand out distinct numbers and order nothing.
//! - The `thread_local` crate's per-lock map behind `ReentrantLock::blocking_lock`: it is keyed
//!   by OS thread, so loom's threads would share one entry; that path also needs a runtime to
//!   block on, so the models drive the owner-keyed map instead.
//! - Other `Arc` handles: their reference counts are not state the locks reason about, and every
//!   loom operation is a scheduling point that multiplies the interleavings to explore.

#[cfg(not(tairlock_loom))]
pub(crate) use parking_lot::Mutex;

#[cfg(not(tairlock_loom))]
pub(crate) use std::sync::Arc;

#[cfg(tairlock_loom)]
pub(crate) use loom::sync::Arc;

#[cfg(tairlock_loom)]
pub(crate) use self::loom_mutex::Mutex;

#[cfg(tairlock_loom)]
mod loom_mutex {
    /// loom's mutex behind parking_lot's signature (`lock()` without a `Result`).
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T: Default> Default for Mutex<T> {
        fn default() -> Self {
            Mutex::new(T::default())
        }
    }

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        #[track_caller]
        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            // A panic inside a model fails the model anyway; poisoning adds nothing.
            self.0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }
    }
}
