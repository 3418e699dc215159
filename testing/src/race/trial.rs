//! One trial: N clients on one lock key, and what the race counts about them.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use parking_lot::Mutex;

use super::sim::Timer;
use super::timeline::{Recorder, ViolationKind};

/// The counts of one trial (summed over trials into a row); see the race module docs.
#[derive(Debug, Clone, Default)]
pub struct Counts {
    pub(crate) acquisitions: u64,
    pub(crate) overlaps: u64,
    pub(crate) overlaps_past_lease: u64,
    pub(crate) foreign_deletions: u64,
    pub(crate) stale_writes_accepted: u64,
    pub(crate) writes_accepted: u64,
    pub(crate) writes_rejected: u64,
    pub(crate) stuck_locks: u64,
    pub(crate) late_deadlines: u64,
    pub(crate) stalls: u64,
    pub(crate) crashes: u64,
    pub(crate) replies_dropped: u64,
    pub(crate) handoffs: Vec<Duration>,
}

impl Counts {
    pub(crate) fn add(&mut self, other: Counts) {
        self.acquisitions += other.acquisitions;
        self.overlaps += other.overlaps;
        self.overlaps_past_lease += other.overlaps_past_lease;
        self.foreign_deletions += other.foreign_deletions;
        self.stale_writes_accepted += other.stale_writes_accepted;
        self.writes_accepted += other.writes_accepted;
        self.writes_rejected += other.writes_rejected;
        self.stuck_locks += other.stuck_locks;
        self.late_deadlines += other.late_deadlines;
        self.stalls += other.stalls;
        self.crashes += other.crashes;
        self.replies_dropped += other.replies_dropped;
        self.handoffs.extend(other.handoffs);
    }
}

/// A value a client wrote during its current acquisition attempt.
#[derive(Debug, Clone, Copy)]
struct Written {
    /// When the store applied the write (race time).
    at: Duration,
    /// When another client first deleted or overwrote it since, if one did.
    removed_by_other: Option<Duration>,
}

/// A live holder's claim: the lock value it wrote, until its lease ends.
#[derive(Debug, Clone)]
struct Held {
    value: Vec<u8>,
    /// When its lease ends (race time): its local deadline, or the end of the lease on the
    /// server when the audit read an earlier one.
    until: Duration,
    /// A shared hold (a reader): it overlaps writers only.
    shared: bool,
}

/// A grant, as the race engine hands it to the trial when the client enters.
#[derive(Debug, Clone)]
pub(crate) struct Grant<'a> {
    /// The value the client wrote or was granted (its lease, token or timestamp).
    pub(crate) value: &'a [u8],
    /// A reader's holding: shared with other readers.
    pub(crate) shared: bool,
    /// How many exclusive holders may be inside at once (a semaphore's limit).
    pub(crate) capacity: usize,
    /// The holding's local deadline (race time).
    pub(crate) deadline: Duration,
    /// Where the lease stood on the server right after the grant ([`audit`]), in race time;
    /// `None` when not audited.
    ///
    /// [`audit`]: super::audit
    pub(crate) server_end: Option<End>,
}

/// [`ServerEnd`](super::audit::ServerEnd) in race time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum End {
    /// On the server, ending no later than this.
    By(Duration),
    /// On the server, never ending.
    Never,
    /// Gone from the server when the read came back, at this time.
    Gone(Duration),
}

