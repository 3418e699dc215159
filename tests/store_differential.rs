//! Differential test (DESIGN.md §3, §11): random sequences of operations run on a [`MemoryStore`]
//! and on a real Redis server must behave identically.
//!
//! Each case is a sequence of up to 40 operations over a tiny key set (two locks, `a` and `b`,
//! with their lock and fence keys, plus two plain keys), mixing the expire lock's operations
//! (through [`ExpireLock`], and the acquire and renew scripts called directly with fixed nonces
//! and raw lease strings), and plain commands that put a user's strings, counters, hashes and lists
//! under any of those keys. Every operation runs on both stores, one after the other, and the two
//! normalised outcomes must be equal. One `redis-server` serves the whole test (`FLUSHALL` between
//! cases); the memory store is fresh per case.
//!
//! # Normalisation (what is compared, and what is not)
//!
//! The stores legitimately differ in two things only, and only those are abstracted away:
//!
//! - **Time.** Redis reads its own clock; the memory store runs on a virtual clock that starts at
//!   the real time and advances 1 ms per operation (so that, as on a real server, no two
//!   operations happen at the same instant). Expiry timestamps inside leases therefore differ,
//!   and are not compared. Fencing tokens (and any other number ≥ 10¹², i.e. derived from the
//!   clock in µs: a fence key's value, INCR on a fence key) are compared by *identity*: each
//!   store maps every such number to the order in which it first appeared, so "the same token as
//!   step k" and "a token never seen before" are compared exactly, the numbers themselves are not.
//!   Small numbers (counters, user values) are compared exactly. TTLs are all long (≥ 30 s) so
//!   nothing expires within a case, and TTLs are compared by class (missing / persistent /
//!   expiring); a holder's remaining time by class (zero / positive).
//! - **Nonces.** [`ExpireLock`] draws random nonces, so leases are compared by identity too: each
//!   store numbers lease values in order of first appearance. An operation that refers to "the
//!   k-th lease seen" uses each store's own k-th lease (the tables have equal length as long as
//!   the stores agreed so far). Directly called scripts use fixed nonces, compared exactly.
//!
//! Everything else is compared exactly: outcome variants, error kinds *and* messages, which key
//! holds what, `TYPE`, values of user data, inspect snapshots. In addition each store must, on its
//! own, issue strictly increasing fencing tokens per lock across grants.

mod support;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use support::RedisServer;
use tairlock::clock::{Clock, SystemClock, VirtualClock};
use tairlock::scripts::{EXPIRE_LOCK, EXPIRE_UNLOCK, FAIR_LOCK, FAIR_UNLOCK, RENEW, RENEW_MANY};
use tairlock::{
    Acquire, ErrorKind, ExpireLock, Inspection, Lease, MemoryStore, RedisStore, Renew, Reply,
    Result, Store, Ttl, Unlock,
};

const NAMES: [&str; 2] = ["a", "b"];
const KEYS: [&str; 6] = [
    "tairlock:{a}",
    "tairlock:{a}:fence",
    "tairlock:{b}",
    "tairlock:{b}:fence",
    "plain:x",
    "plain:y",
];
/// Values users put under keys: text, counters, the empty string, i64::MAX, lease look-alikes
/// (malformed ones, and a well-formed lease with fence 7 and nonce `ab`).
const VALUES: [&str; 9] = [
    "abc",
    "5",
    "-3",
    "",
    "9223372036854775807",
    "tl1:bogus",
    "tl1:1:7:ab",
    "tl1:1:x:ab",
    "12345678901234567890123",
];
/// Leases nobody was granted (the first equals one of [`VALUES`]).
const BOGUS: [&str; 2] = ["tl1:1:7:ab", "tl1:1:1:ffff"];
/// Fixed nonces for direct script calls (`ab` matches the look-alike lease in [`VALUES`]).
const NONCES: [&str; 3] = ["aa", "bb", "ab"];
const TTLS_S: [u64; 2] = [30, 60];
/// The batched renewal's lease length (its fence key, when refreshed, lasts this + 1.5 × the
/// retention).
const RENEW_MANY_TTL_S: u64 = 45;
const RETENTION_MS: u64 = 60_000;
/// Numbers at least this large come from a clock in µs: compared by identity.
const TIME_LIKE: i128 = 1_000_000_000_000;

#[derive(Debug, Clone)]
enum LeaseRef {
    /// The lease value seen last.
    Latest,
    /// The k-th lease value seen in this case (modulo how many there are).
    Seen(usize),
    /// One of [`BOGUS`].
    Bogus(usize),
}

#[derive(Debug, Clone)]
enum Op {
    Lock {
        name: usize,
        ttl: usize,
    },
    LockScript {
        name: usize,
        nonce: usize,
    },
    Unlock {
        name: usize,
        lease: LeaseRef,
    },
    UnlockScript {
        name: usize,
        value: usize,
    },
    Renew {
        name: usize,
        lease: LeaseRef,
        ttl: usize,
    },
    RenewScript {
        name: usize,
        value: usize,
        nonce: usize,
    },
    /// The batched renewal of both locks in one call. Each attempt draws new nonces, as the
    /// batched watchdog does (a nonce that a lease already carries would renew it to the same
    /// value or not depending on whether the server's millisecond has turned); `repeat` sends the
    /// previous attempt again, as the watchdog does when no answer came.
    /// `refresh` asks each lease's fence key refreshed (read and written) or left alone.
    RenewManyScript {
        leases: [LeaseRef; 2],
        refresh: [bool; 2],
        repeat: bool,
    },
    ForceUnlock {
        name: usize,
    },
    Inspect {
        name: usize,
    },
    Get {
        key: usize,
    },
    Set {
        key: usize,
        value: usize,
    },
    SetNx {
        key: usize,
        value: usize,
    },
    SetNxPx {
        key: usize,
        value: usize,
    },
    GetSet {
        key: usize,
        value: usize,
    },
    GetDel {
        key: usize,
    },
    Del {
        key: usize,
    },
    Incr {
        key: usize,
    },
    Decr {
        key: usize,
    },
    Expire {
        key: usize,
        seconds: u64,
    },
    PExpire {
        key: usize,
    },
    Pttl {
        key: usize,
    },
    Type {
        key: usize,
    },
    HSet {
        key: usize,
    },
    RPush {
        key: usize,
    },
}

