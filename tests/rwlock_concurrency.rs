//! The scripted reader/writer lock under real concurrency: readers in separate tasks and in
//! separate processes actually overlap, writers never overlap anyone, a `kill -9` of a reader
//! process lets a waiting writer in within the reader's lease, and the figures the issue asks
//! for (round trips per read acquire, reader overlap, writer wait under continuous reads with
//! and without writer preference), printed with `--nocapture`.
//!
//! Reader processes are this test binary itself, re-run with `--exact child_reader` and an
//! environment variable telling it what to hold.

mod support;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;
use support::{Env, RedisServer};
use tairlock::{Owner, RedisStore, Store};
use tairlock_rwlock::{Options, Preference, Release, RwLock};

/// Set in a child process: `<redis url>|<lock name>|<lease ms>`.
const CHILD_ENV: &str = "TAIRLOCK_RWLOCK_TEST_CHILD";

/// Who is inside the critical section right now, and what went wrong.
#[derive(Debug, Default)]
struct Monitor {
    readers: usize,
    writers: usize,
    max_readers: usize,
    reader_entries: u64,
    overlapping_reader_entries: u64,
    writer_entries: u64,
    violations: Vec<String>,
}

impl Monitor {
    fn enter(&mut self, write: bool) {
        if write {
            if self.readers > 0 || self.writers > 0 {
                self.violations.push(format!(
                    "a writer entered beside {} readers and {} writers",
                    self.readers, self.writers
                ));
            }
            self.writers += 1;
            self.writer_entries += 1;
        } else {
            if self.writers > 0 {
                self.violations
                    .push(format!("a reader entered beside {} writers", self.writers));
            }
            if self.readers > 0 {
                self.overlapping_reader_entries += 1;
            }
            self.readers += 1;
            self.reader_entries += 1;
            self.max_readers = self.max_readers.max(self.readers);
        }
    }

    fn leave(&mut self, write: bool) {
        if write {
            self.writers -= 1;
        } else {
            self.readers -= 1;
        }
    }
}

async fn eight_readers_overlap_and_no_writer_overlaps_anyone<S: Store>(store: S, kind: &str) {
    let monitor = Arc::new(Mutex::new(Monitor::default()));

    // Phase 1: 8 readers, each its own client, all inside at once (they meet at a barrier
    // while holding the read lock; it would time out unless all 8 held it together).
    let barrier = Arc::new(tokio::sync::Barrier::new(8));
    let mut tasks = Vec::new();
    for _ in 0..8 {
        let (rw, monitor, barrier) = (RwLock::new(store.clone()), monitor.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            let guard = rw.read("shared").await.unwrap();
            monitor.lock().enter(false);
            tokio::time::timeout(Duration::from_secs(10), barrier.wait())
                .await
                .expect("all 8 readers must hold the lock at the same time");
            monitor.lock().leave(false);
            guard.release().await.unwrap()
        }));
    }
    for task in tasks {
        assert_eq!(task.await.unwrap(), Release::Released);
    }
    assert_eq!(monitor.lock().max_readers, 8, "[{kind}]");

    // Phase 2: 8 readers and 2 writers contend for 1.5 s.
    let end = tokio::time::Instant::now() + Duration::from_millis(1500);
    let mut tasks = Vec::new();
    for i in 0..10 {
        let write = i >= 8;
        let (rw, monitor) = (RwLock::new(store.clone()), monitor.clone());
        tasks.push(tokio::spawn(async move {
            while tokio::time::Instant::now() < end {
                let hold = Duration::from_micros(rand::rng().random_range(500..5000));
                if write {
                    let guard = rw.write("shared").await.unwrap();
                    monitor.lock().enter(true);
                    tokio::time::sleep(hold).await;
                    monitor.lock().leave(true);
                    guard.release().await.unwrap();
                } else {
                    let guard = rw.read("shared").await.unwrap();
                    monitor.lock().enter(false);
                    tokio::time::sleep(hold).await;
                    monitor.lock().leave(false);
                    guard.release().await.unwrap();
                }
                let think = Duration::from_micros(rand::rng().random_range(0..2000));
                tokio::time::sleep(think).await;
            }
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let m = monitor.lock();
    println!(
        "[{kind}] 8 readers + 2 writers for 1.5 s: {} reader entries ({} while another reader \
         was in, max {} readers at once), {} writer entries, {} violations",
        m.reader_entries,
        m.overlapping_reader_entries,
        m.max_readers,
        m.writer_entries,
        m.violations.len()
    );
    assert!(m.violations.is_empty(), "[{kind}] {:?}", m.violations);
    assert!(m.writer_entries > 0, "[{kind}] writers never got in");
    assert!(
        m.overlapping_reader_entries > 0,
        "[{kind}] readers never overlapped under contention"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_reader_tasks_overlap_and_no_writer_overlaps_anyone_on_memory() {
    let store = Env::memory_real_time().store;
    eight_readers_overlap_and_no_writer_overlaps_anyone(store, "memory").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn eight_reader_tasks_overlap_and_no_writer_overlaps_anyone_on_redis() {
    let server = RedisServer::start();
    eight_readers_overlap_and_no_writer_overlaps_anyone(server.store().await, "redis").await;
}

/// The child side: hold a read lock, say so, and release when told (or be killed).
#[test]
fn child_reader() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // not a child: nothing to do
    };
    let mut parts = spec.splitn(3, '|');
    let (url, name, lease_ms) = (
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().to_owned(),
        parts.next().unwrap().parse::<u64>().unwrap(),
    );
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = RedisStore::connect(&url).await.unwrap();
        let rw = RwLock::with_options(
            store,
            Options::default().watchdog_lease(Duration::from_millis(lease_ms)),
        );
        let guard = rw.read(&name).await.unwrap();
        println!("HELD {}", std::process::id());
        std::io::stdout().flush().unwrap();
        // Wait for a line on stdin (or its end), off the runtime.
        tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            let _ = std::io::stdin().read_line(&mut line);
        })
        .await
        .unwrap();
        assert_eq!(guard.release().await.unwrap(), Release::Released);
        println!("RELEASED {}", std::process::id());
    });
}

