//! `tairlock race`: its flags, the [`RaceConfig`] they make, the run on the store they name,
//! and the table and exit code. The race itself is [`race`], in the
//! `tairlock-testing` crate.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use tairlock::RedisStore;
use tairlock::clock::SystemClock;

use crate::duration;
use crate::exit::{Exit, usage};
use crate::flags::{ConnArgs, PubSubArg};
use crate::race::{self, RaceConfig, Row, report, scenario::Scenario};
use crate::target::Endpoint;

/// `tairlock race`'s flags.
#[derive(Args, Debug)]
pub struct RaceArgs {
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
    /// Scenario to run (repeatable): short-stalls, long-stalls, crashes, clock-skew,
    /// reply-outages.
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

/// Run `tairlock race`: the table (or JSON) on stdout, progress on stderr, and the exit code
/// the rows call for.
pub fn command(args: RaceArgs) -> ExitCode {
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
        && let Err(e) = timeline_config(&mut config, &args, file)
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
fn timeline_config(
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
