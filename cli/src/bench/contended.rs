//! The contended scenarios: workers hand one lock to each other, by release notification,
//! as separate clients, in fair mode, or by polling.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tairlock::ExpireLock;

use super::common::{BenchRow, locks, options};
use super::counted::BenchStore;
use super::floor::FLOOR_CAD;
use super::sample::Samples;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Handoff {
    Notify,
    /// Each worker its own client (its own connection on Redis), as separate processes; fair
    /// mode or not.
    Separate {
        fair: bool,
    },
    PollSetNx,
    PollGetSet,
}

/// `workers` tasks contend for one key, each holding 1 ms per acquisition. Latency is the
/// handoff: from a release to the next acquisition.
pub(super) async fn contended<S: BenchStore>(
    store: &S,
    workers: usize,
    d: Duration,
    how: Handoff,
    ping_p50: Option<f64>,
) -> tairlock::Result<(BenchRow, u64)> {
    let name = format!("handoff-{}-{}", workers, tairlock::new_nonce());
    let locks = locks(store);
    let getset = tairlock_legacy::GetSetLock::with_options(
        store.clone(),
        tairlock_legacy::Options::default().unit(tairlock_legacy::Unit::Millis),
    );
    let released_at: Arc<Mutex<Option<Instant>>> = Arc::default();
    let handoffs: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let per_worker: Arc<Mutex<HashMap<usize, u64>>> = Arc::default();
    let last_worker: Arc<Mutex<(Option<usize>, u64)>> = Arc::default();
    let max_wait: Arc<Mutex<Duration>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for w in 0..workers {
        let (locks, store, name, getset) =
            (locks.clone(), store.clone(), name.clone(), getset.clone());
        let (released_at, handoffs, per_worker, last_worker, max_wait, stop) = (
            released_at.clone(),
            handoffs.clone(),
            per_worker.clone(),
            last_worker.clone(),
            max_wait.clone(),
            stop.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let key = format!("tairlock-bench:poll:{name}");
            let locks = match how {
                Handoff::Separate { fair } => {
                    ExpireLock::with_options(store.another().await?, options().fair(fair))
                }
                _ => locks,
            };
            while !stop.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let token = tairlock::new_nonce();
                let mut legacy = None;
                let guard = match how {
                    Handoff::PollGetSet => {
                        match getset.acquire(&key, Duration::from_secs(5)).await? {
                            Some(h) => legacy = Some(h),
                            None => continue,
                        }
                        None
                    }
                    Handoff::Notify | Handoff::Separate { .. } => match locks
                        .lock_with_lease(
                            &name,
                            Duration::from_secs(5),
                            Some(Duration::from_millis(500)),
                        )
                        .await?
                    {
                        Some(g) => Some(g),
                        None => continue,
                    },
                    Handoff::PollSetNx => {
                        while !store
                            .set_nx_px(&key, token.as_bytes(), Duration::from_secs(5))
                            .await?
                        {
                            if stop.load(Ordering::Relaxed) {
                                return Ok::<(), tairlock::Error>(());
                            }
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        None
                    }
                };
                let got = Instant::now();
                {
                    let mut mw = max_wait.lock();
                    *mw = (*mw).max(got - asked);
                }
                if let Some(at) = released_at.lock().take() {
                    handoffs.lock().push(got - at);
                }
                *per_worker.lock().entry(w).or_default() += 1;
                {
                    let mut lw = last_worker.lock();
                    if lw.0 == Some(w) {
                        lw.1 += 1;
                    }
                    lw.0 = Some(w);
                }
                tokio::time::sleep(Duration::from_millis(1)).await;
                match guard {
                    Some(g) => {
                        // Stamp before the release's reply: the next holder may be told first.
                        *released_at.lock() = Some(Instant::now());
                        g.release().await?;
                    }
                    None => {
                        *released_at.lock() = Some(Instant::now());
                        match &legacy {
                            Some(holding) => {
                                getset.release(holding).await?;
                            }
                            None => {
                                store
                                    .eval(
                                        &FLOOR_CAD,
                                        std::slice::from_ref(&key),
                                        std::slice::from_ref(&token),
                                    )
                                    .await?;
                            }
                        }
                    }
                }
            }
            Ok(())
        }));
    }
    tokio::time::sleep(d).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("bench worker panicked")?;
    }
    let elapsed = start.elapsed();
    let acquisitions: u64 = per_worker.lock().values().sum();
    let served = per_worker.lock().len();
    let same = last_worker.lock().1;
    let mut samples = Samples {
        latencies: std::mem::take(&mut *handoffs.lock()),
        elapsed,
        ops: acquisitions,
    };
    let p50 = samples.pct(0.5);
    let max_wait_ms = max_wait.lock().as_secs_f64() * 1e3;
    let same_pct = 100.0 * same as f64 / acquisitions.max(1) as f64;
    let mut r = BenchRow {
        scenario: String::new(),
        store: store.label().to_owned(),
        ops_per_sec: Some(samples.ops_per_sec()),
        p50_us: p50,
        p99_us: samples.pct(0.99),
        ratio_to_floor: match (p50, ping_p50) {
            (Some(h), Some(p)) if p > 0.0 => Some(h / p),
            _ => None,
        },
        commands_per_op: None,
        same_worker_pct: Some(same_pct),
        max_wait_ms: Some(max_wait_ms),
        one_way_latency_us: 0.0,
        note: format!(
            "{served}/{workers} workers served, max wait {max_wait_ms:.1} ms, same-worker \
             re-acquisition {same_pct:.1}%"
        ),
        many: None,
    };
    r.scenario = match (how, workers) {
        (Handoff::PollSetNx, _) => "contended-poll-setnx".to_owned(),
        (Handoff::PollGetSet, _) => "contended-poll-getset".to_owned(),
        (Handoff::Separate { fair: false }, _) => "contended-separate-clients".to_owned(),
        (Handoff::Separate { fair: true }, _) => "contended-fair".to_owned(),
        (Handoff::Notify, 8) => "contended-handoff".to_owned(),
        (Handoff::Notify, n) => format!("local-waiters-{}", n - 1),
    };
    Ok((r, acquisitions))
}
