//! [`GetSetLock`]: the jeffkit SETNX/GETSET lock, verbatim, flaws included.
//!
//! ```text
//! # get lock
//! lock = 0
//! while lock != 1:
//!     timestamp = current Unix time + lock timeout + 1
//!     lock = SETNX lock.foo timestamp
//!     if lock == 1 or (now() > (GET lock.foo) and now() > (GETSET lock.foo timestamp)):
//!         break;
//!     else:
//!         sleep(10ms)
//! # do your job
//! do_job()
//! # release
//! if now() < GET lock.foo:
//!     DEL lock.foo
//! ```
//!
//! That is the whole protocol, and [`GetSetLock`] sends nothing else: `SETNX`, `GET`, `GETSET`,
//! `DEL`, one round trip each (so it runs on servers from 1.0 on, and on servers with scripting
//! disabled). `now()` is the injected client [`clock`](crate::Options::clock), read afresh at
//! every comparison as the pseudocode does; the timestamp is computed once per loop iteration.
//! The only departure is the handling of `nil`, where the pseudocode relied on a Python 2 quirk
//! (`now() > None` is true); this crate does what that quirk amounted to, explicitly (F6):
//!
//! - `GET` → nil (the holder released between our `SETNX` and `GET`): retry `SETNX` at once;
//! - `GETSET` → nil (the key was deleted after our `GET`): acquired — the `GETSET` just created
//!   the key, atomically, exactly as a `SETNX` would have.
//!
//! And a value that is not a decimal integer is an error ([`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType)) rather than
//! "expired", so a user's data under the key is never overwritten by `GETSET` on our judgement.
//!
//! # Key layout
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `K`, exactly as named | string | `now + timeout + 1` in the [`Unit`](crate::Unit) (decimal) | none, ever | `SETNX`, `GETSET`; deleted by the release's `DEL` |
//!
//! # Flaws (all kept; `tests/legacy_races.rs` demonstrates them)
//!
//! - **F2, clock skew.** Expiry is judged by each *reader's* clock. A client whose clock runs
//!   ahead by more than a holder's remaining lease takes the lock over while the holder is in
//!   its critical section; nothing detects it.
//! - **F3, a losing GETSET rewrites the winner's timestamp.** Every contender that saw the
//!   expired value sends `GETSET`; only the first wins, but each loser's timestamp replaces the
//!   winner's. The winner's lease becomes whatever the last loser wrote — possibly much
//!   shorter — and the winner can no longer recognise its own value.
//! - **F4, release race.** The release checks, then deletes, in two round trips. A holder
//!   paused between the two deletes whatever lock is there by then.
//! - **F4b, the release deletes any live lock.** It compares `now` with the *stored* value, not
//!   with what this client wrote: a holder whose lock expired and was taken over still passes
//!   the check and deletes the new holder's lock — no pause needed.
//! - **F5, no owner identity.** The value is a bare timestamp: two clients can write the same
//!   one, and nobody can tell whose lock it is.
//! - **F7, fixed 10 ms polling**: no fairness, ~100 commands/s per waiter, and each poll of an
//!   expired lock sends a `GETSET` that feeds F3.
//! - **F8, units and boundaries.** Seconds by default, with `+1`; expiry is `now > value` but
//!   the release deletes only while `now < value`, so in the boundary unit the lock is neither
//!   expired nor deletable.
//! - **F9–F11**, shared with every single-master lease lock: asynchronous replication loses
//!   locks on failover, a paused process outlives its lease, and there is no fencing token.
//! - **F1**, the `DEL` + `SETNX` recovery race, is the one flaw `GETSET` fixes; the closest
//!   thing left is a stale release `DEL` meeting a waiter's `GETSET` on the now-absent key (see
//!   the F1 test).
//!
//! Use it to talk to code that already speaks this protocol, or to demonstrate the flaws. For
//! anything new, [`ScriptedLock`](crate::ScriptedLock) shares the same keys without them.

use std::time::Duration;

use tairlock::{Result, Store};

use crate::options::{Holding, Options, Release, TryAcquire};
use crate::wire::{not_a_timestamp, parse_value, validate_key};

