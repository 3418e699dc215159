//! The fair mode of the expire lock ([`Options::fair`](crate::Options::fair)): a FIFO of waiters
//! on the server, and direct handoff.
//!
//! - **The queue**: under the lock's hash tag, `<lock key>:fairq` (a sorted set: waiter nonce →
//!   arrival, server µs) and `<lock key>:fairw` (a hash: waiter nonce → its lease end, its lease
//!   length, its wake channel). A waiter joins when its attempt finds the lock busy and
//!   refreshes its place with every attempt; the engine makes one at least every third of the
//!   [waiter lease](crate::Options::waiter_lease). A waiter that crashed is skipped once its
//!   waiter lease has run out. Only the head of a process's local queue is in the server's
//!   queue: local waiters coalesce as in the plain mode.
//! - **Direct handoff**: a release ([`ExpireLock::expire_unlock`] in fair mode, so every guard's
//!   release) grants the lock in the same step to the first live waiter — a lease for that
//!   waiter's nonce, for its waiter lease, with a strictly larger fencing token — and announces
//!   the grant on that waiter's wake channel (`<release channel>:w:<client id>`, one per client
//!   and lock, in the lock's slot), so exactly that client wakes. A granted waiter that died
//!   delays the next by at most its waiter lease.
//! - **One-hop handoff**: the announcement carries the grant (table below), so a waiting
//!   [`lock`](ExpireLock::lock) (every call that returns a guard) holds as soon as it reads it,
//!   without another round trip, until a conservative local deadline: the grant was made after
//!   the waiter's last attempt ran (its fencing token is above the mark that attempt returned),
//!   so after that attempt was *sent*, and it lasts the announced length from when it was made,
//!   so at least that long from the send: deadline = that send + grant length − drift, the
//!   [deadline rule](crate::deadline::local_deadline) with the announcement as the server's
//!   answer, as for every lease.
//!   The guard then confirms the lease at once in the background: a renewal
//!   ([`ExpireLock::renew`]) to the full length, same fence; a definite refusal loses the
//!   guard the usual way ([`LockGuard::is_lost`](crate::LockGuard::is_lost)). A grant for
//!   another nonce, a repeated or stale announcement, or one read too late is ignored: the next
//!   attempt finds the lock held under its nonce and confirms it, as does the waiter's next
//!   refresh when the announcement was lost (at most a third of its waiter lease later).
//!
//! | message on the wake channel | meaning |
//! |---|---|
//! | `granted:<grant ms>:<lease>` | the lock was granted as `<lease>` (`tl1:<expiry ms>:<fence>:<nonce>`, the nonce the waiter's attempts sent) for `<grant ms>` ms from the release |
//! | `revoked:<lease>` | a [force unlock](ExpireLock::force_unlock) deleted that grant before its waiter confirmed it: a waiter that reads the grant only now does not take it |
//! | anything else | a wake-up: attempt again |
//! - **A grant and a force unlock**: each grant is recorded in `<lock key>:fairg` (a string:
//!   `<nonce>:<wake channel>`, for as long as the grant lasts), so that a force unlock of a
//!   grant not confirmed yet revokes it on its waiter's wake channel in the same step. Messages
//!   on one channel arrive in order: a waiter that reads the grant after the force unlock reads
//!   the revocation with it, and attempts again instead.
//! - **A waiter leaving a free lock**: when the first live waiter leaves while the lock is free
//!   (a plain release, or an expiry, freed it: no release is coming to hand it on), the next
//!   live waiter is woken on its wake channel, and takes the lock with its next attempt.
//! - **Leaving**: a waiter that times out or is cancelled leaves the queue, and releases (and
//!   hands on) a grant it may have received meanwhile.
//! - **Mixing fair and plain clients on one lock**: exclusion holds regardless — every client
//!   takes the same lock key in atomic scripts. Plain clients (and [`ExpireLock::expire_lock`],
//!   which is always the plain step) ignore the queue: they get in whenever the lock is free,
//!   which under fair handoff is only when nobody waits, or after a lease expired. A plain
//!   release grants nothing and wakes only plain waiters; fair waiters then notice within the
//!   holder's remaining time or a third of their waiter lease.
//!
//! Every script is safe to repeat: a repeated attempt finds its grant or its place; a repeated
//! release or leave finds nothing of its own.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::time::Instant;

