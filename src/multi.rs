//! Several expire locks held as one: [`ExpireLock::lock_many`] and its `try_` and timed
//! variants, returning one [`MultiGuard`].
//!
//! - **One slot, one script.** When every name's keys hash to one Redis Cluster slot, all the
//!   locks are taken by one atomic script ([`LOCK_MANY`]): all or none, and a busy one leaves
//!   nothing written. The attempt waits in the [`engine`] like any other kind (by
//!   polling: there is no one release channel to listen on), repeated with the same nonce after
//!   no answer, and undone by that nonce when cancelled.
//! - **Otherwise, one at a time in a fixed order.** The names are sorted and deduplicated and
//!   taken one after the other, each the way [`lock`](ExpireLock::lock) takes one. Two clients
//!   asking for `[a, b]` and `[b, a]` both take `a` first, so neither holds what the other waits
//!   for: no deadlock. Whatever was taken is released (by its lease, a compare-and-delete that
//!   is safe to repeat) when a later name fails, is busy past the patience, or the call is
//!   cancelled; an attempt whose reply never came is undone by its nonce, as the engine does
//!   for every kind. While the call waits for a later name, the watchdog already renews the
//!   earlier ones; if one of them is lost meanwhile, everything is released and the call
//!   starts over.
//! - **One guard.** The guard's watchdog renews every lease at a third of its length (one
//!   renewal nonce for all of them, so a repeat after no answer finds what was applied) and
//!   reports the loss of any one as the loss of the guard.
//!
//! In fair mode ([`Options::fair`](crate::Options::fair)) the names are always taken one at a
//! time, each through its own queue.
//!
//! A client killed mid-acquire leaves the keys it took until their lease runs out (the
//! watchdog died with it).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::deadline::Remaining;
use crate::engine::{self, Attempt, Kind, Patience};
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::{ExpireLock, Renew, Unlock, busy_remaining, lease_at};
use crate::guard::{Liveness, Renewal, RenewalAttempt};
use crate::keys::key_slot;
use crate::lease::Lease;
use crate::script::Reply;
use crate::script::{array, unexpected};
use crate::scripts::LOCK_MANY;
use crate::store::Store;

/// What several locks held together share: the names (sorted, deduplicated), the lease of each
/// name taken so far (in the same order), and one [`Liveness`].
struct Held<S: Store> {
    locks: ExpireLock<S>,
    names: Vec<String>,
    ttl: Duration,
    leases: Mutex<Vec<Lease>>,
    /// The lease of the next name while [`push`](Self::push) waits to add it: a rollback that
    /// runs meanwhile (the acquisition was cancelled there) releases it too.
    staged: Mutex<Option<Lease>>,
    live: Liveness,
}

impl<S: Store> Held<S> {
    fn new(locks: ExpireLock<S>, names: Vec<String>, ttl: Duration) -> Self {
        Held {
            locks,
            names,
            ttl,
            leases: Mutex::new(Vec::new()),
            staged: Mutex::new(None),
            live: Liveness::new(None),
        }
    }

    fn leases(&self) -> Vec<Lease> {
        self.leases.lock().clone()
    }

    /// Add the lease of the next name; start the watchdog with the first. The lease is staged
    /// before anything is awaited, so an acquisition cancelled while this waits for a renewal
    /// in flight still has it released by its rollback.
    async fn push(self: &Arc<Self>, lease: Lease) {
        *self.staged.lock() = Some(lease);
        let _in_flight = self.live.renewing().await;
        let first = {
            let mut leases = self.leases.lock();
            leases.extend(self.staged.lock().take());
            self.live.set_deadline(earliest_deadline(&leases));
            leases.len() == 1
        };
        if first {
            self.start_watchdog();
        }
    }

    /// Take all the leases at once (the one-script path) and start the watchdog.
    fn set_all(self: &Arc<Self>, leases: Vec<Lease>) {
        self.live.set_deadline(earliest_deadline(&leases));
        *self.leases.lock() = leases;
        self.start_watchdog();
    }

