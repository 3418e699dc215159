//! The tool and token locks (the format of redis-py, node redlock, redis-semaphore and
//! `TokenLock`), the built binary against a real server:
//!
//! - `inspect --token KEY` (and detected without the flag): the token, its shape, the TTL, and
//!   the last fencing token when a `TokenLock` took the key;
//! - `unlock --force --token KEY`: deleted by compare-and-delete of the token it holds; with
//!   `--if-value`, only that token (another is refused, exit 5, and left alone); a user's hash is
//!   refused and left alone;
//! - `scan`: a `TokenLock`'s key and its fence key are one token lock, with the fence in its
//!   report.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Output, Stdio};

use serde_json::Value;
use support::RedisServer;
use tairlock::{RedisStore, TokenLock};

fn tairlock(server: &RedisServer, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(args)
        .args(["--redis", &server.url()])
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

fn json(server: &RedisServer, args: &[&str]) -> Value {
    let out = tairlock(server, &[args, &["--json"]].concat());
    assert!(out.status.success(), "{args:?}: {out:?}");
    serde_json::from_slice(&out.stdout).unwrap()
}

/// A redis-py lock's key: `SET name uuid1().hex NX PX 30000`.
const PY_TOKEN: &str = "6f1c1b0e9a6d11ee8c900242ac120002";

#[test]
fn inspect_shows_a_token_lock_with_the_flag_and_detected_without() {
    let server = RedisServer::start();
    server.cli(&["SET", "reports:py", PY_TOKEN, "NX", "PX", "30000"]);
    for args in [
        &["inspect", "--token", "reports:py"][..],
        &["inspect", "reports:py"][..],
    ] {
        let report = json(&server, args);
        assert_eq!(report["key"], "reports:py", "{report}");
        assert_eq!(report["state"], "held");
        assert_eq!(report["token"], PY_TOKEN);
        assert_eq!(report["format"], "hex");
        assert_eq!(report["length"], 32);
        assert!(
            report["remaining_ms"].as_u64().unwrap() > 20_000,
            "{report}"
        );
        assert_eq!(report["no_ttl"], false);
        assert_eq!(report["fence_key"], "{reports:py}:fence");
        assert_eq!(report["last_fence"], Value::Null);
    }
    let text =
        String::from_utf8(tairlock(&server, &["inspect", "--token", "reports:py"]).stdout).unwrap();
    assert!(text.contains("state       held"), "{text}");
    assert!(text.contains(PY_TOKEN), "{text}");
    // A redis-semaphore mutex: a UUID under `mutex:<name>`, and a key without a TTL.
    server.cli(&[
        "SET",
        "mutex:jobs",
        "3b241101-e2bb-4255-8caf-4136c566a962",
        "PX",
        "10000",
    ]);
    assert_eq!(json(&server, &["inspect", "mutex:jobs"])["format"], "uuid");
    server.cli(&["SET", "forever", PY_TOKEN]);
    let forever = json(&server, &["inspect", "--token", "forever"]);
    assert_eq!(forever["no_ttl"], true);
    assert_eq!(forever["remaining_ms"], Value::Null);
    // A TokenLock's key: its last fencing token too.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let guard = rt.block_on(async {
        let locks = TokenLock::new(RedisStore::connect(&server.url()).await.unwrap());
        locks.lock("reports:rust").await.unwrap()
    });
    let ours = json(&server, &["inspect", "--token", "reports:rust"]);
    assert_eq!(ours["token"], guard.token());
    assert_eq!(ours["last_fence"], guard.fence());
    // Free, and a user's hash.
    assert_eq!(
        json(&server, &["inspect", "--token", "nothing"])["state"],
        "free"
    );
    server.cli(&["HSET", "user:1", "name", "x"]);
    assert_eq!(
        json(&server, &["inspect", "--token", "user:1"])["state"],
        "foreign"
    );
    rt.block_on(guard.release()).unwrap();
}

#[test]
fn unlock_force_token_deletes_exactly_the_token_it_names() {
    let server = RedisServer::start();
    server.cli(&["SET", "k", PY_TOKEN, "PX", "30000"]);
    // Another token than the one held: refused, exit 5, left alone.
    let out = tairlock(
        &server,
        &[
            "unlock",
            "--force",
            "--token",
            "k",
            "--if-value",
            "other-token-0123456",
        ],
    );
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing deleted"));
    assert_eq!(server.cli(&["GET", "k"]).trim(), PY_TOKEN);
    // The token held: deleted.
    let out = tairlock(
        &server,
        &["unlock", "--force", "--token", "k", "--if-value", PY_TOKEN],
    );
    assert!(out.status.success(), "{out:?}");
    assert_eq!(server.cli(&["EXISTS", "k"]).trim(), "0");
    // Whoever holds it: deleted; then not held.
    server.cli(&["SET", "k", "a-node-redlock-token-0001", "PX", "30000"]);
    let report = json(&server, &["unlock", "--force", "--token", "k"]);
    assert_eq!(report["outcome"], "deleted", "{report}");
    assert_eq!(report["kind"], "token");
    let report = json(&server, &["unlock", "--force", "--token", "k"]);
    assert_eq!(report["outcome"], "not-held", "{report}");
    // A user's hash: refused, left alone.
    server.cli(&["HSET", "k", "name", "x"]);
    let out = tairlock(&server, &["unlock", "--force", "--token", "k"]);
    assert_eq!(out.status.code(), Some(5), "{out:?}");
    assert_eq!(server.cli(&["HGET", "k", "name"]).trim(), "x");
    // An empty key is a usage error.
    let out = tairlock(&server, &["unlock", "--force", "--token", ""]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

#[test]
fn scan_reports_a_token_lock_with_its_fence_key() {
    let server = RedisServer::start();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let (guard, fence) = rt.block_on(async {
        let locks = TokenLock::new(RedisStore::connect(&server.url()).await.unwrap());
        let guard = locks.lock("nightly").await.unwrap();
        let fence = guard.fence();
        (guard, fence)
    });
    server.cli(&["SET", "py-lock", PY_TOKEN, "PX", "30000"]);
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["scan", "--redis", &server.url(), "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["counts"]["token-lock"], 2, "{report}");
    assert_eq!(
        report["counts"]["fence"], 0,
        "the fence key is the lock's: {report}"
    );
    let locks = report["locks"].as_array().unwrap();
    let ours = locks.iter().find(|l| l["key"] == "nightly").unwrap();
    assert_eq!(
        ours["keys"],
        serde_json::json!(["nightly", "{nightly}:fence"])
    );
    assert_eq!(ours["inspect"]["last_fence"], fence);
    assert_eq!(ours["inspect"]["token"], guard.token());
    assert!(
        ours["line"]
            .as_str()
            .unwrap()
            .contains("last tairlock fence"),
        "{ours}"
    );
    let theirs = locks.iter().find(|l| l["key"] == "py-lock").unwrap();
    assert_eq!(theirs["inspect"]["format"], "hex");
    assert_eq!(theirs["stuck"], false);
    rt.block_on(guard.release()).unwrap();
}
