//! The metrics, through the `metrics` facade (feature `metrics`; without it nothing is recorded
//! and these calls compile to nothing). Install any `metrics` recorder (a Prometheus exporter,
//! ...) and call [`describe`] once to give them their descriptions and units.
//!
//! Every metric has the label `kind`: the lock kind (`expire`, `fair`, `redlock`, `read`,
//! `write`, `legacy`, ...), never the lock's name, so the number of series stays small.
//!
//! | name | type | unit | labels | meaning |
//! |---|---|---|---|---|
//! | `tairlock_acquisitions_total` | counter | | `kind`, `outcome` | acquisitions by outcome: `acquired`, `busy` (a single attempt found it held), `timed_out`, `error`, `cancelled` |
//! | `tairlock_acquire_wait_seconds` | histogram | seconds | `kind`, `outcome` | from the acquire call to its outcome |
//! | `tairlock_handoff_seconds` | histogram | seconds | `kind` | from the release notification that woke a waiter to its grant |
//! | `tairlock_renewals_total` | counter | | `kind`, `outcome` | renewals by outcome: `renewed`, `error` (no answer or an error reply; tried again), `lost` (the answer said the lease is gone, or came too late) |
//! | `tairlock_leases_lost_total` | counter | | `kind`, `reason` | leases lost while held: `gone`, `held_by_other`, `late`, `deadline` |
//! | `tairlock_hold_seconds` | histogram | seconds | `kind` | from the grant to the release (also of a lease lost meanwhile) |
//! | `tairlock_releases_total` | counter | | `kind`, `outcome` | releases of guards by outcome: `released`, `not_held`, `error` |
//! | `tairlock_notify_fallbacks_total` | counter | | | waits that fell back to polling: the release channel's subscription failed, was refused or was late |

use std::time::Duration;

use super::{AcquireOutcome, Loss, ReleaseOutcome};

/// Acquisitions by kind and outcome (counter).
pub const ACQUISITIONS: &str = "tairlock_acquisitions_total";
/// From the acquire call to its outcome, by kind and outcome (histogram, seconds).
pub const ACQUIRE_WAIT: &str = "tairlock_acquire_wait_seconds";
/// From the release notification that woke a waiter to its grant, by kind (histogram, seconds).
pub const HANDOFF: &str = "tairlock_handoff_seconds";
/// Renewals by kind and outcome (counter).
pub const RENEWALS: &str = "tairlock_renewals_total";
/// Leases lost while held, by kind and reason (counter).
pub const LEASES_LOST: &str = "tairlock_leases_lost_total";
/// From the grant to the release, by kind (histogram, seconds).
pub const HOLD: &str = "tairlock_hold_seconds";
/// Releases of guards by kind and outcome (counter).
pub const RELEASES: &str = "tairlock_releases_total";
/// Waits that fell back from release notifications to polling (counter).
pub const NOTIFY_FALLBACKS: &str = "tairlock_notify_fallbacks_total";

/// Give the installed recorder every metric's description and unit (call it once, after
/// installing the recorder). Does nothing without the `metrics` feature.
pub fn describe() {
    #[cfg(feature = "metrics")]
    {
        use ::metrics::{Unit, describe_counter, describe_histogram};
        describe_counter!(ACQUISITIONS, "lock acquisitions by outcome");
        describe_histogram!(
            ACQUIRE_WAIT,
            Unit::Seconds,
            "time from an acquire call to its outcome"
        );
        describe_histogram!(
            HANDOFF,
            Unit::Seconds,
            "time from the release notification that woke a waiter to its grant"
        );
        describe_counter!(RENEWALS, "lease renewals by outcome");
        describe_counter!(LEASES_LOST, "leases lost while held, by reason");
        describe_histogram!(HOLD, Unit::Seconds, "time from a grant to its release");
        describe_counter!(RELEASES, "releases by outcome");
        describe_counter!(
            NOTIFY_FALLBACKS,
            "waits that fell back from release notifications to polling"
        );
    }
}

pub(super) fn acquisition(kind: &'static str, outcome: AcquireOutcome, waited: Duration) {
    #[cfg(feature = "metrics")]
    {
        let outcome = outcome.as_str();
        ::metrics::counter!(ACQUISITIONS, "kind" => kind, "outcome" => outcome).increment(1);
        ::metrics::histogram!(ACQUIRE_WAIT, "kind" => kind, "outcome" => outcome)
            .record(waited.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, outcome, waited);
}

pub(super) fn handoff(kind: &'static str, took: Duration) {
    #[cfg(feature = "metrics")]
    ::metrics::histogram!(HANDOFF, "kind" => kind).record(took.as_secs_f64());
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, took);
}

pub(super) fn renewal(kind: &'static str, outcome: &'static str) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(RENEWALS, "kind" => kind, "outcome" => outcome).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, outcome);
}

pub(super) fn lost(kind: &'static str, reason: Loss) {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(LEASES_LOST, "kind" => kind, "reason" => reason.as_str()).increment(1);
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, reason);
}

pub(super) fn release(kind: &'static str, outcome: ReleaseOutcome<'_>, held: Duration) {
    #[cfg(feature = "metrics")]
    {
        ::metrics::counter!(RELEASES, "kind" => kind, "outcome" => outcome.as_str()).increment(1);
        ::metrics::histogram!(HOLD, "kind" => kind).record(held.as_secs_f64());
    }
    #[cfg(not(feature = "metrics"))]
    let _ = (kind, outcome, held);
}

pub(super) fn fallback() {
    #[cfg(feature = "metrics")]
    ::metrics::counter!(NOTIFY_FALLBACKS).increment(1);
}