    fn start_watchdog(self: &Arc<Self>) {
        if let Some(max_hold) = self.locks.options().max_hold {
            self.live.renew_until(Instant::now() + max_hold);
        }
        let handle = crate::blocking::spawn_handle(self.locks.store().runtime())
            .spawn(watchdog(self.clone()))
            .abort_handle();
        self.live.set_watchdog(handle);
    }

    /// One renewal of every lease to `ttl`, all under one nonce (the pending one if a reply was
    /// lost). Call with the renewal lock held. Returns the length asked for and what it found.
    async fn renew(&self, ttl: Duration) -> (Duration, Renewal, Option<Error>) {
        let attempt = self.live.renewal_attempt(ttl);
        let current = self.leases();
        let outcomes = join_all(
            current
                .iter()
                .zip(&self.names)
                .map(|(lease, name)| self.locks.renew_attempt(name, lease, &attempt)),
        )
        .await;
        let mut lost = false;
        let mut unanswered = None;
        let mut refused = None;
        {
            let mut leases = self.leases.lock();
            for (i, outcome) in outcomes.into_iter().enumerate() {
                match outcome {
                    Ok(Renew::Renewed(lease)) => leases[i] = lease,
                    Ok(Renew::NotHeld | Renew::HeldByOther) => lost = true,
                    Err(e) if e.is_unanswered() => unanswered = Some(e),
                    Err(e) => refused = Some(e),
                }
            }
        }
        // One renewal for all: it stays pending (repeated with its nonce) while any lock's
        // outcome is unknown, also when another lock is lost: the unanswered one may hold the
        // renewed lease now, and the release must learn it to delete it.
        let settled: Result<()> = match unanswered {
            Some(e) => Err(e),
            None => Ok(()),
        };
        self.live.renewal_outcome(&settled);
        if lost {
            return (attempt.ttl, Renewal::Lost, None);
        }
        if let Some(e) = settled.err().or(refused) {
            return (attempt.ttl, Renewal::Retry, Some(e));
        }
        let deadline = earliest_deadline(&self.leases());
        (attempt.ttl, self.live.renewed(deadline), None)
    }

    /// Stop the watchdog, settle a renewal whose reply was lost, then release every lease (and
    /// one [staged](Self::push) by a cancelled acquisition). A lock whose renewal is still
    /// unknown is released by whichever of its two leases it holds.
    async fn release(&self) -> Result<Vec<Unlock>> {
        self.live.stop_watchdog().await;
        let pending = self.live.pending_renewal();
        if let Some(attempt) = &pending {
            let _in_flight = self.live.renewing().await;
            let _ = self.renew(attempt.ttl).await;
        }
        let mut leases = self.leases();
        leases.extend(self.staged.lock().take());
        let outcomes = join_all(
            leases
                .iter()
                .zip(&self.names)
                .map(|(lease, name)| release_either(&self.locks, name, lease, pending.as_ref())),
        )
        .await;
        self.live.mark_lost();
        outcomes.into_iter().collect()
    }
}

/// The earliest local deadline of `leases`.
fn earliest_deadline(leases: &[Lease]) -> Option<Instant> {
    leases.iter().filter_map(Lease::deadline).min()
}

/// Release `lease` of `name`, repeating it (it is a compare-and-delete: safe) while the store
/// does not answer, until the lease would have run out anyway.
async fn release_one<S: Store>(locks: &ExpireLock<S>, name: &str, lease: &Lease) -> Result<Unlock> {
    let give_up = lease.deadline().unwrap_or_else(Instant::now);
    let mut transient = engine::Transient::new();
    loop {
        match locks.expire_unlock(name, lease).await {
            Err(e) if e.is_transient() && transient.wait(Some(give_up)).await => {}
            other => return other,
        }
    }
}

