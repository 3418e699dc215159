//! Migrating off the old `SETNX`/`GETSET` lock without a flag day.
//!
//! An old client (the original protocol, here `GetSetLock`, which sends exactly what the old
//! code sends) and a new one (`ScriptedLock`, server-judged expiry, fencing, owner-checked
//! release) share the live key `lock.orderid`, with the old value format (a Unix timestamp in
//! seconds). Each respects the other's lock:
//!
//! 1. the old client holds the key; the new client finds it busy;
//! 2. the old client releases; the new client takes it (with a fencing token);
//! 3. the old client finds the new client's lock busy;
//! 4. the new client releases, checking it is still its own lock; the old client takes it again.
//!
//! Once every client is new, the old protocol's flaws (client clocks, unfenced writes, releases
//! that delete anyone's lock) are gone; `docs/legacy-migration.md` has the whole matrix.
//!
//! Run against a server: `cargo run --example legacy_migration -- redis://127.0.0.1:6379` (or
//! set `TAIRLOCK_REDIS`). It exits with status 1 if a step went otherwise.

use std::time::Duration;

use tairlock::RedisStore;
use tairlock_legacy::{GetSetLock, Options, Release, ScriptedLock, Unit};

const KEY: &str = "lock.orderid";
const LEASE: Duration = Duration::from_secs(10);

/// The steps, each with whether it went as described, in order.
pub(crate) async fn run(url: &str) -> tairlock::Result<Vec<(&'static str, bool)>> {
    let store = RedisStore::connect(url).await?;
    store.command::<()>(redis::cmd("DEL").arg(KEY)).await?;
    let options = Options::default().unit(Unit::Seconds);
    let old = GetSetLock::with_options(store.clone(), options.clone());
    let new = ScriptedLock::with_options(store, options);
    let mut steps = Vec::new();

    let old_holding = old.try_acquire(KEY, LEASE).await?.holding();
    let new_try = new.try_acquire(KEY, LEASE).await?;
    steps.push((
        "1. old holds the key; new finds it busy",
        old_holding.is_some() && !new_try.is_acquired(),
    ));

    let released = match &old_holding {
        Some(h) => old.release(h).await?,
        None => Release::NotHeld,
    };
    let new_holding = new.try_acquire(KEY, LEASE).await?.holding();
    steps.push((
        "2. old releases; new takes it, fenced",
        released == Release::Released && new_holding.as_ref().is_some_and(|h| h.fence().is_some()),
    ));

    let old_try = old.try_acquire(KEY, LEASE).await?;
    steps.push(("3. old finds new's lock busy", !old_try.is_acquired()));

    let released = match &new_holding {
        Some(h) => new.release(h).await?,
        None => Release::NotHeld,
    };
    let old_again = old.try_acquire(KEY, LEASE).await?.holding();
    steps.push((
        "4. new releases its own lock; old takes it again",
        released == Release::Released && old_again.is_some(),
    ));
    if let Some(h) = old_again {
        old.release(&h).await?;
    }
    Ok(steps)
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TAIRLOCK_REDIS").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    match run(&url).await {
        Ok(steps) => {
            for (step, ok) in &steps {
                println!("{} {step}", if *ok { "ok  " } else { "FAIL" });
            }
            if steps.iter().all(|(_, ok)| *ok) {
                std::process::ExitCode::SUCCESS
            } else {
                std::process::ExitCode::FAILURE
            }
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
