//! What `tairlock scan` reports of each [`Item`]: its class, its state, what `tairlock inspect`
//! says of it (each kind's own report, read now: [`admin`], [`rw_inspect`], [`sem_inspect`],
//! [`legacy_inspect`], [`token_inspect`]), and whether it is stuck, with the command that clears
//! it.
//!
//! # Stuck
//!
//! A lock is stuck when nobody can take it without help, for a reason that does not pass by
//! itself:
//!
//! | class | stuck when | cleared by |
//! |---|---|---|
//! | expire lock | its key has no TTL and its lease ended more than `--stale-after` ago (a key that exists is held: no client ever takes it) | `tairlock unlock --force KEY --if-value LEASE` |
//! | reader/writer lock | its writer key has no TTL and the writer's lease ended more than `--stale-after` ago; or a waiting writer's intent has no TTL (new readers stay out for ever) | `tairlock unlock --force KEY --rw` |
//! | legacy lock | an original client wrote it last (no TTL) and its timestamp passed more than `--stale-after` ago by the server's clock: a client of the same unit would take it over, but none has, and it never goes by itself | `tairlock unlock --force KEY --legacy --if-value TIMESTAMP` |
//! | orphaned queue (of the expire lock's fair mode, a reader/writer lock's fair writers, a semaphore's fair mode) | its keys have no TTL and every place in it ended more than `--stale-after` ago: only a fair attempt on that lock would reap it | `tairlock run KEY --fair … -- true`: one fair acquisition, which reaps the lapsed places and waits its turn behind any live holder |
//!
//! `--if-value` makes the forced unlock exact: a lock taken or renewed since the scan holds
//! another value, and the unlock refuses it.
//!
//! Token locks of other libraries always have a TTL, and retained fencing tokens are no locks:
//! neither is ever stuck.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use tairlock::{ErrorKind, ExpireLock, Keyspace, Options, Store, Ttl};
use tairlock_rwlock::RwLock;

use super::classify::{Facts, Item, Named, Place, Queue};
use crate::duration::show;
use crate::{admin, legacy_inspect, rw_inspect, sem_inspect, token_inspect};

/// How long `tairlock run` waits for its turn in the commands that clear an orphaned queue.
const CLEAR_WAIT: &str = "30s";

/// What a lock is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Class {
    /// An expire lock of this project, `<prefix>{name}`.
    ExpireLock,
    /// The fair mode's queue of an expire lock, `<prefix>{name}:fairq` and `:fairw`.
    FairQueue,
    /// A reader/writer lock, `<prefix>{name}:w`, `:r`, `:wi`, `:wq`, `:ww`.
    RwLock,
    /// A semaphore, `<prefix>{name}:sem` and its other keys.
    Semaphore,
    /// A legacy `SETNX`/`GETSET` lock: a bare Unix timestamp under any key.
    LegacyLock,
    /// A token lock: a random token with a TTL (`SET key token NX PX ttl`), of another library
    /// or a `TokenLock`.
    TokenLock,
    /// A fencing token kept after its lock was released (no key of the lock was seen).
    Fence,
}

impl Class {
    /// Every class, in the order of the report.
    pub const ALL: [Class; 7] = [
        Class::ExpireLock,
        Class::FairQueue,
        Class::RwLock,
        Class::Semaphore,
        Class::LegacyLock,
        Class::TokenLock,
        Class::Fence,
    ];

    /// Its name in the report and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Class::ExpireLock => "expire-lock",
            Class::FairQueue => "fair-queue",
            Class::RwLock => "rw-lock",
            Class::Semaphore => "semaphore",
            Class::LegacyLock => "legacy-lock",
            Class::TokenLock => "token-lock",
            Class::Fence => "fence",
        }
    }
}