/// Release `lease` of `name`, or, when the lock holds another lease and a renewal (`pending`)
/// may have rotated ours without its reply coming, the lease that renewal made: a repeat of it
/// (same nonce) returns that lease if it is in place, and changes nothing otherwise.
async fn release_either<S: Store>(
    locks: &ExpireLock<S>,
    name: &str,
    lease: &Lease,
    pending: Option<&RenewalAttempt>,
) -> Result<Unlock> {
    let outcome = release_one(locks, name, lease).await;
    let (Ok(Unlock::HeldByOther), Some(attempt)) = (&outcome, pending) else {
        return outcome;
    };
    match locks.renew_attempt(name, lease, attempt).await {
        Ok(Renew::Renewed(renewed)) => release_one(locks, name, &renewed).await,
        _ => outcome,
    }
}

async fn watchdog<S: Store>(held: Arc<Held<S>>) {
    let held = &held;
    held.live
        .watchdog(held.ttl / 3, || async move {
            match held.live.capped_ttl(held.ttl) {
                Some(ttl) => held.renew(ttl).await.1,
                None => Renewal::Stop,
            }
        })
        .await;
}

/// Releases whatever a cancelled (or failed) acquisition took, as a task of its own on the
/// store's runtime: dropping the acquisition never abandons it, and its retries never hold the
/// caller up past one round trip.
struct Rollback<S: Store> {
    held: Option<Arc<Held<S>>>,
}

impl<S: Store> Rollback<S> {
    /// Roll back now: start the release and wait for it at most one round trip.
    async fn now(mut self) {
        if let Some(release) = self.spawn() {
            engine::settle_cleanup(release, engine::CLEANUP_WAIT).await;
        }
    }

    fn spawn(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        let held = self.held.take()?;
        let runtime = held.locks.store().runtime();
        Some(engine::spawn_cleanup(runtime, async move {
            let _ = held.release().await;
        }))
    }
}

impl<S: Store> Drop for Rollback<S> {
    fn drop(&mut self) {
        self.spawn();
    }
}

/// The one-script path's steps for the [`engine`]: one [`LOCK_MANY`] under the
/// acquisition's nonce; undone by repeating it (which returns our leases if the lost attempt
/// took them) and releasing what it returns.
#[derive(Clone)]
struct ManyStep<S: Store> {
    locks: ExpireLock<S>,
    names: Arc<[String]>,
    keys: Arc<[String]>,
    ttl: Duration,
}

impl<S: Store> ManyStep<S> {
    async fn send(&self, nonce: &str) -> Result<Attempt<Vec<Lease>>> {
        let args = [
            crate::expire_lock::ttl_ms(self.ttl)?.to_string(),
            nonce.to_owned(),
            self.locks.retention_ms(),
        ];
        let sent = Instant::now();
        let reply = self
            .locks
            .eval_retrying(&LOCK_MANY, &self.keys, &args)
            .await?;
        decode_many(&reply, sent, self.names.len())
    }
}

/// Decode a [`LOCK_MANY`] reply for `n` locks, sent at `sent`: each lease is dated from `sent`
/// and the time it has left as the reply reports it (a repeat finds leases with less).
fn decode_many(reply: &Reply, sent: Instant, n: usize) -> Result<Attempt<Vec<Lease>>> {
    let items = array(reply, &LOCK_MANY)?;
    match items.first().and_then(Reply::as_int) {
        Some(1) if items.len() == 2 * n + 1 => (0..n)
            .map(|i| {
                Ok(lease_at(items, 2 * i + 1, &LOCK_MANY)?
                    .dated(sent, Remaining::at(items, 2 * i + 2, &LOCK_MANY)?))
            })
            .collect::<Result<Vec<_>>>()
            .map(Attempt::Acquired),
        Some(0) => Ok(Attempt::Busy {
            remaining: busy_remaining(items, 3),
        }),
        _ => Err(unexpected(&LOCK_MANY, reply)),
    }
}

impl<S: Store> Kind for ManyStep<S> {
    type Store = S;
    type Held = Vec<Lease>;

