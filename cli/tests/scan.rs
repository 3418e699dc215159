//! `tairlock scan`, the built binary against real servers (run on Valkey too, with
//! `TAIRLOCK_SERVER=valkey`).
//!
//! - A keyspace of 100,000 keys mixing every class of lock (made by the lock kinds themselves
//!   where they can make it, written in their formats where a crash or an old client would
//!   leave it) with user data of every type, some under braced names and lock-like suffixes:
//!   the counts per class and state are exact, every key is byte-identical afterwards (`DUMP`),
//!   and nothing was written (no command flagged `write` ran, per `INFO commandstats` and
//!   `COMMAND INFO`; the server's count of changes did not move). The load, the scan's time and
//!   its calls are printed.
//! - `--stuck` lists exactly the stuck locks (exit 6), each with a command that clears it: every
//!   command is run here and the rescan finds none (exit 0), the locks that were not stuck are
//!   all still there, and a lock taken over after the scan is refused by its command (exit 5).
//! - A 3-master cluster: every master is scanned, the counts are exact, nothing is written on
//!   any node, and a printed `--cluster` command clears a stuck lock.
//! - `--rate` paces the calls; bad flags are usage errors (exit 2) and change nothing; an
//!   unreachable server is a store error (exit 4).

#[path = "../../tests/support/mod.rs"]
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use support::RedisServer;
use support::cluster::RedisCluster;
use tairlock::{
    ClusterStore, ExpireLock, Keyspace, Options, RedisStore, Semaphore, SemaphoreOptions, Store,
    new_nonce,
};
use tairlock_legacy::{ScriptedLock, Unit};
use tairlock_rwlock::RwLock;

/// Leases and waiter places of the locks made here: far longer than any test.
const LONG: Duration = Duration::from_secs(600);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `tairlock scan ARGS…`.
fn scan(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .arg("scan")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// `tairlock scan ARGS… --json`, which must exit with `code`: the JSON printed.
fn scan_json(args: &[&str], code: i32) -> Value {
    let out = scan(&[args, &["--json"]].concat());
    assert_eq!(
        out.status.code(),
        Some(code),
        "scan {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "scan {args:?} printed no JSON ({e}): {}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn num(v: &Value) -> u64 {
    v.as_u64().unwrap_or_else(|| panic!("{v} is not a number"))
}

/// The counts per class, and per class and state, of a scan's JSON.
fn counts(report: &Value) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    let classes = report["counts"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), num(v)))
        .collect();
    let mut states = BTreeMap::new();
    for (class, by_state) in report["states"].as_object().unwrap() {
        for (state, n) in by_state.as_object().unwrap() {
            states.insert(format!("{class} {state}"), num(n));
        }
    }
    (classes, states)
}

/// What a keyspace was built to hold: the locks of each class and state, and the stuck ones.
#[derive(Debug, Default)]
struct Expected {
    classes: BTreeMap<String, u64>,
    states: BTreeMap<String, u64>,
    stuck: BTreeSet<String>,
}

impl Expected {
    fn add(&mut self, class: &str, state: &str, n: u64) {
        *self.classes.entry(class.to_owned()).or_default() += n;
        *self.states.entry(format!("{class} {state}")).or_default() += n;
    }

    fn stuck(&mut self, key: String) {
        self.stuck.insert(key);
    }

    /// The counts as the scan reports them, every class present.
    fn classes(&self, other: u64) -> BTreeMap<String, u64> {
        let mut all: BTreeMap<String, u64> = [
            "expire-lock",
            "fair-queue",
            "rw-lock",
            "semaphore",
            "legacy-lock",
            "token-lock",
            "fence",
        ]
        .iter()
        .map(|c| ((*c).to_owned(), 0))
        .collect();
        all.extend(self.classes.clone());
        all.insert("other".to_owned(), other);
        all
    }
}

/// A lease in the expire lock's format.
fn lease(expiry_ms: u64) -> String {
    format!("tl1:{expiry_ms}:{}:{}", expiry_ms * 1000, new_nonce())
}

