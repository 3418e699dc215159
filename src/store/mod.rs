//! The store contract and its two implementations.
//!
//! [`Store`] is every operation a lock kind may send: the plain commands that two-step recipes
//! are made of (each one round trip, each atomic on its own, *not* together: that is the point of
//! the comparison), and [`Store::eval`], which runs one [`Script`] atomically.
//!
//! | store | where | time | scripts |
//! |---|---|---|---|
//! | [`RedisStore`] | a Redis or Valkey server | the server's `TIME` | `EVALSHA`, reloaded on `NOSCRIPT`; releases by `DELIFEQ` where the server has it ([`Store::compare_and_delete`]) |
//! | [`ClusterStore`] | a Redis Cluster | each key's master's `TIME` | `EVALSHA`, routed by the first key |
//! | [`MemoryStore`] | this process | an injected [`Clock`](crate::clock::Clock) | the native body, under one mutex |
//!
//! Both obey the same contract, proven by the conformance suite (`tests/store_contract.rs`) and
//! the differential test (`tests/store_differential.rs`).
//!
//! The Redis stores also implement [`ReplicaStore`] (a script and `WAIT` in one pipeline), the
//! optional capability replica-acknowledged locks need; the embedded store has no replicas and
//! does not.

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::script::{Packed, Reply, Script};

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub mod cluster;
mod commands;
pub mod intercept;
mod link;
pub mod memory;
mod native;
#[cfg(all(feature = "tls", unix))]
mod pin;
pub mod redis;
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub mod sentinel;
pub mod tls;
mod url;

#[cfg(feature = "cluster")]
#[cfg_attr(docsrs, doc(cfg(feature = "cluster")))]
pub use self::cluster::{ClusterOptions, ClusterStore};
pub use self::memory::MemoryStore;
pub use self::redis::{RedisOptions, RedisStore};
#[cfg(feature = "sentinel")]
#[cfg_attr(docsrs, doc(cfg(feature = "sentinel")))]
pub use self::sentinel::SentinelOptions;
pub use self::tls::TlsOptions;

/// What [`ReplicaStore::eval_wait`] waits for after the script.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct WaitFor {
    /// How many replicas must acknowledge the script's writes.
    pub replicas: usize,
    /// How long the server waits for them (`WAIT`'s timeout; at least 1 ms, since 0 would mean
    /// forever).
    pub timeout: Duration,
    /// Wait for the replicas to `fsync` their append-only file (`WAITAOF 0 replicas timeout`,
    /// Redis 7.2+) instead of merely receiving the write (`WAIT`).
    pub aof: bool,
}

impl WaitFor {
    /// `WAIT replicas timeout`.
    pub fn replicas(replicas: usize, timeout: Duration) -> Self {
        WaitFor {
            replicas,
            timeout,
            aof: false,
        }
    }

    /// `WAITAOF 0 replicas timeout` instead of `WAIT`.
    pub fn aof(mut self, aof: bool) -> Self {
        self.aof = aof;
        self
    }

    fn timeout_ms(&self) -> u64 {
        (self.timeout.as_millis() as u64).max(1)
    }
}

/// A [`Store`] whose masters have replicas that can acknowledge writes: the capability
/// [`ReplicatedLock`](crate::ReplicatedLock) needs.
///
/// An extension trait rather than a method that fails at run time: the embedded
/// [`MemoryStore`] has no replicas and does not implement it, so a `ReplicatedLock<MemoryStore>`
/// does not compile. [`RedisStore`] and [`ClusterStore`] implement it.
pub trait ReplicaStore: Store {
    /// Run `script` and then wait for replicas to acknowledge its writes, in one pipeline on
    /// the connection to the master of `keys` (so `WAIT` counts this script's writes, and any
    /// earlier ones of that connection).
    ///
    /// A call may be repeated after a dropped connection, by the caller or by the cluster
    /// client (which resends the pipeline on a new connection): a repeated acquire or renewal
    /// that finds its own earlier write in place re-applies the key's expiry, a write of the
    /// new connection's own that follows the earlier one in the replication stream, so the
    /// repeat's `WAIT` counts only replicas that have it. (Redis 7.0 also sets a connection's
    /// `WAIT` offset to the master's current one after any script; servers where a script that
    /// writes nothing leaves it alone would otherwise answer the repeat's `WAIT` at once with
    /// every connected replica.)
    ///
    /// # Errors
    ///
    /// A reply later than the wait's timeout plus two seconds is
    /// [`ErrorKind::Timeout`](crate::ErrorKind::Timeout) (the script may have run); a dropped
    /// connection is [`ErrorKind::Connection`](crate::ErrorKind::Connection) (likewise).
    ///
    /// # Cancel safety
    ///
    /// The script may or may not have run when the future is dropped.
    fn eval_wait(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
        wait: WaitFor,
    ) -> impl Future<Output = Result<(Reply, Acks)>> + Send;
}