    fn store(&self) -> &S {
        self.locks.store()
    }

    fn channel(&self) -> Option<&str> {
        None
    }

    async fn attempt(&self, nonce: &str) -> Result<Attempt<Vec<Lease>>> {
        self.send(nonce).await
    }

    async fn undo(self, nonce: String) {
        let give_up = Instant::now() + self.ttl;
        let mut transient = engine::Transient::new();
        let leases = loop {
            match self.send(&nonce).await {
                Ok(Attempt::Acquired(leases)) => break leases,
                Err(e) if e.is_transient() && transient.wait(Some(give_up)).await => {}
                _ => return,
            }
        };
        join_all(
            leases
                .iter()
                .zip(self.names.iter())
                .map(|(lease, name)| release_one(&self.locks, name, lease)),
        )
        .await;
    }
}

impl<S: Store> ExpireLock<S> {
    /// The names sorted and deduplicated, each checked; an empty list is refused.
    fn many_names(&self, names: &[&str]) -> Result<Vec<String>> {
        if names.is_empty() {
            return Err(Error::invalid("lock_many needs at least one lock name"));
        }
        for name in names {
            self.keys(name)?;
        }
        let mut sorted: Vec<String> = names.iter().map(|n| (*n).to_owned()).collect();
        sorted.sort();
        sorted.dedup();
        Ok(sorted)
    }

    async fn acquire_many(
        &self,
        names: &[&str],
        patience: Patience,
    ) -> Result<Option<MultiGuard<S>>> {
        let names = self.many_names(names)?;
        let ttl = self.options().watchdog_lease;
        crate::expire_lock::ttl_ms(ttl)?;
        let mut keys = Vec::with_capacity(names.len() * 2);
        for name in &names {
            keys.extend(self.keys(name)?.both());
        }
        let one_slot = keys.windows(2).all(|w| key_slot(&w[0]) == key_slot(&w[1]));
        let held = if one_slot && !self.options().fair {
            self.acquire_one_script(names, keys, ttl, patience).await?
        } else {
            self.acquire_in_order(names, ttl, patience).await?
        };
        Ok(held.map(|held| MultiGuard { held, armed: true }))
    }

    async fn acquire_one_script(
        &self,
        names: Vec<String>,
        keys: Vec<String>,
        ttl: Duration,
        patience: Patience,
    ) -> Result<Option<Arc<Held<S>>>> {
        // The local queue of this set of names: braces never occur in a name.
        let queue: String = names.iter().map(|n| format!("{{{n}}}")).collect();
        let step = ManyStep {
            locks: self.clone(),
            names: names.clone().into(),
            keys: keys.into(),
            ttl,
        };
        let wait = self.options().wait;
        let Some(leases) = engine::acquire(&self.local, &queue, wait, patience, step).await? else {
            return Ok(None);
        };
        let held = Arc::new(Held::new(self.clone(), names, ttl));
        held.set_all(leases);
        Ok(Some(held))
    }

