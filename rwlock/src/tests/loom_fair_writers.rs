//! The fair writers' queue ([`Options::fair`](crate::Options::fair)) over every interleaving of
//! two fair writers (one may crash), a reader and the passing of the waiter lease.
//!
//! Built from the core's loom harness as `loom_rwlock.rs` is. Threads: `w1` (a fair writer that
//! may crash before any of its commands: before queueing, while queued, or once granted),
//! `w2` (a fair writer), `r` (a reader: one `read_acquire`, then its read and `read_release`),
//! the clock expirer (once, at a point loom chooses, moves the server's clock past the waiter
//! lease: every place in the queue, every grant not yet confirmed and every intent lapse;
//! holders' and readers' leases do not) and the main thread. Each writer makes up to two fair
//! attempts under one nonce, queueing when refused (a grant a release made to it between the two
//! is confirmed by the second); with the lock it writes the fenced resource and releases with
//! `fair_write_release` (handing the lock to the first live queued writer in the same step);
//! without it, it leaves with `fair_write_leave` (giving back a grant it may have received).
//!
//! Invariants, checked on every execution:
//!
//! | kind | violated when |
//! |---|---|
//! | `writer inside with another` | a writer is inside together with another writer or a reader while the one inside first still has a live lease |
//! | `fence order` | the fencing tokens of successive write holders (by nonce) do not strictly increase, or a confirmation changes one |
//! | `grant to a lapsed place` | a release grants the lock to a writer whose place in the queue had lapsed (its waiter lease passed): a dead waiter would then delay the next one by more than its waiter lease |
//! | `foreign removal` | a client removes or replaces another client's live write lease, reader, queue place (unless that place had lapsed, or the same step granted that writer the lock) or intent (while its writer is still the first live queued writer and did not get the lock in that step) |
//! | `stuck` | once everyone is done, a key of the lock exists without a TTL, or a place in the queue ends later than a waiter lease from now |
//! | `orphaned` | once everyone is done, the lock is held or granted, or a place is kept, under the nonce of a writer that did not crash |
//!
//! The model must reach a direct handoff (a release that granted to a queued writer, which
//! confirmed it), a grant to the crashed `w1` that lapsed, a lapsed place dropped from the queue,
//! a reader kept out by a queued writer's intent and a writer kept out by the reader.
//!
//! A third model ([`loom_rwlock_fair_release_respects_a_plain_intent`]) puts a plain writer
//! with writer preference beside two fair writers: a fair release must never grant the lock
//! past the plain writer's live intent ("fair writers respect a plain writer's intent").
//!
//! A second, smaller model ([`loom_rwlock_fair_writers_skip_a_lapsed_head`]) gives its writers
//! different waiter leases, so that a lapsed place can head the queue in front of a live one
//! while the queue's keys live on: here every writer has one waiter lease, and that state takes
//! more preemptions than bound 3 allows. It must reach a release that meets such a head and
//! skips it; a release that grants to it is `grant to a lapsed place`.

use std::collections::BTreeMap;
use std::time::Duration;

use loom::future::block_on;
use tairlock::clock::VirtualClock;
use tairlock::loom_models::harness::{
    self, Crash, Event, Findings, KeyState, LEASE, Resource, Trace, conflicting_overlaps, explore,
    lines, spawn, spawn_clock_expirer, time_at,
};
use tairlock::{Lease, MemoryStore};

use super::loom_rwlock::{actor_of, conflict, live, nonce, reader_removals};
use crate::{Options, ReadAttempt, RwLock, WriteAttempt};

const NAME: &str = "orders";
const W: &str = "tairlock:{orders}:w";
const R: &str = "tairlock:{orders}:r";
const WI: &str = "tairlock:{orders}:wi";
const WQ: &str = "tairlock:{orders}:wq";
const WW: &str = "tairlock:{orders}:ww";
/// Every key of the lock but the fence (whose retention always sets a TTL).
const KEYS: [&str; 5] = [W, R, WI, WQ, WW];
/// The waiter lease; the intent lease is as long, so the one clock step lets places, grants
/// and intents lapse together.
const WAITER_LEASE: Duration = Duration::from_secs(1);
const START: Duration = Duration::from_secs(1_700_000_000);

fn options() -> Options {
    Options::default()
        .fair(true)
        .waiter_lease(WAITER_LEASE)
        .intent_lease(WAITER_LEASE)
}

