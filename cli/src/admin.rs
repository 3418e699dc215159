//! `tairlock inspect KEY` and `tairlock unlock --force KEY`.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use tairlock::{ExpireLock, Inspection, Store, Ttl};

/// What `inspect --json` prints.
#[derive(Debug, Serialize)]
pub struct InspectReport {
    /// The lock name.
    pub name: String,
    /// The lock key.
    pub key: String,
    /// `free`, `held` or `foreign` (the key holds data that is not ours).
    pub state: String,
    /// The key's Redis type.
    pub key_type: String,
    /// The holder's lease value.
    pub holder: Option<String>,
    /// The holder's fencing token.
    pub fence: Option<u64>,
    /// Server-time expiry of the holder's lease, ms since the epoch.
    pub expires_at_ms: Option<u64>,
    /// Remaining time, ms (null when free or without expiry).
    pub remaining_ms: Option<u64>,
    /// The key holds a lease but has no expiry (removed by `PERSIST`, or a restore without a
    /// TTL): it stays held until released or force-unlocked.
    pub no_expiry: bool,
    /// The last fencing token issued, while retained.
    pub last_fence: Option<u64>,
}

impl InspectReport {
    /// Build the report from an inspection.
    pub fn new(name: &str, i: &Inspection) -> Self {
        let state = if i.foreign {
            "foreign"
        } else if i.holder.is_some() {
            "held"
        } else {
            "free"
        };
        InspectReport {
            name: name.to_owned(),
            key: i.key.clone(),
            state: state.to_owned(),
            key_type: i.key_type.clone(),
            holder: i.holder.as_ref().map(|l| l.value().to_owned()),
            fence: i.holder.as_ref().map(|l| l.fence()),
            expires_at_ms: i.holder.as_ref().map(|l| l.expires_at().as_millis() as u64),
            remaining_ms: match i.ttl {
                Ttl::Expires(d) => Some(d.as_millis() as u64),
                _ => None,
            },
            no_expiry: i.no_expiry,
            last_fence: i.last_fence,
        }
    }

    /// Human-readable lines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "lock        {} (key {})", self.name, self.key);
        match self.state.as_str() {
            "free" => {
                let _ = writeln!(out, "state       free");
            }
            "foreign" => {
                let _ = writeln!(
                    out,
                    "state       not a tairlock lock: the key holds a {} of somebody else's",
                    self.key_type
                );
            }
            _ => {
                let _ = writeln!(out, "state       held");
                if let Some(f) = self.fence {
                    let _ = writeln!(out, "fence       {f}");
                }
                if let Some(at) = self.expires_at_ms {
                    let _ = writeln!(out, "expires at  {at} ms since the epoch (server time)");
                }
                if let Some(ms) = self.remaining_ms {
                    let _ = writeln!(out, "remaining   {:?}", Duration::from_millis(ms));
                } else if self.no_expiry {
                    let _ = writeln!(
                        out,
                        "remaining   no expiry: the key has no TTL (PERSIST, or a restore without \
                         one); held until released or force-unlocked"
                    );
                }
            }
        }
        if let Some(f) = self.last_fence {
            let _ = writeln!(out, "last fence  {f}");
        }
        out
    }
}

/// Inspect the lock `name`.
///
/// # Errors
///
/// Invalid name; store errors.
pub async fn inspect<S: Store>(
    locks: &ExpireLock<S>,
    name: &str,
) -> tairlock::Result<InspectReport> {
    Ok(InspectReport::new(name, &locks.inspect(name).await?))
}