    async fn acquire_in_order(
        &self,
        names: Vec<String>,
        ttl: Duration,
        patience: Patience,
    ) -> Result<Option<Arc<Held<S>>>> {
        'again: loop {
            let held = Arc::new(Held::new(self.clone(), names.clone(), ttl));
            let rollback = Rollback {
                held: Some(held.clone()),
            };
            for (i, name) in names.iter().enumerate() {
                let taken = tokio::select! {
                    taken = self.acquire_lease(name, ttl, patience, false) => taken,
                    // A lease taken earlier was lost while this one was awaited.
                    () = held.live.lost(), if i > 0 => {
                        rollback.now().await;
                        if patience.waits() && patience.deadline().is_none_or(|d| Instant::now() < d) {
                            continue 'again;
                        }
                        return Ok(None);
                    }
                };
                match taken {
                    Ok(Some(lease)) => held.push(lease).await,
                    Ok(None) => {
                        rollback.now().await;
                        return Ok(None);
                    }
                    Err(e) => {
                        rollback.now().await;
                        return Err(e);
                    }
                }
            }
            // All taken: the guard owns them now.
            let mut rollback = rollback;
            rollback.held = None;
            return Ok(Some(held));
        }
    }

    /// Wait for every lock in `names` and hold them all, renewed by one watchdog until the
    /// guard is released or dropped. The names are sorted and deduplicated; see the
    /// [module docs](crate::multi) for how they are taken.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty list or an invalid name, before anything is sent;
    /// a key holding data that is not ours ([`ErrorKind::WrongType`], nothing of it changed);
    /// store errors as [`lock`](Self::lock). Whatever was taken before the error is released.
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the locks taken so far, and whatever an attempt in flight may have taken,
    /// are released in the background; their leases bound them in any case.
    ///
    /// # Examples
    ///
    /// ```
    /// use tairlock::{ExpireLock, MemoryStore};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let locks = ExpireLock::new(MemoryStore::new());
    /// let both = locks.lock_many(&["accounts:1", "accounts:2"]).await?;
    /// assert!(locks.try_lock_many(&["accounts:2", "accounts:3"]).await?.is_none());
    /// assert!(!locks.is_locked("accounts:3").await?, "the busy attempt left nothing");
    /// both.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn lock_many(&self, names: &[&str]) -> Result<MultiGuard<S>> {
        Ok(self
            .acquire_many(names, Patience::Forever)
            .await?
            .expect("waiting forever ends only with the locks"))
    }

    /// One attempt at every lock in `names`: all of them, or `None` (and nothing held) if one
    /// is busy.
    ///
    /// # Errors
    ///
    /// As [`lock_many`](Self::lock_many), except that transient errors are returned at once.
    ///
    /// # Cancel safety
    ///
    /// As [`lock_many`](Self::lock_many).
    pub async fn try_lock_many(&self, names: &[&str]) -> Result<Option<MultiGuard<S>>> {
        self.acquire_many(names, Patience::Once).await
    }

    /// Wait up to `timeout` for every lock in `names`; `None` (and nothing held) if they did not
    /// all come free in time.
    ///
    /// # Errors
    ///
    /// As [`lock_many`](Self::lock_many).
    ///
    /// # Cancel safety
    ///
    /// As [`lock_many`](Self::lock_many).
    pub async fn try_lock_many_for(
        &self,
        names: &[&str],
        timeout: Duration,
    ) -> Result<Option<MultiGuard<S>>> {
        self.acquire_many(names, Patience::within(timeout)).await
    }

    /// Blocking twin of [`lock_many`](Self::lock_many).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_lock_many(&self, names: &[&str]) -> Result<MultiGuard<S>> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_lock_many",
            self.lock_many(names),
        )
    }

    /// Blocking twin of [`try_lock_many`](Self::try_lock_many).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock_many(&self, names: &[&str]) -> Result<Option<MultiGuard<S>>> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_try_lock_many",
            self.try_lock_many(names),
        )
    }

    /// Blocking twin of [`try_lock_many_for`](Self::try_lock_many_for).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_lock_many_for(
        &self,
        names: &[&str],
        timeout: Duration,
    ) -> Result<Option<MultiGuard<S>>> {
        crate::blocking::block_on(
            self.store().runtime(),
            "blocking_try_lock_many_for",
            self.try_lock_many_for(names, timeout),
        )
    }
}

