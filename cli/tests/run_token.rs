//! `tairlock run KEY --token -- CMD…`: the command held under a token lock (the format of
//! redis-py's `Lock`, node `redlock`, `redis-semaphore`), the built binary against a real server.
//!
//! - While the command runs, KEY itself (exactly as named, braces and all) holds a 32-hex token
//!   with a TTL, renewed past `--ttl` under the same token; the command gets `TAIRLOCK_KEY`, and
//!   `TAIRLOCK_FENCE` is the fencing token in the fence key; the key is gone after.
//! - A `TokenLock` holding KEY: `--wait 0` exits 75 at once and `--wait 300ms` after waiting,
//!   neither running the command nor touching the holder's key.
//! - The key deleted mid-run stops the command (SIGTERM) and exits 76; renewals that cannot land
//!   stop it `--grace` before the key's expiry, as for every kind.
//! - redis-py's `Lock` (the interpreter of `target/valkey-venv`, as `tests/token_interop.rs`
//!   finds it): a run waits while Python holds the key, and runs once Python releases; Python
//!   cannot take the key while the run holds it.
//! - `--token` with another kind's flags, or an empty key, is refused with exit 2, nothing
//!   written.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, now_ns, read, run, until, wait_for, wait_for_text};
use support::RedisServer;
use tairlock::{RedisStore, TokenLock, Unlock};

/// The key, as a Python service names it: `r.lock("reports:nightly")`.
const KEY: &str = "reports:nightly";

/// Shell that writes `$TAIRLOCK_KEY $TAIRLOCK_NAME $TAIRLOCK_FENCE` to `env` once it runs, and
/// holds until `done` exists.
fn holding(env: &Path, done: &Path) -> String {
    format!(
        "echo \"$TAIRLOCK_KEY $TAIRLOCK_NAME $TAIRLOCK_FENCE\" > {env}.tmp; mv {env}.tmp {env}; \
         while [ ! -e {done} ]; do sleep 0.02; done",
        env = env.display(),
        done = done.display()
    )
}

/// Whether `value` is a token of the format as this tool writes it: 32 lowercase hex digits.
fn is_token(value: &str) -> bool {
    value.len() == 32
        && value
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

fn pttl(server: &RedisServer, key: &str) -> i64 {
    server
        .cli(&["PTTL", key])
        .trim()
        .parse()
        .expect("PTTL answers a number")
}

#[test]
fn run_token_holds_the_key_as_named_in_the_token_format_and_releases_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new("held");
    for (key, fence_key) in [
        (KEY, "{reports:nightly}:fence"),
        // Exactly as named: no prefix is split off a key that looks like one of ours.
        ("tairlock:{job}", "tairlock:{job}:fence"),
    ] {
        let (env, done) = (scratch.file("env"), scratch.file("done"));
        let _ = std::fs::remove_file(&env);
        let _ = std::fs::remove_file(&done);
        let stderr = scratch.file("stderr");
        let mut child = run(
            &server,
            key,
            &["--token", "--ttl", "600ms", "--grace", "100ms"],
            &holding(&env, &done),
            &stderr,
        )
        .spawn()
        .unwrap();
        until(Duration::from_secs(10), "the command", || env.exists());
        let token = server.cli(&["GET", key]).trim().to_owned();
        assert!(is_token(&token), "{key} holds {token:?}, not a token");
        let ttl = pttl(&server, key);
        assert!(ttl > 0 && ttl <= 600, "{key}: PTTL {ttl}");
        let seen = read(&env);
        let seen: Vec<&str> = seen.split_whitespace().collect();
        let fence = server.cli(&["GET", fence_key]).trim().to_owned();
        assert_eq!(
            seen,
            [key, key, fence.as_str()],
            "the command's environment"
        );
        assert!(fence.parse::<u64>().is_ok(), "{fence_key} holds {fence:?}");
        let mut keys: Vec<String> = server
            .cli(&["KEYS", "*"])
            .lines()
            .map(str::to_owned)
            .collect();
        keys.sort();
        let mut want = [key, fence_key];
        want.sort();
        assert_eq!(keys, want, "the token lock's keys, and only those");

        // Held past --ttl: renewed under the same token.
        std::thread::sleep(Duration::from_millis(1500));
        assert!(child.try_wait().unwrap().is_none(), "{}", read(&stderr));
        assert_eq!(
            server.cli(&["GET", key]).trim(),
            token,
            "renewed, same token"
        );
        let ttl = pttl(&server, key);
        assert!(ttl > 0 && ttl <= 600, "{key}: PTTL {ttl} after 1.5 s");

        std::fs::write(&done, b"").unwrap();
        let status = wait_for(&mut child, Duration::from_secs(10), "the run", &stderr);
        assert!(status.success(), "{status}: {}", read(&stderr));
        assert_eq!(
            server.cli(&["EXISTS", key]).trim(),
            "0",
            "released at the end"
        );
        // The fence key stays (for its retention), so that fences keep increasing.
        assert_eq!(server.cli(&["GET", fence_key]).trim(), fence);
        server.cli(&["FLUSHALL"]);
        println!("{key}: token {token}, fence {fence}, renewed past --ttl, released");
    }
}

