//! The semaphore's scenarios: `semaphore-cycle` (one acquire + one release of a permit, each
//! timed) and `contended-semaphore` (8 clients, 3 permits).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tairlock::semaphore::PermitAttempt;
use tairlock::{Keyspace, Semaphore, SemaphoreOptions};

use super::common::BenchRow;
use super::counted::BenchStore;
use super::sample::{Samples, row, timed};

/// The permits of the contended scenario's semaphore.
const LIMIT: u32 = 3;
/// Its clients.
const WORKERS: usize = 8;

fn semaphore<S: BenchStore>(store: &S, limit: u32) -> Semaphore<S> {
    let keyspace = Keyspace::new("tairlock-bench:").expect("valid prefix");
    Semaphore::with_options(
        store.clone(),
        limit,
        SemaphoreOptions::default().keyspace(keyspace),
    )
}

fn pct(latencies: &mut [Duration], p: f64) -> Option<f64> {
    if latencies.is_empty() {
        return None;
    }
    latencies.sort();
    let i = ((latencies.len() - 1) as f64 * p).round() as usize;
    Some(latencies[i].as_secs_f64() * 1e6)
}

/// `semaphore-cycle`: `attempt` + `release` of one of 3 permits, uncontended. The row's latency
/// is the cycle's; the note has the acquire's and the release's own p50.
pub(super) async fn cycle<S: BenchStore>(
    store: &S,
    d: Duration,
    floor_cycle: Option<f64>,
) -> tairlock::Result<(BenchRow, u64)> {
    let sem = semaphore(store, LIMIT);
    let ttl = Duration::from_secs(10);
    let acquires: Mutex<Vec<Duration>> = Mutex::default();
    let releases: Mutex<Vec<Duration>> = Mutex::default();
    let mut s: Samples = timed(d, |i| {
        let (sem, acquires, releases) = (&sem, &acquires, &releases);
        async move {
            let nonce = format!("cycle{i}");
            let t = Instant::now();
            let PermitAttempt::Acquired(permit) = sem.attempt("sem-cycle", 1, ttl, &nonce).await?
            else {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::Server,
                    "bench semaphore unexpectedly full",
                ));
            };
            let acquired = Instant::now();
            if !sem.release("sem-cycle", &permit).await? {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::Server,
                    "bench permit not released",
                ));
            }
            acquires.lock().push(acquired - t);
            releases.lock().push(acquired.elapsed());
            Ok(())
        }
    })
    .await?;
    let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
    let mut r = row(
        "semaphore-cycle",
        store,
        Some(s.ops_per_sec()),
        s.pct(0.5),
        s.pct(0.99),
        ratio,
    );
    let (a, b) = (
        pct(&mut acquires.lock(), 0.5).unwrap_or(0.0),
        pct(&mut releases.lock(), 0.5).unwrap_or(0.0),
    );
    r.note = format!("acquire p50 {a:.0} us (1 script), release p50 {b:.0} us (1 script)");
    Ok((r, s.ops + 50))
}

/// `contended-semaphore`: 8 clients (each its own connection on Redis) take one of 3 permits,
/// hold it 1 ms and release it, for `d`. One op is one acquisition; its latency is the wait
/// for the permit. The note says how many held at once at most (never more than 3).
pub(super) async fn contended<S: BenchStore>(
    store: &S,
    d: Duration,
) -> tairlock::Result<(BenchRow, u64)> {
    let name = format!("sem-contended-{}", tairlock::new_nonce());
    let held = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let ops = Arc::new(AtomicU64::new(0));
    let waits: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let sem = semaphore(&store.another().await?, LIMIT);
        let (name, held, most, ops, waits, stop) = (
            name.clone(),
            held.clone(),
            most.clone(),
            ops.clone(),
            waits.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let guard = sem.acquire(&name, 1).await?;
                waits.lock().push(t.elapsed());
                let now = held.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                held.fetch_sub(1, Ordering::SeqCst);
                guard.release().await?;
                ops.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), tairlock::Error>(())
        }));
    }
    let start = Instant::now();
    tokio::time::sleep(d).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.expect("bench worker")?;
    }
    let elapsed = start.elapsed();
    let ops = ops.load(Ordering::Relaxed);
    let mut waits = std::mem::take(&mut *waits.lock());
    let mut r = row(
        "contended-semaphore",
        store,
        Some(ops as f64 / elapsed.as_secs_f64().max(1e-9)),
        pct(&mut waits, 0.5),
        pct(&mut waits, 0.99),
        None,
    );
    let most = most.load(Ordering::SeqCst);
    r.max_wait_ms = waits.last().map(|w| w.as_secs_f64() * 1e3);
    r.note = format!(
        "{WORKERS} clients, {LIMIT} permits, 1 ms hold; at most {most} held at once{}",
        if most > LIMIT as usize {
            " (OVER THE LIMIT)"
        } else {
            ""
        }
    );
    Ok((r, ops))
}
