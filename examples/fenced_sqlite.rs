//! A fenced write to a real database: a paused holder's late write is refused.
//!
//! No lease lock can stop a holder that pauses past its lease (a GC pause, a stopped VM) from
//! writing after someone else took the lock. The fencing token makes that write harmless: every
//! grant of a lock carries a larger token, the database stores the token of the last write, and
//! it accepts a write only with a larger one — `UPDATE … WHERE fence < ?`.
//!
//! 1. A takes the lock (lease 500 ms) and pauses for a second.
//! 2. The lease ends; B takes the lock with a larger token and writes: accepted.
//! 3. A wakes and writes with its old token: zero rows change, the write is refused.
//!
//! Run against a server: `cargo run --example fenced_sqlite -- redis://127.0.0.1:6379` (or set
//! `TAIRLOCK_REDIS`). It exits with status 1 if the late write got through.

use std::time::Duration;

use rusqlite::{Connection, params};
use tairlock::{Acquire, ExpireLock, Lease, RedisStore};

/// What happened, for the caller to check.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// A's token and B's.
    pub(crate) fences: (u64, u64),
    /// Whether B's write was accepted.
    pub(crate) b_accepted: bool,
    /// Whether A's late write was accepted (it must not be).
    pub(crate) a_late_accepted: bool,
    /// The balance the database ends with.
    pub(crate) balance: i64,
}

/// Write `balance` with `fence`: accepted only if no write with an equal or larger token came
/// before.
fn fenced_write(db: &Connection, balance: i64, fence: u64) -> rusqlite::Result<bool> {
    let changed = db.execute(
        "UPDATE account SET balance = ?1, fence = ?2 WHERE id = 1 AND fence < ?2",
        params![balance, fence as i64],
    )?;
    Ok(changed == 1)
}

async fn take(locks: &ExpireLock<RedisStore>, lease: Duration) -> tairlock::Result<Lease> {
    loop {
        match locks.expire_lock("account:1", lease).await? {
            Acquire::Acquired(lease) => return Ok(lease),
            // Without a time to live (`None`) the holder keeps it until it releases: look again
            // in a while.
            Acquire::Held { remaining, .. } => {
                tokio::time::sleep(remaining.unwrap_or(Duration::from_millis(250))).await;
            }
        }
    }
}

/// Play the scenario against the server at `url` and an in-memory SQLite database.
pub(crate) async fn run(url: &str) -> Result<Outcome, Box<dyn std::error::Error>> {
    let db = Connection::open_in_memory()?;
    db.execute_batch(
        "CREATE TABLE account (id INTEGER PRIMARY KEY, balance INTEGER NOT NULL, \
         fence INTEGER NOT NULL);
         INSERT INTO account VALUES (1, 100, 0);",
    )?;
    let locks = ExpireLock::new(RedisStore::connect(url).await?);
    locks.force_unlock("account:1").await?;

    let a = take(&locks, Duration::from_millis(500)).await?;
    println!("A holds the lock with token {}, and pauses", a.fence());
    tokio::time::sleep(Duration::from_secs(1)).await;

    let b = take(&locks, Duration::from_secs(10)).await?;
    let b_accepted = fenced_write(&db, 150, b.fence())?;
    println!(
        "B took the lock with token {} and wrote 150: {}",
        b.fence(),
        if b_accepted { "accepted" } else { "refused" }
    );

    let a_late_accepted = fenced_write(&db, 999, a.fence())?;
    println!(
        "A woke up and wrote 999 with token {}: {}",
        a.fence(),
        if a_late_accepted {
            "accepted"
        } else {
            "refused"
        }
    );
    locks.expire_unlock("account:1", &b).await?;

    let balance = db.query_row("SELECT balance FROM account WHERE id = 1", [], |r| r.get(0))?;
    Ok(Outcome {
        fences: (a.fence(), b.fence()),
        b_accepted,
        a_late_accepted,
        balance,
    })
}

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TAIRLOCK_REDIS").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    match run(&url).await {
        Ok(o)
            if o.fences.1 > o.fences.0
                && o.b_accepted
                && !o.a_late_accepted
                && o.balance == 150 =>
        {
            println!(
                "balance {}: the paused holder's late write was refused",
                o.balance
            );
            std::process::ExitCode::SUCCESS
        }
        Ok(o) => {
            eprintln!("unexpected: {o:?}");
            std::process::ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            std::process::ExitCode::from(2)
        }
    }
}
