//! `tairlock race`, the main job: the scripted rows hold their zeros, the verbatim recipes show
//! their flaws, and the JSON carries the contract's fields.

#[path = "../../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

use std::process::Command;

use serde_json::Value;

const FIELDS: [&str; 10] = [
    "algorithm",
    "scenario",
    "acquisitions",
    "overlaps",
    "foreign_deletions",
    "stale_writes_accepted",
    "stuck_locks",
    "late_deadlines",
    "handoff_p50_us",
    "replies_dropped",
];

fn race(args: &[&str]) -> (i32, Vec<Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .arg("race")
        .arg("--json")
        .args(args)
        .output()
        .expect("run tairlock");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let rows: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "race did not print JSON ({e}):\n{}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    let rows = rows.as_array().expect("a JSON array").clone();
    (out.status.code().unwrap_or(-1), rows, stderr)
}

fn count(row: &Value, field: &str) -> u64 {
    row[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing in {row}"))
}

fn rows_of<'a>(rows: &'a [Value], algorithm: &str) -> Vec<&'a Value> {
    rows.iter()
        .filter(|r| r["algorithm"] == algorithm)
        .collect()
}

/// A safe row that acquired and kept every safety count at zero: no foreign deletion, no stale
/// write accepted, no stuck lock, no late deadline, and no overlap except where a holder stalls
/// past its lease.
fn keeps_its_zeros(row: &Value) {
    assert!(count(row, "acquisitions") > 0, "{row}");
    assert_eq!(
        count(row, "foreign_deletions")
            + count(row, "stale_writes_accepted")
            + count(row, "stuck_locks")
            + count(row, "late_deadlines"),
        0,
        "{row}"
    );
    // Overlaps only with holders already past their lease (a stall, or a machine too loaded to
    // run them on time) are the pause every lease lock meets: fencing's to catch.
    if row["scenario"] != "long-stalls" {
        assert_eq!(
            count(row, "overlaps") - count(row, "overlaps_past_lease"),
            0,
            "{row}"
        );
    }
}

#[test]
fn embedded_race_keeps_scripted_zeros_and_counts_naive_flaws() {
    let (code, rows, stderr) = race(&[
        "--algorithm",
        "naive-setnx-expire",
        "--algorithm",
        "expire-lock",
        "--trials",
        "6",
    ]);
    assert_eq!(code, 0, "exit code; stderr:\n{stderr}");
    assert_eq!(rows.len(), 10, "2 algorithms x 5 scenarios");
    for row in &rows {
        for field in FIELDS {
            assert!(row.get(field).is_some(), "{field} missing in {row}");
        }
    }
    for row in rows_of(&rows, "expire-lock") {
        assert!(count(row, "acquisitions") > 0, "{row}");
        assert_eq!(count(row, "foreign_deletions"), 0, "{row}");
        assert_eq!(count(row, "stale_writes_accepted"), 0, "{row}");
        assert_eq!(count(row, "stuck_locks"), 0, "{row}");
        assert_eq!(count(row, "late_deadlines"), 0, "{row}");
        if row["scenario"] == "short-stalls" {
            assert_eq!(count(row, "overlaps"), 0, "{row}");
        }
        if row["scenario"] == "long-stalls" {
            // Long stalls overlap any lease lock; fencing is what keeps the resource safe.
            assert!(count(row, "overlaps") > 0, "{row}");
        }
    }
    let naive = rows_of(&rows, "naive-setnx-expire");
    let by = |scenario: &str| *naive.iter().find(|r| r["scenario"] == scenario).unwrap();
    assert!(
        count(by("short-stalls"), "foreign_deletions") > 0,
        "{}",
        by("short-stalls")
    );
    assert!(
        count(by("long-stalls"), "stale_writes_accepted") > 0,
        "{}",
        by("long-stalls")
    );
    assert!(count(by("crashes"), "stuck_locks") > 0, "{}", by("crashes"));
}

