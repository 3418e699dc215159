//! `tairlock scan [PATTERN]`: every lock in a live keyspace, read-only — this project's locks of
//! every kind, legacy `SETNX`/`GETSET` locks, token locks of other libraries — counted by class,
//! each in one line, and with `--stuck` only those nobody can take without help, each with the
//! command that clears it.
//!
//! # How it reads
//!
//! On each server (every master of a cluster, scanned side by side):
//!
//! 1. `SCAN cursor MATCH PATTERN COUNT --count`, never `KEYS`;
//! 2. for the keys it returned, one pipeline of `TYPE` and `PTTL`, then one of value samples:
//!    `GETRANGE 0 128` of a string (no value recognised is longer), and for a sorted set or
//!    hash named like a lock's (`classify::LAYOUT`) `ZCARD` and `ZRANGE 0 255 WITHSCORES`, or
//!    `HLEN` and one `HSCAN` call;
//! 3. once the server's keys are all in, each lock found is read by its kind's own `inspect`
//!    (one read-only script for this project's kinds; `TYPE`, `GET`, `TIME`, `PTTL` for a
//!    legacy lock), in batches of at most `--count`, run side by side on one connection.
//!
//! A paced call is a `SCAN` with its two pipelines, or a batch of inspections; at most `--rate`
//! of them start each second on each server. Every command is a read: nothing is ever written,
//! renewed or deleted (`tests/scan.rs` checks the servers' `INFO commandstats` and their count
//! of changes). Where the server has `CLIENT NO-TOUCH` (Redis 7.2+, Valkey), the samples do not
//! count as accesses either, so the keys' LRU/LFU data stays as it was.
//!
//! What each key is taken for (the key layouts, the value shapes, and the rules for keys outside
//! them) is in the `classify` module; what is reported of each lock, and when it is stuck, in
//! `found` ([`Found`], [`Class`]).
//!
//! The embedded store lives inside one process, so there is nothing to scan from outside: the
//! command works against servers only.

mod classify;
mod found;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use serde::Serialize;
use tairlock::{ClusterStore, Error, ErrorKind, Store, Ttl};
use tokio::task::JoinSet;
use tokio::time::Instant;

use self::classify::{COLLECTION_SAMPLE, Collector, Facts, Item, STRING_SAMPLE, Sample, sampled};
pub use self::found::{Class, FenceReport, Found, PlaceReport, QueueReport};
use self::found::{Judge, sh_quote};
use crate::duration;
use crate::exit::{Exit, usage};
use crate::flags::{ConnArgs, PubSubArg};
use crate::target::{Endpoint, Target};

/// The read-only scripts the inspections run (`SCRIPT LOAD` is no write).
const INSPECT_SCRIPTS: [&tairlock::Script; 3] = [
    &tairlock::scripts::INSPECT,
    &tairlock::scripts::SEM_INSPECT,
    &tairlock_rwlock::scripts::INSPECT,
];

/// How long one call to a server may take.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// `tairlock scan`'s flags.
#[derive(Args, Debug)]
pub struct ScanArgs {
    /// Only keys matching this glob-style pattern (SCAN's MATCH), e.g. 'lock.*' or
    /// 'tairlock:*'. A lock is read whole when one of its keys matches.
    #[arg(default_value = "*")]
    pattern: String,
    /// The Redis server.
    #[arg(long, env = "TAIRLOCK_REDIS", default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// A Redis Cluster instead of one server, given seed node URLs (comma-separated or
    /// repeated); every master is scanned. Overrides --redis.
    #[arg(long, value_delimiter = ',', num_args = 1..)]
    cluster: Vec<String>,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// List only the locks nobody can take without help, each with the command that clears
    /// it; exit 6 when there is one, 0 when there is none.
    #[arg(long)]
    stuck: bool,
    /// Keys asked for per SCAN call (its COUNT), and locks inspected per batch.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    count: u32,
    /// At most this many calls a second on each server (a SCAN call with the reads of its keys,
    /// or a batch of inspections).
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    rate: u32,
    /// How long past its end a lease, timestamp or queue place must be before a lock without
    /// a TTL counts as stuck (e.g. 10m, 1h, 24h; 0: as soon as it ended).
    #[arg(long, value_parser = duration::parse_or_zero, default_value = "1h")]
    stale_after: Duration,
    #[command(flatten)]
    conn: ConnArgs,
}