use crate::deadline::Remaining;
use crate::engine::{Attempt, Kind, Patience};
use crate::error::Result;
use crate::expire_lock::{ExpireLock, Unlock, busy_remaining, lease_at, ttl_ms};
use crate::lease::Lease;
use crate::script::{Reply, array, unexpected};
use crate::scripts::{FAIR_LOCK, FAIR_UNLOCK};
use crate::store::Store;

impl<S: Store> ExpireLock<S> {
    /// The four keys of the fair mode: lock, fence, queue, waiters.
    pub(crate) fn fair_keys(&self, name: &str) -> Result<[String; 4]> {
        let keys = self.keys(name)?;
        let (queue, waiters) = (
            format!("{}:fairq", keys.lock),
            format!("{}:fairw", keys.lock),
        );
        Ok([keys.lock, keys.fence, queue, waiters])
    }

    /// This client's wake channel for the fair waiters of `name` (`<release channel>:w:<client
    /// id>`, one per client and lock): a release that grants the lock to one of this client's
    /// waiters announces it there. For code that drives [`fair_attempt`](Self::fair_attempt)
    /// itself: listen here (subscribed *before* the attempt) and attempt again on a message,
    /// rather than only at the end of a polling interval, as the waiting calls do.
    ///
    /// # Errors
    ///
    /// Invalid name.
    pub fn fair_wake_channel(&self, name: &str) -> Result<String> {
        Ok(format!(
            "{}:w:{}",
            self.keys(name)?.channel,
            self.local.id()
        ))
    }

    /// Fair release of `lease`: deleted, and granted to the next live waiter in the same step.
    pub(crate) async fn fair_unlock(&self, name: &str, lease: &Lease) -> Result<Unlock> {
        let reply = self.fair_unlock_by(name, lease.value(), "lease").await?;
        match reply {
            1 => Ok(Unlock::Released),
            0 => Ok(Unlock::HeldByOther),
            _ => Ok(Unlock::NotHeld),
        }
    }

    /// One attempt of the fair mode under `nonce` (the same for every attempt of one
    /// acquisition): the lock if it is free and nobody live is queued ahead, or if a release
    /// granted it to `nonce` (confirmed now: the lease becomes `ttl` long, same fencing token);
    /// else busy, and — with `queue` — this nonce joins the queue or refreshes its place for
    /// [`Options::waiter_lease`](crate::Options::waiter_lease). One round trip, safe to repeat.
    /// The waiting calls ([`lock`](Self::lock), ...) in fair mode are made of these.
    ///
    /// # Errors
    ///
    /// Invalid name or TTL, or a nonce that is not hex digits (it becomes the lease's nonce:
    /// use [`new_nonce`](crate::new_nonce)): [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput), nothing sent; a key holds data that is not ours (nothing is
    /// written); store errors.
    ///
    /// # Cancel safety
    ///
    /// If dropped after sending, the lock (or a place in the queue) may be held under `nonce`:
    /// repeat the attempt, or [`fair_leave`](Self::fair_leave) with it.
    pub async fn fair_attempt(
        &self,
        name: &str,
        ttl: Duration,
        nonce: &str,
        queue: bool,
    ) -> Result<FairAttempt> {
        Ok(self.fair_attempt_marked(name, ttl, nonce, queue).await?.0)
    }

    /// [`fair_attempt`](Self::fair_attempt), with the mark of a busy answer: every grant made
    /// after the attempt ran has a larger fencing token (0 when the server did not say).
    async fn fair_attempt_marked(
        &self,
        name: &str,
        ttl: Duration,
        nonce: &str,
        queue: bool,
    ) -> Result<(FairAttempt, u64)> {
        crate::lease::check_nonce(nonce, "a fair waiter's nonce")?;
        let keys = self.fair_keys(name)?;
        let wake = self.fair_wake_channel(name)?;
        let args = [
            ttl_ms(ttl)?.to_string(),
            nonce.to_owned(),
            self.retention_ms(),
            ttl_ms(self.options().waiter_lease)?.to_string(),
            wake,
            if queue { "1" } else { "0" }.to_owned(),
        ];
        let sent = Instant::now();
        let reply = self.eval_retrying(&FAIR_LOCK, &keys, &args).await?;
        let items = array(&reply, &FAIR_LOCK)?;
        match items.first().and_then(Reply::as_int) {
            Some(1) => Ok((
                FairAttempt::Acquired(
                    lease_at(items, 1, &FAIR_LOCK)?
                        .dated(sent, Remaining::at(items, 2, &FAIR_LOCK)?),
                ),
                0,
            )),
            Some(0) => {
                let mark = items.get(2).and_then(Reply::as_int).unwrap_or(0).max(0);
                Ok((
                    FairAttempt::Busy {
                        remaining: busy_remaining(items, 1),
                    },
                    mark as u64,
                ))
            }
            _ => Err(unexpected(&FAIR_LOCK, &reply)),
        }
    }

