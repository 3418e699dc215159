//! `tairlock unlock --force` for every lock kind, `--json` on it, and the exit codes in
//! `tairlock --help` (issue #17 part 2), the built binary against a real server.
//!
//! - The expire lock: deleted; "not held"; a key holding user data refused (exit 5), untouched.
//! - A reader/writer lock (detected, or `--rw`): its live readers and a waiting writer's intent
//!   removed, then its writer; the readers' `tairlock run`s find their lease gone (exit 76) and
//!   the waiting writer gets in. A lock key holding user data is refused, nothing deleted.
//! - A legacy key (`--legacy`): a timestamp deleted; a counter, a hash or an absent key refused
//!   or reported, never deleted.
//! - `--json` prints one JSON object for every outcome, refusals included.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

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
    let dir = scratch("expire");
    let (up, stderr) = (dir.join("up"), dir.join("stderr"));
    let mut holder = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["run", "job", "--redis", &server.url(), "--ttl", "3s", "--"])
        .args(["sh", "-c", &format!("touch {}; sleep 20", up.display())])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
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
    let _ = std::fs::remove_dir_all(&dir);
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

fn until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tairlock-unlock-{}-{name}-{}",
        std::process::id(),
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn run(server: &RedisServer, args: &[&str], script: &str, stderr: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["run", "catalog", "--redis", &server.url()])
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap()
}

fn wait(child: &mut Child, limit: Duration, stderr: &Path) -> i32 {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status.code().unwrap_or(-1);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("a run took over {limit:?}: {}", read(stderr));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_reader_writer_lock_is_unlocked_readers_intent_and_writer() {
    let server = RedisServer::start();
    let dir = scratch("rw");
    // Two readers hold it; a writer waits (its intent is up).
    let mut readers = Vec::new();
    for i in 0..2 {
        let up = dir.join(format!("r{i}.up"));
        let stderr = dir.join(format!("r{i}.stderr"));
        let child = run(
            &server,
            &["--read", "--ttl", "3s"],
            &format!("touch {}; sleep 20", up.display()),
            &stderr,
        );
        until(Duration::from_secs(10), "a reader", || up.exists());
        readers.push((child, stderr));
    }
    let writer_up = dir.join("w.up");
    let writer_stderr = dir.join("w.stderr");
    let mut writer = run(
        &server,
        &["--write", "--ttl", "3s"],
        &format!("touch {}; sleep 20", writer_up.display()),
        &writer_stderr,
    );
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
    let _ = std::fs::remove_dir_all(&dir);
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
        (69, "run-store"),
        (75, "not-acquired"),
        (76, "lease-lost"),
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
