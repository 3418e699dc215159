//! The native compare-and-delete: `DELIFEQ` (Valkey 9+) in place of the
//! [`EXPIRE_UNLOCK`](crate::scripts::EXPIRE_UNLOCK) script, where the server has it.
//!
//! # Detection
//!
//! Once per store handle (and its clones), before its first release: `COMMAND INFO DELIFEQ`.
//! The server's own command table decides, never a version string (Valkey reports
//! `redis_version:7.2.4`, and a server may rename or deny the command). A refused detection
//! (`COMMAND` renamed away or denied by an ACL) or an unexpected reply means the script. When a
//! native release is refused later (`EXECABORT`: the server no longer knows `DELIFEQ`, after a
//! failover to an older server, or an ACL denies it or `MULTI`), nothing ran: the release is
//! sent again as the script, and the store handle uses the script from then on.
//!
//! # One round trip, the script's outcomes
//!
//! `MULTI` / `DELIFEQ lock lease` / `GET lock` / `EXEC`, sent as one pipeline. The transaction is
//! atomic, so `GET` sees the key exactly as `DELIFEQ` left it, and the script's outcome table
//! follows from the two replies:
//!
//! | `DELIFEQ` | `GET` after it | outcome (as the script) |
//! |---|---|---|
//! | `1` | — | `1` released |
//! | `0` | nil | `-1` not held |
//! | `0` | a value starting `tl1:` | `0` held by another lease |
//! | `0` | any other value | error `NOTLOCK`, nothing deleted |
//! | `WRONGTYPE` | `WRONGTYPE` | error `WRONGTYPE`, nothing deleted |
//!
//! The refusal to touch a user's data is structural: `DELIFEQ` deletes only a string equal to
//! the lease, and a lease always starts with `tl1:`, so a value that is not a lease can never
//! match, and a key of another type is refused by `DELIFEQ` itself (`WRONGTYPE`).
//!
//! # The announcement
//!
//! The script publishes on the release channel only when it deleted, in the same atomic step. A
//! transaction cannot make a command conditional, so here the announcement is a separate
//! command (`SPUBLISH`, else `PUBLISH`, as the script) sent on the same connection right after a
//! `1`, without waiting for its reply: the caller still waits one round trip. As with the
//! script's `pcall`, the announcement never fails the release; if it is lost (the connection
//! drops in between, or the user may not publish), waiters fall back to their timed retries,
//! which the holder's remaining time bounds. A waiter hears the release a moment after the key is
//! gone, never before.

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use redis::aio::ConnectionLike;

use crate::error::{Error, Result};
use crate::script::Reply;

// 0: not asked yet.
const NATIVE: u8 = 1;
const SCRIPT: u8 = 2;

/// Whether this store handle releases with `DELIFEQ`: detected once, shared by clones.
#[derive(Debug, Clone, Default)]
pub(crate) struct Native(Arc<AtomicU8>);

impl Native {
    /// Whether the server has `DELIFEQ`, asking it the first time (see the
    /// [module docs](self)).
    pub(crate) async fn delifeq<C: ConnectionLike + Send>(&self, con: &mut C) -> bool {
        match self.0.load(Ordering::Acquire) {
            NATIVE => true,
            SCRIPT => false,
            _not_asked => {
                let found = detect(con).await;
                // A connection error leaves it unknown: ask again next time.
                if let Some(found) = found {
                    self.0
                        .store(if found { NATIVE } else { SCRIPT }, Ordering::Release);
                }
                found == Some(true)
            }
        }
    }

    /// Use the script from now on.
    pub(crate) fn refused(&self) {
        self.0.store(SCRIPT, Ordering::Release);
    }
}

/// `COMMAND INFO DELIFEQ`: `Some(true)` when the server lists it, `Some(false)` when it does
/// not or refuses to say, `None` when no answer came.
async fn detect<C: ConnectionLike + Send>(con: &mut C) -> Option<bool> {
    let reply: redis::RedisResult<redis::Value> = redis::cmd("COMMAND")
        .arg("INFO")
        .arg("DELIFEQ")
        .query_async(con)
        .await;
    match reply {
        // One entry per name asked: the command's description, or nil for an unknown command.
        Ok(redis::Value::Array(items)) => Some(matches!(
            items.first(),
            Some(redis::Value::Array(info))
                if matches!(info.first(), Some(redis::Value::BulkString(name))
                    if name.eq_ignore_ascii_case(b"delifeq"))
        )),
        Ok(_) => Some(false),
        Err(e) if Error::from(e.clone()).is_unanswered() => None,
        Err(_) => Some(false),
    }
}

