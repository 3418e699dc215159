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
/// The slot arithmetic, defined below both the keys and the stores in [`crate::slot`], and
/// re-exported here where it has always been.
pub use crate::slot::{check_one_slot, hash_tag, key_slot};

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
        let key = self.key_parts(name, suffix).concat();
        // What the module promises: the name is the key's hash tag, whatever the suffix.
        debug_assert_eq!(hash_tag(&key), name);
        Ok(key)
    }

    /// The pieces of [`key`](Self::key), to be written one after another without building the
    /// key (a batched renewal writes two keys per lease into one buffer), for a name validated
    /// before (a held lock's).
    pub(crate) fn key_parts<'a>(&'a self, name: &'a str, suffix: &'a str) -> [&'a str; 5] {
        debug_assert!(Keyspace::validate(name).is_ok());
        [&self.prefix, "{", name, "}", suffix]
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

/// A companion key of a raw lock key `key` — a key exactly as another library or old code
/// names it, with no prefix and no hash tag imposed — that lands in `key`'s Redis Cluster slot,
/// so the two can be read and written in one script: `{key}<suffix>` for a key without a hash
/// tag (Redis hashes the whole key, and `{key}` makes the companion hash exactly `key`),
/// `key<suffix>` for one that has a tag.
///
/// ```
/// use tairlock::keys::companion_key;
///
/// assert_eq!(companion_key("lock.orderid", ":fence"), "{lock.orderid}:fence");
/// assert_eq!(companion_key("locks:{order}:7", ":fence"), "locks:{order}:7:fence");
/// ```
///
/// A key without a valid tag that contains `}` (e.g. `a}b`, `x{}y`) cannot be wrapped without
/// changing its slot; its companion is `key<suffix>`, which is correct on a single server but
/// lands in another slot on a Redis Cluster (where a script declaring both fails with
/// `CROSSSLOT`).
pub fn companion_key(key: &str, suffix: &str) -> String {
    if hash_tag(key) != key {
        return format!("{key}{suffix}");
    }
    let wrapped = format!("{{{key}}}{suffix}");
    if hash_tag(&wrapped) == key {
        wrapped
    } else {
        format!("{key}{suffix}")
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

    /// The fair mode's record of a grant not confirmed yet (`<nonce>:<wake channel>`), which a
    /// force unlock reads to revoke that grant (see [`fair`](crate::fair)).
    pub(crate) fn grant(&self) -> String {
        format!("{}:fairg", self.lock)
    }
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
    fn companion_keys_share_the_raw_keys_slot() {
        for key in ["lock.orderid", "a{b", "locks:{order}:7", "x", "mutex:jobs"] {
            let companion = companion_key(key, ":fence");
            assert_eq!(hash_tag(&companion), hash_tag(key), "{key}");
            assert!(companion.ends_with(":fence"), "{companion}");
        }
        assert_eq!(companion_key("a}b", ":released"), "a}b:released");
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
