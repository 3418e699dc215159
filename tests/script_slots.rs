//! Every script of every lock kind declares keys of one Redis Cluster hash slot (issue #8: no
//! CROSSSLOT ever). A recording store runs every operation of the expire lock, the scripted
//! legacy lock, the scripted reader/writer lock and Redlock over the embedded store, with lock
//! names and legacy keys of every shape (plain, dotted, with a hash tag, with stray braces), and
//! checks the declared keys of each script call; then that every script of each kind's `ALL`
//! list was seen. The store announces releases with sharded pub/sub (`SPUBLISH`, as a
//! [`ClusterStore`](tairlock::ClusterStore) on Redis 7.0+ does), and every channel a script
//! announces on must be in the slot of its keys too (Redis refuses an `SPUBLISH` from a script to
//! a channel of another slot).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tairlock::keys::key_slot;
use tairlock::notify::PubSub;
use tairlock::store::Ttl;
use tairlock::{ExpireLock, MemoryStore, Redlock, RedlockOptions, Reply, Result, Script, Store};

/// name of script → every declared-keys list it was called with.
type Calls = Arc<Mutex<BTreeMap<&'static str, Vec<Vec<String>>>>>;

#[derive(Clone, Debug)]
struct Recording {
    inner: MemoryStore,
    calls: Calls,
    /// Scripts seen announcing with `SPUBLISH`.
    announcing: Arc<Mutex<BTreeSet<&'static str>>>,
}

impl Store for Recording {
    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.get(key).await
    }
    async fn set_nx(&self, key: &str, value: &[u8]) -> Result<bool> {
        self.inner.set_nx(key, value).await
    }
    async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool> {
        self.inner.set_nx_px(key, value, ttl).await
    }
    async fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.inner.set(key, value).await
    }
    async fn getset(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.inner.getset(key, value).await
    }
    async fn getdel(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.inner.getdel(key).await
    }
    async fn del(&self, key: &str) -> Result<bool> {
        self.inner.del(key).await
    }
    async fn incr(&self, key: &str) -> Result<i64> {
        self.inner.incr(key).await
    }
    async fn decr(&self, key: &str) -> Result<i64> {
        self.inner.decr(key).await
    }
    async fn expire(&self, key: &str, seconds: u64) -> Result<bool> {
        self.inner.expire(key, seconds).await
    }
    async fn pexpire(&self, key: &str, ttl: Duration) -> Result<bool> {
        self.inner.pexpire(key, ttl).await
    }
    async fn pttl(&self, key: &str) -> Result<Ttl> {
        self.inner.pttl(key).await
    }
    async fn key_type(&self, key: &str) -> Result<String> {
        self.inner.key_type(key).await
    }
    async fn time(&self) -> Result<Duration> {
        self.inner.time().await
    }
    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        let mut declared = keys.to_vec();
        // `…, channel, "SPUBLISH"`: the channel joins the keys whose slots must agree.
        if let Some(i) = args.iter().position(|a| a == "SPUBLISH") {
            declared.push(args[i - 1].clone());
            self.announcing.lock().unwrap().insert(script.name());
        }
        self.calls
            .lock()
            .unwrap()
            .entry(script.name())
            .or_default()
            .push(declared);
        self.inner.eval(script, keys, args).await
    }

    fn pubsub(&self) -> PubSub {
        PubSub::Sharded
    }
}

const LEASE: Duration = Duration::from_secs(30);

async fn exercise_expire_lock(store: &Recording, name: &str) {
    let locks = ExpireLock::new(store.clone());
    let lease = locks
        .expire_lock(name, LEASE)
        .await
        .unwrap()
        .lease()
        .unwrap();
    let _ = locks.expire_lock(name, LEASE).await.unwrap();
    let tairlock::Renew::Renewed(lease) = locks.renew(name, &lease, LEASE).await.unwrap() else {
        panic!("renew")
    };
    locks.inspect(name).await.unwrap();
    locks.expire_unlock(name, &lease).await.unwrap();
    let _ = locks.expire_lock(name, LEASE).await.unwrap();
    locks.force_unlock(name).await.unwrap();
    // The batched watchdog: guards of two locks (two slots, mostly) renewed by one task; on a
    // store that does not say it is one server, each call carries the leases of one slot.
    let short = tairlock::Options::default().watchdog_lease(Duration::from_millis(150));
    let locks = ExpireLock::with_options(store.clone(), short);
    let other = format!("{}-2", name.replace(['{', '}'], ""));
    let first = locks.lock(name).await.unwrap();
    let second = locks.lock(&other).await.unwrap();
    tokio::time::sleep(Duration::from_millis(120)).await;
    first.release().await.unwrap();
    second.release().await.unwrap();
}

