//! `tairlock run` for every lock kind (issue #17 part 1), the built binary against a real server.
//!
//! - Three `run --read` overlap, and a `run --write` never overlaps them; a reader that arrives
//!   while the writer waits goes after it (writer preference, the default).
//! - A `run --legacy` and a plain `SETNX`/`GETSET` client written here (the original algorithm)
//!   never hold one key at once; the legacy lease is renewed past `--ttl`.
//! - `--wait 0` on a busy lock exits 75 at once, for every kind, without running the command.
//! - The supervision is the same for every kind: a read, write or legacy lease deleted behind the
//!   command's back stops it and exits 76.
//! - Flag combinations that make no sense are refused with exit 2 before anything is locked.
//! - Every kind runs on a Redis Cluster (`--cluster`), a token lock (`--token`) too.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, now_ns, read, run, until, wait_for};
use support::RedisServer;

/// A critical section's `[start, end]`, wall clock in ns, as a command recorded it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Span {
    start: u128,
    end: u128,
}

impl Span {
    fn overlaps(&self, other: &Span) -> bool {
        self.start < other.end && other.start < self.end
    }
}

/// Shell that records the section's start and end (ns) in `file` and holds it for `secs`.
fn section(file: &Path, secs: f64) -> String {
    format!(
        "echo \"$(date +%s%N)\" > {f}.start; sleep {secs}; echo \"$(date +%s%N)\" > {f}.end; \
         mv {f}.start {f}.s; mv {f}.end {f}.e",
        f = file.display()
    )
}

/// The span a [`section`] recorded.
fn span(file: &Path) -> Span {
    let at = |ext: &str| -> u128 {
        let path = PathBuf::from(format!("{}.{ext}", file.display()));
        read(&path)
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{} holds no timestamp", path.display()))
    };
    Span {
        start: at("s"),
        end: at("e"),
    }
}

/// Whether a [`section`] has started (its start is written).
fn started(file: &Path) -> bool {
    PathBuf::from(format!("{}.start", file.display())).exists()
        || PathBuf::from(format!("{}.s", file.display())).exists()
}

#[test]
fn three_readers_overlap_and_a_writer_never_overlaps_them() {
    let server = RedisServer::start();
    let scratch = Scratch::new("rw");
    let mut children = Vec::new();
    let readers: Vec<PathBuf> = (0..3).map(|i| scratch.file(&format!("r{i}"))).collect();
    for (i, file) in readers.iter().enumerate() {
        let stderr = scratch.file(&format!("r{i}.stderr"));
        let child = run(
            &server,
            "catalog",
            &["--read"],
            &section(file, 1.5),
            &stderr,
        )
        .spawn()
        .unwrap();
        children.push((child, stderr));
    }
    // All three inside at once: shared.
    until(Duration::from_secs(10), "three readers inside", || {
        readers.iter().all(|f| started(f))
    });
    let writer = scratch.file("w");
    let stderr = scratch.file("w.stderr");
    let child = run(
        &server,
        "catalog",
        &["--write"],
        &section(&writer, 0.3),
        &stderr,
    )
    .spawn()
    .unwrap();
    children.push((child, stderr));
    // The writer waits and says so: its intent keeps new readers out (writer preference).
    until(Duration::from_secs(10), "the writer's intent", || {
        server.cli(&["EXISTS", "tairlock:{catalog}:wi"]) == "1"
    });
    let late = scratch.file("late");
    let stderr = scratch.file("late.stderr");
    let child = run(
        &server,
        "catalog",
        &["--read"],
        &section(&late, 0.1),
        &stderr,
    )
    .spawn()
    .unwrap();
    children.push((child, stderr));
    for (mut child, stderr) in children {
        let status = wait_for(&mut child, Duration::from_secs(30), "a run", &stderr);
        assert!(status.success(), "{status}: {}", read(&stderr));
    }

    let spans: Vec<Span> = readers.iter().map(|f| span(f)).collect();
    let writer = span(&writer);
    let late = span(&late);
    let shared_from = spans.iter().map(|s| s.start).max().unwrap();
    let shared_until = spans.iter().map(|s| s.end).min().unwrap();
    assert!(
        shared_from < shared_until,
        "the readers did not overlap: {spans:?}"
    );
    for reader in spans.iter().chain([&late]) {
        assert!(
            !reader.overlaps(&writer),
            "the writer {writer:?} overlapped a reader {reader:?}"
        );
    }
    assert!(
        late.start >= writer.end,
        "a reader that arrived while the writer waited went first: {late:?} vs {writer:?}"
    );
    println!(
        "readers shared {} ms; the writer started {} ms after the last reader left; the late \
         reader {} ms after the writer",
        (shared_until - shared_from) / 1_000_000,
        (writer.start - spans.iter().map(|s| s.end).max().unwrap()) / 1_000_000,
        (late.start - writer.end) / 1_000_000
    );
    for suffix in ["w", "r", "wi"] {
        assert_eq!(
            server.cli(&["EXISTS", &format!("tairlock:{{catalog}}:{suffix}")]),
            "0",
            "released at the end"
        );
    }
}