/// What one server's scan did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ServerReport {
    /// `host:port`.
    pub server: String,
    /// Keys the SCAN calls returned.
    pub keys_scanned: u64,
    /// SCAN calls.
    pub scan_calls: u64,
    /// Pipelines of per-key reads (two per SCAN call that returned keys).
    pub read_pipelines: u64,
    /// The commands in them.
    pub read_commands: u64,
    /// Locks read by their kind's inspection.
    pub inspections: u64,
    /// Batches of inspections (each one paced call).
    pub inspect_batches: u64,
    /// Keys that changed or moved while they were read (not judged).
    pub skipped: u64,
    /// Locks gone between the scan and their inspection (not listed).
    pub vanished: u64,
    /// Keys left out: user data.
    pub other: u64,
    /// Wall time, ms.
    pub elapsed_ms: u64,
}

/// What `tairlock scan --json` prints.
#[derive(Debug, Clone, Serialize)]
pub struct ScanReport {
    /// Where.
    pub target: String,
    /// The SCAN pattern.
    pub pattern: String,
    /// `--count`.
    pub count: u32,
    /// `--rate`.
    pub rate: u32,
    /// `--stale-after`, ms.
    pub stale_after_ms: u64,
    /// Whether only stuck locks are listed (`--stuck`).
    pub stuck_only: bool,
    /// Keys the SCAN calls returned, on every server.
    pub keys_scanned: u64,
    /// SCAN calls, on every server.
    pub scan_calls: u64,
    /// Pipelines of per-key reads, on every server.
    pub read_pipelines: u64,
    /// The commands in them.
    pub read_commands: u64,
    /// Locks inspected, on every server.
    pub inspections: u64,
    /// Wall time of the whole scan, ms.
    pub elapsed_ms: u64,
    /// Each server's part.
    pub servers: Vec<ServerReport>,
    /// Locks found per class, and `other`: keys left out.
    pub counts: BTreeMap<String, u64>,
    /// Locks found per class and state.
    pub states: BTreeMap<String, BTreeMap<String, u64>>,
    /// Stuck locks.
    pub stuck: u64,
    /// The locks (only the stuck ones with `--stuck`), by class, then key.
    pub locks: Vec<Found>,
}

