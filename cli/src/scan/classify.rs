//! What `tairlock scan` makes of the keys it read: which belong to a lock of this project
//! (by the key layouts of every kind), which are a lock of something else (a legacy timestamp
//! lock, a token lock of another library), and which are user data, left out.
//!
//! Pure: [`Facts`] (what the first read of a key found: its type, TTL, and a sample of its value)
//! go into a [`Collector`], which groups the keys of one lock by their hash tag and turns them
//! into [`Item`]s once every key of a server has been seen (the keys of one lock are scattered
//! through a `SCAN`). Reading each item's state is the kind's own `inspect`, in `found`.
//!
//! # The layouts recognised
//!
//! Every key of a lock of this project is `<prefix>{<name>}<suffix>` (see `tairlock::keys`), and
//! [`LAYOUT`] lists every suffix with the type and the value shape its kind writes, as each
//! kind's documentation gives them (`expire_lock`, `fair`, `semaphore`, the reader/writer lock's
//! crate docs). A key is taken for part of a lock only when its suffix, type and sampled shape
//! all match; anything else under a braced name (`user:{42}`, a user's `cache:{x}:r` of other
//! members) is judged as any other key.
//!
//! Extra keys are tolerated: a key under the hash tag of a recognised lock whose suffix extends
//! one of that lock's suffixes (`…:sem:limit` beside `…:sem`) is listed with the lock and never
//! judged on its own, so a kind that gains a key is not misread as a lock of another library. Value shapes are matched by
//! their leading fields only, so an entry that gains a field still matches, and a hash of
//! entries may hold other fields beside them.
//!
//! # Keys outside the layouts
//!
//! | what | how it is told |
//! |---|---|
//! | a retained fencing token ([`Item::Fence`]) | a key ending in `:fence` holding a decimal integer, whose lock is not there |
//! | a legacy lock ([`Item::Legacy`]) | a string holding a bare Unix timestamp in seconds or milliseconds (`tairlock_legacy::wire`, the test `inspect` uses) |
//! | a token lock ([`Item::Token`]: another library's, or a `TokenLock`'s, with the fence key a `TokenLock` keeps beside it) | a string with a TTL, no format of ours, and a token's shape ([`token_shaped`]): 16 to 128 characters of letters, digits and `-_+/=.:@`, not all digits |
//! | user data (left out) | everything else |
//!
//! A user's counter that holds a present-day Unix time is taken for a legacy lock (the format
//! has nothing else to tell them apart); a user's value of a token's shape with a TTL (a session
//! id cached for a while) is taken for a token lock; a token lock without a TTL (the classic
//! `SETNX` then `EXPIRE` crash leftover) cannot be told from user data and is left out.

use std::collections::BTreeMap;

use tairlock::{Lease, Ttl};
use tairlock_legacy::wire::{fence_key, parse_value};

use crate::token_inspect::token_shaped;
use crate::unlock::plausible_timestamp;

/// How many bytes of a string are read: one more than the longest value of any lock recognised
/// (a token of 128 characters), so a longer value is known to be longer.
pub(crate) const STRING_SAMPLE: usize = 129;

/// How many members of a sorted set, or fields of a hash, are read to judge its shape (a queue
/// or a set of holders is rarely larger; a larger one is judged by these).
pub(crate) const COLLECTION_SAMPLE: usize = 256;

/// What the first read of one key found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Facts {
    /// The key.
    pub(crate) key: String,
    /// Its Redis type (`TYPE`).
    pub(crate) key_type: String,
    /// Its TTL (`PTTL`).
    pub(crate) ttl: Ttl,
    /// The part of its value that was read.
    pub(crate) sample: Sample,
}

/// The part of a value read: enough to judge its shape.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Sample {
    /// Not read (a type no lock uses, or a name no layout has).
    None,
    /// The first [`STRING_SAMPLE`] bytes of a string.
    String(Vec<u8>),
    /// A sorted set's size and its first members (lowest scores) with their scores.
    Zset {
        /// `ZCARD`.
        len: u64,
        /// `ZRANGE 0 n WITHSCORES`.
        members: Vec<(String, f64)>,
    },
    /// A hash's size and some of its fields with their values.
    Hash {
        /// `HLEN`.
        len: u64,
        /// One `HSCAN` call's fields (all of a small hash).
        fields: Vec<(String, String)>,
    },
}

impl Facts {
    /// The whole value of a string no longer than [`STRING_SAMPLE`] − 1 bytes.
    pub(crate) fn short_string(&self) -> Option<&[u8]> {
        match &self.sample {
            Sample::String(v) if v.len() < STRING_SAMPLE => Some(v),
            _ => None,
        }
    }

    /// The key's TTL in ms, `None` without one.
    pub(crate) fn ttl_ms(&self) -> Option<u64> {
        match self.ttl {
            Ttl::Expires(d) => Some(d.as_millis() as u64),
            _ => None,
        }
    }
}

