//! Cancellation fuzz: clients that drop their futures at random points, through the
//! fault-injection proxy in front of a real server, and two checks after.
//!
//! - Clients: each with its own store through one [`Proxy`] in front of one `redis-server`.
//!   Each loops over the waiting calls of every kind — the expire lock, the expire lock in fair
//!   mode, the counting semaphore (plain and fair), `lock_many` over a few expire locks, the
//!   RwLock's read and write — with a random patience, and drops about half of them at a random moment between
//!   the call and a little past its patience: before the first attempt is sent, while it is in
//!   flight, while the call waits, and (at the patience deadline) while it undoes what an
//!   attempt may have taken. Holding, it drops some renewals and some releases midway, and
//!   drops some guards without releasing them.
//! - Nemesis: latency, dropped replies, resets, short black holes and acquire-reply outages
//!   (every reply to an acquire script dropped, the server having run it), so that attempts and
//!   undos are slow or unanswered when the futures are dropped. No restart: the checks below are
//!   about what the clients leave on the server.
//!
//! Checked after the run, and printed as a table:
//!
//! 1. orphans: once every client stopped (its last release returned, was dropped, or its
//!    guard was dropped), every key of every lock is gone within one lease plus the fence
//!    retention (the leases and the fence retention are short here, so that is the whole
//!    keyspace): no lock is left held by nobody beyond one lease.
//! 2. patience: no waiting call that was not dropped returned later than its patience + one
//!    round trip (the response timeout, the longest one can take here) + [`PATIENCE_SLACK`]
//!    (scheduling on a loaded machine).
//!
//! `TAIRLOCK_CANCEL_FUZZ_SECS` (default 30) and `TAIRLOCK_CANCEL_FUZZ_SEED` (default 5) choose
//! the run; a failure prints the seed and the event log.

mod support;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::RedisServer;
use support::proxy::{Proxy, Which};
use tairlock::store::redis::RedisOptions;
use tairlock::{ExpireLock, Options, RedisStore, Script, Semaphore, SemaphoreOptions};
use tairlock_rwlock::RwLock;

/// Every lease (the watchdog's), the fair waiters' lease and the fence retention: short enough
/// that one lease after the run every key must be gone, and longer than a patience plus a round
/// trip and the slack, so that a call that goes on undoing until a lease would have run out
/// overruns its patience visibly.
const LEASE: Duration = Duration::from_millis(4000);
const WAITER_LEASE: Duration = Duration::from_millis(2000);
const FENCE_RETENTION: Duration = Duration::from_millis(500);
const CLIENTS: usize = 6;
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// Beyond patience + one round trip: scheduling on a loaded 2-core machine.
const PATIENCE_SLACK: Duration = Duration::from_millis(1000);
/// Beyond one lease and the fence retention for the last keys to go: polling, and a
/// background release still in flight when the last client stopped.
const ORPHAN_SLACK: Duration = Duration::from_millis(1500);
const SEMAPHORE_PERMITS: u32 = 2;
const MANY: [&str; 3] = ["many:a", "many:b", "many:c"];

/// The scripts that grant, whose replies an acquire-reply outage drops.
static ACQUIRES: [&Script; 6] = [
    &tairlock::scripts::EXPIRE_LOCK,
    &tairlock::scripts::FAIR_LOCK,
    &tairlock::scripts::SEM_ACQUIRE,
    &tairlock::scripts::LOCK_MANY,
    &tairlock_rwlock::scripts::READ_ACQUIRE,
    &tairlock_rwlock::scripts::WRITE_ACQUIRE,
];

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Exp,
    Fair,
    Semaphore,
    FairSemaphore,
    Many,
    Read,
    Write,
}

impl Kind {
    const ALL: [Kind; 7] = [
        Kind::Exp,
        Kind::Fair,
        Kind::Semaphore,
        Kind::FairSemaphore,
        Kind::Many,
        Kind::Read,
        Kind::Write,
    ];

    fn name(self) -> &'static str {
        match self {
            Kind::Exp => "expire lock",
            Kind::Fair => "fair expire lock",
            Kind::Semaphore => "semaphore",
            Kind::FairSemaphore => "fair semaphore",
            Kind::Many => "lock_many",
            Kind::Read => "rwlock read",
            Kind::Write => "rwlock write",
        }
    }
}

