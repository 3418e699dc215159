//! The project's legacy and reader/writer rows through the public race API, as a user's test
//! would run them: [`run_embedded_algorithms`] with the built-in algorithms boxed by hand, on
//! the embedded store and virtual time (deterministic by seed).

use tairlock::MemoryStore;
use tairlock_testing::race::algorithms::{
    LegacyGetSet, LegacyScripted, LegacyWatch, RwScripted, RwTwoStep,
};
use tairlock_testing::race::{Algorithm, RaceConfig, Row, run_embedded_algorithms};

fn race(algorithm: Box<dyn Algorithm<MemoryStore>>) -> Vec<Row> {
    let config = RaceConfig {
        trials: 4,
        ..RaceConfig::default()
    };
    let rows = run_embedded_algorithms(&config, vec![algorithm], |_| {}).unwrap();
    assert_eq!(rows.len(), 4, "one row per scenario");
    rows
}

fn by<'a>(rows: &'a [Row], scenario: &str) -> &'a Row {
    rows.iter().find(|r| r.scenario == scenario).unwrap()
}

/// The safe rows hold their zeros in every scenario, and long stalls show the overlap any
/// lease lock has there.
fn holds_its_zeros(rows: &[Row]) {
    for row in rows {
        assert!(row.acquisitions > 0, "{row:?}");
        assert!(!row.broken(), "{row:?}");
        assert_eq!(row.verdict, "ok", "{row:?}");
    }
    let long = by(rows, "long-stalls");
    assert!(
        long.overlaps > 0,
        "long stalls overlap any lease lock: {long:?}"
    );
}

#[test]
fn rw_scripted_holds_its_zeros_in_every_scenario() {
    holds_its_zeros(&race(Box::new(RwScripted::default())));
}

#[test]
fn rw_two_step_shows_overlaps_stuck_locks_and_foreign_deletions() {
    let rows = race(Box::new(RwTwoStep));
    // I/II: a reader and a writer inside together.
    let short = by(&rows, "short-stalls");
    assert!(short.overlaps > 0, "{short:?}");
    // III: a crashed reader pins the count.
    let crashes = by(&rows, "crashes");
    assert!(crashes.stuck_locks > 0, "{crashes:?}");
    // IV: a fast reader clock deletes live write locks.
    let skew = by(&rows, "clock-skew");
    assert!(skew.foreign_deletions > 0, "{skew:?}");
}

#[test]
fn legacy_scripted_and_watch_hold_their_zeros_in_every_scenario() {
    holds_its_zeros(&race(Box::new(LegacyScripted)));
    holds_its_zeros(&race(Box::new(LegacyWatch)));
}

#[test]
fn legacy_getset_shows_takeovers_foreign_deletions_and_stale_writes() {
    let rows = race(Box::new(LegacyGetSet));
    for row in &rows {
        assert_eq!(row.expectation, "flawed", "{row:?}");
        assert!(!row.broken(), "a flawed row never fails the race: {row:?}");
    }
    // F2: a fast clock takes live locks over, and its release deletes the other's lock.
    let skew = by(&rows, "clock-skew");
    assert!(skew.overlaps > 0 && skew.foreign_deletions > 0, "{skew:?}");
    // F4/F4b: a release paused past the lease deletes the next holder's lock; no fencing.
    let long = by(&rows, "long-stalls");
    assert!(
        long.foreign_deletions > 0 && long.stale_writes_accepted > 0,
        "{long:?}"
    );
    assert_eq!(by(&rows, "short-stalls").verdict, "flaws shown");
}

#[test]
fn a_seed_gives_one_table() {
    let config = RaceConfig {
        trials: 2,
        seed: 11,
        ..RaceConfig::default()
    };
    let run = || {
        let algorithms: Vec<Box<dyn Algorithm<MemoryStore>>> =
            vec![Box::new(LegacyGetSet), Box::new(LegacyScripted)];
        let rows = run_embedded_algorithms(&config, algorithms, |_| {}).unwrap();
        tairlock_testing::race::report::json(&rows)
    };
    assert_eq!(run(), run());
}
