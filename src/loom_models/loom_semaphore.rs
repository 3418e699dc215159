//! The semaphore's scripts ([`crate::semaphore`]) over every interleaving of three clients, a
//! crash, a lost reply and the passing of the holders' leases.
//!
//! Threads: `c1` (takes 1 permit, may crash before any command), `c2` (takes 1 permit; the
//! reply to its first attempt is lost, so it repeats the attempt under the same nonce), `c3`
//! (takes 2 permits, the whole limit), the clock expirer (once, at a point loom chooses, moves
//! the server's clock past the holders' lease: every holder granted before then lapses), and
//! the main thread. Each client makes up to two attempts under one nonce; with its permits it
//! writes the fenced resource and releases, without them it undoes (releases by nonce) as the
//! engine does when giving up.
//!
//! Invariants, checked on every execution:
//!
//! | kind | violated when |
//! |---|---|
//! | `over limit` | a client enters while the permits of the clients inside whose lease has not passed, plus its own, exceed the limit |
//! | `server over limit` | after a step, the live holders in the zset hold more than the limit |
//! | `fence order` | a new fencing token is not larger than the last one |
//! | `foreign removal` | a client's step removes another client's live holder from the zset |
//! | `stuck` | once everyone is done, a key of the semaphore (the stored limit included) exists without a TTL |
//! | `leaked permit` | once everyone is done, a client that did not crash still holds a live permit |
//! | `leaked place` | once everyone is done, a client that did not crash still has a place in the fair queue |
//!
//! The model must reach a refusal of a full semaphore, a repeat that found the permit of its
//! lost reply, and a crashed holder's permit lapsing and being taken by another client; the
//! fair variant (`loom_fair_semaphore_holds`: every client in [fair
//! mode](crate::semaphore::SemaphoreOptions::fair), a refused attempt queues, giving up leaves
//! the queue) also a waiter that queued and was admitted later.

use std::collections::BTreeMap;
use std::time::Duration;

use loom::future::block_on;

use super::harness::{
    self, Crash, Event, Findings, Mark, Resource, Trace, actor, explore, spawn,
    spawn_clock_expirer, time_at,
};
use crate::clock::VirtualClock;
use crate::semaphore::{PermitAttempt, Semaphore, SemaphoreOptions};
use crate::store::MemoryStore;

const NAME: &str = "pool";
const HOLDERS: &str = "tairlock:{pool}:sem";
const KEYS: [&str; 6] = [
    HOLDERS,
    "tairlock:{pool}:sem:h",
    "tairlock:{pool}:sem:fence",
    QUEUE,
    "tairlock:{pool}:sem:qw",
    "tairlock:{pool}:sem:n",
];
const QUEUE: &str = "tairlock:{pool}:sem:q";
/// The fair mode's waiter lease: longer than the holders' lease, so that the one clock step
/// lets holders lapse while places stay.
const WAITER_LEASE: Duration = Duration::from_secs(5);
const LIMIT: u32 = 2;
/// The holders' lease: it passes only when the expirer moves the clock.
const SEM_LEASE: Duration = Duration::from_secs(1);
const START: Duration = Duration::from_secs(1_700_000_000);

/// A client's nonce: its name, twice.
fn nonce_of(client: &str) -> String {
    format!("{client}{client}")
}

/// The permits each client takes.
fn permits_of(client: &str) -> u32 {
    if client == "c3" { 2 } else { 1 }
}