/// What one waiting call came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Outcome {
    Acquired,
    TimedOut,
    Error,
    /// Its future was dropped before it returned.
    Dropped,
}

#[derive(Debug, Default)]
struct Log {
    events: Vec<(Instant, String)>,
    calls: BTreeMap<(Kind, Outcome), u64>,
    dropped: BTreeMap<&'static str, u64>,
    faults: BTreeMap<&'static str, u64>,
    patience_violations: Vec<String>,
}

#[derive(Debug, Clone)]
struct Shared(Arc<Mutex<Log>>);

impl Shared {
    fn with<T>(&self, f: impl FnOnce(&mut Log) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn event(&self, text: String) {
        self.with(|log| log.events.push((Instant::now(), text)));
    }

    fn fault(&self, kind: &'static str) {
        self.with(|log| {
            *log.faults.entry(kind).or_default() += 1;
            log.events
                .push((Instant::now(), format!("nemesis: {kind}")));
        });
    }

    fn dropped(&self, what: &'static str) {
        self.with(|log| *log.dropped.entry(what).or_default() += 1);
    }
}

/// A held guard of any kind.
enum Guard {
    Exp(tairlock::LockGuard<RedisStore>),
    Permit(tairlock::PermitGuard<RedisStore>),
    Many(tairlock::MultiGuard<RedisStore>),
    Read(tairlock_rwlock::ReadGuard<RedisStore>),
    Write(tairlock_rwlock::WriteGuard<RedisStore>),
}

struct Client {
    id: usize,
    exp: ExpireLock<RedisStore>,
    fair: ExpireLock<RedisStore>,
    semaphore: Semaphore<RedisStore>,
    fair_semaphore: Semaphore<RedisStore>,
    rw: RwLock<RedisStore>,
    log: Shared,
    rng: StdRng,
    until: Instant,
}

/// `fut`, dropped after `after` if it has not returned by then (`None`: never dropped).
async fn maybe_drop<T>(after: Option<Duration>, fut: impl Future<Output = T>) -> Option<T> {
    match after {
        Some(after) => tokio::time::timeout(after, fut).await.ok(),
        None => Some(fut.await),
    }
}

impl Client {
    async fn run(mut self) {
        while Instant::now() < self.until {
            // Twice as many fair calls and permits: their waiters leave something on the
            // server (a place in the queue) that giving up must undo.
            let kind = match self.rng.random_range(0..Kind::ALL.len() + 2) {
                n if n < Kind::ALL.len() => Kind::ALL[n],
                n if n == Kind::ALL.len() => Kind::Fair,
                _ => Kind::FairSemaphore,
            };
            let patience = Duration::from_millis(self.rng.random_range(50..1500));
            // About half the calls are dropped, anywhere from before the first attempt to a
            // little past the patience (where the call undoes what it may have taken).
            let drop_after =
                self.rng.random_bool(0.5).then(|| {
                    Duration::from_micros(self.rng.random_range(
                        0..(patience + Duration::from_millis(300)).as_micros() as u64,
                    ))
                });
            let asked = Instant::now();
            let outcome = maybe_drop(drop_after, self.acquire(kind, patience)).await;
            let took = asked.elapsed();
            let outcome = match outcome {
                None => {
                    self.count(kind, Outcome::Dropped);
                    continue;
                }
                Some(outcome) => outcome,
            };
            if overran(patience, took) {
                let text = format!(
                    "client {}: {} returned {took:?} after it was called, with a patience of \
                     {patience:?} ({})",
                    self.id,
                    kind.name(),
                    match &outcome {
                        Ok(Some(_)) => "acquired".to_owned(),
                        Ok(None) => "timed out".to_owned(),
                        Err(e) => format!("error: {e}"),
                    }
                );
                self.log
                    .with(|log| log.patience_violations.push(text.clone()));
                self.log.event(text);
            }
            match outcome {
                Ok(Some(guard)) => {
                    self.count(kind, Outcome::Acquired);
                    self.hold(kind, guard).await;
                }
                Ok(None) => self.count(kind, Outcome::TimedOut),
                Err(e) => {
                    self.count(kind, Outcome::Error);
                    self.log
                        .event(format!("client {}: {} error: {e}", self.id, kind.name()));
                }
            }
            let pause = self.rng.random_range(0..50);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    fn count(&self, kind: Kind, outcome: Outcome) {
        self.log
            .with(|log| *log.calls.entry((kind, outcome)).or_default() += 1);
    }

    async fn acquire(&self, kind: Kind, patience: Duration) -> tairlock::Result<Option<Guard>> {
        Ok(match kind {
            Kind::Exp => self
                .exp
                .try_lock_for("exp", patience)
                .await?
                .map(Guard::Exp),
            Kind::Fair => self
                .fair
                .try_lock_for("fair", patience)
                .await?
                .map(Guard::Exp),
            Kind::Semaphore => self
                .semaphore
                .try_acquire_for("sem", 1, patience)
                .await?
                .map(Guard::Permit),
            Kind::FairSemaphore => self
                .fair_semaphore
                .try_acquire_for("sem-fair", 1, patience)
                .await?
                .map(Guard::Permit),
            Kind::Many => {
                // Two or three of the names, in an order of their own (the call sorts them).
                let mut names = MANY.to_vec();
                names.rotate_left(self.id % MANY.len());
                names.truncate(2 + self.id % 2);
                self.exp
                    .try_lock_many_for(&names, patience)
                    .await?
                    .map(Guard::Many)
            }
            Kind::Read => self.rw.try_read_for("rw", patience).await?.map(Guard::Read),
            Kind::Write => self
                .rw
                .try_write_for("rw", patience)
                .await?
                .map(Guard::Write),
        })
    }

    async fn hold(&mut self, kind: Kind, guard: Guard) {
        let hold_for = Duration::from_millis(self.rng.random_range(0..1500));
        tokio::time::sleep(hold_for / 2).await;
        // A renewal, sometimes dropped midway.
        if self.rng.random_bool(0.5) {
            let drop_after = self
                .rng
                .random_bool(0.5)
                .then(|| Duration::from_millis(self.rng.random_range(0..300)));
            let renewed = match &guard {
                Guard::Exp(g) => maybe_drop(drop_after, g.renew(LEASE)).await,
                Guard::Permit(g) => maybe_drop(drop_after, g.renew(LEASE)).await,
                Guard::Many(g) => maybe_drop(drop_after, g.renew(LEASE)).await,
                Guard::Read(_) | Guard::Write(_) => Some(Ok(())),
            };
            if renewed.is_none() {
                self.log.dropped("renewal");
            }
        }
        tokio::time::sleep(hold_for / 2).await;
        // The release: awaited, dropped midway, or not even started (the guard dropped).
        match self.rng.random_range(0..4) {
            0 => {
                drop(guard);
                self.log.dropped("guard, unreleased");
            }
            n => {
                let drop_after =
                    (n == 1).then(|| Duration::from_millis(self.rng.random_range(0..200)));
                let released = match guard {
                    Guard::Exp(g) => maybe_drop(drop_after, g.release()).await.map(|r| r.is_ok()),
                    Guard::Permit(g) => {
                        maybe_drop(drop_after, g.release()).await.map(|r| r.is_ok())
                    }
                    Guard::Many(g) => maybe_drop(drop_after, g.release()).await.map(|r| r.is_ok()),
                    Guard::Read(g) => maybe_drop(drop_after, g.release()).await.map(|r| r.is_ok()),
                    Guard::Write(g) => maybe_drop(drop_after, g.release()).await.map(|r| r.is_ok()),
                };
                match released {
                    None => self.log.dropped("release"),
                    Some(false) => self.log.event(format!(
                        "client {}: {} release failed",
                        self.id,
                        kind.name()
                    )),
                    Some(true) => {}
                }
            }
        }
    }
}

/// The patience check: a waiting call that returned `took` after it was called, with
/// `patience`, overran it by more than one round trip and the slack.
fn overran(patience: Duration, took: Duration) -> bool {
    took > patience + RESPONSE_TIMEOUT + PATIENCE_SLACK
}

/// The orphan check: the keys (with their `PTTL`) still on the server at `due`, polled until
/// every key is gone or `due` passes.
async fn keys_left(direct: &RedisStore, due: Instant) -> Vec<(String, i64)> {
    loop {
        let keys: Vec<String> = direct
            .command(redis::cmd("KEYS").arg("*"))
            .await
            .expect("KEYS");
        let mut left = Vec::new();
        for key in keys {
            let pttl: i64 = direct
                .command(redis::cmd("PTTL").arg(&key))
                .await
                .expect("PTTL");
            if pttl != -2 {
                left.push((key, pttl));
            }
        }
        if left.is_empty() || Instant::now() >= due {
            return left;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The nemesis: a fault every few hundred ms, on the data connections.
fn nemesis(proxy: Arc<Proxy>, log: Shared, seed: u64, until: Instant) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6e656d65);
    let sleep = |ms: u64| std::thread::sleep(Duration::from_millis(ms));
    while Instant::now() < until {
        sleep(rng.random_range(100..500));
        match rng.random_range(0..7) {
            0 => {
                log.fault("latency");
                proxy.latency(
                    Which::Data,
                    Duration::from_millis(rng.random_range(20..200)),
                );
                sleep(rng.random_range(300..1500));
                proxy.latency(Which::Data, Duration::ZERO);
            }
            1 => {
                log.fault("drop replies");
                proxy.drop_replies(Which::Data, rng.random_range(1..4));
            }
            2 => {
                log.fault("reset");
                proxy.reset(Which::Data);
            }
            3 => {
                // Long enough that a call whose patience ends inside it finds no answer to its
                // undo either.
                log.fault("black hole");
                proxy.black_hole(Which::Data);
                sleep(rng.random_range(300..3000));
                proxy.heal(Which::Data);
            }
            4 => {
                log.fault("acquire reply outage");
                for script in ACQUIRES {
                    proxy.drop_replies_matching(Which::Data, script.sha1().as_bytes(), 100_000);
                }
                sleep(rng.random_range(500..1500));
                proxy.heal(Which::Data);
            }
            5 => {
                // The server stops answering for a while, whoever asks.
                log.fault("black hole");
                proxy.black_hole(Which::All);
                sleep(rng.random_range(300..3000));
                proxy.heal(Which::All);
            }
            _ => {} // a quiet moment
        }
    }
    proxy.heal(Which::All);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_futures_leave_no_lock_behind_and_no_call_overruns_its_patience() {
    let secs: u64 = std::env::var("TAIRLOCK_CANCEL_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("TAIRLOCK_CANCEL_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(5);
    let server = RedisServer::start();
    let proxy = Arc::new(Proxy::start(server.port()));
    let direct = server.store().await;
    let log = Shared(Arc::new(Mutex::new(Log::default())));
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);

    let mut clients = Vec::new();
    for id in 0..CLIENTS {
        let mut options = RedisOptions::default();
        options.response_timeout = RESPONSE_TIMEOUT;
        options.connection_timeout = RESPONSE_TIMEOUT;
        let store = proxy.store_with(options).await;
        let lock_options = Options::default()
            .watchdog_lease(LEASE)
            .fence_retention(FENCE_RETENTION);
        let semaphore_options = SemaphoreOptions::default()
            .watchdog_lease(LEASE)
            .fence_retention(FENCE_RETENTION);
        let client = Client {
            id,
            exp: ExpireLock::with_options(store.clone(), lock_options.clone()),
            fair: ExpireLock::with_options(
                store.clone(),
                lock_options.fair(true).waiter_lease(WAITER_LEASE),
            ),
            semaphore: Semaphore::with_options(
                store.clone(),
                SEMAPHORE_PERMITS,
                semaphore_options.clone(),
            ),
            fair_semaphore: Semaphore::with_options(
                store.clone(),
                SEMAPHORE_PERMITS,
                semaphore_options.fair(true).waiter_lease(WAITER_LEASE),
            ),
            rw: RwLock::with_options(
                store,
                tairlock_rwlock::Options::default()
                    .watchdog_lease(LEASE)
                    .fence_retention(FENCE_RETENTION),
            ),
            log: log.clone(),
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(id as u64)),
            until,
        };
        clients.push(tokio::spawn(client.run()));
    }
    let nemesis = {
        let (proxy, log) = (proxy.clone(), log.clone());
        std::thread::spawn(move || nemesis(proxy, log, seed, until))
    };
    for client in clients {
        tokio::time::timeout(Duration::from_secs(secs + 60), client)
            .await
            .expect("a client finishes")
            .expect("a client does not panic");
    }
    tokio::task::spawn_blocking(move || nemesis.join())
        .await
        .unwrap()
        .expect("the nemesis does not panic");
    let stopped = Instant::now();

    // 1. Orphans: one lease and the fence retention after the last client stopped, nothing is
    // left. Poll until then, to report when each key went.
    let left = keys_left(&direct, stopped + LEASE + FENCE_RETENTION + ORPHAN_SLACK).await;
    let mut orphans = Vec::new();
    for (key, pttl) in &left {
        orphans.push(format!(
            "orphan: {key} still on the server {:?} after the last client stopped (PTTL {pttl} ms)",
            stopped.elapsed()
        ));
    }

    let log = log.with(std::mem::take);
    let mut table = String::new();
    let _ = writeln!(
        table,
        "cancel fuzz: seed {seed}, {secs} s, {CLIENTS} clients, lease {LEASE:?}"
    );
    let _ = writeln!(table, "{:<44} {:>6}", "faults injected (nemesis)", "count");
    for (kind, n) in &log.faults {
        let _ = writeln!(table, "  {kind:<42} {n:>6}");
    }
    let _ = writeln!(table, "{:<44} {:>6}", "proxy fault counters", "");
    for (kind, n) in proxy.faults() {
        let _ = writeln!(table, "  {kind:<42} {n:>6}");
    }
    let _ = writeln!(table, "{:<44} {:>6}", "waiting calls", "");
    for ((kind, outcome), n) in &log.calls {
        let _ = writeln!(
            table,
            "  {:<42} {n:>6}",
            format!("{} {outcome:?}", kind.name())
        );
    }
    let _ = writeln!(table, "{:<44} {:>6}", "dropped while holding", "");
    for (what, n) in &log.dropped {
        let _ = writeln!(table, "  {what:<42} {n:>6}");
    }
    let _ = writeln!(table, "{:<44} {:>6}", "invariant", "violations");
    let _ = writeln!(
        table,
        "  {:<42} {:>6}",
        "keys left beyond one lease",
        orphans.len()
    );
    let _ = writeln!(
        table,
        "  {:<42} {:>6}",
        "waits past patience",
        log.patience_violations.len()
    );
    println!("{table}");
    let acquired: u64 = log
        .calls
        .iter()
        .filter(|((_, o), _)| *o == Outcome::Acquired)
        .map(|(_, n)| n)
        .sum();
    assert!(acquired > 0, "nothing was ever acquired\n{table}");
    let violations: Vec<&String> = orphans.iter().chain(&log.patience_violations).collect();
    if !violations.is_empty() {
        let mut report = String::new();
        let _ = writeln!(report, "{table}\nviolations (seed {seed}):");
        for v in &violations {
            let _ = writeln!(report, "  {v}");
        }
        let _ = writeln!(report, "event log (seed {seed}):");
        for (at, text) in &log.events {
            let _ = writeln!(report, "  {:>9.3} s  {text}", (*at - start).as_secs_f64());
        }
        panic!("{report}");
    }
}

// The checks themselves: each flags a synthetic violation and passes a correct history.

#[test]
fn the_patience_check_allows_one_round_trip_and_the_slack_and_no_more() {
    let patience = Duration::from_millis(700);
    assert!(!overran(patience, patience));
    assert!(!overran(
        patience,
        patience + RESPONSE_TIMEOUT + PATIENCE_SLACK
    ));
    assert!(overran(
        patience,
        patience + RESPONSE_TIMEOUT + PATIENCE_SLACK + Duration::from_millis(1)
    ));
}

#[tokio::test]
async fn the_orphan_check_flags_a_key_that_outlives_its_time_and_not_one_that_expires() {
    let server = RedisServer::start();
    let direct = server.store().await;
    // A lease that runs out, and one held by nobody that never does.
    let _: () = direct
        .command(redis::cmd("SET").arg("lapses").arg("x").arg("PX").arg(200))
        .await
        .unwrap();
    let _: () = direct
        .command(redis::cmd("SET").arg("stuck").arg("x"))
        .await
        .unwrap();
    let left = keys_left(&direct, Instant::now() + Duration::from_millis(800)).await;
    assert_eq!(left, vec![("stuck".to_owned(), -1)]);
    let _: () = direct
        .command(redis::cmd("DEL").arg("stuck"))
        .await
        .unwrap();
    assert!(keys_left(&direct, Instant::now()).await.is_empty());
}