#[test]
fn a_token_lock_held_elsewhere_makes_run_exit_75_without_running_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new("busy");
    let marker = scratch.file("ran");
    let touch = format!("touch {}", marker.display());
    let stderr = scratch.file("stderr");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let locks =
        rt.block_on(async { TokenLock::new(RedisStore::connect(&server.url()).await.unwrap()) });
    let guard = rt.block_on(locks.lock(KEY)).unwrap();
    for (args, says, at_least) in [
        (
            &["--token", "--wait", "0"][..],
            "one attempt",
            Duration::ZERO,
        ),
        (
            &["--token", "--wait", "300ms"][..],
            "gave up after 300ms",
            Duration::from_millis(300),
        ),
    ] {
        let start = Instant::now();
        let status = run(&server, KEY, args, &touch, &stderr).status().unwrap();
        let took = start.elapsed();
        assert_eq!(status.code(), Some(75), "{args:?}: {}", read(&stderr));
        assert!(
            !marker.exists(),
            "{args:?}: the command ran without the lock"
        );
        assert!(read(&stderr).contains(says), "{args:?}: {}", read(&stderr));
        // Generous upper bound for a loaded machine; the holder holds for as long as the test.
        assert!(
            took >= at_least && took < at_least + Duration::from_secs(3),
            "{args:?} took {took:?}"
        );
        assert_eq!(
            server.cli(&["GET", KEY]).trim(),
            guard.token(),
            "the holder's key is untouched"
        );
        println!("{args:?} on a held token lock: exit 75 after {took:?}");
    }
    assert_eq!(rt.block_on(guard.release()).unwrap(), Unlock::Released);
    let status = run(&server, KEY, &["--token", "--wait", "0"], &touch, &stderr)
        .status()
        .unwrap();
    assert!(status.success(), "{}", read(&stderr));
    assert!(marker.exists(), "free again: the command ran");
}

/// The command traps TERM, records when it came (wall clock, ns) and exits 143; `started` is
/// written once it runs, and `finished` only if nothing stopped it within 20 s.
fn trapping(scratch: &Scratch) -> (String, PathBuf, PathBuf) {
    let (started, term) = (scratch.file("started"), scratch.file("term"));
    let script = format!(
        "trap 'date +%s%N > {term}; exit 143' TERM; echo up > {started}; sleep 20 & wait $!; \
         echo finished >> {started}",
        term = term.display(),
        started = started.display()
    );
    (script, started, term)
}

/// When the command got SIGTERM (wall clock, ns).
fn term_at(term: &Path, stderr: &Path) -> u128 {
    read(term)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the command never got SIGTERM\n{}", read(stderr)))
}

