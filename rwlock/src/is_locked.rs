//! `RwLock::is_locked`: the question every lock kind answers.

use tairlock::{Result, Store, Ttl};

use crate::lock::RwLock;

impl<S: Store> RwLock<S> {
    /// Whether the lock `name` is held at all: by a writer or by at least one live reader (a
    /// waiting writer's intent alone does not count). One round trip, one atomic snapshot
    /// ([`state`](Self::state)).
    ///
    /// # Errors
    ///
    /// As [`state`](Self::state).
    pub async fn is_locked(&self, name: &str) -> Result<bool> {
        let state = self.state(name).await?;
        Ok(state.readers > 0 || state.writer != Ttl::Missing)
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, name: &str) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_is_locked",
            self.is_locked(name),
        )
    }
}
