//! Scenarios: what the race does to its clients, and where.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand::rngs::StdRng;

/// A scenario of `tairlock race`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scenario {
    /// Clients pause for less than the lease, often so that they finish near its end (GC
    /// hiccups, slow replies). A correct lease lock shows no overlap here.
    ShortStalls,
    /// Clients pause for longer than the lease, inside the critical section too: every lease
    /// lock overlaps here, and only fencing keeps the resource consistent.
    LongStalls,
    /// Clients die at random points of acquire, the critical section and release.
    Crashes,
    /// Client clocks disagree by up to 1.5 leases (only client-clock recipes care).
    ClockSkew,
    /// A client's network drops the replies of its acquires for a while (a fifth to four
    /// fifths of the lease, longer than any retry), though the store applied them; then it
    /// heals. A client that rides the errors and repeats its acquire with the same nonce gets
    /// back the lease its first, unanswered attempt took, with only what is left of it.
    ReplyOutages,
}

impl Scenario {
    /// Every scenario, in table order.
    pub const ALL: [Scenario; 5] = [
        Scenario::ShortStalls,
        Scenario::LongStalls,
        Scenario::Crashes,
        Scenario::ClockSkew,
        Scenario::ReplyOutages,
    ];

    /// The name used on the command line and in the table.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::ShortStalls => "short-stalls",
            Scenario::LongStalls => "long-stalls",
            Scenario::Crashes => "crashes",
            Scenario::ClockSkew => "clock-skew",
            Scenario::ReplyOutages => "reply-outages",
        }
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scenario {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Scenario::ALL
            .into_iter()
            .find(|sc| sc.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = Scenario::ALL.iter().map(|s| s.name()).collect();
                format!(
                    "unknown scenario {s:?}; expected one of {}",
                    names.join(", ")
                )
            })
    }
}

/// What happens to a client at one point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Nothing.
    Go,
    /// Stall this long.
    Stall(Duration),
    /// Die here.
    Crash,
}

/// A scenario applied with one lease length: the probabilities and lengths of stalls and
/// crashes, at protocol points and inside the critical section.
#[derive(Debug, Clone)]
pub struct Plan {
    pub(crate) scenario: Scenario,
    pub(crate) lease: Duration,
    /// Simulated network round trip (embedded store only): uniform in this range.
    pub(crate) latency: Option<(Duration, Duration)>,
    /// Whether the race runs on real time (`--redis`). A short stall is meant to end *within*
    /// the lease; on real time, sleeps overshoot (scheduler, a loaded machine), so it leaves a
    /// wider margin before the deadline than on virtual time, where sleeps are exact.
    pub(crate) real_time: bool,
    /// How the race waits and tells time.
    pub(crate) timer: super::sim::Timer,
}

impl Plan {
    fn frac(&self, f: f64) -> Duration {
        self.lease.mul_f64(f)
    }

    fn between(&self, rng: &mut StdRng, low: f64, high: f64) -> Duration {
        self.frac(rng.random_range(low..high))
    }

    /// What happens at a protocol point (between two commands of an algorithm).
    pub fn at_point(&self, rng: &mut StdRng, _point: &'static str) -> Action {
        let roll: f64 = rng.random();
        match self.scenario {
            Scenario::ShortStalls if roll < 0.2 => Action::Stall(self.between(rng, 0.2, 0.9)),
            Scenario::LongStalls if roll < 0.1 => Action::Stall(self.between(rng, 1.2, 2.5)),
            Scenario::Crashes if roll < 0.04 => Action::Crash,
            _ => Action::Go,
        }
    }

    /// What happens right after a client enters the critical section, given the time left
    /// before its own deadline and how long its work will take.
    pub fn in_critical_section(&self, rng: &mut StdRng, left: Duration, work: Duration) -> Action {
        let roll: f64 = rng.random();
        match self.scenario {
            // Finish close to the end of the lease, but within it: a correct lock has no
            // overlap here, and a release that is itself delayed will cross the expiry.
            Scenario::ShortStalls if roll < 0.5 => {
                let slack = if self.real_time {
                    self.between(rng, 0.25, 0.35)
                } else {
                    self.between(rng, 0.01, 0.08)
                };
                match left.checked_sub(work + slack) {
                    Some(stall) if !stall.is_zero() => Action::Stall(stall),
                    _ => Action::Go,
                }
            }
            Scenario::LongStalls if roll < 0.25 => Action::Stall(self.between(rng, 1.2, 2.5)),
            Scenario::Crashes if roll < 0.04 => Action::Crash,
            _ => Action::Go,
        }
    }

    /// The time from one reply outage of a client to its next (`reply-outages` only): the
    /// first comes up to 4 leases after the client starts; from the end of one to the start of
    /// the next, 2 to 6 leases. An outage begins with the first fresh acquisition at or after
    /// its time and lasts [`outage_length`](Self::outage_length).
    pub fn next_outage(&self, rng: &mut StdRng, first: bool) -> Option<Duration> {
        match self.scenario {
            Scenario::ReplyOutages if first => Some(self.between(rng, 0.0, 4.0)),
            Scenario::ReplyOutages => Some(self.between(rng, 2.0, 6.0)),
            _ => None,
        }
    }

    /// How long one reply outage lasts: a fifth to four fifths of the lease (several times the
    /// retries of an acquire, and short enough that its first grant is still there to find).
    pub fn outage_length(&self, rng: &mut StdRng) -> Duration {
        self.between(rng, 0.2, 0.8)
    }

    /// How long the critical section's work takes.
    pub fn work(&self, rng: &mut StdRng) -> Duration {
        self.between(rng, 0.02, 0.08)
    }

    /// How far client `id`'s clock runs ahead of true time.
    pub fn skew(&self, id: usize) -> Duration {
        match self.scenario {
            Scenario::ClockSkew => self.frac(0.5 * (id % 4) as f64),
            _ => Duration::ZERO,
        }
    }
}
