//! Sharing a lock with the lock libraries of other languages, on a real server: a `TokenLock`
//! against redis-py's `Lock` (always) and node `redlock` 4 and `redis-semaphore`'s Mutex (when
//! `node` is installed), each run by its real client in a process of its own
//! (`tests/interop/token_participant.{py,js}`).
//!
//! - **Contention**: the Rust side (two clients in this process) and the other processes take
//!   one key for a few seconds, and every critical section appends `enter`/`leave` lines to one
//!   append-only log, checking before each that the key still holds its own token. The log
//!   shows no overlap, every side acquiring, no section whose key was taken from under it, and
//!   no release that found its token gone.
//! - **Crashes**: a holder of either side that is `SIGKILL`ed while it keeps its lock alive is
//!   taken over by the other side within its TTL (and not before: it was kept past one TTL).
//! - **Late releases**: a holder whose lease ran out, and whose key the other side took, deletes
//!   nothing when it releases.
//!
//! What the test command installs: redis-py into `target/valkey-venv` (`TAIRLOCK_PYTHON` may
//! name another interpreter that has it), and, when `node` is on the `PATH`, `redlock`,
//! `redis-semaphore` and `ioredis` into `target/token-node` (`TAIRLOCK_NODE_MODULES` may name
//! another `node_modules`). A missing redis-py is a failure with the command that installs it;
//! a missing `node` skips the Node tests, saying so on the test's standard error.

mod support;

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use support::RedisServer;
use tairlock::{RedisStore, Store, TokenLock, TokenOptions, Unlock};
use tokio::time::Instant;

/// How long each contention runs.
const CONTEND: Duration = Duration::from_secs(3);
/// The lease of every holder in the crash tests.
const TTL: Duration = Duration::from_millis(1000);
/// What a loaded 2-core machine may add to a takeover: a poll interval, a process being
/// scheduled, a round trip.
const TAKEOVER_SLACK: Duration = Duration::from_millis(800);

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Python interpreter with redis-py, or a failure that says how to install it.
fn python() -> PathBuf {
    let python = std::env::var_os("TAIRLOCK_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/valkey-venv/bin/python"));
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

/// `node` and the `node_modules` with redlock and redis-semaphore; `None` (said on standard
/// error, past the test harness's capture) when `node` is not installed.
fn node(test: &str) -> Option<PathBuf> {
    let installed = Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !installed {
        // Written to the process's standard error directly, so that it shows in the test run's
        // output even though the test passes.
        let _ = writeln!(
            std::io::stderr(),
            "token_interop::{test}: SKIPPED: `node` is not on the PATH, so node redlock and \
             redis-semaphore cannot run (install Node.js; scripts/test.sh then installs them)"
        );
        return None;
    }
    let modules = std::env::var_os("TAIRLOCK_NODE_MODULES")
        .map(PathBuf::from)
        .unwrap_or_else(|| root().join("target/token-node/node_modules"));
    for package in ["redlock", "redis-semaphore", "ioredis"] {
        assert!(
            modules.join(package).join("package.json").exists(),
            "{package} is not installed in {}: `bash scripts/test.sh` installs it (`npm install \
             --prefix target/token-node redlock@4.2.0 redis-semaphore@5 ioredis@5`)",
            modules.display()
        );
    }
    Some(modules)
}

/// A fresh append-only log file.
fn log_file(test: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!(
        "tairlock-token-{test}-{}-{}.log",
        std::process::id(),
        rand_suffix()
    ));
    std::fs::write(&path, b"").unwrap();
    path
}

fn rand_suffix() -> String {
    tairlock::new_nonce()[..8].to_owned()
}