impl ScanReport {
    /// Human-readable lines: the totals, the counts per class, then each lock.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "scan of {}, pattern {}: {} keys on {} server(s) in {}",
            self.target,
            self.pattern,
            self.keys_scanned,
            self.servers.len(),
            duration::show(Duration::from_millis(self.elapsed_ms))
        );
        let _ = writeln!(
            out,
            "calls       {} SCAN, {} read pipelines ({} commands), {} inspections \
             (--count {}, at most {} calls a second per server)",
            self.scan_calls,
            self.read_pipelines,
            self.read_commands,
            self.inspections,
            self.count,
            self.rate
        );
        for class in Class::ALL {
            let count = self.counts.get(class.name()).copied().unwrap_or(0);
            let states = self
                .states
                .get(class.name())
                .map(|s| {
                    s.iter()
                        .map(|(state, n)| format!("{state} {n}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .unwrap_or_default();
            let line = format!("{:<12}{count:>8}  {states}", class.name());
            let _ = writeln!(out, "{}", line.trim_end());
        }
        let other = self.counts.get("other").copied().unwrap_or(0);
        let _ = writeln!(out, "{:<12}{other:>8}  left out (user data)", "other");
        let _ = writeln!(out, "{:<12}{:>8}", "stuck", self.stuck);
        if !self.locks.is_empty() {
            out.push('\n');
        }
        for found in &self.locks {
            let _ = writeln!(
                out,
                "{:<12} {:<12} {}",
                found.class.name(),
                found.state,
                found.line
            );
            if let (Some(because), Some(clear)) = (&found.stuck_because, &found.clear) {
                let _ = writeln!(out, "  stuck: {because}");
                let _ = writeln!(out, "  clear: {clear}");
            }
        }
        out
    }
}

/// What every server's scan shares.
#[derive(Debug)]
struct Plan {
    pattern: String,
    count: u32,
    rate: u32,
    stale_after: Duration,
    /// The connection flags of the clearing commands.
    conn: String,
}

/// One server to scan.
#[derive(Debug)]
struct Node {
    /// `host:port`.
    label: String,
    client: redis::Client,
}

/// At most `rate` ticks a second.
#[derive(Debug)]
struct Pacer {
    every: Duration,
    next: Instant,
}

impl Pacer {
    fn new(rate: u32) -> Self {
        Pacer {
            every: Duration::from_secs(1) / rate.max(1),
            next: Instant::now(),
        }
    }

    async fn tick(&mut self) {
        tokio::time::sleep_until(self.next).await;
        self.next = Instant::now().max(self.next) + self.every;
    }
}

fn timeout_error(what: &str) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!("{what}: no reply within {CALL_TIMEOUT:?}"),
    )
}

/// `query` bounded by [`CALL_TIMEOUT`].
async fn bounded<T>(
    what: &str,
    query: impl Future<Output = redis::RedisResult<T>>,
) -> tairlock::Result<T> {
    match tokio::time::timeout(CALL_TIMEOUT, query).await {
        Ok(result) => Ok(result?),
        Err(_) => Err(timeout_error(what)),
    }
}

/// The server's `TIME`, ms since the epoch.
async fn server_ms(con: &mut redis::aio::MultiplexedConnection) -> tairlock::Result<u64> {
    let (secs, micros): (u64, u64) = bounded("TIME", redis::cmd("TIME").query_async(con)).await?;
    Ok(tairlock::store::server_time(secs, micros)?.as_millis() as u64)
}

fn text(value: &redis::Value) -> Option<String> {
    match value {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::VerbatimString { text, .. } => Some(text.clone()),
        redis::Value::Okay => Some("OK".to_owned()),
        _ => None,
    }
}

fn int(value: &redis::Value) -> Option<i64> {
    match value {
        redis::Value::Int(i) => Some(*i),
        other => text(other)?.parse().ok(),
    }
}

fn score(value: &redis::Value) -> Option<f64> {
    match value {
        redis::Value::Double(d) => Some(*d),
        other => text(other)?.parse().ok(),
    }
}

/// Pairs of a flat array (RESP2) or of an array of pairs / a map (RESP3).
fn pairs(value: &redis::Value) -> Vec<(&redis::Value, &redis::Value)> {
    match value {
        redis::Value::Array(items)
            if items
                .iter()
                .all(|i| matches!(i, redis::Value::Array(p) if p.len() == 2)) =>
        {
            items
                .iter()
                .filter_map(|i| match i {
                    redis::Value::Array(p) => Some((&p[0], &p[1])),
                    _ => None,
                })
                .collect()
        }
        redis::Value::Array(items) => items
            .chunks(2)
            .filter(|c| c.len() == 2)
            .map(|c| (&c[0], &c[1]))
            .collect(),
        redis::Value::Map(items) => items.iter().map(|(k, v)| (k, v)).collect(),
        _ => Vec::new(),
    }
}

