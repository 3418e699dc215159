//! A user-style test: flaw F4b (an expired holder's release deletes the next holder's lock),
//! reproduced command by command with the gated store for an application's hand-written lock,
//! and the same schedule passed by `ScriptedLock` on the same key.
//!
//! | t (ms) | C1 (lease 100 ms)            | C2 (lease 300 ms)                 | the key          |
//! |--------|------------------------------|-----------------------------------|------------------|
//! | 0      | acquires                     |                                   | C1's             |
//! | 200    | (C1's lease is over)         | takes the expired lock over       | C2's             |
//! | 300    | releases                     | still holds (until 500)           | hand-written: gone; scripted: C2's |
//!
//! The store is the embedded one on a virtual clock the test moves (the scripts' server time),
//! and the hand-written lock reads the same clock (its client clock).

use std::sync::Arc;
use std::time::Duration;

use tairlock::clock::{SharedClock, VirtualClock};
use tairlock::{MemoryStore, Store};
use tairlock_legacy::{Options, Release, ScriptedLock, TryAcquire, Unit};
use tairlock_testing::gated::Gate;

#[path = "../examples/app_lock/mod.rs"]
mod app_lock;

const KEY: &str = "orders:42";

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// One store on a virtual clock, and a gate for its clients.
struct Rig {
    store: MemoryStore,
    clock: VirtualClock,
    gate: Gate,
}

impl Rig {
    fn new() -> Self {
        let clock = VirtualClock::new(Duration::from_secs(1_700_000_000));
        let shared: SharedClock = Arc::new(clock.clone());
        Rig {
            store: MemoryStore::with_clock(shared),
            clock,
            gate: Gate::new(),
        }
    }

    fn clock(&self) -> SharedClock {
        Arc::new(self.clock.clone())
    }

    fn scripted(&self, client: &str) -> ScriptedLock<tairlock_testing::gated::Gated<MemoryStore>> {
        ScriptedLock::with_options(
            self.gate.client(client, self.store.clone()),
            Options::default().unit(Unit::Millis).clock(self.clock()),
        )
    }
}

#[tokio::test]
async fn the_hand_written_lock_deletes_the_next_holders_lock() {
    let rig = Rig::new();
    let (c1, c2) = (
        rig.gate.client("C1", rig.store.clone()),
        rig.gate.client("C2", rig.store.clone()),
    );

    // t = 0: C1 takes the free lock with its SETNX.
    let (store, clock) = (c1.clone(), rig.clock());
    let t1 = tokio::spawn(async move { app_lock::try_lock(&store, &*clock, KEY, ms(100)).await });
    rig.gate.step("C1", "SETNX").await;
    let mine = rig.gate.join(t1).await.unwrap().expect("C1 holds the lock");

    // t = 200: C1's lease is over; C2 finds the lock expired and takes it over.
    rig.clock.advance(ms(200));
    let (store, clock) = (c2.clone(), rig.clock());
    let t2 = tokio::spawn(async move { app_lock::try_lock(&store, &*clock, KEY, ms(300)).await });
    for command in ["SETNX", "GET", "GETSET"] {
        rig.gate.step("C2", command).await;
    }
    let theirs = rig.gate.join(t2).await.unwrap().expect("C2 holds the lock");
    assert_ne!(mine, theirs);

    // t = 300: C1, back from a pause, releases. Its check is "some live lock", not "mine".
    rig.clock.advance(ms(100));
    let (store, clock) = (c1.clone(), rig.clock());
    let r1 = tokio::spawn(async move { app_lock::unlock(&store, &*clock, KEY).await });
    rig.gate.step("C1", "GET").await;
    rig.gate.step("C1", "DEL").await;
    rig.gate.join(r1).await.unwrap();

    assert_eq!(
        rig.store.get(KEY).await.unwrap(),
        None,
        "F4b: C1's release deleted C2's live lock"
    );
}

#[tokio::test]
async fn scripted_lock_passes_the_same_schedule() {
    let rig = Rig::new();
    let (c1, c2) = (rig.scripted("C1"), rig.scripted("C2"));

    // t = 0: C1 takes the free lock (one script).
    let t1 = tokio::spawn(async move { c1.try_acquire(KEY, ms(100)).await.map(|a| (c1, a)) });
    rig.gate.step("C1", "EVAL legacy_acquire").await;
    let (c1, acquired) = rig.gate.join(t1).await.unwrap();
    let TryAcquire::Acquired(mine) = acquired else {
        panic!("C1 should hold the free lock: {acquired:?}");
    };

    // t = 200: C1's lease is over; C2 takes the expired lock over.
    rig.clock.advance(ms(200));
    let t2 = tokio::spawn(async move { c2.try_acquire(KEY, ms(300)).await });
    rig.gate.step("C2", "EVAL legacy_acquire").await;
    let TryAcquire::Acquired(theirs) = rig.gate.join(t2).await.unwrap() else {
        panic!("C2 should take the expired lock over");
    };

    // t = 300: C1 releases: a compare-and-delete of its own value, which is gone.
    rig.clock.advance(ms(100));
    let r1 = tokio::spawn(async move { c1.release(&mine).await });
    rig.gate.step("C1", "EVAL legacy_release").await;
    assert_eq!(rig.gate.join(r1).await.unwrap(), Release::HeldByOther);

    assert_eq!(
        rig.store.get(KEY).await.unwrap(),
        Some(theirs.value_text().into_bytes()),
        "C2's lock is intact"
    );
}

/// The two locks share the key format: a lock the hand-written code took is one
/// `ScriptedLock` sees as held, and the other way round.
#[tokio::test]
async fn both_locks_read_each_others_lock() {
    let rig = Rig::new();
    rig.gate.open("app");
    rig.gate.open("scripted");
    let app = rig.gate.client("app", rig.store.clone());
    let scripted = rig.scripted("scripted");
    let clock = rig.clock();

    let taken = app_lock::try_lock(&app, &*clock, KEY, ms(100))
        .await
        .unwrap();
    assert!(taken.is_some());
    assert!(matches!(
        scripted.try_acquire(KEY, ms(100)).await.unwrap(),
        TryAcquire::Busy { .. }
    ));
    rig.clock.advance(ms(200));
    let TryAcquire::Acquired(held) = scripted.try_acquire(KEY, ms(100)).await.unwrap() else {
        panic!("the expired hand-written lock is taken over");
    };
    assert_eq!(
        app_lock::try_lock(&app, &*clock, KEY, ms(100))
            .await
            .unwrap(),
        None
    );
    assert_eq!(scripted.release(&held).await.unwrap(), Release::Released);
}