fn op_strategy() -> impl Strategy<Value = Op> {
    let name = 0..NAMES.len();
    let key = 0..KEYS.len();
    let value = 0..VALUES.len();
    let lease = prop_oneof![
        2 => Just(LeaseRef::Latest),
        2 => (0..6usize).prop_map(LeaseRef::Seen),
        1 => (0..BOGUS.len()).prop_map(LeaseRef::Bogus),
    ];
    prop_oneof![
        6 => (name.clone(), 0..TTLS_S.len()).prop_map(|(name, ttl)| Op::Lock { name, ttl }),
        2 => (name.clone(), 0..NONCES.len()).prop_map(|(name, nonce)| Op::LockScript { name, nonce }),
        4 => (name.clone(), lease.clone()).prop_map(|(name, lease)| Op::Unlock { name, lease }),
        1 => (name.clone(), value.clone()).prop_map(|(name, value)| Op::UnlockScript { name, value }),
        3 => (name.clone(), lease.clone(), 0..TTLS_S.len()).prop_map(|(name, lease, ttl)| Op::Renew { name, lease, ttl }),
        1 => (name.clone(), value.clone(), 0..NONCES.len())
            .prop_map(|(name, value, nonce)| Op::RenewScript { name, value, nonce }),
        2 => (lease.clone(), lease.clone(), any::<[bool; 2]>(), proptest::bool::weighted(0.25))
            .prop_map(|(a, b, refresh, repeat)| Op::RenewManyScript { leases: [a, b], refresh, repeat }),
        1 => name.clone().prop_map(|name| Op::ForceUnlock { name }),
        2 => name.prop_map(|name| Op::Inspect { name }),
        2 => key.clone().prop_map(|key| Op::Get { key }),
        2 => (key.clone(), value.clone()).prop_map(|(key, value)| Op::Set { key, value }),
        1 => (key.clone(), value.clone()).prop_map(|(key, value)| Op::SetNx { key, value }),
        1 => (key.clone(), value.clone()).prop_map(|(key, value)| Op::SetNxPx { key, value }),
        1 => (key.clone(), value).prop_map(|(key, value)| Op::GetSet { key, value }),
        1 => key.clone().prop_map(|key| Op::GetDel { key }),
        2 => key.clone().prop_map(|key| Op::Del { key }),
        2 => key.clone().prop_map(|key| Op::Incr { key }),
        1 => key.clone().prop_map(|key| Op::Decr { key }),
        1 => (key.clone(), prop_oneof![Just(0u64), Just(100u64)]).prop_map(|(key, seconds)| Op::Expire { key, seconds }),
        1 => key.clone().prop_map(|key| Op::PExpire { key }),
        1 => key.clone().prop_map(|key| Op::Pttl { key }),
        1 => key.clone().prop_map(|key| Op::Type { key }),
        1 => key.clone().prop_map(|key| Op::HSet { key }),
        1 => key.prop_map(|key| Op::RPush { key }),
    ]
}

// ---------------------------------------------------------------------------------------------
// normalised outcomes

