//! `tairlock`: race lock algorithms against each other, run commands under a lock, inspect and
//! force-unlock locks.
//!
//! Exit codes are defined once, in [`tairlock_cli::exit::Exit`], and listed by `tairlock --help`.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tairlock::clock::SystemClock;
use tairlock::store::TlsOptions;
use tairlock::{Keyspace, MemoryStore, RedisStore};
use tairlock_cli::exit::Exit;
use tairlock_cli::race::{self, RaceConfig, Row, report, scenario::Scenario};
#[cfg(unix)]
use tairlock_cli::run;
use tairlock_cli::target::{Endpoint, StoreJob, Target};
use tairlock_cli::{admin, bench, duration, rw_inspect, sem_inspect, unlock};
use tairlock_legacy::WatchStore;

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
    /// for a semaphore (--sem, or detected), its holders with their permits and leases.
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
    /// its writer, live readers and writer intent) or a legacy key (--legacy). Refuses a key
    /// that holds anything but one of our locks (exit 5).
    Unlock(UnlockArgs),
}

#[derive(Args, Debug)]
struct RaceArgs {
    /// Contending clients per trial (at least 2).
    #[arg(long, default_value_t = 8, value_parser = parse_clients)]
    clients: usize,
    /// Trials per algorithm and scenario (at least 1).
    #[arg(long, value_parser = parse_trials)]
    trials: Option<usize>,
    /// Lease length (e.g. 100ms, 1s; at least 1ms: servers count TTLs in whole milliseconds).
    #[arg(long, value_parser = parse_lease)]
    lease: Option<Duration>,
    /// How long each trial runs.
    #[arg(long, value_parser = duration::parse)]
    duration: Option<Duration>,
    /// Seed of every random choice.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Scenario to run (repeatable): short-stalls, long-stalls, crashes, clock-skew.
    #[arg(long = "scenario")]
    scenarios: Vec<Scenario>,
    /// Algorithm to run (repeatable); all by default.
    #[arg(long = "algorithm")]
    algorithms: Vec<String>,
    /// Run against this Redis server (real time) instead of the embedded store (virtual time).
    #[arg(long, conflicts_with_all = ["cluster", "redlock"])]
    redis: Option<String>,
    /// Run against a Redis Cluster (real time), given seed node URLs (comma-separated or
    /// repeated). Every algorithm runs there, `legacy-watch` included.
    #[arg(long, value_delimiter = ',', num_args = 1.., conflicts_with = "redlock")]
    cluster: Vec<String>,
    /// How releases are announced on the cluster: `auto` (sharded pub/sub on Redis 7.0+,
    /// classic before), `classic` or `sharded`.
    #[arg(long, value_enum, default_value = "auto", requires = "cluster")]
    pubsub: PubSubArg,
    /// Race only the `redlock` row, Redlock over these independent masters (comma-separated or
    /// repeated; real time). No fencing token: its expectation is `unfenced`.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    redlock: Vec<String>,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
    /// Also draw one trial per algorithm and scenario into this SVG file, each verbatim recipe
    /// next to its fix. Runs one trial per row (the table's counts are the drawn trial's),
    /// `lease x 8` long unless `--duration` says otherwise; by default the recipes and their
    /// fixes: naive-setnx-expire, expire-lock, legacy-getset, legacy-scripted, rw-two-step,
    /// rw-scripted.
    #[arg(long, value_name = "FILE")]
    timeline: Option<std::path::PathBuf>,
    #[command(flatten)]
    conn: ConnArgs,
}