/// How many replicas acknowledged, as `WAIT`/`WAITAOF` counted them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Acks {
    /// Replicas that acknowledged the writes (or fsynced them, with `WAITAOF`).
    pub replicas: usize,
}

/// `EVAL script keys args` then `WAIT`/`WAITAOF`, as one pipeline. `EVAL` rather than `EVALSHA`:
/// a pipeline is not retried on `NOSCRIPT`, and the server caches the compiled body anyway.
pub(crate) fn wait_pipeline(
    script: &'static Script,
    keys: &[String],
    args: &[String],
    wait: &WaitFor,
) -> ::redis::Pipeline {
    let mut pipe = ::redis::pipe();
    pipe.cmd("EVAL")
        .arg(script.lua())
        .arg(keys.len())
        .arg(keys)
        .arg(args);
    if wait.aof {
        pipe.cmd("WAITAOF")
            .arg(0)
            .arg(wait.replicas)
            .arg(wait.timeout_ms());
    } else {
        pipe.cmd("WAIT").arg(wait.replicas).arg(wait.timeout_ms());
    }
    pipe
}

/// Run a [`wait_pipeline`], bounded by the wait's timeout plus two seconds for the round trip.
pub(crate) async fn run_wait_pipeline<C: ::redis::aio::ConnectionLike>(
    con: &mut C,
    pipe: ::redis::Pipeline,
    wait: &WaitFor,
) -> Result<(Reply, Acks)> {
    let bound = wait.timeout + Duration::from_secs(2);
    let (reply, acks): (::redis::Value, ::redis::Value) =
        match tokio::time::timeout(bound, pipe.query_async(con)).await {
            Ok(result) => result?,
            Err(_) => {
                return Err(crate::Error::new(
                    crate::ErrorKind::Timeout,
                    format!("script + WAIT got no reply within {bound:?}"),
                ));
            }
        };
    let replicas = match acks {
        ::redis::Value::Int(n) => n,
        // WAITAOF: [local, replicas].
        ::redis::Value::Array(ref items) => match items.get(1) {
            Some(::redis::Value::Int(n)) => *n,
            _ => -1,
        },
        _ => -1,
    };
    if replicas < 0 {
        return Err(crate::Error::new(
            crate::ErrorKind::Server,
            format!("unexpected WAIT reply: {acks:?}"),
        ));
    }
    Ok((
        Reply::from(reply),
        Acks {
            replicas: replicas as usize,
        },
    ))
}

/// A key's remaining time to live, as `PTTL` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// The key does not exist (`-2`).
    Missing,
    /// The key exists and never expires (`-1`).
    Persistent,
    /// The key expires after this long.
    Expires(Duration),
}

impl Ttl {
    /// Decode a `PTTL` reply.
    pub fn from_pttl(ms: i64) -> Self {
        match ms {
            -2 => Ttl::Missing,
            ms if ms < 0 => Ttl::Persistent,
            ms => Ttl::Expires(Duration::from_millis(ms as u64)),
        }
    }
}

/// The latest server clock reading taken for real: about the year 5138. A `TIME` past it is a
/// malformed reply, and everything computed from server time (lease values in ms, legacy
/// timestamps in units) stays far from overflowing.
const MAX_SERVER_SECS: u64 = 100_000_000_000;

/// Decode a `TIME` reply (`[seconds, microseconds]`) into the time since the epoch.
///
/// # Errors
///
/// [`ErrorKind::Server`](crate::ErrorKind::Server) for microseconds of a second or more, or a
/// time past the year 5000: a malformed reply, never a panic.
pub fn server_time(secs: u64, micros: u64) -> Result<Duration> {
    if micros >= 1_000_000 || secs > MAX_SERVER_SECS {
        return Err(crate::Error::new(
            crate::ErrorKind::Server,
            format!("unexpected TIME reply: [{secs}, {micros}]"),
        ));
    }
    Ok(Duration::from_secs(secs) + Duration::from_micros(micros))
}

