//! The legacy wire format: what every lock of this crate writes into the lock key, and the one
//! companion key the newer two add.
//!
//! # The lock key
//!
//! The key is exactly the name the user's existing code uses (`lock.orderid`, `locks:invoice:7`,
//! ...): no prefix, no hash tag is imposed. Its value is a bare decimal integer, the moment the
//! lock expires:
//!
//! ```text
//! value = now + timeout + 1        (in the configured Unit: seconds as in the original, or ms)
//! ```
//!
//! and the lock counts as expired once `now > value` (the jeffkit rule, strictly greater; the
//! old `SETNX` page said `value <= now`, see [`Unit`] and flaw F8 in the crate docs). Any client
//! that reads the key as an integer timestamp, old or new, understands it.
//!
//! Whether the key carries a server TTL tells who wrote it last: [`GetSetLock`] and the original
//! code never set one (`SETNX` and `GETSET` cannot, and `GETSET` even drops one), while
//! [`WatchLock`] and [`ScriptedLock`] always do. The newer locks use that to refuse deleting or
//! renewing a key an old client has rewritten.
//!
//! # The fence key
//!
//! [`WatchLock`] and [`ScriptedLock`] also keep the last fencing token issued for the lock in a
//! companion key, [`fence_key`]: `{K}:fence` for a key `K` without a hash tag, `K:fence` for one
//! that has a tag. Either way it lands in the lock key's Redis Cluster slot (for a key without a
//! tag, Redis hashes the whole key, and `{K}` makes the companion hash exactly `K`), so the two
//! can be read and written in one script or one `MULTI`. Old clients never touch it. It carries a
//! TTL of the lease plus a retention period, so nothing is kept for a lock nobody uses.
//!
//! [`GetSetLock`]: crate::GetSetLock
//! [`WatchLock`]: crate::WatchLock
//! [`ScriptedLock`]: crate::ScriptedLock

use std::time::Duration;

use tairlock::{Error, ErrorKind, Result, Ttl};

/// The longest lease accepted (ten years, as the core's `MAX_TTL`); longer is a unit mistake.
pub const MAX_LEASE: Duration = tairlock::MAX_TTL;

/// The unit of the stored timestamps.
///
/// All clients sharing a key must agree on it: a seconds client reads a millisecond value as a
/// date tens of thousands of years away (the lock never expires for it), and a millisecond
/// client reads a seconds value as a date in January 1970 (always expired).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Unit {
    /// Unix seconds, as the original pattern (the default). A lease of `t` seconds lasts between
    /// `t + 1` and `t + 2` seconds: `+ 1` and whole-second granularity.
    #[default]
    Seconds,
    /// Unix milliseconds.
    Millis,
}

impl Unit {
    /// One unit, as a duration.
    pub fn duration(self) -> Duration {
        match self {
            Unit::Seconds => Duration::from_secs(1),
            Unit::Millis => Duration::from_millis(1),
        }
    }

    /// Milliseconds per unit.
    pub fn millis(self) -> u64 {
        match self {
            Unit::Seconds => 1000,
            Unit::Millis => 1,
        }
    }

    /// A time since the epoch in whole units, rounded down (the `now` of the formula).
    pub fn floor(self, t: Duration) -> u64 {
        (t.as_millis() / u128::from(self.millis())) as u64
    }

    /// A lease length in whole units, rounded up (the `timeout` of the formula).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for a zero lease or one over [`MAX_LEASE`].
    pub fn timeout(self, lease: Duration) -> Result<u64> {
        if lease.is_zero() {
            return Err(Error::new(ErrorKind::InvalidInput, "lease is zero"));
        }
        if lease > MAX_LEASE {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("lease {lease:?} is longer than the maximum of {MAX_LEASE:?}"),
            ));
        }
        Ok(lease.as_micros().div_ceil(self.duration().as_micros()) as u64)
    }

    /// The stored value for a lock taken at `now` for `timeout` units: `now + timeout + 1`.
    pub fn value(self, now: Duration, timeout: u64) -> u64 {
        self.floor(now) + timeout + 1
    }

    /// Whether `value` has expired at `now`: `now > value`, in whole units.
    pub fn is_expired(self, value: u64, now: Duration) -> bool {
        self.floor(now) > value
    }

    /// The moment `value` expires, since the epoch: the start of unit `value + 1`.
    pub fn expires_at(self, value: u64) -> Duration {
        Duration::from_millis(value.saturating_add(1).saturating_mul(self.millis()))
    }

    /// How long `value` has left at `now` (zero once expired).
    pub fn remaining(self, value: u64, now: Duration) -> Duration {
        self.expires_at(value).saturating_sub(now)
    }
}

