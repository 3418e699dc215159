//! [`TokenLock`]: a lock in the wire format the Redis lock libraries of other languages share,
//! so that a Rust service and a Python, Node or Go one exclude each other on one key.
//!
//! redis-py's `Lock`, node `redlock` and `redis-semaphore`'s mutex (and Go's redsync and Rust's
//! rslock) keep a lock as a **plain key holding a random token**: taken with
//! `SET key token NX PX ttl`, released by a script that deletes the key only if it still holds
//! the token, extended by one that moves the key's expiry only if it still holds the token. A
//! [`TokenLock`] takes, releases and renews such a key the same way:
//!
//! - the key is **exactly as named**: no prefix, no hash tag required ([`TokenLock::keys`]);
//! - the token is 128 random bits in hex (32 characters, as long as redis-py's and redlock's),
//!   one per acquisition;
//! - acquire ([`TOKEN_ACQUIRE`]) is `SET NX PX` in one script;
//!   repeated with the same token after an attempt whose reply was lost, it finds the lock that
//!   attempt took and reports it as ours, with the time it has left: the holder's deadline is
//!   dated from that reported time, never from the lease asked for;
//! - release ([`TOKEN_RELEASE`]) is an exact compare-and-delete;
//! - renewal ([`TOKEN_RENEW`]) is compare-and-pexpire: the expiry
//!   moves to the lease from now, the token stays;
//! - the guards ([`TokenGuard`]), the watchdog, `with_lock` and the waiting (the
//!   [engine](crate::engine)'s local queue, patience, back-off and cancel cleanup) are those of
//!   every other kind.
//!
//! # Key layout
//!
//! | key | type | value | TTL | written by |
//! |---|---|---|---|---|
//! | `K`, exactly as named | string | the holder's token | the lease (`PX`) | acquire (any client's), renew; deleted by release |
//! | [`companion_key(K, ":fence")`](crate::keys::companion_key): `{K}:fence` | string | the last fencing token this crate issued (decimal) | lease + [`fence_retention`](TokenOptions::fence_retention) | our acquire; our renew moves its TTL |
//! | `{K}:released` (pub/sub channel, not a key) | | `released` | | our release |
//!
//! The fence key is the one the safe legacy locks of `tairlock-legacy` keep beside a key, and
//! holds a token of the same kind: the fences of a key stay increasing whichever of them takes
//! it. Keys with a hash tag keep their companions at `K:fence`, `K:released`, in the same slot.
//!
//! # States
//!
//! | lock key | [`attempt`](TokenLock::attempt) with token `t` | [`release`](TokenLock::release) of `t` | [`renew`](TokenLock::renew) of `t` |
//! |---|---|---|---|
//! | absent (free, released, or expired) | takes it: [`TokenAttempt::Acquired`] | [`Unlock::NotHeld`] | [`TokenRenew::NotHeld`] |
//! | `t` | ours already (a repeat): [`TokenAttempt::Acquired`], with the time it has left | [`Unlock::Released`] | [`TokenRenew::Renewed`] |
//! | another string (another holder of any client, or a user's string) | [`TokenAttempt::Busy`] with its TTL (none for a key without one) | [`Unlock::HeldByOther`], nothing deleted | [`TokenRenew::HeldByOther`], nothing changed |
//! | another type (a user's hash, list, ...) | [`ErrorKind::WrongType`], nothing changed | the same | the same |
//!
//! Any string is somebody's token: the format has nothing else to tell a lock from a user's
//! value, so point a `TokenLock` only at keys that are locks.
//!
//! # Fencing: ours only
//!
//! Every acquisition by a `TokenLock` gets a fencing token ([`TokenHolding::fence`],
//! [`TokenGuard::fence`]): `max(last + 1, server time in µs)`, moved in the acquiring script and
//! kept in the fence key for the lease plus a retention period, as the expire lock's (see
//! [`expire_lock`](crate::expire_lock), "Fencing"). **Foreign clients do not fence**: they
//! neither read nor move the fence key, so their acquisitions get no token and do not advance
//! ours. A resource that checks tokens therefore orders the writes of this crate's holders among
//! themselves (a paused holder of ours is refused once a later holder of ours has written), but
//! it cannot refuse a late write of a paused foreign holder, nor one of ours after only foreign
//! clients held the lock meanwhile (no larger token was written). Fence a resource this way only
//! if every writer of it is a `TokenLock`.
//!
//! # Waiting
//!
//! Foreign clients announce nothing when they release. A waiting `TokenLock` wakes at once when
//! a client of this crate releases (the release publishes on `{K}:released`), and otherwise
//! tries again every [`recheck`](TokenOptions::recheck) (default 100 ms, like redis-py's
//! `sleep=0.1`), never later than the holder's TTL runs out, and every 250 ms at most while
//! the key has no TTL.
//!
//! # Sharing a key with other libraries
//!
//! What mixing guarantees, with every client on the same single server (or cluster) and the
//! same key:
//!
//! - **Mutual exclusion between the two sides**: every client takes the key only when it is
//!   absent (`SET NX`, or "no key exists, then `SET PX`" inside one script), so there is at most
//!   one holder at a time, of either side — while every holder finishes within its lease, as
//!   with any lease lock: a holder paused past its TTL overlaps the next one.
//! - **Each side's releases are exact**: every client's release compares its own token and
//!   deletes nothing else, so a holder whose lease ran out, and whose key another client has
//!   taken since, deletes nothing: a `TokenLock` reports [`Unlock::HeldByOther`], redis-py
//!   raises `LockNotOwnedError`, redlock and redis-semaphore delete nothing and say so only in
//!   their return value. Renewals are exact the same way (compare, then move the expiry).
//! - Not guaranteed: fencing across the sides (above); exclusion with a quorum client spread
//!   over several masters (below); a crashed holder's lock comes free when its TTL ends, not
//!   before.
//!
//! What each client does differently (the clients the tests run against: redis-py 8, node
//! `redlock` 4.2 and `redis-semaphore` 5 on `ioredis` 5):
//!
//! | | key | token | acquire | blocking | extend | release |
//! |---|---|---|---|---|---|---|
//! | `TokenLock` | as named | 128 random bits, hex | `SET NX PX` in a script, safe to repeat | [`lock`](TokenLock::lock): forever; [`try_lock_for`](TokenLock::try_lock_for); [`try_lock`](TokenLock::try_lock): once | the watchdog renews to the full lease at a third of it; [`TokenGuard::renew`] sets the TTL to the given length | compare-and-delete, [`Unlock`] outcome |
//! | redis-py `r.lock(name, timeout=…)` | as given | `uuid.uuid1().hex` (32 hex, time-based, not random) | `SET NX PX timeout`; with `timeout=None` `SET NX` with **no TTL**: the key never expires, and a crashed holder leaves it held for ever | polls every `sleep` (0.1 s) until `blocking_timeout` (default: forever); `blocking=False`: once | no automatic renewal; `extend(t)` **adds** `t` to the TTL left (`PTTL + t`) unless `replace_ttl=True`; `reacquire()` resets it to `timeout` | compare-and-delete; raises `LockNotOwnedError` when its token is gone |
//! | node `redlock` 4.x `redlock.lock(resource, ttl)` | as given | 16 random bytes, hex (32) | script: if no key exists, `SET key value PX ttl`, on every server; succeeds on a **quorum** of `floor(N/2) + 1` servers within the validity `ttl − elapsed − (1% of ttl + 2 ms)`, else releases those that voted and retries | `retryCount` 10 retries, `retryDelay` 200 ms ± `retryJitter` 100 ms, then `LockError` (`retryCount: -1`: forever) | `lock.extend(ttl)`: if the value is still there, `SET key value PX ttl` (replaces the TTL); refused locally once the lock's validity has passed | compare-and-delete on every server |
//! | `redis-semaphore` `new Mutex(client, key, …)` | **`mutex:` + key** | `randomUUID()` (36 characters) | `SET mutex:key id PX lockTimeout NX` (default 10 s) | retries every `retryInterval` (10 ms) until `acquireTimeout` (10 s), then `TimeoutError` | refreshes itself every `refreshInterval` (0.8 × `lockTimeout`) by compare-and-pexpire; a failed refresh calls `onLockLost` (default: throws) | compare-and-delete |
//!
//! So, to share a lock:
//!
//! - with redis-py: the same name; give the Python side a `timeout` (without one a crash locks
//!   everyone out for ever, until `tairlock unlock --force KEY --token`), longer than its
//!   critical section or `extend`ed in time, and remember that `extend(t)` adds to what is left;
//! - with `redis-semaphore`: the key `mutex:<its key>` on this side;
//! - with node `redlock` (and Go's redsync, rslock, which keep the same format over a quorum of
//!   their own): give it **exactly this one server**. With one server its quorum is 1 and its
//!   lock is exactly this key; over N masters it can win a quorum on servers a `TokenLock` never
//!   looks at, and the two sides do not exclude each other. (For a lock over several masters on
//!   this side, use [`Redlock`](crate::Redlock), in this crate's own format.)
//!
//! # Errors, and bad input
//!
//! An empty key or token, or a lease outside 1 ms..[`MAX_TTL`], is
//! [`ErrorKind::InvalidInput`] and nothing is sent. A lock key holding another type than a
//! string, or a fence key holding anything but a fencing token, is [`ErrorKind::WrongType`], and
//! nothing is changed.

