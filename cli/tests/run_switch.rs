//! `tairlock run` as a dead man's switch (issue #27): no process started for the command runs
//! after the lease's local deadline, whatever happens to tairlock, its process group or the
//! command's descendants. The built binary against a real `redis-server`.
//!
//! Each scenario is a *fenced log*: the first command's processes append `A n` lines to a file;
//! once a second `tairlock run` has taken the lock it appends `B start`, and no `A` line may
//! follow it.
//!
//! - A SIGKILL to tairlock's whole process group (`timeout -s KILL`, `kill -9 %1`).
//! - tairlock stopped by SIGSTOP until the lease runs out; continued, it exits 76 and the
//!   command never runs again. SIGTSTP (Ctrl-Z in a pipeline) stops the command with tairlock,
//!   and continuing tairlock continues it.
//! - Descendants that left the command's group and session (`setsid`): a lost lease stops them,
//!   and the lock is held while they live (the `flock` rule).
//! - A long job that orphans 100 helpers leaves no zombies; `nohup` survives SIGHUP; 126/127;
//!   a non-UTF-8 argument; a broken stderr pipe; `stty tostop`; a background command that reads
//!   the terminal does not keep the lock forever.

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, read, run, until, wait_for, wait_for_text};
use nix::sys::signal::{Signal, kill, killpg};
use nix::unistd::Pid;
use support::RedisServer;

const KEY: &str = "job";
const LOCK_KEY: &str = "tairlock:{job}";

/// The fenced log and the pids of the writers, for cleaning up after a failure.
struct Fence {
    log: PathBuf,
    pids: PathBuf,
}

impl Fence {
    fn new(scratch: &Scratch) -> Fence {
        Fence {
            log: scratch.file("log"),
            pids: scratch.file("pids"),
        }
    }

    /// Shell: append `A n` every 20 ms, `count` times, recording this shell's pid first.
    fn writer(&self, count: u32) -> String {
        format!(
            "echo $$ >> {pids}; i=0; while [ $i -lt {count} ]; do echo \"A $i\" >> {log}; \
             i=$((i+1)); sleep 0.02; done",
            pids = self.pids.display(),
            log = self.log.display()
        )
    }

    fn lines(&self) -> Vec<String> {
        read(&self.log).lines().map(str::to_owned).collect()
    }

    fn a_lines(&self) -> usize {
        self.lines().iter().filter(|l| l.starts_with("A ")).count()
    }

    /// A second `tairlock run` that waits for the lock and marks the log once it holds it.
    fn second_run(
        &self,
        server: &RedisServer,
        scratch: &Scratch,
    ) -> (std::process::ExitStatus, Duration) {
        let stderr = scratch.file("b.stderr");
        let script = format!(
            "echo 'B start' >> {log}; sleep 0.3; echo 'B end' >> {log}",
            log = self.log.display()
        );
        let start = Instant::now();
        let mut b = run(server, KEY, &["--wait", "20s"], &script, &stderr)
            .spawn()
            .unwrap();
        let status = wait_for(&mut b, Duration::from_secs(30), "the second run", &stderr);
        assert!(
            status.success(),
            "the second run: {status}\n{}",
            read(&stderr)
        );
        (status, start.elapsed())
    }

    /// No `A` line after `B start`, checked once more after a pause (a survivor would write).
    fn assert_fenced(&self) {
        std::thread::sleep(Duration::from_millis(300));
        let lines = self.lines();
        let b = lines
            .iter()
            .position(|l| l == "B start")
            .unwrap_or_else(|| panic!("the second run never started:\n{}", lines.join("\n")));
        let late: Vec<&String> = lines[b..].iter().filter(|l| l.starts_with("A ")).collect();
        assert!(
            late.is_empty(),
            "the first command wrote {} lines after the second took the lock: {:?}",
            late.len(),
            &late[..late.len().min(5)]
        );
    }
}

impl Drop for Fence {
    /// A survivor (the bug under test) must not outlive the test.
    fn drop(&mut self) {
        for pid in read(&self.pids)
            .lines()
            .filter_map(|l| l.trim().parse().ok())
        {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
}

/// The state letter of `pid` (`T`: stopped; `?`: gone).
fn state(pid: i32) -> char {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| stat.rsplit_once(") ").and_then(|(_, r)| r.chars().next()))
        .unwrap_or('?')
}

/// The children of `pid`, from `/proc/*/stat`, with their state.
fn children(pid: i32) -> Vec<(i32, char)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|p| {
            let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).ok()?;
            let (_, rest) = stat.rsplit_once(") ")?;
            let mut fields = rest.split(' ');
            let state = fields.next()?.chars().next()?;
            let ppid: i32 = fields.next()?.parse().ok()?;
            (ppid == pid).then_some((p, state))
        })
        .collect()
}