/// Whether an existing lock key holding `value`, with time to live `ttl`, is still held at
/// `now` (by the clock that judges: the server's, or the client's in
/// [`Profile::Classic`](crate::Profile::Classic)), and for how long: `None` when it is free to
/// take. The one rule of [`WatchLock`](crate::WatchLock) and
/// [`ScriptedLock`](crate::ScriptedLock) (whose script follows it line for line):
///
/// - a key with a TTL was written by one of them: it is held while it exists, for its TTL. Its
///   timestamp is not consulted: the two can disagree by a millisecond (inside a script, Redis
///   judges expiry by the script's start time, while the timestamp is judged by the `TIME` the
///   script reads later), and taking over a key whose timestamp has passed but whose TTL has not
///   would overwrite a lease its holder still relies on;
/// - a key without a TTL was written by an old client (`SETNX` cannot set one, `GETSET` drops
///   it): judged by its timestamp, held while `now <= value`, until the timestamp passes;
/// - a key that is gone (it expired between two reads) is free.
///
/// `unit_ms` is the milliseconds per unit of `value` ([`Unit::millis`]; the scripts take it as
/// an argument).
pub(crate) fn held_for(value: u64, ttl: Ttl, unit_ms: u64, now: Duration) -> Option<Duration> {
    match ttl {
        Ttl::Missing => None,
        Ttl::Expires(left) => Some(left),
        Ttl::Persistent => {
            // Expired iff now > value in whole units: held until the start of unit value + 1.
            let ends_ms = (u128::from(value) + 1) * u128::from(unit_ms.max(1));
            let left = ends_ms.checked_sub(now.as_millis()).filter(|ms| *ms > 0)?;
            Some(Duration::from_millis(left.min(u128::from(u64::MAX)) as u64))
        }
    }
}

/// Parse a stored lock value: a decimal integer (`^[0-9]+$`, as the scripts match it).
///
/// `None` for anything else: a user's string, a corrupt value, a negative number. The locks of
/// this crate never treat such a value as an expired lock (flaw F8 of the original): they report
/// [`ErrorKind::WrongType`] and write nothing.
pub fn parse_value(raw: &[u8]) -> Option<u64> {
    if raw.is_empty() || raw.len() > 19 || !raw.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(raw).ok()?.parse().ok()
}

/// The error for a lock key that holds something other than a timestamp.
pub(crate) fn not_a_timestamp(key: &str) -> Error {
    Error::new(
        ErrorKind::WrongType,
        format!("NOTLOCK key {key:?} holds a value that is not a legacy lock timestamp"),
    )
}

/// The fence key of lock key `key`; see the [module docs](self).
///
/// ```
/// use tairlock_legacy::wire::fence_key;
///
/// assert_eq!(fence_key("lock.orderid"), "{lock.orderid}:fence");
/// assert_eq!(fence_key("locks:{order}:7"), "locks:{order}:7:fence");
/// ```
///
/// A key without a valid tag that contains `}` (e.g. `a}b`, `x{}y`) cannot be wrapped without
/// changing its slot; its fence key is `K:fence`, which is correct on a single server but lands
/// in another slot on a Redis Cluster (where the scripts then fail with `CROSSSLOT`).
pub fn fence_key(key: &str) -> String {
    tairlock::keys::companion_key(key, ":fence")
}

/// Check a lock key: not empty.
pub(crate) fn validate_key(key: &str) -> Result<()> {
    if key.is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput, "lock key is empty"));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use tairlock::slot::hash_tag;

    use super::*;

    #[test]
    fn value_is_now_plus_timeout_plus_one_and_expires_strictly_after() {
        let now = Duration::from_millis(100_400);
        assert_eq!(Unit::Seconds.value(now, 10), 111);
        assert!(!Unit::Seconds.is_expired(111, Duration::from_millis(111_999)));
        assert!(Unit::Seconds.is_expired(111, Duration::from_millis(112_000)));
        assert_eq!(Unit::Seconds.expires_at(111), Duration::from_secs(112));
        assert_eq!(Unit::Millis.value(now, 50), 100_451);
        assert_eq!(
            Unit::Millis.remaining(100_451, now),
            Duration::from_millis(52)
        );
    }

    #[test]
    fn a_key_with_a_ttl_is_held_while_it_exists_and_only_an_old_clients_by_its_timestamp() {
        let now = Duration::from_millis(112_000);
        // The timestamp 111 has passed at 112 s; with a TTL the key is held all the same.
        let left = Duration::from_millis(1);
        assert_eq!(held_for(111, Ttl::Expires(left), 1000, now), Some(left));
        assert_eq!(held_for(111, Ttl::Persistent, 1000, now), None);
        assert_eq!(
            held_for(112, Ttl::Persistent, 1000, now),
            Some(Duration::from_secs(1))
        );
        assert_eq!(held_for(111_999, Ttl::Persistent, 1, now), None);
        assert_eq!(
            held_for(112_000, Ttl::Persistent, 1, now),
            Some(Duration::from_millis(1))
        );
        assert_eq!(held_for(200, Ttl::Missing, 1000, now), None);
    }

    #[test]
    fn timeouts_round_up_to_whole_units() {
        assert_eq!(Unit::Seconds.timeout(Duration::from_millis(1)).unwrap(), 1);
        assert_eq!(
            Unit::Seconds.timeout(Duration::from_millis(1500)).unwrap(),
            2
        );
        assert_eq!(
            Unit::Millis.timeout(Duration::from_micros(1500)).unwrap(),
            2
        );
        assert!(Unit::Millis.timeout(Duration::ZERO).is_err());
        assert!(Unit::Seconds.timeout(Duration::MAX).is_err());
    }

    #[test]
    fn only_plain_decimal_integers_are_values() {
        assert_eq!(parse_value(b"1700000000"), Some(1_700_000_000));
        assert_eq!(parse_value(b"007"), Some(7));
        for bad in [
            &b""[..],
            b"-1",
            b"+1",
            b"1.5",
            b"abc",
            b" 1",
            b"99999999999999999999",
        ] {
            assert_eq!(parse_value(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn fence_keys_share_the_lock_keys_slot() {
        for key in ["lock.orderid", "a{b", "locks:{order}:7", "x"] {
            assert_eq!(hash_tag(&fence_key(key)), hash_tag(key), "{key}");
        }
        assert_eq!(fence_key("a}b"), "a}b:fence");
    }
}
