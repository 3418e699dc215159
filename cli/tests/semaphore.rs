//! `tairlock run --permits N KEY -- CMD…` and `tairlock inspect` of a semaphore (issue #16),
//! the built binary against a real `redis-server`.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::RedisServer;

/// A private file for one test's log, removed on drop.
struct Log(std::path::PathBuf);

impl Log {
    fn new(name: &str) -> Log {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        Log(std::env::temp_dir().join(format!(
            "tairlock-sem-{}-{name}-{nanos}",
            std::process::id()
        )))
    }

    fn read(&self) -> String {
        std::fs::read_to_string(&self.0).unwrap_or_default()
    }
}

impl Drop for Log {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn tairlock(server: &RedisServer, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tairlock"));
    cmd.args(args)
        .args(["--redis", &server.url()])
        .stdin(Stdio::null());
    cmd
}

/// Five `tairlock run --permits 2` at once: never more than two commands run together, two
/// do, each sees its own fencing token and the semaphore's key, and nothing is left held.
#[test]
fn at_most_n_commands_run_at_once() {
    at_most_two_of_five(&[]);
}

/// The same with `--fair`: the waiters queue on the server.
#[test]
fn at_most_n_commands_run_at_once_when_fair() {
    at_most_two_of_five(&["--fair"]);
}

fn at_most_two_of_five(extra: &[&str]) {
    let server = RedisServer::start();
    let log = Log::new("permits");
    let script = format!(
        "echo \"+ $TAIRLOCK_FENCE $TAIRLOCK_KEY\" >> {log}; sleep 0.6; echo - >> {log}",
        log = log.0.display()
    );
    let started = Instant::now();
    let children: Vec<_> = (0..5)
        .map(|_| {
            tairlock(&server, &["run", "pool", "--permits", "2", "--ttl", "3s"])
                .args(extra)
                .args(["--", "sh", "-c", &script])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for child in children {
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let took = started.elapsed();
    let text = log.read();
    let (mut running, mut most) = (0i32, 0i32);
    let mut fences = Vec::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("+ ") {
            running += 1;
            most = most.max(running);
            let (fence, key) = rest.split_once(' ').unwrap();
            fences.push(fence.parse::<u64>().expect("TAIRLOCK_FENCE is a number"));
            assert_eq!(key, "tairlock:{pool}:sem", "TAIRLOCK_KEY");
        } else {
            running -= 1;
        }
    }
    println!("5 runs with 2 permits in {took:?}: at most {most} at once\n{text}");
    assert_eq!(fences.len(), 5, "{text}");
    assert!(most <= 2, "{most} commands ran at once:\n{text}");
    assert_eq!(most, 2, "the two permits were never used together:\n{text}");
    fences.sort_unstable();
    fences.dedup();
    assert_eq!(fences.len(), 5, "fencing tokens repeat:\n{text}");
    assert_eq!(server.cli(&["EXISTS", "tairlock:{pool}:sem"]), "0");
}

/// `--permits 0` is a usage error, before anything is locked.
#[test]
fn zero_permits_is_a_usage_error() {
    let server = RedisServer::start();
    let out = tairlock(&server, &["run", "pool", "--permits", "0", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(server.cli(&["DBSIZE"]), "0");
}

/// `tairlock inspect` shows a semaphore's holders with their permits and remaining leases,
/// found by its name (detected), by its key, or with `--sem`.
#[test]
fn inspect_shows_the_holders_and_their_leases() {
    let server = RedisServer::start();
    let mut holder = tairlock(&server, &["run", "pool", "--permits", "3", "--ttl", "20s"])
        .args(["--", "sleep", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let until = Instant::now() + Duration::from_secs(20);
    while server.cli(&["EXISTS", "tairlock:{pool}:sem"]) != "1" {
        assert!(Instant::now() < until, "the holder never took its permit");
        std::thread::sleep(Duration::from_millis(20));
    }
    for args in [
        &["inspect", "pool"][..],
        &["inspect", "tairlock:{pool}:sem"],
        &["inspect", "--sem", "pool"],
    ] {
        let out = tairlock(&server, args).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{args:?}: {out:?}");
        assert!(text.contains("semaphore   pool"), "{args:?}: {text}");
        assert!(
            text.contains("1 live, 1 permits in use"),
            "{args:?}: {text}"
        );
        assert!(text.contains("1 permit(s), fence"), "{args:?}: {text}");
    }
    let out = tairlock(&server, &["inspect", "pool", "--json"])
        .output()
        .unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["state"], "held", "{report}");
    let remaining = report["holders"][0]["remaining_ms"].as_u64().unwrap();
    assert!(
        remaining > 0 && remaining <= 20_000,
        "remaining lease {remaining} ms"
    );
    holder.kill().unwrap();
    holder.wait().unwrap();
}