/// The sample a second-pipeline reply makes, by the type the first one reported.
fn sample(key_type: &str, replies: &[redis::Value]) -> Option<Sample> {
    match key_type {
        "string" => match replies.first()? {
            redis::Value::BulkString(b) => Some(Sample::String(b.clone())),
            redis::Value::Nil => Some(Sample::String(Vec::new())),
            _ => None,
        },
        "zset" => Some(Sample::Zset {
            len: int(replies.first()?)?.max(0) as u64,
            members: pairs(replies.get(1)?)
                .into_iter()
                .filter_map(|(m, s)| Some((text(m)?, score(s)?)))
                .collect(),
        }),
        "hash" => {
            let redis::Value::Array(scan) = replies.get(1)? else {
                return None;
            };
            Some(Sample::Hash {
                len: int(replies.first()?)?.max(0) as u64,
                fields: pairs(scan.get(1)?)
                    .into_iter()
                    .filter_map(|(f, v)| Some((text(f)?, text(v)?)))
                    .collect(),
            })
        }
        _ => None,
    }
}

/// One server's scan: its report and the locks found.
async fn scan_server<S: Store>(
    store: S,
    node: Node,
    plan: Arc<Plan>,
) -> tairlock::Result<(ServerReport, Vec<Found>)> {
    let start = Instant::now();
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(CALL_TIMEOUT))
        .set_response_timeout(Some(CALL_TIMEOUT));
    let mut con = node
        .client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| {
            let e = Error::from(e);
            Error::new(
                e.kind(),
                format!("cannot connect to {}: {}", node.label, e.message()),
            )
        })?;
    // Reads that are not accesses, where the server has it (Redis 7.2+, Valkey); older servers
    // refuse, and the reads are the same.
    let _: redis::RedisResult<redis::Value> = redis::cmd("CLIENT")
        .arg("NO-TOUCH")
        .arg("ON")
        .query_async(&mut con)
        .await;
    let mut report = ServerReport {
        server: node.label.clone(),
        ..ServerReport::default()
    };
    let mut pacer = Pacer::new(plan.rate);
    let mut collector = Collector::default();
    let mut cursor = String::from("0");
    loop {
        pacer.tick().await;
        let (next, keys): (String, Vec<Vec<u8>>) = bounded(
            "SCAN",
            redis::cmd("SCAN")
                .arg(&cursor)
                .arg("MATCH")
                .arg(&plan.pattern)
                .arg("COUNT")
                .arg(plan.count)
                .query_async(&mut con),
        )
        .await?;
        report.scan_calls += 1;
        report.keys_scanned += keys.len() as u64;
        read_keys(&mut con, keys, &mut collector, &mut report).await?;
        if next == "0" {
            break;
        }
        cursor = next;
    }
    let (mut items, other) = collector.finish();
    report.other += other;
    complete_queues(&mut con, &mut items, &mut report).await?;
    let mut found = Vec::new();
    let mut items = items.into_iter().peekable();
    while items.peek().is_some() {
        pacer.tick().await;
        let judge = Arc::new(Judge {
            now_ms: server_ms(&mut con).await?,
            stale_after: plan.stale_after,
            conn: plan.conn.clone(),
            server: node.label.clone(),
        });
        let mut batch = JoinSet::new();
        for item in items.by_ref().take(plan.count as usize) {
            let (store, judge) = (store.clone(), judge.clone());
            batch.spawn(async move { found::read(&store, item, &judge).await });
            report.inspections += 1;
        }
        report.inspect_batches += 1;
        while let Some(done) = batch.join_next().await {
            match done.map_err(|e| Error::new(ErrorKind::Server, e.to_string()))? {
                Ok(Some(lock)) => found.push(lock),
                Ok(None) => report.vanished += 1,
                Err(e) => return Err(e),
            }
        }
    }
    report.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok((report, found))
}

/// Read the keys a SCAN call returned into `collector`.
async fn read_keys(
    con: &mut redis::aio::MultiplexedConnection,
    keys: Vec<Vec<u8>>,
    collector: &mut Collector,
    report: &mut ServerReport,
) -> tairlock::Result<()> {
    // A name that is not UTF-8 is no lock's: every kind names its keys with text.
    let mut names = Vec::with_capacity(keys.len());
    for key in keys {
        match String::from_utf8(key) {
            Ok(name) => names.push(name),
            Err(_) => report.other += 1,
        }
    }
    let (facts, unread) = read_facts(con, names, report).await?;
    report.skipped += unread;
    for facts in facts {
        collector.add(facts);
    }
    Ok(())
}

