//! `tairlock race`: contending clients run each algorithm under each scenario, and a table
//! counts what went wrong.
//!
//! Each row is one algorithm under one scenario: `trials` independent trials, each with
//! `clients` clients contending for one fresh lock key for `trial_length`. A client loops:
//! acquire (waiting, when the lock is busy, for the holder's remaining time if known or a short
//! jittered back-off), enter the critical section, write to a protected resource, work, leave,
//! release. The scenario stalls or crashes clients at the algorithm's protocol points and inside
//! the critical section.
//!
//! | column | counts, and how it is observed |
//! |---|---|
//! | `acquisitions` | acquisitions that returned a grant |
//! | `overlaps` | acquisitions whose client, entering the critical section, found another client inside it (for reader/writer locks: a writer together with anyone; readers may share; for the `semaphore` of N permits: N others inside already). A failure for a safe algorithm in every scenario but `long-stalls` |
//! | `overlaps_past_lease` (JSON only) | of the overlaps, those where every client found inside was past its lease (its deadline, or the lease's end on the server): a holder stalled past its lease, as any lease lock meets it; not a failure in any scenario, and fencing must catch its writes |
//! | `foreign_deletions` | deletions and overwrites of a lock value another live holder wrote, seen at the store with the client that caused them, whatever the command or script ([`client::Audit`]); a holder is live from its grant (the store applying its write) until its release returned, it crashed, or its lease ended (its local deadline, or the lease's end on the server if that is earlier), whichever is first |
//! | `stale_writes_accepted` | writes the resource accepted although a later grant had already written: a fenced resource rejects lower tokens, an unfenced one accepts everything |
//! | `stuck_locks` | trials that ended with a lock key that has no expiry: nobody can ever take it again |
//! | `late_deadlines` | grants whose local deadline is later than the end of their lease on the server, read right after the grant and mapped to the client's clock from above ([`audit`]): the client would trust the lock after the server let it go. A failure for a safe algorithm in every scenario |
//! | `handoff_p50_us` | median time from the lock becoming free while a client waited (the store applying a holder's release of its own value, or the holder's crash) to the store applying the next grant |
//! | `replies_dropped` | replies to acquire commands the store applied that never reached their client: dropped by `reply-outages`, or timed out on a server |
//!
//! On the embedded store the race runs on virtual time to the microsecond ([`sim`]: tokio's
//! paused clock plus an offset within its millisecond), and every command takes a simulated
//! round trip of 0.1–0.4 ms (two hops of half a uniform draw, seeded per client), so it is fast
//! and repeatable for a given seed. With `--redis` it runs on real time against the server.
//!
//! With [`RaceConfig::timeline`] (`--timeline FILE`), each row's first trial is also recorded
//! and drawn ([`timeline`]): what happened to each client, when, and where it went wrong.
//!
//! An acquire that gets no answer (a transient error: the `reply-outages` scenario drops the
//! replies of a client's acquires for a while, and a real server may time out) is repeated
//! after a short back-off; an algorithm that keeps its nonce for the acquisition repeats it with
//! the same nonce, and a repeat that finds the grant of an unanswered attempt is that grant.

mod algorithm;
pub mod algorithms;
pub mod audit;
pub mod client;
pub mod report;
pub mod scenario;
pub mod sim;
pub mod timeline;
pub mod trial;

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tairlock::Store;
use tairlock::clock::{SharedClock, SkewedClock};

pub use self::algorithms::{Algorithm, Attempt, BoxFuture, Expectation, Holding};
pub use self::audit::{LeaseAt, ServerEnd};
use self::client::Audit;
pub use self::client::{Client, Interrupt, RaceStore, Step};
use self::scenario::{Plan, Scenario};
use self::sim::{Timer, Virtual};
use self::trial::{Counts, Trial};

/// Settings of one race.
#[derive(Debug, Clone)]
pub struct RaceConfig {
    /// Contending clients per trial.
    pub clients: usize,
    /// Trials per row.
    pub trials: usize,
    /// Lease length.
    pub lease: Duration,
    /// How long each trial runs.
    pub trial_length: Duration,
    /// Seed of every random choice.
    pub seed: u64,
    /// Scenarios to run.
    pub scenarios: Vec<Scenario>,
    /// Algorithms to run, by name (all if empty).
    pub algorithms: Vec<String>,
    /// Simulated round trip (embedded store).
    pub latency: Option<(Duration, Duration)>,
    /// A prefix for every key the race writes.
    pub key_prefix: String,
    /// Record each row's first trial for its [`Row::timeline`] (`--timeline`).
    pub timeline: bool,
}

