//! The settings of an [`RwLock`](crate::RwLock).

use std::time::Duration;

use tairlock::Keyspace;

/// Who goes first when readers and a writer both want the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Preference {
    /// A waiting writer announces its intent, and new readers stay out until it has had its
    /// turn (Go's `sync.RWMutex`, glibc's writer-preferring rwlock). Readers that already hold
    /// the lock keep it, and an owner's reentrant reads are served locally, so they never wait.
    /// The default.
    #[default]
    Writer,
    /// Readers enter whenever no writer *holds* the lock (Redisson's `RReadWriteLock`): the most
    /// read throughput, and a writer may starve under continuous reads. A waiting writer raises
    /// no intent; with shared read holds it still asks other clients, once per wait, to give
    /// back their idle ones.
    Reader,
}

/// Settings of an [`RwLock`](crate::RwLock).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Options {
    /// Key prefix (default `tairlock:`).
    pub keyspace: Keyspace,
    /// Writer or reader preference (default writer).
    pub preference: Preference,
    /// The lease of read and write holds, renewed by the watchdog at a third of its length while
    /// the guard lives (default 30 s). A crashed holder blocks others for at most this long.
    pub watchdog_lease: Duration,
    /// How long a waiting writer's intent lasts unless re-asserted (default 1 s). A waiting
    /// writer re-asserts it at a third of this; one that gives up, crashes or is cancelled
    /// keeps new readers out for at most this long.
    pub intent_lease: Duration,
    /// How long the last fencing token is kept after a write lease ends (default 60 s).
    pub fence_retention: Duration,
    /// How waiting acquires wait (default: by release notification).
    pub wait: tairlock::WaitStrategy,
    /// Whether the local readers of a lock share one server read hold (default off): the first
    /// reader's acquire reaches the server, later ones join it with no round trip, and the last
    /// one's release gives it back (or lets it linger). A writer's intent revokes it; under
    /// reader preference a waiting writer's announcement gives it back only when idle. Needs
    /// release notifications (a store without them reads unshared). See `docs/rwlock.md`.
    pub share_reads: bool,
    /// With `share_reads`: how long an idle shared read hold is kept for
    /// the next local reader before it is given back (default 5 ms; zero: given back at once).
    /// A waiting writer's announcement (its intent, or under reader preference its hint) ends
    /// it at once; one that was not heard waits at most this long.
    pub linger: Duration,
    /// The bound on automatic renewal (default none), as the core's
    /// [`Options::max_hold`](tairlock::Options#structfield.max_hold): the watchdog never renews
    /// a read or write hold past this long after the server granted it (a renewal near the end
    /// asks only for the time left), so its lease runs out about `max_hold` after the
    /// acquisition and the guard is lost then. A shared read hold is bounded from its first
    /// reader's acquisition: readers that join it later share its end.
    pub max_hold: Option<Duration>,
    /// Fair mode for writers (default off): waiting writers line up in a FIFO on the server
    /// and are served in arrival order, a fair writer's release hands the write lock directly
    /// to the next queued writer, and a queued writer counts as a waiting writer (under
    /// [`Preference::Writer`], new readers stay out). See `docs/rwlock.md`.
    pub fair: bool,
    /// With `fair`: how long a queued writer's place lasts unless refreshed (default 2 s). A
    /// waiting writer refreshes it at a third of this; one that crashed is skipped once it has
    /// run out, and a grant made to it lapses after as long.
    pub waiter_lease: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            keyspace: Keyspace::default(),
            preference: Preference::Writer,
            watchdog_lease: Duration::from_secs(30),
            intent_lease: Duration::from_secs(1),
            fence_retention: Duration::from_secs(60),
            wait: tairlock::WaitStrategy::default(),
            share_reads: false,
            linger: Duration::from_millis(5),
            max_hold: None,
            fair: false,
            waiter_lease: Duration::from_secs(2),
        }
    }
}

impl Options {
    /// Use this keyspace.
    pub fn keyspace(mut self, keyspace: Keyspace) -> Self {
        self.keyspace = keyspace;
        self
    }

    /// Writer or reader preference.
    pub fn preference(mut self, preference: Preference) -> Self {
        self.preference = preference;
        self
    }

    /// The lease of read and write holds (renewed by the watchdog).
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// How long a waiting writer's intent lasts unless re-asserted.
    pub fn intent_lease(mut self, lease: Duration) -> Self {
        self.intent_lease = lease;
        self
    }

    /// Keep the last fencing token this long after a write lease ends.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// How to wait for a busy lock.
    pub fn wait(mut self, wait: tairlock::WaitStrategy) -> Self {
        self.wait = wait;
        self
    }

    /// Share one server read hold among the local readers of a lock (see the `share_reads`
    /// field).
    pub fn share_reads(mut self, share: bool) -> Self {
        self.share_reads = share;
        self
    }

    /// How long an idle shared read hold lingers (see the `linger` field).
    pub fn linger(mut self, linger: Duration) -> Self {
        self.linger = linger;
        self
    }

    /// Bound automatic renewal (see the `max_hold` field).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    /// Fair mode for writers (see the `fair` field).
    pub fn fair(mut self, fair: bool) -> Self {
        self.fair = fair;
        self
    }

    /// How long a queued fair writer's place lasts unless refreshed (see the `waiter_lease`
    /// field).
    pub fn waiter_lease(mut self, lease: Duration) -> Self {
        self.waiter_lease = lease;
        self
    }
}
