//! `tairlock inspect KEY` on an expire lock whose key has lost its time to live (`PERSIST`, a
//! restore without one): the report says the key has no expiry (JSON `"no_expiry": true`, the
//! text a line of its own), and a lock with a TTL says the opposite. The built binary against a
//! real server.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output};

use serde_json::Value;
use support::RedisServer;

const KEY: &str = "tairlock:{job}";
const LEASE: &str = "tl1:1700000000123:42:00ff00ff";

fn inspect(server: &RedisServer, json: bool) -> Output {
    let url = server.url();
    let mut args = vec!["inspect", "job", "--redis", &url];
    if json {
        args.push("--json");
    }
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(&args)
        .env_remove("TAIRLOCK_REDIS")
        .output()
        .unwrap()
}

fn report(server: &RedisServer) -> Value {
    let out = inspect(server, true);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{text}");
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("no JSON ({e}): {text:?}"))
}

#[test]
fn a_lock_key_without_a_ttl_is_reported_as_having_no_expiry() {
    let server = RedisServer::start();
    server.cli(&["SET", KEY, LEASE, "PX", "60000"]);
    let json = report(&server);
    assert_eq!(json["state"], "held", "{json}");
    assert_eq!(json["no_expiry"], false, "{json}");
    assert!(json["remaining_ms"].as_u64().is_some(), "{json}");

    assert_eq!(server.cli(&["PERSIST", KEY]), "1");
    let json = report(&server);
    assert_eq!(json["state"], "held", "{json}");
    assert_eq!(json["no_expiry"], true, "{json}");
    assert_eq!(json["remaining_ms"], Value::Null, "{json}");
    assert_eq!(json["fence"], 42, "the existing fields stay: {json}");

    let out = inspect(&server, false);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("no expiry"), "{text}");
}