/// The lapsed-head model's waiter leases: the stalling writer's, and the others' (longer than
/// the clock step, which is longer than the short one).
const SHORT_WAITER_LEASE: Duration = Duration::from_secs(1);
const LONG_WAITER_LEASE: Duration = Duration::from_secs(10);

/// A fair writer: up to two attempts under one nonce, queueing; with the lock, write and
/// release (handing it on); without, leave the queue.
fn fair_writer(store: &MemoryStore, trace: &Trace, resource: &Resource, crash: Option<&Crash>) {
    fair_writer_with(store, trace, resource, crash, WAITER_LEASE, 2, true);
}

/// A fair writer with `waiter_lease` (its intent lease as long): up to `attempts` attempts under
/// one nonce, queueing; with the lock, write and release (handing it on); without, leave the
/// queue if it `leaves`, else stall (a waiter that stopped polling: its place lapses).
fn fair_writer_with(
    store: &MemoryStore,
    trace: &Trace,
    resource: &Resource,
    crash: Option<&Crash>,
    waiter_lease: Duration,
    attempts: usize,
    leaves: bool,
) {
    let options = Options::default()
        .fair(true)
        .waiter_lease(waiter_lease)
        .intent_lease(waiter_lease);
    let locks = RwLock::with_options(store.clone(), options);
    let nonce = nonce();
    let crashed = || crash.is_some_and(|c| c.happened(trace));
    for _ in 0..attempts {
        if crashed() {
            return;
        }
        let attempt =
            block_on(locks.fair_write_acquire(NAME, &nonce, LEASE, Some(waiter_lease), true))
                .expect("fair_write_acquire");
        let lease = match attempt {
            WriteAttempt::Acquired(lease) => lease,
            WriteAttempt::Blocked { by, .. } => {
                trace.note(format!("fair_write_acquire -> blocked by {by:?}, queued"));
                continue;
            }
        };
        trace.note(format!(
            "fair_write_acquire -> acquired {:?}",
            lease.lease().value()
        ));
        trace.enter(format!("write:{}", lease.lease().value()));
        resource.write(trace, lease.fence());
        trace.exit();
        if crashed() {
            return;
        }
        let unlock = block_on(locks.fair_write_release(NAME, lease.lease())).expect("release");
        trace.note(format!("fair_write_release -> {unlock:?}"));
        return;
    }
    if crashed() {
        return;
    }
    if !leaves {
        trace.note("stalls in the queue");
        return;
    }
    let left = block_on(locks.fair_write_leave(NAME, &nonce)).expect("leave");
    trace.note(format!("fair_write_leave -> {left:?}"));
}

/// The reader: two rounds of `read_acquire` and, when in, its read and `read_release` (so that
/// a second round can meet an intent raised meanwhile). One nonce: the trace knows a reader
/// by it.
fn two_reads(store: &MemoryStore, trace: &Trace, resource: &Resource, _: Option<&Crash>) {
    let locks = RwLock::with_options(store.clone(), options());
    let nonce = nonce();
    for _ in 0..2 {
        match block_on(locks.read_acquire(NAME, &nonce, LEASE)).expect("read_acquire") {
            ReadAttempt::Acquired { readers, .. } => {
                trace.note(format!("read_acquire -> in, {readers} reader(s)"));
            }
            ReadAttempt::Blocked { by, .. } => {
                trace.note(format!("read_acquire -> blocked by {by:?}"));
                continue;
            }
        }
        trace.enter(format!("read:{nonce}"));
        resource.read(trace);
        trace.exit();
        let released = block_on(locks.read_release(NAME, &nonce)).expect("read_release");
        trace.note(format!("read_release -> {released}"));
    }
}

/// The writer whose nonce a lease value carries.
fn lease_owner(value: &str) -> Option<String> {
    Lease::parse(value).map(|lease| actor_of(lease.nonce()))
}

/// The places of a traced `:ww` value (`hash{nonce=<ends>:<lease>:<channel>, ...}`): the
/// waiter's actor → when its place ends, in server ms.
fn places(state: Option<&KeyState>) -> BTreeMap<String, u64> {
    let Some(state) = state else {
        return BTreeMap::new();
    };
    let fields = state
        .value
        .strip_prefix("hash{")
        .and_then(|v| v.strip_suffix('}'))
        .unwrap_or("");
    fields
        .split(", ")
        .filter_map(|field| {
            let (nonce, entry) = field.split_once('=')?;
            let ends = entry.split(':').next()?.parse().ok()?;
            Some((actor_of(nonce), ends))
        })
        .collect()
}