/// The jeffkit lock, verbatim. See the [module docs](self).
///
/// Cheap to clone (it clones the store handle); one value serves any number of keys.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use tairlock::MemoryStore;
/// use tairlock_legacy::{GetSetLock, Release};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = GetSetLock::new(MemoryStore::new());
/// let held = locks.try_acquire("lock.orderid", Duration::from_secs(10)).await?;
/// let holding = held.holding().expect("nobody else holds it");
/// assert!(!locks.try_acquire("lock.orderid", Duration::from_secs(10)).await?.is_acquired());
/// assert_eq!(locks.release(&holding).await?, Release::Released);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct GetSetLock<S> {
    store: S,
    options: Options,
}

impl<S: Store> GetSetLock<S> {
    /// Locks on `store` with default [`Options`] (seconds, 10 ms polling, system clock).
    pub fn new(store: S) -> Self {
        GetSetLock::with_options(store, Options::default())
    }

    /// Locks on `store` with `options`.
    pub fn with_options(store: S, options: Options) -> Self {
        GetSetLock { store, options }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The options.
    pub fn options(&self) -> &Options {
        &self.options
    }

    /// One pass of the acquire loop, not yet started: drive it command by command with
    /// [`AcquireAttempt::step`], or to the end with [`AcquireAttempt::run`].
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput) for an empty key or a zero
    /// or overlong lease; nothing is sent.
    pub fn attempt(&self, key: &str, lease: Duration) -> Result<AcquireAttempt<'_, S>> {
        validate_key(key)?;
        let timeout = self.options.unit.timeout(lease)?;
        let mut attempt = AcquireAttempt {
            lock: self,
            key: key.to_owned(),
            timeout,
            started: tokio::time::Instant::now(),
            started_at: Duration::ZERO,
            timestamp: 0,
            next: Next::SetNx,
        };
        attempt.restart();
        Ok(attempt)
    }

    /// One pass of the loop: `SETNX`; on 0 `GET`; if expired `GETSET`. Up to three round trips
    /// (more only when the key vanishes between them, F6).
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput): as [`attempt`](Self::attempt).
    /// - [`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType): the key holds another type,
    ///   or a string that is not a timestamp.
    /// - Connection and server errors.
    ///
    /// # Cancel safety
    ///
    /// Not cancel safe: dropped after its `SETNX` or `GETSET` was sent, it may have taken the
    /// lock for nobody. The original's recovery applies: the key is reclaimed by timestamp once
    /// it expires.
    pub async fn try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        self.attempt(key, lease)?.run().await
    }

    /// The whole loop: [`try_acquire`](Self::try_acquire) until acquired, sleeping
    /// [`poll_interval`](Options::poll_interval) between passes; `None` once
    /// [`acquire_timeout`](Options::acquire_timeout) has passed.
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self, key: &str, lease: Duration) -> Result<Option<Holding>> {
        let give_up = self
            .options
            .acquire_timeout
            .map(|t| tokio::time::Instant::now() + t);
        loop {
            if let TryAcquire::Acquired(holding) = self.try_acquire(key, lease).await? {
                return Ok(Some(holding));
            }
            let mut nap = self.options.poll_interval;
            if let Some(give_up) = give_up {
                let left = give_up.saturating_duration_since(tokio::time::Instant::now());
                if left.is_zero() {
                    return Ok(None);
                }
                nap = nap.min(left);
            }
            tokio::time::sleep(nap).await;
        }
    }

    /// The original release, not yet started: `GET`, then `DEL` if `now < value`.
    pub fn release_attempt(&self, key: &str) -> ReleaseAttempt<'_, S> {
        ReleaseAttempt {
            lock: self,
            key: key.to_owned(),
            next: Some(ReleaseNext::Get),
        }
    }

    /// Release as the original does: `if now() < GET key: DEL key`. Two round trips.
    ///
    /// Only `holding.key()` is used: the original never compares the stored value with the one
    /// it wrote, so this deletes any unexpired lock, whoever holds it (F4b), and a pause between
    /// the two commands deletes whatever is there by then (F4).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType) when the key holds something
    /// that is not a timestamp (nothing is deleted); connection and server errors.
    ///
    /// # Cancel safety
    ///
    /// Dropping it may or may not delete the key.
    pub async fn release(&self, holding: &Holding) -> Result<Release> {
        self.release_key(holding.key()).await
    }

    /// [`release`](Self::release) by key, exactly as the original is called.
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release).
    pub async fn release_key(&self, key: &str) -> Result<Release> {
        validate_key(key)?;
        self.release_attempt(key).run().await
    }

    /// Blocking twin of [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_try_acquire",
            self.try_acquire(key, lease),
        )
    }

    /// Blocking twin of [`acquire`](Self::acquire).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_acquire(&self, key: &str, lease: Duration) -> Result<Option<Holding>> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_acquire",
            self.acquire(key, lease),
        )
    }

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
    pub fn blocking_release(&self, holding: &Holding) -> Result<Release> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_release",
            self.release(holding),
        )
    }

    fn now(&self) -> Duration {
        self.options.clock.now()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Next {
    SetNx,
    Get,
    GetSet,
    Done,
}

/// One pass of [`GetSetLock`]'s acquire loop, one command per [`step`](Self::step), so a test
/// or the `race` tool can pause the client between any two commands.
#[derive(Debug)]
pub struct AcquireAttempt<'a, S> {
    lock: &'a GetSetLock<S>,
    key: String,
    timeout: u64,
    started: tokio::time::Instant,
    started_at: Duration,
    timestamp: u64,
    next: Next,
}

