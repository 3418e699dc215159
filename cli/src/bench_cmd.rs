//! `tairlock bench`: its flags, and the run on the store they name. The scenarios and the table
//! are in [`bench`](mod@crate::bench).

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use tairlock::{MemoryStore, RedisStore};

use crate::exit::{Exit, usage};
use crate::flags::{ConnArgs, PubSubArg};
use crate::target::Endpoint;
use crate::{bench, duration};

/// `tairlock bench`'s flags.
#[derive(Args, Debug)]
pub struct BenchArgs {
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
    /// Run every scenario, the floor included, through a proxy that adds this much each way to
    /// every connection (a network's round trip is twice it): `100us`, `0.5ms`. With `--redis`
    /// (a `redis://` URL) only; 0, the default, is no proxy at all.
    #[arg(long, value_parser = duration::parse_or_zero, default_value = "0")]
    latency: Duration,
    /// `many-leases`: how many guards to hold.
    #[arg(long, default_value_t = 10_000)]
    leases: usize,
    /// `many-leases`: the guards' watchdog lease.
    #[arg(long, value_parser = duration::parse, default_value = "3s")]
    lease: Duration,
    /// `many-leases`: how long to hold the guards.
    #[arg(long, value_parser = duration::parse, default_value = "10s")]
    hold: Duration,
    /// Print a JSON array instead of the table.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    conn: ConnArgs,
}

/// Run `tairlock bench`: the table (or JSON) on stdout, a progress bar on stderr.
pub fn command(args: BenchArgs) -> ExitCode {
    if let Some(bad) = args.scenarios.iter().find(|s| {
        !bench::SCENARIOS.contains(&s.as_str())
            && !["redlock-cycle", "many-leases"].contains(&s.as_str())
    }) {
        return usage(format!(
            "unknown bench scenario {bad:?}; expected one of {}, many-leases",
            bench::SCENARIOS.join(", ")
        ));
    }
    if args.leases == 0 || args.lease < Duration::from_millis(3) {
        return usage("many-leases needs --leases of at least 1 and --lease of at least 3ms");
    }
    if args.redlock.is_empty() && args.scenarios.iter().any(|s| s == "redlock-cycle") {
        return usage("the redlock-cycle scenario needs --redlock URL,URL,...");
    }
    let config = bench::BenchConfig {
        duration: args.duration,
        only: args.scenarios,
        many: bench::ManyLeases {
            leases: args.leases,
            lease: args.lease,
            hold: args.hold,
        },
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
    // With --latency, --redis's server is reached through a proxy that adds it each way.
    let network = match (&target.endpoint, args.latency.is_zero()) {
        (_, true) => None,
        (Endpoint::Redis(url), false) => match bench::Network::new(url, args.latency) {
            Ok(network) => Some(network),
            Err(e) => return usage(e),
        },
        (_, false) => {
            return usage(
                "--latency needs one server, given by --redis (a proxy goes in front of it)",
            );
        }
    };
    let target = match &network {
        Some(network) => crate::target::Target {
            endpoint: Endpoint::Redis(network.url().to_owned()),
            ..target
        },
        None => target,
    };
    let one_way_us = args.latency.as_secs_f64() * 1e6;
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
        Ok(mut rows) => {
            for row in &mut rows {
                row.one_way_latency_us = one_way_us;
            }
            if let Some(network) = &network {
                eprintln!(
                    "every connection ({}) went through a proxy adding {:?} each way",
                    network.connections(),
                    network.one_way()
                );
            }
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
