//! `tairlock`: race lock algorithms against each other, inspect and force-unlock locks.
//!
//! Exit codes: 0 success; 1 a safe algorithm broke one of its zeros in `race`; 2 usage error;
//! 3 `race` ran a verbatim recipe in every scenario and it showed no flaw (the demonstration
//! failed); 4 a store or I/O error; 5 `unlock --force` refused a key that is not one of our locks.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tairlock::clock::SystemClock;
use tairlock::store::{ClusterOptions, RedisOptions, SentinelOptions, TlsOptions};
use tairlock::{ClusterStore, ExpireLock, Keyspace, MemoryStore, Options, RedisStore, Store};
use tairlock_cli::admin::{self, InspectReport};
use tairlock_cli::bench;
use tairlock_cli::race::{self, RaceConfig, Row, report, scenario::Scenario};
#[cfg(unix)]
use tairlock_cli::run;

#[derive(Parser, Debug)]
#[command(
    name = "tairlock",
    version,
    about = "Expiring distributed locks on Redis: race, inspect, unlock"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
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
    /// tairlock dies. Exit codes: the command's; 75 not acquired within --wait; 76 lease lost;
    /// 69 store error; 127 command not started.
    Run(RunArgs),
    /// Internal: the supervisor `tairlock run` starts its command under (see `run.rs`).
    #[command(name = "__supervise", hide = true)]
    Supervise(SuperviseArgs),
    /// Delete a lock whoever holds it (refuses a key that is not one of our locks).
    Unlock {
        /// Required: this deletes someone else's lock.
        #[arg(long)]
        force: bool,
        #[command(flatten)]
        key: KeyArgs,
    },
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
    #[arg(long, value_parser = parse_duration)]
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
    #[arg(long, value_parser = parse_duration, default_value = "1s")]
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
struct RunArgs {
    /// The lock name (e.g. nightly-backup) or its full key.
    key: String,
    /// Lease length, renewed by the watchdog at a third of it.
    #[arg(long, value_parser = parse_duration, default_value = "30s")]
    ttl: Duration,
    /// How long to wait for the lock (default: forever; 0 or e.g. 1us for a single attempt).
    #[arg(long, value_parser = parse_duration)]
    wait: Option<Duration>,
    /// Time between SIGTERM and SIGKILL when the command is stopped; at most half of --ttl
    /// [default: 5s, or half of --ttl if shorter].
    #[arg(long, value_parser = parse_duration)]
    grace: Option<Duration>,
    /// The Redis server.
    #[arg(long, env = "TAIRLOCK_REDIS", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// Key prefix of the locks.
    #[arg(long, default_value = tairlock::keys::DEFAULT_PREFIX)]
    prefix: String,
    #[command(flatten)]
    conn: ConnArgs,
    /// Wait in the lock's fair queue: first come, first served across processes, the release
    /// handing the lock straight to the next waiter (every client of the lock should use it).
    #[arg(long)]
    fair: bool,
    /// Hold one of N permits of a semaphore named KEY instead of the lock: at most N commands
    /// (of every `tairlock run --permits N KEY`) run at once, each with its own lease.
    /// With --fair, they wait in the semaphore's queue on the server, first come, first served.
    #[arg(long, value_name = "N")]
    permits: Option<u32>,
    /// The command to run, after `--`.
    #[arg(last = true, required = true)]
    command: Vec<String>,
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

    fn redis_options(&self) -> tairlock::Result<RedisOptions> {
        let mut options = RedisOptions::default();
        options.tls = self.tls()?;
        Ok(options)
    }

    fn sentinel_options(&self) -> tairlock::Result<SentinelOptions> {
        let mut options = SentinelOptions::default();
        options.redis = self.redis_options()?;
        Ok(options)
    }

    fn uses_sentinel(&self) -> bool {
        !self.sentinel.is_empty()
    }

