//! The legacy lock's races (`reference/semantics.md` §1.3: F1, F2, F3, F4, F4b), each driven
//! through its step table command by command with the gated store (`support/gated.rs`), on the
//! memory store and on a real redis-server. [`GetSetLock`] must violate (two holders, or a
//! deletion of another holder's lock); [`WatchLock`] and [`ScriptedLock`] must not, under the
//! same schedule.
//!
//! Times are the tables' seconds scaled to milliseconds (timestamps in ms). GetSetLock judges by
//! client clocks only, so it runs on virtual client clocks on both stores; WatchLock and
//! ScriptedLock judge by the server, so on Redis their "time passes" is a real sleep.
//!
//! The schedules map 1:1 for GetSetLock. WatchLock splits each operation into its watched reads
//! (`WATCH`) and its `EXEC`, and takes the reads where the table has the `GET` and the `EXEC`
//! where it has the write. ScriptedLock does each operation in one script, so a read and its
//! write cannot be split: its script runs where the table has the write. Each test says so where
//! it applies.

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::RedisServer;
use tairlock::clock::{Clock, SharedClock, SkewedClock, VirtualClock};
use tairlock::{MemoryStore, RedisStore, Store, Ttl};
use tairlock_legacy::{
    GetSetLock, Holding, Options, Release, ScriptedLock, TryAcquire, Unit, WatchLock, WatchStore,
};
use tairlock_testing::gated::{Gate, Gated};

const KEY: &str = "lock.orderid";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One store, the gate in front of it, and the clocks.
struct Rig<S> {
    store: S,
    gate: Gate,
    /// The clients' base clock (and, on memory, the store's).
    clock: VirtualClock,
    /// On Redis the server keeps real time: Watch/Scripted need real sleeps.
    real_server: bool,
    _server: Option<RedisServer>,
}

impl Rig<MemoryStore> {
    fn memory() -> Self {
        let clock = VirtualClock::default();
        Rig {
            store: MemoryStore::with_clock(Arc::new(clock.clone())),
            gate: Gate::new(),
            clock,
            real_server: false,
            _server: None,
        }
    }
}

impl Rig<RedisStore> {
    async fn redis() -> Self {
        let server = RedisServer::start();
        Rig {
            store: server.store().await,
            gate: Gate::new(),
            clock: VirtualClock::default(),
            real_server: true,
            _server: Some(server),
        }
    }
}

impl<S: WatchStore> Rig<S> {
    fn client_clock(&self, ahead: Duration) -> SharedClock {
        Arc::new(SkewedClock::ahead(Arc::new(self.clock.clone()), ahead))
    }

    fn options(&self, ahead: Duration) -> Options {
        Options::default()
            .unit(Unit::Millis)
            .clock(self.client_clock(ahead))
    }

    fn getset(&self, name: &str, ahead: Duration) -> GetSetLock<Gated<S>> {
        GetSetLock::with_options(
            self.gate.client(name, self.store.clone()),
            self.options(ahead),
        )
    }

    fn watch(&self, name: &str, ahead: Duration) -> WatchLock<Gated<S>> {
        WatchLock::with_options(
            self.gate.client(name, self.store.clone()),
            self.options(ahead),
        )
    }

    fn scripted(&self, name: &str, ahead: Duration) -> ScriptedLock<Gated<S>> {
        ScriptedLock::with_options(
            self.gate.client(name, self.store.clone()),
            self.options(ahead),
        )
    }

