//! Timing: run an operation back to back and keep its latencies, then percentiles and rows.

use std::future::Future;
use std::time::{Duration, Instant};

use super::common::BenchRow;
use super::counted::BenchStore;

pub(super) struct Samples {
    pub(super) latencies: Vec<Duration>,
    pub(super) elapsed: Duration,
    pub(super) ops: u64,
}

impl Samples {
    pub(super) fn pct(&mut self, p: f64) -> Option<f64> {
        if self.latencies.is_empty() {
            return None;
        }
        self.latencies.sort();
        let i = ((self.latencies.len() - 1) as f64 * p).round() as usize;
        Some(self.latencies[i].as_secs_f64() * 1e6)
    }

    pub(super) fn ops_per_sec(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// Run `op` back to back for `duration` (after a short warm-up), timing each call.
pub(super) async fn timed<F, Fut>(duration: Duration, mut op: F) -> tairlock::Result<Samples>
where
    F: FnMut(u64) -> Fut,
    Fut: Future<Output = tairlock::Result<()>>,
{
    for i in 0..50 {
        op(u64::MAX - i).await?;
    }
    let mut latencies = Vec::new();
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < duration {
        let t = Instant::now();
        op(i).await?;
        latencies.push(t.elapsed());
        i += 1;
    }
    Ok(Samples {
        latencies,
        elapsed: start.elapsed(),
        ops: i,
    })
}

pub(super) fn per_op(before: Option<u64>, after: Option<u64>, ops: u64) -> Option<f64> {
    let (b, a) = (before?, after?);
    Some(a.saturating_sub(b) as f64 / ops.max(1) as f64)
}

pub(super) fn row<S: BenchStore>(
    name: &str,
    store: &S,
    ops: Option<f64>,
    p50: Option<f64>,
    p99: Option<f64>,
    ratio: Option<f64>,
) -> BenchRow {
    BenchRow {
        scenario: name.to_owned(),
        store: store.label().to_owned(),
        ops_per_sec: ops,
        p50_us: p50,
        p99_us: p99,
        ratio_to_floor: ratio,
        commands_per_op: None,
        same_worker_pct: None,
        max_wait_ms: None,
        one_way_latency_us: 0.0,
        note: String::new(),
        many: None,
    }
}
