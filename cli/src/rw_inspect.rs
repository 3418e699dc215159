//! `tairlock inspect` for reader/writer locks: the writer, every live reader with its remaining
//! lease, and a waiting writer's intent.
//!
//! Used for `tairlock inspect --rw NAME`, for a key given with a reader/writer suffix
//! (`tairlock:{NAME}:r`), and automatically when `NAME`'s plain lock key is absent but one of
//! its reader/writer keys exists.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use tairlock::{Keyspace, Store, Ttl};
use tairlock_rwlock::{RwInspection, RwLock};

/// The suffixes of a reader/writer lock's keys (the scripted lock's and the two-step recipe's).
const SUFFIXES: [&str; 7] = [":w", ":r", ":wi", ":fence", ":rc", ":wq", ":ww"];

/// The writer, in [`RwInspectReport`].
#[derive(Debug, Serialize)]
pub struct WriterReport {
    /// The writer's lease value.
    pub lease: String,
    /// Its fencing token.
    pub fence: u64,
    /// Server-time expiry, ms since the epoch.
    pub expires_at_ms: u64,
    /// Remaining time, ms (null without expiry).
    pub remaining_ms: Option<u64>,
}

/// One live reader, in [`RwInspectReport`].
#[derive(Debug, Serialize)]
pub struct ReaderReport {
    /// The first characters of the reader's nonce (the whole nonce is its credential).
    pub nonce: String,
    /// Server-time expiry of its lease, ms since the epoch.
    pub expires_at_ms: u64,
    /// Remaining lease, ms.
    pub remaining_ms: u64,
}

/// A waiting writer's intent, in [`RwInspectReport`].
#[derive(Debug, Serialize)]
pub struct IntentReport {
    /// The first characters of the waiting writer's nonce.
    pub nonce: String,
    /// How long the intent lasts unless re-asserted, ms.
    pub remaining_ms: u64,
}

/// A writer in the fair queue, in [`RwInspectReport`].
#[derive(Debug, Serialize)]
pub struct QueuedReport {
    /// The first characters of the waiting writer's nonce.
    pub nonce: String,
    /// How long its place lasts unless refreshed, ms (0: ran out, it will be skipped).
    pub remaining_ms: u64,
}

/// What `inspect --rw --json` prints.
#[derive(Debug, Serialize)]
pub struct RwInspectReport {
    /// The lock name.
    pub name: String,
    /// `free`, `read-locked`, `write-locked`, or `foreign` (a key holds somebody's data).
    pub state: String,
    /// The writer key.
    pub writer_key: String,
    /// The readers key.
    pub readers_key: String,
    /// The intent key.
    pub intent_key: String,
    /// The writer, when one holds the lock.
    pub writer: Option<WriterReport>,
    /// The live readers, earliest expiry first.
    pub readers: Vec<ReaderReport>,
    /// A waiting writer's intent, if one is up (new readers stay out while it is).
    pub intent: Option<IntentReport>,
    /// The fair writers' queue, in arrival order (`Options::fair`).
    pub queue: Vec<QueuedReport>,
    /// The last fencing token issued, while retained.
    pub last_fence: Option<u64>,
    /// Keys that hold somebody else's data: `key (type)`.
    pub foreign: Vec<String>,
}

fn short(nonce: &str) -> String {
    format!("{}…", &nonce[..nonce.len().min(8)])
}

