//! The counting semaphore with per-permit leases (issue #16 §1), on the embedded store and on a
//! real server: never more than N holders under contention, a release wakes a waiter, a
//! `kill -9`ed holder process's permit returns within its lease, a repeated acquire with the
//! same nonce takes nothing more, limit changes never evict a live holder, and bad input is
//! refused without changing anything.
//!
//! Holder processes are this test binary itself, re-run with `--exact child_holder` and an
//! environment variable telling it what to hold.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::Duration;

use support::{Env, RedisServer, TestStore};
use tairlock::semaphore::PermitAttempt;
use tairlock::{
    ErrorKind, MemoryStore, RedisStore, Reply, Script, Semaphore, SemaphoreOptions, Store, Unlock,
    WaitStrategy,
};
use tokio::time::Instant;

/// Set in a child process: `<redis url>|<semaphore name>|<limit>|<lease ms>`.
const CHILD_ENV: &str = "TAIRLOCK_SEMAPHORE_TEST_CHILD";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// `name::{memory,redis}` from `async fn name(env)`.
macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            use super::support::Env;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn memory() {
                super::$name(Env::memory_real_time()).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn redis() {
                super::$name(Env::redis().await).await;
            }
        }
    )+};
}

on_both_stores!(
    never_more_than_n_holders_under_contention,
    a_release_wakes_a_waiter,
    a_repeated_acquire_with_the_same_nonce_takes_nothing_more,
    shrinking_the_limit_never_evicts_a_live_holder,
    a_client_with_another_limit_is_refused_and_writes_nothing,
    bad_input_is_refused_and_changes_nothing,
    a_key_holding_user_data_is_an_error_and_untouched,
    a_holder_whose_permits_are_gone_is_reported_lost,
    a_lease_without_renewal_returns_the_permit,
    fair_waiters_get_their_permits_in_arrival_order,
    a_newcomer_does_not_overtake_a_fair_waiter,
    a_crashed_fair_waiter_holds_the_queue_up_at_most_its_waiter_lease,
);

fn fair() -> SemaphoreOptions {
    SemaphoreOptions::default().fair(true).waiter_lease(ms(600))
}

/// Eight clients (separate `Semaphore` values, as separate processes would be) take 1 or 2 of 3
/// permits in a loop; the permits held at once, counted locally, never exceed 3.
async fn never_more_than_n_holders_under_contention<S: TestStore>(env: Env<S>) {
    const LIMIT: usize = 3;
    let held = Arc::new(AtomicUsize::new(0));
    let max = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for client in 0..8 {
        let sem = Semaphore::new(env.store.clone(), LIMIT as u32);
        let (held, max) = (held.clone(), max.clone());
        tasks.push(tokio::spawn(async move {
            let permits = if client % 4 == 0 { 2 } else { 1 };
            for _ in 0..6 {
                let guard = sem.acquire("pool", permits).await.unwrap();
                let now = held.fetch_add(permits as usize, Ordering::SeqCst) + permits as usize;
                max.fetch_max(now, Ordering::SeqCst);
                assert!(now <= LIMIT, "{now} permits held at once, limit {LIMIT}");
                tokio::time::sleep(ms(3)).await;
                held.fetch_sub(permits as usize, Ordering::SeqCst);
                assert_eq!(guard.release().await.unwrap(), Unlock::Released);
            }
        }));
    }
    for task in tasks {
        tokio::time::timeout(Duration::from_secs(60), task)
            .await
            .expect("the clients finish")
            .unwrap();
    }
    let max = max.load(Ordering::SeqCst);
    println!(
        "[{}] at most {max} of {LIMIT} permits held at once",
        env.kind()
    );
    assert!(max >= 2, "the clients never overlapped: {max}");
    let sem = Semaphore::new(env.store.clone(), LIMIT as u32);
    assert_eq!(sem.available("pool").await.unwrap(), LIMIT as u32);
}

