//! `tairlock`: race lock algorithms against each other, run commands under a lock, inspect and
//! force-unlock locks.
//!
//! The subcommands and their dispatch only: each command's flags and work live in the library
//! (`race_cmd`, `bench_cmd`, `inspect`, `run_args` and `run::job`, `unlock`).
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
use tairlock_cli::run_args::{RunArgs, SuperviseArgs};
use tairlock_cli::unlock::UnlockArgs;
use tairlock_cli::{bench_cmd, inspect, race_cmd, unlock};

#[derive(Parser, Debug)]
#[command(
    name = "tairlock",
    version,
    about = "Expiring distributed locks on Redis: race, run, inspect, unlock",
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
    /// the server's clock, the key's TTL and the last fencing token.
    Inspect(InspectArgs),
    /// Run a command while holding a lock (watchdog on), in a process group of its own; the group
    /// is stopped if the lease is lost, or before it runs out when renewals fail, and killed if
    /// tairlock dies. The lock is an expire lock (optionally --fair), a reader/writer lock's read
    /// or write side (--read, --write), or a legacy SETNX/GETSET key (--legacy). Exit codes: the
    /// command's; 75 not acquired within --wait; 76 lease lost; 69 store error; 127 command not
    /// started.
    Run(RunArgs),
    /// Internal: the supervisor `tairlock run` starts its command under (see `run.rs`).
    #[command(name = "__supervise", hide = true)]
    Supervise(SuperviseArgs),
    /// Delete a lock whoever holds it: an expire lock, a reader/writer lock (--rw, or detected:
    /// its writer, live readers and writer intent), a semaphore (--sem, or detected: every
    /// holder's permits) or a legacy key (--legacy). Refuses a key that holds anything but one
    /// of our locks (exit 5).
    Unlock(UnlockArgs),
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
        #[cfg(not(unix))]
        Command::Run(_) | Command::Supervise(_) => tairlock_cli::run_args::not_supported(),
        Command::Unlock(args) => unlock::command(args),
    }
}