/// Append one line in one write (the file is opened with `O_APPEND`).
fn append(log: &Path, line: &str) {
    let mut file = std::fs::OpenOptions::new().append(true).open(log).unwrap();
    file.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// A participant process, its standard output read line by line.
struct Participant {
    name: String,
    child: Child,
    stdin: Option<ChildStdin>,
    lines: mpsc::Receiver<String>,
}

impl Participant {
    fn spawn(name: &str, mut command: Command) -> Participant {
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Participant {
            name: name.to_owned(),
            stdin: child.stdin.take(),
            child,
            lines,
        }
    }

    fn python(url: &str, key: &str, log: &Path, mode: &str, seconds: f64, ttl: Duration) -> Self {
        let mut command = Command::new(python());
        command
            .arg(root().join("tests/interop/token_participant.py"))
            .args([url, key])
            .arg(log)
            .args([mode, &seconds.to_string(), &ttl.as_millis().to_string()]);
        Participant::spawn(&format!("python {mode}"), command)
    }

    #[allow(clippy::too_many_arguments)]
    fn node(
        modules: &Path,
        url: &str,
        key: &str,
        log: &Path,
        client: &str,
        mode: &str,
        seconds: f64,
        ttl: Duration,
    ) -> Self {
        let mut command = Command::new("node");
        command
            .env("NODE_PATH", modules)
            .arg(root().join("tests/interop/token_participant.js"))
            .args([url, key])
            .arg(log)
            .args([
                client,
                mode,
                &seconds.to_string(),
                &ttl.as_millis().to_string(),
            ]);
        Participant::spawn(&format!("node {client} {mode}"), command)
    }

    /// The next line of its output, within `within`.
    fn line(&self, within: Duration) -> String {
        self.lines
            .recv_timeout(within)
            .unwrap_or_else(|e| panic!("{}: no output line within {within:?} ({e})", self.name))
    }

    /// The next line, within `within`, starting with `prefix`; the rest of it.
    fn expect(&self, prefix: &str, within: Duration) -> String {
        let line = self.line(within);
        line.strip_prefix(prefix)
            .unwrap_or_else(|| panic!("{}: expected {prefix:?}, got {line:?}", self.name))
            .trim()
            .to_owned()
    }

    /// Whether a line came within `within`.
    fn said_anything(&self, within: Duration) -> Option<String> {
        self.lines.recv_timeout(within).ok()
    }

    fn send_line(&mut self) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(b"go\n").unwrap();
        stdin.flush().unwrap();
    }

    fn close_stdin(&mut self) {
        self.stdin.take();
    }

    fn kill(&mut self) {
        self.child.kill().unwrap();
        self.child.wait().unwrap();
    }

    fn wait(mut self) {
        self.stdin.take();
        let status = self.child.wait().unwrap();
        assert!(status.success(), "{}: {status}", self.name);
    }
}