/// A waiter for a full semaphore is woken by the release's announcement, long before the
/// holder's lease (30 s) would have let it in.
async fn a_release_wakes_a_waiter<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::new(env.store.clone(), 1);
    let holder = sem.acquire("one", 1).await.unwrap();
    let other = Semaphore::new(env.store.clone(), 1);
    let waiter = tokio::spawn(async move {
        let guard = other.acquire("one", 1).await.unwrap();
        let at = Instant::now();
        guard.release().await.unwrap();
        at
    });
    tokio::time::sleep(ms(300)).await;
    assert!(
        !waiter.is_finished(),
        "the waiter waits while the permit is held"
    );
    let released = Instant::now();
    holder.release().await.unwrap();
    let entered = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the release wakes the waiter")
        .unwrap();
    let took = entered.duration_since(released);
    println!("[{}] waiter in {took:?} after the release", env.kind());
    assert!(took < Duration::from_secs(5), "woken only after {took:?}");
}

/// An acquire repeated with the same nonce (its first reply lost) finds the permits it took:
/// the same fencing token, no second permit, even when the semaphore is full.
async fn a_repeated_acquire_with_the_same_nonce_takes_nothing_more<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::new(env.store.clone(), 2);
    let ttl = Duration::from_secs(10);
    let PermitAttempt::Acquired(first) = sem.attempt("rep", 1, ttl, "n1").await.unwrap() else {
        panic!("a free semaphore takes the first holder");
    };
    let PermitAttempt::Acquired(again) = sem.attempt("rep", 1, ttl, "n1").await.unwrap() else {
        panic!("a repeat finds its permits");
    };
    assert_eq!(again.fence, first.fence);
    assert_eq!(sem.available("rep").await.unwrap(), 1);
    let PermitAttempt::Acquired(second) = sem.attempt("rep", 1, ttl, "n2").await.unwrap() else {
        panic!("a second holder fits");
    };
    assert!(second.fence > first.fence, "fencing tokens grow");
    // Full: a third holder is refused, but a repeat of either is not.
    assert!(matches!(
        sem.attempt("rep", 1, ttl, "n3").await.unwrap(),
        PermitAttempt::Busy { in_use: 2, .. }
    ));
    assert!(matches!(
        sem.attempt("rep", 1, ttl, "n2").await.unwrap(),
        PermitAttempt::Acquired(p) if p.fence == second.fence
    ));
    // A repeat asking for more permits gets what the first attempt took, no more.
    assert!(matches!(
        sem.attempt("rep", 2, ttl, "n2").await.unwrap(),
        PermitAttempt::Acquired(p) if p.fence == second.fence && p.permits == 1
    ));
    let inspection = sem.inspect("rep").await.unwrap();
    assert_eq!(inspection.holders.len(), 2, "{inspection:?}");
    assert_eq!(inspection.in_use, 2);
    assert_eq!(inspection.last_fence, Some(second.fence));
    // Release and renew are safe to repeat too.
    assert!(sem.release("rep", &first).await.unwrap());
    assert!(!sem.release("rep", &first).await.unwrap());
    assert!(sem.renew("rep", &first, ttl).await.unwrap().is_none());
    assert!(sem.renew("rep", &second, ttl).await.unwrap().is_some());
    assert!(sem.renew("rep", &second, ttl).await.unwrap().is_some());
    assert_eq!(sem.available("rep").await.unwrap(), 1);
    assert!(sem.release("rep", &second).await.unwrap());
    // Nothing left behind but the fence state and the limit.
    assert_eq!(env.store.dbsize().await, 2, "{}", env.context());
}

