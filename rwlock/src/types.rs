//! The values the scripted lock's single steps take and return: keys, leases, attempts,
//! snapshots, and what a release did.

use std::fmt;
use std::time::Duration;

use tairlock::{Lease, Ttl};
use tokio::time::Instant;

/// The keys of one reader/writer lock; all share the hash tag `{name}`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwKeys {
    /// The write lease: `<prefix>{name}:w`.
    pub writer: String,
    /// The readers (a sorted set, nonce → lease expiry): `<prefix>{name}:r`.
    pub readers: String,
    /// A waiting writer's intent: `<prefix>{name}:wi`.
    pub intent: String,
    /// The last fencing token issued: `<prefix>{name}:fence`.
    pub fence: String,
    /// The pub/sub channel releases are announced on: `<prefix>{name}:released`.
    pub channel: String,
    /// The pub/sub channel a waiting writer announces its intent on, when it raises it against
    /// live readers: `<prefix>{name}:intent`. Only shared read holds listen there; waiting
    /// readers and writers listen for releases only, so an intent does not wake them.
    pub intent_channel: String,
    /// The fair writers' queue (a sorted set, nonce → arrival in server µs):
    /// `<prefix>{name}:wq`.
    pub queue: String,
    /// The fair writers' places (a hash, nonce → `<lease end ms>:<lease ms>:<wake channel>`):
    /// `<prefix>{name}:ww`.
    pub waiters: String,
}

/// What kept an acquisition out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blocker {
    /// A writer holds the lock.
    Writer,
    /// A writer is waiting (writer preference): readers, and other writers, stay out.
    Intent,
    /// Live readers hold the lock (writers only).
    Readers(usize),
}

/// A reader's lease: its nonce is its identity and credential on the readers set.
#[derive(Clone, PartialEq, Eq)]
pub struct ReadLease {
    pub(crate) nonce: String,
    pub(crate) expires_at: Duration,
    pub(crate) deadline: Instant,
}

impl ReadLease {
    /// The reader's nonce (its member in the readers set).
    pub fn nonce(&self) -> &str {
        &self.nonce
    }

    /// When the server drops this reader unless renewed, as server time since the epoch.
    pub fn expires_at(&self) -> Duration {
        self.expires_at
    }

    /// The local instant by which this client must stop relying on the lease: when the request
    /// whose answer granted or renewed it was first sent, plus the time the server reported the
    /// lease had left, less 1% and 2 ms ([`tairlock::deadline::local_deadline`]).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl fmt::Debug for ReadLease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReadLease")
            .field("nonce", &short(&self.nonce))
            .field("expires_at_ms", &self.expires_at.as_millis())
            .finish()
    }
}

/// A writer's lease (the core's [`Lease`] format, with a fencing token) and its local deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteLease {
    pub(crate) lease: Lease,
    pub(crate) deadline: Instant,
}

impl WriteLease {
    /// The lease stored in the writer key.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// The fencing token.
    pub fn fence(&self) -> u64 {
        self.lease.fence()
    }

    /// The local instant by which this client must stop relying on the lease, by the same rule
    /// as [`ReadLease::deadline`] (the time left is the writer key's `PTTL`).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// The outcome of one [`RwLock::read_acquire`](crate::RwLock::read_acquire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadAttempt {
    /// Admitted.
    Acquired {
        /// The reader's lease.
        lease: ReadLease,
        /// Live readers now, this one included.
        readers: usize,
    },
    /// Kept out.
    Blocked {
        /// By whom.
        by: Blocker,
        /// How long until the blocker's lease (or intent) ends unless renewed, when known.
        remaining: Option<Duration>,
    },
}

/// The outcome of one [`RwLock::write_acquire`](crate::RwLock::write_acquire).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WriteAttempt {
    /// Taken.
    Acquired(WriteLease),
    /// Kept out.
    Blocked {
        /// By whom.
        by: Blocker,
        /// How long until the blocker's lease (or intent; for readers, the longest reader
        /// lease) ends unless renewed, when known.
        remaining: Option<Duration>,
    },
}

