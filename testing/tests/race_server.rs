//! The race on a real server (real time, [`Audit::Commands`]): a `WATCH` transaction's
//! deletions are seen through the race's store like any command's.
//!
//! [`Audit::Commands`]: tairlock_testing::race::client::Audit::Commands

#[path = "../../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use std::time::Duration;

use tairlock::RedisStore;
use tairlock::clock::{SharedClock, SystemClock};
use tairlock_legacy::WatchStore;
use tairlock_legacy::watch::{Read, TxOp, WatchConnection};
use tairlock_testing::race::algorithms::{FairExpireLock, LegacyScripted, LegacyWatch, RwScripted};
use tairlock_testing::race::scenario::Scenario;
use tairlock_testing::race::{
    Algorithm, Attempt, BoxFuture, Client, Expectation, Holding, RaceConfig, Row, Step,
    run_algorithms,
};

/// `legacy-watch`'s acquire, and a `WATCH` release that forgot to compare: it deletes
/// whatever the key holds.
struct WatchDeleteAny;

impl<S: WatchStore> Algorithm<S> for WatchDeleteAny {
    fn name(&self) -> &'static str {
        "watch-delete-any"
    }

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
        Algorithm::<S>::try_acquire(&LegacyWatch, cx, lock, ttl)
    }

    fn release<'a>(
        &'a self,
        cx: &'a Client<S>,
        lock: &'a str,
        _holding: Holding,
    ) -> BoxFuture<'a, Step<()>> {
        Box::pin(async move {
            cx.pause("release:before").await?;
            let mut con = cx.store().watch_connection().await?;
            let key = lock.to_owned();
            con.watch(std::slice::from_ref(&key), &[Read::Get(key.clone())])
                .await?;
            con.exec(&[TxOp::Del { key }]).await?;
            Ok(())
        })
    }

    fn stuck<'a>(&'a self, _: &'a S, _: &'a str) -> BoxFuture<'a, tairlock::Result<u64>> {
        Box::pin(async { Ok(0) })
    }
}

fn race_on(server: &server::RedisServer, algorithm: Box<dyn Algorithm<RedisStore>>) -> Row {
    let config = RaceConfig {
        trials: 2,
        trial_length: Duration::from_millis(1500),
        scenarios: vec![Scenario::ShortStalls],
        latency: None,
        key_prefix: format!("race-test:{}", std::process::id()),
        ..RaceConfig::default()
    };
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut rows = rt.block_on(async {
        let store = RedisStore::connect(&server.url()).await.unwrap();
        let clock: SharedClock = std::sync::Arc::new(SystemClock);
        run_algorithms(store, clock, "redis", &config, vec![algorithm], |_| {})
            .await
            .unwrap()
    });
    rows.pop().unwrap()
}

#[test]
fn a_watch_release_that_deletes_any_lock_is_caught_on_a_real_server() {
    let server = server::RedisServer::start();
    let row = race_on(&server, Box::new(WatchDeleteAny));
    assert!(row.acquisitions > 0, "{row:?}");
    assert!(
        row.foreign_deletions > 0,
        "{row:?}\n{}",
        server.log_section()
    );
    assert_eq!(row.verdict, "BROKEN");
}

#[test]
fn legacy_watch_keeps_its_zeros_on_a_real_server() {
    let server = server::RedisServer::start();
    let row = race_on(&server, Box::new(LegacyWatch));
    assert!(row.acquisitions > 0, "{row:?}");
    assert_eq!(row.verdict, "ok", "{row:?}\n{}", server.log_section());
}

/// The rows whose zeros must hold on a real server run after run, not only on the embedded
/// store: the legacy rows (a takeover of a lease that already ended by the holder's deadline,
/// within the millisecond the server still keeps its key, is no foreign deletion) and the fair
/// rows (grants made by another client's release).
fn legacy_and_fair() -> Vec<Box<dyn Algorithm<RedisStore>>> {
    vec![
        Box::new(LegacyScripted),
        Box::new(LegacyWatch),
        Box::new(FairExpireLock::default()),
        Box::new(RwScripted::fair_writers()),
    ]
}

#[test]
fn legacy_and_fair_rows_keep_their_zeros_on_a_real_server_seed_after_seed() {
    let server = server::RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(RedisStore::connect(&server.url())).unwrap();
    // Short stalls (where a release comes near the lease's end, and the next grant right after
    // it) under several seeds; every other scenario under one.
    let runs = [
        (1, Scenario::ShortStalls),
        (2, Scenario::ShortStalls),
        (3, Scenario::ShortStalls),
        (4, Scenario::LongStalls),
        (4, Scenario::Crashes),
        (4, Scenario::ClockSkew),
        (4, Scenario::ReplyOutages),
    ];
    let mut rows = Vec::new();
    for (seed, scenario) in runs {
        let config = RaceConfig {
            trials: 1,
            trial_length: Duration::from_millis(800),
            seed,
            scenarios: vec![scenario],
            latency: None,
            key_prefix: format!("race-test:{}:{seed}", std::process::id()),
            ..RaceConfig::default()
        };
        let clock: SharedClock = std::sync::Arc::new(SystemClock);
        rows.extend(
            rt.block_on(run_algorithms(
                store.clone(),
                clock,
                "redis",
                &config,
                legacy_and_fair(),
                |_| {},
            ))
            .unwrap()
            .into_iter()
            .map(|row| (seed, row)),
        );
    }
    let broken: Vec<String> = rows
        .iter()
        .filter(|(_, row)| row.acquisitions == 0 || row.verdict != "ok")
        .map(|(seed, row)| format!("seed {seed}: {row:?}"))
        .collect();
    assert!(
        broken.is_empty(),
        "{} of {} rows broke their zeros (or acquired nothing):\n{}\n{}",
        broken.len(),
        rows.len(),
        broken.join("\n"),
        server.log_section()
    );
}