mod acquire;
mod guard;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::blocking;
use crate::deadline::{Remaining, local_deadline};
use crate::engine::{WaitStrategy, Waiters};
use crate::error::{Error, ErrorKind, Result};
use crate::expire_lock::{MAX_TTL, Unlock, ttl_ms};
use crate::keys::companion_key;
use crate::script::{Reply, Script, array, unexpected};
use crate::scripts::{INSPECT, TOKEN_ACQUIRE, TOKEN_RELEASE, TOKEN_RENEW};
use crate::store::{Store, Ttl};

pub use self::guard::TokenGuard;

/// How many times [`TokenLock::force_unlock`] looks again when the key changed between its
/// snapshot and its compare-and-delete.
const FORCE_ATTEMPTS: usize = 8;

/// Settings of a [`TokenLock`].
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct TokenOptions {
    /// The lease of guards without an explicit lease time, renewed by the watchdog at a third of
    /// its length (default 30 s): a crashed holder's key expires within this.
    pub watchdog_lease: Duration,
    /// How long the last fencing token is kept after a lease ends (default 60 s).
    pub fence_retention: Duration,
    /// How `lock` and `try_lock_for` wait for a busy lock (default: by notification, woken by
    /// the releases of this crate's clients).
    pub wait: WaitStrategy,
    /// The longest a waiter sleeps between two attempts whatever the holder's TTL (default
    /// 100 ms): foreign clients announce no release, so a waiter looks again this often.
    pub recheck: Duration,
    /// The bound on automatic renewal (default none), as the expire lock's
    /// [`Options::max_hold`](crate::Options#structfield.max_hold).
    pub max_hold: Option<Duration>,
}

