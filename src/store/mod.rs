//! The store contract and its two implementations.
//!
//! [`Store`] is every operation a lock kind may send: the plain commands that two-step recipes
//! are made of (each one round trip, each atomic on its own, *not* together: that is the point of
//! the comparison), and [`Store::eval`], which runs one [`Script`] atomically.
//!
//! | store | where | time | scripts |
//! |---|---|---|---|
//! | [`RedisStore`] | a Redis or Valkey server | the server's `TIME` | `EVALSHA`, reloaded on `NOSCRIPT` |
//! | [`MemoryStore`] | this process | an injected [`Clock`](crate::clock::Clock) | the native body, under one mutex |
//!
//! Both obey the same contract, proven by the conformance suite (`tests/store_contract.rs`) and
//! the differential test (`tests/store_differential.rs`).

use std::future::Future;
use std::time::Duration;

use crate::error::Result;
use crate::script::{Reply, Script};

pub mod memory;
pub mod redis;

pub use self::memory::MemoryStore;
pub use self::redis::RedisStore;

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
}
