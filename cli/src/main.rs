//! `tairlock`: race lock algorithms against each other, run commands under a lock, inspect and
//! force-unlock locks.
//!
//! The subcommands and their dispatch only: each command's flags and work live in the library
//! (`race_cmd`, `bench_cmd`, `inspect`, `run_args` and `run::job`, `unlock`, `scan`).
//!
//! Exit codes are defined once, in [`tairlock_cli::exit::Exit`], and listed by `tairlock --help`.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use tairlock_cli::bench_cmd::BenchArgs;
use tairlock_cli::exit::Exit;
use tairlock_cli::inspect::InspectArgs;
use tairlock_cli::race_cmd::RaceArgs;
#[cfg(unix)]
use tairlock_cli::run;
use tairlock_cli::run_args::{ExecArgs, RunArgs, SuperviseArgs};
use tairlock_cli::scan::ScanArgs;
use tairlock_cli::unlock::UnlockArgs;
use tairlock_cli::{bench_cmd, inspect, race_cmd, scan, unlock};

#[derive(Parser, Debug)]
#[command(
    name = "tairlock",
    version,
    about = "Expiring distributed locks on Redis: race, run, inspect, unlock, scan",
    after_help = Exit::help()
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    log: tairlock_cli::logging::LogArgs,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Contending clients run each lock algorithm under stalls, crashes and clock skew; a table
    /// counts overlaps, foreign deletions, stale writes and stuck locks.
    Race(RaceArgs),
    /// Throughput and latency of each primitive as ratios to the round-trip floor measured in
    /// the same run.
    Bench(BenchArgs),
    /// Show a lock's holder, expiry, remaining time and fencing token; for a reader/writer lock
    /// (--rw, or detected), the writer, the live readers with their leases, and writer intent;
    /// for a semaphore (--sem, or detected), its holders with their permits and leases; for a
    /// legacy SETNX/GETSET key (--legacy, or detected), its timestamp, the expiry it encodes by
    /// the server's clock, the key's TTL and the last fencing token; for a token lock of
    /// redis-py, node redlock and the like (--token), its token, its TTL and the last fencing
    /// token a TokenLock issued.
    Inspect(InspectArgs),
    /// Run a command while holding a lock (watchdog on): no process it starts runs past the
    /// lease's deadline. A supervisor in a group of its own stops everything the command started
    /// (whatever group or session it moved to, on Linux) if the lease is lost, before the lease
    /// runs out when renewals fail, when tairlock is stopped, and kills it if tairlock dies; the
    /// lock is held while any of it lives. The lock is an expire lock (optionally --fair), a
    /// reader/writer lock's read or write side (--read, --write), a semaphore's permit
    /// (--permits), a token lock shared with redis-py's Lock, node redlock and the like
    /// (--token), or a legacy SETNX/GETSET key (--legacy). Exit codes: the command's; 75 not
    /// acquired within --wait; 76 lease lost; 69 store error; 71 supervision not set up; 126
    /// command not executable; 127 command not found.
    Run(RunArgs),
    /// Internal: the supervisor `tairlock run` starts its command under (see `run.rs`).
    #[command(name = "__supervise", hide = true)]
    Supervise(SuperviseArgs),
    /// Internal: how the supervisor starts the command (see `run/supervisor.rs`).
    #[command(name = "__exec", hide = true)]
    Exec(ExecArgs),
    /// Delete a lock whoever holds it: an expire lock, a reader/writer lock (--rw, or detected:
    /// its writer, live readers and writer intent), a semaphore (--sem, or detected: every
    /// holder's permits), a legacy key (--legacy) or a token lock of redis-py, node redlock and
    /// the like (--token). With --if-value VALUE (the lease, timestamp or token inspect showed),
    /// only that holding is deleted, by compare-and-delete; a lock taken or renewed since is
    /// refused (exit 5). Refuses a key that holds anything but one of our locks (exit 5).
    Unlock(UnlockArgs),
    /// Find every lock in a live keyspace, reading only (nothing is ever written): this
    /// project's expire locks, fair queues, reader/writer locks and semaphores, legacy
    /// SETNX/GETSET timestamp locks (seconds or ms, by an original client or a safe one), and
    /// token locks of other libraries (a token-shaped string with a TTL); everything else is
    /// left out untouched. Walks the keyspace with SCAN (never KEYS), paced by --count and
    /// --rate, on every master of a cluster; prints the counts per class and each lock in one
    /// line, as inspect would say. --stuck lists only the locks nobody can take without help (no
    /// TTL and an end long past, orphaned queues), each with the command that clears it. Needs
    /// a server: the embedded store cannot be scanned from outside its process. Exit codes: 0;
    /// with --stuck, 6 when a stuck lock was found; 2 bad flags; 4 store error.
    Scan(ScanArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = tairlock_cli::logging::init(&cli.log) {
        eprintln!("tairlock: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Race(args) => race_cmd::command(args),
        Command::Bench(args) => bench_cmd::command(args),
        Command::Inspect(args) => inspect::command(args),
        #[cfg(unix)]
        Command::Run(args) => run::job::command(args),
        #[cfg(unix)]
        Command::Supervise(args) => run::job::supervise(args),
        #[cfg(unix)]
        Command::Exec(args) => run::job::exec(args),
        #[cfg(not(unix))]
        Command::Run(_) | Command::Supervise(_) | Command::Exec(_) => {
            tairlock_cli::run_args::not_supported()
        }
        Command::Unlock(args) => unlock::command(args),
        Command::Scan(args) => scan::command(args),
    }
}