impl Default for TokenOptions {
    fn default() -> Self {
        TokenOptions {
            watchdog_lease: Duration::from_secs(30),
            fence_retention: Duration::from_secs(60),
            wait: WaitStrategy::default(),
            recheck: Duration::from_millis(100),
            max_hold: None,
        }
    }
}

impl TokenOptions {
    /// The watchdog's lease length.
    pub fn watchdog_lease(mut self, lease: Duration) -> Self {
        self.watchdog_lease = lease;
        self
    }

    /// Keep the last fencing token this long after a lease ends.
    pub fn fence_retention(mut self, retention: Duration) -> Self {
        self.fence_retention = retention;
        self
    }

    /// How to wait for a busy lock.
    pub fn wait(mut self, wait: WaitStrategy) -> Self {
        self.wait = wait;
        self
    }

    /// Look again at least this often while waiting (at least 1 ms).
    pub fn recheck(mut self, every: Duration) -> Self {
        self.recheck = every.max(Duration::from_millis(1));
        self
    }

    /// Bound automatic renewal; see [`max_hold`](Self#structfield.max_hold).
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }
}

/// The keys of one token lock (see the [layout](self#key-layout)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenKeys {
    /// The lock key, exactly as named: holds the holder's token.
    pub lock: String,
    /// The last fencing token this crate issued for it.
    pub fence: String,
    /// The pub/sub channel this crate's releases are announced on.
    pub channel: String,
}

