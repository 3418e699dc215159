//! Reentrant locks (DESIGN.md §7, issue #4 part 1): the local owner → (lock, depth) map.
//!
//! - Re-entry by the same owner costs zero round trips (counted with `INFO commandstats`), and
//!   its cost in time is measured on the embedded store (printed, not asserted).
//! - Depth accounting; only the outermost guard's release frees the lock.
//! - Thread-keyed guards are `!Send` (the compile-fail doc test in `src/reentrant.rs`, checked
//!   here to fail for that reason and no other); owner-keyed guards are `Send`.
//! - Async owners are explicit handles: two owners contend, one owner re-enters. Two threads
//!   sharing one `ReentrantLock` do not share holds.
//! - Re-entry after the lease is lost (its local deadline passed, or the key was deleted) is
//!   refused with `ErrorKind::LeaseLost`.
//! - A failed final release never leaves the local entry claiming ownership.
//! - A thread that exits with guards in its thread-locals does not panic in the destructors,
//!   and its locks are released.

mod support;

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::store::redis::RedisOptions;
use tairlock::{
    ErrorKind, ExpireLock, LockGuard, MemoryStore, Options, OwnedReentrantGuard, Owner, RedisStore,
    ReentrantGuard, ReentrantLock, Store, Ttl, Unlock,
};

fn key(name: &str) -> String {
    format!("tairlock:{{{name}}}")
}

