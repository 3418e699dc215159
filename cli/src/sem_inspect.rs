//! `tairlock inspect` for semaphores: every live holder with its permits, fencing token and
//! remaining lease.
//!
//! Used for `tairlock inspect --sem NAME`, for a key given with the semaphore's suffix
//! (`tairlock:{NAME}:sem`), and automatically when `NAME`'s plain lock key is absent but its
//! semaphore key exists. The limit is not stored on the server (each client counts against its
//! own, see `tairlock::semaphore`), so the report shows the permits in use, not the free ones.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use tairlock::semaphore::SemaphoreInspection;
use tairlock::{Keyspace, Semaphore, SemaphoreOptions, Store};

/// The suffixes of a semaphore's keys.
const SUFFIXES: [&str; 4] = [":sem", ":sem:h", ":sem:fence", ":sem:n"];

/// One live holder, in [`SemInspectReport`].
#[derive(Debug, Serialize)]
pub struct HolderReport {
    /// The first characters of the holder's nonce (the whole nonce is its credential).
    pub nonce: String,
    /// The permits it holds.
    pub permits: u32,
    /// Its fencing token.
    pub fence: u64,
    /// Its remaining lease, ms (server time).
    pub remaining_ms: u64,
}

/// What `inspect --sem --json` prints.
#[derive(Debug, Serialize)]
pub struct SemInspectReport {
    /// The semaphore's name.
    pub name: String,
    /// `free`, `held`, or `foreign` (a key holds somebody's data).
    pub state: String,
    /// The holders key.
    pub holders_key: String,
    /// The live holders, the earliest lease end first.
    pub holders: Vec<HolderReport>,
    /// The permits they hold.
    pub in_use: u32,
    /// The last fencing token issued, while retained.
    pub last_fence: Option<u64>,
    /// The limit stored with the semaphore, while kept.
    pub limit: Option<u32>,
}

impl SemInspectReport {
    /// Build the report from an inspection.
    pub fn new(name: &str, i: &SemaphoreInspection) -> Self {
        let state = if i.foreign {
            "foreign"
        } else if i.holders.is_empty() {
            "free"
        } else {
            "held"
        };
        SemInspectReport {
            name: name.to_owned(),
            state: state.to_owned(),
            holders_key: i.key.clone(),
            holders: i
                .holders
                .iter()
                .map(|h| HolderReport {
                    nonce: format!("{}…", &h.nonce[..h.nonce.len().min(8)]),
                    permits: h.permits,
                    fence: h.fence,
                    remaining_ms: h.remaining.as_millis() as u64,
                })
                .collect(),
            in_use: i.in_use,
            last_fence: i.last_fence,
            limit: i.limit,
        }
    }

    /// Human-readable lines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "semaphore   {} (key {})", self.name, self.holders_key);
        let _ = writeln!(out, "state       {}", self.state);
        let _ = writeln!(
            out,
            "holders     {} live, {} permits in use",
            self.holders.len(),
            self.in_use
        );
        if let Some(limit) = self.limit {
            let _ = writeln!(out, "limit       {limit}");
        }
        for h in &self.holders {
            let _ = writeln!(
                out,
                "  {:<12} {} permit(s), fence {}, remaining {:?}",
                h.nonce,
                h.permits,
                h.fence,
                Duration::from_millis(h.remaining_ms)
            );
        }
        if let Some(f) = self.last_fence {
            let _ = writeln!(out, "last fence  {f}");
        }
        if self.state == "foreign" {
            let _ = writeln!(
                out,
                "foreign     a key of the semaphore holds somebody else's data"
            );
        }
        out
    }

    /// The report in one line, as `tairlock scan` lists it.
    pub fn line(&self) -> String {
        let mut line = format!(
            "{}: {}, {} live holder(s), {} permit(s) in use",
            self.holders_key,
            self.state,
            self.holders.len(),
            self.in_use
        );
        if let Some(f) = self.last_fence {
            let _ = write!(line, ", last fence {f}");
        }
        if self.state == "foreign" {
            line.push_str(", a key of the semaphore holds somebody else's data");
        }
        line
    }
}

/// Whether `name` looks like a semaphore: its plain lock key is absent and its holders key
/// exists.
///
/// # Errors
///
/// Invalid name; store errors.
pub async fn detect<S: Store>(
    store: &S,
    keyspace: &Keyspace,
    name: &str,
) -> tairlock::Result<bool> {
    Ok(store.key_type(&keyspace.key(name, "")?).await? == "none"
        && store.key_type(&keyspace.key(name, ":sem")?).await? != "none")
}

/// Split a key argument into (prefix, name, whether it named a semaphore key): `prefix{NAME}:sem`
/// (or another of its suffixes), else `None`.
pub fn split_key(key: &str) -> Option<(String, String)> {
    let (open, close) = (key.find('{')?, key.rfind('}')?);
    (open < close && SUFFIXES.contains(&&key[close + 1..]))
        .then(|| (key[..open].to_owned(), key[open + 1..close].to_owned()))
}

/// A snapshot of the semaphore `name`: its holders with their permits, fencing tokens and
/// remaining leases.
///
/// # Errors
///
/// Invalid name; store errors.
pub async fn inspect<S: Store>(
    store: S,
    keyspace: Keyspace,
    name: &str,
) -> tairlock::Result<SemInspectReport> {
    // The limit plays no part in a snapshot.
    let sem = Semaphore::with_options(store, 1, SemaphoreOptions::default().keyspace(keyspace));
    Ok(SemInspectReport::new(name, &sem.inspect(name).await?))
}

#[cfg(test)]
mod tests {
    use super::split_key;

    #[test]
    fn semaphore_keys_split_into_prefix_and_name() {
        assert_eq!(
            split_key("tairlock:{pool}:sem"),
            Some(("tairlock:".into(), "pool".into()))
        );
        assert_eq!(
            split_key("app:{pool}:sem:fence"),
            Some(("app:".into(), "pool".into()))
        );
        assert_eq!(split_key("tairlock:{pool}"), None);
        assert_eq!(split_key("pool"), None);
    }
}