/// One lock the scan found.
#[derive(Debug, Clone, Serialize)]
pub struct Found {
    /// What it is.
    pub class: Class,
    /// Its key: the lock key, the queue's key, `<prefix>{name}` of a reader/writer lock, the
    /// holders key of a semaphore.
    pub key: String,
    /// The lock name (this project's kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The key prefix (this project's kinds).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prefix: Option<String>,
    /// The server it lives on (`host:port`).
    pub server: String,
    /// `held`, `expired`, `read-locked`, `write-locked`, `free`, `waiting`, `lapsed`,
    /// `retained`, or `foreign` (a key of the lock holds somebody else's data).
    pub state: String,
    /// Every key of it the scan saw.
    pub keys: Vec<String>,
    /// Nobody can take it without help (see the module docs).
    pub stuck: bool,
    /// Why it is stuck.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stuck_because: Option<String>,
    /// The command that clears it, when stuck.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clear: Option<String>,
    /// What `tairlock inspect` says of it, in one line.
    pub line: String,
    /// The report `tairlock inspect --json` prints (the scan's own reading for the classes
    /// `inspect` has no report for: fair queues, fences).
    pub inspect: serde_json::Value,
}

/// A place in a queue, in [`QueueReport`].
#[derive(Debug, Clone, Serialize)]
pub struct PlaceReport {
    /// The first characters of the waiter's nonce.
    pub nonce: String,
    /// How long its place lasts unless refreshed, ms (0: ran out; null: no entry).
    pub remaining_ms: Option<u64>,
    /// How long ago its place ended, ms (null while it lasts, or without an entry).
    pub ended_ms_ago: Option<u64>,
}

/// A fair mode's queue, as the scan read it.
#[derive(Debug, Clone, Serialize)]
pub struct QueueReport {
    /// The sorted set of arrivals.
    pub queue_key: Option<String>,
    /// The hash of entries.
    pub waiters_key: Option<String>,
    /// How many places it holds.
    pub waiting: u64,
    /// How many of them last (were refreshed within their waiter lease).
    pub live: usize,
    /// The places read (every one of a queue up to 256 places), in arrival order.
    pub places: Vec<PlaceReport>,
    /// The queue keys' TTL, ms (null when one has none: the queue is kept until a fair attempt
    /// reaps it).
    pub ttl_ms: Option<u64>,
}

impl QueueReport {
    fn new(queue: &Queue, now_ms: u64) -> Self {
        let places: Vec<PlaceReport> = queue
            .places()
            .iter()
            .map(|p| PlaceReport {
                nonce: format!("{}…", &p.nonce[..p.nonce.len().min(8)]),
                remaining_ms: p.ends_ms.map(|e| e.saturating_sub(now_ms)),
                ended_ms_ago: p.ends_ms.filter(|e| *e <= now_ms).map(|e| now_ms - e),
            })
            .collect();
        let ttl_ms = if queue.persistent() {
            None
        } else {
            queue
                .order
                .iter()
                .chain(&queue.entries)
                .filter_map(Facts::ttl_ms)
                .max()
        };
        QueueReport {
            queue_key: queue.order.as_ref().map(|f| f.key.clone()),
            waiters_key: queue.entries.as_ref().map(|f| f.key.clone()),
            waiting: queue.len(),
            live: places
                .iter()
                .filter(|p| p.remaining_ms.is_some_and(|r| r > 0))
                .count(),
            places,
            ttl_ms,
        }
    }

    /// In one line, after the queue's key.
    fn line(&self) -> String {
        let kept = match self.ttl_ms {
            Some(ms) => format!("its keys expire in {}", show(Duration::from_millis(ms))),
            None => "its keys have no TTL".to_owned(),
        };
        format!(
            "{} waiter(s) queued, {} live, {kept}",
            self.waiting, self.live
        )
    }
}

/// A fencing token kept after its lock, as the scan read it.
#[derive(Debug, Clone, Serialize)]
pub struct FenceReport {
    /// The fence key.
    pub key: String,
    /// The last fencing token issued.
    pub last_fence: Option<u64>,
    /// The key's TTL, ms (null without one).
    pub ttl_ms: Option<u64>,
}

