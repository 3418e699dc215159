//! The native compare-and-delete: `DELIFEQ` (Valkey 9+) in place of the
//! [`EXPIRE_UNLOCK`](crate::scripts::EXPIRE_UNLOCK) script, where the server has it.
//!
//! # Detection
//!
//! Once per store handle (and its clones), before its first release: `COMMAND INFO DELIFEQ`.
//! The server's own command table decides, never a version string (Valkey reports
//! `redis_version:7.2.4`, and a server may rename or deny the command). A refused detection
//! (`COMMAND` renamed away or denied by an ACL) or an unexpected reply means the script; no
//! answer, or a transient refusal (a server loading its data, busy, in a failover), leaves it
//! unknown, to be asked again before the next release. When
//! `DELIFEQ` is refused later (after a failover to a server without it, or an ACL that denies it:
//! the refusal is answered before anything runs), that release is sent as the script, and the
//! store handle uses the script from then on.
//!
//! # One round trip for a release, the script's outcomes always
//!
//! `DELIFEQ lock lease` alone. Its `1` is the script's `1`: our lease was there and is deleted,
//! in one atomic step. Anything else — `0` (the key is absent, or holds another value) or an
//! error reply (`WRONGTYPE`) — deleted nothing, and the [`EXPIRE_UNLOCK`] script is then sent
//! to tell which of the script's outcomes it is: `-1` not held, `0` held by another lease, or
//! the `WRONGTYPE`/`NOTLOCK` refusal with the script's own message. The reply is then exactly
//! the script's, taken at the script's moment; the operation as a whole is a no-op followed by
//! the script, so it is atomic at that moment. (Our lease cannot reappear in between: it
//! carries a nonce that is never granted again once the lease has ended.) So a release of a held
//! lock is one `DELIFEQ`; the rare releases that find something else cost a second round trip.
//!
//! A refusal that only says "not now" — `READONLY`, `LOADING`, `BUSY`, `MASTERDOWN`,
//! `TRYAGAIN`, answered before anything ran, during a failover or while the server is busy or
//! loading — is returned as the transient error it is (the script would meet the same refusal),
//! for the caller to retry; it leaves the detection as it was, so the releases after the failover
//! are `DELIFEQ` again.
//!
//! The refusal to touch a user's data is structural: `DELIFEQ` deletes only a string equal to
//! the lease, and a lease always starts with `tl1:`, so a value that is not a lease never
//! matches, and `DELIFEQ` itself refuses a key of another type (`WRONGTYPE`); the script that
//! follows refuses the same keys, as it always does.
//!
//! # The announcement
//!
//! The script publishes on the release channel only when it deleted, in the same atomic step.
//! `DELIFEQ` cannot publish, so here the announcement (`PUBLISH`, or `SPUBLISH` as the script
//! would) is pipelined right behind it: one round trip carries both, the server runs them in
//! order, and the release returns only once both are answered. A waiter hears the release a
//! moment after the key is gone, never before, and never after the releasing process is gone.
//! (Sending the announcement in the background after `DELIFEQ`'s `1` lost it whenever the
//! releasing process exited at once, as `tairlock run` does: its waiters then slept until the
//! lease ran out.)
//!
//! The price of one round trip is that a native release that deletes nothing announces too:
//! waiters wake, try once, and find the lock free (their chance) or held (they wait again). Such
//! releases are rare (a lease already lost) and a spurious wake costs a waiter one attempt; a
//! lost announcement cost it the holder's whole remaining time. As with the script's `pcall`,
//! the announcement never fails the release: a refusal (`NOPERM`, the user may not publish) is
//! ignored, and a refused `SPUBLISH` falls back to `PUBLISH`.
//!
//! [`EXPIRE_UNLOCK`]: crate::scripts::EXPIRE_UNLOCK

use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};

use redis::aio::ConnectionLike;

use crate::error::Error;

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
        // No answer, or a server in the middle of a failover (`LOADING`, `BUSY`, ...): ask again.
        Err(e) if Error::from(e.clone()).is_transient() => None,
        Err(_) => Some(false),
    }
}

/// What a native release came to.
pub(crate) enum Outcome {
    /// `DELIFEQ` deleted our lease: the script's `1`.
    Deleted,
    /// Nothing was deleted; the script must tell which outcome it is.
    Script,
    /// No answer came: `DELIFEQ` may or may not have run.
    Unanswered(Error),
    /// Refused for now, before it ran (`READONLY`, `LOADING`, `BUSY`, `MASTERDOWN`,
    /// `TRYAGAIN`: a failover, a server busy or loading): nothing was deleted, and the script
    /// would be refused the same way. The caller retries, as after any transient error.
    Transient(Error),
}

/// Run one native release of `lease` on `lock` (see the [module docs](self)), with its
/// announcement on `channel` (with `publish`, `PUBLISH` or `SPUBLISH`) pipelined behind it.
pub(crate) async fn release<C>(
    native: &Native,
    con: &mut C,
    lock: &str,
    lease: &str,
    channel: Option<&str>,
    publish: Option<&str>,
) -> Outcome
where
    C: ConnectionLike + Send,
{
    let sharded = publish == Some("SPUBLISH");
    let mut pipe = redis::pipe();
    pipe.cmd("DELIFEQ").arg(lock).arg(lease);
    if let Some(channel) = channel {
        pipe.cmd(if sharded { "SPUBLISH" } else { "PUBLISH" })
            .arg(channel)
            .arg("released");
    }
    let replies: redis::RedisResult<Vec<redis::RedisResult<redis::Value>>> =
        pipe.ignore_errors().query_async(con).await;
    let replies = match replies {
        Ok(replies) => replies,
        Err(e) => {
            let error = Error::from(e);
            if error.is_unanswered() {
                return Outcome::Unanswered(error);
            }
            return Outcome::Script;
        }
    };
    let mut replies = replies.into_iter();
    let deleted = replies.next();
    // A refused SPUBLISH (a server without sharded pub/sub) is sent again as PUBLISH, as the
    // script does; any other refusal of the announcement is ignored.
    if let (Some(channel), Some(Err(_))) = (channel, replies.next())
        && sharded
    {
        announce(con, channel).await;
    }
    match deleted {
        Some(Ok(redis::Value::Int(1))) => Outcome::Deleted,
        Some(Ok(_)) | None => Outcome::Script,
        Some(Err(e)) => {
            let error = Error::from(e);
            if error.is_unanswered() {
                return Outcome::Unanswered(error);
            }
            // A server in the middle of a failover, loading or busy: this release fails for
            // now, the next one may use `DELIFEQ` again.
            if error.is_transient() {
                return Outcome::Transient(error);
            }
            // Refused before it ran: an unknown command (no longer the server detected) or
            // denied by an ACL. Not `WRONGTYPE`: that is a key's answer, not the server's.
            if error.code() != Some("WRONGTYPE") {
                native.refused();
            }
            Outcome::Script
        }
    }
}

/// The fallback announcement: `PUBLISH`; a refusal or a lost reply is ignored.
async fn announce<C: ConnectionLike + Send>(con: &mut C, channel: &str) {
    let _: redis::RedisResult<redis::Value> = redis::cmd("PUBLISH")
        .arg(channel)
        .arg("released")
        .query_async(con)
        .await;
}