/// A part of a lock of this project: which key of which kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Part {
    /// The expire lock's key, `<prefix>{name}`.
    Lock,
    /// The last fencing token of the expire lock or the reader/writer lock (they share it).
    Fence,
    /// The fair mode's queue of the expire lock, `:fairq`.
    FairQueue,
    /// Its waiters' entries, `:fairw`.
    FairWaiters,
    /// The fair mode's record of a grant its waiter has not confirmed yet, `:fairg`.
    FairGrant,
    /// The reader/writer lock's writer, `:w`.
    Writer,
    /// Its readers, `:r`.
    Readers,
    /// A waiting writer's intent, `:wi`.
    Intent,
    /// Its fair writers' queue, `:wq`.
    WriterQueue,
    /// Their entries, `:ww`.
    WriterWaiters,
    /// The semaphore's holders, `:sem`.
    Holders,
    /// Their permits and fences, `:sem:h`.
    Holdings,
    /// The semaphore's last fencing token, `:sem:fence`.
    SemFence,
    /// The semaphore's fair queue, `:sem:q`.
    SemQueue,
    /// Its waiters' entries, `:sem:qw`.
    SemWaiters,
    /// The semaphore's stored limit, `:sem:n` (kept as long as its fence: an idle semaphore
    /// keeps it).
    SemLimit,
}

/// The shape of a value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// `tl1:<expiry ms>:<fence>:<nonce>` ([`Lease::parse`]).
    Lease,
    /// A decimal integer.
    Integer,
    /// A nonce: hex digits.
    Nonce,
    /// A sorted set whose members are nonces.
    Nonces,
    /// A hash of nonce → `<integer>:<integer>…` (at least one such field; others tolerated).
    Entries,
    /// A grant record: `<nonce>:<wake channel>`.
    Grant,
}

/// One key of a layout.
#[derive(Debug)]
struct Layout {
    suffix: &'static str,
    part: Part,
    key_type: &'static str,
    shape: Shape,
}

/// Every key of every kind under `<prefix>{name}`: the tables of `tairlock::expire_lock`,
/// `tairlock::fair`, `tairlock::semaphore` and `tairlock_rwlock` ("Key layout").
const LAYOUT: [Layout; 16] = [
    layout("", Part::Lock, "string", Shape::Lease),
    layout(":fence", Part::Fence, "string", Shape::Integer),
    layout(":fairq", Part::FairQueue, "zset", Shape::Nonces),
    layout(":fairw", Part::FairWaiters, "hash", Shape::Entries),
    layout(":fairg", Part::FairGrant, "string", Shape::Grant),
    layout(":w", Part::Writer, "string", Shape::Lease),
    layout(":r", Part::Readers, "zset", Shape::Nonces),
    layout(":wi", Part::Intent, "string", Shape::Nonce),
    layout(":wq", Part::WriterQueue, "zset", Shape::Nonces),
    layout(":ww", Part::WriterWaiters, "hash", Shape::Entries),
    layout(":sem", Part::Holders, "zset", Shape::Nonces),
    layout(":sem:h", Part::Holdings, "hash", Shape::Entries),
    layout(":sem:fence", Part::SemFence, "string", Shape::Integer),
    layout(":sem:q", Part::SemQueue, "zset", Shape::Nonces),
    layout(":sem:qw", Part::SemWaiters, "hash", Shape::Entries),
    layout(":sem:n", Part::SemLimit, "string", Shape::Integer),
];

const fn layout(suffix: &'static str, part: Part, key_type: &'static str, shape: Shape) -> Layout {
    Layout {
        suffix,
        part,
        key_type,
        shape,
    }
}

/// The types whose values are sampled when the key's name has a layout for that type.
pub(crate) fn sampled(key: &str, key_type: &str) -> bool {
    match key_type {
        "string" => true,
        "zset" | "hash" => split_tagged(key).is_some_and(|(_, _, suffix)| {
            LAYOUT
                .iter()
                .any(|l| l.suffix == suffix && l.key_type == key_type)
        }),
        _ => false,
    }
}

/// `<prefix>{<name>}<suffix>` split, when the key has that form: a prefix and suffix without
/// braces, a non-empty name (the key's hash tag).
pub(crate) fn split_tagged(key: &str) -> Option<(&str, &str, &str)> {
    let open = key.find('{')?;
    let close = open + 1 + key[open + 1..].find('}')?;
    let (prefix, name, suffix) = (&key[..open], &key[open + 1..close], &key[close + 1..]);
    (!name.is_empty() && !prefix.contains('}') && !suffix.contains(['{', '}']))
        .then_some((prefix, name, suffix))
}

fn is_nonce(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit())
}

