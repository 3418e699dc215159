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
    /// The lock value each live holder wrote, by client: from its grant (the moment the store
    /// applied its write) until its release finished, or it crashed.
    holders: HashMap<usize, Vec<u8>>,
    /// Values each client wrote during its current acquisition attempt, not yet known to be a
    /// grant, and whether another client has since deleted or overwritten them. When the
    /// attempt turns out to be a grant of one of them, its holder is registered from the
    /// write: a deletion between the grant and the acquire's return counts.
    pending: HashMap<(usize, Vec<u8>), bool>,
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
        // Registered at the grant: someone deleted or overwrote this value after the store
        // applied it and before the acquire returned.
        if s.pending.get(&(client, value.to_vec())) == Some(&true) {
            s.counts.foreign_deletions += 1;
        }
        s.pending.retain(|(c, _), _| *c != client);
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

    /// A client starts an acquisition attempt: what it wrote before is no grant.
    pub(crate) fn attempt(&self, client: usize) {
        self.state.lock().pending.retain(|(c, _), _| *c != client);
    }

    /// A client finished releasing (or died holding, or died acquiring): it no longer claims
    /// the lock.
    pub(crate) fn released(&self, client: usize, completed: bool) {
        let mut s = self.state.lock();
        s.pending.retain(|(c, _), _| *c != client);
        s.holders.remove(&client);
        if completed {
            s.released_at = Some(tokio::time::Instant::now());
        }
    }

    /// What a client's command or script did to a string value at the store: wrote `new`
    /// where `old` was (`None`: nothing, or deleted). Removing or replacing a value another
    /// live holder wrote is a foreign deletion; a value written may turn out to be a grant.
    pub(crate) fn saw_change(&self, client: usize, old: Option<&[u8]>, new: Option<&[u8]>) {
        if old == new {
            return;
        }
        let mut s = self.state.lock();
        if let Some(old) = old {
            let foreign = s.holders.iter().any(|(c, v)| *c != client && v == old);
            if foreign {
                s.counts.foreign_deletions += 1;
            }
            for ((c, v), removed) in s.pending.iter_mut() {
                if *c != client && v == old {
                    *removed = true;
                }
            }
        }
        if let Some(new) = new {
            s.pending.entry((client, new.to_vec())).or_insert(false);
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
