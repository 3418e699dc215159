//! The one acquire engine: every lock kind waits here.
//!
//! A lock kind supplies only its *attempt* step ([`Kind::attempt`]: acquired, or busy with the
//! holder's remaining time when the server said) and the *undo* of whatever an attempt may have
//! left behind ([`Kind::undo`]). Everything about waiting is defined once, here:
//!
//! - **The local FIFO** ([`Waiters`]): the waiters of one client for one lock name line up, and
//!   only the head talks to the server, so N local waiters cost O(1) commands per handoff and
//!   none starves.
//! - **Patience** ([`Patience`]): one attempt, until a deadline, or forever. Not getting the lock
//!   in time is `Ok(None)` for every kind; errors are for what went wrong.
//! - **The wait between attempts**: by release notification on the kind's channel, subscribed
//!   only once the first attempt found the lock busy (an uncontended acquire never subscribes),
//!   or by jittered, capped exponential back-off ([`WaitStrategy`]); never past the holder's
//!   remaining time, nor past the kind's refresh interval.
//! - **Transient errors** ([`Error::is_transient`](crate::Error::is_transient): no answer, a failover): a waiting call rides
//!   them with back-off ([`Transient`]); the attempt is repeated with the *same nonce*, so a
//!   repeat finds what the unanswered one took. A single attempt returns them at once.
//! - **Cancel cleanup**: armed from the moment an attempt is sent until its outcome is known (and
//!   while a refused attempt leaves something behind, such as a writer's intent). The undo is
//!   always a task of its own on the store's runtime, never part of the caller's future: dropped
//!   while armed, or returning an error, the engine spawns it and returns; giving up in time, it
//!   spawns it and waits for it at most [one round trip](CLEANUP_WAIT), so a waiting call
//!   returns within its patience plus that, and dropping the call never abandons the undo.
//! - **The deadline rule** is not here: every lock kind dates its leases with
//!   [`deadline::local_deadline`](crate::deadline::local_deadline), from the remaining time the
//!   server's answer reports.

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use rand::Rng;
use tokio::time::Instant;

use crate::error::Result;
use crate::notify::{Notifier, Watch};
use crate::observe::{AcquireOutcome, Acquisition, in_span};
use crate::store::Store;

/// How [`ExpireLock::lock`](crate::ExpireLock::lock) and friends wait for a busy lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
#[derive(Default)]
pub enum WaitStrategy {
    /// Sleep until a release is announced or the holder's lease runs out.
    #[default]
    Notify,
    /// Poll with jittered exponential back-off from `min` to `max`, never past the holder's
    /// remaining time.
    Poll {
        /// First back-off.
        min: Duration,
        /// Back-off cap.
        max: Duration,
    },
}

/// How long to wait for a lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Patience {
    /// One attempt; busy means `None`. Transient errors are returned at once.
    Once,
    /// Until this instant, then `None`.
    Until(Instant),
    /// Until acquired.
    Forever,
}

impl Patience {
    /// Until `timeout` from now.
    pub fn within(timeout: Duration) -> Self {
        Patience::Until(Instant::now() + timeout)
    }

    /// `None`: forever; a zero timeout: once; otherwise until `timeout` from now.
    pub fn from_timeout(timeout: Option<Duration>) -> Self {
        match timeout {
            None => Patience::Forever,
            Some(t) if t.is_zero() => Patience::Once,
            Some(t) => Patience::within(t),
        }
    }

    /// The instant this patience ends, if it does.
    pub fn deadline(self) -> Option<Instant> {
        match self {
            Patience::Until(deadline) => Some(deadline),
            _ => None,
        }
    }

    /// Whether more than one attempt is allowed.
    pub fn waits(self) -> bool {
        self != Patience::Once
    }
}

/// The outcome of one attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Attempt<T> {
    /// Ours.
    Acquired(T),
    /// Somebody else's.
    Busy {
        /// How long the holder (or blocker) holds on, when the server said.
        remaining: Option<Duration>,
    },
}

