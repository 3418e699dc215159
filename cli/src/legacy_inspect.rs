//! `tairlock inspect` for legacy `SETNX`/`GETSET` keys: the bare timestamp the key holds, the
//! expiry it encodes judged by the server's clock, and what the safe replacements (`WatchLock`,
//! `ScriptedLock` of `tairlock-legacy`) keep besides: the key's TTL and the fencing token in the
//! fence key.
//!
//! Used for `tairlock inspect --legacy KEY` (the key exactly as the old code names it, e.g.
//! `lock.orderid`), and automatically when KEY itself holds a legacy timestamp while the expire
//! lock of that name is absent (and no reader/writer lock or semaphore of that name exists).
//!
//! The wire format carries nothing but the timestamp (`now + timeout + 1`, in seconds as the
//! original or in milliseconds: see `tairlock_legacy::wire`): no owner, no nonce. The safe
//! replacements tell their own grant by three things together, all shown here: the **value**,
//! the key's **TTL** (they always set one; `SETNX` and `GETSET` of old clients never can, so a
//! key without one was written last by an old client), and the **fencing token** in
//! [`fence_key`], which only they write.
//!
//! The unit is read off the value: the timestamps [`plausible_timestamp`] accepts in seconds
//! (2000 to ten years from now) and in milliseconds do not overlap.
//!
//! A key holding anything else (another type, a string that is not such a timestamp) is an
//! error ([`ErrorKind::WrongType`]), like a key of any other lock kind holding user data.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use tairlock::{Error, ErrorKind, Store, Ttl};
use tairlock_legacy::Unit;
use tairlock_legacy::wire::{fence_key, parse_value};

use crate::duration::show;
use crate::unlock::plausible_timestamp;

/// The smallest millisecond value [`plausible_timestamp`] accepts (2000-01-01 in ms); every
/// plausible seconds value is below it.
const Y2K_MS: u64 = 946_684_800_000;

/// What `inspect --legacy --json` prints.
#[derive(Debug, Serialize)]
pub struct LegacyInspectReport {
    /// The lock key, exactly as named.
    pub key: String,
    /// `free` (no key), `held` (its timestamp has not passed by the server's clock) or
    /// `expired` (it has: any client may take it).
    pub state: String,
    /// The raw value of the key.
    pub value: Option<String>,
    /// The unit of the timestamp, read off its size: `s` or `ms`.
    pub unit: Option<String>,
    /// When the timestamp expires, ms since the epoch (the start of unit `value + 1`).
    pub expires_at_ms: Option<u64>,
    /// The server's `TIME`, ms since the epoch, read after the value.
    pub server_time_ms: u64,
    /// Whether the timestamp has passed by the server's clock (`now > value`, in whole units).
    pub expired: Option<bool>,
    /// How long the timestamp has left by the server's clock, ms (0 once expired).
    pub remaining_ms: Option<u64>,
    /// The key's server TTL, ms (null without one).
    pub key_ttl_ms: Option<u64>,
    /// Who wrote the key last: `safe` (a `WatchLock` or `ScriptedLock`: the key has a TTL) or
    /// `original` (an old `SETNX`/`GETSET` client, or `GetSetLock`: no TTL).
    pub written_by: Option<String>,
    /// The companion key holding the last fencing token (written by the safe locks only).
    pub fence_key: String,
    /// The last fencing token issued on this key, while the fence key is retained.
    pub last_fence: Option<u64>,
    /// The holder's fencing token: the last one, when a safe lock wrote the key last (an
    /// old client's holding has none).
    pub fence: Option<u64>,
}

impl LegacyInspectReport {
    /// Human-readable lines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "legacy lock {}", self.key);
        let _ = writeln!(out, "state       {}", self.state);
        if let (Some(value), Some(unit)) = (&self.value, &self.unit) {
            let unit = if unit == "s" {
                "seconds"
            } else {
                "milliseconds"
            };
            let _ = writeln!(out, "value       {value} (a Unix timestamp in {unit})");
        }
        if let Some(at) = self.expires_at_ms {
            let _ = writeln!(out, "expires at  {at} ms since the epoch");
        }
        let _ = writeln!(
            out,
            "server time {} ms since the epoch",
            self.server_time_ms
        );
        if let Some(ms) = self.remaining_ms {
            if self.expired == Some(true) {
                let _ = writeln!(out, "remaining   none: expired by the server's clock");
            } else {
                let _ = writeln!(out, "remaining   {:?}", Duration::from_millis(ms));
            }
        }
        match (self.written_by.as_deref(), self.key_ttl_ms) {
            (Some("safe"), Some(ttl)) => {
                let _ = writeln!(
                    out,
                    "written by  a safe lock (WatchLock/ScriptedLock): key TTL {:?}",
                    Duration::from_millis(ttl)
                );
            }
            (Some(_), _) => {
                let _ = writeln!(
                    out,
                    "written by  an original SETNX/GETSET client: the key has no TTL"
                );
            }
            _ => {}
        }
        if let Some(f) = self.fence {
            let _ = writeln!(out, "fence       {f}");
        }
        match self.last_fence {
            Some(f) => {
                let _ = writeln!(out, "last fence  {f} (key {})", self.fence_key);
            }
            None => {
                let _ = writeln!(out, "last fence  none (key {})", self.fence_key);
            }
        }
        out
    }

    /// The report in one line, as `tairlock scan` lists it.
    pub fn line(&self) -> String {
        let (Some(value), Some(unit)) = (&self.value, &self.unit) else {
            return format!("{}: free", self.key);
        };
        let when = match (self.expired, self.expires_at_ms) {
            (Some(true), Some(at)) => format!(
                "expired {} ago by the server's clock",
                show(Duration::from_millis(
                    self.server_time_ms.saturating_sub(at)
                ))
            ),
            _ => format!(
                "expires in {} by the server's clock",
                show(Duration::from_millis(self.remaining_ms.unwrap_or_default()))
            ),
        };
        let writer = match (self.written_by.as_deref(), self.key_ttl_ms) {
            (Some("safe"), Some(ttl)) => format!(
                "written by a safe lock (key TTL {})",
                show(Duration::from_millis(ttl))
            ),
            (Some(_), _) => "written by an original SETNX/GETSET client (no TTL)".to_owned(),
            _ => "gone while it was read".to_owned(),
        };
        let mut line = format!(
            "{}: {}, timestamp {value} ({unit}), {when}, {writer}",
            self.key, self.state
        );
        if let Some(f) = self.last_fence {
            let _ = write!(line, ", last fence {f}");
        }
        line
    }
}

