//! The two-step Tair reader/writer recipe, verbatim, kept for comparison. **Do not use it to
//! protect anything**: it breaks in at least five ways, listed below and demonstrated by
//! `tests/rwlock_two_step.rs` and the `rw-two-step` row of `tairlock race`.
//!
//! # The recipe
//!
//! ```text
//! reader:  expireUnlock(w, now)      -- "unlock" the write lock as of now: succeeds iff no live writer
//!          INCR rc                   -- count myself in ... read ...
//!          DECR rc                   -- count myself out
//! writer:  GET rc == 0 (or nil) ?    -- nobody reading?
//!          expireLock(w, ttl)        -- SET w <my clock + ttl> NX PX ttl ... write ...
//!          expireUnlock(w, E)        -- E: the expiry my expireLock stored
//! ```
//!
//! `expireUnlock(w, t)` has **threshold** semantics: it succeeds when the lock is absent, or
//! when `t` is at least the stored expiry, and then deletes the lock. Times are **client**
//! clocks ([`SharedClock`]), as in the original.
//!
//! Every step is one plain command ([`Store::get`], [`Store::set_nx_px`], [`Store::incr`], ...),
//! one round trip each, except `expireUnlock`: Tair had it as one server command, but stock Redis
//! has no threshold compare-and-delete, so it is emulated with `GET`, a comparison on the client,
//! and `DEL` — as the recipe's users on plain Redis wrote it. That emulation adds one window of
//! its own (an expired lock replaced between the `GET` and the `DEL` loses its replacement);
//! none of the flaws below depends on it: each is demonstrated with the `GET` and `DEL`
//! back to back.
//!
//! # Key layout
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `<prefix>{name}:w` | string | the writer's expiry, ms since the epoch **by the writer's clock** | `PX ttl` | [`expire_lock`](TwoStepRwLock::expire_lock); deleted by [`expire_unlock`](TwoStepRwLock::expire_unlock) — the writer's own, and every reader's probe |
//! | `<prefix>{name}:rc` | string | reader count (integer) | **none** | `INCR`/`DECR` by readers |
//!
//! # Its flaws
//!
//! - **I. A reader and a writer both enter** (check-then-act on both sides): the reader probes
//!   (no writer), the writer reads `rc = 0` and takes the lock, the reader `INCR`s and reads
//!   while the writer writes.
//! - **II. The same with the writer's check first**: the writer reads `rc = 0`; the reader probes
//!   and `INCR`s; the writer takes the lock.
//! - **III. A crashed reader starves writers forever**: its `INCR` is never undone and `rc` has
//!   no TTL, so `GET rc` never reads 0 again. (Putting a TTL on `rc` trades this for overlaps and
//!   negative counts; see the crate docs.)
//! - **IV. Threshold semantics plus clock skew delete a live writer's lock**: a reader whose
//!   clock runs ahead of the writer's passes a `now` past the writer's expiry, so its probe
//!   *deletes* the live write lock, and the reader reads while the writer writes.
//! - **V. No writer preference**: overlapping readers keep `rc > 0` indefinitely; a writer polling
//!   for `rc == 0` starves for as long as the reads continue.
//!
//! Also: no fencing token, no lease for readers, no renewal, no waiting other than polling. The
//! scripted [`RwLock`](crate::RwLock) fixes every one of these.

use std::fmt;
use std::time::Duration;

use tairlock::clock::SharedClock;
use tairlock::{Error, ErrorKind, Keyspace, Result, Store};

/// The keys of one two-step lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TwoStepKeys {
    /// The write lock: `<prefix>{name}:w`.
    pub writer: String,
    /// The reader count: `<prefix>{name}:rc`.
    pub count: String,
}

/// A write lock taken by [`TwoStepRwLock::try_write`]: the expiry its `expireLock` stored, which
/// its `expireUnlock` passes back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TwoStepWrite {
    expiry_ms: u64,
}

impl TwoStepWrite {
    /// A write lock whose `expireLock` stored `expiry_ms` (for driving the steps by hand).
    pub fn new(expiry_ms: u64) -> Self {
        TwoStepWrite { expiry_ms }
    }

    /// The stored expiry, ms since the epoch by the writer's clock.
    pub fn expiry_ms(&self) -> u64 {
        self.expiry_ms
    }
}

/// The two-step Tair reader/writer recipe, verbatim. See the [module docs](self) for its flaws.
///
/// The recipe's steps are public one by one ([`probe_writer`](Self::probe_writer),
/// [`enter_read`](Self::enter_read), [`reader_count`](Self::reader_count),
/// [`expire_lock`](Self::expire_lock), ...), so tests and `tairlock race` can interleave them
/// in any order; [`try_read`](Self::try_read) and [`try_write`](Self::try_write) run them in the
/// recipe's order.
#[derive(Clone)]
pub struct TwoStepRwLock<S> {
    store: S,
    clock: SharedClock,
    keyspace: Keyspace,
}

