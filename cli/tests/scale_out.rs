//! `tairlock race`, `bench` and `inspect` on scaled-out setups the tests start themselves: a
//! real 3-master Redis Cluster (`--cluster`) and 3 independent servers (`--redlock`).

#[path = "../../tests/support/server.rs"]
#[allow(dead_code, unreachable_pub)]
mod server;

#[path = "../../tests/support/cluster.rs"]
#[allow(dead_code, unreachable_pub)]
mod cluster;

use std::process::Command;
use std::time::Duration;

use serde_json::Value;
use tairlock::{Acquire, ClusterStore, ExpireLock};

use self::cluster::RedisCluster;
use self::server::RedisServer;

/// Run the binary; (exit code, stdout parsed as JSON, stderr).
fn tairlock(args: &[&str]) -> (i32, Value, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(args)
        .output()
        .expect("run tairlock");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let json: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "tairlock {args:?} did not print JSON ({e}):\n{}\n{stderr}",
            String::from_utf8_lossy(&out.stdout)
        )
    });
    (out.status.code().unwrap_or(-1), json, stderr)
}

fn count(row: &Value, field: &str) -> u64 {
    row[field]
        .as_u64()
        .unwrap_or_else(|| panic!("{field} missing in {row}"))
}

#[test]
fn race_bench_and_inspect_run_on_a_cluster() {
    let cluster = RedisCluster::start(3);
    let urls = cluster.urls().join(",");

    // Race: the scripted rows and legacy-watch (WATCH on the slot's master) hold their zeros.
    let (code, rows, stderr) = tairlock(&[
        "race",
        "--json",
        "--cluster",
        &urls,
        "--trials",
        "1",
        "--duration",
        "1s",
        "--scenario",
        "short-stalls",
        "--scenario",
        "crashes",
        "--algorithm",
        "expire-lock",
        "--algorithm",
        "rw-scripted",
        "--algorithm",
        "legacy-watch",
    ]);
    assert_eq!(code, 0, "race exit code; stderr:\n{stderr}");
    assert!(
        !stderr.contains("skipped"),
        "nothing is skipped on a cluster:\n{stderr}"
    );
    let rows = rows.as_array().expect("array");
    assert_eq!(rows.len(), 6, "3 algorithms x 2 scenarios: {rows:?}");
    let watch_rows: Vec<&Value> = rows
        .iter()
        .filter(|r| r["algorithm"] == "legacy-watch")
        .collect();
    assert_eq!(
        watch_rows.len(),
        2,
        "legacy-watch runs on a cluster: {rows:?}"
    );
    // Each legacy-watch grant is one EXEC on a master (the other rows send none).
    let grants: u64 = watch_rows.iter().map(|r| count(r, "acquisitions")).sum();
    let execs: u64 = (0..3).map(|n| cluster.command_calls(n, "exec")).sum();
    assert!(execs >= grants, "{execs} EXECs for {grants} grants");
    for row in rows {
        assert_eq!(row["store"], "cluster", "{row}");
        assert_eq!(row["verdict"], "ok", "{row}");
        assert!(count(row, "acquisitions") > 0, "{row}");
        assert_eq!(count(row, "foreign_deletions"), 0, "{row}");
        assert_eq!(count(row, "stale_writes_accepted"), 0, "{row}");
        assert_eq!(count(row, "stuck_locks"), 0, "{row}");
        if row["scenario"] == "short-stalls" {
            // Not counting holders already past their lease (a loaded machine runs them late).
            assert_eq!(
                count(row, "overlaps") - count(row, "overlaps_past_lease"),
                0,
                "{row}"
            );
        }
    }

    // Bench: the floor and the expire-lock cycle, through the cluster client.
    let (code, rows, stderr) = tairlock(&[
        "bench",
        "--json",
        "--cluster",
        &urls,
        "--duration",
        "200ms",
        "--scenario",
        "floor-cycle",
        "--scenario",
        "expire-lock-cycle",
    ]);
    assert_eq!(code, 0, "bench exit code; stderr:\n{stderr}");
    let rows = rows.as_array().expect("array");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in rows {
        assert_eq!(row["store"], "cluster", "{row}");
        assert!(row["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
    }
    assert!(rows[1]["ratio_to_floor"].as_f64().is_some(), "{rows:?}");

    // The handoff with each way of announcing releases: woken by the release message in both
    // (p50 far below the 1 s a missed message would cost here), and each uses its own command.
    for (pubsub, command) in [("sharded", "spublish"), ("classic", "publish")] {
        let before: u64 = (0..cluster.nodes.len())
            .map(|n| cluster.command_calls(n, command))
            .sum();
        let (code, rows, stderr) = tairlock(&[
            "bench",
            "--json",
            "--cluster",
            &urls,
            "--pubsub",
            pubsub,
            "--duration",
            "300ms",
            "--scenario",
            "contended-handoff",
        ]);
        assert_eq!(code, 0, "bench --pubsub {pubsub}; stderr:\n{stderr}");
        let row = &rows[0];
        assert!(row["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0, "{row}");
        let p50 = row["p50_us"].as_f64().unwrap_or(f64::MAX);
        assert!(
            p50 < 100_000.0,
            "--pubsub {pubsub}: handoff p50 {p50} µs: {row}"
        );
        let after: u64 = (0..cluster.nodes.len())
            .map(|n| cluster.command_calls(n, command))
            .sum();
        assert!(after > before, "--pubsub {pubsub} sent no {command}");
        eprintln!("contended-handoff on the cluster, {pubsub} pub/sub: {row}");
    }
    // `--pubsub` is a cluster setting.
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["bench", "--pubsub", "classic", "--scenario", "ping"])
        .output()
        .expect("run tairlock");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--pubsub without --cluster: {stderr}"
    );
    assert!(stderr.contains("--cluster"), "{stderr}");

    // Inspect: a lock held through the library shows its holder and token.
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let lease = rt.block_on(async {
        let store = ClusterStore::connect(&cluster.urls())
            .await
            .expect("connect");
        let locks = ExpireLock::new(store);
        match locks
            .expire_lock("orders:42", Duration::from_secs(60))
            .await
            .expect("acquire")
        {
            Acquire::Acquired(lease) => lease,
            other => panic!("not acquired: {other:?}"),
        }
    });
    let (code, report, stderr) = tairlock(&["inspect", "orders:42", "--json", "--cluster", &urls]);
    assert_eq!(code, 0, "inspect exit code; stderr:\n{stderr}");
    assert_eq!(report["state"], "held", "{report}");
    assert_eq!(report["fence"].as_u64(), Some(lease.fence()), "{report}");
    assert!(
        report["remaining_ms"].as_u64().unwrap_or(0) > 50_000,
        "{report}"
    );
    let (code, report, stderr) = tairlock(&["inspect", "free", "--json", "--cluster", &urls]);
    assert_eq!(code, 0, "inspect exit code; stderr:\n{stderr}");
    assert_ne!(report["state"], "held", "{report}");
}

#[test]
fn redlock_races_and_benches_over_three_servers() {
    let servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let urls = servers
        .iter()
        .map(RedisServer::url)
        .collect::<Vec<_>>()
        .join(",");

    // Race: no overlaps under short stalls, no foreign deletions or stuck locks; stale writes
    // are allowed (no fencing token) and the expectation says so.
    let (code, rows, stderr) = tairlock(&[
        "race",
        "--json",
        "--redlock",
        &urls,
        "--trials",
        "1",
        "--duration",
        "1s",
        "--scenario",
        "short-stalls",
        "--scenario",
        "long-stalls",
    ]);
    assert_eq!(code, 0, "race exit code; stderr:\n{stderr}");
    let rows = rows.as_array().expect("array");
    assert_eq!(rows.len(), 2, "{rows:?}");
    for row in rows {
        assert_eq!(row["algorithm"], "redlock", "{row}");
        assert_eq!(row["expectation"], "unfenced", "{row}");
        assert_eq!(row["verdict"], "ok", "{row}");
        assert!(count(row, "acquisitions") > 0, "{row}");
        assert_eq!(count(row, "foreign_deletions"), 0, "{row}");
        assert_eq!(count(row, "stuck_locks"), 0, "{row}");
        if row["scenario"] == "short-stalls" {
            // Not counting holders already past their lease (a loaded machine runs them late).
            assert_eq!(
                count(row, "overlaps") - count(row, "overlaps_past_lease"),
                0,
                "{row}"
            );
        }
    }

    // Bench: the floor on the first server, then the quorum cycle.
    let (code, rows, stderr) =
        tairlock(&["bench", "--json", "--redlock", &urls, "--duration", "200ms"]);
    assert_eq!(code, 0, "bench exit code; stderr:\n{stderr}");
    let rows = rows.as_array().expect("array");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["scenario"].as_str()).collect();
    assert_eq!(names, ["floor-cycle", "redlock-cycle"], "{rows:?}");
    let cycle = &rows[1];
    assert!(
        cycle["ops_per_sec"].as_f64().unwrap_or(0.0) > 0.0,
        "{cycle}"
    );
    assert!(cycle["ratio_to_floor"].as_f64().is_some(), "{cycle}");
    assert_eq!(cycle["note"], "3 servers, quorum 2", "{cycle}");

    // A scenario --redlock cannot run is a usage error.
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["bench", "--redlock", &urls, "--scenario", "ping"])
        .output()
        .expect("run tairlock");
    assert_eq!(out.status.code(), Some(2));
}
