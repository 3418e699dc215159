//! `tairlock inspect` for token locks: a plain key holding a random token with a TTL, the format
//! of redis-py's `Lock`, node `redlock`, `redis-semaphore`'s mutex, redsync, and of
//! `tairlock::TokenLock` (see `tairlock::token`), read with [`TokenLock::inspect`].
//!
//! Used for `tairlock inspect --token KEY` (the key exactly as the other library names it), and
//! automatically when KEY itself holds a string of a token's shape ([`token_shaped`]) and no lock
//! of this project has that name. `tairlock scan` reports every token lock it finds with the
//! same report ([`TokenInspectReport::line`]).
//!
//! The format carries nothing but the token: the report shows it, its length and what it looks
//! like (`hex`: redis-py's `uuid1().hex`, redlock's random bytes, a `TokenLock`'s; `uuid`:
//! redis-semaphore's; `base64`: redsync's), the key's TTL, and the last fencing token a
//! `TokenLock` issued for the key, which only `TokenLock`s keep.

use std::fmt::Write as _;
use std::time::Duration;

use serde::Serialize;
use tairlock::{Store, TokenInspection, TokenLock, Ttl};

use crate::duration::show;

/// The longest token recognised by its shape.
pub const TOKEN_MAX: usize = 128;

/// The shortest: a token is random, and 16 characters is 64 bits of hex.
pub const TOKEN_MIN: usize = 16;

/// Whether a string value has a token's shape: 16 to 128 characters of letters, digits and
/// `-_+/=.:@`, not all digits (a legacy timestamp), not an expire lock's lease (`tl1:`).
pub fn token_shaped(value: &[u8]) -> bool {
    (TOKEN_MIN..=TOKEN_MAX).contains(&value.len())
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"-_+/=.:@".contains(b))
        && !value.iter().all(u8::is_ascii_digit)
        && !value.starts_with(tairlock::scripts::LEASE_PREFIX.as_bytes())
}

/// What a token looks like: `hex`, `uuid`, `base64` or `token`.
pub fn token_format(value: &[u8]) -> &'static str {
    let hex = |b: &[u8]| !b.is_empty() && b.iter().all(u8::is_ascii_hexdigit);
    let uuid = value.len() == 36
        && value
            .split(|b| *b == b'-')
            .map(<[u8]>::len)
            .eq([8, 4, 4, 4, 12])
        && hex(&value
            .iter()
            .copied()
            .filter(|b| *b != b'-')
            .collect::<Vec<_>>());
    if hex(value) {
        "hex"
    } else if uuid {
        "uuid"
    } else if value.len().is_multiple_of(4)
        && value
            .iter()
            .all(|b| b.is_ascii_alphanumeric() || b"+/=".contains(b))
    {
        "base64"
    } else {
        "token"
    }
}

/// What `inspect --token --json` prints (and `scan --json` for each token lock).
#[derive(Debug, Clone, Serialize)]
pub struct TokenInspectReport {
    /// The lock key, exactly as named.
    pub key: String,
    /// `free`, `held`, or `foreign` (the key holds another type than a string).
    pub state: String,
    /// The key's Redis type.
    pub key_type: String,
    /// The holder's token (lossy UTF-8 for a value that is not text).
    pub token: Option<String>,
    /// The token's length in bytes.
    pub length: Option<usize>,
    /// What the token looks like: `hex`, `uuid`, `base64` or `token`.
    pub format: Option<String>,
    /// The key's remaining time to live, ms (null when free or without one).
    pub remaining_ms: Option<u64>,
    /// Whether the key has no TTL: held until its holder deletes it (redis-py's
    /// `Lock(timeout=None)`; a crashed holder leaves it for ever).
    pub no_ttl: bool,
    /// The fence key a `TokenLock` keeps beside the key.
    pub fence_key: String,
    /// The last fencing token a `TokenLock` issued for the key, while it is retained.
    pub last_fence: Option<u64>,
}