#[test]
fn same_seed_gives_the_same_table() {
    let args = [
        "--algorithm",
        "naive-setnx-expire",
        "--scenario",
        "short-stalls",
        "--trials",
        "3",
        "--seed",
        "7",
    ];
    let (_, a, _) = race(&args);
    let (_, b, _) = race(&args);
    assert_eq!(a, b);
}

#[test]
fn unknown_algorithm_is_a_usage_error() {
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["race", "--algorithm", "nope"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown algorithm"));
}

#[test]
fn race_on_a_real_server_holds_the_scripted_zeros() {
    let server = server::RedisServer::start();
    let (code, rows, stderr) = race(&[
        "--redis",
        &server.url(),
        "--algorithm",
        "expire-lock",
        "--algorithm",
        "naive-setnx-expire",
        "--scenario",
        "short-stalls",
        "--scenario",
        "crashes",
        "--trials",
        "1",
        "--lease",
        "100ms",
        "--duration",
        "1500ms",
    ]);
    assert_eq!(code, 0, "stderr:\n{stderr}\n{}", server.log_section());
    for row in rows_of(&rows, "expire-lock") {
        assert_eq!(row["store"], "redis");
        assert!(count(row, "acquisitions") > 0, "{row}");
        assert_eq!(
            count(row, "foreign_deletions")
                + count(row, "stale_writes_accepted")
                + count(row, "stuck_locks")
                + count(row, "late_deadlines"),
            0,
            "{row}"
        );
        if row["scenario"] == "short-stalls" {
            // Not counting holders already past their lease (a loaded machine runs them late).
            assert_eq!(
                count(row, "overlaps") - count(row, "overlaps_past_lease"),
                0,
                "{row}"
            );
        }
    }
    // The race cleans up after itself: no key it wrote is left behind.
    assert_eq!(
        server.cli(&["DBSIZE"]).trim(),
        "0",
        "keys left: {}",
        server.cli(&["KEYS", "*"])
    );
}

#[test]
fn zero_counts_and_sub_millisecond_leases_are_refused() {
    for (args, says) in [
        (&["--trials", "0"][..], "at least 1 trial"),
        (&["--clients", "0"][..], "at least 2 clients"),
        (&["--clients", "1"][..], "at least 2 clients"),
        (&["--duration", "0ms"][..], "out of range"),
        (&["--lease", "0ms"][..], "out of range"),
        (&["--lease", "500us"][..], "under 1ms"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
            .arg("race")
            .args(args)
            .args(["--algorithm", "expire-lock", "--scenario", "crashes"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says), "{args:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{args:?} ran a race");
    }
}

fn safe_row(scenario: &str, overlaps: u64) -> tairlock_cli::race::Row {
    tairlock_cli::race::Row {
        algorithm: "expire-lock".to_owned(),
        scenario: scenario.to_owned(),
        store: "memory".to_owned(),
        expectation: "safe".to_owned(),
        clients: 8,
        trials: 1,
        acquisitions: 100,
        overlaps,
        overlaps_past_lease: 0,
        foreign_deletions: 0,
        stale_writes_accepted: 0,
        writes_rejected: 0,
        stuck_locks: 0,
        late_deadlines: 0,
        handoff_p50_us: Some(1_500),
        handoff_p99_us: Some(4_000),
        stalls: 0,
        crashes: 0,
        replies_dropped: 0,
        verdict: "ok".to_owned(),
        timeline: None,
    }
}

#[test]
fn overlaps_break_a_safe_row_wherever_nobody_stalls_past_the_lease() {
    for scenario in ["short-stalls", "crashes", "clock-skew"] {
        assert!(safe_row(scenario, 3).broken(), "{scenario}");
        assert!(!safe_row(scenario, 0).broken(), "{scenario}");
    }
    // A holder paused past its lease overlaps the next one with any lease lock.
    assert!(!safe_row("long-stalls", 3).broken());
    // Elsewhere too, when every holder found inside was past its lease (a machine too loaded
    // to run it on time): only the overlaps with a holder still relying on its lease count.
    for scenario in ["short-stalls", "crashes", "clock-skew"] {
        let row = tairlock_cli::race::Row {
            overlaps_past_lease: 3,
            ..safe_row(scenario, 3)
        };
        assert!(!row.broken(), "{scenario}");
        let row = tairlock_cli::race::Row {
            overlaps_past_lease: 2,
            ..safe_row(scenario, 3)
        };
        assert!(row.broken(), "{scenario}");
    }
}

#[test]
fn a_late_deadline_breaks_a_safe_row_in_every_scenario() {
    for scenario in [
        "short-stalls",
        "long-stalls",
        "crashes",
        "clock-skew",
        "reply-outages",
    ] {
        let row = tairlock_cli::race::Row {
            late_deadlines: 1,
            ..safe_row(scenario, 0)
        };
        assert!(row.broken(), "{scenario}");
        assert_eq!(row.violations(), 1, "{scenario}");
        assert_eq!(row.flaws(), 1, "{scenario}");
    }
}

// ---------------------------------------------------------------------------------------------
// algorithms broken on purpose, kept here and not in the product: the race must see what they do

mod broken {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::time::Duration;

    use tairlock::store::memory::{CommandResult, Db};
    use tairlock::{Reply, Script, Store};
    use tairlock_cli::race::algorithms::{
        Algorithm, Attempt, BoxFuture, Expectation, ExpireLockAlgorithm, Holding, LeaseAt,
    };
    use tairlock_cli::race::client::{Client, Step};

    /// A compare-and-delete that forgot to compare: it deletes whatever lease the key holds.
    static DELETE_ANY: Script = Script::new(
        "race_test_delete_any",
        "redis.call('DEL', KEYS[1])\nreturn 1",
        delete_any,
    );

    fn delete_any(db: &mut Db, keys: &[String], _: &[String]) -> CommandResult<Reply> {
        db.del(&keys[0]);
        Ok(Reply::Int(1))
    }

    /// `expire-lock`'s acquire, and a scripted release that deletes any lease.
    pub(super) struct BrokenUnlock;

    impl<S: Store> Algorithm<S> for BrokenUnlock {
        fn name(&self) -> &'static str {
            "broken-unlock"
        }

        fn expectation(&self) -> Expectation {
            Expectation::Safe
        }

        fn fenced(&self) -> bool {
            true
        }

        fn try_acquire<'a>(
            &'a self,
            cx: &'a Client<S>,
            lock: &'a str,
            ttl: Duration,
        ) -> BoxFuture<'a, Step<Attempt>> {
            Algorithm::<S>::try_acquire(&ExpireLockAlgorithm, cx, lock, ttl)
        }

        fn release<'a>(
            &'a self,
            cx: &'a Client<S>,
            lock: &'a str,
            holding: Holding,
        ) -> BoxFuture<'a, Step<()>> {
            Box::pin(async move {
                cx.pause("release:before").await?;
                let value = String::from_utf8(holding.value).expect("leases are text");
                cx.store()
                    .eval(&DELETE_ANY, &[format!("{{{lock}}}")], &[value])
                    .await?;
                Ok(())
            })
        }

        fn keys(&self, lock: &str) -> Vec<String> {
            vec![format!("{{{lock}}}")]
        }
    }

    /// `expire-lock`, with each grant's deadline a third of the lease later than the lease
    /// allows: as if dated from a repeat of the acquire a third of a lease after the first,
    /// unanswered attempt took the lock.
    pub(super) struct LateDeadline;

    impl<S: Store> Algorithm<S> for LateDeadline {
        fn name(&self) -> &'static str {
            "late-deadline"
        }

        fn expectation(&self) -> Expectation {
            Expectation::Safe
        }

        fn fenced(&self) -> bool {
            true
        }

        fn try_acquire<'a>(
            &'a self,
            cx: &'a Client<S>,
            lock: &'a str,
            ttl: Duration,
        ) -> BoxFuture<'a, Step<Attempt>> {
            Box::pin(async move {
                Ok(
                    match Algorithm::<S>::try_acquire(&ExpireLockAlgorithm, cx, lock, ttl).await? {
                        Attempt::Acquired(holding) => Attempt::Acquired(Holding {
                            deadline: holding.deadline + ttl / 3,
                            ..holding
                        }),
                        busy => busy,
                    },
                )
            })
        }

        fn release<'a>(
            &'a self,
            cx: &'a Client<S>,
            lock: &'a str,
            holding: Holding,
        ) -> BoxFuture<'a, Step<()>> {
            Algorithm::<S>::release(&ExpireLockAlgorithm, cx, lock, holding)
        }

        fn keys(&self, lock: &str) -> Vec<String> {
            Algorithm::<S>::keys(&ExpireLockAlgorithm, lock)
        }

        fn lease_at(&self, lock: &str, holding: &Holding) -> Option<LeaseAt> {
            Algorithm::<S>::lease_at(&ExpireLockAlgorithm, lock, holding)
        }
    }

    /// While client 0 is between its grant (`SETNX` applied) and the acquire's return, client 1
    /// deletes the key; it deletes nothing at any other time.
    pub(super) struct GrantWindow {
        pub(super) window: AtomicBool,
    }

    impl<S: Store> Algorithm<S> for GrantWindow {
        fn name(&self) -> &'static str {
            "grant-window"
        }

        fn expectation(&self) -> Expectation {
            Expectation::Flawed
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
                if cx.id() != 0 {
                    if self.window.load(Ordering::SeqCst) {
                        cx.store().del(lock).await?;
                    }
                    return Ok(Attempt::Busy { retry_after: None });
                }
                let token = cx.unique_token();
                if !cx.store().set_nx_px(lock, token.as_bytes(), ttl).await? {
                    return Ok(Attempt::Busy { retry_after: None });
                }
                self.window.store(true, Ordering::SeqCst);
                tokio::time::sleep(ttl / 4).await;
                self.window.store(false, Ordering::SeqCst);
                Ok(Attempt::Acquired(Holding {
                    value: token.into_bytes(),
                    fence: None,
                    deadline: tokio::time::Instant::now() + ttl / 2,
                }))
            })
        }

        fn release<'a>(
            &'a self,
            cx: &'a Client<S>,
            lock: &'a str,
            holding: Holding,
        ) -> BoxFuture<'a, Step<()>> {
            Box::pin(async move {
                if cx.store().get(lock).await?.as_deref() == Some(&holding.value[..]) {
                    cx.store().del(lock).await?;
                }
                Ok(())
            })
        }
    }
}

