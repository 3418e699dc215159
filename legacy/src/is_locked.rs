//! `is_locked(key)` on every legacy lock kind: whether the key holds a timestamp that has not
//! expired, judged the way the kind judges it (the client clock for [`GetSetLock`], as the
//! original does; the server's clock for [`ScriptedLock`] and [`WatchLock`]).

use std::time::Duration;

use tairlock::{Result, Store};

use crate::detect::LegacyLock;
use crate::getset::GetSetLock;
use crate::scripted::ScriptedLock;
use crate::watch::{WatchLock, WatchStore};
use crate::wire::{Unit, not_a_timestamp, parse_value, validate_key};

/// Whether `key` holds a timestamp not expired at `now` (read after the value).
async fn held<S: Store>(
    store: &S,
    unit: Unit,
    key: &str,
    now: impl std::future::Future<Output = Result<Duration>>,
) -> Result<bool> {
    validate_key(key)?;
    let Some(raw) = store.get(key).await? else {
        return Ok(false);
    };
    let value = parse_value(&raw).ok_or_else(|| not_a_timestamp(key))?;
    Ok(!unit.is_expired(value, now.await?))
}

impl<S: Store> GetSetLock<S> {
    /// Whether `key` is held: it holds a timestamp that has not expired by this client's clock
    /// (the original's rule). Two reads, not one atomic snapshot.
    ///
    /// # Errors
    ///
    /// An invalid key; [`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType) when it holds
    /// anything but a timestamp; store errors.
    pub async fn is_locked(&self, key: &str) -> Result<bool> {
        let now = self.options().clock.now();
        held(self.store(), self.options().unit, key, async { Ok(now) }).await
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, key: &str) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_is_locked",
            self.is_locked(key),
        )
    }
}

impl<S: Store> ScriptedLock<S> {
    /// Whether `key` is held: it holds a timestamp that has not expired by the server's clock.
    /// Two reads (`GET`, `TIME`), not one atomic snapshot.
    ///
    /// # Errors
    ///
    /// As [`GetSetLock::is_locked`].
    pub async fn is_locked(&self, key: &str) -> Result<bool> {
        held(self.store(), self.options().unit, key, self.store().time()).await
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, key: &str) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_is_locked",
            self.is_locked(key),
        )
    }
}

impl<S: WatchStore> WatchLock<S> {
    /// Whether `key` is held: it holds a timestamp that has not expired by the server's clock.
    /// Two reads (`GET`, `TIME`), not one atomic snapshot.
    ///
    /// # Errors
    ///
    /// As [`GetSetLock::is_locked`].
    pub async fn is_locked(&self, key: &str) -> Result<bool> {
        held(self.store(), self.options().unit, key, self.store().time()).await
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, key: &str) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_is_locked",
            self.is_locked(key),
        )
    }
}

impl<S: WatchStore> LegacyLock<S> {
    /// Whether `key` is held, by the rule of the detected kind.
    ///
    /// # Errors
    ///
    /// As [`GetSetLock::is_locked`].
    pub async fn is_locked(&self, key: &str) -> Result<bool> {
        match self {
            LegacyLock::Scripted(lock) => lock.is_locked(key).await,
            LegacyLock::Watch(lock) => lock.is_locked(key).await,
            LegacyLock::GetSet(lock) => lock.is_locked(key).await,
        }
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, key: &str) -> Result<bool> {
        match self {
            LegacyLock::Scripted(lock) => lock.blocking_is_locked(key),
            LegacyLock::Watch(lock) => lock.blocking_is_locked(key),
            LegacyLock::GetSet(lock) => lock.blocking_is_locked(key),
        }
    }
}
