//! `tairlock bench`'s forced-handoff scenarios and their floors (issue #13), the built binary
//! against a real `redis-server`: each row is measured, and each says what it costs in commands.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};

use support::RedisServer;

/// `tairlock bench --json --redis URL --duration 300ms --scenario …` for `scenarios`, as rows.
fn bench(server: &RedisServer, scenarios: &[&str]) -> Vec<serde_json::Value> {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tairlock"));
    cmd.args([
        "bench",
        "--json",
        "--redis",
        &server.url(),
        "--duration",
        "300ms",
    ])
    .stdin(Stdio::null());
    for scenario in scenarios {
        cmd.args(["--scenario", scenario]);
    }
    let out = cmd.output().expect("tairlock runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        out.status.code(),
        Some(0),
        "stderr:\n{stderr}\nserver log:\n{}",
        server.log()
    );
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON rows");
    rows.as_array().expect("an array of rows").clone()
}

fn row<'a>(rows: &'a [serde_json::Value], scenario: &str) -> &'a serde_json::Value {
    rows.iter()
        .find(|r| r["scenario"] == scenario)
        .unwrap_or_else(|| panic!("no {scenario} row in {rows:?}"))
}

/// The idle floors are one measured round trip each, on a bare connection; the handoffs are
/// measured, and the fair one-hop handoff sends fewer commands than the default mode's (no
/// attempt after the announcement).
#[test]
fn the_handoff_rows_and_their_idle_floors_are_measured() {
    let server = RedisServer::start();
    let rows = bench(
        &server,
        &["idle-ping", "idle-release", "handoff", "handoff-fair"],
    );
    assert_eq!(rows.len(), 4, "{rows:?}");
    for scenario in ["idle-ping", "idle-release"] {
        let r = row(&rows, scenario);
        assert!(r["p50_us"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
        assert_eq!(r["commands_per_op"].as_f64(), Some(1.0), "{r}");
        assert!(
            r["note"]
                .as_str()
                .unwrap_or("")
                .contains("after 5-25 ms idle"),
            "{r}"
        );
    }
    let default = row(&rows, "handoff");
    let fair = row(&rows, "handoff-fair");
    for r in [default, fair] {
        assert!(r["p50_us"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    let commands = |r: &serde_json::Value| r["commands_per_op"].as_f64().expect("counted");
    assert!(
        commands(fair) < commands(default),
        "fair {fair} against default {default}"
    );
}

/// An unknown scenario is a usage error that names the known ones, the new floors among them.
#[test]
fn an_unknown_scenario_lists_the_idle_floors() {
    let server = RedisServer::start();
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["bench", "--redis", &server.url(), "--scenario", "idle-pong"])
        .stdin(Stdio::null())
        .output()
        .expect("tairlock runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("idle-ping") && stderr.contains("idle-release"),
        "{stderr}"
    );
}