    /// Leave the fair queue as the waiter `nonce`; if a release granted it the lock meanwhile
    /// (or it holds the lock under that nonce), release it too, handing it on to the next live
    /// waiter. Safe to repeat.
    ///
    /// # Errors
    ///
    /// As [`fair_attempt`](Self::fair_attempt).
    ///
    /// # Cancel safety
    ///
    /// Dropping it may or may not have left; the waiter lease ends the place (and a grant) in
    /// any case.
    pub async fn fair_leave(&self, name: &str, nonce: &str) -> Result<Unlock> {
        crate::lease::check_nonce(nonce, "a fair waiter's nonce")?;
        Ok(match self.fair_unlock_by(name, nonce, "nonce").await? {
            1 => Unlock::Released,
            0 => Unlock::HeldByOther,
            _ => Unlock::NotHeld,
        })
    }

    /// [`FAIR_UNLOCK`] by lease value or by nonce (`by`); the `released` part of its reply.
    async fn fair_unlock_by(&self, name: &str, what: &str, by: &str) -> Result<i64> {
        let [lock, fence, queue, waiters] = self.fair_keys(name)?;
        let grant = self.keys(name)?.grant();
        let keys = [lock, fence, queue, waiters, grant];
        let channel = self.keys(name)?.channel;
        let args = [
            what.to_owned(),
            by.to_owned(),
            self.retention_ms(),
            channel,
            self.publish_command(),
        ];
        let reply = self.eval_retrying(&FAIR_UNLOCK, &keys, &args).await?;
        array(&reply, &FAIR_UNLOCK)?
            .first()
            .and_then(Reply::as_int)
            .ok_or_else(|| unexpected(&FAIR_UNLOCK, &reply))
    }

    /// The fair mode's steps for `name`; with `one_hop`, a grant announcement is taken as the
    /// lock at once (for a holder that confirms it: a guard).
    pub(crate) fn fair_step(
        &self,
        name: &str,
        ttl: Duration,
        patience: Patience,
        one_hop: bool,
    ) -> Result<Step<S>> {
        ttl_ms(ttl)?;
        let wake = self.fair_wake_channel(name)?;
        Ok(Step {
            locks: self.clone(),
            name: name.into(),
            wake: wake.into(),
            ttl,
            queue: patience.waits(),
            one_hop,
            mark: Arc::default(),
        })
    }
}

/// The prefix of a revocation on a wake channel: `revoked:<lease>`, a grant deleted by a force
/// unlock.
const REVOKED: &str = "revoked:";

/// A grant announced on a wake channel: `granted:<grant ms>:<lease>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Grant {
    /// How long the grant lasts from the release that made it: the server's own report of the
    /// lease's time left when it was made.
    pub(crate) length: Remaining,
    /// The lease granted (its nonce is the waiter's).
    pub(crate) lease: Lease,
}

impl Grant {
    /// Parse an announcement; `None` for anything but a well-formed grant.
    pub(crate) fn parse(message: &str) -> Option<Grant> {
        let (length, lease) = message.strip_prefix("granted:")?.split_once(':')?;
        if length.is_empty() || !length.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        Some(Grant {
            length: Remaining::from_server_ms(length.parse().ok()?)?,
            lease: Lease::parse(lease)?,
        })
    }
}

/// The outcome of one [`ExpireLock::fair_attempt`]. Contention is an outcome, not an error.
#[must_use = "an acquired lease is the only way to unlock the lock"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FairAttempt {
    /// Ours.
    Acquired(Lease),
    /// Held by another lease, or free with a live waiter ahead.
    Busy {
        /// How long the holder's lease (or the waiter ahead's place) lasts unless renewed;
        /// `None` when the lock key has no time to live (see [`Acquire::Held`](crate::Acquire)).
        remaining: Option<Duration>,
    },
}

