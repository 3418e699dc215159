//! Leases: the server-issued credential of a held lock.

use std::fmt;
use std::time::Duration;

use crate::deadline::{Remaining, local_deadline};
use crate::scripts::LEASE_PREFIX;

/// The credential of a held expire lock: the only way to unlock or renew it.
///
/// Stored as the lock key's value, `tl1:<expiry ms>:<fence>:<nonce>`:
/// - the expiry is the **server's** time (milliseconds since the epoch) at which the lock key
///   expires; no client clock is involved;
/// - the fencing token strictly increases per lock across acquisitions (see the crate docs,
///   "Fencing");
/// - the nonce is 128 random bits, fresh for every acquisition and renewal, so no two leases are
///   ever equal and a stale holder can never match a newer lease.
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    value: String,
    expires_at: Duration,
    fence: u64,
    nonce_at: usize,
    deadline: Option<tokio::time::Instant>,
    /// Handed over by a fair release's announcement and not confirmed yet: it lasts only the
    /// waiter lease, and its holder confirms it (a renewal to the full length) at once.
    unconfirmed: bool,
}

impl Lease {
    /// Parse a stored lease value; `None` if it is not one.
    pub fn parse(value: &str) -> Option<Lease> {
        let rest = value.strip_prefix(LEASE_PREFIX)?;
        let mut parts = rest.splitn(3, ':');
        let expiry: u64 = parts.next()?.parse().ok()?;
        let fence: u64 = parts.next()?.parse().ok()?;
        let nonce = parts.next()?;
        if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
            return None;
        }
        Some(Lease {
            value: value.to_owned(),
            expires_at: Duration::from_millis(expiry),
            fence,
            nonce_at: value.len() - nonce.len(),
            deadline: None,
            unconfirmed: false,
        })
    }

    /// This lease as the answer to a request first sent at `sent` granted or renewed it,
    /// reporting `remaining`: its deadline is the [deadline rule](crate::deadline)'s, and no
    /// other way to give a lease a deadline of its own exists (but [`renew_in_place`], which
    /// dates through this).
    ///
    /// [`renew_in_place`]: Self::renew_in_place
    pub(crate) fn dated(mut self, sent: tokio::time::Instant, remaining: Remaining) -> Self {
        self.deadline = Some(local_deadline(sent, remaining));
        self
    }

    /// This lease replaced by the renewal a script reports by its expiry only: the same fence,
    /// the new expiry and nonce (`tl1:<expiry>:<fence>:<nonce>`, built here rather than read
    /// back), [`dated`](Self::dated) from `sent` with `remaining`; written over this value's
    /// buffer (a batched watchdog renews many leases a second).
    pub(crate) fn renew_in_place(
        &mut self,
        expiry_ms: u64,
        nonce: &str,
        sent: tokio::time::Instant,
        remaining: Remaining,
    ) {
        crate::scripts::write_lease(&mut self.value, expiry_ms, self.fence, nonce);
        let value = std::mem::take(&mut self.value);
        *self = Lease {
            nonce_at: value.len() - nonce.len(),
            value,
            expires_at: Duration::from_millis(expiry_ms),
            fence: self.fence,
            deadline: None,
            unconfirmed: false,
        }
        .dated(sent, remaining);
    }

    /// This lease with `earlier`'s deadline, when it has one: a renewal that does not count yet
    /// (too few replicas acknowledged it) replaces the value but not the validity.
    pub(crate) fn with_deadline_of(mut self, earlier: &Lease) -> Self {
        if earlier.deadline.is_some() {
            self.deadline = earlier.deadline;
        }
        self
    }

    /// Mark as handed over by a grant announcement, not confirmed yet.
    pub(crate) fn unconfirmed(mut self) -> Self {
        self.unconfirmed = true;
        self
    }

    /// Whether this lease was handed over by a fair release's announcement and not confirmed
    /// yet (it lasts only the waiter lease until its holder renews it).
    pub(crate) fn is_unconfirmed(&self) -> bool {
        self.unconfirmed
    }

    /// The stored value, exactly.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// When the server will expire the lock, as server time since the epoch.
    pub fn expires_at(&self) -> Duration {
        self.expires_at
    }

    /// The fencing token: pass it to the resource you protect, and have the resource reject any
    /// token lower than the highest it has seen.
    pub fn fence(&self) -> u64 {
        self.fence
    }

    /// The random nonce (hex).
    pub fn nonce(&self) -> &str {
        &self.value[self.nonce_at..]
    }

    /// The local instant by which this client must stop relying on the lease: when the request
    /// whose answer granted or renewed it was first sent, plus the time the lease had left as
    /// that answer reported it, less a drift allowance (1% + 2 ms); see
    /// [`deadline`](crate::deadline). `None` for a lease read back by
    /// [`inspect`](crate::ExpireLock::inspect) rather than acquired here.
    pub fn deadline(&self) -> Option<tokio::time::Instant> {
        self.deadline
    }

    /// Time left before [`deadline`](Self::deadline), zero if passed, `None` if unknown.
    pub fn remaining(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.saturating_duration_since(tokio::time::Instant::now()))
    }
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The nonce is the credential: show only its first characters.
        let nonce = self.nonce();
        f.debug_struct("Lease")
            .field("expires_at_ms", &self.expires_at.as_millis())
            .field("fence", &self.fence)
            .field("nonce", &format_args!("{}…", &nonce[..nonce.len().min(6)]))
            .finish()
    }
}