/// Several held expire locks, renewed and released together. See the [module docs](self).
///
/// Release it with [`release`](Self::release) to learn the outcome. Dropping it releases in the
/// background; if that cannot be done, the leases' TTL frees the locks.
///
/// # Examples
///
/// ```
/// use tairlock::{ExpireLock, MemoryStore, Unlock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = ExpireLock::new(MemoryStore::new());
/// // The same names in any order take the same locks in the same (sorted) order.
/// let transfer = locks.lock_many(&["accounts:9", "accounts:1"]).await?;
/// assert_eq!(transfer.names(), ["accounts:1", "accounts:9"]);
/// assert_eq!(transfer.fences().len(), 2);
/// assert_eq!(transfer.release().await?, [Unlock::Released, Unlock::Released]);
/// # Ok(())
/// # }
/// ```
#[must_use = "the locks are released as soon as the guard is dropped"]
#[clippy::has_significant_drop]
pub struct MultiGuard<S: Store> {
    held: Arc<Held<S>>,
    armed: bool,
}

impl<S: Store> fmt::Debug for MultiGuard<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MultiGuard")
            .field("names", &self.held.names)
            .field("leases", &self.held.leases())
            .field("lost", &self.is_lost())
            .finish()
    }
}

impl<S: Store> MultiGuard<S> {
    /// The names held, sorted and deduplicated: the order of [`leases`](Self::leases).
    pub fn names(&self) -> &[String] {
        &self.held.names
    }

    /// The current lease of each name (they rotate with every renewal).
    pub fn leases(&self) -> Vec<Lease> {
        self.held.leases()
    }

    /// The fencing token of each name, in the order of [`names`](Self::names).
    pub fn fences(&self) -> Vec<u64> {
        self.held.leases().iter().map(Lease::fence).collect()
    }

    /// Whether any of the leases is lost: a renewal found one gone, or the earliest local
    /// deadline has passed. Once true, stays true.
    pub fn is_lost(&self) -> bool {
        self.held.live.is_lost()
    }

    /// Resolves when any of the leases is lost (see [`is_lost`](Self::is_lost)).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: dropping it changes nothing.
    pub async fn lost(&self) {
        self.held.live.lost().await;
    }

    /// Renew every lease now, to `ttl` from now (the watchdog keeps its own interval).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::LeaseLost`] when any lease is gone (the guard is lost then); store errors.
    /// When a reply did not come the renewal may have been applied: the next `renew` (or
    /// watchdog renewal) repeats it with the same nonce.
    ///
    /// # Cancel safety
    ///
    /// As [`LockGuard::renew`](crate::LockGuard::renew).
    pub async fn renew(&self, ttl: Duration) -> Result<()> {
        crate::expire_lock::ttl_ms(ttl)?;
        let _in_flight = self.held.live.renewing().await;
        loop {
            let (asked, renewal, error) = self.held.renew(ttl).await;
            if renewal == Renewal::Lost {
                self.held.live.mark_lost();
                return Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!("a lease of {:?} is gone", self.held.names),
                ));
            }
            if let Some(e) = error {
                return Err(e);
            }
            if asked == ttl {
                return Ok(());
            }
            // That settled an earlier renewal of another length: now this one.
        }
    }

    /// Release every lock and report what happened to each, in the order of
    /// [`names`](Self::names): [`Unlock::Released`], or [`Unlock::NotHeld`]/[`Unlock::HeldByOther`]
    /// for a lease that had been lost.
    ///
    /// # Errors
    ///
    /// Store errors (the first one); the TTL frees those locks then.
    ///
    /// # Cancel safety
    ///
    /// If dropped midway some locks may stay held until their TTL.
    pub async fn release(mut self) -> Result<Vec<Unlock>> {
        self.armed = false;
        self.held.release().await
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(&self, ttl: Duration) -> Result<()> {
        crate::blocking::block_on(
            self.held.locks.store().runtime(),
            "blocking_renew",
            self.renew(ttl),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(mut self) -> Result<Vec<Unlock>> {
        self.armed = false;
        let held = self.held.clone();
        crate::blocking::block_on(
            held.locks.store().runtime(),
            "blocking_release",
            async move { held.release().await },
        )
    }
}

impl<S: Store> Drop for MultiGuard<S> {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let held = self.held.clone();
        crate::blocking::spawn_handle(self.held.locks.store().runtime()).spawn(async move {
            let _ = held.release().await;
        });
    }
}