/// The queued writers of a traced `:wq` value (`zset[nonce@arrival, ...]`), first first.
fn queued(state: Option<&KeyState>) -> Vec<String> {
    let Some(state) = state else {
        return Vec::new();
    };
    let members = state
        .value
        .strip_prefix("zset[")
        .and_then(|v| v.strip_suffix(']'))
        .unwrap_or("");
    // The trace renders a zset by score, lowest first: arrival order.
    members
        .split(", ")
        .filter_map(|m| m.split_once('@').map(|(nonce, _)| actor_of(nonce)))
        .collect()
}

/// The watched keys' states before and after one atomic step (a run of consecutive changes by
/// one actor), with the server's time then.
struct Step {
    actor: String,
    before: BTreeMap<&'static str, Option<KeyState>>,
    after: BTreeMap<&'static str, Option<KeyState>>,
    /// The server's time in ms during the step.
    now: u64,
    /// The index of the step's first event.
    at: usize,
}

impl Step {
    fn before(&self, key: &str) -> Option<&KeyState> {
        self.before.get(key).and_then(Option::as_ref)
    }

    fn after(&self, key: &str) -> Option<&KeyState> {
        self.after.get(key).and_then(Option::as_ref)
    }

    /// Whether `who`'s place was live before the step.
    fn place_was_live(&self, who: &str) -> bool {
        places(self.before(WW))
            .get(who)
            .is_some_and(|ends| *ends > self.now)
    }

    /// The writer the lock is granted to (or held by) after the step.
    fn writer_after(&self) -> Option<String> {
        self.after(W).and_then(|s| lease_owner(&s.value))
    }

    /// The first queued writer whose place is live after the step.
    fn head_after(&self) -> Option<String> {
        let places = places(self.after(WW));
        queued(self.after(WQ))
            .into_iter()
            .find(|who| places.get(who).is_some_and(|ends| *ends > self.now))
    }
}

/// The clients' atomic steps, each with the states of [`KEYS`] around it.
fn steps(events: &[Event]) -> Vec<Step> {
    let mut state: BTreeMap<&'static str, Option<KeyState>> =
        KEYS.iter().map(|k| (*k, None)).collect();
    let mut steps: Vec<Step> = Vec::new();
    let mut open = false;
    for (i, event) in events.iter().enumerate() {
        let Event::Step {
            actor, key, after, ..
        } = event
        else {
            open = false;
            continue;
        };
        let Some(key) = KEYS.iter().find(|k| *k == key) else {
            continue;
        };
        if !(open && steps.last().is_some_and(|s| s.actor == *actor)) {
            steps.push(Step {
                actor: actor.clone(),
                before: state.clone(),
                after: state.clone(),
                now: time_at(&events[..i], START).as_millis() as u64,
                at: i,
            });
            open = true;
        }
        state.insert(key, after.clone());
        steps.last_mut().expect("pushed").after = state.clone();
    }
    steps
}

/// Grants to a writer whose place had lapsed.
fn lapsed_grants(steps: &[Step]) -> Vec<String> {
    let mut found = Vec::new();
    for step in steps.iter().filter(|s| s.actor != harness::EXPIRER) {
        let before = step.before(W).map(|s| &s.value);
        let Some(to) = step.writer_after() else {
            continue;
        };
        let granted = to != step.actor && step.after(W).map(|s| &s.value) != before;
        if granted && !step.place_was_live(&to) {
            found.push(format!(
                "{} granted the lock to {to}, whose place had lapsed (now {} ms, places {:?})",
                step.actor,
                step.now,
                places(step.before(WW))
            ));
        }
    }
    found
}