/// A fresh 128-bit random nonce, as 32 hex digits.
pub fn new_nonce() -> String {
    nonce()
}

pub(crate) fn nonce() -> String {
    use std::fmt::Write as _;
    // Written into its final size at once (`format!` would grow it from nothing, twice).
    let mut nonce = String::with_capacity(32);
    let _ = write!(nonce, "{:032x}", rand::random::<u128>());
    nonce
}

/// A caller-chosen nonce becomes a lease's last field (and a queue member), which the lease
/// format carries only as hex digits ([`Lease::parse`]): anything else is refused before it is
/// sent, naming `what` it is.
pub(crate) fn check_nonce(nonce: &str, what: &str) -> crate::Result<()> {
    if nonce.is_empty() || !nonce.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(crate::Error::invalid(format!(
            "{what} must be hex digits (as `new_nonce` makes), not {nonce:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_renewed_in_place_is_the_renewal_dated_by_the_rule() {
        let sent = tokio::time::Instant::now();
        let remaining = Remaining::from_server_ms(2_999).unwrap();
        let mut lease = Lease::parse("tl1:1700000000123:42:00ff")
            .unwrap()
            .unconfirmed();
        lease.renew_in_place(1_700_000_003_000, "abcdef0123", sent, remaining);
        let expected = Lease::parse("tl1:1700000003000:42:abcdef0123")
            .unwrap()
            .dated(sent, remaining);
        assert!(lease == expected, "{lease:?} != {expected:?}");
        assert_eq!(lease.value(), "tl1:1700000003000:42:abcdef0123");
        assert_eq!(lease.nonce(), "abcdef0123");
        assert_eq!(lease.expires_at(), Duration::from_millis(1_700_000_003_000));
        assert_eq!(lease.deadline(), Some(local_deadline(sent, remaining)));
    }

    #[test]
    fn lease_parses_its_own_format() {
        let lease = Lease::parse("tl1:1700000000123:42:00ff").unwrap();
        assert_eq!(lease.expires_at(), Duration::from_millis(1_700_000_000_123));
        assert_eq!(lease.fence(), 42);
        assert_eq!(lease.nonce(), "00ff");
        assert_eq!(lease.value(), "tl1:1700000000123:42:00ff");
    }

    #[test]
    fn foreign_values_are_not_leases() {
        for v in [
            "",
            "hello",
            "tl1:",
            "tl1:1:2:",
            "tl1:x:2:ab",
            "tl1:1:2:zz",
            "1700000000",
        ] {
            assert!(Lease::parse(v).is_none(), "{v}");
        }
    }

    #[test]
    fn nonces_are_128_bit_hex_and_distinct() {
        let (a, b) = (nonce(), nonce());
        assert_eq!(a.len(), 32);
        assert!(a.bytes().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }

    #[test]
    fn a_renewed_lease_reads_back_as_itself() {
        let mut rotated = Lease::parse("tl1:1700000000123:42:00ff").unwrap();
        let remaining = Remaining::from_server_ms(3_000).unwrap();
        rotated.renew_in_place(
            1_700_000_003_123,
            "abcd",
            tokio::time::Instant::now(),
            remaining,
        );
        let read_back = Lease::parse(rotated.value()).unwrap();
        assert_eq!(read_back.deadline(), None);
        assert_eq!(read_back.expires_at(), rotated.expires_at());
        assert_eq!(read_back.value(), rotated.value());
        assert_eq!(rotated.value(), "tl1:1700000003123:42:abcd");
        assert_eq!((rotated.fence(), rotated.nonce()), (42, "abcd"));
    }

    #[test]
    fn debug_does_not_print_the_whole_nonce() {
        let lease = Lease::parse("tl1:1:2:0123456789abcdef").unwrap();
        assert!(!format!("{lease:?}").contains("0123456789abcdef"));
    }
}