/// `<integer>:<integer>`, then anything (a waiter's or a holder's entry).
fn is_entry(s: &str) -> bool {
    let mut fields = s.split(':');
    let mut integer = || {
        fields
            .next()
            .is_some_and(|f| !f.is_empty() && f.bytes().all(|b| b.is_ascii_digit()))
    };
    integer() && integer()
}

impl Shape {
    fn fits(self, facts: &Facts) -> bool {
        match (self, &facts.sample) {
            (Shape::Lease, _) => facts
                .short_string()
                .and_then(|v| std::str::from_utf8(v).ok())
                .is_some_and(|v| Lease::parse(v).is_some()),
            (Shape::Integer, _) => facts.short_string().and_then(parse_value).is_some(),
            (Shape::Nonce, _) => facts
                .short_string()
                .and_then(|v| std::str::from_utf8(v).ok())
                .is_some_and(is_nonce),
            (Shape::Grant, _) => facts
                .short_string()
                .and_then(|v| std::str::from_utf8(v).ok())
                .and_then(|v| v.split_once(':'))
                .is_some_and(|(nonce, channel)| is_nonce(nonce) && !channel.is_empty()),
            (Shape::Nonces, Sample::Zset { members, .. }) => {
                !members.is_empty() && members.iter().all(|(m, _)| is_nonce(m))
            }
            // Other fields beside the entries are tolerated (a kind may keep a setting there).
            (Shape::Entries, Sample::Hash { fields, .. }) => {
                fields.iter().any(|(f, v)| is_nonce(f) && is_entry(v))
            }
            _ => false,
        }
    }
}

/// The part of a lock `facts` is, with the lock's prefix and name, when its name, type and
/// value fit a layout.
fn part_of(facts: &Facts) -> Option<(&str, &str, Part)> {
    let (prefix, name, suffix) = split_tagged(&facts.key)?;
    let layout = LAYOUT.iter().find(|l| l.suffix == suffix)?;
    (layout.key_type == facts.key_type && layout.shape.fits(facts)).then_some((
        prefix,
        name,
        layout.part,
    ))
}

/// The keys of one lock name seen so far (the parts that fit a layout, and extra keys).
#[derive(Debug, Default)]
pub(crate) struct Group {
    parts: Vec<(Part, Facts)>,
    extra: Vec<Facts>,
}

impl Group {
    fn has(&self, part: Part) -> bool {
        self.parts.iter().any(|(p, _)| *p == part)
    }

    fn take(&mut self, part: Part) -> Option<Facts> {
        let i = self.parts.iter().position(|(p, _)| *p == part)?;
        Some(self.parts.remove(i).1)
    }

    /// Whether an extra key with this suffix belongs here: it extends the suffix of one of the
    /// lock's keys (`:sem:limit` beside `:sem`).
    fn owns_extra(&self, suffix: &str) -> bool {
        self.parts.iter().any(|(_, f)| {
            split_tagged(&f.key).is_some_and(|(_, _, own)| {
                !own.is_empty()
                    && suffix
                        .strip_prefix(own)
                        .is_some_and(|rest| rest.starts_with(':'))
            })
        })
    }
}

/// A lock of this project's kinds, by its keyspace and name, with the keys the scan saw.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Named {
    /// The key prefix.
    pub(crate) prefix: String,
    /// The lock name (the hash tag).
    pub(crate) name: String,
    /// Every key of it the scan saw, extra keys included.
    pub(crate) keys: Vec<String>,
}

impl Named {
    /// `<prefix>{<name>}`: what `tairlock unlock` and `tairlock run` take.
    pub(crate) fn base(&self) -> String {
        format!("{}{{{}}}", self.prefix, self.name)
    }
}

/// A queue of one kind's fair mode: its sorted set (nonce → arrival) and its hash of entries
/// (nonce → `<place ends ms>:…`), as read.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct Queue {
    /// The sorted set, if seen.
    pub(crate) order: Option<Facts>,
    /// The hash, if seen.
    pub(crate) entries: Option<Facts>,
}

/// One place in a queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Place {
    /// The waiter's nonce.
    pub(crate) nonce: String,
    /// When its place ends, ms since the epoch (server time); `None` without an entry (it is
    /// skipped by the next attempt).
    pub(crate) ends_ms: Option<u64>,
}

/// The two keys of each kind's queue: the sorted set of arrivals, the hash of entries.
const QUEUES: [(&str, &str); 3] = [(":fairq", ":fairw"), (":wq", ":ww"), (":sem:q", ":sem:qw")];

impl Queue {
    /// The name of its other key, when the scan saw only one.
    pub(crate) fn missing(&self) -> Option<String> {
        let other = |key: &str, seen_entries: bool| {
            QUEUES.iter().find_map(|(order, entries)| {
                let (own, other) = if seen_entries {
                    (entries, order)
                } else {
                    (order, entries)
                };
                Some(format!("{}{other}", key.strip_suffix(own)?))
            })
        };
        match (&self.order, &self.entries) {
            (Some(order), None) => other(&order.key, false),
            (None, Some(entries)) => other(&entries.key, true),
            _ => None,
        }
    }