fn pttl(server: &RedisServer, name: &str) -> i64 {
    server
        .cli(&["PTTL", &key(name)])
        .parse()
        .unwrap_or_else(|e| server.fail(format!("PTTL reply: {e}")))
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

/// Commands sent by anything but the test's own `CONFIG RESETSTAT`/`INFO` connections.
fn lock_commands(server: &RedisServer) -> BTreeMap<String, u64> {
    command_counts(server)
        .into_iter()
        .filter(|(name, _)| {
            !(name == "info" || name.starts_with("config|") || name.starts_with("client|setinfo"))
        })
        .collect()
}

fn reset_stats(server: &RedisServer) {
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");
}

/// Poll (blocking) until the lock key is gone, or panic after `limit`.
#[track_caller]
fn wait_gone_blocking(server: &RedisServer, name: &str, limit: Duration) -> Duration {
    let start = Instant::now();
    while pttl(server, name) != -2 {
        if start.elapsed() > limit {
            server.fail(format!("{name} still held after {limit:?}"));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    start.elapsed()
}

#[test]
fn reentry_costs_zero_round_trips_for_a_thread() {
    const REENTRIES: usize = 1000;
    let server = RedisServer::start();
    let locks = ReentrantLock::new(ExpireLock::new(
        RedisStore::blocking_connect(&server.url()).unwrap(),
    ));
    let outer = locks.blocking_lock("r").unwrap();
    assert_eq!(locks.thread_held_depth("r"), 1);

    reset_stats(&server);
    let mut inner = Vec::with_capacity(REENTRIES);
    for i in 0..REENTRIES {
        inner.push(locks.blocking_lock("r").unwrap());
        assert_eq!(locks.thread_held_depth("r"), i + 2);
    }
    assert!(inner.iter().all(|g| g.fence() == outer.fence()));
    while let Some(guard) = inner.pop() {
        assert_eq!(guard.release().unwrap(), None, "an inner release is local");
    }
    let sent = lock_commands(&server);
    assert!(
        sent.is_empty(),
        "{REENTRIES} re-entries and inner releases sent commands: {sent:?}"
    );
    assert_eq!(locks.thread_held_depth("r"), 1);
    assert_eq!(outer.release().unwrap(), Some(Unlock::Released));
    assert_eq!(locks.thread_held_depth("r"), 0);
    assert_eq!(pttl(&server, "r"), -2);
    println!("commands for {REENTRIES} re-entries: {}", sent.len());
}

#[tokio::test]
async fn reentry_costs_zero_round_trips_for_an_owner() {
    const REENTRIES: usize = 1000;
    let server = RedisServer::start();
    let locks = ReentrantLock::new(ExpireLock::new(server.store().await));
    let owner = Owner::new();
    let outer = locks.lock_as(&owner, "r").await.unwrap();
    reset_stats(&server);
    let mut inner = Vec::with_capacity(REENTRIES);
    for _ in 0..REENTRIES {
        inner.push(locks.lock_as(&owner, "r").await.unwrap());
    }
    for guard in inner {
        assert_eq!(guard.release().await.unwrap(), None);
    }
    let sent = lock_commands(&server);
    assert!(sent.is_empty(), "owner re-entries sent {sent:?}");
    assert_eq!(outer.release().await.unwrap(), Some(Unlock::Released));
    assert_eq!(pttl(&server, "r"), -2);
}

/// The cost of a re-entry (acquire + drop of an inner guard) on the embedded store: printed,
/// not asserted (timing is the machine's business).
#[test]
fn reentry_time_is_measured() {
    const N: u32 = 100_000;
    let locks = ReentrantLock::new(ExpireLock::new(MemoryStore::new()));
    let outer = locks.blocking_lock("hot").unwrap();
    for _ in 0..1000 {
        drop(locks.blocking_lock("hot").unwrap());
    }
    let start = Instant::now();
    for _ in 0..N {
        let inner = locks.blocking_lock("hot").unwrap();
        std::hint::black_box(&inner);
        drop(inner);
    }
    let per = start.elapsed() / N;
    assert_eq!(locks.thread_held_depth("hot"), 1);
    println!(
        "thread re-entry + inner drop: {} ns each ({N} runs)",
        per.as_nanos()
    );

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let owner = Owner::new();
        let outer = locks.lock_as(&owner, "hot2").await.unwrap();
        let start = Instant::now();
        for _ in 0..N {
            let inner = locks.lock_as(&owner, "hot2").await.unwrap();
            std::hint::black_box(&inner);
            drop(inner);
        }
        let per = start.elapsed() / N;
        println!(
            "owner re-entry + inner drop: {} ns each ({N} runs)",
            per.as_nanos()
        );
        outer.release().await.unwrap();
    });
    assert_eq!(outer.release().unwrap(), Some(Unlock::Released));
}

#[test]
fn only_the_outermost_guard_frees_the_lock() {
    let server = RedisServer::start();
    let locks = ReentrantLock::new(ExpireLock::new(
        RedisStore::blocking_connect(&server.url()).unwrap(),
    ));
    // LIFO, with explicit releases.
    let a = locks.blocking_lock("d").unwrap();
    let b = locks.blocking_lock("d").unwrap();
    let c = locks.blocking_lock("d").unwrap();
    assert_eq!(locks.thread_held_depth("d"), 3);
    assert_eq!(c.release().unwrap(), None);
    assert_eq!(locks.thread_held_depth("d"), 2);
    assert!(pttl(&server, "d") > 0);
    assert_eq!(b.release().unwrap(), None);
    assert_eq!(locks.thread_held_depth("d"), 1);
    assert!(pttl(&server, "d") > 0, "one level is still held");
    assert_eq!(a.release().unwrap(), Some(Unlock::Released));
    assert_eq!(locks.thread_held_depth("d"), 0);
    assert_eq!(pttl(&server, "d"), -2);

    // Out of order, by drop: whichever guard goes last frees it.
    let first = locks.blocking_lock("d").unwrap();
    let second = locks.blocking_lock("d").unwrap();
    drop(first);
    assert_eq!(locks.thread_held_depth("d"), 1);
    std::thread::sleep(Duration::from_millis(50));
    assert!(pttl(&server, "d") > 0, "the second level still holds it");
    drop(second);
    assert_eq!(locks.thread_held_depth("d"), 0);
    wait_gone_blocking(&server, "d", Duration::from_secs(2));

    // A new hold after the last release goes to the server again (a new fence).
    let again = locks.blocking_lock("d").unwrap();
    assert!(pttl(&server, "d") > 0);
    assert_eq!(again.release().unwrap(), Some(Unlock::Released));
}

/// The compile-fail doc test of `src/reentrant.rs` fails because the thread-keyed guard is not
/// `Send`, and for nothing else: the same code without the `Send` bound compiles.
#[test]
fn thread_keyed_guards_are_not_send() {
    let doctest = r#"
        fn must_be_send<T: Send>(_: T) {}
        pub fn f() {
            let locks = tairlock::ReentrantLock::new(tairlock::ExpireLock::new(tairlock::MemoryStore::new()));
            let guard = locks.blocking_lock("a").unwrap();
            must_be_send(guard);
        }
    "#;
    let (ok, stderr) = support::compile_snippet("not_send", doctest);
    assert!(!ok, "a ReentrantGuard was accepted as Send");
    assert!(
        stderr.contains("error[E0277]")
            && stderr.contains("cannot be sent between threads safely")
            && stderr.contains("ReentrantGuard"),
        "the doc test fails for another reason:\n{stderr}"
    );
    let control = doctest.replace("must_be_send(guard);", "drop(guard);");
    let (ok, stderr) = support::compile_snippet("not_send_control", &control);
    assert!(
        ok,
        "the doc test's code does not compile even without the Send bound:\n{stderr}"
    );

    // The other guards do move between threads (an owner's hold is not tied to a thread).
    fn is_send<T: Send>() {}
    is_send::<OwnedReentrantGuard<RedisStore>>();
    is_send::<OwnedReentrantGuard<MemoryStore>>();
    is_send::<LockGuard<RedisStore>>();
    is_send::<Owner>();
}

#[tokio::test]
async fn two_owners_contend_and_the_same_owner_reenters() {
    let server = RedisServer::start();
    let locks = ReentrantLock::new(ExpireLock::new(server.store().await));
    let (alice, bob) = (Owner::new(), Owner::new());
    assert_ne!(alice.id(), bob.id());

    let a1 = locks.lock_as(&alice, "o").await.unwrap();
    let a2 = locks.lock_as(&alice, "o").await.unwrap();
    assert_eq!(a1.fence(), a2.fence());
    // A clone of an owner is the same owner.
    let a3 = locks.lock_as(&alice.clone(), "o").await.unwrap();

    // Bob waits: Alice holds it, three levels deep.
    let waited = tokio::time::timeout(Duration::from_millis(200), locks.lock_as(&bob, "o")).await;
    assert!(waited.is_err(), "bob entered while alice holds the lock");
    let bob_waits = {
        let locks = locks.clone();
        let bob = bob.clone();
        tokio::spawn(async move {
            let guard = locks.lock_as(&bob, "o").await.unwrap();
            (Instant::now(), guard)
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!bob_waits.is_finished());
    assert_eq!(a3.release().await.unwrap(), None);
    assert_eq!(a2.release().await.unwrap(), None);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(
        !bob_waits.is_finished(),
        "bob entered before alice's last level left"
    );
    let released = Instant::now();
    assert_eq!(a1.release().await.unwrap(), Some(Unlock::Released));
    let (entered, b1) = bob_waits.await.unwrap();
    println!("owner handoff: {:?}", entered - released);
    assert!(entered >= released);

    // Bob re-enters, and his guard is Send: it can be released from another task.
    let b2 = locks.lock_as(&bob, "o").await.unwrap();
    assert_eq!(b1.fence(), b2.fence());
    assert!(b1.fence() > Some(0));
    tokio::spawn(async move { b2.release().await.unwrap() })
        .await
        .unwrap();
    assert_eq!(b1.release().await.unwrap(), Some(Unlock::Released));
    assert_eq!(pttl(&server, "o"), -2);
}

#[test]
fn threads_sharing_one_reentrant_lock_do_not_share_holds() {
    let server = RedisServer::start();
    let locks = ReentrantLock::new(ExpireLock::new(
        RedisStore::blocking_connect(&server.url()).unwrap(),
    ));
    let a = locks.blocking_lock("t").unwrap();
    let _a2 = locks.blocking_lock("t").unwrap();
    assert_eq!(locks.thread_held_depth("t"), 2);

    let other = locks.clone();
    let entered = Arc::new(AtomicBool::new(false));
    let flag = entered.clone();
    let b = std::thread::spawn(move || {
        assert_eq!(
            other.thread_held_depth("t"),
            0,
            "another thread's hold is not mine"
        );
        let guard = other.blocking_lock("t").unwrap();
        flag.store(true, Ordering::SeqCst);
        let at = Instant::now();
        assert_eq!(other.thread_held_depth("t"), 1);
        let fence = guard.fence();
        assert_eq!(guard.release().unwrap(), Some(Unlock::Released));
        (at, fence)
    });
    std::thread::sleep(Duration::from_millis(300));
    assert!(
        !entered.load(Ordering::SeqCst),
        "thread b entered while thread a holds the lock"
    );
    assert_eq!(
        locks.thread_held_depth("t"),
        2,
        "b's wait did not touch a's depth"
    );
    drop(_a2);
    std::thread::sleep(Duration::from_millis(100));
    assert!(!entered.load(Ordering::SeqCst));
    let released = Instant::now();
    let a_fence = a.fence();
    assert_eq!(a.release().unwrap(), Some(Unlock::Released));
    let (b_entered, b_fence) = b.join().expect("thread b");
    assert!(b_entered >= released);
    assert!(b_fence > a_fence, "b got its own hold with a new fence");
    assert_eq!(locks.thread_held_depth("t"), 0);
}

/// A short watchdog lease, and the server paused past it: the lease's local deadline passes,
/// and re-entry is refused without asking the server.
#[test]
fn reentry_after_the_local_deadline_is_refused() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let locks = ReentrantLock::new(ExpireLock::with_options(
        RedisStore::blocking_connect(&server.url()).unwrap(),
        Options::default().watchdog_lease(lease),
    ));
    let outer = locks.blocking_lock("l").unwrap();
    // Held over several renewal intervals, re-entry keeps working.
    std::thread::sleep(lease * 2);
    let inner = locks.blocking_lock("l").expect("the watchdog keeps it");
    drop(inner);

    assert_eq!(server.cli(&["CLIENT", "PAUSE", "1500", "ALL"]), "OK");
    std::thread::sleep(lease + Duration::from_millis(100));
    let start = Instant::now();
    let refused = locks
        .blocking_lock("l")
        .expect_err("re-entry past the deadline");
    assert_eq!(refused.kind(), ErrorKind::LeaseLost, "{refused}");
    assert!(
        start.elapsed() < Duration::from_millis(50),
        "the refusal is local: the paused server is not asked"
    );
    assert!(outer.is_lost());
    assert_eq!(
        locks.thread_held_depth("l"),
        1,
        "a refused re-entry changes no depth"
    );
    drop(outer);
    assert_eq!(locks.thread_held_depth("l"), 0);
}

/// The key deleted behind the holder's back: the watchdog's next renewal finds it gone, and
/// re-entry is refused from then on (for a thread and for an owner).
#[test]
fn reentry_after_the_lease_was_found_gone_is_refused() {
    let server = RedisServer::start();
    let lease = Duration::from_millis(300);
    let store = RedisStore::blocking_connect(&server.url()).unwrap();
    let locks = ReentrantLock::new(ExpireLock::with_options(
        store.clone(),
        Options::default().watchdog_lease(lease),
    ));
    let outer = locks.blocking_lock("g").unwrap();
    assert_eq!(server.cli(&["DEL", &key("g")]), "1");
    // One renewal interval (a third of the lease), plus slack.
    std::thread::sleep(lease / 3 + Duration::from_millis(80));
    assert!(outer.is_lost());
    let refused = locks.blocking_lock("g").expect_err("re-entry after loss");
    assert_eq!(refused.kind(), ErrorKind::LeaseLost);
    assert_eq!(outer.release().unwrap(), Some(Unlock::NotHeld));
    // Once the lost hold is given up, the thread can lock again (from the server).
    let again = locks.blocking_lock("g").unwrap();
    assert!(!again.is_lost());
    assert!(pttl(&server, "g") > 0);
    assert_eq!(again.release().unwrap(), Some(Unlock::Released));

    // The same for an owner.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = server.store().await;
        let locks = ReentrantLock::new(ExpireLock::with_options(
            store,
            Options::default().watchdog_lease(lease),
        ));
        let owner = Owner::new();
        let outer = locks.lock_as(&owner, "g").await.unwrap();
        assert_eq!(server.cli(&["DEL", &key("g")]), "1");
        tokio::time::sleep(lease / 3 + Duration::from_millis(80)).await;
        let refused = locks
            .lock_as(&owner, "g")
            .await
            .expect_err("owner re-entry");
        assert_eq!(refused.kind(), ErrorKind::LeaseLost);
        assert!(outer.is_lost());
        assert_eq!(outer.release().await.unwrap(), Some(Unlock::NotHeld));
        let again = locks.lock_as(&owner, "g").await.unwrap();
        assert!(!again.is_lost());
        again.release().await.unwrap();
    });
}