/// The race on the embedded store and virtual time, with `algorithms` only.
fn embedded_race(
    config: &tairlock_cli::race::RaceConfig,
    algorithm: Box<dyn tairlock_cli::race::algorithms::Algorithm<tairlock::MemoryStore>>,
) -> Vec<tairlock_cli::race::Row> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .unwrap();
    rt.block_on(async {
        let clock: tairlock::clock::SharedClock =
            std::sync::Arc::new(tairlock::clock::TokioClock::new());
        let store = tairlock::MemoryStore::with_clock(clock.clone());
        tairlock_cli::race::run_algorithms(store, clock, "memory", config, vec![algorithm], |_| {})
            .await
            .unwrap()
    })
}

fn config(scenario: tairlock_cli::race::scenario::Scenario) -> tairlock_cli::race::RaceConfig {
    tairlock_cli::race::RaceConfig {
        trials: 3,
        trial_length: std::time::Duration::from_secs(2),
        scenarios: vec![scenario],
        ..tairlock_cli::race::RaceConfig::default()
    }
}

#[test]
fn a_scripted_unlock_that_deletes_any_lease_is_caught_deleting_on_the_embedded_store() {
    use tairlock_cli::race::scenario::Scenario;
    let rows = embedded_race(
        &config(Scenario::ShortStalls),
        Box::new(broken::BrokenUnlock),
    );
    let row = &rows[0];
    assert!(row.foreign_deletions > 0, "{row:?}");
    assert!(row.broken(), "{row:?}");
    assert_eq!(row.verdict, "BROKEN");
}