/// Removals of another client's live write lease, queue place or intent (see the module docs),
/// and of another client's reader.
fn foreign_removals(events: &[Event], steps: &[Step]) -> Vec<String> {
    let mut found = reader_removals(events, R);
    let live_writer = live(W, R);
    for step in steps.iter().filter(|s| s.actor != harness::EXPIRER) {
        let actor = &step.actor;
        // The write lease.
        if let Some(before) = step.before(W)
            && step.after(W).map(|s| &s.value) != Some(&before.value)
            && let Some(owner) = lease_owner(&before.value)
            && owner != *actor
            && live_writer(&events[..step.at], &format!("write:{}", before.value))
        {
            found.push(format!(
                "{actor} removed {owner}'s live lease {:?}",
                before.value
            ));
        }
        // Places in the queue: the zset's members and the hash's entries.
        let granted = step.writer_after();
        let gone_from = |before: Vec<String>, after: Vec<String>| -> Vec<String> {
            before.into_iter().filter(|w| !after.contains(w)).collect()
        };
        let mut gone = gone_from(queued(step.before(WQ)), queued(step.after(WQ)));
        gone.extend(gone_from(
            places(step.before(WW)).into_keys().collect(),
            places(step.after(WW)).into_keys().collect(),
        ));
        gone.sort();
        gone.dedup();
        for who in gone {
            if who != *actor && step.place_was_live(&who) && granted.as_ref() != Some(&who) {
                found.push(format!("{actor} removed {who}'s live place in the queue"));
            }
        }
        // The intent.
        if let Some(before) = step.before(WI)
            && step.after(WI).map(|s| &s.value) != Some(&before.value)
        {
            let owner = actor_of(&before.value);
            if owner != *actor
                && step.head_after().as_ref() == Some(&owner)
                && granted.as_ref() != Some(&owner)
            {
                found.push(format!(
                    "{actor} removed the intent of {owner}, still the first live queued writer"
                ));
            }
        }
    }
    found
}

/// Direct handoffs: a client's step replaced its own lease by a grant to another writer.
fn handoffs(steps: &[Step]) -> usize {
    steps
        .iter()
        .filter(|s| {
            s.before(W).and_then(|b| lease_owner(&b.value)).as_ref() == Some(&s.actor)
                && s.writer_after().is_some_and(|to| to != s.actor)
        })
        .count()
}

/// Once everyone is done: keys without a TTL and places that end later than `longest` (the
/// longest waiter lease) from now (`stuck`); the lock held or granted, or a place kept, under the
/// nonce of a writer that is `done` (`orphaned`).
fn end_state(
    store: &MemoryStore,
    done: impl Fn(&str) -> bool,
    longest: Duration,
) -> (Vec<String>, Vec<String>) {
    store.atomically(|db| {
        let now = db.now().as_millis() as u64;
        let mut stuck: Vec<String> = KEYS
            .iter()
            .filter(|k| db.pttl(k) == -1)
            .map(|k| format!("everyone is done and {k} has no TTL"))
            .collect();
        let mut orphaned = Vec::new();
        let ww = db.hgetall(WW).unwrap_or_default();
        for (nonce, entry) in &ww {
            let who = actor_of(&String::from_utf8_lossy(nonce));
            let entry = String::from_utf8_lossy(entry);
            let ends: Option<u64> = entry.split(':').next().and_then(|e| e.parse().ok());
            if ends.is_none_or(|ends| ends > now + longest.as_millis() as u64) {
                stuck.push(format!(
                    "{who}'s place {entry:?} does not lapse (now {now})"
                ));
            }
            if done(&who) {
                orphaned.push(format!("everyone is done and {who} keeps a place"));
            }
        }
        let wq = db
            .zrange_by_score(WQ, f64::NEG_INFINITY, f64::INFINITY)
            .unwrap_or_default();
        for (nonce, _) in &wq {
            let who = actor_of(&String::from_utf8_lossy(nonce));
            if done(&who) {
                orphaned.push(format!("everyone is done and {who} is still queued"));
            }
        }
        if let Ok(Some(value)) = db.get(W)
            && let Some(who) = lease_owner(&String::from_utf8_lossy(&value))
            && done(&who)
        {
            orphaned.push(format!("everyone is done and the lock is still {who}'s"));
        }
        (stuck, orphaned)
    })
}

const HANDOFF: &str = "a release granted the lock to a queued writer, which confirmed it";
const DEAD_GRANT: &str = "a grant to the crashed w1 lapsed with its waiter lease";
const LAPSED_PLACE_DROPPED: &str = "a lapsed place was dropped from the queue";
const INTENT_KEPT_READER_OUT: &str = "a queued writer's intent kept the reader out";
const READER_KEPT_WRITER_OUT: &str = "the reader kept a fair writer out";

