//! Capability detection (DESIGN.md §5, issue #3 item 4) against real servers: a stock server
//! gets ScriptedLock; one started with scripting renamed away gets WatchLock, and GetSetLock
//! works there sending nothing but SETNX, GET, GETSET and DEL (proved by `INFO commandstats`).

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use support::RedisServer;
use tairlock::clock::VirtualClock;
use tairlock::{ErrorKind, MemoryStore};
use tairlock_legacy::{
    GetSetLock, LegacyLock, Options, Profile, Release, Renew, ScriptedLock, Strategy, TryAcquire,
    Unit, probe,
};

/// `redis-server` arguments that disable every way to run a script.
fn no_scripting_args() -> Vec<&'static str> {
    ["EVAL", "EVALSHA", "SCRIPT", "FUNCTION", "FCALL"]
        .into_iter()
        .flat_map(|command| ["--rename-command", command, ""])
        .collect()
}

/// `cmdstat_<name>:calls=<n>,...` lines of `INFO commandstats`, as name → calls.
fn command_stats(server: &RedisServer) -> BTreeMap<String, u64> {
    server
        .cli(&["INFO", "commandstats"])
        .lines()
        .filter_map(|line| {
            let (name, rest) = line.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect()
}

#[tokio::test]
async fn stock_server_and_memory_store_select_the_scripted_lock() {
    let server = RedisServer::start();
    let caps = probe(&server.store().await).await.unwrap();
    assert!(
        caps.scripting && caps.script_writes_after_time && caps.watch && caps.time,
        "{caps:?}"
    );
    assert!(
        caps.version
            .as_deref()
            .is_some_and(|v| v.starts_with(char::is_numeric)),
        "{caps:?}"
    );
    assert_eq!(caps.strongest(), Strategy::Scripted);

    let caps = probe(&MemoryStore::new()).await.unwrap();
    assert_eq!(caps.version, None);
    assert_eq!(caps.strongest(), Strategy::Scripted);
}

#[tokio::test]
async fn server_with_scripting_renamed_away_selects_the_watch_lock_and_it_works() {
    let server = RedisServer::start_with_args(&no_scripting_args());
    assert!(
        server
            .cli(&["EVAL", "return 1", "0"])
            .starts_with("ERR unknown command")
    );
    let store = server.store().await;
    let caps = probe(&store).await.unwrap();
    assert!(!caps.scripting && caps.watch && caps.time, "{caps:?}");
    assert_eq!(caps.strongest(), Strategy::Watch(Profile::Modern));

    let options = Options::default().unit(Unit::Millis);
    let lock = LegacyLock::detect(store.clone(), options.clone())
        .await
        .unwrap();
    assert_eq!(lock.strategy(), Strategy::Watch(Profile::Modern));
    let held = lock
        .try_acquire("lock.orderid", Duration::from_secs(5))
        .await
        .unwrap()
        .holding()
        .unwrap();
    assert!(held.fence().is_some());
    assert!(
        !lock
            .try_acquire("lock.orderid", Duration::from_secs(5))
            .await
            .unwrap()
            .is_acquired()
    );
    let held = match lock.renew(&held, Duration::from_secs(10)).await.unwrap() {
        Renew::Renewed(h) => h,
        other => panic!("{other:?}"),
    };
    assert_eq!(lock.release(&held).await.unwrap(), Release::Released);

    // The scripted lock cannot work here; it says so with a server error, writing nothing.
    let scripted = ScriptedLock::with_options(store.clone(), options);
    let err = scripted
        .try_acquire("lock.other", Duration::from_secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Server, "{err}");
    assert_eq!(server.cli(&["EXISTS", "lock.other"]), "0");
}

#[tokio::test]
async fn getset_lock_works_without_scripting_and_sends_only_setnx_get_getset_del() {
    let server = RedisServer::start_with_args(&no_scripting_args());
    let store = server.store().await;
    let clock = VirtualClock::default();
    let options = Options::default()
        .unit(Unit::Millis)
        .clock(Arc::new(clock.clone()));
    let locks = GetSetLock::with_options(store, options);
    let lease = Duration::from_millis(100);
    assert_eq!(server.cli(&["CONFIG", "RESETSTAT"]), "OK");

    let first = locks
        .try_acquire("lock.orderid", lease)
        .await
        .unwrap()
        .holding()
        .unwrap(); // SETNX
    match locks.try_acquire("lock.orderid", lease).await.unwrap() {
        TryAcquire::Busy { holder, .. } => assert_eq!(holder, Some(first.value())), // SETNX GET
        other => panic!("{other:?}"),
    }
    clock.advance(Duration::from_millis(200));
    let second = locks
        .try_acquire("lock.orderid", lease)
        .await
        .unwrap()
        .holding()
        .unwrap(); // SETNX GET GETSET
    assert_eq!(locks.release(&second).await.unwrap(), Release::Released); // GET DEL
    assert_eq!(locks.release(&second).await.unwrap(), Release::NotHeld); // GET
    let third = locks.acquire("lock.orderid", lease).await.unwrap().unwrap(); // SETNX
    clock.advance(Duration::from_millis(200));
    assert_eq!(locks.release(&third).await.unwrap(), Release::Expired); // GET

    let mut stats = command_stats(&server);
    assert_eq!(stats.remove("config|resetstat"), Some(1));
    let expected: BTreeMap<String, u64> = [("setnx", 4), ("get", 5), ("getset", 1), ("del", 1)]
        .map(|(n, c)| (n.to_owned(), c))
        .into();
    assert_eq!(
        stats, expected,
        "GetSetLock sent only SETNX, GET, GETSET and DEL"
    );
}
