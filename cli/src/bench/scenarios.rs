//! The scenarios: the floor, each primitive's cycle, the many-keys and memory rows, and the
//! driver that runs the selected ones in order ([`run`]), plus Redlock ([`redlock`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rand::Rng;
use tairlock::scripts::EXPIRE_UNLOCK;
use tairlock::{Acquire, Keyspace, Owner, RedisStore, Redlock, RedlockOptions, ReentrantLock};

use super::common::{BenchConfig, BenchRow, SCENARIOS, bare_error, locks, options};
use super::contended::{Handoff, contended};
use super::counted::{BenchStore, Counted};
use super::floor::{FLOOR_CAD, redis_benchmark};
use super::sample::{Samples, per_op, row, timed};

/// `tairlock bench --redlock URL,URL,…`: `floor-cycle` on the first server, then
/// `redlock-cycle` — one [`Redlock::try_acquire`] + [`Redlock::release`] over every server
/// (requests to the servers go out concurrently), its ratio to that floor. `config.only`
/// selects between the two (both if empty).
///
/// # Errors
///
/// Store errors, or a cycle that did not get a majority (another client holds the bench key).
pub async fn redlock(
    servers: Vec<RedisStore>,
    config: &BenchConfig,
    mut progress: impl FnMut(usize, usize, &str),
) -> tairlock::Result<Vec<BenchRow>> {
    let n = servers.len();
    let first = servers.first().cloned().ok_or_else(|| {
        tairlock::Error::new(
            tairlock::ErrorKind::InvalidInput,
            "redlock needs at least one server",
        )
    })?;
    let want = |name: &str| config.only.is_empty() || config.only.iter().any(|o| o == name);
    let mut rows = Vec::new();
    let mut floor_cycle = None;
    if want("floor-cycle") {
        let floor_config = BenchConfig {
            duration: config.duration,
            only: vec!["floor-cycle".to_owned()],
            many: config.many,
        };
        let floor = run(Counted::new(first), &floor_config, |_, _, name| {
            progress(0, 2, name)
        })
        .await?;
        floor_cycle = floor
            .first()
            .and_then(|r| r.ops_per_sec)
            .map(|ops| 1.0 / ops);
        rows.extend(floor);
    }
    if want("redlock-cycle") {
        progress(1, 2, "redlock-cycle");
        let options = RedlockOptions::default()
            .keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix"));
        let redlock = Redlock::new(servers, options)?;
        let quorum = redlock.quorum();
        let ttl = Duration::from_secs(10);
        let mut s = timed(config.duration, |_| async {
            let Some(lease) = redlock.try_acquire("redlock-cycle", ttl).await? else {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::Server,
                    "bench redlock not granted by a majority (held elsewhere, or servers down)",
                ));
            };
            redlock.release(&lease).await;
            Ok(())
        })
        .await?;
        rows.push(BenchRow {
            scenario: "redlock-cycle".to_owned(),
            store: "redlock".to_owned(),
            ops_per_sec: Some(s.ops_per_sec()),
            p50_us: s.pct(0.5),
            p99_us: s.pct(0.99),
            ratio_to_floor: floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f),
            // SET NX PX and a compare-and-delete script on each server.
            commands_per_op: Some(2.0 * n as f64),
            same_worker_pct: None,
            max_wait_ms: None,
            one_way_latency_us: 0.0,
            note: format!("{n} servers, quorum {quorum}"),
            many: None,
        });
    }
    Ok(rows)
}

