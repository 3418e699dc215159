//! A blocking job with the reentrant lock: no async code anywhere.
//!
//! `RedisStore::blocking_connect` gives the store a small runtime of its own, and the lock
//! kinds' `blocking_*` methods run on it. The job takes the lock and calls a helper that takes
//! the same lock again: on the same thread that is a re-entry (no round trip, no deadlock), and
//! the lock is released when the outermost guard goes. Another thread (another owner) cannot
//! get it meanwhile.
//!
//! Run against a server: `cargo run --example blocking_reentrant -- redis://127.0.0.1:6379` (or
//! set `TAIRLOCK_REDIS`). It exits with status 1 if the lock did not behave so.

use std::time::Duration;

use tairlock::{ExpireLock, RedisStore, ReentrantLock};

const NAME: &str = "nightly-report";

/// What the job saw, for the caller to check.
#[derive(Debug)]
pub(crate) struct Outcome {
    /// How deep the job's thread held the lock inside the helper.
    pub(crate) depth_inside: usize,
    /// Whether another thread got the lock while the job held it (it must not).
    pub(crate) other_thread_got_it: bool,
    /// Whether another thread got it after the job.
    pub(crate) other_thread_after: bool,
}

fn write_section(locks: &ReentrantLock<RedisStore>) -> tairlock::Result<usize> {
    // Re-entry: the same thread already holds NAME.
    let guard = locks.blocking_lock(NAME)?;
    let depth = locks.thread_held_depth(NAME);
    println!(
        "  section written under token {:?}, depth {depth}",
        guard.fence()
    );
    guard.release()?;
    Ok(depth)
}

fn other_thread_tries(locks: &ReentrantLock<RedisStore>) -> tairlock::Result<bool> {
    let expire = locks.locks().clone();
    std::thread::spawn(move || {
        let got = expire.blocking_try_lock_for(NAME, Duration::from_millis(300))?;
        Ok(match got {
            Some(guard) => {
                guard.blocking_release()?;
                true
            }
            None => false,
        })
    })
    .join()
    .expect("the other thread panicked")
}

/// Run the job against the server at `url`.
pub(crate) fn run(url: &str) -> tairlock::Result<Outcome> {
    let store = RedisStore::blocking_connect(url)?;
    let locks = ReentrantLock::new(ExpireLock::new(store));
    let job = locks.blocking_lock(NAME)?;
    println!("job holds {NAME} (token {:?})", job.fence());
    let depth_inside = write_section(&locks)?;
    let other_thread_got_it = other_thread_tries(&locks)?;
    job.release()?;
    println!("job done, lock released");
    let other_thread_after = other_thread_tries(&locks)?;
    Ok(Outcome {
        depth_inside,
        other_thread_got_it,
        other_thread_after,
    })
}

fn main() -> std::process::ExitCode {
    let url = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TAIRLOCK_REDIS").ok())
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    match run(&url) {
        Ok(o) if o.depth_inside == 2 && !o.other_thread_got_it && o.other_thread_after => {
            println!("re-entered at depth 2; excluded the other thread until released");
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