impl RwInspectReport {
    /// Build the report from an inspection.
    pub fn new(name: &str, i: &RwInspection) -> Self {
        let state = if !i.foreign.is_empty() {
            "foreign"
        } else if i.writer.is_some() {
            "write-locked"
        } else if !i.readers.is_empty() {
            "read-locked"
        } else {
            "free"
        };
        RwInspectReport {
            name: name.to_owned(),
            state: state.to_owned(),
            writer_key: i.keys.writer.clone(),
            readers_key: i.keys.readers.clone(),
            intent_key: i.keys.intent.clone(),
            writer: i.writer.as_ref().map(|l| WriterReport {
                lease: l.value().to_owned(),
                fence: l.fence(),
                expires_at_ms: l.expires_at().as_millis() as u64,
                remaining_ms: match i.writer_ttl {
                    Ttl::Expires(d) => Some(d.as_millis() as u64),
                    _ => None,
                },
            }),
            readers: i
                .readers
                .iter()
                .map(|r| ReaderReport {
                    nonce: short(&r.nonce),
                    expires_at_ms: r.expires_at.as_millis() as u64,
                    remaining_ms: r.remaining.as_millis() as u64,
                })
                .collect(),
            intent: i.intent.as_ref().map(|w| IntentReport {
                nonce: short(&w.nonce),
                remaining_ms: w.remaining.as_millis() as u64,
            }),
            queue: i
                .queue
                .iter()
                .map(|q| QueuedReport {
                    nonce: short(&q.nonce),
                    remaining_ms: q.remaining.as_millis() as u64,
                })
                .collect(),
            last_fence: i.last_fence,
            foreign: i
                .foreign
                .iter()
                .map(|(k, t)| format!("{k} ({t})"))
                .collect(),
        }
    }

    /// Human-readable lines.
    pub fn text(&self) -> String {
        let ms = |ms: u64| format!("{:?}", Duration::from_millis(ms));
        let mut out = String::new();
        let _ = writeln!(
            out,
            "rw lock     {} (keys {}, {}, {})",
            self.name, self.writer_key, self.readers_key, self.intent_key
        );
        let _ = writeln!(out, "state       {}", self.state);
        match &self.writer {
            Some(w) => {
                let remaining = w.remaining_ms.map_or("never expires".to_owned(), ms);
                let _ = writeln!(
                    out,
                    "writer      fence {}, expires at {} ms (server time), remaining {remaining}",
                    w.fence, w.expires_at_ms
                );
            }
            None => {
                let _ = writeln!(out, "writer      none");
            }
        }
        let _ = writeln!(out, "readers     {} live", self.readers.len());
        for r in &self.readers {
            let _ = writeln!(
                out,
                "  {:<12} remaining {} (expires at {} ms)",
                r.nonce,
                ms(r.remaining_ms),
                r.expires_at_ms
            );
        }
        match &self.intent {
            Some(i) => {
                let _ = writeln!(
                    out,
                    "intent      a writer waits ({}); new readers stay out; lapses in {}",
                    i.nonce,
                    ms(i.remaining_ms)
                );
            }
            None => {
                let _ = writeln!(out, "intent      none");
            }
        }
        if !self.queue.is_empty() {
            let _ = writeln!(
                out,
                "queue       {} fair writer(s), first come first served",
                self.queue.len()
            );
            for q in &self.queue {
                let place = if q.remaining_ms == 0 {
                    "place ran out (skipped)".to_owned()
                } else {
                    format!("place lasts {}", ms(q.remaining_ms))
                };
                let _ = writeln!(out, "  {:<12} {place}", q.nonce);
            }
        }
        if let Some(f) = self.last_fence {
            let _ = writeln!(out, "last fence  {f}");
        }
        for f in &self.foreign {
            let _ = writeln!(out, "foreign     {f} holds somebody else's data");
        }
        out
    }

    /// The report in one line, as `tairlock scan` lists it.
    pub fn line(&self) -> String {
        let ms = |ms: u64| format!("{:?}", Duration::from_millis(ms));
        let base = self
            .writer_key
            .strip_suffix(":w")
            .unwrap_or(&self.writer_key);
        let mut parts = vec![self.state.clone()];
        parts.push(match &self.writer {
            Some(w) => format!(
                "writer fence {}, {}",
                w.fence,
                w.remaining_ms.map_or(
                    "the writer key has no TTL: it never expires".to_owned(),
                    |r| format!("remaining {}", ms(r))
                )
            ),
            None => "no writer".to_owned(),
        });
        parts.push(format!("{} live reader(s)", self.readers.len()));
        if let Some(i) = &self.intent {
            parts.push(format!("a writer waits ({})", i.nonce));
        }
        if !self.queue.is_empty() {
            let live = self.queue.iter().filter(|q| q.remaining_ms > 0).count();
            parts.push(format!(
                "{} fair writer(s) queued, {live} live",
                self.queue.len()
            ));
        }
        if let Some(f) = self.last_fence {
            parts.push(format!("last fence {f}"));
        }
        for f in &self.foreign {
            parts.push(format!("{f} holds somebody else's data"));
        }
        format!("{base}: {}", parts.join(", "))
    }
}