    /// Let `d` pass for clients judging by client clocks (GetSet).
    fn pass_client_time(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Let `d` pass for the server (Watch, Scripted): a real sleep on Redis.
    async fn pass_server_time(&self, d: Duration) {
        self.clock.advance(d);
        if self.real_server {
            tokio::time::sleep(d).await;
        }
    }

    /// The clients' (true, unskewed) time.
    fn now(&self) -> Duration {
        self.clock.now()
    }

    /// The server's time.
    async fn server_now(&self) -> Duration {
        self.store.time().await.unwrap()
    }

    /// The lock key's value, read past the gate.
    async fn value(&self) -> Option<u64> {
        self.store
            .get(KEY)
            .await
            .unwrap()
            .map(|v| String::from_utf8(v).unwrap().parse().unwrap())
    }

    /// Seed the key with a timestamp long expired by every clock involved, as a crashed old
    /// client leaves it (no TTL).
    async fn seed_expired(&self) -> u64 {
        let now = self.now().min(self.server_now().await);
        let value = Unit::Millis.floor(now) - 10_000;
        self.store
            .set(KEY, value.to_string().as_bytes())
            .await
            .unwrap();
        value
    }
}

/// Spawn `$body` on a clone of `$lock` bound to `$l`.
macro_rules! spawn_on {
    ($lock:expr, |$l:ident| $body:expr) => {{
        let $l = $lock.clone();
        tokio::spawn(async move { $body.await })
    }};
}

#[track_caller]
fn acquired(outcome: tairlock::Result<TryAcquire>) -> Holding {
    match outcome {
        Ok(TryAcquire::Acquired(h)) => h,
        other => panic!("expected the lock to be acquired, got {other:?}"),
    }
}

#[track_caller]
fn busy(outcome: tairlock::Result<TryAcquire>) {
    match outcome {
        Ok(TryAcquire::Busy { .. }) => {}
        other => panic!("expected the lock to be busy, got {other:?}"),
    }
}

fn live(holding: &Holding, now: Duration) -> bool {
    !holding.unit().is_expired(holding.value(), now)
}

/// Generate `name::memory` and `name::redis` from `async fn name<S: WatchStore>(rig: Rig<S>)`.
macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[tokio::test]
            async fn memory() {
                super::$name(super::Rig::memory()).await;
            }

            #[tokio::test]
            async fn redis() {
                super::$name(super::Rig::redis().await).await;
            }
        }
    )+};
}

// ---------------------------------------------------------------------------------------------
// F1: DEL + SETNX recovery.
//
// | step | C1              | C2              | lock.foo                |
// |------|-----------------|-----------------|-------------------------|
// | 0    |                 |                 | E3 (crashed C3), expired|
// | 1    | GET → expired   | GET → expired   | E3                      |
// | 2    | DEL             |                 | absent                  |
// | 3    | SETNX → 1       |                 | E1                      |
// | 4    |                 | DEL (C1's lock) | absent                  |
// | 5    |                 | SETNX → 1       | E2: both hold           |

on_both_stores!(
    f1_del_setnx_recovery_gives_two_holders_where_getset_recovery_gives_one,
    f1_getset_lock_gets_two_holders_when_a_stale_release_del_meets_a_waiting_getset,
    f1_watch_lock_keeps_one_holder_when_a_stale_release_meets_two_recoveries,
    f1_scripted_lock_keeps_one_holder_when_a_stale_release_meets_two_recoveries,
);