/// One lock kind's steps, for [`acquire`]: what to send, and how to undo it.
pub trait Kind: Clone + Send + Sync + 'static {
    /// The store its notifier and background runtime come from.
    type Store: Store;
    /// What an acquisition yields.
    type Held: Send;

    /// The store.
    fn store(&self) -> &Self::Store;

    /// The channel its releases are announced on; `None` for kinds that announce nothing (they
    /// poll).
    fn channel(&self) -> Option<&str>;

    /// One attempt under `nonce` (the same nonce for every attempt of one acquisition). Must be
    /// safe to repeat: a repeat of an attempt whose reply was lost finds what it took.
    fn attempt(&self, nonce: &str) -> impl Future<Output = Result<Attempt<Self::Held>>> + Send;

    /// Remove whatever attempts under `nonce` may have left on the server: an acquisition whose
    /// reply never came, a waiting writer's intent. Best effort; the lease bounds it anyway.
    fn undo(self, nonce: String) -> impl Future<Output = ()> + Send + 'static;

    /// Whether a refused attempt leaves something behind that giving up must undo (a waiting
    /// writer's intent).
    fn busy_leaves_trace(&self) -> bool {
        false
    }

    /// The longest wait between two attempts regardless of the holder (a waiting writer
    /// re-asserts its intent well within its lease).
    fn refresh_every(&self) -> Option<Duration> {
        None
    }

    /// Whether the wake-up messages `messages` hand this acquisition (under `nonce`) the lock at
    /// once, without another attempt: `Some` with what it holds, dated conservatively from
    /// `sent` (when the last attempt, refused, was sent). Asked only after a notification woke
    /// a waiter whose last attempt was refused, with the messages delivered since that attempt
    /// was sent, oldest first (a later one may take back an earlier one). Must be safe against
    /// lost, repeated and stale messages: answer `Some` only when the messages prove the lock
    /// is this nonce's now, and until the deadline given. Default: never (the next attempt
    /// finds out).
    fn granted(&self, nonce: &str, messages: &[Arc<str>], sent: Instant) -> Option<Self::Held> {
        let _ = (nonce, messages, sent);
        None
    }

    /// The kind's label in traces and metrics ([`observe`](crate::observe)): `expire`, `fair`,
    /// `read`, ... — never the lock's name.
    fn label(&self) -> &'static str {
        "lock"
    }

    /// The fencing token of what an acquisition yields, for traces, when the kind has one.
    fn fence(&self, held: &Self::Held) -> Option<u64> {
        let _ = held;
        None
    }
}

/// How long to wait at most when the server could not say how long the holder holds on (a lock
/// key without a time to live, say): each such wait is jittered between half of this and this.
pub const UNKNOWN_WAIT: Duration = Duration::from_millis(250);

/// The least time a waiting call's first attempt is given, however short its patience: a
/// `try_lock_for` of a microsecond still tries once. Later attempts end at the deadline.
pub const MIN_ATTEMPT: Duration = Duration::from_millis(50);

/// The instant the first attempt's time is counted from, or long ago for later attempts.
fn attempt_started_at(first: Option<Instant>) -> Instant {
    let now = Instant::now();
    first.unwrap_or_else(|| now.checked_sub(MIN_ATTEMPT).unwrap_or(now))
}

/// How long a waiting call rides through errors that a failover produces when it has no
/// deadline of its own ([`Patience::Forever`]): a failover settles well within this.
pub const FAILOVER_PATIENCE: Duration = Duration::from_secs(60);

pub use crate::deadline::{DRIFT_FACTOR, drift};

/// Back-off between attempts that met a transient error (a failover, a timeout): doubling from
/// 50 ms up to 1 s, jittered.
#[derive(Debug)]
pub struct Transient {
    next: Duration,
    since: Option<Instant>,
}

impl Default for Transient {
    fn default() -> Self {
        Transient::new()
    }
}

impl Transient {
    /// A new episode.
    pub fn new() -> Self {
        Transient {
            next: Duration::from_millis(50),
            since: None,
        }
    }

    /// An attempt was answered: the next transient error starts a new episode.
    pub fn answered(&mut self) {
        *self = Transient::new();
    }

