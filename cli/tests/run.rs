//! `tairlock run KEY -- CMD…` (issues #4 part 5, #20 and #12 item 8), the built binary against a
//! real `redis-server`.
//!
//! - Two `tairlock run` processes on one key: their commands never overlap, each sees
//!   `TAIRLOCK_KEY` and `TAIRLOCK_FENCE`, and the fences increase.
//! - tairlock exits with the command's status; 75 when the lock is not had within `--wait`.
//! - When the lease is lost (the server paused past `--ttl`, or the key deleted behind its
//!   back) the command's whole process group gets SIGTERM (then SIGKILL after `--grace`) and
//!   tairlock exits 76; so does a release that finds the lease gone. A background grandchild
//!   never outlives a lost lease.
//! - When renewals fail, the command gets SIGTERM at the lease's deadline less `--grace`; a
//!   `--grace` that does not fit inside `--ttl` is refused before anything is locked.
//! - On a terminal (a pseudo-terminal here), the command's group has the foreground: it reads
//!   the terminal, and Ctrl-C reaches it exactly once.
//! - `kill -9` of tairlock kills the command's group within a second (the lifeline).

#[path = "../../tests/support/mod.rs"]
mod support;

mod common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::{Scratch, now_ns, read, run, wait_for, wait_for_text};
use support::RedisServer;

const KEY: &str = "job";
const LOCK_KEY: &str = "tairlock:{job}";

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

/// `--fair` (issue #13): processes waiting for one key run in the order they arrived, each
/// handed the lock by the previous one's release.
#[test]
fn fair_runs_take_their_turns_in_arrival_order() {
    let server = RedisServer::start();
    let scratch = Scratch::new("fair");
    let log = scratch.file("log");
    let script = format!("echo \"$WHO\" >> {log}; sleep 0.3", log = log.display());
    let mut children = Vec::new();
    for who in ["a", "b", "c", "d"] {
        let stderr = scratch.file(&format!("{who}.stderr"));
        let child = run(&server, KEY, &["--fair"], &script, &stderr)
            .env("WHO", who)
            .spawn()
            .unwrap();
        children.push((child, stderr));
        // Arrive one after the other, well within the holder's 0.3 s.
        std::thread::sleep(Duration::from_millis(120));
    }
    for (mut child, stderr) in children {
        let status = wait_for(&mut child, Duration::from_secs(30), "a fair run", &stderr);
        assert!(status.success(), "{status}\n{}", read(&stderr));
    }
    assert_eq!(read(&log), "a\nb\nc\nd\n");
    assert_eq!(
        server.cli(&["DBSIZE"]).trim(),
        "1",
        "only the fence key is left"
    );
}