/// Raw writes, one pipeline per call, on a plain connection.
struct Raw {
    con: redis::Connection,
    pipe: redis::Pipeline,
}

impl Raw {
    fn new(url: &str) -> Raw {
        let con = redis::Client::open(url).unwrap().get_connection().unwrap();
        Raw {
            con,
            pipe: redis::pipe(),
        }
    }

    fn cmd(&mut self, args: &[&str]) {
        let cmd = self.pipe.cmd(args[0]);
        for a in &args[1..] {
            cmd.arg(*a);
        }
        cmd.ignore();
        if self.pipe.len() >= 1000 {
            self.flush();
        }
    }

    fn flush(&mut self) {
        if !self.pipe.is_empty() {
            let () = self.pipe.query(&mut self.con).unwrap();
            self.pipe = redis::pipe();
        }
    }
}

/// Write the classes no lock kind makes on purpose: what a crash, an old client or another
/// library leaves. `tag` keeps the names of two calls apart.
fn leftovers(raw: &mut Raw, exp: &mut Expected, tag: &str, n: usize) {
    let now = now_ms();
    let hours_ago = now - 2 * 3_600_000;
    for i in 0..n {
        // An expire lock without a TTL, its lease long over: stuck.
        let key = format!("tairlock:{{{tag}stuck:{i}}}");
        raw.cmd(&["SET", &key, &lease(hours_ago)]);
        exp.stuck(key);
        // A legacy lock an original client left (seconds, no TTL), expired two hours ago.
        let key = format!("lock.{tag}orphan.{i}");
        raw.cmd(&["SET", &key, &(hours_ago / 1000).to_string()]);
        exp.stuck(key);
    }
    exp.add("expire-lock", "expired", n as u64);
    exp.add("legacy-lock", "expired", n as u64);
}

/// The rest of the stuck classes: orphaned queues of the three fair modes, a reader/writer
/// lock whose writer key lost its TTL.
fn orphans(raw: &mut Raw, exp: &mut Expected, n: usize) {
    let ended = (now_ms() - 2 * 3_600_000).to_string();
    let arrived = ((now_ms() - 3 * 3_600_000) * 1000).to_string();
    for i in 0..n {
        let nonce = new_nonce();
        let base = format!("tairlock:{{fairorphan:{i}}}");
        raw.cmd(&["ZADD", &format!("{base}:fairq"), &arrived, &nonce]);
        let entry = format!("{ended}:2000:{base}:released:w:1");
        raw.cmd(&["HSET", &format!("{base}:fairw"), &nonce, &entry]);
        exp.stuck(format!("{base}:fairq"));
        let base = format!("app:{{rworphan:{i}}}");
        raw.cmd(&["ZADD", &format!("{base}:wq"), &arrived, &nonce]);
        let entry = format!("{ended}:2000:{base}:released:w:1");
        raw.cmd(&["HSET", &format!("{base}:ww"), &nonce, &entry]);
        exp.stuck(base);
        let base = format!("tairlock:{{semorphan:{i}}}");
        raw.cmd(&["ZADD", &format!("{base}:sem:q"), &arrived, &nonce]);
        raw.cmd(&[
            "HSET",
            &format!("{base}:sem:qw"),
            &nonce,
            &format!("{ended}:1"),
        ]);
        exp.stuck(format!("{base}:sem"));
        let base = format!("app:{{rwstuck:{i}}}");
        raw.cmd(&[
            "SET",
            &format!("{base}:w"),
            &lease(now_ms() - 2 * 3_600_000),
        ]);
        exp.stuck(base);
    }
    let n = n as u64;
    exp.add("fair-queue", "lapsed", n);
    exp.add("rw-lock", "free", n);
    exp.add("semaphore", "free", n);
    exp.add("rw-lock", "write-locked", n);
}

