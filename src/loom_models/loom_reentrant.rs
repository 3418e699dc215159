//! The reentrancy map: local hold counts against the server, over every interleaving.
//!
//! [`ReentrantLock::lock_as`](crate::ReentrantLock::lock_as) waits with timers and its guards start
//! a watchdog task, both of which need a tokio runtime that cannot run inside a model. So the
//! model drives the map's real parts — an [`Owner`]'s slot map ([`Owner::with_slots`]), and
//! [`Slot::reenter`]/[`Slot::exit`] on real [`LockGuard`]s without a watchdog — through the
//! same few steps as `lock` and `OwnedReentrantGuard::release`, with one acquisition attempt
//! instead of a wait. The slot and owner mutexes are the shim's, so loom sees them.
//!
//! Threads: `a1` and `a2`, two threads of one owner `A` (`a1` enters twice, nested), `b` of
//! another owner, the expirer (expires the lock key once, iff it has a TTL), and the main
//! thread, which checks the trace once everyone is done.
//!
//! | kind | violated when |
//! |---|---|
//! | `local count vs server` | a thread holds the lock locally (depth ≥ 1) but the server holds another grant (or none) while its own lease has not passed |
//! | `double release` | one grant's last level is left twice, or released on the server twice |
//! | `foreign release` | an owner's step deletes or replaces a hold another owner wrote |
//! | `leaked hold` | once everyone has left every level, the lock is still held |

use std::collections::BTreeMap;
use std::sync::Arc;

use loom::future::block_on;

use super::harness::{
    self, Findings, LEASE, Trace, actor, expired, explore, final_state, foreign_removals, spawn,
    spawn_expirer,
};
use crate::expire_lock::{Acquire, ExpireLock, Unlock};
use crate::guard::LockGuard;
use crate::lease::Lease;
use crate::reentrant::{Owner, Slot};
use crate::store::MemoryStore;

const NAME: &str = "orders";
const KEY: &str = "tairlock:{orders}";
/// The map's client id (a `ReentrantLock`'s own, in the real thing).
const CLIENT: u64 = 1;

type Hold = Arc<Slot<MemoryStore>>;