impl Drop for Participant {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// What the log shows.
#[derive(Debug, Default)]
struct Audit {
    /// Critical sections by side.
    sections: BTreeMap<String, usize>,
    /// An `enter` while another section was open.
    overlaps: Vec<String>,
    /// Lines reporting a key that did not hold the section's token, a release that found its
    /// token gone, or a lock lost while held.
    problems: Vec<String>,
}

fn audit(log: &Path) -> Audit {
    let text = std::fs::read_to_string(log).unwrap();
    let mut audit = Audit::default();
    let mut inside: Option<String> = None;
    for line in text.lines() {
        let mut words = line.split(' ');
        let (event, side, who, token) = (
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default(),
            words.next().unwrap_or_default(),
        );
        let holder = format!("{side} {who} {token}");
        match event {
            "enter" => {
                if let Some(open) = &inside {
                    audit
                        .overlaps
                        .push(format!("{line:?} while {open:?} was inside"));
                }
                *audit.sections.entry(side.to_owned()).or_default() += 1;
                inside = Some(holder);
            }
            "leave" => {
                if inside.as_deref() == Some(holder.as_str()) {
                    inside = None;
                } else {
                    audit
                        .overlaps
                        .push(format!("{line:?} left while {inside:?} was inside"));
                }
            }
            _ => audit.problems.push(line.to_owned()),
        }
    }
    audit
}

fn rust_options() -> TokenOptions {
    TokenOptions::default()
        .watchdog_lease(Duration::from_secs(2))
        .recheck(Duration::from_millis(5))
}

/// One Rust client contending for `key` until `until`, logging as the participants do; returns
/// how many sections it ran.
async fn rust_contender(url: String, key: String, log: PathBuf, name: &str, until: Instant) {
    let store = RedisStore::connect(&url).await.unwrap();
    let locks = TokenLock::with_options(store.clone(), rust_options());
    let pid = format!("{}-{name}", std::process::id());
    while Instant::now() < until {
        let Some(guard) = locks
            .try_lock_for(&key, Duration::from_secs(1))
            .await
            .unwrap()
        else {
            continue;
        };
        let token = guard.token().to_owned();
        for step in ["enter", "leave"] {
            let held = store.get(&key).await.unwrap();
            if held.as_deref() == Some(token.as_bytes()) {
                append(&log, &format!("{step} rust {pid} {token}"));
            } else {
                append(&log, &format!("stolen rust {pid} {token} {held:?}"));
            }
            if step == "enter" {
                let ms = 2 + rand_ms(8);
                tokio::time::sleep(Duration::from_millis(ms)).await;
            }
        }
        match guard.release().await.unwrap() {
            Unlock::Released => {}
            other => append(&log, &format!("notowned rust {pid} {token} {other:?}")),
        }
        tokio::time::sleep(Duration::from_millis(rand_ms(10))).await;
    }
}

fn rand_ms(below: u64) -> u64 {
    u64::from_str_radix(&tairlock::new_nonce()[..4], 16).unwrap() % below
}

/// Run two Rust contenders for [`CONTEND`] beside `others`, then audit the log.
async fn contend(url: &str, key: &str, log: &Path, others: Vec<Participant>) -> Audit {
    let until = Instant::now() + CONTEND + Duration::from_millis(500);
    let rust: Vec<_> = ["a", "b"]
        .into_iter()
        .map(|name| {
            tokio::spawn(rust_contender(
                url.to_owned(),
                key.to_owned(),
                log.to_owned(),
                name,
                until,
            ))
        })
        .collect();
    // The participants are waited for off the runtime, which runs the Rust side meanwhile.
    tokio::task::spawn_blocking(move || {
        for participant in others {
            let said = participant.expect("acquired", CONTEND + Duration::from_secs(20));
            assert!(
                said.parse::<u64>().is_ok_and(|n| n > 0),
                "{}: acquired {said}",
                participant.name
            );
            participant.wait();
        }
    })
    .await
    .unwrap();
    for task in rust {
        task.await.unwrap();
    }
    audit(log)
}

#[track_caller]
fn assert_exclusive(audit: &Audit, sides: &[&str]) {
    assert!(audit.overlaps.is_empty(), "overlaps: {:#?}", audit.overlaps);
    assert!(audit.problems.is_empty(), "problems: {:#?}", audit.problems);
    for side in sides {
        assert!(
            audit.sections.get(*side).copied().unwrap_or(0) > 0,
            "{side} never acquired: {:?}",
            audit.sections
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_and_python_share_one_key_without_overlap() {
    let server = RedisServer::start();
    let url = server.url();
    let log = log_file("python");
    let python = Participant::python(&url, "jobs:nightly", &log, "contend", 3.0, TTL * 2);
    let audit = contend(&url, "jobs:nightly", &log, vec![python]).await;
    println!("{audit:?}");
    assert_exclusive(&audit, &["rust", "py"]);
    std::fs::remove_file(&log).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rust_python_and_node_share_one_key_without_overlap() {
    let Some(modules) = node("rust_python_and_node_share_one_key_without_overlap") else {
        return;
    };
    let server = RedisServer::start();
    let url = server.url();
    let log = log_file("node");
    // redis-semaphore keys its mutex `mutex:<name>`: everyone else uses that key as it is.
    let key = "mutex:shared";
    let others = vec![
        Participant::python(&url, key, &log, "contend", 3.0, TTL * 2),
        Participant::node(
            &modules,
            &url,
            key,
            &log,
            "redlock",
            "contend",
            3.0,
            TTL * 2,
        ),
        Participant::node(&modules, &url, key, &log, "mutex", "contend", 3.0, TTL * 2),
    ];
    let audit = contend(&url, key, &log, others).await;
    println!("{audit:?}");
    assert_exclusive(&audit, &["rust", "py", "redlock", "mutex"]);
    std::fs::remove_file(&log).unwrap();
}

/// A Rust waiter for `key` on `url`, started now: resolves with the instant it got the lock.
fn rust_waiter(
    url: &str,
    key: &str,
) -> tokio::task::JoinHandle<(tairlock::TokenGuard<RedisStore>, Instant)> {
    let (url, key) = (url.to_owned(), key.to_owned());
    tokio::spawn(async move {
        let locks = TokenLock::with_options(
            RedisStore::connect(&url).await.unwrap(),
            rust_options().recheck(Duration::from_millis(20)),
        );
        let guard = locks.lock(&key).await.unwrap();
        (guard, Instant::now())
    })
}

/// Kill `holder` (which keeps its lock alive) after it has held past one TTL with a Rust waiter
/// queued, and check the waiter takes over within the TTL.
async fn rust_takes_over_from(mut holder: Participant, url: &str, key: &str) {
    let token = holder.expect("HELD", Duration::from_secs(20));
    let store = RedisStore::connect(url).await.unwrap();
    let waiter = rust_waiter(url, key);
    tokio::time::sleep(TTL + TTL / 2).await;
    assert!(
        !waiter.is_finished(),
        "{}: the waiter got a live lock",
        holder.name
    );
    assert_eq!(
        store.get(key).await.unwrap(),
        Some(token.clone().into_bytes()),
        "{}: kept past one TTL",
        holder.name
    );
    holder.kill();
    let killed = Instant::now();
    let (guard, got) = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .expect("taken over")
        .unwrap();
    let took = got - killed;
    assert!(
        took <= TTL + TAKEOVER_SLACK,
        "{}: taken over {took:?} after the kill, TTL {TTL:?}",
        holder.name
    );
    assert_ne!(guard.token(), token);
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_python_holder_is_taken_over_within_its_ttl() {
    let server = RedisServer::start();
    let url = server.url();
    let log = log_file("py-crash");
    let holder = Participant::python(&url, "crash", &log, "hold", 0.0, TTL);
    rust_takes_over_from(holder, &url, "crash").await;
    std::fs::remove_file(&log).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_node_holder_is_taken_over_within_its_ttl() {
    let Some(modules) = node("a_crashed_node_holder_is_taken_over_within_its_ttl") else {
        return;
    };
    let server = RedisServer::start();
    let url = server.url();
    let log = log_file("node-crash");
    for client in ["redlock", "mutex"] {
        let key = format!("mutex:crash-{client}");
        let holder = Participant::node(&modules, &url, &key, &log, client, "hold", 0.0, TTL);
        rust_takes_over_from(holder, &url, &key).await;
    }
    std::fs::remove_file(&log).unwrap();
}

/// The child half of [`a_crashed_rust_holder_is_taken_over_by_python_within_its_ttl`]: runs
/// only when that test starts it (with the server's URL and the key), takes the key with a
/// watchdog of one TTL, says `HELD <token>`, and holds it until it is killed.
#[test]
#[ignore = "started by a_crashed_rust_holder_is_taken_over_by_python_within_its_ttl"]
fn rust_holder_child() {
    let (Ok(url), Ok(key)) = (
        std::env::var("TAIRLOCK_TOKEN_CHILD_URL"),
        std::env::var("TAIRLOCK_TOKEN_CHILD_KEY"),
    ) else {
        return;
    };
    let runtime = tokio::runtime::Runtime::new().unwrap();
    runtime.block_on(async {
        let locks = TokenLock::with_options(
            RedisStore::connect(&url).await.unwrap(),
            TokenOptions::default().watchdog_lease(TTL),
        );
        let guard = locks.lock(&key).await.unwrap();
        println!("HELD {}", guard.token());
        std::io::stdout().flush().unwrap();
        std::future::pending::<()>().await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_rust_holder_is_taken_over_by_python_within_its_ttl() {
    let server = RedisServer::start();
    let url = server.url();
    let log = log_file("rust-crash");
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([
            "--exact",
            "rust_holder_child",
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("TAIRLOCK_TOKEN_CHILD_URL", &url)
        .env("TAIRLOCK_TOKEN_CHILD_KEY", "crash");
    let mut holder = Participant::spawn("rust holder", command);
    let token = loop {
        let line = holder.line(Duration::from_secs(20));
        if let Some(token) = line.strip_prefix("HELD ") {
            break token.to_owned();
        }
    };
    let mut waiter = Participant::python(&url, "crash", &log, "wait", 20.0, TTL * 5);
    // Kept past one TTL by its watchdog, with the Python waiter polling.
    let said = waiter.said_anything(TTL + TTL / 2);
    assert_eq!(said, None, "the Python waiter got a live lock");
    let store = RedisStore::connect(&url).await.unwrap();
    assert_eq!(
        store.get("crash").await.unwrap(),
        Some(token.clone().into_bytes())
    );
    holder.kill();
    let killed = Instant::now();
    let theirs = waiter.expect("ACQUIRED", Duration::from_secs(10));
    let took = killed.elapsed();
    assert!(
        took <= TTL + TAKEOVER_SLACK,
        "taken over {took:?} after the kill, TTL {TTL:?}"
    );
    assert_ne!(theirs, token);
    waiter.close_stdin();
    waiter.wait();
    assert_eq!(
        store.key_type("crash").await.unwrap(),
        "none",
        "python released"
    );
    std::fs::remove_file(&log).unwrap();
}

/// A foreign holder (`late` mode, a lease of 300 ms) whose lease runs out while a Rust waiter
/// takes the key: its late release deletes nothing of ours.
async fn their_late_release_deletes_nothing(mut late: Participant, url: &str, key: &str) {
    let theirs = late.expect("HELD", Duration::from_secs(20));
    let (guard, _) = tokio::time::timeout(Duration::from_secs(10), rust_waiter(url, key))
        .await
        .expect("taken after their lease")
        .unwrap();
    assert_ne!(guard.token(), theirs);
    late.send_line();
    assert_eq!(
        late.line(Duration::from_secs(10)),
        "NOTOWNED",
        "{}",
        late.name
    );
    let store = RedisStore::connect(url).await.unwrap();
    assert_eq!(
        store.get(key).await.unwrap(),
        Some(guard.token().as_bytes().to_vec()),
        "{}: its late release deleted our lock",
        late.name
    );
    assert!(!guard.is_lost());
    assert_eq!(guard.release().await.unwrap(), Unlock::Released);
    late.wait();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_either_side_never_deletes_the_others_lock_python() {
    let server = RedisServer::start();
    let url = server.url();
    let log = log_file("late");
    let store = RedisStore::connect(&url).await.unwrap();
    // redis-py's late release.
    let late = Participant::python(&url, "late", &log, "late", 0.0, Duration::from_millis(300));
    their_late_release_deletes_nothing(late, &url, "late").await;
    // Ours: a fixed lease that runs out while Python waits; Python takes the key; our release
    // (and a release with any other token) deletes nothing.
    let locks = TokenLock::new(store.clone());
    let ours = locks
        .lock_with_lease("late", Duration::from_millis(300), None)
        .await
        .unwrap()
        .unwrap();
    let mut python = Participant::python(&url, "late", &log, "wait", 20.0, TTL * 5);
    let theirs = python.expect("ACQUIRED", Duration::from_secs(20));
    assert!(ours.is_lost());
    assert_eq!(ours.release().await.unwrap(), Unlock::HeldByOther);
    assert_eq!(
        locks.release("late", &tairlock::new_nonce()).await.unwrap(),
        Unlock::HeldByOther
    );
    assert_eq!(
        store.get("late").await.unwrap(),
        Some(theirs.into_bytes()),
        "our late release deleted Python's lock"
    );
    python.close_stdin();
    python.wait();
    assert_eq!(store.key_type("late").await.unwrap(), "none");
    std::fs::remove_file(&log).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_release_by_either_side_never_deletes_the_others_lock_node() {
    let Some(modules) = node("a_release_by_either_side_never_deletes_the_others_lock_node") else {
        return;
    };
    let server = RedisServer::start();
    let url = server.url();
    let log = log_file("late-node");
    for client in ["redlock", "mutex"] {
        let key = format!("mutex:late-{client}");
        let late = Participant::node(
            &modules,
            &url,
            &key,
            &log,
            client,
            "late",
            0.0,
            Duration::from_millis(300),
        );
        their_late_release_deletes_nothing(late, &url, &key).await;
    }
    std::fs::remove_file(&log).unwrap();
}