/// The fair mode's steps for the [engine](crate::engine): [`FAIR_LOCK`] under the acquisition's
/// nonce (joining or refreshing its place when busy); undone by [`FAIR_UNLOCK`] by nonce (leave
/// the queue; release and hand on a grant).
#[derive(Clone)]
pub(crate) struct Step<S: Store> {
    locks: ExpireLock<S>,
    name: Arc<str>,
    wake: Arc<str>,
    ttl: Duration,
    /// Whether a busy attempt queues (a waiting call) or not (a single attempt).
    queue: bool,
    /// Whether a grant announcement is taken as the lock without another attempt.
    one_hop: bool,
    /// The mark of the last busy answer (see [`FAIR_LOCK`]): only a grant with a larger
    /// fencing token was made after that attempt ran. Shared by the clones of one acquisition.
    mark: Arc<AtomicU64>,
}

impl<S: Store> Kind for Step<S> {
    type Store = S;
    type Held = Lease;

    fn store(&self) -> &S {
        self.locks.store()
    }

    fn channel(&self) -> Option<&str> {
        Some(&self.wake)
    }

    fn label(&self) -> &'static str {
        "fair"
    }

    fn fence(&self, lease: &Lease) -> Option<u64> {
        Some(lease.fence())
    }

    async fn attempt(&self, nonce: &str) -> Result<Attempt<Lease>> {
        // Until this attempt answers, no grant announcement is trusted: it may be older.
        self.mark.store(u64::MAX, Ordering::SeqCst);
        let (outcome, mark) = self
            .locks
            .fair_attempt_marked(&self.name, self.ttl, nonce, self.queue)
            .await?;
        Ok(match outcome {
            FairAttempt::Acquired(lease) => Attempt::Acquired(lease),
            FairAttempt::Busy { remaining } => {
                if mark > 0 {
                    self.mark.store(mark, Ordering::SeqCst);
                }
                Attempt::Busy { remaining }
            }
        })
    }

    fn granted(&self, nonce: &str, messages: &[Arc<str>], sent: Instant) -> Option<Lease> {
        if !self.one_hop {
            return None;
        }
        // Ours, and made after our last attempt ran (so after it was sent): not a grant to
        // another acquisition sharing the wake channel, nor a stale one that may have lapsed.
        let mark = self.mark.load(Ordering::SeqCst);
        let (at, grant) = messages
            .iter()
            .enumerate()
            .filter_map(|(i, message)| Some((i, Grant::parse(message)?)))
            .rfind(|(_, grant)| grant.lease.nonce() == nonce && grant.lease.fence() > mark)?;
        // Not revoked since: a force unlock deleted the grant before we read it (the lock may
        // be someone else's by now).
        let revoked =
            |message: &Arc<str>| message.strip_prefix(REVOKED) == Some(grant.lease.value());
        if messages[at + 1..].iter().any(revoked) {
            return None;
        }
        // The grant was made after `sent` and lasted `length` from then: dated as every lease.
        let lease = grant.lease.dated(sent, grant.length);
        lease
            .deadline()
            .is_some_and(|deadline| deadline > Instant::now())
            .then(|| lease.unconfirmed())
    }

    async fn undo(self, nonce: String) {
        // Without an answer, try again (it is safe to repeat) until the waiter lease would
        // have dropped us from the queue anyway, and any grant with it.
        let give_up = Instant::now() + self.locks.options().waiter_lease.max(self.ttl);
        let mut transient = crate::engine::Transient::new();
        while let Err(e) = self.locks.fair_leave(&self.name, &nonce).await {
            if !e.is_transient() || !transient.wait(Some(give_up)).await {
                return;
            }
        }
    }

    fn busy_leaves_trace(&self) -> bool {
        // A waiting call's place in the queue.
        self.queue
    }

    fn refresh_every(&self) -> Option<Duration> {
        // Refresh the place (and notice a grant whose announcement was lost) well within the
        // waiter lease.
        self.queue.then(|| self.locks.options().waiter_lease / 3)
    }
}

