//! `tairlock run`'s flags, and those of the hidden `__supervise` mode it starts its command
//! under. They exist on every platform, so that `tairlock --help` is the same everywhere; the
//! command itself is Unix only (`run::job`), and elsewhere `not_supported` says so.

use std::ffi::OsString;
#[cfg(not(unix))]
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;

use crate::duration;
#[cfg(not(unix))]
use crate::exit::Exit;
use crate::flags::{ConnArgs, PubSubArg};

/// `tairlock run`'s flags.
#[derive(Args, Debug)]
#[cfg_attr(not(unix), allow(dead_code))]
#[command(group = clap::ArgGroup::new("side").args(["read", "write"]))]
pub struct RunArgs {
    /// The lock name (e.g. nightly-backup) or its full key; with --legacy, the key exactly as
    /// the old code names it (e.g. lock.orderid); with --token, exactly as the other library
    /// names it (e.g. reports:nightly for redis-py's `r.lock("reports:nightly")`).
    pub(crate) key: String,
    /// Lease length, renewed by the watchdog at a third of it (e.g. 30s, 10m, 1h30m).
    #[arg(long, value_parser = duration::parse, default_value = "30s")]
    pub(crate) ttl: Duration,
    /// How long to wait for the lock (default: forever); 0 makes a single attempt.
    #[arg(long, value_parser = duration::parse_or_zero)]
    pub(crate) wait: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command is stopped; at most half of --ttl
    /// [default: 5s, or half of --ttl if shorter].
    #[arg(long, value_parser = duration::parse)]
    pub(crate) grace: Option<Duration>,
    /// The Redis server.
    #[arg(long, env = "TAIRLOCK_REDIS", default_value = "redis://127.0.0.1:6379")]
    pub(crate) redis: String,
    /// A Redis Cluster instead of one server, given seed node URLs (comma-separated or
    /// repeated); overrides --redis.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    pub(crate) cluster: Vec<String>,
    /// How releases are announced on the cluster: `auto` (sharded pub/sub on Redis 7.0+,
    /// classic before), `classic` or `sharded`.
    #[arg(long, value_enum, default_value = "auto", requires = "cluster")]
    pub(crate) pubsub: PubSubArg,
    /// Key prefix of the locks (not with --legacy or --token, whose key is used as given).
    #[arg(long, default_value = tairlock::keys::DEFAULT_PREFIX)]
    pub(crate) prefix: String,
    #[command(flatten)]
    pub(crate) conn: ConnArgs,
    /// Wait in the lock's fair queue: first come, first served across processes, the release
    /// handing the lock straight to the next waiter (every client of the lock should use it).
    /// With --write: the reader/writer lock's fair queue of writers (readers do not barge
    /// ahead of a queued writer under the writer preference).
    #[arg(long, conflicts_with_all = ["read", "legacy"])]
    pub(crate) fair: bool,
    /// Hold the reader/writer lock NAME for reading: readers overlap; a writer excludes them.
    #[arg(long)]
    pub(crate) read: bool,
    /// Hold the reader/writer lock NAME for writing: excludes every reader and writer.
    #[arg(long)]
    pub(crate) write: bool,
    /// With --read/--write: `writer` (default) keeps new readers out while a writer waits;
    /// `reader` lets readers in whenever no writer holds the lock (writers may starve).
    #[arg(long, value_enum, default_value = "writer", requires = "side")]
    pub(crate) preference: PreferenceArg,
    /// Lock KEY in the legacy SETNX/GETSET wire format (a bare timestamp under exactly that
    /// key), so that this job and unmigrated clients of the old code exclude each other.
    #[arg(long, conflicts_with_all = ["read", "write", "prefix"])]
    pub(crate) legacy: bool,
    /// With --legacy: the unit of the stored timestamps, as the old code writes them.
    // The flags that conflict with --legacy are named: clap does not ask for a flag's
    // requirement once the flag required conflicts with one given (--token names these).
    #[arg(
        long,
        value_enum,
        default_value = "s",
        requires = "legacy",
        conflicts_with_all = ["read", "write", "fair", "permits"]
    )]
    pub(crate) unit: UnitArg,
    /// With --legacy: which kind of lock. `auto` (default) picks the strongest the server
    /// supports (scripted, else watch, else getset), as every detecting client does; `getset`
    /// is the original algorithm, which cannot renew: the command must end within --ttl.
    #[arg(
        long,
        value_enum,
        default_value = "auto",
        requires = "legacy",
        conflicts_with_all = ["read", "write", "fair", "permits"]
    )]
    pub(crate) legacy_kind: LegacyKindArg,
    /// Lock KEY in the token format of redis-py's Lock, node redlock, redis-semaphore's mutex
    /// and redsync (a random token under exactly that key, with a TTL; released only by its
    /// token), so that this job and a service using one of those exclude each other.
    /// TAIRLOCK_FENCE is this tool's own fencing token: the other clients neither issue nor
    /// advance one.
    // The flags that require another kind's are named too: clap does not check a flag's
    // requirement once the flag required conflicts with one given.
    #[arg(
        long,
        conflicts_with_all = [
            "read", "write", "legacy", "prefix", "fair", "permits", "preference", "unit",
            "legacy_kind",
        ]
    )]
    pub(crate) token: bool,
    /// Hold one of N permits of a semaphore named KEY instead of the lock: at most N commands
    /// (of every `tairlock run --permits N KEY`) run at once, each with its own lease.
    /// With --fair, they wait in the semaphore's queue on the server, first come, first served.
    #[arg(long, value_name = "N", conflicts_with_all = ["read", "write", "legacy"])]
    pub(crate) permits: Option<u32>,
    /// The command to run, after `--` (its arguments are passed on as given, in any encoding).
    #[arg(last = true, required = true, value_parser = clap::value_parser!(OsString))]
    pub(crate) command: Vec<OsString>,
}

