//! What the locks report while they work: `tracing` spans and events (feature `tracing`, on by
//! default) and `metrics` counters and histograms (feature `metrics`, off by default). With a
//! feature off its calls compile to nothing.
//!
//! The lock kinds call these helpers at one place each: the [engine](crate::engine) for every
//! acquisition ([`Acquisition`]), [`Liveness`](crate::guard::Liveness) for every held lease
//! ([`Hold`]: renewals, loss, release), and the notifier when a waiter falls back to polling.
//! They are public so that lock kinds in other crates report the same way.
//!
//! # Events
//!
//! | level | message | fields |
//! |---|---|---|
//! | `trace` | `attempt refused` | `kind`, `lock`, `remaining` |
//! | `debug` | `acquired` | `kind`, `lock`, `fence`, `waited`, `handoff` (after a release notification) |
//! | `debug` | `not acquired` | `kind`, `lock`, `outcome` (`busy`, `timed_out`, `cancelled`), `waited` |
//! | `debug` | `acquire failed` | `kind`, `lock`, `waited`, `error` |
//! | `debug` | `lease renewed` | `kind`, `lock`, `fence` |
//! | `warn` | `lease renewal failed` | `kind`, `lock`, `fence`, `error`, `unanswered` (it may have been applied; repeated with the same nonce) |
//! | `warn` | `lease lost` | `kind`, `lock`, `fence`, `reason`, `held` |
//! | `debug` | `released` | `kind`, `lock`, `fence`, `outcome` (`released`, `not_held`), `background`, `held` |
//! | `debug` | `release failed` | `kind`, `lock`, `fence`, `error`, `held` (the caller gets the error) |
//! | `warn` | `release failed in the background; the lease runs out by itself` | `kind`, `lock`, `fence`, `error`, `held` (a dropped guard's release) |
//! | `warn` | `release notifications unavailable, waiting by polling` | `channel`, `reason` (at most once a minute; `debug` in between) |
//!
//! Acquisitions run inside an `acquire` span (`kind`, `lock`; `debug` level), each sleep between
//! attempts inside a `wait` span (`longest`; `trace` level) within it: a subscriber that
//! records span timings (`tracing-subscriber`'s `with_span_events(FmtSpan::CLOSE)`) shows how
//! long each took. The events' target is `tairlock::observe`.
//!
//! Nothing reports a nonce, a password or a URL; metrics are labelled by lock kind, never by
//! lock name (cardinality).
//!
//! # Metrics
//!
//! See [`metrics`] for the names, units and labels.

use std::fmt;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::Error;

pub mod metrics;

/// A tracing span, or nothing without the `tracing` feature.
#[cfg(feature = "tracing")]
pub type Span = tracing::Span;

/// A tracing span, or nothing without the `tracing` feature.
#[cfg(not(feature = "tracing"))]
#[derive(Debug, Clone, Default)]
pub struct Span;

/// Run `fut` inside `span` (just `fut` without the `tracing` feature).
///
/// # Cancel safety
///
/// As cancel safe as `fut`: dropping it drops `fut`.
pub async fn in_span<F: Future>(span: &Span, fut: F) -> F::Output {
    #[cfg(feature = "tracing")]
    {
        use tracing::Instrument;
        fut.instrument(span.clone()).await
    }
    #[cfg(not(feature = "tracing"))]
    {
        let _ = span;
        fut.await
    }
}

/// How an acquisition ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AcquireOutcome {
    /// Got the lock.
    Acquired,
    /// A single attempt found it held.
    Busy,
    /// Waited, and the patience ran out.
    TimedOut,
    /// Returned an error.
    Error,
    /// Dropped before it finished.
    Cancelled,
}

impl AcquireOutcome {
    /// The label value: `acquired`, `busy`, `timed_out`, `error`, `cancelled`.
    pub fn as_str(self) -> &'static str {
        match self {
            AcquireOutcome::Acquired => "acquired",
            AcquireOutcome::Busy => "busy",
            AcquireOutcome::TimedOut => "timed_out",
            AcquireOutcome::Error => "error",
            AcquireOutcome::Cancelled => "cancelled",
        }
    }
}

/// One acquisition, from the call to its outcome: the `acquire` span, the outcome event, the
/// acquisition counter and the wait histogram. Dropped unfinished, it counts as cancelled.
#[derive(Debug)]
pub struct Acquisition {
    kind: &'static str,
    #[cfg(feature = "tracing")]
    name: String,
    span: Span,
    started: Instant,
    /// When the last release notification woke this waiter (cleared by a wake-up without one).
    woken: Option<Instant>,
    done: bool,
}

