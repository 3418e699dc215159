//! Every script a client repeats is safe to repeat, proven per script on a real server.
//!
//! A reply can be lost after the server applied the script (a timeout, a dropped connection);
//! the libraries then send the same script with the same arguments again. Each test here applies
//! one script through the fault-injection proxy with its reply dropped, checks the keys the first
//! application left, retries exactly as the library does (same keys, same arguments), and checks
//! the retry's answer and that the keys are what one application leaves.
//!
//! Scripts a library never repeats (`force_unlock`, the legacy acquire and renew, whose repeat
//! could not recognise the first application) are checked for exactly that, through the
//! library: a lost reply is reported as an error, and the server saw the script once.

mod support;

use std::time::{Duration, Instant};

use support::proxy::{Proxy, Which};
use support::{RedisServer, Snapshot, TestStore};
use tairlock::store::redis::RedisOptions;
use tairlock::{Acquire, ExpireLock, RedisStore, Reply, Script, Store, Ttl};
use tairlock_rwlock::RwLock;

const LEASE: Duration = Duration::from_secs(30);
/// How long an operation that should be immediate may take on a loaded machine.
const PROMPT: Duration = Duration::from_secs(3);
/// The slack between two PTTL readings a moment apart.
const SLACK: Duration = Duration::from_secs(2);

/// A server, a proxy in front of it, a store through the proxy (short response timeout) and a
/// direct store for setting up and checking keys.
struct Rig {
    server: RedisServer,
    proxy: Proxy,
    store: RedisStore,
    direct: RedisStore,
}

async fn rig() -> Rig {
    let server = RedisServer::start();
    let proxy = Proxy::start(server.port());
    let mut options = RedisOptions::default();
    options.response_timeout = Duration::from_millis(400);
    let store = proxy.store_with(options).await;
    let direct = server.store().await;
    // Loaded up front, so that a first EVALSHA is applied rather than answered NOSCRIPT.
    let all: Vec<&'static Script> = tairlock::scripts::ALL
        .iter()
        .chain(tairlock::scripts::MULTI.iter())
        .chain(tairlock_rwlock::scripts::ALL.iter())
        .chain(tairlock_legacy::scripts::ALL.iter())
        .chain(tairlock::redlock::ALL.iter())
        .copied()
        .collect();
    server.check(direct.preload(&all).await, "preload");
    Rig {
        server,
        proxy,
        store,
        direct,
    }
}

impl Rig {
    /// Run `script` through the proxy with its reply dropped: the server applies it, the client
    /// gets no answer.
    async fn apply_reply_lost(&self, script: &'static Script, keys: &[String], args: &[String]) {
        self.proxy.drop_replies(Which::All, 1);
        let before = self.proxy.faults().get("drop_reply").copied().unwrap_or(0);
        match self.store.eval(script, keys, args).await {
            Err(e) if e.is_unanswered() => {}
            other => self.server.fail(format!(
                "{}: the first reply should be lost, got {other:?}",
                script.name()
            )),
        }
        assert_eq!(
            self.proxy.faults().get("drop_reply").copied().unwrap_or(0),
            before + 1,
            "{}: the proxy dropped its reply",
            script.name()
        );
    }

    /// The library's retry: the same script with the same keys and arguments, until answered.
    async fn retry(&self, script: &'static Script, keys: &[String], args: &[String]) -> Reply {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match self.store.eval(script, keys, args).await {
                Ok(reply) => return reply,
                // The connection that lost the reply is reset when the next reply is due.
                Err(e) if e.is_unanswered() && Instant::now() < deadline => {}
                Err(e) => self
                    .server
                    .fail(format!("{}: the retry failed: {e}", script.name())),
            }
        }
    }

    /// Apply with the reply lost, snapshot `watched`, retry; the retry's reply and the
    /// snapshots before and after it.
    async fn lost_then_retried(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
        watched: &[&str],
    ) -> (Reply, Vec<Snapshot>, Vec<Snapshot>) {
        self.apply_reply_lost(script, keys, args).await;
        let before = self.snapshots(watched).await;
        let reply = self.retry(script, keys, args).await;
        let after = self.snapshots(watched).await;
        (reply, before, after)
    }

    async fn snapshots(&self, keys: &[&str]) -> Vec<Snapshot> {
        let mut out = Vec::new();
        for key in keys {
            out.push(self.direct.snapshot(key).await);
        }
        out
    }

    async fn eval(&self, script: &'static Script, keys: &[String], args: &[String]) -> Reply {
        self.server
            .check(self.direct.eval(script, keys, args).await, script.name())
    }
}