/// The table verbatim, with hand-written DEL + SETNX recovery (what much legacy code does): two
/// holders. GetSetLock under the same first step recovers with one GETSET each: the first wins,
/// the second loses — GETSET fixes F1 itself (its losing write is F3, below).
async fn f1_del_setnx_recovery_gives_two_holders_where_getset_recovery_gives_one<S: WatchStore>(
    rig: Rig<S>,
) {
    let e3 = rig.seed_expired().await;
    let (c1, c2) = (
        rig.gate.client("C1", rig.store.clone()),
        rig.gate.client("C2", rig.store.clone()),
    );
    rig.gate.open("C1");
    rig.gate.open("C2");
    let expired = |v: Option<Vec<u8>>| {
        let v: u64 = String::from_utf8(v.unwrap()).unwrap().parse().unwrap();
        Unit::Millis.is_expired(v, rig.now())
    };
    let (e1, e2) = (
        Unit::Millis.value(rig.now(), 100),
        Unit::Millis.value(rig.now(), 100) + 1,
    );
    assert!(
        expired(c1.get(KEY).await.unwrap()),
        "step 1: C1 sees E3 expired"
    );
    assert!(
        expired(c2.get(KEY).await.unwrap()),
        "step 1: C2 sees E3 expired"
    );
    assert!(c1.del(KEY).await.unwrap(), "step 2");
    assert!(
        c1.set_nx(KEY, e1.to_string().as_bytes()).await.unwrap(),
        "step 3: C1 holds"
    );
    assert!(c2.del(KEY).await.unwrap(), "step 4: C2 deletes C1's lock");
    assert!(
        c2.set_nx(KEY, e2.to_string().as_bytes()).await.unwrap(),
        "step 5: C2 holds too"
    );

    // The same first step with GetSetLock: each recovers with one atomic GETSET.
    rig.store.set(KEY, e3.to_string().as_bytes()).await.unwrap();
    let (l1, l2) = (
        rig.getset("G1", Duration::ZERO),
        rig.getset("G2", Duration::ZERO),
    );
    let t1 = spawn_on!(l1, |l| l.try_acquire(KEY, ms(100)));
    let t2 = spawn_on!(l2, |l| l.try_acquire(KEY, ms(50)));
    for (c, cmd) in [
        ("G1", "SETNX"),
        ("G1", "GET"),
        ("G2", "SETNX"),
        ("G2", "GET"),
        ("G1", "GETSET"),
    ] {
        rig.gate.step(c, cmd).await;
    }
    rig.pass_client_time(ms(1));
    rig.gate.step("G2", "GETSET").await;
    let h1 = acquired(rig.gate.join(t1).await);
    busy(rig.gate.join(t2).await);
    // One holder; but the loser's GETSET has replaced the winner's timestamp (the seed of F3).
    assert_ne!(
        rig.value().await,
        Some(h1.value()),
        "G2's losing GETSET rewrote G1's timestamp"
    );
}

/// GetSetLock never DELs to recover, so F1's two DELs can only come from the one DEL it has: a
/// release. C3's release checked its lock while it was live and is paused before its DEL (F4).
/// C1 and C2 both see C3's lock expired (step 1); C1 recovers with GETSET (steps 2-3); C3's
/// stale DEL deletes C1's lock (step 4); C2's GETSET finds the key absent, which jeffkit counts
/// as acquired (F6), just as the table's SETNX (step 5): both hold.
async fn f1_getset_lock_gets_two_holders_when_a_stale_release_del_meets_a_waiting_getset<
    S: WatchStore,
>(
    rig: Rig<S>,
) {
    let (c1, c2, c3) = (
        rig.getset("C1", Duration::ZERO),
        rig.getset("C2", Duration::ZERO),
        rig.getset("C3", Duration::ZERO),
    );
    // Step 0: C3 holds E3 (lease 50), checks it in its release while live, then stalls.
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(50)));
    rig.gate.step("C3", "SETNX").await;
    let h3 = acquired(rig.gate.join(t3).await);
    rig.pass_client_time(ms(20));
    let r3 = spawn_on!(c3, |l| l.release_key(KEY));
    rig.gate.step("C3", "GET").await;
    rig.pass_client_time(ms(80)); // E3 has expired.
    assert!(!live(&h3, rig.now()));
    // Step 1.
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(100)));
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(100)));
    for (c, cmd) in [
        ("C1", "SETNX"),
        ("C1", "GET"),
        ("C2", "SETNX"),
        ("C2", "GET"),
    ] {
        rig.gate.step(c, cmd).await;
    }
    // Steps 2-3: C1's GETSET returns the expired E3: C1 holds.
    rig.gate.step("C1", "GETSET").await;
    let h1 = acquired(rig.gate.join(t1).await);
    // Step 4: C3's stale DEL deletes C1's lock.
    rig.gate.step("C3", "DEL").await;
    assert_eq!(rig.gate.join(r3).await.unwrap(), Release::Released);
    assert_eq!(rig.value().await, None, "C3 deleted C1's lock");
    // Step 5: C2's GETSET on the absent key: acquired.
    rig.gate.step("C2", "GETSET").await;
    let h2 = acquired(rig.gate.join(t2).await);
    assert!(
        live(&h1, rig.now()) && live(&h2, rig.now()),
        "C1 and C2 both hold"
    );
    assert_eq!(rig.value().await, Some(h2.value()));
}

