//! Waiting for a busy lock (DESIGN.md §7, issue #4 part 3), on a real `redis-server`.
//!
//! - `lock()`/`try_lock_for()` wait by notification: the handoff latency (release → the waiter
//!   holds) is a few round trips, not a poll interval (p50/p99 printed).
//! - Local waiters on one key are coalesced: the Redis commands per handoff stay O(1) as the
//!   number of local waiters grows (N = 1, 8, 32; counted with `INFO commandstats`).
//! - Every wait is bounded by the holder's remaining time: a key deleted behind the lock's back
//!   without a message, a release whose message is lost, and a killed subscription all cost at
//!   most one lease.
//! - The polling strategy works and never subscribes.
//! - Fairness: 8 workers contending on one key, 1 ms holds. The issue asks for 10 s; these run
//!   3 s each to fit CI (the statistics are stable well before that). Same-worker re-acquisition
//!   % and the longest wait are printed, for workers sharing one client (the local FIFO applies)
//!   and for workers on separate clients (separate connections: only the server arbitrates).
//!
//! The timing-sensitive tests take a file-wide lock so they do not share the CPU with each
//! other.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::{
    ExpireLock, Options, RedisStore, Reply, Result, Script, Store, Ttl, Unlock, WaitStrategy,
};

const NAME: &str = "contended";

/// Serialises the timing-sensitive tests of this file.
static TIMING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