impl<S: Store> ExpireLock<S> {
    /// Blocking twin of [`fair_attempt`](Self::fair_attempt).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_fair_attempt(
        &self,
        name: &str,
        ttl: Duration,
        nonce: &str,
        queue: bool,
    ) -> Result<FairAttempt> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_fair_attempt",
            self.fair_attempt(name, ttl, nonce, queue),
        )
    }

    /// Blocking twin of [`fair_leave`](Self::fair_leave).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_fair_leave(&self, name: &str, nonce: &str) -> Result<Unlock> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_fair_leave",
            self.fair_leave(name, nonce),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryStore;
    use crate::Options;

    const NONCE: &str = "00ff00ff";

    fn step() -> Step<MemoryStore> {
        let locks = ExpireLock::with_options(MemoryStore::new(), Options::default().fair(true));
        locks
            .fair_step("job", Duration::from_secs(30), Patience::Forever, true)
            .unwrap()
    }

    fn grant(fence: u64, nonce: &str) -> String {
        format!("granted:2000:tl1:1700000002000:{fence}:{nonce}")
    }

    #[test]
    fn a_grant_announcement_parses_and_nothing_else_does() {
        let g = Grant::parse(&grant(42, NONCE)).unwrap();
        assert_eq!(g.length.get(), Duration::from_millis(2000));
        assert_eq!((g.lease.fence(), g.lease.nonce()), (42, NONCE));
        for other in [
            "released",
            "granted",
            "granted:",
            "granted:2000",
            "granted:x:tl1:1:2:ab",
            "granted:-1:tl1:1:2:ab",
            "granted:2000:tl1:1:2:",
            "granted:2000:not-a-lease",
        ] {
            assert_eq!(Grant::parse(other), None, "{other}");
        }
    }

    fn messages(messages: &[&str]) -> Vec<Arc<str>> {
        messages.iter().map(|m| Arc::from(*m)).collect()
    }

    fn one(message: &str) -> Vec<Arc<str>> {
        messages(&[message])
    }

    #[tokio::test]
    async fn only_a_grant_to_this_nonce_made_after_its_last_attempt_hands_over() {
        let step = step();
        let sent = Instant::now();
        // Before any busy answer, nothing is trusted.
        step.mark.store(u64::MAX, Ordering::SeqCst);
        assert!(step.granted(NONCE, &one(&grant(50, NONCE)), sent).is_none());
        step.mark.store(42, Ordering::SeqCst);
        // Another nonce's grant; a grant no newer than the mark (it may have lapsed since).
        assert!(
            step.granted(NONCE, &one(&grant(50, "00aa")), sent)
                .is_none()
        );
        assert!(step.granted(NONCE, &one(&grant(42, NONCE)), sent).is_none());
        assert!(step.granted(NONCE, &one("released"), sent).is_none());
        let lease = step.granted(NONCE, &one(&grant(43, NONCE)), sent).unwrap();
        assert!(lease.is_unconfirmed());
        assert_eq!(
            lease.deadline(),
            Some(crate::deadline::local_deadline(
                sent,
                Remaining::from_server_ms(2000).unwrap()
            ))
        );
        // Read too late: its deadline has passed.
        let long_ago = Instant::now() - Duration::from_secs(3);
        assert!(
            step.granted(NONCE, &one(&grant(43, NONCE)), long_ago)
                .is_none()
        );
        // Among other messages.
        let mixed = messages(&[
            "released",
            &grant(50, "00aa"),
            &grant(43, NONCE),
            "released",
        ]);
        assert_eq!(step.granted(NONCE, &mixed, sent).unwrap().fence(), 43);
    }

    #[tokio::test]
    async fn a_grant_revoked_by_a_force_unlock_before_it_was_read_does_not_hand_over() {
        let step = step();
        let sent = Instant::now();
        step.mark.store(42, Ordering::SeqCst);
        let granted = grant(43, NONCE);
        let lease = granted
            .split_once(':')
            .unwrap()
            .1
            .split_once(':')
            .unwrap()
            .1;
        let revoked = format!("revoked:{lease}");
        assert!(
            step.granted(NONCE, &messages(&[&granted, &revoked]), sent)
                .is_none()
        );
        // The revocation of another grant takes nothing back.
        let other = "revoked:tl1:1700000002000:43:00aa";
        assert!(
            step.granted(NONCE, &messages(&[&granted, other]), sent)
                .is_some()
        );
    }

    #[tokio::test]
    async fn a_step_without_one_hop_takes_no_announcement() {
        let locks = ExpireLock::with_options(MemoryStore::new(), Options::default().fair(true));
        let step = locks
            .fair_step("job", Duration::from_secs(30), Patience::Forever, false)
            .unwrap();
        step.mark.store(42, Ordering::SeqCst);
        assert!(
            step.granted(NONCE, &one(&grant(43, NONCE)), Instant::now())
                .is_none()
        );
    }
}