/// `--write --fair`: writers of a reader/writer lock run in the order they arrived, each handed
/// the write lock by the previous one's release.
#[test]
fn fair_writers_take_their_turns_in_arrival_order() {
    let server = RedisServer::start();
    let scratch = Scratch::new("fair-write");
    let log = scratch.file("log");
    let script = format!("echo \"$WHO\" >> {log}; sleep 0.3", log = log.display());
    let mut children = Vec::new();
    for who in ["a", "b", "c", "d"] {
        let stderr = scratch.file(&format!("{who}.stderr"));
        let child = run(&server, KEY, &["--write", "--fair"], &script, &stderr)
            .env("WHO", who)
            .spawn()
            .unwrap();
        children.push((child, stderr));
        // Arrive one after the other, well within the holder's 0.3 s.
        std::thread::sleep(Duration::from_millis(120));
    }
    for (mut child, stderr) in children {
        let status = wait_for(
            &mut child,
            Duration::from_secs(30),
            "a fair writer",
            &stderr,
        );
        assert!(status.success(), "{status}\n{}", read(&stderr));
    }
    assert_eq!(read(&log), "a\nb\nc\nd\n");
    assert_eq!(
        server.cli(&["DBSIZE"]).trim(),
        "1",
        "only the fence key is left"
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
        let status = run(&server, KEY, &[], script, &stderr).status().unwrap();
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
    let mut holder = run(
        &server,
        KEY,
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
    let status = run(&server, KEY, &["--wait", "100ms"], &touch, &stderr)
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
    let status = run(&server, KEY, &["--wait", "10s"], &touch, &stderr)
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

/// Shell: wait until the background job `$pid` has become `sleep`. Until its `exec`, the forked
/// shell may still catch a signal with the parent's handler and lose it, and the `sleep` would
/// then outlive the group's SIGTERM.
const SLEEP_EXECED: &str = "until [ \"$(cat /proc/$pid/comm)\" = sleep ]; do sleep 0.01; done; ";

/// The command traps TERM, records when it arrived (wall clock, ns) and exits; its background
/// `sleep` gets the same SIGTERM (it is in the command's process group), so nobody kills it by
/// hand. `started` is written once it runs.
fn trapping_script(scratch: &Scratch) -> (String, PathBuf, PathBuf) {
    let (started, term) = (scratch.file("started"), scratch.file("term"));
    let script = format!(
        "trap 'date +%s%N > {term}; exit 143' TERM; sleep 10 & pid=$!; {exec_wait}\
         echo $TAIRLOCK_FENCE > {started}; wait $pid; echo finished >> {started}",
        exec_wait = SLEEP_EXECED,
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
    let mut child = run(
        &server,
        KEY,
        &["--ttl", "300ms", "--grace", "50ms"],
        &script,
        &stderr,
    )
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
    // Stopped early (renewals failing), or found lost: either way said so.
    let message = read(&stderr);
    assert!(
        message.contains("could not be renewed") || message.contains("lost"),
        "{message}"
    );
}

#[test]
fn a_deleted_key_stops_the_command_and_exits_76() {
    let server = RedisServer::start();
    let scratch = Scratch::new("deleted");
    let stderr = scratch.file("stderr");
    let (script, started, term) = trapping_script(&scratch);
    // A short grace: a renewal delayed by a loaded machine must not stop the command early.
    let mut child = run(
        &server,
        KEY,
        &["--ttl", "600ms", "--grace", "100ms"],
        &script,
        &stderr,
    )
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

/// A command that ignores SIGTERM is killed after `--grace`, with its whole process group: a
/// background job that ignores SIGTERM too does not survive it (before #20, only the direct
/// child got SIGKILL, and the job wrote `late` a second later).
#[test]
fn a_command_ignoring_sigterm_is_killed_with_its_group_after_the_grace_period() {
    let server = RedisServer::start();
    let scratch = Scratch::new("grace");
    let stderr = scratch.file("stderr");
    let (started, late) = (scratch.file("started"), scratch.file("late"));
    let script = format!(
        "trap '' TERM; (sleep 2; echo late > {late}) & echo up > {s}; sleep 2; echo finished >> {s}",
        s = started.display(),
        late = late.display()
    );
    let mut child = run(
        &server,
        KEY,
        &["--ttl", "900ms", "--grace", "300ms"],
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
    // The background job would have written by 2 s after the start.
    std::thread::sleep(Duration::from_millis(2500).saturating_sub(took));
    assert!(!read(&started).contains("finished"), "the command survived");
    assert!(
        !late.exists(),
        "a background job of the command survived SIGKILL"
    );
}

/// SIGTERM and SIGINT sent to tairlock are passed on to the command's group; tairlock then
/// exits with the command's status and releases the lock. (A non-interactive shell starts its
/// background jobs with SIGINT ignored: for SIGINT, the trap ends the `sleep` itself.)
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
        let cleanup = if name == "INT" { "kill $pid; " } else { "" };
        let script = format!(
            "trap 'echo {name} > {got}; {cleanup}exit 42' {name}; sleep 10 & pid=$!; \
             {SLEEP_EXECED}echo up > {started}; wait $pid",
            got = got.display(),
            started = started.display()
        );
        let mut child = run(&server, KEY, &[], &script, &stderr).spawn().unwrap();
        wait_for_text(&started, "up", Duration::from_secs(5));
        kill(Pid::from_raw(child.id() as i32), signal).unwrap();
        let status = wait_for(&mut child, Duration::from_secs(5), name, &stderr);
        assert_eq!(status.code(), Some(42), "{name}: {}", read(&stderr));
        assert_eq!(read(&got).trim(), name, "the command got {name}");
        assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0", "{name}: released");
    }
}

/// `sh -c '(sleep 2.5; echo late > F) & wait'` with the key deleted at 0.5 s: the background
/// job gets SIGTERM with the shell and never writes F (before #20, SIGTERM went to `sh` only,
/// and F was written two seconds after tairlock had exited 76).
#[test]
fn a_background_grandchild_never_outlives_a_lost_lease() {
    let server = RedisServer::start();
    let scratch = Scratch::new("grandchild");
    let (stderr, started, late) = (
        scratch.file("stderr"),
        scratch.file("started"),
        scratch.file("late"),
    );
    let script = format!(
        "echo up > {started}; (sleep 2.5; echo late > {late}) & wait",
        started = started.display(),
        late = late.display()
    );
    let mut child = run(
        &server,
        KEY,
        &["--ttl", "3s", "--grace", "1s"],
        &script,
        &stderr,
    )
    .spawn()
    .unwrap();
    wait_for_text(&started, "up", Duration::from_secs(5));
    let start = Instant::now();
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(server.cli(&["DEL", LOCK_KEY]), "1");
    let status = wait_for(&mut child, Duration::from_secs(10), "grandchild", &stderr);
    let took = start.elapsed();
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    println!("lost lease with a background job: tairlock exited {took:?} after the start");
    std::thread::sleep(Duration::from_millis(3500).saturating_sub(start.elapsed()));
    assert!(
        !late.exists(),
        "the background job ran on after the lease was lost\n{}",
        read(&stderr)
    );
}

/// A key deleted while a short command runs (the watchdog's next renewal would come only after
/// it): the release finds the lock gone, and tairlock exits 76 with a message saying so, not
/// the command's 0 (before #20: exit 0, no message).
#[test]
fn a_key_deleted_during_a_short_command_exits_76() {
    let server = RedisServer::start();
    let scratch = Scratch::new("short");
    let (stderr, started) = (scratch.file("stderr"), scratch.file("started"));
    let script = format!("echo up > {}; sleep 1", started.display());
    let mut child = run(&server, KEY, &["--ttl", "30s"], &script, &stderr)
        .spawn()
        .unwrap();
    wait_for_text(&started, "up", Duration::from_secs(5));
    assert_eq!(server.cli(&["DEL", LOCK_KEY]), "1");
    let status = wait_for(&mut child, Duration::from_secs(10), "short", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    let message = read(&stderr);
    assert!(
        message.contains("lost") && message.contains("the release found the lock gone"),
        "{message}"
    );
    println!("{}", message.trim());
}

/// `--grace` must fit inside `--ttl` (at most half of it): refused with exit 2 and a clear
/// message before anything is locked or run (before #20 it was accepted, and a grace longer
/// than what is left of the lease outlived it). Without `--grace`, the default is capped.
#[test]
fn a_grace_that_does_not_fit_inside_the_ttl_is_refused_before_locking() {
    let server = RedisServer::start();
    let scratch = Scratch::new("refused");
    let (stderr, ran) = (scratch.file("stderr"), scratch.file("ran"));
    let touch = format!("touch {}", ran.display());
    for (ttl, grace) in [("1s", "600ms"), ("3s", "3s"), ("30s", "20s")] {
        let status = run(
            &server,
            KEY,
            &["--ttl", ttl, "--grace", grace],
            &touch,
            &stderr,
        )
        .status()
        .unwrap();
        let message = read(&stderr);
        assert_eq!(
            status.code(),
            Some(2),
            "--ttl {ttl} --grace {grace}: {message}"
        );
        assert!(
            message.contains("--grace") && message.contains("does not fit inside --ttl"),
            "{message}"
        );
        assert!(!ran.exists(), "the command ran");
        assert_eq!(
            server.cli(&["EXISTS", LOCK_KEY]),
            "0",
            "something was locked"
        );
    }
    println!("{}", read(&stderr).trim());
    // Half of the ttl fits; so does the default grace with a short ttl (capped at half of it).
    for args in [
        &["--ttl", "1s", "--grace", "500ms"][..],
        &["--ttl", "1s"][..],
    ] {
        let status = run(&server, KEY, args, &touch, &stderr).status().unwrap();
        assert_eq!(status.code(), Some(0), "{args:?}: {}", read(&stderr));
    }
    assert!(ran.exists());
}

/// Renewals that cannot land (writes paused on the server, reads still answered): the command
/// gets SIGTERM at the lease's deadline less `--grace`, so that it and its grace period end
/// inside the lease. Measured against the lease's expiry as the server wrote it. Before #20 the
/// SIGTERM came only at the local deadline itself, a few milliseconds before the expiry.
#[test]
fn failing_renewals_stop_the_command_before_the_lease_runs_out() {
    let server = RedisServer::start();
    let scratch = Scratch::new("overdue");
    let stderr = scratch.file("stderr");
    let (script, started, term) = trapping_script(&scratch);
    let grace = Duration::from_millis(1500);
    let mut child = run(
        &server,
        KEY,
        &["--ttl", "3s", "--grace", "1500ms"],
        &script,
        &stderr,
    )
    .spawn()
    .unwrap();
    wait_for_text(&started, "\n", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(300));
    // Scripts are writes: renewals wait until the pause ends, long after the lease expired.
    assert_eq!(server.cli(&["CLIENT", "PAUSE", "5000", "WRITE"]), "OK");
    let value = server.cli(&["GET", LOCK_KEY]);
    let expiry_ms: u128 = value
        .split(':')
        .nth(1)
        .and_then(|ms| ms.parse().ok())
        .unwrap_or_else(|| panic!("not a lease: {value:?}"));
    let status = wait_for(&mut child, Duration::from_secs(15), "overdue", &stderr);
    assert_eq!(status.code(), Some(76), "{}", read(&stderr));
    let term_at: u128 = read(&term)
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("the command never got SIGTERM\n{}", read(&stderr)));
    let before_expiry = Duration::from_millis(expiry_ms as u64)
        .saturating_sub(Duration::from_nanos(term_at as u64));
    println!(
        "renewals paused: SIGTERM {before_expiry:?} before the lease's expiry (--grace {grace:?})\n{}",
        read(&stderr).trim()
    );
    assert!(
        before_expiry >= grace / 2,
        "SIGTERM only {before_expiry:?} before the lease's expiry; --grace is {grace:?}\n{}",
        read(&stderr)
    );
    // Said in an operator's words (issue #28): what happened, what was done, what to change.
    let message = read(&stderr);
    for words in [
        "could not be renewed: no renewal has been answered for",
        "the command was stopped early because no renewal had been answered",
        "before the lease's deadline, so no other holder overlapped it",
        "retry with a longer --ttl",
        "or a shorter --grace",
    ] {
        assert!(message.contains(words), "{words:?} is not said:\n{message}");
    }
}

/// Whether `pid` is gone (or a zombie nobody reaped yet: it runs no more).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
    }
}

/// `kill -9` of tairlock (or the OOM killer): the lifeline kills the command's group within a
/// second, the command and its background job both (before #12 item 8, both ran on without a
/// lock).
#[test]
fn kill_9_of_tairlock_kills_the_command_within_a_second() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let server = RedisServer::start();
    let scratch = Scratch::new("kill9");
    let (stderr, pids) = (scratch.file("stderr"), scratch.file("pids"));
    let script = format!(
        "echo $$ > {p}.tmp; sleep 30 & echo $! >> {p}.tmp; mv {p}.tmp {p}; wait",
        p = pids.display()
    );
    let mut child = run(&server, KEY, &[], &script, &stderr).spawn().unwrap();
    wait_for_text(&pids, "\n", Duration::from_secs(5));
    let pids: Vec<i32> = read(&pids)
        .lines()
        .map(|l| l.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2);
    assert!(pids.iter().all(|&p| !gone(p)));

    let killed = Instant::now();
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    let _ = child.wait();
    while !pids.iter().all(|&p| gone(p)) && killed.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    let took = killed.elapsed();
    println!("kill -9 of tairlock: its command and background job were gone {took:?} later");
    assert!(
        pids.iter().all(|&p| gone(p)),
        "the command outlived tairlock by 5 s\n{}",
        read(&stderr)
    );
    assert!(took < Duration::from_secs(1), "took {took:?}");
}

/// `tairlock run` on a pseudo-terminal, as from an interactive shell: `setsid -c` makes it the
/// leader of a new session whose controlling terminal is the pty, with its group in the
/// foreground. Everything tairlock and the command write lands in `output`.
struct OnTerminal {
    child: Child,
    master: std::fs::File,
    output: std::sync::Arc<parking_lot::Mutex<Vec<u8>>>,
}

impl OnTerminal {
    fn start(server: &RedisServer, script: &str) -> OnTerminal {
        let url = server.url();
        let argv = [
            env!("CARGO_BIN_EXE_tairlock"),
            "run",
            KEY,
            "--redis",
            &url,
            "--",
            "sh",
            "-c",
            script,
        ];
        OnTerminal::start_argv(&argv)
    }

    /// `setsid -c ARGV…` on a new pseudo-terminal.
    fn start_argv(argv: &[&str]) -> OnTerminal {
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
        let master = std::fs::File::from(pty.master);
        let output = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let (mut reader, sink) = (master.try_clone().unwrap(), output.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1024];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                sink.lock().extend_from_slice(&buf[..n]);
            }
        });
        OnTerminal {
            child,
            master,
            output,
        }
    }

    fn type_in(&mut self, bytes: &[u8]) {
        use std::io::Write;
        self.master.write_all(bytes).unwrap();
    }

    fn output(&self) -> String {
        String::from_utf8_lossy(&self.output.lock()).into_owned()
    }

    /// The terminal's foreground process group.
    fn foreground(&self) -> i32 {
        nix::unistd::tcgetpgrp(&self.master).unwrap().as_raw()
    }

    fn wait(&mut self, limit: Duration, what: &str) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            if start.elapsed() > limit {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!(
                    "{what}: tairlock did not exit within {limit:?}\n{}",
                    self.output()
                );
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The process group of the shell that wrote `/proc/$$/stat` into `path` (field 5).
fn pgid_in(path: &Path) -> i32 {
    read(path)
        .split(' ')
        .nth(4)
        .and_then(|g| g.parse().ok())
        .unwrap_or_else(|| panic!("no pgid in {:?}", read(path)))
}

/// Ctrl-C on the terminal reaches the command exactly once: its group has the foreground and
/// tairlock is not in it, so nothing forwards a second SIGINT (before #20 the command shared
/// tairlock's foreground group: it got the terminal's SIGINT and tairlock's copy of it). The
/// shell waits with `wait`, which a trapped signal interrupts at once, and clears its pending
/// flag before it runs the trap: a second SIGINT a moment later runs the trap again.
#[test]
fn ctrl_c_on_the_terminal_reaches_the_command_exactly_once() {
    let server = RedisServer::start();
    let scratch = Scratch::new("ctrlc");
    let (started, got, done) = (
        scratch.file("started"),
        scratch.file("got"),
        scratch.file("done"),
    );
    let script = format!(
        "trap 'echo INT >> {got}' INT; cat /proc/$$/stat > {started}.tmp; mv {started}.tmp {started}; \
         while [ ! -e {done} ]; do sleep 0.2 & wait $!; done",
        got = got.display(),
        started = started.display(),
        done = done.display()
    );
    let mut run = OnTerminal::start(&server, &script);
    wait_for_text(&started, ")", Duration::from_secs(5));
    let (command_group, tairlock) = (pgid_in(&started), run.child.id() as i32);
    assert_eq!(
        run.foreground(),
        command_group,
        "the command's group has the terminal's foreground"
    );
    assert_ne!(
        command_group, tairlock,
        "tairlock is not in the command's group"
    );

    run.type_in(b"\x03");
    wait_for_text(&got, "INT", Duration::from_secs(5));
    // A second SIGINT, if any, would have come by now.
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(&done, "").unwrap();
    let status = run.wait(Duration::from_secs(10), "ctrl-c");
    assert_eq!(status.code(), Some(0), "{}", run.output());
    assert_eq!(
        read(&got).lines().count(),
        1,
        "SIGINT reached the command {} times",
        read(&got).lines().count()
    );
    assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0", "released");
}

/// An interactive command reads the terminal: its group is the foreground group (a background
/// group reading it would be stopped by SIGTTIN).
#[test]
fn an_interactive_command_reads_the_terminal() {
    let server = RedisServer::start();
    let scratch = Scratch::new("interactive");
    let (started, answer) = (scratch.file("started"), scratch.file("answer"));
    let script = format!(
        "echo up > {started}; read line; echo \"got $line\" > {answer}",
        started = started.display(),
        answer = answer.display()
    );
    let mut run = OnTerminal::start(&server, &script);
    wait_for_text(&started, "up", Duration::from_secs(5));
    run.type_in(b"hello\n");
    let status = run.wait(Duration::from_secs(10), "interactive");
    assert_eq!(status.code(), Some(0), "{}", run.output());
    assert_eq!(read(&answer).trim(), "got hello", "{}", run.output());
    assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0", "released");
}

/// The state letter of `pid` in `/proc/<pid>/stat` (`T`: stopped).
fn state(pid: i32) -> char {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next())
        })
        .unwrap_or('?')
}