/// Record what both models check of a finished execution: a writer inside with another writer
/// or a reader, the fence order, grants to lapsed places, foreign removals, and (once everyone is
/// done, with `done` and `longest` as for [`end_state`]) what is stuck or orphaned.
fn record_safety(
    filed: &Findings,
    store: &MemoryStore,
    trace: &Trace,
    events: &[Event],
    steps: &[Step],
    done: impl Fn(&str) -> bool,
    longest: Duration,
) {
    let together = conflicting_overlaps(events, conflict, live(W, R));
    filed.record("writer inside with another", &lines(&together), trace);
    filed.record("fence order", &harness::fence_order(events, W), trace);
    filed.record("grant to a lapsed place", &lapsed_grants(steps), trace);
    filed.record("foreign removal", &foreign_removals(events, steps), trace);
    let (stuck, orphaned) = end_state(store, done, longest);
    filed.record("stuck", &stuck, trace);
    filed.record("orphaned", &orphaned, trace);
}

/// The preemption bound the run explores to (as [`explore`] picks it).
fn bound() -> usize {
    std::env::var("LOOM_MAX_PREEMPTIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

#[test]
fn loom_rwlock_fair_writers_hold() {
    let model = "rwlock-fair-writers";
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let clock = VirtualClock::new(START);
        let store = harness::store_on(&clock);
        let trace = Trace::attach(&store, &KEYS);
        let resource = Resource::new();
        let crash = Crash::new();
        type Client = fn(&MemoryStore, &Trace, &Resource, Option<&Crash>);
        let client = |name: &str, f: Client, crash: Option<Crash>| {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            spawn(name, move || f(&store, &trace, &resource, crash.as_ref()))
        };
        // Two steps, so that a place refreshed between them outlives one taken before both.
        let by = WAITER_LEASE * 3 / 5;
        let threads = [
            client("w1", fair_writer, Some(crash.clone())),
            client("w2", fair_writer, None),
            client("r", two_reads, None),
            spawn_clock_expirer(&store, &trace, &clock, by, 2),
        ];
        crash.trigger();
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        let steps = steps(&events);
        let w1_crashed = trace.noted(|actor, note| actor == "w1" && note == "crashes");
        let done = |who: &str| !(who == "w1" && w1_crashed);
        record_safety(&filed, &store, &trace, &events, &steps, done, WAITER_LEASE);

        filed.reached(
            HANDOFF,
            handoffs(&steps) >= 1
                && trace.noted(|_, note| note.starts_with("fair_write_acquire -> acquired")),
        );
        filed.reached(
            DEAD_GRANT,
            w1_crashed
                && harness::expired(&events, W)
                    .iter()
                    .any(|v| lease_owner(v).as_deref() == Some("w1")),
        );
        filed.reached(
            LAPSED_PLACE_DROPPED,
            steps.iter().any(|s| {
                s.actor != harness::EXPIRER
                    && queued(s.before(WQ))
                        .iter()
                        .any(|w| !s.place_was_live(w) && !queued(s.after(WQ)).contains(w))
            }),
        );
        filed.reached(
            INTENT_KEPT_READER_OUT,
            trace.noted(|actor, note| actor == "r" && note.ends_with("blocked by Intent")),
        );
        filed.reached(
            READER_KEPT_WRITER_OUT,
            trace.noted(|actor, note| actor.starts_with('w') && note.contains("Readers")),
        );
    });
    findings.assert_none(model);
    for scenario in [
        HANDOFF,
        DEAD_GRANT,
        INTENT_KEPT_READER_OUT,
        READER_KEPT_WRITER_OUT,
    ] {
        findings.assert_reached(model, scenario);
    }
    // A place that lapsed while a later one kept the queue alive takes a writer queued before
    // the first clock step, another refreshed between the two, and a third step: three
    // preemptions (`LOOM_MAX_PREEMPTIONS=3 bash scripts/loom.sh fair_writers`, ~80 s).
    // `loom_rwlock_fair_writers_skip_a_lapsed_head` reaches a lapsed head at bound 2.
    if bound() >= 3 {
        findings.assert_reached(model, LAPSED_PLACE_DROPPED);
    }
}