#[test]
fn a_token_key_deleted_mid_run_stops_the_command_and_exits_76() {
    let server = RedisServer::start();
    let scratch = Scratch::new("deleted");
    let stderr = scratch.file("stderr");
    let (script, started, term) = trapping(&scratch);
    let mut child = run(
        &server,
        KEY,
        &["--token", "--ttl", "600ms", "--grace", "100ms"],
        &script,
        &stderr,
    )
    .spawn()
    .unwrap();
    wait_for_text(&started, "up", Duration::from_secs(10));
    let deleted_at = now_ns();
    assert_eq!(server.cli(&["DEL", KEY]).trim(), "1");
    let status = wait_for(&mut child, Duration::from_secs(10), "deleted", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    let after = Duration::from_nanos(term_at(&term, &stderr).saturating_sub(deleted_at) as u64);
    println!("token key deleted: SIGTERM reached the command {after:?} later");
    // Found at the next renewal: one interval (200 ms), plus a loaded machine's overhead.
    assert!(after <= Duration::from_millis(1000), "{after:?}");
    assert!(!read(&started).contains("finished"), "the command ran on");
    assert!(read(&stderr).contains("was lost"), "{}", read(&stderr));
    assert_eq!(server.cli(&["EXISTS", KEY]).trim(), "0");
}

/// Renewals that cannot land (writes paused on the server, reads still answered): the token
/// lease's local deadline reaches the supervisor like every kind's, and the command gets
/// SIGTERM `--grace` before it, measured against the key's expiry as the server reports it.
#[test]
fn failing_token_renewals_stop_the_command_before_the_key_expires() {
    let server = RedisServer::start();
    let scratch = Scratch::new("overdue");
    let stderr = scratch.file("stderr");
    let (script, started, term) = trapping(&scratch);
    let grace = Duration::from_millis(1500);
    let mut child = run(
        &server,
        KEY,
        &["--token", "--ttl", "3s", "--grace", "1500ms"],
        &script,
        &stderr,
    )
    .spawn()
    .unwrap();
    wait_for_text(&started, "up", Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(300));
    // The renew script is a write: it waits until the pause ends, long after the lease ran out.
    assert_eq!(
        server.cli(&["CLIENT", "PAUSE", "5000", "WRITE"]).trim(),
        "OK"
    );
    let asked = now_ns();
    let ttl = pttl(&server, KEY);
    assert!(ttl > 0, "PTTL {ttl}");
    let expiry = asked + Duration::from_millis(ttl as u64).as_nanos();
    let status = wait_for(&mut child, Duration::from_secs(15), "overdue", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    let before_expiry = Duration::from_nanos(expiry.saturating_sub(term_at(&term, &stderr)) as u64);
    println!(
        "token renewals paused: SIGTERM {before_expiry:?} before the key's expiry \
         (--grace {grace:?})"
    );
    assert!(
        before_expiry >= grace / 2,
        "SIGTERM only {before_expiry:?} before the key's expiry; --grace is {grace:?}\n{}",
        read(&stderr)
    );
    assert!(
        read(&stderr).contains("could not be renewed"),
        "{}",
        read(&stderr)
    );
}

/// The Python interpreter with redis-py, found as `tests/token_interop.rs` finds it
/// (`TAIRLOCK_PYTHON`, else `target/valkey-venv`, where `scripts/test.sh` installs it), or a
/// failure that says how to install it.
fn python() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let python = std::env::var_os("TAIRLOCK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/valkey-venv/bin/python"));
    let has_redis_py = Command::new(&python)
        .args(["-c", "import redis.lock"])
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_redis_py,
        "redis-py is not installed for {}: `bash scripts/test.sh` installs it into \
         target/valkey-venv (or run `{} -m pip install redis`; TAIRLOCK_PYTHON may name another \
         interpreter that has it)",
        python.display(),
        python.display()
    );
    python
}

/// A redis-py `Lock` on `key` in a process of its own (`tests/interop/token_participant.py`),
/// its standard output read line by line.
struct PyLock {
    child: Child,
    lines: std::io::Lines<BufReader<std::process::ChildStdout>>,
}

impl PyLock {
    /// `MODE` of the participant script, for `seconds`, with a lease of `ttl`.
    fn start(server: &RedisServer, key: &str, mode: &str, seconds: f64, ttl: Duration) -> PyLock {
        let script =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../tests/interop/token_participant.py");
        let mut child = Command::new(python())
            .arg(script)
            .args([&server.url(), key, "/dev/null", mode])
            .arg(seconds.to_string())
            .arg(ttl.as_millis().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("python starts");
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        PyLock { child, lines }
    }

    /// The next line it prints.
    fn line(&mut self) -> String {
        match self.lines.next() {
            Some(Ok(line)) => line,
            other => panic!("the Python side ended without a word: {other:?}"),
        }
    }
}

impl Drop for PyLock {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn run_token_and_redis_py_lock_exclude_each_other() {
    let server = RedisServer::start();
    let scratch = Scratch::new("python");
    // Python holds the key (`late` mode: it releases on a line on its standard input).
    let mut py = PyLock::start(&server, KEY, "late", 0.0, Duration::from_secs(30));
    let held = py.line();
    let theirs = held.strip_prefix("HELD ").expect("HELD TOKEN").to_owned();
    assert_eq!(server.cli(&["GET", KEY]).trim(), theirs);

