//! [`WatchStore`]: the optional capability of running `WATCH`/`MULTI`/`EXEC` transactions.

use std::future::Future;

use tairlock::{Reply, Result, Store};

/// A store that can run optimistic `WATCH`/`MULTI`/`EXEC` transactions: the extension
/// [`WatchLock`](crate::WatchLock) needs beyond the [`Store`] contract, in the manner of
/// `lock_api`'s extension traits (a capability exists only where it is implemented).
///
/// | store | connection | `WATCH` semantics |
/// |---|---|---|
/// | [`RedisStore`](tairlock::RedisStore) | a dedicated connection per transaction (`WATCH` state is per connection, so the shared multiplexed one cannot carry it); [`WatchLock`](crate::WatchLock) keeps a few idle ones for reuse | the server's |
/// | [`ClusterStore`](tairlock::ClusterStore) | a dedicated connection to the master that owns the lock's slot, found with `CLUSTER SLOTS` and corrected from `MOVED` (see [`ClusterWatch`](crate::watch::ClusterWatch)) | the owning master's; refused while the slot's keys are split by a migration (retried, bounded) |
/// | [`MemoryStore`](tairlock::MemoryStore) | none needed | emulated: `WATCH` snapshots each key's type, value and absolute expiry; `EXEC` aborts if any snapshot differs when it runs, atomically with applying the queued commands |
///
/// The emulation differs from the server in one way: Redis aborts on *any* write to a watched
/// key, the snapshot only on a visible change, so a write that puts back exactly the same
/// string with exactly the same expiry (or changes a hash, list or sorted set in place) goes
/// unnoticed. The locks here watch the lock key and its fence key together, and every grant
/// moves the fencing token, so no lock operation depends on that difference.
pub trait WatchStore: Store {
    /// A connection that can hold `WATCH` state.
    type Connection: WatchConnection;

    /// Open a connection for one transaction at a time.
    ///
    /// # Errors
    ///
    /// Connection errors.
    fn watch_connection(&self) -> impl Future<Output = Result<Self::Connection>> + Send;

    /// The server's version (`redis_version` of `INFO server`), when it can be asked; `None`
    /// for an embedded store or a server that refuses `INFO`.
    ///
    /// # Errors
    ///
    /// Connection errors.
    fn server_version(&self) -> impl Future<Output = Result<Option<String>>> + Send;
}

/// One connection's `WATCH` state and the two round trips a [`WatchLock`](crate::WatchLock)
/// operation sends on it: the watched reads, then the transaction.
pub trait WatchConnection: Send + Sync + 'static {
    /// Forget whatever this connection watched before, `WATCH` `keys`, then run `reads`: one
    /// round trip (on a server, `UNWATCH`, `WATCH` and the reads go as one pipeline, and the
    /// server runs them in order). One reply per read.
    ///
    /// # Errors
    ///
    /// The first error reply (e.g. `WRONGTYPE` from a `GET`), or a connection error; the
    /// connection may then still watch the keys.
    fn watch(
        &mut self,
        keys: &[String],
        reads: &[Read],
    ) -> impl Future<Output = Result<Vec<Reply>>> + Send;
    /// `UNWATCH`.
    fn unwatch(&mut self) -> impl Future<Output = Result<()>> + Send;
    /// `MULTI`, the queued `ops`, `EXEC`: their replies, or `None` when a watched key changed
    /// and nothing ran. Either way the connection watches nothing afterwards.
    fn exec(&mut self, ops: &[TxOp]) -> impl Future<Output = Result<Option<Vec<Reply>>>> + Send;
}

/// A read sent right after `WATCH` by [`WatchConnection::watch`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Read {
    /// `GET key`: a bulk string or nil.
    Get(String),
    /// `PTTL key`: milliseconds, `-1` without a TTL, `-2` for a missing key (Redis ≥ 2.6).
    Pttl(String),
    /// `TTL key`: whole seconds (rounded to the nearest), `-1`, `-2`.
    Ttl(String),
    /// `TIME`: `[seconds, microseconds]` as bulk strings (Redis ≥ 2.6).
    Time,
}

/// `UNWATCH`, `WATCH keys…` and the reads, as one pipeline whose replies come back one per
/// command (an error reply keeps its code: `WRONGTYPE`, an unknown command, `MOVED`,
/// `TRYAGAIN`); the reads' replies are the ones after the first two.
pub(super) fn watch_pipeline(keys: &[String], reads: &[Read]) -> redis::Pipeline {
    let mut pipe = redis::pipe();
    pipe.ignore_errors();
    pipe.cmd("UNWATCH");
    pipe.cmd("WATCH").arg(keys);
    for read in reads {
        pipe.add_command(read.to_cmd());
    }
    pipe
}

/// A server's error reply to one command, as this crate's error.
pub(super) fn reply_error(err: &redis::ServerError) -> tairlock::Error {
    tairlock::Error::from_reply(err.code(), err.details().unwrap_or(""))
}

impl Read {
    /// The command as Redis receives it.
    pub fn to_cmd(&self) -> redis::Cmd {
        match self {
            Read::Get(key) => redis::cmd("GET").arg(key).clone(),
            Read::Pttl(key) => redis::cmd("PTTL").arg(key).clone(),
            Read::Ttl(key) => redis::cmd("TTL").arg(key).clone(),
            Read::Time => redis::cmd("TIME"),
        }
    }

