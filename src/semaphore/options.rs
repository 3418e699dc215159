//! [`SemaphoreOptions`]: the settings of a [`Semaphore`](super::Semaphore).

use std::time::Duration;

use crate::keys::Keyspace;
use crate::wait::WaitStrategy;

/// Settings of a [`Semaphore`](super::Semaphore).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct SemaphoreOptions {
    /// Key prefix (default `tairlock:`).
    pub keyspace: Keyspace,
    /// How long the last fencing token is kept after the last lease ends (default 60 s).
    pub fence_retention: Duration,
    /// The lease of each permit holder, renewed by the guard's watchdog at a third of its
    /// length (default 30 s): a crashed holder's permits come back within this.
    pub watchdog_lease: Duration,
    /// How `acquire` and `try_acquire_for` wait for permits (default: by notification).
    pub wait: WaitStrategy,
    /// Fair mode (default off): waiters queue on the server, and a caller is admitted only if
    /// the waiters ahead of it fit too (see [fairness](super#fairness)). Every client of a
    /// name should use it.
    pub fair: bool,
    /// In fair mode, how long a waiter's place lasts unless refreshed (default 2 s): a crashed
    /// waiter holds up those behind it at most this long.
    pub waiter_lease: Duration,
    /// The bound on automatic renewal (default none), as the expire lock's
    /// [`Options::max_hold`](crate::Options#structfield.max_hold): the watchdog never renews a
    /// holder's lease past this long after its guard was made (a renewal near the end asks only
    /// for the time left), so the lease runs out about `max_hold` after the acquisition, the
    /// guard is lost then ([`PermitGuard::is_lost`](super::PermitGuard::is_lost),
    /// [`lost`](super::PermitGuard::lost)), and the permits come back to the others. An explicit
    /// [`PermitGuard::renew`](super::PermitGuard::renew) is not bounded by it.
    pub max_hold: Option<Duration>,
}

impl Default for SemaphoreOptions {
    fn default() -> Self {
        SemaphoreOptions {
            keyspace: Keyspace::default(),
            fence_retention: Duration::from_secs(60),
            watchdog_lease: Duration::from_secs(30),
            wait: WaitStrategy::default(),
            fair: false,
            waiter_lease: Duration::from_secs(2),
            max_hold: None,
        }
    }
}

impl SemaphoreOptions {
    /// Use this keyspace.
    pub fn keyspace(mut self, keyspace: Keyspace) -> Self {
        self.keyspace = keyspace;
        self
    }

    /// Keep the last fencing token this long after the last lease ends.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// The lease of each holder, renewed by the watchdog.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How to wait for permits.
    pub fn wait(mut self, wait: WaitStrategy) -> Self {
        self.wait = wait;
        self
    }

    /// Fair mode on or off.
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// The waiter lease of the fair mode.
    pub fn waiter_lease(mut self, lease: Duration) -> Self {
        self.waiter_lease = lease;
        self
    }

    /// Bound automatic renewal: see
    /// [`SemaphoreOptions::max_hold`](Self#structfield.max_hold).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
}
