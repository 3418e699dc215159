//! The supervisor: a hidden mode of the `tairlock` binary (`tairlock __supervise`) that starts
//! the command and kills its process group when `tairlock run` dies.
//!
//! `tairlock run` starts it as the leader of a new process group and keeps the write end of a
//! pipe, the *lifeline*, whose read end only the supervisor holds. The supervisor:
//!
//! 1. catches the job-control and termination signals and does nothing with them (a group
//!    signal meant for the command, or for `tairlock run`'s own group, must not end it). It
//!    catches them rather than blocking or ignoring them: a blocked or ignored signal stays so
//!    in the command it starts, a caught one is reset to its default by `exec`. It also clears
//!    the signal mask it inherited from `tairlock run` (which blocks SIGTTOU and SIGTTIN), so
//!    that the command starts with none;
//! 2. waits for one byte on the lifeline: `tairlock run` has made the new group the terminal's
//!    foreground group by then, so the command never starts in the background of a terminal it
//!    reads (end of file instead: `tairlock run` is gone, nothing is started);
//! 3. starts the command in the group it leads, then moves itself into `tairlock run`'s group:
//!    the command's group then holds the command and its descendants only, so "the group is
//!    gone" is observable, and a signal to it never reaches the supervisor;
//! 4. reads the lifeline on a thread of its own: end of file means `tairlock run` has exited or
//!    was killed (`kill -9`, the OOM killer), and the supervisor kills the whole group with
//!    SIGKILL at once;
//! 5. passes a terminal's stop on: when Ctrl-Z stops the command, it stops `tairlock run`'s
//!    group too (so the shell sees its job stopped and takes the terminal back), and when that
//!    job is continued it hands the terminal back to the command's group and continues it;
//! 6. reaps the command, then every orphaned descendant (on Linux it is their *subreaper*, so
//!    orphans are reparented to it rather than to an init process that may not reap them), and
//!    exits with the command's status once no process of the group is left.
//!
//! A pipe rather than a parent-death signal: `PR_SET_PDEATHSIG` fires when the *thread* that
//! forked the child exits (a tokio blocking-pool thread exits when idle), cannot be set on the
//! command without code running between fork and exec, and exists on Linux only. End of file on
//! a pipe is delivered whenever the last writer closes it, whatever the cause, on every Unix.

use std::os::fd::{OwnedFd, RawFd};
use std::time::Duration;

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, FdFlag, fcntl};
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, getpgrp, read, setpgid, tcgetpgrp, tcsetpgrp};

use crate::exit::Exit;

/// The command could not be started.
const EXIT_SPAWN: u8 = Exit::Spawn as u8;

/// The byte `tairlock run` writes on the lifeline once the command may start.
pub(crate) const GO: u8 = b'g';

/// How often the group is polled once the command itself has exited.
const POLL: Duration = Duration::from_millis(10);

/// Catch (and drop) the signals that would end or stop the supervisor: the handlers stay
/// installed for the life of the process; the returned runtime must be kept alive with it.
fn catch_signals() -> std::io::Result<(tokio::runtime::Runtime, Vec<tokio::signal::unix::Signal>)> {
    use tokio::signal::unix::{SignalKind, signal};

    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let streams = runtime.block_on(async {
        [
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
            Signal::SIGTSTP,
            Signal::SIGTTIN,
            Signal::SIGTTOU,
        ]
        .into_iter()
        .map(|sig| signal(SignalKind::from_raw(sig as i32)))
        .collect::<std::io::Result<Vec<_>>>()
    })?;
    Ok((runtime, streams))
}

/// Whether any process of `group` is left (zombies included: a member counts until reaped).
pub(crate) fn group_alive(group: Pid) -> bool {
    // EPERM: a member we may not signal (it changed its user) is still a member.
    !matches!(killpg(group, None), Err(Errno::ESRCH))
}

fn read_byte(fd: RawFd) -> Option<u8> {
    let mut byte = [0u8; 1];
    loop {
        match read(fd, &mut byte) {
            Ok(1) => return Some(byte[0]),
            Err(Errno::EINTR) => continue,
            Ok(_) | Err(_) => return None,
        }
    }
}

fn exit_code(status: WaitStatus) -> Option<u8> {
    match status {
        WaitStatus::Exited(_, code) => Some(code as u8),
        WaitStatus::Signaled(_, sig, _) => Some(128u8.wrapping_add(sig as i32 as u8)),
        _ => None,
    }
}

/// Reap every child that has exited, without blocking.
fn reap_orphans() {
    while let Ok(status) = waitpid(None, Some(WaitPidFlag::WNOHANG)) {
        if status == WaitStatus::StillAlive {
            break;
        }
    }
}