/// The original SETNX/GETSET client (jeffkit), written against the server directly: timestamps
/// in milliseconds here (`--unit ms` on the tairlock side), lock timeout `timeout_ms`.
struct OldClient {
    con: redis::Connection,
    key: String,
    timeout_ms: u64,
}

fn now_ms() -> u64 {
    (now_ns() / 1_000_000) as u64
}

impl OldClient {
    fn acquire(&mut self) -> u64 {
        loop {
            let timestamp = now_ms() + self.timeout_ms + 1;
            let set: i64 = redis::cmd("SETNX")
                .arg(&self.key)
                .arg(timestamp)
                .query(&mut self.con)
                .unwrap();
            if set == 1 {
                return timestamp;
            }
            let current: Option<u64> = redis::cmd("GET")
                .arg(&self.key)
                .query(&mut self.con)
                .unwrap();
            match current {
                // Released between our SETNX and GET: try again at once.
                None => continue,
                Some(current) if now_ms() > current => {
                    let old: Option<u64> = redis::cmd("GETSET")
                        .arg(&self.key)
                        .arg(timestamp)
                        .query(&mut self.con)
                        .unwrap();
                    if old.is_none_or(|old| now_ms() > old) {
                        return timestamp;
                    }
                }
                Some(_) => {}
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn release(&mut self) {
        let current: Option<u64> = redis::cmd("GET")
            .arg(&self.key)
            .query(&mut self.con)
            .unwrap();
        if current.is_some_and(|current| now_ms() < current) {
            let _: i64 = redis::cmd("DEL")
                .arg(&self.key)
                .query(&mut self.con)
                .unwrap();
        }
    }
}

#[test]
fn a_legacy_run_and_an_old_setnx_getset_client_never_hold_at_once() {
    const KEY: &str = "lock.orderid";
    let server = RedisServer::start();
    let scratch = Scratch::new("legacy");
    let url = server.url();
    // The old client: rounds of a 150 ms section, with a lock timeout well above it.
    let old = std::thread::spawn(move || {
        let client = redis::Client::open(url).unwrap();
        let mut old = OldClient {
            con: client.get_connection().unwrap(),
            key: KEY.to_owned(),
            timeout_ms: 3000,
        };
        let mut spans = Vec::new();
        for _ in 0..8 {
            old.acquire();
            let start = now_ns();
            std::thread::sleep(Duration::from_millis(150));
            spans.push(Span {
                start,
                end: now_ns(),
            });
            old.release();
            std::thread::sleep(Duration::from_millis(20));
        }
        spans
    });
    // The migrated job: a --ttl of 300 ms held for 0.6 s, so the watchdog must renew it.
    let mut new = Vec::new();
    for i in 0..4 {
        let file = scratch.file(&format!("n{i}"));
        let stderr = scratch.file(&format!("n{i}.stderr"));
        let mut child = run(
            &server,
            KEY,
            &["--legacy", "--unit", "ms", "--ttl", "300ms"],
            &section(&file, 0.6),
            &stderr,
        )
        .spawn()
        .unwrap();
        let status = wait_for(&mut child, Duration::from_secs(30), "a legacy run", &stderr);
        assert!(status.success(), "{status}: {}", read(&stderr));
        new.push(span(&file));
    }
    let old = old.join().expect("the old client failed");
    for n in &new {
        for o in &old {
            assert!(
                !n.overlaps(o),
                "the legacy run {n:?} and the old client {o:?} held the lock at once"
            );
        }
        assert!(
            n.end - n.start >= 600_000_000,
            "a section ended early: {n:?}"
        );
    }
    println!(
        "{} legacy runs of 0.6 s on a 300 ms --ttl and {} old-client sections: no overlap",
        new.len(),
        old.len()
    );
    assert_eq!(server.cli(&["EXISTS", KEY]), "0", "released at the end");
}

/// `--wait 0` is one attempt: on a busy lock, exit 75 at once, the command not run.
#[test]
fn wait_0_on_a_busy_lock_exits_75_at_once_for_every_kind() {
    let server = RedisServer::start();
    let scratch = Scratch::new("wait0");
    let marker = scratch.file("ran");
    let touch = format!("touch {}", marker.display());
    // Holders: an expire lock, a writer, and an old client's legacy timestamp.
    let holding = scratch.file("holding");
    let mut holders = Vec::new();
    for (key, args) in [("job", &[][..]), ("catalog", &["--write"][..])] {
        let stderr = scratch.file(&format!("{key}.stderr"));
        let flag = PathBuf::from(format!("{}-{key}", holding.display()));
        let child = run(
            &server,
            key,
            args,
            &format!("touch {}; sleep 5", flag.display()),
            &stderr,
        )
        .spawn()
        .unwrap();
        until(Duration::from_secs(10), "the holder", || flag.exists());
        holders.push(child);
    }
    let later = (now_ms() / 1000 + 60).to_string();
    server.cli(&["SET", "lock.job", &later]);

    let stderr = scratch.file("stderr");
    for (key, args) in [
        ("job", &["--wait", "0"][..]),
        ("catalog", &["--wait", "0", "--read"][..]),
        ("catalog", &["--wait", "0", "--write"][..]),
        ("lock.job", &["--wait", "0", "--legacy"][..]),
    ] {
        let start = Instant::now();
        let status = run(&server, key, args, &touch, &stderr).status().unwrap();
        let took = start.elapsed();
        assert_eq!(status.code(), Some(75), "{key} {args:?}: {}", read(&stderr));
        assert!(!marker.exists(), "the command ran without the lock");
        assert!(
            read(&stderr).contains("one attempt"),
            "the message says so: {}",
            read(&stderr)
        );
        // One attempt: no waiting (generous bound for a loaded machine; the holders hold 5 s).
        assert!(
            took < Duration::from_secs(3),
            "{key} {args:?} took {took:?}"
        );
        println!("--wait 0 {key} {args:?}: exit 75 after {took:?}");
    }
    for mut holder in holders {
        let _ = holder.kill();
        let _ = holder.wait();
    }
}

/// The supervision is the same for every kind: a lease deleted behind the command's back is
/// found by the next renewal, the command is stopped, and tairlock exits 76.
#[test]
fn a_deleted_lease_stops_the_command_and_exits_76_for_every_kind() {
    let server = RedisServer::start();
    let scratch = Scratch::new("lost");
    for (key, args, lease_key) in [
        ("catalog", &["--read"][..], "tairlock:{catalog}:r"),
        ("catalog", &["--write"][..], "tairlock:{catalog}:w"),
        ("lock.job", &["--legacy", "--unit", "ms"][..], "lock.job"),
    ] {
        let up = scratch.file("up");
        let _ = std::fs::remove_file(&up);
        let stderr = scratch.file("stderr");
        let mut args = args.to_vec();
        args.extend(["--ttl", "600ms"]);
        let start = Instant::now();
        let mut child = run(
            &server,
            key,
            &args,
            &format!("touch {}; sleep 20", up.display()),
            &stderr,
        )
        .spawn()
        .unwrap();
        until(Duration::from_secs(10), "the command", || up.exists());
        assert_eq!(server.cli(&["DEL", lease_key]), "1", "{args:?}");
        let status = wait_for(&mut child, Duration::from_secs(15), "a lost run", &stderr);
        assert_eq!(status.code(), Some(76), "{args:?}: {}", read(&stderr));
        assert!(read(&stderr).contains("lost"), "{}", read(&stderr));
        println!(
            "{args:?}: deleted lease, exit 76 after {:?}",
            start.elapsed()
        );
    }
}

/// Every combination that makes no sense is refused (exit 2) before anything is locked.
#[test]
fn nonsense_flag_combinations_are_refused_with_exit_2() {
    let server = RedisServer::start();
    let scratch = Scratch::new("refused");
    let marker = scratch.file("ran");
    let touch = format!("touch {}", marker.display());
    let stderr = scratch.file("stderr");
    for (args, says) in [
        (&["--read", "--write"][..], "cannot be used with"),
        (&["--legacy", "--read"][..], "cannot be used with"),
        (&["--legacy", "--write"][..], "cannot be used with"),
        (&["--legacy", "--fair"][..], "cannot be used with"),
        (&["--legacy", "--prefix", "app:"][..], "cannot be used with"),
        (&["--fair", "--read"][..], "cannot be used with"),
        (&["--unit", "ms"][..], "--legacy"),
        (&["--legacy-kind", "getset"][..], "--legacy"),
        // A legacy flag beside a flag that conflicts with --legacy (clap does not ask for
        // --legacy then): refused all the same, not ignored.
        (&["--read", "--unit", "ms"][..], "cannot be used with"),
        (
            &["--write", "--legacy-kind", "getset"][..],
            "cannot be used with",
        ),
        (&["--fair", "--unit", "ms"][..], "cannot be used with"),
        (
            &["--permits", "2", "--legacy-kind", "watch"][..],
            "cannot be used with",
        ),
        (&["--preference", "reader"][..], "--read|--write"),
        (&["--pubsub", "sharded"][..], "--cluster"),
        (&["--wait", "1h30"][..], "no unit"),
        (&["--ttl", "0"][..], "out of range"),
        (&["--ttl", "2d"][..], "bad duration unit"),
        (&["--legacy", "--unit", "h"][..], "invalid value"),
    ] {
        let status = run(&server, "job", args, &touch, &stderr).status().unwrap();
        assert_eq!(status.code(), Some(2), "{args:?}: {}", read(&stderr));
        assert!(read(&stderr).contains(says), "{args:?}: {}", read(&stderr));
    }
    assert!(!marker.exists(), "a refused run ran its command");
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0", "nothing was written");
}

/// Durations with hours and compound forms are accepted (`--ttl 1h30m`).
#[test]
fn compound_durations_are_accepted() {
    let server = RedisServer::start();
    let scratch = Scratch::new("durations");
    let stderr = scratch.file("stderr");
    let up = scratch.file("up");
    let mut child = run(
        &server,
        "job",
        &["--ttl", "1h30m", "--wait", "1m30s", "--grace", "250ms"],
        &format!("touch {}; sleep 1", up.display()),
        &stderr,
    )
    .spawn()
    .unwrap();
    until(Duration::from_secs(10), "the command", || up.exists());
    let ms: u64 = server
        .cli(&["PTTL", "tairlock:{job}"])
        .trim()
        .parse()
        .expect("a PTTL");
    let status = wait_for(&mut child, Duration::from_secs(10), "the run", &stderr);
    assert!(status.success(), "{}", read(&stderr));
    assert!(
        ms > 5_300_000 && ms <= 5_400_000,
        "--ttl 1h30m gave a lease of {ms} ms"
    );
}

/// Every kind runs on a Redis Cluster (`--cluster`), excludes as on one server, and is
/// force-unlocked there.
#[test]
fn every_kind_runs_on_a_cluster() {
    let cluster = support::cluster::RedisCluster::start(3);
    let urls = cluster.urls().join(",");
    let scratch = Scratch::new("cluster");
    let stderr = scratch.file("stderr");
    let cluster_run = |key: &str, args: &[&str], script: &str| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_tairlock"));
        cmd.args(["run", key, "--cluster", &urls])
            .args(args)
            .args(["--", "sh", "-c", script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        cmd
    };
    let seen = scratch.file("seen");
    for (key, args, want) in [
        ("job", &[][..], "tairlock:{job}"),
        ("job", &["--fair"][..], "tairlock:{job}"),
        ("catalog", &["--read"][..], "tairlock:{catalog}:r"),
        ("catalog", &["--write"][..], "tairlock:{catalog}:w"),
        ("lock.job", &["--legacy"][..], "lock.job"),
        (
            "lock.job",
            &["--legacy", "--legacy-kind", "watch"][..],
            "lock.job",
        ),
        ("reports:nightly", &["--token"][..], "reports:nightly"),
    ] {
        let script = format!("echo \"$TAIRLOCK_KEY\" > {}", seen.display());
        let status = cluster_run(key, args, &script).status().unwrap();
        assert!(status.success(), "{args:?}: {}", read(&stderr));
        assert_eq!(read(&seen).trim(), want, "{args:?}");
    }
    // A writer excludes a reader there too; a forced unlock ends the writer's hold.
    let up = scratch.file("up");
    let writer_stderr = scratch.file("writer.stderr");
    let mut writer = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args([
            "run",
            "catalog",
            "--write",
            "--ttl",
            "3s",
            "--cluster",
            &urls,
        ])
        .args([
            "--",
            "sh",
            "-c",
            &format!("touch {}; sleep 20", up.display()),
        ])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&writer_stderr).unwrap())
        .spawn()
        .unwrap();
    until(Duration::from_secs(10), "the writer", || up.exists());
    let status = cluster_run("catalog", &["--read", "--wait", "0"], "true")
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(75), "{}", read(&stderr));
    let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["unlock", "--force", "catalog", "--cluster", &urls, "--json"])
        .output()
        .unwrap();
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["writer"], true, "{json}");
    let status = wait_for(
        &mut writer,
        Duration::from_secs(15),
        "the writer",
        &writer_stderr,
    );
    assert_eq!(status.code(), Some(76), "{}", read(&writer_stderr));
}