impl<'a> Grant<'a> {
    /// An exclusive grant of a lock (capacity 1) of `value` with `deadline`, not audited.
    #[cfg(test)]
    pub(crate) fn of(value: &'a [u8], deadline: Duration) -> Self {
        Grant {
            value,
            shared: false,
            capacity: 1,
            deadline,
            server_end: None,
        }
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
    /// applied its write) until its release finished, it crashed, or its lease ended
    /// (whichever is first).
    holders: HashMap<usize, Held>,
    /// Values each client wrote during its current acquisition attempt, not yet known to be a
    /// grant. When the attempt turns out to be a grant of one of them, its holder is registered
    /// from the write: a deletion between the grant and the acquire's return counts.
    pending: HashMap<(usize, Vec<u8>), Written>,
    /// When a holder's own command deleted its value at the store, by client: its release
    /// really released.
    released_own: HashMap<usize, Duration>,
    /// Clients whose last attempt found the lock busy, and who still want it.
    waiting: HashSet<usize>,
    /// Grants so far (each successful acquisition gets the next number).
    grants: u64,
    /// The protected resource: highest fencing token and highest grant it accepted.
    max_token: u64,
    max_grant_written: u64,
    /// How many exclusive holders may be inside at once (a semaphore's limit); 0 means 1.
    capacity: usize,
    /// When the lock last became free while someone waited for it: a real release applied at
    /// the store, or the last holder's crash. The next grant ends the handoff.
    freed_at: Option<Duration>,
}

impl State {
    /// The lock became free at `at` if nobody holds it now; a handoff starts if someone waits.
    fn free_at(&mut self, at: Duration) {
        if self.holders.len() < self.capacity.max(1) && !self.waiting.is_empty() {
            self.freed_at = Some(at);
        }
    }
}

/// Shared by the clients of one trial.
#[derive(Debug)]
pub struct Trial {
    state: Mutex<State>,
    timer: Timer,
    /// What happened, for `--timeline` (none otherwise: nothing is recorded).
    recorder: Option<Mutex<Recorder>>,
}

impl Trial {
    pub(crate) fn new(timer: Timer) -> Self {
        Trial {
            state: Mutex::default(),
            timer,
            recorder: None,
        }
    }

    /// A trial that also records what happens, for its timeline.
    pub(crate) fn recording(timer: Timer) -> Self {
        Trial {
            recorder: Some(Mutex::default()),
            ..Trial::new(timer)
        }
    }

    /// Record something at the current race time, if this trial records.
    pub(crate) fn record(&self, f: impl FnOnce(&mut Recorder, Duration)) {
        if let Some(recorder) = &self.recorder {
            f(&mut recorder.lock(), self.timer.now());
        }
    }

    pub(crate) fn count_stall(&self) {
        self.state.lock().counts.stalls += 1;
    }

    pub(crate) fn count_crash(&self) {
        self.state.lock().counts.crashes += 1;
    }

    /// The scenario dropped the reply to one of `client`'s acquire commands.
    pub(crate) fn reply_dropped(&self, client: usize) {
        self.state.lock().counts.replies_dropped += 1;
        self.record(|r, at| r.reply_dropped(client, at));
    }

    /// A client acquired: returns the grant number. Counts an overlap if another client is
    /// inside the critical section, unless both hold it shared (readers of a reader/writer
    /// lock): an overlap needs an exclusive holder on one side. The grant happened when the
    /// store applied the client's write of `value` (now, for a holding the store keeps no
    /// string of, such as a reader's entry). Not audited, with a deadline an hour away.
    #[cfg(test)]
    pub(crate) fn enter(&self, client: usize, value: &[u8], shared: bool) -> u64 {
        self.enter_grant(
            client,
            Grant {
                shared,
                ..Grant::of(value, self.timer.now() + Duration::from_secs(3600))
            },
        )
    }