fn s<const N: usize>(items: [&str; N]) -> Vec<String> {
    items.iter().map(|i| (*i).to_owned()).collect()
}

fn ms(d: Duration) -> String {
    d.as_millis().to_string()
}

/// Element `i` of a grant's reply is the time the lease has left as the server reports it, and a
/// repeat reports what the first application's lease has left (at most what `before`, read
/// before the repeat, showed), never a fresh length: clients date their deadline from it.
#[track_caller]
fn assert_reports_time_left(reply: &Reply, i: usize, before: &Snapshot) {
    let left = Duration::from_millis(u64::try_from(int(reply, i)).expect("a time left"));
    match before.ttl {
        Ttl::Expires(had) => assert!(
            left <= had && had - left <= SLACK,
            "the repeat reports {left:?} left; the lease had {had:?} before it"
        ),
        other => panic!("the lease expires: {other:?}"),
    }
}

#[track_caller]
fn assert_intact(after: &[Snapshot], before: &[Snapshot], what: &str) {
    for (a, b) in after.iter().zip(before) {
        a.assert_intact(b, SLACK, what);
    }
}

fn int(reply: &Reply, i: usize) -> i64 {
    reply
        .as_array()
        .and_then(|items| items.get(i))
        .and_then(Reply::as_int)
        .unwrap_or_else(|| panic!("no integer at {i} in {reply:?}"))
}

fn text(reply: &Reply, i: usize) -> String {
    reply
        .as_array()
        .and_then(|items| items.get(i))
        .and_then(Reply::as_str)
        .unwrap_or_else(|| panic!("no text at {i} in {reply:?}"))
        .to_owned()
}

/// `calls=` of `cmdstat_evalsha` in `INFO commandstats`.
fn evalsha_calls(server: &RedisServer) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    info.lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

// ---- core -----------------------------------------------------------------------------------

#[tokio::test]
async fn core_expire_lock_repeat_returns_the_same_lease() {
    let rig = rig().await;
    let k = ExpireLock::new(rig.direct.clone()).keys("job").unwrap();
    let keys = vec![k.lock.clone(), k.fence.clone()];
    let args = s([&ms(LEASE), "aa01", "60000"]);
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock::scripts::EXPIRE_LOCK,
            &keys,
            &args,
            &[&k.lock, &k.fence],
        )
        .await;
    assert_eq!(int(&reply, 0), 1, "{reply:?}");
    let lease = text(&reply, 1);
    assert!(lease.ends_with(":aa01"), "{lease}");
    assert_eq!(before[0].content, support::Content::Str(lease.into_bytes()));
    assert_reports_time_left(&reply, 2, &before[0]);
    assert_intact(&after, &before, "expire_lock repeat");
}