/// Three holders under a limit of 3. An operator shrinks the limit to 2: the holders keep their
/// permits and renew them, a client still counting against 3 is refused with a clear error, and
/// one counting against 2 is refused until the holders fit; growing it to 4 admits one more.
async fn shrinking_the_limit_never_evicts_a_live_holder<S: TestStore>(env: Env<S>) {
    let three = Semaphore::new(env.store.clone(), 3);
    let mut holders = Vec::new();
    for _ in 0..3 {
        holders.push(three.try_acquire("lim", 1).await.unwrap().expect("fits"));
    }
    assert_eq!(three.inspect("lim").await.unwrap().limit, Some(3));
    assert_eq!(three.set_limit("lim", 2).await.unwrap(), Some(3));
    let err = three.try_acquire("lim", 1).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
    assert!(err.to_string().contains("limit is 2, not 3"), "{err}");
    let two = three.with_limit(2);
    assert!(two.try_acquire("lim", 1).await.unwrap().is_none());
    assert_eq!(two.available("lim").await.unwrap(), 0);
    for h in &holders {
        h.renew(Duration::from_secs(30)).await.unwrap();
        assert!(!h.is_lost());
    }
    assert_eq!(three.inspect("lim").await.unwrap().holders.len(), 3);
    assert_eq!(two.set_limit("lim", 4).await.unwrap(), Some(2));
    let four = three.with_limit(4);
    let grown = four
        .try_acquire("lim", 1)
        .await
        .unwrap()
        .expect("growing admits more");
    assert_eq!(four.available("lim").await.unwrap(), 0);
    grown.release().await.unwrap();
    assert_eq!(four.set_limit("lim", 2).await.unwrap(), Some(4));
    holders.pop().unwrap().release().await.unwrap();
    assert!(
        two.try_acquire("lim", 1).await.unwrap().is_none(),
        "2 held, limit 2"
    );
    holders.pop().unwrap().release().await.unwrap();
    let fits = two.try_acquire("lim", 1).await.unwrap();
    assert!(fits.is_some(), "1 held, limit 2");
    for h in holders {
        assert!(!h.is_lost());
        h.release().await.unwrap();
    }
    let invalid =
        |r: tairlock::Result<_>| matches!(r, Err(e) if e.kind() == ErrorKind::InvalidInput);
    assert!(invalid(two.set_limit("lim", 0).await));
    assert_eq!(two.inspect("lim").await.unwrap().limit, Some(2));
}

/// Every other client believes the semaphore holds at most 3 permits: a client configured with
/// 5 is refused (a clear error, nothing written) rather than taking a 4th and a 5th permit.
async fn a_client_with_another_limit_is_refused_and_writes_nothing<S: TestStore>(env: Env<S>) {
    let three = Semaphore::new(env.store.clone(), 3);
    let mut holders = Vec::new();
    for _ in 0..3 {
        holders.push(three.try_acquire("cap", 1).await.unwrap().expect("fits"));
    }
    let five = Semaphore::new(env.store.clone(), 5);
    let holders_key = "tairlock:{cap}:sem";
    let before = env.store.snapshot(holders_key).await;
    for attempt in [
        five.try_acquire("cap", 1).await.map(drop),
        five.try_acquire_for("cap", 1, ms(200)).await.map(drop),
        five.attempt("cap", 1, ms(1000), "n5").await.map(drop),
    ] {
        let err = attempt.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidInput, "{err}");
        assert!(err.to_string().contains("limit is 3, not 5"), "{err}");
    }
    env.store
        .snapshot(holders_key)
        .await
        .assert_intact(&before, ms(500), holders_key);
    let inspection = three.inspect("cap").await.unwrap();
    assert_eq!((inspection.holders.len(), inspection.in_use), (3, 3));
    for h in holders {
        h.release().await.unwrap();
    }
}

/// 0 permits, a limit of 0, more permits than the limit, an empty or braced name, a lease out
/// of range: refused before anything is sent.
async fn bad_input_is_refused_and_changes_nothing<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::new(env.store.clone(), 2);
    let zero = Semaphore::new(env.store.clone(), 0);
    let invalid =
        |r: tairlock::Result<_>| matches!(r, Err(e) if e.kind() == ErrorKind::InvalidInput);
    assert!(invalid(sem.try_acquire("bad", 0).await.map(drop)));
    assert!(invalid(sem.acquire("bad", 3).await.map(drop)));
    assert!(invalid(zero.try_acquire("bad", 1).await.map(drop)));
    assert!(invalid(zero.available("bad").await.map(drop)));
    assert!(invalid(sem.try_acquire("", 1).await.map(drop)));
    assert!(invalid(sem.try_acquire("a{b}", 1).await.map(drop)));
    assert!(invalid(
        sem.attempt("bad", 1, Duration::ZERO, "n").await.map(drop)
    ));
    assert!(invalid(sem.attempt("bad", 1, ms(10), "").await.map(drop)));
    assert!(invalid(
        sem.try_acquire_for("bad", 3, Duration::from_secs(1))
            .await
            .map(drop)
    ));
    assert_eq!(env.store.dbsize().await, 0, "{}", env.context());
}

