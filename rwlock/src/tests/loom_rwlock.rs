//! [`TwoStepRwLock`] against [`RwLock`], over every interleaving of two readers (one may crash),
//! a writer and the expirer.
//!
//! Built from the core's loom harness (`tairlock::loom_models::harness`): the embedded store
//! behind loom's mutex, one command or script per critical section, frozen time, an expirer
//! that lets time run to the next expiry among the lock's lease keys (a key without a TTL never
//! expires), clients as named loom threads driving single attempts with `block_on`, and the
//! main thread crashing `r1` at a point loom chooses and checking the trace at the end.
//!
//! | kind | violated when |
//! |---|---|
//! | `reader and writer together` | a reader and a writer (or two writers) are inside at once while the one already inside still has a live lease (a two-step reader has no lease: it is live until it leaves) |
//! | `stuck` | once everyone is done (crashed or not), the lock's state keeps writers out forever: a key without a TTL that is not empty (the two-step reader count ≠ 0, or any of the scripted lock's keys) |
//! | `foreign removal` | a client removes a writer lease, an intent or a reader it did not write |
//!
//! The two-step recipe must show `reader and writer together` (flaws I and II) and `stuck`
//! (flaw III: a reader crashed between `INCR` and `DECR`); the scripted lock nothing.

use std::sync::Arc;
use std::time::Duration;

use loom::future::block_on;
use tairlock::MemoryStore;
use tairlock::clock::VirtualClock;
use tairlock::loom_models::harness::{
    self, Crash, Event, Findings, LEASE, Overlap, Resource, Trace, actor, conflicting_overlaps,
    explore, final_state, first_note, lines, spawn, spawn_expirer,
};

use crate::{Blocker, ReadAttempt, RwLock, TwoStepRwLock, WriteAttempt};

const NAME: &str = "orders";
const TWO_STEP_W: &str = "tairlock:{orders}:w";
const TWO_STEP_RC: &str = "tairlock:{orders}:rc";
const W: &str = "tairlock:{orders}:w";
const R: &str = "tairlock:{orders}:r";
const WI: &str = "tairlock:{orders}:wi";
/// A waiting writer's intent lease: shorter than every lease, so it expires first.
const INTENT: Duration = Duration::from_secs(1);

/// A reader or the writer: one attempt, then (if in) the critical section and the release.
type Client = fn(&MemoryStore, &Trace, &Resource, Option<&Crash>);

fn crashed(crash: Option<&Crash>, trace: &Trace) -> bool {
    crash.is_some_and(|c| c.happened(trace))
}

/// An actor's nonce: its name in hex, so the trace can tell whose reader or intent it is.
pub(super) fn nonce() -> String {
    actor().bytes().map(|b| format!("{b:02x}")).collect()
}

/// The actor whose [`nonce`] this is.
pub(super) fn actor_of(nonce: &str) -> String {
    (0..nonce.len() / 2)
        .filter_map(|i| u8::from_str_radix(&nonce[2 * i..2 * i + 2], 16).ok())
        .map(char::from)
        .collect()
}

fn two_step(store: &MemoryStore) -> TwoStepRwLock<MemoryStore> {
    // Every client's clock reads the same frozen time: no skew (flaw IV needs none here).
    TwoStepRwLock::new(store.clone(), Arc::new(VirtualClock::default()))
}

/// The two-step reader, verbatim: `expireUnlock(w, now)`, `INCR rc`, read, `DECR rc`.
fn two_step_reader(store: &MemoryStore, trace: &Trace, resource: &Resource, crash: Option<&Crash>) {
    let locks = two_step(store);
    if crashed(crash, trace) {
        return;
    }
    let no_writer = block_on(locks.probe_writer(NAME)).expect("probe");
    trace.note(format!("expireUnlock(w, now) -> {no_writer}"));
    if !no_writer || crashed(crash, trace) {
        return;
    }
    let count = block_on(locks.enter_read(NAME)).expect("INCR");
    trace.note(format!("INCR rc -> {count}"));
    trace.enter(format!("read:{}", actor()));
    resource.read(trace);
    trace.exit();
    if crashed(crash, trace) {
        return;
    }
    let count = block_on(locks.read_unlock(NAME)).expect("DECR");
    trace.note(format!("DECR rc -> {count}"));
}

