//! `tairlock unlock --force` for every lock kind, `--json` on it, and the exit codes in
//! `tairlock --help` (issue #17 part 2), the built binary against a real server.
//!
//! - The expire lock: deleted; "not held"; a key holding user data refused (exit 5), untouched.
//! - A reader/writer lock (detected, or `--rw`): its live readers and a waiting writer's intent
//!   removed, then its writer; the readers' `tairlock run`s find their lease gone (exit 76) and
//!   the waiting writer gets in. The fair writers' queue is cleared too. A lock key holding user
//!   data is refused, nothing deleted.
//! - A semaphore (detected, `--sem`, or named by its key): every holder's permits given back;
//!   the holder's `tairlock run` finds its lease gone (exit 76); user data refused, untouched.
//! - A legacy key (`--legacy`): a timestamp deleted; a counter, a hash or an absent key refused
//!   or reported, never deleted.
//! - `--json` prints one JSON object for every outcome, refusals included.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{Scratch, read, run, until, wait_for};
use serde_json::Value;
use support::RedisServer;

fn tairlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `tairlock unlock --force KEY --redis URL ARGS… --json`: the exit code and the JSON printed.
fn unlock_json(server: &RedisServer, key: &str, args: &[&str]) -> (i32, Value) {
    let url = server.url();
    let mut all = vec!["unlock", "--force", key, "--redis", &url, "--json"];
    all.extend_from_slice(args);
    let out = tairlock(&all);
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let json = serde_json::from_str(&text).unwrap_or_else(|e| {
        panic!(
            "unlock {key} {args:?} printed no JSON ({e}): {text:?}; stderr {}",
            String::from_utf8_lossy(&out.stderr)
        )
    });
    (out.status.code().unwrap_or(-1), json)
}

fn later_secs(secs: u64) -> String {
    (SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + secs)
        .to_string()
}

#[test]
fn an_expire_lock_is_deleted_and_user_data_refused_with_json() {
    let server = RedisServer::start();
    let dir = Scratch::new("expire");
    let (up, stderr) = (dir.file("up"), dir.file("stderr"));
    let script = format!("touch {}; sleep 20", up.display());
    let mut holder = run(&server, "job", &["--ttl", "3s"], &script, &stderr)
        .spawn()
        .unwrap();
    until(Duration::from_secs(10), "the holder", || up.exists());
    let (code, json) = unlock_json(&server, "job", &[]);
    assert_eq!(code, 0);
    assert_eq!(json["outcome"], "deleted", "{json}");
    assert_eq!(json["kind"], "expire");
    assert_eq!(json["keys"][0], "tairlock:{job}");
    assert_eq!(server.cli(&["EXISTS", "tairlock:{job}"]), "0");
    // The holder's watchdog finds its lease gone.
    assert_eq!(wait(&mut holder, Duration::from_secs(15), &stderr), 76);

    let (code, json) = unlock_json(&server, "job", &[]);
    assert_eq!((code, &json["outcome"]), (0, &Value::from("not-held")));

    server.cli(&["SET", "tairlock:{data}", "user data"]);
    let (code, json) = unlock_json(&server, "data", &[]);
    assert_eq!(code, 5, "{json}");
    assert_eq!(json["outcome"], "refused");
    assert!(
        json["reason"].as_str().unwrap().contains("NOTLOCK"),
        "{json}"
    );
    assert_eq!(server.cli(&["GET", "tairlock:{data}"]), "user data");
}

/// Wait for a `tairlock run` at most `limit`: its exit code.
fn wait(child: &mut Child, limit: Duration, stderr: &Path) -> i32 {
    wait_for(child, limit, "a run", stderr).code().unwrap_or(-1)
}