/// A key of the layout holding a user's data (a string where the zset goes, a hash of other
/// values, a fence that is not a number): every operation is an error and the data stays.
async fn a_key_holding_user_data_is_an_error_and_untouched<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::new(env.store.clone(), 2);
    let wrong = |r: tairlock::Result<_>| matches!(r, Err(e) if e.kind() == ErrorKind::WrongType);
    let cases: [(&str, &str); 5] = [
        ("tairlock:{user}:sem", "string"),
        ("tairlock:{user}:sem:h", "hash"),
        ("tairlock:{user}:sem:fence", "string"),
        ("tairlock:{user}:sem:n", "string"),
        ("tairlock:{user}:sem:n", "hash"),
    ];
    // Renew and release take the permits of an acquisition: one on a store of its own (the
    // credential names the holder, not the store).
    let elsewhere = Semaphore::new(MemoryStore::new(), 2);
    let PermitAttempt::Acquired(permit) =
        elsewhere.attempt("user", 1, ms(1000), "0a").await.unwrap()
    else {
        panic!("a free semaphore admits");
    };
    for (key, kind) in cases {
        match kind {
            "hash" => env.store.hset(key, "someone", b"not a holding").await,
            _ => env.store.set(key, b"user data").await.unwrap(),
        }
        let before = env.store.snapshot(key).await;
        assert!(wrong(sem.try_acquire("user", 1).await.map(drop)), "{key}");
        assert!(
            wrong(sem.attempt("user", 1, ms(1000), "n").await.map(drop)),
            "{key}"
        );
        if key.ends_with(":sem") {
            assert!(wrong(sem.release("user", &permit).await.map(drop)), "{key}");
            assert!(
                wrong(sem.force_release("user", "0a").await.map(drop)),
                "{key}"
            );
            assert!(wrong(sem.available("user").await.map(drop)), "{key}");
            assert!(
                wrong(sem.renew("user", &permit, ms(1000)).await.map(drop)),
                "{key}"
            );
        } else if key.ends_with(":sem:n") {
            assert!(wrong(sem.set_limit("user", 3).await.map(drop)), "{key}");
            if kind == "hash" {
                assert!(wrong(sem.available("user").await.map(drop)), "{key}");
                assert!(
                    wrong(sem.renew("user", &permit, ms(1000)).await.map(drop)),
                    "{key}"
                );
            }
        } else {
            // Release and renew name one holder: they touch nobody else's field.
            assert!(!sem.release("user", &permit).await.unwrap(), "{key}");
            assert!(
                sem.renew("user", &permit, ms(1000))
                    .await
                    .unwrap()
                    .is_none(),
                "{key}"
            );
        }
        env.store
            .snapshot(key)
            .await
            .assert_intact(&before, ms(100), key);
        assert_eq!(env.store.dbsize().await, 1, "{key}: nothing else written");
        env.store.del(key).await.unwrap();
    }
}

/// The holder's entry disappears (an operator deleted the keys): the next renewal finds it
/// gone and the guard reports the loss.
async fn a_holder_whose_permits_are_gone_is_reported_lost<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::with_options(
        env.store.clone(),
        2,
        SemaphoreOptions::default().watchdog_lease(ms(300)),
    );
    let guard = sem.acquire("gone", 1).await.unwrap();
    tokio::time::sleep(ms(400)).await;
    assert!(!guard.is_lost(), "the watchdog keeps it");
    env.store.del("tairlock:{gone}:sem").await.unwrap();
    tokio::time::timeout(Duration::from_secs(5), guard.lost())
        .await
        .expect("the loss is reported");
    assert!(guard.is_lost());
    assert!(guard.renew(ms(300)).await.unwrap_err().is_lease_lost());
    assert_eq!(guard.release().await.unwrap(), Unlock::NotHeld);
}

/// A holder that never renews (`attempt` with a short lease, no guard) gives its permit back
/// when the lease passes, without a release; a polling waiter gets it then.
async fn a_lease_without_renewal_returns_the_permit<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::with_options(
        env.store.clone(),
        1,
        SemaphoreOptions::default().wait(WaitStrategy::Poll {
            min: ms(10),
            max: ms(50),
        }),
    );
    let PermitAttempt::Acquired(_) = sem.attempt("lapse", 1, ms(400), "dead").await.unwrap() else {
        panic!("free");
    };
    assert!(sem.try_acquire("lapse", 1).await.unwrap().is_none());
    let started = Instant::now();
    let guard = sem
        .try_acquire_for("lapse", 1, Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the lapsed permit comes back");
    let took = started.elapsed();
    assert!(took < Duration::from_secs(3), "took {took:?}");
    let holders = sem.inspect("lapse").await.unwrap().holders;
    assert_eq!(holders.len(), 1);
    assert_eq!(holders[0].nonce, guard.nonce());
    guard.release().await.unwrap();
}

