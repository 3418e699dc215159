//! Replies that never come (issue 12, items 1, 4, 7 and `force_unlock`), on a real
//! `redis-server`.
//!
//! Two ways to lose a reply, both to a command the server applied:
//! - the server is put to sleep from another connection (`DEBUG SLEEP`, the server started with
//!   `--enable-debug-command yes`) while the store's `response_timeout` is short: the command
//!   is queued, times out on the client, and is applied when the server wakes;
//! - [`LoseReply`], a store wrapper that runs a script on the real server and then reports a
//!   connection error instead of its reply (optionally after running a hook, e.g. another
//!   client taking the lock, in between).
//!
//! What must hold: a renewal whose outcome is unknown is repeated with the same nonce, so the
//! hold survives; an acquire whose reply was lost leaves nothing held; `force_unlock` is never
//! repeated blindly; an RwLock hold once lost stays lost.

mod support;

use std::time::{Duration, Instant};

use parking_lot::Mutex;
use support::RedisServer;
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::store::redis::RedisOptions;
use tairlock::{
    Error, ErrorKind, ExpireLock, Options, RedisStore, Script, Store, Unlock, WaitStrategy,
};
use tairlock_rwlock::RwLock;

/// The lease of the guards here: renewed every second.
const LEASE: Duration = Duration::from_secs(3);
/// The stores' response timeout: a command queued behind a `DEBUG SLEEP` times out.
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(250);

fn debug_server() -> RedisServer {
    RedisServer::start_with_args(&["--enable-debug-command", "yes"])
}

async fn quick_store(server: &RedisServer) -> RedisStore {
    let mut options = RedisOptions::default();
    options.response_timeout = RESPONSE_TIMEOUT;
    RedisStore::connect_with(&server.url(), options)
        .await
        .unwrap()
}

/// Put the server to sleep for `seconds` from a connection of its own, now; the thread ends
/// when the server wakes.
fn debug_sleep(server: &RedisServer, seconds: f64) -> std::thread::JoinHandle<()> {
    let url = server.url();
    let (connected, is_connected) = std::sync::mpsc::channel();
    let handle = std::thread::spawn(move || {
        let client = redis::Client::open(url).unwrap();
        let mut con = client.get_connection().unwrap();
        connected.send(()).unwrap();
        let _: () = redis::cmd("DEBUG")
            .arg("SLEEP")
            .arg(seconds)
            .query(&mut con)
            .unwrap();
    });
    is_connected
        .recv_timeout(Duration::from_secs(10))
        .expect("connected to put the server to sleep");
    // Let the command reach the server before anything else is sent.
    std::thread::sleep(Duration::from_millis(100));
    handle
}

/// For a guard whose lease ([`LEASE`]) began at `start`: let the first renewal (at ~1 s) be
/// answered, then put the server to sleep from ~1.4 s to ~2.9 s, so the second renewal (at
/// ~2 s) is queued and its reply times out, and return at 5 s: past the local deadline of the
/// first renewal's lease (~3.97 s), so the guard must have been renewed since.
async fn sleep_then_pause_server(server: &RedisServer, start: Instant) {
    tokio::time::sleep_until((start + Duration::from_millis(1250)).into()).await;
    let sleeper = debug_sleep(server, 1.5);
    tokio::time::sleep_until((start + Duration::from_secs(5)).into()).await;
    sleeper.join().unwrap();
}

/// Load every script `locks` uses by taking and releasing a lock: a script's first `EVALSHA`
/// meets `NOSCRIPT` and runs nothing, which would hide a lost reply.
async fn prime<S: Store>(locks: &ExpireLock<S>) {
    let guard = locks
        .lock_with_lease("primer", LEASE, None)
        .await
        .unwrap()
        .expect("free");
    guard.renew(LEASE).await.unwrap();
    guard.release().await.unwrap();
}

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

/// What [`Lose`] runs between applying a script and reporting its reply lost.
type AfterApply = Box<dyn FnOnce() + Send>;

/// A store that, when armed for a script, runs it on the real server, then runs the hook, then
/// reports a connection error instead of the reply. Counts every script it forwards.
type LoseReply = Intercept<RedisStore, Lose>;

fn lose_reply(inner: RedisStore) -> LoseReply {
    Intercept::new(inner, Lose::default())
}

