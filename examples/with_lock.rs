//! A web handler's critical section with `with_lock`.
//!
//! Twenty concurrent "requests" each reserve one unit of stock: a read, some work, a write — a
//! read-modify-write that loses updates when two requests interleave. Each runs inside
//! `ExpireLock::with_lock`, which holds the lock (renewed by the watchdog) while the closure
//! runs, stops the closure if the lease is lost, and releases the lock afterwards; waiting
//! requests are woken by the release notification.
//!
//! Run against a server: `cargo run --example with_lock -- redis://127.0.0.1:6379` (or set
//! `TAIRLOCK_REDIS`). It exits with status 1 if any update was lost.

use std::time::Duration;

use tairlock::{ExpireLock, RedisStore};

/// Requests in flight at once.
pub(crate) const REQUESTS: i64 = 20;
/// Stock before the requests.
pub(crate) const INITIAL: i64 = 100;

/// The handler: reserve one unit of `sku`, returning the stock left.
async fn reserve(locks: &ExpireLock<RedisStore>, sku: &str) -> tairlock::Result<i64> {
    let key = format!("example:stock:{sku}");
    locks
        .with_lock(&format!("stock:{sku}"), |lease| async move {
            let store = locks.store();
            let left: i64 = store.command(redis::cmd("GET").arg(&key)).await?;
            // The work between read and write, where an unlocked handler would interleave.
            tokio::time::sleep(Duration::from_millis(5)).await;
            store
                .command::<()>(redis::cmd("SET").arg(&key).arg(left - 1))
                .await?;
            // A resource that checks fencing tokens would be given `lease.fence()` here.
            let _ = lease.fence();
            Ok::<_, tairlock::Error>(left - 1)
        })
        .await?
}

/// Reset the stock, serve [`REQUESTS`] concurrent requests, and return the stock left.
pub(crate) async fn run(url: &str) -> tairlock::Result<i64> {
    let store = RedisStore::connect(url).await?;
    store
        .command::<()>(redis::cmd("SET").arg("example:stock:widget").arg(INITIAL))
        .await?;
    let locks = ExpireLock::new(store.clone());
    let mut requests = Vec::new();
    for _ in 0..REQUESTS {
        let locks = locks.clone();
        requests.push(tokio::spawn(async move { reserve(&locks, "widget").await }));
    }
    for request in requests {
        request.await.expect("a request panicked")?;
    }
    store
        .command(redis::cmd("GET").arg("example:stock:widget"))
        .await
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TAIRLOCK_REDIS").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    match run(&url).await {
        Ok(left) if left == INITIAL - REQUESTS => {
            println!("{REQUESTS} requests, stock {INITIAL} -> {left}: no update lost");
            std::process::ExitCode::SUCCESS
        }
        Ok(left) => {
            eprintln!(
                "stock {left}, expected {}: updates lost",
                INITIAL - REQUESTS
            );
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
