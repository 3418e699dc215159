//! What every loom model shares: named client threads, the expirer, a trace of each execution,
//! the fenced resource, and a run that counts what it finds across all executions.
//!
//! Public (under `--cfg tairlock_loom` only) so that the models of `tairlock-legacy` and
//! `tairlock-rwlock` are built from the same pieces.
//!
//! # How a model is put together
//!
//! - **The server** is a [`MemoryStore`]: one loom mutex around the keyspace, held for exactly
//!   one command, one script or one `EXEC` (Redis's unit of atomicity), reading its clock (a
//!   [`VirtualClock`], which only the expirer moves) inside the step.
//! - **The expirer** is a thread that lets a lease pass at a point loom chooses: that is how
//!   "the lease expired while its holder was paused" becomes explorable. What "passing" means
//!   depends on who judges the lease:
//!   - a server TTL ([`spawn_expirer`]): the keys with a TTL that would expire soonest are
//!     expired, as a server whose clock jumps to that instant would; a key without a TTL never
//!     expires. Time stays frozen otherwise, so fencing tokens anchored to server time still
//!     strictly increase through their `last + 1` rule, and fence keys (whose retention outlives
//!     every lease) are not handed to the expirer.
//!   - a timestamp judged by a clock ([`spawn_clock_expirer`], the legacy kinds): the one clock
//!     every client and the store read moves forward, and in the same step the store reclaims
//!     the keys whose TTL that passed.
//! - **Clients** are named loom threads ([`spawn`]) that drive single attempts of the real
//!   algorithms with [`loom::future::block_on`] (the store's async methods complete without
//!   awaiting anything, so no runtime is needed). A client paused between two commands is a
//!   preemption; a client that crashes stops at a [`Crash`] check, which loom may make true
//!   before any command.
//! - **The trace** ([`Trace`]) records, in execution order, every change an atomic step made to
//!   the watched keys (who made it, before, after, TTL or not) and the clients' own notes: what
//!   they sent and what came back, and when they entered and left their critical section. A
//!   model's checker reads it at the end of each execution, on the main thread after joining
//!   the others, and files what it finds in [`Findings`], which outlive the executions.
//! - **The run** ([`explore`]) explores every execution up to the preemption bound
//!   (`LOOM_MAX_PREEMPTIONS`, else the model's own), and reports how many executions it ran,
//!   how long it took, and how often each violation showed up, with the first interleaving
//!   that showed it.

use std::collections::BTreeMap;
use std::fmt::{self, Write as _};
use std::sync::Arc;
use std::time::{Duration, Instant};

use loom::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use crate::Lease;
use crate::clock::{Clock, VirtualClock};
use crate::script::Db;
use crate::store::MemoryStore;

/// The expirer thread's name.
pub const EXPIRER: &str = "expirer";

/// A loom thread's name ("main" for the model's own thread).
pub fn actor() -> String {
    loom::thread::current().name().unwrap_or("main").to_owned()
}

/// A store for one execution: a fresh keyspace on a frozen virtual clock.
pub fn store() -> MemoryStore {
    store_on(&VirtualClock::default())
}

/// A store for one execution on `clock`, which only a [`spawn_clock_expirer`] moves.
pub fn store_on(clock: &VirtualClock) -> MemoryStore {
    MemoryStore::with_clock(Arc::new(clock.clone()))
}

/// Spawn a named client thread.
///
/// # Panics
///
/// When loom refuses the thread (more than its five threads, main included).
pub fn spawn<T: Send + 'static>(
    name: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> loom::thread::JoinHandle<T> {
    loom::thread::Builder::new()
        .name(name.to_owned())
        .spawn(f)
        .expect("loom spawns the thread")
}

/// The expirer: `steps` times, at points loom chooses, let time run to the next expiry among
/// `keys`: expire the ones with a TTL that would expire soonest (ties together), as a server
/// whose clock jumps to that instant would. Keys without a TTL never expire.
pub fn spawn_expirer(
    store: &MemoryStore,
    keys: &[&str],
    steps: usize,
) -> loom::thread::JoinHandle<()> {
    let store = store.clone();
    let keys: Vec<String> = keys.iter().map(|k| (*k).to_owned()).collect();
    spawn(EXPIRER, move || {
        for _ in 0..steps {
            store.atomically(|db| {
                let soonest = keys.iter().map(|k| db.pttl(k)).filter(|t| *t >= 0).min();
                if let Some(soonest) = soonest {
                    for key in &keys {
                        if db.pttl(key) == soonest {
                            db.del(key);
                        }
                    }
                }
            });
        }
    })
}