/// The hook of [`LoseReply`].
#[derive(Default)]
struct Lose {
    armed: Mutex<Option<(&'static Script, AfterApply)>>,
    delay: Mutex<Option<(&'static Script, Duration)>>,
    calls: Mutex<Vec<&'static str>>,
}

impl Lose {
    /// Lose the reply of the next call of `script`, running `hook` after it was applied.
    fn lose_next(&self, script: &'static Script, hook: impl FnOnce() + Send + 'static) {
        *self.armed.lock() = Some((script, Box::new(hook)));
    }

    /// Hold the reply of the next call of `script` back for `delay`.
    fn delay_next(&self, script: &'static Script, delay: Duration) {
        *self.delay.lock() = Some((script, delay));
    }

    fn calls_of(&self, script: &'static Script) -> usize {
        self.calls
            .lock()
            .iter()
            .filter(|n| **n == script.name())
            .count()
    }

    /// Take what is armed for `script`, leaving what is armed for another.
    fn take<T>(slot: &Mutex<Option<(&'static Script, T)>>, script: &'static Script) -> Option<T> {
        let mut slot = slot.lock();
        match slot.take() {
            Some((s, t)) if std::ptr::eq(s, script) => Some(t),
            other => {
                *slot = other;
                None
            }
        }
    }
}

impl Hook for Lose {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        let Command::Eval { script, .. } = command else {
            return run;
        };
        Box::pin(async move {
            self.calls.lock().push(script.name());
            let reply = run.await;
            if let Some(hook) = Lose::take(&self.armed, script) {
                tokio::task::spawn_blocking(hook).await.unwrap();
                return Err(Error::new(
                    ErrorKind::Connection,
                    format!("test: the reply of {} was lost", script.name()),
                ));
            }
            if let Some(delay) = Lose::take(&self.delay, script) {
                tokio::time::sleep(delay).await;
            }
            reply
        })
    }
}

/// Item 1: the watchdog's renewal is queued behind a `DEBUG SLEEP` and times out on the client,
/// and the server applies it when it wakes. The watchdog repeats it with the same nonce, finds
/// it applied, and keeps the hold: not lost past the first lease's deadline, the lock still
/// holds the guard's lease, and the release frees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_whose_reply_timed_out_keeps_the_guard() {
    let server = debug_server();
    let locks = ExpireLock::with_options(
        quick_store(&server).await,
        Options::default().watchdog_lease(LEASE),
    );
    let name = "renewed";
    let guard = locks.lock(name).await.unwrap();
    let start = Instant::now();
    // The first renewal (at ~1 s) is answered; the second goes out at ~2 s, while the server
    // sleeps (from ~1.4 s to ~2.9 s).
    sleep_then_pause_server(&server, start).await;
    assert!(
        !guard.is_lost(),
        "the guard gave up after a renewal whose reply timed out"
    );
    let holder = locks.inspect(name).await.unwrap().holder.expect("held");
    assert_eq!(
        holder.value(),
        guard.lease().value(),
        "the lock holds our lease"
    );
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    assert_eq!(server.cli(&["EXISTS", &key(name)]), "0");
}

/// Item 1, `renew`: an extension whose reply timed out returns the error; the next `renew`
/// repeats it with the same nonce instead of presenting the old lease with a new one (which
/// the server would refuse as held by another), then extends to its own length, and the hold
/// goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extend_after_a_timed_out_extend_keeps_the_guard() {
    let server = debug_server();
    let locks = ExpireLock::new(quick_store(&server).await);
    prime(&locks).await;
    let name = "extended";
    let guard = locks
        .lock_with_lease(name, LEASE, None)
        .await
        .unwrap()
        .expect("free");
    let sleeper = debug_sleep(&server, 1.5);
    let err = guard.renew(LEASE).await.unwrap_err();
    assert!(err.is_unanswered(), "{err}");
    sleeper.join().unwrap();
    // Another length: the lost extension is settled first (same nonce), then this one is sent.
    guard.renew(LEASE * 2).await.unwrap();
    assert!(!guard.is_lost());
    let pttl: u64 = server.cli(&["PTTL", &key(name)]).parse().unwrap();
    assert!(
        pttl > LEASE.as_millis() as u64,
        "extended to 6 s: PTTL {pttl} ms"
    );
    let holder = locks.inspect(name).await.unwrap().holder.expect("held");
    assert_eq!(holder.value(), guard.lease().value());
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
}

