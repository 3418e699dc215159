//! Waiting for a reader/writer lock, and the guard-returning acquire methods.
//!
//! Waiting is the core's [engine](tairlock::engine), as for the mutex: by release notification
//! (or polling), each wait bounded by the blocker's remaining time, in a local FIFO queue per
//! lock name so that only the head of the queue talks to the server. A waiting writer under
//! writer preference also re-asserts its intent at a third of the intent lease; under reader
//! preference it raises no intent, and announces once per wait, when first refused by live
//! readers, that idle shared read holds should go.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tairlock::engine::{self, Attempt, Kind, Patience};
use tairlock::{Owner, Result, Store};
use tokio::time::Instant;

use crate::guard::{GuardNoSend, ReadGuard, WriteGuard};
use crate::hold::{Credential, Hold};
use crate::lock::RwLock;
use crate::options::Preference;
use crate::registry::OwnerKey;
use crate::registry::Slot;
use crate::share::{Armed, Shared};
use crate::types::{Blocker, ReadAttempt, WriteAttempt};

/// Read or write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Read,
    Write,
}

/// The reader/writer lock's steps for the [engine](tairlock::engine): one `read_acquire` or
/// `write_acquire` under the acquisition's nonce (a waiting writer's carries its intent); undone
/// by releasing the reader or abandoning the write (which withdraws the intent too).
#[derive(Clone)]
struct Step<S: Store> {
    rw: RwLock<S>,
    name: Arc<str>,
    /// The release channel, which waiters listen on.
    channel: Arc<str>,
    /// The intent channel, which shared read holds listen on.
    intent_channel: Arc<str>,
    mode: Mode,
    ttl: Duration,
    /// A waiting writer's intent lease, under writer preference.
    intent: Option<Duration>,
    /// A waiting writer under reader preference: set until an attempt refused by live readers
    /// has announced (on the intent channel) that idle shared read holds should go, so that it
    /// is announced once per wait. Shared by the step's clones.
    announce_idle: Option<Arc<AtomicBool>>,
    /// Reads join (or start) the client's shared read hold on the lock.
    share: bool,
    /// A fair writer's wake channel (`<release channel>:w:<client id>`): writes go through the
    /// fair queue ([`Options::fair`](crate::Options::fair)), and wait on this channel.
    fair: Option<Arc<str>>,
    /// Whether a refused attempt queues (a waiting call) or not (a single attempt).
    waits: bool,
}

/// What an attempt got: a server hold, shared by the client's local readers when `Some`.
type Got<S> = (Arc<Hold<S>>, Option<Arc<Shared<S>>>);

impl<S: Store> Step<S> {
    /// A shared read: join the client's shared hold (no round trip), else take a server read
    /// hold with a listener on the lock's intent channel armed first, and share it. Without release
    /// notifications the hold is not shared (a writer's intent would go unheard).
    async fn shared_read(&self, nonce: &str) -> Result<Attempt<Got<S>>> {
        let (rw, name, ttl) = (&self.rw, &*self.name, self.ttl);
        if let Some(shared) = rw.local.join_shared(name) {
            return Ok(Attempt::Acquired((shared.hold().clone(), Some(shared))));
        }
        let store = rw.store();
        let mut armed = None;
        if let Some(notifier) = tairlock::notify::notifier_by(store.notifier(), None).await {
            let watch = notifier.register(&self.intent_channel);
            if watch.subscribed_by(None).await {
                armed = Some(Armed::arm(store, watch, rw.options().preference).await);
            }
        }
        match rw.read_acquire(name, nonce, ttl).await? {
            ReadAttempt::Acquired { lease, .. } => {
                let cred = Credential::Read(nonce.to_owned());
                let hold = Hold::start(rw.leases.clone(), name, cred, ttl, lease.deadline());
                let Some(armed) = armed else {
                    return Ok(Attempt::Acquired((hold, None)));
                };
                let shared = Shared::new(hold.clone(), rw.options().linger);
                armed.start(&shared);
                rw.local.install_shared(name, &shared);
                Ok(Attempt::Acquired((hold, Some(shared))))
            }
            ReadAttempt::Blocked { remaining, .. } => Ok(Attempt::Busy { remaining }),
        }
    }
}

