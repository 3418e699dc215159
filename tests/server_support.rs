//! The rows of the server-support table (`docs/deployment.md`) that differ between the two
//! servers the suite runs on (Redis 7.0 and Valkey 9.1), checked on the server of this run:
//! `WAITAOF` for replica acknowledgements, `DELIFEQ` for the release, what `INFO server` reports.

mod support;

use std::time::{Duration, Instant};

use support::RedisServer;
use tairlock::scripts::EXPIRE_LOCK;
use tairlock::store::{ReplicaStore, WaitFor};

/// A master and one replica with append-only persistence, its link up.
fn master_and_aof_replica() -> (RedisServer, RedisServer) {
    let master = RedisServer::start_with_args(&["--repl-diskless-sync-delay", "0"]);
    let port = master.port().to_string();
    let replica =
        RedisServer::start_with_args(&["--replicaof", "127.0.0.1", &port, "--appendonly", "yes"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let info = replica.cli(&["INFO", "replication"]);
        let persistence = replica.cli(&["INFO", "persistence"]);
        if info.contains("master_link_status:up")
            && persistence.contains("aof_rewrite_in_progress:0")
            && persistence.contains("aof_enabled:1")
        {
            break;
        }
        if Instant::now() > deadline {
            replica.fail("replica link and AOF not up within 15 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    (master, replica)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waitaof_is_served_by_valkey_and_refused_by_redis_7_0() {
    let (master, _replica) = master_and_aof_replica();
    let store = master.store().await;
    let keys = [
        "tairlock:{aof}".to_owned(),
        "tairlock:{aof}:fence".to_owned(),
    ];
    let args = [
        "30000".to_owned(),
        "nonce-aof".to_owned(),
        "60000".to_owned(),
    ];
    let wait = WaitFor::replicas(1, Duration::from_secs(5)).aof(true);
    let result = store.eval_wait(&EXPIRE_LOCK, &keys, &args, wait).await;
    if master.is_valkey() {
        // The replica may need a moment after its first sync before it fsyncs and acknowledges:
        // repeat with the same nonce (the lock script is idempotent for it) until it does.
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut result = result;
        loop {
            let (_, acks) = master.check(result, "WAITAOF on Valkey");
            if acks.replicas == 1 {
                break;
            }
            if Instant::now() > deadline {
                master.fail(format!("WAITAOF: {acks:?} after 15 s"));
            }
            result = store.eval_wait(&EXPIRE_LOCK, &keys, &args, wait).await;
        }
    } else {
        let err = match result {
            Ok(reply) => master.fail(format!("WAITAOF answered on Redis 7.0: {reply:?}")),
            Err(e) => e,
        };
        assert!(
            err.to_string()
                .to_ascii_lowercase()
                .contains("unknown command"),
            "[{}] {err}",
            master.label()
        );
    }
}

#[test]
fn the_server_reports_what_the_table_says() {
    let server = RedisServer::start();
    let info = server.cli(&["INFO", "server"]);
    let delifeq = server.cli(&["COMMAND", "INFO", "DELIFEQ"]);
    if server.is_valkey() {
        assert!(
            info.contains("valkey_version:9."),
            "[{}] {info}",
            server.label()
        );
        // Valkey reports a fixed Redis version for compatibility: never decide by it.
        assert!(
            info.contains("redis_version:7.2.4"),
            "[{}] {info}",
            server.label()
        );
        assert!(
            delifeq.starts_with("delifeq"),
            "[{}] {delifeq}",
            server.label()
        );
    } else {
        assert!(
            info.contains("redis_version:7."),
            "[{}] {info}",
            server.label()
        );
        // An unknown command: one nil entry.
        assert_eq!(delifeq, "", "[{}]", server.label());
    }
}
