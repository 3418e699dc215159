//! Key naming: a configurable prefix, and one hash tag per lock.
//!
//! Every key of one lock is `<prefix>{<name>}<suffix>`, so they all hash to one Redis Cluster
//! slot and multi-key scripts never meet `CROSSSLOT`.
//!
//! | key | pattern (default prefix) |
//! |---|---|
//! | lock | `tairlock:{name}` |
//! | fence | `tairlock:{name}:fence` |
//! | release channel (pub/sub, not a key) | `tairlock:{name}:released` |

use crate::error::{Error, Result};

/// The default key prefix.
pub const DEFAULT_PREFIX: &str = "tairlock:";

/// Where a family of locks keeps its keys. See the [module docs](self).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Keyspace {
    prefix: String,
}

impl Default for Keyspace {
    fn default() -> Self {
        Keyspace {
            prefix: DEFAULT_PREFIX.to_owned(),
        }
    }
}

impl Keyspace {
    /// A keyspace with this prefix (may be empty).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) if the prefix contains `{` or
    /// `}`, which would move the hash tag out of the lock name.
    pub fn new(prefix: impl Into<String>) -> Result<Self> {
        let prefix = prefix.into();
        if prefix.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "key prefix {prefix:?} may not contain braces: they would change the hash tag"
            )));
        }
        Ok(Keyspace { prefix })
    }

    /// The prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Check a lock name: not empty, no braces.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) with the reason.
    pub fn validate(name: &str) -> Result<()> {
        if name.is_empty() {
            return Err(Error::invalid("lock name is empty"));
        }
        if name.contains(['{', '}']) {
            return Err(Error::invalid(format!(
                "lock name {name:?} may not contain braces: the name is the key's hash tag"
            )));
        }
        Ok(())
    }

    /// The key `<prefix>{<name>}<suffix>`, after validating `name`.
    ///
    /// # Errors
    ///
    /// As [`validate`](Self::validate).
    pub fn key(&self, name: &str, suffix: &str) -> Result<String> {
        Keyspace::validate(name)?;
        Ok(format!("{}{{{name}}}{suffix}", self.prefix))
    }

    /// The expire lock's keys for `name`.
    ///
    /// # Errors
    ///
    /// As [`validate`](Self::validate).
    pub fn lock_keys(&self, name: &str) -> Result<LockKeys> {
        Ok(LockKeys {
            lock: self.key(name, "")?,
            fence: self.key(name, ":fence")?,
            channel: self.key(name, ":released")?,
        })
    }
}

/// The keys of one expire lock.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockKeys {
    /// Holds the lease while the lock is held.
    pub lock: String,
    /// Holds the last fencing token issued, for a while after the lease.
    pub fence: String,
    /// The pub/sub channel releases are announced on (in the lock's hash slot).
    pub channel: String,
}

impl LockKeys {
    /// Both keys, in script order.
    pub fn both(&self) -> [String; 2] {
        [self.lock.clone(), self.fence.clone()]
    }
}

/// The Redis Cluster hash tag of a key: the part between the first `{` and the next `}`, if
/// non-empty; else the whole key.
pub fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

/// The Redis Cluster slot of a key: CRC16 (XMODEM) of its [`hash_tag`], modulo 16384, as
/// `CLUSTER KEYSLOT` computes it.
pub fn key_slot(key: &str) -> u16 {
    let mut crc: u16 = 0;
    for &byte in hash_tag(key).as_bytes() {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16384
}

/// Check that every key hashes to one Redis Cluster slot, as the server requires of the declared
/// keys of one script.
///
/// # Errors
///
/// [`ErrorKind::InvalidInput`](crate::ErrorKind::InvalidInput) naming the first key of another
/// slot: the request would fail with `CROSSSLOT` on a cluster.
pub fn check_one_slot(keys: &[String]) -> Result<()> {
    let Some(first) = keys.first() else {
        return Ok(());
    };
    let slot = key_slot(first);
    for key in &keys[1..] {
        if key_slot(key) != slot {
            return Err(Error::invalid(format!(
                "keys {first:?} (slot {slot}) and {key:?} (slot {}) would be CROSSSLOT on a cluster",
                key_slot(key)
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_of_one_lock_share_a_hash_tag() {
        let keys = Keyspace::default().lock_keys("orders:42").unwrap();
        assert_eq!(keys.lock, "tairlock:{orders:42}");
        assert_eq!(keys.fence, "tairlock:{orders:42}:fence");
        assert_eq!(hash_tag(&keys.lock), "orders:42");
        assert_eq!(hash_tag(&keys.fence), "orders:42");
    }

    #[test]
    fn key_slot_matches_redis() {
        // Values from `CLUSTER KEYSLOT` (and the Redis Cluster spec's CRC16 test vector).
        assert_eq!(key_slot("123456789"), 0x31c3);
        assert_eq!(key_slot("foo"), 12182);
        assert_eq!(key_slot("{foo}:bar"), 12182);
        assert_eq!(key_slot(""), 0);
        assert!(check_one_slot(&["a{x}".into(), "{x}b".into()]).is_ok());
        assert!(check_one_slot(&["a".into(), "b".into()]).is_err());
    }

    #[test]
    fn hash_tag_follows_redis_rules() {
        assert_eq!(hash_tag("foo{}{bar}"), "foo{}{bar}");
        assert_eq!(hash_tag("foo{{bar}}zap"), "{bar");
        assert_eq!(hash_tag("foo{bar}{zap}"), "bar");
        assert_eq!(hash_tag("plain"), "plain");
    }

    #[test]
    fn bad_names_and_prefixes_are_rejected() {
        assert!(
            Keyspace::default()
                .lock_keys("")
                .unwrap_err()
                .is_invalid_input()
        );
        assert!(
            Keyspace::default()
                .lock_keys("a{b")
                .unwrap_err()
                .is_invalid_input()
        );
        assert!(Keyspace::new("x{").unwrap_err().is_invalid_input());
        assert_eq!(Keyspace::new("").unwrap().key("n", "").unwrap(), "{n}");
    }
}