/// Run the selected scenarios. `progress(i, n, name)` is called as each starts.
///
/// # Errors
///
/// Store errors.
pub async fn run<S: BenchStore>(
    store: S,
    config: &BenchConfig,
    mut progress: impl FnMut(usize, usize, &str),
) -> tairlock::Result<Vec<BenchRow>> {
    let named = |s: &str| config.only.iter().any(|o| o == s);
    let mut selected: Vec<&str> = SCENARIOS
        .iter()
        .copied()
        .filter(|s| config.only.is_empty() || named(s))
        .collect();
    // Minutes long and memory hungry: only when named.
    if named("many-leases") {
        selected.push("many-leases");
    }
    let mut rows: Vec<BenchRow> = Vec::new();
    let mut floor_cycle: Option<f64> = None;
    let mut ping_p50: Option<f64> = None;
    let d = config.duration;
    for (i, name) in selected.iter().enumerate() {
        progress(i, selected.len(), name);
        let before = store.commands().await;
        let (mut row, ops) = match *name {
            "floor-cycle" => {
                let token = tairlock::new_nonce();
                let key = "tairlock-bench:floor";
                let (mut s, commands) = match store.bare().await {
                    // A bare redis-rs multiplexed connection: SET NX PX, then the
                    // compare-and-delete by EVALSHA (loaded once), as a hand-written client does.
                    Some(conn) => {
                        let cad = redis::Script::new(FLOOR_CAD.lua());
                        let s = timed(d, |_| {
                            let (mut conn, cad, token) = (conn.clone(), &cad, &token);
                            async move {
                                let _: Option<String> = redis::cmd("SET")
                                    .arg(key)
                                    .arg(token)
                                    .arg("NX")
                                    .arg("PX")
                                    .arg(10_000)
                                    .query_async(&mut conn)
                                    .await
                                    .map_err(bare_error)?;
                                let _: i64 = cad
                                    .key(key)
                                    .arg(token)
                                    .invoke_async(&mut conn)
                                    .await
                                    .map_err(bare_error)?;
                                Ok(())
                            }
                        })
                        .await?;
                        (s, Some(2.0))
                    }
                    // No single server: the same two commands through the store.
                    None => {
                        let s = timed(d, |_| async {
                            store
                                .set_nx_px(key, token.as_bytes(), Duration::from_secs(10))
                                .await?;
                            let keys = [key.to_owned()];
                            store
                                .eval(&FLOOR_CAD, &keys, std::slice::from_ref(&token))
                                .await?;
                            Ok(())
                        })
                        .await?;
                        (s, None)
                    }
                };
                floor_cycle = Some(1.0 / s.ops_per_sec());
                let mut r = row(
                    name,
                    &store,
                    Some(s.ops_per_sec()),
                    s.pct(0.5),
                    s.pct(0.99),
                    Some(1.0),
                );
                r.commands_per_op = commands;
                (r, s.ops + 50)
            }
            "ping" => {
                let mut s = timed(d, |_| store.ping()).await?;
                ping_p50 = s.pct(0.5);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        None,
                    ),
                    s.ops + 50,
                )
            }
            "expire-lock-cycle" | "expire-lock-cycle-scripted" => {
                let locks = locks(&store);
                let ttl = Duration::from_secs(10);
                let scripted = *name == "expire-lock-cycle-scripted";
                let keys = locks.keys("cycle")?;
                let publish = store.pubsub().publish_command().to_owned();
                let mut s = timed(d, |_| async {
                    let Acquire::Acquired(lease) = locks.expire_lock("cycle", ttl).await? else {
                        return Err(tairlock::Error::new(
                            tairlock::ErrorKind::Server,
                            "bench lock unexpectedly held",
                        ));
                    };
                    if scripted {
                        let args = [
                            lease.value().to_owned(),
                            keys.channel.clone(),
                            publish.clone(),
                        ];
                        let reply = store
                            .eval(&EXPIRE_UNLOCK, std::slice::from_ref(&keys.lock), &args)
                            .await?;
                        if reply.as_int() != Some(1) {
                            return Err(tairlock::Error::new(
                                tairlock::ErrorKind::Server,
                                format!("bench release not released: {reply:?}"),
                            ));
                        }
                    } else {
                        locks.expire_unlock("cycle", &lease).await?;
                    }
                    Ok(())
                })
                .await?;
                let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        ratio,
                    ),
                    s.ops + 50,
                )
            }
            "guard-cycle" | "guard-cycle-fair" => {
                let fair = *name == "guard-cycle-fair";
                let locks = tairlock::ExpireLock::with_options(store.clone(), options().fair(fair));
                let lease = Duration::from_secs(10);
                let mut s = timed(d, |_| async {
                    let guard = locks
                        .lock_with_lease("guard-cycle", lease, None)
                        .await?
                        .ok_or_else(|| {
                            tairlock::Error::new(tairlock::ErrorKind::Server, "no bench lock")
                        })?;
                    guard.release().await?;
                    Ok(())
                })
                .await?;
                let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        ratio,
                    ),
                    s.ops + 50,
                )
            }
            "reentrant-reacquire" => {
                let locks = ReentrantLock::new(locks(&store));
                let owner = Owner::new();
                let outer = locks.lock_as(&owner, "reentrant").await?;
                let before_inner = store.commands().await;
                let mut s = timed(d, |_| async {
                    let inner = locks.lock_as(&owner, "reentrant").await?;
                    inner.release().await?;
                    Ok(())
                })
                .await?;
                let after_inner = store.commands().await;
                outer.release().await?;
                let mut r = row(
                    name,
                    &store,
                    Some(s.ops_per_sec()),
                    s.pct(0.5),
                    s.pct(0.99),
                    None,
                );
                r.commands_per_op = per_op(before_inner, after_inner, s.ops + 50);
                rows.push(r);
                continue;
            }
            "rw-read-cycle" => {
                let rw = tairlock_rwlock::RwLock::with_options(
                    store.clone(),
                    tairlock_rwlock::Options::default()
                        .keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix")),
                );
                let lease = Duration::from_secs(10);
                let mut s = timed(d, |i| {
                    let rw = &rw;
                    async move {
                        let nonce = format!("r{i}");
                        rw.read_acquire("rw", &nonce, lease).await?;
                        rw.read_release("rw", &nonce).await?;
                        Ok(())
                    }
                })
                .await?;
                let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        ratio,
                    ),
                    s.ops + 50,
                )
            }
            "legacy-getset-cycle" | "legacy-scripted-cycle" => {
                let options =
                    tairlock_legacy::Options::default().unit(tairlock_legacy::Unit::Millis);
                let getset =
                    tairlock_legacy::GetSetLock::with_options(store.clone(), options.clone());
                let scripted = tairlock_legacy::ScriptedLock::with_options(store.clone(), options);
                let lease = Duration::from_secs(10);
                let scripted_row = *name == "legacy-scripted-cycle";
                let mut s = timed(d, |_| {
                    let (getset, scripted) = (&getset, &scripted);
                    async move {
                        let key = "tairlock-bench:legacy";
                        let attempt = if scripted_row {
                            scripted.try_acquire(key, lease).await?
                        } else {
                            getset.try_acquire(key, lease).await?
                        };
                        let tairlock_legacy::TryAcquire::Acquired(holding) = attempt else {
                            return Err(tairlock::Error::new(
                                tairlock::ErrorKind::Server,
                                "bench lock unexpectedly held",
                            ));
                        };
                        if scripted_row {
                            scripted.release(&holding).await?;
                        } else {
                            getset.release(&holding).await?;
                        }
                        Ok(())
                    }
                })
                .await?;
                let ratio = floor_cycle.map(|f| (1.0 / s.ops_per_sec()) / f);
                (
                    row(
                        name,
                        &store,
                        Some(s.ops_per_sec()),
                        s.pct(0.5),
                        s.pct(0.99),
                        ratio,
                    ),
                    s.ops + 50,
                )
            }
            "rw-read-heavy" => super::rw_read_heavy::rw_read_heavy(&store, d, true).await?,
            "rw-read-heavy-unshared" => {
                super::rw_read_heavy::rw_read_heavy(&store, d, false).await?
            }
            "contended-handoff" => contended(&store, 8, d, Handoff::Notify, ping_p50).await?,
            "contended-separate-clients" => {
                let how = Handoff::Separate { fair: false };
                contended(&store, 8, d, how, ping_p50).await?
            }
            "contended-fair" => {
                let how = Handoff::Separate { fair: true };
                contended(&store, 8, d, how, ping_p50).await?
            }
            "contended-poll-getset" => {
                contended(&store, 8, d, Handoff::PollGetSet, ping_p50).await?
            }
            "contended-poll-setnx" => contended(&store, 8, d, Handoff::PollSetNx, ping_p50).await?,
            "idle-ping" => super::handoff::idle_floor(&store, d, false).await?,
            "idle-release" => super::handoff::idle_floor(&store, d, true).await?,
            "handoff" => super::handoff::forced(&store, d, false).await?,
            "handoff-fair" => super::handoff::forced(&store, d, true).await?,
            "semaphore-cycle" => super::semaphore::cycle(&store, d, floor_cycle).await?,
            "contended-semaphore" => super::semaphore::contended(&store, d).await?,
            "local-waiters-1" => contended(&store, 1 + 1, d, Handoff::Notify, ping_p50).await?,
            "local-waiters-8" => contended(&store, 8 + 1, d, Handoff::Notify, ping_p50).await?,
            "local-waiters-32" => contended(&store, 32 + 1, d, Handoff::Notify, ping_p50).await?,
            "many-keys-throughput" => many_keys(&store, d).await?,
            "many-leases" => (super::many_leases(&store, config.many).await?, 0),
            "redis-benchmark-evalsha" => match redis_benchmark(&store).await {
                Some(r) => (r, 0),
                None => continue,
            },
            "memory-per-lock" => match memory_per_lock(&store).await? {
                Some(r) => (r, 0),
                None => continue,
            },
            "memory-per-rwlock" => match memory_per_rwlock(&store).await? {
                Some(r) => (r, 0),
                None => continue,
            },
            _ => continue,
        };
        if ops > 0 && row.commands_per_op.is_none() {
            let after = store.commands().await;
            row.commands_per_op = per_op(before, after, ops);
        }
        rows.push(row);
    }
    Ok(rows)
}

