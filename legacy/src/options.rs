//! Settings and outcomes shared by the three lock kinds.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tairlock::clock::{SharedClock, SystemClock};

use crate::wire::Unit;

/// Which commands a [`WatchLock`](crate::WatchLock) uses, by server version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Profile {
    /// Redis ≥ 2.6.12 (with scripting disabled, or a proxy that forbids it): `SET … PX`,
    /// `SET … XX`, `PTTL`, `PEXPIRE`, `TIME`. Timestamps and expiry by the server's clock;
    /// millisecond TTLs; time-anchored fencing tokens with a bounded fence key.
    #[default]
    Modern,
    /// Redis 2.2 – 2.6.11: `SETEX`, `TTL`, `INCR` only. Timestamps are written from the client
    /// clock (the TTL still decides expiry for keys this lock wrote, in whole seconds rounded
    /// up); keys old clients wrote are judged by the client clock; the fence is an `INCR`
    /// counter kept forever. Renewal cannot say `XX`: on servers before 6.0.9, whose `EXEC` does
    /// not abort when a watched key merely expires, a renewal racing its own expiry may re-create
    /// the key — only if nobody took the lock meanwhile, since any taker's write aborts it.
    Classic,
}

/// Settings of a [`GetSetLock`](crate::GetSetLock), [`WatchLock`](crate::WatchLock) or
/// [`ScriptedLock`](crate::ScriptedLock). Every kind reads the fields it needs and ignores the
/// rest; the table says which.
///
/// | field | default | GetSet | Watch | Scripted |
/// |---|---|---|---|---|
/// | [`unit`](Self::unit) | seconds | ✓ | ✓ | ✓ |
/// | [`poll_interval`](Self::poll_interval) | 10 ms | ✓ (fixed, as the original) | ✓ (jittered: half to all of it; capped by the holder's remaining time) | ✓ (same) |
/// | [`acquire_timeout`](Self::acquire_timeout) | none: wait forever | ✓ | ✓ | ✓ |
/// | [`clock`](Self::clock) | system clock | ✓ judges expiry | only in [`Profile::Classic`](Profile) | — |
/// | [`fence_retention`](Self::fence_retention) | 60 s | — | ✓ | ✓ |
/// | [`profile`](Self::profile) | [`Modern`](Profile::Modern) | — | ✓ | — |
/// | [`pool_size`](Self::pool_size) | 4 | — | ✓ | — |
#[derive(Clone)]
#[non_exhaustive]
pub struct Options {
    /// The unit of the stored timestamps; every client of a key must use the same one.
    pub unit: Unit,
    /// How long [`acquire`](crate::GetSetLock::acquire) sleeps between attempts.
    pub poll_interval: Duration,
    /// How long [`acquire`](crate::GetSetLock::acquire) keeps trying before it returns `None`;
    /// `None` waits forever, as the original loop does.
    pub acquire_timeout: Option<Duration>,
    /// The client clock: what [`GetSetLock`](crate::GetSetLock) reads as `now`. Inject a
    /// [`VirtualClock`](tairlock::clock::VirtualClock) or a
    /// [`SkewedClock`](tairlock::clock::SkewedClock) to reproduce the original's clock flaws.
    pub clock: SharedClock,
    /// How long the fence key outlives a lease (Watch, Scripted), so tokens keep increasing
    /// across back-to-back holders while nothing is stored for an idle lock.
    pub fence_retention: Duration,
    /// Which commands [`WatchLock`](crate::WatchLock) may use.
    pub profile: Profile,
    /// How many idle dedicated connections a [`WatchLock`](crate::WatchLock) keeps for reuse.
    pub pool_size: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            unit: Unit::Seconds,
            poll_interval: Duration::from_millis(10),
            acquire_timeout: None,
            clock: Arc::new(SystemClock),
            fence_retention: Duration::from_secs(60),
            profile: Profile::Modern,
            pool_size: 4,
        }
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("unit", &self.unit)
            .field("poll_interval", &self.poll_interval)
            .field("acquire_timeout", &self.acquire_timeout)
            .field("clock", &self.clock)
            .field("fence_retention", &self.fence_retention)
            .field("profile", &self.profile)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

impl Options {
    /// Timestamps in this unit.
    pub fn unit(mut self, unit: Unit) -> Self {
        self.unit = unit;
        self
    }

    /// Sleep this long between attempts of `acquire`.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval;
        self
    }

    /// Give up `acquire` after this long (`None`: never).
    pub fn acquire_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.acquire_timeout = timeout;
        self
    }

    /// Read client time from this clock.
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = clock;
        self
    }

    /// Keep the fence key this long after a lease.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// Use this command profile for [`WatchLock`](crate::WatchLock).
    pub fn profile(mut self, profile: Profile) -> Self {
        self.profile = profile;
        self
    }

    /// Keep at most this many idle dedicated connections per [`WatchLock`](crate::WatchLock).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    pub(crate) fn retention_ms(&self) -> u64 {
        self.fence_retention.min(crate::wire::MAX_LEASE).as_millis() as u64
    }
}