/// Locks that are not stuck, `n` of each: made by the lock kinds through `store`, and the
/// formats of old clients and other libraries written raw.
async fn live_locks<S: Store>(store: S, raw: &mut Raw, exp: &mut Expected, tag: &str, n: usize) {
    let plain = ExpireLock::new(store.clone());
    let app = ExpireLock::with_options(
        store.clone(),
        Options::default().keyspace(Keyspace::new("app:").unwrap()),
    );
    let fair = ExpireLock::with_options(
        store.clone(),
        Options::default().fair(true).waiter_lease(LONG),
    );
    let rw = RwLock::new(store.clone());
    let sem = Semaphore::with_options(store.clone(), 5, SemaphoreOptions::default());
    let legacy = ScriptedLock::with_options(
        store.clone(),
        tairlock_legacy::Options::default().unit(Unit::Millis),
    );
    for i in 0..n {
        let name = format!("{tag}job:{i}");
        assert!(plain.expire_lock(&name, LONG).await.unwrap().is_acquired());
        assert!(app.expire_lock(&name, LONG).await.unwrap().is_acquired());
        // A fair lock with two waiters in its queue.
        let name = format!("{tag}fair:{i}");
        assert!(matches!(
            fair.fair_attempt(&name, LONG, &new_nonce(), false)
                .await
                .unwrap(),
            tairlock::FairAttempt::Acquired(_)
        ));
        for _ in 0..2 {
            let waiter = fair.fair_attempt(&name, LONG, &new_nonce(), true).await;
            assert!(matches!(waiter, Ok(tairlock::FairAttempt::Busy { .. })));
        }
        // A writer; readers, the first of every two with a writer waiting behind them.
        let name = format!("{tag}doc:{i}");
        rw.write_acquire(&name, &new_nonce(), LONG, None)
            .await
            .unwrap();
        let name = format!("{tag}catalog:{i}");
        for _ in 0..2 {
            rw.read_acquire(&name, &new_nonce(), LONG).await.unwrap();
        }
        if i % 2 == 0 {
            rw.write_acquire(&name, &new_nonce(), LONG, Some(LONG))
                .await
                .unwrap();
        }
        // A semaphore with three holders.
        let name = format!("{tag}pool:{i}");
        for _ in 0..3 {
            let permit = sem.attempt(&name, 1, LONG, &new_nonce()).await;
            assert!(matches!(
                permit,
                Ok(tairlock::semaphore::PermitAttempt::Acquired(_))
            ));
        }
        // A legacy key a safe lock holds (ms, with a TTL and a fence key).
        let key = format!("lock.{tag}safe.{i}");
        assert!(matches!(
            legacy.try_acquire(&key, LONG).await.unwrap(),
            tairlock_legacy::TryAcquire::Acquired(_)
        ));
    }
    let now = now_ms();
    for i in 0..n {
        // An expire lock whose lease passed though its key lasts: expired, not stuck.
        raw.cmd(&[
            "SET",
            &format!("tairlock:{{{tag}late:{i}}}"),
            &lease(now - 1000),
            "PX",
            "600000",
        ]);
        // Legacy locks of original clients: held (seconds), and expired a minute ago (ms),
        // too recently to be stuck.
        raw.cmd(&[
            "SET",
            &format!("lock.{tag}held.{i}"),
            &(now / 1000 + 3600).to_string(),
        ]);
        raw.cmd(&[
            "SET",
            &format!("lock.{tag}recent.{i}"),
            &(now - 60_000).to_string(),
        ]);
        // Token locks of other libraries: redis-py's hex, a UUID, redsync's base64.
        let hex = new_nonce();
        raw.cmd(&[
            "SET",
            &format!("{tag}py:lock:{i}"),
            &hex,
            "NX",
            "PX",
            "600000",
        ]);
        let uuid = format!(
            "{}-{}-{}-{}-{}",
            &hex[..8],
            &hex[8..12],
            &hex[12..16],
            &hex[16..20],
            &hex[20..]
        );
        raw.cmd(&[
            "SET",
            &format!("{tag}node:mutex:{i}"),
            &uuid,
            "NX",
            "PX",
            "600000",
        ]);
        raw.cmd(&[
            "SET",
            &format!("{tag}go:redsync:{i}"),
            "q3T9pW0xZk1Lm8Bv2Yc4Rg==",
            "NX",
            "PX",
            "600000",
        ]);
        // The fencing token of a lock released a moment ago.
        raw.cmd(&[
            "SET",
            &format!("tairlock:{{{tag}gone:{i}}}:fence"),
            &(now * 1000).to_string(),
            "PX",
            "600000",
        ]);
    }
    raw.flush();
    let n = n as u64;
    exp.add("expire-lock", "held", 3 * n);
    exp.add("expire-lock", "expired", n);
    exp.add("fair-queue", "waiting", n);
    exp.add("rw-lock", "write-locked", n);
    exp.add("rw-lock", "read-locked", n);
    exp.add("semaphore", "held", n);
    exp.add("legacy-lock", "held", 2 * n);
    exp.add("legacy-lock", "expired", n);
    exp.add("token-lock", "held", 3 * n);
    exp.add("fence", "retained", n);
}

