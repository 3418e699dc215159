//! The keyspace native bodies run on: Redis's data model, in process.
//!
//! [`Db`] is what an atomic operation's native body works on, the way its Lua twin works on the
//! server through `redis.call`. Every method mirrors one Redis command, with the same replies and
//! the same errors (`WRONGTYPE`, "not an integer"), and the same expiry rule: a key whose expiry
//! time is in the past does not exist. Time is frozen for the length of one command or script,
//! as on the server. The embedded store ([`MemoryStore`](crate::store::MemoryStore)) holds one
//! behind its mutex and adds the clock and the release notifications.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::fmt;
use std::time::Duration;

use crate::error::Error;

/// An error reply from a command, as a server would send it (`WRONGTYPE ...`, `ERR ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandError {
    code: &'static str,
    detail: String,
}

impl CommandError {
    /// An error reply with its code (the first word) and the rest of the message.
    pub fn new(code: &'static str, detail: impl Into<String>) -> Self {
        CommandError {
            code,
            detail: detail.into(),
        }
    }

    /// The reply Redis gives for a command against a key of another type.
    pub fn wrong_type() -> Self {
        CommandError::new(
            "WRONGTYPE",
            "Operation against a key holding the wrong kind of value",
        )
    }

    /// The reply Redis gives for INCR and friends on a non-integer.
    pub fn not_integer() -> Self {
        CommandError::new("ERR", "value is not an integer or out of range")
    }

    /// The code, e.g. `WRONGTYPE`.
    pub fn code(&self) -> &'static str {
        self.code
    }

    /// The message after the code.
    pub fn detail(&self) -> &str {
        &self.detail
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.code, self.detail)
    }
}

impl From<CommandError> for Error {
    fn from(err: CommandError) -> Self {
        Error::from_reply(err.code, &err.detail)
    }
}

/// The result of one command on [`Db`].
pub type CommandResult<T> = Result<T, CommandError>;

#[derive(Debug, Clone)]
enum Value {
    Str(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    List(VecDeque<Vec<u8>>),
    ZSet(ZSet),
}

impl Value {
    fn type_name(&self) -> &'static str {
        match self {
            Value::Str(_) => "string",
            Value::Hash(_) => "hash",
            Value::List(_) => "list",
            Value::ZSet(_) => "zset",
        }
    }
}

/// A sorted set: members by score, and scores by member.
#[derive(Debug, Clone, Default)]
struct ZSet {
    scores: HashMap<Vec<u8>, f64>,
    ordered: BTreeSet<ScoreKey>,
}

#[derive(Debug, Clone, PartialEq)]
struct ScoreKey(f64, Vec<u8>);

impl Eq for ScoreKey {}

impl PartialOrd for ScoreKey {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}

impl Ord for ScoreKey {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        self.0
            .total_cmp(&other.0)
            .then_with(|| self.1.cmp(&other.1))
    }
}

#[derive(Debug, Clone)]
struct Entry {
    value: Value,
    /// Absolute expiry in ms since the epoch; the key is gone once `now_ms > expires_at`.
    expires_at: Option<u64>,
}

/// A string value a command or script wrote, replaced or deleted: what
/// [`MemoryStore::on_change`](crate::store::MemoryStore::on_change) reports. Expiry is not a change
/// (nobody caused it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// The key.
    pub key: String,
    /// The string it held before (`None`: no string, e.g. a missing key).
    pub old: Option<Vec<u8>>,
    /// The string it holds after (`None`: deleted, or replaced by another type).
    pub new: Option<Vec<u8>>,
}

/// The embedded keyspace: what native bodies run on. Every method mirrors one Redis command,
/// with the same replies, errors and expiry rule; time is frozen for one command or script.
#[derive(Debug, Default)]
pub struct Db {
    entries: HashMap<String, Entry>,
    /// (expiry ms, key) for every key with a TTL, so expired keys are reclaimed in order.
    expirations: BTreeSet<(u64, String)>,
    now_us: u64,
    /// Messages published during the current step (channel, payload), delivered when it ends.
    outbox: Vec<(String, Option<String>)>,
    /// String writes, replacements and deletions of the current step, when someone listens.
    changes: Option<Vec<Change>>,
}