/// `calls` per command from `INFO commandstats`.
fn command_counts(server: &RedisServer) -> BTreeMap<String, u64> {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| line.strip_prefix("cmdstat_"))
        .filter_map(|line| {
            let (name, rest) = line.split_once(':')?;
            let calls = rest
                .split(',')
                .find_map(|kv| kv.strip_prefix("calls="))?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

/// What the lock clients sent, split into commands sent by clients (round trips) and commands
/// run inside scripts; the test's own `INFO`/`CONFIG` connections are left out.
#[derive(Debug, Default)]
struct Sent {
    /// Commands the clients sent themselves, by name (`evalsha`, `subscribe`, ...).
    client: BTreeMap<String, u64>,
    /// Commands run by scripts (`type`, `get`, `set`, `publish`, ...).
    in_scripts: u64,
}

impl Sent {
    fn read(server: &RedisServer) -> Sent {
        const IN_SCRIPTS: [&str; 8] = [
            "type", "get", "set", "del", "pttl", "time", "publish", "exists",
        ];
        let mut sent = Sent::default();
        for (name, calls) in command_counts(server) {
            if name == "info" || name.starts_with("config|") || name.starts_with("client|setinfo") {
                continue;
            }
            if IN_SCRIPTS.contains(&name.as_str()) {
                sent.in_scripts += calls;
            } else {
                sent.client.insert(name, calls);
            }
        }
        sent
    }

    fn round_trips(&self) -> u64 {
        self.client.values().sum()
    }

    fn of(&self, name: &str) -> u64 {
        self.client.get(name).copied().unwrap_or(0)
    }
}

fn reset_stats(server: &RedisServer) {
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i]
}

/// Handoff latency: a holder on one client releases, a waiter on another client is parked in
/// `lock()`; the time from the release call to the waiter holding.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lock_waits_by_notification_and_hands_off_in_round_trips() {
    let _timing = TIMING.lock().await;
    let server = RedisServer::start();
    let holder = ExpireLock::new(server.store().await);
    let waiter = ExpireLock::new(server.store().await);
    // Warm up: scripts loaded, the waiter's pub/sub connection made.
    waiter.lock(NAME).await.unwrap().release().await.unwrap();

    // 1. Long waits (60 ms) cost no polling: per handoff the waiter sends one failed and one
    //    successful attempt, whatever the wait.
    const LONG: u32 = 20;
    reset_stats(&server);
    for _ in 0..LONG {
        let held = holder
            .lock_with_lease(NAME, Duration::from_secs(5), None)
            .await
            .unwrap()
            .unwrap();
        let w = waiter.clone();
        let parked = tokio::spawn(async move { w.lock(NAME).await.unwrap() });
        tokio::time::sleep(Duration::from_millis(60)).await;
        assert!(!parked.is_finished());
        assert_eq!(held.release().await.unwrap(), Unlock::Released);
        parked.await.unwrap().release().await.unwrap();
    }
    let sent = Sent::read(&server);
    println!("{LONG} handoffs after 60 ms waits: {:?}", sent.client);
    // Holder acquire and release; the waiter's failed attempt, its successful attempt after
    // the release, and its release: 5 per handoff, whatever the wait.
    assert!(
        sent.of("evalsha") <= 5 * u64::from(LONG) + 2,
        "the waiter polled instead of waiting for the release: {:?}",
        sent.client
    );

    // 2. Latency.
    const RUNS: usize = 150;
    let mut latencies = Vec::with_capacity(RUNS);
    for _ in 0..RUNS {
        let held = holder
            .lock_with_lease(NAME, Duration::from_secs(5), None)
            .await
            .unwrap()
            .unwrap();
        let w = waiter.clone();
        let parked = tokio::spawn(async move {
            let guard = w.lock(NAME).await.unwrap();
            (Instant::now(), guard)
        });
        tokio::time::sleep(Duration::from_millis(3)).await;
        let released = Instant::now();
        assert_eq!(held.release().await.unwrap(), Unlock::Released);
        let (holding, guard) = parked.await.unwrap();
        latencies.push(holding.saturating_duration_since(released));
        guard.release().await.unwrap();
    }
    latencies.sort();
    let (p50, p99, max) = (
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        latencies[RUNS - 1],
    );
    println!("handoff latency over {RUNS} runs: p50 {p50:?}, p99 {p99:?}, max {max:?}");
    assert!(
        p50 < Duration::from_millis(20),
        "p50 {p50:?} is a poll interval"
    );
    assert!(
        max < Duration::from_secs(1),
        "a handoff took {max:?}: the waiter was not woken by the release"
    );

    // 3. try_lock_for waits the same way.
    let held = holder
        .lock_with_lease(NAME, Duration::from_secs(5), None)
        .await
        .unwrap()
        .unwrap();
    let w = waiter.clone();
    let parked = tokio::spawn(async move {
        let guard = w.try_lock_for(NAME, Duration::from_secs(3)).await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (holding, guard) = parked.await.unwrap();
    let guard = guard.expect("released well within the timeout");
    println!("try_lock_for handoff: {:?}", holding - released);
    assert!(holding - released < Duration::from_millis(500));
    guard.release().await.unwrap();
}

/// N tasks of one client contend on one key (1 ms holds) for a fixed number of acquisitions;
/// returns (client commands, commands run in scripts) per acquisition.
async fn commands_per_handoff(n: usize) -> (f64, f64, BTreeMap<String, u64>) {
    const ACQUISITIONS: usize = 128;
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    // Warm up: scripts loaded, the pub/sub connection made.
    locks.lock(NAME).await.unwrap().release().await.unwrap();
    // All N tasks start while an outside client holds the lock, so all of them wait.
    let outsider = ExpireLock::new(server.store().await);
    let held = outsider.try_lock(NAME).await.unwrap().unwrap();

    reset_stats(&server);
    let done = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (locks, done) = (locks.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while done.fetch_add(1, Ordering::SeqCst) < ACQUISITIONS {
                let guard = locks.lock(NAME).await.unwrap();
                tokio::time::sleep(Duration::from_millis(1)).await;
                assert_eq!(guard.release().await.unwrap(), Unlock::Released);
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(50)).await;
    held.release().await.unwrap();
    for task in tasks {
        task.await.unwrap();
    }
    // Let the last unsubscribe land.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let sent = Sent::read(&server);
    // The outsider's release is one more handoff.
    let handoffs = (ACQUISITIONS + 1) as f64;
    (
        sent.round_trips() as f64 / handoffs,
        sent.in_scripts as f64 / handoffs,
        sent.client,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn local_waiters_cost_constant_commands_per_handoff() {
    let _timing = TIMING.lock().await;
    let mut per = Vec::new();
    for n in [1, 8, 32] {
        let (client, in_scripts, detail) = commands_per_handoff(n).await;
        println!(
            "N={n:>2}: {client:.2} client commands per handoff (+{in_scripts:.2} inside scripts): \
             {detail:?}"
        );
        per.push((n, client));
    }
    let (_, one) = per[0];
    for &(n, client) in &per {
        assert!(
            client <= 4.0,
            "N={n}: {client:.2} client commands per handoff (bound 4)"
        );
        assert!(
            client <= one + 1.0,
            "N={n}: {client:.2} commands per handoff grows with the waiters (N=1: {one:.2})"
        );
    }
}

/// The key is deleted behind the lock's back and nothing is published: the waiter still gets in
/// within one lease of the holder's.
#[tokio::test]
async fn a_key_deleted_without_a_message_costs_at_most_one_lease() {
    let server = RedisServer::start();
    let holder = ExpireLock::new(server.store().await);
    let waiter = ExpireLock::new(server.store().await);
    let lease = Duration::from_secs(1);
    let held = holder
        .lock_with_lease(NAME, lease, None)
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let parked = tokio::spawn(async move {
        let guard = waiter.lock(NAME).await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!parked.is_finished());
    assert_eq!(server.cli(&["DEL", &key(NAME)]), "1");
    let deleted = Instant::now();
    let (holding, guard) = tokio::time::timeout(lease * 2, parked)
        .await
        .expect("the waiter is stuck past the holder's lease")
        .unwrap();
    println!(
        "deleted without a message: waiter in {:?} after the delete, {:?} after it started \
         waiting (lease {lease:?})",
        holding - deleted,
        holding - started
    );
    assert!(
        holding - started <= lease + Duration::from_millis(250),
        "the wait was not bounded by the holder's remaining time"
    );
    assert_eq!(held.release().await.unwrap(), Unlock::HeldByOther);
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
}

/// A store whose releases publish nothing: the release message is lost. With `.1` set, its
/// notifier also takes 10 s to come up (a subscription that hangs).
#[derive(Debug, Clone)]
struct LostMessages(RedisStore, bool);

impl Store for LostMessages {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.0.get(key).await
    }
    async fn set_nx(&self, key: &str, value: &[u8]) -> Result<bool> {
        self.0.set_nx(key, value).await
    }
    async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool> {
        self.0.set_nx_px(key, value, ttl).await
    }
    async fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.0.set(key, value).await
    }
    async fn getset(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.0.getset(key, value).await
    }
    async fn getdel(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.0.getdel(key).await
    }
    async fn del(&self, key: &str) -> Result<bool> {
        self.0.del(key).await
    }
    async fn incr(&self, key: &str) -> Result<i64> {
        self.0.incr(key).await
    }
    async fn decr(&self, key: &str) -> Result<i64> {
        self.0.decr(key).await
    }
    async fn expire(&self, key: &str, seconds: u64) -> Result<bool> {
        self.0.expire(key, seconds).await
    }
    async fn pexpire(&self, key: &str, ttl: Duration) -> Result<bool> {
        self.0.pexpire(key, ttl).await
    }
    async fn pttl(&self, key: &str) -> Result<Ttl> {
        self.0.pttl(key).await
    }
    async fn key_type(&self, key: &str) -> Result<String> {
        self.0.key_type(key).await
    }
    async fn time(&self) -> Result<Duration> {
        self.0.time().await
    }
    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        // EXPIRE_UNLOCK's optional ARGV[2] is the channel it publishes on: drop it.
        let args = if std::ptr::eq(script, &tairlock::scripts::EXPIRE_UNLOCK) {
            &args[..1]
        } else {
            args
        };
        self.0.eval(script, keys, args).await
    }
    async fn notifier(&self) -> Option<tairlock::notify::Notifier> {
        if self.1 {
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
        self.0.notifier().await
    }
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.0.runtime()
    }

    fn pubsub(&self) -> tairlock::notify::PubSub {
        self.0.pubsub()
    }
}

/// The holder releases properly (compare-and-delete) but its message is lost: the waiter still
/// gets in within one lease.
#[tokio::test]
async fn a_lost_release_message_costs_at_most_one_lease() {
    let server = RedisServer::start();
    let holder = ExpireLock::new(LostMessages(server.store().await, false));
    let waiter = ExpireLock::new(server.store().await);
    let lease = Duration::from_secs(1);
    let held = holder
        .lock_with_lease(NAME, lease, None)
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let parked = tokio::spawn(async move {
        let guard = waiter.lock(NAME).await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    reset_stats(&server);
    let released = Instant::now();
    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    assert_eq!(
        Sent::read(&server).in_scripts,
        2,
        "GET, DEL and no PUBLISH: the message is really lost"
    );
    let (holding, guard) = tokio::time::timeout(lease * 2, parked)
        .await
        .expect("the waiter is stuck past the holder's lease")
        .unwrap();
    println!(
        "release message lost: waiter in {:?} after the release, {:?} after it started waiting",
        holding - released,
        holding - started
    );
    assert!(holding - started <= lease + Duration::from_millis(250));
    guard.release().await.unwrap();
}

/// The waiter's subscription is killed just before the release (the message has nobody to go
/// to): the waiter still gets in within one lease (in fact at once: a dropped subscription wakes
/// every local waiter to try again, and so does its reconnection).
#[tokio::test]
async fn a_killed_subscription_costs_at_most_one_lease() {
    let server = RedisServer::start();
    let holder = ExpireLock::new(server.store().await);
    let waiter = ExpireLock::new(server.store().await);
    let lease = Duration::from_secs(1);
    for round in 0..3 {
        let held = holder
            .lock_with_lease(NAME, lease, None)
            .await
            .unwrap()
            .unwrap();
        let started = Instant::now();
        let w = waiter.clone();
        let parked = tokio::spawn(async move {
            let guard = w.lock(NAME).await.unwrap();
            (Instant::now(), guard)
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        let killed: u64 = server
            .cli(&["CLIENT", "KILL", "TYPE", "pubsub"])
            .parse()
            .unwrap();
        // The waiter's, and the holder's if its own subscription from acquiring is still
        // lingering (channels stay subscribed for a few seconds after their last watcher).
        assert!(
            (1..=2).contains(&killed),
            "pub/sub connections killed: {killed}"
        );
        let released = Instant::now();
        assert_eq!(held.release().await.unwrap(), Unlock::Released);
        let (holding, guard) = tokio::time::timeout(lease * 2, parked)
            .await
            .expect("the waiter is stuck past the holder's lease")
            .unwrap();
        println!(
            "round {round}: subscription killed: waiter in {:?} after the release",
            holding - released
        );
        assert!(holding - started <= lease + Duration::from_millis(250));
        guard.release().await.unwrap();
        // The notifier reconnects: later waits are woken by messages again.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let held = holder
        .lock_with_lease(NAME, lease * 5, None)
        .await
        .unwrap()
        .unwrap();
    let w = waiter.clone();
    let parked = tokio::spawn(async move {
        let guard = w.lock(NAME).await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (holding, guard) = parked.await.unwrap();
    assert!(
        holding - released < Duration::from_millis(500),
        "after the reconnection the release message woke the waiter"
    );
    guard.release().await.unwrap();
}

#[tokio::test]
async fn the_polling_strategy_waits_without_subscribing() {
    let server = RedisServer::start();
    let holder = ExpireLock::new(server.store().await);
    let (min, max) = (Duration::from_millis(5), Duration::from_millis(40));
    let waiter = ExpireLock::with_options(
        server.store().await,
        Options::default().wait(WaitStrategy::Poll { min, max }),
    );
    let held = holder
        .lock_with_lease(NAME, Duration::from_secs(10), None)
        .await
        .unwrap()
        .unwrap();
    reset_stats(&server);
    let w = waiter.clone();
    let parked = tokio::spawn(async move {
        let guard = w.lock(NAME).await.unwrap();
        (Instant::now(), guard)
    });
    tokio::time::sleep(Duration::from_millis(400)).await;
    let released = Instant::now();
    held.release().await.unwrap();
    let (holding, guard) = parked.await.unwrap();
    let sent = Sent::read(&server);
    println!(
        "poll: waiter in {:?} after the release; {:?}",
        holding - released,
        sent.client
    );
    assert_eq!(sent.of("subscribe"), 0, "polling never subscribes");
    // 400 ms of back-off capped at 40 ms: at least ~10 attempts, and not a spin.
    let attempts = sent.of("evalsha") - 1;
    assert!(
        (8..=120).contains(&attempts),
        "{attempts} attempts in 400 ms with back-off {min:?}..{max:?}"
    );
    assert!(
        holding - released <= max + Duration::from_millis(60),
        "a polling waiter gets in within one back-off cap"
    );
    guard.release().await.unwrap();

    // try_lock_for with polling times out, and the timeout is honoured.
    let held = holder.try_lock(NAME).await.unwrap().unwrap();
    let start = Instant::now();
    assert!(
        waiter
            .try_lock_for(NAME, Duration::from_millis(150))
            .await
            .unwrap()
            .is_none()
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(150) && took < Duration::from_millis(400),
        "{took:?}"
    );
    held.release().await.unwrap();
}

#[derive(Debug, Default)]
struct Fairness {
    acquisitions: usize,
    per_worker: Vec<usize>,
    same_worker_pct: f64,
    max_wait: Duration,
    mean_cycle: Duration,
    /// The most acquisitions by others between one worker's request and its own acquisition:
    /// a FIFO keeps it to the number of workers, whatever the machine's speed.
    max_overtaken: usize,
}

/// `workers` tasks, each on `locks[i % locks.len()]`, contend on one key for `run`, holding it
/// for `hold` each time.
async fn contend(
    locks: Vec<ExpireLock<RedisStore>>,
    workers: usize,
    hold: Duration,
    run: Duration,
) -> Fairness {
    let order = Arc::new(parking_lot::Mutex::new(
        Vec::<(usize, Duration, usize)>::new(),
    ));
    let seq = Arc::new(AtomicUsize::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for id in 0..workers {
        let locks = locks[id % locks.len()].clone();
        let (order, seq) = (order.clone(), seq.clone());
        tasks.push(tokio::spawn(async move {
            while start.elapsed() < run {
                let asked = Instant::now();
                let asked_seq = seq.load(Ordering::SeqCst);
                let guard = locks.lock(NAME).await.unwrap();
                let overtaken = seq.fetch_add(1, Ordering::SeqCst) - asked_seq;
                order.lock().push((id, asked.elapsed(), overtaken));
                tokio::time::sleep(hold).await;
                assert_eq!(guard.release().await.unwrap(), Unlock::Released);
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let elapsed = start.elapsed();
    let order = order.lock();
    let mut per_worker = vec![0; workers];
    let mut same = 0;
    for (i, &(id, _, _)) in order.iter().enumerate() {
        per_worker[id] += 1;
        if i > 0 && order[i - 1].0 == id {
            same += 1;
        }
    }
    Fairness {
        acquisitions: order.len(),
        per_worker,
        same_worker_pct: 100.0 * same as f64 / (order.len().max(2) - 1) as f64,
        max_wait: order.iter().map(|&(_, w, _)| w).max().unwrap_or_default(),
        mean_cycle: elapsed / order.len().max(1) as u32,
        max_overtaken: order.iter().map(|&(_, _, o)| o).max().unwrap_or_default(),
    }
}

const WORKERS: usize = 8;
const HOLD: Duration = Duration::from_millis(1);
/// The 10 s, shortened for CI.
const RUN: Duration = Duration::from_secs(3);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_worker_starves_when_workers_share_one_client() {
    let _timing = TIMING.lock().await;
    let server = RedisServer::start();
    let locks = ExpireLock::new(server.store().await);
    locks.lock(NAME).await.unwrap().release().await.unwrap();
    let f = contend(vec![locks], WORKERS, HOLD, RUN).await;
    // A cycle is one hold plus one handoff; a fair queue makes everyone wait about one round.
    let round = f.mean_cycle * WORKERS as u32;
    println!(
        "one client, {WORKERS} workers, {HOLD:?} holds, {RUN:?}: {} acquisitions, per worker \
         {:?}, same-worker re-acquisition {:.1}%, max wait {:?}, mean cycle (hold + handoff) \
         {:?}, one round {round:?}, most acquisitions by others during one wait {}",
        f.acquisitions, f.per_worker, f.same_worker_pct, f.max_wait, f.mean_cycle, f.max_overtaken
    );
    assert!(
        f.per_worker.iter().all(|&n| n > 0),
        "a worker starved: {:?}",
        f.per_worker
    );
    // FIFO: the others acquire at most once each during one wait (WORKERS − 1), plus the one
    // holder that may hold the lock already when the wait begins but not have counted its
    // acquisition yet (the count follows the grant; a loaded machine delays it).
    assert!(
        f.max_overtaken <= WORKERS,
        "a worker was overtaken {} times in one wait: the local queue is not FIFO",
        f.max_overtaken
    );
    // In time, a fair wait is about one round; the bound is loose because one scheduling stall
    // of a loaded 2-core machine (a concurrent build) stretches a single wait without any
    // unfairness. FIFO itself is the overtaken count above, which load cannot change.
    assert!(
        f.max_wait <= round * 20,
        "the longest wait {:?} exceeds 20 rounds of {WORKERS} × (hold + handoff) = 20 × {round:?}",
        f.max_wait
    );
    let (least, most) = (
        *f.per_worker.iter().min().unwrap(),
        *f.per_worker.iter().max().unwrap(),
    );
    assert!(
        most <= least + least / 10 + 2,
        "the local queue is FIFO: acquisitions per worker {:?}",
        f.per_worker
    );
    assert!(f.same_worker_pct < 5.0, "{:.1}%", f.same_worker_pct);
}

/// Workers on separate clients (separate connections and subscriptions, like separate
/// processes): the local FIFO does not apply; what the server's arbitration gives is reported.
/// Only liveness is asserted: every worker gets the lock, and nobody waits as long as a lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn workers_on_separate_clients_all_get_the_lock() {
    let _timing = TIMING.lock().await;
    let server = RedisServer::start();
    let mut clients = Vec::new();
    for _ in 0..WORKERS {
        let locks = ExpireLock::new(server.store().await);
        locks.lock(NAME).await.unwrap().release().await.unwrap();
        clients.push(locks);
    }
    let f = contend(clients, WORKERS, HOLD, RUN).await;
    let round = f.mean_cycle * WORKERS as u32;
    println!(
        "separate clients, {WORKERS} workers, {HOLD:?} holds, {RUN:?}: {} acquisitions, per \
         worker {:?}, same-worker re-acquisition {:.1}%, max wait {:?}, mean cycle {:?}, one \
         round {round:?}, most acquisitions by others during one wait {}",
        f.acquisitions, f.per_worker, f.same_worker_pct, f.max_wait, f.mean_cycle, f.max_overtaken
    );
    assert!(
        f.per_worker.iter().all(|&n| n > 0),
        "a worker starved: {:?}",
        f.per_worker
    );
    assert!(
        f.max_wait < Duration::from_secs(30),
        "a wait reached the lease"
    );
}

/// `try_lock_for`'s timeout bounds the subscription too: a notifier that hangs for 10 s does not
/// keep the caller past its 200 ms (it polls instead, and gives up on time).
#[tokio::test]
async fn try_lock_for_is_not_held_past_its_timeout_by_a_hanging_subscription() {
    let server = RedisServer::start();
    let holder = ExpireLock::new(server.store().await);
    let waiter = ExpireLock::new(LostMessages(server.store().await, true));
    let held = holder
        .lock_with_lease(NAME, Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let started = Instant::now();
    let got = waiter
        .try_lock_for(NAME, Duration::from_millis(200))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(got.is_none(), "got a held lock");
    assert!(
        took < Duration::from_secs(1),
        "try_lock_for(200 ms) took {took:?} behind a hanging subscription"
    );
    // The same for the reader/writer lock's waits.
    let rw_holder = tairlock_rwlock::RwLock::new(server.store().await);
    let rw_waiter = tairlock_rwlock::RwLock::new(LostMessages(server.store().await, true));
    let write = rw_holder.write("rw-hang").await.unwrap();
    let started = Instant::now();
    let got = rw_waiter
        .try_read_for("rw-hang", Duration::from_millis(200))
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(got.is_none(), "read beside a writer");
    assert!(
        took < Duration::from_secs(1),
        "try_read_for(200 ms) took {took:?} behind a hanging subscription"
    );
    write.release().await.unwrap();
    held.release().await.unwrap();
}