/// Item 1 for the RwLock's write hold: as for the core's guard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_renewal_whose_reply_timed_out_keeps_the_write_hold() {
    let server = debug_server();
    let rw = RwLock::with_options(
        quick_store(&server).await,
        tairlock_rwlock::Options::default().watchdog_lease(LEASE),
    );
    let name = "written";
    let guard = rw.write(name).await.unwrap();
    let start = Instant::now();
    sleep_then_pause_server(&server, start).await;
    assert!(
        !guard.is_lost(),
        "the write hold gave up after a renewal whose reply timed out"
    );
    let writer = rw.inspect(name).await.unwrap().writer.expect("held");
    assert_eq!(
        Some(writer.value()),
        guard.lease().as_ref().map(|l| l.value())
    );
    assert_eq!(
        guard.release().await.unwrap(),
        tairlock_rwlock::Release::Released
    );
}

/// Item 1 for the RwLock's read hold: a reader's renewal is keyed by its nonce, so a repeat is
/// harmless, and the hold survives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_renewal_whose_reply_timed_out_keeps_the_read_hold() {
    let server = debug_server();
    let rw = RwLock::with_options(
        quick_store(&server).await,
        tairlock_rwlock::Options::default().watchdog_lease(LEASE),
    );
    let name = "read";
    let guard = rw.read(name).await.unwrap();
    let start = Instant::now();
    sleep_then_pause_server(&server, start).await;
    assert!(!guard.is_lost());
    assert_eq!(rw.readers(name).await.unwrap(), 1);
    assert_eq!(
        guard.release().await.unwrap(),
        tairlock_rwlock::Release::Released
    );
    assert_eq!(rw.readers(name).await.unwrap(), 0);
}