fn client(
    store: &MemoryStore,
    trace: &Trace,
    resource: &Resource,
    crash: Option<&Crash>,
    fair: bool,
) {
    let options = SemaphoreOptions::default()
        .fair(fair)
        .waiter_lease(WAITER_LEASE);
    let sem = Semaphore::with_options(store.clone(), LIMIT, options);
    let me = actor();
    let nonce = nonce_of(&me);
    let permits = permits_of(&me);
    let crashed = || crash.is_some_and(|c| c.happened(trace));
    let mut first_fence = None;
    for attempt in 0..2 {
        if crashed() {
            return;
        }
        // A waiting call's attempt: in fair mode a refusal queues.
        let outcome =
            block_on(sem.attempt_queued(NAME, permits, SEM_LEASE, &nonce)).expect("attempt");
        if me == "c2" && attempt == 0 {
            // The reply is lost: c2 does not know whether it holds a permit, and repeats.
            if let PermitAttempt::Acquired(p) = &outcome {
                first_fence = Some(p.fence);
            }
            trace.note("attempt -> reply lost");
            continue;
        }
        let PermitAttempt::Acquired(permit) = outcome else {
            trace.note("attempt -> busy");
            continue;
        };
        if first_fence == Some(permit.fence) {
            trace.note("repeat -> found its permit");
        }
        trace.note(format!("attempt -> acquired fence {}", permit.fence));
        trace.enter(format!("{permits}|{}", permit.expiry_ms));
        resource.write(trace, permit.fence);
        trace.exit();
        if crashed() {
            return;
        }
        let released = block_on(sem.release(NAME, &permit)).expect("release");
        trace.note(format!("release -> {released}"));
        return;
    }
    if crashed() {
        return;
    }
    let undone = block_on(sem.abandon(NAME, &nonce)).expect("undo");
    trace.note(format!("undo -> {undone}"));
}

/// The clients inside at each entry whose lease had not passed, with the entering one: their
/// permits may not exceed the limit.
fn over_limit(events: &[Event]) -> Vec<String> {
    let mut inside: BTreeMap<String, (u32, u64)> = BTreeMap::new();
    let mut found = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let Event::Note {
            actor,
            mark: Some(mark),
            ..
        } = event
        else {
            continue;
        };
        match mark {
            Mark::Enter(value) => {
                let (permits, expiry) = value.split_once('|').expect("permits|expiry");
                let (permits, expiry): (u32, u64) =
                    (permits.parse().unwrap(), expiry.parse().unwrap());
                let now = time_at(&events[..i], START).as_millis() as u64;
                let live: u32 = inside
                    .iter()
                    .filter(|(who, (_, exp))| *who != actor && *exp >= now)
                    .map(|(_, (p, _))| p)
                    .sum();
                if live + permits > LIMIT {
                    found.push(format!(
                        "{actor} entered with {permits} while {live} live permits were held \
                         (limit {LIMIT})"
                    ));
                }
                inside.insert(actor.clone(), (permits, expiry));
            }
            Mark::Exit => {
                inside.remove(actor);
            }
        }
    }
    found
}

/// The live members of a traced zset value (`zset[m@score, ...]`) at `now` ms, by client.
fn live_members(value: &str, now: u64) -> Vec<String> {
    let Some(inner) = value
        .strip_prefix("zset[")
        .and_then(|v| v.strip_suffix(']'))
    else {
        return Vec::new();
    };
    inner
        .split(", ")
        .filter_map(|m| m.rsplit_once('@'))
        .filter(|(_, score)| score.parse::<f64>().is_ok_and(|s| s >= now as f64))
        .map(|(member, _)| member[..2].to_owned())
        .collect()
}

/// A step by one client that removed another client's live holder from the zset (reaping
/// removes only holders whose lease has passed).
fn foreign_removals(events: &[Event]) -> Vec<String> {
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
        if key != HOLDERS {
            continue;
        }
        let now = time_at(&events[..i], START).as_millis() as u64;
        let after = after
            .as_ref()
            .map_or_else(Vec::new, |a| live_members(&a.value, now));
        for gone in live_members(&before.value, now) {
            if gone != *actor && !after.contains(&gone) {
                found.push(format!("{actor} removed {gone}'s live holder"));
            }
        }
    }
    found
}

/// After each step, the permits of the zset's live holders.
fn server_over_limit(events: &[Event]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, event) in events.iter().enumerate() {
        let Event::Step {
            key,
            after: Some(after),
            ..
        } = event
        else {
            continue;
        };
        if key != HOLDERS {
            continue;
        }
        let now = time_at(&events[..i], START).as_millis() as u64;
        let held: u32 = live_members(&after.value, now)
            .iter()
            .map(|c| permits_of(c))
            .sum();
        if held > LIMIT {
            found.push(format!("{} holds {held} permits", after.value));
        }
    }
    found
}

/// Each new fencing token is larger than the last.
fn fence_order(events: &[Event]) -> Vec<String> {
    let mut found = Vec::new();
    for event in events {
        if let Event::Step {
            key,
            before: Some(before),
            after: Some(after),
            ..
        } = event
            && key == KEYS[2]
        {
            let (b, a): (u64, u64) = (before.value.parse().unwrap(), after.value.parse().unwrap());
            if a <= b {
                found.push(format!("fence {a} issued after {b}"));
            }
        }
    }
    found
}

