//! `tairlock run KEY -- CMD…` (issue #4 part 5), the built binary against a real `redis-server`.
//!
//! - Two `tairlock run` processes on one key: their commands never overlap, each sees
//!   `TAIRLOCK_KEY` and `TAIRLOCK_FENCE`, and the fences increase.
//! - tairlock exits with the command's status; 75 when the lock is not had within `--wait`.
//! - When the lease is lost (the server paused past `--ttl`, or the key deleted behind its
//!   back) the command gets SIGTERM (then SIGKILL after `--grace`) and tairlock exits 76.

#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::RedisServer;

const KEY: &str = "job";
const LOCK_KEY: &str = "tairlock:{job}";

/// A private directory for one test's files, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "tairlock-run-{}-{name}-{}",
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn file(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `tairlock run KEY --redis URL ARGS… -- sh -c SCRIPT`, stdout discarded and stderr kept in
/// `stderr` (a file: a command's orphaned children must not hold a pipe open).
fn tairlock_run(server: &RedisServer, args: &[&str], script: &str, stderr: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tairlock"));
    cmd.args(["run", KEY, "--redis", &server.url()])
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap());
    cmd
}

/// Wait for `child` at most `limit`; kill it and fail if it takes longer.
fn wait_for(child: &mut Child, limit: Duration, what: &str, stderr: &Path) -> ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!(
                "{what}: tairlock did not exit within {limit:?}\nstderr:\n{}",
                read(stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Poll until `path` contains `needle`.
fn wait_for_text(path: &Path, needle: &str, limit: Duration) {
    let start = Instant::now();
    while !read(path).contains(needle) {
        assert!(
            start.elapsed() < limit,
            "{} never got {needle:?}: {:?}",
            path.display(),
            read(path)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}

#[test]
fn two_runs_on_one_key_never_overlap_and_fences_increase() {
    const RUNS: usize = 3;
    let server = RedisServer::start();
    let scratch = Scratch::new("overlap");
    let log = scratch.file("log");
    let script = format!(
        "echo \"start $WHO $TAIRLOCK_FENCE $TAIRLOCK_KEY\" >> {log}; sleep 0.2; \
         echo \"end $WHO\" >> {log}",
        log = log.display()
    );
    let start = Instant::now();
    let runners: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|who| {
            let (url, script, stderr) = (
                server.url(),
                script.clone(),
                scratch.file(&format!("{who}.stderr")),
            );
            std::thread::spawn(move || {
                for _ in 0..RUNS {
                    let status = Command::new(env!("CARGO_BIN_EXE_tairlock"))
                        .args(["run", KEY, "--redis", &url, "--", "sh", "-c", &script])
                        .env("WHO", who)
                        .stdin(Stdio::null())
                        .stdout(Stdio::null())
                        .stderr(std::fs::File::create(&stderr).unwrap())
                        .status()
                        .unwrap();
                    assert!(status.success(), "{who}: {status}\n{}", read(&stderr));
                }
            })
        })
        .collect();
    for runner in runners {
        runner.join().expect("a runner failed");
    }
    let took = start.elapsed();

    let text = read(&log);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4 * RUNS, "{text}");
    let mut fences = Vec::new();
    let mut who_ran = Vec::new();
    for pair in lines.chunks(2) {
        let start: Vec<&str> = pair[0].split(' ').collect();
        assert_eq!(start[0], "start", "two commands overlapped:\n{text}");
        assert_eq!(
            pair[1],
            format!("end {}", start[1]),
            "two commands overlapped:\n{text}"
        );
        assert_eq!(start[3], LOCK_KEY, "TAIRLOCK_KEY");
        fences.push(start[2].parse::<u64>().expect("TAIRLOCK_FENCE is a number"));
        who_ran.push(start[1]);
    }
    assert!(
        fences.windows(2).all(|w| w[0] < w[1]),
        "fences do not increase: {fences:?}"
    );
    for who in ["a", "b"] {
        assert_eq!(who_ran.iter().filter(|w| **w == who).count(), RUNS);
    }
    println!(
        "{} runs in {took:?}, in order {who_ran:?}, fences {fences:?}",
        2 * RUNS
    );
    assert_eq!(
        server.cli(&["EXISTS", LOCK_KEY]),
        "0",
        "released at the end"
    );
}

#[test]
fn tairlock_exits_with_the_commands_status() {
    let server = RedisServer::start();
    let scratch = Scratch::new("status");
    let stderr = scratch.file("stderr");
    for (script, code) in [
        ("exit 0", 0),
        ("exit 7", 7),
        ("exit 200", 200),
        ("kill -9 $$", 137),
    ] {
        let status = tairlock_run(&server, &[], script, &stderr)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "{script}: {}", read(&stderr));
    }
    assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0");
}

#[test]
fn a_lock_not_had_within_wait_exits_75_without_running_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new("wait");
    let (stderr, marker) = (scratch.file("stderr"), scratch.file("ran"));
    let touch = format!("touch {}", marker.display());

    // Another `tairlock run` holds the key.
    let holder_stderr = scratch.file("holder.stderr");
    let started = scratch.file("started");
    let mut holder = tairlock_run(
        &server,
        &[],
        &format!("touch {}; sleep 2", started.display()),
        &holder_stderr,
    )
    .spawn()
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !started.exists() {
        assert!(Instant::now() < deadline, "{}", read(&holder_stderr));
        std::thread::sleep(Duration::from_millis(5));
    }

    let start = Instant::now();
    let status = tairlock_run(&server, &["--wait", "100ms"], &touch, &stderr)
        .status()
        .unwrap();
    let took = start.elapsed();
    assert_eq!(status.code(), Some(75), "{}", read(&stderr));
    assert!(!marker.exists(), "the command ran without the lock");
    assert!(
        took >= Duration::from_millis(100) && took < Duration::from_secs(2),
        "gave up after {took:?}"
    );
    println!("--wait 100ms on a held lock: exit 75 after {took:?}");

    // A longer --wait gets it when the holder finishes.
    let status = tairlock_run(&server, &["--wait", "10s"], &touch, &stderr)
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{}", read(&stderr));
    assert!(marker.exists());
    assert!(
        wait_for(
            &mut holder,
            Duration::from_secs(5),
            "holder",
            &holder_stderr
        )
        .success()
    );
}