/// The same schedule for WatchLock: C3's release read its lock while live, and its EXEC (the
/// table's DEL) comes after C1 took the lock — so it aborts, and the re-read says "held by
/// another". C1's and C2's reads both find the lock free; C1's EXEC commits, C2's aborts.
async fn f1_watch_lock_keeps_one_holder_when_a_stale_release_meets_two_recoveries<S: WatchStore>(
    rig: Rig<S>,
) {
    let (c1, c2, c3) = (
        rig.watch("C1", Duration::ZERO),
        rig.watch("C2", Duration::ZERO),
        rig.watch("C3", Duration::ZERO),
    );
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(50)));
    rig.gate.through("C3", "EXEC").await;
    let h3 = acquired(rig.gate.join(t3).await);
    rig.pass_server_time(ms(20)).await;
    let r3 = spawn_on!(c3, |l| l.release(&h3));
    rig.gate.step("C3", "WATCH").await; // Reads its own, live lock.
    rig.pass_server_time(ms(80)).await; // Expired: the server's TTL removed it.
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(100)));
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C1", "WATCH").await;
    rig.gate.step("C2", "WATCH").await;
    rig.gate.step("C1", "EXEC").await;
    let h1 = acquired(rig.gate.join(t1).await);
    // C3's EXEC (the DEL) aborts: the key changed after its WATCH. It reads again: not ours.
    rig.gate.step("C3", "EXEC").await;
    rig.gate.step("C3", "WATCH").await;
    assert_eq!(rig.gate.join(r3).await.unwrap(), Release::HeldByOther);
    // C2's EXEC aborts too; it reads again and finds the lock held.
    rig.gate.step("C2", "EXEC").await;
    rig.gate.step("C2", "WATCH").await;
    busy(rig.gate.join(t2).await);
    assert_eq!(rig.value().await, Some(h1.value()), "C1's lock is intact");
    assert_eq!(
        rig.gate.commands_of("C3"),
        ["WATCH", "EXEC", "WATCH", "EXEC", "WATCH"]
    );
}

/// The same schedule for ScriptedLock. Each operation is one script, so C3's release check and
/// DEL run together where the table has the DEL, and C2's read and write where it has its write.
async fn f1_scripted_lock_keeps_one_holder_when_a_stale_release_meets_two_recoveries<
    S: WatchStore,
>(
    rig: Rig<S>,
) {
    let (c1, c2, c3) = (
        rig.scripted("C1", Duration::ZERO),
        rig.scripted("C2", Duration::ZERO),
        rig.scripted("C3", Duration::ZERO),
    );
    rig.gate.open("C3");
    let h3 = acquired(c3.try_acquire(KEY, ms(50)).await);
    rig.pass_server_time(ms(100)).await;
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C1", "EVAL legacy_acquire").await;
    let h1 = acquired(rig.gate.join(t1).await);
    assert_eq!(c3.release(&h3).await.unwrap(), Release::HeldByOther);
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C2", "EVAL legacy_acquire").await;
    busy(rig.gate.join(t2).await);
    assert_eq!(rig.value().await, Some(h1.value()), "C1's lock is intact");
}

// ---------------------------------------------------------------------------------------------
// F2: clock skew. C2's clock is 15 (here: 150 ms) ahead of C1's.
//
// | C1-time | C1                                  | C2 (C2-time)                              | lock.foo |
// |---------|-------------------------------------|-------------------------------------------|----------|
// | 100     | SETNX 111 (timeout 10) → 1          |                                           | 111      |
// | 102     | in critical section                 | (117) SETNX → 0; GET → 111; "expired"     | 111      |
// | 102     |                                     | (117) GETSET 128 → 111 ⇒ C2 holds         | 128      |
// | 111     | now(111) < GET(128) ⇒ DEL           |                                           | absent: C2's lock deleted |