/// Inspect the reader/writer lock `name`.
///
/// # Errors
///
/// Invalid name; store errors.
pub async fn inspect<S: Store>(rw: &RwLock<S>, name: &str) -> tairlock::Result<RwInspectReport> {
    Ok(RwInspectReport::new(name, &rw.inspect(name).await?))
}

/// Whether `name` looks like a reader/writer lock: its plain lock key is absent and one of its
/// reader/writer keys exists.
///
/// # Errors
///
/// Invalid name; store errors.
pub async fn detect<S: Store>(
    store: &S,
    keyspace: &Keyspace,
    name: &str,
) -> tairlock::Result<bool> {
    if store.key_type(&keyspace.key(name, "")?).await? != "none" {
        return Ok(false);
    }
    for suffix in SUFFIXES {
        if store.key_type(&keyspace.key(name, suffix)?).await? != "none" {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Split a key argument into (prefix, name, whether it named a reader/writer key): `NAME`,
/// `prefix{NAME}`, or `prefix{NAME}:r` (any reader/writer suffix).
pub fn split_key(key: &str, default_prefix: &str) -> (String, String, bool) {
    if let (Some(open), Some(close)) = (key.find('{'), key.rfind('}'))
        && open < close
    {
        let rest = &key[close + 1..];
        if rest.is_empty() || SUFFIXES.contains(&rest) {
            return (
                key[..open].to_owned(),
                key[open + 1..close].to_owned(),
                !rest.is_empty(),
            );
        }
    }
    (default_prefix.to_owned(), key.to_owned(), false)
}

#[cfg(test)]
mod tests {
    use super::{QueuedReport, RwInspectReport, split_key};

    #[test]
    fn the_fair_writers_queue_is_listed_in_arrival_order() {
        let report = RwInspectReport {
            name: "doc".into(),
            state: "write-locked".into(),
            writer_key: "tairlock:{doc}:w".into(),
            readers_key: "tairlock:{doc}:r".into(),
            intent_key: "tairlock:{doc}:wi".into(),
            writer: None,
            readers: Vec::new(),
            intent: None,
            queue: vec![
                QueuedReport {
                    nonce: "aaaa…".into(),
                    remaining_ms: 1500,
                },
                QueuedReport {
                    nonce: "bbbb…".into(),
                    remaining_ms: 0,
                },
            ],
            last_fence: None,
            foreign: Vec::new(),
        };
        let text = report.text();
        assert!(text.contains("queue       2 fair writer(s)"), "{text}");
        let first = text.find("aaaa… ").expect("first listed");
        let second = text.find("bbbb… ").expect("second listed");
        assert!(first < second, "{text}");
        assert!(text.contains("place lasts 1.5s"), "{text}");
        assert!(text.contains("place ran out (skipped)"), "{text}");
    }

    #[test]
    fn keys_split_into_prefix_and_name() {
        assert_eq!(
            split_key("orders", "tairlock:"),
            ("tairlock:".into(), "orders".into(), false)
        );
        assert_eq!(
            split_key("app:{orders}", "tairlock:"),
            ("app:".into(), "orders".into(), false)
        );
        assert_eq!(
            split_key("tairlock:{orders}:r", "x:"),
            ("tairlock:".into(), "orders".into(), true)
        );
        assert_eq!(
            split_key("tairlock:{orders}:other", "x:"),
            ("x:".into(), "tairlock:{orders}:other".into(), false)
        );
    }
}