/// The clock-driven expirer, for locks whose lease is a timestamp judged by a clock (the legacy
/// kinds, whose clients compare timestamps with their own clock and whose scripted twins set a
/// TTL until the timestamp passes): `steps` times, at points loom chooses, advance `clock` by
/// `by` and, in the same atomic step, let the store reclaim every key whose TTL has passed.
/// The step notes the new time in `trace` (read back by [`time_at`]).
pub fn spawn_clock_expirer(
    store: &MemoryStore,
    trace: &Arc<Trace>,
    clock: &VirtualClock,
    by: Duration,
    steps: usize,
) -> loom::thread::JoinHandle<()> {
    let (store, trace, clock) = (store.clone(), trace.clone(), clock.clone());
    spawn(EXPIRER, move || {
        for _ in 0..steps {
            store.atomically(|db| {
                clock.advance(by);
                let now = clock.now();
                // Noted inside the step, before the reclaimed keys' changes are recorded.
                trace.note(format!("{TIME_NOTE}{} ms", now.as_millis()));
                db.set_time(now);
            });
        }
    })
}

const TIME_NOTE: &str = "time is now ";

/// The time at the end of `events`: the last time the clock-driven expirer set, else `start`.
pub fn time_at(events: &[Event], start: Duration) -> Duration {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Note { actor, note, .. } if actor == EXPIRER => note
                .strip_prefix(TIME_NOTE)
                .and_then(|ms| ms.strip_suffix(" ms"))
                .and_then(|ms| ms.parse().ok())
                .map(Duration::from_millis),
            _ => None,
        })
        .unwrap_or(start)
}

/// A crash that may happen at any interleaving point: the model's main thread
/// [`trigger`](Self::trigger)s it at a point loom chooses; a crash-prone client checks
/// [`happened`](Self::happened) before each command and stops for good once it is true.
#[derive(Clone, Debug)]
pub struct Crash(loom::sync::Arc<AtomicBool>);

impl Default for Crash {
    fn default() -> Self {
        Crash::new()
    }
}

impl Crash {
    /// Not crashed yet.
    pub fn new() -> Self {
        Crash(loom::sync::Arc::new(AtomicBool::new(false)))
    }

    /// Crash the client (it notices at its next check).
    pub fn trigger(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    /// Whether the client has crashed; notes the crash in `trace` when it has.
    pub fn happened(&self, trace: &Trace) -> bool {
        let crashed = self.0.load(Ordering::SeqCst);
        if crashed {
            trace.note("crashes");
        }
        crashed
    }
}

/// The protected resource: it remembers the highest fencing token it has seen and accepts a
/// write iff its token is not lower (Kleppmann's check). One loom atomic, so a client's write
/// is a point where others can run while it is inside its critical section.
#[derive(Clone, Debug)]
pub struct Resource(loom::sync::Arc<AtomicU64>);

impl Default for Resource {
    fn default() -> Self {
        Resource::new()
    }
}

impl Resource {
    /// A resource that has seen no token.
    pub fn new() -> Self {
        Resource(loom::sync::Arc::new(AtomicU64::new(0)))
    }

    /// Read (a reader's critical section): a point where others can run while it is inside.
    pub fn read(&self, trace: &Trace) {
        let seen = self.0.load(Ordering::SeqCst);
        trace.note(format!("reads the resource (highest fence seen {seen})"));
    }

    /// Write with `fence` (0 for algorithms without fencing); true if accepted. Noted in `trace`.
    pub fn write(&self, trace: &Trace, fence: u64) -> bool {
        let seen = self.0.fetch_max(fence, Ordering::SeqCst);
        let accepted = fence >= seen;
        trace.note(format!(
            "writes the resource with fence {fence}: {}",
            if accepted { "accepted" } else { "rejected" }
        ));
        accepted
    }
}

/// A watched key's state after a step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyState {
    /// The value: a string as text, a sorted set as `zset[member@score, ...]`, a hash as
    /// `hash{field=value, ...}` (by field), other types by their type name.
    pub value: String,
    /// Whether it has a TTL.
    pub ttl: bool,
}