/// The blocking twins, from plain threads, on the embedded store.
#[test]
fn blocking_twins_count_permits_too() {
    let sem = Semaphore::new(MemoryStore::new(), 2);
    let a = sem.blocking_acquire("b", 1).unwrap();
    let b = sem.blocking_try_acquire("b", 1).unwrap().expect("fits");
    assert!(sem.blocking_try_acquire("b", 1).unwrap().is_none());
    assert!(
        sem.blocking_try_acquire_for("b", 1, ms(100))
            .unwrap()
            .is_none()
    );
    assert_eq!(sem.blocking_available("b").unwrap(), 0);
    assert_eq!(sem.blocking_inspect("b").unwrap().holders.len(), 2);
    b.blocking_renew(Duration::from_secs(5)).unwrap();
    assert_eq!(a.blocking_release().unwrap(), Unlock::Released);
    assert_eq!(b.blocking_release().unwrap(), Unlock::Released);
    assert_eq!(sem.blocking_available("b").unwrap(), 2);
}

/// The child side: hold one permit, say so, and wait to be killed.
#[test]
fn child_holder() {
    let Ok(spec) = std::env::var(CHILD_ENV) else {
        return; // not a child: nothing to do
    };
    let parts: Vec<&str> = spec.split('|').collect();
    let (url, name) = (parts[0].to_owned(), parts[1].to_owned());
    let limit: u32 = parts[2].parse().unwrap();
    let lease = ms(parts[3].parse().unwrap());
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async move {
        let store = RedisStore::connect(&url).await.unwrap();
        let sem = Semaphore::with_options(
            store,
            limit,
            SemaphoreOptions::default().watchdog_lease(lease),
        );
        let _guard = sem.acquire(&name, 1).await.unwrap();
        println!("HELD {}", std::process::id());
        std::future::pending::<()>().await;
    });
}

/// A holder process of one permit.
struct HolderProcess {
    child: Child,
    held: mpsc::Receiver<()>,
}

impl HolderProcess {
    fn spawn(url: &str, name: &str, limit: u32, lease: Duration) -> HolderProcess {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_holder", "--nocapture", "--test-threads=1"])
            .env(
                CHILD_ENV,
                format!("{url}|{name}|{limit}|{}", lease.as_millis()),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("re-run this test binary as a holder process");
        let stdout = child.stdout.take().unwrap();
        let (tx, held) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if line.contains("HELD ") {
                    let _ = tx.send(());
                }
            }
        });
        HolderProcess { child, held }
    }
}

impl Drop for HolderProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Two holder processes fill a semaphore of 2; `kill -9` of one (no release, no more
/// renewals) lets a waiter in within that holder's lease, while the other keeps its permit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_a_holder_process_returns_its_permit_within_its_lease() {
    let lease = Duration::from_secs(1);
    let server = RedisServer::start();
    let sem = Semaphore::new(server.store().await, 2);
    let url = server.url();
    let holders = tokio::task::spawn_blocking(move || {
        let holders: Vec<_> = (0..2)
            .map(|_| HolderProcess::spawn(&url, "crash", 2, lease))
            .collect();
        for h in &holders {
            h.held
                .recv_timeout(Duration::from_secs(30))
                .expect("the holder process took its permit");
        }
        holders
    })
    .await
    .unwrap();
    let waiter_sem = sem.clone();
    let waiter = tokio::spawn(async move {
        let guard = waiter_sem.acquire("crash", 1).await.unwrap();
        let at = Instant::now();
        (guard, at)
    });
    // The holders' watchdogs keep them past their first lease: the waiter waits.
    tokio::time::sleep(lease + lease / 2).await;
    assert!(
        !waiter.is_finished(),
        "two live holders keep the waiter out"
    );
    assert_eq!(sem.available("crash").await.unwrap(), 0);
    let mut holders = holders;
    let mut victim = holders.pop().unwrap();
    victim.child.kill().unwrap();
    let killed = Instant::now();
    victim.child.wait().unwrap();
    let (guard, entered) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter gets in after the dead holder's lease")
        .unwrap();
    let waited = entered.duration_since(killed);
    println!("waiter in {waited:?} after kill -9 of a holder with a {lease:?} lease");
    assert!(
        waited <= lease + ms(750),
        "waited {waited:?}, longer than the holder's lease"
    );
    // The surviving process still holds its permit: 2 holders, nobody over the limit.
    let inspection = sem.inspect("crash").await.unwrap();
    assert_eq!(inspection.holders.len(), 2, "{inspection:?}");
    assert!(inspection.holders.iter().any(|h| h.nonce == guard.nonce()));
    guard.release().await.unwrap();
    drop(holders);
}

