//! `tairlock bench --scenario many-leases`, the built binary against a real `redis-server`:
//! many guards held at once and renewed in batches, the row with its figures.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};

use support::RedisServer;

/// 500 guards of 600 ms held 1.5 s (several renewal intervals): none lost, renewals counted,
/// the server's time per renewed lease read from `INFO commandstats`, and the client's CPU and
/// memory reported; the row carries exactly the figures of the scenario.
#[test]
fn many_leases_reports_its_figures() {
    let server = RedisServer::start();
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args([
            "bench",
            "--json",
            "--redis",
            &server.url(),
            "--scenario",
            "many-leases",
            "--leases",
            "500",
            "--lease",
            "600ms",
            "--hold",
            "1500ms",
        ])
        .stdin(Stdio::null())
        .output()
        .expect("tairlock runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "stderr:\n{stderr}");
    let rows: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON rows");
    let rows = rows.as_array().expect("an array of rows");
    assert_eq!(rows.len(), 1, "only the scenario named: {rows:?}");
    let r = &rows[0];
    assert_eq!(r["scenario"], "many-leases");
    assert_eq!(r["leases"], 500, "{r}");
    assert_eq!(r["leases_lost"], 0, "{r}");
    // 500 leases renewed every 200 ms for 1.5 s: about 2,500 a second.
    let renewals = r["renewals_per_sec"].as_f64().unwrap();
    assert!((1_000.0..5_000.0).contains(&renewals), "{r}");
    assert!(r["server_us_per_renewal"].as_f64().unwrap() > 0.0, "{r}");
    assert!(r["client_cpu_pct"].as_f64().unwrap() >= 0.0, "{r}");
    assert!(r["client_bytes_per_guard"].as_f64().unwrap() >= 0.0, "{r}");
    for field in [
        "leases",
        "leases_lost",
        "renewals_per_sec",
        "server_us_per_renewal",
        "client_cpu_pct",
        "client_bytes_per_guard",
    ] {
        assert!(r.get(field).is_some(), "{field} missing: {r}");
    }
}

/// Bad settings are refused before anything is sent.
#[test]
fn many_leases_refuses_zero_leases() {
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["bench", "--scenario", "many-leases", "--leases", "0"])
        .stdin(Stdio::null())
        .output()
        .expect("tairlock runs");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("--leases"));
}