impl fmt::Display for KeyState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let ttl = if self.ttl { "with TTL" } else { "NO TTL" };
        write!(f, "{:?} ({ttl})", self.value)
    }
}

fn read_key(db: &mut Db, key: &str) -> Option<KeyState> {
    let value = match db.key_type(key) {
        "none" => return None,
        "string" => String::from_utf8_lossy(&db.get(key).ok()??).into_owned(),
        "zset" => {
            let members = db
                .zrange_by_score(key, f64::NEG_INFINITY, f64::INFINITY)
                .unwrap_or_default();
            let members: Vec<String> = members
                .iter()
                .map(|(m, s)| format!("{}@{s}", String::from_utf8_lossy(m)))
                .collect();
            format!("zset[{}]", members.join(", "))
        }
        "hash" => {
            let mut fields: Vec<String> = db
                .hgetall(key)
                .unwrap_or_default()
                .iter()
                .map(|(f, v)| {
                    let (f, v) = (String::from_utf8_lossy(f), String::from_utf8_lossy(v));
                    format!("{f}={v}")
                })
                .collect();
            fields.sort();
            format!("hash{{{}}}", fields.join(", "))
        }
        other => other.to_owned(),
    };
    Some(KeyState {
        value,
        ttl: db.pttl(key) >= 0,
    })
}

/// One entry of a [`Trace`].
#[derive(Debug, Clone)]
pub enum Event {
    /// An atomic step changed a watched key.
    Step {
        /// The thread that ran the step.
        actor: String,
        /// The key.
        key: String,
        /// Its state before the step.
        before: Option<KeyState>,
        /// Its state after the step.
        after: Option<KeyState>,
    },
    /// A client's own note.
    Note {
        /// The thread.
        actor: String,
        /// What it did or saw.
        note: String,
        /// The critical-section marker, if this note is one.
        mark: Option<Mark>,
    },
}

/// Critical-section markers a client notes, for the overlap checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mark {
    /// Entered, believing it holds the lock with this value (lease, token, timestamp).
    Enter(String),
    /// Left.
    Exit,
}

/// Everything that happened in one execution, in order. See the [module docs](self).
#[derive(Debug)]
pub struct Trace {
    keys: Vec<String>,
    last: std::sync::Mutex<Vec<Option<KeyState>>>,
    events: std::sync::Mutex<Vec<Event>>,
}

impl Trace {
    /// Watch `keys` on `store`: every atomic step that changes one of them is recorded.
    ///
    /// The std mutexes inside are taken only for a few instructions with no loom operation
    /// inside, so loom never sees them contended.
    pub fn attach(store: &MemoryStore, keys: &[&str]) -> Arc<Trace> {
        let trace = Arc::new(Trace {
            keys: keys.iter().map(|k| (*k).to_owned()).collect(),
            last: std::sync::Mutex::new(vec![None; keys.len()]),
            events: std::sync::Mutex::new(Vec::new()),
        });
        let observer = trace.clone();
        store.observe(move |db| observer.step(db));
        trace
    }

    fn step(&self, db: &mut Db) {
        let mut last = self.last.lock().expect("trace lock");
        for (i, key) in self.keys.iter().enumerate() {
            let now = read_key(db, key);
            if now != last[i] {
                let before = std::mem::replace(&mut last[i], now.clone());
                self.push(Event::Step {
                    actor: actor(),
                    key: key.clone(),
                    before,
                    after: now,
                });
            }
        }
    }

    fn push(&self, event: Event) {
        self.events.lock().expect("trace lock").push(event);
    }

    /// Note what the current thread did or saw.
    pub fn note(&self, note: impl Into<String>) {
        self.push(Event::Note {
            actor: actor(),
            note: note.into(),
            mark: None,
        });
    }

    /// Note that the current thread enters its critical section holding `value`.
    pub fn enter(&self, value: impl Into<String>) {
        let value = value.into();
        self.push(Event::Note {
            actor: actor(),
            note: format!("enters the critical section holding {value:?}"),
            mark: Some(Mark::Enter(value)),
        });
    }

    /// Note that the current thread leaves its critical section.
    pub fn exit(&self) {
        self.push(Event::Note {
            actor: actor(),
            note: "leaves the critical section".to_owned(),
            mark: Some(Mark::Exit),
        });
    }

    /// The events so far.
    pub fn events(&self) -> Vec<Event> {
        self.events.lock().expect("trace lock").clone()
    }