/// 64 tasks on one client over 1,000 keys, each cycling acquire + release on random keys. One op
/// is one script call (a cycle is two).
pub(super) async fn many_keys<S: BenchStore>(
    store: &S,
    d: Duration,
) -> tairlock::Result<(BenchRow, u64)> {
    let locks = locks(store);
    let ops = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..64 {
        let (locks, ops, stop, latencies) =
            (locks.clone(), ops.clone(), stop.clone(), latencies.clone());
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            while !stop.load(Ordering::Relaxed) {
                let key = format!("k{}", rand::rng().random_range(0..1000));
                let t = Instant::now();
                if let Acquire::Acquired(lease) =
                    locks.expire_lock(&key, Duration::from_secs(10)).await?
                {
                    mine.push(t.elapsed());
                    let t = Instant::now();
                    locks.expire_unlock(&key, &lease).await?;
                    mine.push(t.elapsed());
                    ops.fetch_add(2, Ordering::Relaxed);
                } else {
                    mine.push(t.elapsed());
                    ops.fetch_add(1, Ordering::Relaxed);
                }
            }
            latencies.lock().extend(mine);
            Ok::<(), tairlock::Error>(())
        }));
    }
    tokio::time::sleep(d).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("bench worker panicked")?;
    }
    let mut s = Samples {
        latencies: std::mem::take(&mut *latencies.lock()),
        elapsed: start.elapsed(),
        ops: ops.load(Ordering::Relaxed),
    };
    let ops = s.ops;
    Ok((
        row(
            "many-keys-throughput",
            store,
            Some(s.ops_per_sec()),
            s.pct(0.5),
            s.pct(0.99),
            None,
        ),
        ops,
    ))
}