/// The two-step writer, verbatim: `GET rc == 0`, `expireLock(w, ttl)`, write, `expireUnlock(w, E)`.
fn two_step_writer(store: &MemoryStore, trace: &Trace, resource: &Resource, crash: Option<&Crash>) {
    let locks = two_step(store);
    if crashed(crash, trace) {
        return;
    }
    let readers = block_on(locks.reader_count(NAME)).expect("GET rc");
    trace.note(format!("GET rc -> {readers}"));
    if readers != 0 || crashed(crash, trace) {
        return;
    }
    let Some(write) = block_on(locks.expire_lock(NAME, LEASE)).expect("expireLock") else {
        trace.note("expireLock -> held");
        return;
    };
    trace.note(format!("expireLock -> {}", write.expiry_ms()));
    trace.enter(format!("write:{}", write.expiry_ms()));
    resource.write(trace, 0);
    trace.exit();
    if crashed(crash, trace) {
        return;
    }
    let released = block_on(locks.write_unlock(NAME, &write)).expect("expireUnlock");
    trace.note(format!("expireUnlock(w, E) -> {released}"));
}

/// The scripted reader: `read_acquire`, read, `read_release`; one script each.
pub(super) fn reader(
    store: &MemoryStore,
    trace: &Trace,
    resource: &Resource,
    crash: Option<&Crash>,
) {
    let locks = RwLock::new(store.clone());
    let nonce = nonce();
    if crashed(crash, trace) {
        return;
    }
    match block_on(locks.read_acquire(NAME, &nonce, LEASE)).expect("read_acquire") {
        ReadAttempt::Acquired { readers, .. } => {
            trace.note(format!("read_acquire -> in, {readers} reader(s)"));
        }
        ReadAttempt::Blocked { by, .. } => {
            trace.note(format!("read_acquire -> blocked by {by:?}"));
            return;
        }
    }
    trace.enter(format!("read:{nonce}"));
    resource.read(trace);
    trace.exit();
    if crashed(crash, trace) {
        return;
    }
    let released = block_on(locks.read_release(NAME, &nonce)).expect("read_release");
    trace.note(format!("read_release -> {released}"));
}

/// The scripted writer: `write_acquire` announcing intent; if readers kept it out, one more
/// attempt, then `write_abandon`; if in, write with the fence and `write_release`.
fn writer(store: &MemoryStore, trace: &Trace, resource: &Resource, crash: Option<&Crash>) {
    let locks = RwLock::new(store.clone());
    let nonce = nonce();
    let mut attempts = 0;
    let lease = loop {
        if crashed(crash, trace) {
            return;
        }
        attempts += 1;
        match block_on(locks.write_acquire(NAME, &nonce, LEASE, Some(INTENT)))
            .expect("write_acquire")
        {
            WriteAttempt::Acquired(lease) => {
                trace.note(format!("write_acquire -> {:?}", lease.lease().value()));
                break lease;
            }
            WriteAttempt::Blocked { by, .. } => {
                trace.note(format!("write_acquire -> blocked by {by:?}"));
                if attempts == 2 || !matches!(by, Blocker::Readers(_)) {
                    let gone = block_on(locks.write_abandon(NAME, &nonce)).expect("abandon");
                    trace.note(format!("write_abandon -> {gone} key(s)"));
                    return;
                }
            }
        }
    };
    trace.enter(format!("write:{}", lease.lease().value()));
    resource.write(trace, lease.fence());
    trace.exit();
    if crashed(crash, trace) {
        return;
    }
    let unlock = block_on(locks.write_release(NAME, lease.lease())).expect("write_release");
    trace.note(format!("write_release -> {unlock:?}"));
}