/// A reader process holding `name` on `url`, and a channel that reports its `HELD` line.
struct ReaderProcess {
    child: Child,
    stdin: Option<ChildStdin>,
    held: mpsc::Receiver<()>,
}

impl ReaderProcess {
    fn spawn(url: &str, name: &str, lease: Duration) -> ReaderProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_reader", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, format!("{url}|{name}|{}", lease.as_millis()))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("re-run this test binary as a reader process");
        let stdout = child.stdout.take().unwrap();
        let stdin = child.stdin.take();
        let (tx, held) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("HELD ") {
                    let _ = tx.send(());
                }
            }
        });
        ReaderProcess { child, stdin, held }
    }

    fn wait_held(&self, within: Duration) {
        self.held
            .recv_timeout(within)
            .expect("the reader process did not take the read lock in time");
    }

    /// Tell the process to release and exit, and wait for it.
    fn release(mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"release\n");
        }
        let status = self.child.wait().unwrap();
        assert!(status.success(), "reader process failed: {status}");
    }
}

impl Drop for ReaderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eight_reader_processes_hold_the_lock_together_and_keep_the_writer_out() {
    let server = RedisServer::start();
    let rw = RwLock::new(server.store().await);
    let readers: Vec<_> = (0..8)
        .map(|_| ReaderProcess::spawn(&server.url(), "shared", Duration::from_secs(30)))
        .collect();
    let readers = tokio::task::spawn_blocking(move || {
        for r in &readers {
            r.wait_held(Duration::from_secs(30));
        }
        readers
    })
    .await
    .unwrap();
    // All 8 processes hold the read lock at this moment.
    let inspection = rw.inspect("shared").await.unwrap();
    assert_eq!(inspection.readers.len(), 8, "{inspection:?}");
    println!(
        "8 reader processes: {} live readers at once",
        inspection.readers.len()
    );
    assert!(rw.try_write("shared").await.unwrap().is_none());
    let writer_rw = rw.clone();
    let writer = tokio::spawn(async move {
        let w = writer_rw.write("shared").await.unwrap();
        let readers_then = writer_rw.readers("shared").await.unwrap();
        w.release().await.unwrap();
        readers_then
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!writer.is_finished(), "the writer must wait for 8 readers");
    tokio::task::spawn_blocking(move || {
        for r in readers {
            r.release();
        }
    })
    .await
    .unwrap();
    let readers_when_writing = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer gets in once the readers are gone")
        .unwrap();
    assert_eq!(readers_when_writing, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_reader_process_lets_the_waiting_writer_in_within_its_lease() {
    let lease = Duration::from_secs(1);
    let server = RedisServer::start();
    let rw = RwLock::new(server.store().await);
    let reader = ReaderProcess::spawn(&server.url(), "shared", lease);
    let reader = tokio::task::spawn_blocking(move || {
        reader.wait_held(Duration::from_secs(30));
        reader
    })
    .await
    .unwrap();
    let writer_rw = rw.clone();
    let writer = tokio::spawn(async move {
        let w = writer_rw.write("shared").await.unwrap();
        let at = Instant::now();
        w.release().await.unwrap();
        at
    });
    // The reader's watchdog keeps it alive past its first lease: the writer waits.
    tokio::time::sleep(lease + lease / 2).await;
    assert!(
        !writer.is_finished(),
        "the live reader keeps the writer out"
    );
    assert_eq!(rw.readers("shared").await.unwrap(), 1);
    // kill -9: no release, no more renewals.
    let mut reader = reader;
    reader.child.kill().unwrap();
    let killed = Instant::now();
    reader.child.wait().unwrap();
    let entered = tokio::time::timeout(Duration::from_secs(10), writer)
        .await
        .expect("the writer gets in after the dead reader's lease")
        .unwrap();
    let waited = entered.duration_since(killed);
    println!("writer in {waited:?} after kill -9 of a reader holding a {lease:?} lease");
    assert!(
        waited <= lease + Duration::from_millis(750),
        "waited {waited:?}, longer than the reader's lease"
    );
}

/// Round trips the clients made, from `INFO commandstats`. Commands a script runs are counted
/// there too, so this sums only what a client sends on its own: `EVALSHA`/`EVAL` (every
/// operation of the lock is one script), `SCRIPT` (loading) and pub/sub (`SUBSCRIBE`,
/// `UNSUBSCRIBE`, for waiting); the lock sends no other command.
async fn round_trips(store: &RedisStore) -> u64 {
    let info: String = store
        .command(redis::cmd("INFO").arg("commandstats"))
        .await
        .unwrap();
    let client_sent = [
        "cmdstat_evalsha:",
        "cmdstat_eval:",
        "cmdstat_script|",
        "cmdstat_subscribe:",
        "cmdstat_unsubscribe:",
    ];
    info.lines()
        .filter(|l| client_sent.iter().any(|p| l.starts_with(p)))
        .filter_map(|l| {
            let calls = l.split("calls=").nth(1)?;
            calls.split(',').next()?.parse::<u64>().ok()
        })
        .sum()
}

async fn reset_stats(store: &RedisStore) {
    let _: () = store
        .command(redis::cmd("CONFIG").arg("RESETSTAT"))
        .await
        .unwrap();
}

#[tokio::test]
async fn read_acquire_costs_one_round_trip_and_reentry_none() {
    let server = RedisServer::start();
    let store = server.store().await;
    store.preload(&tairlock_rwlock::scripts::ALL).await.unwrap();
    let rw = RwLock::new(store.clone());
    let me = Owner::new();

    reset_stats(&store).await;
    let guard = rw.read("doc").await.unwrap();
    let read = round_trips(&store).await;
    reset_stats(&store).await;
    let inner = rw.read_as(&me, "doc").await.unwrap();
    let reentry_outer = round_trips(&store).await;
    reset_stats(&store).await;
    let again = rw.read_as(&me, "doc").await.unwrap();
    let reentry = round_trips(&store).await;
    reset_stats(&store).await;
    again.release().await.unwrap();
    inner.release().await.unwrap();
    guard.release().await.unwrap();
    let releases = round_trips(&store).await;
    reset_stats(&store).await;
    let w = rw.write("doc").await.unwrap();
    let write = round_trips(&store).await;
    drop(w);
    println!(
        "round trips: read acquire {read}, owner's first read {reentry_outer}, reentrant read \
         {reentry}, releasing three guards on two holds {releases}, write acquire {write}"
    );
    assert_eq!(read, 1, "an uncontended read acquire is one EVALSHA");
    assert_eq!(reentry_outer, 1);
    assert_eq!(reentry, 0, "a reentrant read is served locally");
    assert_eq!(
        releases, 2,
        "one round trip per hold: the inner reentrant level is left locally"
    );
    assert_eq!(write, 1);
}

/// 8 reader clients read back to back (each holds 5–15 ms, re-acquires at once) while one
/// writer asks for the lock; how long it waits.
async fn writer_wait_under_continuous_reads(
    store: RedisStore,
    preference: Preference,
    patience: Duration,
) -> Option<Duration> {
    let options = Options::default().preference(preference);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for _ in 0..8 {
        let rw = RwLock::with_options(store.clone(), options.clone());
        let stop = stop.clone();
        readers.push(tokio::spawn(async move {
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                let Some(guard) = rw
                    .try_read_for("hot", Duration::from_millis(200))
                    .await
                    .unwrap()
                else {
                    continue;
                };
                let hold = Duration::from_millis(rand::rng().random_range(5..15));
                tokio::time::sleep(hold).await;
                guard.release().await.unwrap();
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let writer = RwLock::with_options(store.clone(), options);
    let asked = Instant::now();
    let got = writer.try_write_for("hot", patience).await.unwrap();
    let waited = asked.elapsed();
    let result = match got {
        Some(guard) => {
            guard.release().await.unwrap();
            Some(waited)
        }
        None => None,
    };
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        r.await.unwrap();
    }
    result
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_writer_gets_in_under_continuous_reads_only_with_writer_preference() {
    let server = RedisServer::start();
    let store = server.store().await;
    let patience = Duration::from_secs(2);
    let with = writer_wait_under_continuous_reads(store.clone(), Preference::Writer, patience)
        .await
        .expect("with writer preference the writer gets in");
    let without = writer_wait_under_continuous_reads(store, Preference::Reader, patience).await;
    println!(
        "writer wait under 8 continuous readers: {with:?} with writer preference; {} with \
         reader preference",
        match without {
            Some(w) => format!("{w:?}"),
            None => format!("starved (not in after {patience:?})"),
        }
    );
    assert!(
        with < Duration::from_secs(1),
        "writer preference: waited {with:?}"
    );
    assert!(
        without.is_none_or(|w| w > with * 4),
        "reader preference should starve the writer: {without:?} vs {with:?}"
    );
}