impl TokenKeys {
    fn both(&self) -> [String; 2] {
        [self.lock.clone(), self.fence.clone()]
    }
}

/// A token lock this client holds: the key, the token in it, the fencing token of the
/// acquisition, and the local deadline of the lease.
#[derive(Clone, PartialEq, Eq)]
pub struct TokenHolding {
    key: String,
    token: String,
    fence: u64,
    deadline: Instant,
}

impl TokenHolding {
    /// The lock key.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// The token the key holds: the only way to release or renew it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// The fencing token of this acquisition (ours only: see [fencing](self#fencing-ours-only)).
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The local instant the lease must stop being relied on: the send time of the request
    /// whose answer granted it, plus the time that answer reported left, less the drift
    /// ([`local_deadline`]).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

impl fmt::Debug for TokenHolding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The token is a credential: show enough of it to tell holdings apart.
        let shown: String = self.token.chars().take(8).collect();
        f.debug_struct("TokenHolding")
            .field("key", &self.key)
            .field("token", &format!("{shown}…"))
            .field("fence", &self.fence)
            .field("deadline", &self.deadline)
            .finish()
    }
}

/// The outcome of one [`TokenLock::attempt`]. Contention is an outcome, not an error.
#[must_use = "an acquired token lock is held until released or its lease ends"]
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenAttempt {
    /// Ours (taken now, or by an earlier attempt with the same token).
    Acquired(TokenHolding),
    /// Somebody else's.
    Busy {
        /// How long until the holder's key expires unless extended; `None` for a key without
        /// a TTL (it is held until its holder deletes it).
        remaining: Option<Duration>,
    },
}

impl TokenAttempt {
    /// The holding, if acquired.
    pub fn holding(self) -> Option<TokenHolding> {
        match self {
            TokenAttempt::Acquired(holding) => Some(holding),
            TokenAttempt::Busy { .. } => None,
        }
    }

    /// Whether the lock was acquired.
    pub fn is_acquired(&self) -> bool {
        matches!(self, TokenAttempt::Acquired(_))
    }
}

/// The outcome of [`TokenLock::renew`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenRenew {
    /// The key still held the token, and expires a lease from now: relied on until `deadline`.
    Renewed {
        /// The new local deadline (the deadline rule, from the time the answer reported).
        deadline: Instant,
    },
    /// The key is gone: the lease ran out (or was released).
    NotHeld,
    /// The key holds another token: the lease ran out and somebody else took the lock.
    HeldByOther,
}

/// A read-only snapshot of one token lock, from [`TokenLock::inspect`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct TokenInspection {
    /// The lock key.
    pub key: String,
    /// Its Redis type (`none` when free, `string` when held).
    pub key_type: String,
    /// The token it holds, when held (the exact bytes: other clients may write any).
    pub value: Option<Vec<u8>>,
    /// Its time to live: [`Ttl::Persistent`] for a key without one (held until deleted).
    pub ttl: Ttl,
    /// The fence key.
    pub fence_key: String,
    /// The last fencing token this crate issued for the key, while it is retained.
    pub last_fence: Option<u64>,
    /// The key holds another type than a string: no token lock's, somebody else's data.
    pub foreign: bool,
}

impl TokenInspection {
    /// Whether somebody holds the lock.
    pub fn is_held(&self) -> bool {
        self.key_type == "string"
    }

    /// The token as text, when held and valid UTF-8 (the token of every client named in the
    /// [module docs](self) is).
    pub fn token(&self) -> Option<&str> {
        self.value
            .as_deref()
            .and_then(|v| std::str::from_utf8(v).ok())
    }
}

/// Token locks on one store: the wire format of redis-py, node redlock, redis-semaphore and
/// redsync. See the [module docs](self), which say what each of those clients does differently
/// and what sharing a key with them guarantees.
///
/// Cheap to clone (it clones the store handle); one value serves any number of keys.
///
/// # Examples
///
/// ```
/// use tairlock::{MemoryStore, TokenLock, Unlock};
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> tairlock::Result<()> {
/// let locks = TokenLock::new(MemoryStore::new());
/// // The key exactly as the Python service names it: `r.lock("reports:nightly")`.
/// let guard = locks.lock("reports:nightly").await?;
/// let stored = tairlock::Store::get(locks.store(), "reports:nightly").await?;
/// assert_eq!(stored, Some(guard.token().as_bytes().to_vec()));
/// assert!(locks.try_lock("reports:nightly").await?.is_none());
/// assert_eq!(guard.release().await?, Unlock::Released);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct TokenLock<S> {
    store: S,
    options: TokenOptions,
    local: Arc<Waiters>,
}

