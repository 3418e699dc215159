//! Redis Cluster slot arithmetic: hash tags, CRC16 slots, and the same-slot check.
//!
//! Below both the key naming ([`crate::keys`], which puts every key of one lock under one hash
//! tag) and the stores (the cluster store refuses a script whose keys span slots before sending
//! it): it depends on nothing but the error type.

use crate::error::{Error, Result};

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
    check_one_slot_of(keys.iter().map(String::as_str))
}

/// [`check_one_slot`] over any list of keys.
///
/// # Errors
///
/// As [`check_one_slot`].
pub fn check_one_slot_of<'a>(keys: impl IntoIterator<Item = &'a str>) -> Result<()> {
    let mut keys = keys.into_iter();
    let Some(first) = keys.next() else {
        return Ok(());
    };
    let slot = key_slot(first);
    for key in keys {
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
}