impl<S: Store> AcquireAttempt<'_, S> {
    /// The command the next [`step`](Self::step) sends: `SETNX`, `GET` or `GETSET`; `None`
    /// when the attempt has finished.
    pub fn next_command(&self) -> Option<&'static str> {
        match self.next {
            Next::SetNx => Some("SETNX"),
            Next::Get => Some("GET"),
            Next::GetSet => Some("GETSET"),
            Next::Done => None,
        }
    }

    /// The timestamp this pass writes (`now + timeout + 1`, computed at the top of the loop).
    pub fn timestamp(&self) -> u64 {
        self.timestamp
    }

    /// Send the next command. `Some(outcome)` when the pass has finished.
    ///
    /// # Errors
    ///
    /// As [`GetSetLock::try_acquire`].
    ///
    /// # Panics
    ///
    /// When called again after the pass has finished.
    pub async fn step(&mut self) -> Result<Option<TryAcquire>> {
        let lock = self.lock;
        let unit = lock.options.unit;
        match self.next {
            Next::SetNx => {
                let value = self.timestamp.to_string();
                if lock.store.set_nx(&self.key, value.as_bytes()).await? {
                    return Ok(Some(self.acquired()));
                }
                self.next = Next::Get;
                Ok(None)
            }
            Next::Get => {
                let Some(raw) = lock.store.get(&self.key).await? else {
                    // F6: released between our SETNX and GET; try SETNX again at once.
                    self.restart();
                    return Ok(None);
                };
                let value = parse_value(&raw).ok_or_else(|| not_a_timestamp(&self.key))?;
                let now = lock.now();
                if unit.is_expired(value, now) {
                    self.next = Next::GetSet;
                    return Ok(None);
                }
                self.next = Next::Done;
                Ok(Some(TryAcquire::Busy {
                    holder: Some(value),
                    remaining: Some(unit.remaining(value, now)),
                }))
            }
            Next::GetSet => {
                let value = self.timestamp.to_string();
                let old = lock.store.getset(&self.key, value.as_bytes()).await?;
                self.next = Next::Done;
                let Some(old) = old else {
                    // F6: the key vanished after our GET; GETSET created it, as SETNX would.
                    return Ok(Some(self.acquired()));
                };
                // We have written already; a non-timestamp here was written after our GET.
                let old = parse_value(&old).ok_or_else(|| not_a_timestamp(&self.key))?;
                let now = lock.now();
                if unit.is_expired(old, now) {
                    return Ok(Some(self.acquired()));
                }
                // Another GETSET won; ours has replaced its timestamp anyway (F3).
                Ok(Some(TryAcquire::Busy {
                    holder: Some(old),
                    remaining: Some(unit.remaining(old, now)),
                }))
            }
            Next::Done => panic!("AcquireAttempt::step called after the attempt finished"),
        }
    }

    /// Send the remaining commands.
    ///
    /// # Errors
    ///
    /// As [`GetSetLock::try_acquire`].
    pub async fn run(mut self) -> Result<TryAcquire> {
        loop {
            if let Some(outcome) = self.step().await? {
                return Ok(outcome);
            }
        }
    }

    /// The top of the loop: a fresh timestamp.
    fn restart(&mut self) {
        self.started = tokio::time::Instant::now();
        self.started_at = self.lock.now();
        self.timestamp = self.lock.options.unit.value(self.started_at, self.timeout);
        self.next = Next::SetNx;
    }

    fn acquired(&mut self) -> TryAcquire {
        self.next = Next::Done;
        let unit = self.lock.options.unit;
        TryAcquire::Acquired(Holding {
            key: self.key.clone(),
            value: self.timestamp,
            unit,
            fence: None,
            deadline: believed_until(
                self.started,
                unit.remaining(self.timestamp, self.started_at),
            ),
        })
    }
}