#[tokio::test]
async fn core_expire_unlock_repeat_deletes_nothing_more() {
    let rig = rig().await;
    let locks = ExpireLock::new(rig.direct.clone());
    let k = locks.keys("job").unwrap();
    let Acquire::Acquired(lease) = locks.expire_lock("job", LEASE).await.unwrap() else {
        panic!("free");
    };
    let keys = vec![k.lock.clone()];
    let args = s([lease.value(), &k.channel]);
    rig.apply_reply_lost(&tairlock::scripts::EXPIRE_UNLOCK, &keys, &args)
        .await;
    assert_eq!(rig.direct.pttl(&k.lock).await.unwrap(), Ttl::Missing);
    // The next holder takes it before the retry lands: the retry must not touch it.
    let Acquire::Acquired(next) = locks.expire_lock("job", LEASE).await.unwrap() else {
        panic!("released");
    };
    let before = rig.snapshots(&[&k.lock, &k.fence]).await;
    let reply = rig
        .retry(&tairlock::scripts::EXPIRE_UNLOCK, &keys, &args)
        .await;
    assert_eq!(reply, Reply::Int(0), "held by another lease");
    assert_intact(
        &rig.snapshots(&[&k.lock, &k.fence]).await,
        &before,
        "next holder",
    );
    assert_eq!(
        rig.direct.get(&k.lock).await.unwrap(),
        Some(next.value().as_bytes().to_vec())
    );
}

#[tokio::test]
async fn core_renew_repeat_returns_the_same_renewed_lease() {
    let rig = rig().await;
    let locks = ExpireLock::new(rig.direct.clone());
    let k = locks.keys("job").unwrap();
    let Acquire::Acquired(lease) = locks.expire_lock("job", LEASE).await.unwrap() else {
        panic!("free");
    };
    let keys = vec![k.lock.clone(), k.fence.clone()];
    let args = s([lease.value(), &ms(LEASE), "bb02", "60000"]);
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock::scripts::RENEW,
            &keys,
            &args,
            &[&k.lock, &k.fence],
        )
        .await;
    assert_eq!(int(&reply, 0), 1, "the repeat renews: {reply:?}");
    let renewed = text(&reply, 1);
    assert!(renewed.ends_with(":bb02"), "{renewed}");
    assert_eq!(
        before[0].content,
        support::Content::Str(renewed.clone().into_bytes()),
        "the repeat answers the lease the first application wrote"
    );
    assert_reports_time_left(&reply, 2, &before[0]);
    assert_eq!(after[0].content, before[0].content);
    assert_eq!(after[1].content, before[1].content, "same fence");
}

#[tokio::test]
async fn core_inspect_repeat_is_read_only() {
    let rig = rig().await;
    let locks = ExpireLock::new(rig.direct.clone());
    let k = locks.keys("job").unwrap();
    let _held = locks.expire_lock("job", LEASE).await.unwrap();
    let keys = vec![k.lock.clone(), k.fence.clone()];
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock::scripts::INSPECT,
            &keys,
            &[],
            &[&k.lock, &k.fence],
        )
        .await;
    assert_eq!(text(&reply, 0), "string");
    assert_intact(&after, &before, "inspect");
}

