//! Locks as ACL-restricted users on a real Redis 7 server (issue 12, item 2).
//!
//! - A user made the usual way, `ACL SETUSER app on >pw ~* +@all`, gets no channel permissions
//!   (Redis 7's default `acl-pubsub-default resetchannels`): every `PUBLISH`/`SUBSCRIBE` is
//!   refused. No release may fail on that (the scripts delete, then announce), and waiters poll
//!   instead of failing, with the refusal recorded once, not an error per attempt.
//! - The minimal rules the deployment guide (`docs/deployment.md`) documents are enough for
//!   every lock kind, notifications included: the expire lock and the RwLock (each also in fair
//!   mode, with a handoff), the semaphore (default and fair), `lock_many` and the inspections.
//!   The test reads them from that page, so the two cannot drift apart.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use support::cluster::RedisCluster;
use tairlock::notify::PubSub;
use tairlock::{Acquire, ClusterStore, ExpireLock, RedisStore, Semaphore, Store, Unlock};
use tairlock_rwlock::{Release, RwLock};

const USER_PASSWORD: &str = "pw";

/// `calls=`/`rejected_calls=` of one line of `INFO commandstats`, 0 when absent.
fn stat(server: &RedisServer, command: &str, field: &str) -> u64 {
    let info = server.cli(&["INFO", "commandstats"]);
    let prefix = format!("cmdstat_{command}:");
    let Some(line) = info.lines().find(|l| l.starts_with(&prefix)) else {
        return 0;
    };
    line[prefix.len()..]
        .split(',')
        .find_map(|kv| kv.strip_prefix(&format!("{field}=")))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// A store connected as `user`.
async fn store_as(server: &RedisServer, user: &str, password: &str) -> RedisStore {
    let url = format!("redis://{user}:{password}@127.0.0.1:{}", server.port());
    match RedisStore::connect(&url).await {
        Ok(store) => store,
        Err(e) => server.fail(format!("cannot connect as {user}: {e}")),
    }
}

/// The `ACL SETUSER` line of the deployment guide's section on ACL rules, as arguments.
fn documented_rules() -> Vec<String> {
    let page = include_str!("../docs/deployment.md");
    let section = page
        .split("## ACL rules for a lock user")
        .nth(1)
        .expect("the deployment guide has a section on ACL rules");
    let line = section
        .lines()
        .find(|l| l.starts_with("ACL SETUSER "))
        .expect("the section has an ACL SETUSER line");
    line.split_whitespace().map(str::to_owned).collect()
}

/// The deployment guide's additions for Redis 7.2+ and Valkey (`ACL SETUSER locker +…` lines), as
/// commands.
fn documented_additions() -> Vec<Vec<String>> {
    let page = include_str!("../docs/deployment.md");
    let section = page
        .split("## ACL rules for a lock user")
        .nth(1)
        .expect("the deployment guide has a section on ACL rules");
    section
        .lines()
        .take_while(|l| !l.starts_with("## "))
        .filter(|l| l.starts_with("ACL SETUSER locker +"))
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

/// Lock, release, force-unlock, `with_lock` and waiting on the core lock as the store's user;
/// every release must succeed and report what it did.
async fn core_locks_work<S: Store>(server: &RedisServer, holder: S, waiter: S) {
    let locks = ExpireLock::new(holder);
    let guard = locks.lock("job").await.expect("lock");
    assert_eq!(
        guard.release().await.expect("a release must not fail"),
        Unlock::Released
    );
    let lease = match locks.expire_lock("job", Duration::from_secs(5)).await {
        Ok(Acquire::Acquired(lease)) => lease,
        other => server.fail(format!("expire_lock: {other:?}")),
    };
    assert_eq!(
        locks
            .expire_unlock("job", &lease)
            .await
            .expect("expire_unlock"),
        Unlock::Released
    );
    let fence = locks
        .with_lock("job", |lease| async move { lease.fence() })
        .await
        .expect("with_lock must not fail after the work is done");
    assert!(fence > 0);
    assert!(matches!(
        locks.expire_lock("job", Duration::from_secs(5)).await,
        Ok(Acquire::Acquired(_))
    ));
    assert!(locks.force_unlock("job").await.expect("force_unlock"));
    assert!(locks.try_lock("job").await.unwrap().is_some_and(|g| {
        drop(g);
        true
    }));

    // A waiter on another client gets the lock soon after the release, however it listens.
    let held = locks
        .lock_with_lease("wait", Duration::from_secs(20), None)
        .await
        .unwrap()
        .unwrap();
    let waiting = ExpireLock::new(waiter);
    let w = waiting.clone();
    let parked = tokio::spawn(async move { w.lock("wait").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!parked.is_finished(), "the waiter got a held lock");
    let released = Instant::now();
    assert_eq!(held.release().await.unwrap(), Unlock::Released);
    let guard = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("the waiter must get the lock well within the 20 s lease")
        .unwrap()
        .expect("waiting must not fail");
    println!("handoff after {:?}", released.elapsed());
    guard.release().await.unwrap();
}

/// Read, write, downgrade and a writer waiting for a reader, as the store's user.
async fn rwlocks_work<S: Store>(holder: S, waiter: S) {
    let sharing = RwLock::with_options(
        holder.clone(),
        tairlock_rwlock::Options::default()
            .share_reads(true)
            .linger(Duration::from_secs(60)),
    );
    let rw = RwLock::new(holder);
    let r = rw.read("doc").await.expect("read");
    assert_eq!(r.release().await.expect("read release"), Release::Released);
    let w = rw.write("doc").await.expect("write");
    assert_eq!(w.release().await.expect("write release"), Release::Released);
    let w = rw.write("doc").await.expect("write");
    let r = w
        .downgrade()
        .await
        .expect("a downgrade must not fail half way");
    assert!(rw.try_write("doc").await.unwrap().is_none());

    let other = RwLock::new(waiter);
    // A writer that gives up takes its intent back (write_abandon announces it).
    assert!(
        other
            .try_write_for("doc", Duration::from_millis(200))
            .await
            .expect("a writer giving up must not fail")
            .is_none()
    );
    let o = other.clone();
    let parked = tokio::spawn(async move { o.write("doc").await });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!parked.is_finished(), "a writer got in past a reader");
    assert_eq!(r.release().await.expect("read release"), Release::Released);
    let w = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("the writer must get the lock soon after the reader left")
        .unwrap()
        .expect("waiting must not fail");
    assert_eq!(w.release().await.unwrap(), Release::Released);

    // A shared read hold lingering on one client is given back as soon as another client's
    // writer announces its intent (on the lock's intent channel), long before its linger.
    let r = sharing.read("shared").await.expect("shared read");
    assert_eq!(r.release().await.expect("read release"), Release::Released);
    let w = tokio::time::timeout(Duration::from_secs(10), other.write("shared"))
        .await
        .expect("the writer must not wait for the 60 s linger")
        .expect("waiting must not fail");
    assert_eq!(w.release().await.unwrap(), Release::Released);
}

/// Wait until `parked` has had time to queue, and check it is still waiting.
async fn still_waiting<T>(parked: &tokio::task::JoinHandle<T>, what: &str) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!parked.is_finished(), "{what} got a held lock");
}

