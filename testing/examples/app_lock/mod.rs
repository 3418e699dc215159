//! The application's lock, unchanged: what a team migrating to tairlock has today. The key
//! holds the lock's expiry as a bare millisecond timestamp, the format `ScriptedLock` (with
//! `Unit::Millis`) reads and writes, so both can share a key during a migration.
//!
//! Shared by the `race_my_lock` example and the user-style test in `tests/my_lock_f4b.rs`.

use std::time::Duration;

use tairlock::Store;
use tairlock::clock::Clock;

fn millis(clock: &dyn Clock) -> u64 {
    clock.now().as_millis() as u64
}

fn parse(raw: Option<Vec<u8>>) -> Option<u64> {
    String::from_utf8(raw?).ok()?.parse().ok()
}

/// Take `key` for `ttl`: the expiry timestamp written, or `None` when it is held.
pub(crate) async fn try_lock<S: Store>(
    store: &S,
    clock: &dyn Clock,
    key: &str,
    ttl: Duration,
) -> tairlock::Result<Option<u64>> {
    let now = millis(clock);
    let expires = now + ttl.as_millis() as u64 + 1;
    let value = expires.to_string();
    if store.set_nx(key, value.as_bytes()).await? {
        return Ok(Some(expires));
    }
    // Held: take it over if its holder's time is up.
    match parse(store.get(key).await?) {
        Some(current) if current < now => {
            let previous = parse(store.getset(key, value.as_bytes()).await?);
            Ok(previous.is_none_or(|p| p < now).then_some(expires))
        }
        _ => Ok(None),
    }
}

/// Let `key` go, if the lock on it has not expired yet.
pub(crate) async fn unlock<S: Store>(
    store: &S,
    clock: &dyn Clock,
    key: &str,
) -> tairlock::Result<()> {
    if parse(store.get(key).await?).is_some_and(|current| millis(clock) < current) {
        store.del(key).await?;
    }
    Ok(())
}