impl<S: Store> TokenLock<S> {
    /// Token locks on `store` with default options.
    pub fn new(store: S) -> Self {
        TokenLock::with_options(store, TokenOptions::default())
    }

    /// Token locks on `store` with `options`.
    pub fn with_options(store: S, options: TokenOptions) -> Self {
        TokenLock {
            store,
            options,
            local: Arc::default(),
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        &self.store
    }

    /// The options.
    pub fn options(&self) -> &TokenOptions {
        &self.options
    }

    /// The keys of the token lock `key` (the lock key is `key` itself).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty key.
    pub fn keys(&self, key: &str) -> Result<TokenKeys> {
        if key.is_empty() {
            return Err(Error::invalid("lock key is empty"));
        }
        Ok(TokenKeys {
            lock: key.to_owned(),
            fence: companion_key(key, ":fence"),
            channel: companion_key(key, ":released"),
        })
    }

    fn retention_ms(&self) -> String {
        (self.options.fence_retention.min(MAX_TTL).as_millis() as u64).to_string()
    }

    /// Every script sent through here is safe to repeat (acquire and renew are named by the
    /// token; release compares it; inspect only reads), so one repeat after no answer is
    /// harmless.
    async fn eval_retrying(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        match self.store.eval(script, keys, args).await {
            Err(e) if e.is_unanswered() => self.store.eval(script, keys, args).await,
            other => other,
        }
    }

    /// One attempt to take the lock `key` for `ttl` with `token`, as `SET key token NX PX ttl`
    /// does (plus a fencing token of ours); the building block of [`lock`](Self::lock) and
    /// friends. One round trip.
    ///
    /// Safe to repeat with the same token: a repeat after an attempt whose reply was lost finds
    /// the lock that attempt took and returns it as acquired, with the time it has left (and
    /// the deadline dated from that, not from `ttl`).
    ///
    /// # Errors
    ///
    /// - [`ErrorKind::InvalidInput`]: empty key or token, `ttl` under 1 ms or over
    ///   [`MAX_TTL`]; nothing is sent.
    /// - [`ErrorKind::WrongType`]: the key holds another type than a string, or the fence key
    ///   holds anything but a fencing token; nothing is changed.
    /// - Store errors when no answer came after one repeat.
    ///
    /// # Cancel safety
    ///
    /// If dropped after the request was sent, the lock may have been taken: repeat with the
    /// same token and [`release`](Self::release) it, or its TTL frees it.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// use tairlock::{MemoryStore, TokenAttempt, TokenLock};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let locks = TokenLock::new(MemoryStore::new());
    /// let token = tairlock::new_nonce();
    /// let ttl = Duration::from_secs(10);
    /// let first = locks.attempt("jobs", &token, ttl).await?.holding().unwrap();
    /// // The reply of the first attempt was lost, say: the repeat finds it ours.
    /// let again = locks.attempt("jobs", &token, ttl).await?.holding().unwrap();
    /// assert_eq!(again.fence(), first.fence());
    /// let other = locks.attempt("jobs", &tairlock::new_nonce(), ttl).await?;
    /// assert!(matches!(other, TokenAttempt::Busy { remaining: Some(_) }));
    /// # Ok(())
    /// # }
    /// ```
    pub async fn attempt(&self, key: &str, token: &str, ttl: Duration) -> Result<TokenAttempt> {
        let keys = self.keys(key)?;
        check_token(token)?;
        let args = [
            token.to_owned(),
            ttl_ms(ttl)?.to_string(),
            self.retention_ms(),
        ];
        let sent = Instant::now();
        let reply = self
            .eval_retrying(&TOKEN_ACQUIRE, &keys.both(), &args)
            .await?;
        let items = array(&reply, &TOKEN_ACQUIRE)?;
        match items.first().and_then(Reply::as_int) {
            Some(1) => {
                let remaining = Remaining::at(items, 1, &TOKEN_ACQUIRE)?;
                let fence = items
                    .get(2)
                    .and_then(Reply::as_int)
                    .and_then(|f| u64::try_from(f).ok())
                    .ok_or_else(|| unexpected(&TOKEN_ACQUIRE, &reply))?;
                Ok(TokenAttempt::Acquired(TokenHolding {
                    key: keys.lock,
                    token: token.to_owned(),
                    fence,
                    deadline: local_deadline(sent, remaining),
                }))
            }
            Some(0) => Ok(TokenAttempt::Busy {
                remaining: items
                    .get(1)
                    .and_then(Reply::as_int)
                    .and_then(Remaining::from_server_ms)
                    .map(Remaining::get),
            }),
            _ => Err(unexpected(&TOKEN_ACQUIRE, &reply)),
        }
    }

    /// Delete the lock `key` only if it holds exactly `token` (the compare-and-delete every
    /// client of the format uses), and wake this crate's waiters. Safe to repeat: a repeat
    /// reports [`Unlock::NotHeld`] (or [`Unlock::HeldByOther`] once somebody took it) and
    /// deletes nothing. One round trip.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty key or token; [`ErrorKind::WrongType`] when the
    /// key holds another type than a string (nothing is deleted); store errors.
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the lock may or may not be released; the TTL frees it in any
    /// case.
    pub async fn release(&self, key: &str, token: &str) -> Result<Unlock> {
        let keys = self.keys(key)?;
        check_token(token)?;
        let args = [
            token.to_owned(),
            keys.channel,
            self.store.pubsub().publish_command().to_owned(),
        ];
        let reply = self
            .eval_retrying(&TOKEN_RELEASE, &[keys.lock], &args)
            .await?;
        match reply.as_int() {
            Some(1) => Ok(Unlock::Released),
            Some(0) => Ok(Unlock::HeldByOther),
            Some(-1) => Ok(Unlock::NotHeld),
            _ => Err(unexpected(&TOKEN_RELEASE, &reply)),
        }
    }

    /// Move the expiry of the lock `key` to `ttl` from now (server time) if it holds exactly
    /// `token`: compare-and-pexpire. The token stays, so a repeat is the same request. One
    /// round trip.
    ///
    /// # Errors
    ///
    /// As [`attempt`](Self::attempt).
    ///
    /// # Cancel safety
    ///
    /// Dropped after sending, the expiry may or may not have moved; repeat it.
    pub async fn renew(&self, key: &str, token: &str, ttl: Duration) -> Result<TokenRenew> {
        self.renew_sent(key, token, ttl, Instant::now()).await
    }

    /// [`renew`](Self::renew), dated from `sent`: when this renewal was first sent (a repeat of
    /// one whose reply was lost may find it applied then).
    pub(crate) async fn renew_sent(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        sent: Instant,
    ) -> Result<TokenRenew> {
        let keys = self.keys(key)?;
        check_token(token)?;
        let args = [
            token.to_owned(),
            ttl_ms(ttl)?.to_string(),
            self.retention_ms(),
        ];
        let reply = self
            .eval_retrying(&TOKEN_RENEW, &keys.both(), &args)
            .await?;
        let items = array(&reply, &TOKEN_RENEW)?;
        match items.first().and_then(Reply::as_int) {
            Some(1) => Ok(TokenRenew::Renewed {
                deadline: local_deadline(sent, Remaining::at(items, 1, &TOKEN_RENEW)?),
            }),
            Some(0) => Ok(TokenRenew::HeldByOther),
            Some(-1) => Ok(TokenRenew::NotHeld),
            _ => Err(unexpected(&TOKEN_RENEW, &reply)),
        }
    }

    /// Read the lock `key` in one atomic snapshot: its type, token, TTL and our last fencing
    /// token. Read-only; one round trip.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty key; store errors.
    pub async fn inspect(&self, key: &str) -> Result<TokenInspection> {
        let keys = self.keys(key)?;
        let reply = self.eval_retrying(&INSPECT, &keys.both(), &[]).await?;
        let items = array(&reply, &INSPECT)?;
        let key_type = items
            .first()
            .and_then(Reply::as_str)
            .ok_or_else(|| unexpected(&INSPECT, &reply))?
            .to_owned();
        let value = match items.get(1) {
            Some(Reply::Data(bytes)) => Some(bytes.clone()),
            _ => None,
        };
        Ok(TokenInspection {
            key: keys.lock,
            foreign: !matches!(key_type.as_str(), "none" | "string"),
            key_type,
            value,
            ttl: Ttl::from_pttl(items.get(2).and_then(Reply::as_int).unwrap_or(-2)),
            fence_key: keys.fence,
            last_fence: items
                .get(3)
                .and_then(Reply::as_str)
                .and_then(|f| f.parse().ok()),
        })
    }

    /// Whether the lock `key` is held by anyone, of any client (one atomic read).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for an empty key; [`ErrorKind::WrongType`] when the key holds
    /// another type than a string; store errors.
    pub async fn is_locked(&self, key: &str) -> Result<bool> {
        let inspection = self.inspect(key).await?;
        if inspection.foreign {
            return Err(not_a_token_lock(&inspection));
        }
        Ok(inspection.is_held())
    }

    /// Delete the lock `key` whoever holds it, ours or a foreign client's, for operators.
    /// Dangerous: the holder is not told and keeps running its critical section.
    ///
    /// Exact all the same: it reads the token the key holds and deletes by compare-and-delete
    /// of that token, so it deletes the holding it saw and nothing else; when another holder
    /// took the key in between it looks again (a few times). Returns whether a lock was deleted.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::WrongType`] when the key holds another type than a string, or a string that
    /// is not text (no client of the format writes one); nothing is deleted.
    /// [`ErrorKind::Server`] when the key changed under every look. Store errors.
    pub async fn force_unlock(&self, key: &str) -> Result<bool> {
        for _ in 0..FORCE_ATTEMPTS {
            let seen = self.inspect(key).await?;
            if seen.foreign {
                return Err(not_a_token_lock(&seen));
            }
            let Some(value) = &seen.value else {
                return Ok(false);
            };
            let Some(token) = seen.token() else {
                return Err(Error::new(
                    ErrorKind::WrongType,
                    format!("{key} holds a value that is not text: not a token lock's"),
                ));
            };
            debug_assert_eq!(token.as_bytes(), &value[..]);
            match self.release(key, token).await? {
                Unlock::Released => return Ok(true),
                Unlock::NotHeld => return Ok(false),
                Unlock::HeldByOther => {}
            }
        }
        Err(Error::new(
            ErrorKind::Server,
            format!("{key} kept changing while it was being deleted; try again"),
        ))
    }

    /// Blocking twin of [`attempt`](Self::attempt).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_attempt(&self, key: &str, token: &str, ttl: Duration) -> Result<TokenAttempt> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_attempt",
            self.attempt(key, token, ttl),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(&self, key: &str, token: &str) -> Result<Unlock> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_release",
            self.release(key, token),
        )
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(&self, key: &str, token: &str, ttl: Duration) -> Result<TokenRenew> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_renew",
            self.renew(key, token, ttl),
        )
    }

    /// Blocking twin of [`inspect`](Self::inspect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_inspect(&self, key: &str) -> Result<TokenInspection> {
        blocking::block_on(self.store.runtime(), "blocking_inspect", self.inspect(key))
    }

    /// Blocking twin of [`is_locked`](Self::is_locked).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_is_locked(&self, key: &str) -> Result<bool> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_is_locked",
            self.is_locked(key),
        )
    }

    /// Blocking twin of [`force_unlock`](Self::force_unlock).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_force_unlock(&self, key: &str) -> Result<bool> {
        blocking::block_on(
            self.store.runtime(),
            "blocking_force_unlock",
            self.force_unlock(key),
        )
    }
}

/// Check a token: not empty.
fn check_token(token: &str) -> Result<()> {
    if token.is_empty() {
        return Err(Error::invalid("a lock token may not be empty"));
    }
    Ok(())
}

fn not_a_token_lock(inspection: &TokenInspection) -> Error {
    Error::new(
        ErrorKind::WrongType,
        format!(
            "{} holds a {}, not a token lock's string",
            inspection.key, inspection.key_type
        ),
    )
}
