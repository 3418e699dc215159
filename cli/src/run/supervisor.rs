//! The supervisor: a hidden mode of the `tairlock` binary (`tairlock __supervise`) that starts
//! the command and enforces the lease on everything it starts, with or without `tairlock run`.
//!
//! `tairlock run` starts it in a process group of its own (a signal to `tairlock run`'s group, or
//! to the command's, never reaches it), with its end of the *lifeline* (a socket pair) as
//! standard input. The supervisor:
//!
//! 1. blocks the termination and job-control signals for itself: it is not the one to stop,
//!    and a message it writes from the background of a terminal with `stty tostop` goes through
//!    instead of raising SIGTTOU again and again. A blocked signal leaves the disposition the
//!    command inherits untouched (an inherited `SIG_IGN`, as under `nohup`, stays), and the
//!    command starts with an empty mask;
//! 2. on Linux, becomes the *child subreaper*: a process of the command's tree that loses its
//!    parent comes to the supervisor, whatever group or session it moved to (see
//!    [`tree`](super::tree)); it reaps every child as it exits, all along;
//! 3. waits for the order to start, which carries the lease's deadline, and starts the command
//!    in a process group of its own (giving that group the terminal's foreground when
//!    `tairlock run` has it, alone);
//! 4. enforces the deadline itself: SIGTERM to everything of the command's at the deadline less
//!    `--grace` unless a renewal moved it, SIGKILL at the deadline. `tairlock run` sends every
//!    new deadline; if it is stopped, hangs or dies, none comes, and the supervisor acts anyway;
//! 5. end of file on the lifeline (`tairlock run` is gone, even by SIGKILL) means SIGKILL to
//!    everything of the command's at once;
//! 6. stops everything of the command's when `tairlock run` is stopped (it says so before it
//!    stops on SIGTSTP; on Linux a SIGSTOP is seen in `/proc` too), and continues it only when
//!    `tairlock run`, continued, has re-checked the lease; when the terminal stops the command
//!    (Ctrl-Z, or a background command reading it), it stops `tairlock run`'s group too, so that
//!    the shell sees the job stopped and nobody renews a lease for a command that waits;
//! 7. exits with the command's status once nothing of the command's is left (on Linux: no child
//!    left at all; elsewhere: the command reaped and its group empty).
//!
//! A socket rather than a parent-death signal: `PR_SET_PDEATHSIG` fires when the *thread* that
//! forked the child exits, covers one process, and exists on Linux only. End of file is
//! delivered whenever the last holder of the other end closes it, whatever the cause.

use std::ffi::OsString;
use std::os::fd::{AsFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::time::Duration;

use nix::errno::Errno;
use nix::sys::signal::{SigSet, Signal, killpg};
use nix::sys::wait::{WaitPidFlag, WaitStatus, waitpid};
use nix::unistd::{Pid, close, dup2, getpid, getppid};
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::lifeline::{Order, Report, read_order, send_report};
use super::terminal;
use super::tree::Tree;
use crate::exit::Exit;

/// The name of the hidden subcommand that runs [`exec`].
pub const EXEC: &str = "__exec";

/// This binary: on Linux through `/proc/self/exe`, so that one replaced while tairlock runs is
/// not a problem.
pub(crate) fn this_binary() -> std::path::PathBuf {
    #[cfg(target_os = "linux")]
    {
        "/proc/self/exe".into()
    }
    #[cfg(not(target_os = "linux"))]
    {
        std::env::current_exe().unwrap_or_else(|_| "tairlock".into())
    }
}

/// How often the supervisor looks at `tairlock run`'s state and at stragglers.
const POLL: Duration = Duration::from_millis(50);

/// How the supervisor was started (see [`SuperviseArgs`](crate::run_args::SuperviseArgs)).
#[derive(Debug)]
pub struct Supervise<'a> {
    /// The descriptor holding `tairlock run`'s standard input.
    pub stdin: RawFd,
    /// `tairlock run`'s process group.
    pub home: Pid,
    /// `--grace`.
    pub grace: Duration,
    /// Give the command's group the terminal's foreground.
    pub foreground: bool,
    /// The command and its arguments.
    pub command: &'a [OsString],
}