    let (env, done) = (scratch.file("env"), scratch.file("done"));
    let stderr = scratch.file("stderr");
    let mut child = run(
        &server,
        KEY,
        &[
            "--token", "--wait", "30s", "--ttl", "3s", "--grace", "500ms",
        ],
        &format!(
            "date +%s%N > {}; {}",
            scratch.file("at").display(),
            holding(&env, &done)
        ),
        &stderr,
    )
    .spawn()
    .unwrap();
    // It waits while Python holds the key.
    std::thread::sleep(Duration::from_millis(1000));
    assert!(!env.exists(), "the command ran while Python held the key");
    assert!(child.try_wait().unwrap().is_none(), "{}", read(&stderr));
    assert_eq!(server.cli(&["GET", KEY]).trim(), theirs);

    let released_at = now_ns();
    py.child.stdin.as_mut().unwrap().write_all(b"go\n").unwrap();
    assert_eq!(py.line(), "RELEASED");
    until(
        Duration::from_secs(10),
        "the command after Python's release",
        || env.exists(),
    );
    let at: u128 = read(&scratch.file("at")).trim().parse().unwrap();
    assert!(
        at >= released_at,
        "the command started before Python released"
    );
    let waited = Duration::from_nanos((at - released_at) as u64);
    println!(
        "run --token started {waited:?} after redis-py released (a waiter looks again every 100 ms)"
    );
    let ours = server.cli(&["GET", KEY]).trim().to_owned();
    assert!(is_token(&ours) && ours != theirs, "{ours:?}");
    drop(py);

    // Python cannot take the key while the run holds it: `wait` mode gives up after 0.5 s.
    let mut py = PyLock::start(&server, KEY, "wait", 0.5, Duration::from_secs(30));
    assert_eq!(py.line(), "TIMEOUT");
    assert_eq!(server.cli(&["GET", KEY]).trim(), ours);

    std::fs::write(&done, b"").unwrap();
    let status = wait_for(&mut child, Duration::from_secs(10), "the run", &stderr);
    assert!(status.success(), "{status}: {}", read(&stderr));
    // Free again: Python takes it at once.
    let mut py = PyLock::start(&server, KEY, "wait", 5.0, Duration::from_secs(30));
    let line = py.line();
    assert!(line.starts_with("ACQUIRED "), "{line}");
    py.child.stdin.take();
    let _ = py.child.wait();
}

/// `--token` with another kind's flags, or an empty key, is a usage error: exit 2, the command
/// not run, nothing written.
#[test]
fn token_with_another_kinds_flags_or_an_empty_key_is_refused_with_exit_2() {
    let server = RedisServer::start();
    let scratch = Scratch::new("refused");
    let marker = scratch.file("ran");
    let touch = format!("touch {}", marker.display());
    let stderr = scratch.file("stderr");
    for (key, args, says) in [
        (KEY, &["--token", "--legacy"][..], "cannot be used with"),
        (KEY, &["--token", "--read"][..], "cannot be used with"),
        (KEY, &["--token", "--write"][..], "cannot be used with"),
        (KEY, &["--token", "--fair"][..], "cannot be used with"),
        (
            KEY,
            &["--token", "--permits", "2"][..],
            "cannot be used with",
        ),
        (
            KEY,
            &["--token", "--prefix", "app:"][..],
            "cannot be used with",
        ),
        // These require another kind's flag: refused as conflicting with --token.
        (KEY, &["--token", "--unit", "ms"][..], "cannot be used with"),
        (
            KEY,
            &["--token", "--legacy-kind", "getset"][..],
            "cannot be used with",
        ),
        (
            KEY,
            &["--token", "--preference", "reader"][..],
            "cannot be used with",
        ),
        ("", &["--token"][..], "the lock key is empty"),
    ] {
        let status = run(&server, key, args, &touch, &stderr).status().unwrap();
        assert_eq!(
            status.code(),
            Some(2),
            "{key:?} {args:?}: {}",
            read(&stderr)
        );
        assert!(
            read(&stderr).contains(says),
            "{key:?} {args:?}: {}",
            read(&stderr)
        );
    }
    assert!(!marker.exists(), "a refused run ran its command");
    assert_eq!(server.cli(&["DBSIZE"]).trim(), "0", "nothing was written");
}
