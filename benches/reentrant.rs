//! Reentrant re-acquire: zero round trips (target: well under a microsecond).
//!
//! `uncontended/reenter`: with the lock held by an owner, one re-entry plus its release, on the
//! embedded store and on a `redis-server` this bench starts itself (neither reaches the store).
#![allow(missing_docs)] // criterion_group! generates undocumented items

#[path = "../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use criterion::{Criterion, criterion_group, criterion_main};
use tairlock::{ExpireLock, MemoryStore, Owner, ReentrantLock, Store};

fn reenter<S: Store>(c: &mut Criterion, rt: &tokio::runtime::Runtime, label: &str, store: S) {
    let locks = ReentrantLock::new(ExpireLock::new(store));
    let owner = Owner::new();
    let outer = rt.block_on(locks.lock_as(&owner, "reentrant")).unwrap();
    c.benchmark_group("uncontended")
        .bench_function(format!("{label}/reenter"), |b| {
            b.to_async(rt).iter(|| async {
                let inner = locks.lock_as(&owner, "reentrant").await.unwrap();
                inner.release().await.unwrap();
            })
        });
    rt.block_on(outer.release()).unwrap();
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    reenter(c, &rt, "memory", MemoryStore::new());
    let server = server::RedisServer::start();
    let redis = rt.block_on(server.store());
    reenter(c, &rt, "redis", redis);
}

criterion_group!(reentrant, benches);
criterion_main!(reentrant);