/// The fair mode: a waiter queues, a release grants to it (announcing on its wake channel, in
/// the lock's slot too), it confirms, then releases with nobody waiting.
async fn exercise_fair(store: &Recording, name: &str) {
    let options = tairlock::Options::default().fair(true);
    let holder = ExpireLock::with_options(store.clone(), options.clone());
    let waiter = ExpireLock::with_options(store.clone(), options);
    let guard = holder.lock(name).await.unwrap();
    let name_owned = name.to_owned();
    let next = tokio::spawn(async move { waiter.lock(&name_owned).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    next.await.unwrap().release().await.unwrap();
    let keys = holder.keys(name).unwrap();
    let wake = format!("{}:w:0123456789abcdef", keys.channel);
    assert_eq!(key_slot(&wake), key_slot(&keys.lock), "{wake}");
}

async fn exercise_fair_writers(store: &Recording, name: &str) {
    use tairlock_rwlock::{Options, RwLock};
    let options = Options::default().fair(true);
    let holder = RwLock::with_options(store.clone(), options.clone());
    let waiter = RwLock::with_options(store.clone(), options);
    let guard = holder.write(name).await.unwrap();
    let name_owned = name.to_owned();
    let next = tokio::spawn(async move { waiter.write(&name_owned).await.unwrap() });
    tokio::time::sleep(Duration::from_millis(100)).await;
    guard.release().await.unwrap();
    next.await.unwrap().release().await.unwrap();
    let keys = holder.keys(name).unwrap();
    let wake = format!("{}:w:0123456789abcdef", keys.channel);
    assert_eq!(key_slot(&wake), key_slot(&keys.writer), "{wake}");
}

async fn exercise_legacy(store: &Recording, key: &str) {
    use tairlock_legacy::{ScriptedLock, TryAcquire};
    let locks = ScriptedLock::new(store.clone());
    let TryAcquire::Acquired(holding) = locks.try_acquire(key, LEASE).await.unwrap() else {
        panic!("legacy acquire {key}")
    };
    let _ = locks.renew(&holding, LEASE).await.unwrap();
    let _ = locks.release(&holding).await;
    // The capability probe declares no keys (it runs on any node).
    store
        .eval(&tairlock_legacy::scripts::PROBE, &[], &[])
        .await
        .unwrap();
    // The write-after-TIME probe writes one scratch key.
    store
        .eval(
            &tairlock_legacy::scripts::PROBE_WRITE,
            &["tairlock-legacy:probe".to_owned()],
            &[],
        )
        .await
        .unwrap();
}

async fn exercise_rwlock(store: &Recording, name: &str) {
    use tairlock_rwlock::{ReadAttempt, RwLock, WriteAttempt};
    let locks = RwLock::new(store.clone());
    let ReadAttempt::Acquired { lease: read, .. } =
        locks.read_acquire(name, "aa01", LEASE).await.unwrap()
    else {
        panic!("read_acquire")
    };
    locks.read_renew(name, read.nonce(), LEASE).await.unwrap();
    let _ = locks
        .write_acquire(name, "bb02", LEASE, Some(LEASE))
        .await
        .unwrap();
    locks.write_abandon(name, "bb02").await.unwrap();
    locks.read_release(name, read.nonce()).await.unwrap();
    let WriteAttempt::Acquired(write) = locks
        .write_acquire(name, "cc03", LEASE, Some(LEASE))
        .await
        .unwrap()
    else {
        panic!("write_acquire")
    };
    let write = locks
        .write_renew(name, write.lease(), LEASE)
        .await
        .unwrap()
        .unwrap();
    locks.state(name).await.unwrap();
    locks.readers(name).await.unwrap();
    locks.inspect(name).await.unwrap();
    let read = locks
        .downgrade_lease(name, write.lease(), "dd04", LEASE)
        .await
        .unwrap()
        .unwrap();
    locks.read_release(name, read.nonce()).await.unwrap();
    let WriteAttempt::Acquired(write) = locks
        .write_acquire(name, "ee05", LEASE, Some(LEASE))
        .await
        .unwrap()
    else {
        panic!("write_acquire")
    };
    locks.write_release(name, write.lease()).await.unwrap();
}

async fn exercise_token(store: &Recording, key: &str) {
    let locks = tairlock::TokenLock::new(store.clone());
    let token = tairlock::new_nonce();
    let held = locks.attempt(key, &token, LEASE).await.unwrap();
    assert!(held.is_acquired(), "token acquire {key}");
    locks.renew(key, &token, LEASE).await.unwrap();
    locks.inspect(key).await.unwrap();
    locks.release(key, &token).await.unwrap();
}

async fn exercise_redlock(store: &Recording, name: &str) {
    let redlock = Redlock::new(vec![store.clone()], RedlockOptions::default()).unwrap();
    let lease = redlock.try_acquire(name, LEASE).await.unwrap().unwrap();
    let lease = redlock.renew(&lease, LEASE).await.unwrap().unwrap();
    redlock.release(&lease).await;
}

#[tokio::test]
async fn every_script_declares_keys_of_one_slot() {
    let store = Recording {
        inner: MemoryStore::new(),
        calls: Calls::default(),
        announcing: Default::default(),
    };
    for name in ["orders:42", "a", "with space", "x:y:z", "ünï"] {
        exercise_expire_lock(&store, name).await;
        exercise_rwlock(&store, name).await;
        exercise_redlock(&store, name).await;
        exercise_fair(&store, name).await;
        exercise_fair_writers(&store, name).await;
    }
    for key in ["lock.orderid", "plain", "locks:{order}:7", "a{b"] {
        exercise_legacy(&store, key).await;
        exercise_token(&store, key).await;
    }
    // Known limit: a legacy key with a `}` and no hash tag (`a}b`, `{}x`) has no fence key in
    // its slot (`{a}b}:fence` would hash `a`), so its fence key is `K:fence`, another slot. On a
    // cluster such a key is refused before anything is sent, with a CROSSSLOT explanation.
    for key in ["a}b", "{}x"] {
        let odd = [key.to_owned(), tairlock_legacy::wire::fence_key(key)];
        let err = tairlock::keys::check_one_slot(&odd).unwrap_err();
        assert!(err.to_string().contains("CROSSSLOT"), "{err}");
    }

    let calls = store.calls.lock().unwrap();
    for (script, lists) in calls.iter() {
        for keys in lists {
            let slots: Vec<u16> = keys.iter().map(|k| key_slot(k)).collect();
            assert!(
                slots.windows(2).all(|w| w[0] == w[1]),
                "{script} declared keys of several slots: {keys:?} → {slots:?}"
            );
        }
    }
    let all = tairlock::scripts::ALL
        .iter()
        .chain(tairlock_legacy::scripts::ALL.iter())
        .chain(tairlock_rwlock::scripts::ALL.iter())
        .chain(tairlock::redlock::ALL.iter())
        .chain(tairlock::scripts::FAIR.iter())
        .chain(tairlock::scripts::TOKEN.iter())
        .chain(tairlock_rwlock::scripts::FAIR.iter());
    let missing: Vec<&str> = all
        .map(|s| s.name())
        .filter(|name| !calls.contains_key(name))
        .collect();
    assert!(missing.is_empty(), "scripts never exercised: {missing:?}");
    let announcing: Vec<&str> = store.announcing.lock().unwrap().iter().copied().collect();
    assert_eq!(
        announcing,
        [
            "expire_unlock",
            "fair_unlock",
            "force_unlock",
            "rw_downgrade",
            "rw_fair_write_acquire",
            "rw_fair_write_release",
            "rw_read_release",
            "rw_write_abandon",
            "rw_write_acquire",
            "token_release"
        ],
        "the scripts that announce releases or a writer's intent (with SPUBLISH on a sharded \
         store)"
    );
}