/// `n` keys of user data of every type, some under braced names with lock-like suffixes, none
/// of which is a lock; their names start with `tag`.
fn user_data(raw: &mut Raw, tag: &str, n: usize) {
    let blob = "x".repeat(300);
    for i in 0..n {
        let s = i.to_string();
        match i % 12 {
            0 => raw.cmd(&[
                "SET",
                &format!("{tag}user:{i}:profile"),
                &format!("{{\"id\":{i},\"name\":\"user {i}\"}}"),
            ]),
            1 => raw.cmd(&["SET", &format!("{tag}counter:{i}"), &s]),
            2 => raw.cmd(&[
                "HSET",
                &format!("{tag}user:{{{i}}}"),
                "name",
                "ada",
                "visits",
                &s,
            ]),
            3 => raw.cmd(&[
                "ZADD",
                &format!("{tag}cache:{{{i}}}:r"),
                "1",
                "page:1",
                "2",
                "page:2",
            ]),
            4 => raw.cmd(&["RPUSH", &format!("{tag}queue:{i}"), "a", "b"]),
            5 => raw.cmd(&["SADD", &format!("{tag}tags:{i}"), "red", "blue"]),
            6 => raw.cmd(&[
                "SET",
                &format!("{tag}session:{i}"),
                &format!("{{\"u\":{i}}}"),
                "PX",
                "600000",
            ]),
            7 => raw.cmd(&["SET", &format!("{tag}flag:{i}"), "on", "PX", "600000"]),
            8 => raw.cmd(&["SET", &format!("{tag}blob:{i}"), &blob]),
            9 => raw.cmd(&["SET", &format!("{tag}cfg:{{{i}}}"), "hello world"]),
            10 => raw.cmd(&[
                "SET",
                &format!("{tag}x:{{{i}}}:w"),
                "not a lease",
                "PX",
                "600000",
            ]),
            _ => raw.cmd(&["HSET", &format!("{tag}stats:{{{i}}}:sem:h"), "hits", &s]),
        }
    }
    raw.flush();
}

/// Every key, with `DUMP` of its value, and whether it has a TTL.
fn snapshot(url: &str) -> BTreeMap<Vec<u8>, (Vec<u8>, bool)> {
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let mut keys: Vec<Vec<u8>> = Vec::new();
    let mut cursor = 0u64;
    loop {
        let (next, batch): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("COUNT")
            .arg(1000)
            .query(&mut con)
            .unwrap();
        keys.extend(batch);
        cursor = next;
        if cursor == 0 {
            break;
        }
    }
    keys.sort();
    keys.dedup();
    let mut out = BTreeMap::new();
    for chunk in keys.chunks(1000) {
        let mut pipe = redis::pipe();
        for k in chunk {
            pipe.cmd("DUMP").arg(k).cmd("PTTL").arg(k);
        }
        let replies: Vec<redis::Value> = pipe.query(&mut con).unwrap();
        for (k, pair) in chunk.iter().zip(replies.chunks(2)) {
            let dump = match &pair[0] {
                redis::Value::BulkString(b) => b.clone(),
                other => panic!("DUMP {k:?}: {other:?}"),
            };
            let ttl = matches!(pair[1], redis::Value::Int(t) if t >= 0);
            out.insert(k.clone(), (dump, ttl));
        }
    }
    out
}