    /// Take its missing key from `read`, where it is, with the type and shape it should have.
    pub(crate) fn complete(&mut self, read: &[Facts]) {
        let Some(key) = self.missing() else {
            return;
        };
        for facts in read.iter().filter(|f| f.key == key) {
            match part_of(facts).map(|(_, _, part)| part) {
                Some(Part::FairQueue | Part::WriterQueue | Part::SemQueue) => {
                    self.order = Some(facts.clone());
                }
                Some(Part::FairWaiters | Part::WriterWaiters | Part::SemWaiters) => {
                    self.entries = Some(facts.clone());
                }
                _ => {}
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.order.is_none() && self.entries.is_none()
    }

    /// Its keys.
    pub(crate) fn keys(&self) -> Vec<String> {
        self.order
            .iter()
            .chain(&self.entries)
            .map(|f| f.key.clone())
            .collect()
    }

    /// The places read, in arrival order (the sorted set's, then entries without a member).
    pub(crate) fn places(&self) -> Vec<Place> {
        let entries: Vec<(String, String)> = match self.entries.as_ref().map(|f| &f.sample) {
            Some(Sample::Hash { fields, .. }) => fields
                .iter()
                .filter(|(f, v)| is_nonce(f) && is_entry(v))
                .cloned()
                .collect(),
            _ => Vec::new(),
        };
        let ends = |nonce: &str| {
            entries
                .iter()
                .find(|(f, _)| f == nonce)
                .and_then(|(_, v)| v.split(':').next()?.parse().ok())
        };
        let mut places: Vec<Place> = match self.order.as_ref().map(|f| &f.sample) {
            Some(Sample::Zset { members, .. }) => members
                .iter()
                .map(|(nonce, _)| Place {
                    nonce: nonce.clone(),
                    ends_ms: ends(nonce),
                })
                .collect(),
            _ => Vec::new(),
        };
        for (nonce, _) in &entries {
            if !places.iter().any(|p| &p.nonce == nonce) {
                places.push(Place {
                    nonce: nonce.clone(),
                    ends_ms: ends(nonce),
                });
            }
        }
        places
    }

    /// How many places the queue holds (its size, not only those read).
    pub(crate) fn len(&self) -> u64 {
        let size = |f: &Option<Facts>| match f.as_ref().map(|f| &f.sample) {
            Some(Sample::Zset { len, .. } | Sample::Hash { len, .. }) => *len,
            _ => 0,
        };
        size(&self.order).max(size(&self.entries))
    }

    /// Whether every place was read (the queue is no larger than the sample).
    pub(crate) fn fully_read(&self) -> bool {
        self.len() as usize <= self.places().len()
    }

    /// Whether one of its keys has no TTL: the queue never goes away by itself.
    pub(crate) fn persistent(&self) -> bool {
        self.order
            .iter()
            .chain(&self.entries)
            .any(|f| f.ttl == Ttl::Persistent)
    }
}

/// Something the scan found, to be read by its kind's `inspect` (or judged from the facts).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Item {
    /// An expire lock (`<prefix>{name}`).
    Expire(Named),
    /// The fair queue of an expire lock.
    Fair(Named, Queue),
    /// A reader/writer lock; the facts of its intent key, if seen, and its fair writers' queue.
    Rw(Named, Option<Facts>, Queue),
    /// A semaphore, with its fair queue.
    Sem(Named, Queue),
    /// A legacy timestamp lock, with its fence key if the scan saw it.
    Legacy(Facts, Option<Facts>),
    /// A token lock (of another library, or a `TokenLock`), with its fence key if the scan saw
    /// it.
    Token(Facts, Option<Facts>),
    /// A fencing token kept after its lock was released (or whose lock the scan did not see).
    Fence(Facts),
}

impl Item {
    /// The keys it is made of, as the scan saw them.
    pub(crate) fn keys(&self) -> Vec<String> {
        match self {
            Item::Expire(n) | Item::Fair(n, _) | Item::Rw(n, ..) | Item::Sem(n, _) => {
                n.keys.clone()
            }
            Item::Legacy(f, fence) | Item::Token(f, fence) => std::iter::once(f)
                .chain(fence)
                .map(|f| f.key.clone())
                .collect(),
            Item::Fence(f) => vec![f.key.clone()],
        }
    }

    /// Its fair mode's queue, for the kinds that have one.
    pub(crate) fn queue(&self) -> Option<&Queue> {
        match self {
            Item::Fair(_, q) | Item::Rw(_, _, q) | Item::Sem(_, q) => Some(q),
            _ => None,
        }
    }

    /// As [`queue`](Self::queue), to complete it.
    pub(crate) fn queue_mut(&mut self) -> Option<&mut Queue> {
        match self {
            Item::Fair(_, q) | Item::Rw(_, _, q) | Item::Sem(_, q) => Some(q),
            _ => None,
        }
    }

