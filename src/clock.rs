//! Injected time.
//!
//! Scripted operations take their time from the store (the server's `TIME`, or the embedded
//! store's clock). Only the verbatim legacy and two-step recipes read a *client* clock, because the
//! originals do; they take it from here, so tests can skew one client against another.
//!
//! | clock | reads | used for |
//! |---|---|---|
//! | [`SystemClock`] | the OS wall clock | production |
//! | [`TokioClock`] | tokio's [`Instant`](tokio::time::Instant) from a wall-clock base | paused-time tests and the `race` simulation |
//! | [`VirtualClock`] | a counter the test advances | deterministic tests |
//! | [`SkewedClock`] | another clock plus a fixed offset | clock-skew scenarios |

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// A source of wall-clock time, as a [`Duration`] since the Unix epoch.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time since the Unix epoch.
    fn now(&self) -> Duration;
}

/// A shared, dynamically chosen clock.
pub type SharedClock = Arc<dyn Clock>;

/// The operating system's wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or(Duration::ZERO)
    }
}

/// Wall-clock time that advances with tokio's clock, so `tokio::time::pause` and
/// `tokio::time::advance` move it (and so do sleeps under paused time).
#[derive(Debug, Clone, Copy)]
pub struct TokioClock {
    base: Duration,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock that reads the system time now and then advances with tokio's clock.
    pub fn new() -> Self {
        TokioClock {
            base: SystemClock.now(),
            start: tokio::time::Instant::now(),
        }
    }

    /// A clock that starts at `base` since the epoch.
    pub fn starting_at(base: Duration) -> Self {
        TokioClock {
            base,
            start: tokio::time::Instant::now(),
        }
    }
}

impl Default for TokioClock {
    fn default() -> Self {
        TokioClock::new()
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Duration {
        self.base + self.start.elapsed()
    }
}

/// A clock that moves only when told to. Clones share one time.
#[derive(Debug, Clone)]
pub struct VirtualClock {
    micros: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A clock standing at `start` since the epoch.
    pub fn new(start: Duration) -> Self {
        VirtualClock {
            micros: Arc::new(AtomicU64::new(start.as_micros() as u64)),
        }
    }

    /// Move the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.micros
            .fetch_add(by.as_micros() as u64, Ordering::SeqCst);
    }

    /// Set the clock to `to` since the epoch (it may go backwards, as a stepped wall clock does).
    pub fn set(&self, to: Duration) {
        self.micros.store(to.as_micros() as u64, Ordering::SeqCst);
    }
}

impl Default for VirtualClock {
    /// A virtual clock at 2026-01-01T00:00:00Z.
    fn default() -> Self {
        VirtualClock::new(Duration::from_secs(1_767_225_600))
    }
}

impl Clock for VirtualClock {
    fn now(&self) -> Duration {
        Duration::from_micros(self.micros.load(Ordering::SeqCst))
    }
}

/// Another clock, shifted by a fixed offset: a client whose clock is fast or slow.
#[derive(Debug, Clone)]
pub struct SkewedClock {
    inner: SharedClock,
    ahead: Duration,
    behind: Duration,
}

impl SkewedClock {
    /// `inner` shifted `ahead` into the future.
    pub fn ahead(inner: SharedClock, ahead: Duration) -> Self {
        SkewedClock {
            inner,
            ahead,
            behind: Duration::ZERO,
        }
    }

    /// `inner` shifted `behind` into the past.
    pub fn behind(inner: SharedClock, behind: Duration) -> Self {
        SkewedClock {
            inner,
            ahead: Duration::ZERO,
            behind,
        }
    }
}

impl Clock for SkewedClock {
    fn now(&self) -> Duration {
        (self.inner.now() + self.ahead).saturating_sub(self.behind)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_moves_only_when_told() {
        let clock = VirtualClock::new(Duration::from_secs(10));
        assert_eq!(clock.now(), Duration::from_secs(10));
        clock.advance(Duration::from_millis(5));
        assert_eq!(clock.now(), Duration::from_millis(10_005));
        clock.set(Duration::from_secs(1));
        assert_eq!(clock.now(), Duration::from_secs(1));
    }

    #[test]
    fn skewed_clock_shifts_its_inner_clock() {
        let base = VirtualClock::new(Duration::from_secs(100));
        let fast = SkewedClock::ahead(Arc::new(base.clone()), Duration::from_secs(15));
        let slow = SkewedClock::behind(Arc::new(base.clone()), Duration::from_secs(15));
        assert_eq!(fast.now(), Duration::from_secs(115));
        assert_eq!(slow.now(), Duration::from_secs(85));
        base.advance(Duration::from_secs(1));
        assert_eq!(fast.now(), Duration::from_secs(116));
    }
}
