//! The deadline rule: the one place a holder's local deadline is computed.
//!
//! A lease is relied on until
//!
//! ```text
//! sent + remaining − drift(remaining)
//! ```
//!
//! - `sent` is when the request whose answer granted or renewed the lease was **first** sent. A
//!   repeat of an unanswered request (same nonce) is dated from the first send: the server may
//!   have applied it then.
//! - `remaining` is the time the lease has left **as that answer reports it**, worked out by the
//!   same script that granted or renewed: the `PX` it has just set on the key it wrote (the
//!   key's expiry then runs from a moment after the request was sent), the key's `PTTL` for a
//!   lease it found rather than wrote, or a sorted-set score − `TIME` — never a length the
//!   client assumes. A repeated acquire gets back the lease its first send made, with whatever
//!   time that lease has left (its `PTTL`); dating the length asked for from the repeat would
//!   trust the lease for as long as the outage lasted after the server let it go.
//! - `drift` allows for client and server clocks running at slightly different rates over the
//!   time relied on, and for the millisecond rounding of `PTTL`: 1% of `remaining` + 2 ms.
//!
//! [`Remaining`] is made only from a server's answer ([`Remaining::at`] for a script's reply,
//! [`Remaining::from_server_ms`] for an answer that is not a script's, such as a transaction's
//! `PTTL` or a grant announcement's length), and [`local_deadline`] takes nothing else: there is
//! no way to date a lease from a length the client asked for.

use std::time::Duration;

use tokio::time::Instant;

use crate::error::{Error, ErrorKind, Result};
use crate::script::{Reply, Script};

/// The longest lease accepted (ten years); longer is almost certainly a unit mistake. A server's
/// report of more time left than this is a malformed answer.
pub const MAX_TTL: Duration = Duration::from_secs(10 * 365 * 24 * 3600);

/// The clock drift allowed for by default, as a fraction of the time relied on.
pub const DRIFT_FACTOR: f64 = 0.01;

/// The drift allowance for relying on a lease for `time`: `time × factor + 2 ms`.
pub fn drift(time: Duration, factor: f64) -> Duration {
    time.mul_f64(factor.max(0.0)) + Duration::from_millis(2)
}

/// The time a lease has left, as a server's answer reported it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Remaining(Duration);

impl Remaining {
    /// Element `i` of `script`'s array reply: the milliseconds the lease it granted or renewed
    /// has left, read by the script from the server (`PTTL`, or a score − `TIME`).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Server`] when the element is missing, not an integer, negative (a key
    /// without a time to live, or none at all: no lease was granted), or longer than any lease.
    pub fn at(items: &[Reply], i: usize, script: &Script) -> Result<Remaining> {
        items
            .get(i)
            .and_then(Reply::as_int)
            .and_then(Remaining::from_server_ms)
            .ok_or_else(|| {
                Error::new(
                    ErrorKind::Server,
                    format!(
                        "{} returned no remaining lease time at position {i}",
                        script.name()
                    ),
                )
            })
    }

    /// Milliseconds a server's answer reported for a lease it granted or renewed (`PTTL` in a
    /// transaction, a grant announcement's length); `None` when negative (`PTTL`'s −1, no time
    /// to live, and −2, no key) or longer than any lease is ([`MAX_TTL`]: a malformed answer).
    pub fn from_server_ms(ms: i64) -> Option<Remaining> {
        u64::try_from(ms)
            .ok()
            .map(Duration::from_millis)
            .filter(|&left| left <= MAX_TTL)
            .map(Remaining)
    }

    /// The time left, as reported.
    pub fn get(self) -> Duration {
        self.0
    }

    /// The shorter of two reports (a quorum relies on its shortest lease).
    #[must_use]
    pub fn min(self, other: Remaining) -> Remaining {
        Remaining(self.0.min(other.0))
    }
}

/// The deadline rule: the local instant by which a lease must stop being relied on, when the
/// request whose answer reported `remaining` was first sent at `sent` — `sent + remaining −
/// (1% of remaining + 2 ms)`, never earlier than `sent`. Every lock kind's deadline is this.
pub fn local_deadline(sent: Instant, remaining: Remaining) -> Instant {
    local_deadline_with_drift(sent, remaining, DRIFT_FACTOR)
}