/// Problems a thread sees while it runs, filed by the main thread at the end.
type Seen = Arc<std::sync::Mutex<Vec<(&'static str, String)>>>;

struct Cx {
    locks: ExpireLock<MemoryStore>,
    store: MemoryStore,
    trace: Arc<Trace>,
    seen: Seen,
}

impl Cx {
    /// `ReentrantLock::lock_as`, with one attempt instead of a wait.
    fn enter(&self, owner: &Owner) -> Option<Hold> {
        let existing = owner.with_slots::<MemoryStore, _>(|slots| {
            slots.get(&CLIENT).and_then(|s| s.get(NAME)).cloned()
        });
        if let Some(slot) = existing {
            match slot.reenter() {
                Ok(true) => {
                    self.trace.note("re-enters from the map, no round trip");
                    return Some(slot);
                }
                Ok(false) => self.trace.note("finds a finished slot"),
                Err(e) => {
                    self.trace.note(format!("re-entry refused: {e}"));
                    return None;
                }
            }
        }
        match block_on(self.locks.expire_lock(NAME, LEASE)).expect("expire_lock") {
            Acquire::Acquired(lease) => {
                self.trace
                    .note(format!("expire_lock -> acquired {:?}", lease.value()));
                let guard = LockGuard::new(self.locks.clone(), NAME, lease, LEASE, false);
                let slot = Slot::new(guard);
                owner.with_slots::<MemoryStore, _>(|slots| {
                    slots
                        .entry(CLIENT)
                        .or_default()
                        .insert(NAME.to_owned(), slot.clone())
                });
                Some(slot)
            }
            Acquire::Held { holder, .. } => {
                self.trace
                    .note(format!("expire_lock -> held by {:?}", holder.value()));
                None
            }
        }
    }

    /// Inside: the server must hold this hold's grant unless its lease has passed.
    fn check(&self, slot: &Hold) {
        let Some(fence) = slot.fence() else {
            self.seen.lock().expect("seen").push((
                "local count vs server",
                format!("{} is inside a slot whose guard is gone", actor()),
            ));
            return;
        };
        let server = self
            .store
            .atomically(|db| db.get(KEY).ok().flatten())
            .map(|v| String::from_utf8_lossy(&v).into_owned());
        self.trace.note(format!(
            "inside with fence {fence}; server holds {server:?}"
        ));
        let ours = server
            .as_deref()
            .and_then(Lease::parse)
            .is_some_and(|l| l.fence() == fence);
        let passed = expired(&self.trace.events(), KEY)
            .iter()
            .filter_map(|v| Lease::parse(v))
            .any(|l| l.fence() == fence);
        if !ours && !passed {
            self.seen.lock().expect("seen").push((
                "local count vs server",
                format!(
                    "{} holds fence {fence} locally, its lease has not passed, and the server \
                     holds {server:?}",
                    actor()
                ),
            ));
        }
    }

    /// `OwnedReentrantGuard::release`: leave one level; on the last, release on the server.
    fn leave(&self, slot: Hold) {
        let fence = slot.fence();
        match slot.exit() {
            Some(guard) => {
                let outcome = block_on(guard.release()).expect("release");
                self.trace.note(format!(
                    "leaves the last level of fence {}: release -> {outcome:?}",
                    fence.unwrap_or_default()
                ));
                if outcome == Unlock::Released {
                    self.trace
                        .note(format!("released fence {}", fence.unwrap_or_default()));
                }
            }
            None => self.trace.note("leaves one level"),
        }
    }
}

/// Each grant's last level must be left once, and released on the server at most once.
fn double_releases(trace: &Trace) -> Vec<String> {
    let mut last_levels: BTreeMap<String, u32> = BTreeMap::new();
    let mut released: BTreeMap<String, u32> = BTreeMap::new();
    for event in trace.events() {
        if let harness::Event::Note { note, .. } = event {
            if let Some(rest) = note.strip_prefix("leaves the last level of fence ") {
                let fence = rest.split(':').next().unwrap_or_default().to_owned();
                *last_levels.entry(fence).or_default() += 1;
            } else if let Some(fence) = note.strip_prefix("released fence ") {
                *released.entry(fence.to_owned()).or_default() += 1;
            }
        }
    }
    last_levels
        .iter()
        .chain(released.iter())
        .filter(|(_, n)| **n > 1)
        .map(|(fence, n)| format!("fence {fence} released {n} times"))
        .collect()
}

/// The reentrancy map agrees with the server over every interleaving.
#[test]
fn loom_reentrant_map_holds() {
    let model = "reentrant-map";
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let store = harness::store();
        let trace = Trace::attach(&store, &[KEY]);
        let seen: Seen = Arc::default();
        let cx = Arc::new(Cx {
            locks: ExpireLock::new(store.clone()),
            store: store.clone(),
            trace: trace.clone(),
            seen: seen.clone(),
        });
        let (a, b) = (Owner::new(), Owner::new());
        let a1 = {
            let (cx, a) = (cx.clone(), a.clone());
            spawn("a1", move || {
                let Some(outer) = cx.enter(&a) else { return };
                if let Some(inner) = cx.enter(&a) {
                    cx.check(&inner);
                    cx.leave(inner);
                }
                cx.check(&outer);
                cx.leave(outer);
            })
        };
        let a2 = {
            let cx = cx.clone();
            spawn("a2", move || {
                if let Some(hold) = cx.enter(&a) {
                    cx.check(&hold);
                    cx.leave(hold);
                }
            })
        };
        let b1 = {
            let cx = cx.clone();
            spawn("b", move || {
                if let Some(hold) = cx.enter(&b) {
                    cx.check(&hold);
                    cx.leave(hold);
                }
            })
        };
        let expirer = spawn_expirer(&store, &[KEY], 1);
        for thread in [a1, a2, b1, expirer] {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        let mut by_kind: BTreeMap<&'static str, Vec<String>> = BTreeMap::new();
        for (kind, what) in seen.lock().expect("seen").drain(..) {
            by_kind.entry(kind).or_default().push(what);
        }
        for (kind, found) in &by_kind {
            filed.record(kind, found, &trace);
        }
        filed.record("double release", &double_releases(&trace), &trace);
        let owner_of = |actor: &str| actor.trim_end_matches(char::is_numeric).to_owned();
        filed.record(
            "foreign release",
            &foreign_removals(&events, KEY, owner_of),
            &trace,
        );
        let leaked = final_state(&events, KEY)
            .map(|s| format!("everyone has left every level and {KEY} still holds {s}"));
        filed.record("leaked hold", leaked.as_slice(), &trace);

        filed.reached(
            "a2 re-entered the hold a1 took",
            trace.noted(|actor, note| actor == "a2" && note.starts_with("re-enters")),
        );
        filed.reached(
            "the lease passed while a thread held it locally",
            trace.noted(|_, note| note.starts_with("inside") && !note.ends_with("\")")),
        );
        filed.reached(
            "a final release met another owner's grant",
            trace.noted(|_, note| note.ends_with("HeldByOther")),
        );
    });
    findings.assert_none(model);
    findings.assert_reached(model, "a2 re-entered the hold a1 took");
    findings.assert_reached(model, "the lease passed while a thread held it locally");
    findings.assert_reached(model, "a final release met another owner's grant");
}