impl Acquisition {
    /// An acquisition of `name`, a lock of `kind` (a label such as `expire`), starting now.
    pub fn start(kind: &'static str, name: &str) -> Self {
        #[cfg(feature = "tracing")]
        let span = tracing::debug_span!("acquire", %kind, lock = %name);
        #[cfg(not(feature = "tracing"))]
        let span = {
            let _ = name;
            Span
        };
        Acquisition {
            kind,
            #[cfg(feature = "tracing")]
            name: name.to_owned(),
            span,
            started: Instant::now(),
            woken: None,
            done: false,
        }
    }

    /// The `acquire` span.
    pub fn span(&self) -> &Span {
        &self.span
    }

    /// An attempt found the lock held (for `remaining`, when the server said).
    pub fn refused(&self, remaining: Option<Duration>) {
        #[cfg(feature = "tracing")]
        tracing::trace!(kind = %self.kind, lock = %self.name, ?remaining, "attempt refused");
        #[cfg(not(feature = "tracing"))]
        let _ = remaining;
    }

    /// A `wait` span (`trace` level, inside the `acquire` span) for one sleep between attempts
    /// of at most `longest`.
    pub fn wait_span(&self, longest: Duration) -> Span {
        #[cfg(feature = "tracing")]
        {
            tracing::trace_span!(parent: &self.span, "wait", ?longest)
        }
        #[cfg(not(feature = "tracing"))]
        {
            let _ = longest;
            Span
        }
    }

    /// The waiter woke: by a release notification (`notified`), or at the end of a sleep.
    pub fn woke(&mut self, notified: bool) {
        self.woken = notified.then(Instant::now);
    }

    /// Acquired, with the fencing token `fence` when the kind has one.
    pub fn acquired(mut self, fence: Option<u64>) {
        self.done = true;
        let waited = self.started.elapsed();
        let handoff = self.woken.map(|at| at.elapsed());
        #[cfg(feature = "tracing")]
        tracing::debug!(
            kind = %self.kind,
            lock = %self.name,
            fence,
            ?waited,
            handoff = handoff.map(tracing::field::debug),
            "acquired"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = fence;
        metrics::acquisition(self.kind, AcquireOutcome::Acquired, waited);
        if let Some(handoff) = handoff {
            metrics::handoff(self.kind, handoff);
        }
    }

    /// Not acquired: `Busy` or `TimedOut`.
    pub fn not_acquired(mut self, outcome: AcquireOutcome) {
        self.done = true;
        self.end(outcome);
    }

    /// Returned `error`.
    pub fn failed(mut self, error: &Error) {
        self.done = true;
        let waited = self.started.elapsed();
        #[cfg(feature = "tracing")]
        tracing::debug!(kind = %self.kind, lock = %self.name, ?waited, error = %error, "acquire failed");
        #[cfg(not(feature = "tracing"))]
        let _ = error;
        metrics::acquisition(self.kind, AcquireOutcome::Error, waited);
    }

    fn end(&self, outcome: AcquireOutcome) {
        let waited = self.started.elapsed();
        #[cfg(feature = "tracing")]
        tracing::debug!(
            kind = %self.kind,
            lock = %self.name,
            outcome = %outcome.as_str(),
            ?waited,
            "not acquired"
        );
        metrics::acquisition(self.kind, outcome, waited);
    }
}

impl Drop for Acquisition {
    fn drop(&mut self) {
        if !self.done {
            self.end(AcquireOutcome::Cancelled);
        }
    }
}

/// Why a lease was lost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loss {
    /// A renewal found the lease gone: it expired, or was deleted (a force-unlock).
    Gone,
    /// A renewal found the lock held by someone else.
    HeldByOther,
    /// A renewal was answered only after the lease's local deadline.
    Late,
    /// No renewal was answered before the lease's local deadline.
    Deadline,
}

impl Loss {
    /// The label value: `gone`, `held_by_other`, `late`, `deadline`.
    pub fn as_str(self) -> &'static str {
        match self {
            Loss::Gone => "gone",
            Loss::HeldByOther => "held_by_other",
            Loss::Late => "late",
            Loss::Deadline => "deadline",
        }
    }

    /// Whether a renewal's answer said so (rather than a passed deadline).
    fn answered(self) -> bool {
        self != Loss::Deadline
    }
}

impl fmt::Display for Loss {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Loss::Gone => "a renewal found the lease gone: it expired or was deleted",
            Loss::HeldByOther => "a renewal found the lock held by someone else",
            Loss::Late => "a renewal was answered only after the lease's local deadline",
            Loss::Deadline => "no renewal was answered before the lease's local deadline",
        })
    }
}

/// How a release ended, for [`Hold::released`].
#[derive(Debug, Clone, Copy)]
pub enum ReleaseOutcome<'a> {
    /// The lease was given back.
    Released,
    /// Nothing to give back: the lease was gone (or someone else held the lock).
    NotHeld,
    /// The release failed; the lease runs out by itself.
    Failed(&'a Error),
}

