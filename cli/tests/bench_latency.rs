//! `tairlock bench --latency D`: every scenario, the floor included, through a proxy adding D each
//! way; the built binary against a real `redis-server`.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output, Stdio};

use support::RedisServer;

fn tairlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("tairlock runs")
}

fn p50(rows: &[serde_json::Value], scenario: &str) -> f64 {
    let row = rows
        .iter()
        .find(|r| r["scenario"] == scenario)
        .unwrap_or_else(|| panic!("no {scenario} row in {rows:?}"));
    row["p50_us"].as_f64().expect("a measured p50")
}

/// With 2 ms each way, a round trip takes at least 4 ms: the ping row's, and each of the floor
/// cycle's two; every row says the latency it crossed.
#[test]
fn a_latency_of_2ms_each_way_makes_every_round_trip_at_least_4ms() {
    let server = RedisServer::start();
    let url = server.url();
    let out = tairlock(&[
        "bench",
        "--json",
        "--redis",
        &url,
        "--duration",
        "300ms",
        "--latency",
        "2ms",
        "--scenario",
        "floor-cycle",
        "--scenario",
        "ping",
        "--scenario",
        "guard-cycle-fair",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    assert!(
        stderr.contains("through a proxy adding 2ms each way"),
        "{stderr}"
    );
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("JSON rows");
    assert_eq!(rows.len(), 3, "{rows:?}");
    for row in &rows {
        assert_eq!(row["one_way_latency_us"].as_f64(), Some(2000.0), "{row}");
    }
    assert!(p50(&rows, "ping") >= 4000.0, "{rows:?}");
    // Two round trips: SET NX PX, then the compare-and-delete.
    assert!(p50(&rows, "floor-cycle") >= 2.0 * 4000.0, "{rows:?}");
    assert!(p50(&rows, "guard-cycle-fair") >= 2.0 * 4000.0, "{rows:?}");
    // Judged against the floor through the same proxy: two round trips each, so near 1.
    let ratio = rows[2]["ratio_to_floor"].as_f64().expect("a ratio");
    assert!((0.8..1.5).contains(&ratio), "{rows:?}");
}

/// A latency that is no duration, or one where there is no single server to put a proxy in
/// front of, is a usage error (exit 2) that says why, and nothing runs.
#[test]
fn a_bad_latency_is_a_usage_error() {
    let server = RedisServer::start();
    let url = server.url();
    for (args, expect) in [
        (vec!["--redis", url.as_str(), "--latency", "fast"], "fast"),
        (vec!["--redis", url.as_str(), "--latency=-1ms"], "-1ms"),
        (vec!["--latency", "1ms"], "--redis"),
        (
            vec!["--redis", "rediss://127.0.0.1:1", "--latency", "1ms"],
            "redis://",
        ),
    ] {
        let mut all = vec!["bench", "--scenario", "ping", "--duration", "100ms"];
        all.extend(args.iter().copied());
        let out = tairlock(&all);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{all:?}: {stderr}");
        assert!(stderr.contains(expect), "{all:?}: {stderr}");
        assert!(out.stdout.is_empty(), "{all:?}: nothing ran");
    }
}