/// What a server counts of its own writes, and which commands it ran how often.
fn server_counts(server: &RedisServer) -> (u64, BTreeMap<String, u64>) {
    let persistence = server.cli(&["INFO", "persistence"]);
    let changes = persistence
        .lines()
        .find_map(|l| l.strip_prefix("rdb_changes_since_last_save:"))
        .unwrap_or_else(|| server.fail("no rdb_changes_since_last_save in INFO"))
        .trim()
        .parse()
        .unwrap();
    let stats = server.cli(&["INFO", "commandstats"]);
    let calls = stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(':')?;
            let calls = rest
                .strip_prefix("calls=")?
                .split(',')
                .next()?
                .parse()
                .ok()?;
            Some((name.to_owned(), calls))
        })
        .collect();
    (changes, calls)
}

/// Check that between two [`server_counts`] the server wrote nothing: its count of changes
/// did not move, and no command that ran more often is flagged `write` (`COMMAND INFO`).
/// Returns the commands that ran, with how often.
fn no_writes(
    server: &RedisServer,
    before: &(u64, BTreeMap<String, u64>),
    after: &(u64, BTreeMap<String, u64>),
) -> BTreeMap<String, u64> {
    assert_eq!(
        before.0,
        after.0,
        "[{}] the server counted changes",
        server.label()
    );
    let mut ran = BTreeMap::new();
    for (name, calls) in &after.1 {
        let delta = calls - before.1.get(name).copied().unwrap_or(0);
        if delta == 0 {
            continue;
        }
        let info = server.cli(&["COMMAND", "INFO", name]);
        assert!(
            !info.trim().is_empty(),
            "[{}] COMMAND INFO {name}: nothing",
            server.label()
        );
        assert!(
            !info.lines().any(|l| l.trim() == "write"),
            "[{}] scan ran {name} ({delta} calls), a write command:\n{info}",
            server.label()
        );
        ran.insert(name.clone(), delta);
    }
    ran
}

#[test]
fn a_keyspace_of_100000_keys_is_counted_exactly_and_left_as_it_was() {
    const TOTAL: u64 = 100_000;
    let server = RedisServer::start();
    let url = server.url();
    let started = Instant::now();
    let mut exp = Expected::default();
    let mut raw = Raw::new(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedisStore::connect(&url).await.unwrap();
        live_locks(store, &mut raw, &mut exp, "", 40).await;
    });
    leftovers(&mut raw, &mut exp, "", 30);
    orphans(&mut raw, &mut exp, 5);
    raw.flush();
    let lock_keys: u64 = server.cli(&["DBSIZE"]).parse().unwrap();
    let users = TOTAL - lock_keys;
    user_data(&mut raw, "", users as usize);
    assert_eq!(server.cli(&["DBSIZE"]), TOTAL.to_string());
    let loaded = started.elapsed();

    let before = snapshot(&url);
    let counts_before = server_counts(&server);
    let t = Instant::now();
    let report = scan_json(&["--redis", &url, "--count", "1000", "--rate", "1000"], 0);
    let took = t.elapsed();
    let counts_after = server_counts(&server);
    let ran = no_writes(&server, &counts_before, &counts_after);
    assert!(before == snapshot(&url), "a key changed");

    let (classes, states) = counts(&report);
    assert_eq!(classes, exp.classes(users), "{:#?}", report["servers"]);
    assert_eq!(states, exp.states);
    assert_eq!(num(&report["keys_scanned"]), TOTAL);
    let stuck: BTreeSet<String> = report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|l| l["stuck"] == true)
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(stuck, exp.stuck);
    assert_eq!(num(&report["stuck"]), exp.stuck.len() as u64);
    let listed_keys: u64 = report["locks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["keys"].as_array().unwrap().len() as u64)
        .sum();
    assert_eq!(listed_keys, lock_keys, "every key of a lock is listed once");
    let server_part = &report["servers"][0];
    assert_eq!(num(&server_part["skipped"]), 0);
    assert_eq!(num(&server_part["vanished"]), 0);
    eprintln!(
        "[{}] {TOTAL} keys ({lock_keys} in {} locks, {users} user data) loaded in {loaded:?}; \
         scan --count 1000 --rate 1000 in {took:?} (its own clock: {} ms): {} SCAN calls, {} \
         read pipelines of {} commands, {} inspections in {} batches; server commands: {ran:?}",
        server.label(),
        report["locks"].as_array().unwrap().len(),
        report["elapsed_ms"],
        report["scan_calls"],
        report["read_pipelines"],
        report["read_commands"],
        report["inspections"],
        server_part["inspect_batches"],
    );
}