const SKEW: Duration = Duration::from_millis(150);

on_both_stores!(
    f2_fast_client_takes_over_a_live_getset_lock_and_the_release_deletes_its_lock,
    f2_watch_lock_ignores_a_fast_client_clock,
    f2_scripted_lock_ignores_a_fast_client_clock,
);

async fn f2_fast_client_takes_over_a_live_getset_lock_and_the_release_deletes_its_lock<
    S: WatchStore,
>(
    rig: Rig<S>,
) {
    let (c1, c2) = (rig.getset("C1", Duration::ZERO), rig.getset("C2", SKEW));
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C1", "SETNX").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_client_time(ms(20));
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(100)));
    for cmd in ["SETNX", "GET", "GETSET"] {
        rig.gate.step("C2", cmd).await;
    }
    let h2 = acquired(rig.gate.join(t2).await);
    assert!(
        live(&h1, rig.now()),
        "two holders: C1's lock is live by true time"
    );
    rig.pass_client_time(ms(60));
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "GET").await;
    rig.gate.step("C1", "DEL").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::Released);
    assert_eq!(rig.value().await, None, "C1 deleted C2's lock");
    assert!(live(&h2, rig.now()), "while C2's lock was live");
}

/// WatchLock: C2's reads find a lock with a TTL, which only the server's clock ends: busy.
async fn f2_watch_lock_ignores_a_fast_client_clock<S: WatchStore>(rig: Rig<S>) {
    let (c1, c2) = (rig.watch("C1", Duration::ZERO), rig.watch("C2", SKEW));
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C1", "WATCH").await;
    rig.gate.step("C1", "EXEC").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_server_time(ms(20)).await;
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C2", "WATCH").await;
    busy(rig.gate.join(t2).await);
    rig.pass_server_time(ms(60)).await;
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "WATCH").await;
    rig.gate.step("C1", "EXEC").await;
    assert_eq!(
        rig.gate.join(r1).await.unwrap(),
        Release::Released,
        "C1 deleted its own lock"
    );
    assert_eq!(rig.gate.commands_of("C2"), ["WATCH"], "C2 never wrote");
}

async fn f2_scripted_lock_ignores_a_fast_client_clock<S: WatchStore>(rig: Rig<S>) {
    let (c1, c2) = (rig.scripted("C1", Duration::ZERO), rig.scripted("C2", SKEW));
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C1", "EVAL legacy_acquire").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_server_time(ms(20)).await;
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C2", "EVAL legacy_acquire").await;
    busy(rig.gate.join(t2).await);
    assert_eq!(rig.value().await, Some(h1.value()));
    rig.pass_server_time(ms(60)).await;
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "EVAL legacy_release").await;
    assert_eq!(
        rig.gate.join(r1).await.unwrap(),
        Release::Released,
        "C1 deleted its own lock"
    );
}

// ---------------------------------------------------------------------------------------------
// F3: a losing GETSET overwrites the winner's timeout.
//
// | t   | C2 (timeout 30)          | C3 (timeout 5)                  | C4                            | lock.foo |
// |-----|--------------------------|---------------------------------|-------------------------------|----------|
// | 100 | GET → 90 (expired)       | GET → 90                        |                               | 90       |
// | 100 | GETSET 131 → 90 ⇒ holds  |                                 |                               | 131      |
// | 101 |                          | GETSET 107 → 131 ⇒ loses        |                               | 107      |
// | 108 | still in CS (until 131)  |                                 | SETNX 0; GET 107; GETSET ⇒ holds | 139   |

on_both_stores!(
    f3_losing_getset_shortens_the_winners_lease_into_two_holders,
    f3_watch_lock_loser_cannot_rewrite_the_winner,
    f3_scripted_lock_loser_cannot_rewrite_the_winner,
);