#[test]
fn a_scripted_unlock_that_deletes_any_lease_is_caught_deleting_on_a_real_server() {
    use tairlock_cli::race::scenario::Scenario;
    let server = server::RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut config = config(Scenario::ShortStalls);
    config.latency = None;
    config.trials = 2;
    config.key_prefix = format!("race-test:{}", std::process::id());
    let rows = rt.block_on(async {
        let store = tairlock::RedisStore::connect(&server.url()).await.unwrap();
        let clock: tairlock::clock::SharedClock = std::sync::Arc::new(tairlock::clock::SystemClock);
        tairlock_cli::race::run_algorithms(
            store,
            clock,
            "redis",
            &config,
            vec![Box::new(broken::BrokenUnlock)],
            |_| {},
        )
        .await
        .unwrap()
    });
    let row = &rows[0];
    assert!(row.acquisitions > 0, "{row:?}");
    assert!(
        row.foreign_deletions > 0,
        "{row:?}\n{}",
        server.log_section()
    );
    assert_eq!(row.verdict, "BROKEN");
}

#[test]
fn a_deadline_later_than_the_lease_is_caught_on_the_embedded_store() {
    use tairlock_cli::race::scenario::Scenario;
    let rows = embedded_race(&config(Scenario::Crashes), Box::new(broken::LateDeadline));
    let row = &rows[0];
    assert!(row.acquisitions > 0, "{row:?}");
    assert_eq!(row.late_deadlines, row.acquisitions, "every grant: {row:?}");
    assert_eq!(row.verdict, "BROKEN");
}