impl Default for RaceConfig {
    fn default() -> Self {
        RaceConfig {
            clients: 8,
            trials: 12,
            lease: Duration::from_millis(100),
            trial_length: Duration::from_secs(3),
            seed: 1,
            scenarios: vec![
                Scenario::ShortStalls,
                Scenario::LongStalls,
                Scenario::Crashes,
                Scenario::ClockSkew,
                Scenario::ReplyOutages,
            ],
            algorithms: Vec::new(),
            latency: Some((Duration::from_micros(100), Duration::from_micros(400))),
            key_prefix: "tairlock-race".to_owned(),
            timeline: false,
        }
    }
}

/// One row of the table (and one object of `--json`).
#[derive(Debug, Clone, Serialize)]
pub struct Row {
    /// Algorithm name.
    pub algorithm: String,
    /// Scenario name.
    pub scenario: String,
    /// `memory` or `redis`.
    pub store: String,
    /// `safe` (must hold the zeros), `unfenced` (the zeros except stale writes: no fencing
    /// token, e.g. Redlock) or `flawed` (a verbatim recipe kept for comparison).
    pub expectation: String,
    /// Clients per trial.
    pub clients: usize,
    /// Trials run.
    pub trials: usize,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Acquisitions that found another client inside the critical section.
    pub overlaps: u64,
    /// Of those, the ones where every client found inside was past its lease (its deadline, or
    /// the lease's end on the server): a holder stalled past its lease, which any lease lock
    /// meets and fencing must catch. Not a failure of the lock in any scenario.
    pub overlaps_past_lease: u64,
    /// Deletions of another live holder's lock.
    pub foreign_deletions: u64,
    /// Writes accepted although a later grant had already written.
    pub stale_writes_accepted: u64,
    /// Writes the fenced resource rejected.
    pub writes_rejected: u64,
    /// Trials that ended with a lock that never expires.
    pub stuck_locks: u64,
    /// Grants whose local deadline was later than the end of their lease on the server.
    pub late_deadlines: u64,
    /// Median release-to-next-acquisition time, µs (null when no handoff happened).
    pub handoff_p50_us: Option<u64>,
    /// 99th percentile of the same.
    pub handoff_p99_us: Option<u64>,
    /// Stalls injected.
    pub stalls: u64,
    /// Crashes injected.
    pub crashes: u64,
    /// Acquire replies the scenario dropped (`reply-outages`) or that timed out.
    pub replies_dropped: u64,
    /// What this row shows: `ok`, `flaws shown`, `no flaw shown` or `BROKEN`.
    pub verdict: String,
    /// The row's first trial, drawn, when [`RaceConfig::timeline`] asked for it (not in the
    /// JSON). Its caption has that trial's counts: the row's, when the row is one trial.
    #[serde(skip)]
    pub timeline: Option<timeline::Timeline>,
}

impl Row {
    /// Whether a safe algorithm broke one of its zeros here.
    pub fn broken(&self) -> bool {
        match self.expectation.as_str() {
            "safe" => self.violations() > 0,
            "unfenced" => self.violations() - self.stale_writes_accepted > 0,
            _ => false,
        }
    }

    /// The counts that must be zero for a safe algorithm in this scenario. Overlaps count
    /// wherever no client is stalled past its lease: everywhere but `long-stalls` (there, a
    /// holder paused past its lease overlaps the next one with any lease lock; fencing is what
    /// must hold), and, elsewhere, but those with holders past their lease only
    /// ([`overlaps_past_lease`](Self::overlaps_past_lease): on a real server in real time, a
    /// loaded machine runs a holder late, as a stall would). Late deadlines count everywhere.
    pub fn violations(&self) -> u64 {
        let overlaps = if self.scenario == Scenario::LongStalls.name() {
            0
        } else {
            self.overlaps.saturating_sub(self.overlaps_past_lease)
        };
        overlaps
            + self.foreign_deletions
            + self.stale_writes_accepted
            + self.stuck_locks
            + self.late_deadlines
    }

