//! Every decoder of a server reply, fed malformed replies (issue 12, item 9): wrong types, short
//! arrays, non-numeric strings, huge and negative numbers, nil. Nothing may panic or hang; a
//! reply that is not what the script returns is a clear error.
//!
//! The replies come from [`Garbled`], a store whose scripts answer with one canned reply (as a
//! server with a foreign script under the same SHA1, a proxy that mangles replies or a buggy
//! fork would). Each operation of every crate runs in its own task, so a panic is caught and
//! reported with the reply that caused it.

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tairlock::keys::key_slot;
use tairlock::store::{Acks, WaitFor};
use tairlock::{
    ExpireLock, Lease, MemoryStore, Options, Redlock, RedlockOptions, ReplicaStore, ReplicatedLock,
    Reply, Script, Semaphore, Store,
};
use tairlock_legacy::watch::{Read, TxOp, WatchConnection};
use tairlock_legacy::{Holding, Profile, ScriptedLock, Unit, WatchLock, WatchStore};
use tairlock_rwlock::RwLock;

/// A store whose scripts all answer with the canned reply (plain commands go to the embedded
/// store).
#[derive(Clone, Default)]
struct Garbled {
    inner: MemoryStore,
    reply: Arc<Mutex<Option<Reply>>>,
}

impl Garbled {
    fn answer(&self, reply: Reply) {
        *self.reply.lock().unwrap() = Some(reply);
    }

    fn canned(&self) -> Reply {
        self.reply.lock().unwrap().clone().expect("a canned reply")
    }
}

impl Store for Garbled {
    support::forward_plain_commands!();
    async fn eval(
        &self,
        _script: &'static Script,
        _keys: &[String],
        _args: &[String],
    ) -> tairlock::Result<Reply> {
        Ok(self.canned())
    }
    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner.runtime()
    }
}

impl ReplicaStore for Garbled {
    async fn eval_wait(
        &self,
        _script: &'static Script,
        _keys: &[String],
        _args: &[String],
        _wait: WaitFor,
    ) -> tairlock::Result<(Reply, Acks)> {
        Ok((self.canned(), Acks { replicas: 1 }))
    }
}

impl WatchStore for Garbled {
    type Connection = GarbledConnection;

    async fn watch_connection(&self) -> tairlock::Result<GarbledConnection> {
        Ok(GarbledConnection {
            store: self.clone(),
        })
    }

    async fn server_version(&self) -> tairlock::Result<Option<String>> {
        Ok(match self.canned() {
            Reply::Data(d) => Some(String::from_utf8_lossy(&d).into_owned()),
            _ => None,
        })
    }
}

/// A `WATCH` connection whose reads (and transaction) answer with the canned reply: an array's
/// elements, one per read, or the reply itself as the only one.
struct GarbledConnection {
    store: Garbled,
}

impl GarbledConnection {
    fn replies(&self) -> Vec<Reply> {
        match self.store.canned() {
            Reply::Array(items) => items,
            other => vec![other],
        }
    }
}

impl WatchConnection for GarbledConnection {
    async fn watch(&mut self, _keys: &[String], _reads: &[Read]) -> tairlock::Result<Vec<Reply>> {
        Ok(self.replies())
    }

    async fn unwatch(&mut self) -> tairlock::Result<()> {
        Ok(())
    }

    async fn exec(&mut self, _ops: &[TxOp]) -> tairlock::Result<Option<Vec<Reply>>> {
        Ok(Some(self.replies()))
    }
}

