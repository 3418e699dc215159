//! The lock kinds `tairlock run` can hold, behind one interface: the expire lock (plain or fair),
//! a reader/writer lock's read or write side, a semaphore's permits, a [`TokenLock`] (the wire
//! format of redis-py, node redlock and the like, on the key exactly as named), and the legacy
//! `SETNX`/`GETSET` wire format ([`legacy`](super::legacy)). The supervisor machinery in
//! [`run`](super::run) sees only [`Locker`] and [`Hold`], so it works the same for every kind.

use std::future::Future;
use std::time::Duration;

use tairlock::{
    ExpireLock, LockGuard, PermitGuard, Semaphore, Store, TokenGuard, TokenLock, Unlock,
};
use tairlock_rwlock::{ReadGuard, Release, RwLock, WriteGuard};
use tokio::time::Instant;

/// What a final release found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Released {
    /// The lease was ours and is given back.
    Released,
    /// The lease was no longer ours: `what` says how the release found it ("gone", "held by
    /// someone else", ...).
    Gone(&'static str),
    /// No definite answer; the lease runs out by itself.
    Failed(String),
}

/// A lock held for the command, its lease kept alive by a watchdog.
pub trait Hold: Send + Sync {
    /// `TAIRLOCK_KEY`: the key the hold lives in.
    fn key(&self) -> &str;
    /// `TAIRLOCK_FENCE`, when this kind issues fencing tokens.
    fn fence(&self) -> Option<u64>;
    /// The local instant the lease ends unless a renewal moves it (`None`: no expiry known).
    fn deadline(&self) -> Option<Instant>;
    /// Whether the lease is known lost (a definite answer, or its deadline passed).
    fn is_lost(&self) -> bool;
    /// Resolves once the lease is lost. Cancel safe.
    fn lost(&self) -> impl Future<Output = ()> + Send;
    /// Renew now, for the kinds that can be asked to (`true`: renewed). The others, and a
    /// renewal that failed, leave it to the watchdog.
    fn renew(&self) -> impl Future<Output = bool> + Send;
    /// Stop renewing and give the lease back.
    fn release(self) -> impl Future<Output = Released> + Send;
}

/// A lock kind that can be waited for.
pub trait Locker: Send + Sync {
    /// What a successful acquisition holds.
    type Hold: Hold;
    /// Take the lock `name`: wait forever (`None`), make one attempt (`Some(0)`), or keep trying
    /// for that long. `Ok(None)`: not had in time.
    fn acquire(
        &self,
        name: &str,
        wait: Option<Duration>,
    ) -> impl Future<Output = tairlock::Result<Option<Self::Hold>>> + Send;
}

/// What a [`Hold`] needs of a library guard; each kind's guard states only how it answers.
pub trait Guard: Send + Sync {
    /// `TAIRLOCK_FENCE`, when this kind issues fencing tokens.
    fn fence(&self) -> Option<u64>;
    /// The local instant the lease ends unless a renewal moves it (`None`: no expiry known).
    fn deadline(&self) -> Option<Instant>;
    /// Whether the lease is known lost.
    fn is_lost(&self) -> bool;
    /// Resolves once the lease is lost. Cancel safe.
    fn lost(&self) -> impl Future<Output = ()> + Send;
    /// Renew now to `ttl` if this kind's guard can be asked to (`true`: renewed).
    fn renew(&self, ttl: Duration) -> impl Future<Output = bool> + Send;
    /// Stop renewing and give the lease back.
    fn release(self) -> impl Future<Output = Released> + Send;
}

/// A guard held for the command, with the key it lives in: the one [`Hold`] of every kind.
#[derive(Debug)]
pub struct Held<G> {
    guard: G,
    key: String,
    /// The watchdog's lease, for a renewal asked for now.
    ttl: Duration,
}

impl<G: Guard> Hold for Held<G> {
    fn key(&self) -> &str {
        &self.key
    }

    fn fence(&self) -> Option<u64> {
        self.guard.fence()
    }

    fn deadline(&self) -> Option<Instant> {
        self.guard.deadline()
    }

    fn is_lost(&self) -> bool {
        self.guard.is_lost()
    }

    async fn lost(&self) {
        self.guard.lost().await;
    }

    async fn renew(&self) -> bool {
        self.guard.renew(self.ttl).await
    }

    async fn release(self) -> Released {
        self.guard.release().await
    }
}