#[derive(Args, Debug)]
struct BenchArgs {
    /// Bench this Redis server (nothing is started); the embedded store otherwise.
    #[arg(long, conflicts_with_all = ["cluster", "redlock"])]
    redis: Option<String>,
    /// Bench a Redis Cluster, given seed node URLs (comma-separated or repeated).
    #[arg(long, value_delimiter = ',', num_args = 1.., conflicts_with = "redlock")]
    cluster: Vec<String>,
    /// How releases are announced on the cluster: `auto` (sharded pub/sub on Redis 7.0+,
    /// classic before), `classic` or `sharded`.
    #[arg(long, value_enum, default_value = "auto", requires = "cluster")]
    pubsub: PubSubArg,
    /// Bench Redlock over these independent masters (comma-separated or repeated): the
    /// `floor-cycle` (first server) and `redlock-cycle` scenarios.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    redlock: Vec<String>,
    /// How long each timed scenario runs.
    #[arg(long, value_parser = duration::parse, default_value = "1s")]
    duration: Duration,
    /// Scenario to run (repeatable); all by default.
    #[arg(long = "scenario")]
    scenarios: Vec<String>,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

#[derive(Args, Debug)]
#[command(group = clap::ArgGroup::new("side").args(["read", "write"]))]
struct RunArgs {
    /// The lock name (e.g. nightly-backup) or its full key; with --legacy, the key exactly as
    /// the old code names it (e.g. lock.orderid).
    key: String,
    /// Lease length, renewed by the watchdog at a third of it (e.g. 30s, 10m, 1h30m).
    #[arg(long, value_parser = duration::parse, default_value = "30s")]
    ttl: Duration,
    /// How long to wait for the lock (default: forever); 0 makes a single attempt.
    #[arg(long, value_parser = duration::parse_or_zero)]
    wait: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command is stopped; at most half of --ttl
    /// [default: 5s, or half of --ttl if shorter].
    #[arg(long, value_parser = duration::parse)]
    grace: Option<Duration>,
    /// The Redis server.
    #[arg(long, env = "TAIRLOCK_REDIS", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// A Redis Cluster instead of one server, given seed node URLs (comma-separated or
    /// repeated); overrides --redis.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    cluster: Vec<String>,
    /// How releases are announced on the cluster: `auto` (sharded pub/sub on Redis 7.0+,
    /// classic before), `classic` or `sharded`.
    #[arg(long, value_enum, default_value = "auto", requires = "cluster")]
    pubsub: PubSubArg,
    /// Key prefix of the locks (not with --legacy, whose key is used as given).
    #[arg(long, default_value = tairlock::keys::DEFAULT_PREFIX)]
    prefix: String,
    #[command(flatten)]
    conn: ConnArgs,
    /// Wait in the lock's fair queue: first come, first served across processes, the release
    /// handing the lock straight to the next waiter (every client of the lock should use it).
    #[arg(long, conflicts_with_all = ["read", "write", "legacy"])]
    fair: bool,
    /// Hold the reader/writer lock NAME for reading: readers overlap; a writer excludes them.
    #[arg(long)]
    read: bool,
    /// Hold the reader/writer lock NAME for writing: excludes every reader and writer.
    #[arg(long)]
    write: bool,
    /// With --read/--write: `writer` (default) keeps new readers out while a writer waits;
    /// `reader` lets readers in whenever no writer holds the lock (writers may starve).
    #[arg(long, value_enum, default_value = "writer", requires = "side")]
    preference: PreferenceArg,
    /// Lock KEY in the legacy SETNX/GETSET wire format (a bare timestamp under exactly that
    /// key), so that this job and unmigrated clients of the old code exclude each other.
    #[arg(long, conflicts_with_all = ["read", "write", "prefix"])]
    legacy: bool,
    /// With --legacy: the unit of the stored timestamps, as the old code writes them.
    #[arg(long, value_enum, default_value = "s", requires = "legacy")]
    unit: UnitArg,
    /// With --legacy: which kind of lock. `auto` (default) picks the strongest the server
    /// supports (scripted, else watch, else getset), as every detecting client does; `getset`
    /// is the original algorithm, which cannot renew: the command must end within --ttl.
    #[arg(long, value_enum, default_value = "auto", requires = "legacy")]
    legacy_kind: LegacyKindArg,
    /// Hold one of N permits of a semaphore named KEY instead of the lock: at most N commands
    /// (of every `tairlock run --permits N KEY`) run at once, each with its own lease.
    /// With --fair, they wait in the semaphore's queue on the server, first come, first served.
    #[arg(long, value_name = "N", conflicts_with_all = ["read", "write", "legacy"])]
    permits: Option<u32>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

/// `--preference`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PreferenceArg {
    /// A waiting writer keeps new readers out.
    Writer,
    /// Readers enter whenever no writer holds the lock.
    Reader,
}

/// `--unit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum UnitArg {
    /// Seconds, as the original.
    S,
    /// Milliseconds.
    Ms,
}

/// `--legacy-kind`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum LegacyKindArg {
    /// The strongest the server supports.
    Auto,
    /// One script per operation (the server runs Lua and may write after TIME: Redis 5+).
    Scripted,
    /// WATCH/MULTI/EXEC transactions (no Lua needed).
    Watch,
    /// The original SETNX/GETSET algorithm verbatim (no renewal, no fencing token).
    Getset,
}

/// `tairlock __supervise LIFELINE_FD HOME_PGID -- CMD ARGS…` (started by `tairlock run` only).
#[derive(Args, Debug)]
struct SuperviseArgs {
    /// The inherited read end of the lifeline pipe.
    lifeline: i32,
    /// `tairlock run`'s process group, joined once the command has started.
    home: i32,
    /// The command to run, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
}

#[derive(Args, Debug)]
struct InspectArgs {
    #[command(flatten)]
    key: KeyArgs,
    /// Inspect a reader/writer lock (detected automatically when its keys exist).
    #[arg(long)]
    rw: bool,
    /// Inspect a semaphore: its holders with their permits and remaining leases (detected
    /// automatically when its keys exist).
    #[arg(long, conflicts_with = "rw")]
    sem: bool,
}