/// The malformed replies: every shape a script of ours does not return, and well-shaped ones
/// with absurd values.
fn malformed() -> Vec<Reply> {
    let lease = Reply::data("tl1:1700000000123:42:00ff00ff");
    let int = Reply::Int;
    let arr = Reply::Array;
    vec![
        Reply::Nil,
        int(2),
        int(-7),
        int(i64::MAX),
        int(i64::MIN),
        Reply::data("x"),
        Reply::data("99999999999999999999999999"),
        Reply::Data(vec![0xff, 0xfe, 0x00]),
        Reply::Status("OK".into()),
        arr(vec![]),
        arr(vec![Reply::Nil]),
        arr(vec![int(1)]),
        arr(vec![int(0)]),
        arr(vec![int(-1), Reply::Nil]),
        arr(vec![int(1), Reply::Nil]),
        arr(vec![int(1), int(5)]),
        arr(vec![int(1), Reply::data("garbage")]),
        arr(vec![int(1), Reply::data("tl1:x:y:zz")]),
        arr(vec![int(1), Reply::data("tl1:1:2:")]),
        arr(vec![int(7), lease.clone()]),
        arr(vec![Reply::data("1"), lease.clone()]),
        arr(vec![arr(vec![int(1)]), arr(vec![])]),
        // Well-shaped, absurd numbers: a holder with eternity or less than nothing left.
        arr(vec![int(0), lease.clone(), int(i64::MAX)]),
        arr(vec![int(0), lease.clone(), int(i64::MIN)]),
        arr(vec![int(0), lease.clone(), Reply::data("soon")]),
        arr(vec![
            int(1),
            lease.clone(),
            int(i64::MAX),
            int(i64::MAX),
            int(i64::MAX),
        ]),
        arr(vec![
            int(1),
            lease.clone(),
            int(i64::MIN),
            int(i64::MIN),
            int(i64::MIN),
        ]),
        arr(vec![int(1), int(i64::MAX), int(i64::MAX), int(i64::MAX)]),
        arr(vec![int(1), int(i64::MIN), int(i64::MIN), int(i64::MIN)]),
        arr(vec![int(0), int(i64::MAX), int(i64::MAX)]),
        arr(vec![int(0), int(i64::MIN), int(i64::MIN)]),
        arr(vec![int(0), Reply::Nil, int(i64::MAX)]),
        arr(vec![
            int(1),
            Reply::data("99999999999999999999"),
            Reply::data("-1"),
        ]),
        // WatchLock reads (GET, PTTL, GET fence, TIME) with absurd values.
        arr(vec![
            Reply::Nil,
            int(-2),
            Reply::Nil,
            arr(vec![
                Reply::data("18446744073709551615"),
                Reply::data("999999999999"),
            ]),
        ]),
        arr(vec![
            Reply::data("9999999999999999999"),
            int(-1),
            Reply::data("9999999999999999999"),
            arr(vec![Reply::data("1700000000"), Reply::data("0")]),
        ]),
        arr(vec![
            Reply::data("9999999999999999999"),
            int(i64::MAX),
            Reply::data("9999999999999999999"),
            arr(vec![Reply::data("99999999999999"), Reply::data("1")]),
        ]),
        arr(vec![
            Reply::data("1"),
            int(-1),
            Reply::data("-5"),
            arr(vec![Reply::data("x")]),
        ]),
        arr(vec![
            Reply::data("string"),
            Reply::data("x"),
            int(i64::MIN),
            Reply::data("nan"),
            int(i64::MAX),
            arr(vec![
                Reply::data("r"),
                Reply::data("not a number"),
                Reply::Nil,
            ]),
        ]),
        arr(vec![
            Reply::data("none"),
            Reply::Nil,
            int(-2),
            Reply::Nil,
            int(1),
            arr(vec![Reply::data("lonely")]),
        ]),
    ]
}

type Op = Box<dyn Fn(Garbled) -> Pin<Box<dyn Future<Output = String> + Send>> + Send + Sync>;

/// One operation of one crate, its outcome rendered for the report.
fn op<F, Fut, T, E>(f: F) -> Op
where
    F: Fn(Garbled) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<T, E>> + Send + 'static,
    T: std::fmt::Debug,
    E: std::fmt::Display,
{
    Box::new(move |store| {
        let fut = f(store);
        Box::pin(async move {
            match fut.await {
                Ok(v) => format!("ok {v:?}"),
                Err(e) => format!("err {e}"),
            }
        })
    })
}

/// A lock name whose keys hash to the slot of `k`'s: `lock_many` takes the two by one script.
fn same_slot_as_k() -> String {
    let slot = key_slot("tairlock:{k}");
    (0..1_000_000)
        .map(|i| format!("peer{i}"))
        .find(|n| key_slot(&format!("tairlock:{{{n}}}")) == slot)
        .expect("a slot collision within a million names")
}

/// A real permit of `k`, taken on the embedded store behind `s` (only an acquisition makes one).
async fn permit_of(s: &Garbled) -> tairlock::semaphore::Permit {
    match Semaphore::new(s.inner.clone(), 3)
        .attempt("k", 1, Duration::from_secs(5), "00ff")
        .await
        .unwrap()
    {
        tairlock::semaphore::PermitAttempt::Acquired(p) => p,
        other => panic!("the embedded store granted no permit: {other:?}"),
    }
}