    /// Whether some note satisfies `pred(actor, note)`.
    pub fn noted(&self, pred: impl Fn(&str, &str) -> bool) -> bool {
        self.events
            .lock()
            .expect("trace lock")
            .iter()
            .any(|e| matches!(e, Event::Note { actor, note, .. } if pred(actor, note)))
    }

    /// The events as numbered lines: the interleaving, for a report.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for (i, event) in self.events().iter().enumerate() {
            let _ = match event {
                Event::Step {
                    actor,
                    key,
                    before,
                    after,
                } => writeln!(
                    out,
                    "  {:>2}. [{actor}] {key}: {} -> {}",
                    i + 1,
                    state(before.as_ref()),
                    state(after.as_ref())
                ),
                Event::Note { actor, note, .. } => {
                    writeln!(out, "  {:>2}. [{actor}] {note}", i + 1)
                }
            };
        }
        out
    }
}

fn state(s: Option<&KeyState>) -> String {
    s.map_or_else(|| "absent".to_owned(), ToString::to_string)
}

/// Who wrote each value of each watched key, as the trace saw it: the actor of the step that
/// first made the key hold that value.
pub fn writers(events: &[Event]) -> BTreeMap<(String, String), String> {
    let mut writers = BTreeMap::new();
    for event in events {
        if let Event::Step {
            actor,
            key,
            after: Some(after),
            before,
        } = event
            && before.as_ref().map(|b| &b.value) != Some(&after.value)
        {
            writers
                .entry((key.clone(), after.value.clone()))
                .or_insert_with(|| actor.clone());
        }
    }
    writers
}

/// The values of `key` the expirer removed: leases that have passed, by the server's TTL.
pub fn expired(events: &[Event], key: &str) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Step {
                actor,
                key: k,
                before: Some(before),
                after: None,
            } if actor == EXPIRER && k == key => Some(before.value.clone()),
            _ => None,
        })
        .collect()
}

/// Steps by a client that removed or replaced a value of `key` written by another party
/// (`owner_of` maps an actor to its owner, so threads of one owner count as one): "a client
/// deleted a lock another holder wrote". Each as a line for a report. For locks whose leases
/// are server TTLs: a value whose lease passed was removed by the expirer already.
pub fn foreign_removals(
    events: &[Event],
    key: &str,
    owner_of: impl Fn(&str) -> String,
) -> Vec<String> {
    foreign_removals_while(events, key, owner_of, |_, _| true)
}

/// [`foreign_removals`] of values still `live` when removed (given the events before the
/// step): for locks whose expired values stay in place until someone takes them over.
pub fn foreign_removals_while(
    events: &[Event],
    key: &str,
    owner_of: impl Fn(&str) -> String,
    live: impl Fn(&[Event], &str) -> bool,
) -> Vec<String> {
    let writers = writers(events);
    let mut found = Vec::new();
    for (i, event) in events.iter().enumerate() {
        if let Event::Step {
            actor,
            key: k,
            before: Some(before),
            after,
        } = event
        {
            if k != key
                || actor == EXPIRER
                || after.as_ref().map(|a| &a.value) == Some(&before.value)
                || !live(&events[..i], &before.value)
            {
                continue;
            }
            let Some(writer) = writers.get(&(k.clone(), before.value.clone())) else {
                continue;
            };
            if owner_of(writer) != owner_of(actor) {
                found.push(format!(
                    "{actor} {} {writer}'s live value {:?}",
                    if after.is_some() {
                        "overwrote"
                    } else {
                        "deleted"
                    },
                    before.value
                ));
            }
        }
    }
    found
}

/// Two clients inside their critical sections at once: `entered` came in while `inside` was
/// there with a lease that had not passed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// Who entered.
    pub entered: String,
    /// Holding what.
    pub value: String,
    /// Who was inside already.
    pub inside: String,
    /// Holding what (still live).
    pub held: String,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} entered holding {:?} while {} was inside holding {:?}, still live",
            self.entered, self.value, self.inside, self.held
        )
    }
}

/// Two clients inside their critical sections at once while the one already inside still held
/// a live lease: its value had not been expired by the expirer (so no lease had passed), yet
/// another client entered.
///
/// `live` decides whether a holder's value was still live at that point of the trace, given
/// the events before it; [`not_expired`] is the rule for server-TTL locks.
pub fn overlaps(events: &[Event], live: impl Fn(&[Event], &str) -> bool) -> Vec<Overlap> {
    conflicting_overlaps(events, |_, _| true, live)
}