#[test]
fn loom_semaphore_holds() {
    model("semaphore", false);
}

#[test]
fn loom_fair_semaphore_holds() {
    model("fair-semaphore", true);
}

fn model(model: &'static str, fair: bool) {
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let clock = VirtualClock::new(START);
        let store = harness::store_on(&clock);
        let trace = Trace::attach(&store, &KEYS);
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
                client(&store, &trace, &resource, Some(&crash), fair)
            })
        };
        let mut threads = vec![c1];
        for name in ["c2", "c3"] {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            threads.push(spawn(name, move || {
                client(&store, &trace, &resource, None, fair)
            }));
        }
        let by = SEM_LEASE + Duration::from_millis(1);
        threads.push(spawn_clock_expirer(&store, &trace, &clock, by, 1));
        crash.trigger();
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        filed.record("over limit", &over_limit(&events), &trace);
        filed.record("server over limit", &server_over_limit(&events), &trace);
        filed.record("fence order", &fence_order(&events), &trace);
        filed.record("foreign removal", &foreign_removals(&events), &trace);
        let (stuck, live): (Vec<String>, Vec<String>) = store.atomically(|db| {
            let stuck = KEYS
                .iter()
                .filter(|k| db.pttl(k) == -1)
                .map(|k| format!("everyone is done and {k} has no TTL"))
                .collect();
            let now = db.now().as_millis() as f64;
            let live = db
                .zrange_by_score(HOLDERS, now, f64::INFINITY)
                .unwrap_or_default()
                .into_iter()
                .map(|(m, _)| String::from_utf8_lossy(&m[..2]).into_owned())
                .collect();
            (stuck, live)
        });
        filed.record("stuck", &stuck, &trace);
        let c1_crashed = trace.noted(|actor, note| actor == "c1" && note == "crashes");
        let leaked: Vec<String> = live
            .iter()
            .filter(|c| !(c.as_str() == "c1" && c1_crashed))
            .map(|c| format!("everyone is done and {c} still holds a live permit"))
            .collect();
        filed.record("leaked permit", &leaked, &trace);
        let places: Vec<String> = store.atomically(|db| {
            db.zrange_by_score(QUEUE, f64::NEG_INFINITY, f64::INFINITY)
                .unwrap_or_default()
                .into_iter()
                .map(|(m, _)| String::from_utf8_lossy(&m[..2]).into_owned())
                .filter(|c| !(c.as_str() == "c1" && c1_crashed))
                .map(|c| format!("everyone is done and {c} still has a place in the queue"))
                .collect()
        });
        filed.record("leaked place", &places, &trace);
        if fair {
            filed.reached(
                QUEUED,
                events.iter().enumerate().any(|(i, e)| {
                    matches!(e, Event::Note { actor, note, .. }
                        if note.starts_with("attempt -> acquired")
                            && harness::first_note(&events[..i], actor, "attempt -> busy").is_some())
                }),
            );
        }

        filed.reached(FULL, trace.noted(|_, note| note == "attempt -> busy"));
        filed.reached(
            REPEAT,
            trace.noted(|actor, note| actor == "c2" && note == "repeat -> found its permit"),
        );
        let c1_held =
            trace.noted(|actor, note| actor == "c1" && note.starts_with("attempt -> acquired"));
        let after_lapse = events.iter().enumerate().any(|(i, e)| {
            matches!(e, Event::Note { actor, note, .. }
                if actor != "c1" && note.starts_with("attempt -> acquired")
                    && time_at(&events[..i], START) > START)
        });
        filed.reached(LAPSE, c1_crashed && c1_held && after_lapse);
    });
    findings.assert_none(model);
    for scenario in [FULL, REPEAT, LAPSE] {
        findings.assert_reached(model, scenario);
    }
    if fair {
        findings.assert_reached(model, QUEUED);
    }
}

const FULL: &str = "a full semaphore refused a client";
const REPEAT: &str = "a repeat after a lost reply found its permit";
const LAPSE: &str = "a crashed holder's permit lapsed and another client took permits after";
const QUEUED: &str = "a fair waiter queued, then was admitted";