    /// Every count that shows a flaw, whatever the scenario: overlaps, foreign deletions,
    /// accepted stale writes, stuck locks and late deadlines. A `flawed` row's verdict is
    /// `flaws shown` when this is above zero.
    pub fn flaws(&self) -> u64 {
        self.overlaps
            + self.foreign_deletions
            + self.stale_writes_accepted
            + self.stuck_locks
            + self.late_deadlines
    }
}

/// Run the race on the embedded store on virtual time (tokio's paused clock, on a runtime of its
/// own): fast, and repeatable for a given seed. What `tairlock race` does without `--redis`.
///
/// # Errors
///
/// None in practice (the embedded store has no I/O); the signature matches [`run`].
///
/// # Panics
///
/// When called from inside an async runtime.
pub fn run_embedded(config: &RaceConfig, progress: impl FnMut(&Row)) -> tairlock::Result<Vec<Row>> {
    run_embedded_algorithms(config, algorithms::all(), progress)
}

/// [`run_embedded`] with your own algorithms (still filtered by [`RaceConfig::algorithms`]):
/// the built-in rows are [`algorithms::all`], and yours are plain [`Algorithm`]s too. Call it
/// from a plain `#[test]` (not `#[tokio::test]`): it runs on a runtime of its own, on virtual
/// time, so a row of 12 trials of 3 s takes well under a second and a seed always gives the
/// same table.
///
/// ```
/// use tairlock::MemoryStore;
/// use tairlock_testing::race::algorithms::{ExpireLockAlgorithm, LegacyGetSet};
/// use tairlock_testing::race::{Algorithm, RaceConfig, run_embedded_algorithms};
///
/// let config = RaceConfig { trials: 2, ..RaceConfig::default() };
/// let algorithms: Vec<Box<dyn Algorithm<MemoryStore>>> =
///     vec![Box::new(LegacyGetSet), Box::new(ExpireLockAlgorithm)];
/// let rows = run_embedded_algorithms(&config, algorithms, |_| {}).unwrap();
/// assert!(rows.iter().all(|row| !row.broken()));
/// assert!(rows.iter().any(|row| row.algorithm == "legacy-getset" && row.flaws() > 0));
/// ```
///
/// # Errors
///
/// An error an algorithm returned (the embedded store itself has no I/O errors).
///
/// # Panics
///
/// When called from inside an async runtime, or when a client task panics.
pub fn run_embedded_algorithms(
    config: &RaceConfig,
    algorithms: Vec<Box<dyn Algorithm<tairlock::MemoryStore>>>,
    progress: impl FnMut(&Row),
) -> tairlock::Result<Vec<Row>> {
    // Virtual time to the microsecond (see `sim`): the runtime wakes its sleepers when idle.
    let slot: Arc<parking_lot::Mutex<Option<Arc<Virtual>>>> = Arc::default();
    let hook = slot.clone();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .on_thread_park(move || {
            if let Some(time) = &*hook.lock() {
                time.on_idle();
            }
        })
        .build()
        .expect("a current-thread runtime");
    rt.block_on(async {
        let time = Virtual::new();
        *slot.lock() = Some(time.clone());
        let clock: SharedClock = time.clone();
        let store = tairlock::MemoryStore::with_clock(clock.clone());
        run_timed(
            store,
            clock,
            "memory",
            config,
            algorithms,
            Timer::Virtual(time),
            progress,
        )
        .await
    })
}

/// Run every selected algorithm under every selected scenario on `store`.
///
/// `clock` is the base of the clients' clocks (skewed per client in the clock-skew scenario).
///
/// # Errors
///
/// A store error (the embedded store has none; a Redis connection may fail).
pub async fn run<S: tairlock_legacy::WatchStore>(
    store: S,
    clock: SharedClock,
    store_name: &str,
    config: &RaceConfig,
    progress: impl FnMut(&Row),
) -> tairlock::Result<Vec<Row>> {
    run_algorithms(
        store,
        clock,
        store_name,
        config,
        algorithms::all::<S>(),
        progress,
    )
    .await
}

/// [`run`] with an explicit list of algorithms (still filtered by
/// [`RaceConfig::algorithms`]), for stores without `WATCH`
/// ([`algorithms::all_without_watch`]) or algorithms with servers of their own (Redlock).
///
/// # Errors
///
/// A store error.
pub async fn run_algorithms<S: Store>(
    store: S,
    clock: SharedClock,
    store_name: &str,
    config: &RaceConfig,
    algorithms: Vec<Box<dyn Algorithm<S>>>,
    progress: impl FnMut(&Row),
) -> tairlock::Result<Vec<Row>> {
    run_timed(
        store,
        clock,
        store_name,
        config,
        algorithms,
        Timer::tokio(),
        progress,
    )
    .await
}