/// Scenario 1: a SIGKILL to tairlock's process group (as `timeout -s KILL` or `kill -9 %1` sends
/// it) used to kill the supervisor with tairlock: the command ran on without a lease.
#[test]
fn a_sigkill_to_tairlocks_group_ends_the_command_before_another_holder_starts() {
    let server = RedisServer::start();
    let scratch = Scratch::new("group-kill");
    let fence = Fence::new(&scratch);
    let stderr = scratch.file("a.stderr");
    let mut a = run(
        &server,
        KEY,
        &["--ttl", "1500ms", "--grace", "300ms"],
        &fence.writer(500),
        &stderr,
    )
    .process_group(0)
    .spawn()
    .unwrap();
    until(Duration::from_secs(5), "the first command writes", || {
        fence.a_lines() >= 3
    });
    killpg(Pid::from_raw(a.id() as i32), Signal::SIGKILL).unwrap();
    let _ = a.wait();
    let (_, waited) = fence.second_run(&server, &scratch);
    println!("SIGKILL to tairlock's group: the second run held the lock {waited:?} later");
    fence.assert_fenced();
}

/// Scenario 2: tairlock stopped (SIGSTOP) while the command runs: nobody renews, and the command
/// must not run past the deadline. Continued after the second run took the lock, tairlock exits 76
/// and the command never runs again.
#[test]
fn a_stopped_tairlock_stops_its_command_and_exits_76_once_continued() {
    let server = RedisServer::start();
    let scratch = Scratch::new("sigstop");
    let fence = Fence::new(&scratch);
    let stderr = scratch.file("a.stderr");
    let mut a = run(
        &server,
        KEY,
        &["--ttl", "1500ms", "--grace", "300ms"],
        &fence.writer(500),
        &stderr,
    )
    .spawn()
    .unwrap();
    let tairlock = Pid::from_raw(a.id() as i32);
    until(Duration::from_secs(5), "the first command writes", || {
        fence.a_lines() >= 3
    });
    kill(tairlock, Signal::SIGSTOP).unwrap();
    let (_, waited) = fence.second_run(&server, &scratch);
    println!("tairlock stopped: the second run held the lock {waited:?} later");
    fence.assert_fenced();
    kill(tairlock, Signal::SIGCONT).unwrap();
    let status = wait_for(&mut a, Duration::from_secs(10), "continued", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    fence.assert_fenced();
}

/// Scenario 2, SIGTSTP: to tairlock (Ctrl-Z when tairlock shares the terminal's foreground group: a
/// pipeline, a script) stops the command with it; continuing tairlock continues the command, which
/// then finishes normally.
#[test]
fn sigtstp_to_tairlock_stops_the_command_and_sigcont_resumes_it() {
    let server = RedisServer::start();
    let scratch = Scratch::new("sigtstp");
    let fence = Fence::new(&scratch);
    let stderr = scratch.file("a.stderr");
    let mut a = run(
        &server,
        KEY,
        &["--ttl", "3s", "--grace", "500ms"],
        &fence.writer(60),
        &stderr,
    )
    .spawn()
    .unwrap();
    let tairlock = Pid::from_raw(a.id() as i32);
    until(Duration::from_secs(5), "the first command writes", || {
        fence.a_lines() >= 3
    });
    let writer: i32 = read(&fence.pids).trim().parse().unwrap();
    kill(tairlock, Signal::SIGTSTP).unwrap();
    until(
        Duration::from_secs(2),
        "tairlock and its command stopped",
        || state(tairlock.as_raw()) == 'T' && state(writer) == 'T',
    );
    let frozen = fence.a_lines();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        fence.a_lines(),
        frozen,
        "the command wrote while tairlock was stopped"
    );
    kill(tairlock, Signal::SIGCONT).unwrap();
    // Continued only once tairlock has renewed: the lease then has (nearly) all of its 3 s,
    // where it had at most 1.8 s left after the stop.
    until(Duration::from_secs(5), "the command is continued", || {
        fence.a_lines() > frozen
    });
    let left: u64 = server.cli(&["PTTL", LOCK_KEY]).trim().parse().unwrap();
    assert!(
        left > 2000,
        "the command was continued before a renewal: PTTL {left} ms"
    );
    let status = wait_for(&mut a, Duration::from_secs(15), "continued", &stderr);
    assert_eq!(status.code(), Some(0), "{}", read(&stderr));
    assert_eq!(
        fence.a_lines(),
        60,
        "the command finished after it was continued"
    );
    assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0", "released");
}