impl FenceReport {
    fn line(&self) -> String {
        let kept = match self.ttl_ms {
            Some(ms) => format!("kept {} more", show(Duration::from_millis(ms))),
            None => "kept without a TTL".to_owned(),
        };
        format!(
            "{}: last fencing token {}, {kept}; no key of its lock was seen",
            self.key,
            self.last_fence.unwrap_or_default()
        )
    }
}

/// What the reports are judged by: the server's clock, and how the clearing commands connect.
#[derive(Debug, Clone)]
pub(crate) struct Judge {
    /// The server's time, ms since the epoch.
    pub(crate) now_ms: u64,
    /// How long past its end a lease, timestamp or place must be to count as stuck.
    pub(crate) stale_after: Duration,
    /// The connection flags of the clearing commands (` --redis URL`, ...).
    pub(crate) conn: String,
    /// `host:port` of the server.
    pub(crate) server: String,
}

/// `s` as one shell word.
pub(crate) fn sh_quote(s: &str) -> String {
    let plain = !s.is_empty()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.:/@=+,%".contains(&b));
    if plain {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    }
}

fn json(report: &impl Serialize) -> serde_json::Value {
    serde_json::to_value(report).expect("a report serialises")
}

impl Judge {
    fn stale_ms(&self) -> u64 {
        self.stale_after.as_millis() as u64
    }

    /// How long ago `end_ms` passed, when it passed more than `--stale-after` ago.
    fn long_past(&self, end_ms: u64) -> Option<Duration> {
        (end_ms.saturating_add(self.stale_ms()) < self.now_ms)
            .then(|| Duration::from_millis(self.now_ms - end_ms))
    }

    /// Whether `queue` is orphaned: kept for ever, and every place in it ended long ago.
    fn orphaned(&self, queue: &Queue) -> bool {
        let places = queue.places();
        queue.persistent()
            && queue.fully_read()
            && places
                .iter()
                .all(|p: &Place| p.ends_ms.is_none_or(|e| self.long_past(e).is_some()))
    }

    fn unlock(&self, key: &str, flags: &str) -> String {
        format!(
            "tairlock unlock --force {}{flags}{}",
            sh_quote(key),
            self.conn
        )
    }

    fn run(&self, key: &str, flags: &str) -> String {
        format!(
            "tairlock run {}{flags} --wait {CLEAR_WAIT}{} -- true",
            sh_quote(key),
            self.conn
        )
    }

    fn found(&self, class: Class, key: String, named: Option<&Named>, keys: Vec<String>) -> Found {
        Found {
            class,
            key,
            name: named.map(|n| n.name.clone()),
            prefix: named.map(|n| n.prefix.clone()),
            server: self.server.clone(),
            state: String::new(),
            keys,
            stuck: false,
            stuck_because: None,
            clear: None,
            line: String::new(),
            inspect: serde_json::Value::Null,
        }
    }
}

impl Found {
    fn stuck(mut self, because: String, clear: String) -> Self {
        self.stuck = true;
        self.stuck_because = Some(because);
        self.clear = Some(clear);
        self
    }
}

/// Read `item` and judge it: `None` when it is gone since the scan saw it.
///
/// # Errors
///
/// Store errors.
pub(crate) async fn read<S: Store>(
    store: &S,
    item: Item,
    judge: &Judge,
) -> tairlock::Result<Option<Found>> {
    let keys = item.keys();
    match item {
        Item::Expire(named) => expire(store, named, judge).await,
        Item::Fair(named, queue) => Ok(Some(fair(&named, &queue, judge))),
        Item::Rw(named, intent, queue) => rw(store, named, intent, queue, judge).await.map(Some),
        Item::Sem(named, queue) => sem(store, named, queue, judge).await.map(Some),
        Item::Legacy(facts, _) => legacy(store, &facts.key, keys, judge).await,
        Item::Token(facts, _) => token(store, &facts.key, keys, judge).await,
        Item::Fence(facts) => {
            let report = FenceReport {
                key: facts.key.clone(),
                last_fence: facts
                    .short_string()
                    .and_then(tairlock_legacy::wire::parse_value),
                ttl_ms: facts.ttl_ms(),
            };
            let mut found = judge.found(Class::Fence, facts.key.clone(), None, keys);
            found.state = "retained".to_owned();
            found.line = report.line();
            found.inspect = json(&report);
            Ok(Some(found))
        }
    }
}