#[test]
fn a_reader_writer_lock_is_unlocked_readers_intent_and_writer() {
    let server = RedisServer::start();
    let dir = Scratch::new("rw");
    // Two readers hold it; a writer waits (its intent is up).
    let mut readers = Vec::new();
    for i in 0..2 {
        let up = dir.file(&format!("r{i}.up"));
        let stderr = dir.file(&format!("r{i}.stderr"));
        let child = run(
            &server,
            "catalog",
            &["--read", "--ttl", "3s"],
            &format!("touch {}; sleep 20", up.display()),
            &stderr,
        )
        .spawn()
        .unwrap();
        until(Duration::from_secs(10), "a reader", || up.exists());
        readers.push((child, stderr));
    }
    let writer_up = dir.file("w.up");
    let writer_stderr = dir.file("w.stderr");
    let mut writer = run(
        &server,
        "catalog",
        &["--write", "--ttl", "3s"],
        &format!("touch {}; sleep 20", writer_up.display()),
        &writer_stderr,
    )
    .spawn()
    .unwrap();
    until(Duration::from_secs(10), "the writer's intent", || {
        server.cli(&["EXISTS", "tairlock:{catalog}:wi"]) == "1"
    });

    // Detected as a reader/writer lock (no plain key): both readers and the intent go.
    let (code, json) = unlock_json(&server, "catalog", &[]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["kind"], "rw", "{json}");
    assert_eq!(json["outcome"], "deleted", "{json}");
    assert_eq!(json["readers"], 2, "{json}");
    assert_eq!(json["intent"], true, "{json}");
    assert_eq!(json["writer"], false, "{json}");
    // The readers' runs find their leases gone; the writer gets in.
    for (mut child, stderr) in readers {
        assert_eq!(wait(&mut child, Duration::from_secs(15), &stderr), 76);
        assert!(read(&stderr).contains("lost"), "{}", read(&stderr));
    }
    until(Duration::from_secs(10), "the writer", || writer_up.exists());

    // Now the writer, with --rw and the human-readable line.
    let out = tairlock(&[
        "unlock",
        "--force",
        "--rw",
        "catalog",
        "--redis",
        &server.url(),
    ]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("deleted the reader/writer lock catalog: writer removed"),
        "{text}"
    );
    assert_eq!(
        wait(&mut writer, Duration::from_secs(15), &writer_stderr),
        76
    );
    assert_eq!(server.cli(&["EXISTS", "tairlock:{catalog}:w"]), "0");
}

