//! `many-leases`: one process holding many guards at once, renewed by the watchdog.
//!
//! Acquires `--leases N` [`lock`](tairlock::ExpireLock::lock) guards (the watchdog on, lease
//! `--lease D`) on one client, concurrently, holds them `--hold D` doing nothing else, then
//! releases them all concurrently. The row reports:
//!
//! - `leases`, `leases_lost`: guards held, and how many were lost by the end of the hold;
//! - `renewals_per_sec`: leases the renewal calls carried per second of the hold;
//! - `server_us_per_renewal`: the server's time in script calls during the hold (`INFO
//!   commandstats`, `EVALSHA` and `EVAL`: nothing but renewals runs then) per lease renewed;
//! - `client_cpu_pct`: this process's user + system CPU time during the hold
//!   (`/proc/self/stat`), % of one core;
//! - `client_bytes_per_guard`: this process's resident memory growth over the acquisitions
//!   (`VmRSS` of `/proc/self/status`) ÷ N — everything a held guard costs, the guard itself, its
//!   lease, its place in the watchdog's queue, and the vector that holds it.
//!
//! The note has the acquisition rate and the time to release them all.

use std::time::{Duration, Instant};

use tairlock::{ExpireLock, Unlock};
use tokio::task::JoinSet;

use super::common::{BenchRow, ManyLeases, ManyLeasesRow, options};
use super::counted::BenchStore;
use super::sample::row;

/// How many acquisitions are in flight at once.
const IN_FLIGHT: usize = 256;

/// How many releases are in flight at once.
const RELEASES_IN_FLIGHT: usize = 20_000;

/// Run `many-leases`: hold `settings.leases` guards of `settings.lease` (the watchdog on) for
/// `settings.hold`, then release them; the row carries the figures of the scenario table in
/// [`bench`](crate::bench).
///
/// # Errors
///
/// Store errors, or a guard that could not be had (another client holds its lock).
pub async fn many_leases<S: BenchStore>(
    store: &S,
    settings: ManyLeases,
) -> tairlock::Result<BenchRow> {
    let ManyLeases {
        leases,
        lease,
        hold,
    } = settings;
    let locks = ExpireLock::with_options(store.clone(), options().watchdog_lease(lease));
    let rss_before = rss_bytes();
    let started = Instant::now();
    // A fixed set of tasks, each acquiring its share in turn: the memory measured is the
    // guards', not that of a crowd of acquisitions in flight.
    let mut workers = JoinSet::new();
    for w in 0..IN_FLIGHT.min(leases) {
        let locks = locks.clone();
        workers.spawn(async move {
            let mut mine = Vec::with_capacity(leases / IN_FLIGHT + 1);
            for i in (w..leases).step_by(IN_FLIGHT) {
                mine.push(locks.lock(&format!("many:{i}")).await?);
            }
            Ok::<_, tairlock::Error>(mine)
        });
    }
    let mut guards = Vec::with_capacity(leases);
    while let Some(done) = workers.join_next().await {
        guards.extend(done.expect("acquire task panicked")?);
    }
    let acquired_in = started.elapsed();
    let rss_after = rss_bytes();

    let renewals_before = store.renewals();
    let server_before = store.script_usec().await;
    let cpu_before = cpu_time();
    let held_from = Instant::now();
    tokio::time::sleep(hold).await;
    let cpu = cpu_time().saturating_sub(cpu_before);
    let held = held_from.elapsed();
    let server_after = store.script_usec().await;
    let renewed = store.renewals() - renewals_before;
    let lost = guards.iter().filter(|g| g.is_lost()).count();

    let released_from = Instant::now();
    let mut releases = JoinSet::new();
    let mut not_released = 0;
    for guard in guards {
        releases.spawn(guard.release());
        if releases.len() >= RELEASES_IN_FLIGHT
            && let Some(done) = releases.join_next().await
        {
            not_released += usize::from(done.expect("release task panicked")? != Unlock::Released);
        }
    }
    while let Some(done) = releases.join_next().await {
        not_released += usize::from(done.expect("release task panicked")? != Unlock::Released);
    }
    let released_in = released_from.elapsed();

    let server_us_per_renewal = match (server_before, server_after) {
        (Some((_, before)), Some((_, after))) if renewed > 0 => {
            Some(after.saturating_sub(before) as f64 / renewed as f64)
        }
        _ => None,
    };
    let mut r = row("many-leases", store, None, None, None, None);
    r.note = format!(
        "{leases} guards of {lease:?} acquired in {:.2} s ({:.0}/s), held {:.1} s, released in {:.2} s ({not_released} not held by then)",
        acquired_in.as_secs_f64(),
        leases as f64 / acquired_in.as_secs_f64(),
        held.as_secs_f64(),
        released_in.as_secs_f64(),
    );
    r.many = Some(ManyLeasesRow {
        leases: leases as u64,
        leases_lost: lost as u64,
        renewals_per_sec: renewed as f64 / held.as_secs_f64(),
        server_us_per_renewal,
        client_cpu_pct: 100.0 * cpu.as_secs_f64() / held.as_secs_f64(),
        client_bytes_per_guard: rss_after.saturating_sub(rss_before) as f64 / leases.max(1) as f64,
    });
    Ok(r)
}

/// This process's resident memory (`VmRSS`), bytes; zero where `/proc` is not there.
fn rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|status| {
            let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
            let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
            Some(kib * 1024)
        })
        .unwrap_or(0)
}

/// This process's user + system CPU time so far (`/proc/self/stat`, in the kernel's clock
/// ticks of 10 ms); zero where `/proc` is not there.
fn cpu_time() -> Duration {
    let ticks = std::fs::read_to_string("/proc/self/stat")
        .ok()
        .and_then(|stat| {
            // After the command name in parentheses: state is field 3, utime 14, stime 15.
            let rest = stat.rsplit_once(')')?.1;
            let fields: Vec<&str> = rest.split_whitespace().collect();
            let utime: u64 = fields.get(11)?.parse().ok()?;
            let stime: u64 = fields.get(12)?.parse().ok()?;
            Some(utime + stime)
        })
        .unwrap_or(0);
    Duration::from_millis(ticks * 10)
}