/// What releasing an expire lock or a semaphore's permits found.
fn unlocked(outcome: tairlock::Result<Unlock>) -> Released {
    match outcome {
        Ok(Unlock::Released) => Released::Released,
        Ok(Unlock::NotHeld) => Released::Gone("gone"),
        Ok(Unlock::HeldByOther) => Released::Gone("held by someone else"),
        Err(e) => Released::Failed(crate::logging::Chain(&e).to_string()),
    }
}

/// The expire lock's hold.
pub type ExpireHold<S> = Held<LockGuard<S>>;

/// `Guard` for a guard type whose own methods have the trait's names and shapes (`fence`,
/// `deadline`, `is_lost`, `lost`, `renew`, `release`): each trait method calls its namesake.
macro_rules! guard_by_its_own_methods {
    ($guard:ident, $doc:expr) => {
        #[doc = $doc]
        impl<S: Store> Guard for $guard<S> {
            fn fence(&self) -> Option<u64> {
                Some($guard::fence(self))
            }

            fn deadline(&self) -> Option<Instant> {
                $guard::deadline(self)
            }

            fn is_lost(&self) -> bool {
                $guard::is_lost(self)
            }

            async fn lost(&self) {
                $guard::lost(self).await;
            }

            async fn renew(&self, ttl: Duration) -> bool {
                $guard::renew(self, ttl).await.is_ok()
            }

            async fn release(self) -> Released {
                unlocked($guard::release(self).await)
            }
        }
    };
}

impl<S: Store> Locker for ExpireLock<S> {
    type Hold = ExpireHold<S>;

    async fn acquire(
        &self,
        name: &str,
        wait: Option<Duration>,
    ) -> tairlock::Result<Option<Self::Hold>> {
        let key = self.keys(name)?.lock;
        let guard = match wait {
            None => Some(self.lock(name).await?),
            Some(wait) if wait.is_zero() => self.try_lock(name).await?,
            Some(wait) => self.try_lock_for(name, wait).await?,
        };
        // A fair grant taken from its announcement (one hop) lasts only the waiter lease until
        // the guard confirms it, which it does at once in the background. The command must not
        // start on that short deadline: `run` would take it for overdue renewals and stop the
        // command at once. Confirm it here (one round trip, only after such a handoff).
        if let Some(guard) = &guard
            && self.options().fair
        {
            let lease = self.options().watchdog_lease;
            let short = guard
                .lease()
                .deadline()
                .is_some_and(|d| d < Instant::now() + lease / 2);
            if short {
                guard.renew(lease).await?;
            }
        }
        let ttl = self.options().watchdog_lease;
        Ok(guard.map(|guard| Held { guard, key, ttl }))
    }
}

impl<S: Store> Guard for LockGuard<S> {
    fn fence(&self) -> Option<u64> {
        Some(LockGuard::fence(self))
    }

    fn deadline(&self) -> Option<Instant> {
        self.lease().deadline()
    }

    fn is_lost(&self) -> bool {
        LockGuard::is_lost(self)
    }

    async fn lost(&self) {
        LockGuard::lost(self).await;
    }

    async fn renew(&self, ttl: Duration) -> bool {
        LockGuard::renew(self, ttl).await.is_ok()
    }

    async fn release(self) -> Released {
        unlocked(LockGuard::release(self).await)
    }
}

/// Which side of a reader/writer lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// Shared: readers overlap.
    Read,
    /// Exclusive: a writer excludes readers and writers.
    Write,
}

/// A reader/writer lock, taken on one side.
#[derive(Debug)]
pub struct RwLocker<S: Store> {
    /// The locks.
    pub locks: RwLock<S>,
    /// The side taken.
    pub side: Side,
}

/// A read or write guard on a reader/writer lock.
#[derive(Debug)]
pub enum RwGuard<S: Store> {
    /// A reader.
    Read(ReadGuard<S>),
    /// The writer.
    Write(WriteGuard<S>),
}

/// A read hold (in the readers key) or a write hold (in the writer key).
pub type RwHold<S> = Held<RwGuard<S>>;

impl<S: Store> Locker for RwLocker<S> {
    type Hold = RwHold<S>;