    /// The lock name and keys of an item of this project's kinds.
    fn named_mut(&mut self) -> &mut Named {
        match self {
            Item::Expire(n) | Item::Fair(n, _) | Item::Rw(n, ..) | Item::Sem(n, _) => n,
            _ => unreachable!("only the kinds of this project are grouped"),
        }
    }
}

/// Sorts the keys of one server into [`Item`]s. See the [module docs](self).
#[derive(Debug, Default)]
pub(crate) struct Collector {
    groups: BTreeMap<(String, String), Group>,
    /// Keys under a hash tag with a suffix no layout has: extra keys of a lock, or judged alone.
    pending: Vec<Facts>,
    legacy: Vec<Facts>,
    tokens: Vec<Facts>,
    fences: Vec<Facts>,
    /// Keys left out: user data.
    pub(crate) other: u64,
}

impl Collector {
    /// Take one key's facts.
    pub(crate) fn add(&mut self, facts: Facts) {
        if let Some((prefix, name, part)) = part_of(&facts) {
            let id = (prefix.to_owned(), name.to_owned());
            self.groups.entry(id).or_default().parts.push((part, facts));
            return;
        }
        if split_tagged(&facts.key).is_some_and(|(_, _, suffix)| suffix.starts_with(':')) {
            self.pending.push(facts);
            return;
        }
        self.alone(facts);
    }

    /// A key outside every layout: a fence, a legacy lock, a token lock, or user data.
    fn alone(&mut self, facts: Facts) {
        let Some(value) = facts.short_string() else {
            self.other += 1;
            return;
        };
        if facts.key.ends_with(":fence") && parse_value(value).is_some() {
            self.fences.push(facts);
        } else if parse_value(value).is_some_and(plausible_timestamp) {
            self.legacy.push(facts);
        } else if matches!(facts.ttl, Ttl::Expires(_)) && token_shaped(value) {
            self.tokens.push(facts);
        } else {
            self.other += 1;
        }
    }

    /// Every item, once all the keys of the server are in; also the count of keys left out.
    pub(crate) fn finish(mut self) -> (Vec<Item>, u64) {
        for facts in std::mem::take(&mut self.pending) {
            let owner = split_tagged(&facts.key).and_then(|(prefix, name, suffix)| {
                let id = (prefix.to_owned(), name.to_owned());
                self.groups
                    .get(&id)
                    .is_some_and(|g| g.owns_extra(suffix))
                    .then_some(id)
            });
            match owner {
                Some(id) => self.groups.get_mut(&id).expect("found").extra.push(facts),
                None => self.alone(facts),
            }
        }
        let mut items = Vec::new();
        for ((prefix, name), mut group) in std::mem::take(&mut self.groups) {
            items.extend(self.split(prefix, name, &mut group));
        }
        // The fence key of a legacy lock or a token lock: `{K}:fence` fits the layout as a lone
        // fence of the name `K`, `K:fence` (K with a tag) is a lone fence on its own.
        let mut fences = std::mem::take(&mut self.fences);
        let mut fence_of = |key: &str| {
            let wanted = fence_key(key);
            fences
                .iter()
                .position(|f| f.key == wanted)
                .map(|i| fences.remove(i))
        };
        for facts in std::mem::take(&mut self.legacy) {
            let fence = fence_of(&facts.key);
            items.push(Item::Legacy(facts, fence));
        }
        for facts in std::mem::take(&mut self.tokens) {
            let fence = fence_of(&facts.key);
            items.push(Item::Token(facts, fence));
        }
        items.extend(fences.into_iter().map(Item::Fence));
        (items, self.other)
    }

