//! The examples in `examples/`, run against a server each test starts (issue 14, item 5). The
//! example files are compiled in here as modules, so the code run is the code shown; each
//! example's own `main` (which prints and sets the exit status) is not run.
//!
//! - `with_lock`: 20 concurrent read-modify-write requests lose no update.
//! - `fenced_sqlite`: the paused holder's late write is refused by `UPDATE … WHERE fence < ?`;
//!   the later holder's write, with a larger token, is accepted.
//! - `blocking_reentrant`: the blocking job re-enters its lock at depth 2, another thread is
//!   excluded until the job releases, then gets it.
//! - `legacy_migration`: every step of the old/new walk-through goes as described.

mod support;

use support::RedisServer;

#[allow(dead_code)]
#[path = "../examples/with_lock.rs"]
mod with_lock;

#[allow(dead_code)]
#[path = "../examples/fenced_sqlite.rs"]
mod fenced_sqlite;

#[allow(dead_code)]
#[path = "../examples/blocking_reentrant.rs"]
mod blocking_reentrant;

#[allow(dead_code)]
#[path = "../examples/legacy_migration.rs"]
mod legacy_migration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_lock_loses_no_update() {
    let server = RedisServer::start();
    let left = with_lock::run(&server.url()).await.unwrap();
    assert_eq!(left, with_lock::INITIAL - with_lock::REQUESTS);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fenced_sqlite_refuses_the_late_write() {
    let server = RedisServer::start();
    let outcome = fenced_sqlite::run(&server.url()).await.unwrap();
    assert!(outcome.fences.1 > outcome.fences.0, "{outcome:?}");
    assert!(outcome.b_accepted, "{outcome:?}");
    assert!(!outcome.a_late_accepted, "{outcome:?}");
    assert_eq!(outcome.balance, 150);
}

#[test]
fn blocking_reentrant_job() {
    let server = RedisServer::start();
    let outcome = blocking_reentrant::run(&server.url()).unwrap();
    assert_eq!(outcome.depth_inside, 2, "{outcome:?}");
    assert!(!outcome.other_thread_got_it, "{outcome:?}");
    assert!(outcome.other_thread_after, "{outcome:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_migration_walk_through() {
    let server = RedisServer::start();
    let steps = legacy_migration::run(&server.url()).await.unwrap();
    assert_eq!(steps.len(), 4);
    for (step, ok) in steps {
        assert!(ok, "{step}");
    }
}