#[test]
fn a_deadline_later_than_the_lease_is_caught_on_a_real_server() {
    use tairlock_cli::race::scenario::Scenario;
    let server = server::RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut config = config(Scenario::ShortStalls);
    config.latency = None;
    config.trials = 1;
    config.trial_length = std::time::Duration::from_millis(1500);
    config.key_prefix = format!("race-test:{}", std::process::id());
    let rows = rt.block_on(async {
        let store = tairlock::RedisStore::connect(&server.url()).await.unwrap();
        let clock: tairlock::clock::SharedClock = std::sync::Arc::new(tairlock::clock::SystemClock);
        tairlock_cli::race::run_algorithms(
            store,
            clock,
            "redis",
            &config,
            vec![
                Box::new(broken::LateDeadline),
                Box::new(tairlock_cli::race::algorithms::ExpireLockAlgorithm),
            ],
            |_| {},
        )
        .await
        .unwrap()
    });
    let (late, right) = (&rows[0], &rows[1]);
    assert!(late.acquisitions > 0, "{late:?}");
    // A third of the lease (33 ms) beyond the end: far more than a read's round trip, so the
    // audit's bound from above still catches every one.
    assert_eq!(late.late_deadlines, late.acquisitions, "{late:?}");
    assert_eq!(late.verdict, "BROKEN");
    assert!(right.acquisitions > 0, "{right:?}");
    assert_eq!(right.late_deadlines, 0, "{right:?}");
    assert_eq!(right.verdict, "ok", "{right:?}\n{}", server.log_section());
}

/// Replies of acquires dropped for longer than any retry, then healed: a safe algorithm that
/// repeats its acquire with the same nonce must date the grant it finds by the lease the
/// server reports, not from the repeat. Every safe row keeps every zero, late deadlines
/// included; every row had replies dropped.
#[test]
fn every_safe_row_keeps_its_zeros_under_reply_outages() {
    let (code, rows, stderr) = race(&["--scenario", "reply-outages", "--trials", "3"]);
    let broken: Vec<&Value> = rows
        .iter()
        .filter(|r| r["expectation"] == "safe" && r["verdict"] != "ok")
        .collect();
    assert!(
        broken.is_empty(),
        "broken rows: {broken:#?}\nstderr:\n{stderr}"
    );
    assert_eq!(code, 0, "stderr:\n{stderr}");
    for row in &rows {
        assert!(count(row, "replies_dropped") > 0, "{row}");
        if row["expectation"] == "safe" {
            keeps_its_zeros(row);
        }
    }
    // A dropped reply to `SETNX` leaves the naive recipe's key without a TTL.
    let naive = rows_of(&rows, "naive-setnx-expire");
    assert!(count(naive[0], "stuck_locks") > 0, "{}", naive[0]);
}