    async fn acquire(
        &self,
        name: &str,
        wait: Option<Duration>,
    ) -> tairlock::Result<Option<Self::Hold>> {
        let keys = self.locks.keys(name)?;
        let locks = &self.locks;
        Ok(match self.side {
            Side::Read => {
                let guard = match wait {
                    None => Some(locks.read(name).await?),
                    Some(wait) if wait.is_zero() => locks.try_read(name).await?,
                    Some(wait) => locks.try_read_for(name, wait).await?,
                };
                guard.map(|g| Held {
                    guard: RwGuard::Read(g),
                    key: keys.readers,
                    ttl: locks.options().watchdog_lease,
                })
            }
            Side::Write => {
                let guard = match wait {
                    None => Some(locks.write(name).await?),
                    Some(wait) if wait.is_zero() => locks.try_write(name).await?,
                    Some(wait) => locks.try_write_for(name, wait).await?,
                };
                guard.map(|g| Held {
                    guard: RwGuard::Write(g),
                    key: keys.writer,
                    ttl: locks.options().watchdog_lease,
                })
            }
        })
    }
}

impl<S: Store> Guard for RwGuard<S> {
    /// Writers get a token; readers do not write, and get none.
    fn fence(&self) -> Option<u64> {
        match self {
            RwGuard::Read(_) => None,
            RwGuard::Write(guard) => Some(guard.fence()),
        }
    }

    fn deadline(&self) -> Option<Instant> {
        match self {
            RwGuard::Read(guard) => guard.deadline(),
            RwGuard::Write(guard) => guard.deadline(),
        }
    }

    fn is_lost(&self) -> bool {
        match self {
            RwGuard::Read(guard) => guard.is_lost(),
            RwGuard::Write(guard) => guard.is_lost(),
        }
    }

    async fn lost(&self) {
        match self {
            RwGuard::Read(guard) => guard.lost().await,
            RwGuard::Write(guard) => guard.lost().await,
        }
    }

    /// The reader/writer guards renew through their watchdog only.
    async fn renew(&self, _ttl: Duration) -> bool {
        false
    }

    async fn release(self) -> Released {
        let outcome = match self {
            RwGuard::Read(guard) => guard.release().await,
            RwGuard::Write(guard) => guard.release().await,
        };
        match outcome {
            // `StillHeld` needs a reentrant owner, which `run` never is.
            Ok(Release::Released | Release::StillHeld) => Released::Released,
            Ok(Release::Lost) => Released::Gone("gone"),
            Ok(_) => Released::Gone("in an unknown state"),
            Err(e) => Released::Failed(crate::logging::Chain(&e).to_string()),
        }
    }
}

/// `--permits N`: N permits of a [`Semaphore`]; at most its limit of commands run at once, each
/// with its own lease.
#[derive(Debug)]
pub struct Permits<S: Store> {
    /// The semaphore (its limit and options).
    pub semaphore: Semaphore<S>,
    /// The permits each command takes.
    pub permits: u32,
}

/// A semaphore's permits, held.
pub type PermitHold<S> = Held<PermitGuard<S>>;

impl<S: Store> Locker for Permits<S> {
    type Hold = PermitHold<S>;

    async fn acquire(
        &self,
        name: &str,
        wait: Option<Duration>,
    ) -> tairlock::Result<Option<Self::Hold>> {
        let (sem, permits) = (&self.semaphore, self.permits);
        let key = sem.keys(name)?.holders;
        let guard = match wait {
            None => Some(sem.acquire(name, permits).await?),
            Some(wait) if wait.is_zero() => sem.try_acquire(name, permits).await?,
            Some(wait) => sem.try_acquire_for(name, permits, wait).await?,
        };
        let ttl = sem.options().watchdog_lease;
        Ok(guard.map(|guard| Held { guard, key, ttl }))
    }
}

guard_by_its_own_methods!(PermitGuard, "A semaphore permit's hold.");

/// A token lock's hold: the key exactly as named, holding our token, in the format other
/// languages' lock clients share.
pub type TokenHold<S> = Held<TokenGuard<S>>;

impl<S: Store> Locker for TokenLock<S> {
    type Hold = TokenHold<S>;

    async fn acquire(
        &self,
        name: &str,
        wait: Option<Duration>,
    ) -> tairlock::Result<Option<Self::Hold>> {
        let key = self.keys(name)?.lock;
        let guard = match wait {
            None => Some(self.lock(name).await?),
            Some(wait) if wait.is_zero() => self.try_lock(name).await?,
            Some(wait) => self.try_lock_for(name, wait).await?,
        };
        let ttl = self.options().watchdog_lease;
        Ok(guard.map(|guard| Held { guard, key, ttl }))
    }
}

guard_by_its_own_methods!(
    TokenGuard,
    "A token lock's hold. Its fencing token is this crate's own: foreign clients of the format \
     neither issue nor advance one."
);