/// `--preference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum PreferenceArg {
    /// A waiting writer keeps new readers out.
    Writer,
    /// Readers enter whenever no writer holds the lock.
    Reader,
}

/// `--unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UnitArg {
    /// Seconds, as the original.
    S,
    /// Milliseconds.
    Ms,
}

/// `--legacy-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LegacyKindArg {
    /// The strongest the server supports.
    Auto,
    /// One script per operation (the server runs Lua and may write after TIME: Redis 5+).
    Scripted,
    /// WATCH/MULTI/EXEC transactions (no Lua needed).
    Watch,
    /// The original SETNX/GETSET algorithm verbatim (no renewal, no fencing token).
    Getset,
}

/// `tairlock __supervise STDIN_FD HOME_PGID GRACE_NS [--foreground] -- CMD ARGS…` (started by
/// `tairlock run` only, with its end of the lifeline as standard input).
#[derive(Args, Debug)]
#[cfg_attr(not(unix), allow(dead_code))]
pub struct SuperviseArgs {
    /// The descriptor under which `tairlock run`'s standard input is inherited: the supervisor
    /// moves it back to 0 before it starts the command.
    pub(crate) stdin: i32,
    /// `tairlock run`'s process group (stopped with the command's on a terminal's stop).
    pub(crate) home: i32,
    /// `--grace`, in nanoseconds.
    pub(crate) grace_ns: u64,
    /// Give the command's group the terminal's foreground (`tairlock run` has it, alone).
    #[arg(long)]
    pub(crate) foreground: bool,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_parser = clap::value_parser!(OsString))]
    pub(crate) command: Vec<OsString>,
}

/// `tairlock __exec [--foreground HOME_PGID] -- CMD ARGS…` (started by the supervisor only):
/// becomes the command, once its group has the terminal and its signal mask is cleared.
#[derive(Args, Debug)]
#[cfg_attr(not(unix), allow(dead_code))]
pub struct ExecArgs {
    /// Take the terminal's foreground for this process's group if this group has it.
    #[arg(long, value_name = "PGID")]
    pub(crate) foreground: Option<i32>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true, value_parser = clap::value_parser!(OsString))]
    pub(crate) command: Vec<OsString>,
}

/// `tairlock run` elsewhere than on Unix.
#[cfg(not(unix))]
pub fn not_supported() -> ExitCode {
    eprintln!(
        "tairlock run: not supported here: it needs Unix process groups and signals to stop the \
         command when the lease is lost"
    );
    Exit::Usage.into()
}