/// The command stopped. If the terminal stopped it (Ctrl-Z: its group has the foreground), stop
/// `tairlock run`'s group too (this process included), so that the shell whose job that is sees
/// it stopped and takes the terminal back. Once the job is continued (`fg`, `bg`), give the
/// command's group the terminal again if the job has it (`fg`), and continue the command.
fn job_stopped(terminal: &OwnedFd, group: Pid, home: Pid) {
    if tcgetpgrp(terminal) != Ok(group) {
        // Stopped by someone's SIGSTOP, not the terminal: theirs to continue.
        return;
    }
    let _ = killpg(home, Signal::SIGSTOP);
    // Continued.
    if tcgetpgrp(terminal) == Ok(home) {
        let _ = tcsetpgrp(terminal, group);
    }
    let _ = killpg(group, Signal::SIGCONT);
}

/// The supervisor's main: start `command` once the lifeline says so, kill its group when the
/// lifeline closes, and return the command's exit code once its group is gone.
///
/// `lifeline` is the inherited read end of the lifeline pipe; `home` is `tairlock run`'s
/// process group, which the supervisor joins once the command has started.
pub fn supervise(lifeline: RawFd, home: Pid, command: &[String]) -> u8 {
    let _caught = match catch_signals() {
        Ok(caught) => caught,
        Err(e) => {
            eprintln!("tairlock run: supervisor: cannot catch signals: {e}");
            return EXIT_SPAWN;
        }
    };
    // Before any other thread starts: the command inherits this thread's mask.
    if let Err(e) = SigSet::empty().thread_set_mask() {
        eprintln!("tairlock run: supervisor: cannot clear the signal mask: {e}");
        return EXIT_SPAWN;
    }
    // The command must not inherit the lifeline (it would not keep it open, but it has no use
    // for it either).
    if let Err(e) = fcntl(lifeline, FcntlArg::F_SETFD(FdFlag::FD_CLOEXEC)) {
        eprintln!("tairlock run: supervisor: bad lifeline {lifeline}: {e}");
        return EXIT_SPAWN;
    }
    #[cfg(target_os = "linux")]
    {
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            eprintln!("tairlock run: supervisor: cannot become a subreaper: {e}");
        }
        // Started as `/proc/self/exe`, it would show as `exe` in ps and top.
        let _ = nix::sys::prctl::set_name(c"tairlock-super");
    }
    if read_byte(lifeline) != Some(GO) {
        // `tairlock run` went away before the command started.
        return EXIT_SPAWN;
    }
    let Some((program, args)) = command.split_first() else {
        return EXIT_SPAWN;
    };
    let group = getpgrp();
    let child = match std::process::Command::new(program).args(args).spawn() {
        Ok(child) => child,
        Err(e) => {
            eprintln!("tairlock run: cannot start {program:?}: {e}");
            return EXIT_SPAWN;
        }
    };
    let pid = Pid::from_raw(child.id() as i32);
    // Reaped below with waitpid; the handle itself waits for nothing.
    drop(child);
    if let Err(e) = setpgid(Pid::from_raw(0), home) {
        // `tairlock run`'s group is gone: so is `tairlock run`.
        eprintln!("tairlock run: supervisor: cannot leave the command's group ({e}); killing it");
        let _ = killpg(group, Signal::SIGKILL);
        return EXIT_SPAWN;
    }
    std::thread::spawn(move || {
        let mut buf = [0u8; 16];
        loop {
            match read(lifeline, &mut buf) {
                Ok(0) => break,
                Ok(_) | Err(Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        // `tairlock run` is gone, and with it the lock's watchdog.
        let _ = killpg(group, Signal::SIGKILL);
    });
    let terminal = super::terminal::terminal();
    let code = loop {
        match waitpid(pid, Some(WaitPidFlag::WUNTRACED)) {
            Ok(WaitStatus::Stopped(..)) => {
                if let Some(terminal) = &terminal {
                    job_stopped(terminal, group, home);
                }
            }
            Ok(status) => {
                if let Some(code) = exit_code(status) {
                    break code;
                }
            }
            Err(Errno::EINTR) => continue,
            Err(e) => {
                eprintln!("tairlock run: supervisor: waiting for the command failed: {e}");
                break 1;
            }
        }
    };
    // The rest of the group (background jobs, children of an exited shell) still runs under the
    // lock: wait for it, reaping the orphans handed to us.
    loop {
        reap_orphans();
        if !group_alive(group) {
            break;
        }
        std::thread::sleep(POLL);
    }
    code
}
