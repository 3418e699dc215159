//! The legacy locks' costs: GetSetLock should cost what the original does (one round trip to
//! acquire uncontended, two to release: GET then DEL); ScriptedLock one each; WatchLock a
//! pipelined read plus MULTI/EXEC. On a `redis-server` this bench starts itself and on the
//! embedded store, with millisecond values.
#![allow(missing_docs)] // criterion_group! generates undocumented items

#[path = "../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tairlock::MemoryStore;
use tairlock_legacy::{GetSetLock, Options, ScriptedLock, TryAcquire, Unit, WatchLock, WatchStore};

const LEASE: Duration = Duration::from_secs(10);

fn holding(attempt: TryAcquire) -> tairlock_legacy::Holding {
    match attempt {
        TryAcquire::Acquired(h) => h,
        TryAcquire::Busy { .. } => panic!("uncontended legacy lock was held"),
    }
}

fn each<S: WatchStore>(c: &mut Criterion, rt: &tokio::runtime::Runtime, label: &str, store: S) {
    let options = Options::default().unit(Unit::Millis);
    let getset = GetSetLock::with_options(store.clone(), options.clone());
    let scripted = ScriptedLock::with_options(store.clone(), options.clone());
    let watch = WatchLock::with_options(store, options);
    let mut group = c.benchmark_group("uncontended");
    group.bench_function(format!("{label}/getset-cycle"), |b| {
        b.to_async(rt).iter(|| async {
            let h = holding(getset.try_acquire("bench:getset", LEASE).await.unwrap());
            getset.release(&h).await.unwrap();
        })
    });
    group.bench_function(format!("{label}/scripted-cycle"), |b| {
        b.to_async(rt).iter(|| async {
            let h = holding(scripted.try_acquire("bench:scripted", LEASE).await.unwrap());
            scripted.release(&h).await.unwrap();
        })
    });
    group.bench_function(format!("{label}/watch-cycle"), |b| {
        b.to_async(rt).iter(|| async {
            let h = holding(watch.try_acquire("bench:watch", LEASE).await.unwrap());
            watch.release(&h).await.unwrap();
        })
    });
    group.finish();
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = server::RedisServer::start();
    let redis = rt.block_on(server.store());
    each(c, &rt, "redis", redis);
    each(c, &rt, "memory", MemoryStore::new());
}

criterion_group!(legacy, benches);
criterion_main!(legacy);