async fn run_timed<S: Store>(
    store: S,
    clock: SharedClock,
    store_name: &str,
    config: &RaceConfig,
    algorithms: Vec<Box<dyn Algorithm<S>>>,
    timer: Timer,
    mut progress: impl FnMut(&Row),
) -> tairlock::Result<Vec<Row>> {
    // The embedded store reports each change itself; a server's are read around each command.
    let audit = match (&store as &dyn std::any::Any).downcast_ref::<tairlock::MemoryStore>() {
        Some(memory) => {
            client::observe(memory);
            Audit::Store
        }
        None => Audit::Commands,
    };
    let mut rows = Vec::new();
    for algorithm in algorithms {
        if !config.algorithms.is_empty() && !config.algorithms.iter().any(|a| a == algorithm.name())
        {
            continue;
        }
        let algorithm: Arc<dyn Algorithm<S>> = Arc::from(algorithm);
        for &scenario in &config.scenarios {
            let row = run_row(
                &store,
                &clock,
                store_name,
                config,
                algorithm.clone(),
                scenario,
                &Observe {
                    audit,
                    timer: timer.clone(),
                },
            )
            .await?;
            progress(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// The names of every algorithm.
pub fn algorithm_names() -> Vec<&'static str> {
    algorithms::all::<tairlock::MemoryStore>()
        .iter()
        .map(|a| a.name())
        .collect()
}

/// How a row observes its clients: where deletions are seen, and the clock.
struct Observe {
    audit: Audit,
    timer: Timer,
}

async fn run_row<S: Store>(
    store: &S,
    clock: &SharedClock,
    store_name: &str,
    config: &RaceConfig,
    algorithm: Arc<dyn Algorithm<S>>,
    scenario: Scenario,
    observe: &Observe,
) -> tairlock::Result<Row> {
    let Observe { audit, timer } = observe;
    let audit = *audit;
    let plan = Arc::new(Plan {
        scenario,
        lease: config.lease,
        latency: config.latency,
        real_time: config.latency.is_none(),
        timer: timer.clone(),
    });
    let mut counts = Counts::default();
    let mut drawn = None;
    for trial_no in 0..config.trials {
        let lock = format!(
            "{}:{}:{}:{}:{}",
            config.key_prefix,
            algorithm.name(),
            scenario.name(),
            config.seed,
            trial_no
        );
        let record = config.timeline && trial_no == 0;
        let trial = Arc::new(if record {
            Trial::recording(timer.clone())
        } else {
            Trial::new(timer.clone())
        });
        let start = timer.now();
        let end = start + config.trial_length;
        let mut tasks = Vec::new();
        for id in 0..config.clients {
            let seed = config.seed
                ^ ((trial_no as u64) << 32)
                ^ ((id as u64) << 16)
                ^ fxhash(algorithm.name())
                ^ fxhash(scenario.name());
            let client_clock: SharedClock =
                Arc::new(SkewedClock::ahead(clock.clone(), plan.skew(id)));
            let client = Client::new(
                id,
                store.clone(),
                client_clock,
                plan.clone(),
                trial.clone(),
                seed,
                audit,
            );
            let (algorithm, lock) = (algorithm.clone(), lock.clone());
            tasks.push(tokio::spawn(async move {
                client_loop(client, algorithm, lock, end).await
            }));
        }
        for task in tasks {
            task.await.expect("race client panicked")?;
        }
        // Stuck: a lock key that will never expire. Then clean up after ourselves.
        for _ in 0..algorithm.stuck(store, &lock).await? {
            trial.stuck();
        }
        for key in algorithm.keys(&lock) {
            store.del(&key).await?;
        }
        for extra in [":fence", ":readers", ":writer", ":intent"] {
            for key in algorithm.keys(&lock) {
                store.del(&format!("{key}{extra}")).await?;
            }
        }
        let (trial_counts, recorder) = Arc::try_unwrap(trial)
            .expect("clients are done")
            .into_parts();
        if let Some(recorder) = recorder {
            let row = make_row(
                algorithm.as_ref(),
                scenario,
                store_name,
                config,
                trial_counts.clone(),
            );
            drawn = Some(recorder.finish(
                (&row.algorithm, &row.scenario, &row.expectation),
                config.clients,
                start,
                config.trial_length,
                timeline::Caption {
                    acquisitions: row.acquisitions,
                    overlaps: row.overlaps,
                    foreign_deletions: row.foreign_deletions,
                    stale_writes_accepted: row.stale_writes_accepted,
                    writes_rejected: row.writes_rejected,
                    stuck_locks: row.stuck_locks,
                    late_deadlines: row.late_deadlines,
                    stalls: row.stalls,
                    crashes: row.crashes,
                    verdict: row.verdict,
                },
            ));
        }
        counts.add(trial_counts);
    }
    let mut row = make_row(algorithm.as_ref(), scenario, store_name, config, counts);
    row.timeline = drawn;
    Ok(row)
}

fn make_row<S: Store>(
    algorithm: &dyn Algorithm<S>,
    scenario: Scenario,
    store_name: &str,
    config: &RaceConfig,
    mut counts: Counts,
) -> Row {
    counts.handoffs.sort();
    let pct = |p: f64| -> Option<u64> {
        if counts.handoffs.is_empty() {
            return None;
        }
        let i = ((counts.handoffs.len() - 1) as f64 * p).round() as usize;
        Some(counts.handoffs[i].as_micros() as u64)
    };
    let mut row = Row {
        algorithm: algorithm.name().to_owned(),
        scenario: scenario.name().to_owned(),
        store: store_name.to_owned(),
        expectation: match algorithm.expectation() {
            Expectation::Safe => "safe",
            Expectation::Flawed => "flawed",
            Expectation::Unfenced => "unfenced",
        }
        .to_owned(),
        clients: config.clients,
        trials: config.trials,
        acquisitions: counts.acquisitions,
        overlaps: counts.overlaps,
        overlaps_past_lease: counts.overlaps_past_lease,
        foreign_deletions: counts.foreign_deletions,
        stale_writes_accepted: counts.stale_writes_accepted,
        writes_rejected: counts.writes_rejected,
        stuck_locks: counts.stuck_locks,
        late_deadlines: counts.late_deadlines,
        handoff_p50_us: pct(0.5),
        handoff_p99_us: pct(0.99),
        stalls: counts.stalls,
        crashes: counts.crashes,
        replies_dropped: counts.replies_dropped,
        verdict: String::new(),
        timeline: None,
    };
    row.verdict = match (algorithm.expectation(), row.broken(), row.flaws()) {
        (Expectation::Safe | Expectation::Unfenced, true, _) => "BROKEN",
        (Expectation::Safe | Expectation::Unfenced, false, _) => "ok",
        (Expectation::Flawed, _, 0) => "no flaw shown",
        (Expectation::Flawed, _, _) => "flaws shown",
    }
    .to_owned();
    row
}

fn fxhash(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    })
}

async fn client_loop<S: Store>(
    client: Client<S>,
    algorithm: Arc<dyn Algorithm<S>>,
    lock: String,
    end: Duration,
) -> tairlock::Result<()> {
    let lease = client.plan().lease;
    // Start at different moments, as real clients do.
    client
        .sleep(client.jitter(Duration::ZERO, lease / 10))
        .await;
    // Whether the last acquire got no answer: the next one repeats it.
    let mut repeat = false;
    while client.now() < end {
        match one_round(&client, algorithm.as_ref(), &lock, lease, repeat).await {
            Ok(round) => repeat = round == Round::Unanswered,
            Err(Interrupt::Crashed) => {
                repeat = false;
                client.crash().await;
            }
            // A crash at a pause of the client's `paused_store`, returned as a store error.
            Err(Interrupt::Store(_)) if client.take_crash() => {
                repeat = false;
                client.crash().await;
            }
            Err(Interrupt::Store(e)) => return Err(e),
        }
    }
    Ok(())
}

impl<S: Store> Client<S> {
    /// The process died; a new one starts after a while, knowing nothing.
    async fn crash(&self) {
        // The process died; a new one starts after a while, knowing nothing.
        self.trial().crashed(self.id());
        self.sleep(self.plan().lease / 2).await;
        self.trial().record(|r, at| r.restart(self.id(), at));
    }
}

/// How one round ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Round {
    /// Acquired, worked and released; or found the lock busy.
    Done,
    /// The acquire got no answer: the next round repeats it.
    Unanswered,
}