fn lease() -> Lease {
    Lease::parse("tl1:1700000000123:42:00ff00ff").unwrap()
}

fn operations() -> Vec<(&'static str, Op)> {
    const TTL: Duration = Duration::from_secs(5);
    vec![
        // Core.
        (
            "expire_lock",
            op(|s| async move { ExpireLock::new(s).expire_lock("k", TTL).await }),
        ),
        (
            "expire_unlock",
            op(|s| async move { ExpireLock::new(s).expire_unlock("k", &lease()).await }),
        ),
        (
            "renew",
            op(|s| async move { ExpireLock::new(s).renew("k", &lease(), TTL).await }),
        ),
        (
            "inspect",
            op(|s| async move { ExpireLock::new(s).inspect("k").await }),
        ),
        (
            "force_unlock",
            op(|s| async move { ExpireLock::new(s).force_unlock("k").await }),
        ),
        (
            "try_lock",
            op(|s| async move {
                ExpireLock::new(s)
                    .try_lock("k")
                    .await
                    .map(|g| g.map(|g| g.lease()))
            }),
        ),
        (
            "try_lock_for",
            op(|s| async move {
                ExpireLock::new(s)
                    .try_lock_for("k", Duration::from_millis(30))
                    .await
                    .map(|g| g.map(|g| g.lease()))
            }),
        ),
        (
            "lock_with_lease",
            op(|s| async move {
                ExpireLock::new(s)
                    .lock_with_lease("k", TTL, Some(Duration::from_millis(30)))
                    .await
                    .map(|g| g.map(|g| g.lease()))
            }),
        ),
        (
            "fair_attempt",
            op(|s| async move {
                ExpireLock::with_options(s, Options::default().fair(true))
                    .fair_attempt("k", TTL, "00ff", true)
                    .await
            }),
        ),
        (
            "try_lock_many",
            op(|s| async move {
                let peer = same_slot_as_k();
                ExpireLock::new(s)
                    .try_lock_many(&["k", &peer])
                    .await
                    .map(|g| g.map(|g| g.leases()))
            }),
        ),
        (
            "semaphore attempt",
            op(|s| async move { Semaphore::new(s, 3).attempt("k", 1, TTL, "00ff").await }),
        ),
        (
            "semaphore renew",
            op(|s| async move {
                let permit = permit_of(&s).await;
                Semaphore::new(s, 3).renew("k", &permit, TTL).await
            }),
        ),
        // Replica-acknowledged.
        (
            "replicated acquire",
            op(|s| async move {
                ReplicatedLock::new(
                    ExpireLock::new(s),
                    WaitFor::replicas(1, Duration::from_millis(10)),
                )
                .acquire("k", TTL)
                .await
            }),
        ),
        (
            "replicated renew",
            op(|s| async move {
                ReplicatedLock::new(
                    ExpireLock::new(s),
                    WaitFor::replicas(1, Duration::from_millis(10)),
                )
                .renew("k", &lease(), TTL)
                .await
            }),
        ),
        (
            "replicated release",
            op(|s| async move {
                ReplicatedLock::new(
                    ExpireLock::new(s),
                    WaitFor::replicas(1, Duration::from_millis(10)),
                )
                .release("k", &lease())
                .await
            }),
        ),
        // Redlock over three garbled servers.
        (
            "redlock try_acquire",
            op(|s| async move {
                let r = Redlock::new(vec![s.clone(), s.clone(), s], RedlockOptions::default())?;
                r.try_acquire("k", TTL).await
            }),
        ),
        (
            "redlock acquire+extend+release",
            op(|s| async move {
                let r = Redlock::new(vec![s.clone(), s.clone(), s], RedlockOptions::default())?;
                match r.try_acquire("k", TTL).await? {
                    Some(lease) => {
                        let extended = r.renew(&lease, TTL).await;
                        let released = r.release(&lease).await;
                        Ok::<_, tairlock::Error>(format!("{extended:?} {released}"))
                    }
                    None => Ok("busy".to_owned()),
                }
            }),
        ),
        // RwLock.
        (
            "rw read_acquire",
            op(|s| async move { RwLock::new(s).read_acquire("k", "aa01", TTL).await }),
        ),
        (
            "rw write_acquire",
            op(|s| async move {
                RwLock::new(s)
                    .write_acquire("k", "aa02", TTL, Some(TTL))
                    .await
            }),
        ),
        (
            "rw read_release",
            op(|s| async move { RwLock::new(s).read_release("k", "aa01").await }),
        ),
        (
            "rw write_release",
            op(|s| async move { RwLock::new(s).write_release("k", &lease()).await }),
        ),
        (
            "rw read_renew",
            op(|s| async move { RwLock::new(s).read_renew("k", "aa01", TTL).await }),
        ),
        (
            "rw write_renew",
            op(|s| async move { RwLock::new(s).write_renew("k", &lease(), TTL).await }),
        ),
        (
            "rw write_abandon",
            op(|s| async move { RwLock::new(s).write_abandon("k", "aa02").await }),
        ),
        (
            "rw downgrade_lease",
            op(|s| async move {
                RwLock::new(s)
                    .downgrade_lease("k", &lease(), "aa03", TTL)
                    .await
            }),
        ),
        (
            "rw state",
            op(|s| async move { RwLock::new(s).state("k").await }),
        ),
        (
            "rw readers",
            op(|s| async move { RwLock::new(s).readers("k").await }),
        ),
        (
            "rw inspect",
            op(|s| async move { RwLock::new(s).inspect("k").await }),
        ),
        (
            "rw try_read",
            op(|s| async move { RwLock::new(s).try_read("k").await.map(|g| g.is_some()) }),
        ),
        (
            "rw try_write",
            op(|s| async move { RwLock::new(s).try_write("k").await.map(|g| g.is_some()) }),
        ),
        (
            "rw try_write_for",
            op(|s| async move {
                RwLock::new(s)
                    .try_write_for("k", Duration::from_millis(30))
                    .await
                    .map(|g| g.is_some())
            }),
        ),
        (
            "rw try_read_for",
            op(|s| async move {
                RwLock::new(s)
                    .try_read_for("k", Duration::from_millis(30))
                    .await
                    .map(|g| g.is_some())
            }),
        ),
        // Legacy scripted lock.
        (
            "legacy try_acquire",
            op(|s| async move { ScriptedLock::new(s).try_acquire("lock.k", TTL).await }),
        ),
        (
            "legacy release",
            op(|s| async move {
                ScriptedLock::new(s)
                    .release(&Holding::new(
                        "lock.k",
                        1_700_000_000,
                        Unit::Seconds,
                        Some(3),
                    ))
                    .await
            }),
        ),
        (
            "legacy renew",
            op(|s| async move {
                ScriptedLock::new(s)
                    .renew(
                        &Holding::new("lock.k", 1_700_000_000, Unit::Seconds, Some(3)),
                        TTL,
                    )
                    .await
            }),
        ),
        (
            "legacy probe",
            op(|s| async move { tairlock_legacy::probe(&s).await }),
        ),
        (
            "legacy detect",
            op(|s| async move {
                tairlock_legacy::LegacyLock::detect(s, tairlock_legacy::Options::default())
                    .await
                    .map(|l| l.strategy())
            }),
        ),
        (
            "watch try_acquire",
            op(|s| async move { WatchLock::new(s).try_acquire("lock.k", TTL).await }),
        ),
        (
            "watch try_acquire (classic, ms)",
            op(|s| async move {
                WatchLock::with_options(
                    s,
                    tairlock_legacy::Options::default()
                        .unit(Unit::Millis)
                        .profile(Profile::Classic),
                )
                .try_acquire("lock.k", TTL)
                .await
            }),
        ),
        (
            "watch release",
            op(|s| async move {
                WatchLock::new(s)
                    .release(&Holding::new(
                        "lock.k",
                        1_700_000_000,
                        Unit::Seconds,
                        Some(3),
                    ))
                    .await
            }),
        ),
        (
            "watch renew",
            op(|s| async move {
                WatchLock::new(s)
                    .renew(
                        &Holding::new("lock.k", 1_700_000_000, Unit::Seconds, Some(3)),
                        TTL,
                    )
                    .await
            }),
        ),
        (
            "legacy renew (ms, no fence)",
            op(|s| async move {
                ScriptedLock::with_options(
                    s,
                    tairlock_legacy::Options::default().unit(Unit::Millis),
                )
                .renew(&Holding::new("lock.k", u64::MAX, Unit::Millis, None), TTL)
                .await
            }),
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_decoder_panics_or_hangs_on_a_malformed_reply() {
    let mut failures = Vec::new();
    let mut outcomes = 0;
    for reply in malformed() {
        for (name, run) in operations() {
            let store = Garbled::default();
            store.answer(reply.clone());
            let task = tokio::spawn(run(store));
            match tokio::time::timeout(Duration::from_secs(5), task).await {
                Ok(Ok(_outcome)) => outcomes += 1,
                Ok(Err(e)) if e.is_panic() => {
                    let panic = e.into_panic();
                    let message = panic
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                        .unwrap_or_default();
                    failures.push(format!("{name} on {reply:?}: panicked: {message}"));
                }
                Ok(Err(e)) => failures.push(format!("{name} on {reply:?}: {e}")),
                Err(_) => failures.push(format!("{name} on {reply:?}: hung")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} runs failed:\n{}",
        failures.len(),
        failures.len() + outcomes,
        failures.join("\n")
    );
}

/// A grant or renewal whose reply does not say how long the lease has left (the reply shape
/// before every such script reported it) is a server error: no lease is ever dated from the
/// length the client asked for.
#[tokio::test]
async fn a_grant_without_the_time_it_has_left_is_refused() {
    const TTL: Duration = Duration::from_secs(5);
    let lease = || Reply::data("tl1:1700000000123:42:00ff");
    let int = Reply::Int;
    let cases: Vec<(&str, Reply, Op)> = vec![
        (
            "expire_lock",
            Reply::Array(vec![int(1), lease()]),
            op(|s| async move { ExpireLock::new(s).expire_lock("k", TTL).await }),
        ),
        (
            "renew",
            Reply::Array(vec![int(1), lease()]),
            op(|s| async move { ExpireLock::new(s).renew("k", &self::lease(), TTL).await }),
        ),
        (
            "fair_attempt",
            Reply::Array(vec![int(1), lease()]),
            op(|s| async move {
                ExpireLock::with_options(s, Options::default().fair(true))
                    .fair_attempt("k", TTL, "00ff", true)
                    .await
            }),
        ),
        (
            "try_lock_many",
            Reply::Array(vec![int(1), lease(), lease()]),
            op(|s| async move {
                let peer = same_slot_as_k();
                ExpireLock::new(s)
                    .try_lock_many(&["k", &peer])
                    .await
                    .map(|g| g.map(|g| g.leases()))
            }),
        ),
        (
            "semaphore attempt",
            Reply::Array(vec![int(1), int(1_700_000_005_000), int(7), int(1), int(1)]),
            op(|s| async move { Semaphore::new(s, 3).attempt("k", 1, TTL, "00ff").await }),
        ),
        (
            "semaphore renew",
            Reply::Array(vec![int(1), int(1_700_000_005_000)]),
            op(|s| async move {
                let permit = permit_of(&s).await;
                Semaphore::new(s, 3).renew("k", &permit, TTL).await
            }),
        ),
        (
            "expire_lock, a key without a time to live",
            Reply::Array(vec![int(1), lease(), int(-1)]),
            op(|s| async move { ExpireLock::new(s).expire_lock("k", TTL).await }),
        ),
    ];
    for (name, reply, run) in cases {
        let store = Garbled::default();
        store.answer(reply.clone());
        let outcome = run(store).await;
        assert!(
            outcome.starts_with("err server error")
                && (outcome.contains("no remaining lease time")
                    || outcome.contains("unexpected reply")),
            "{name} on {reply:?}: {outcome}"
        );
    }
}

/// A reply of the wrong shape is an error naming the script, never a made-up outcome.
#[tokio::test]
async fn a_reply_of_the_wrong_shape_is_a_clear_error() {
    for reply in [
        Reply::Nil,
        Reply::data("x"),
        Reply::Status("OK".into()),
        Reply::Array(vec![]),
        Reply::Array(vec![Reply::Nil]),
    ] {
        let store = Garbled::default();
        store.answer(reply.clone());
        let locks = ExpireLock::new(store.clone());
        let rw = RwLock::new(store.clone());
        let legacy = ScriptedLock::new(store.clone());
        let holding = Holding::new("lock.k", 1_700_000_000, Unit::Seconds, Some(3));
        let errors = [
            locks.expire_lock("k", Duration::from_secs(5)).await.err(),
            locks.expire_unlock("k", &lease()).await.err(),
            locks
                .renew("k", &lease(), Duration::from_secs(5))
                .await
                .err(),
            rw.read_acquire("k", "aa01", Duration::from_secs(5))
                .await
                .err(),
            rw.write_acquire("k", "aa02", Duration::from_secs(5), None)
                .await
                .err(),
            rw.read_release("k", "aa01").await.err(),
            rw.write_release("k", &lease()).await.err(),
            rw.downgrade_lease("k", &lease(), "aa03", Duration::from_secs(5))
                .await
                .err(),
            legacy
                .try_acquire("lock.k", Duration::from_secs(5))
                .await
                .err(),
            legacy.release(&holding).await.err(),
            legacy.renew(&holding, Duration::from_secs(5)).await.err(),
        ];
        for (i, err) in errors.into_iter().enumerate() {
            let err = err.unwrap_or_else(|| panic!("operation {i} accepted {reply:?}"));
            assert_eq!(
                err.kind(),
                tairlock::ErrorKind::Server,
                "operation {i}: {err}"
            );
            let text = err.to_string();
            assert!(
                text.contains("unexpected reply") || text.contains("malformed"),
                "operation {i} on {reply:?}: an unclear error: {text}"
            );
        }
    }
}

/// The reader/writer lock's and the legacy scripted lock's grants and renewals, answered in the
/// shape they had before they reported the time their lease has left (or with a key without a
/// time to live): a server error, never a lease dated from the length asked for.
#[tokio::test]
async fn an_rwlock_or_legacy_grant_without_the_time_it_has_left_is_refused() {
    const TTL: Duration = Duration::from_secs(5);
    let int = Reply::Int;
    let data = Reply::data;
    let expiry = || int(1_700_000_005_000);
    let holding = || Holding::new("lock.k", 1_700_000_000, Unit::Seconds, Some(3));
    let cases: Vec<(&str, Reply, Op)> = vec![
        (
            "rwlock read_acquire",
            Reply::Array(vec![int(1), expiry(), int(1)]),
            op(|s| async move { RwLock::new(s).read_acquire("k", "aa01", TTL).await }),
        ),
        (
            "rwlock read_acquire, a readers set without a time to live",
            Reply::Array(vec![int(1), expiry(), int(1), int(-1)]),
            op(|s| async move { RwLock::new(s).read_acquire("k", "aa01", TTL).await }),
        ),
        (
            "rwlock read_renew",
            Reply::Array(vec![int(1), expiry()]),
            op(|s| async move { RwLock::new(s).read_renew("k", "aa01", TTL).await }),
        ),
        (
            "rwlock downgrade",
            Reply::Array(vec![int(1), expiry(), int(1)]),
            op(|s| async move {
                RwLock::new(s)
                    .downgrade_lease("k", &lease(), "aa03", TTL)
                    .await
            }),
        ),
        (
            "rwlock write_acquire",
            Reply::Array(vec![int(1), lease_reply()]),
            op(|s| async move { RwLock::new(s).write_acquire("k", "aa02", TTL, None).await }),
        ),
        (
            "rwlock write_renew",
            Reply::Array(vec![int(1), lease_reply()]),
            op(|s| async move { RwLock::new(s).write_renew("k", &lease(), TTL).await }),
        ),
        (
            "rwlock fair_write_acquire",
            Reply::Array(vec![int(1), lease_reply()]),
            op(|s| async move {
                RwLock::new(s)
                    .fair_write_acquire("k", "aa02", TTL, None, false)
                    .await
            }),
        ),
        (
            "legacy try_acquire",
            Reply::Array(vec![int(1), data("1700000006"), data("7")]),
            op(|s| async move { ScriptedLock::new(s).try_acquire("lock.k", TTL).await }),
        ),
        (
            "legacy try_acquire, a key without a time to live",
            Reply::Array(vec![int(1), data("1700000006"), data("7"), int(-1)]),
            op(|s| async move { ScriptedLock::new(s).try_acquire("lock.k", TTL).await }),
        ),
        (
            "legacy renew",
            Reply::Array(vec![int(1), data("1700000006")]),
            op(move |s| async move { ScriptedLock::new(s).renew(&holding(), TTL).await }),
        ),
    ];
    for (name, reply, run) in cases {
        let store = Garbled::default();
        store.answer(reply.clone());
        let outcome = run(store).await;
        assert!(
            outcome.starts_with("err server error") && outcome.contains("no remaining lease time"),
            "{name} on {reply:?}: {outcome}"
        );
    }
}

fn lease_reply() -> Reply {
    Reply::data(lease().value())
}
