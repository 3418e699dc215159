//! `tairlock inspect` of a legacy `SETNX`/`GETSET` key (`--legacy`, or detected), the built
//! binary against a real server.
//!
//! - A key a safe lock holds (`tairlock run --legacy --unit ms`): its timestamp, the expiry it
//!   encodes, the remaining time by the server's clock, the key's TTL and the holder's fencing
//!   token, in text and JSON, with the flag and detected without it.
//! - A key an original client wrote (seconds, no TTL): held, then past by the server's clock;
//!   no fencing token. A key with braces (no valid lock name) is still found.
//! - Bad input: a counter, a word or a hash under the key is an error (exit 4, as every inspect
//!   error); without the flag such a key is not taken for a legacy lock, and an expire lock of
//!   the same name wins over a timestamp under the bare name.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::until;
use serde_json::Value;
use support::RedisServer;

/// `tairlock inspect ARGS… --redis URL`.
fn inspect(server: &RedisServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .arg("inspect")
        .args(args)
        .args(["--redis", &server.url()])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `tairlock inspect ARGS… --json`, which must succeed: the JSON printed.
fn inspect_json(server: &RedisServer, args: &[&str]) -> Value {
    let out = inspect(server, &[args, &["--json"]].concat());
    assert!(out.status.success(), "inspect {args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "inspect {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

/// `tairlock inspect ARGS…` as text, which must succeed.
fn inspect_text(server: &RedisServer, args: &[&str]) -> String {
    let out = inspect(server, args);
    assert!(out.status.success(), "inspect {args:?}: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

fn ms(value: &Value) -> u64 {
    value
        .as_u64()
        .unwrap_or_else(|| panic!("{value} is not a number"))
}

#[test]
fn a_safe_legacy_lock_shows_its_expiry_ttl_and_fence() {
    let server = RedisServer::start();
    let mut holder = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["run", "lock.orderid", "--legacy", "--unit", "ms"])
        .args([
            "--ttl",
            "20s",
            "--redis",
            &server.url(),
            "--",
            "sleep",
            "60",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    until(Duration::from_secs(20), "the holder's lock", || {
        server.cli(&["EXISTS", "lock.orderid"]) == "1"
    });
    for args in [&["--legacy", "lock.orderid"][..], &["lock.orderid"]] {
        let json = inspect_json(&server, args);
        // Read after the inspection: a renewal may move the value in between, never the
        // fencing token.
        let value: u64 = server.cli(&["GET", "lock.orderid"]).parse().unwrap();
        let fence: u64 = server
            .cli(&["GET", "{lock.orderid}:fence"])
            .parse()
            .unwrap();
        assert_eq!(json["key"], "lock.orderid", "{args:?}: {json}");
        assert_eq!(json["state"], "held", "{json}");
        assert_eq!(json["unit"], "ms", "{json}");
        assert_eq!(json["expired"], false, "{json}");
        assert_eq!(json["written_by"], "safe", "{json}");
        let shown: u64 = json["value"].as_str().unwrap().parse().unwrap();
        assert!(shown <= value && value - shown < 20_000, "{json}");
        assert_eq!(ms(&json["expires_at_ms"]), shown + 1, "{json}");
        let remaining = ms(&json["remaining_ms"]);
        assert!(remaining > 0 && remaining <= 20_001, "{json}");
        // The server's clock, read after the value: the expiry is what is left of it.
        let sum = ms(&json["server_time_ms"]) + remaining;
        assert!(sum == shown || sum == shown + 1, "{json}");
        let drift = ms(&json["server_time_ms"]).abs_diff(now().as_millis() as u64);
        assert!(drift < 10_000, "server time {json}");
        let ttl = ms(&json["key_ttl_ms"]);
        assert!(ttl > 0 && ttl <= 20_001, "{json}");
        assert_eq!(json["fence_key"], "{lock.orderid}:fence", "{json}");
        assert_eq!(ms(&json["fence"]), fence, "{json}");
        assert_eq!(ms(&json["last_fence"]), fence, "{json}");
    }
    for args in [&["--legacy", "lock.orderid"][..], &["lock.orderid"]] {
        let text = inspect_text(&server, args);
        for line in [
            "legacy lock lock.orderid",
            "state       held",
            "(a Unix timestamp in milliseconds)",
            "written by  a safe lock",
            "fence       ",
            "last fence  ",
            "(key {lock.orderid}:fence)",
        ] {
            assert!(text.contains(line), "{args:?} lacks {line:?}:\n{text}");
        }
    }
    holder.kill().unwrap();
    holder.wait().unwrap();
}

#[test]
fn an_original_clients_timestamp_is_judged_by_the_server_clock() {
    let server = RedisServer::start();
    // As SETNX of the original writes it: seconds, `now + timeout + 1`, no TTL.
    let in_ten = (now().as_secs() + 10).to_string();
    server.cli(&["SET", "lock.old", &in_ten]);
    let json = inspect_json(&server, &["--legacy", "lock.old"]);
    assert_eq!(json["state"], "held", "{json}");
    assert_eq!(json["value"], in_ten.as_str(), "{json}");
    assert_eq!(json["unit"], "s", "{json}");
    assert_eq!(json["expired"], false, "{json}");
    let expires_at: u64 = (in_ten.parse::<u64>().unwrap() + 1) * 1000;
    assert_eq!(ms(&json["expires_at_ms"]), expires_at, "{json}");
    let remaining = ms(&json["remaining_ms"]);
    assert!(remaining > 1_000 && remaining <= 11_000, "{json}");
    assert_eq!(json["written_by"], "original", "{json}");
    assert_eq!(json["key_ttl_ms"], Value::Null, "{json}");
    assert_eq!(json["fence"], Value::Null, "{json}");
    assert_eq!(json["last_fence"], Value::Null, "{json}");
    let text = inspect_text(&server, &["lock.old"]);
    assert!(text.contains("(a Unix timestamp in seconds)"), "{text}");
    assert!(
        text.contains("written by  an original SETNX/GETSET client"),
        "{text}"
    );
    assert!(text.contains("last fence  none"), "{text}");

    // Past by the server's clock: any client may take it.
    let ago = (now().as_secs() - 100).to_string();
    server.cli(&["SET", "lock.old", &ago]);
    let json = inspect_json(&server, &["lock.old"]);
    assert_eq!(json["state"], "expired", "{json}");
    assert_eq!(json["expired"], true, "{json}");
    assert_eq!(ms(&json["remaining_ms"]), 0, "{json}");
    let text = inspect_text(&server, &["--legacy", "lock.old"]);
    assert!(text.contains("state       expired"), "{text}");
    assert!(text.contains("expired by the server's clock"), "{text}");

    // A key that is no valid lock name (braces) is found as a legacy key without the flag.
    let in_a_minute_ms = (now().as_millis() as u64 + 60_000).to_string();
    server.cli(&["SET", "locks:{order}:7", &in_a_minute_ms]);
    for args in [&["locks:{order}:7"][..], &["--legacy", "locks:{order}:7"]] {
        let json = inspect_json(&server, args);
        assert_eq!(json["state"], "held", "{args:?}: {json}");
        assert_eq!(json["unit"], "ms", "{json}");
        assert_eq!(json["fence_key"], "locks:{order}:7:fence", "{json}");
    }

    // No key: free, with the flag.
    let json = inspect_json(&server, &["--legacy", "lock.none"]);
    assert_eq!(json["state"], "free", "{json}");
    assert_eq!(json["value"], Value::Null, "{json}");
    assert!(inspect_text(&server, &["--legacy", "lock.none"]).contains("state       free"));
}

#[test]
fn a_key_holding_something_else_is_an_error_not_a_legacy_lock() {
    let server = RedisServer::start();
    server.cli(&["SET", "counter", "123"]);
    server.cli(&["SET", "name", "alice"]);
    server.cli(&["HSET", "profile", "a", "1"]);
    for (key, what) in [
        ("counter", "holds \"123\""),
        ("name", "holds \"alice\""),
        ("profile", "holds a hash"),
    ] {
        for json in [false, true] {
            let args = if json {
                vec!["--legacy", key, "--json"]
            } else {
                vec!["--legacy", key]
            };
            let out = inspect(&server, &args);
            assert_eq!(out.status.code(), Some(4), "{args:?}: {out:?}");
            assert!(out.stdout.is_empty(), "{args:?}: {out:?}");
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert!(
                stderr.contains(&format!("{key} is not a legacy lock"))
                    && stderr.contains(what)
                    && stderr.contains("not a Unix timestamp in seconds or milliseconds"),
                "{args:?}: {stderr}"
            );
        }
    }
    // Without the flag they are not taken for legacy locks: the expire lock of that name is
    // shown (free), as before.
    for key in ["counter", "name", "profile"] {
        let json = inspect_json(&server, &[key]);
        assert_eq!(json["key"], format!("tairlock:{{{key}}}"), "{json}");
        assert_eq!(json["state"], "free", "{json}");
    }
    // A key that is no valid lock name and holds no timestamp: the usage error stays.
    server.cli(&["SET", "a{b}c", "x"]);
    let out = inspect(&server, &["a{b}c"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("holds no legacy lock timestamp"),
        "{out:?}"
    );
    // A timestamp under the bare name does not hide the expire lock of that name.
    server.cli(&["SET", "job", &(now().as_secs() + 60).to_string()]);
    server.cli(&["SET", "tairlock:{job}", "user data"]);
    let json = inspect_json(&server, &["job"]);
    assert_eq!(json["key"], "tairlock:{job}", "{json}");
    assert_eq!(json["state"], "foreign", "{json}");
    // `--legacy` does not go with the other kinds.
    let out = inspect(&server, &["--legacy", "--rw", "job"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}