/// Await a parked waiter, well within the holders' leases.
async fn handed<T>(parked: tokio::task::JoinHandle<tairlock::Result<T>>, what: &str) -> T {
    tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .unwrap_or_else(|_| panic!("{what} must get the lock soon after the release"))
        .unwrap()
        .unwrap_or_else(|e| panic!("{what}: waiting must not fail: {e}"))
}

/// The fair modes (a handoff each: the expire lock's and the RwLock's writers'), the semaphore
/// (default and fair), `lock_many` and the inspections, as the store's user.
async fn fair_and_counting_locks_work<S: Store>(holder: S, waiter: S) {
    // The expire lock in fair mode: the release grants the lock to the queued waiter.
    let fair = tairlock::Options::default().fair(true);
    let locks = ExpireLock::with_options(holder.clone(), fair.clone());
    let held = locks.lock("fair").await.expect("fair lock");
    let other = ExpireLock::with_options(waiter.clone(), fair);
    let o = other.clone();
    let parked = tokio::spawn(async move { o.lock("fair").await });
    still_waiting(&parked, "a fair waiter").await;
    let before = held.fence();
    assert_eq!(
        held.release().await.expect("fair release"),
        Unlock::Released
    );
    let next = handed(parked, "the fair waiter").await;
    assert!(next.fence() > before);
    let seen = locks.inspect("fair").await.expect("inspect");
    assert_eq!(seen.holder.map(|l| l.fence()), Some(next.fence()));
    assert_eq!(
        next.release().await.expect("fair release"),
        Unlock::Released
    );

    // The RwLock's fair writers: a queued writer is handed the write lock.
    let fair = tairlock_rwlock::Options::default().fair(true);
    let rw = RwLock::with_options(holder.clone(), fair.clone());
    let w = rw.write("fairdoc").await.expect("fair write");
    let other = RwLock::with_options(waiter.clone(), fair);
    let o = other.clone();
    let parked = tokio::spawn(async move { o.write("fairdoc").await });
    still_waiting(&parked, "a fair writer").await;
    let seen = rw.inspect("fairdoc").await.expect("rw inspect");
    assert_eq!(
        seen.queue.len(),
        1,
        "the waiting writer is queued: {seen:?}"
    );
    assert_eq!(
        w.release().await.expect("fair write release"),
        Release::Released
    );
    let next = handed(parked, "the fair writer").await;
    assert_eq!(
        next.release().await.expect("fair write release"),
        Release::Released
    );
    let r = rw
        .read("fairdoc")
        .await
        .expect("read after the fair writers");
    assert_eq!(r.release().await.expect("read release"), Release::Released);

    // The semaphore, by default and fair: a waiter gets the permit the holder gives back.
    for fair in [false, true] {
        let options = tairlock::SemaphoreOptions::default().fair(fair);
        let name = if fair { "fairpool" } else { "pool" };
        let sem = Semaphore::with_options(holder.clone(), 1, options.clone());
        let permit = sem.acquire(name, 1).await.expect("permit");
        let other = Semaphore::with_options(waiter.clone(), 1, options);
        let o = other.clone();
        let parked = tokio::spawn(async move { o.acquire(name, 1).await });
        still_waiting(&parked, "a semaphore waiter").await;
        let seen = sem.inspect(name).await.expect("semaphore inspect");
        assert_eq!(seen.in_use, 1, "{seen:?}");
        assert_eq!(
            permit.release().await.expect("permit release"),
            Unlock::Released
        );
        let next = handed(parked, "the semaphore waiter").await;
        assert_eq!(
            next.release().await.expect("permit release"),
            Unlock::Released
        );
        assert_eq!(sem.available(name).await.expect("available"), 1);
    }

    // Several locks at once.
    let locks = ExpireLock::new(holder);
    let both = locks
        .lock_many(&["many:1", "many:2"])
        .await
        .expect("lock_many");
    assert!(
        ExpireLock::new(waiter)
            .try_lock_many(&["many:2", "many:3"])
            .await
            .expect("try_lock_many")
            .is_none()
    );
    assert!(
        both.release()
            .await
            .expect("release many")
            .iter()
            .all(|u| *u == Unlock::Released)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_channel_permissions_locks_releases_and_waits_by_polling() {
    let server = RedisServer::start();
    server.cli(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all"]);
    let holder = store_as(&server, "app", USER_PASSWORD).await;
    let waiter = store_as(&server, "app", USER_PASSWORD).await;

    core_locks_work(&server, holder.clone(), waiter.clone()).await;
    rwlocks_work(holder, waiter.clone()).await;

    // The refusal is visible once, and costs no refused SUBSCRIBE per wait.
    let notifier = waiter
        .notifier()
        .await
        .expect("a redis store has a notifier");
    assert!(
        notifier.notifications_denied(),
        "the refused subscription is not reported"
    );
    let refused = stat(&server, "subscribe", "rejected_calls");
    assert!(refused >= 1, "no SUBSCRIBE was refused: {refused}");
    let locks = ExpireLock::new(waiter.clone());
    for i in 0..5 {
        let name = format!("more-{i}");
        let held = locks
            .lock_with_lease(&name, Duration::from_millis(300), None)
            .await
            .unwrap()
            .unwrap();
        let again = locks.lock(&name).await.expect("waiting must not fail");
        drop(held);
        again.release().await.unwrap();
    }
    assert_eq!(
        stat(&server, "subscribe", "rejected_calls"),
        refused,
        "every wait asked for a refused subscription again"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_documented_acl_rules_are_enough_for_every_lock_kind_with_notifications() {
    let server = RedisServer::start();
    let rules = documented_rules();
    let args: Vec<&str> = rules.iter().map(String::as_str).collect();
    assert_eq!(
        server.cli(&args).trim(),
        "OK",
        "the deployment guide's rules: {args:?}"
    );
    if server.is_valkey() {
        let additions = documented_additions();
        assert_eq!(
            additions.len(),
            2,
            "the deployment guide's additions: {additions:?}"
        );
        for addition in additions {
            let args: Vec<&str> = addition.iter().map(String::as_str).collect();
            assert_eq!(
                server.cli(&args).trim(),
                "OK",
                "the deployment guide's addition {args:?}"
            );
        }
    }
    let user = &rules[2];
    let password = rules
        .iter()
        .find_map(|r| r.strip_prefix('>'))
        .expect("the rules set a password");
    let holder = store_as(&server, user, password).await;
    let waiter = store_as(&server, user, password).await;

    core_locks_work(&server, holder.clone(), waiter.clone()).await;
    rwlocks_work(holder.clone(), waiter.clone()).await;
    fair_and_counting_locks_work(holder, waiter.clone()).await;

    let notifier = waiter
        .notifier()
        .await
        .expect("a redis store has a notifier");
    assert!(!notifier.notifications_denied());
    assert!(
        stat(&server, "subscribe", "calls") >= 1,
        "the waiter never subscribed"
    );
    let rejected: Vec<String> = server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter(|l| !l.contains("rejected_calls=0"))
        .filter(|l| l.starts_with("cmdstat_"))
        .map(str::to_owned)
        .collect();
    assert!(
        rejected.is_empty(),
        "[{}] commands the rules refused: {rejected:?}",
        server.label()
    );
    if server.is_valkey() {
        // With the additions, this user's releases are native.
        assert!(
            stat(&server, "delifeq", "calls") >= 1,
            "[{}] the user never released with DELIFEQ",
            server.label()
        );
    }
    // A user outside the prefix has nothing.
    let store = store_as(&server, user, password).await;
    let foreign = ExpireLock::with_options(
        store,
        tairlock::Options::default().keyspace(tairlock::Keyspace::new("other:").unwrap()),
    );
    assert!(foreign.try_lock("job").await.is_err());
}

/// The same on a Redis 7 cluster, whose releases announce with `SPUBLISH` and whose waiters
/// `SSUBSCRIBE`: both refused to the user.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_user_without_channel_permissions_locks_releases_and_waits_by_polling() {
    let cluster = RedisCluster::start(3);
    for node in &cluster.nodes {
        node.cli(&["ACL", "SETUSER", "app", "on", ">pw", "~*", "+@all"]);
    }
    let urls: Vec<String> = cluster
        .nodes
        .iter()
        .map(|n| format!("redis://app:{USER_PASSWORD}@127.0.0.1:{}", n.port()))
        .collect();
    let connect = || async {
        match ClusterStore::connect(&urls).await {
            Ok(store) => store,
            Err(e) => cluster.fail(format!("cannot connect as app: {e}")),
        }
    };
    let (holder, waiter) = (connect().await, connect().await);
    assert_eq!(holder.pubsub(), PubSub::Sharded);

    core_locks_work(&cluster.nodes[0], holder.clone(), waiter.clone()).await;
    rwlocks_work(holder, waiter.clone()).await;

    let notifier = waiter
        .notifier()
        .await
        .expect("a cluster store has a notifier");
    assert!(
        notifier.notifications_denied(),
        "the refused SSUBSCRIBE is not reported"
    );
}