/// Run `command` (as `tairlock scan` printed it) with the built binary first on `PATH`.
fn run_printed(command: &str) -> Output {
    let bin = std::path::Path::new(env!("CARGO_BIN_EXE_tairlock"));
    let path = format!(
        "{}:{}",
        bin.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    Command::new("sh")
        .args(["-c", command])
        .env("PATH", path)
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

#[test]
fn stuck_locks_are_listed_each_with_a_command_that_clears_it() {
    let server = RedisServer::start();
    let url = server.url();
    let mut exp = Expected::default();
    let mut raw = Raw::new(&url);
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedisStore::connect(&url).await.unwrap();
        live_locks(store, &mut raw, &mut exp, "", 3).await;
    });
    leftovers(&mut raw, &mut exp, "", 3);
    orphans(&mut raw, &mut exp, 2);
    // A waiting writer's intent that lost its TTL: readers stay out for ever.
    rt.block_on(async {
        let rw = RwLock::new(RedisStore::connect(&url).await.unwrap());
        rw.read_acquire("report", &new_nonce(), LONG).await.unwrap();
        rw.write_acquire("report", &new_nonce(), LONG, Some(LONG))
            .await
            .unwrap();
    });
    raw.cmd(&["PERSIST", "tairlock:{report}:wi"]);
    raw.flush();
    exp.add("rw-lock", "read-locked", 1);
    exp.stuck("tairlock:{report}".to_owned());
    user_data(&mut raw, "u:", 200);

    let text = scan(&["--redis", &url, "--stuck"]);
    assert_eq!(text.status.code(), Some(6), "{text:?}");
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        text.contains("  clear: tairlock unlock --force lock.orphan.0 --legacy --if-value"),
        "{text}"
    );

    let report = scan_json(&["--redis", &url, "--stuck"], 6);
    let (classes, states) = counts(&report);
    assert_eq!(classes, exp.classes(200));
    assert_eq!(states, exp.states);
    let locks = report["locks"].as_array().unwrap();
    let listed: BTreeSet<String> = locks
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(listed, exp.stuck, "--stuck lists the stuck locks only");
    assert!(
        locks
            .iter()
            .all(|l| l["stuck"] == true && l["stuck_because"].is_string())
    );

    // One legacy lock is taken over after the scan (an old client's GETSET): its command
    // refuses it, and it stays.
    let taken = (now_ms() / 1000 + 3600).to_string();
    server.cli(&["SET", "lock.orphan.0", &taken]);
    for lock in locks {
        let clear = lock["clear"].as_str().unwrap();
        let out = run_printed(clear);
        let want = if lock["key"] == "lock.orphan.0" { 5 } else { 0 };
        assert_eq!(out.status.code(), Some(want), "{clear}: {out:?}");
    }
    assert_eq!(server.cli(&["GET", "lock.orphan.0"]), taken);

    let after = scan_json(&["--redis", &url], 0);
    assert_eq!(num(&after["stuck"]), 0, "{:#}", after["locks"]);
    let (classes, states) = counts(&after);
    // What was not stuck is all still there, and the lock taken over is held now.
    let mut left = Expected::default();
    for (key, n) in &exp.states {
        let (class, state) = key.split_once(' ').unwrap();
        let stuck = locks
            .iter()
            .filter(|l| l["class"] == class && l["state"] == state)
            .count() as u64;
        if n > &stuck {
            left.add(class, state, n - stuck);
        }
    }
    left.add("legacy-lock", "held", 1);
    // The reader/writer lock's intent went with its forced unlock, and its reader; each fair
    // acquisition that reaped an orphaned queue left its lock's fencing token (two orphans of
    // each of the three kinds): alone for the expire and reader/writer locks, beside its stored
    // limit for a semaphore, which is then an idle semaphore.
    left.add("fence", "retained", 2 * 2);
    left.add("semaphore", "free", 2);
    assert_eq!(states, left.states, "{:#}", after["locks"]);
    assert_eq!(classes, left.classes(200));
    let quiet = scan(&["--redis", &url, "--stuck"]);
    assert_eq!(quiet.status.code(), Some(0), "{quiet:?}");
}

