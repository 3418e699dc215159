//! What every scenario shares: the row and the config, the scenario names, and the locks'
//! options (their own key prefix).

use std::time::Duration;

use serde::Serialize;
use tairlock::{ExpireLock, Keyspace, Options, Store};

/// One row of the bench table (and one object of `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct BenchRow {
    /// Scenario name.
    pub scenario: String,
    /// `memory` or `redis`.
    pub store: String,
    /// Operations per second (see the scenario table for what one op is).
    pub ops_per_sec: Option<f64>,
    /// Median latency of one op, µs.
    pub p50_us: Option<f64>,
    /// 99th percentile latency, µs.
    pub p99_us: Option<f64>,
    /// Ratio to the floor (null where it has no meaning).
    pub ratio_to_floor: Option<f64>,
    /// Server commands per operation (for a contended scenario: per acquisition).
    pub commands_per_op: Option<f64>,
    /// Contended scenarios: the share of acquisitions by the worker that held the lock last, %.
    pub same_worker_pct: Option<f64>,
    /// Contended scenarios: the longest one worker waited for one acquisition, ms.
    pub max_wait_ms: Option<f64>,
    /// Anything else worth knowing (max wait, same-worker share, bytes, ...).
    pub note: String,
    /// The latency `--latency` added each way to every connection of the run, µs (0: none, no
    /// proxy).
    pub one_way_latency_us: f64,
    /// The `many-leases` scenario's figures (absent from other rows).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub many: Option<ManyLeasesRow>,
}

/// The figures of `many-leases`: many guards held at once, renewed by the watchdog.
#[derive(Debug, Clone, Serialize)]
pub struct ManyLeasesRow {
    /// Guards held.
    pub leases: u64,
    /// Guards lost while held (none should be).
    pub leases_lost: u64,
    /// Leases renewed per second while holding (each lease a renewal call carried).
    pub renewals_per_sec: f64,
    /// Server time of the renewal script calls while holding (`INFO commandstats`), µs per
    /// lease renewed; null where the store cannot tell.
    pub server_us_per_renewal: Option<f64>,
    /// This process's CPU time while holding, % of one core.
    pub client_cpu_pct: f64,
    /// This process's resident memory growth over acquiring the guards, bytes per guard.
    pub client_bytes_per_guard: f64,
}

/// Settings of one bench run.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// How long each timed scenario runs.
    pub duration: Duration,
    /// Scenarios to run, by name (all if empty).
    pub only: Vec<String>,
    /// The settings of `many-leases` (run only when named).
    pub many: ManyLeases,
}

/// The settings of the `many-leases` scenario.
#[derive(Debug, Clone, Copy)]
pub struct ManyLeases {
    /// How many guards to hold.
    pub leases: usize,
    /// Their watchdog lease.
    pub lease: Duration,
    /// How long to hold them.
    pub hold: Duration,
}

impl Default for ManyLeases {
    fn default() -> Self {
        ManyLeases {
            leases: 10_000,
            lease: Duration::from_secs(3),
            hold: Duration::from_secs(10),
        }
    }
}

/// Every scenario name, in table order.
pub const SCENARIOS: [&str; 30] = [
    "floor-cycle",
    "ping",
    "expire-lock-cycle",
    "expire-lock-cycle-scripted",
    "guard-cycle",
    "guard-cycle-fair",
    "reentrant-reacquire",
    "rw-read-cycle",
    "rw-read-heavy",
    "rw-read-heavy-unshared",
    "legacy-getset-cycle",
    "legacy-scripted-cycle",
    "contended-handoff",
    "contended-separate-clients",
    "contended-fair",
    "contended-poll-setnx",
    "contended-poll-getset",
    "idle-ping",
    "idle-release",
    "handoff",
    "handoff-fair",
    "semaphore-cycle",
    "contended-semaphore",
    "local-waiters-1",
    "local-waiters-8",
    "local-waiters-32",
    "many-keys-throughput",
    "redis-benchmark-evalsha",
    "memory-per-lock",
    "memory-per-rwlock",
];

pub(super) fn options() -> Options {
    Options::default().keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix"))
}

pub(super) fn locks<S: Store>(store: &S) -> ExpireLock<S> {
    ExpireLock::with_options(store.clone(), options())
}

pub(super) fn bare_error(e: redis::RedisError) -> tairlock::Error {
    tairlock::Error::new(tairlock::ErrorKind::Server, format!("bare client: {e}"))
}
