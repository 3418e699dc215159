//! `naive-setnx-expire` against the expire lock, over every interleaving of three clients, a
//! crash and the expirer.
//!
//! Threads: `c1` (may crash before any command), `c2`, `c3`, the expirer (expires the lock key
//! once, iff it has a TTL: the server-side lease passing), and the main thread, which triggers
//! `c1`'s crash at a point loom chooses and checks the trace once everyone is done. Each client makes one attempt; if it gets the
//! lock it writes the fenced resource inside its critical section and then releases.
//!
//! Invariants, checked on every execution:
//!
//! | kind | violated when |
//! |---|---|
//! | `foreign deletion` | a client's step deletes or replaces a lock value another client wrote (expired values are already gone: the expirer removed them) |
//! | `overlap` | a client enters while another is inside whose lease has not passed |
//! | `stuck` | once everyone is done (crashed or not), the lock key exists without a TTL: nobody can ever take it again |
//! | `fence order` | fencing tokens do not strictly increase in grant order (expire lock only; the naive recipe has none) |
//!
//! `naive-setnx-expire` must show `foreign deletion`, `overlap` and `stuck`; the expire lock
//! nothing (and must reach a handover after expiry, a stale release, and a crashed holder).

use std::sync::Arc;

use loom::future::block_on;

use super::harness::{
    self, Crash, Event, Findings, LEASE, Resource, Trace, actor, explore, final_state,
    foreign_removals, lines, not_expired, overlaps, spawn, spawn_expirer,
};
use crate::expire_lock::{Acquire, ExpireLock, Renew};
use crate::lease::Lease;
use crate::store::{MemoryStore, Store};

/// The naive recipe's key.
const NAIVE_KEY: &str = "lock.orders";
/// The expire lock's name; its key is `tairlock:{orders}`.
const NAME: &str = "orders";
const EXPIRE_LOCK_KEY: &str = "tairlock:{orders}";
/// The clients besides `c1` (the crash-prone one).
const CLIENTS: [&str; 2] = ["c2", "c3"];

/// One client's single attempt: acquire, write the resource, release. `crash`: this client may
/// crash before any of its commands.
type Client = fn(&MemoryStore, &Trace, &Resource, Option<&Crash>);

fn crashed(crash: Option<&Crash>, trace: &Trace) -> bool {
    crash.is_some_and(|c| c.happened(trace))
}

/// `naive-setnx-expire`, verbatim as the race runs it (`cli/src/race/algorithms/naive.rs`):
/// `SETNX key token`, then `EXPIRE`; release `GET key == token ?` then `DEL key`.
fn naive(store: &MemoryStore, trace: &Trace, resource: &Resource, crash: Option<&Crash>) {
    let token = format!("{}:token", actor());
    if crashed(crash, trace) {
        return;
    }
    let set = block_on(store.set_nx(NAIVE_KEY, token.as_bytes())).expect("SETNX");
    trace.note(format!("SETNX {NAIVE_KEY} {token} -> {set}"));
    if !set {
        return;
    }
    if crashed(crash, trace) {
        return;
    }
    let expiring = block_on(store.pexpire(NAIVE_KEY, LEASE)).expect("PEXPIRE");
    trace.note(format!("PEXPIRE -> {expiring}"));
    trace.enter(&token);
    resource.write(trace, 0);
    trace.exit();
    if crashed(crash, trace) {
        return;
    }
    let current = block_on(store.get(NAIVE_KEY)).expect("GET");
    let mine = current.as_deref() == Some(token.as_bytes());
    trace.note(format!(
        "GET -> {:?}: {}",
        current.map(|v| String::from_utf8_lossy(&v).into_owned()),
        if mine { "mine" } else { "not mine" }
    ));
    if mine {
        if crashed(crash, trace) {
            return;
        }
        let deleted = block_on(store.del(NAIVE_KEY)).expect("DEL");
        trace.note(format!("DEL -> {deleted}"));
    }
}

/// The expire lock: `expire_lock`, write with the lease's fence, `renew` (the watchdog's step),
/// `expire_unlock` with the latest lease. Each one script.
fn expire_lock(store: &MemoryStore, trace: &Trace, resource: &Resource, crash: Option<&Crash>) {
    let locks = ExpireLock::new(store.clone());
    if crashed(crash, trace) {
        return;
    }
    let lease = match block_on(locks.expire_lock(NAME, LEASE)).expect("expire_lock") {
        Acquire::Acquired(lease) => lease,
        Acquire::Held { holder, .. } => {
            trace.note(format!("expire_lock -> held by {:?}", holder.value()));
            return;
        }
    };
    trace.note(format!("expire_lock -> acquired {:?}", lease.value()));
    trace.enter(lease.value());
    resource.write(trace, lease.fence());
    trace.exit();
    if crashed(crash, trace) {
        return;
    }
    let lease = match block_on(locks.renew(NAME, &lease, LEASE)).expect("renew") {
        Renew::Renewed(renewed) => {
            trace.note(format!("renew -> {:?}", renewed.value()));
            renewed
        }
        other => {
            trace.note(format!("renew -> {other:?}"));
            lease
        }
    };
    if crashed(crash, trace) {
        return;
    }
    let unlock = block_on(locks.expire_unlock(NAME, &lease)).expect("expire_unlock");
    trace.note(format!("expire_unlock -> {unlock:?}"));
}