#[derive(Args, Debug)]
struct UnlockArgs {
    /// Required: this deletes someone else's lock.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    key: KeyArgs,
    /// Unlock a reader/writer lock: its writer, every live reader and a waiting writer's intent
    /// (detected automatically when its keys exist).
    #[arg(long, conflicts_with = "legacy")]
    rw: bool,
    /// Unlock a legacy SETNX/GETSET lock: KEY exactly as the old code names it, deleted if it
    /// holds a bare timestamp.
    #[arg(long)]
    legacy: bool,
}

#[derive(Args, Debug)]
struct KeyArgs {
    /// The lock name (e.g. orders:42) or its full key (e.g. 'tairlock:{orders:42}').
    key: String,
    /// The Redis server.
    #[arg(long, env = "TAIRLOCK_REDIS", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// A Redis Cluster instead of one server, given seed node URLs (comma-separated or
    /// repeated); overrides --redis.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    cluster: Vec<String>,
    /// How a forced unlock announces the release on the cluster (it must match the waiters'):
    /// `auto` (sharded pub/sub on Redis 7.0+, classic before), `classic` or `sharded`.
    #[arg(long, value_enum, default_value = "auto", requires = "cluster")]
    pubsub: PubSubArg,
    /// Key prefix of the locks.
    #[arg(long, default_value = tairlock::keys::DEFAULT_PREFIX)]
    prefix: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

/// How to reach the servers: TLS files and Sentinel (every command that talks to Redis).
#[derive(Args, Debug, Clone, Default)]
struct ConnArgs {
    /// CA certificate (PEM) that rediss:// servers must be signed by, instead of the system's
    /// trust store.
    #[arg(long, value_name = "FILE")]
    tls_ca: Option<std::path::PathBuf>,
    /// Client certificate (PEM) for servers that require one (`tls-auth-clients yes`); with
    /// --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<std::path::PathBuf>,
    /// The client certificate's private key (PEM); with --tls-cert.
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<std::path::PathBuf>,
    /// Find the master through these sentinels (comma-separated or repeated; with --master)
    /// instead of --redis. rediss:// sentinels mean TLS masters too.
    #[arg(long, value_delimiter = ',', num_args = 1.., requires = "master")]
    sentinel: Vec<String>,
    /// The master's name, as the sentinels know it (with --sentinel).
    #[arg(long, requires = "sentinel")]
    master: Option<String>,
}

impl ConnArgs {
    fn tls(&self) -> tairlock::Result<TlsOptions> {
        let mut tls = TlsOptions::default();
        if let Some(ca) = &self.tls_ca {
            tls = tls.ca_file(ca)?;
        }
        if let (Some(cert), Some(key)) = (&self.tls_cert, &self.tls_key) {
            tls = tls.client_auth_files(cert, key)?;
        }
        Ok(tls)
    }

    /// The one target these flags and `servers` name: the sentinels' master, else a cluster,
    /// else one server, else the embedded store. --sentinel picks the one server itself: it is
    /// refused with the flags in `others` that pick others.
    fn target(
        &self,
        redis: Option<&str>,
        cluster: &[String],
        pubsub: PubSubArg,
        others: &[(&str, bool)],
    ) -> Result<Target, String> {
        let tls = self.tls().map_err(|e| e.to_string())?;
        let endpoint = match &self.master {
            Some(master) if !self.sentinel.is_empty() => {
                if let Some((flag, _)) = others.iter().find(|(_, given)| *given) {
                    return Err(format!("--sentinel cannot be combined with {flag}"));
                }
                Endpoint::Sentinel {
                    sentinels: self.sentinel.clone(),
                    master: master.clone(),
                }
            }
            _ if !cluster.is_empty() => Endpoint::Cluster(cluster.to_vec()),
            _ => match redis {
                Some(url) => Endpoint::Redis(url.to_owned()),
                None => Endpoint::Memory,
            },
        };
        Ok(Target {
            endpoint,
            tls,
            pubsub: pubsub.choice(),
        })
    }
}

/// `--pubsub`: how releases are announced on a cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum PubSubArg {
    /// Sharded pub/sub where the servers have it (Redis 7.0+), else classic.
    Auto,
    /// `PUBLISH`/`SUBSCRIBE`.
    Classic,
    /// `SPUBLISH`/`SSUBSCRIBE`.
    Sharded,
}

impl PubSubArg {
    fn choice(self) -> Option<tairlock::notify::PubSub> {
        match self {
            PubSubArg::Auto => None,
            PubSubArg::Classic => Some(tairlock::notify::PubSub::Classic),
            PubSubArg::Sharded => Some(tairlock::notify::PubSub::Sharded),
        }
    }
}