/// What a native release came to.
pub(crate) enum Released {
    /// The script's reply (or its error): the release is decided.
    Decided(Result<Reply>),
    /// The server refused the transaction before running any of it: send the script instead.
    Refused,
}

/// Run one native release of `lease` on `lock` (see the [module docs](self)), and announce it
/// on `channel` (with `publish`, `PUBLISH` or `SPUBLISH`) when it released. `spawn` sends the
/// announcement without waiting for it.
pub(crate) async fn release<C>(
    con: &mut C,
    lock: &str,
    lease: &str,
    channel: Option<&str>,
    publish: Option<&str>,
    spawn: impl FnOnce(std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>),
) -> Released
where
    C: ConnectionLike + Clone + Send + 'static,
{
    let mut pipe = redis::pipe();
    pipe.atomic()
        .ignore_errors()
        .cmd("DELIFEQ")
        .arg(lock)
        .arg(lease)
        .cmd("GET")
        .arg(lock);
    let reply: redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> =
        pipe.query_async(con).await;
    let refused = |e: &redis::RedisError| {
        // MULTI or a queued command refused (unknown command, NOPERM): EXEC aborted, nothing ran.
        matches!(e.code(), Some("EXECABORT") | Some("NOPERM"))
            || e.to_string().contains("EXECABORT")
    };
    let items = match reply {
        Ok(items) => items,
        Err(e) if refused(&e) => return Released::Refused,
        Err(e) => return Released::Decided(Err(e.into())),
    };
    let outcome = match (items.first(), items.get(1)) {
        (Some(Err(e)), _) if refused(e) => return Released::Refused,
        (Some(Ok(redis::Value::Int(1))), _) => {
            if let Some(channel) = channel {
                let mut con = con.clone();
                let channel = channel.to_owned();
                let sharded = publish == Some("SPUBLISH");
                spawn(Box::pin(async move {
                    announce(&mut con, &channel, sharded).await
                }));
            }
            Ok(Reply::Int(1))
        }
        (Some(Ok(redis::Value::Int(0))), Some(Ok(redis::Value::Nil))) => Ok(Reply::Int(-1)),
        (Some(Ok(redis::Value::Int(0))), Some(Ok(redis::Value::BulkString(value)))) => {
            if value.starts_with(b"tl1:") {
                Ok(Reply::Int(0))
            } else {
                Err(Error::from_reply(
                    "NOTLOCK",
                    "lock key holds a value that is not a tairlock lease",
                ))
            }
        }
        (Some(Err(e)), _) if e.code() == Some("WRONGTYPE") => Err(Error::from_reply(
            "WRONGTYPE",
            "lock key holds a value that is not a string",
        )),
        (Some(Err(e)), _) => Err(e.clone().into()),
        _ => Err(unexpected(&items)),
    };
    Released::Decided(outcome)
}

/// The release announcement: `SPUBLISH` (falling back to `PUBLISH` when refused, as the script)
/// or `PUBLISH`; a refusal or a lost reply is ignored.
async fn announce<C: ConnectionLike + Send>(con: &mut C, channel: &str, sharded: bool) {
    if sharded {
        let sent: redis::RedisResult<redis::Value> = redis::cmd("SPUBLISH")
            .arg(channel)
            .arg("released")
            .query_async(con)
            .await;
        if sent.is_ok() {
            return;
        }
    }
    let _: redis::RedisResult<redis::Value> = redis::cmd("PUBLISH")
        .arg(channel)
        .arg("released")
        .query_async(con)
        .await;
}

fn unexpected(replies: &[redis::RedisResult<redis::Value>]) -> Error {
    Error::new(
        crate::ErrorKind::Server,
        format!("unexpected reply to the native release (MULTI/DELIFEQ/GET/EXEC): {replies:?}"),
    )
}
