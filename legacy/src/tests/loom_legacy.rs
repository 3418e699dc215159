//! [`GetSetLock`] against [`WatchLock`] and [`ScriptedLock`], over every interleaving of three
//! clients (one may crash) and time passing.
//!
//! Built from the core's loom harness (`tairlock::loom_models::harness`): the embedded store
//! behind loom's mutex, one command, script or `EXEC` per critical section (`WATCH` is the
//! embedded store's optimistic check: `EXEC` compares snapshots and applies the queued commands
//! in one step), clients as named loom threads driving single attempts with `block_on`, and the
//! main thread crashing `c1` at a point loom chooses and checking the trace at the end.
//!
//! **What "the lease passed" means here.** The three kinds share one wire format: the lock key
//! holds a bare timestamp `now + timeout + 1` (seconds), expired once the clock is past it —
//! judged by each *client's* clock for `GetSetLock` (the key never has a TTL), by the server's
//! `TIME` and the key's TTL for the other two. So the expirer here moves time: at a point loom
//! chooses it advances the one clock everybody reads (clients and store, no skew) by 15 s, and
//! in the same step the store reclaims every key whose TTL has passed. The clients' timeouts
//! (10, 20 and 30 s) make their timestamps distinct, so the trace can tell whose value a key
//! holds; the advance outlives `c1`'s lease and nobody else's taken after it.
//!
//! | kind | violated when |
//! |---|---|
//! | `foreign deletion` | a client's step deletes a timestamp another client wrote while it is still live (not past by the clock): F4/F4b's release |
//! | `foreign overwrite` | a client's step replaces such a live timestamp: F3's losing `GETSET` |
//! | `overlap` | a client enters while another is inside whose timestamp is still live |
//! | `fence order` | fencing tokens (the fence key, written in the grant's own step) do not strictly increase (Watch, Scripted) |
//! | `stuck` | once everyone is done, the lock key exists without a TTL (Watch, Scripted: their keys always carry one) |
//!
//! `GetSetLock` must show `foreign deletion`, `foreign overwrite` and `overlap`; Watch and
//! Scripted nothing.

use std::sync::Arc;
use std::time::Duration;

use loom::future::block_on;
use tairlock::MemoryStore;
use tairlock::clock::{SharedClock, VirtualClock};
use tairlock::loom_models::harness::{
    self, Crash, Event, Findings, Resource, Trace, conflicting_overlaps, explore, final_state,
    foreign_removals_while, lines, spawn, spawn_clock_expirer, time_at,
};

use crate::{GetSetLock, Holding, Options, Release, ScriptedLock, TryAcquire, Unit, WatchLock};

const KEY: &str = "lock.orders";
/// How far time jumps when the expirer runs: past `c1`'s lease only.
const ADVANCE: Duration = Duration::from_secs(15);

#[derive(Clone, Copy, Debug)]
enum Kind {
    GetSet,
    Watch,
    Scripted,
}