#[tokio::test]
async fn core_force_unlock_is_never_repeated_so_the_next_holder_keeps_its_lock() {
    // FORCE_UNLOCK deletes whoever holds the lock: a repeat after the next holder took the lock
    // would delete that holder's lock. So the library must never repeat it on its own.
    let rig = rig().await;
    let direct_locks = ExpireLock::new(rig.direct.clone());
    let k = direct_locks.keys("job").unwrap();
    let _held = direct_locks.expire_lock("job", LEASE).await.unwrap();

    // A long response timeout: the reply is lost, then the connection drops while the caller
    // still waits, which is the case a blind retry on a connection error would repeat.
    let mut options = RedisOptions::default();
    options.response_timeout = Duration::from_secs(20);
    let operator = ExpireLock::new(rig.proxy.store_with(options).await);
    rig.proxy.drop_replies(Which::All, 1);
    let forced = tokio::spawn(async move { operator.force_unlock("job").await });
    let deadline = Instant::now() + PROMPT;
    while rig.direct.pttl(&k.lock).await.unwrap() != Ttl::Missing {
        assert!(
            Instant::now() < deadline,
            "the force unlock was not applied"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let Acquire::Acquired(next) = direct_locks.expire_lock("job", LEASE).await.unwrap() else {
        panic!("forced free");
    };
    rig.proxy.reset(Which::All);
    let outcome = tokio::time::timeout(PROMPT, forced).await.unwrap().unwrap();
    assert!(
        matches!(&outcome, Err(e) if e.is_unanswered()),
        "a lost reply is reported, not repeated: {outcome:?}"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        rig.direct.get(&k.lock).await.unwrap(),
        Some(next.value().as_bytes().to_vec()),
        "the next holder's lock survives"
    );
}

// ---- rwlock ---------------------------------------------------------------------------------

fn rw_keys(rig: &Rig) -> tairlock_rwlock::RwKeys {
    RwLock::new(rig.direct.clone()).keys("doc").unwrap()
}

#[tokio::test]
async fn rwlock_read_acquire_repeat_admits_the_reader_once() {
    let rig = rig().await;
    let k = rw_keys(&rig);
    let keys = vec![k.writer.clone(), k.readers.clone(), k.intent.clone()];
    let args = s(["cc01", &ms(LEASE), "1"]);
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock_rwlock::scripts::READ_ACQUIRE,
            &keys,
            &args,
            &[&k.readers],
        )
        .await;
    assert_eq!(int(&reply, 0), 1, "{reply:?}");
    assert_eq!(int(&reply, 2), 1, "one reader");
    assert_reports_time_left(&reply, 3, &before[0]);
    assert_intact(&after, &before, "read acquire repeat");
}

#[tokio::test]
async fn rwlock_write_acquire_repeat_returns_the_same_lease() {
    let rig = rig().await;
    let k = rw_keys(&rig);
    let keys = vec![
        k.writer.clone(),
        k.readers.clone(),
        k.intent.clone(),
        k.fence.clone(),
    ];
    let args = s(["cc02", &ms(LEASE), "5000", "60000"]);
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock_rwlock::scripts::WRITE_ACQUIRE,
            &keys,
            &args,
            &[&k.writer, &k.fence],
        )
        .await;
    assert_eq!(int(&reply, 0), 1, "{reply:?}");
    assert_eq!(
        before[0].content,
        support::Content::Str(text(&reply, 1).into_bytes())
    );
    assert_reports_time_left(&reply, 2, &before[0]);
    assert_intact(&after, &before, "write acquire repeat");
}

#[tokio::test]
async fn rwlock_read_release_repeat_removes_no_other_reader() {
    let rig = rig().await;
    let rw = RwLock::new(rig.direct.clone());
    let k = rw_keys(&rig);
    rw.read_acquire("doc", "dd01", LEASE).await.unwrap();
    rw.read_acquire("doc", "dd02", LEASE).await.unwrap();
    let keys = vec![k.readers.clone()];
    let args = s(["dd01", &k.channel]);
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock_rwlock::scripts::READ_RELEASE,
            &keys,
            &args,
            &[&k.readers],
        )
        .await;
    assert_eq!(reply, Reply::Int(-1), "already gone");
    assert_intact(&after, &before, "read release repeat");
    assert_eq!(rw.readers("doc").await.unwrap(), 1, "dd02 is still in");
}

#[tokio::test]
async fn rwlock_read_renew_repeat_renews_the_same_reader() {
    let rig = rig().await;
    let rw = RwLock::new(rig.direct.clone());
    let k = rw_keys(&rig);
    rw.read_acquire("doc", "dd03", LEASE).await.unwrap();
    let keys = vec![k.readers.clone()];
    let args = s(["dd03", &ms(LEASE)]);
    let (reply, before, _after) = rig
        .lost_then_retried(
            &tairlock_rwlock::scripts::READ_RENEW,
            &keys,
            &args,
            &[&k.readers],
        )
        .await;
    assert_eq!(int(&reply, 0), 1, "{reply:?}");
    // A repeated renewal renews again, from its own run: it reports that.
    let left = Duration::from_millis(int(&reply, 2) as u64);
    assert!(left <= LEASE && left >= LEASE - SLACK, "{left:?}");
    assert_eq!(rw.readers("doc").await.unwrap(), 1);
    let support::Content::Other(kind) = &before[0].content else {
        panic!("a sorted set: {:?}", before[0]);
    };
    assert_eq!(kind, "zset");
}