/// Both stores run the same scripts to the same replies (the Lua on Redis, the native twins in
/// process), for one sequence of operations.
#[tokio::test]
async fn the_lua_and_native_bodies_agree() {
    let server = RedisServer::start();
    let redis = server.store().await;
    let memory = Env::memory_real_time().store;
    async fn run<S: Store>(store: S) -> Vec<String> {
        let sem = Semaphore::new(store, 3);
        let ttl = Duration::from_secs(20);
        let mut out = Vec::new();
        let shape = |a: &PermitAttempt| match a {
            PermitAttempt::Acquired(p) => format!("acquired {}", p.permits),
            PermitAttempt::Busy { in_use, .. } => format!("busy {in_use}"),
        };
        let permit = |a: PermitAttempt| match a {
            PermitAttempt::Acquired(p) => p,
            other => panic!("{other:?}"),
        };
        let a = sem.attempt("d", 2, ttl, "a").await.unwrap();
        out.push(shape(&a));
        out.push(shape(&sem.attempt("d", 2, ttl, "b").await.unwrap()));
        let c = sem.attempt("d", 1, ttl, "c").await.unwrap();
        out.push(shape(&c));
        out.push(shape(&sem.attempt("d", 2, ttl, "a").await.unwrap()));
        let (a, c) = (permit(a), permit(c));
        out.push(format!(
            "{:?}",
            sem.renew("d", &c, ttl).await.unwrap().is_some()
        ));
        out.push(format!("{:?}", sem.release("d", &a).await.unwrap()));
        out.push(format!("{:?}", sem.release("d", &a).await.unwrap()));
        out.push(shape(&sem.attempt("d", 2, ttl, "b").await.unwrap()));
        let i = sem.inspect("d").await.unwrap();
        out.push(format!(
            "{} {} {} {:?}",
            i.holders.len(),
            i.in_use,
            i.foreign,
            i.limit
        ));
        out.push(format!("{}", sem.available("d").await.unwrap()));
        // Another limit is refused; an operator changes it.
        let five = sem.with_limit(5);
        out.push(format!(
            "{:?}",
            five.attempt("d", 1, ttl, "e")
                .await
                .map(drop)
                .map_err(|e| e.to_string())
        ));
        out.push(format!("{:?}", sem.set_limit("d", 5).await));
        out.push(shape(&five.attempt("d", 1, ttl, "e").await.unwrap()));
        out.push(format!("{:?}", sem.force_release("d", "e").await));
        out.push(format!("{:?}", sem.abandon("d", "e").await));
        out
    }
    let (r, m) = (run(redis).await, run(memory).await);
    assert_eq!(r, m);
    assert_eq!(r[1], "busy 2");
}

/// On a 3-master cluster: a semaphore on each master (its three keys share one slot, so no
/// CROSSSLOT), the limit holds, and a release wakes a waiter through the shard's pub/sub.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_three_master_cluster() {
    let cluster = support::cluster::RedisCluster::start(3);
    let store = cluster.store().await;
    let keys = cluster.one_key_per_master((0..200).map(|i| format!("tairlock:{{sem{i}}}:sem")));
    for key in keys {
        let name = &key["tairlock:{".len()..key.len() - "}:sem".len()];
        let sem = Semaphore::new(store.clone(), 2);
        let a = sem.acquire(name, 1).await.unwrap();
        let b = sem.acquire(name, 1).await.unwrap();
        assert!(b.fence() > a.fence());
        assert!(sem.try_acquire(name, 1).await.unwrap().is_none());
        assert_eq!(sem.available(name).await.unwrap(), 0);
        let other = Semaphore::new(store.clone(), 2);
        let waiter = {
            let name = name.to_owned();
            tokio::spawn(async move {
                let guard = other.acquire(&name, 1).await.unwrap();
                (Instant::now(), guard.release().await.unwrap())
            })
        };
        tokio::time::sleep(ms(300)).await;
        assert!(
            !waiter.is_finished(),
            "{name}: a full semaphore admitted a third"
        );
        let released = Instant::now();
        a.release().await.unwrap();
        let (entered, _) = tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .unwrap_or_else(|_| cluster.fail(format!("{name}: the waiter was not woken")))
            .unwrap();
        let took = entered.duration_since(released);
        assert!(
            took < Duration::from_secs(5),
            "{name}: woken after {took:?}"
        );
        let inspection = sem.inspect(name).await.unwrap();
        assert_eq!(inspection.holders.len(), 1, "{inspection:?}");
        b.release().await.unwrap();
    }
}