/// A reader and a writer conflict, and two writers; two readers do not.
pub(super) fn conflict(a: &str, b: &str) -> bool {
    a.starts_with("write:") || b.starts_with("write:")
}

/// Whether a holder is still live at this point: a writer until the expirer removed its lease
/// from the writer key; a scripted reader until the expirer removed the readers key with it in
/// it; a two-step reader always (it has no lease).
pub(super) fn live(w: &'static str, r: &'static str) -> impl Fn(&[Event], &str) -> bool {
    move |events, held| {
        let (key, needle, whole) = match held.split_once(':') {
            Some(("write", v)) => (w, v, true),
            Some(("read", nonce)) => (r, nonce, false),
            _ => return true,
        };
        !events.iter().any(|e| {
            matches!(e, Event::Step { actor, key: k, before: Some(b), after: None }
                if actor == harness::EXPIRER && k == key
                    && (if whole { b.value == needle } else { b.value.contains(needle) }))
        })
    }
}

/// Removals of another client's writer lease, intent, or reader.
fn foreign_removals(events: &[Event]) -> Vec<String> {
    let mut found = harness::foreign_removals(events, W, str::to_owned);
    found.extend(harness::foreign_removals(events, WI, str::to_owned));
    found.extend(reader_removals(events, R));
    found
}

/// Steps by a client (not the expirer) that removed another client's reader from the readers
/// zset `r`.
pub(super) fn reader_removals(events: &[Event], r: &str) -> Vec<String> {
    let mut found = Vec::new();
    for event in events {
        let Event::Step {
            actor,
            key,
            before: Some(before),
            after,
        } = event
        else {
            continue;
        };
        if key != r || actor == harness::EXPIRER {
            continue;
        }
        let members = |v: &str| -> Vec<String> {
            v.trim_start_matches("zset[")
                .trim_end_matches(']')
                .split(", ")
                .filter_map(|m| m.split_once('@').map(|(n, _)| n.to_owned()))
                .collect()
        };
        let kept = after
            .as_ref()
            .map(|a| members(&a.value))
            .unwrap_or_default();
        for gone in members(&before.value).iter().filter(|m| !kept.contains(m)) {
            if actor_of(gone) != *actor {
                found.push(format!("{actor} removed reader {}", actor_of(gone)));
            }
        }
    }
    found
}

struct Model {
    name: &'static str,
    reader: Client,
    writer: Client,
    /// Keys the expirer may expire (the lease keys; never a fence).
    expiring: &'static [&'static str],
    expirer_steps: usize,
    w: &'static str,
    r: &'static str,
    /// Whether the final state keeps writers out forever.
    stuck: fn(&[Event]) -> Option<String>,
    /// Which flaw a reader-and-writer overlap is, when the model tells them apart.
    order: Option<fn(&[Event], &Overlap) -> &'static str>,
}

fn run(model: Model) -> Arc<Findings> {
    let findings = Findings::new();
    let filed = findings.clone();
    let name = model.name;
    explore(name, 2, &findings, move || {
        let store = harness::store();
        let trace = Trace::attach(&store, model.expiring);
        let resource = Resource::new();
        let crash = Crash::new();
        let client = |name: &str, f: Client, crash: Option<Crash>| {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            spawn(name, move || f(&store, &trace, &resource, crash.as_ref()))
        };
        let threads = [
            client("r1", model.reader, Some(crash.clone())),
            client("r2", model.reader, None),
            client("w", model.writer, None),
            spawn_expirer(&store, model.expiring, model.expirer_steps),
        ];
        crash.trigger();
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        let together = conflicting_overlaps(&events, conflict, live(model.w, model.r));
        filed.record("reader and writer together", &lines(&together), &trace);
        if let Some(order) = model.order {
            for overlap in &together {
                filed.record(order(&events, overlap), &[overlap.to_string()], &trace);
            }
        }
        filed.record("stuck", (model.stuck)(&events).as_slice(), &trace);
        filed.record("foreign removal", &foreign_removals(&events), &trace);

        filed.reached(
            READERS_KEPT_WRITER_OUT,
            trace.noted(|a, n| a == "w" && (n.contains("Readers") || n == "GET rc -> 1")),
        );
        filed.reached(
            WRITER_KEPT_READER_OUT,
            trace
                .noted(|a, n| a.starts_with('r') && (n.contains("Writer") || n.ends_with("false"))),
        );
        filed.reached(
            READER_CRASHED_INSIDE,
            trace.noted(|a, n| a == "r1" && n == "crashes")
                && trace.noted(|a, n| a == "r1" && n.starts_with("enters")),
        );
    });
    findings
}

