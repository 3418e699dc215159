//! Stores built from the application's own `redis` client or connection (issue 14, item 3).
//!
//! - `redis_store_from_client`: a `redis::Client` the application built (here: database 3)
//!   is used as it is: the lock lands in database 3.
//! - `redis_store_from_manager`: an existing `ConnectionManager` carries the commands; the
//!   store's own notifier (made from the client) wakes a waiter on release.
//! - `cluster_store_from_connection_and_customized`: a `ClusterStore` over the application's own
//!   cluster connection locks; `connect_customized` applies the application's builder settings
//!   (a username the cluster does not know is refused at connect, proving the settings are
//!   used; without it the same URLs connect).

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use support::cluster::RedisCluster;
use tairlock::store::{ClusterOptions, RedisOptions};
use tairlock::{Acquire, ClusterStore, ExpireLock, RedisStore, Unlock};

async fn lock_release<S: tairlock::Store>(locks: &ExpireLock<S>, name: &str) {
    let lease = match locks
        .expire_lock(name, Duration::from_secs(10))
        .await
        .unwrap()
    {
        Acquire::Acquired(lease) => lease,
        other => panic!("not acquired: {other:?}"),
    };
    assert_eq!(
        locks.expire_unlock(name, &lease).await.unwrap(),
        Unlock::Released
    );
}

#[tokio::test]
async fn redis_store_from_client() {
    let server = RedisServer::start();
    let client = redis::Client::open(format!("{}/3", server.url())).unwrap();
    let store = RedisStore::from_client(client, RedisOptions::default())
        .await
        .unwrap();
    assert_eq!(store.url(), format!("{}/3", server.url()));
    let locks = ExpireLock::new(store);
    let lease = match locks
        .expire_lock("own:db", Duration::from_secs(10))
        .await
        .unwrap()
    {
        Acquire::Acquired(lease) => lease,
        other => panic!("not acquired: {other:?}"),
    };
    let client = redis::Client::open(format!("{}/3", server.url())).unwrap();
    let mut con = client.get_connection().unwrap();
    let exists: bool = redis::cmd("EXISTS")
        .arg("tairlock:{own:db}")
        .query(&mut con)
        .unwrap();
    assert!(exists, "the lock is not in the client's database 3");
    assert_eq!(server.cli(&["DBSIZE"]), "0", "database 0 was written");
    locks.expire_unlock("own:db", &lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_store_from_manager() {
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).unwrap();
    let manager = redis::aio::ConnectionManager::new(client.clone())
        .await
        .unwrap();
    let store = RedisStore::from_manager(manager, client, RedisOptions::default());
    let locks = ExpireLock::new(store);
    lock_release(&locks, "own:manager").await;

    let holder = locks
        .lock_with_lease("own:wake", Duration::from_secs(30), None)
        .await
        .unwrap()
        .unwrap();
    let waiter = {
        let locks = locks.clone();
        tokio::spawn(async move {
            let started = Instant::now();
            locks
                .lock("own:wake")
                .await
                .unwrap()
                .release()
                .await
                .unwrap();
            started.elapsed()
        })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    holder.release().await.unwrap();
    let waited = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the waiter was not woken by the release")
        .unwrap();
    assert!(waited < Duration::from_secs(20), "waited {waited:?}");
}

#[tokio::test]
async fn cluster_store_from_connection_and_customized() {
    let cluster = RedisCluster::start(3);
    let urls = cluster.urls();

    let con = redis::cluster::ClusterClient::new(urls.clone())
        .unwrap()
        .get_async_connection()
        .await
        .unwrap();
    let store = ClusterStore::from_connection(con, &urls, ClusterOptions::default())
        .await
        .unwrap();
    lock_release(&ExpireLock::new(store), "own:cluster").await;

    let refused = ClusterStore::connect_customized(&urls, ClusterOptions::default(), |b| {
        b.username("nobody").password("wrong")
    })
    .await
    .unwrap_err();
    assert!(
        refused.to_string().to_lowercase().contains("wrongpass")
            || refused.to_string().to_lowercase().contains("auth"),
        "{refused}"
    );

    let store =
        ClusterStore::connect_customized(&urls, ClusterOptions::default(), |b| b.retries(3))
            .await
            .unwrap();
    lock_release(&ExpireLock::new(store), "own:custom").await;
}