#[derive(Debug, Clone, PartialEq, Eq)]
enum Num {
    /// A small number, exactly.
    Raw(i128),
    /// A clock-derived number: the order of its first appearance.
    Time(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct LeaseN {
    /// The order of the lease value's first appearance.
    id: usize,
    fence: Num,
    nonce: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Val {
    Lease(LeaseN),
    Num(Num),
    Bytes(Vec<u8>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TtlClass {
    Missing,
    Persistent,
    Expires,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum R {
    Nil,
    Int(Num),
    Val(Val),
    Status(String),
    Array(Vec<R>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Out {
    Err(ErrorKind, String),
    Acquired(LeaseN),
    Held {
        holder: LeaseN,
        remaining_positive: bool,
    },
    Unlock(Unlock),
    Renewed(LeaseN),
    RenewNotHeld,
    RenewHeldByOther,
    Inspected {
        key_type: String,
        holder: Option<LeaseN>,
        foreign: bool,
        ttl: TtlClass,
        last_fence: Option<Num>,
    },
    Bool(bool),
    Value(Option<Val>),
    Int(Num),
    Unit,
    Ttl(TtlClass),
    Type(String),
    Reply(R),
}

/// One store's identity tables (see the module docs).
#[derive(Default)]
struct Norm {
    leases: Vec<String>,
    times: Vec<i128>,
    /// Highest fence granted per lock name, for the monotonicity invariant.
    granted: HashMap<&'static str, u64>,
    /// Nonces drawn for batched renewals so far: each attempt's are new (`c0`, `c1`, ...).
    renew_nonces: u64,
    /// The last batched renewal's arguments, for a repeat.
    last_renew_many: Option<Vec<String>>,
}

impl Norm {
    fn num(&mut self, n: i128) -> Num {
        if n.abs() < TIME_LIKE {
            return Num::Raw(n);
        }
        match self.times.iter().position(|t| *t == n) {
            Some(i) => Num::Time(i),
            None => {
                self.times.push(n);
                Num::Time(self.times.len() - 1)
            }
        }
    }

    fn lease(&mut self, lease: &Lease) -> LeaseN {
        let id = match self.leases.iter().position(|l| l == lease.value()) {
            Some(i) => i,
            None => {
                self.leases.push(lease.value().to_owned());
                self.leases.len() - 1
            }
        };
        let nonce = lease.nonce();
        LeaseN {
            id,
            fence: self.num(i128::from(lease.fence())),
            // Fixed nonces are compared exactly; random ones are 32 hex digits.
            nonce: (nonce.len() < 32).then(|| nonce.to_owned()),
        }
    }

    fn val(&mut self, bytes: &[u8]) -> Val {
        let text = std::str::from_utf8(bytes).ok();
        if let Some(lease) = text.and_then(Lease::parse) {
            return Val::Lease(self.lease(&lease));
        }
        match text.and_then(|t| t.parse::<i128>().ok()) {
            Some(n) if n.abs() >= TIME_LIKE && n.to_string() == text.unwrap_or_default() => {
                Val::Num(self.num(n))
            }
            _ => Val::Bytes(bytes.to_vec()),
        }
    }

    fn reply(&mut self, reply: &Reply) -> R {
        match reply {
            Reply::Nil => R::Nil,
            Reply::Int(i) => R::Int(self.num(i128::from(*i))),
            Reply::Data(d) => R::Val(self.val(d)),
            Reply::Status(s) => R::Status(s.clone()),
            Reply::Array(items) => R::Array(items.iter().map(|i| self.reply(i)).collect()),
        }
    }

    fn lease_ref(&self, r: &LeaseRef) -> Lease {
        let value = match r {
            LeaseRef::Latest => self.leases.last().map_or(BOGUS[1], String::as_str),
            LeaseRef::Seen(k) if !self.leases.is_empty() => {
                self.leases[k % self.leases.len()].as_str()
            }
            LeaseRef::Seen(k) => BOGUS[k % BOGUS.len()],
            LeaseRef::Bogus(i) => BOGUS[*i],
        };
        Lease::parse(value).expect("tables hold parseable leases")
    }

    /// A grant of `lease` on `name`: its fence must exceed every earlier grant's on this store.
    fn granted(&mut self, name: &'static str, lease: &Lease, store: &str) -> Result<(), String> {
        if self.leases.iter().any(|l| l == lease.value()) || VALUES.contains(&lease.value()) {
            // A retried grant answered with the lease the lock already holds (one seen before, or
            // a lease look-alike a user wrote whose nonce matches): not a new grant.
            return Ok(());
        }
        let last = self.granted.entry(name).or_insert(0);
        if lease.fence() <= *last {
            return Err(format!(
                "{store}: fence {} granted on {name} after {last}: tokens must strictly increase",
                lease.fence()
            ));
        }
        *last = lease.fence();
        Ok(())
    }
}

fn ttl_class(ttl: Ttl) -> TtlClass {
    match ttl {
        Ttl::Missing => TtlClass::Missing,
        Ttl::Persistent => TtlClass::Persistent,
        Ttl::Expires(_) => TtlClass::Expires,
    }
}

fn err(e: tairlock::Error) -> Out {
    Out::Err(e.kind(), e.message().to_owned())
}

// ---------------------------------------------------------------------------------------------
// one store under test

/// Commands outside the [`Store`] contract, returning their errors like the contract does.
trait Raw: Store {
    async fn hset(&self, key: &str) -> Result<()>;
    async fn rpush(&self, key: &str) -> Result<()>;
    async fn zadd(&self, key: &str, score: f64, member: &str) -> Result<()>;
    /// `ZRANGE key 0 -1 WITHSCORES`, scores as integers (every score the scripts write is one).
    async fn zrange(&self, key: &str) -> Result<Vec<(Vec<u8>, i64)>>;
}

impl Raw for MemoryStore {
    async fn hset(&self, key: &str) -> Result<()> {
        self.atomically(|db| db.hset(key, b"field", "user data"))
            .map(drop)
            .map_err(Into::into)
    }

    async fn rpush(&self, key: &str) -> Result<()> {
        self.atomically(|db| db.rpush(key, "item"))
            .map(drop)
            .map_err(Into::into)
    }

    async fn zadd(&self, key: &str, score: f64, member: &str) -> Result<()> {
        self.atomically(|db| db.zadd(key, score, member.as_bytes()))
            .map(drop)
            .map_err(Into::into)
    }

    async fn zrange(&self, key: &str) -> Result<Vec<(Vec<u8>, i64)>> {
        self.atomically(|db| db.zrange_by_score(key, f64::NEG_INFINITY, f64::INFINITY))
            .map(|all| all.into_iter().map(|(m, s)| (m, s as i64)).collect())
            .map_err(Into::into)
    }
}

impl Raw for RedisStore {
    async fn hset(&self, key: &str) -> Result<()> {
        self.command::<i64>(redis::cmd("HSET").arg(key).arg("field").arg("user data"))
            .await
            .map(drop)
    }

    async fn rpush(&self, key: &str) -> Result<()> {
        self.command::<i64>(redis::cmd("RPUSH").arg(key).arg("item"))
            .await
            .map(drop)
    }

    async fn zadd(&self, key: &str, score: f64, member: &str) -> Result<()> {
        self.command::<i64>(redis::cmd("ZADD").arg(key).arg(score).arg(member))
            .await
            .map(drop)
    }

    async fn zrange(&self, key: &str) -> Result<Vec<(Vec<u8>, i64)>> {
        let flat: Vec<Vec<u8>> = self
            .command(
                redis::cmd("ZRANGE")
                    .arg(key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES"),
            )
            .await?;
        Ok(flat
            .chunks(2)
            .map(|pair| {
                let score = std::str::from_utf8(&pair[1]).unwrap_or("nan");
                (
                    pair[0].clone(),
                    score.parse::<f64>().unwrap_or(f64::NAN) as i64,
                )
            })
            .collect())
    }
}

/// `{1, lease, pttl}` (granted or renewed) and `{0, holder, pttl}` (busy): the pttl is time,
/// which the two stores' clocks read differently; keep its sign only.
fn pttl_sign(reply: Reply) -> Reply {
    match reply.as_array().unwrap_or_default() {
        [code @ Reply::Int(0 | 1), lease, Reply::Int(pttl)] => {
            Reply::Array(vec![code.clone(), lease.clone(), Reply::Int(pttl.signum())])
        }
        _ => reply,
    }
}

/// A `RENEW_MANY` reply, `{code, expiry, pttl, fence pttl}` per lease: the expiry and the pttl
/// are time, which the two stores' clocks read differently (two calls within one millisecond of
/// Redis's clock renew to the same expiry); keep their signs only. The fence pttl is the length
/// set (no clock in it): compared as it is.
fn pttls_sign(reply: Reply) -> Reply {
    match reply {
        Reply::Array(items) => Reply::Array(
            items
                .chunks(4)
                .flat_map(|item| match item {
                    [code, Reply::Int(expiry), Reply::Int(pttl), fence] => {
                        vec![
                            code.clone(),
                            Reply::Int(expiry.signum()),
                            Reply::Int(pttl.signum()),
                            fence.clone(),
                        ]
                    }
                    other => other.to_vec(),
                })
                .collect(),
        ),
        other => other,
    }
}

async fn run_op<S: Raw>(
    locks: &ExpireLock<S>,
    norm: &mut Norm,
    op: &Op,
    label: &str,
) -> Result<Out, String> {
    let store = locks.store();
    let out = match op {
        Op::Lock { name, ttl } => match locks
            .expire_lock(NAMES[*name], Duration::from_secs(TTLS_S[*ttl]))
            .await
        {
            Ok(Acquire::Acquired(lease)) => {
                norm.granted(NAMES[*name], &lease, label)?;
                Out::Acquired(norm.lease(&lease))
            }
            Ok(Acquire::Held { holder, remaining }) => Out::Held {
                holder: norm.lease(&holder),
                remaining_positive: remaining.is_some_and(|r| r > Duration::ZERO),
            },
            Err(e) => err(e),
        },
        Op::LockScript { name, nonce } => {
            let keys = locks.keys(NAMES[*name]).unwrap().both();
            let args = [
                (TTLS_S[0] * 1000).to_string(),
                NONCES[*nonce].to_owned(),
                RETENTION_MS.to_string(),
            ];
            match store.eval(&EXPIRE_LOCK, &keys, &args).await {
                Ok(reply) => {
                    let items = reply.as_array().unwrap_or_default();
                    if let (Some(Reply::Int(1)), Some(lease)) = (
                        items.first(),
                        items.get(1).and_then(Reply::as_str).and_then(Lease::parse),
                    ) {
                        norm.granted(NAMES[*name], &lease, label)?;
                    }
                    Out::Reply(norm.reply(&pttl_sign(reply)))
                }
                Err(e) => err(e),
            }
        }
        Op::Unlock { name, lease } => {
            let lease = norm.lease_ref(lease);
            match locks.expire_unlock(NAMES[*name], &lease).await {
                Ok(outcome) => Out::Unlock(outcome),
                Err(e) => err(e),
            }
        }
        Op::UnlockScript { name, value } => {
            let keys = locks.keys(NAMES[*name]).unwrap();
            match store
                .eval(&EXPIRE_UNLOCK, &[keys.lock], &[VALUES[*value].to_owned()])
                .await
            {
                Ok(reply) => Out::Reply(norm.reply(&reply)),
                Err(e) => err(e),
            }
        }
        Op::Renew { name, lease, ttl } => {
            let lease = norm.lease_ref(lease);
            match locks
                .renew(NAMES[*name], &lease, Duration::from_secs(TTLS_S[*ttl]))
                .await
            {
                Ok(Renew::Renewed(lease)) => Out::Renewed(norm.lease(&lease)),
                Ok(Renew::NotHeld) => Out::RenewNotHeld,
                Ok(Renew::HeldByOther) => Out::RenewHeldByOther,
                Err(e) => err(e),
            }
        }
        Op::RenewScript { name, value, nonce } => {
            let keys = locks.keys(NAMES[*name]).unwrap().both();
            let args = [
                VALUES[*value].to_owned(),
                (TTLS_S[1] * 1000).to_string(),
                NONCES[*nonce].to_owned(),
                RETENTION_MS.to_string(),
            ];
            match store.eval(&RENEW, &keys, &args).await {
                Ok(reply) => Out::Reply(norm.reply(&pttl_sign(reply))),
                Err(e) => err(e),
            }
        }
        Op::RenewManyScript {
            leases,
            refresh,
            repeat,
        } => {
            let mut keys = Vec::new();
            for name in NAMES {
                keys.extend(locks.keys(name).unwrap().both());
            }
            let args = match (&norm.last_renew_many, repeat) {
                (Some(last), true) => last.clone(),
                _ => {
                    let mut args = vec![RETENTION_MS.to_string()];
                    for (lease, refresh) in leases.iter().zip(refresh) {
                        let nonce = format!("c{:x}", norm.renew_nonces);
                        norm.renew_nonces += 1;
                        args.extend([
                            norm.lease_ref(lease).value().to_owned(),
                            (RENEW_MANY_TTL_S * 1000).to_string(),
                            nonce,
                            if *refresh { "1" } else { "0" }.to_owned(),
                        ]);
                    }
                    args
                }
            };
            norm.last_renew_many = Some(args.clone());
            match store.eval(&RENEW_MANY, &keys, &args).await {
                Ok(reply) => {
                    // Each renewed lease, as the watchdog rebuilds it from the expiry reported,
                    // becomes a lease later steps can name.
                    let items = reply.as_array().unwrap_or_default().to_vec();
                    for (i, item) in items.chunks(4).enumerate() {
                        if let ([Reply::Int(1), Reply::Int(expiry), _, _], Some(old)) =
                            (item, Lease::parse(&args[4 * i + 1]))
                        {
                            let value = format!("tl1:{expiry}:{}:{}", old.fence(), args[4 * i + 3]);
                            if let Some(renewed) = Lease::parse(&value) {
                                norm.lease(&renewed);
                            }
                        }
                    }
                    Out::Reply(norm.reply(&pttls_sign(reply)))
                }
                Err(e) => err(e),
            }
        }
        Op::ForceUnlock { name } => match locks.force_unlock(NAMES[*name]).await {
            Ok(deleted) => Out::Bool(deleted),
            Err(e) => err(e),
        },
        Op::Inspect { name } => match locks.inspect(NAMES[*name]).await {
            Ok(Inspection {
                key_type,
                holder,
                foreign,
                ttl,
                last_fence,
                ..
            }) => Out::Inspected {
                key_type,
                holder: holder.map(|h| norm.lease(&h)),
                foreign,
                ttl: ttl_class(ttl),
                last_fence: last_fence.map(|f| norm.num(i128::from(f))),
            },
            Err(e) => err(e),
        },
        Op::Get { key } => match store.get(KEYS[*key]).await {
            Ok(v) => Out::Value(v.map(|v| norm.val(&v))),
            Err(e) => err(e),
        },
        Op::Set { key, value } => match store.set(KEYS[*key], VALUES[*value].as_bytes()).await {
            Ok(()) => Out::Unit,
            Err(e) => err(e),
        },
        Op::SetNx { key, value } => match store.set_nx(KEYS[*key], VALUES[*value].as_bytes()).await
        {
            Ok(set) => Out::Bool(set),
            Err(e) => err(e),
        },
        Op::SetNxPx { key, value } => {
            match store
                .set_nx_px(
                    KEYS[*key],
                    VALUES[*value].as_bytes(),
                    Duration::from_secs(60),
                )
                .await
            {
                Ok(set) => Out::Bool(set),
                Err(e) => err(e),
            }
        }
        Op::GetSet { key, value } => {
            match store.getset(KEYS[*key], VALUES[*value].as_bytes()).await {
                Ok(v) => Out::Value(v.map(|v| norm.val(&v))),
                Err(e) => err(e),
            }
        }
        Op::GetDel { key } => match store.getdel(KEYS[*key]).await {
            Ok(v) => Out::Value(v.map(|v| norm.val(&v))),
            Err(e) => err(e),
        },
        Op::Del { key } => match store.del(KEYS[*key]).await {
            Ok(existed) => Out::Bool(existed),
            Err(e) => err(e),
        },
        Op::Incr { key } => match store.incr(KEYS[*key]).await {
            Ok(n) => Out::Int(norm.num(i128::from(n))),
            Err(e) => err(e),
        },
        Op::Decr { key } => match store.decr(KEYS[*key]).await {
            Ok(n) => Out::Int(norm.num(i128::from(n))),
            Err(e) => err(e),
        },
        Op::Expire { key, seconds } => match store.expire(KEYS[*key], *seconds).await {
            Ok(existed) => Out::Bool(existed),
            Err(e) => err(e),
        },
        Op::PExpire { key } => match store.pexpire(KEYS[*key], Duration::from_secs(90)).await {
            Ok(existed) => Out::Bool(existed),
            Err(e) => err(e),
        },
        Op::Pttl { key } => match store.pttl(KEYS[*key]).await {
            Ok(ttl) => Out::Ttl(ttl_class(ttl)),
            Err(e) => err(e),
        },
        Op::Type { key } => match store.key_type(KEYS[*key]).await {
            Ok(t) => Out::Type(t),
            Err(e) => err(e),
        },
        Op::HSet { key } => match store.hset(KEYS[*key]).await {
            Ok(()) => Out::Unit,
            Err(e) => err(e),
        },
        Op::RPush { key } => match store.rpush(KEYS[*key]).await {
            Ok(()) => Out::Unit,
            Err(e) => err(e),
        },
    };
    Ok(out)
}

async fn run_case(
    server: &RedisServer,
    redis: &RedisStore,
    ops: &[Op],
) -> Result<(), TestCaseError> {
    let _: () = redis
        .command(&redis::cmd("FLUSHALL"))
        .await
        .map_err(|e| TestCaseError::fail(format!("FLUSHALL: {e}\n{}", server.log_section())))?;
    let clock = VirtualClock::new(SystemClock.now());
    let memory = ExpireLock::new(MemoryStore::with_clock(Arc::new(clock.clone())));
    let redis = ExpireLock::new(redis.clone());
    let (mut on_memory, mut on_redis) = (Norm::default(), Norm::default());
    let mut history = Vec::new();
    for (step, op) in ops.iter().enumerate() {
        clock.advance(Duration::from_millis(1));
        let m = run_op(&memory, &mut on_memory, op, "memory")
            .await
            .map_err(TestCaseError::fail)?;
        let r = run_op(&redis, &mut on_redis, op, "redis")
            .await
            .map_err(TestCaseError::fail)?;
        if let Out::Err(ErrorKind::Connection, message) = &r {
            return Err(TestCaseError::fail(format!(
                "redis connection failed at step {step}: {message}\n{}",
                server.log_section()
            )));
        }
        history.push(format!("{step:>2}: {op:?} -> {m:?}"));
        if m != r {
            return Err(TestCaseError::fail(format!(
                "the stores disagree at step {step}: {op:?}\n  memory: {m:?}\n  redis:  {r:?}\nhistory:\n{}",
                history.join("\n")
            )));
        }
    }
    Ok(())
}

#[test]
fn memory_and_redis_agree_on_random_operation_sequences() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let redis = runtime.block_on(server.store());
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|c| c.parse().ok())
        .unwrap_or(256);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op_strategy(), 1..=40), |ops| {
        runtime.block_on(run_case(&server, &redis, &ops))
    });
    if let Err(failure) = result {
        panic!("{failure}");
    }
}

// ---------------------------------------------------------------------------------------------
// a fixed walk through what the random sequences never reach: keys that expire (and `PEXPIRE`
// under a millisecond), non-canonical integers, sorted sets, `WATCH`, and the legacy and rwlock
// scripts, with 17-20 digit legacy timestamps in both units.

/// The recorded outcomes of one store's walk: (what was done, its normalised outcome).
struct Tape<'n> {
    norm: &'n mut Norm,
    steps: Vec<(String, String)>,
}

impl Tape<'_> {
    fn record<T: std::fmt::Debug>(&mut self, what: impl Into<String>, out: Result<T>) {
        let out = match out {
            Ok(v) => format!("{v:?}"),
            Err(e) => format!("{:?}", err(e)),
        };
        self.steps.push((what.into(), out));
    }

    /// A script's reply. The elements at `time_at` (remaining times in ms, timestamps) are
    /// reduced to a class: an integer to its sign, a decimal string to `<number>`. Every
    /// clock-derived number (≥ 10¹²: expiry times, fences) is reduced to `Time`: the walks run on
    /// two clocks, one after the other, so only whether such a number appears is compared.
    fn reply(&mut self, what: impl Into<String>, reply: Result<Reply>, time_at: &[usize]) {
        let out = match reply {
            Ok(Reply::Array(mut items)) => {
                for &i in time_at {
                    match items.get_mut(i) {
                        Some(Reply::Int(n)) => *n = n.signum(),
                        Some(d @ Reply::Data(_))
                            if d.as_str().is_some_and(|t| t.parse::<u64>().is_ok()) =>
                        {
                            *d = Reply::data("<number>");
                        }
                        _ => {}
                    }
                }
                Ok(collapse(self.norm.reply(&Reply::Array(items))))
            }
            Ok(reply) => Ok(collapse(self.norm.reply(&reply))),
            Err(e) => Err(e),
        };
        self.record(what, out);
    }

    fn value(&mut self, what: impl Into<String>, value: Result<Option<Vec<u8>>>) {
        let out = value.map(|v| v.map(|v| self.norm.val(&v)));
        self.record(what, out);
    }
}

fn collapse(r: R) -> R {
    let num = |n: Num| match n {
        Num::Time(_) => Num::Time(0),
        raw => raw,
    };
    match r {
        R::Int(n) => R::Int(num(n)),
        R::Val(Val::Num(n)) => R::Val(Val::Num(num(n))),
        R::Val(Val::Lease(l)) => R::Val(Val::Lease(LeaseN {
            id: 0,
            fence: num(l.fence),
            nonce: l.nonce,
        })),
        R::Array(items) => R::Array(items.into_iter().map(collapse).collect()),
        other => other,
    }
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Long enough that a 20 ms TTL has surely passed, even on a loaded machine.
const PAST_SHORT_TTL_MS: u64 = 120;

async fn walk<S: Raw + tairlock_legacy::WatchStore>(store: &S, tape: &mut Tape<'_>) {
    use tairlock_legacy::scripts as legacy;
    use tairlock_legacy::watch::{Expiry, Read, TxOp, WatchConnection};
    use tairlock_rwlock::scripts as rw;

    // Expiring keys: gone after their TTL, free to take again; INCR keeps a TTL; a PEXPIRE
    // under 1 ms (sent as 0) and PEXPIRE 0 delete at once.
    tape.record(
        "set_nx_px e1 20ms",
        store.set_nx_px("e1", b"v", Duration::from_millis(20)).await,
    );
    tape.record("pttl e1", store.pttl("e1").await.map(ttl_class));
    store.set("e2", b"5").await.unwrap();
    tape.record(
        "pexpire e2 20ms",
        store.pexpire("e2", Duration::from_millis(20)).await,
    );
    tape.record("incr e2", store.incr("e2").await);
    tape.record("pttl e2", store.pttl("e2").await.map(ttl_class));
    sleep_ms(PAST_SHORT_TTL_MS).await;
    tape.value("get e1 after its ttl", store.get("e1").await);
    tape.record(
        "pttl e1 after its ttl",
        store.pttl("e1").await.map(ttl_class),
    );
    tape.record("set_nx e1 again", store.set_nx("e1", b"w").await);
    tape.record("incr e2 after its ttl", store.incr("e2").await);
    store.set("e3", b"v").await.unwrap();
    tape.record(
        "pexpire e3 999us",
        store.pexpire("e3", Duration::from_micros(999)).await,
    );
    tape.value("get e3", store.get("e3").await);
    store.set("e4", b"v").await.unwrap();
    tape.record("pexpire e4 0", store.pexpire("e4", Duration::ZERO).await);
    tape.record("type e4", store.key_type("e4").await);
    tape.record(
        "pexpire missing 999us",
        store.pexpire("e5", Duration::from_micros(999)).await,
    );

    // Non-canonical integers, for INCR/DECR and under keys the scripts parse.
    for v in [
        "+5",
        "05",
        "-0",
        "00",
        "0",
        " 5",
        "5 ",
        "1e3",
        "0x10",
        "-",
        "",
        "5.0",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
    ] {
        store.set("n", v.as_bytes()).await.unwrap();
        tape.record(format!("incr {v:?}"), store.incr("n").await);
        store.set("n", v.as_bytes()).await.unwrap();
        tape.record(format!("decr {v:?}"), store.decr("n").await);
    }

    // The core scripts on a lease that expires, then on non-canonical look-alikes.
    let lock = strings(&["tairlock:{c}", "tairlock:{c}:fence"]);
    let acquire = |nonce: &str, ttl_ms: u64| {
        strings(&[&ttl_ms.to_string(), nonce, &RETENTION_MS.to_string()])
    };
    tape.reply(
        "core lock aa 20ms",
        store.eval(&EXPIRE_LOCK, &lock, &acquire("aa", 20)).await,
        &[2],
    );
    let first = store.get(&lock[0]).await.unwrap().unwrap_or_default();
    sleep_ms(PAST_SHORT_TTL_MS).await;
    tape.reply(
        "core lock bb after expiry",
        store
            .eval(&EXPIRE_LOCK, &lock, &acquire("bb", 30_000))
            .await,
        &[2],
    );
    let first = String::from_utf8_lossy(&first).into_owned();
    tape.reply(
        "core unlock the expired lease",
        store.eval(&EXPIRE_UNLOCK, &lock[..1], &[first]).await,
        &[],
    );
    for held in [
        "tl1:99999999999999:007:aa",
        "tl1:099999999999999:7:aa",
        "tl1:+99999999999999:7:aa",
    ] {
        store.set(&lock[0], held.as_bytes()).await.unwrap();
        tape.reply(
            format!("core lock over {held}"),
            store
                .eval(&EXPIRE_LOCK, &lock, &acquire("cc", 30_000))
                .await,
            &[2],
        );
        tape.reply(
            format!("core unlock {held}"),
            store
                .eval(&EXPIRE_UNLOCK, &lock[..1], &strings(&[held]))
                .await,
            &[],
        );
    }
    for fence in ["007", "+7", "-1", "7.0"] {
        store.del(&lock[0]).await.unwrap();
        store.set(&lock[1], fence.as_bytes()).await.unwrap();
        tape.reply(
            format!("core lock over fence {fence:?}"),
            store
                .eval(&EXPIRE_LOCK, &lock, &acquire("dd", 30_000))
                .await,
            &[2],
        );
    }

    // The legacy scripts: timestamps of 16-20 digits and with leading zeros, in seconds (1000 ms
    // per unit) and in milliseconds; a fence with leading zeros; release, renew, probe.
    let lk = strings(&["lock.order", "lock.order:fence"]);
    for unit in ["1000", "1"] {
        for held in [
            "1234567890123456",
            "12345678901234567",
            "123456789012345678",
            "9999999999999999999",
            "18446744073709551615",
            "99999999999999999999",
            "0000000000000000007",
            "007",
            "",
        ] {
            store.set(&lk[0], held.as_bytes()).await.unwrap();
            store.del(&lk[1]).await.unwrap();
            tape.reply(
                format!("legacy acquire over {held:?}, unit {unit}"),
                store
                    .eval(&legacy::ACQUIRE, &lk, &strings(&[unit, "30", "60000"]))
                    .await,
                &[1, 2, 3],
            );
        }
    }
    // A key with a TTL is held while it exists, however long ago its timestamp passed.
    store.set(&lk[0], b"1000").await.unwrap();
    store
        .pexpire(&lk[0], Duration::from_secs(30))
        .await
        .unwrap();
    for unit in ["1000", "1"] {
        tape.reply(
            format!("legacy acquire over a passed timestamp with a ttl, unit {unit}"),
            store
                .eval(&legacy::ACQUIRE, &lk, &strings(&[unit, "30", "60000"]))
                .await,
            &[2],
        );
    }
    store.del(&lk[0]).await.unwrap();
    store.set(&lk[1], b"007").await.unwrap();
    let taken = store
        .eval(&legacy::ACQUIRE, &lk, &strings(&["1", "20", "60000"]))
        .await;
    let (value, fence) = match taken.as_ref().ok().and_then(Reply::as_array) {
        Some([_, value, fence, _]) => (
            value.as_str().unwrap_or_default().to_owned(),
            fence.as_str().unwrap_or_default().to_owned(),
        ),
        _ => (String::new(), String::new()),
    };
    tape.reply("legacy acquire 20ms over fence 007", taken, &[1, 3]);
    // The renewed timestamp must differ from the acquired one on both stores.
    sleep_ms(3).await;
    tape.reply(
        "legacy renew",
        store
            .eval(
                &legacy::RENEW,
                &lk,
                &strings(&[&value, &fence, "1", "20", "60000"]),
            )
            .await,
        &[1, 2],
    );
    tape.reply(
        "legacy release the old value",
        store
            .eval(&legacy::RELEASE, &lk, &strings(&[&value, &fence]))
            .await,
        &[],
    );
    sleep_ms(PAST_SHORT_TTL_MS).await;
    tape.value("legacy lock after its ttl", store.get(&lk[0]).await);
    tape.reply(
        "legacy renew after expiry",
        store
            .eval(
                &legacy::RENEW,
                &lk,
                &strings(&[&value, &fence, "1", "20", "60000"]),
            )
            .await,
        &[],
    );
    tape.reply(
        "legacy release after expiry",
        store
            .eval(&legacy::RELEASE, &lk, &strings(&[&value, &fence]))
            .await,
        &[],
    );
    tape.reply(
        "legacy probe",
        store.eval(&legacy::PROBE, &[], &[]).await,
        &[],
    );

    // The rwlock scripts, whose readers live in a sorted set: readers in, a writer refused (and
    // its intent keeping new readers out), readers expiring and reaped, the writer in, downgrade,
    // abandon; and a sorted set or a non-canonical fence where the scripts expect their own data.
    let k = |s: &str| format!("rw:{{r}}:{s}");
    let (w, r, wi, fence) = (k("w"), k("r"), k("wi"), k("fence"));
    let read_keys = vec![w.clone(), r.clone(), wi.clone()];
    let write_keys = vec![w.clone(), r.clone(), wi.clone(), fence.clone()];
    let channel = k("released");
    let read = |nonce: &str, ms: &str| strings(&[nonce, ms, "1"]);
    let write = |nonce: &str, ms: &str| strings(&[nonce, ms, "5000", "60000"]);
    tape.reply(
        "rw read r1",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r1", "30000"))
            .await,
        &[3],
    );
    tape.reply(
        "rw read r2 20ms",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r2", "20"))
            .await,
        &[3],
    );
    tape.reply(
        "rw read r1 again",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r1", "30000"))
            .await,
        &[3],
    );
    // Scores are lease expiry times by each store's clock: compared by sign.
    let readers = store.zrange(&r).await;
    tape.record(
        "zrange readers",
        readers.map(|z| {
            z.into_iter()
                .map(|(m, s)| (m, s.signum()))
                .collect::<Vec<_>>()
        }),
    );
    tape.reply(
        "rw write w1 refused",
        store
            .eval(&rw::WRITE_ACQUIRE, &write_keys, &write("w1", "30000"))
            .await,
        &[2],
    );
    tape.reply(
        "rw read r3 behind intent",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r3", "30000"))
            .await,
        &[2],
    );
    tape.reply(
        "rw count",
        store.eval(&rw::COUNT, &read_keys, &[]).await,
        &[1, 2],
    );
    tape.reply(
        "rw renew r1",
        store
            .eval(
                &rw::READ_RENEW,
                std::slice::from_ref(&r),
                &strings(&["r1", "30000"]),
            )
            .await,
        &[2],
    );
    tape.reply(
        "rw release r1",
        store
            .eval(
                &rw::READ_RELEASE,
                std::slice::from_ref(&r),
                &strings(&["r1", &channel]),
            )
            .await,
        &[],
    );
    tape.reply(
        "rw release r1 again",
        store
            .eval(
                &rw::READ_RELEASE,
                std::slice::from_ref(&r),
                &strings(&["r1", &channel]),
            )
            .await,
        &[],
    );
    sleep_ms(PAST_SHORT_TTL_MS).await;
    tape.reply(
        "rw renew r2 after its lease",
        store
            .eval(
                &rw::READ_RENEW,
                std::slice::from_ref(&r),
                &strings(&["r2", "30000"]),
            )
            .await,
        &[],
    );
    tape.reply(
        "rw count after r2 expired",
        store.eval(&rw::COUNT, &read_keys, &[]).await,
        &[1, 2],
    );
    let taken = store
        .eval(&rw::WRITE_ACQUIRE, &write_keys, &write("w1", "30000"))
        .await;
    let lease = match taken.as_ref().ok().and_then(Reply::as_array) {
        Some([Reply::Int(1), lease, _]) => lease.as_str().unwrap_or_default().to_owned(),
        _ => String::new(),
    };
    tape.reply("rw write w1", taken, &[2]);
    tape.reply(
        "rw write w2 refused",
        store
            .eval(&rw::WRITE_ACQUIRE, &write_keys, &write("w2", "30000"))
            .await,
        &[2],
    );
    tape.reply(
        "rw read r4 refused",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r4", "30000"))
            .await,
        &[2],
    );
    tape.reply(
        "rw downgrade a wrong lease",
        store
            .eval(
                &rw::DOWNGRADE,
                &[w.clone(), r.clone()],
                &strings(&["tl1:1:1:ffff", "r5", "30000", &channel]),
            )
            .await,
        &[],
    );
    tape.reply(
        "rw downgrade",
        store
            .eval(
                &rw::DOWNGRADE,
                &[w.clone(), r.clone()],
                &strings(&[&lease, "r5", "30000", &channel]),
            )
            .await,
        &[3],
    );
    tape.reply(
        "rw count after downgrade",
        store.eval(&rw::COUNT, &read_keys, &[]).await,
        &[1, 2],
    );
    tape.reply(
        "rw abandon w2",
        store
            .eval(
                &rw::WRITE_ABANDON,
                &[w.clone(), wi.clone()],
                &strings(&["w2", &channel]),
            )
            .await,
        &[],
    );
    store.zadd(&w, 1.0, "x").await.unwrap();
    tape.reply(
        "rw write over a sorted set",
        store
            .eval(&rw::WRITE_ACQUIRE, &write_keys, &write("w3", "30000"))
            .await,
        &[],
    );
    tape.reply(
        "rw read over a sorted set",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r6", "30000"))
            .await,
        &[],
    );
    store.del(&w).await.unwrap();
    store.del(&r).await.unwrap();
    store.set(&r, b"x").await.unwrap();
    tape.reply(
        "rw read over a string readers key",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r7", "30000"))
            .await,
        &[],
    );
    store.del(&r).await.unwrap();
    for f in ["007", "+7", "x"] {
        store.del(&w).await.unwrap();
        store.set(&fence, f.as_bytes()).await.unwrap();
        tape.reply(
            format!("rw write over fence {f:?}"),
            store
                .eval(&rw::WRITE_ACQUIRE, &write_keys, &write("w4", "30000"))
                .await,
            &[2],
        );
    }
    store.zadd(&r, 5.0, "old").await.unwrap();
    tape.reply(
        "rw read beside a reader whose lease passed",
        store
            .eval(&rw::READ_ACQUIRE, &read_keys, &read("r8", "30000"))
            .await,
        &[3],
    );

    // The fair writers' scripts: a queue of writers with waiter leases, a grant on release, a
    // dead waiter skipped, a waiter leaving with its grant, the intent naming the head, the last
    // reader waking the head, and a queue key holding other data.
    let f = |s: &str| format!("rwf:{{f}}:{s}");
    let fair_keys = vec![f("w"), f("r"), f("wi"), f("fence"), f("wq"), f("ww")];
    let fair_release_keys = vec![f("w"), f("wi"), f("fence"), f("wq"), f("ww")];
    let fair_read_keys = vec![f("w"), f("r"), f("wi")];
    let fair = |nonce: &str, wl: &str, queue: &str| {
        strings(&[
            nonce,
            "30000",
            "5000",
            "60000",
            wl,
            &format!("{}:w:{nonce}", f("released")),
            queue,
            &f("intent"),
        ])
    };
    let fair_release =
        |what: &str, by: &str| strings(&[what, by, "60000", &f("released"), "PUBLISH", "5000"]);
    let lease_of = |reply: &Result<Reply>| match reply.as_ref().ok().and_then(Reply::as_array) {
        Some([Reply::Int(1), lease, _]) => lease.as_str().unwrap_or_default().to_owned(),
        _ => String::new(),
    };
    tape.reply(
        "fair a1 single attempt",
        store
            .eval(
                &rw::FAIR_WRITE_ACQUIRE,
                &fair_keys,
                &fair("a1", "30000", "0"),
            )
            .await,
        &[2],
    );
    for (nonce, wl) in [
        ("b2", "30000"),
        ("c3", "20"),
        ("d4", "30000"),
        ("b2", "30000"),
    ] {
        tape.reply(
            format!("fair {nonce} queued"),
            store
                .eval(&rw::FAIR_WRITE_ACQUIRE, &fair_keys, &fair(nonce, wl, "1"))
                .await,
            &[2],
        );
    }
    tape.value("fair intent names the head", store.get(&f("wi")).await);
    tape.reply(
        "fair read refused",
        store
            .eval(&rw::READ_ACQUIRE, &fair_read_keys, &read("r1", "30000"))
            .await,
        &[2],
    );
    let again = store
        .eval(
            &rw::FAIR_WRITE_ACQUIRE,
            &fair_keys,
            &fair("a1", "30000", "0"),
        )
        .await;
    let a1 = lease_of(&again);
    tape.reply("fair a1 repeated", again, &[2]);
    tape.reply(
        "fair release a1: granted to b2",
        store
            .eval(
                &rw::FAIR_WRITE_RELEASE,
                &fair_release_keys,
                &fair_release(&a1, "lease"),
            )
            .await,
        &[],
    );
    tape.reply(
        "fair release a1 again",
        store
            .eval(
                &rw::FAIR_WRITE_RELEASE,
                &fair_release_keys,
                &fair_release(&a1, "lease"),
            )
            .await,
        &[],
    );
    tape.reply(
        "fair c3 behind the grant",
        store
            .eval(&rw::FAIR_WRITE_ACQUIRE, &fair_keys, &fair("c3", "20", "1"))
            .await,
        &[2],
    );
    sleep_ms(PAST_SHORT_TTL_MS).await;
    tape.reply(
        "fair b2 leaves with its grant: c3 skipped, d4 granted",
        store
            .eval(
                &rw::FAIR_WRITE_RELEASE,
                &fair_release_keys,
                &fair_release("b2", "nonce"),
            )
            .await,
        &[],
    );
    tape.reply(
        "fair b2 leaves again",
        store
            .eval(
                &rw::FAIR_WRITE_RELEASE,
                &fair_release_keys,
                &fair_release("b2", "nonce"),
            )
            .await,
        &[],
    );
    let confirmed = store
        .eval(
            &rw::FAIR_WRITE_ACQUIRE,
            &fair_keys,
            &fair("d4", "30000", "1"),
        )
        .await;
    let d4 = lease_of(&confirmed);
    tape.reply("fair d4 confirms", confirmed, &[2]);
    tape.record("fair queue after d4", store.key_type(&f("wq")).await);
    tape.record("fair intent after d4", store.key_type(&f("wi")).await);
    tape.reply(
        "fair release d4: nobody queued",
        store
            .eval(
                &rw::FAIR_WRITE_RELEASE,
                &fair_release_keys,
                &fair_release(&d4, "lease"),
            )
            .await,
        &[],
    );
    tape.reply(
        "fair read in",
        store
            .eval(&rw::READ_ACQUIRE, &fair_read_keys, &read("r2", "30000"))
            .await,
        &[3],
    );
    tape.reply(
        "fair e5 behind a reader",
        store
            .eval(
                &rw::FAIR_WRITE_ACQUIRE,
                &fair_keys,
                &fair("e5", "30000", "1"),
            )
            .await,
        &[2],
    );
    tape.reply(
        "fair f6 behind e5",
        store
            .eval(
                &rw::FAIR_WRITE_ACQUIRE,
                &fair_keys,
                &fair("f6", "30000", "1"),
            )
            .await,
        &[2],
    );
    tape.reply(
        "fair read behind the queued writer",
        store
            .eval(&rw::READ_ACQUIRE, &fair_read_keys, &read("r3", "30000"))
            .await,
        &[2],
    );
    tape.reply(
        "fair last reader leaves",
        store
            .eval(
                &rw::READ_RELEASE,
                &[f("r"), f("wq"), f("ww")],
                &strings(&["r2", &f("released")]),
            )
            .await,
        &[],
    );
    tape.reply(
        "fair f6 still behind e5",
        store
            .eval(
                &rw::FAIR_WRITE_ACQUIRE,
                &fair_keys,
                &fair("f6", "30000", "1"),
            )
            .await,
        &[2],
    );
    tape.reply(
        "fair e5 in",
        store
            .eval(
                &rw::FAIR_WRITE_ACQUIRE,
                &fair_keys,
                &fair("e5", "30000", "1"),
            )
            .await,
        &[2],
    );
    tape.value("fair intent passed to f6", store.get(&f("wi")).await);
    tape.reply(
        "fair f6 leaves",
        store
            .eval(
                &rw::FAIR_WRITE_RELEASE,
                &fair_release_keys,
                &fair_release("f6", "nonce"),
            )
            .await,
        &[],
    );
    tape.record("fair intent after f6 left", store.key_type(&f("wi")).await);
    store.del(&f("wq")).await.unwrap();
    store.set(&f("wq"), b"x").await.unwrap();
    tape.reply(
        "fair over a string queue key",
        store
            .eval(
                &rw::FAIR_WRITE_ACQUIRE,
                &fair_keys,
                &fair("a7", "30000", "1"),
            )
            .await,
        &[],
    );
    tape.reply(
        "fair release over a string queue key",
        store
            .eval(
                &rw::FAIR_WRITE_RELEASE,
                &fair_release_keys,
                &fair_release("a7", "nonce"),
            )
            .await,
        &[],
    );
    tape.reply(
        "read release beside a string queue key",
        store
            .eval(
                &rw::READ_RELEASE,
                &[f("r"), f("wq"), f("ww")],
                &strings(&["r9", &f("released")]),
            )
            .await,
        &[],
    );
    store.del(&f("wq")).await.unwrap();

    // WATCH: a write by another connection aborts EXEC, so does expiry of a watched key; an
    // untouched watch commits.
    let mut con = store.watch_connection().await.unwrap();
    store.set("wk", b"1").await.unwrap();
    let keys = strings(&["wk"]);
    let set = |v: &str| TxOp::Set {
        key: "wk".to_owned(),
        value: v.as_bytes().to_vec(),
        expiry: Expiry::Millis(30_000),
        xx: false,
    };
    tape.record(
        "watch wk",
        con.watch(&keys, &[Read::Get("wk".to_owned())]).await,
    );
    store.set("wk", b"2").await.unwrap();
    tape.record("exec after another write", con.exec(&[set("3")]).await);
    tape.record(
        "watch wk again",
        con.watch(&keys, &[Read::Get("wk".to_owned())]).await,
    );
    tape.record(
        "exec untouched",
        con.exec(&[
            set("4"),
            TxOp::Incr {
                key: "wk".to_owned(),
            },
        ])
        .await,
    );
    // Reads queued after a write: the time to live it left (a positive one reduced to 1), and
    // a missing key's -2.
    tape.record(
        "watch wk for a write and its time to live",
        con.watch(&keys, &[Read::Get("wk".to_owned())]).await,
    );
    let pttl = |key: &str| TxOp::Pttl {
        key: key.to_owned(),
    };
    let ttl = |key: &str| TxOp::Ttl {
        key: key.to_owned(),
    };
    let positive = |replies: Vec<Reply>| -> Vec<Reply> {
        replies
            .into_iter()
            .map(|r| match r {
                Reply::Int(n) if n > 0 => Reply::Int(1),
                other => other,
            })
            .collect()
    };
    tape.record(
        "exec a write, then its time to live",
        con.exec(&[set("5"), pttl("wk"), ttl("wk"), pttl("wz"), ttl("wz")])
            .await
            .map(|replies| replies.map(positive)),
    );
    store
        .set_nx_px("wx", b"1", Duration::from_millis(20))
        .await
        .unwrap();
    let keys = strings(&["wx"]);
    tape.record(
        "watch wx (20ms)",
        con.watch(&keys, &[Read::Get("wx".to_owned())]).await,
    );
    sleep_ms(PAST_SHORT_TTL_MS).await;
    tape.record(
        "exec after wx expired",
        con.exec(&[TxOp::Del {
            key: "wx".to_owned(),
        }])
        .await,
    );
    tape.record(
        "watch missing wy",
        con.watch(&strings(&["wy"]), &[Read::Pttl("wy".to_owned())])
            .await,
    );
    tape.record(
        "exec on missing wy",
        con.exec(&[TxOp::Incr {
            key: "wy".to_owned(),
        }])
        .await,
    );

    // The expire lock's fair scripts: a cycle with nobody queued (which reads no queue), a grant
    // to a queued waiter and its confirmation, a leave with nobody queued, user data under the
    // fence key (untouched by a release with nobody queued, refused by an attempt) and under
    // the queue key.
    let g = |s: &str| format!("fx:{{g}}{s}");
    let fair_keys = vec![g(""), g(":fence"), g(":fairq"), g(":fairw")];
    let attempt = |nonce: &str, queue: &str| {
        strings(&[
            "30000",
            nonce,
            "60000",
            "30000",
            &format!("{}:w:{nonce}", g(":released")),
            queue,
        ])
    };
    let unlock = |what: &str, by: &str| strings(&[what, by, "60000", &g(":released"), "PUBLISH"]);
    let lease_of = |reply: &Result<Reply>| match reply.as_ref().ok().and_then(Reply::as_array) {
        Some([Reply::Int(1), lease, ..]) => lease.as_str().unwrap_or_default().to_owned(),
        _ => String::new(),
    };
    let taken = store
        .eval(&FAIR_LOCK, &fair_keys, &attempt("a1", "1"))
        .await;
    let a1 = lease_of(&taken);
    tape.reply("fair lock a1, nobody queued", taken, &[2]);
    tape.reply(
        "fair lock b2 queues",
        store
            .eval(&FAIR_LOCK, &fair_keys, &attempt("b2", "1"))
            .await,
        &[1, 2],
    );
    tape.reply(
        "fair unlock a1: granted to b2",
        store
            .eval(&FAIR_UNLOCK, &fair_keys, &unlock(&a1, "lease"))
            .await,
        &[],
    );
    let confirmed = store
        .eval(&FAIR_LOCK, &fair_keys, &attempt("b2", "1"))
        .await;
    let b2 = lease_of(&confirmed);
    tape.reply("fair lock b2 confirms its grant", confirmed, &[2]);
    tape.record("fair queue gone", store.key_type(&g(":fairq")).await);
    tape.reply(
        "fair unlock b2, nobody queued",
        store
            .eval(&FAIR_UNLOCK, &fair_keys, &unlock(&b2, "lease"))
            .await,
        &[],
    );
    tape.reply(
        "fair leave c3, nobody queued",
        store
            .eval(&FAIR_UNLOCK, &fair_keys, &unlock("c3", "nonce"))
            .await,
        &[],
    );
    let taken = store
        .eval(&FAIR_LOCK, &fair_keys, &attempt("d4", "0"))
        .await;
    let d4 = lease_of(&taken);
    tape.reply("fair lock d4, nobody queued", taken, &[2]);
    store.del(&g(":fence")).await.unwrap();
    store.rpush(&g(":fence")).await.unwrap();
    tape.reply(
        "fair unlock d4 beside a list under the fence key",
        store
            .eval(&FAIR_UNLOCK, &fair_keys, &unlock(&d4, "lease"))
            .await,
        &[],
    );
    tape.record("fence key still a list", store.key_type(&g(":fence")).await);
    tape.reply(
        "fair lock e5 refused by the list under the fence key",
        store
            .eval(&FAIR_LOCK, &fair_keys, &attempt("e5", "1"))
            .await,
        &[],
    );
    store.del(&g(":fence")).await.unwrap();
    store.set(&g(":fairq"), b"user").await.unwrap();
    tape.reply(
        "fair lock e5 refused by a string under the queue key",
        store
            .eval(&FAIR_LOCK, &fair_keys, &attempt("e5", "1"))
            .await,
        &[],
    );
    tape.value("queue key untouched", store.get(&g(":fairq")).await);
}

#[test]
fn memory_and_redis_agree_on_expiry_sorted_sets_watch_and_the_legacy_and_rwlock_scripts() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let server = RedisServer::start();
    let redis = runtime.block_on(server.store());
    let (mut on_memory, mut on_redis) = (Norm::default(), Norm::default());
    let mut memory_tape = Tape {
        norm: &mut on_memory,
        steps: Vec::new(),
    };
    let mut redis_tape = Tape {
        norm: &mut on_redis,
        steps: Vec::new(),
    };
    runtime.block_on(async {
        // The embedded store on the system clock: keys expire as on the server.
        walk(&MemoryStore::new(), &mut memory_tape).await;
        walk(&redis, &mut redis_tape).await;
    });
    assert_eq!(memory_tape.steps.len(), redis_tape.steps.len());
    let mut disagree = Vec::new();
    for ((what, m), (_, r)) in memory_tape.steps.iter().zip(&redis_tape.steps) {
        if m != r {
            disagree.push(format!("{what}\n  memory: {m}\n  redis:  {r}"));
        }
    }
    assert!(
        disagree.is_empty(),
        "the stores disagree on {} of {} steps:\n{}\n{}",
        disagree.len(),
        memory_tape.steps.len(),
        disagree.join("\n"),
        server.log_section()
    );
}