/// Ctrl-Z on the terminal stops the command's group, and tairlock's with it (the shell whose job
/// tairlock is then sees its job stopped and takes the terminal back, instead of waiting on a
/// tairlock that runs on); continuing tairlock's group continues the command. (The command
/// sleeps when Ctrl-Z comes: a shell stopped between its `vfork` and the child's `exec` is not
/// seen stopped by its parent, here or under a job-control shell.)
#[test]
fn ctrl_z_stops_tairlock_with_the_command_and_continuing_resumes_both() {
    use nix::sys::signal::{Signal, killpg};
    use nix::unistd::Pid;

    let server = RedisServer::start();
    let scratch = Scratch::new("ctrlz");
    let started = scratch.file("started");
    let script = format!(
        "echo up > {started}; sleep 1.5; echo resumed >> {started}",
        started = started.display()
    );
    let mut run = OnTerminal::start(&server, &script);
    wait_for_text(&started, "up", Duration::from_secs(5));
    std::thread::sleep(Duration::from_millis(200));
    let tairlock = run.child.id() as i32;

    run.type_in(b"\x1a");
    let start = Instant::now();
    while state(tairlock) != 'T' {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "tairlock runs on (state {}) while its command is stopped\n{}",
            state(tairlock),
            run.output()
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    println!("Ctrl-Z: tairlock stopped {:?} later", start.elapsed());

    // As `bg` would (nobody takes the terminal here: it stays with the command's group).
    killpg(Pid::from_raw(tairlock), Signal::SIGCONT).unwrap();
    let status = run.wait(Duration::from_secs(10), "ctrl-z");
    assert_eq!(status.code(), Some(0), "{}", run.output());
    assert!(read(&started).contains("resumed"));
    assert_eq!(server.cli(&["EXISTS", LOCK_KEY]), "0", "released");
}

/// In a pipeline (`tairlock run … | cat`, here under a shell without job control), tairlock
/// shares its group with the pipeline's other processes: the foreground stays with that group,
/// so that `cat` (or `less`) is not stopped at its next terminal read, and the command runs in
/// the terminal's background.
#[test]
fn in_a_pipeline_the_foreground_stays_with_the_pipeline() {
    let server = RedisServer::start();
    let scratch = Scratch::new("pipeline");
    let (started, done) = (scratch.file("started"), scratch.file("done"));
    let command = format!(
        "cat /proc/$$/stat > {started}.tmp; mv {started}.tmp {started}; \
         while [ ! -e {done} ]; do sleep 0.05; done; echo through the pipe",
        started = started.display(),
        done = done.display()
    );
    let pipeline = format!(
        "{bin} run {KEY} --redis {url} -- sh -c '{command}' | cat",
        bin = env!("CARGO_BIN_EXE_tairlock"),
        url = server.url()
    );
    let mut run = OnTerminal::start_argv(&["sh", "-c", &pipeline]);
    wait_for_text(&started, ")", Duration::from_secs(5));
    let shell = run.child.id() as i32;
    assert_ne!(
        pgid_in(&started),
        shell,
        "the command has a group of its own"
    );
    assert_eq!(
        run.foreground(),
        shell,
        "the pipeline's group keeps the foreground"
    );
    std::fs::write(&done, "").unwrap();
    let status = run.wait(Duration::from_secs(10), "pipeline");
    assert_eq!(status.code(), Some(0), "{}", run.output());
    assert!(
        run.output().contains("through the pipe"),
        "{}",
        run.output()
    );
}