/// What the original believes of the lock it took: the timestamp it wrote, read by its own clock
/// as the attempt started — `left` after `started` — less the drift allowance every kind makes
/// (1% + 2 ms). Not the deadline rule ([`tairlock::deadline::local_deadline`]): no server
/// reports a time to live here (the key has none), and this recipe is kept, flaws included
/// (F2: another client's clock may judge the lock expired sooner), for comparison.
fn believed_until(started: tokio::time::Instant, left: Duration) -> tokio::time::Instant {
    let drift = tairlock::deadline::drift(left, tairlock::deadline::DRIFT_FACTOR);
    started + left.saturating_sub(drift)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReleaseNext {
    Get,
    Del,
}

/// [`GetSetLock`]'s release, one command per [`step`](Self::step).
#[derive(Debug)]
pub struct ReleaseAttempt<'a, S> {
    lock: &'a GetSetLock<S>,
    key: String,
    next: Option<ReleaseNext>,
}

impl<S: Store> ReleaseAttempt<'_, S> {
    /// The command the next [`step`](Self::step) sends: `GET` or `DEL`; `None` when finished.
    pub fn next_command(&self) -> Option<&'static str> {
        match self.next {
            Some(ReleaseNext::Get) => Some("GET"),
            Some(ReleaseNext::Del) => Some("DEL"),
            None => None,
        }
    }

    /// Send the next command. `Some(outcome)` when the release has finished.
    ///
    /// # Errors
    ///
    /// As [`GetSetLock::release`].
    ///
    /// # Panics
    ///
    /// When called again after the release has finished.
    pub async fn step(&mut self) -> Result<Option<Release>> {
        let lock = self.lock;
        match self.next.take() {
            Some(ReleaseNext::Get) => {
                let Some(raw) = lock.store.get(&self.key).await? else {
                    return Ok(Some(Release::NotHeld));
                };
                let value = parse_value(&raw).ok_or_else(|| not_a_timestamp(&self.key))?;
                // `if now() < GET lock.foo`: the stored value, not ours (F4b).
                if lock.options.unit.floor(lock.now()) < value {
                    self.next = Some(ReleaseNext::Del);
                    return Ok(None);
                }
                Ok(Some(Release::Expired))
            }
            Some(ReleaseNext::Del) => Ok(Some(if lock.store.del(&self.key).await? {
                Release::Released
            } else {
                Release::NotHeld
            })),
            None => panic!("ReleaseAttempt::step called after the release finished"),
        }
    }

    /// Send the remaining commands.
    ///
    /// # Errors
    ///
    /// As [`GetSetLock::release`].
    pub async fn run(mut self) -> Result<Release> {
        loop {
            if let Some(outcome) = self.step().await? {
                return Ok(outcome);
            }
        }
    }
}

impl<S: Store> GetSetLock<S> {
    /// Blocking twin of [`release_key`](Self::release_key).
    ///
    /// # Errors
    ///
    /// As [`release_key`](Self::release_key).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release_key(&self, key: &str) -> Result<Release> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_release_key",
            self.release_key(key),
        )
    }
}