    /// The command's name, e.g. `GET`.
    pub fn name(&self) -> &'static str {
        match self {
            Read::Get(_) => "GET",
            Read::Pttl(_) => "PTTL",
            Read::Ttl(_) => "TTL",
            Read::Time => "TIME",
        }
    }
}

/// An expiry for [`TxOp`]: milliseconds (`PX`, `PEXPIRE`; Redis ≥ 2.6), whole seconds
/// (`SETEX`, `EXPIRE`; every version with `WATCH`), or an absolute time (`PEXPIREAT`, 2.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Expiry {
    /// Milliseconds from now.
    Millis(u64),
    /// Seconds from now.
    Seconds(u64),
    /// At this Unix time in ms; a time not in the future deletes the key. Only for
    /// [`TxOp::Expire`].
    At(u64),
}

/// A command queued between `MULTI` and `EXEC`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TxOp {
    /// `SET key value PX ms [XX]` or `SETEX key seconds value`. Replies `OK`, or nil when `xx`
    /// is set and the key does not exist. `xx` needs [`Expiry::Millis`] (Redis ≥ 2.6.12);
    /// [`Expiry::At`] is refused (use a following [`TxOp::Expire`]).
    Set {
        /// The key.
        key: String,
        /// The value.
        value: Vec<u8>,
        /// Its expiry.
        expiry: Expiry,
        /// Only if the key exists (`XX`).
        xx: bool,
    },
    /// `DEL key`: replies 1 if it existed.
    Del {
        /// The key.
        key: String,
    },
    /// `INCR key`: replies the new value.
    Incr {
        /// The key.
        key: String,
    },
    /// `PEXPIRE key ms`, `EXPIRE key seconds` or `PEXPIREAT key at`: replies 1 if the key
    /// exists.
    Expire {
        /// The key.
        key: String,
        /// The new expiry.
        expiry: Expiry,
    },
    /// `PTTL key`, read inside the transaction after its writes: milliseconds, `-1` without a
    /// TTL, `-2` for a missing key (Redis ≥ 2.6). A grant's deadline is dated from it.
    Pttl {
        /// The key.
        key: String,
    },
    /// `TTL key`, as [`TxOp::Pttl`] in whole seconds, for servers without `PTTL` (rounded to
    /// the nearest second since Redis 2.6, cut down before).
    Ttl {
        /// The key.
        key: String,
    },
}

impl TxOp {
    /// The key the command writes (or, for [`TxOp::Pttl`] and [`TxOp::Ttl`], reads).
    pub fn key(&self) -> &str {
        match self {
            TxOp::Set { key, .. }
            | TxOp::Del { key }
            | TxOp::Incr { key }
            | TxOp::Expire { key, .. }
            | TxOp::Pttl { key }
            | TxOp::Ttl { key } => key,
        }
    }

    /// The command as Redis receives it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](tairlock::ErrorKind::InvalidInput) for `SET ... XX` with an
    /// expiry in seconds, which no single command before 2.6.12 expresses.
    pub fn to_cmd(&self) -> Result<redis::Cmd> {
        let mut cmd;
        match self {
            TxOp::Set {
                key,
                value,
                expiry: Expiry::Millis(ms),
                xx,
            } => {
                cmd = redis::cmd("SET");
                cmd.arg(key).arg(value).arg("PX").arg(*ms);
                if *xx {
                    cmd.arg("XX");
                }
            }
            TxOp::Set {
                key,
                value,
                expiry: Expiry::Seconds(secs),
                xx: false,
            } => {
                cmd = redis::cmd("SETEX");
                cmd.arg(key).arg(*secs).arg(value);
            }
            TxOp::Set { xx: true, .. } => {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::InvalidInput,
                    "SET ... XX needs an expiry in milliseconds (Redis >= 2.6.12)",
                ));
            }
            TxOp::Set {
                expiry: Expiry::At(_),
                ..
            } => {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::InvalidInput,
                    "SET takes a relative expiry; add a TxOp::Expire with Expiry::At",
                ));
            }
            TxOp::Del { key } => {
                cmd = redis::cmd("DEL");
                cmd.arg(key);
            }
            TxOp::Incr { key } => {
                cmd = redis::cmd("INCR");
                cmd.arg(key);
            }
            TxOp::Expire {
                key,
                expiry: Expiry::Millis(ms),
            } => {
                cmd = redis::cmd("PEXPIRE");
                cmd.arg(key).arg(*ms);
            }
            TxOp::Expire {
                key,
                expiry: Expiry::Seconds(secs),
            } => {
                cmd = redis::cmd("EXPIRE");
                cmd.arg(key).arg(*secs);
            }
            TxOp::Expire {
                key,
                expiry: Expiry::At(at),
            } => {
                cmd = redis::cmd("PEXPIREAT");
                cmd.arg(key).arg(*at);
            }
            TxOp::Pttl { key } => {
                cmd = redis::cmd("PTTL");
                cmd.arg(key);
            }
            TxOp::Ttl { key } => {
                cmd = redis::cmd("TTL");
                cmd.arg(key);
            }
        }
        Ok(cmd)
    }
}