impl<S: Store> Step<S> {
    fn is_fair_write(&self) -> bool {
        self.mode == Mode::Write && self.fair.is_some()
    }

    /// One write attempt, the plain step or the fair queue's, announcing to idle shared read
    /// holds if this wait has not yet (reader preference). A reply lost in flight leaves the
    /// flag up: the repeat announces again, which is only a repeated hint.
    async fn write_attempt(&self, nonce: &str) -> Result<WriteAttempt> {
        let (rw, name, ttl) = (&self.rw, &*self.name, self.ttl);
        let announce = self
            .announce_idle
            .as_ref()
            .is_some_and(|pending| pending.load(Ordering::SeqCst));
        let attempt = match &self.fair {
            None => {
                rw.leases
                    .write_acquire(name, nonce, ttl, self.intent, announce)
                    .await?
            }
            Some(wake) => {
                rw.leases
                    .fair_write_acquire(name, nonce, ttl, self.intent, self.waits, wake, announce)
                    .await?
            }
        };
        if announce
            && let WriteAttempt::Blocked {
                by: Blocker::Readers(_),
                ..
            } = attempt
            && let Some(pending) = &self.announce_idle
        {
            pending.store(false, Ordering::SeqCst);
        }
        Ok(attempt)
    }
}

impl<S: Store> Kind for Step<S> {
    type Store = S;
    type Held = Got<S>;

    fn store(&self) -> &S {
        self.rw.store()
    }

    fn channel(&self) -> Option<&str> {
        match (&self.fair, self.mode) {
            // Grants and the last reader's release are announced there.
            (Some(wake), Mode::Write) => Some(wake),
            _ => Some(&self.channel),
        }
    }

    fn label(&self) -> &'static str {
        match self.mode {
            Mode::Read => "read",
            Mode::Write => "write",
        }
    }

    fn fence(&self, (hold, _): &Got<S>) -> Option<u64> {
        match hold.credential() {
            Credential::Write(lease) => Some(lease.fence()),
            Credential::Read(_) => None,
        }
    }

    async fn attempt(&self, nonce: &str) -> Result<Attempt<Got<S>>> {
        if self.share && self.mode == Mode::Read {
            return self.shared_read(nonce).await;
        }
        let (rw, name, ttl) = (&self.rw, &*self.name, self.ttl);
        Ok(match self.mode {
            Mode::Read => match rw.read_acquire(name, nonce, ttl).await? {
                ReadAttempt::Acquired { lease, .. } => {
                    let cred = Credential::Read(nonce.to_owned());
                    Attempt::Acquired((
                        Hold::start(rw.leases.clone(), name, cred, ttl, lease.deadline()),
                        None,
                    ))
                }
                ReadAttempt::Blocked { remaining, .. } => Attempt::Busy { remaining },
            },
            Mode::Write => match self.write_attempt(nonce).await? {
                WriteAttempt::Acquired(lease) => {
                    let cred = Credential::Write(lease.lease().clone());
                    Attempt::Acquired((
                        Hold::start(rw.leases.clone(), name, cred, ttl, lease.deadline()),
                        None,
                    ))
                }
                WriteAttempt::Blocked { remaining, .. } => Attempt::Busy { remaining },
            },
        })
    }

    async fn undo(self, nonce: String) {
        let _ = match (self.mode, &self.fair) {
            (Mode::Read, _) => self.rw.read_release(&self.name, &nonce).await.map(drop),
            (Mode::Write, None) => self.rw.write_abandon(&self.name, &nonce).await.map(drop),
            (Mode::Write, Some(_)) => {
                // Leave the queue and give back (hand on) a grant. Without an answer, try
                // again (it is safe to repeat) until the waiter lease would have dropped the
                // place anyway, and a grant with it.
                let leases = &self.rw.leases;
                let give_up = Instant::now() + leases.options().waiter_lease.max(self.ttl);
                let mut transient = tairlock::engine::Transient::new();
                loop {
                    match leases.fair_write_leave(&self.name, &nonce).await {
                        Err(e) if e.is_transient() && transient.wait(Some(give_up)).await => {}
                        other => break other.map(drop),
                    }
                }
            }
        };
    }

    fn busy_leaves_trace(&self) -> bool {
        // A refused read left nothing behind; a refused write may have left its intent, and
        // a waiting fair writer its place in the queue.
        self.intent.is_some() || (self.is_fair_write() && self.waits)
    }

    fn refresh_every(&self) -> Option<Duration> {
        // Re-assert the intent well before it lapses; refresh a fair writer's place (and
        // notice a grant whose announcement was lost) well within its waiter lease.
        let intent = self.intent.map(|intent| intent / 3);
        let place =
            (self.is_fair_write() && self.waits).then(|| self.rw.options().waiter_lease / 3);
        match (intent, place) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }
}