#[tokio::test]
async fn rwlock_write_abandon_repeat_deletes_nothing_more() {
    let rig = rig().await;
    let rw = RwLock::new(rig.direct.clone());
    let k = rw_keys(&rig);
    rw.write_acquire("doc", "ee01", LEASE, None).await.unwrap();
    let keys = vec![k.writer.clone(), k.intent.clone()];
    let args = s(["ee01", &k.channel]);
    rig.apply_reply_lost(&tairlock_rwlock::scripts::WRITE_ABANDON, &keys, &args)
        .await;
    // The next writer takes it before the retry lands: the retry must not touch it.
    rw.write_acquire("doc", "ee02", LEASE, None).await.unwrap();
    let before = rig.snapshots(&[&k.writer, &k.fence]).await;
    let reply = rig
        .retry(&tairlock_rwlock::scripts::WRITE_ABANDON, &keys, &args)
        .await;
    assert_eq!(reply, Reply::Int(0));
    assert_intact(
        &rig.snapshots(&[&k.writer, &k.fence]).await,
        &before,
        "next writer",
    );
}

#[tokio::test]
async fn rwlock_downgrade_repeat_answers_the_same_downgrade() {
    // Before DOWNGRADE was made idempotent, the repeat found the write lease gone and answered
    // {-1}: the guard reported the lease lost and the reader it added was orphaned.
    let rig = rig().await;
    let rw = RwLock::new(rig.direct.clone());
    let k = rw_keys(&rig);
    let write = rw.write_acquire("doc", "ff01", LEASE, None).await.unwrap();
    let lease = match write {
        tairlock_rwlock::WriteAttempt::Acquired(w) => w.lease().clone(),
        other => panic!("free: {other:?}"),
    };
    rw.read_acquire("doc", "ff00", LEASE).await.unwrap(); // refused: a writer holds it
    let keys = vec![k.writer.clone(), k.readers.clone()];
    let args = s([lease.value(), "ff02", &ms(LEASE), &k.channel]);
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock_rwlock::scripts::DOWNGRADE,
            &keys,
            &args,
            &[&k.writer, &k.readers],
        )
        .await;
    assert_eq!(
        int(&reply, 0),
        1,
        "the repeat reports the downgrade: {reply:?}"
    );
    assert_eq!(int(&reply, 2), 1, "one live reader");
    assert_reports_time_left(&reply, 3, &before[1]);
    assert_eq!(
        before[0].content,
        support::Content::None,
        "the writer is gone"
    );
    assert_intact(&after, &before, "downgrade repeat");
    let score: Option<f64> = rig
        .direct
        .command(redis::cmd("ZSCORE").arg(&k.readers).arg("ff02"))
        .await
        .unwrap();
    assert_eq!(
        score,
        Some(int(&reply, 1) as f64),
        "the repeat answers its expiry"
    );
    // And the native twin agrees.
    let memory = tairlock::MemoryStore::new();
    let mrw = RwLock::new(memory.clone());
    let tairlock_rwlock::WriteAttempt::Acquired(w) =
        mrw.write_acquire("doc", "ff01", LEASE, None).await.unwrap()
    else {
        panic!("free");
    };
    let first = mrw
        .downgrade_lease("doc", w.lease(), "ff02", LEASE)
        .await
        .unwrap()
        .expect("downgraded");
    let again = mrw
        .downgrade_lease("doc", w.lease(), "ff02", LEASE)
        .await
        .unwrap()
        .expect("a repeat is the same downgrade");
    assert_eq!(first.expires_at(), again.expires_at());
    assert!(
        mrw.downgrade_lease("doc", w.lease(), "ff03", LEASE)
            .await
            .unwrap()
            .is_none(),
        "another reader nonce is not this downgrade"
    );
}