/// The operations a lock kind may send to a store. See the [module docs](self).
///
/// Every method is one round trip and one atomic step on the server. Methods mirror the Redis
/// command they are named after, including its errors (`WRONGTYPE` on a key of another type).
pub trait Store: Clone + Send + Sync + 'static {
    /// `GET key`.
    fn get(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;
    /// `SETNX key value`: true if set.
    fn set_nx(&self, key: &str, value: &[u8]) -> impl Future<Output = Result<bool>> + Send;
    /// `SET key value NX PX ttl`: true if set.
    fn set_nx_px(
        &self,
        key: &str,
        value: &[u8],
        ttl: Duration,
    ) -> impl Future<Output = Result<bool>> + Send;
    /// `SET key value` (replaces any value and TTL).
    fn set(&self, key: &str, value: &[u8]) -> impl Future<Output = Result<()>> + Send;
    /// `GETSET key value`: the old value.
    fn getset(
        &self,
        key: &str,
        value: &[u8],
    ) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;
    /// `GETDEL key`: the deleted value.
    fn getdel(&self, key: &str) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;
    /// `DEL key`: true if it existed.
    fn del(&self, key: &str) -> impl Future<Output = Result<bool>> + Send;
    /// `INCR key`.
    fn incr(&self, key: &str) -> impl Future<Output = Result<i64>> + Send;
    /// `DECR key`.
    fn decr(&self, key: &str) -> impl Future<Output = Result<i64>> + Send;
    /// `EXPIRE key seconds`: true if the key exists.
    fn expire(&self, key: &str, seconds: u64) -> impl Future<Output = Result<bool>> + Send;
    /// `PEXPIRE key ms`: true if the key exists.
    fn pexpire(&self, key: &str, ttl: Duration) -> impl Future<Output = Result<bool>> + Send;
    /// `PTTL key`.
    fn pttl(&self, key: &str) -> impl Future<Output = Result<Ttl>> + Send;
    /// `TYPE key`: `none`, `string`, `hash`, `list`, `set`, `zset`, ...
    fn key_type(&self, key: &str) -> impl Future<Output = Result<String>> + Send;
    /// `TIME`, as a duration since the Unix epoch.
    fn time(&self) -> impl Future<Output = Result<Duration>> + Send;
    /// Run one atomic operation with these `KEYS` and `ARGV`.
    fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> impl Future<Output = Result<Reply>> + Send;

    /// [`eval`](Store::eval) with `KEYS` and `ARGV` [packed](Packed) into one buffer each: the
    /// call of a batch that carries many small strings (the watchdog's renewals). By default
    /// unpacked and passed to [`eval`](Store::eval); [`RedisStore`] and [`ClusterStore`] write
    /// them into the command as they are. A wrapper store may delegate this or leave the
    /// default (which goes through its own `eval`).
    fn eval_packed(
        &self,
        script: &'static Script,
        keys: &Packed,
        args: &Packed,
    ) -> impl Future<Output = Result<Reply>> + Send {
        async move {
            self.eval(script, &keys.to_strings(), &args.to_strings())
                .await
        }
    }

    /// Release an expire lease: [`EXPIRE_UNLOCK`](crate::scripts::EXPIRE_UNLOCK)'s `KEYS` and
    /// `ARGV` (lock key; lease, release channel, publish command) and exactly its outcomes (`1`
    /// released, `0` held by another lease, `-1` not held, a `WRONGTYPE`/`NOTLOCK` error for a key
    /// that is not a lock, nothing deleted). By default the script; [`RedisStore`] sends the
    /// server's `DELIFEQ` where it has one (Valkey 9+): one round trip for the release of a held
    /// lease, and the script after it when `DELIFEQ` deleted nothing, to tell which outcome that
    /// is. A wrapper store may delegate this or leave the default.
    fn compare_and_delete(
        &self,
        keys: &[String],
        args: &[String],
    ) -> impl Future<Output = Result<Reply>> + Send {
        self.eval(&crate::scripts::EXPIRE_UNLOCK, keys, args)
    }

    /// How releases on this store are announced and heard: the releasing scripts announce
    /// with [`PubSub::publish_command`](crate::notify::PubSub::publish_command) of this, and
    /// the store's [`notifier`](Store::notifier) subscribes to match. Classic unless the store
    /// says otherwise ([`ClusterStore`] picks sharded pub/sub on Redis 7.0+). A wrapper store
    /// that delegates [`notifier`](Store::notifier) must delegate this too.
    fn pubsub(&self) -> crate::notify::PubSub {
        crate::notify::PubSub::Classic
    }

    /// The shared release-notification channel of this store handle, if it has one (both stores
    /// do; a wrapper that does not delegate this makes waiters poll instead).
    fn notifier(&self) -> impl Future<Output = Option<crate::notify::Notifier>> + Send {
        async { None }
    }

    /// A runtime handle that drives this store's I/O, for the `blocking_*` methods; `None` when
    /// the store needs no runtime (the embedded store).
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        None
    }

    /// Whether one script call may name keys of any hash slot (one server holds every key):
    /// the watchdog then renews the leases of many locks in one call. False by default, which
    /// is always correct: a batch carries the leases of one hash slot only, as a cluster
    /// needs. [`RedisStore`] and [`MemoryStore`] say true; a wrapper store may delegate it.
    fn single_shard(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_time_reply_out_of_range_is_an_error_not_a_panic() {
        assert_eq!(
            server_time(1_700_000_000, 123_456).unwrap(),
            Duration::from_micros(1_700_000_000_123_456)
        );
        for (secs, micros) in [
            (u64::MAX, 999_999),
            (u64::MAX, u64::MAX),
            (1, 1_000_000),
            (MAX_SERVER_SECS + 1, 0),
        ] {
            let err = server_time(secs, micros).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::Server, "{err}");
            assert!(err.to_string().contains("unexpected TIME reply"), "{err}");
        }
    }
}