/// The unit of a plausible timestamp, by its size.
fn unit_of(value: u64) -> Unit {
    if value >= Y2K_MS {
        Unit::Millis
    } else {
        Unit::Seconds
    }
}

/// The error for a key that holds something other than a legacy timestamp.
fn not_legacy(key: &str, what: &str) -> Error {
    Error::new(
        ErrorKind::WrongType,
        format!(
            "{key} is not a legacy lock: it holds {what}, not a Unix timestamp in seconds or \
             milliseconds since 2000"
        ),
    )
}

/// Whether `key` (exactly as named) holds a legacy lock's timestamp while `expire_key`, the
/// expire lock of the same name, is absent (or is `key` itself: a bare timestamp is no expire
/// lock's lease).
///
/// # Errors
///
/// Store errors.
pub async fn detect<S: Store>(
    store: &S,
    key: &str,
    expire_key: Option<&str>,
) -> tairlock::Result<bool> {
    if key.is_empty() {
        return Ok(false);
    }
    if let Some(expire_key) = expire_key
        && expire_key != key
        && store.key_type(expire_key).await? != "none"
    {
        return Ok(false);
    }
    if store.key_type(key).await? != "string" {
        return Ok(false);
    }
    Ok(store
        .get(key)
        .await?
        .is_some_and(|raw| parse_value(&raw).is_some_and(plausible_timestamp)))
}

/// A snapshot of the legacy lock at `key`: its timestamp, the expiry it encodes by the server's
/// clock, the key's TTL and the last fencing token. Several reads (`TYPE`, `GET`, `TIME`,
/// `PTTL`, `GET` of the fence key), not one atomic snapshot.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`] for an empty key; [`ErrorKind::WrongType`] when the key holds
/// anything but a legacy timestamp (another type, or a string that is not a Unix time in
/// seconds or milliseconds since 2000); store errors.
pub async fn inspect<S: Store>(store: &S, key: &str) -> tairlock::Result<LegacyInspectReport> {
    if key.is_empty() {
        return Err(Error::new(ErrorKind::InvalidInput, "lock key is empty"));
    }
    let key_type = store.key_type(key).await?;
    let raw = match key_type.as_str() {
        "none" => None,
        "string" => store.get(key).await?,
        other => return Err(not_legacy(key, &format!("a {other}"))),
    };
    let value = match &raw {
        Some(raw) => Some(
            parse_value(raw)
                .filter(|v| plausible_timestamp(*v))
                .ok_or_else(|| not_legacy(key, &format!("{:?}", String::from_utf8_lossy(raw))))?,
        ),
        None => None,
    };
    let now = store.time().await?;
    let fence_key = fence_key(key);
    let last_fence = store
        .get(&fence_key)
        .await?
        .and_then(|raw| std::str::from_utf8(&raw).ok()?.parse::<u64>().ok());
    let mut report = LegacyInspectReport {
        key: key.to_owned(),
        state: "free".to_owned(),
        value: None,
        unit: None,
        expires_at_ms: None,
        server_time_ms: now.as_millis() as u64,
        expired: None,
        remaining_ms: None,
        key_ttl_ms: None,
        written_by: None,
        fence_key,
        last_fence,
        fence: None,
    };
    let Some(value) = value else {
        return Ok(report);
    };
    let unit = unit_of(value);
    let expired = unit.is_expired(value, now);
    let ttl = store.pttl(key).await?;
    report.state = if expired { "expired" } else { "held" }.to_owned();
    report.value = Some(value.to_string());
    report.unit = Some(if unit == Unit::Seconds { "s" } else { "ms" }.to_owned());
    report.expires_at_ms = Some(unit.expires_at(value).as_millis() as u64);
    report.expired = Some(expired);
    report.remaining_ms = Some(unit.remaining(value, now).as_millis() as u64);
    match ttl {
        Ttl::Expires(d) => {
            report.key_ttl_ms = Some(d.as_millis() as u64);
            report.written_by = Some("safe".to_owned());
            report.fence = last_fence;
        }
        // Gone between the reads: what was read stays the report.
        Ttl::Missing => {}
        Ttl::Persistent => report.written_by = Some("original".to_owned()),
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unit_is_read_off_the_size_of_a_plausible_timestamp() {
        assert_eq!(unit_of(1_764_000_000), Unit::Seconds);
        assert_eq!(unit_of(1_764_000_000_123), Unit::Millis);
        assert!(!plausible_timestamp(Y2K_MS - 1));
        assert!(plausible_timestamp(Y2K_MS));
    }
}
