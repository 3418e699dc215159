//! The deadline audit: at every grant a client accepts, its local deadline must not be later
//! than the moment the server lets that lease go, mapped to the client's clock conservatively.
//!
//! Right after an acquire returns a grant, the race reads where the lease stands on the server
//! ([`LEASE_END`], one read-only script: the lease's value or member, its `PTTL` or score, and
//! `TIME`, in one atomic step) and maps the server's end of the lease to the local clock from
//! above: the script ran before its reply came back, so the lease ends no later than
//!
//! ```text
//! receive time of the read + (end of the lease − TIME), both read by the script
//! ```
//!
//! where the end is the first server millisecond the lease is gone (a key lives through its
//! expiry's millisecond). A deadline later than that trusts a lease the server may already have
//! let go: a late deadline ([`Row::late_deadlines`](super::Row::late_deadlines)). On the
//! embedded store the read takes no time and its clock is the race's virtual clock, so the bound
//! is the lease's exact end; on a server it is later than the exact end by at most the read's
//! round trip, and never earlier: a late deadline there is late for certain (as long as the two
//! clocks run at the same rate over the lease).

use std::time::Duration;

use tairlock::store::memory::{CommandResult, Db};
use tairlock::{Reply, Script, Store};
use tokio::time::Instant;

use super::sim::Timer;

/// The audit's read of one lease; see the [module docs](self) and `lease_end.lua`.
pub static LEASE_END: Script = Script::new(
    "race_lease_end",
    include_str!("lease_end.lua"),
    lease_end_native,
);

/// Where the server keeps a holding's lease ([`Algorithm::lease_at`](super::Algorithm::lease_at)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LeaseAt {
    /// A string key whose value is the lease and whose TTL ends it: the lock key of an expire
    /// lock or a legacy lock, a writer's key.
    Value {
        /// The key.
        key: String,
        /// The value the holding wrote (or was granted).
        value: Vec<u8>,
    },
    /// A member of a sorted set whose score is the lease's last millisecond, server time: a
    /// reader of the scripted reader/writer lock, a semaphore's permit.
    Member {
        /// The sorted set.
        key: String,
        /// The member.
        member: Vec<u8>,
    },
}

/// Where a lease stood on the server, on the local clock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerEnd {
    /// On the server, ending no later than this instant.
    By(Instant),
    /// On the server without an end (no TTL): no deadline is late.
    Never,
    /// Not on the server any more when read; the instant is when the read's reply came back,
    /// so it ended (or was removed) before then.
    Gone(Instant),
}

impl ServerEnd {
    /// The latest instant the lease can end, if it ends: for [`Gone`](Self::Gone), the read's
    /// receive time.
    pub fn bound(self) -> Option<Instant> {
        match self {
            ServerEnd::By(at) | ServerEnd::Gone(at) => Some(at),
            ServerEnd::Never => None,
        }
    }

    /// The end of a lease held on several servers of which `quorum` must hold it (Redlock):
    /// the lock is held while `quorum` of them hold it, so it ends no later than the
    /// `quorum`-th latest of their ends.
    pub fn quorum(ends: &[ServerEnd], quorum: usize) -> ServerEnd {
        let mut bounds: Vec<Option<Instant>> = ends.iter().map(|e| e.bound()).collect();
        // `None` (never ends) sorts last: descending, it comes first.
        bounds.sort_by(|a, b| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, _) => std::cmp::Ordering::Less,
            (_, None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => b.cmp(a),
        });
        match bounds.get(quorum.max(1) - 1) {
            Some(Some(at)) => ServerEnd::By(*at),
            Some(None) => ServerEnd::Never,
            // Fewer servers than the quorum: it never held.
            None => ends
                .iter()
                .filter_map(|e| e.bound())
                .max()
                .map_or(ServerEnd::Never, ServerEnd::Gone),
        }
    }
}

/// Read where the lease at `at` stands on `store` (a store without the race's latency and
/// audit), and map it to the local clock of `timer`; see the [module docs](self).
///
/// # Errors
///
/// A store error, or a reply that is not the script's.
pub async fn read<S: Store>(store: &S, timer: &Timer, at: &LeaseAt) -> tairlock::Result<ServerEnd> {
    let (key, kind, item) = match at {
        LeaseAt::Value { key, value } => (key, "value", value),
        LeaseAt::Member { key, member } => (key, "member", member),
    };
    let item = String::from_utf8_lossy(item).into_owned();
    let reply = store
        .eval(
            &LEASE_END,
            std::slice::from_ref(key),
            &[kind.to_owned(), item],
        )
        .await?;
    let received = timer.instant();
    let bad = || tairlock::script::unexpected(&LEASE_END, &reply);
    let items = reply.as_array().ok_or_else(bad)?;
    let int = |i: usize| items.get(i).and_then(Reply::as_int).ok_or_else(bad);
    let (found, ends_ms, now_us) = (int(0)?, int(1)?, int(2)?);
    Ok(match (found, ends_ms) {
        (0, _) => ServerEnd::Gone(received),
        (_, -1) => ServerEnd::Never,
        _ => {
            let left_us = (ends_ms.saturating_mul(1000)).saturating_sub(now_us).max(0);
            ServerEnd::By(received + Duration::from_micros(left_us as u64))
        }
    })
}

/// The native body of [`LEASE_END`], exactly as `lease_end.lua`.
fn lease_end_native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (secs, micros) = db.time();
    let now_us = (secs * 1_000_000 + micros) as i64;
    let now_ms = now_us / 1000;
    let key = &keys[0];
    let key_type = db.key_type(key);
    let reply = |found: i64, ends: i64| {
        Ok(Reply::Array(vec![
            Reply::Int(found),
            Reply::Int(ends),
            Reply::Int(now_us),
        ]))
    };
    if args[0] == "value" {
        if key_type != "string" || db.get(key)?.as_deref() != Some(args[1].as_bytes()) {
            return reply(0, 0);
        }
        let pttl = db.pttl(key);
        if pttl < 0 {
            return reply(1, -1);
        }
        return reply(1, now_ms + pttl + 1);
    }
    if key_type != "zset" {
        return reply(0, 0);
    }
    let Some(score) = db.zscore(key, args[1].as_bytes())? else {
        return reply(0, 0);
    };
    let mut ends = score.floor() as i64 + 1;
    let pttl = db.pttl(key);
    if pttl >= 0 && now_ms + pttl + 1 < ends {
        ends = now_ms + pttl + 1;
    }
    reply(1, ends)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[test]
    fn a_quorum_ends_with_its_quorum_th_latest_server() {
        let (a, b, c) = (at(10), at(20), at(30));
        let ends = [ServerEnd::By(b), ServerEnd::Gone(a), ServerEnd::By(c)];
        assert_eq!(ServerEnd::quorum(&ends, 2), ServerEnd::By(b));
        assert_eq!(ServerEnd::quorum(&ends, 1), ServerEnd::By(c));
        assert_eq!(ServerEnd::quorum(&ends, 3), ServerEnd::By(a));
        let never = [ServerEnd::Never, ServerEnd::Never, ServerEnd::By(a)];
        assert_eq!(ServerEnd::quorum(&never, 2), ServerEnd::Never);
        assert_eq!(ServerEnd::quorum(&never, 3), ServerEnd::By(a));
    }
}