impl Db {
    /// An empty keyspace.
    pub fn new() -> Self {
        Db::default()
    }

    /// Freeze time at `now` (since the epoch) for the next command or script, and reclaim every
    /// key that has expired by then.
    pub fn set_time(&mut self, now: Duration) {
        self.now_us = now.as_micros() as u64;
        let now_ms = self.now_ms();
        while let Some((at, _)) = self.expirations.first() {
            if *at >= now_ms {
                break;
            }
            let (_, key) = self.expirations.pop_first().expect("checked non-empty");
            self.entries.remove(&key);
        }
    }

    /// `PUBLISH channel message` for a message whose payload no watcher reads (a release: the
    /// channel is the news): delivered to in-process watchers when the current command or
    /// script ends.
    pub fn publish(&mut self, channel: &str) {
        self.outbox.push((channel.to_owned(), None));
    }

    /// `PUBLISH channel message` with a payload watchers read
    /// ([`Watch::messages_after`](crate::notify::Watch::messages_after)), such as the fair
    /// mode's grant: delivered to in-process watchers when the current command or script ends.
    pub fn publish_message(&mut self, channel: &str, message: &str) {
        self.outbox
            .push((channel.to_owned(), Some(message.to_owned())));
    }

    pub(crate) fn take_outbox(&mut self) -> Vec<(String, Option<String>)> {
        std::mem::take(&mut self.outbox)
    }

    /// Record every string write, replacement and deletion from now on.
    pub(crate) fn record_changes(&mut self) {
        self.changes.get_or_insert_with(Vec::new);
    }

    pub(crate) fn take_changes(&mut self) -> Vec<Change> {
        self.changes
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    fn changed(&mut self, key: &str, old: Option<Vec<u8>>, new: Option<Vec<u8>>) {
        if let Some(changes) = &mut self.changes
            && old != new
        {
            changes.push(Change {
                key: key.to_owned(),
                old,
                new,
            });
        }
    }

    /// The string under `key`, for the change journal (only when someone listens).
    fn string_for_journal(&self, key: &str) -> Option<Vec<u8>> {
        self.changes.as_ref()?;
        match self.entries.get(key) {
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Some(s.clone()),
            _ => None,
        }
    }

    /// A deletion by a command (not by expiry): journalled.
    fn delete(&mut self, key: &str) -> Option<Entry> {
        let old = self.string_for_journal(key);
        let entry = self.remove(key)?;
        self.changed(key, old, None);
        Some(entry)
    }

    /// The frozen time, since the epoch.
    pub fn now(&self) -> Duration {
        Duration::from_micros(self.now_us)
    }

    /// `TIME`: (seconds, microseconds).
    pub fn time(&self) -> (u64, u64) {
        (self.now_us / 1_000_000, self.now_us % 1_000_000)
    }

    fn now_ms(&self) -> u64 {
        self.now_us / 1000
    }

    /// The number of live keys.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// No live keys.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn live(&mut self, key: &str) -> Option<&mut Entry> {
        let now_ms = self.now_ms();
        let expired = match self.entries.get(key) {
            None => return None,
            Some(e) => e.expires_at.is_some_and(|at| now_ms > at),
        };
        if expired {
            self.remove(key);
            return None;
        }
        self.entries.get_mut(key)
    }

    fn remove(&mut self, key: &str) -> Option<Entry> {
        let entry = self.entries.remove(key)?;
        if let Some(at) = entry.expires_at {
            self.expirations.remove(&(at, key.to_owned()));
        }
        Some(entry)
    }

    fn set_expiry(&mut self, key: &str, at: Option<u64>) {
        if let Some(entry) = self.entries.get_mut(key) {
            if let Some(old) = entry.expires_at.take() {
                self.expirations.remove(&(old, key.to_owned()));
            }
            entry.expires_at = at;
            if let Some(at) = at {
                self.expirations.insert((at, key.to_owned()));
            }
        }
    }