/// Releases that met a first queued writer whose place had lapsed in front of a live one: the
/// release must skip the lapsed place. With `granted`, only those that then handed the lock to
/// a live writer behind it.
fn lapsed_heads_at_release(steps: &[Step], granted: bool) -> usize {
    steps
        .iter()
        .filter(|s| {
            let released = s.actor != harness::EXPIRER
                && s.before(W).and_then(|b| lease_owner(&b.value)).as_ref() == Some(&s.actor)
                && s.writer_after().as_ref() != Some(&s.actor);
            let queue = queued(s.before(WQ));
            let lapsed_head = queue.first().is_some_and(|head| !s.place_was_live(head));
            let live_behind: Vec<&String> = queue
                .iter()
                .skip(1)
                .filter(|w| s.place_was_live(w))
                .collect();
            released
                && lapsed_head
                && !live_behind.is_empty()
                && (!granted
                    || s.writer_after()
                        .is_some_and(|to| live_behind.contains(&&to)))
        })
        .count()
}

const LAPSED_HEAD_AT_RELEASE: &str =
    "a release met a lapsed place at the head of the queue in front of a live one";
const LAPSED_HEAD_SKIPPED: &str =
    "a release skipped a lapsed head and granted the lock to the live writer behind it";

/// A place that lapsed while a later, longer one keeps the queue alive: `w2` queues
/// with a short waiter lease and stalls (never polls again nor leaves), `w1` and `w3` are fair
/// writers with a long one (as `fair_writer`: two attempts, write and release, or leave), and
/// the clock expirer moves the server's clock once past the short lease but not the long one.
/// A release that finds `w2` first in the queue with its place lapsed and `w3` live behind it
/// must drop `w2` and grant to `w3`; granting to `w2` is `grant to a lapsed place`. The main
/// model cannot reach this within bound 3: there every waiter has one lease, so the queue's keys
/// outlive a lapsed place only when a later waiter refreshed them.
///
/// Invariants as in [`loom_rwlock_fair_writers_hold`] (no reader here). The model must reach a
/// release meeting a lapsed head in front of a live place, and one skipping it.
#[test]
fn loom_rwlock_fair_writers_skip_a_lapsed_head() {
    let model = "rwlock-fair-writers-lapsed-head";
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let clock = VirtualClock::new(START);
        let store = harness::store_on(&clock);
        let trace = Trace::attach(&store, &KEYS);
        let resource = Resource::new();
        let writer = |name: &str, waiter_lease: Duration, attempts: usize, leaves: bool| {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            spawn(name, move || {
                fair_writer_with(
                    &store,
                    &trace,
                    &resource,
                    None,
                    waiter_lease,
                    attempts,
                    leaves,
                );
            })
        };
        let threads = [
            writer("w1", LONG_WAITER_LEASE, 2, true),
            writer("w2", SHORT_WAITER_LEASE, 1, false),
            writer("w3", LONG_WAITER_LEASE, 2, true),
            spawn_clock_expirer(&store, &trace, &clock, SHORT_WAITER_LEASE * 2, 1),
        ];
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        let steps = steps(&events);
        let stalled = trace.noted(|actor, note| actor == "w2" && note == "stalls in the queue");
        let done = |who: &str| !(who == "w2" && stalled);
        record_safety(
            &filed,
            &store,
            &trace,
            &events,
            &steps,
            done,
            LONG_WAITER_LEASE,
        );

        filed.reached(
            LAPSED_HEAD_AT_RELEASE,
            lapsed_heads_at_release(&steps, false) >= 1,
        );
        filed.reached(
            LAPSED_HEAD_SKIPPED,
            lapsed_heads_at_release(&steps, true) >= 1,
        );
    });
    findings.assert_none(model);
    findings.assert_reached(model, LAPSED_HEAD_AT_RELEASE);
    findings.assert_reached(model, LAPSED_HEAD_SKIPPED);
}