async fn f3_losing_getset_shortens_the_winners_lease_into_two_holders<S: WatchStore>(rig: Rig<S>) {
    rig.seed_expired().await;
    let (c2, c3, c4) = (
        rig.getset("C2", Duration::ZERO),
        rig.getset("C3", Duration::ZERO),
        rig.getset("C4", Duration::ZERO),
    );
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(50)));
    for (c, cmd) in [
        ("C2", "SETNX"),
        ("C2", "GET"),
        ("C3", "SETNX"),
        ("C3", "GET"),
        ("C2", "GETSET"),
    ] {
        rig.gate.step(c, cmd).await;
    }
    let h2 = acquired(rig.gate.join(t2).await);
    rig.pass_client_time(ms(10));
    rig.gate.step("C3", "GETSET").await;
    busy(rig.gate.join(t3).await);
    let stored = rig.value().await.unwrap();
    assert!(
        stored < h2.value(),
        "C3's losing GETSET shortened C2's lease: {stored} < {}",
        h2.value()
    );
    rig.pass_client_time(ms(70));
    let t4 = spawn_on!(c4, |l| l.try_acquire(KEY, ms(300)));
    for cmd in ["SETNX", "GET", "GETSET"] {
        rig.gate.step("C4", cmd).await;
    }
    let h4 = acquired(rig.gate.join(t4).await);
    assert_eq!(rig.value().await, Some(h4.value()), "C4 holds");
    assert!(
        live(&h2, rig.now()),
        "two holders: C2 still believes it holds until its own timestamp"
    );
}

/// WatchLock: C2's and C3's reads both see the expired value (the table's GETs); C2's EXEC
/// commits; C3's EXEC (its GETSET) aborts because C2 wrote, and its re-read finds C2's lock.
async fn f3_watch_lock_loser_cannot_rewrite_the_winner<S: WatchStore>(rig: Rig<S>) {
    rig.seed_expired().await;
    let (c2, c3, c4) = (
        rig.watch("C2", Duration::ZERO),
        rig.watch("C3", Duration::ZERO),
        rig.watch("C4", Duration::ZERO),
    );
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(50)));
    rig.gate.step("C2", "WATCH").await;
    rig.gate.step("C3", "WATCH").await;
    rig.gate.step("C2", "EXEC").await;
    let h2 = acquired(rig.gate.join(t2).await);
    rig.pass_server_time(ms(10)).await;
    rig.gate.step("C3", "EXEC").await; // Aborted: nothing written.
    rig.gate.step("C3", "WATCH").await;
    busy(rig.gate.join(t3).await);
    assert_eq!(
        rig.value().await,
        Some(h2.value()),
        "C2's timestamp is intact"
    );
    assert!(
        matches!(rig.store.pttl(KEY).await.unwrap(), Ttl::Expires(_)),
        "and its TTL"
    );
    rig.pass_server_time(ms(70)).await;
    let t4 = spawn_on!(c4, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C4", "WATCH").await;
    busy(rig.gate.join(t4).await);
}

/// ScriptedLock: C3's read and write are one script, run where the table has its GETSET.
async fn f3_scripted_lock_loser_cannot_rewrite_the_winner<S: WatchStore>(rig: Rig<S>) {
    rig.seed_expired().await;
    let (c2, c3, c4) = (
        rig.scripted("C2", Duration::ZERO),
        rig.scripted("C3", Duration::ZERO),
        rig.scripted("C4", Duration::ZERO),
    );
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C2", "EVAL legacy_acquire").await;
    let h2 = acquired(rig.gate.join(t2).await);
    rig.pass_server_time(ms(10)).await;
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(50)));
    rig.gate.step("C3", "EVAL legacy_acquire").await;
    busy(rig.gate.join(t3).await);
    assert_eq!(
        rig.value().await,
        Some(h2.value()),
        "C2's timestamp is intact"
    );
    rig.pass_server_time(ms(70)).await;
    let t4 = spawn_on!(c4, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C4", "EVAL legacy_acquire").await;
    busy(rig.gate.join(t4).await);
}