/// Item 4: `try_lock`'s acquire is applied, but its reply is lost. The call fails, and the
/// grant it may have made is released in the background: the lock is not left held by nobody
/// for a whole watchdog lease (30 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_whose_reply_was_lost_is_released() {
    let server = debug_server();
    let store = lose_reply(server.store().await);
    let locks = ExpireLock::new(store.clone());
    let name = "orphan";
    // The store's own retry would repeat the acquire and find the grant: lose both replies.
    let again = store.clone();
    store
        .hook()
        .lose_next(&tairlock::scripts::EXPIRE_LOCK, move || {
            again
                .hook()
                .lose_next(&tairlock::scripts::EXPIRE_LOCK, || {});
        });
    let err = locks.try_lock(name).await.unwrap_err();
    assert!(err.is_unanswered(), "{err}");
    // The grant was made: its fencing token outlives the lease (the lock key itself may be gone
    // already, if the background cleanup was quicker than this check).
    assert_eq!(
        server.cli(&["EXISTS", &format!("{}:fence", key(name))]),
        "1",
        "the grant was made"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cli(&["EXISTS", &key(name)]) == "1" {
        assert!(
            Instant::now() < deadline,
            "the lost grant is still held by nobody 5 s later (PTTL {} ms)",
            server.cli(&["PTTL", &key(name)])
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Free for the next caller.
    let guard = locks.try_lock(name).await.unwrap().expect("free");
    guard.release().await.unwrap();
}

/// Item 4 with a real timeout: `try_lock` sent while the server sleeps times out; the grant the
/// server makes when it wakes is released, not left for 30 s.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_made_after_the_reply_timed_out_is_released() {
    let server = debug_server();
    let locks = ExpireLock::new(quick_store(&server).await);
    prime(&locks).await;
    let name = "slept";
    let sleeper = debug_sleep(&server, 1.0);
    let err = locks.try_lock(name).await.unwrap_err();
    assert!(err.is_unanswered(), "{err}");
    sleeper.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cli(&["EXISTS", &key(name)]) == "1" {
        assert!(
            Instant::now() < deadline,
            "the grant is still held by nobody 5 s after the server woke (PTTL {} ms)",
            server.cli(&["PTTL", &key(name)])
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Item 12 on one server: a waiting `lock()` whose attempt times out repeats it with the same
/// nonce within its patience, and gets the lock (exactly one grant, ours).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_lock_rides_through_a_timed_out_attempt() {
    let server = debug_server();
    // Polling: no subscription round trip ahead of the first attempt.
    let locks = ExpireLock::with_options(
        quick_store(&server).await,
        Options::default().wait(WaitStrategy::Poll {
            min: Duration::from_millis(10),
            max: Duration::from_millis(100),
        }),
    );
    prime(&locks).await;
    let name = "patient";
    let sleeper = debug_sleep(&server, 1.0);
    let guard = tokio::time::timeout(Duration::from_secs(10), locks.lock(name))
        .await
        .expect("lock() returns")
        .expect("lock() rides through the timeouts");
    sleeper.join().unwrap();
    let holder = locks.inspect(name).await.unwrap().holder.expect("held");
    assert_eq!(holder.value(), guard.lease().value());
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
}

/// `force_unlock` whose reply was lost is not repeated: between the deletion and the repeat the
/// next holder may have taken the lock, and a repeat would delete *its* lock. The call returns
/// the error instead, and the next holder's lock stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_force_unlock_whose_reply_was_lost_is_not_repeated() {
    let server = RedisServer::start();
    let store = lose_reply(server.store().await);
    let locks = ExpireLock::new(store.clone());
    let name = "forced";
    let _stuck = locks
        .expire_lock(name, Duration::from_secs(30))
        .await
        .unwrap()
        .lease()
        .expect("free");
    // After the deletion, the next holder takes the lock before the reply is (not) read.
    let url = server.url();
    let lock_key = key(name);
    store
        .hook()
        .lose_next(&tairlock::scripts::FORCE_UNLOCK, move || {
            let client = redis::Client::open(url).unwrap();
            let mut con = client.get_connection().unwrap();
            let set: Option<String> = redis::cmd("SET")
                .arg(&lock_key)
                .arg("tl1:99999999999999:1:nextholder")
                .arg("NX")
                .arg("PX")
                .arg(30_000)
                .query(&mut con)
                .unwrap();
            assert_eq!(set.as_deref(), Some("OK"), "the lock was deleted");
        });
    let err = locks.force_unlock(name).await.unwrap_err();
    assert!(err.is_unanswered(), "{err}");
    assert_eq!(store.hook().calls_of(&tairlock::scripts::FORCE_UNLOCK), 1);
    assert_eq!(
        server.cli(&["GET", &key(name)]),
        "tl1:99999999999999:1:nextholder",
        "the next holder's lock was deleted by a repeated force_unlock"
    );
}

/// Item 7, ported from the core's watchdog test: a write renewal whose reply lands after the
/// hold's local deadline does not bring the hold back ("once lost, stays lost"), and the
/// watchdog stops renewing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_late_write_renewal_does_not_bring_a_lost_hold_back() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let store = lose_reply(server.store().await);
    let rw = RwLock::with_options(
        store.clone(),
        tairlock_rwlock::Options::default().watchdog_lease(lease),
    );
    let guard = rw.write("late").await.unwrap();
    // The first renewal (at ~100 ms) runs at once; its reply lands at ~350 ms, after the first
    // lease's local deadline (~295 ms) and before the renewed one's (~395 ms).
    store
        .hook()
        .delay_next(&tairlock::scripts::RENEW, Duration::from_millis(250));
    let start = Instant::now();
    let (mut first_lost, mut flipped_back) = (None, None);
    while start.elapsed() < lease * 2 {
        match (guard.is_lost(), first_lost) {
            (true, None) => first_lost = Some(start.elapsed()),
            (false, Some(_)) if flipped_back.is_none() => flipped_back = Some(start.elapsed()),
            _ => {}
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    println!("lost at {first_lost:?}, back to held at {flipped_back:?}");
    assert!(first_lost.is_some(), "the deadline passed without a reply");
    assert_eq!(
        flipped_back, None,
        "is_lost() went back to false after the late renewal reply"
    );
    let renewals = store.hook().calls_of(&tairlock::scripts::RENEW);
    tokio::time::sleep(lease).await;
    assert_eq!(
        store.hook().calls_of(&tairlock::scripts::RENEW),
        renewals,
        "the watchdog of a lost hold stopped"
    );
    let _ = guard.release().await.unwrap();
}

/// A master (with `DEBUG`) and one replica whose link is up and whose acknowledgements count.
fn master_and_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start_with_args(&[
        "--repl-diskless-sync-delay",
        "0",
        "--enable-debug-command",
        "yes",
    ]);
    let port = master.port().to_string();
    let replica = RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let client = redis::Client::open(master.url()).unwrap();
    let mut con = client.get_connection().unwrap();
    loop {
        let _: () = redis::cmd("SET")
            .arg("probe")
            .arg(1)
            .query(&mut con)
            .unwrap();
        let acked: i64 = redis::cmd("WAIT").arg(1).arg(100).query(&mut con).unwrap();
        if acked >= 1 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the replica acknowledged no write within 10 s"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    (master, replica)
}

/// Item 1 for the replica-acknowledged guard: its renewal (script + `WAIT`) is queued behind a
/// `DEBUG SLEEP` longer than the call's bound (the wait's timeout + 2 s), so the client sees a
/// timeout while the master applies the renewal when it wakes. The watchdog repeats it with the
/// same nonce, adopts the lease it finds, has it acknowledged by a renewal of its own, and keeps
/// the guard: not lost past the first lease's deadline, and the lock holds its lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replicated_renewal_whose_reply_timed_out_keeps_the_guard() {
    use tairlock::store::WaitFor;
    use tairlock::{ReplicatedLock, ReplicatedRelease};
    let (master, _replica) = master_and_replica();
    let lease = Duration::from_secs(9);
    let locks = ReplicatedLock::new(
        ExpireLock::new(master.store().await),
        WaitFor::replicas(1, Duration::from_millis(100)),
    );
    let name = "replicated";
    let guard = locks
        .try_lock(name, lease)
        .await
        .unwrap()
        .expect("acquired with the replica's ack");
    let start = Instant::now();
    // The first renewal goes out at ~3 s, while the master sleeps (from ~2.5 s to ~5.5 s); its
    // reply is given up on at ~5.1 s. The first lease's local deadline is ~8.9 s.
    tokio::time::sleep_until((start + Duration::from_millis(2350)).into()).await;
    let sleeper = debug_sleep(&master, 3.0);
    tokio::time::sleep_until((start + Duration::from_millis(9500)).into()).await;
    sleeper.join().unwrap();
    assert!(
        !guard.is_lost(),
        "the replicated guard gave up after a renewal whose reply timed out"
    );
    let holder = locks
        .locks()
        .inspect(name)
        .await
        .unwrap()
        .holder
        .expect("held");
    assert_eq!(holder.value(), guard.lease().value());
    assert!(
        matches!(
            guard.release().await.unwrap(),
            ReplicatedRelease::Released { .. }
        ),
        "released with the replica's ack"
    );
}

/// Item 12 on one server for the RwLock: a waiting `write()` and `read()` whose attempts time
/// out repeat them with the acquisition's nonce within their patience, and get the lock (one
/// writer, ours; then one reader).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_rwlock_rides_through_timed_out_attempts() {
    let server = debug_server();
    let rw = RwLock::new(quick_store(&server).await);
    // Load the scripts first: a first `EVALSHA` meets `NOSCRIPT` and runs nothing.
    rw.write("primer").await.unwrap().release().await.unwrap();
    rw.read("primer").await.unwrap().release().await.unwrap();
    let name = "patient-rw";
    let sleeper = debug_sleep(&server, 1.0);
    let writer = tokio::time::timeout(Duration::from_secs(10), rw.write(name))
        .await
        .expect("write() returns")
        .expect("write() rides through the timeouts");
    sleeper.join().unwrap();
    let writer_lease = rw.inspect(name).await.unwrap().writer.expect("held");
    assert_eq!(
        Some(writer_lease.value()),
        writer.lease().as_ref().map(|l| l.value())
    );
    writer.release().await.unwrap();
    let sleeper = debug_sleep(&server, 1.0);
    let reader = tokio::time::timeout(Duration::from_secs(10), rw.read(name))
        .await
        .expect("read() returns")
        .expect("read() rides through the timeouts");
    sleeper.join().unwrap();
    assert_eq!(rw.readers(name).await.unwrap(), 1, "one admission, ours");
    reader.release().await.unwrap();
    assert_eq!(rw.readers(name).await.unwrap(), 0);
}

/// A waiting call returns within its patience even while its attempt waits on a server that
/// does not answer: the chaos suite saw `try_lock_for` overrun its patience by up to the store's
/// response timeout. The attempt is cut at the deadline (`Ok(None)`), and the grant the server
/// makes when it wakes is undone in the background, not left for the watchdog lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_call_returns_within_its_patience_while_the_server_sleeps() {
    let server = debug_server();
    // The default response timeout (2 s) outlasts the sleep: the attempt would be answered.
    let locks = ExpireLock::new(server.store().await);
    prime(&locks).await;
    let name = "impatient";
    let sleeper = debug_sleep(&server, 1.5);
    let started = Instant::now();
    let got = locks.try_lock_for(name, Duration::from_millis(200)).await;
    let took = started.elapsed();
    assert!(matches!(got, Ok(None)), "{got:?} after {took:?}");
    assert!(
        took < Duration::from_millis(900),
        "a 200 ms patience took {took:?}"
    );
    sleeper.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.cli(&["EXISTS", &key(name)]) == "1" {
        assert!(
            Instant::now() < deadline,
            "the grant made after the caller gave up is still held by nobody (PTTL {} ms)",
            server.cli(&["PTTL", &key(name)])
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        server.cli(&["EXISTS", &format!("{}:fence", key(name))]),
        "1",
        "the server did make the grant"
    );
}