/// Print a usage error and return its code.
fn usage(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tairlock: {message}");
    Exit::Usage.into()
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Err(e) = tairlock_cli::logging::init(&cli.log) {
        eprintln!("tairlock: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Race(args) => race_command(args),
        Command::Bench(args) => bench_command(args),
        Command::Inspect(args) => inspect_command(args),
        Command::Run(args) => run_command(args),
        #[cfg(unix)]
        Command::Supervise(args) => ExitCode::from(run::supervise(
            args.lifeline,
            nix::unistd::Pid::from_raw(args.home),
            &args.command,
        )),
        #[cfg(not(unix))]
        Command::Supervise(_) => not_supported(),
        Command::Unlock(args) => unlock_command(args),
    }
}

fn race_command(args: RaceArgs) -> ExitCode {
    let mut config = RaceConfig {
        clients: args.clients,
        seed: args.seed,
        algorithms: args.algorithms.clone(),
        ..RaceConfig::default()
    };
    let mut known = race::algorithm_names();
    known.push("redlock");
    if let Some(bad) = args
        .algorithms
        .iter()
        .find(|a| !known.contains(&a.as_str()))
    {
        return usage(format!(
            "unknown algorithm {bad:?}; expected one of {}",
            known.join(", ")
        ));
    }
    if !args.scenarios.is_empty() {
        config.scenarios = args.scenarios.clone();
    }
    if let Some(lease) = args.lease {
        config.lease = lease;
    }
    let target = match args.conn.target(
        args.redis.as_deref(),
        &args.cluster,
        args.pubsub,
        &[
            ("--redis", args.redis.is_some()),
            ("--cluster", !args.cluster.is_empty()),
            ("--redlock", !args.redlock.is_empty()),
        ],
    ) {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    let real_time = target.is_remote() || !args.redlock.is_empty();
    if real_time {
        // Real time: fewer, shorter trials by default.
        config.trials = 3;
        config.trial_length = config.lease * 15;
        config.latency = None;
        config.key_prefix = format!("tairlock-race:{}", std::process::id());
    }
    if let Some(trials) = args.trials {
        config.trials = trials;
    }
    if let Some(d) = args.duration {
        config.trial_length = d;
    } else if args.lease.is_some() {
        config.trial_length = config.lease * if real_time { 15 } else { 30 };
    }
    if let Some(file) = &args.timeline
        && let Err(e) = race_timeline_config(&mut config, &args, file)
    {
        eprintln!("tairlock: {e}");
        return ExitCode::from(2);
    }
    let progress = |row: &Row| {
        eprintln!(
            "  {:<20} {:<13} {}",
            row.algorithm, row.scenario, row.verdict
        )
    };
    eprintln!(
        "tairlock race: {} clients, {} trials of {:?}, lease {:?}, seed {}, {}",
        config.clients,
        config.trials,
        config.trial_length,
        config.lease,
        config.seed,
        if !args.redlock.is_empty() {
            format!("redlock over {} (real time)", args.redlock.join(","))
        } else if real_time {
            format!("{} (real time)", target.describe())
        } else {
            "embedded store (virtual time)".to_owned()
        }
    );
    let rows = if !args.redlock.is_empty() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let mut servers = Vec::new();
            for url in &args.redlock {
                servers.push(RedisStore::connect_with(url, target.redis_options()).await?);
            }
            let first = servers[0].clone();
            let algorithm = race::algorithms::RedlockAlgorithm::new(servers)?;
            race::run_algorithms(
                first,
                Arc::new(SystemClock),
                "redlock",
                &config,
                vec![Box::new(algorithm)],
                progress,
            )
            .await
        })
    } else {
        match &target.endpoint {
            Endpoint::Memory => race::run_embedded(&config, progress),
            Endpoint::Cluster(_) => {
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                rt.block_on(async {
                    let store = target.connect_cluster().await?;
                    // Every algorithm, legacy-watch included: its transactions run on a
                    // dedicated connection to the master of the lock's slot.
                    race::run(store, Arc::new(SystemClock), "cluster", &config, progress).await
                })
            }
            Endpoint::Redis(_) | Endpoint::Sentinel { .. } => {
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                rt.block_on(async {
                    let store = target.connect_redis().await?;
                    race::run(store, Arc::new(SystemClock), "redis", &config, progress).await
                })
            }
        }
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("tairlock: {e}");
            return Exit::Store.into();
        }
    };
    if args.json {
        println!("{}", report::json(&rows));
    } else {
        print!("{}", report::table(&rows));
    }
    if let Some(file) = &args.timeline {
        let store = rows.first().map_or("", |r| r.store.as_str());
        let heading = format!(
            "tairlock race: one trial each, {} clients, lease {:?}, seed {}, {}",
            config.clients,
            config.lease,
            config.seed,
            if config.latency.is_some() {
                "embedded store (virtual time)".to_owned()
            } else {
                format!("{store} (real time)")
            }
        );
        let timelines = rows.iter().filter_map(|r| r.timeline.clone()).collect();
        let svg = race::timeline::svg(&heading, &race::timeline::side_by_side(timelines));
        if let Err(e) = std::fs::write(file, svg) {
            eprintln!(
                "tairlock: cannot write the timeline to {}: {e}",
                file.display()
            );
            return ExitCode::from(4);
        }
        eprintln!("tairlock: timeline written to {}", file.display());
    }
    let broken: Vec<_> = rows.iter().filter(|r| r.broken()).collect();
    for r in &broken {
        eprintln!(
            "tairlock: BROKEN: {} broke its zeros under {}",
            r.algorithm, r.scenario
        );
    }
    if !broken.is_empty() {
        return Exit::Broken.into();
    }
    let mut silent = Vec::new();
    for r in rows.iter().filter(|r| r.expectation == "flawed") {
        if rows
            .iter()
            .filter(|o| o.algorithm == r.algorithm)
            .all(|o| o.verdict == "no flaw shown")
            && !silent.contains(&r.algorithm)
        {
            silent.push(r.algorithm.clone());
        }
    }
    if !silent.is_empty() && config.scenarios.len() == Scenario::ALL.len() {
        eprintln!(
            "tairlock: the verbatim recipe(s) {} showed no flaw: the demonstration failed",
            silent.join(", ")
        );
        return Exit::NoFlawShown.into();
    }
    ExitCode::SUCCESS
}