// ---------------------------------------------------------------------------------------------
// F4: the release race: check, then DEL, in two round trips.
//
// | t     | C1 (holds, E1 = 110)     | C2                                         | lock.foo |
// |-------|--------------------------|--------------------------------------------|----------|
// | 109.9 | check: now < 110 ✓       |                                            | 110      |
// | …     | paused                   |                                            |          |
// | 110.5 |                          | SETNX 0; GET 110 ≤ 110.5; GETSET ⇒ holds   | 141      |
// | 110.6 | DEL                      |                                            | absent: C2's lock deleted |
// | 110.7 |                          |                     C3: SETNX → 1 ⇒ C2 and C3 both hold |

on_both_stores!(
    f4_paused_getset_release_deletes_the_next_holders_lock,
    f4_watch_release_paused_past_expiry_aborts_instead_of_deleting,
    f4_scripted_release_after_expiry_deletes_nothing,
);

async fn f4_paused_getset_release_deletes_the_next_holders_lock<S: WatchStore>(rig: Rig<S>) {
    let (c1, c2, c3) = (
        rig.getset("C1", Duration::ZERO),
        rig.getset("C2", Duration::ZERO),
        rig.getset("C3", Duration::ZERO),
    );
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(200)));
    rig.gate.step("C1", "SETNX").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_client_time(ms(100));
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "GET").await; // now < E1: it will DEL.
    rig.pass_client_time(ms(150)); // C1 paused past its lease.
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    for cmd in ["SETNX", "GET", "GETSET"] {
        rig.gate.step("C2", cmd).await;
    }
    let h2 = acquired(rig.gate.join(t2).await);
    rig.gate.step("C1", "DEL").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::Released);
    assert_eq!(rig.value().await, None, "C1 deleted C2's lock");
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C3", "SETNX").await;
    let h3 = acquired(rig.gate.join(t3).await);
    assert_eq!(rig.value().await, Some(h3.value()), "C3 holds");
    assert!(live(&h2, rig.now()), "C2 and C3 both hold");
}

/// WatchLock: C1's watched read is the check; its EXEC is the DEL, and it aborts because C2
/// wrote the key after the WATCH. The re-read says "held by another".
async fn f4_watch_release_paused_past_expiry_aborts_instead_of_deleting<S: WatchStore>(
    rig: Rig<S>,
) {
    let (c1, c2, c3) = (
        rig.watch("C1", Duration::ZERO),
        rig.watch("C2", Duration::ZERO),
        rig.watch("C3", Duration::ZERO),
    );
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(200)));
    rig.gate.through("C1", "EXEC").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_server_time(ms(100)).await;
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "WATCH").await; // The check: still ours.
    rig.pass_server_time(ms(150)).await;
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C2", "WATCH").await;
    rig.gate.step("C2", "EXEC").await;
    let h2 = acquired(rig.gate.join(t2).await);
    rig.gate.step("C1", "EXEC").await; // The DEL: aborted.
    rig.gate.step("C1", "WATCH").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::HeldByOther);
    assert_eq!(rig.value().await, Some(h2.value()), "C2's lock is intact");
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C3", "WATCH").await;
    busy(rig.gate.join(t3).await);
}

/// ScriptedLock: check and DEL are one script; run where the table has the DEL, it finds C2's
/// grant and deletes nothing.
async fn f4_scripted_release_after_expiry_deletes_nothing<S: WatchStore>(rig: Rig<S>) {
    let (c1, c2, c3) = (
        rig.scripted("C1", Duration::ZERO),
        rig.scripted("C2", Duration::ZERO),
        rig.scripted("C3", Duration::ZERO),
    );
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(200)));
    rig.gate.step("C1", "EVAL legacy_acquire").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_server_time(ms(250)).await;
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C2", "EVAL legacy_acquire").await;
    let h2 = acquired(rig.gate.join(t2).await);
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "EVAL legacy_release").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::HeldByOther);
    assert_eq!(rig.value().await, Some(h2.value()), "C2's lock is intact");
    let t3 = spawn_on!(c3, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C3", "EVAL legacy_acquire").await;
    busy(rig.gate.join(t3).await);
}

