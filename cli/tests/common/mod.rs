//! Helpers the tests of the `tairlock` binary share: a scratch directory, `tairlock run` with
//! its stderr in a file, and waiting for a child, a file or a condition with a time bound.
//!
//! Included with `mod common;` (next to `mod support;`); a `tests/common/mod.rs` is not a test
//! target of its own. Each test target uses only some of these.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::support::RedisServer;

/// A private directory for one test's files, removed on drop.
pub(crate) struct Scratch(PathBuf);

impl Scratch {
    /// A new directory named after the test target, the process and `name`.
    pub(crate) fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!(
            "tairlock-{}-{}-{name}-{}",
            env!("CARGO_CRATE_NAME"),
            std::process::id(),
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    /// The path of `name` inside the directory.
    pub(crate) fn file(&self, name: &str) -> PathBuf {
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
pub(crate) fn run(
    server: &RedisServer,
    key: &str,
    args: &[&str],
    script: &str,
    stderr: &Path,
) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_tairlock"));
    cmd.args(["run", key, "--redis", &server.url()])
        .args(args)
        .args(["--", "sh", "-c", script])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(stderr).unwrap());
    cmd
}

/// Wait for `child` at most `limit`; kill it and fail, showing `stderr`, if it takes longer.
pub(crate) fn wait_for(
    child: &mut Child,
    limit: Duration,
    what: &str,
    stderr: &Path,
) -> ExitStatus {
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
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The text of `path`, empty if it does not exist (yet).
pub(crate) fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Poll until `ready()`, failing after `limit`.
pub(crate) fn until(limit: Duration, what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Poll until `path` contains `needle`.
pub(crate) fn wait_for_text(path: &Path, needle: &str, limit: Duration) {
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

/// The wall clock in ns since the Unix epoch.
pub(crate) fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos()
}