    /// The server at `url`, or the sentinels' master when --sentinel is given.
    async fn redis(&self, url: &str) -> tairlock::Result<RedisStore> {
        match &self.master {
            Some(master) if self.uses_sentinel() => {
                RedisStore::connect_sentinel(&self.sentinel, master, self.sentinel_options()?).await
            }
            _ => RedisStore::connect_with(url, self.redis_options()?).await,
        }
    }

    /// Where the target is described in messages.
    fn describe(&self, url: &str) -> String {
        match &self.master {
            Some(master) if self.uses_sentinel() => {
                format!("master {master:?} of sentinels {}", self.sentinel.join(","))
            }
            _ => url.to_owned(),
        }
    }

    /// --sentinel picks the one server itself: refuse it with the flags that pick others.
    fn check_exclusive(&self, others: &[(&str, bool)]) -> Result<(), String> {
        if !self.uses_sentinel() {
            return Ok(());
        }
        match others.iter().find(|(_, given)| *given) {
            Some((flag, _)) => Err(format!("--sentinel cannot be combined with {flag}")),
            None => Ok(()),
        }
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

/// The cluster options of `--pubsub`'s choice and the TLS flags.
fn cluster_options(pubsub: PubSubArg, conn: &ConnArgs) -> tairlock::Result<ClusterOptions> {
    let mut options = ClusterOptions::default();
    options.pubsub = match pubsub {
        PubSubArg::Auto => None,
        PubSubArg::Classic => Some(tairlock::notify::PubSub::Classic),
        PubSubArg::Sharded => Some(tairlock::notify::PubSub::Sharded),
    };
    options.tls = conn.tls()?;
    Ok(options)
}

/// Connect to the cluster of these seed nodes with `--pubsub`'s choice and the TLS flags.
async fn connect_cluster(
    urls: &[String],
    pubsub: PubSubArg,
    conn: &ConnArgs,
) -> tairlock::Result<ClusterStore> {
    ClusterStore::connect_with(urls, cluster_options(pubsub, conn)?).await
}

fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num
        .parse()
        .map_err(|_| format!("bad duration {s:?}: expected e.g. 100ms, 2s, 1.5s"))?;
    let secs = match unit {
        "us" | "µs" => value / 1e6,
        "ms" => value / 1e3,
        "s" | "" => value,
        "m" => value * 60.0,
        _ => {
            return Err(format!(
                "bad duration unit {unit:?} in {s:?}: use us, ms, s or m"
            ));
        }
    };
    if !secs.is_finite() || secs <= 0.0 || secs > 86_400.0 {
        return Err(format!(
            "duration {s:?} is out of range (must be > 0 and at most a day)"
        ));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// The connection flags of a command, if it has them.
fn conn_args(command: &Command) -> Option<&ConnArgs> {
    match command {
        Command::Race(args) => Some(&args.conn),
        Command::Bench(args) => Some(&args.conn),
        Command::Inspect(args) => Some(&args.key.conn),
        Command::Run(args) => Some(&args.conn),
        Command::Unlock { key, .. } => Some(&key.conn),
        Command::Supervise(_) => None,
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Unreadable or malformed TLS files are a usage error, before anything is connected.
    if let Some(Err(e)) = conn_args(&cli.command).map(ConnArgs::tls) {
        eprintln!("tairlock: {e}");
        return ExitCode::from(2);
    }
    match cli.command {
        Command::Race(args) => race_command(args),
        Command::Inspect(InspectArgs { key, rw, sem }) => {
            if let Err(e) = key
                .conn
                .check_exclusive(&[("--cluster", !key.cluster.is_empty())])
            {
                eprintln!("tairlock: {e}");
                return ExitCode::from(2);
            }
            let options = (
                key.conn.redis_options(),
                cluster_options(key.pubsub, &key.conn),
                key.conn.sentinel_options(),
            );
            let (redis, cluster, sentinel) = match options {
                (Ok(r), Ok(c), Ok(s)) => (r, c, s),
                (Err(e), _, _) | (_, Err(e), _) | (_, _, Err(e)) => {
                    eprintln!("tairlock: {e}");
                    return ExitCode::from(2);
                }
            };
            use tairlock_cli::rw_inspect::Target;
            let target = match &key.conn.master {
                Some(master) if key.conn.uses_sentinel() => {
                    Target::Sentinel(&key.conn.sentinel, master, &sentinel)
                }
                _ if key.cluster.is_empty() => Target::RedisWith(&key.redis, &redis),
                _ => Target::ClusterWith(&key.cluster, &cluster),
            };
            if !rw
                && let Some(code) = tairlock_cli::sem_inspect::command_on(
                    &key.key,
                    &key.prefix,
                    target,
                    key.json,
                    sem,
                )
            {
                return ExitCode::from(code);
            }
            match tairlock_cli::rw_inspect::command_on(&key.key, &key.prefix, target, key.json, rw)
            {
                Some(code) => ExitCode::from(code),
                None => admin_command(key, false),
            }
        }
        Command::Run(args) => run_command(args),
        #[cfg(unix)]
        Command::Supervise(args) => ExitCode::from(run::supervise(
            args.lifeline,
            nix::unistd::Pid::from_raw(args.home),
            &args.command,
        )),
        #[cfg(not(unix))]
        Command::Supervise(_) => not_supported(),
        Command::Bench(args) => bench_command(args),
        Command::Unlock { force, key } => {
            if !force {
                eprintln!(
                    "tairlock: unlock deletes a lock whoever holds it; pass --force to confirm"
                );
                return ExitCode::from(2);
            }
            admin_command(key, true)
        }
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
        eprintln!(
            "tairlock: unknown algorithm {bad:?}; expected one of {}",
            known.join(", ")
        );
        return ExitCode::from(2);
    }
    if !args.scenarios.is_empty() {
        config.scenarios = args.scenarios.clone();
    }
    if let Some(lease) = args.lease {
        config.lease = lease;
    }
    if let Err(e) = args.conn.check_exclusive(&[
        ("--redis", args.redis.is_some()),
        ("--cluster", !args.cluster.is_empty()),
        ("--redlock", !args.redlock.is_empty()),
    ]) {
        eprintln!("tairlock: {e}");
        return ExitCode::from(2);
    }
    let real_time = args.redis.is_some()
        || !args.cluster.is_empty()
        || !args.redlock.is_empty()
        || args.conn.uses_sentinel();
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
        if !args.cluster.is_empty() {
            format!("cluster {} (real time)", args.cluster.join(","))
        } else if !args.redlock.is_empty() {
            format!("redlock over {} (real time)", args.redlock.join(","))
        } else if args.conn.uses_sentinel() {
            format!("redis {} (real time)", args.conn.describe(""))
        } else {
            args.redis
                .as_deref()
                .map_or("embedded store (virtual time)".to_owned(), |u| {
                    format!("redis {u} (real time)")
                })
        }
    );
    let rows = if !args.cluster.is_empty() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let store = connect_cluster(&args.cluster, args.pubsub, &args.conn).await?;
            // Every algorithm, legacy-watch included: its transactions run on a dedicated
            // connection to the master of the lock's slot.
            race::run(store, Arc::new(SystemClock), "cluster", &config, progress).await
        })
    } else if !args.redlock.is_empty() {
        let rt = tokio::runtime::Runtime::new().expect("runtime");
        rt.block_on(async {
            let mut servers = Vec::new();
            for url in &args.redlock {
                servers.push(RedisStore::connect_with(url, args.conn.redis_options()?).await?);
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
        match &args.redis {
            None if !args.conn.uses_sentinel() => race::run_embedded(&config, progress),
            url => {
                let rt = tokio::runtime::Runtime::new().expect("runtime");
                rt.block_on(async {
                    let store = args.conn.redis(url.as_deref().unwrap_or_default()).await?;
                    race::run(store, Arc::new(SystemClock), "redis", &config, progress).await
                })
            }
        }
    };
    let rows = match rows {
        Ok(rows) => rows,
        Err(e) => {
            eprintln!("tairlock: {e}");
            return ExitCode::from(4);
        }
    };
    if args.json {
        println!("{}", report::json(&rows));
    } else {
        print!("{}", report::table(&rows));
    }
    let broken: Vec<_> = rows.iter().filter(|r| r.broken()).collect();
    for r in &broken {
        eprintln!(
            "tairlock: BROKEN: {} broke its zeros under {}",
            r.algorithm, r.scenario
        );
    }
    if !broken.is_empty() {
        return ExitCode::from(1);
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
        return ExitCode::from(3);
    }
    ExitCode::SUCCESS
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
    let lease = parse_duration(s)?;
    if lease < Duration::from_millis(1) {
        return Err(format!(
            "lease {s:?} is under 1ms: servers count TTLs in whole milliseconds"
        ));
    }
    Ok(lease)
}

/// Split `prefix{name}` into (prefix, name); a bare name keeps the given prefix.
fn split_key(key: &str, default_prefix: &str) -> (String, String) {
    if let (Some(open), true) = (key.find('{'), key.ends_with('}')) {
        return (
            key[..open].to_owned(),
            key[open + 1..key.len() - 1].to_owned(),
        );
    }
    (default_prefix.to_owned(), key.to_owned())
}

fn bench_command(args: BenchArgs) -> ExitCode {
    if let Some(bad) = args
        .scenarios
        .iter()
        .find(|s| !bench::SCENARIOS.contains(&s.as_str()) && s.as_str() != "redlock-cycle")
    {
        eprintln!(
            "tairlock: unknown bench scenario {bad:?}; expected one of {}",
            bench::SCENARIOS.join(", ")
        );
        return ExitCode::from(2);
    }
    if args.redlock.is_empty() && args.scenarios.iter().any(|s| s == "redlock-cycle") {
        eprintln!("tairlock: the redlock-cycle scenario needs --redlock URL,URL,...");
        return ExitCode::from(2);
    }
    let config = bench::BenchConfig {
        duration: args.duration,
        only: args.scenarios,
    };
    if let Some(bad) = config.only.iter().find(|s| {
        !args.redlock.is_empty() && !["floor-cycle", "redlock-cycle"].contains(&s.as_str())
    }) {
        eprintln!("tairlock: bench --redlock runs floor-cycle and redlock-cycle only, not {bad:?}");
        return ExitCode::from(2);
    }
    if let Err(e) = args.conn.check_exclusive(&[
        ("--redis", args.redis.is_some()),
        ("--cluster", !args.cluster.is_empty()),
        ("--redlock", !args.redlock.is_empty()),
    ]) {
        eprintln!("tairlock: {e}");
        return ExitCode::from(2);
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let rows = rt.block_on(async {
        if !args.redlock.is_empty() {
            let mut servers = Vec::new();
            for url in &args.redlock {
                servers.push(RedisStore::connect_with(url, args.conn.redis_options()?).await?);
            }
            return bench::redlock(servers, &config, bench::progress_bar).await;
        }
        if !args.cluster.is_empty() {
            let store = connect_cluster(&args.cluster, args.pubsub, &args.conn).await?;
            return bench::run(bench::Counted::new(store), &config, bench::progress_bar).await;
        }
        match &args.redis {
            url if url.is_some() || args.conn.uses_sentinel() => {
                let store = args.conn.redis(url.as_deref().unwrap_or_default()).await?;
                bench::run(bench::Counted::new(store), &config, bench::progress_bar).await
            }
            _ => {
                bench::run(
                    bench::Counted::new(MemoryStore::new()),
                    &config,
                    bench::progress_bar,
                )
                .await
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
            ExitCode::from(4)
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
    ExitCode::from(2)
}

#[cfg(not(unix))]
fn run_command(_args: RunArgs) -> ExitCode {
    not_supported()
}

#[cfg(unix)]
fn run_command(args: RunArgs) -> ExitCode {
    let (prefix, name) = split_key(&args.key, &args.prefix);
    let keyspace = match Keyspace::new(prefix).and_then(|k| Keyspace::validate(&name).map(|()| k)) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("tairlock: {e}");
            return ExitCode::from(2);
        }
    };
    if args.ttl < Duration::from_millis(30) {
        eprintln!("tairlock: --ttl must be at least 30ms (it is renewed at a third of its length)");
        return ExitCode::from(2);
    }
    if args.permits == Some(0) {
        eprintln!("tairlock: --permits must be at least 1");
        return ExitCode::from(2);
    }
    let grace = match run::grace_for(args.ttl, args.grace) {
        Ok(grace) => grace,
        Err(e) => {
            eprintln!("tairlock: {e}");
            return ExitCode::from(2);
        }
    };
    // Before the runtime starts its threads, so that they all inherit the mask.
    if let Err(e) = run::block_background_stops() {
        eprintln!("tairlock run: cannot block SIGTTOU: {e}");
        return ExitCode::from(2);
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let code = rt.block_on(async {
        let store = match args.conn.redis(&args.redis).await {
            Ok(store) => store,
            Err(e) => {
                eprintln!("tairlock run: {e}");
                return run::EXIT_STORE;
            }
        };
        let spec = run::RunSpec {
            name,
            wait: args.wait,
            grace,
            command: args.command,
        };
        if let Some(limit) = args.permits {
            let options = tairlock::SemaphoreOptions::default()
                .keyspace(keyspace)
                .watchdog_lease(args.ttl)
                .fair(args.fair);
            let sem = tairlock::Semaphore::with_options(store, limit, options);
            return run::run_permits(&sem, 1, &spec).await;
        }
        let options = Options::default()
            .keyspace(keyspace)
            .watchdog_lease(args.ttl)
            .fair(args.fair);
        let locks = ExpireLock::with_options(store, options);
        run::run(&locks, &spec).await
    });
    ExitCode::from(code)
}

fn admin_command(args: KeyArgs, force_unlock: bool) -> ExitCode {
    let (prefix, name) = split_key(&args.key, &args.prefix);
    let keyspace = match Keyspace::new(prefix).and_then(|k| Keyspace::validate(&name).map(|()| k)) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("tairlock: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = args
        .conn
        .check_exclusive(&[("--cluster", !args.cluster.is_empty())])
    {
        eprintln!("tairlock: {e}");
        return ExitCode::from(2);
    }
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let result: tairlock::Result<ExitCode> = rt.block_on(async {
        if args.cluster.is_empty() {
            let store = args.conn.redis(&args.redis).await?;
            admin_on(store, keyspace, &name, force_unlock, args.json).await
        } else {
            let store = connect_cluster(&args.cluster, args.pubsub, &args.conn).await?;
            admin_on(store, keyspace, &name, force_unlock, args.json).await
        }
    });
    result.unwrap_or_else(|e| {
        eprintln!("tairlock: {e}");
        ExitCode::from(4)
    })
}

async fn admin_on<S: Store>(
    store: S,
    keyspace: Keyspace,
    name: &str,
    force_unlock: bool,
    json: bool,
) -> tairlock::Result<ExitCode> {
    let locks = ExpireLock::with_options(store, Options::default().keyspace(keyspace));
    if force_unlock {
        match locks.force_unlock(name).await {
            Ok(true) => println!("deleted the lock {name}"),
            Ok(false) => println!("the lock {name} is not held"),
            Err(e) if e.is_wrong_type() => {
                eprintln!("tairlock: refusing to delete {name}: {e}");
                return Ok(ExitCode::from(5));
            }
            Err(e) => return Err(e),
        }
        return Ok(ExitCode::SUCCESS);
    }
    let report: InspectReport = admin::inspect(&locks, name).await?;
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("serialise")
        );
    } else {
        print!("{}", report.text());
    }
    Ok(ExitCode::SUCCESS)
}
