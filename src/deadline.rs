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
//! - `remaining` is the time the lease has left **as that answer reports it** (the key's `PTTL`,
//!   or a sorted-set score − `TIME`, read in the same script that granted or renewed), never the
//!   length that was asked for. A repeated acquire gets back the lease its first send made, with
//!   whatever time that lease has left; dating the length asked for from the repeat would trust
//!   the lease for as long as the outage lasted after the server let it go.
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
    /// [`ErrorKind::Server`] when the element is missing, not an integer, or negative (a key
    /// without a time to live, or none at all: no lease was granted).
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
    /// to live, and −2, no key).
    pub fn from_server_ms(ms: i64) -> Option<Remaining> {
        u64::try_from(ms)
            .ok()
            .map(|ms| Remaining(Duration::from_millis(ms)))
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
    sent + remaining.0.saturating_sub(drift(remaining.0, DRIFT_FACTOR))
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
            Remaining::from_server_ms(0).map(Remaining::get),
            Some(Duration::ZERO)
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