async fn expire<S: Store>(
    store: &S,
    named: Named,
    judge: &Judge,
) -> tairlock::Result<Option<Found>> {
    let locks = ExpireLock::with_options(
        store.clone(),
        Options::default().keyspace(Keyspace::new(named.prefix.clone())?),
    );
    let report = admin::inspect(&locks, &named.name).await?;
    // Released since, or no longer ours (somebody's data now): not a lock.
    if report.state != "held" {
        return Ok(None);
    }
    let ends = report.expires_at_ms.unwrap_or_default();
    let mut found = judge.found(
        Class::ExpireLock,
        report.key.clone(),
        Some(&named),
        named.keys.clone(),
    );
    found.state = if ends < judge.now_ms {
        "expired"
    } else {
        "held"
    }
    .to_owned();
    found.line = report.line();
    found.inspect = json(&report);
    if let (None, Some(ago), Some(lease)) =
        (report.remaining_ms, judge.long_past(ends), &report.holder)
    {
        let because = format!(
            "the lease ended {} ago and the key has no TTL: a lock whose key exists is \
             held, so no client will ever take it",
            show(ago)
        );
        let clear = judge.unlock(&report.key, &format!(" --if-value {}", sh_quote(lease)));
        found = found.stuck(because, clear);
    }
    Ok(Some(found))
}

fn fair(named: &Named, queue: &Queue, judge: &Judge) -> Found {
    let report = QueueReport::new(queue, judge.now_ms);
    let key = report
        .queue_key
        .clone()
        .or_else(|| report.waiters_key.clone())
        .unwrap_or_default();
    let mut found = judge.found(
        Class::FairQueue,
        key.clone(),
        Some(named),
        named.keys.clone(),
    );
    found.state = if report.live > 0 { "waiting" } else { "lapsed" }.to_owned();
    found.line = format!("{key}: {}", report.line());
    found.inspect = json(&report);
    if judge.orphaned(queue) {
        found = found.stuck(
            "an orphaned queue: its keys have no TTL and every place in it ran out long ago; \
             only a fair attempt on the lock reaps it"
                .to_owned(),
            judge.run(&named.base(), " --fair"),
        );
    }
    found
}

async fn rw<S: Store>(
    store: &S,
    named: Named,
    intent: Option<Facts>,
    queue: Queue,
    judge: &Judge,
) -> tairlock::Result<Found> {
    let locks = RwLock::with_options(
        store.clone(),
        tairlock_rwlock::Options::default().keyspace(Keyspace::new(named.prefix.clone())?),
    );
    let report = rw_inspect::inspect(&locks, &named.name).await?;
    let mut found = judge.found(
        Class::RwLock,
        named.base(),
        Some(&named),
        named.keys.clone(),
    );
    found.state = report.state.clone();
    found.line = report.line();
    let mut because = Vec::new();
    if let Some(w) = &report.writer
        && w.remaining_ms.is_none()
        && let Some(ago) = judge.long_past(w.expires_at_ms)
    {
        because.push(format!(
            "the writer's lease ended {} ago and its key has no TTL",
            show(ago)
        ));
    }
    if report.intent.is_some() && intent.is_some_and(|f| f.ttl == Ttl::Persistent) {
        because
            .push("a waiting writer's intent has no TTL: new readers stay out for ever".to_owned());
    }
    let held = !because.is_empty();
    if judge.orphaned(&queue) {
        because.push(
            "an orphaned fair writers' queue: its keys have no TTL and every place in it ran \
             out long ago"
                .to_owned(),
        );
    }
    found.inspect = json(&report);
    if !because.is_empty() {
        let clear = if held {
            judge.unlock(&named.base(), " --rw")
        } else {
            judge.run(&named.base(), " --write --fair")
        };
        found = found.stuck(because.join("; "), clear);
    }
    Ok(found)
}