impl<S: Store> RwLock<S> {
    /// Acquire a server hold, waiting per `patience`; `None` when it did not come in time.
    async fn acquire_hold(
        &self,
        name: &str,
        mode: Mode,
        patience: Patience,
    ) -> Result<Option<Got<S>>> {
        let ttl = self.options().watchdog_lease;
        tairlock::ttl_ms(ttl)?;
        let keys = self.keys(name)?;
        // A waiting writer announces itself (writer preference); a single attempt does not.
        let intent = match (mode, self.options().preference) {
            (Mode::Write, Preference::Writer) if patience.waits() => {
                Some(self.options().intent_lease)
            }
            _ => None,
        };
        // Under reader preference a waiting writer raises no intent, so nothing would make
        // other clients give back their idle, lingering shared read holds: it announces that
        // instead, once per wait (a hint: holds with readers inside stay).
        let announce_idle = (mode == Mode::Write
            && self.options().preference == Preference::Reader
            && patience.waits())
        .then(|| Arc::new(AtomicBool::new(true)));
        let share = self.options().share_reads;
        if share
            && mode == Mode::Read
            && let Some(shared) = self.local.join_shared(name)
        {
            // The client's shared read hold takes us: no round trip, no queue.
            return Ok(Some((shared.hold().clone(), Some(shared))));
        }
        if mode == Mode::Write {
            // Local readers stop joining, and an idle shared hold goes now: the writer waits
            // for the reads in progress only.
            self.local.revoke_shared(name);
        }
        let fair = if mode == Mode::Write && self.options().fair {
            Some(self.fair_wake_channel(name)?.into())
        } else {
            None
        };
        let step = Step {
            rw: self.clone(),
            name: name.into(),
            fair,
            waits: patience.waits(),
            channel: keys.channel.into(),
            intent_channel: keys.intent_channel.into(),
            mode,
            ttl,
            intent,
            announce_idle,
            share,
        };
        let waiters = &self.local.waiters;
        engine::acquire(waiters, name, self.options().wait, patience, step).await
    }

    /// The hold for `owner` (re-entered locally when it has one), else a new one.
    async fn slot(
        &self,
        name: &str,
        mode: Mode,
        owner: Option<OwnerKey>,
        patience: Patience,
    ) -> Result<Option<Arc<Slot<S>>>> {
        self.keys(name)?;
        let key = owner.map(|o| (o, name.to_owned()));
        // Served locally: a reentrant read never queues behind a waiting writer.
        if let Some(key) = &key
            && let Some(slot) = self.local.find(key)
            && slot.reenter(mode == Mode::Write)?
        {
            return Ok(Some(slot));
        }
        let Some((hold, shared)) = self.acquire_hold(name, mode, patience).await? else {
            return Ok(None);
        };
        let slot = Slot::new(hold, shared);
        if let Some(key) = key
            && self.local.register(key.clone(), &slot)
        {
            slot.registered_at(&self.local, key);
        }
        Ok(Some(slot))
    }

