//! The fair mode's queue protocol ([`crate::fair`]) over every interleaving of three clients, a
//! crash and the passing of the waiter lease.
//!
//! Threads: `c1` (may crash before any command), `c2`, `c3`, the clock expirer (once, at a
//! point loom chooses, moves the server's clock past the waiter lease: every waiter's place and
//! any grant not yet confirmed lapse; holders' leases do not), and the main thread. Each client
//! makes up to two attempts under one nonce, queueing when busy (a grant made to it by a release
//! between the two is confirmed by the second); with the lock it writes the fenced resource and
//! releases (handing the lock to the first live waiter in the same step); without it, it leaves
//! the queue (releasing a grant it may have received meanwhile).
//!
//! Invariants, checked on every execution:
//!
//! | kind | violated when |
//! |---|---|
//! | `foreign deletion` | a client's step deletes or replaces a live lease of another client's nonce (a release granting to the next waiter writes a lease for that waiter's nonce; that waiter confirming rewrites its own) |
//! | `overlap` | a client enters while another is inside whose lease has not passed |
//! | `fence order` | a new grant (a lease written over nothing or over another nonce's) does not carry a larger fencing token than every grant before it, or a confirmation (a lease replacing one of the same nonce) changes its token |
//! | `stuck` | once everyone is done, the lock key, a queue key or the grant record exists without a TTL |
//! | `orphaned grant` | once everyone is done, the lock is held (or granted) under the nonce of a client that neither crashed nor holds it |
//!
//! The model must reach a direct handoff (a release that granted to a waiter, then confirmed), a
//! grant that lapsed because its waiter crashed, and a waiter that left after being granted.

use std::time::Duration;

use loom::future::block_on;

use super::harness::{
    self, Crash, Event, Findings, LEASE, Resource, Trace, actor, explore, final_state, lines,
    not_expired, overlaps, spawn, spawn_clock_expirer,
};
use crate::clock::VirtualClock;
use crate::expire_lock::{ExpireLock, Options};
use crate::fair::FairAttempt;
use crate::lease::Lease;
use crate::store::MemoryStore;

const NAME: &str = "orders";
const LOCK_KEY: &str = "tairlock:{orders}";
/// The queue, its waiters, and the record of a grant not confirmed yet.
const QUEUE_KEYS: [&str; 3] = [
    "tairlock:{orders}:fairq",
    "tairlock:{orders}:fairw",
    "tairlock:{orders}:fairg",
];
const WAITER_LEASE: Duration = Duration::from_secs(1);
/// The clients besides `c1` (the crash-prone one).
const CLIENTS: [&str; 2] = ["c2", "c3"];

/// A client's nonce: its name (hex digits, as nonces are).
fn nonce_of(client: &str) -> String {
    format!("{client}{client}")
}

/// The client a lease value belongs to, by its nonce.
fn owner(value: &str) -> Option<String> {
    let lease = Lease::parse(value)?;
    ["c1", "c2", "c3"]
        .into_iter()
        .find(|c| lease.nonce() == nonce_of(c))
        .map(str::to_owned)
}

fn fair_client(store: &MemoryStore, trace: &Trace, resource: &Resource, crash: Option<&Crash>) {
    let options = Options::default().fair(true).waiter_lease(WAITER_LEASE);
    let locks = ExpireLock::with_options(store.clone(), options);
    let nonce = nonce_of(&actor());
    let crashed = || crash.is_some_and(|c| c.happened(trace));
    for _ in 0..2 {
        if crashed() {
            return;
        }
        let outcome = block_on(locks.fair_attempt(NAME, LEASE, &nonce, true)).expect("attempt");
        let FairAttempt::Acquired(lease) = outcome else {
            trace.note("fair_attempt -> busy, queued");
            continue;
        };
        trace.note(format!("fair_attempt -> acquired {:?}", lease.value()));
        trace.enter(lease.value());
        resource.write(trace, lease.fence());
        trace.exit();
        if crashed() {
            return;
        }
        let unlock = block_on(locks.expire_unlock(NAME, &lease)).expect("release");
        trace.note(format!("release -> {unlock:?}"));
        return;
    }
    if crashed() {
        return;
    }
    let left = block_on(locks.fair_leave(NAME, &nonce)).expect("leave");
    trace.note(format!("leave -> {left:?}"));
}

