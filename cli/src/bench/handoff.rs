//! The forced-handoff scenarios: one holder, one waiter (a client of its own) already waiting
//! when the holder releases; latency = from just before the release is sent to the waiter
//! holding (its guard returned).

use std::time::{Duration, Instant};

use tairlock::ExpireLock;

use super::common::{BenchRow, options};
use super::counted::BenchStore;
use super::sample::Samples;

/// How long the waiter waits before each release: 5, 9, 13, ... 25 ms, round and round (long
/// enough for it to be queued and subscribed; varied so nothing runs in step with a timer).
fn pause(i: u64) -> Duration {
    Duration::from_millis(5 + 4 * (i % 6))
}

/// Hand one lock from a holder to a waiting client over and over for `d`, in fair mode or not.
pub(super) async fn forced<S: BenchStore>(
    store: &S,
    d: Duration,
    fair: bool,
) -> tairlock::Result<(BenchRow, u64)> {
    let name = format!("forced-{}", tairlock::new_nonce());
    let holder = ExpireLock::with_options(store.another().await?, options().fair(fair));
    let waiter = ExpireLock::with_options(store.another().await?, options().fair(fair));
    let lease = Duration::from_secs(5);
    let patience = Some(Duration::from_secs(5));
    let hold = |locks: &ExpireLock<S>| {
        let (locks, name) = (locks.clone(), name.clone());
        async move {
            locks
                .lock_with_lease(&name, lease, patience)
                .await?
                .ok_or_else(|| tairlock::Error::new(tairlock::ErrorKind::Timeout, "no lock in 5 s"))
        }
    };
    let mut latencies = Vec::new();
    let start = Instant::now();
    let mut i = 0;
    // The first round warms up (subscriptions, scripts loaded); it is not counted.
    let mut warm = true;
    while warm || start.elapsed() < d {
        let guard = hold(&holder).await?;
        let next = tokio::spawn({
            let hold = hold(&waiter);
            async move {
                let guard = hold.await;
                (guard, Instant::now())
            }
        });
        tokio::time::sleep(pause(i)).await;
        let released = Instant::now();
        guard.release().await?;
        let (guard, got) = next.await.expect("the waiter panicked");
        let guard = guard?;
        if !warm {
            latencies.push(got.saturating_duration_since(released));
            i += 1;
        }
        warm = false;
        guard.release().await?;
    }
    let mut samples = Samples {
        latencies,
        elapsed: start.elapsed(),
        ops: i,
    };
    let row = BenchRow {
        scenario: if fair { "handoff-fair" } else { "handoff" }.to_owned(),
        store: store.label().to_owned(),
        ops_per_sec: None,
        p50_us: samples.pct(0.5),
        p99_us: samples.pct(0.99),
        ratio_to_floor: None,
        commands_per_op: None,
        same_worker_pct: None,
        max_wait_ms: None,
        note: format!("{i} handoffs, the waiter waiting 5-25 ms before each release"),
    };
    Ok((row, i))
}