#[test]
fn an_unreachable_server_exits_69() {
    let scratch = Scratch::new("unreachable");
    let stderr = scratch.file("stderr");
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let status = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["run", KEY, "--redis", &format!("redis://127.0.0.1:{port}")])
        .args(["--", "true"])
        .stderr(std::fs::File::create(&stderr).unwrap())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(69), "{}", read(&stderr));
}

/// The command traps TERM and records when it arrived (wall clock, ns), kills its sleep and
/// exits; `started` is written once it runs.
fn trapping_script(scratch: &Scratch) -> (String, PathBuf, PathBuf) {
    let (started, term) = (scratch.file("started"), scratch.file("term"));
    let script = format!(
        "trap 'date +%s%N > {term}; kill $pid 2>/dev/null; exit 143' TERM; \
         echo $TAIRLOCK_FENCE > {started}; sleep 10 & pid=$!; wait $pid; echo finished >> {started}",
        term = term.display(),
        started = started.display()
    );
    (script, started, term)
}

#[test]
fn a_server_paused_past_the_lease_stops_the_command_and_exits_76() {
    let server = RedisServer::start();
    let scratch = Scratch::new("paused");
    let stderr = scratch.file("stderr");
    let (script, started, term) = trapping_script(&scratch);
    let ttl = Duration::from_millis(300);
    let mut child = tairlock_run(&server, &["--ttl", "300ms"], &script, &stderr)
        .spawn()
        .unwrap();
    wait_for_text(&started, "\n", Duration::from_secs(5));
    // Held through a few renewals.
    std::thread::sleep(ttl * 2);
    assert!(child.try_wait().unwrap().is_none(), "{}", read(&stderr));

    let pause = Duration::from_millis(1500);
    let paused_at = now_ns();
    assert_eq!(
        server.cli(&["CLIENT", "PAUSE", &pause.as_millis().to_string(), "ALL"]),
        "OK"
    );
    let status = wait_for(&mut child, Duration::from_secs(10), "paused", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    let term_at: u128 = read(&term)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the command never got SIGTERM\n{}", read(&stderr)));
    let after = Duration::from_nanos((term_at.saturating_sub(paused_at)) as u64);
    println!("paused: SIGTERM reached the command {after:?} after the pause began");
    assert!(
        after <= ttl + Duration::from_millis(200),
        "SIGTERM came {after:?} after the pause; the lease is {ttl:?}"
    );
    assert!(after < pause, "stopped while the server was still paused");
    assert!(!read(&started).contains("finished"), "the command ran on");
    assert!(read(&stderr).contains("lost"), "{}", read(&stderr));
}

#[test]
fn a_deleted_key_stops_the_command_and_exits_76() {
    let server = RedisServer::start();
    let scratch = Scratch::new("deleted");
    let stderr = scratch.file("stderr");
    let (script, started, term) = trapping_script(&scratch);
    let mut child = tairlock_run(&server, &["--ttl", "600ms"], &script, &stderr)
        .spawn()
        .unwrap();
    wait_for_text(&started, "\n", Duration::from_secs(5));
    let fence = read(&started).trim().to_owned();
    assert!(
        server
            .cli(&["GET", LOCK_KEY])
            .contains(&format!(":{fence}:"))
    );

    let deleted_at = now_ns();
    assert_eq!(server.cli(&["DEL", LOCK_KEY]), "1");
    let status = wait_for(&mut child, Duration::from_secs(10), "deleted", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    let term_at: u128 = read(&term)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the command never got SIGTERM\n{}", read(&stderr)));
    let after = Duration::from_nanos((term_at.saturating_sub(deleted_at)) as u64);
    println!("deleted: SIGTERM reached the command {after:?} after the delete");
    // Found at the next renewal: one interval (200 ms), plus process overhead.
    assert!(after <= Duration::from_millis(450), "{after:?}");
    assert!(!read(&started).contains("finished"));
}

/// A command that ignores SIGTERM is killed after `--grace`.
#[test]
fn a_command_ignoring_sigterm_is_killed_after_the_grace_period() {
    let server = RedisServer::start();
    let scratch = Scratch::new("grace");
    let stderr = scratch.file("stderr");
    let started = scratch.file("started");
    let script = format!(
        "trap '' TERM; echo up > {s}; sleep 3; echo finished >> {s}",
        s = started.display()
    );
    let mut child = tairlock_run(
        &server,
        &["--ttl", "300ms", "--grace", "300ms"],
        &script,
        &stderr,
    )
    .spawn()
    .unwrap();
    wait_for_text(&started, "up", Duration::from_secs(5));
    let deleted = Instant::now();
    assert_eq!(server.cli(&["DEL", LOCK_KEY]), "1");
    let status = wait_for(&mut child, Duration::from_secs(10), "grace", &stderr);
    let took = deleted.elapsed();
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    println!("ignored SIGTERM: tairlock exited {took:?} after the delete");
    assert!(
        took >= Duration::from_millis(300) && took < Duration::from_secs(2),
        "SIGKILL after the 300 ms grace: {took:?}"
    );
    assert!(read(&stderr).contains("SIGKILL"), "{}", read(&stderr));
    std::thread::sleep(Duration::from_millis(100));
    assert!(!read(&started).contains("finished"), "the command survived");
}

/// SIGTERM and SIGINT sent to tairlock are passed on to the command; tairlock then exits with
/// the command's status and releases the lock.
#[test]
fn signals_sent_to_tairlock_are_passed_to_the_command() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let server = RedisServer::start();
    for (signal, name) in [(Signal::SIGTERM, "TERM"), (Signal::SIGINT, "INT")] {
        let scratch = Scratch::new(name);
        let (stderr, started, got) = (
            scratch.file("stderr"),
            scratch.file("started"),
            scratch.file("got"),
        );
        let script = format!(
            "trap 'echo {name} > {got}; kill $pid 2>/dev/null; exit 42' {name}; \
             echo up > {started}; sleep 10 & pid=$!; wait $pid",
            got = got.display(),
            started = started.display()
        );
        let mut child = tairlock_run(&server, &[], &script, &stderr)
            .spawn()
            .unwrap();
        wait_for_text(&started, "up", Duration::from_secs(5));
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let status = wait_for(&mut child, Duration::from_secs(5), name, &stderr);
        assert_eq!(status.code(), Some(42), "{name}: {}", read(&stderr));
        assert_eq!(read(&got).trim(), name, "the command got {name}");
        assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0", "{name}: released");
    }
}