    fn insert(&mut self, key: &str, value: Value, ttl: Option<Duration>) {
        // Every entry still here is live: `set_time` reclaimed the expired ones for this step.
        if self.changes.is_some() {
            let old = self.string_for_journal(key);
            let new = match &value {
                Value::Str(s) => Some(s.clone()),
                _ => None,
            };
            self.changed(key, old, new);
        }
        self.remove(key);
        self.entries.insert(
            key.to_owned(),
            Entry {
                value,
                expires_at: None,
            },
        );
        if let Some(ttl) = ttl {
            let at = self.now_ms() + ttl.as_millis() as u64;
            self.set_expiry(key, Some(at));
        }
    }

    /// `TYPE`: `none`, `string`, `hash`, `list` or `zset`.
    pub fn key_type(&mut self, key: &str) -> &'static str {
        self.live(key).map_or("none", |e| e.value.type_name())
    }

    /// `EXISTS` for one key.
    pub fn exists(&mut self, key: &str) -> bool {
        self.live(key).is_some()
    }

    fn string(&mut self, key: &str) -> CommandResult<Option<&mut Vec<u8>>> {
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Str(s),
                ..
            }) => Ok(Some(s)),
            Some(_) => Err(CommandError::wrong_type()),
        }
    }

    /// `GET`.
    pub fn get(&mut self, key: &str) -> CommandResult<Option<Vec<u8>>> {
        Ok(self.string(key)?.cloned())
    }

    /// `SET key value [PX ttl]`: replaces any value of any type and any TTL.
    pub fn set(&mut self, key: &str, value: impl Into<Vec<u8>>, ttl: Option<Duration>) {
        self.insert(key, Value::Str(value.into()), ttl);
    }

    /// `SET key value NX [PX ttl]` (and `SETNX` without a TTL): true if the key was set.
    pub fn set_nx(&mut self, key: &str, value: impl Into<Vec<u8>>, ttl: Option<Duration>) -> bool {
        if self.exists(key) {
            return false;
        }
        self.set(key, value, ttl);
        true
    }

    /// `GETSET`: set the value (dropping any TTL) and return the old one.
    pub fn getset(
        &mut self,
        key: &str,
        value: impl Into<Vec<u8>>,
    ) -> CommandResult<Option<Vec<u8>>> {
        let old = self.get(key)?;
        self.set(key, value, None);
        Ok(old)
    }

    /// `GETDEL`.
    pub fn getdel(&mut self, key: &str) -> CommandResult<Option<Vec<u8>>> {
        let old = self.get(key)?;
        if old.is_some() {
            self.delete(key);
        }
        Ok(old)
    }

    /// `DEL` for one key: true if it existed.
    pub fn del(&mut self, key: &str) -> bool {
        self.live(key).is_some() && self.delete(key).is_some()
    }

    /// `INCRBY` (keeps the key's TTL, as Redis does).
    pub fn incr_by(&mut self, key: &str, delta: i64) -> CommandResult<i64> {
        let current = match self.string(key)? {
            None => 0,
            Some(bytes) => parse_i64(bytes).ok_or_else(CommandError::not_integer)?,
        };
        let next = current
            .checked_add(delta)
            .ok_or_else(|| CommandError::new("ERR", "increment or decrement would overflow"))?;
        match self.string(key)? {
            Some(bytes) => {
                let old = std::mem::replace(bytes, next.to_string().into_bytes());
                self.changed(key, Some(old), Some(next.to_string().into_bytes()));
            }
            None => self.set(key, next.to_string(), None),
        }
        Ok(next)
    }

    /// `PEXPIRE`: true if the key exists. The TTL counts in whole milliseconds, as the server
    /// takes it: under 1 ms it is `PEXPIRE key 0`, which deletes the key at once.
    pub fn pexpire(&mut self, key: &str, ttl: Duration) -> bool {
        if !self.exists(key) {
            return false;
        }
        if ttl.as_millis() == 0 {
            self.delete(key);
        } else {
            let at = self.now_ms() + ttl.as_millis() as u64;
            self.set_expiry(key, Some(at));
        }
        true
    }

    /// `PERSIST`: true if a TTL was removed.
    pub fn persist(&mut self, key: &str) -> bool {
        match self.live(key) {
            Some(e) if e.expires_at.is_some() => {
                self.set_expiry(key, None);
                true
            }
            _ => false,
        }
    }

    /// `PTTL`: -2 for a missing key, -1 for a key without expiry, else the remaining ms.
    pub fn pttl(&mut self, key: &str) -> i64 {
        let now_ms = self.now_ms();
        match self.live(key) {
            None => -2,
            Some(Entry {
                expires_at: None, ..
            }) => -1,
            Some(Entry {
                expires_at: Some(at),
                ..
            }) => (*at - now_ms) as i64,
        }
    }

    fn hash(
        &mut self,
        key: &str,
        create: bool,
    ) -> CommandResult<Option<&mut BTreeMap<Vec<u8>, Vec<u8>>>> {
        if create && !self.exists(key) {
            self.insert(key, Value::Hash(BTreeMap::new()), None);
        }
        match self.live(key) {
            None => Ok(None),
            Some(Entry {
                value: Value::Hash(h),
                ..
            }) => Ok(Some(h)),
            Some(_) => Err(CommandError::wrong_type()),
        }
    }

    fn drop_if_empty(&mut self, key: &str, empty: bool) {
        if empty {
            self.delete(key);
        }
    }

    /// `HSET` of one field: true if the field is new.
    pub fn hset(
        &mut self,
        key: &str,
        field: &[u8],
        value: impl Into<Vec<u8>>,
    ) -> CommandResult<bool> {
        if let Some(Entry { value: v, .. }) = self.live(key)
            && !matches!(v, Value::Hash(_))
        {
            return Err(CommandError::wrong_type());
        }
        let h = self.hash(key, true)?.expect("created");
        Ok(h.insert(field.to_vec(), value.into()).is_none())
    }

    /// `HGET`.
    pub fn hget(&mut self, key: &str, field: &[u8]) -> CommandResult<Option<Vec<u8>>> {
        Ok(self.hash(key, false)?.and_then(|h| h.get(field).cloned()))
    }

    /// `HDEL` of one field: true if it existed. An emptied hash disappears.
    pub fn hdel(&mut self, key: &str, field: &[u8]) -> CommandResult<bool> {
        let (removed, empty) = match self.hash(key, false)? {
            None => return Ok(false),
            Some(h) => (h.remove(field).is_some(), h.is_empty()),
        };
        self.drop_if_empty(key, empty);
        Ok(removed)
    }

    /// `HLEN`.
    pub fn hlen(&mut self, key: &str) -> CommandResult<usize> {
        Ok(self.hash(key, false)?.map_or(0, |h| h.len()))
    }

    /// `HGETALL`, ordered by field.
    pub fn hgetall(&mut self, key: &str) -> CommandResult<Vec<(Vec<u8>, Vec<u8>)>> {
        Ok(self
            .hash(key, false)?
            .map(|h| h.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
            .unwrap_or_default())
    }

    /// `RPUSH` of one value: the new length.
    pub fn rpush(&mut self, key: &str, value: impl Into<Vec<u8>>) -> CommandResult<usize> {
        if !self.exists(key) {
            self.insert(key, Value::List(VecDeque::new()), None);
        }
        match self.live(key) {
            Some(Entry {
                value: Value::List(l),
                ..
            }) => {
                l.push_back(value.into());
                Ok(l.len())
            }
            _ => Err(CommandError::wrong_type()),
        }
    }

    /// `LRANGE key 0 -1`.
    pub fn lrange_all(&mut self, key: &str) -> CommandResult<Vec<Vec<u8>>> {
        match self.live(key) {
            None => Ok(Vec::new()),
            Some(Entry {
                value: Value::List(l),
                ..
            }) => Ok(l.iter().cloned().collect()),
            Some(_) => Err(CommandError::wrong_type()),
        }
    }

    fn zset(&mut self, key: &str, create: bool) -> CommandResult<Option<&mut ZSet>> {
        if let Some(e) = self.live(key) {
            if !matches!(e.value, Value::ZSet(_)) {
                return Err(CommandError::wrong_type());
            }
        } else if create {
            self.insert(key, Value::ZSet(ZSet::default()), None);
        }
        match self.live(key) {
            Some(Entry {
                value: Value::ZSet(z),
                ..
            }) => Ok(Some(z)),
            _ => Ok(None),
        }
    }

    /// `ZADD` of one member: true if the member is new.
    pub fn zadd(&mut self, key: &str, score: f64, member: &[u8]) -> CommandResult<bool> {
        let z = self.zset(key, true)?.expect("created");
        let old = z.scores.insert(member.to_vec(), score);
        if let Some(old) = old {
            z.ordered.remove(&ScoreKey(old, member.to_vec()));
        }
        z.ordered.insert(ScoreKey(score, member.to_vec()));
        Ok(old.is_none())
    }

    /// `ZSCORE`.
    pub fn zscore(&mut self, key: &str, member: &[u8]) -> CommandResult<Option<f64>> {
        Ok(self
            .zset(key, false)?
            .and_then(|z| z.scores.get(member).copied()))
    }

    /// `ZREM` of one member: true if it existed. An emptied set disappears.
    pub fn zrem(&mut self, key: &str, member: &[u8]) -> CommandResult<bool> {
        let (removed, empty) = match self.zset(key, false)? {
            None => return Ok(false),
            Some(z) => {
                let removed = match z.scores.remove(member) {
                    Some(score) => z.ordered.remove(&ScoreKey(score, member.to_vec())),
                    None => false,
                };
                (removed, z.scores.is_empty())
            }
        };
        self.drop_if_empty(key, empty);
        Ok(removed)
    }

    /// `ZCARD`.
    pub fn zcard(&mut self, key: &str) -> CommandResult<usize> {
        Ok(self.zset(key, false)?.map_or(0, |z| z.scores.len()))
    }

    /// `ZRANGEBYSCORE key min max WITHSCORES` (inclusive bounds).
    pub fn zrange_by_score(
        &mut self,
        key: &str,
        min: f64,
        max: f64,
    ) -> CommandResult<Vec<(Vec<u8>, f64)>> {
        Ok(self
            .zset(key, false)?
            .map(|z| {
                z.ordered
                    .iter()
                    .filter(|k| k.0 >= min && k.0 <= max)
                    .map(|k| (k.1.clone(), k.0))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// `ZREMRANGEBYSCORE key min max` (inclusive): how many were removed.
    pub fn zremrangebyscore(&mut self, key: &str, min: f64, max: f64) -> CommandResult<usize> {
        let victims = self.zrange_by_score(key, min, max)?;
        for (member, _) in &victims {
            self.zrem(key, member)?;
        }
        Ok(victims.len())
    }
}

fn parse_i64(bytes: &[u8]) -> Option<i64> {
    let s = std::str::from_utf8(bytes).ok()?;
    // Redis accepts only canonical decimal integers: no sign on zero, no leading '+' or zeros.
    if s.is_empty()
        || s.starts_with('+')
        || (s.len() > 1 && (s.starts_with('0') || s.starts_with("-0")))
    {
        return None;
    }
    s.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn db_at(ms: u64) -> Db {
        let mut db = Db::new();
        db.set_time(Duration::from_millis(ms));
        db
    }

    #[test]
    fn key_lives_through_its_expiry_millisecond_and_not_after() {
        let mut db = db_at(1_000);
        db.set("k", "v", Some(Duration::from_millis(10)));
        db.set_time(Duration::from_millis(1_010));
        assert_eq!(db.pttl("k"), 0);
        assert_eq!(db.get("k").unwrap(), Some(b"v".to_vec()));
        db.set_time(Duration::from_millis(1_011));
        assert_eq!(db.get("k").unwrap(), None);
        assert_eq!(db.pttl("k"), -2);
        assert!(db.is_empty());
    }

    #[test]
    fn expired_keys_are_reclaimed_without_being_read() {
        let mut db = db_at(0);
        for i in 0..100 {
            db.set(&format!("k{i}"), "v", Some(Duration::from_millis(5)));
        }
        db.set("keep", "v", None);
        db.set_time(Duration::from_millis(6));
        assert_eq!(db.len(), 1);
    }

    #[test]
    fn incr_keeps_ttl_and_rejects_non_integers() {
        let mut db = db_at(0);
        db.set("n", "41", Some(Duration::from_millis(100)));
        assert_eq!(db.incr_by("n", 1).unwrap(), 42);
        assert_eq!(db.pttl("n"), 100);
        db.set("s", "x", None);
        assert_eq!(db.incr_by("s", 1).unwrap_err(), CommandError::not_integer());
        db.set("z", "007", None);
        assert!(db.incr_by("z", 1).is_err());
        db.set("max", i64::MAX.to_string(), None);
        assert!(db.incr_by("max", 1).is_err());
    }

    #[test]
    fn string_commands_on_other_types_are_wrongtype() {
        let mut db = db_at(0);
        db.hset("h", b"f", "v").unwrap();
        assert_eq!(db.get("h").unwrap_err().code(), "WRONGTYPE");
        assert_eq!(db.getset("h", "x").unwrap_err().code(), "WRONGTYPE");
        assert_eq!(db.hget("h", b"f").unwrap(), Some(b"v".to_vec()));
        db.rpush("l", "a").unwrap();
        assert_eq!(db.hset("l", b"f", "v").unwrap_err().code(), "WRONGTYPE");
        assert_eq!(db.zadd("l", 1.0, b"m").unwrap_err().code(), "WRONGTYPE");
    }

    #[test]
    fn pexpire_under_a_millisecond_deletes_at_once() {
        let mut db = db_at(1_000);
        db.set("k", "v", None);
        assert!(db.pexpire("k", Duration::from_micros(999)));
        assert_eq!(db.get("k").unwrap(), None);
        assert_eq!(db.pttl("k"), -2);
        db.set("k", "v", None);
        assert!(db.pexpire("k", Duration::from_micros(1_500)));
        assert_eq!(db.pttl("k"), 1);
    }

    #[test]
    fn the_journal_records_what_commands_did_to_strings_and_not_expiry() {
        let mut db = db_at(0);
        db.set("quiet", "x", None);
        db.record_changes();
        let change = |key: &str, old: Option<&str>, new: Option<&str>| Change {
            key: key.to_owned(),
            old: old.map(|s| s.as_bytes().to_vec()),
            new: new.map(|s| s.as_bytes().to_vec()),
        };
        db.set("k", "a", Some(Duration::from_millis(5)));
        db.set("k", "a", None);
        db.getset("k", "b").unwrap();
        db.incr_by("n", 1).unwrap();
        db.incr_by("n", 1).unwrap();
        db.del("k");
        db.set("e", "v", Some(Duration::from_millis(5)));
        db.set_time(Duration::from_millis(10));
        assert!(!db.exists("e"));
        db.set("h", "s", None);
        db.hset("h2", b"f", "v").unwrap();
        db.pexpire("h", Duration::ZERO);
        assert_eq!(
            db.take_changes(),
            vec![
                change("k", None, Some("a")),
                change("k", Some("a"), Some("b")),
                change("n", None, Some("1")),
                change("n", Some("1"), Some("2")),
                change("k", Some("b"), None),
                change("e", None, Some("v")),
                change("h", None, Some("s")),
                change("h", Some("s"), None),
            ]
        );
    }

    #[test]
    fn getset_drops_the_ttl() {
        let mut db = db_at(0);
        db.set("k", "1", Some(Duration::from_secs(1)));
        assert_eq!(db.getset("k", "2").unwrap(), Some(b"1".to_vec()));
        assert_eq!(db.pttl("k"), -1);
    }

    #[test]
    fn sorted_set_orders_by_score_and_removes_ranges() {
        let mut db = db_at(0);
        db.zadd("z", 3.0, b"c").unwrap();
        db.zadd("z", 1.0, b"a").unwrap();
        db.zadd("z", 2.0, b"b").unwrap();
        assert!(!db.zadd("z", 5.0, b"a").unwrap());
        let all = db
            .zrange_by_score("z", f64::NEG_INFINITY, f64::INFINITY)
            .unwrap();
        assert_eq!(
            all.iter().map(|m| m.0.clone()).collect::<Vec<_>>(),
            vec![b"b".to_vec(), b"c".to_vec(), b"a".to_vec()]
        );
        assert_eq!(db.zremrangebyscore("z", 0.0, 3.0).unwrap(), 2);
        assert_eq!(db.zcard("z").unwrap(), 1);
        assert!(db.zrem("z", b"a").unwrap());
        assert!(!db.exists("z"));
    }
}