/// `--timeline FILE`: one trial per row, a picture-sized trial length, the recipes and their
/// fixes by default; and a file we can write, checked before the race runs.
fn race_timeline_config(
    config: &mut RaceConfig,
    args: &RaceArgs,
    file: &std::path::Path,
) -> Result<(), String> {
    if args.trials.is_some_and(|t| t != 1) {
        return Err("--timeline draws one trial per row: leave out --trials or pass 1".to_owned());
    }
    let dir = match file.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => std::path::Path::new("."),
    };
    if !dir.is_dir() {
        return Err(format!(
            "--timeline {}: no directory {}",
            file.display(),
            dir.display()
        ));
    }
    if file.is_dir() {
        return Err(format!("--timeline {}: a directory", file.display()));
    }
    config.trials = 1;
    config.timeline = true;
    if args.duration.is_none() {
        config.trial_length = config.lease * 8;
    }
    // `--redlock` races its own row only, whatever the list says.
    if args.algorithms.is_empty() && args.redlock.is_empty() {
        config.algorithms = race::timeline::PAIRS
            .iter()
            .flat_map(|&(recipe, fix)| [recipe.to_owned(), fix.to_owned()])
            .collect();
    }
    Ok(())
}

/// `--clients`: a race needs somebody to race against.
fn parse_clients(s: &str) -> Result<usize, String> {
    parse_count(s, 2, "a race needs at least 2 clients")
}

/// `--trials`: zero trials would print a table of zeros that proves nothing.
fn parse_trials(s: &str) -> Result<usize, String> {
    parse_count(s, 1, "a race needs at least 1 trial")
}

fn parse_count(s: &str, min: usize, why: &str) -> Result<usize, String> {
    let n: usize = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a whole number"))?;
    if n < min {
        return Err(format!("{n} is too few: {why}"));
    }
    Ok(n)
}

/// `--lease`: at least 1 ms. A server takes TTLs in whole milliseconds, so a shorter lease
/// would be sent as 0 (refused by `SET PX`, an immediate delete by `PEXPIRE`).
fn parse_lease(s: &str) -> Result<Duration, String> {
    let lease = duration::parse(s)?;
    if lease < Duration::from_millis(1) {
        return Err(format!(
            "lease {s:?} is under 1ms: servers count TTLs in whole milliseconds"
        ));
    }
    Ok(lease)
}

/// Split `prefix{name}` into (prefix, name); a bare name keeps the given prefix.
#[cfg(unix)]
fn split_key(key: &str, default_prefix: &str) -> (String, String) {
    if let (Some(open), true) = (key.find('{'), key.ends_with('}')) {
        return (
            key[..open].to_owned(),
            key[open + 1..key.len() - 1].to_owned(),
        );
    }
    (default_prefix.to_owned(), key.to_owned())
}

/// The keyspace and name of a key argument, or a usage error.
fn keyspace_of(prefix: String, name: &str) -> Result<Keyspace, String> {
    Keyspace::new(prefix)
        .and_then(|k| Keyspace::validate(name).map(|()| k))
        .map_err(|e| e.to_string())
}