/// A store that applies the first `lose` acquire scripts and then loses their replies (a
/// timeout after the server applied them).
#[derive(Clone, Debug)]
struct LoseAcquireReplies {
    inner: MemoryStore,
    lose: Arc<AtomicUsize>,
}

impl Store for LoseAcquireReplies {
    support::forward_plain_commands!();
    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> tairlock::Result<Reply> {
        let reply = self.inner.eval(script, keys, args).await?;
        let lost = script.name() == tairlock::scripts::SEM_ACQUIRE.name()
            && self
                .lose
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
        if lost {
            return Err(tairlock::Error::new(ErrorKind::Timeout, "reply lost"));
        }
        Ok(reply)
    }
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner.runtime()
    }
}

/// Two acquire replies in a row are lost after the server applied them (the call's own repeat
/// and the engine's next attempt): the acquisition still holds exactly one permit, under its
/// one nonce.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lost_acquire_replies_never_take_a_second_permit() {
    let store = LoseAcquireReplies {
        inner: Env::memory_real_time().store,
        lose: Arc::new(AtomicUsize::new(2)),
    };
    let sem = Semaphore::new(store.clone(), 2);
    let guard = tokio::time::timeout(Duration::from_secs(10), sem.acquire("lost", 1))
        .await
        .expect("the acquire rides the lost replies")
        .unwrap();
    assert_eq!(
        store.lose.load(Ordering::SeqCst),
        0,
        "both replies were lost"
    );
    let inspection = sem.inspect("lost").await.unwrap();
    assert_eq!(inspection.holders.len(), 1, "{inspection:?}");
    assert_eq!(inspection.holders[0].nonce, guard.nonce());
    assert_eq!(inspection.holders[0].fence, guard.fence());
    assert_eq!(sem.available("lost").await.unwrap(), 1);
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    assert_eq!(sem.available("lost").await.unwrap(), 2);
}

/// Fair mode: three clients queue one after the other for a full semaphore of 1; each release
/// lets the next in arrival order in.
async fn fair_waiters_get_their_permits_in_arrival_order<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::with_options(env.store.clone(), 1, fair());
    let holder = sem.acquire("fifo", 1).await.unwrap();
    let order = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let mut waiters = Vec::new();
    for who in 0..3 {
        let client = Semaphore::with_options(env.store.clone(), 1, fair());
        let order = order.clone();
        waiters.push(tokio::spawn(async move {
            let guard = client.acquire("fifo", 1).await.unwrap();
            order.lock().push(who);
            tokio::time::sleep(ms(30)).await;
            guard.release().await.unwrap();
        }));
        // Each is queued before the next arrives.
        tokio::time::sleep(ms(150)).await;
    }
    holder.release().await.unwrap();
    for waiter in waiters {
        tokio::time::timeout(Duration::from_secs(10), waiter)
            .await
            .expect("every waiter gets in")
            .unwrap();
    }
    assert_eq!(*order.lock(), vec![0, 1, 2], "{}", env.context());
}