/// [`overlaps`] for locks with shared holds: only holders whose values `conflict` (say, a
/// reader's and a writer's) must not be inside together.
pub fn conflicting_overlaps(
    events: &[Event],
    conflict: impl Fn(&str, &str) -> bool,
    live: impl Fn(&[Event], &str) -> bool,
) -> Vec<Overlap> {
    let mut inside: BTreeMap<String, String> = BTreeMap::new();
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
                for (other, held) in &inside {
                    if other != actor && conflict(value, held) && live(&events[..i], held) {
                        found.push(Overlap {
                            entered: actor.clone(),
                            value: value.clone(),
                            inside: other.clone(),
                            held: held.clone(),
                        });
                    }
                }
                inside.insert(actor.clone(), value.clone());
            }
            Mark::Exit => {
                inside.remove(actor);
            }
        }
    }
    found
}

/// Every new grant of the lock at `key` (a lease written over nothing, even under the nonce of a grant that lapsed,
/// or over another nonce's lease) must carry a larger fencing token than every grant before it;
/// a confirmation (a lease replacing one of the same nonce in one step) keeps the token.
pub fn fence_order(events: &[Event], key: &str) -> Vec<String> {
    let mut highest: Option<u64> = None;
    let mut found = Vec::new();
    for event in events {
        let Event::Step {
            key: step_key,
            before,
            after: Some(after),
            ..
        } = event
        else {
            continue;
        };
        let Some(lease) = Lease::parse(&after.value).filter(|_| step_key == key) else {
            continue;
        };
        // A confirmation replaces a lease of the same nonce in one step; a lease written over
        // nothing (even under the nonce of a grant that lapsed) is a new grant.
        let replaced = before.as_ref().and_then(|b| Lease::parse(&b.value));
        match replaced {
            Some(old) if old.nonce() == lease.nonce() => {
                if old.fence() != lease.fence() {
                    found.push(format!(
                        "a confirmation changed the fence {} to {}",
                        old.fence(),
                        lease.fence()
                    ));
                }
            }
            _ => {
                if let Some(highest) = highest
                    && lease.fence() <= highest
                {
                    found.push(format!(
                        "fence {} granted after fence {highest}",
                        lease.fence()
                    ));
                }
            }
        }
        highest = highest.max(Some(lease.fence()));
    }
    found
}

/// Render found violations as lines for [`Findings::record`].
pub fn lines<T: fmt::Display>(found: &[T]) -> Vec<String> {
    found.iter().map(ToString::to_string).collect()
}

/// The index of the first note by `actor` that starts with `prefix`.
pub fn first_note(events: &[Event], actor: &str, prefix: &str) -> Option<usize> {
    events.iter().position(|e| {
        matches!(e, Event::Note { actor: a, note, .. } if a == actor && note.starts_with(prefix))
    })
}

/// The liveness rule for locks whose lease is a server TTL on `key`: a value is live until the
/// expirer has removed it.
pub fn not_expired(key: &str) -> impl Fn(&[Event], &str) -> bool + '_ {
    move |events, value| !expired(events, key).iter().any(|v| v == value)
}

/// The final state of the watched `key` according to the trace.
pub fn final_state(events: &[Event], key: &str) -> Option<KeyState> {
    events
        .iter()
        .rev()
        .find_map(|e| match e {
            Event::Step { key: k, after, .. } if k == key => Some(after.clone()),
            _ => None,
        })
        .flatten()
}

/// Violations found across every explored execution of one model, by kind, each with the
/// first interleaving that showed it. Lives outside the model (std, not loom).
#[derive(Debug, Default)]
pub struct Findings {
    inner: std::sync::Mutex<FindingsInner>,
}

#[derive(Debug, Default)]
struct FindingsInner {
    executions: u64,
    kinds: BTreeMap<&'static str, (u64, String)>,
    reached: BTreeMap<&'static str, u64>,
}

impl Findings {
    /// Nothing found yet.
    pub fn new() -> Arc<Self> {
        Arc::new(Findings::default())
    }

    /// Count one execution.
    pub fn execution(&self) {
        self.inner.lock().expect("findings lock").executions += 1;
    }

