//! The forced-handoff scenarios: one holder, one waiter (a client of its own) already waiting
//! when the holder releases; latency = from just before the release is sent to the waiter
//! holding (its guard returned).
//!
//! On a server, each handoff is also profiled, and the row's note gives the medians: from the
//! release sent to its reply (the holder's round trip), to the release's announcement reaching a
//! bare redis-rs subscriber of the lock's channels (a pattern subscription, on a connection of
//! its own: what any client could learn the soonest), and from that arrival to the waiter's
//! guard returned (what the waiter's client does after hearing it: in the default mode another
//! attempt, a round trip; in fair mode none).

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use parking_lot::Mutex;
use tairlock::ExpireLock;

use super::common::{BenchRow, options};
use super::counted::BenchStore;
use super::floor::FLOOR_CAD;
use super::sample::Samples;

/// How long the waiter waits before each release: 5, 9, 13, ... 25 ms, round and round (long
/// enough for it to be queued and subscribed; varied so nothing runs in step with a timer).
fn pause(i: u64) -> Duration {
    Duration::from_millis(5 + 4 * (i % 6))
}

/// The floors of a forced handoff, from a client of its own that has been idle as long as the
/// handoff scenarios' holder (5–25 ms, round and round) before each round trip: `idle-ping`
/// (`PING`) and `idle-release` (the floor's `EVALSHA` compare-and-delete of a key set before the
/// pause, unmeasured). On virtual machines an idle client and an idle server each pay a wake-up
/// that a back-to-back `ping` never sees, and a script on a server that was idle runs cold; a
/// release that hands a lock over pays all of that, so a handoff is judged against these.
/// On a bare redis-rs connection where there is one (what a hand-written client pays), else
/// through the store.
pub(super) async fn idle_floor<S: BenchStore>(
    store: &S,
    d: Duration,
    release: bool,
) -> tairlock::Result<(BenchRow, u64)> {
    let mut bare = store.bare().await;
    let client = store.another().await?;
    let key = format!("tairlock-bench:idle-{}", tairlock::new_nonce());
    let token = tairlock::new_nonce();
    let keys = [key.clone()];
    let args = [token.clone()];
    let set = async |bare: &mut Option<redis::aio::MultiplexedConnection>| match bare.as_mut() {
        Some(conn) => redis::cmd("SET")
            .arg(&key)
            .arg(&token)
            .arg("PX")
            .arg(10_000)
            .query_async::<()>(conn)
            .await
            .map_err(super::common::bare_error),
        None => client
            .set_nx_px(&key, token.as_bytes(), Duration::from_secs(10))
            .await
            .map(|_| ()),
    };
    let measured =
        async |bare: &mut Option<redis::aio::MultiplexedConnection>| match (bare.as_mut(), release)
        {
            (Some(conn), false) => redis::cmd("PING")
                .query_async::<()>(conn)
                .await
                .map_err(super::common::bare_error),
            (Some(conn), true) => redis::Script::new(FLOOR_CAD.lua())
                .key(&key)
                .arg(&token)
                .invoke_async::<i64>(conn)
                .await
                .map(|_| ())
                .map_err(super::common::bare_error),
            (None, false) => client.ping().await,
            (None, true) => client.eval(&FLOOR_CAD, &keys, &args).await.map(|_| ()),
        };
    // Warm: the script loaded, the connection up.
    set(&mut bare).await?;
    measured(&mut bare).await?;
    let mut latencies = Vec::new();
    let start = Instant::now();
    let mut i = 0;
    while start.elapsed() < d {
        if release {
            set(&mut bare).await?;
        }
        tokio::time::sleep(pause(i)).await;
        let sent = Instant::now();
        measured(&mut bare).await?;
        latencies.push(sent.elapsed());
        i += 1;
    }
    let mut samples = Samples {
        latencies,
        elapsed: start.elapsed(),
        ops: i,
    };
    let row = BenchRow {
        scenario: if release { "idle-release" } else { "idle-ping" }.to_owned(),
        store: store.label().to_owned(),
        ops_per_sec: None,
        p50_us: samples.pct(0.5),
        p99_us: samples.pct(0.99),
        ratio_to_floor: None,
        // One measured command per round trip (the bare connection's are not counted).
        commands_per_op: bare.is_some().then_some(1.0),
        same_worker_pct: None,
        max_wait_ms: None,
        one_way_latency_us: 0.0,
        note: format!("{i} round trips, each after 5-25 ms idle"),
        many: None,
    };
    Ok((row, i))
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
    let heard = listen(store, &holder.keys(&name)?.channel).await;
    let mut latencies = Vec::new();
    let mut profile = Profile::default();
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
        let replied = Instant::now();
        let (guard, got) = next.await.expect("the waiter panicked");
        let guard = guard?;
        if !warm {
            latencies.push(got.saturating_duration_since(released));
            let announced = heard.as_ref().and_then(|heard| {
                let mut heard = heard.lock();
                let first = heard.iter().copied().find(|at| *at >= released);
                heard.clear();
                first
            });
            profile.add(released, replied, announced, got);
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
        one_way_latency_us: 0.0,
        note: format!(
            "{i} handoffs, the waiter waiting 5-25 ms before each release{}",
            profile.note()
        ),
        many: None,
    };
    Ok((row, i))
}

/// Stamp the arrival of every message on the channels under `channel` (the lock's release
/// channel and, in fair mode, its wake channels) at a bare subscriber; `None` without a single
/// server.
async fn listen<S: BenchStore>(store: &S, channel: &str) -> Option<Arc<Mutex<Vec<Instant>>>> {
    let mut pubsub = store.bare_pubsub().await?;
    pubsub.psubscribe(format!("{channel}*")).await.ok()?;
    let heard: Arc<Mutex<Vec<Instant>>> = Arc::default();
    let stamps = heard.clone();
    tokio::spawn(async move {
        let mut messages = pubsub.into_on_message();
        while messages.next().await.is_some() {
            stamps.lock().push(Instant::now());
        }
    });
    Some(heard)
}

/// Each profiled handoff's times from the release sent, µs.
#[derive(Default)]
struct Profile {
    replied: Vec<Duration>,
    announced: Vec<Duration>,
    then_held: Vec<Duration>,
}

impl Profile {
    fn add(
        &mut self,
        released: Instant,
        replied: Instant,
        announced: Option<Instant>,
        got: Instant,
    ) {
        self.replied
            .push(replied.saturating_duration_since(released));
        if let Some(at) = announced {
            self.announced.push(at.saturating_duration_since(released));
            self.then_held.push(got.saturating_duration_since(at));
        }
    }

    /// The medians, for the row's note (empty when nothing was heard).
    fn note(&mut self) -> String {
        let median = |v: &mut Vec<Duration>| {
            v.sort();
            v.get(v.len() / 2).map_or(0.0, |d| d.as_secs_f64() * 1e6)
        };
        if self.announced.is_empty() {
            return String::new();
        }
        format!(
            "; p50 from the release: its reply {:.0} us, the announcement at a bare subscriber \
             {:.0} us, then the guard {:.0} us later",
            median(&mut self.replied),
            median(&mut self.announced),
            median(&mut self.then_held),
        )
    }
}