async fn sem<S: Store>(
    store: &S,
    named: Named,
    queue: Queue,
    judge: &Judge,
) -> tairlock::Result<Found> {
    let keyspace = Keyspace::new(named.prefix.clone())?;
    let report = sem_inspect::inspect(store.clone(), keyspace, &named.name).await?;
    let mut found = judge.found(
        Class::Semaphore,
        report.holders_key.clone(),
        Some(&named),
        named.keys.clone(),
    );
    found.state = report.state.clone();
    found.line = report.line();
    let mut inspect = json(&report);
    if !queue.is_empty() {
        let queued = QueueReport::new(&queue, judge.now_ms);
        let _ = write!(found.line, "; fair queue: {}", queued.line());
        inspect["queue"] = json(&queued);
    }
    found.inspect = inspect;
    if judge.orphaned(&queue) {
        // One permit more than the live holders hold fits beside them, whatever the limit of
        // the semaphore's clients.
        let permits = report.in_use.saturating_add(1);
        found = found.stuck(
            "an orphaned fair queue: its keys have no TTL and every place in it ran out long \
             ago; only a fair acquire reaps it"
                .to_owned(),
            judge.run(&named.base(), &format!(" --permits {permits} --fair")),
        );
    }
    Ok(found)
}

async fn legacy<S: Store>(
    store: &S,
    key: &str,
    keys: Vec<String>,
    judge: &Judge,
) -> tairlock::Result<Option<Found>> {
    let report = match legacy_inspect::inspect(store, key).await {
        Ok(report) => report,
        // Somebody's data now.
        Err(e) if e.kind() == ErrorKind::WrongType => return Ok(None),
        Err(e) => return Err(e),
    };
    let (Some(value), Some(ends)) = (report.value.clone(), report.expires_at_ms) else {
        return Ok(None);
    };
    let mut found = judge.found(Class::LegacyLock, key.to_owned(), None, keys);
    found.state = report.state.clone();
    found.line = report.line();
    found.inspect = json(&report);
    // Judged by the server time the report read, as its state.
    let judge_then = Judge {
        now_ms: report.server_time_ms,
        ..judge.clone()
    };
    if report.written_by.as_deref() == Some("original")
        && report.expired == Some(true)
        && let Some(ago) = judge_then.long_past(ends)
    {
        let because = format!(
            "written by an original client (no TTL) and expired {} ago by the server's \
             clock: it never goes by itself",
            show(ago)
        );
        let clear = judge.unlock(key, &format!(" --legacy --if-value {}", sh_quote(&value)));
        found = found.stuck(because, clear);
    }
    Ok(Some(found))
}

async fn token<S: Store>(
    store: &S,
    key: &str,
    keys: Vec<String>,
    judge: &Judge,
) -> tairlock::Result<Option<Found>> {
    let report = token_inspect::inspect(store.clone(), key).await?;
    // Gone since the scan saw it (or another type's now: somebody's data).
    if report.state != "held" {
        return Ok(None);
    }
    let mut found = judge.found(Class::TokenLock, key.to_owned(), None, keys);
    found.state = report.state.clone();
    found.line = report.line();
    found.inspect = json(&report);
    Ok(Some(found))
}

#[cfg(test)]
mod tests {
    use super::sh_quote;

    #[test]
    fn keys_are_quoted_for_the_shell_when_they_need_it() {
        assert_eq!(sh_quote("lock.orderid"), "lock.orderid");
        assert_eq!(sh_quote("tairlock:{a}"), "'tairlock:{a}'");
        assert_eq!(sh_quote("it's"), r"'it'\''s'");
        assert_eq!(sh_quote(""), "''");
    }
}