// ---------------------------------------------------------------------------------------------
// F4b: jeffkit's release checks "some live lock exists", not "my lock"; no race window needed.
//
// | t       | C1 (E1 = 110)                      | C2                           | lock.foo |
// |---------|------------------------------------|------------------------------|----------|
// | 100-150 | paused 50 s                        |                              | 110      |
// | 120     |                                    | acquires via GETSET, E2 = 151| 151      |
// | 150     | resumes; now(150) < GET(151) ⇒ DEL |                              | absent: C2's lock deleted |

on_both_stores!(
    f4b_getset_release_deletes_a_lock_taken_over_after_expiry,
    f4b_watch_release_spares_a_lock_taken_over_after_expiry,
    f4b_scripted_release_spares_a_lock_taken_over_after_expiry,
);

async fn f4b_getset_release_deletes_a_lock_taken_over_after_expiry<S: WatchStore>(rig: Rig<S>) {
    let (c1, c2) = (
        rig.getset("C1", Duration::ZERO),
        rig.getset("C2", Duration::ZERO),
    );
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C1", "SETNX").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_client_time(ms(200));
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    for cmd in ["SETNX", "GET", "GETSET"] {
        rig.gate.step("C2", cmd).await;
    }
    let h2 = acquired(rig.gate.join(t2).await);
    rig.pass_client_time(ms(100));
    let c1_lease_over = !live(&h1, rig.now());
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "GET").await;
    rig.gate.step("C1", "DEL").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::Released);
    assert_eq!(rig.value().await, None, "C1's release deleted C2's lock");
    assert!(
        live(&h2, rig.now()) && c1_lease_over,
        "C2's live lock, deleted by C1 whose lease was over"
    );
}

async fn f4b_watch_release_spares_a_lock_taken_over_after_expiry<S: WatchStore>(rig: Rig<S>) {
    let (c1, c2) = (
        rig.watch("C1", Duration::ZERO),
        rig.watch("C2", Duration::ZERO),
    );
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.through("C1", "EXEC").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_server_time(ms(200)).await;
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.through("C2", "EXEC").await;
    let h2 = acquired(rig.gate.join(t2).await);
    rig.pass_server_time(ms(100)).await;
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "WATCH").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::HeldByOther);
    assert_eq!(
        rig.gate.commands_of("C1").last().map(String::as_str),
        Some("WATCH"),
        "no EXEC sent"
    );
    assert_eq!(rig.value().await, Some(h2.value()), "C2's lock is intact");
}

async fn f4b_scripted_release_spares_a_lock_taken_over_after_expiry<S: WatchStore>(rig: Rig<S>) {
    let (c1, c2) = (
        rig.scripted("C1", Duration::ZERO),
        rig.scripted("C2", Duration::ZERO),
    );
    let t1 = spawn_on!(c1, |l| l.try_acquire(KEY, ms(100)));
    rig.gate.step("C1", "EVAL legacy_acquire").await;
    let h1 = acquired(rig.gate.join(t1).await);
    rig.pass_server_time(ms(200)).await;
    let t2 = spawn_on!(c2, |l| l.try_acquire(KEY, ms(300)));
    rig.gate.step("C2", "EVAL legacy_acquire").await;
    let h2 = acquired(rig.gate.join(t2).await);
    rig.pass_server_time(ms(100)).await;
    let r1 = spawn_on!(c1, |l| l.release(&h1));
    rig.gate.step("C1", "EVAL legacy_release").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::HeldByOther);
    assert_eq!(rig.value().await, Some(h2.value()), "C2's lock is intact");
}