#[test]
fn every_master_of_a_cluster_is_scanned() {
    let cluster = RedisCluster::start(3);
    let urls = cluster.urls().join(",");
    let mut exp = Expected::default();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store = rt.block_on(ClusterStore::connect(&cluster.urls())).unwrap();
    let locks = ExpireLock::new(store.clone());
    let now = now_ms();
    rt.block_on(async {
        for i in 0..30 {
            assert!(
                locks
                    .expire_lock(&format!("job:{i}"), LONG)
                    .await
                    .unwrap()
                    .is_acquired()
            );
            let set = |key: String, value: String| {
                let store = store.clone();
                async move {
                    let () = store
                        .command(redis::cmd("SET").arg(key).arg(value))
                        .await
                        .unwrap();
                }
            };
            set(
                format!("lock.orphan.{i}"),
                ((now - 7_200_000) / 1000).to_string(),
            )
            .await;
            let token = redis::cmd("SET")
                .arg(format!("py:lock:{i}"))
                .arg(new_nonce())
                .arg("PX")
                .arg(600_000)
                .clone();
            let _: Option<String> = store.command(&token).await.unwrap();
            for u in 0..100 {
                set(format!("user:{i}:{u}"), format!("{{\"n\":{u}}}")).await;
            }
        }
    });
    exp.add("expire-lock", "held", 30);
    exp.add("legacy-lock", "expired", 30);
    exp.add("token-lock", "held", 30);
    for i in 0..30 {
        exp.stuck(format!("lock.orphan.{i}"));
    }
    let sizes: Vec<u64> = cluster
        .nodes
        .iter()
        .map(|n| n.cli(&["DBSIZE"]).parse().unwrap())
        .collect();
    assert!(sizes.iter().all(|s| *s > 0), "{sizes:?}");
    let before: Vec<_> = cluster.nodes.iter().map(server_counts).collect();
    let report = scan_json(&["--cluster", &urls, "--count", "500"], 0);
    for (node, before) in cluster.nodes.iter().zip(&before) {
        no_writes(node, before, &server_counts(node));
    }
    let (classes, states) = counts(&report);
    assert_eq!(classes, exp.classes(3000));
    assert_eq!(states, exp.states);
    let servers = report["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 3);
    let mut scanned: Vec<u64> = servers.iter().map(|s| num(&s["keys_scanned"])).collect();
    let mut sizes = sizes;
    scanned.sort_unstable();
    sizes.sort_unstable();
    assert_eq!(scanned, sizes, "each master's keys, once");

    let stuck = scan_json(&["--cluster", &urls, "--stuck"], 6);
    let locks = stuck["locks"].as_array().unwrap();
    let keys: BTreeSet<String> = locks
        .iter()
        .map(|l| l["key"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(keys, exp.stuck);
    let clear = locks[0]["clear"].as_str().unwrap();
    assert!(clear.contains(&format!("--cluster {urls}")), "{clear}");
    let out = run_printed(clear);
    assert_eq!(out.status.code(), Some(0), "{clear}: {out:?}");
    let after = scan_json(&["--cluster", &urls, "--stuck"], 6);
    assert_eq!(num(&after["stuck"]), 29);
}

#[test]
fn a_pattern_scans_its_keys_only_and_each_queue_is_read_whole() {
    let server = RedisServer::start();
    let url = server.url();
    let (mut exp, mut raw) = (Expected::default(), Raw::new(&url));
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let store = RedisStore::connect(&url).await.unwrap();
        live_locks(store, &mut raw, &mut exp, "", 2).await;
    });
    orphans(&mut raw, &mut exp, 1);
    user_data(&mut raw, "", 100);
    // Only the queues' sorted sets match: their waiters' entries are read all the same, so the
    // live queues are not taken for lapsed ones.
    let queues = scan_json(&["--redis", &url, "*:fairq"], 0);
    assert_eq!(num(&queues["keys_scanned"]), 3);
    let (classes, states) = counts(&queues);
    assert_eq!(classes["fair-queue"], 3);
    assert_eq!(classes["other"], 0);
    assert_eq!(states["fair-queue waiting"], 2);
    assert_eq!(states["fair-queue lapsed"], 1);
    assert_eq!(num(&queues["stuck"]), 1);
    // Legacy keys only: held by a safe lock, held by an original client, expired lately.
    let legacy = scan_json(&["--redis", &url, "lock.*"], 0);
    let (classes, states) = counts(&legacy);
    assert_eq!(classes.values().sum::<u64>(), 6, "{classes:?}");
    assert_eq!(states["legacy-lock held"], 4);
    assert_eq!(states["legacy-lock expired"], 2);
    let safe = legacy["locks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["key"] == "lock.safe.0")
        .unwrap();
    assert_eq!(safe["inspect"]["written_by"], "safe");
    assert!(safe["inspect"]["last_fence"].is_u64(), "{safe}");
}

#[test]
fn the_rate_paces_the_calls() {
    let server = RedisServer::start();
    let mut raw = Raw::new(&server.url());
    user_data(&mut raw, "", 200);
    for i in 0..30 {
        raw.cmd(&[
            "SET",
            &format!("lock.{i}"),
            &(now_ms() / 1000 + 600).to_string(),
        ]);
    }
    raw.flush();
    let report = scan_json(
        &["--redis", &server.url(), "--count", "20", "--rate", "10"],
        0,
    );
    let part = &report["servers"][0];
    let calls = num(&part["scan_calls"]) + num(&part["inspect_batches"]);
    assert!(calls >= 10, "{part}");
    // At most 10 calls a second: the first starts at once, each next 100 ms after the last.
    assert!(
        num(&part["elapsed_ms"]) >= (calls - 1) * 100,
        "{calls} calls in {} ms",
        part["elapsed_ms"]
    );
    assert_eq!(num(&report["counts"]["legacy-lock"]), 30);
}

#[test]
fn bad_flags_are_usage_errors_and_an_unreachable_server_a_store_error() {
    let server = RedisServer::start();
    let url = server.url();
    server.cli(&["SET", "lock.a", "1700000000"]);
    for args in [
        vec!["--count", "0"],
        vec!["--rate", "0"],
        vec!["--count", "100001"],
        vec!["--stale-after", "2d"],
        vec![""],
    ] {
        let out = scan(&[&args[..], &["--redis", &url]].concat());
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
    // A closed port.
    let gone = RedisServer::start();
    let closed = gone.url();
    drop(gone);
    let out = scan(&["--redis", &closed]);
    assert_eq!(out.status.code(), Some(4), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("tairlock: "));
    // --if-value that names no lease or timestamp changes nothing.
    for args in [
        vec!["lock.a", "--legacy", "--if-value", "soon"],
        vec!["orders", "--if-value", "1700000000"],
        vec!["tairlock:{orders}:r", "--if-value", "tl1:1:2:ab"],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_tairlock"))
            .args(["unlock", "--force", "--redis", &url])
            .args(&args)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
    }
    assert_eq!(server.cli(&["GET", "lock.a"]), "1700000000");
}
