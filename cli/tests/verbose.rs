//! `tairlock run -v`, `-q`, `--log` and `RUST_LOG` (issue #15 §3), the built binary against a
//! real `redis-server`: what the user reads on stderr.
//!
//! - `-v`: the acquisition with the fence the command sees, each renewal, the command's start
//!   and exit, and the release.
//! - `-v` with the lease deleted mid-run: a `WARN` that the lease was lost and why, then the
//!   error line that stops the command; exit 76.
//! - `-q`: the same loss shows only the error line; a normal run prints nothing.
//! - `RUST_LOG` is read without `-v`; a malformed `--log` filter is a usage error (exit 2).

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, read, wait_for};
use support::RedisServer;

const KEY: &str = "job";
const LOCK_KEY: &str = "tairlock:{job}";

/// `tairlock FLAGS… run KEY --redis URL --ttl 1500ms --grace 300ms -- sh -c SCRIPT` (renewed
/// every 500 ms, with room for a loaded machine's late renewal), stderr into `stderr` (a file:
/// the command's children must not hold a pipe open), without `RUST_LOG`.
fn tairlock(server: &RedisServer, flags: &[&str], script: &str, stderr: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tairlock"));
    cmd.args(flags)
        .args(["run", KEY, "--redis", &server.url(), "--ttl", "1500ms"])
        .args(["--grace", "300ms", "--", "sh", "-c", script])
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap());
    cmd
}

/// Poll until `path` has a line.
fn wait_for_line(path: &Path, limit: Duration) -> String {
    let start = Instant::now();
    loop {
        let text = read(path);
        if text.contains('\n') {
            return text.trim().to_owned();
        }
        assert!(start.elapsed() < limit, "{} stayed empty", path.display());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The one line of `stderr` that contains `message`.
fn line<'a>(stderr: &'a str, message: &str) -> &'a str {
    let lines: Vec<_> = stderr.lines().filter(|l| l.contains(message)).collect();
    assert_eq!(lines.len(), 1, "{message:?} in:\n{stderr}");
    lines[0]
}

/// Run the command, which writes its fence to a file and sleeps; delete the lock key behind
/// its back once it started. Returns the exit status, stderr and the fence.
fn run_and_delete(flags: &[&str], name: &str) -> (ExitStatus, String, String) {
    let server = RedisServer::start();
    let scratch = Scratch::new(name);
    let (stderr, fence) = (scratch.file("stderr"), scratch.file("fence"));
    let script = format!("echo $TAIRLOCK_FENCE > {}; sleep 5", fence.display());
    let mut child = tairlock(&server, flags, &script, &stderr).spawn().unwrap();
    let fence = wait_for_line(&fence, Duration::from_secs(5));
    assert_eq!(server.cli(&["DEL", LOCK_KEY]), "1");
    let status = wait_for(&mut child, Duration::from_secs(10), "tairlock run", &stderr);
    (status, read(&stderr), fence)
}

#[test]
fn run_v_tells_the_fence_renewals_and_release() {
    let server = RedisServer::start();
    let scratch = Scratch::new("cycle");
    let (stderr, fence) = (scratch.file("stderr"), scratch.file("fence"));
    // 1.2 s under a 1.5 s lease: renewed every 500 ms, twice or so.
    let script = format!("echo $TAIRLOCK_FENCE > {}; sleep 1.2", fence.display());
    let mut child = tairlock(&server, &["-v"], &script, &stderr)
        .spawn()
        .unwrap();
    let status = wait_for(&mut child, Duration::from_secs(10), "tairlock run", &stderr);
    let out = read(&stderr);
    println!("{out}");
    assert_eq!(status.code(), Some(0), "{out}");
    let fence = format!("fence={}", read(&fence).trim());
    let acquired = line(&out, "DEBUG acquired");
    assert!(acquired.contains("lock=job"), "{acquired}");
    assert!(acquired.contains(&fence), "{acquired}");
    assert!(line(&out, "command started").contains(&fence), "{out}");
    let renewals = out.lines().filter(|l| l.contains("lease renewed")).count();
    assert!(renewals >= 1, "{out}");
    assert!(line(&out, "command exited").contains("code=0"), "{out}");
    let released = line(&out, "DEBUG released");
    assert!(released.contains("outcome=released"), "{released}");
    assert!(released.contains(&fence), "{released}");
    assert!(!out.contains("WARN"), "{out}");
    // In that order.
    let at = |message| out.find(message).unwrap();
    assert!(at("acquired") < at("command started"), "{out}");
    assert!(at("command started") < at("lease renewed"), "{out}");
    assert!(at("command exited") < at("released"), "{out}");
}

#[test]
fn run_v_tells_a_lease_deleted_mid_run_and_why() {
    let (status, out, fence) = run_and_delete(&["-v"], "deleted-v");
    println!("{out}");
    assert_eq!(status.code(), Some(76), "{out}");
    let lost = line(&out, "lease lost");
    assert!(lost.contains(" WARN "), "{lost}");
    assert!(lost.contains(&format!("fence={fence}")), "{lost}");
    assert!(
        lost.contains("reason=a renewal found the lease gone: it expired or was deleted"),
        "{lost}"
    );
    let stopping = "tairlock run: the lease on job was lost; stopping the command (SIGTERM to everything it started)";
    line(&out, stopping);
    // The reason first, then what tairlock does about it.
    assert!(
        out.find("lease lost").unwrap() < out.find(stopping).unwrap(),
        "{out}"
    );
    assert!(
        line(&out, "DEBUG released").contains("outcome=not_held"),
        "{out}"
    );
}

#[test]
fn q_leaves_only_the_error() {
    let (status, out, _) = run_and_delete(&["-q"], "deleted-q");
    assert_eq!(status.code(), Some(76), "{out}");
    assert_eq!(
        out.trim(),
        "tairlock run: the lease on job was lost; stopping the command (SIGTERM to everything it started)",
    );

    let server = RedisServer::start();
    let scratch = Scratch::new("quiet");
    let stderr = scratch.file("stderr");
    let mut child = tairlock(&server, &["-q"], "true", &stderr).spawn().unwrap();
    let status = wait_for(&mut child, Duration::from_secs(10), "tairlock run", &stderr);
    assert_eq!(status.code(), Some(0));
    assert_eq!(read(&stderr), "");
}

#[test]
fn without_flags_a_loss_is_a_warning_and_rust_log_is_read() {
    let (status, out, _) = run_and_delete(&[], "deleted-plain");
    assert_eq!(status.code(), Some(76), "{out}");
    assert!(line(&out, "lease lost").contains(" WARN "), "{out}");
    assert!(!out.contains("DEBUG"), "{out}");

    let server = RedisServer::start();
    let scratch = Scratch::new("rust-log");
    let stderr = scratch.file("stderr");
    let mut child = tairlock(&server, &[], "true", &stderr)
        .env("RUST_LOG", "tairlock=debug")
        .spawn()
        .unwrap();
    let status = wait_for(&mut child, Duration::from_secs(10), "tairlock run", &stderr);
    assert_eq!(status.code(), Some(0));
    assert!(read(&stderr).contains("acquired"), "{}", read(&stderr));
}

#[test]
fn a_malformed_log_filter_is_a_usage_error() {
    let output = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["--log", "tairlock=loud", "inspect", "x"])
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("bad log filter"), "{stderr}");
}