/// A lock held by this client, as returned by an acquisition.
///
/// It records what this client wrote: the timestamp (the lock key's value), and for
/// [`WatchLock`](crate::WatchLock) and [`ScriptedLock`](crate::ScriptedLock) the fencing token
/// written beside it. Those two recognise their own lock by both and by the key's TTL; the
/// [`GetSetLock`](crate::GetSetLock) release looks at none of it (flaw F4b).
#[must_use = "a holding is what releases the lock"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Holding {
    pub(crate) key: String,
    pub(crate) value: u64,
    pub(crate) unit: Unit,
    pub(crate) fence: Option<u64>,
    pub(crate) deadline: tokio::time::Instant,
}

impl Holding {
    /// A holding of `key` with `value` and `fence`, for tests and tools that rebuild one (a
    /// `ScriptedLock` can release a lock a `WatchLock` took, and vice versa).
    pub fn new(key: impl Into<String>, value: u64, unit: Unit, fence: Option<u64>) -> Self {
        Holding {
            key: key.into(),
            value,
            unit,
            fence,
            deadline: tokio::time::Instant::now(),
        }
    }

    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The timestamp this client wrote (the lock key's value).
    pub fn value(&self) -> u64 {
        self.value
    }

    /// The value as it is stored: decimal text.
    pub fn value_text(&self) -> String {
        self.value.to_string()
    }

    /// The unit of [`value`](Self::value).
    pub fn unit(&self) -> Unit {
        self.unit
    }

    /// The fencing token (Watch, Scripted; `None` for GetSet, which has none). It strictly
    /// increases per lock across acquisitions; pass it to the resource you protect and have the
    /// resource reject lower tokens.
    pub fn fence(&self) -> Option<u64> {
        self.fence
    }

    /// When the value says the lock expires, since the epoch (by whichever clock judges it).
    pub fn expires_at(&self) -> Duration {
        self.unit.expires_at(self.value)
    }

    /// The local instant by which this client must stop relying on the lock. For
    /// [`WatchLock`](crate::WatchLock) and [`ScriptedLock`](crate::ScriptedLock): when the request
    /// that granted or renewed it was sent (the script, or the `EXEC`), plus the time to live the
    /// server reported for the key in that same answer, less a drift allowance (1% + 2 ms): the
    /// deadline rule ([`tairlock::deadline::local_deadline`]). For
    /// [`GetSetLock`](crate::GetSetLock), which reads no time to live (its key has none): the
    /// value's expiry by the client's own clock as seen when the attempt started, less the same
    /// allowance — the original's belief, flaws included.
    pub fn deadline(&self) -> tokio::time::Instant {
        self.deadline
    }

    /// Time left before [`deadline`](Self::deadline), zero if passed.
    pub fn remaining(&self) -> Duration {
        self.deadline
            .saturating_duration_since(tokio::time::Instant::now())
    }
}

/// The outcome of one acquisition attempt. Contention is an outcome, not an error.
#[must_use = "an acquired holding is what releases the lock"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TryAcquire {
    /// The lock is ours.
    Acquired(Holding),
    /// Somebody holds it.
    Busy {
        /// The holder's timestamp, when one was read.
        holder: Option<u64>,
        /// How long until the holder's lock expires, by the clock that judges it, when known.
        remaining: Option<Duration>,
    },
}

impl TryAcquire {
    /// The holding, if acquired.
    pub fn holding(self) -> Option<Holding> {
        match self {
            TryAcquire::Acquired(h) => Some(h),
            TryAcquire::Busy { .. } => None,
        }
    }

    /// Whether the lock was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, TryAcquire::Acquired(_))
    }
}

/// The outcome of a release.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// The lock key was deleted. For [`GetSetLock`](crate::GetSetLock) this means only that the
    /// key held an unexpired timestamp: whose, it never checks (flaw F4b).
    Released,
    /// No lock key existed.
    NotHeld,
    /// [`GetSetLock`](crate::GetSetLock) only: the stored timestamp had expired by the client's
    /// clock, so the original leaves the key for the next taker.
    Expired,
    /// Another Watch or Scripted client holds the lock now (the key carries a TTL and another
    /// value or fence). Nothing was deleted.
    HeldByOther,
    /// An old-protocol client (SETNX/GETSET) wrote the key after us: it has no TTL any more. It
    /// may hold the lock (it took over, or acquired after our lease), or it may have lost a
    /// GETSET race and only rewritten our timestamp (flaw F3); the two cannot be told apart, so
    /// nothing was deleted. The key frees itself when its timestamp passes.
    Overwritten,
}

/// The outcome of a renewal.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Renew {
    /// The new holding (new timestamp, same fencing token). The old one no longer matches —
    /// unless the timestamp did not move (renewed within the same unit), when both are the same.
    Renewed(Holding),
    /// No lock key existed: ours expired.
    NotHeld,
    /// Another Watch or Scripted client holds it.
    HeldByOther,
    /// An old-protocol client rewrote the key; see [`Release::Overwritten`].
    Overwritten,
}
