//! `rw-read-heavy` and `rw-read-heavy-unshared`: a read-heavy cache on one reader/writer lock.
//!
//! 4 clients (each its own connection on Redis, as separate processes would be) × 16 tasks; each
//! task loops: with 5% chance a write (hold ~100 µs), else a read (hold ~100 µs), on one key.
//! The holds are busy work of 100 µs (a cache lookup), so they cost CPU, not timer slack. The
//! first row shares each client's server read hold among its local readers
//! ([`Options::share_reads`], default linger); the second is the same with sharing off.
//!
//! | field | meaning |
//! |---|---|
//! | `ops_per_sec` | reads per second |
//! | `commands_per_op` | server commands per read: every command of the run (writes, renewals and subscriptions included) over the reads |
//! | `max_wait_ms` | the longest a writer waited for the lock |
//! | `p50_us`, `p99_us` | a read's acquire latency |

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;
use tairlock::Keyspace;
use tairlock_rwlock::{Options, RwLock};

use super::common::BenchRow;
use super::counted::BenchStore;
use super::sample::Samples;

const CLIENTS: usize = 4;
const TASKS: usize = 16;
const WRITE_PCT: f64 = 0.05;
const HOLD: Duration = Duration::from_micros(100);

/// Busy work for `d` (the protected cache lookup), then a yield so other tasks run.
async fn work(d: Duration) {
    let until = Instant::now() + d;
    while Instant::now() < until {
        std::hint::spin_loop();
    }
    tokio::task::yield_now().await;
}

/// Run the scenario with sharing on or off; returns the row and the number of reads.
pub(super) async fn rw_read_heavy<S: BenchStore>(
    store: &S,
    d: Duration,
    share: bool,
) -> tairlock::Result<(BenchRow, u64)> {
    let name = format!("read-heavy-{}", tairlock::new_nonce());
    let options = Options::default()
        .keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix"))
        .share_reads(share);
    let mut clients = Vec::new();
    for _ in 0..CLIENTS {
        clients.push(RwLock::with_options(
            store.another().await?,
            options.clone(),
        ));
    }
    // One read per client first: connections and subscriptions are set up outside the count.
    for rw in &clients {
        rw.read(&name).await?.release().await?;
    }
    let before = store.commands().await;
    let reads = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let max_wait: Arc<Mutex<Duration>> = Arc::default();
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for rw in &clients {
        for _ in 0..TASKS {
            let (rw, name, stop) = (rw.clone(), name.clone(), stop.clone());
            let (reads, writes, max_wait, latencies) = (
                reads.clone(),
                writes.clone(),
                max_wait.clone(),
                latencies.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut mine = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let write = rand::rng().random_bool(WRITE_PCT);
                    let asked = Instant::now();
                    if write {
                        let guard = rw.write(&name).await?;
                        let waited = asked.elapsed();
                        {
                            let mut mw = max_wait.lock();
                            *mw = (*mw).max(waited);
                        }
                        work(HOLD).await;
                        guard.release().await?;
                        writes.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let guard = rw.read(&name).await?;
                        mine.push(asked.elapsed());
                        work(HOLD).await;
                        guard.release().await?;
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                }
                latencies.lock().extend(mine);
                Ok::<(), tairlock::Error>(())
            }));
        }
    }
    tokio::time::sleep(d).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("bench worker panicked")?;
    }
    let elapsed = start.elapsed();
    // Let lingering holds go, so their releases are counted.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let after = store.commands().await;
    let (reads, writes) = (
        reads.load(Ordering::Relaxed),
        writes.load(Ordering::Relaxed),
    );
    let mut samples = Samples {
        latencies: std::mem::take(&mut *latencies.lock()),
        elapsed,
        ops: reads,
    };
    let max_wait_ms = max_wait.lock().as_secs_f64() * 1e3;
    let commands_per_op = super::sample::per_op(before, after, reads);
    let scenario = if share {
        "rw-read-heavy"
    } else {
        "rw-read-heavy-unshared"
    };
    let row = BenchRow {
        scenario: scenario.to_owned(),
        store: store.label().to_owned(),
        ops_per_sec: Some(samples.ops_per_sec()),
        p50_us: samples.pct(0.5),
        p99_us: samples.pct(0.99),
        ratio_to_floor: None,
        commands_per_op,
        same_worker_pct: None,
        max_wait_ms: Some(max_wait_ms),
        one_way_latency_us: 0.0,
        note: format!(
            "{CLIENTS} clients × {TASKS} tasks, sharing {}: {reads} reads, {writes} writes \
             ({:.0}/s), writer max wait {max_wait_ms:.1} ms",
            if share { "on" } else { "off" },
            writes as f64 / elapsed.as_secs_f64().max(1e-9),
        ),
        many: None,
    };
    Ok((row, 0))
}