    /// The items of one lock name: each kind found under it, its fence key with the lock it
    /// belongs to, and a fence alone as a retained token.
    fn split(&mut self, prefix: String, name: String, group: &mut Group) -> Vec<Item> {
        let named = |keys: Vec<String>| Named {
            prefix: prefix.clone(),
            name: name.clone(),
            keys,
        };
        // A grant record lives only while the lock holds the lease it granted (as long as
        // the grant lasts): it is the expire lock's, with its lock key or, if that went
        // (deleted by hand), alone.
        let expire = group.has(Part::Lock) || group.has(Part::FairGrant);
        let rw = [
            Part::Writer,
            Part::Readers,
            Part::Intent,
            Part::WriterQueue,
            Part::WriterWaiters,
        ]
        .iter()
        .any(|p| group.has(*p));
        let sem = [
            Part::Holders,
            Part::Holdings,
            Part::SemQueue,
            Part::SemWaiters,
            // An idle semaphore: its limit stays with its fence after the last holder left.
            Part::SemLimit,
        ]
        .iter()
        .any(|p| group.has(*p));
        let mut items = Vec::new();
        let fence = group.take(Part::Fence);
        let sem_fence = group.take(Part::SemFence);
        if !(expire || rw) {
            self.fences.extend(fence.clone());
        }
        if !sem {
            self.fences.extend(sem_fence.clone());
        }
        let fair = Queue {
            order: group.take(Part::FairQueue),
            entries: group.take(Part::FairWaiters),
        };
        let extra = |group: &Group, own: &[&str]| -> Vec<String> {
            group
                .extra
                .iter()
                .filter(|f| {
                    split_tagged(&f.key).is_some_and(|(_, _, s)| {
                        own.iter()
                            .any(|o| s.strip_prefix(o).is_some_and(|rest| rest.starts_with(':')))
                    })
                })
                .map(|f| f.key.clone())
                .collect()
        };
        if expire {
            let mut keys: Vec<String> = group.take(Part::Lock).into_iter().map(|f| f.key).collect();
            keys.extend(fence.iter().map(|f| f.key.clone()));
            keys.extend(group.take(Part::FairGrant).map(|f| f.key));
            items.push(Item::Expire(named(keys)));
        }
        if !fair.is_empty() {
            let mut keys = fair.keys();
            keys.extend(extra(group, &[":fairq", ":fairw"]));
            items.push(Item::Fair(named(keys), fair));
        }
        if rw {
            let writer = group.take(Part::Writer);
            let readers = group.take(Part::Readers);
            let intent = group.take(Part::Intent);
            let queue = Queue {
                order: group.take(Part::WriterQueue),
                entries: group.take(Part::WriterWaiters),
            };
            let mut keys: Vec<String> = writer
                .iter()
                .chain(&readers)
                .chain(&intent)
                .map(|f| f.key.clone())
                .collect();
            keys.extend(queue.keys());
            if !expire {
                keys.extend(fence.iter().map(|f| f.key.clone()));
            }
            keys.extend(extra(group, &[":w", ":r", ":wi", ":wq", ":ww"]));
            items.push(Item::Rw(named(keys), intent, queue));
        }
        if sem {
            let holders = group.take(Part::Holders);
            let holdings = group.take(Part::Holdings);
            let limit = group.take(Part::SemLimit);
            let queue = Queue {
                order: group.take(Part::SemQueue),
                entries: group.take(Part::SemWaiters),
            };
            let mut keys: Vec<String> = holders
                .iter()
                .chain(&holdings)
                .chain(&sem_fence)
                .chain(&limit)
                .map(|f| f.key.clone())
                .collect();
            keys.extend(queue.keys());
            keys.extend(extra(group, &[":sem", ":sem:h", ":sem:q", ":sem:qw"]));
            items.push(Item::Sem(named(keys), queue));
        }
        // An extra key no kind above claimed (it extends the fence's suffix, say) stays with
        // the first, so that every key is accounted for once.
        let claimed: Vec<String> = items.iter().flat_map(|i| i.keys()).collect();
        let unclaimed: Vec<String> = group
            .extra
            .iter()
            .map(|f| f.key.clone())
            .filter(|k| !claimed.contains(k))
            .collect();
        if let Some(first) = items.first_mut() {
            first.named_mut().keys.extend(unclaimed);
        }
        items
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    const NONCE: &str = "0123456789abcdef0123456789abcdef";

    fn string(key: &str, value: &str, ttl: Ttl) -> Facts {
        Facts {
            key: key.to_owned(),
            key_type: "string".to_owned(),
            ttl,
            sample: Sample::String(value.as_bytes().to_vec()),
        }
    }

    fn zset(key: &str, members: &[(&str, f64)]) -> Facts {
        Facts {
            key: key.to_owned(),
            key_type: "zset".to_owned(),
            ttl: Ttl::Expires(Duration::from_secs(5)),
            sample: Sample::Zset {
                len: members.len() as u64,
                members: members.iter().map(|(m, s)| ((*m).to_owned(), *s)).collect(),
            },
        }
    }

    fn hash(key: &str, fields: &[(&str, &str)]) -> Facts {
        Facts {
            key: key.to_owned(),
            key_type: "hash".to_owned(),
            ttl: Ttl::Expires(Duration::from_secs(5)),
            sample: Sample::Hash {
                len: fields.len() as u64,
                fields: fields
                    .iter()
                    .map(|(f, v)| ((*f).to_owned(), (*v).to_owned()))
                    .collect(),
            },
        }
    }

    fn ttl() -> Ttl {
        Ttl::Expires(Duration::from_secs(30))
    }

    fn lease() -> String {
        format!("tl1:1764000000000:1764000000000000:{NONCE}")
    }

    fn collect(facts: Vec<Facts>) -> (Vec<Item>, u64) {
        let mut c = Collector::default();
        for f in facts {
            c.add(f);
        }
        c.finish()
    }

    #[test]
    fn tagged_keys_split_at_their_hash_tag() {
        assert_eq!(
            split_tagged("tairlock:{orders:42}:sem:h"),
            Some(("tairlock:", "orders:42", ":sem:h"))
        );
        assert_eq!(
            split_tagged("{lock.x}:fence"),
            Some(("", "lock.x", ":fence"))
        );
        assert_eq!(split_tagged("a{}b"), None);
        assert_eq!(split_tagged("plain"), None);
        assert_eq!(split_tagged("a}{b}"), None);
    }

    #[test]
    fn each_kind_is_grouped_with_its_fence() {
        let (items, other) = collect(vec![
            string("tairlock:{a}", &lease(), ttl()),
            string("tairlock:{a}:fence", "1764000000000000", ttl()),
            zset("tairlock:{a}:fairq", &[(NONCE, 1.0)]),
            hash("tairlock:{a}:fairw", &[(NONCE, "1764000000000:2000:ch")]),
            string("app:{b}:w", &lease(), ttl()),
            zset("app:{b}:r", &[(NONCE, 1.0)]),
            string("app:{b}:fence", "17", ttl()),
            zset("tairlock:{c}:sem", &[(NONCE, 1.0)]),
            hash("tairlock:{c}:sem:h", &[(NONCE, "1:17")]),
            string("tairlock:{c}:sem:fence", "17", ttl()),
        ]);
        assert_eq!(other, 0);
        assert_eq!(items.len(), 4, "{items:#?}");
        // By (prefix, name): app:{b}, then tairlock:{a}'s two kinds, then tairlock:{c}.
        assert!(
            matches!(&items[0], Item::Rw(n, None, _) if n.prefix == "app:" && n.keys.len() == 3)
        );
        let Item::Expire(a) = &items[1] else {
            panic!("{items:#?}")
        };
        assert_eq!(a.keys, ["tairlock:{a}", "tairlock:{a}:fence"]);
        assert!(matches!(&items[2], Item::Fair(n, q) if n.name == "a" && q.places().len() == 1));
        assert!(matches!(&items[3], Item::Sem(n, _) if n.keys.len() == 3));
        let keys: usize = items.iter().map(|i| i.keys().len()).sum();
        assert_eq!(keys, 10, "every key once");
    }

    #[test]
    fn a_fair_grant_record_is_the_expire_locks() {
        let grant = format!("{NONCE}:tairlock:{{a}}:w:7");
        let (items, other) = collect(vec![
            string("tairlock:{a}", &lease(), ttl()),
            string("tairlock:{a}:fence", "1764000000000000", ttl()),
            string("tairlock:{a}:fairg", &grant, ttl()),
            // The lock key gone (deleted by hand): the record is still the expire lock's.
            string("tairlock:{b}:fairg", &grant, ttl()),
            // Not a grant record: judged alone.
            string("tairlock:{c}:fairg", "not a grant", ttl()),
        ]);
        assert_eq!(other, 1, "{items:#?}");
        assert_eq!(items.len(), 2, "{items:#?}");
        let Item::Expire(a) = &items[0] else {
            panic!("{items:#?}")
        };
        assert_eq!(
            a.keys,
            ["tairlock:{a}", "tairlock:{a}:fence", "tairlock:{a}:fairg"]
        );
        assert!(matches!(&items[1], Item::Expire(b) if b.keys == ["tairlock:{b}:fairg"]));
    }

    #[test]
    fn an_idle_semaphores_limit_and_fence_are_one_semaphore() {
        // Its last holder left: the stored limit and the fencing token stay (the limit is kept
        // as long as the fence state), and are the semaphore's, not user data.
        let (items, other) = collect(vec![
            string("tairlock:{pool}:sem:n", "3", ttl()),
            string("tairlock:{pool}:sem:fence", "17", ttl()),
        ]);
        assert_eq!(other, 0, "{items:#?}");
        assert_eq!(items.len(), 1, "{items:#?}");
        let Item::Sem(n, _) = &items[0] else {
            panic!("{items:#?}")
        };
        assert_eq!(n.name, "pool");
        assert_eq!(
            n.keys,
            ["tairlock:{pool}:sem:fence", "tairlock:{pool}:sem:n"]
        );
    }

    #[test]
    fn user_data_under_braced_names_is_left_out() {
        let (items, other) = collect(vec![
            hash("user:{42}", &[("name", "ada")]),
            string("cfg:{x}", "hello", Ttl::Persistent),
            zset("cache:{x}:r", &[("page:1", 3.0)]),
            hash("stats:{y}:sem:h", &[("hits", "12")]),
            string("cart:{z}:items", "[1,2]", Ttl::Persistent),
        ]);
        assert_eq!(items, []);
        assert_eq!(other, 5);
    }

    #[test]
    fn strings_outside_the_layouts_are_legacy_tokens_fences_or_user_data() {
        let (items, other) = collect(vec![
            string("lock.orderid", "1764000000", Ttl::Persistent),
            string("{lock.orderid}:fence", "1764000000000123", ttl()),
            string("lock.ms", "1764000000000", ttl()),
            string("locks:{order}:7", "1764000000", Ttl::Persistent),
            string("locks:{order}:7:fence", "1764000000000123", ttl()),
            string("redis-py:lock", "6f1c1b0e9a6d11ee8c900242ac120002", ttl()),
            string("orphan:fence", "99", Ttl::Persistent),
            string("counter", "123", Ttl::Persistent),
            string("session", "{\"user\":1,\"name\":\"ada lovelace\"}", ttl()),
            string("digits", "12345678901234567890", ttl()),
            string(
                "untimed",
                "6f1c1b0e9a6d11ee8c900242ac120002",
                Ttl::Persistent,
            ),
        ]);
        assert_eq!(other, 4, "{items:#?}");
        let legacy: Vec<(&str, Option<&str>)> = items
            .iter()
            .filter_map(|i| match i {
                Item::Legacy(f, fence) => {
                    Some((f.key.as_str(), fence.as_ref().map(|f| f.key.as_str())))
                }
                _ => None,
            })
            .collect();
        assert_eq!(
            legacy,
            [
                ("lock.orderid", Some("{lock.orderid}:fence")),
                ("lock.ms", None),
                ("locks:{order}:7", Some("locks:{order}:7:fence")),
            ]
        );
        assert!(items.contains(&Item::Token(
            string("redis-py:lock", "6f1c1b0e9a6d11ee8c900242ac120002", ttl()),
            None
        )));
        assert!(items.contains(&Item::Fence(string("orphan:fence", "99", Ttl::Persistent))));
        assert_eq!(items.len(), 5);
    }

    #[test]
    fn extra_keys_stay_with_their_lock_and_lone_ones_are_judged_alone() {
        let (items, other) = collect(vec![
            zset("tairlock:{pool}:sem", &[(NONCE, 1.0)]),
            string(
                "tairlock:{pool}:sem:limit",
                "6f1c1b0e9a6d11ee8c900242ac",
                ttl(),
            ),
            hash(
                "tairlock:{pool}:sem:h",
                &[("limit", "5"), (NONCE, "1:17:extra")],
            ),
            string(
                "tairlock:{other}:sem:limit",
                "6f1c1b0e9a6d11ee8c900242ac",
                ttl(),
            ),
            string("user:{42}:profile", "x", Ttl::Persistent),
        ]);
        assert_eq!(other, 1);
        assert_eq!(items.len(), 2, "{items:#?}");
        let Item::Sem(sem, _) = &items[0] else {
            panic!("{items:#?}")
        };
        assert_eq!(
            sem.keys,
            [
                "tairlock:{pool}:sem",
                "tairlock:{pool}:sem:h",
                "tairlock:{pool}:sem:limit"
            ]
        );
        assert!(matches!(&items[1], Item::Token(f, None) if f.key == "tairlock:{other}:sem:limit"));
    }

    #[test]
    fn a_queue_seen_by_one_key_names_the_other_and_takes_it() {
        let mut queue = Queue {
            order: None,
            entries: Some(hash("app:{x}:sem:qw", &[(NONCE, "9:1")])),
        };
        assert_eq!(queue.missing().as_deref(), Some("app:{x}:sem:q"));
        let order = zset("app:{x}:sem:q", &[(NONCE, 1.0)]);
        queue.complete(&[string("app:{x}:sem:q", "no", ttl()), order.clone()]);
        assert_eq!(queue.order, Some(order));
        assert_eq!(queue.missing(), None);
        let fair = Queue {
            order: Some(zset("tairlock:{y}:fairq", &[(NONCE, 1.0)])),
            entries: None,
        };
        assert_eq!(fair.missing().as_deref(), Some("tairlock:{y}:fairw"));
        let mut rw = Queue {
            order: Some(zset("{z}:wq", &[(NONCE, 1.0)])),
            entries: None,
        };
        assert_eq!(rw.missing().as_deref(), Some("{z}:ww"));
        // A key of another shape under that name is not taken.
        rw.complete(&[hash("{z}:ww", &[("name", "ada")])]);
        assert_eq!(rw.entries, None);
    }

    #[test]
    fn a_queue_reads_its_places_in_arrival_order() {
        let queue = Queue {
            order: Some(zset("q", &[("bb", 1.0), ("aa", 2.0)])),
            entries: Some(hash(
                "w",
                &[("aa", "500:2000:ch"), ("cc", "9:1"), ("limit", "5")],
            )),
        };
        assert_eq!(
            queue.places(),
            [
                Place {
                    nonce: "bb".into(),
                    ends_ms: None
                },
                Place {
                    nonce: "aa".into(),
                    ends_ms: Some(500)
                },
                Place {
                    nonce: "cc".into(),
                    ends_ms: Some(9)
                },
            ]
        );
        assert!(!queue.persistent());
    }
}