/// Read the other key of every queue the scan saw one key of (a PATTERN matched only one), so
/// that each queue is judged whole.
async fn complete_queues(
    con: &mut redis::aio::MultiplexedConnection,
    items: &mut [Item],
    report: &mut ServerReport,
) -> tairlock::Result<()> {
    let missing: Vec<String> = items.iter().filter_map(|i| i.queue()?.missing()).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let (facts, _) = read_facts(con, missing, report).await?;
    for item in items {
        if let Some(queue) = item.queue_mut() {
            queue.complete(&facts);
        }
    }
    Ok(())
}

/// Read the type, TTL and a value sample of each key, in two pipelines: the facts of the keys
/// read, and how many could not be (gone since, changed type or moved meanwhile).
async fn read_facts(
    con: &mut redis::aio::MultiplexedConnection,
    names: Vec<String>,
    report: &mut ServerReport,
) -> tairlock::Result<(Vec<Facts>, u64)> {
    let mut read = Vec::with_capacity(names.len());
    let mut unread = 0;
    if names.is_empty() {
        return Ok((read, unread));
    }
    let mut first = redis::pipe();
    first.ignore_errors();
    for name in &names {
        first.cmd("TYPE").arg(name).cmd("PTTL").arg(name);
    }
    let replies: Vec<redis::RedisResult<redis::Value>> =
        bounded("TYPE/PTTL pipeline", first.query_async(con)).await?;
    report.read_pipelines += 1;
    report.read_commands += first.len() as u64;
    let mut second = redis::pipe();
    second.ignore_errors();
    // (name, type, ttl, index of its first reply in the second pipeline, how many)
    let mut plan = Vec::with_capacity(names.len());
    let mut at = 0;
    for (i, name) in names.into_iter().enumerate() {
        let key_type = replies
            .get(2 * i)
            .and_then(|r| r.as_ref().ok())
            .and_then(text);
        let ttl = replies
            .get(2 * i + 1)
            .and_then(|r| r.as_ref().ok())
            .and_then(int);
        let (Some(key_type), Some(ttl)) = (key_type, ttl) else {
            unread += 1;
            continue;
        };
        if key_type == "none" {
            // Gone since the SCAN (expired or deleted).
            unread += 1;
            continue;
        }
        let n = if !sampled(&name, &key_type) {
            0
        } else if key_type == "string" {
            second
                .cmd("GETRANGE")
                .arg(&name)
                .arg(0)
                .arg(STRING_SAMPLE - 1);
            1
        } else if key_type == "zset" {
            second
                .cmd("ZCARD")
                .arg(&name)
                .cmd("ZRANGE")
                .arg(&name)
                .arg(0)
                .arg(COLLECTION_SAMPLE - 1)
                .arg("WITHSCORES");
            2
        } else {
            second
                .cmd("HLEN")
                .arg(&name)
                .cmd("HSCAN")
                .arg(&name)
                .arg(0)
                .arg("COUNT")
                .arg(COLLECTION_SAMPLE);
            2
        };
        plan.push((name, key_type, Ttl::from_pttl(ttl), at, n));
        at += n;
    }
    let samples: Vec<redis::RedisResult<redis::Value>> = if second.is_empty() {
        Vec::new()
    } else {
        report.read_pipelines += 1;
        report.read_commands += second.len() as u64;
        bounded("sample pipeline", second.query_async(con)).await?
    };
    for (key, key_type, ttl, at, n) in plan {
        let sample = if n == 0 {
            Sample::None
        } else {
            let replies: Option<Vec<redis::Value>> = samples
                .get(at..at + n)
                .and_then(|r| r.iter().map(|r| r.as_ref().ok().cloned()).collect());
            match replies.and_then(|r| sample(&key_type, &r)) {
                Some(sample) => sample,
                None => {
                    // Changed type, or moved, between the two pipelines.
                    unread += 1;
                    continue;
                }
            }
        };
        read.push(Facts {
            key,
            key_type,
            ttl,
            sample,
        });
    }
    Ok((read, unread))
}