/// Fair mode: once a waiter is queued, a newcomer's single attempt is refused even when a
/// permit is free, until the waiter has had its turn.
async fn a_newcomer_does_not_overtake_a_fair_waiter<S: TestStore>(env: Env<S>) {
    let sem = Semaphore::with_options(env.store.clone(), 2, fair());
    let a = sem.acquire("turn", 1).await.unwrap();
    let b = sem.acquire("turn", 1).await.unwrap();
    // A waiter for both permits queues behind the two holders.
    let waiter_sem = Semaphore::with_options(env.store.clone(), 2, fair());
    let waiter = tokio::spawn(async move {
        let guard = waiter_sem.acquire("turn", 2).await.unwrap();
        tokio::time::sleep(ms(100)).await;
        guard.release().await.unwrap();
    });
    tokio::time::sleep(ms(200)).await;
    a.release().await.unwrap();
    // One permit is free, but the waiter ahead wants two: a newcomer waits its turn.
    let newcomer = Semaphore::with_options(env.store.clone(), 2, fair());
    assert!(newcomer.try_acquire("turn", 1).await.unwrap().is_none());
    b.release().await.unwrap();
    tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the waiter gets both permits")
        .unwrap();
    let after = newcomer.try_acquire("turn", 1).await.unwrap();
    assert!(after.is_some(), "free again once the waiter is done");
}

/// Fair mode: a waiter that queued and crashed (no refresh, no leave) holds up a waiter behind
/// it at most its waiter lease.
async fn a_crashed_fair_waiter_holds_the_queue_up_at_most_its_waiter_lease<S: TestStore>(
    env: Env<S>,
) {
    let sem = Semaphore::with_options(env.store.clone(), 1, fair());
    let holder = sem.acquire("ghost", 1).await.unwrap();
    let ttl = Duration::from_secs(10);
    assert!(matches!(
        sem.attempt_queued("ghost", 1, ttl, "ghost").await.unwrap(),
        PermitAttempt::Busy { .. }
    ));
    let started = Instant::now();
    let next = Semaphore::with_options(env.store.clone(), 1, fair());
    let waiter = tokio::spawn(async move { next.acquire("ghost", 1).await.unwrap() });
    tokio::time::sleep(ms(100)).await;
    holder.release().await.unwrap();
    let guard = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("the crashed waiter's place lapses")
        .unwrap();
    let took = started.elapsed();
    println!("[{}] behind a crashed waiter for {took:?}", env.kind());
    assert!(took >= ms(400), "the queue was skipped: {took:?}");
    assert!(took < ms(600) + Duration::from_secs(2), "took {took:?}");
    assert_eq!(sem.inspect("ghost").await.unwrap().holders.len(), 1);
    guard.release().await.unwrap();
    // Nothing of the ghost's is left but its lapsed place's keys' TTL.
    assert!(!sem.abandon("ghost", "ghost").await.unwrap());
}

/// Loses the reply of the next `SEM_RELEASE` it sees (after the server applied it), reporting a
/// timeout instead.
#[derive(Default)]
struct LoseRelease(std::sync::atomic::AtomicBool);

impl tairlock::store::intercept::Hook for LoseRelease {
    fn around<'a>(
        &'a self,
        command: tairlock::store::intercept::Command<'a>,
        run: tairlock::store::intercept::Run<'a>,
    ) -> tairlock::store::intercept::Run<'a> {
        let tairlock::store::intercept::Command::Eval { script, .. } = command else {
            return run;
        };
        if !std::ptr::eq(script, &tairlock::scripts::SEM_RELEASE) {
            return run;
        }
        Box::pin(async move {
            let reply = run.await;
            if self.0.swap(false, Ordering::SeqCst) {
                return Err(tairlock::Error::new(
                    ErrorKind::Timeout,
                    "test: the release's reply was lost",
                ));
            }
            reply
        })
    }
}

/// A release whose first request was applied but whose reply was lost: the repeat finds the
/// permits gone, and the release is reported as done (by the guard, and by the single step),
/// not as "not held".
#[tokio::test]
async fn a_release_whose_reply_was_lost_is_reported_released() {
    let hook = Arc::new(LoseRelease::default());
    let store = tairlock::store::intercept::Intercept::shared(MemoryStore::new(), hook.clone());
    let sem = Semaphore::new(store, 2);
    let guard = sem.acquire("lost", 1).await.unwrap();
    hook.0.store(true, Ordering::SeqCst);
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    assert_eq!(sem.available("lost").await.unwrap(), 2);
    let PermitAttempt::Acquired(permit) = sem
        .attempt("lost", 1, Duration::from_secs(10), "0b")
        .await
        .unwrap()
    else {
        panic!("free");
    };
    hook.0.store(true, Ordering::SeqCst);
    assert!(sem.release("lost", &permit).await.unwrap());
    assert!(
        !sem.release("lost", &permit).await.unwrap(),
        "a later release finds nothing"
    );
}
