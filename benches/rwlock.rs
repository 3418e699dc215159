//! The scripted reader/writer lock against the round-trip floor (target: a read acquire +
//! release within 1.10× of the floor cycle), on a `redis-server` this bench starts itself and
//! on the embedded store.
//!
//! - `uncontended/read-cycle`: `read_acquire` + `read_release` (one round trip each);
//! - `uncontended/write-cycle`: `write_acquire` + `write_release`;
//! - `contended/8-readers`: 8 tasks each taking and releasing a read lock per iteration.
#![allow(missing_docs)] // criterion_group! generates undocumented items

#[path = "../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tairlock::{MemoryStore, Store};
use tairlock_rwlock::{RwLock, WriteAttempt};

const LEASE: Duration = Duration::from_secs(10);

async fn read_cycle<S: Store>(rw: &RwLock<S>, nonce: &str) {
    rw.read_acquire("bench", nonce, LEASE).await.unwrap();
    rw.read_release("bench", nonce).await.unwrap();
}

async fn write_cycle<S: Store>(rw: &RwLock<S>, nonce: &str) {
    let WriteAttempt::Acquired(lease) = rw
        .write_acquire("bench-w", nonce, LEASE, None)
        .await
        .unwrap()
    else {
        panic!("uncontended write lock was held");
    };
    rw.write_release("bench-w", lease.lease()).await.unwrap();
}

async fn readers<S: Store>(rw: &RwLock<S>, n: usize) {
    let mut handles = Vec::new();
    for _ in 0..n {
        let rw = rw.clone();
        handles.push(tokio::spawn(async move {
            let guard = rw.read("bench-r").await.unwrap();
            guard.release().await.unwrap();
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

fn each<S: Store>(c: &mut Criterion, rt: &tokio::runtime::Runtime, label: &str, store: S) {
    let rw = RwLock::new(store);
    let nonce = tairlock::new_nonce();
    let mut group = c.benchmark_group("uncontended");
    group.bench_function(format!("{label}/read-cycle"), |b| {
        b.to_async(rt).iter(|| read_cycle(&rw, &nonce))
    });
    group.bench_function(format!("{label}/write-cycle"), |b| {
        b.to_async(rt).iter(|| write_cycle(&rw, &nonce))
    });
    group.finish();
    let mut group = c.benchmark_group("contended");
    group.sample_size(20);
    group.bench_function(format!("{label}/8-readers"), |b| {
        b.to_async(rt).iter(|| readers(&rw, 8))
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

criterion_group!(rwlock, benches);
criterion_main!(rwlock);