/// Scenario 3: a descendant that left the command's group and session (`setsid`) is stopped with
/// the command when the lease is lost (before, `killpg` missed it and it wrote on).
#[test]
fn a_lost_lease_stops_descendants_that_left_the_group() {
    let server = RedisServer::start();
    let scratch = Scratch::new("setsid-lost");
    let fence = Fence::new(&scratch);
    let stderr = scratch.file("a.stderr");
    let script = format!("setsid sh -c '{}' & wait", fence.writer(500));
    let mut a = run(
        &server,
        KEY,
        &["--ttl", "3s", "--grace", "300ms"],
        &script,
        &stderr,
    )
    .spawn()
    .unwrap();
    until(Duration::from_secs(5), "the escaped writer writes", || {
        fence.a_lines() >= 3
    });
    assert_eq!(server.cli(&["DEL", LOCK_KEY]), "1");
    let status = wait_for(&mut a, Duration::from_secs(10), "lost", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    fence.second_run(&server, &scratch);
    fence.assert_fenced();
}

/// Scenario 3, the `flock` rule: the command exits at once, leaving a descendant in a session of
/// its own; the lock stays held until that one ends (before, it was released as soon as the
/// command's group was empty).
#[test]
fn the_lock_is_held_while_a_descendant_that_left_the_group_lives() {
    let server = RedisServer::start();
    let scratch = Scratch::new("setsid-held");
    let fence = Fence::new(&scratch);
    let stderr = scratch.file("a.stderr");
    let script = format!("setsid sh -c '{}' & exit 0", fence.writer(40));
    let mut a = run(&server, KEY, &[], &script, &stderr).spawn().unwrap();
    until(Duration::from_secs(5), "the escaped writer writes", || {
        fence.a_lines() >= 1
    });
    fence.second_run(&server, &scratch);
    let status = wait_for(&mut a, Duration::from_secs(10), "held", &stderr);
    assert_eq!(status.code(), Some(0), "{}", read(&stderr));
    fence.assert_fenced();
    assert_eq!(fence.a_lines(), 40, "the descendant ran to its end");
}

/// A long job whose helpers are orphaned (each `(cmd &)` leaves one to the supervisor) leaves
/// no zombies while it still runs: orphans are reaped as they exit, not after the command.
#[test]
fn a_long_job_that_orphans_100_helpers_leaves_no_zombies() {
    let server = RedisServer::start();
    let scratch = Scratch::new("zombies");
    let (stderr, spawned) = (scratch.file("stderr"), scratch.file("spawned"));
    let script = format!(
        "i=0; while [ $i -lt 100 ]; do (sleep 0.01 &); i=$((i+1)); done; echo up > {}; sleep 3",
        spawned.display()
    );
    let mut a = run(&server, KEY, &[], &script, &stderr).spawn().unwrap();
    wait_for_text(&spawned, "up", Duration::from_secs(10));
    let tairlock = a.id() as i32;
    let supervisor = children(tairlock)
        .first()
        .map(|(pid, _)| *pid)
        .expect("tairlock's supervisor");
    let zombies = || {
        children(supervisor)
            .iter()
            .filter(|(_, state)| *state == 'Z')
            .count()
    };
    // A helper that exits is a zombie until the supervisor's next reap, so one sample of zero
    // proves nothing and one sample of one is no failure: the claim is that the count settles
    // at zero (five samples in a row, 100 ms) long before the command ends, while without
    // reaping it would stay at the number of helpers that have exited.
    let start = Instant::now();
    let (mut left, mut zeros) = (zombies(), 0);
    while zeros < 5 && start.elapsed() < Duration::from_millis(2000) {
        std::thread::sleep(Duration::from_millis(20));
        left = zombies();
        zeros = if left == 0 { zeros + 1 } else { 0 };
    }
    println!(
        "orphaned helpers: {left} zombies, {zeros} zero samples in a row, {:?} after the last was started",
        start.elapsed()
    );
    assert_eq!(
        left, 0,
        "zombies pile up under the supervisor while the command runs"
    );
    assert!(state(tairlock) != '?', "the command still runs");
    let status = wait_for(&mut a, Duration::from_secs(10), "zombies", &stderr);
    assert_eq!(status.code(), Some(0), "{}", read(&stderr));
}

/// `nohup tairlock run …` survives SIGHUP like `nohup cmd`: the inherited `SIG_IGN` stays, for
/// tairlock and the command (before, tairlock caught SIGHUP and passed it on).
#[test]
fn nohup_keeps_sighup_ignored_for_tairlock_and_the_command() {
    let server = RedisServer::start();
    let scratch = Scratch::new("nohup");
    let (stderr, out) = (scratch.file("stderr"), scratch.file("out"));
    let script = format!(
        "echo $$ > {o}.tmp; mv {o}.tmp {o}; sleep 1; echo finished >> {o}",
        o = out.display()
    );
    let mut a = Command::new("nohup")
        .arg(env!("CARGO_BIN_EXE_tairlock"))
        .args([
            "run",
            KEY,
            "--redis",
            &server.url(),
            "--",
            "sh",
            "-c",
            &script,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    wait_for_text(&out, "\n", Duration::from_secs(5));
    let command: i32 = read(&out).trim().parse().unwrap();
    // As a hangup would: to tairlock, and to the command's group.
    kill(Pid::from_raw(a.id() as i32), Signal::SIGHUP).unwrap();
    let _ = killpg(Pid::from_raw(command), Signal::SIGHUP);
    let status = wait_for(&mut a, Duration::from_secs(10), "nohup", &stderr);
    assert_eq!(status.code(), Some(0), "{}", read(&stderr));
    assert!(
        read(&out).contains("finished"),
        "the command died of SIGHUP"
    );
}

/// As a shell reports it: 127 when the command is not found, 126 when it is found but cannot
/// be executed; the lock is released either way.
#[test]
fn a_command_not_found_exits_127_and_one_not_executable_126() {
    let server = RedisServer::start();
    let scratch = Scratch::new("codes");
    let stderr = scratch.file("stderr");
    let plain = scratch.file("plain.txt");
    std::fs::write(&plain, "not a program\n").unwrap();
    let dir = scratch.file("");
    let missing = scratch.file("no-such-program");
    for (program, code) in [
        (plain.as_path(), 126),
        (dir.as_path(), 126),
        (missing.as_path(), 127),
        (Path::new("tairlock-no-such-program-on-path"), 127),
    ] {
        let status = Command::new(env!("CARGO_BIN_EXE_tairlock"))
            .args(["run", KEY, "--redis", &server.url(), "--"])
            .arg(program)
            .stderr(std::fs::File::create(&stderr).unwrap())
            .status()
            .unwrap();
        let message = read(&stderr);
        assert_eq!(
            status.code(),
            Some(code),
            "{}: {message}",
            program.display()
        );
        assert!(message.contains("cannot run"), "{message}");
        assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0", "released");
    }
}

/// Arguments are passed on as bytes, in any encoding, as `flock` does.
#[test]
fn a_non_utf8_argument_reaches_the_command_unchanged() {
    let server = RedisServer::start();
    let scratch = Scratch::new("bytes");
    let (stderr, out) = (scratch.file("stderr"), scratch.file("out"));
    let bytes = OsStr::from_bytes(b"caf\xe9-\xff");
    let status = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args(["run", KEY, "--redis", &server.url(), "--", "sh", "-c"])
        .arg(format!("printf %s \"$1\" > {}", out.display()))
        .arg("sh")
        .arg(bytes)
        .stderr(std::fs::File::create(&stderr).unwrap())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0), "{}", read(&stderr));
    assert_eq!(std::fs::read(&out).unwrap(), bytes.as_bytes());
}

/// A broken stderr pipe (the reader went away) must not turn exit 76 into a panic.
#[test]
fn a_broken_stderr_pipe_keeps_exit_76() {
    let server = RedisServer::start();
    let scratch = Scratch::new("epipe");
    let started = scratch.file("started");
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut a = Command::new(env!("CARGO_BIN_EXE_tairlock"))
        .args([
            "run",
            KEY,
            "--redis",
            &server.url(),
            "--ttl",
            "900ms",
            "--grace",
            "100ms",
        ])
        .args(["--", "sh", "-c"])
        .arg(format!("echo up > {}; sleep 5", started.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(writer)
        .spawn()
        .unwrap();
    wait_for_text(&started, "up", Duration::from_secs(5));
    assert_eq!(server.cli(&["DEL", LOCK_KEY]), "1");
    let status = wait_for(&mut a, Duration::from_secs(10), "epipe", &started);
    assert_eq!(status.code(), Some(76));
}

/// `setsid -c ARGV…` on a new pseudo-terminal; everything written there is drained.
fn on_terminal(argv: &[&str]) -> Child {
    use std::io::Read;

    let pty = nix::pty::openpty(None, None).unwrap();
    let slave = pty.slave;
    let child = Command::new("setsid")
        .arg("-c")
        .args(argv)
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    let mut master = std::fs::File::from(pty.master);
    std::thread::spawn(move || {
        let mut buf = [0u8; 1024];
        while matches!(master.read(&mut buf), Ok(n) if n > 0) {}
    });
    child
}

/// Under `stty tostop`, tairlock run as a background job (its own group, not the terminal's
/// foreground) reports a command not found and exits 127: its messages, and its supervisor's,
/// do not raise SIGTTOU again and again (before, the supervisor's message livelocked).
#[test]
fn a_background_run_under_tostop_reports_and_exits() {
    let server = RedisServer::start();
    let scratch = Scratch::new("tostop");
    let rc = scratch.file("rc");
    let shell = format!(
        "stty tostop; set -m; {bin} run {KEY} --redis {url} -- /no/such/program & wait $!; \
         echo $? > {rc}",
        bin = env!("CARGO_BIN_EXE_tairlock"),
        url = server.url(),
        rc = rc.display()
    );
    let mut session = on_terminal(&["sh", "-c", &shell]);
    let start = Instant::now();
    while !read(&rc).contains('\n') && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = killpg(Pid::from_raw(session.id() as i32), Signal::SIGKILL);
    let _ = session.wait();
    // Whatever is left of a livelocked run (its own groups: not the session's).
    let url = server.url();
    for pid in std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
    {
        if std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
            let c = String::from_utf8_lossy(&c);
            c.contains("/no/such/program") && (c.contains(&url) || c.contains("__"))
        }) {
            let _ = kill(Pid::from_raw(pid), Signal::SIGKILL);
        }
    }
    assert_eq!(read(&rc).trim(), "127", "no exit within 10 s (livelock)");
}

/// A command in the background of the terminal that reads it is stopped by SIGTTIN; tairlock's
/// job is stopped with it, so the lease is no longer renewed, and the lock is free again after
/// it (before, tairlock renewed forever for a command that waited for input).
#[test]
fn a_background_command_reading_the_terminal_does_not_keep_the_lock() {
    let server = RedisServer::start();
    let scratch = Scratch::new("ttin");
    let (pid_file, read_it) = (scratch.file("pid"), scratch.file("read"));
    let shell = format!(
        "set -m; {bin} run {KEY} --redis {url} --ttl 1500ms --grace 300ms -- \
         sh -c 'read x; echo \"$x\" > {read_it}' & echo $! > {pid}; sleep 20",
        bin = env!("CARGO_BIN_EXE_tairlock"),
        url = server.url(),
        read_it = read_it.display(),
        pid = pid_file.display()
    );
    let mut session = on_terminal(&["sh", "-c", &shell]);
    wait_for_text(&pid_file, "\n", Duration::from_secs(5));
    let tairlock: i32 = read(&pid_file).trim().parse().unwrap();
    until(Duration::from_secs(5), "the lock is taken", || {
        server.cli(&["EXISTS", LOCK_KEY]) == "1"
    });
    let stderr = scratch.file("b.stderr");
    let start = Instant::now();
    let status = run(&server, KEY, &["--wait", "8s"], "true", &stderr)
        .status()
        .unwrap();
    let waited = start.elapsed();
    let tairlock_state = state(tairlock);
    let _ = kill(Pid::from_raw(tairlock), Signal::SIGKILL);
    let _ = killpg(Pid::from_raw(session.id() as i32), Signal::SIGKILL);
    let _ = session.wait();
    println!("a background command reading the terminal: the lock was free {waited:?} later");
    assert_eq!(
        status.code(),
        Some(0),
        "the lock stayed held: {}",
        read(&stderr)
    );
    assert_eq!(tairlock_state, 'T', "tairlock's job is shown stopped");
    assert!(!read_it.exists(), "the command never read the terminal");
}