/// One client's single attempt: acquire, write the resource, release. Multi-command
/// operations are stepped one command at a time, each noted in the trace, with a crash check
/// (for `c1`) before every command.
fn client(
    kind: Kind,
    store: &MemoryStore,
    clock: SharedClock,
    trace: &Trace,
    resource: &Resource,
    crash: Option<&Crash>,
    lease: Duration,
) {
    let crashed = || crash.is_some_and(|c| c.happened(trace));
    let options = Options::default().unit(Unit::Seconds).clock(clock);
    let getset = GetSetLock::with_options(store.clone(), options.clone());
    let watch = WatchLock::with_options(store.clone(), options.clone());
    let scripted = ScriptedLock::with_options(store.clone(), options);

    let attempt = match kind {
        Kind::GetSet => {
            let mut attempt = getset.attempt(KEY, lease).expect("attempt");
            loop {
                let command = attempt.next_command().unwrap_or("?");
                if crashed() {
                    return;
                }
                let outcome = block_on(attempt.step()).expect("step");
                trace.note(format!("{command} sent"));
                if let Some(outcome) = outcome {
                    break outcome;
                }
            }
        }
        Kind::Watch => {
            let mut attempt = watch.attempt(KEY, lease).expect("attempt");
            loop {
                let command = attempt.next_step().unwrap_or("?");
                if crashed() {
                    return;
                }
                let outcome = block_on(attempt.step()).expect("step");
                trace.note(format!("{command} sent"));
                if let Some(outcome) = outcome {
                    break outcome;
                }
            }
        }
        Kind::Scripted => {
            if crashed() {
                return;
            }
            block_on(scripted.try_acquire(KEY, lease)).expect("try_acquire")
        }
    };
    let holding: Holding = match attempt {
        TryAcquire::Acquired(holding) => holding,
        TryAcquire::Busy { holder, .. } => {
            trace.note(format!("acquire -> busy, holder {holder:?}"));
            return;
        }
    };
    trace.note(format!(
        "acquire -> acquired {} (fence {:?})",
        holding.value(),
        holding.fence()
    ));
    trace.enter(holding.value_text());
    resource.write(trace, holding.fence().unwrap_or(0));
    trace.exit();

    let release: Release = match kind {
        Kind::GetSet => {
            let mut release = getset.release_attempt(KEY);
            loop {
                let command = release.next_command().unwrap_or("?");
                if crashed() {
                    return;
                }
                let outcome = block_on(release.step()).expect("step");
                trace.note(format!("{command} sent"));
                if let Some(outcome) = outcome {
                    break outcome;
                }
            }
        }
        Kind::Watch => {
            let mut release = watch.release_attempt(&holding).expect("release");
            loop {
                let command = release.next_step().unwrap_or("?");
                if crashed() {
                    return;
                }
                let outcome = block_on(release.step()).expect("step");
                trace.note(format!("{command} sent"));
                if let Some(outcome) = outcome {
                    break outcome;
                }
            }
        }
        Kind::Scripted => {
            if crashed() {
                return;
            }
            block_on(scripted.release(&holding)).expect("release")
        }
    };
    trace.note(format!("release -> {release:?}"));
}

/// A timestamp is live while the clock has not passed it (`now <= value`, whole seconds).
fn live(start: Duration) -> impl Fn(&[Event], &str) -> bool {
    move |events, value| {
        let now = time_at(events, start);
        value
            .parse::<u64>()
            .is_ok_and(|v| !Unit::Seconds.is_expired(v, now))
    }
}

/// The fence key's values, as clients' steps wrote them: each must exceed the one before.
fn fence_order(events: &[Event], fence_key: &str) -> Vec<String> {
    let mut last: Option<u64> = None;
    let mut found = Vec::new();
    for event in events {
        if let Event::Step {
            actor,
            key,
            after: Some(after),
            ..
        } = event
        {
            if key != fence_key || actor == harness::EXPIRER {
                continue;
            }
            let Ok(token) = after.value.parse::<u64>() else {
                continue;
            };
            if let Some(prev) = last.filter(|prev| token <= *prev) {
                found.push(format!(
                    "{actor} was issued fence {token} after fence {prev}"
                ));
            }
            last = Some(token);
        }
    }
    found
}

