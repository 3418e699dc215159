//! One trial: N clients on one lock key, and what the race counts about them.

use std::collections::HashMap;
use std::time::Duration;

use parking_lot::Mutex;

/// The counts of one trial (summed over trials into a row); see the race module docs.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub(crate) acquisitions: u64,
    pub(crate) overlaps: u64,
    pub(crate) foreign_deletions: u64,
    pub(crate) stale_writes_accepted: u64,
    pub(crate) writes_accepted: u64,
    pub(crate) writes_rejected: u64,
    pub(crate) stuck_locks: u64,
    pub(crate) stalls: u64,
    pub(crate) crashes: u64,
    pub(crate) handoffs: Vec<Duration>,
}

impl Counts {
    pub(crate) fn add(&mut self, other: Counts) {
        self.acquisitions += other.acquisitions;
        self.overlaps += other.overlaps;
        self.foreign_deletions += other.foreign_deletions;
        self.stale_writes_accepted += other.stale_writes_accepted;
        self.writes_accepted += other.writes_accepted;
        self.writes_rejected += other.writes_rejected;
        self.stuck_locks += other.stuck_locks;
        self.stalls += other.stalls;
        self.crashes += other.crashes;
        self.handoffs.extend(other.handoffs);
    }
}

#[derive(Debug, Default)]
struct State {
    counts: Counts,
    /// Clients inside the critical section now.
    inside: usize,
    /// Of those, the ones holding exclusively (every one, unless the algorithm has readers).
    exclusive_inside: usize,
    /// The lock value each live holder wrote, by client.
    holders: HashMap<usize, Vec<u8>>,
    /// Grants so far (each successful acquisition gets the next number).
    grants: u64,
    /// The protected resource: highest fencing token and highest grant it accepted.
    max_token: u64,
    max_grant_written: u64,
    /// When the last release finished, for handoff latency.
    released_at: Option<tokio::time::Instant>,
}

/// Shared by the clients of one trial.
#[derive(Debug, Default)]
pub struct Trial {
    state: Mutex<State>,
}

impl Trial {
    pub(crate) fn count_stall(&self) {
        self.state.lock().counts.stalls += 1;
    }

    pub(crate) fn count_crash(&self) {
        self.state.lock().counts.crashes += 1;
    }

    /// A client acquired: returns the grant number. Counts an overlap if another client is
    /// inside the critical section, unless both hold it shared (readers of a reader/writer
    /// lock): an overlap needs an exclusive holder on one side.
    pub(crate) fn enter(&self, client: usize, value: &[u8], shared: bool) -> u64 {
        let mut s = self.state.lock();
        s.counts.acquisitions += 1;
        s.grants += 1;
        let others = if shared { s.exclusive_inside } else { s.inside };
        if others > 0 {
            s.counts.overlaps += 1;
        }
        s.inside += 1;
        if !shared {
            s.exclusive_inside += 1;
        }
        s.holders.insert(client, value.to_vec());
        if let Some(at) = s.released_at.take() {
            s.counts.handoffs.push(at.elapsed());
        }
        s.grants
    }

    /// A client left the critical section (finished, or crashed inside it).
    pub(crate) fn leave(&self, shared: bool) {
        let mut s = self.state.lock();
        s.inside -= 1;
        if !shared {
            s.exclusive_inside -= 1;
        }
    }

    /// A client finished releasing (or died holding): it no longer claims the lock.
    pub(crate) fn released(&self, client: usize, completed: bool) {
        let mut s = self.state.lock();
        s.holders.remove(&client);
        if completed {
            s.released_at = Some(tokio::time::Instant::now());
        }
    }

    /// A client deleted a lock value: foreign if another live holder wrote it.
    pub(crate) fn saw_deletion(&self, client: usize, value: &[u8]) {
        let mut s = self.state.lock();
        let foreign = s.holders.iter().any(|(c, v)| *c != client && v == value);
        if foreign {
            s.counts.foreign_deletions += 1;
        }
    }

    /// A holder writes to the protected resource. A fenced resource accepts only tokens at
    /// least as high as any it has accepted; an unfenced one accepts everything. A write is
    /// stale when a later grant has already written: a correct fencing scheme must reject it.
    pub(crate) fn write(&self, grant: u64, token: Option<u64>) {
        let mut s = self.state.lock();
        let accepted = match token {
            Some(t) => t >= s.max_token,
            None => true,
        };
        if !accepted {
            s.counts.writes_rejected += 1;
            return;
        }
        s.counts.writes_accepted += 1;
        if grant < s.max_grant_written {
            s.counts.stale_writes_accepted += 1;
        }
        s.max_grant_written = s.max_grant_written.max(grant);
        s.max_token = s.max_token.max(token.unwrap_or(0));
    }

    pub(crate) fn stuck(&self) {
        self.state.lock().counts.stuck_locks += 1;
    }

    pub(crate) fn into_counts(self) -> Counts {
        self.state.into_inner().counts
    }
}