impl<S> fmt::Debug for TwoStepRwLock<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwoStepRwLock")
            .field("keyspace", &self.keyspace)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl<S: Store> TwoStepRwLock<S> {
    /// The recipe on `store`, reading time from this client's `clock`, default key prefix.
    pub fn new(store: S, clock: SharedClock) -> Self {
        TwoStepRwLock::with_keyspace(store, clock, Keyspace::default())
    }

    /// The recipe with keys in `keyspace`.
    pub fn with_keyspace(store: S, clock: SharedClock, keyspace: Keyspace) -> Self {
        TwoStepRwLock {
            store,
            clock,
            keyspace,
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The keys of the lock `name`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty name or one with braces.
    pub fn keys(&self, name: &str) -> Result<TwoStepKeys> {
        Ok(TwoStepKeys {
            writer: self.keyspace.key(name, ":w")?,
            count: self.keyspace.key(name, ":rc")?,
        })
    }

    /// This client's clock, in ms since the epoch.
    pub fn now_ms(&self) -> u64 {
        self.clock.now().as_millis() as u64
    }

    /// `expireLock(w, ttl)`: `SET w <now + ttl> NX PX ttl`, `now` by this client's clock. The
    /// stored expiry when taken, `None` when the key exists.
    ///
    /// # Errors
    ///
    /// Invalid name or TTL; store errors.
    pub async fn expire_lock(&self, name: &str, ttl: Duration) -> Result<Option<TwoStepWrite>> {
        let keys = self.keys(name)?;
        let ttl_ms = tairlock::ttl_ms(ttl)?;
        let expiry_ms = self.now_ms() + ttl_ms;
        let taken = self
            .store
            .set_nx_px(
                &keys.writer,
                expiry_ms.to_string().as_bytes(),
                Duration::from_millis(ttl_ms),
            )
            .await?;
        Ok(taken.then_some(TwoStepWrite { expiry_ms }))
    }

    /// `expireUnlock(w, at_ms)` with threshold semantics: true when the lock is absent, or when
    /// `at_ms` is at least the stored expiry — and then the lock is deleted, whoever holds it.
    /// False (nothing deleted) when the stored expiry is later than `at_ms`.
    ///
    /// Two commands, `GET` then `DEL` (see the [module docs](self)).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::WrongType`] when the key holds something that is not an expiry (nothing is
    /// deleted); store errors.
    pub async fn expire_unlock(&self, name: &str, at_ms: u64) -> Result<bool> {
        let keys = self.keys(name)?;
        let Some(raw) = self.store.get(&keys.writer).await? else {
            return Ok(true);
        };
        let stored = std::str::from_utf8(&raw)
            .ok()
            .and_then(|s| s.parse::<u64>().ok())
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::WrongType,
                    format!(
                        "{} holds a value that is not a two-step expiry",
                        keys.writer
                    ),
                )
            })?;
        if at_ms >= stored {
            self.store.del(&keys.writer).await?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Reader, step 1: `expireUnlock(w, now)` by this client's clock. True means "no live
    /// writer" (and deletes any write lock the clock says has expired).
    ///
    /// # Errors
    ///
    /// As [`expire_unlock`](Self::expire_unlock).
    pub async fn probe_writer(&self, name: &str) -> Result<bool> {
        self.expire_unlock(name, self.now_ms()).await
    }

    /// Reader, step 2: `INCR rc`; the new count.
    ///
    /// # Errors
    ///
    /// Invalid name; `WRONGTYPE` or "not an integer" from the server; store errors.
    pub async fn enter_read(&self, name: &str) -> Result<i64> {
        let keys = self.keys(name)?;
        self.store.incr(&keys.count).await
    }

    /// Reader, on exit: `DECR rc`; the new count.
    ///
    /// # Errors
    ///
    /// As [`enter_read`](Self::enter_read).
    pub async fn exit_read(&self, name: &str) -> Result<i64> {
        let keys = self.keys(name)?;
        self.store.decr(&keys.count).await
    }

    /// Writer, step 1: `GET rc` (nil reads as 0).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::WrongType`] when the count is not an integer; store errors.
    pub async fn reader_count(&self, name: &str) -> Result<i64> {
        let keys = self.keys(name)?;
        match self.store.get(&keys.count).await? {
            None => Ok(0),
            Some(raw) => std::str::from_utf8(&raw)
                .ok()
                .and_then(|s| s.parse::<i64>().ok())
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::WrongType,
                        format!("{} holds a value that is not a count", keys.count),
                    )
                }),
        }
    }

    /// The reader side of the recipe: probe, then `INCR`. True when this reader is in (it must
    /// call [`read_unlock`](Self::read_unlock) when done), false when a live writer was seen.
    ///
    /// # Errors
    ///
    /// As the steps.
    pub async fn try_read(&self, name: &str) -> Result<bool> {
        if !self.probe_writer(name).await? {
            return Ok(false);
        }
        self.enter_read(name).await?;
        Ok(true)
    }

    /// The reader's exit: `DECR rc`; the new count.
    ///
    /// # Errors
    ///
    /// As [`exit_read`](Self::exit_read).
    pub async fn read_unlock(&self, name: &str) -> Result<i64> {
        self.exit_read(name).await
    }

    /// The writer side of the recipe: `GET rc == 0`, then `expireLock(w, ttl)`. The write lock
    /// when taken, `None` when readers were counted or another writer holds it.
    ///
    /// # Errors
    ///
    /// As the steps.
    pub async fn try_write(&self, name: &str, ttl: Duration) -> Result<Option<TwoStepWrite>> {
        if self.reader_count(name).await? != 0 {
            return Ok(None);
        }
        self.expire_lock(name, ttl).await
    }

    /// The writer's exit: `expireUnlock(w, E)`. True when the lock was deleted or already gone.
    ///
    /// # Errors
    ///
    /// As [`expire_unlock`](Self::expire_unlock).
    pub async fn write_unlock(&self, name: &str, write: &TwoStepWrite) -> Result<bool> {
        self.expire_unlock(name, write.expiry_ms).await
    }

    /// Blocking twin of [`expire_lock`](Self::expire_lock).
    ///
    /// # Errors
    ///
    /// As [`expire_lock`](Self::expire_lock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_expire_lock(&self, name: &str, ttl: Duration) -> Result<Option<TwoStepWrite>> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_expire_lock",
            self.expire_lock(name, ttl),
        )
    }

    /// Blocking twin of [`expire_unlock`](Self::expire_unlock).
    ///
    /// # Errors
    ///
    /// As [`expire_unlock`](Self::expire_unlock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_expire_unlock(&self, name: &str, at_ms: u64) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_expire_unlock",
            self.expire_unlock(name, at_ms),
        )
    }

    /// Blocking twin of [`probe_writer`](Self::probe_writer).
    ///
    /// # Errors
    ///
    /// As [`probe_writer`](Self::probe_writer).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_probe_writer(&self, name: &str) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_probe_writer",
            self.probe_writer(name),
        )
    }

    /// Blocking twin of [`enter_read`](Self::enter_read).
    ///
    /// # Errors
    ///
    /// As [`enter_read`](Self::enter_read).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_enter_read(&self, name: &str) -> Result<i64> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_enter_read",
            self.enter_read(name),
        )
    }

    /// Blocking twin of [`exit_read`](Self::exit_read).
    ///
    /// # Errors
    ///
    /// As [`exit_read`](Self::exit_read).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_exit_read(&self, name: &str) -> Result<i64> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_exit_read",
            self.exit_read(name),
        )
    }

    /// Blocking twin of [`reader_count`](Self::reader_count).
    ///
    /// # Errors
    ///
    /// As [`reader_count`](Self::reader_count).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_reader_count(&self, name: &str) -> Result<i64> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_reader_count",
            self.reader_count(name),
        )
    }

    /// Blocking twin of [`try_read`](Self::try_read).
    ///
    /// # Errors
    ///
    /// As [`try_read`](Self::try_read).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_read(&self, name: &str) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_try_read",
            self.try_read(name),
        )
    }

    /// Blocking twin of [`read_unlock`](Self::read_unlock).
    ///
    /// # Errors
    ///
    /// As [`read_unlock`](Self::read_unlock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_read_unlock(&self, name: &str) -> Result<i64> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_read_unlock",
            self.read_unlock(name),
        )
    }

    /// Blocking twin of [`try_write`](Self::try_write).
    ///
    /// # Errors
    ///
    /// As [`try_write`](Self::try_write).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_write(&self, name: &str, ttl: Duration) -> Result<Option<TwoStepWrite>> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_try_write",
            self.try_write(name, ttl),
        )
    }

    /// Blocking twin of [`write_unlock`](Self::write_unlock).
    ///
    /// # Errors
    ///
    /// As [`write_unlock`](Self::write_unlock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_write_unlock(&self, name: &str, write: &TwoStepWrite) -> Result<bool> {
        tairlock::blocking::block_on(
            self.store.runtime(),
            "blocking_write_unlock",
            self.write_unlock(name, write),
        )
    }
}