fn run(model: &'static str, kind: Kind) -> Arc<Findings> {
    let findings = Findings::new();
    let filed = findings.clone();
    explore(model, 2, &findings, move || {
        let clock = VirtualClock::default();
        let start = tairlock::clock::Clock::now(&clock);
        let store = harness::store_on(&clock);
        let fence_key = crate::wire::fence_key(KEY);
        let trace = Trace::attach(&store, &[KEY, &fence_key]);
        let resource = Resource::new();
        let crash = Crash::new();
        let mut threads = Vec::new();
        for (name, lease, crash) in [
            ("c1", 10, Some(crash.clone())),
            ("c2", 20, None),
            ("c3", 30, None),
        ] {
            let (store, trace, resource) = (store.clone(), trace.clone(), resource.clone());
            let clock: SharedClock = Arc::new(clock.clone());
            threads.push(spawn(name, move || {
                let lease = Duration::from_secs(lease);
                client(
                    kind,
                    &store,
                    clock,
                    &trace,
                    &resource,
                    crash.as_ref(),
                    lease,
                );
            }));
        }
        threads.push(spawn_clock_expirer(&store, &trace, &clock, ADVANCE, 1));
        crash.trigger();
        for thread in threads {
            thread.join().expect("model thread");
        }

        let events = trace.events();
        let (overwrites, deletions): (Vec<String>, Vec<String>) =
            foreign_removals_while(&events, KEY, str::to_owned, live(start))
                .into_iter()
                .partition(|line| line.contains(" overwrote "));
        filed.record("foreign deletion", &deletions, &trace);
        filed.record("foreign overwrite", &overwrites, &trace);
        filed.record(
            "overlap",
            &lines(&conflicting_overlaps(&events, |_, _| true, live(start))),
            &trace,
        );
        if !matches!(kind, Kind::GetSet) {
            filed.record("fence order", &fence_order(&events, &fence_key), &trace);
            let stuck = final_state(&events, KEY)
                .filter(|s| !s.ttl)
                .map(|s| format!("everyone is done and {KEY} holds {s}"));
            filed.record("stuck", stuck.as_slice(), &trace);
        }

        filed.reached(
            TAKEOVER,
            events.iter().any(|e| {
                matches!(e, Event::Note { actor, note, .. }
                    if actor != "c1" && note.starts_with("acquire -> acquired"))
            }) && trace.noted(|a, n| a == "c1" && n.starts_with("acquire -> acquired")),
        );
        filed.reached(
            STALE_RELEASE,
            trace.noted(|a, n| {
                a == "c1"
                    && n.starts_with("release -> ")
                    && !n.ends_with("NotHeld")
                    && time_at(&events, start) > start
            }),
        );
    });
    findings
}

const TAKEOVER: &str = "c1 held the lock and another client took it after time passed";
const STALE_RELEASE: &str = "c1 released after time had passed";

/// The jeffkit lock, verbatim: loom must keep finding its flaws.
///
/// - `foreign deletion` (F4b): `c1` holds; time passes its timestamp; `c3` takes the lock over
///   with `GETSET`; `c1` releases — `now < GET` holds for `c3`'s timestamp — and `DEL`s `c3`'s
///   live lock.
/// - `foreign overwrite` (F3): `c1` crashed holding; time passes; `c2` and `c3` both `GET` the
///   expired timestamp; `c3`'s `GETSET` wins; `c2`'s losing `GETSET` replaces `c3`'s live
///   timestamp with its own.
/// - `overlap`: after `c1`'s deletion, `c2`'s `SETNX` succeeds while `c3` is still inside.
#[test]
fn loom_legacy_getset_is_caught() {
    let model = "legacy-getset";
    let findings = run(model, Kind::GetSet);
    findings.assert_found(model, "foreign deletion");
    findings.assert_found(model, "foreign overwrite");
    findings.assert_found(model, "overlap");
}

/// The `WATCH`/`MULTI`/`EXEC` lock: every write is an `EXEC` that aborts if a watched key
/// changed, so no interleaving breaks an invariant.
#[test]
fn loom_legacy_watch_holds() {
    let model = "legacy-watch";
    let findings = run(model, Kind::Watch);
    findings.assert_none(model);
    findings.assert_reached(model, TAKEOVER);
    findings.assert_reached(model, STALE_RELEASE);
}

/// The scripted legacy lock: one script per operation; no interleaving breaks an invariant.
#[test]
fn loom_legacy_scripted_holds() {
    let model = "legacy-scripted";
    let findings = run(model, Kind::Scripted);
    findings.assert_none(model);
    findings.assert_reached(model, TAKEOVER);
    findings.assert_reached(model, STALE_RELEASE);
}