/// `host:port` of a URL, without its user info.
fn host_port(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    rest.split(['/', '?', '#'])
        .next()
        .unwrap_or(rest)
        .to_owned()
}

/// `url` with its user info replaced by `***`, for the clearing commands.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// Every master of the cluster, from `CLUSTER SLOTS` (a node the cluster client picks).
async fn masters(store: &ClusterStore) -> tairlock::Result<Vec<Node>> {
    let reply: redis::Value = store.command(redis::cmd("CLUSTER").arg("SLOTS")).await?;
    let bad = || {
        Error::new(
            ErrorKind::Server,
            "unexpected reply to CLUSTER SLOTS (is this a Redis Cluster?)",
        )
    };
    let redis::Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let seed_host = store
        .urls()
        .first()
        .map(|u| host_port(u))
        .and_then(|hp| hp.rsplit_once(':').map(|(h, _)| h.to_owned()))
        .unwrap_or_default();
    let mut nodes: Vec<Node> = Vec::new();
    for range in ranges {
        let redis::Value::Array(items) = range else {
            return Err(bad());
        };
        let Some(redis::Value::Array(master)) = items.get(2) else {
            return Err(bad());
        };
        let host = master.first().and_then(text).unwrap_or_default();
        let host = if host == "?" { String::new() } else { host };
        let port = master
            .get(1)
            .and_then(int)
            .and_then(|p| u16::try_from(p).ok())
            .ok_or_else(bad)?;
        let label = format!(
            "{}:{port}",
            if host.is_empty() { &seed_host } else { &host }
        );
        if !nodes.iter().any(|n| n.label == label) {
            nodes.push(Node {
                label,
                client: store.node_client(&host, port)?,
            });
        }
    }
    Ok(nodes)
}

/// Scan every server of `target`.
async fn scan(target: &Target, plan: Plan) -> tairlock::Result<ScanReport> {
    match &target.endpoint {
        Endpoint::Memory => Err(Error::new(
            ErrorKind::InvalidInput,
            "the embedded store has no keyspace to scan from outside its process",
        )),
        Endpoint::Cluster(_) => {
            let store = target.connect_cluster().await?;
            let nodes = masters(&store).await?;
            // An optimisation only: without it, the first inspections of a batch would each
            // load their script; a refusal shows in the inspections themselves.
            let _ = store.preload(&INSPECT_SCRIPTS).await;
            scan_servers(store, nodes, target, plan).await
        }
        Endpoint::Redis(_) | Endpoint::Sentinel { .. } => {
            let store = target.connect_redis().await?;
            // As for a cluster.
            let _ = store.preload(&INSPECT_SCRIPTS).await;
            let node = Node {
                label: host_port(&store.url()),
                client: store.client(),
            };
            scan_servers(store, vec![node], target, plan).await
        }
    }
}

