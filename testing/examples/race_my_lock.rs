//! Race your own lock: a hand-written legacy lock, written the way an application writes it
//! (plain commands on a store, no tairlock lock type), against `tairlock-legacy`'s
//! `ScriptedLock` on the same key format, under every scenario of `tairlock race`.
//!
//! ```text
//! cargo run -p tairlock-testing --example race_my_lock
//! ```
//!
//! The hand-written lock's rows show its flaws (overlaps, foreign deletions, stale writes: it
//! claims to be safe, so its verdict is `BROKEN`); the scripted lock keeps its zeros (`ok`).
//! The exit code is 0 when the table shows exactly that, 1 otherwise.

use std::process::ExitCode;
use std::time::Duration;

use tairlock::clock::Clock;
use tairlock::{MemoryStore, Store};
use tairlock_testing::race::algorithms::LegacyScripted;
use tairlock_testing::race::{
    Algorithm, Attempt, BoxFuture, Client, Expectation, Holding, RaceConfig, Step,
    run_embedded_algorithms,
};

/// The application's lock, unchanged (`app_lock/mod.rs`): what a team migrating to tairlock
/// has today.
mod app_lock;

/// The application's lock as a row of the race: the adapter a team writes once.
struct MyLock;

impl<S: Store> Algorithm<S> for MyLock {
    fn name(&self) -> &'static str {
        "my-lock"
    }

    /// What the team believes: the race says whether it holds.
    fn expectation(&self) -> Expectation {
        Expectation::Safe
    }

    fn fenced(&self) -> bool {
        false
    }

    fn try_acquire<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        ttl: Duration,
    ) -> BoxFuture<'a, Step<Attempt>> {
        Box::pin(async move {
            // `paused_store`: the scenario may stall or crash the client before each command;
            // `clock`: this client's clock (skewed in the clock-skew scenario).
            let store = cx.paused_store();
            let clock: &dyn Clock = cx.clock().as_ref();
            Ok(match app_lock::try_lock(&store, clock, lock, ttl).await? {
                // The application believes it holds the lock until its timestamp, by its clock.
                Some(expires) => Attempt::Acquired(Holding {
                    value: expires.to_string().into_bytes(),
                    fence: None,
                    deadline: tokio::time::Instant::now()
                        + Duration::from_millis(expires).saturating_sub(clock.now()),
                }),
                None => Attempt::Busy { retry_after: None },
            })
        })
    }

    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        _holding: Holding,
    ) -> BoxFuture<'a, Step<()>> {
        Box::pin(async move {
            let clock: &dyn Clock = cx.clock().as_ref();
            Ok(app_lock::unlock(&cx.paused_store(), clock, lock).await?)
        })
    }

    /// The lock's keys never carry a TTL, yet a key left behind is not stuck: the next client
    /// takes it over by its timestamp. Only a value that is not a timestamp would be.
    fn stuck<'a>(&'a self, store: &'a S, lock: &'a str) -> BoxFuture<'a, tairlock::Result<u64>> {
        Box::pin(async move {
            let value = store.get(lock).await?;
            Ok(u64::from(value.is_some_and(|v| {
                std::str::from_utf8(&v).map_or(true, |v| v.parse::<u64>().is_err())
            })))
        })
    }
}

fn main() -> ExitCode {
    let config = RaceConfig::default();
    let algorithms: Vec<Box<dyn Algorithm<MemoryStore>>> =
        vec![Box::new(MyLock), Box::new(LegacyScripted)];
    eprintln!(
        "race_my_lock: {} clients, {} trials of {:?}, lease {:?}, seed {}, embedded store \
         (virtual time)",
        config.clients, config.trials, config.trial_length, config.lease, config.seed
    );
    let rows = run_embedded_algorithms(&config, algorithms, |row| {
        eprintln!(
            "  {:<16} {:<13} {}",
            row.algorithm, row.scenario, row.verdict
        );
    })
    .expect("the embedded store has no I/O errors");
    print!("{}", tairlock_testing::race::report::table(&rows));
    let mine_broken = rows
        .iter()
        .filter(|r| r.algorithm == "my-lock")
        .any(|r| r.broken());
    let scripted_ok = rows
        .iter()
        .filter(|r| r.algorithm == "legacy-scripted")
        .all(|r| !r.broken());
    if mine_broken && scripted_ok {
        println!("\nmy-lock shows its flaws; legacy-scripted (ScriptedLock) keeps its zeros.");
        ExitCode::SUCCESS
    } else {
        println!("\nunexpected: my-lock broken: {mine_broken}, legacy-scripted ok: {scripted_ok}");
        ExitCode::FAILURE
    }
}