/// Fencing tokens of successive grants (a client's step that makes the key hold a value it did
/// not hold before, written by another party): each must exceed the one before.
fn fence_order(events: &[Event], key: &str) -> Vec<String> {
    let writers = harness::writers(events);
    let mut last: Option<u64> = None;
    let mut found = Vec::new();
    for event in events {
        let Event::Step {
            actor,
            key: k,
            before,
            after: Some(after),
        } = event
        else {
            continue;
        };
        let renewal = before
            .as_ref()
            .is_some_and(|b| writers.get(&(k.clone(), b.value.clone())) == Some(actor));
        if k != key || renewal {
            continue;
        }
        let fence = Lease::parse(&after.value).map_or(0, |l| l.fence());
        if last.is_some_and(|l| fence <= l) {
            found.push(format!(
                "{actor} was granted fence {fence} after fence {}",
                last.unwrap_or_default()
            ));
        }
        last = Some(fence);
    }
    found
}

fn run(model: &str, key: &'static str, client: Client, fenced: bool) -> Arc<Findings> {
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let store = harness::store();
        let trace = Trace::attach(&store, &[key]);
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
                client(&store, &trace, &resource, Some(&crash))
            })
        };
        let mut threads = vec![c1];
        for name in CLIENTS {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            threads.push(spawn(name, move || client(&store, &trace, &resource, None)));
        }
        threads.push(spawn_expirer(&store, &[key], 1));
        crash.trigger();
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        filed.record(
            "foreign deletion",
            &foreign_removals(&events, key, str::to_owned),
            &trace,
        );
        filed.record(
            "overlap",
            &lines(&overlaps(&events, not_expired(key))),
            &trace,
        );
        let stuck = final_state(&events, key)
            .filter(|s| !s.ttl)
            .map(|s| format!("everyone is done and {key} holds {s}: nobody can take it again"));
        filed.record("stuck", stuck.as_slice(), &trace);
        if fenced {
            filed.record("fence order", &fence_order(&events, key), &trace);
        }

        filed.reached(
            HANDOVER,
            harness::expired(&events, key).len() == 1 && grants(&events) >= 2,
        );
        filed.reached(
            STALE_RELEASE,
            trace.noted(|_, note| note.ends_with("HeldByOther") || note.ends_with("not mine")),
        );
        filed.reached(
            CRASHED_HOLDER,
            trace.noted(|actor, note| actor == "c1" && note == "crashes")
                && trace.noted(|actor, note| actor == "c1" && note.contains("acquired")),
        );
    });
    findings
}

/// Scenarios the expire lock's model must reach, so its zero violations mean something.
const HANDOVER: &str = "a lease passed and another client took the lock";
const STALE_RELEASE: &str = "a holder whose lease had passed released or renewed after a new grant";
const CRASHED_HOLDER: &str = "c1 crashed holding the lock";

/// Grants made by clients in the trace.
fn grants(events: &[Event]) -> usize {
    events
        .iter()
        .filter(|e| {
            matches!(e, Event::Step { actor, before: None, after: Some(_), .. }
                if actor != harness::EXPIRER)
        })
        .count()
}

/// The verbatim recipe: loom must keep finding its two flaws.
///
/// - `foreign deletion` (F4): `c1` acquires, its `GET` sees its own token; paused before `DEL`,
///   its lease expires (expirer), `c3` takes the lock with `SETNX` + `EXPIRE`; `c1` resumes and
///   its `DEL` deletes `c3`'s lock.
/// - `overlap`: right after that deletion `c2`'s `SETNX` succeeds while `c3` is still inside
///   with a live lease: two holders.
/// - `stuck`: `c1`'s `SETNX` lands, then it crashes before `EXPIRE`: the key has no TTL, the
///   expirer cannot expire it, and nobody can ever take the lock again.
#[test]
fn loom_naive_setnx_expire_is_caught() {
    let model = "naive-setnx-expire";
    let findings = run(model, NAIVE_KEY, naive, false);
    findings.assert_found(model, "foreign deletion");
    findings.assert_found(model, "overlap");
    findings.assert_found(model, "stuck");
}

/// The expire lock: acquire, renew and release are one script each, so no interleaving of
/// pauses, crashes and expiry breaks any invariant.
#[test]
fn loom_expire_lock_holds() {
    let model = "expire-lock";
    let findings = run(model, EXPIRE_LOCK_KEY, expire_lock, true);
    findings.assert_none(model);
    for scenario in [HANDOVER, STALE_RELEASE, CRASHED_HOLDER] {
        findings.assert_reached(model, scenario);
    }
}