fn quick_failing_options() -> RedisOptions {
    let mut options = RedisOptions::default();
    options.response_timeout = Duration::from_millis(500);
    options.connection_timeout = Duration::from_millis(300);
    options.reconnect_retries = 1;
    options
}

/// The server is down when the final release is sent: the release fails, and the thread does
/// not keep claiming the lock. Its next lock goes to the server instead of re-entering.
#[test]
fn a_failed_final_release_leaves_no_local_ownership() {
    let mut server = RedisServer::start();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = rt
        .block_on(RedisStore::connect_with(
            &server.url(),
            quick_failing_options(),
        ))
        .unwrap();
    let locks = ReentrantLock::new(ExpireLock::new(store));

    let outer = locks.blocking_lock("f").unwrap();
    let inner = locks.blocking_lock("f").unwrap();
    let fence = outer.fence().unwrap();
    server.stop();
    assert_eq!(
        inner.release().unwrap(),
        None,
        "an inner release needs no server"
    );
    assert_eq!(locks.thread_held_depth("f"), 1);
    let start = Instant::now();
    let failed = outer.release().expect_err("the server is down");
    println!("final release failed after {:?}: {failed}", start.elapsed());
    assert_eq!(
        locks.thread_held_depth("f"),
        0,
        "the entry does not claim the lock"
    );

    server.restart();
    reset_stats(&server);
    let again = loop {
        // The first command after the restart may meet the dropped connection.
        match locks.blocking_lock("f") {
            Ok(guard) => break guard,
            Err(e) if e.is_connection() && start.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(50));
            }
            Err(e) => server.fail(format!("lock after restart: {e}")),
        }
    };
    assert!(
        lock_commands(&server).get("evalsha").copied().unwrap_or(0) >= 1,
        "the next lock went to the server"
    );
    assert!(pttl(&server, "f") > 0, "and holds the lock there");
    assert_ne!(again.fence(), Some(fence));
    assert_eq!(again.release().unwrap(), Some(Unlock::Released));
    drop(locks);
    drop(rt);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_final_release_leaves_no_local_ownership_for_an_owner() {
    let mut server = RedisServer::start();
    let store = RedisStore::connect_with(&server.url(), quick_failing_options())
        .await
        .unwrap();
    let locks = ReentrantLock::new(ExpireLock::new(store));
    let owner = Owner::new();
    let outer = locks.lock_as(&owner, "f").await.unwrap();
    let inner = locks.lock_as(&owner, "f").await.unwrap();
    tokio::task::block_in_place(|| server.stop());
    assert_eq!(inner.release().await.unwrap(), None);
    assert!(outer.release().await.is_err(), "the server is down");

    tokio::task::block_in_place(|| server.restart());
    reset_stats(&server);
    let start = Instant::now();
    let again = loop {
        match locks.lock_as(&owner, "f").await {
            Ok(guard) => break guard,
            Err(e) if e.is_connection() && start.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => server.fail(format!("lock after restart: {e}")),
        }
    };
    assert!(
        pttl(&server, "f") > 0,
        "the owner's next lock went to the server"
    );
    assert!(lock_commands(&server).get("evalsha").copied().unwrap_or(0) >= 1);
    assert_eq!(again.release().await.unwrap(), Some(Unlock::Released));
}