    /// A client acquired `grant` and enters: returns the grant number. As
    /// [`enter`](Self::enter), for a lock that admits up to `grant.capacity` exclusive holders
    /// at once (a semaphore: an overlap is counted when that many are inside already); and the
    /// deadline audit: a grant whose deadline is later than the end of its lease on the server
    /// is a late deadline (unless the lease was gone because another client removed it: that
    /// is a foreign deletion). The holder is live until its release returns, it crashes, or
    /// its lease ends: its deadline, or the server's end of the lease if earlier.
    pub(crate) fn enter_grant(&self, client: usize, grant: Grant<'_>) -> u64 {
        let now = self.timer.now();
        let Grant {
            value,
            shared,
            capacity,
            deadline,
            server_end,
        } = grant;
        let mut s = self.state.lock();
        s.capacity = capacity;
        let written = s.pending.get(&(client, value.to_vec())).copied();
        let removed = written.and_then(|w| w.removed_by_other);
        let until = match server_end {
            Some(End::By(end)) => deadline.min(end),
            // Gone by itself (expired) before the read; gone because another client removed
            // it says nothing of its end.
            Some(End::Gone(read)) if removed.is_none() => deadline.min(read),
            _ => deadline,
        };
        // Registered at the grant: someone deleted or overwrote this value after the store
        // applied it and before the acquire returned, while its lease lasted.
        if removed.is_some_and(|at| at < until) {
            s.counts.foreign_deletions += 1;
            self.record(|r, at| r.deleted_at_grant(client, value, at));
        }
        let late = match server_end {
            Some(End::By(end)) => deadline > end,
            Some(End::Gone(read)) => removed.is_none() && deadline > read,
            Some(End::Never) | None => false,
        };
        if late {
            s.counts.late_deadlines += 1;
            self.record(|r, at| r.violation(client, at, ViolationKind::LateDeadline));
        }
        s.pending.retain(|(c, _), _| *c != client);
        s.waiting.remove(&client);
        if let Some(freed) = s.freed_at.take() {
            let granted = written.map_or(now, |w| w.at);
            s.counts.handoffs.push(granted.saturating_sub(freed));
        }
        s.counts.acquisitions += 1;
        s.grants += 1;
        let others = if shared { s.exclusive_inside } else { s.inside };
        if others >= capacity.max(1) {
            s.counts.overlaps += 1;
            self.record(|r, at| r.violation(client, at, ViolationKind::Overlap));
            // Whether it overlaps a holder that still relies on its lease: without those whose
            // lease had ended (stalled past it, or a machine too loaded to run them on time),
            // would it still? If not, it is the pause every lease lock meets, and fencing's to
            // catch (see `overlaps_past_lease`).
            let valid = s
                .holders
                .iter()
                .filter(|(c, h)| **c != client && now < h.until && !(shared && h.shared))
                .count();
            if valid < capacity.max(1) {
                s.counts.overlaps_past_lease += 1;
            }
        }
        s.inside += 1;
        if !shared {
            s.exclusive_inside += 1;
        }
        s.holders.insert(
            client,
            Held {
                value: value.to_vec(),
                until,
                shared,
            },
        );
        let grant = s.grants;
        self.record(|r, at| r.enter(client, grant, at, shared));
        grant
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

    /// A client's attempt found the lock busy: it waits for it.
    pub(crate) fn busy(&self, client: usize) {
        self.state.lock().waiting.insert(client);
    }

    /// A client's release finished. It really released when its own command deleted its value
    /// at the store (`shared`: a reader's entry, which is no string value, counts when its
    /// release finishes); the lock is free then if nobody else holds it.
    pub(crate) fn released(&self, client: usize, shared: bool) {
        let now = self.timer.now();
        let mut s = self.state.lock();
        self.record(|r, at| r.released(client, at));
        s.pending.retain(|(c, _), _| *c != client);
        let own = s.released_own.remove(&client);
        s.holders.remove(&client);
        let at = if shared { Some(now) } else { own };
        if let Some(at) = at {
            s.free_at(at);
        }
    }

    /// A client died (acquiring, holding or releasing): it no longer claims anything. If it
    /// held the lock, the lock is free for the others from now: they wait out its lease, and
    /// that wait is part of the handoff.
    pub(crate) fn crashed(&self, client: usize) {
        let now = self.timer.now();
        let mut s = self.state.lock();
        self.record(|r, at| r.crash(client, at));
        s.pending.retain(|(c, _), _| *c != client);
        s.waiting.remove(&client);
        let own = s.released_own.remove(&client);
        if s.holders.remove(&client).is_some() {
            s.free_at(own.unwrap_or(now));
        }
    }

    /// What a client's command or script did to a string value at the store: wrote `new`
    /// where `old` was (`None`: nothing, or deleted). Removing or replacing a value another
    /// live holder wrote is a foreign deletion (live: its release has not returned and its
    /// lease has not ended); a value written may turn out to be a grant.
    pub(crate) fn saw_change(&self, client: usize, old: Option<&[u8]>, new: Option<&[u8]>) {
        if old == new {
            return;
        }
        let now = self.timer.now();
        let mut s = self.state.lock();
        if let Some(old) = old {
            let foreign = s
                .holders
                .iter()
                .any(|(c, h)| *c != client && h.value == old && now < h.until);
            if foreign {
                s.counts.foreign_deletions += 1;
                self.record(|r, at| r.violation(client, at, ViolationKind::ForeignDeletion));
            }
            if s.holders.get(&client).is_some_and(|h| h.value == old) {
                s.released_own.insert(client, now);
            }
            for ((c, v), written) in s.pending.iter_mut() {
                if *c != client && v == old && written.removed_by_other.is_none() {
                    self.record(|r, at| r.deleted_early(*c, v, client, at));
                    written.removed_by_other = Some(now);
                }
            }
        }
        if let Some(new) = new {
            s.pending.entry((client, new.to_vec())).or_insert(Written {
                at: now,
                removed_by_other: None,
            });
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
            self.record(|r, at| r.stale_write(grant, at));
        }
        s.max_grant_written = s.max_grant_written.max(grant);
        s.max_token = s.max_token.max(token.unwrap_or(0));
    }

    pub(crate) fn stuck(&self) {
        self.state.lock().counts.stuck_locks += 1;
    }

    #[cfg(test)]
    pub(crate) fn into_counts(self) -> Counts {
        self.state.into_inner().counts
    }

    /// The counts, and what was recorded if this trial records.
    pub(crate) fn into_parts(self) -> (Counts, Option<Recorder>) {
        (
            self.state.into_inner().counts,
            self.recorder.map(Mutex::into_inner),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A trial on tokio's paused clock, and a way to move it.
    fn trial() -> (Trial, tokio::runtime::Runtime) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let timer = rt.block_on(async { Timer::tokio() });
        (Trial::new(timer), rt)
    }

    fn advance(rt: &tokio::runtime::Runtime, ms: u64) {
        rt.block_on(tokio::time::advance(Duration::from_millis(ms)));
    }

    fn handoffs(t: Trial) -> Vec<Duration> {
        t.into_counts().handoffs
    }

    #[test]
    fn handoff_runs_from_the_release_at_the_store_to_the_next_grant_at_the_store() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        t.enter(0, b"a", false);
        t.busy(1);
        advance(&rt, 5);
        t.saw_change(0, Some(b"a"), None); // the release, applied at the store
        t.leave(false);
        advance(&rt, 2);
        t.released(0, false); // its reply arrives later
        advance(&rt, 3);
        t.attempt(1);
        t.saw_change(1, None, Some(b"b")); // the grant, applied at the store
        advance(&rt, 4);
        t.enter(1, b"b", false); // the acquire returns later
        assert_eq!(handoffs(t), vec![Duration::from_millis(5)]);
    }

    #[test]
    fn an_overlap_with_holders_past_their_lease_only_is_told_apart() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        let now = t.timer.now();
        t.enter_grant(0, Grant::of(b"a", now + Duration::from_millis(10)));
        advance(&rt, 20);
        // Client 0 is still inside, its lease over (stalled past it): the pause of any lease
        // lock, not a failure of this one.
        t.enter(1, b"b", false);
        advance(&rt, 1);
        // Client 1 is inside and relies on its lease: a failure.
        t.enter(2, b"c", false);
        let counts = t.into_counts();
        assert_eq!(counts.overlaps, 2);
        assert_eq!(counts.overlaps_past_lease, 1);
    }