const FLAW_I: &str = "reader and writer together, reader's probe first (I)";
const FLAW_II: &str = "reader and writer together, writer's GET rc first (II)";

/// Flaw I or II: whose check came first, the reader's probe or the writer's `GET rc`.
fn two_step_flaw(events: &[Event], overlap: &Overlap) -> &'static str {
    let (reader, writer) = if overlap.value.starts_with("read:") {
        (&overlap.entered, &overlap.inside)
    } else {
        (&overlap.inside, &overlap.entered)
    };
    let probe = first_note(events, reader, "expireUnlock(w, now)");
    let count = first_note(events, writer, "GET rc");
    if probe < count { FLAW_I } else { FLAW_II }
}

const READERS_KEPT_WRITER_OUT: &str = "readers kept the writer out";
const WRITER_KEPT_READER_OUT: &str = "the writer kept a reader out";
const READER_CRASHED_INSIDE: &str = "r1 crashed inside its read";

/// The two-step recipe: loom must keep finding flaws I/II and III.
///
/// - `reader and writer together` (I): `r1`'s probe finds no writer; `w` reads `rc = 0` and
///   takes `w`; `r1` `INCR`s and reads while `w` writes (or II: `w`'s `GET rc` first, then the
///   reader's probe and `INCR`, then `w`'s `expireLock`).
/// - `stuck` (III): `r1` `INCR`s, then crashes: `rc` stays 1 with no TTL, and every writer's
///   `GET rc == 0` fails forever.
#[test]
fn loom_two_step_rwlock_is_caught() {
    let model = "two-step-rwlock";
    let findings = run(Model {
        name: model,
        reader: two_step_reader,
        writer: two_step_writer,
        expiring: &[TWO_STEP_W, TWO_STEP_RC],
        expirer_steps: 1,
        w: TWO_STEP_W,
        r: TWO_STEP_RC,
        order: Some(two_step_flaw),
        stuck: |events| {
            final_state(events, TWO_STEP_RC)
                .filter(|s| !s.ttl && s.value != "0")
                .map(|s| format!("everyone is done and rc holds {s}: writers wait forever"))
        },
    });
    findings.assert_found(model, FLAW_I);
    findings.assert_found(model, FLAW_II);
    findings.assert_found(model, "stuck");
}

/// The scripted RwLock: one script per step, per-reader leases, writer intent; no
/// interleaving of pauses, a crash and expiry breaks any invariant.
#[test]
fn loom_rwlock_holds() {
    let model = "rwlock";
    let findings = run(Model {
        name: model,
        reader,
        writer,
        expiring: &[W, R, WI],
        expirer_steps: 2,
        w: W,
        r: R,
        order: None,
        stuck: |events| {
            [W, R, WI]
                .iter()
                .filter_map(|k| final_state(events, k).map(|s| (k, s)))
                .find(|(_, s)| !s.ttl)
                .map(|(k, s)| format!("everyone is done and {k} holds {s} without a TTL"))
        },
    });
    findings.assert_none(model);
    for scenario in [
        READERS_KEPT_WRITER_OUT,
        WRITER_KEPT_READER_OUT,
        READER_CRASHED_INSIDE,
    ] {
        findings.assert_reached(model, scenario);
    }
}