/// A plain writer under writer preference: one `write_acquire`; with the lock, write and
/// release; refused, it raises its intent and stalls (a writer still waiting: its intent stays
/// up until it lapses).
fn plain_writer(store: &MemoryStore, trace: &Trace, resource: &Resource, _: Option<&Crash>) {
    let locks = RwLock::with_options(store.clone(), Options::default());
    let attempt = block_on(locks.write_acquire(NAME, &nonce(), LEASE, Some(WAITER_LEASE)))
        .expect("write_acquire");
    let lease = match attempt {
        WriteAttempt::Acquired(lease) => lease,
        WriteAttempt::Blocked { by, .. } => {
            trace.note(format!("write_acquire -> blocked by {by:?}, stalls"));
            return;
        }
    };
    trace.note(format!(
        "write_acquire -> acquired {:?}",
        lease.lease().value()
    ));
    trace.enter(format!("write:{}", lease.lease().value()));
    resource.write(trace, lease.fence());
    trace.exit();
    let unlock = block_on(locks.write_release(NAME, lease.lease())).expect("release");
    trace.note(format!("write_release -> {unlock:?}"));
}

/// Steps by a fair writer that granted the lock to another writer while the plain writer `p`'s
/// intent was up.
fn grants_past_a_plain_intent(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .filter(|s| s.actor != harness::EXPIRER && s.actor != "p")
        .filter_map(|s| {
            let intent = s.before(WI).map(|i| actor_of(&i.value))?;
            let to = s.writer_after()?;
            let granted =
                to != s.actor && s.after(W).map(|a| &a.value) != s.before(W).map(|b| &b.value);
            (intent == "p" && granted)
                .then(|| format!("{} granted the lock to {to} past p's intent", s.actor))
        })
        .collect()
}

/// Fair releases that found the plain writer's intent up and a live writer queued, and granted
/// nothing.
fn releases_that_respected_a_plain_intent(steps: &[Step]) -> usize {
    steps
        .iter()
        .filter(|s| {
            s.actor != harness::EXPIRER
                && s.actor != "p"
                && s.before(W).and_then(|b| lease_owner(&b.value)).as_ref() == Some(&s.actor)
                && s.after(W).is_none()
                && s.before(WI).is_some_and(|i| actor_of(&i.value) == "p")
                && queued(s.before(WQ)).iter().any(|w| s.place_was_live(w))
        })
        .count()
}

const PLAIN_INTENT_RESPECTED: &str =
    "a fair release found a plain writer's intent and a queued writer, and granted nothing";

/// A fair writer `w1` (as in [`loom_rwlock_fair_writers_hold`], no crash), a plain writer `p`
/// under writer preference that makes one attempt (refused, its intent stays up), a fair writer
/// `w2` that queues once and stalls, and the clock expirer moving the server's clock once past
/// the waiter and intent leases. Invariants as in the main model, and `grant past a plain
/// intent`: a fair writer's step grants the lock to another writer while `p`'s intent is up.
/// The model must reach a fair release that met `p`'s intent with a writer queued, and granted
/// nothing.
#[test]
fn loom_rwlock_fair_release_respects_a_plain_intent() {
    let model = "rwlock-fair-release-plain-intent";
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let clock = VirtualClock::new(START);
        let store = harness::store_on(&clock);
        let trace = Trace::attach(&store, &KEYS);
        let resource = Resource::new();
        type Client = fn(&MemoryStore, &Trace, &Resource, Option<&Crash>);
        let client = |name: &str, f: Client| {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            spawn(name, move || f(&store, &trace, &resource, None))
        };
        let stalling = {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            spawn("w2", move || {
                fair_writer_with(&store, &trace, &resource, None, WAITER_LEASE, 1, false);
            })
        };
        let threads = [
            client("w1", fair_writer),
            client("p", plain_writer),
            stalling,
            spawn_clock_expirer(&store, &trace, &clock, WAITER_LEASE * 2, 1),
        ];
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        let steps = steps(&events);
        let stalled = |who: &str| {
            trace.noted(|actor, note| actor == who && note.ends_with("stalls"))
                || trace.noted(|actor, note| actor == who && note == "stalls in the queue")
        };
        let done = |who: &str| !stalled(who);
        record_safety(&filed, &store, &trace, &events, &steps, done, WAITER_LEASE);
        filed.record(
            "grant past a plain intent",
            &grants_past_a_plain_intent(&steps),
            &trace,
        );
        filed.reached(
            PLAIN_INTENT_RESPECTED,
            releases_that_respected_a_plain_intent(&steps) >= 1,
        );
    });
    findings.assert_none(model);
    findings.assert_reached(model, PLAIN_INTENT_RESPECTED);
}