    #[test]
    fn a_release_that_released_nothing_starts_no_handoff() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        t.enter(0, b"a", false);
        t.busy(1);
        t.leave(false);
        advance(&rt, 5);
        // The lease had passed: the release found nothing of its own to delete.
        t.released(0, false);
        advance(&rt, 3);
        t.saw_change(1, None, Some(b"b"));
        t.enter(1, b"b", false);
        assert!(handoffs(t).is_empty());
    }

    #[test]
    fn nobody_waiting_means_no_handoff() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        t.enter(0, b"a", false);
        t.saw_change(0, Some(b"a"), None);
        t.leave(false);
        t.released(0, false);
        advance(&rt, 50);
        // A newcomer that never waited takes the free lock: that is no handoff.
        t.saw_change(1, None, Some(b"b"));
        t.enter(1, b"b", false);
        assert!(handoffs(t).is_empty());
    }

    #[test]
    fn the_wait_after_a_holder_crashed_is_a_handoff() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        t.enter(0, b"a", false);
        t.busy(1);
        t.leave(false);
        t.crashed(0);
        advance(&rt, 80); // the others wait out its lease
        t.saw_change(1, None, Some(b"b"));
        t.enter(1, b"b", false);
        assert_eq!(handoffs(t), vec![Duration::from_millis(80)]);
    }

    /// `client` enters with `value`, its deadline `deadline_ms` from now, and the audit's
    /// reading of the server's end of the lease.
    fn grant(t: &Trial, client: usize, value: &[u8], deadline_ms: u64, end: Option<End>) -> u64 {
        let deadline = t.timer.now() + Duration::from_millis(deadline_ms);
        t.enter_grant(
            client,
            Grant {
                server_end: end,
                ..Grant::of(value, deadline)
            },
        )
    }

    fn after(t: &Trial, ms: u64) -> Duration {
        t.timer.now() + Duration::from_millis(ms)
    }

    #[test]
    fn a_deadline_later_than_the_lease_on_the_server_is_late() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        let end = after(&t, 100);
        grant(&t, 0, b"a", 100, Some(End::By(end)));
        t.leave(false);
        t.released(0, false);
        t.saw_change(1, None, Some(b"b"));
        let end = after(&t, 100);
        grant(&t, 1, b"b", 101, Some(End::By(end)));
        t.leave(false);
        t.released(1, false);
        let counts = t.into_counts();
        assert_eq!(
            counts.late_deadlines, 1,
            "one deadline on the end, one past it"
        );
        assert_eq!(counts.acquisitions, 2);
    }

    #[test]
    fn no_deadline_is_late_for_a_lease_that_never_ends_or_was_not_audited() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        grant(&t, 0, b"a", 10_000, Some(End::Never));
        t.leave(false);
        t.released(0, false);
        grant(&t, 1, b"b", 10_000, None);
        assert_eq!(t.into_counts().late_deadlines, 0);
    }

    #[test]
    fn a_lease_gone_before_the_read_is_late_unless_another_client_removed_it() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        // Expired before the audit read it: any deadline after the read is late.
        t.saw_change(0, None, Some(b"a"));
        let read = after(&t, 0);
        grant(&t, 0, b"a", 50, Some(End::Gone(read)));
        t.leave(false);
        t.released(0, false);
        // Deleted by client 2 before the acquire returned: a foreign deletion, not a late
        // deadline.
        t.saw_change(1, None, Some(b"b"));
        t.saw_change(2, Some(b"b"), None);
        let read = after(&t, 0);
        grant(&t, 1, b"b", 50, Some(End::Gone(read)));
        let counts = t.into_counts();
        assert_eq!(counts.late_deadlines, 1);
        assert_eq!(counts.foreign_deletions, 1);
    }

    #[test]
    fn a_holder_is_live_until_its_lease_ends() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        grant(&t, 0, b"a", 100, None);
        advance(&rt, 50);
        // Overwritten while its lease lasts: foreign.
        t.saw_change(1, Some(b"a"), Some(b"b"));
        t.saw_change(1, Some(b"b"), Some(b"a"));
        advance(&rt, 51);
        // Its deadline passed, its release has not returned: no longer live.
        t.saw_change(1, Some(b"a"), Some(b"c"));
        assert_eq!(t.into_counts().foreign_deletions, 1);
    }

    #[test]
    fn a_holder_is_live_only_until_the_server_ends_its_lease_if_that_is_earlier() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        // The audit read an end 20 ms away, the deadline is 100 ms away (a late deadline).
        let end = after(&t, 20);
        grant(&t, 0, b"a", 100, Some(End::By(end)));
        advance(&rt, 30);
        t.saw_change(1, Some(b"a"), Some(b"b"));
        let counts = t.into_counts();
        assert_eq!(counts.late_deadlines, 1);
        assert_eq!(
            counts.foreign_deletions, 0,
            "taken over after the server let it go"
        );
    }

    #[test]
    fn a_grant_deleted_before_its_acquire_returned_counts_only_within_its_lease() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        advance(&rt, 30);
        t.saw_change(1, Some(b"a"), Some(b"b")); // 30 ms after the grant
        advance(&rt, 10);
        // The acquire returns 40 ms after the grant with a deadline already past.
        let end = after(&t, 0).saturating_sub(Duration::from_millis(15));
        grant(&t, 0, b"a", 0, Some(End::By(end)));
        assert_eq!(t.into_counts().foreign_deletions, 0);

        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.saw_change(0, None, Some(b"a"));
        advance(&rt, 5);
        t.saw_change(1, Some(b"a"), Some(b"b"));
        advance(&rt, 5);
        grant(&t, 0, b"a", 90, None);
        assert_eq!(t.into_counts().foreign_deletions, 1);
    }

    #[test]
    fn a_reader_joining_other_readers_is_no_handoff() {
        let (t, rt) = trial();
        let _in_runtime = rt.enter();
        t.enter(0, b"r:0", true);
        t.busy(2);
        t.enter(1, b"r:1", true);
        t.leave(true);
        t.released(0, true);
        assert!(handoffs(t).is_empty());
    }
}