#[test]
fn a_deletion_between_the_grant_and_the_acquires_return_is_counted() {
    use tairlock_cli::race::scenario::Scenario;
    let mut config = config(Scenario::ClockSkew);
    config.clients = 2;
    let rows = embedded_race(
        &config,
        Box::new(broken::GrantWindow {
            window: Default::default(),
        }),
    );
    let row = &rows[0];
    assert!(row.acquisitions > 0, "{row:?}");
    assert!(row.foreign_deletions > 0, "{row:?}");
}

#[test]
fn handoff_is_timed_to_the_microsecond_on_virtual_time() {
    let (code, rows, stderr) = race(&[
        "--algorithm",
        "expire-lock",
        "--algorithm",
        "legacy-scripted",
        "--trials",
        "2",
    ]);
    assert_eq!(code, 0, "stderr:\n{stderr}");
    let p50s: Vec<u64> = rows
        .iter()
        .map(|r| {
            r["handoff_p50_us"]
                .as_u64()
                .unwrap_or_else(|| panic!("no handoff in {r}"))
        })
        .collect();
    // Each command's simulated round trip is 0.1-0.4 ms: on a millisecond clock every
    // figure would be a whole number of milliseconds.
    let fractional = p50s.iter().filter(|us| *us % 1000 != 0).count();
    assert!(
        fractional * 2 >= p50s.len(),
        "handoff medians {p50s:?} (µs) are whole milliseconds"
    );
}

/// The fair mode's row (issue #13): every safety count zero on the embedded store and on a real
/// server (overlaps only where a holder stalls past its lease, as for any lease lock), and no
/// key left behind — the queue's keys included.
#[test]
fn the_fair_expire_lock_row_keeps_every_zero() {
    let server = server::RedisServer::start();
    let url = server.url();
    for store in [None, Some(url.as_str())] {
        let mut args = vec!["--algorithm", "fair-expire-lock", "--trials", "2"];
        if let Some(url) = store {
            args.extend(["--redis", url, "--lease", "100ms", "--duration", "1500ms"]);
            args.extend(["--scenario", "short-stalls", "--scenario", "crashes"]);
        }
        let (code, rows, stderr) = race(&args);
        assert_eq!(code, 0, "stderr:\n{stderr}\n{}", server.log_section());
        assert!(!rows.is_empty());
        for row in rows_of(&rows, "fair-expire-lock") {
            keeps_its_zeros(row);
        }
    }
    assert_eq!(
        server.cli(&["DBSIZE"]).trim(),
        "0",
        "keys left: {}",
        server.cli(&["KEYS", "*"])
    );
}

/// The RwLock's fair writers' row (issue #13): readers and fair writers mixed as in
/// `rw-scripted`, every safety count zero on the embedded store and on a real server (overlaps
/// only where a holder stalls past its lease), and no key left behind — the writers' queue
/// included.
#[test]
fn the_rw_fair_writers_row_keeps_every_zero() {
    let server = server::RedisServer::start();
    let url = server.url();
    for store in [None, Some(url.as_str())] {
        let mut args = vec!["--algorithm", "rw-fair-writers", "--trials", "2"];
        if let Some(url) = store {
            args.extend(["--redis", url, "--lease", "100ms", "--duration", "1500ms"]);
            args.extend(["--scenario", "short-stalls", "--scenario", "crashes"]);
        }
        let (code, rows, stderr) = race(&args);
        assert_eq!(code, 0, "stderr:\n{stderr}\n{}", server.log_section());
        assert_eq!(rows.len(), if store.is_some() { 2 } else { 5 }, "{rows:?}");
        for row in rows_of(&rows, "rw-fair-writers") {
            assert_eq!(row["expectation"], "safe", "{row}");
            keeps_its_zeros(row);
        }
    }
    assert_eq!(
        server.cli(&["DBSIZE"]).trim(),
        "0",
        "keys left: {}",
        server.cli(&["KEYS", "*"])
    );
}