/// `MEMORY USAGE` of a held lock's keys.
pub(super) async fn memory_per_lock<S: BenchStore>(
    store: &S,
) -> tairlock::Result<Option<BenchRow>> {
    let locks = locks(store);
    let Acquire::Acquired(lease) = locks
        .expire_lock("memory-probe", Duration::from_secs(10))
        .await?
    else {
        return Ok(None);
    };
    let keys = locks.keys("memory-probe")?;
    let (a, b) = (
        store.memory_usage(&keys.lock).await,
        store.memory_usage(&keys.fence).await,
    );
    locks.expire_unlock("memory-probe", &lease).await?;
    let (Some(a), Some(b)) = (a, b) else {
        return Ok(None);
    };
    let mut r = row("memory-per-lock", store, None, None, None, None);
    r.note = format!(
        "{} bytes while held ({a} lock key + {b} fence key); {b} bytes retained for 60 s after release",
        a + b
    );
    Ok(Some(r))
}

/// `MEMORY USAGE` of an RW lock's keys with 8 live readers.
pub(super) async fn memory_per_rwlock<S: BenchStore>(
    store: &S,
) -> tairlock::Result<Option<BenchRow>> {
    let rw = tairlock_rwlock::RwLock::with_options(
        store.clone(),
        tairlock_rwlock::Options::default()
            .keyspace(Keyspace::new("tairlock-bench:").expect("valid prefix")),
    );
    let nonces: Vec<String> = (0..8).map(|_| tairlock::new_nonce()).collect();
    for n in &nonces {
        rw.read_acquire("memory-probe-rw", n, Duration::from_secs(10))
            .await?;
    }
    let keys = rw.keys("memory-probe-rw")?;
    let readers = store.memory_usage(&keys.readers).await;
    for n in &nonces {
        rw.read_release("memory-probe-rw", n).await?;
    }
    let Some(readers) = readers else {
        return Ok(None);
    };
    let mut r = row("memory-per-rwlock", store, None, None, None, None);
    r.note = format!(
        "{readers} bytes for 8 readers (one sorted set: nonce -> lease expiry); no writer key while only reading"
    );
    Ok(Some(r))
}