    /// After a transient error: sleep and return true when another attempt fits before
    /// `deadline` (for `None`, within [`FAILOVER_PATIENCE`] of the first error in a row); false
    /// (at once) when the caller should give up and return the error.
    pub async fn wait(&mut self, deadline: Option<Instant>) -> bool {
        let now = Instant::now();
        let since = *self.since.get_or_insert(now);
        let deadline = deadline.unwrap_or(since + FAILOVER_PATIENCE);
        let pause = self.next.mul_f64(rand::rng().random_range(0.5..1.0));
        if now + pause >= deadline {
            return false;
        }
        self.next = (self.next * 2).min(Duration::from_secs(1));
        tokio::time::sleep(pause).await;
        true
    }
}

type Queue = crate::sync::Arc<tokio::sync::Mutex<()>>;

/// One client's local waiting state: a FIFO queue (a fair async mutex) per lock name being
/// acquired, and the store's notifier once a wait needed it. Shared by the clones of a lock.
#[derive(Default)]
pub struct Waiters {
    /// Each name's queue and how many [`Ticket`]s hold a place in it. The count changes only
    /// under this lock, so the last ticket to leave is the one that removes the entry.
    queues: crate::sync::Mutex<HashMap<String, (Queue, usize)>>,
    /// A random id for this client, naming its wake channels (the fair mode).
    id: OnceLock<String>,
    /// The store's notifier, once a wait needed it: later acquires look (without a round trip)
    /// whether their channel is still subscribed before their first attempt.
    notifier: OnceLock<Notifier>,
}

impl Waiters {
    /// How many names have a local queue (someone waiting or acquiring).
    #[cfg(all(test, tairlock_loom))]
    pub(crate) fn queued_names(&self) -> usize {
        self.queues.lock().len()
    }
}

impl fmt::Debug for Waiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Waiters")
            .field("queues", &self.queues.lock().len())
            .finish()
    }
}

impl Waiters {
    /// This client's random id (16 hex digits).
    pub fn id(&self) -> &str {
        self.id
            .get_or_init(|| crate::lease::nonce()[..16].to_owned())
    }

    /// A place in the local queue for `name`.
    pub(crate) fn ticket<'a>(&'a self, name: &'a str) -> Ticket<'a> {
        let mut queues = self.queues.lock();
        let (queue, tickets) = queues.entry(name.to_owned()).or_default();
        *tickets += 1;
        Ticket {
            waiters: self,
            name,
            queue: queue.clone(),
        }
    }

    /// The store's notifier (made within `deadline` and the subscribe limit), remembered.
    async fn notifier<S: Store>(&self, store: &S, deadline: Option<Instant>) -> Option<Notifier> {
        if let Some(n) = self.notifier.get() {
            return Some(n.clone());
        }
        let n = crate::notify::notifier_by(store.notifier(), deadline).await?;
        Some(self.notifier.get_or_init(|| n).clone())
    }

    /// Watch `channel` if it is subscribed already (no round trip), else `None`.
    fn watching(&self, channel: &str) -> Option<Watch> {
        self.notifier.get()?.watching(channel)
    }
}

/// A place in a local queue; leaving drops the queue when nobody else is in it (also when the
/// acquire is cancelled).
pub(crate) struct Ticket<'a> {
    waiters: &'a Waiters,
    name: &'a str,
    queue: Queue,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        // Counted under the map's lock, not by the `Arc`'s count: two tickets dropped at once on
        // two threads would both see the other's `Arc` still alive, and neither remove the entry.
        let mut queues = self.waiters.queues.lock();
        if let Some((_, tickets)) = queues.get_mut(self.name) {
            *tickets -= 1;
            if *tickets == 0 {
                queues.remove(self.name);
            }
        }
    }
}

/// How long a waiting call that gives up waits for its undo before it returns, at least: one
/// round trip to a healthy server (the longest round trip the acquisition has seen, if longer).
/// The undo runs to its end in the background regardless; waiting this long only means that,
/// on a server that answers, the call returns with nothing of it left behind.
pub const CLEANUP_WAIT: Duration = Duration::from_millis(50);

/// Run `undo` as a task of its own on the store's runtime (`runtime`, else the ambient one, else
/// tairlock's background runtime): cleanup never belongs to a caller's future, which may be
/// dropped. The one way every kind's undo and rollback is started.
pub fn spawn_cleanup(
    runtime: Option<tokio::runtime::Handle>,
    undo: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    crate::blocking::spawn_handle(runtime).spawn(undo)
}