impl ReleaseOutcome<'_> {
    /// The label value: `released`, `not_held`, `error`.
    pub fn as_str(self) -> &'static str {
        match self {
            ReleaseOutcome::Released => "released",
            ReleaseOutcome::NotHeld => "not_held",
            ReleaseOutcome::Failed(_) => "error",
        }
    }
}

/// One held lease, for its renewals, loss and release: its kind, lock name, fencing token and
/// when it was acquired. [`Liveness`](crate::guard::Liveness) keeps one.
#[derive(Debug, Clone)]
pub struct Hold {
    kind: &'static str,
    #[cfg(feature = "tracing")]
    name: String,
    #[cfg(feature = "tracing")]
    fence: Option<u64>,
    since: Instant,
}

impl Default for Hold {
    fn default() -> Self {
        Hold::new("lock", "", None)
    }
}

impl Hold {
    /// A lease on `name`, a lock of `kind`, with fencing token `fence`, held from now.
    pub fn new(kind: &'static str, name: &str, fence: Option<u64>) -> Self {
        #[cfg(not(feature = "tracing"))]
        let _ = (name, fence);
        Hold {
            kind,
            #[cfg(feature = "tracing")]
            name: name.to_owned(),
            #[cfg(feature = "tracing")]
            fence,
            since: Instant::now(),
        }
    }

    /// The lock kind's label.
    pub fn kind(&self) -> &'static str {
        self.kind
    }

    /// A renewal landed in time.
    pub fn renewed(&self) {
        #[cfg(feature = "tracing")]
        tracing::debug!(kind = %self.kind, lock = %self.name, fence = self.fence, "lease renewed");
        metrics::renewal(self.kind, "renewed");
    }

    /// A renewal got `error`; `unanswered` when no reply came (it may have been applied, and is
    /// repeated with the same nonce).
    pub fn renewal_failed(&self, error: &Error) {
        #[cfg(feature = "tracing")]
        tracing::warn!(
            kind = %self.kind,
            lock = %self.name,
            fence = self.fence,
            error = %error,
            unanswered = error.is_unanswered(),
            "lease renewal failed"
        );
        #[cfg(not(feature = "tracing"))]
        let _ = error;
        metrics::renewal(self.kind, "error");
    }

    /// The lease is lost, for `reason` (called once per lease).
    pub fn lost(&self, reason: Loss) {
        let held = self.since.elapsed();
        #[cfg(feature = "tracing")]
        tracing::warn!(
            kind = %self.kind,
            lock = %self.name,
            fence = self.fence,
            reason = %reason,
            ?held,
            "lease lost"
        );
        let _ = held;
        if reason.answered() {
            metrics::renewal(self.kind, "lost");
        }
        metrics::lost(self.kind, reason);
    }

    /// The release ended with `outcome`; `background` when nobody waits for it (a dropped guard).
    pub fn released(&self, outcome: ReleaseOutcome<'_>, background: bool) {
        let held = self.since.elapsed();
        #[cfg(feature = "tracing")]
        match outcome {
            ReleaseOutcome::Failed(error) if background => tracing::warn!(
                kind = %self.kind,
                lock = %self.name,
                fence = self.fence,
                error = %error,
                ?held,
                "release failed in the background; the lease runs out by itself"
            ),
            ReleaseOutcome::Failed(error) => tracing::debug!(
                kind = %self.kind,
                lock = %self.name,
                fence = self.fence,
                error = %error,
                ?held,
                "release failed"
            ),
            _ => tracing::debug!(
                kind = %self.kind,
                lock = %self.name,
                fence = self.fence,
                outcome = %outcome.as_str(),
                background,
                ?held,
                "released"
            ),
        }
        #[cfg(not(feature = "tracing"))]
        let _ = background;
        metrics::release(self.kind, outcome, held);
    }
}

/// The warning that a waiter falls back to polling, at most once a minute (`debug` in between).
const FALLBACK_WARN_EVERY: Duration = Duration::from_secs(60);

/// A waiter on `channel` waits by polling: its subscription failed, was refused or is late
/// (`reason`).
pub fn fallback_to_polling(channel: &str, reason: &dyn fmt::Display) {
    #[cfg(feature = "tracing")]
    {
        static LAST: parking_lot::Mutex<Option<std::time::Instant>> = parking_lot::Mutex::new(None);
        let warn = {
            let mut last = LAST.lock();
            let due = last.is_none_or(|at| at.elapsed() >= FALLBACK_WARN_EVERY);
            if due {
                *last = Some(std::time::Instant::now());
            }
            due
        };
        if warn {
            tracing::warn!(%channel, reason = %reason, "release notifications unavailable, waiting by polling");
        } else {
            tracing::debug!(%channel, reason = %reason, "release notifications unavailable, waiting by polling");
        }
    }
    #[cfg(not(feature = "tracing"))]
    let _ = (channel, reason, FALLBACK_WARN_EVERY);
    metrics::fallback();
}