/// The hidden `tairlock __exec` mode, which the supervisor starts in the command's new process
/// group, and which becomes the command: it takes the terminal's foreground for its group if
/// `home` (`tairlock run`'s group) has it, so that the command never starts in the background
/// of a terminal it reads; clears the signal mask it inherited from the supervisor (signals
/// that came meanwhile are delivered now, as to the command); and executes the command, whose
/// dispositions are the ones `tairlock run` inherited. Returns only if that fails: 127 when
/// there is no such program, 126 when it cannot be executed, as a shell does.
pub fn exec(home: Option<Pid>, command: &[OsString]) -> u8 {
    let Some((program, args)) = command.split_first() else {
        return Exit::RunInternal.code();
    };
    if let (Some(home), Some(terminal)) = (home, terminal::terminal()) {
        terminal::hand(&terminal, home, nix::unistd::getpgrp());
    }
    let error = match SigSet::empty().thread_set_mask() {
        Ok(()) => std::process::Command::new(program).args(args).exec(),
        Err(e) => std::io::Error::from(e),
    };
    let code = match error.raw_os_error().map(Errno::from_raw) {
        Some(Errno::ENOENT | Errno::ENOTDIR) => Exit::Spawn,
        _ => Exit::NotExecutable,
    };
    // Blocked again: a message from the background must not raise SIGTTOU under `tostop`.
    let _ = blocked().thread_block();
    say!("cannot run {}: {error}", program.to_string_lossy());
    code.code()
}

/// The signals the supervisor keeps blocked for itself.
fn blocked() -> SigSet {
    let mut set = SigSet::empty();
    for signal in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGQUIT,
        Signal::SIGTSTP,
        Signal::SIGTTIN,
        Signal::SIGTTOU,
    ] {
        set.add(signal);
    }
    set
}

/// The supervisor's main: start the command when told, enforce the lease on everything it
/// starts, and return the command's exit code once nothing of it is left.
pub fn supervise(spec: &Supervise<'_>) -> u8 {
    let internal = Exit::RunInternal.code();
    // Before any other thread starts: they inherit the mask.
    if let Err(e) = blocked().thread_block() {
        say!("supervisor: cannot block signals: {e}");
        return internal;
    }
    // The lifeline came as standard input; the caller's standard input goes back to 0, for the
    // command. The copy is close-on-exec: the command does not inherit the lifeline.
    let lifeline = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => fd,
        Err(e) => {
            say!("supervisor: no lifeline: {e}");
            return internal;
        }
    };
    if let Err(e) = dup2(spec.stdin, 0) {
        say!("supervisor: cannot restore the standard input: {e}");
        return internal;
    }
    let _ = close(spec.stdin);
    #[cfg(target_os = "linux")]
    {
        if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
            say!("supervisor: cannot become a subreaper: {e}");
        }
        // Started as `/proc/self/exe`, it would show as `exe` in ps and top.
        let _ = nix::sys::prctl::set_name(c"tairlock-super");
    }
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            say!("supervisor: cannot start: {e}");
            return internal;
        }
    };
    runtime.block_on(async {
        match Supervisor::connect(spec, lifeline) {
            Ok(supervisor) => supervisor.run().await,
            Err(e) => {
                say!("supervisor: cannot read the lifeline: {e}");
                internal
            }
        }
    })
}

/// The supervisor's state.
struct Supervisor<'a> {
    spec: &'a Supervise<'a>,
    /// Orders from `tairlock run`; `None` once its end is closed.
    orders: mpsc::UnboundedReceiver<Option<Order>>,
    reports: UnixStream,
    /// `tairlock run` (watched in `/proc` on Linux).
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    parent: Pid,
    /// `tairlock run` is gone: its end of the lifeline closed.
    orphaned: bool,
    /// The lease's deadline, as last told.
    deadline: Instant,
    /// SIGTERM was sent (renewals overdue, or the lease lost).
    stopping: bool,
    /// When SIGKILL is due once stopping.
    kill_at: Option<Instant>,
    /// SIGKILL was sent: every process of the command's found from now on gets it.
    killing: bool,
    /// Everything of the command's was stopped for `tairlock run` (stopped itself).
    held: bool,
    /// The command's exit code, once reaped.
    code: Option<u8>,
    /// No child is left (after the command started).
    childless: bool,
}