fn bench_command(args: BenchArgs) -> ExitCode {
    if let Some(bad) = args
        .scenarios
        .iter()
        .find(|s| !bench::SCENARIOS.contains(&s.as_str()) && s.as_str() != "redlock-cycle")
    {
        return usage(format!(
            "unknown bench scenario {bad:?}; expected one of {}",
            bench::SCENARIOS.join(", ")
        ));
    }
    if args.redlock.is_empty() && args.scenarios.iter().any(|s| s == "redlock-cycle") {
        return usage("the redlock-cycle scenario needs --redlock URL,URL,...");
    }
    let config = bench::BenchConfig {
        duration: args.duration,
        only: args.scenarios,
    };
    if let Some(bad) = config.only.iter().find(|s| {
        !args.redlock.is_empty() && !["floor-cycle", "redlock-cycle"].contains(&s.as_str())
    }) {
        return usage(format!(
            "bench --redlock runs floor-cycle and redlock-cycle only, not {bad:?}"
        ));
    }
    let target = match args.conn.target(
        args.redis.as_deref(),
        &args.cluster,
        args.pubsub,
        &[
            ("--redis", args.redis.is_some()),
            ("--cluster", !args.cluster.is_empty()),
            ("--redlock", !args.redlock.is_empty()),
        ],
    ) {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let rows = rt.block_on(async {
        if !args.redlock.is_empty() {
            let mut servers = Vec::new();
            for url in &args.redlock {
                servers.push(RedisStore::connect_with(url, target.redis_options()).await?);
            }
            return bench::redlock(servers, &config, bench::progress_bar).await;
        }
        match &target.endpoint {
            Endpoint::Memory => {
                bench::run(
                    bench::Counted::new(MemoryStore::new()),
                    &config,
                    bench::progress_bar,
                )
                .await
            }
            Endpoint::Cluster(_) => {
                let store = target.connect_cluster().await?;
                bench::run(bench::Counted::new(store), &config, bench::progress_bar).await
            }
            Endpoint::Redis(_) | Endpoint::Sentinel { .. } => {
                let store = target.connect_redis().await?;
                bench::run(bench::Counted::new(store), &config, bench::progress_bar).await
            }
        }
    });
    eprintln!();
    match rows {
        Ok(rows) => {
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&rows).expect("serialise")
                );
            } else {
                print!("{}", bench::table(&rows));
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tairlock bench: {e}");
            Exit::Store.into()
        }
    }
}

/// The target of `inspect` and `unlock`: --redis always has a value there.
fn key_target(key: &KeyArgs) -> Result<Target, String> {
    key.conn.target(
        Some(&key.redis),
        &key.cluster,
        key.pubsub,
        &[("--cluster", !key.cluster.is_empty())],
    )
}

/// Print `value` as pretty JSON.
fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialise")
    );
}

/// `tairlock inspect`: a reader/writer lock when forced, named by a suffix, or detected; else
/// the expire lock.
struct InspectJob {
    keyspace: Keyspace,
    name: String,
    rw: bool,
    sem: bool,
    json: bool,
}

impl StoreJob for InspectJob {
    type Output = ();

    async fn run<S: WatchStore>(self, store: S) -> tairlock::Result<()> {
        if self.sem || (!self.rw && sem_inspect::detect(&store, &self.keyspace, &self.name).await?)
        {
            let report = sem_inspect::inspect(store, self.keyspace, &self.name).await?;
            if self.json {
                print_json(&report);
            } else {
                print!("{}", report.text());
            }
            return Ok(());
        }
        if self.rw || rw_inspect::detect(&store, &self.keyspace, &self.name).await? {
            let locks = tairlock_rwlock::RwLock::with_options(
                store,
                tairlock_rwlock::Options::default().keyspace(self.keyspace),
            );
            let report = rw_inspect::inspect(&locks, &self.name).await?;
            if self.json {
                print_json(&report);
            } else {
                print!("{}", report.text());
            }
            return Ok(());
        }
        let locks = tairlock::ExpireLock::with_options(
            store,
            tairlock::Options::default().keyspace(self.keyspace),
        );
        let report = admin::inspect(&locks, &self.name).await?;
        if self.json {
            print_json(&report);
        } else {
            print!("{}", report.text());
        }
        Ok(())
    }
}