/// [`local_deadline`] for a lock kind whose drift allowance is configurable (Redlock's
/// [`drift_factor`](crate::redlock::RedlockOptions::drift_factor)): `factor` of `remaining`
/// + 2 ms, never less than the rule's 1%.
pub fn local_deadline_with_drift(sent: Instant, remaining: Remaining, factor: f64) -> Instant {
    let factor = factor.max(DRIFT_FACTOR);
    sent + remaining.0.saturating_sub(drift(remaining.0, factor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rule_is_the_reported_time_less_one_percent_and_two_milliseconds() {
        let sent = Instant::now();
        let ten = Remaining::from_server_ms(10_000).unwrap();
        assert_eq!(
            local_deadline(sent, ten),
            sent + Duration::from_millis(10_000 - 102)
        );
        let one = Remaining::from_server_ms(1).unwrap();
        assert_eq!(local_deadline(sent, one), sent, "never before it was sent");
    }

    #[test]
    fn only_a_non_negative_report_is_a_remaining_time() {
        assert_eq!(Remaining::from_server_ms(-1), None);
        assert_eq!(Remaining::from_server_ms(-2), None);
        assert_eq!(
            Remaining::from_server_ms(i64::MAX),
            None,
            "longer than any lease"
        );
        let longest = MAX_TTL.as_millis() as i64;
        assert_eq!(
            Remaining::from_server_ms(longest).map(Remaining::get),
            Some(MAX_TTL)
        );
        assert_eq!(Remaining::from_server_ms(longest + 1), None);
        assert_eq!(
            Remaining::from_server_ms(0).map(Remaining::get),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_larger_drift_may_be_asked_for_never_a_smaller_one() {
        let sent = Instant::now();
        let ten = Remaining::from_server_ms(10_000).unwrap();
        assert_eq!(
            local_deadline_with_drift(sent, ten, 0.05),
            sent + Duration::from_millis(10_000 - 502)
        );
        for smaller in [0.0, -1.0, f64::NAN] {
            assert_eq!(
                local_deadline_with_drift(sent, ten, smaller),
                local_deadline(sent, ten)
            );
        }
    }

    /// The audit of the whole class: no code of this crate dates a lease except through this
    /// module. It reads every source file under `src/` and refuses, outside this file, any use
    /// of a deadline function of the engine (the superseded `engine::local_deadline(sent, ttl)`,
    /// now removed), any drift applied by hand, and any instant computed as a send or start time
    /// plus something (`sent + ttl`: the length asked for, which a repeated
    /// request's lease no longer has). A lease is dated by [`local_deadline`] from a
    /// [`Remaining`] that only a server's answer makes.
    #[test]
    fn no_lease_in_this_crate_is_dated_but_by_the_rule() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        let mut dirs = vec![root.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        assert!(files.len() > 50, "the sources were found: {}", files.len());
        let mut offences = Vec::new();
        for path in &files {
            let name = path
                .strip_prefix(&root)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            if name == "deadline.rs" {
                continue;
            }
            let text = std::fs::read_to_string(path).unwrap();
            for (n, line) in text.lines().enumerate() {
                // Code only: comments and docs may name what is refused.
                let code = line.split("//").next().unwrap_or("");
                let superseded = code.contains("local_deadline")
                    && (code.contains("engine::") || code.contains("engine::{"));
                let by_hand = code.match_indices("drift(").any(|(at, _)| {
                    let before = code[..at].chars().next_back();
                    !before.is_some_and(|c| c.is_alphanumeric() || c == '_')
                        && !code[..at].ends_with("fn ")
                });
                let from_a_send = ["sent +", "start +", "sent.checked_add", "start.checked_add"]
                    .iter()
                    .any(|p| code.contains(p));
                if superseded || by_hand || from_a_send {
                    offences.push(format!("src/{name}:{}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(
            offences.is_empty(),
            "a deadline not dated by deadline::local_deadline from a server's answer:\n{}",
            offences.join("\n")
        );
    }

    #[test]
    fn a_reply_without_the_time_is_a_server_error() {
        let script = &crate::scripts::EXPIRE_LOCK;
        let items = [Reply::Int(1), Reply::data("x"), Reply::Int(1500)];
        assert_eq!(
            Remaining::at(&items, 2, script).unwrap().get(),
            Duration::from_millis(1500)
        );
        assert!(Remaining::at(&items, 1, script).is_err());
        assert!(Remaining::at(&items, 3, script).is_err());
        assert!(Remaining::at(&[Reply::Int(-1)], 0, script).is_err());
    }
}