/// Wait for a cleanup task from [`spawn_cleanup`] at most `wait` (one round trip: see
/// [`CLEANUP_WAIT`]); it goes on in the background after that, and if this future is dropped.
/// Returns whether it finished.
pub async fn settle_cleanup(cleanup: tokio::task::JoinHandle<()>, wait: Duration) -> bool {
    matches!(tokio::time::timeout(wait, cleanup).await, Ok(Ok(())))
}

/// Armed while an attempt's outcome is unknown (or a refused one left something behind). The
/// undo it runs is a task of its own on the store's runtime, spawned when the acquisition gives
/// up ([`finish`](Self::finish)) or when dropped armed (the acquire was cancelled, or returns
/// an error): it outlives the caller's future, and its retries never hold the caller up.
struct Cleanup<K: Kind> {
    kind: K,
    nonce: String,
    armed: bool,
    /// The longest an answered attempt of this acquisition took: one round trip.
    round_trip: Duration,
}

impl<K: Kind> Cleanup<K> {
    /// Spawn the undo if armed (at most once).
    fn spawn(&mut self) -> Option<tokio::task::JoinHandle<()>> {
        if !std::mem::take(&mut self.armed) {
            return None;
        }
        let undo = self.kind.clone().undo(self.nonce.clone());
        Some(spawn_cleanup(self.kind.store().runtime(), undo))
    }

    /// Give up: spawn the undo, and wait for it at most one round trip ([`CLEANUP_WAIT`], or
    /// the slowest answer seen), so that a waiter giving up in time normally leaves nothing
    /// behind when it returns, and never returns much later than its patience.
    async fn finish(&mut self) {
        if let Some(undo) = self.spawn() {
            settle_cleanup(undo, CLEANUP_WAIT.max(self.round_trip)).await;
        }
    }
}

impl<K: Kind> Drop for Cleanup<K> {
    fn drop(&mut self) {
        self.spawn();
    }
}

/// Acquire with `kind`'s attempt step, waiting per `patience` and `wait` in `waiters`' queue for
/// `name`: `Some` when acquired, `None` when the patience ran out first (a single attempt: the
/// lock was busy, or a local waiter was ahead).
///
/// # Errors
///
/// The attempt's errors other than transient ones; transient ones ([`Error::is_transient`]) at
/// once for [`Patience::Once`], else once they outlast the patience (a minute in a row for
/// [`Patience::Forever`]).
///
/// # Cancel safety
///
/// Cancel safe: dropped while an attempt's outcome is unknown (or while a refused attempt left
/// something behind), it undoes what the nonce may hold in the background.
///
/// [`Error::is_transient`]: crate::Error::is_transient
pub async fn acquire<K: Kind>(
    waiters: &Waiters,
    name: &str,
    wait: WaitStrategy,
    patience: Patience,
    kind: K,
) -> Result<Option<K::Held>> {
    // The span, the outcome event and the metrics of this acquisition; dropped unfinished (the
    // acquire was cancelled) it counts as cancelled.
    let mut observed = Acquisition::start(kind.label(), name);
    let span = observed.span().clone();
    let outcome = in_span(
        &span,
        acquire_observed(waiters, name, wait, patience, kind.clone(), &mut observed),
    )
    .await;
    match &outcome {
        Ok(Some(held)) => observed.acquired(kind.fence(held)),
        Ok(None) if patience.waits() => observed.not_acquired(AcquireOutcome::TimedOut),
        Ok(None) => observed.not_acquired(AcquireOutcome::Busy),
        Err(e) => observed.failed(e),
    }
    outcome
}