/// One live reader, from [`RwLock::inspect`](crate::RwLock::inspect).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ReaderInfo {
    /// The reader's nonce.
    pub nonce: String,
    /// Its lease expiry, server time since the epoch.
    pub expires_at: Duration,
    /// Its remaining lease (at the snapshot's server time).
    pub remaining: Duration,
}

impl fmt::Debug for ReaderInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReaderInfo")
            .field("nonce", &short(&self.nonce))
            .field("remaining", &self.remaining)
            .finish()
    }
}

/// A waiting writer's intent, from [`RwLock::inspect`](crate::RwLock::inspect).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct IntentInfo {
    /// The waiting writer's acquisition nonce.
    pub nonce: String,
    /// How long the intent lasts unless re-asserted.
    pub remaining: Duration,
}

impl fmt::Debug for IntentInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntentInfo")
            .field("nonce", &short(&self.nonce))
            .field("remaining", &self.remaining)
            .finish()
    }
}

/// One atomic snapshot of a reader/writer lock, from [`RwLock::inspect`](crate::RwLock::inspect).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwInspection {
    /// The lock's keys.
    pub keys: RwKeys,
    /// The server's time at the snapshot, since the epoch.
    pub server_time: Duration,
    /// The writer's lease, when a writer holds the lock.
    pub writer: Option<Lease>,
    /// The writer key's time to live.
    pub writer_ttl: Ttl,
    /// The live readers, earliest expiry first.
    pub readers: Vec<ReaderInfo>,
    /// A waiting writer's intent, if one is up.
    pub intent: Option<IntentInfo>,
    /// The last fencing token issued, while retained.
    pub last_fence: Option<u64>,
    /// Keys that hold data that is not this lock's, as `(key, Redis type)`.
    pub foreign: Vec<(String, String)>,
    /// The fair writers' queue ([`Options::fair`](crate::Options::fair)), in arrival order,
    /// including places that ran out and are not dropped yet.
    pub queue: Vec<QueuedWriter>,
}

/// A writer in the fair queue, from [`RwLock::inspect`](crate::RwLock::inspect).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct QueuedWriter {
    /// The waiting writer's acquisition nonce.
    pub nonce: String,
    /// How long its place lasts unless refreshed (zero: ran out; the writer is skipped).
    pub remaining: Duration,
}

impl fmt::Debug for QueuedWriter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueuedWriter")
            .field("nonce", &short(&self.nonce))
            .field("remaining", &self.remaining)
            .finish()
    }
}

impl RwInspection {
    /// Whether any of the lock's keys exists (a writer, a live reader, an intent).
    pub fn is_active(&self) -> bool {
        self.writer.is_some()
            || !self.readers.is_empty()
            || self.intent.is_some()
            || !self.queue.is_empty()
    }
}

/// The live readers and the writer's state, from [`RwLock::state`](crate::RwLock::state).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RwState {
    /// Live readers.
    pub readers: usize,
    /// The writer key's time to live ([`Ttl::Missing`] when no writer holds the lock).
    pub writer: Ttl,
    /// The intent key's time to live ([`Ttl::Missing`] when no writer waits).
    pub intent: Ttl,
}

/// The first characters of a nonce, for logs and `Debug` (the nonce is a credential).
pub(crate) fn short(nonce: &str) -> String {
    format!("{}…", &nonce[..nonce.len().min(8)])
}

/// What [`ReadGuard::release`](crate::ReadGuard::release) and
/// [`WriteGuard::release`](crate::WriteGuard::release) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Release {
    /// This was the owner's last guard on the hold: the lease was given back to the server.
    Released,
    /// Outer guards of the same owner still hold the lock; nothing was sent.
    StillHeld,
    /// The lease was already gone (it expired, or was taken over); nothing of ours was left to
    /// give back.
    Lost,
}