    async fn read_guard<M>(
        &self,
        name: &str,
        owner: Option<OwnerKey>,
        patience: Patience,
    ) -> Result<Option<ReadGuard<S, M>>> {
        Ok(self
            .slot(name, Mode::Read, owner, patience)
            .await?
            .map(ReadGuard::new))
    }

    async fn write_guard<M>(
        &self,
        name: &str,
        owner: Option<OwnerKey>,
        patience: Patience,
    ) -> Result<Option<WriteGuard<S, M>>> {
        Ok(self
            .slot(name, Mode::Write, owner, patience)
            .await?
            .map(WriteGuard::new))
    }

    /// Wait for the lock `name` for reading and hold it, renewed by the watchdog until the
    /// guard is released or dropped.
    ///
    /// Under [`Preference::Writer`] a waiting writer keeps new readers out, so this also waits
    /// while a writer waits. Not reentrant: a second `read` of the same task while a writer
    /// waits would wait behind that writer, which waits for the first read — use
    /// [`read_as`](Self::read_as) with an [`Owner`] for reentrant reads.
    ///
    /// While waiting it rides through what a failover or a slow server produces
    /// ([`Error::is_transient`](tairlock::Error::is_transient): no answer, `CLUSTERDOWN`, `MOVED`, `TRYAGAIN`, `LOADING`,
    /// `READONLY`, ...): the attempt is repeated with backoff and the same nonce, so an admission
    /// the lost attempt made is found rather than orphaned. The single-attempt calls
    /// (`try_read`, `try_write`, ...) return those errors at once.
    ///
    /// # Errors
    ///
    /// Invalid name or lease; a key holds data that is not this lock's
    /// ([`ErrorKind::WrongType`](tairlock::ErrorKind::WrongType)); store errors other than
    /// transient ones, and transient ones that outlast the patience (a minute in a row for the
    /// calls that wait forever).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped while a request was in flight, a background task
    /// removes whatever that request may have admitted, and the lease bounds it in any case.
    ///
    /// # Examples
    ///
    /// ```
    /// use tairlock::MemoryStore;
    /// use tairlock_rwlock::RwLock;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let locks = RwLock::new(MemoryStore::new());
    /// let a = locks.read("catalog").await?;
    /// let b = locks.read("catalog").await?; // readers share
    /// assert_eq!(locks.readers("catalog").await?, 2);
    /// assert!(locks.try_write("catalog").await?.is_none()); // a writer waits for both
    /// a.release().await?;
    /// b.release().await?;
    /// let w = locks.try_write("catalog").await?.expect("free now");
    /// assert!(w.fence() > 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self, name: &str) -> Result<ReadGuard<S>> {
        Ok(self
            .read_guard(name, None, Patience::Forever)
            .await?
            .expect("waiting forever ends only with the lock"))
    }

    /// Wait for the lock `name` for writing and hold it, renewed by the watchdog; the guard
    /// carries a fencing token.
    ///
    /// Under [`Preference::Writer`] the waiting writer announces its intent, so new readers stay
    /// out until it has had its turn; the intent lapses within
    /// [`Options::intent_lease`](crate::Options::intent_lease) if this writer gives up.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: if the future is dropped, a background task removes this writer's intent and
    /// whatever lock an in-flight request may have taken.
    pub async fn write(&self, name: &str) -> Result<WriteGuard<S>> {
        Ok(self
            .write_guard(name, None, Patience::Forever)
            .await?
            .expect("waiting forever ends only with the lock"))
    }

    /// One attempt to read-lock `name`; `None` when a writer holds it (or, under writer
    /// preference, waits for it).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    pub async fn try_read(&self, name: &str) -> Result<Option<ReadGuard<S>>> {
        self.read_guard(name, None, Patience::Once).await
    }

    /// One attempt to write-lock `name`; `None` when anyone holds it or another writer waits
    /// for it. A single attempt announces no intent.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    pub async fn try_write(&self, name: &str) -> Result<Option<WriteGuard<S>>> {
        self.write_guard(name, None, Patience::Once).await
    }

    /// Wait up to `timeout` to read-lock `name`; `None` if it did not come in time.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    pub async fn try_read_for(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<ReadGuard<S>>> {
        self.read_guard(name, None, Patience::within(timeout)).await
    }

    /// Wait up to `timeout` to write-lock `name`; `None` if it did not come in time (the
    /// writer's intent is withdrawn then, so readers are not kept out any longer).
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read).
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    pub async fn try_write_for(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<WriteGuard<S>>> {
        self.write_guard(name, None, Patience::within(timeout))
            .await
    }

    /// [`read`](Self::read) for `owner`, reentrant: when `owner` already holds `name` (for
    /// reading or writing) this returns at once, without a round trip and without queueing
    /// behind a waiting writer.
    ///
    /// # Errors
    ///
    /// As [`read`](Self::read); [`ErrorKind::LeaseLost`](tairlock::ErrorKind::LeaseLost) on
    /// re-entry once the lease is lost.
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read); a cancelled re-entry changes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use tairlock::{MemoryStore, Owner};
    /// use tairlock_rwlock::RwLock;
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let locks = RwLock::new(MemoryStore::new());
    /// let me = Owner::new();
    /// let outer = locks.read_as(&me, "catalog").await?;
    /// let inner = locks.read_as(&me, "catalog").await?; // local, no round trip
    /// assert_eq!(locks.readers("catalog").await?, 1);
    /// // Upgrading would wait for our own read: refused instead of deadlocking.
    /// assert!(locks.write_as(&me, "catalog").await.unwrap_err().is_invalid_input());
    /// inner.release().await?;
    /// outer.release().await?;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read_as(&self, owner: &Owner, name: &str) -> Result<ReadGuard<S>> {
        Ok(self
            .read_guard(name, Some(OwnerKey::Owner(owner.id())), Patience::Forever)
            .await?
            .expect("waiting forever ends only with the lock"))
    }

    /// [`write`](Self::write) for `owner`, reentrant: when `owner` already holds `name` for
    /// writing this returns at once.
    ///
    /// # Errors
    ///
    /// As [`read_as`](Self::read_as), and
    /// [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput) when `owner` holds `name`
    /// only for reading: a read→write upgrade would wait for itself, so it is refused.
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    pub async fn write_as(&self, owner: &Owner, name: &str) -> Result<WriteGuard<S>> {
        Ok(self
            .write_guard(name, Some(OwnerKey::Owner(owner.id())), Patience::Forever)
            .await?
            .expect("waiting forever ends only with the lock"))
    }

    /// [`try_read`](Self::try_read) for `owner`, reentrant.
    ///
    /// # Errors
    ///
    /// As [`read_as`](Self::read_as).
    ///
    /// # Cancel safety
    ///
    /// As [`read`](Self::read).
    pub async fn try_read_as(&self, owner: &Owner, name: &str) -> Result<Option<ReadGuard<S>>> {
        self.read_guard(name, Some(OwnerKey::Owner(owner.id())), Patience::Once)
            .await
    }

    /// [`try_write`](Self::try_write) for `owner`, reentrant.
    ///
    /// # Errors
    ///
    /// As [`write_as`](Self::write_as).
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    pub async fn try_write_as(&self, owner: &Owner, name: &str) -> Result<Option<WriteGuard<S>>> {
        self.write_guard(name, Some(OwnerKey::Owner(owner.id())), Patience::Once)
            .await
    }

    /// Blocking, thread-reentrant [`read`](Self::read): the calling thread is the owner, so a
    /// thread that already holds `name` re-enters locally. The guard is `!Send`.
    ///
    /// # Errors
    ///
    /// As [`read_as`](Self::read_as).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime (use [`read_as`](Self::read_as) there).
    #[track_caller]
    pub fn blocking_read(&self, name: &str) -> Result<ReadGuard<S, GuardNoSend>> {
        let me = Some(OwnerKey::Thread(std::thread::current().id()));
        let guard = tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_read",
            self.read_guard(name, me, Patience::Forever),
        )?;
        Ok(guard.expect("waiting forever ends only with the lock"))
    }

    /// Blocking, thread-reentrant [`write`](Self::write). The guard is `!Send`.
    ///
    /// # Errors
    ///
    /// As [`write_as`](Self::write_as) (an upgrade by a thread holding a read is refused).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_write(&self, name: &str) -> Result<WriteGuard<S, GuardNoSend>> {
        let me = Some(OwnerKey::Thread(std::thread::current().id()));
        let guard = tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_write",
            self.write_guard(name, me, Patience::Forever),
        )?;
        Ok(guard.expect("waiting forever ends only with the lock"))
    }

    /// Blocking, thread-reentrant [`try_read`](Self::try_read).
    ///
    /// # Errors
    ///
    /// As [`blocking_read`](Self::blocking_read).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_read(&self, name: &str) -> Result<Option<ReadGuard<S, GuardNoSend>>> {
        let me = Some(OwnerKey::Thread(std::thread::current().id()));
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_try_read",
            self.read_guard(name, me, Patience::Once),
        )
    }

    /// Blocking, thread-reentrant [`try_write`](Self::try_write).
    ///
    /// # Errors
    ///
    /// As [`blocking_write`](Self::blocking_write).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_write(&self, name: &str) -> Result<Option<WriteGuard<S, GuardNoSend>>> {
        let me = Some(OwnerKey::Thread(std::thread::current().id()));
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_try_write",
            self.write_guard(name, me, Patience::Once),
        )
    }

    /// Blocking, thread-reentrant [`try_read_for`](Self::try_read_for).
    ///
    /// # Errors
    ///
    /// As [`blocking_read`](Self::blocking_read).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_read_for(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<ReadGuard<S, GuardNoSend>>> {
        let me = Some(OwnerKey::Thread(std::thread::current().id()));
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_try_read_for",
            self.read_guard(name, me, Patience::within(timeout)),
        )
    }

    /// Blocking, thread-reentrant [`try_write_for`](Self::try_write_for).
    ///
    /// # Errors
    ///
    /// As [`blocking_write`](Self::blocking_write).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_write_for(
        &self,
        name: &str,
        timeout: Duration,
    ) -> Result<Option<WriteGuard<S, GuardNoSend>>> {
        let me = Some(OwnerKey::Thread(std::thread::current().id()));
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_try_write_for",
            self.write_guard(name, me, Patience::within(timeout)),
        )
    }

    /// How many levels `owner` holds `name` at (0: not at all).
    pub fn held_depth(&self, owner: &Owner, name: &str) -> usize {
        self.local
            .find(&(OwnerKey::Owner(owner.id()), name.to_owned()))
            .map_or(0, |s| s.depth())
    }

    /// How many local readers share this client's server read hold on `name` now (0 when it
    /// has none, or it takes nobody any more), with [`Options::share_reads`](crate::Options).
    pub fn shared_readers(&self, name: &str) -> usize {
        self.local.shared_readers(name)
    }

    /// How many levels the calling thread holds `name` at through the blocking API.
    pub fn thread_held_depth(&self, name: &str) -> usize {
        self.local
            .find(&(
                OwnerKey::Thread(std::thread::current().id()),
                name.to_owned(),
            ))
            .map_or(0, |s| s.depth())
    }
}
