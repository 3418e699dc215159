//! The expire lock against the round-trip floor, on a `redis-server` this bench starts itself
//! and on the embedded store.
//!
//! - `uncontended/floor-cycle`: raw `SET NX PX` + `EVALSHA` compare-and-delete (the floor);
//! - `uncontended/ping`;
//! - `uncontended/expire-lock-cycle`: `expire_lock` + `expire_unlock` (target: ≤ 1.10× floor);
//! - `contended/8`: 8 tasks on one key, each taking and releasing the lock once per iteration
//!   (waiting by notification).
//!
//! `tairlock bench` runs the same scenarios with ratios printed; this is the criterion view.
#![allow(missing_docs)] // criterion_group! generates undocumented items

#[path = "../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use tairlock::store::memory::{CommandResult, Db};
use tairlock::{Acquire, ExpireLock, MemoryStore, Reply, Script, Store};

static FLOOR_CAD: Script = Script::new(
    "floor_cad",
    "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0",
    floor_cad,
);

fn floor_cad(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    if db.get(&keys[0])?.as_deref() == Some(args[0].as_bytes()) {
        return Ok(Reply::Int(i64::from(db.del(&keys[0]))));
    }
    Ok(Reply::Int(0))
}

async fn floor_cycle<S: Store>(store: &S, token: &str) {
    store
        .set_nx_px("bench:floor", token.as_bytes(), Duration::from_secs(10))
        .await
        .unwrap();
    store
        .eval(&FLOOR_CAD, &["bench:floor".to_owned()], &[token.to_owned()])
        .await
        .unwrap();
}

async fn lock_cycle<S: Store>(locks: &ExpireLock<S>) {
    let Acquire::Acquired(lease) = locks
        .expire_lock("bench", Duration::from_secs(10))
        .await
        .unwrap()
    else {
        panic!("uncontended lock was held");
    };
    locks.expire_unlock("bench", &lease).await.unwrap();
}

async fn contended<S: Store>(locks: &ExpireLock<S>, tasks: usize) {
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let locks = locks.clone();
        handles.push(tokio::spawn(async move {
            let guard = locks
                .lock_with_lease("contended", Duration::from_secs(10), None)
                .await
                .unwrap()
                .unwrap();
            guard.release().await.unwrap();
        }));
    }
    for h in handles {
        h.await.unwrap();
    }
}

fn benches(c: &mut Criterion) {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let server = server::RedisServer::start();
    let redis = rt.block_on(server.store());
    let memory = MemoryStore::new();
    let token = tairlock::new_nonce();

    let mut group = c.benchmark_group("uncontended");
    group.bench_function("redis/floor-cycle", |b| {
        b.to_async(&rt).iter(|| floor_cycle(&redis, &token))
    });
    group.bench_function("redis/ping", |b| {
        b.to_async(&rt)
            .iter(|| async { redis.command::<String>(&redis::cmd("PING")).await.unwrap() })
    });
    let redis_locks = ExpireLock::new(redis.clone());
    group.bench_function("redis/expire-lock-cycle", |b| {
        b.to_async(&rt).iter(|| lock_cycle(&redis_locks))
    });
    group.bench_function("memory/floor-cycle", |b| {
        b.to_async(&rt).iter(|| floor_cycle(&memory, &token))
    });
    let memory_locks = ExpireLock::new(memory.clone());
    group.bench_function("memory/expire-lock-cycle", |b| {
        b.to_async(&rt).iter(|| lock_cycle(&memory_locks))
    });
    group.finish();

    let mut group = c.benchmark_group("contended");
    group.sample_size(20);
    group.bench_function("redis/8", |b| {
        b.to_async(&rt).iter(|| contended(&redis_locks, 8))
    });
    group.bench_function("memory/8", |b| {
        b.to_async(&rt).iter(|| contended(&memory_locks, 8))
    });
    group.finish();
}

criterion_group!(expire_lock, benches);
criterion_main!(expire_lock);