    /// File the violations of `kind` found in one execution (if any), with its trace.
    pub fn record(&self, kind: &'static str, found: &[String], trace: &Trace) {
        if found.is_empty() {
            return;
        }
        let mut inner = self.inner.lock().expect("findings lock");
        let entry = inner
            .kinds
            .entry(kind)
            .or_insert_with(|| (0, format!("{}\n{}", found.join("\n"), trace.render())));
        entry.0 += 1;
    }

    /// Count an execution that reached `scenario` (an interleaving the model exists to explore,
    /// e.g. "the lease expired while its holder was inside"): proof that the zero violations
    /// of a scripted algorithm were not for want of reaching the hard cases.
    pub fn reached(&self, scenario: &'static str, reached: bool) {
        if reached {
            *self
                .inner
                .lock()
                .expect("findings lock")
                .reached
                .entry(scenario)
                .or_default() += 1;
        }
    }

    /// Assert that some execution reached `scenario`.
    ///
    /// # Panics
    ///
    /// When none did.
    pub fn assert_reached(&self, model: &str, scenario: &str) {
        let inner = self.inner.lock().expect("findings lock");
        let count = inner.reached.get(scenario).copied().unwrap_or(0);
        drop(inner);
        assert!(
            count > 0,
            "{model}: no execution reached `{scenario}`; the model lost its teeth"
        );
    }

    /// How many executions showed `kind`.
    pub fn count(&self, kind: &str) -> u64 {
        self.inner
            .lock()
            .expect("findings lock")
            .kinds
            .get(kind)
            .map_or(0, |k| k.0)
    }

    /// The first interleaving that showed `kind`, if any.
    pub fn example(&self, kind: &str) -> Option<String> {
        self.inner
            .lock()
            .expect("findings lock")
            .kinds
            .get(kind)
            .map(|k| k.1.clone())
    }

    /// Executions explored.
    pub fn executions(&self) -> u64 {
        self.inner.lock().expect("findings lock").executions
    }

    /// A summary: the scenarios reached, and every kind of violation found with its count and
    /// first interleaving.
    pub fn summary(&self) -> String {
        let inner = self.inner.lock().expect("findings lock");
        let mut out = String::new();
        for (scenario, count) in &inner.reached {
            let _ = writeln!(
                out,
                "reached `{scenario}` in {count} of {} executions",
                inner.executions
            );
        }
        for (kind, (count, example)) in &inner.kinds {
            let _ = writeln!(
                out,
                "{kind}: {count} of {} executions; first:\n{example}",
                inner.executions
            );
        }
        out
    }

    /// Assert that `kind` was found at least once: a verbatim recipe's flaw that the model must
    /// keep reaching.
    ///
    /// # Panics
    ///
    /// When it was not found.
    pub fn assert_found(&self, model: &str, kind: &str) {
        assert!(
            self.count(kind) > 0,
            "{model}: the model no longer reaches a `{kind}` interleaving ({} executions)\n{}",
            self.executions(),
            self.summary()
        );
    }

    /// Assert that nothing at all was found: a scripted algorithm's model.
    ///
    /// # Panics
    ///
    /// When anything was found.
    pub fn assert_none(&self, model: &str) {
        let inner = self.inner.lock().expect("findings lock");
        let empty = inner.kinds.is_empty();
        drop(inner);
        assert!(empty, "{model}: violations found\n{}", self.summary());
    }
}

/// Run `model` over every execution up to the preemption bound (`LOOM_MAX_PREEMPTIONS` if set,
/// else `preemptions`), counting executions in `findings`, and print the model's name,
/// executions, bound and runtime (and anything found) to stderr.
pub fn explore(
    name: &str,
    preemptions: usize,
    findings: &Arc<Findings>,
    model: impl Fn() + Sync + Send + 'static,
) {
    let mut builder = loom::model::Builder::new();
    let bound = *builder.preemption_bound.get_or_insert(preemptions);
    let counter = findings.clone();
    let started = Instant::now();
    builder.check(move || {
        counter.execution();
        model();
    });
    let took = started.elapsed();
    eprintln!(
        "loom model {name}: {} executions, preemption bound {bound}, {:.1} s",
        findings.executions(),
        took.as_secs_f64()
    );
    let summary = findings.summary();
    if !summary.is_empty() {
        eprintln!("{summary}");
    }
}

/// A lease long enough never to pass by real time while a model runs: in the models a lease
/// passes only when the expirer says so.
pub const LEASE: Duration = Duration::from_secs(3600);