#[tokio::test]
async fn rwlock_read_only_scripts_repeat_without_writing() {
    let rig = rig().await;
    let rw = RwLock::new(rig.direct.clone());
    let k = rw_keys(&rig);
    rw.read_acquire("doc", "aa11", LEASE).await.unwrap();
    for script in [
        &tairlock_rwlock::scripts::COUNT,
        &tairlock_rwlock::scripts::INSPECT,
    ] {
        let keys: Vec<String> = if script.name() == "rw_count" {
            vec![k.writer.clone(), k.readers.clone(), k.intent.clone()]
        } else {
            vec![
                k.writer.clone(),
                k.readers.clone(),
                k.intent.clone(),
                k.fence.clone(),
            ]
        };
        let (_, before, after) = rig
            .lost_then_retried(script, &keys, &[], &[&k.readers])
            .await;
        assert_intact(&after, &before, script.name());
    }
}

// ---- rwlock guard: the downgrade, end to end ------------------------------------------------

async fn wait_until_free(rw: &RwLock<RedisStore>, within: Duration, what: &str) {
    let deadline = Instant::now() + within;
    loop {
        let state = rw.state("doc").await.unwrap();
        if (state.readers, state.writer) == (0, Ttl::Missing) {
            return;
        }
        assert!(Instant::now() < deadline, "{what}: still held: {state:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn downgrade_whose_reply_was_lost_succeeds_on_its_retry() {
    let rig = rig().await;
    let rw = RwLock::new(rig.store.clone());
    let observer = RwLock::new(rig.direct.clone());
    let w = rw.write("doc").await.unwrap();
    let sha = tairlock_rwlock::scripts::DOWNGRADE.sha1().as_bytes();
    rig.proxy.drop_replies_matching(Which::Data, sha, 1);
    let r = w
        .downgrade()
        .await
        .expect("a downgrade whose first reply was lost succeeds");
    assert!(!r.is_lost());
    let state = observer.state("doc").await.unwrap();
    assert_eq!((state.readers, state.writer), (1, Ttl::Missing));
    assert!(rig.proxy.faults()["drop_reply"] >= 1);
    r.release().await.unwrap();
    wait_until_free(&observer, PROMPT, "released").await;
}

#[tokio::test]
async fn downgrade_without_an_answer_gives_back_the_reader_it_may_have_added() {
    // Every attempt is applied and unanswered: the server holds the new reader (with a 30 s
    // lease). The guard reports the error and its release must remove that reader.
    let rig = rig().await;
    let rw = RwLock::new(rig.store.clone());
    let observer = RwLock::new(rig.direct.clone());
    let w = rw.write("doc").await.unwrap();
    let sha = tairlock_rwlock::scripts::DOWNGRADE.sha1().as_bytes();
    rig.proxy.drop_replies_matching(Which::Data, sha, 100);
    let err = match w.downgrade().await {
        Err(e) => e,
        Ok(_) => panic!("every downgrade reply was dropped"),
    };
    assert!(err.is_unanswered(), "{err}");
    wait_until_free(&observer, PROMPT + PROMPT, "an unanswered downgrade").await;
}

#[tokio::test]
async fn downgrade_without_an_answer_gives_back_the_write_lease_it_may_have_kept() {
    // Nothing reaches the server: the write lease is still held; the release frees it.
    let rig = rig().await;
    let rw = RwLock::new(rig.store.clone());
    let observer = RwLock::new(rig.direct.clone());
    let w = rw.write("doc").await.unwrap();
    rig.proxy.black_hole(Which::Data);
    let outcome = w.downgrade().await;
    assert!(matches!(&outcome, Err(e) if e.is_unanswered()));
    rig.proxy.heal(Which::Data);
    wait_until_free(&observer, PROMPT + PROMPT, "an unapplied downgrade").await;
}

// ---- legacy ---------------------------------------------------------------------------------

#[tokio::test]
async fn legacy_release_repeat_deletes_nothing_more() {
    let rig = rig().await;
    let locks = tairlock_legacy::ScriptedLock::new(rig.direct.clone());
    let key = "lock.order";
    let fence = tairlock_legacy::wire::fence_key(key);
    let tairlock_legacy::TryAcquire::Acquired(holding) =
        locks.try_acquire(key, LEASE).await.unwrap()
    else {
        panic!("free");
    };
    let keys = vec![key.to_owned(), fence.clone()];
    let args = vec![holding.value_text(), holding.fence().unwrap().to_string()];
    rig.apply_reply_lost(&tairlock_legacy::scripts::RELEASE, &keys, &args)
        .await;
    assert_eq!(rig.direct.pttl(key).await.unwrap(), Ttl::Missing);
    let tairlock_legacy::TryAcquire::Acquired(_next) = locks.try_acquire(key, LEASE).await.unwrap()
    else {
        panic!("released");
    };
    let before = rig.snapshots(&[key, &fence]).await;
    let reply = rig
        .retry(&tairlock_legacy::scripts::RELEASE, &keys, &args)
        .await;
    assert!(
        matches!(reply, Reply::Int(0 | -1)),
        "the next grant is not ours: {reply:?}"
    );
    assert_intact(&rig.snapshots(&[key, &fence]).await, &before, "next grant");
}

#[tokio::test]
async fn legacy_probe_repeat_is_read_only() {
    let rig = rig().await;
    let (reply, _, _) = rig
        .lost_then_retried(&tairlock_legacy::scripts::PROBE, &[], &[], &[])
        .await;
    assert_eq!(reply, Reply::Int(1));
    assert_eq!(rig.direct.dbsize().await, 0);
}

#[tokio::test]
async fn legacy_acquire_and_renew_are_not_repeated_by_the_library() {
    // The legacy format has no owner id: a repeated acquire would find its own grant "held",
    // a repeated renew would find a timestamp it never saw. So neither is repeated: a lost
    // reply is an error, and the server ran the script exactly once.
    let rig = rig().await;
    let locks = tairlock_legacy::ScriptedLock::new(rig.store.clone());
    let key = "lock.order";
    let calls = evalsha_calls(&rig.server);
    rig.proxy.drop_replies(Which::All, 1);
    let lost = locks.try_acquire(key, LEASE).await;
    assert!(matches!(&lost, Err(e) if e.is_unanswered()), "{lost:?}");
    assert_eq!(evalsha_calls(&rig.server), calls + 1, "run once");
    assert!(matches!(
        rig.direct.pttl(key).await.unwrap(),
        Ttl::Expires(_)
    ));

    let direct = tairlock_legacy::ScriptedLock::new(rig.direct.clone());
    let other = "lock.other";
    let tairlock_legacy::TryAcquire::Acquired(holding) =
        direct.try_acquire(other, LEASE).await.unwrap()
    else {
        panic!("free");
    };
    // The proxied store's connection lost a reply: let it reconnect first.
    let deadline = Instant::now() + PROMPT;
    while rig.store.pttl(other).await.is_err() {
        assert!(Instant::now() < deadline);
    }
    let calls = evalsha_calls(&rig.server);
    rig.proxy.drop_replies(Which::All, 1);
    let lost = locks.renew(&holding, LEASE).await;
    assert!(matches!(&lost, Err(e) if e.is_unanswered()), "{lost:?}");
    assert_eq!(evalsha_calls(&rig.server), calls + 1, "run once");
}

// ---- redlock --------------------------------------------------------------------------------

#[tokio::test]
async fn redlock_release_and_extend_repeat_safely() {
    let rig = rig().await;
    let key = "tl:{job}:redlock".to_owned();
    rig.direct
        .command::<()>(redis::cmd("SET").arg(&key).arg("v1").arg("PX").arg(30_000))
        .await
        .unwrap();
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock::redlock::EXTEND,
            std::slice::from_ref(&key),
            &s(["v1", "60000"]),
            &[&key],
        )
        .await;
    assert_eq!(int(&reply, 0), 1, "extended again: {reply:?}");
    // A repeated extend moves the expiry again, from its own run: it reports that.
    let left = Duration::from_millis(int(&reply, 1) as u64);
    assert!(
        left <= Duration::from_secs(60) && left >= Duration::from_secs(60) - SLACK,
        "{left:?}"
    );
    assert_eq!(after[0].content, before[0].content);

    rig.apply_reply_lost(
        &tairlock::redlock::RELEASE,
        std::slice::from_ref(&key),
        &s(["v1"]),
    )
    .await;
    assert_eq!(rig.direct.pttl(&key).await.unwrap(), Ttl::Missing);
    // The next holder's value is not touched by the repeat.
    rig.direct
        .command::<()>(redis::cmd("SET").arg(&key).arg("v2").arg("PX").arg(30_000))
        .await
        .unwrap();
    let reply = rig
        .retry(
            &tairlock::redlock::RELEASE,
            std::slice::from_ref(&key),
            &s(["v1"]),
        )
        .await;
    assert_eq!(reply, Reply::Int(0));
    assert_eq!(rig.direct.get(&key).await.unwrap(), Some(b"v2".to_vec()));
    // A repeated extend of a value that is no longer there does not revive it.
    let reply = rig
        .eval(
            &tairlock::redlock::EXTEND,
            std::slice::from_ref(&key),
            &s(["v1", "60000"]),
        )
        .await;
    assert_eq!(reply, Reply::Array(vec![Reply::Int(0)]));
}

#[tokio::test]
async fn redlock_acquire_repeat_finds_its_own_key_with_the_time_it_has_left() {
    let rig = rig().await;
    let key = "tl:{job}:redlock".to_owned();
    let (reply, before, after) = rig
        .lost_then_retried(
            &tairlock::redlock::ACQUIRE,
            std::slice::from_ref(&key),
            &s(["v1", "30000"]),
            &[&key],
        )
        .await;
    assert_eq!(int(&reply, 0), 1, "its own key: {reply:?}");
    assert_eq!(before[0].content, support::Content::Str(b"v1".to_vec()));
    assert_reports_time_left(&reply, 1, &before[0]);
    assert_intact(&after, &before, "redlock acquire repeat");
    // Another acquisition's value is refused, and changes nothing.
    let reply = rig
        .eval(
            &tairlock::redlock::ACQUIRE,
            std::slice::from_ref(&key),
            &s(["v2", "30000"]),
        )
        .await;
    assert_eq!(reply, Reply::Array(vec![Reply::Int(0)]));
    assert_intact(&rig.snapshots(&[&key]).await, &after, "another value");
}

#[tokio::test]
async fn core_lock_many_repeat_returns_the_same_leases_with_the_time_they_have_left() {
    let rig = rig().await;
    let locks = ExpireLock::new(rig.direct.clone());
    let (a, b) = (locks.keys("ma").unwrap(), locks.keys("mb").unwrap());
    let keys = vec![
        a.lock.clone(),
        a.fence.clone(),
        b.lock.clone(),
        b.fence.clone(),
    ];
    let args = s([&ms(LEASE), "cc03", "60000"]);
    let watched = [&a.lock[..], &a.fence, &b.lock, &b.fence];
    let (reply, before, after) = rig
        .lost_then_retried(&tairlock::scripts::LOCK_MANY, &keys, &args, &watched)
        .await;
    assert_eq!(int(&reply, 0), 1, "{reply:?}");
    for (i, snapshot) in [(1, &before[0]), (3, &before[2])] {
        let lease = text(&reply, i);
        assert!(lease.ends_with(":cc03"), "{lease}");
        assert_eq!(snapshot.content, support::Content::Str(lease.into_bytes()));
        assert_reports_time_left(&reply, i + 1, snapshot);
    }
    assert_intact(&after, &before, "lock_many repeat");
}
