//! What every algorithm of the race implements ([`Algorithm`]) and the types it speaks in,
//! beneath the [algorithms](super::algorithms) themselves, which re-export them.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use tairlock::Store;

use super::audit::{LeaseAt, ServerEnd};
use super::client::{Client, Step};

/// The deadline of a lease of `ttl` set by a command sent at `sent`, for the recipes whose
/// commands report no remaining time (they set a TTL and say nothing else): `sent + ttl` less
/// the drift allowance of the core's deadline rule ([`tairlock::deadline::drift`]).
pub(crate) fn sent_plus(sent: tokio::time::Instant, ttl: Duration) -> tokio::time::Instant {
    sent + ttl.saturating_sub(tairlock::deadline::drift(
        ttl,
        tairlock::deadline::DRIFT_FACTOR,
    ))
}

/// A boxed future, for object-safe algorithm methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A lock held by one client, as the algorithm knows it.
#[derive(Debug, Clone)]
pub struct Holding {
    /// The value this client wrote into the lock key (its lease, token or timestamp): a
    /// deletion of any other value by this client is a foreign deletion.
    pub value: Vec<u8>,
    /// The fencing token, for algorithms that issue one.
    pub fence: Option<u64>,
    /// The local instant until which the client believes it holds the lock.
    pub deadline: tokio::time::Instant,
}

/// The result of one acquisition attempt.
#[derive(Debug)]
pub enum Attempt {
    /// Acquired.
    Acquired(Holding),
    /// Somebody else holds it; `retry_after` is the holder's remaining time, when known.
    Busy {
        /// How long until the holder's lease ends, when the algorithm can tell.
        retry_after: Option<Duration>,
    },
}

/// What the race expects of an algorithm.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expectation {
    /// Scripted or transactional: zero foreign deletions, accepted stale writes and stuck locks
    /// in every scenario, zero overlaps in every scenario but long stalls (where a holder paused
    /// past its lease overlaps the next with any lease lock). The race fails if it breaks these.
    Safe,
    /// A verbatim recipe kept for comparison: the race is expected to show its flaws.
    Flawed,
    /// Correct mutual exclusion without a fencing token (Redlock): zero foreign deletions and
    /// stuck locks in every scenario and zero overlaps but under long stalls, as [`Safe`](Self::Safe),
    /// but stale writes are allowed: the resource cannot reject a paused holder's late write
    /// without a token, so long stalls show them (counted, not failed).
    Unfenced,
}

/// One algorithm in the race. See the [module docs](super::algorithms).
pub trait Algorithm<S: Store>: Send + Sync + 'static {
    /// The row name, e.g. `expire-lock`.
    fn name(&self) -> &'static str;
    /// Safe or flawed.
    fn expectation(&self) -> Expectation;
    /// Whether its holdings carry fencing tokens the resource can check.
    fn fenced(&self) -> bool;
    /// One attempt to take `lock` for `ttl`.
    fn try_acquire<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Step<Attempt>>;
    /// Release a holding.
    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        holding: Holding,
    ) -> BoxFuture<'a, Step<()>>;
    /// After a busy attempt of this client on `lock`: a future that ends when a message may
    /// have handed it the lock (a fair release's grant on its wake channel), so the client
    /// attempts again at once instead of at the end of its retry interval, as the library's own
    /// waiting calls do. The race waits for whichever comes first. `None` (the default): the
    /// retry interval only (polling).
    fn woken<'a>(&'a self, _cx: &'a Client<S>, _lock: &'a str) -> Option<BoxFuture<'a, ()>> {
        None
    }
    /// Keys to inspect for stuck locks at the end of a trial (the lock key by default).
    fn keys(&self, lock: &str) -> Vec<String> {
        vec![lock.to_owned()]
    }
    /// Whether a holding is shared (a reader's): shared holdings may overlap each other, and
    /// an overlap is counted only when an exclusive holding is involved; they write nothing to
    /// the protected resource. Exclusive by default.
    fn is_shared(&self, _holding: &Holding) -> bool {
        false
    }
    /// How many exclusive holders may be inside at once: 1 for a lock, N for a semaphore of N
    /// permits. An acquisition that finds this many inside already is an overlap. The holders
    /// of a counting lock (more than 1) are meant to be inside together, so they write nothing
    /// to the single fenced resource, and a release frees a place when it returns.
    fn capacity(&self) -> usize {
        1
    }
    /// Where the server keeps `holding`'s lease, for the deadline audit ([`audit`]): the race
    /// reads it right after each grant, and the holding's deadline must not be later than the
    /// lease's end on the server. `None` (the default): a holding the server keeps no lease for
    /// (a two-step reader's count), not audited.
    ///
    /// [`audit`]: super::audit
    fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
        let _ = (lock, holding);
        None
    }

    /// Where `holding`'s lease stands on the server now, on the local clock; `None` when not
    /// audited. By default, [`lease_at`](Self::lease_at) read on the race's store (without its
    /// simulated latency); an algorithm with servers of its own (Redlock) reads them.
    fn lease_end<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        holding: &'a Holding,
    ) -> BoxFuture<'a, tairlock::Result<Option<ServerEnd>>> {
        Box::pin(async move {
            match self.lease_at(lock, holding) {
                Some(at) => cx.read_lease(&at).await.map(Some),
                None => Ok(None),
            }
        })
    }

    /// How many of the trial's lock keys are stuck at its end: nobody can ever take the lock
    /// again. By default, each of [`keys`](Self::keys) that has no expiry.
    fn stuck<'a>(&'a self, store: &'a S, lock: &'a str) -> BoxFuture<'a, tairlock::Result<u64>> {
        Box::pin(async move {
            let mut stuck = 0;
            for key in self.keys(lock) {
                if store.pttl(&key).await? == tairlock::Ttl::Persistent {
                    stuck += 1;
                }
            }
            Ok(stuck)
        })
    }
}