impl TokenInspectReport {
    /// The report of one inspection.
    pub fn new(i: &TokenInspection) -> Self {
        let state = if i.foreign {
            "foreign"
        } else if i.is_held() {
            "held"
        } else {
            "free"
        };
        TokenInspectReport {
            key: i.key.clone(),
            state: state.to_owned(),
            key_type: i.key_type.clone(),
            token: i
                .value
                .as_deref()
                .map(|v| String::from_utf8_lossy(v).into_owned()),
            length: i.value.as_ref().map(Vec::len),
            format: i.value.as_deref().map(|v| token_format(v).to_owned()),
            remaining_ms: match i.ttl {
                Ttl::Expires(d) => Some(d.as_millis() as u64),
                _ => None,
            },
            no_ttl: i.ttl == Ttl::Persistent,
            fence_key: i.fence_key.clone(),
            last_fence: i.last_fence,
        }
    }

    /// Human-readable lines.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "token lock  {}", self.key);
        match self.state.as_str() {
            "free" => {
                let _ = writeln!(out, "state       free");
            }
            "foreign" => {
                let _ = writeln!(
                    out,
                    "state       not a token lock: the key holds a {}",
                    self.key_type
                );
            }
            _ => {
                let _ = writeln!(out, "state       held");
                let _ = writeln!(
                    out,
                    "token       {} ({} characters, {})",
                    self.token.as_deref().unwrap_or_default(),
                    self.length.unwrap_or_default(),
                    self.format.as_deref().unwrap_or("token")
                );
                match self.remaining_ms {
                    Some(ms) => {
                        let _ = writeln!(out, "remaining   {}", show(Duration::from_millis(ms)));
                    }
                    None => {
                        let _ = writeln!(
                            out,
                            "remaining   the key has no TTL: held until its holder deletes it"
                        );
                    }
                }
            }
        }
        match self.last_fence {
            Some(f) => {
                let _ = writeln!(
                    out,
                    "last fence  {f} ({}, kept by tairlock only)",
                    self.fence_key
                );
            }
            None => {
                let _ = writeln!(out, "last fence  none ({} is absent)", self.fence_key);
            }
        }
        out
    }

    /// The report in one line, as `tairlock scan` lists it.
    pub fn line(&self) -> String {
        let fence = self
            .last_fence
            .map_or(String::new(), |f| format!(", last tairlock fence {f}"));
        match self.state.as_str() {
            "free" => format!("{}: free{fence}", self.key),
            "foreign" => format!("{}: not a token lock (a {})", self.key, self.key_type),
            _ => {
                let expiry = match self.remaining_ms {
                    Some(ms) => format!("expires in {}", show(Duration::from_millis(ms))),
                    None => "has no TTL".to_owned(),
                };
                format!(
                    "{}: a {}-character {} token, {expiry}{fence}: a SET NX PX lock (redis-py, \
                     redlock, redis-semaphore, redsync, tairlock's TokenLock, ...) or a value of \
                     that shape",
                    self.key,
                    self.length.unwrap_or_default(),
                    self.format.as_deref().unwrap_or("token"),
                )
            }
        }
    }
}

/// Inspect the token lock at `key`, exactly as named.
///
/// # Errors
///
/// An empty key; store errors.
pub async fn inspect<S: Store>(store: S, key: &str) -> tairlock::Result<TokenInspectReport> {
    Ok(TokenInspectReport::new(
        &TokenLock::new(store).inspect(key).await?,
    ))
}

/// Whether `key` itself holds a string of a token's shape (read-only: `TYPE`, `GET`).
///
/// # Errors
///
/// Store errors.
pub async fn detect<S: Store>(store: &S, key: &str) -> tairlock::Result<bool> {
    if key.is_empty() || store.key_type(key).await? != "string" {
        return Ok(false);
    }
    Ok(store.get(key).await?.is_some_and(|v| token_shaped(&v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_tokens_have_a_tokens_shape_and_are_named_by_format() {
        for (token, format) in [
            ("0f5e4c3b2a1908f7e6d5c4b3a2918070", "hex"),
            ("3b241101-e2bb-4255-8caf-4136c566a962", "uuid"),
            ("q3T9pW0xZk1Lm8Bv2Yc4Rg==", "base64"),
            ("client-1-7:worker@host", "token"),
        ] {
            assert!(token_shaped(token.as_bytes()), "{token}");
            assert_eq!(token_format(token.as_bytes()), format, "{token}");
        }
        for not in [
            "1700000000000000",
            "tl1:1:2:abcdef0123456789",
            "short",
            "has space in it!",
        ] {
            assert!(!token_shaped(not.as_bytes()), "{not}");
        }
    }
}