thread_local! {
    static HELD_REDIS: RefCell<Vec<ReentrantGuard<RedisStore>>> = const { RefCell::new(Vec::new()) };
    static HELD_MEMORY: RefCell<Vec<ReentrantGuard<MemoryStore>>> = const { RefCell::new(Vec::new()) };
}

/// A thread exits while its guards sit in a `thread_local!`: their destructors run during thread
/// teardown (before or after the `thread_local` crate's own per-thread state is torn down), must
/// not panic, and release the lock.
#[test]
fn a_thread_exiting_with_held_locks_does_not_panic_and_releases_them() {
    let server = RedisServer::start();
    let redis_locks = ReentrantLock::new(ExpireLock::new(
        RedisStore::blocking_connect(&server.url()).unwrap(),
    ));
    let memory = MemoryStore::new();
    let memory_locks = ReentrantLock::new(ExpireLock::new(memory.clone()));

    // `touch_first`: register our thread-local's destructor before the lock's own thread-local
    // state exists, so it runs after it (destructors run in reverse order of registration).
    for touch_first in [false, true] {
        let (r, m) = (redis_locks.clone(), memory_locks.clone());
        let thread = std::thread::spawn(move || {
            if touch_first {
                HELD_REDIS.with(|_| ());
                HELD_MEMORY.with(|_| ());
            }
            let outer = r.blocking_lock("exit").unwrap();
            let inner = r.blocking_lock("exit").unwrap();
            assert_eq!(r.thread_held_depth("exit"), 2);
            HELD_REDIS.with(|held| held.borrow_mut().extend([outer, inner]));
            let guard = m.blocking_lock("exit").unwrap();
            HELD_MEMORY.with(|held| held.borrow_mut().push(guard));
            // Exit holding both.
        });
        assert!(
            thread.join().is_ok(),
            "the thread panicked (touch_first: {touch_first})"
        );
        let freed = wait_gone_blocking(&server, "exit", Duration::from_secs(2));
        println!("touch_first {touch_first}: released {freed:?} after the thread exited");
        let start = Instant::now();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        while rt.block_on(memory.pttl(&key("exit"))).unwrap() != Ttl::Missing {
            assert!(
                start.elapsed() < Duration::from_secs(2),
                "memory lock not released"
            );
            std::thread::sleep(Duration::from_millis(5));
        }

        // Threads that follow (thread ids are recycled by the thread_local crate) hold nothing.
        for _ in 0..4 {
            let (r, m) = (redis_locks.clone(), memory_locks.clone());
            std::thread::spawn(move || {
                assert_eq!(r.thread_held_depth("exit"), 0);
                assert_eq!(m.thread_held_depth("exit"), 0);
                let guard = r.blocking_lock("exit").unwrap();
                assert_eq!(r.thread_held_depth("exit"), 1);
                assert_eq!(guard.release().unwrap(), Some(Unlock::Released));
            })
            .join()
            .expect("a later thread");
        }
    }
}

/// An owner's holds belong to the client (the `ReentrantLock`) they were taken through: holding
/// `x` on one server does not make the owner a holder of `x` on another.
#[tokio::test]
async fn an_owner_does_not_reenter_across_clients() {
    let (one, two) = (RedisServer::start(), RedisServer::start());
    let on_one = ReentrantLock::new(ExpireLock::new(one.store().await));
    let on_two = ReentrantLock::new(ExpireLock::new(two.store().await));
    let owner = Owner::new();
    let held_one = on_one.lock_as(&owner, "x").await.unwrap();
    let held_two = on_two.lock_as(&owner, "x").await.unwrap();
    assert!(pttl(&one, "x") > 0);
    assert!(
        pttl(&two, "x") > 0,
        "the owner's lock on the second server was never taken there"
    );
    // Someone else on the second server must not get in.
    let stranger = ExpireLock::new(two.store().await);
    assert!(stranger.try_lock("x").await.unwrap().is_none());
    assert_eq!(held_two.release().await.unwrap(), Some(Unlock::Released));
    assert_eq!(held_one.release().await.unwrap(), Some(Unlock::Released));
}