impl<'a> Supervisor<'a> {
    fn connect(spec: &'a Supervise<'a>, lifeline: OwnedFd) -> std::io::Result<Supervisor<'a>> {
        let reports = UnixStream::from(lifeline);
        let mut reader = reports.try_clone()?;
        let (tx, orders) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("lifeline".into())
            .spawn(move || {
                loop {
                    let order = read_order(&mut reader);
                    let end = order.is_none();
                    if tx.send(order).is_err() || end {
                        break;
                    }
                }
            })?;
        Ok(Supervisor {
            spec,
            orders,
            reports,
            parent: getppid(),
            orphaned: false,
            deadline: Instant::now(),
            stopping: false,
            kill_at: None,
            killing: false,
            held: false,
            code: None,
            childless: false,
        })
    }

    fn report(&mut self, report: Report) {
        let _ = send_report(&mut self.reports, report);
    }

    async fn run(mut self) -> u8 {
        let deadline = match self.orders.recv().await {
            Some(Some(Order::Go(deadline))) => deadline.to_instant(),
            // `tairlock run` went away before the command started: nothing to do.
            _ => return Exit::RunInternal.code(),
        };
        if deadline <= Instant::now() {
            // The order sat unread until the lease was over (`tairlock run` sends it with at
            // least `--grace` left).
            say!("the lease ran out before the command could start; not started");
            return Exit::LeaseLost.code();
        }
        self.deadline = deadline;
        // Before the command exists, so that no SIGCHLD goes unseen.
        let mut children =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::child()) {
                Ok(children) => children,
                Err(e) => {
                    say!("supervisor: cannot watch for exiting children: {e}");
                    return Exit::RunInternal.code();
                }
            };
        // Through `tairlock __exec` (see [`exec`]), which becomes the command.
        let mut command = std::process::Command::new(this_binary());
        command.arg0("tairlock").arg(EXEC);
        if self.spec.foreground {
            command
                .arg("--foreground")
                .arg(self.spec.home.as_raw().to_string());
        }
        let pid = match command
            .arg("--")
            .args(self.spec.command)
            .process_group(0)
            .spawn()
        {
            Ok(child) => Pid::from_raw(child.id() as i32),
            Err(e) => {
                say!("supervisor: cannot start the command: {e}");
                self.report(Report::NotStarted(Exit::RunInternal.code()));
                return Exit::RunInternal.code();
            }
        };
        // Reaped below with waitpid; the handle itself waits for nothing.
        let mut tree = Tree::new(getpid(), pid);
        self.report(Report::Started(pid.as_raw()));
        let terminal = if self.spec.foreground {
            terminal::terminal()
        } else {
            None
        };
        loop {
            self.reap(&mut tree);
            if self.all_gone(&tree) {
                break;
            }
            let term_at = (!self.stopping).then(|| {
                self.deadline
                    .checked_sub(self.spec.grace)
                    .unwrap_or(self.deadline)
            });
            let kill_at = (!self.killing).then(|| self.kill_at.unwrap_or(self.deadline));
            tokio::select! {
                order = self.orders.recv(), if !self.orphaned => {
                    self.obey(order.flatten(), &tree, terminal.as_ref());
                }
                _ = children.recv() => {}
                () = sleep_until_some(term_at) => {
                    self.stop(&tree);
                    self.report(Report::Overdue);
                }
                () = sleep_until_some(kill_at) => self.kill(&mut tree),
                () = tokio::time::sleep(POLL) => self.look(&mut tree),
            }
        }
        if let Some(terminal) = &terminal {
            terminal::hand(terminal, pid, self.spec.home);
        }
        self.code.unwrap_or(1)
    }

    /// Act on an order; `None`: `tairlock run` is gone.
    fn obey(&mut self, order: Option<Order>, tree: &Tree, terminal: Option<&OwnedFd>) {
        match order {
            None => {
                self.orphaned = true;
                if !self.killing {
                    self.kill_now(tree);
                }
            }
            Some(Order::Go(_)) => {}
            Some(Order::Deadline(deadline)) => self.moved(deadline.to_instant()),
            Some(Order::Hold) => self.hold(tree),
            Some(Order::Continue(deadline)) => {
                self.moved(deadline.to_instant());
                if self.held && !self.stopping {
                    self.held = false;
                    if let Some(terminal) = terminal {
                        // `fg`: the shell gave `tairlock run`'s group the terminal.
                        terminal::hand(terminal, self.spec.home, tree.command());
                    }
                    tree.signal(Signal::SIGCONT);
                }
            }
            Some(Order::Lost) => self.stop(tree),
            Some(Order::Signal(signal)) => {
                if let Ok(signal) = Signal::try_from(signal) {
                    tree.signal(signal);
                }
            }
        }
    }

    /// A renewal moved the deadline. Once stopping, the stop goes on: SIGKILL stays due when
    /// it was.
    fn moved(&mut self, deadline: Instant) {
        self.deadline = deadline;
    }

    /// Stop everything of the command's while `tairlock run` is stopped.
    fn hold(&mut self, tree: &Tree) {
        if self.held || self.stopping {
            return;
        }
        self.held = true;
        tree.signal(Signal::SIGSTOP);
    }

    /// SIGTERM to everything of the command's; SIGKILL after `--grace`, at the deadline at
    /// the latest. A process held stopped is not continued: it ends by SIGKILL.
    fn stop(&mut self, tree: &Tree) {
        if self.stopping {
            return;
        }
        self.stopping = true;
        self.kill_at = Some(self.deadline.min(Instant::now() + self.spec.grace));
        tree.signal(Signal::SIGTERM);
    }

    fn kill(&mut self, tree: &mut Tree) {
        self.kill_now(tree);
        self.reap(tree);
        self.report(Report::Killed);
    }

    /// SIGKILL to everything of the command's, again until a pass finds nothing running (a
    /// process may fork while the tree is read; one killed cannot fork any more).
    fn kill_now(&mut self, tree: &Tree) {
        self.killing = true;
        self.stopping = true;
        for _ in 0..200 {
            if tree.signal(Signal::SIGKILL) == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The periodic look: reap, catch stragglers once killing, and see whether `tairlock run`
    /// was stopped (Linux: its state in `/proc`).
    fn look(&mut self, tree: &mut Tree) {
        self.reap(tree);
        if self.killing {
            tree.signal(Signal::SIGKILL);
        } else if self.parent_stopped() && !self.orphaned && !self.held {
            self.hold(tree);
        }
    }

    /// Whether `tairlock run` is stopped (SIGSTOP, a debugger): seen in `/proc` on Linux.
    fn parent_stopped(&self) -> bool {
        #[cfg(target_os = "linux")]
        {
            matches!(super::tree::stat(self.parent), Some(('T' | 't', _, _)))
        }
        #[cfg(not(target_os = "linux"))]
        {
            false
        }
    }

    /// Reap every child that has exited (the command, and orphans handed to the supervisor),
    /// and see the command's stops.
    fn reap(&mut self, tree: &mut Tree) {
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG | WaitPidFlag::WUNTRACED)) {
                Ok(WaitStatus::StillAlive) => break,
                Ok(WaitStatus::Exited(pid, code)) if pid == tree.command() => {
                    self.code = Some(code as u8);
                    tree.reaped();
                }
                Ok(WaitStatus::Signaled(pid, signal, _)) if pid == tree.command() => {
                    self.code = Some(128u8.wrapping_add(signal as i32 as u8));
                    tree.reaped();
                }
                Ok(WaitStatus::Stopped(pid, signal)) if pid == tree.command() => {
                    self.command_stopped(signal, tree);
                }
                Ok(_) | Err(Errno::EINTR) => {}
                Err(Errno::ECHILD) => {
                    self.childless = true;
                    break;
                }
                Err(e) => {
                    say!("supervisor: waiting for the command failed: {e}");
                    break;
                }
            }
        }
    }

    /// The command stopped. A job-control stop (the terminal's Ctrl-Z, or reading or writing
    /// it from the background) stops `tairlock run`'s group too, so that the shell whose job
    /// that is sees it stopped (and takes the terminal back), and the lease is not renewed for a
    /// command that waits: it is continued when `tairlock run` is. A SIGSTOP from someone else
    /// is theirs to continue.
    fn command_stopped(&mut self, signal: Signal, tree: &Tree) {
        if !matches!(signal, Signal::SIGTSTP | Signal::SIGTTIN | Signal::SIGTTOU)
            || self.orphaned
            || self.stopping
        {
            return;
        }
        self.hold(tree);
        let _ = killpg(self.spec.home, Signal::SIGSTOP);
    }

    fn all_gone(&self, tree: &Tree) -> bool {
        #[cfg(target_os = "linux")]
        {
            let _ = tree;
            self.childless
        }
        #[cfg(not(target_os = "linux"))]
        {
            self.childless && !tree.anything_left()
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