/// Steps by one client that removed or replaced a lease of another client's nonce, still live.
fn foreign_by_nonce(events: &[Event]) -> Vec<String> {
    let live = not_expired(LOCK_KEY);
    let mut found = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let Event::Step {
            actor,
            key,
            before: Some(before),
            after,
        } = event
        else {
            continue;
        };
        if key != LOCK_KEY
            || actor == harness::EXPIRER
            || after.as_ref().map(|a| &a.value) == Some(&before.value)
            || !live(&events[..i], &before.value)
        {
            continue;
        }
        if let Some(owner) = owner(&before.value)
            && owner != *actor
        {
            found.push(format!(
                "{actor} removed {owner}'s live lease {:?}",
                before.value
            ));
        }
    }
    found
}

/// Direct handoffs seen: a client's step replaced its own lease by another client's.
fn handoffs(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(e, Event::Step { actor, key, before: Some(b), after: Some(a) }
                if key == LOCK_KEY
                    && owner(&b.value).as_deref() == Some(actor.as_str())
                    && owner(&a.value).is_some_and(|o| o != *actor))
        })
        .count()
}

#[test]
fn loom_fair_queue_holds() {
    let model = "fair-expire-lock";
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let clock = VirtualClock::default();
        let store = harness::store_on(&clock);
        let trace = Trace::attach(&store, &[LOCK_KEY]);
        let resource = Resource::new();
        let crash = Crash::new();
        let c1 = {
            let (store, trace, resource, crash) = (
                store.clone(),
                trace.clone(),
                resource.clone(),
                crash.clone(),
            );
            spawn("c1", move || {
                fair_client(&store, &trace, &resource, Some(&crash))
            })
        };
        let mut threads = vec![c1];
        for name in CLIENTS {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            threads.push(spawn(name, move || {
                fair_client(&store, &trace, &resource, None)
            }));
        }
        let by = WAITER_LEASE + Duration::from_millis(1);
        threads.push(spawn_clock_expirer(&store, &trace, &clock, by, 1));
        crash.trigger();
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        filed.record("foreign deletion", &foreign_by_nonce(&events), &trace);
        let live = not_expired(LOCK_KEY);
        filed.record("overlap", &lines(&overlaps(&events, live)), &trace);
        filed.record(
            "fence order",
            &harness::fence_order(&events, LOCK_KEY),
            &trace,
        );
        let persistent: Vec<String> = store.atomically(|db| {
            std::iter::once(LOCK_KEY)
                .chain(QUEUE_KEYS)
                .filter(|k| db.pttl(k) == -1)
                .map(|k| format!("everyone is done and {k} has no TTL"))
                .collect()
        });
        filed.record("stuck", &persistent, &trace);
        let c1_crashed = trace.noted(|actor, note| actor == "c1" && note == "crashes");
        let orphaned = final_state(&events, LOCK_KEY)
            .and_then(|s| owner(&s.value))
            .filter(|o| !(o == "c1" && c1_crashed))
            .map(|o| format!("everyone is done and the lock is still {o}'s"));
        filed.record("orphaned grant", orphaned.as_slice(), &trace);

        let granted_then_confirmed = handoffs(&events) >= 1
            && trace.noted(|_, note| note.starts_with("fair_attempt -> acquired"));
        filed.reached(HANDOFF, granted_then_confirmed);
        filed.reached(
            DEAD_GRANT,
            c1_crashed
                && harness::expired(&events, LOCK_KEY)
                    .iter()
                    .any(|v| owner(v).as_deref() == Some("c1")),
        );
        filed.reached(
            LEFT_AFTER_GRANT,
            trace.noted(|_, note| note == "leave -> Released"),
        );
    });
    findings.assert_none(model);
    for scenario in [HANDOFF, DEAD_GRANT, LEFT_AFTER_GRANT] {
        findings.assert_reached(model, scenario);
    }
}

const HANDOFF: &str = "a release granted the lock to a waiter, which confirmed it";
const DEAD_GRANT: &str = "a grant to a crashed waiter lapsed with its waiter lease";
const LEFT_AFTER_GRANT: &str = "a waiter left after a release had granted it the lock";
