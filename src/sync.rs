//! The one place in-process shared state gets its synchronisation primitives from.
//!
//! Under `--cfg tairlock_loom` these become loom's, so the loom models can explore every
//! interleaving of the embedded store and the reentrancy map; otherwise they are parking_lot's.

#[cfg(not(tairlock_loom))]
pub(crate) use parking_lot::Mutex;

#[cfg(tairlock_loom)]
mod loom_mutex {
    /// loom's mutex behind parking_lot's signature (`lock()` without a `Result`).
    #[derive(Debug)]
    pub(crate) struct Mutex<T>(loom::sync::Mutex<T>);

    impl<T> Mutex<T> {
        pub(crate) fn new(value: T) -> Self {
            Mutex(loom::sync::Mutex::new(value))
        }

        pub(crate) fn lock(&self) -> loom::sync::MutexGuard<'_, T> {
            self.0.lock().expect("loom mutex poisoned")
        }
    }
}

#[cfg(tairlock_loom)]
pub(crate) use loom_mutex::Mutex;