async fn acquire_observed<K: Kind>(
    waiters: &Waiters,
    name: &str,
    wait: WaitStrategy,
    patience: Patience,
    kind: K,
    observed: &mut Acquisition,
) -> Result<Option<K::Held>> {
    let deadline = patience.deadline();
    // Whether this acquire waits by notification.
    let channel = match wait {
        WaitStrategy::Notify if patience.waits() => kind.channel().map(str::to_owned),
        _ => None,
    };
    let ticket = waiters.ticket(name);
    let mut watch = None;
    let _turn = match ticket.queue.try_lock() {
        Ok(turn) => turn,
        // A local waiter is ahead: the lock is busy as far as we are concerned.
        Err(_) if !patience.waits() => return Ok(None),
        Err(_) => {
            // Local contention: watch the channel while queued, not only once at the head, so
            // the subscription lives as long as anyone here waits. Otherwise each new head
            // subscribes and each departing one unsubscribes: two extra commands per handoff
            // (tests/lock_waiting.rs counts them). Registering waits for nobody: the
            // subscription is asked for in the background.
            if let Some(channel) = &channel {
                watch = waiters
                    .notifier(kind.store(), deadline)
                    .await
                    .map(|n| n.register(channel));
            }
            match deadline {
                Some(deadline) => {
                    match tokio::time::timeout_at(deadline, ticket.queue.lock()).await {
                        Ok(turn) => turn,
                        Err(_) => return Ok(None),
                    }
                }
                None => ticket.queue.lock().await,
            }
        }
    };
    if let Some(channel) = &channel
        && watch.is_none()
    {
        // Free if the channel is still subscribed from a recent wait: then a refusal of the
        // first attempt needs no second one.
        watch = waiters.watching(channel);
    }
    let (min, max) = match wait {
        WaitStrategy::Poll { min, max } => (min, max),
        WaitStrategy::Notify => (Duration::from_millis(10), Duration::from_millis(200)),
    };
    let mut backoff = min;
    // One nonce for the whole acquisition: a repeat of an unanswered attempt finds what it took,
    // and whatever a refused attempt left (an intent) is recognised as ours.
    let mut cleanup = Cleanup {
        kind: kind.clone(),
        nonce: crate::lease::nonce(),
        armed: false,
        round_trip: Duration::ZERO,
    };
    let mut transient = Transient::new();
    // Whether this acquire is done waiting for its subscription: a waiter waits for it from its
    // first busy answer until `subscription_by` at most (its patience and the subscribe limit),
    // then polls until the subscription comes through in the background.
    let mut waited_for_subscription = false;
    let mut subscription_by = None;
    let mut subscribe = false;
    // When the first attempt started (it gets at least `MIN_ATTEMPT`); `None` after it.
    let mut first_attempt = Some(Instant::now());
    loop {
        if std::mem::take(&mut subscribe)
            && let Some(channel) = &channel
        {
            // Busy: only now listen (an uncontended acquire never subscribes), within the
            // caller's patience, then try again at once: a release between the refused attempt
            // and the subscription must not be missed.
            if watch.is_none() {
                watch = waiters
                    .notifier(kind.store(), deadline)
                    .await
                    .map(|n| n.register(channel));
            }
            // Refresh while waiting (issue 26): a queued waiter's place, and a grant made to
            // it, lapse unless it attempts within the kind's refresh interval, so it waits for
            // the subscription in slices of that interval and attempts between them.
            let by = *subscription_by.get_or_insert_with(|| crate::notify::bound(deadline));
            let slice = kind
                .refresh_every()
                .map_or(by, |every| by.min(Instant::now() + every));
            let last = slice >= by && deadline.is_none_or(|d| d > by);
            waited_for_subscription = match &watch {
                Some(w) => w.subscribed_until(slice, last).await.is_some() || slice >= by,
                None => true,
            };
        }
        // A message counts only on a subscription confirmed before the attempt: a release
        // announced before that went unheard.
        let listening = watch.as_ref().is_some_and(Watch::is_subscribed);
        // Messages delivered from here on may hand the lock over (Kind::granted). Read before
        // the wake-up is enabled: a message in between is then seen by the attempt, or here.
        let cursor = watch.as_ref().map(Watch::cursor);
        let notified = watch.as_ref().map(Watch::notified);
        let mut notified = pin!(notified);
        if let Some(n) = notified.as_mut().as_pin_mut() {
            n.enable();
        }
        // Patience ran out while waiting: an attempt sent now could only be cut (its outcome
        // unknown, its undo left to the background). Give up at once, undoing what waiting left.
        if first_attempt.is_none() && deadline.is_some_and(|d| Instant::now() >= d) {
            cleanup.finish().await;
            return Ok(None);
        }
        cleanup.armed = true;
        // An attempt never outlasts the caller's patience (a stalled reconnect can take the
        // store's whole connection timeout): past the deadline its outcome is unknown, and the
        // armed cleanup undoes whatever the nonce may hold. A first attempt gets at least
        // `MIN_ATTEMPT`, so a tiny patience still tries once.
        let sent = Instant::now();
        let attempt = kind.attempt(&cleanup.nonce);
        let answer = match deadline {
            Some(deadline) => {
                let cut = deadline.max(attempt_started_at(first_attempt) + MIN_ATTEMPT);
                match tokio::time::timeout_at(cut, attempt).await {
                    Ok(answer) => answer,
                    // Unknown outcome: the cleanup, still armed, undoes it as the call returns.
                    Err(_) => return Ok(None),
                }
            }
            None => attempt.await,
        };
        if answer.is_ok() {
            cleanup.round_trip = cleanup.round_trip.max(sent.elapsed());
        }
        first_attempt = None;
        let remaining = match answer {
            Ok(Attempt::Acquired(held)) => {
                cleanup.armed = false;
                return Ok(Some(held));
            }
            Ok(Attempt::Busy { remaining }) => {
                observed.refused(remaining);
                transient.answered();
                cleanup.armed = kind.busy_leaves_trace();
                remaining
            }
            // A failover, a slow server: a waiting call tries again within its patience (a
            // single attempt returns the error at once). The cleanup stays armed.
            Err(e) if e.is_transient() && patience.waits() => {
                if transient.wait(deadline).await {
                    continue;
                }
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        let now = Instant::now();
        if !patience.waits() || deadline.is_some_and(|d| now >= d) {
            cleanup.finish().await;
            return Ok(None);
        }
        if channel.is_some() && !listening && !waited_for_subscription {
            subscribe = true;
            continue;
        }
        // Never sleep past the holder's lease: it may expire without a release. When the server
        // could not say how long (a key without a time to live), back off, jittered.
        let remaining =
            remaining.unwrap_or_else(|| UNKNOWN_WAIT.mul_f64(rand::rng().random_range(0.5..1.0)));
        let mut until = now + remaining + Duration::from_millis(1);
        if let Some(every) = kind.refresh_every() {
            until = until.min(now + every);
        }
        if !listening {
            // Polling: no channel or no subscription (a store without notifications, a refused
            // or stalled one), or one confirmed only after this attempt.
            let jittered = backoff.mul_f64(rand::rng().random_range(0.5..1.0));
            until = until.min(now + jittered);
            backoff = (backoff * 2).clamp(min, max);
        }
        if let Some(deadline) = deadline {
            until = until.min(deadline);
        }
        let waiting = observed.wait_span(until.saturating_duration_since(now));
        let woken_by_notification = in_span(&waiting, async {
            match notified.as_mut().as_pin_mut() {
                Some(n) => {
                    tokio::select! {
                        () = n => true,
                        () = tokio::time::sleep_until(until) => false,
                    }
                }
                None => {
                    tokio::time::sleep_until(until).await;
                    false
                }
            }
        })
        .await;
        observed.woke(woken_by_notification);
        if woken_by_notification && let (Some(w), Some(cursor)) = (&watch, cursor) {
            // A one-hop handoff: the release told us the lock is ours; no attempt needed.
            let granted = kind.granted(&cleanup.nonce, &w.messages_after(cursor), sent);
            if let Some(held) = granted {
                cleanup.armed = false;
                return Ok(Some(held));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use parking_lot::Mutex;

    use super::*;
    use crate::error::{Error, ErrorKind};
    use crate::store::MemoryStore;

    /// What the fake kind's next attempt answers.
    #[derive(Debug, Clone, Copy)]
    enum Answer {
        Acquire,
        Busy(Duration),
        Transient,
        Hang,
        /// Busy for an hour, answered after 10 ms (a server round trip).
        SlowBusy,
    }

    /// A kind whose attempts answer from a script (busy for an hour once it runs out), and
    /// which records the nonces it was asked to attempt and to undo.
    #[derive(Clone)]
    struct Fake {
        store: MemoryStore,
        script: Arc<Mutex<VecDeque<Answer>>>,
        attempts: Arc<Mutex<Vec<String>>>,
        undone: Arc<Mutex<Vec<String>>>,
        trace: bool,
        /// How long an undo takes (a server that stopped answering: its retries).
        undo_takes: Duration,
    }

    impl Fake {
        fn new(script: &[Answer]) -> Self {
            Fake {
                store: MemoryStore::new(),
                script: Arc::new(Mutex::new(script.iter().copied().collect())),
                attempts: Arc::default(),
                undone: Arc::default(),
                trace: false,
                undo_takes: Duration::ZERO,
            }
        }

        fn attempts(&self) -> Vec<String> {
            self.attempts.lock().clone()
        }

        fn undone(&self) -> Vec<String> {
            self.undone.lock().clone()
        }
    }

    impl Kind for Fake {
        type Store = MemoryStore;
        type Held = String;

        fn store(&self) -> &MemoryStore {
            &self.store
        }

        fn channel(&self) -> Option<&str> {
            None
        }

        async fn attempt(&self, nonce: &str) -> Result<Attempt<String>> {
            self.attempts.lock().push(nonce.to_owned());
            let answer = self.script.lock().pop_front();
            match answer.unwrap_or(Answer::Busy(Duration::from_secs(3600))) {
                Answer::Acquire => Ok(Attempt::Acquired(nonce.to_owned())),
                Answer::Busy(remaining) => Ok(Attempt::Busy {
                    remaining: Some(remaining),
                }),
                Answer::Transient => Err(Error::new(ErrorKind::Timeout, "no answer")),
                Answer::Hang => std::future::pending().await,
                Answer::SlowBusy => {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    Ok(Attempt::Busy {
                        remaining: Some(Duration::from_secs(3600)),
                    })
                }
            }
        }

        async fn undo(self, nonce: String) {
            tokio::time::sleep(self.undo_takes).await;
            self.undone.lock().push(nonce);
        }

        fn busy_leaves_trace(&self) -> bool {
            self.trace
        }
    }

    const POLL_SLOWLY: WaitStrategy = WaitStrategy::Poll {
        min: Duration::from_secs(10),
        max: Duration::from_secs(10),
    };

    async fn run(kind: &Fake, patience: Patience) -> Result<Option<String>> {
        acquire(
            &Waiters::default(),
            "n",
            POLL_SLOWLY,
            patience,
            kind.clone(),
        )
        .await
    }

    /// Let spawned background work run.
    async fn settle() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn transient_errors_repeat_the_attempt_under_the_same_nonce() {
        use Answer::*;
        let kind = Fake::new(&[Transient, Transient, Acquire]);
        let held = run(&kind, Patience::Forever).await.unwrap().unwrap();
        let attempts = kind.attempts();
        assert_eq!(attempts.len(), 3);
        assert!(attempts.iter().all(|n| *n == held), "{attempts:?}");
        settle().await;
        assert!(kind.undone().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_single_attempt_returns_a_transient_error_and_undoes_it_in_the_background() {
        let kind = Fake::new(&[Answer::Transient]);
        let err = run(&kind, Patience::Once).await.unwrap_err();
        assert!(err.is_transient());
        settle().await;
        assert_eq!(kind.undone(), kind.attempts());
    }

    #[tokio::test(start_paused = true)]
    async fn a_timeout_is_none_for_every_kind_and_withdraws_what_waiting_left() {
        let mut kind = Fake::new(&[]);
        kind.trace = true;
        let started = Instant::now();
        let got = run(&kind, Patience::within(Duration::from_millis(300)))
            .await
            .unwrap();
        assert_eq!(got, None);
        assert!(started.elapsed() >= Duration::from_millis(300));
        // One attempt, then a poll that outlasts the patience: no attempt past the deadline.
        let attempts = kind.attempts();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        // Undone once, at once (not left to the background), under the acquisition's nonce.
        assert_eq!(kind.undone(), vec![attempts[0].clone()]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_past_its_deadline_withdraws_at_once_without_another_attempt() {
        // Attempts take a round trip: one sent at the deadline could only be cut, leaving the
        // withdrawal to the background (a fair waiter would still be queued when the call
        // returned). A waiter whose patience ran out while it slept gives up at once.
        use Answer::*;
        let mut kind = Fake::new(&[Busy(Duration::from_secs(3600)), SlowBusy, SlowBusy]);
        kind.trace = true;
        let got = run(&kind, Patience::within(Duration::from_millis(300)))
            .await
            .unwrap();
        assert_eq!(got, None);
        let attempts = kind.attempts();
        assert_eq!(attempts.len(), 1, "{attempts:?}");
        assert_eq!(kind.undone(), vec![attempts[0].clone()]);
    }

    /// The undo of a waiter that gives up belongs to a task of its own: when the server stops
    /// answering, its retries (up to the waiter lease or the lease for a fair waiter or a
    /// semaphore) never hold the caller up past its patience and one round trip.
    #[tokio::test(start_paused = true)]
    async fn a_waiter_giving_up_returns_in_time_while_its_undo_goes_on() {
        let mut kind = Fake::new(&[]);
        kind.trace = true;
        kind.undo_takes = Duration::from_secs(30);
        let patience = Duration::from_millis(300);
        let started = Instant::now();
        assert_eq!(run(&kind, Patience::within(patience)).await.unwrap(), None);
        let took = started.elapsed();
        assert!(took <= patience + CLEANUP_WAIT, "took {took:?}");
        assert!(kind.undone().is_empty(), "still undoing");
        tokio::time::sleep(Duration::from_secs(31)).await;
        assert_eq!(kind.undone(), kind.attempts(), "the undo ran to its end");
    }

    /// A caller that drops the call while it waits for its undo does not abandon the undo.
    #[tokio::test(start_paused = true)]
    async fn dropping_a_call_that_is_giving_up_leaves_its_undo_running() {
        let mut kind = Fake::new(&[]);
        kind.trace = true;
        kind.undo_takes = Duration::from_secs(1);
        let patience = Duration::from_millis(300);
        let cut = patience + CLEANUP_WAIT / 2;
        let call = tokio::time::timeout(cut, run(&kind, Patience::within(patience)));
        assert!(call.await.is_err(), "dropped while undoing");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(kind.undone(), kind.attempts());
    }

    #[tokio::test(start_paused = true)]
    async fn a_refusal_that_leaves_nothing_is_not_undone() {
        let kind = Fake::new(&[]);
        assert_eq!(run(&kind, Patience::Once).await.unwrap(), None);
        let got = run(&kind, Patience::within(Duration::from_millis(50))).await;
        assert_eq!(got.unwrap(), None);
        settle().await;
        assert!(kind.undone().is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_attempt_is_undone_in_the_background() {
        let kind = Fake::new(&[Answer::Hang]);
        let cut = tokio::time::timeout(Duration::from_millis(50), run(&kind, Patience::Forever));
        assert!(cut.await.is_err());
        settle().await;
        assert_eq!(kind.undone(), kind.attempts());
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_sleeps_no_longer_than_the_holders_remaining_time() {
        use Answer::*;
        let kind = Fake::new(&[Busy(Duration::from_millis(40)), Acquire]);
        let started = Instant::now();
        assert!(run(&kind, Patience::Forever).await.unwrap().is_some());
        // The poll interval is 10 s; the holder had 40 ms left.
        let took = started.elapsed();
        assert!(took < Duration::from_millis(100), "{took:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn local_waiters_line_up_and_only_the_head_attempts() {
        let waiters = Arc::new(Waiters::default());
        let kind = Fake::new(&[]);
        let mut queued = Vec::new();
        for _ in 0..4 {
            let (waiters, kind) = (waiters.clone(), kind.clone());
            queued.push(tokio::spawn(async move {
                acquire(&waiters, "n", POLL_SLOWLY, Patience::Forever, kind).await
            }));
            settle().await;
        }
        tokio::time::sleep(Duration::from_secs(60)).await;
        // Only the head has attempted (every 5-10 s, the jittered back-off); no other waiter
        // has sent anything.
        let nonces: std::collections::HashSet<_> = kind.attempts().into_iter().collect();
        assert_eq!(nonces.len(), 1, "{nonces:?}");
        // A single attempt does not wait behind them.
        let once = acquire(&waiters, "n", POLL_SLOWLY, Patience::Once, kind.clone());
        assert_eq!(once.await.unwrap(), None);
        for task in queued {
            task.abort();
        }
    }
}