/// A fair writer holds the lock while the fair queue keeps the place of a writer that crashed
/// while waiting (written as `tairlock run --write --fair` leaves it, with a long waiter lease):
/// the forced unlock removes the writer and clears the queue (`:wq`, `:ww`) in the same step,
/// rather than leaving the place to lapse.
#[test]
fn a_fair_reader_writer_lock_is_unlocked_with_its_writers_queue() {
    let server = RedisServer::start();
    let dir = Scratch::new("rw-fair");
    let (up, stderr) = (dir.file("w.up"), dir.file("w.stderr"));
    let mut holder = run(
        &server,
        "ledger",
        &["--write", "--fair", "--ttl", "3s"],
        &format!("touch {}; sleep 20", up.display()),
        &stderr,
    )
    .spawn()
    .unwrap();
    until(Duration::from_secs(10), "the fair writer", || up.exists());
    // The crashed waiter's place: arrival (server µs), and `<ends ms>:<lease ms>:<channel>`.
    let time = server.cli(&["TIME"]);
    let mut parts = time.split_whitespace().map(|p| p.parse::<u64>().unwrap());
    let (secs, micros) = (parts.next().unwrap(), parts.next().unwrap());
    let now_us = secs * 1_000_000 + micros;
    let nonce = "c0ffee";
    let place = format!(
        "{}:60000:tairlock:{{ledger}}:released:w:crashed",
        now_us / 1000 + 60_000
    );
    server.cli(&["ZADD", "tairlock:{ledger}:wq", &now_us.to_string(), nonce]);
    server.cli(&["HSET", "tairlock:{ledger}:ww", nonce, &place]);
    for key in ["tairlock:{ledger}:wq", "tairlock:{ledger}:ww"] {
        server.cli(&["PEXPIRE", key, "60000"]);
    }

    let (code, json) = unlock_json(&server, "ledger", &["--rw"]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(json["outcome"], "deleted", "{json}");
    assert_eq!(json["writer"], true, "{json}");
    assert_eq!(json["queued"], 1, "{json}");
    for key in ["tairlock:{ledger}:wq", "tairlock:{ledger}:ww"] {
        assert!(
            json["keys"].as_array().unwrap().iter().any(|k| k == key),
            "{json}"
        );
    }
    assert_eq!(
        server.cli(&[
            "EXISTS",
            "tairlock:{ledger}:w",
            "tairlock:{ledger}:wi",
            "tairlock:{ledger}:wq",
            "tairlock:{ledger}:ww",
        ]),
        "0",
        "the writer, its intent and the queue are gone"
    );
    // The holder's watchdog finds its lease gone.
    assert_eq!(wait(&mut holder, Duration::from_secs(15), &stderr), 76);
}

#[test]
fn a_reader_writer_lock_with_user_data_in_a_key_is_refused_untouched() {
    let server = RedisServer::start();
    server.cli(&["SET", "tairlock:{catalog}:r", "not a sorted set"]);
    server.cli(&["SET", "tairlock:{catalog}:wi", "somebody"]);
    let (code, json) = unlock_json(&server, "catalog", &["--rw"]);
    assert_eq!(code, 5, "{json}");
    assert_eq!(json["outcome"], "refused");
    assert!(
        json["reason"]
            .as_str()
            .unwrap()
            .contains("tairlock:{catalog}:r holds a string"),
        "{json}"
    );
    assert_eq!(
        server.cli(&["GET", "tairlock:{catalog}:r"]),
        "not a sorted set"
    );
    assert_eq!(server.cli(&["GET", "tairlock:{catalog}:wi"]), "somebody");
}

#[test]
fn a_legacy_key_is_deleted_only_when_it_holds_a_timestamp() {
    let server = RedisServer::start();
    let in_a_minute = later_secs(60);
    server.cli(&["SET", "lock.orderid", &in_a_minute]);
    let (code, json) = unlock_json(&server, "lock.orderid", &["--legacy"]);
    assert_eq!(
        (code, &json["outcome"]),
        (0, &Value::from("deleted")),
        "{json}"
    );
    assert_eq!(json["kind"], "legacy");
    assert_eq!(server.cli(&["EXISTS", "lock.orderid"]), "0");
    // Milliseconds, as `--unit ms` clients write them.
    server.cli(&["SET", "lock.ms", &format!("{in_a_minute}000")]);
    let (code, json) = unlock_json(&server, "lock.ms", &["--legacy"]);
    assert_eq!(
        (code, &json["outcome"]),
        (0, &Value::from("deleted")),
        "{json}"
    );

    let (code, json) = unlock_json(&server, "lock.orderid", &["--legacy"]);
    assert_eq!((code, &json["outcome"]), (0, &Value::from("not-held")));

    server.cli(&["SET", "counter", "123"]);
    server.cli(&["SET", "name", "alice"]);
    server.cli(&["HSET", "profile", "a", "1"]);
    for key in ["counter", "name", "profile"] {
        let (code, json) = unlock_json(&server, key, &["--legacy"]);
        assert_eq!(code, 5, "{key}: {json}");
        assert_eq!(json["outcome"], "refused", "{key}: {json}");
    }
    assert_eq!(server.cli(&["GET", "counter"]), "123");
    assert_eq!(server.cli(&["GET", "name"]), "alice");
    assert_eq!(server.cli(&["HGET", "profile", "a"]), "1");
    // Without --json: the refusal is said on stderr, exit 5.
    let out = tairlock(&[
        "unlock",
        "--force",
        "--legacy",
        "counter",
        "--redis",
        &server.url(),
    ]);
    assert_eq!(out.status.code(), Some(5));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("refusing to delete the legacy lock counter"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn help_lists_every_exit_code_by_name() {
    let out = tairlock(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for (code, name) in [
        (0, "ok"),
        (1, "broken"),
        (2, "usage"),
        (3, "no-flaw-shown"),
        (4, "store"),
        (5, "refused"),
        (6, "stuck"),
        (69, "run-store"),
        (71, "run-internal"),
        (75, "not-acquired"),
        (76, "lease-lost"),
        (126, "not-executable"),
        (127, "spawn"),
    ] {
        assert!(
            help.lines()
                .any(|l| l.trim_start().starts_with(&format!("{code}  {name} "))),
            "--help lacks exit code {code} ({name}):\n{help}"
        );
    }
    // Usage errors exit 2, as clap's own do.
    let out = tairlock(&["unlock", "job"]);
    assert_eq!(out.status.code(), Some(2));
    let out = tairlock(&["unlock", "--force", "--rw", "--legacy", "job"]);
    assert_eq!(out.status.code(), Some(2));
}

/// A semaphore (detected, or `--sem`, or named by its key): every holder's permits are given
/// back, and a `tairlock run --permits` holding one finds its lease gone (exit 76).
#[test]
fn a_semaphore_is_force_released_with_json() {
    let server = RedisServer::start();
    let dir = Scratch::new("sem");
    let (up, stderr) = (dir.file("up"), dir.file("stderr"));
    let mut holder = run(
        &server,
        "pool",
        &["--permits", "2", "--ttl", "3s"],
        &format!("touch {}; sleep 20", up.display()),
        &stderr,
    )
    .spawn()
    .unwrap();
    until(Duration::from_secs(10), "the permit holder", || up.exists());
    let (code, json) = unlock_json(&server, "pool", &[]);
    assert_eq!(code, 0, "{json}");
    assert_eq!(
        (&json["kind"], &json["outcome"], &json["holders"]),
        (
            &Value::from("sem"),
            &Value::from("deleted"),
            &Value::from(1)
        ),
        "{json}"
    );
    assert_eq!(server.cli(&["ZCARD", "tairlock:{pool}:sem"]), "0");
    assert_eq!(wait(&mut holder, Duration::from_secs(15), &stderr), 76);
    for args in [&["--sem"][..], &[]] {
        let key = if args.is_empty() {
            "tairlock:{pool}:sem"
        } else {
            "pool"
        };
        let (code, json) = unlock_json(&server, key, args);
        assert_eq!(
            (code, &json["outcome"]),
            (0, &Value::from("not-held")),
            "{json}"
        );
    }
    server.cli(&["SET", "tairlock:{pool}:sem", "user data"]);
    let (code, json) = unlock_json(&server, "pool", &["--sem"]);
    assert_eq!(
        (code, &json["outcome"]),
        (5, &Value::from("refused")),
        "{json}"
    );
    assert_eq!(server.cli(&["GET", "tairlock:{pool}:sem"]), "user data");
}