fn inspect_command(args: InspectArgs) -> ExitCode {
    let InspectArgs { key, rw, sem } = args;
    let target = match key_target(&key) {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    let named_sem = sem_inspect::split_key(&key.key);
    let sem = sem || named_sem.is_some();
    let (prefix, name, named_rw) = match named_sem {
        Some((prefix, name)) => (prefix, name, false),
        None => rw_inspect::split_key(&key.key, &key.prefix),
    };
    let keyspace = match keyspace_of(prefix, &name) {
        Ok(keyspace) => keyspace,
        Err(e) => return usage(e),
    };
    let job = InspectJob {
        keyspace,
        name,
        rw: rw || named_rw,
        sem,
        json: key.json,
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    match rt.block_on(target.on(job)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tairlock: {e}");
            Exit::Store.into()
        }
    }
}

/// `tairlock unlock --force`, on a connected store.
struct UnlockJob {
    /// `(keyspace, name)`, or `None` for a legacy key.
    keyspace: Option<Keyspace>,
    name: String,
    rw: bool,
}

impl StoreJob for UnlockJob {
    type Output = unlock::UnlockReport;

    async fn run<S: WatchStore>(self, store: S) -> tairlock::Result<unlock::UnlockReport> {
        let Some(keyspace) = self.keyspace else {
            return unlock::legacy(store, &self.name).await;
        };
        if self.rw || rw_inspect::detect(&store, &keyspace, &self.name).await? {
            unlock::rw(store, keyspace, &self.name).await
        } else {
            unlock::expire(store, keyspace, &self.name).await
        }
    }
}

fn unlock_command(args: UnlockArgs) -> ExitCode {
    let UnlockArgs {
        force,
        key,
        rw,
        legacy,
    } = args;
    if !force {
        return usage("unlock deletes a lock whoever holds it; pass --force to confirm");
    }
    let target = match key_target(&key) {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    let job = if legacy {
        if key.key.is_empty() {
            return usage("the lock key is empty");
        }
        UnlockJob {
            keyspace: None,
            name: key.key.clone(),
            rw: false,
        }
    } else {
        let (prefix, name, named_rw) = rw_inspect::split_key(&key.key, &key.prefix);
        match keyspace_of(prefix, &name) {
            Ok(keyspace) => UnlockJob {
                keyspace: Some(keyspace),
                name,
                rw: rw || named_rw,
            },
            Err(e) => return usage(e),
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    match rt.block_on(target.on(job)) {
        Ok(report) => {
            if key.json {
                print_json(&report);
            } else if report.exit() == Exit::Refused {
                eprintln!("tairlock: {}", report.text());
            } else {
                println!("{}", report.text());
            }
            report.exit().into()
        }
        Err(e) => {
            eprintln!("tairlock: {e}");
            Exit::Store.into()
        }
    }
}

/// `tairlock run` elsewhere than on Unix.
#[cfg(not(unix))]
fn not_supported() -> ExitCode {
    eprintln!(
        "tairlock run: not supported here: it needs Unix process groups and signals to stop the \
         command when the lease is lost"
    );
    Exit::Usage.into()
}

#[cfg(not(unix))]
fn run_command(_args: RunArgs) -> ExitCode {
    not_supported()
}

/// What `tairlock run` holds, from its flags.
#[cfg(unix)]
enum RunKind {
    Expire {
        keyspace: Keyspace,
        fair: bool,
    },
    Rw {
        keyspace: Keyspace,
        side: run::kinds::Side,
        preference: tairlock_rwlock::Preference,
    },
    Legacy {
        unit: tairlock_legacy::Unit,
        kind: LegacyKindArg,
    },
    Permits {
        keyspace: Keyspace,
        limit: u32,
        fair: bool,
    },
}

/// `tairlock run`'s work on a connected store.
#[cfg(unix)]
struct RunJob {
    kind: RunKind,
    ttl: Duration,
    spec: run::RunSpec,
}

#[cfg(unix)]
impl StoreJob for RunJob {
    type Output = u8;

    async fn run<S: WatchStore>(self, store: S) -> tairlock::Result<u8> {
        let RunJob { kind, ttl, spec } = self;
        Ok(match kind {
            RunKind::Expire { keyspace, fair } => {
                let options = tairlock::Options::default()
                    .keyspace(keyspace)
                    .watchdog_lease(ttl)
                    .fair(fair);
                run::run(&tairlock::ExpireLock::with_options(store, options), &spec).await
            }
            RunKind::Rw {
                keyspace,
                side,
                preference,
            } => {
                let options = tairlock_rwlock::Options::default()
                    .keyspace(keyspace)
                    .watchdog_lease(ttl)
                    .preference(preference);
                let locker = run::kinds::RwLocker {
                    locks: tairlock_rwlock::RwLock::with_options(store, options),
                    side,
                };
                run::run(&locker, &spec).await
            }
            RunKind::Permits {
                keyspace,
                limit,
                fair,
            } => {
                let options = tairlock::SemaphoreOptions::default()
                    .keyspace(keyspace)
                    .watchdog_lease(ttl)
                    .fair(fair);
                let locker = run::kinds::Permits {
                    semaphore: tairlock::Semaphore::with_options(store, limit, options),
                    permits: 1,
                };
                run::run(&locker, &spec).await
            }
            RunKind::Legacy { unit, kind } => {
                let options = tairlock_legacy::Options::default()
                    .unit(unit)
                    .acquire_timeout(spec.wait.filter(|w| !w.is_zero()));
                let lock = match legacy_lock(store, options, kind).await {
                    Ok(lock) => lock,
                    Err(e) => {
                        eprintln!("tairlock run: {e}");
                        return Ok(run::EXIT_STORE);
                    }
                };
                let locker = run::legacy::LegacyLocker::new(lock, ttl);
                if locker.strategy() == tairlock_legacy::Strategy::GetSet {
                    eprintln!(
                        "tairlock run: the getset kind cannot renew its lock: {} is stopped at \
                         --ttl ({ttl:?}) less --grace ({:?}) if it still runs",
                        spec.command[0], spec.grace
                    );
                }
                run::run(&locker, &spec).await
            }
        })
    }
}

/// The legacy lock `--legacy-kind` asks for, if the server supports it.
#[cfg(unix)]
async fn legacy_lock<S: WatchStore>(
    store: S,
    options: tairlock_legacy::Options,
    kind: LegacyKindArg,
) -> tairlock::Result<tairlock_legacy::LegacyLock<S>> {
    use tairlock_legacy::{LegacyLock, Strategy, probe};
    let mut caps = probe(&store).await?;
    let strategy = match kind {
        LegacyKindArg::Auto => caps.strongest(),
        LegacyKindArg::Getset => Strategy::GetSet,
        LegacyKindArg::Scripted => {
            if caps.strongest() != Strategy::Scripted {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::InvalidInput,
                    "--legacy-kind scripted: this server cannot run the scripts (no Lua, or a \
                     script may not write after TIME: Redis before 5)",
                ));
            }
            Strategy::Scripted
        }
        LegacyKindArg::Watch => {
            caps.scripting = false;
            match caps.strongest() {
                watch @ Strategy::Watch(_) => watch,
                _ => {
                    return Err(tairlock::Error::new(
                        tairlock::ErrorKind::InvalidInput,
                        "--legacy-kind watch: this server refuses WATCH",
                    ));
                }
            }
        }
    };
    Ok(LegacyLock::with_strategy(store, options, strategy))
}

#[cfg(unix)]
fn run_command(args: RunArgs) -> ExitCode {
    let target = match args.conn.target(
        Some(&args.redis),
        &args.cluster,
        args.pubsub,
        &[("--cluster", !args.cluster.is_empty())],
    ) {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    let (kind, name) = if args.legacy {
        if args.key.is_empty() {
            return usage("the lock key is empty");
        }
        let unit = match args.unit {
            UnitArg::S => tairlock_legacy::Unit::Seconds,
            UnitArg::Ms => tairlock_legacy::Unit::Millis,
        };
        let kind = RunKind::Legacy {
            unit,
            kind: args.legacy_kind,
        };
        (kind, args.key.clone())
    } else {
        let (prefix, name) = split_key(&args.key, &args.prefix);
        let keyspace = match keyspace_of(prefix, &name) {
            Ok(keyspace) => keyspace,
            Err(e) => return usage(e),
        };
        let side = match (args.read, args.write) {
            (true, _) => Some(run::kinds::Side::Read),
            (_, true) => Some(run::kinds::Side::Write),
            _ => None,
        };
        let kind = match (side, args.permits) {
            (_, Some(0)) => return usage("--permits must be at least 1"),
            (_, Some(limit)) => RunKind::Permits {
                keyspace,
                limit,
                fair: args.fair,
            },
            (Some(side), None) => RunKind::Rw {
                keyspace,
                side,
                preference: match args.preference {
                    PreferenceArg::Writer => tairlock_rwlock::Preference::Writer,
                    PreferenceArg::Reader => tairlock_rwlock::Preference::Reader,
                },
            },
            (None, None) => RunKind::Expire {
                keyspace,
                fair: args.fair,
            },
        };
        (kind, name)
    };
    if args.ttl < Duration::from_millis(30) {
        return usage("--ttl must be at least 30ms (it is renewed at a third of its length)");
    }
    let grace = match run::grace_for(args.ttl, args.grace) {
        Ok(grace) => grace,
        Err(e) => return usage(e),
    };
    // Before the runtime starts its threads, so that they all inherit the mask.
    if let Err(e) = run::block_background_stops() {
        eprintln!("tairlock run: cannot block SIGTTOU: {e}");
        return Exit::Usage.into();
    }
    let job = RunJob {
        kind,
        ttl: args.ttl,
        spec: run::RunSpec {
            name,
            wait: args.wait,
            grace,
            command: args.command,
        },
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let code = rt.block_on(target.on(job)).unwrap_or_else(|e| {
        eprintln!("tairlock run: {e}");
        run::EXIT_STORE
    });
    ExitCode::from(code)
}