async fn one_round<S: Store>(
    client: &Client<S>,
    algorithm: &dyn Algorithm<S>,
    lock: &str,
    lease: Duration,
    repeat: bool,
) -> Result<Round, Interrupt> {
    if !repeat {
        // A new acquisition: what the client wrote before is no grant. A repeat may find the
        // grant its unanswered attempt made, so what that attempt wrote stays pending.
        client.trial().attempt(client.id());
    }
    client.acquiring(true, !repeat);
    let attempt = algorithm.try_acquire(client, lock, lease).await;
    client.acquiring(false, false);
    let holding = match attempt {
        Ok(Attempt::Acquired(holding)) => holding,
        Ok(Attempt::Busy { retry_after }) => {
            client.trial().busy(client.id());
            let backoff = client.jitter(lease / 50, lease / 15);
            match algorithm.woken(client, lock) {
                // Listening: until a message may have handed it the lock, or for the time the
                // algorithm gave (the holder's remaining time, a refresh of its place).
                Some(woken) => {
                    let retry = retry_after.unwrap_or(backoff).max(lease / 200);
                    tokio::select! {
                        () = client.sleep(retry) => {}
                        () = woken => {}
                    }
                }
                // Poll: the holder's remaining time when known, capped by a short jittered
                // back-off.
                None => {
                    client
                        .sleep(retry_after.map_or(backoff, |r| r.min(backoff).max(lease / 200)))
                        .await
                }
            }
            return Ok(Round::Done);
        }
        // No answer (the store may have applied it): repeat after a short back-off.
        Err(Interrupt::Store(e)) if e.is_transient() && !client.crash_pending() => {
            client.trial().busy(client.id());
            client.sleep(client.jitter(lease / 50, lease / 15)).await;
            return Ok(Round::Unanswered);
        }
        Err(e) => return Err(e),
    };
    // The deadline audit: where the lease stands on the server, right after the grant.
    let mut server_end = algorithm.lease_end(client, lock, &holding).await?;
    if let Some(audit::ServerEnd::Gone(_)) = server_end
        && client.audit() == Audit::Commands
        && !matches!(
            algorithm.lease_at(lock, &holding),
            Some(audit::LeaseAt::Member { .. })
        )
    {
        // A value gone from a server right after its grant: ended, or removed by another
        // client, whose command the race sees only when its reply comes back, possibly after
        // this read (replies do not come back in the order the server ran the commands).
        // Nothing is known of its end. (The embedded store reports each removal as it applies
        // it, so there a value gone and removed by nobody has ended; and nobody removes
        // another's reader or permit.)
        server_end = None;
    }
    let trial = client.trial();
    let timer = &client.plan().timer;
    let shared = algorithm.is_shared(&holding);
    let capacity = algorithm.capacity();
    let grant = trial.enter_grant(
        client.id(),
        trial::Grant {
            value: &holding.value,
            shared,
            capacity,
            deadline: timer.since_start(holding.deadline),
            server_end: server_end.map(|end| match end {
                audit::ServerEnd::By(at) => trial::End::By(timer.since_start(at)),
                audit::ServerEnd::Never => trial::End::Never,
                audit::ServerEnd::Gone(at) => trial::End::Gone(timer.since_start(at)),
            }),
        },
    );
    let work = client.with_rng(|rng| client.plan().work(rng));
    let left = holding
        .deadline
        .saturating_duration_since(tokio::time::Instant::now());
    trial.record(|r, at| r.holding(client.id(), holding.fence, at + left));
    let action = client.with_rng(|rng| client.plan().in_critical_section(rng, left, work));
    if let Err(e) = client.act(action).await {
        // Crashed inside: `client_loop` lets its claim go.
        trial.leave(shared);
        return Err(e);
    }
    if !shared && capacity == 1 {
        trial.write(grant, holding.fence);
    }
    client.sleep(work).await;
    trial.leave(shared);
    trial.record(|r, at| r.leave(client.id(), at));
    algorithm.release(client, lock, holding).await?;
    trial.released(client.id(), shared || capacity > 1);
    // Think time before the next attempt.
    client
        .sleep(client.jitter(Duration::ZERO, lease / 20))
        .await;
    Ok(Round::Done)
}