async fn scan_servers<S: Store>(
    store: S,
    nodes: Vec<Node>,
    target: &Target,
    plan: Plan,
) -> tairlock::Result<ScanReport> {
    let start = Instant::now();
    let plan = Arc::new(plan);
    let mut servers = JoinSet::new();
    for node in nodes {
        servers.spawn(scan_server(store.clone(), node, plan.clone()));
    }
    let mut parts = Vec::new();
    while let Some(done) = servers.join_next().await {
        parts.push(done.map_err(|e| Error::new(ErrorKind::Server, e.to_string()))??);
    }
    parts.sort_by(|a, b| a.0.server.cmp(&b.0.server));
    let mut report = ScanReport {
        target: redact(&target.describe()),
        pattern: plan.pattern.clone(),
        count: plan.count,
        rate: plan.rate,
        stale_after_ms: plan.stale_after.as_millis() as u64,
        stuck_only: false,
        keys_scanned: 0,
        scan_calls: 0,
        read_pipelines: 0,
        read_commands: 0,
        inspections: 0,
        elapsed_ms: 0,
        servers: Vec::new(),
        counts: BTreeMap::new(),
        states: BTreeMap::new(),
        stuck: 0,
        locks: Vec::new(),
    };
    for class in Class::ALL {
        report.counts.insert(class.name().to_owned(), 0);
    }
    let mut other = 0;
    for (server, found) in parts {
        report.keys_scanned += server.keys_scanned;
        report.scan_calls += server.scan_calls;
        report.read_pipelines += server.read_pipelines;
        report.read_commands += server.read_commands;
        report.inspections += server.inspections;
        other += server.other;
        report.servers.push(server);
        report.locks.extend(found);
    }
    report.counts.insert("other".to_owned(), other);
    for lock in &report.locks {
        *report
            .counts
            .entry(lock.class.name().to_owned())
            .or_default() += 1;
        *report
            .states
            .entry(lock.class.name().to_owned())
            .or_default()
            .entry(lock.state.clone())
            .or_default() += 1;
        report.stuck += u64::from(lock.stuck);
    }
    report
        .locks
        .sort_by(|a, b| (a.class, &a.key, &a.server).cmp(&(b.class, &b.key, &b.server)));
    report.elapsed_ms = start.elapsed().as_millis() as u64;
    Ok(report)
}

/// The connection flags of the clearing commands: the scan's own, URLs without their user
/// info.
fn conn_flags(args: &ScanArgs) -> String {
    let mut flags = String::new();
    if !args.cluster.is_empty() {
        let urls: Vec<String> = args.cluster.iter().map(|u| redact(u)).collect();
        let _ = write!(flags, " --cluster {}", sh_quote(&urls.join(",")));
    } else if !args.conn.sentinel_given() {
        let _ = write!(flags, " --redis {}", sh_quote(&redact(&args.redis)));
    }
    for flag in args.conn.flags() {
        flags.push(' ');
        flags.push_str(&sh_quote(&redact(&flag)));
    }
    flags
}

/// Run `tairlock scan`: the report (or JSON) on stdout.
pub fn command(args: ScanArgs) -> ExitCode {
    let target = match args.conn.target(
        Some(&args.redis),
        &args.cluster,
        PubSubArg::Auto,
        &[("--cluster", !args.cluster.is_empty())],
    ) {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    if args.pattern.is_empty() {
        return usage("the pattern is empty (use '*' for every key)");
    }
    let plan = Plan {
        pattern: args.pattern.clone(),
        count: args.count,
        rate: args.rate,
        stale_after: args.stale_after,
        conn: conn_flags(&args),
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    match rt.block_on(scan(&target, plan)) {
        Ok(mut report) => {
            report.stuck_only = args.stuck;
            if args.stuck {
                report.locks.retain(|lock| lock.stuck);
            }
            if args.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialise")
                );
            } else {
                print!("{}", report.text());
            }
            if args.stuck && report.stuck > 0 {
                Exit::Stuck.into()
            } else {
                ExitCode::SUCCESS
            }
        }
        Err(e) => {
            eprintln!("tairlock: {e}");
            Exit::Store.into()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{host_port, redact};

    #[test]
    fn urls_show_their_server_without_credentials() {
        assert_eq!(host_port("redis://u:pw@10.0.0.1:7000/0"), "10.0.0.1:7000");
        assert_eq!(host_port("rediss://h:6380"), "h:6380");
        assert_eq!(redact("redis://u:pw@h:1"), "redis://***@h:1");
        assert_eq!(redact("redis://h:1"), "redis://h:1");
    }
}
