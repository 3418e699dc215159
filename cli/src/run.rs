//! `tairlock run KEY -- CMD ARGS…`: run a command while holding a lock, like `flock(1)`.
//!
//! The lock is held with the watchdog on (renewed at a third of `--ttl`). It is one of the kinds
//! in [`kinds`]: the expire lock (plain, or `--fair`), a reader/writer lock's read or write side
//! (`--read`, `--write`), a semaphore's permit (`--permits`), a token lock in the format of
//! redis-py, node redlock and the like (`--token`, a [`tairlock::TokenLock`] on KEY exactly as
//! named), or a legacy `SETNX`/`GETSET` key ([`legacy`], `--legacy`); the supervision below is
//! the same for all of them. The command gets `TAIRLOCK_KEY` (the key the hold lives in),
//! `TAIRLOCK_NAME` and, when the kind issues one, `TAIRLOCK_FENCE` (the fencing token: pass it
//! along with every write, so a resource can reject a holder that was paused past its lease;
//! readers and the `getset` legacy kind get none, and a token lock's orders only the holders
//! that took it with this project's clients, since the other libraries do not fence).
//!
//! # The promise
//!
//! **No process started for the command runs after the lease's local deadline.** The enforcer is
//! not tairlock but a small supervisor (the same binary in a hidden mode: see [`supervise`]) in a
//! process group of its own, which starts the command and knows the deadline: tairlock sends it
//! every new one over the *lifeline*, a socket only the two of them hold.
//!
//! - **Early stop.** Unless a renewal moves the deadline, the supervisor sends SIGTERM to
//!   everything of the command's at the deadline less `--grace`, and SIGKILL at the deadline,
//!   whether tairlock is alive, stopped or hung. `--grace` must therefore fit inside `--ttl` with
//!   room for a renewal to land: at most [half of it](max_grace), since the watchdog renews at a
//!   third.
//! - **Lease lost** (a renewal found it gone or taken): SIGTERM now, SIGKILL after `--grace`.
//! - **tairlock dies** (even by SIGKILL, to it or its whole process group, or the OOM killer):
//!   end of file on the lifeline, and SIGKILL to everything of the command's at once.
//! - **tairlock stopped** (SIGTSTP, Ctrl-Z while it shares the terminal's foreground, SIGSTOP):
//!   the command's processes are stopped too (on SIGTSTP tairlock says so before it stops; on
//!   Linux the supervisor also sees a SIGSTOP), and at the latest the deadline stops them. When
//!   tairlock is continued it renews (or learns the lease is gone) before the command is
//!   continued; a lease lost meanwhile ends in exit 76 with the command never continued.
//! - **Everything the command starts is the command's.** On Linux the supervisor is the child
//!   subreaper of the command's tree: a stop reaches every descendant, whatever process group or
//!   session it moved to (`setsid`, a shell's jobs, a daemonizing tool), and the lock is held
//!   while any of them lives (the `flock(1)` rule). Orphans are reaped as they exit. Elsewhere,
//!   the command's process group is what is stopped and waited for: a descendant that leaves it
//!   is out of reach.
//! - SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to tairlock are passed on to everything of the
//!   command's; one inherited as ignored (`nohup`, a shell's background job) stays ignored, for
//!   tairlock and the command alike (read from `/proc` on Linux; elsewhere they are caught).
//! - **Terminals.** If tairlock has a terminal's foreground, alone in its group, the command's
//!   group gets it while it runs (an interactive command reads the terminal; Ctrl-C reaches it
//!   once, since tairlock is not in the foreground group), and gets it back at the end. Ctrl-Z
//!   stops the command and tairlock's job with it; `fg` and `bg` continue both, once tairlock
//!   has renewed. A command in the background of the terminal that reads it (or writes it under
//!   `stty tostop`) stops tairlock's job too: the shell shows it stopped, and the lease is not
//!   renewed for a command that waits. In a pipeline (`tairlock run … | less`) the foreground
//!   stays with the pipeline's group, so that `less` keeps reading the terminal.
//!
//! Platforms: POSIX process groups, signals and sockets; the subreaper and the reading of
//! processes from `/proc` are Linux's. Windows is not supported.
//!
//! | exit code | meaning |
//! |---|---|
//! | the command's | it ran and exited (128 + N if a signal N ended it) |
//! | [`EXIT_NOT_ACQUIRED`] (75) | the lock was not acquired within `--wait` |
//! | [`EXIT_LEASE_LOST`] (76) | the lease was lost while the command ran (it was stopped, or the release found the lease gone or someone else holding it), or renewals failed and it was stopped before the lease ran out |
//! | [`EXIT_STORE`] (69) | the store could not be reached or refused the lock (e.g. the key holds other data) |
//! | [`EXIT_INTERNAL`] (71) | tairlock could not set up the supervision; the command did not run |
//! | [`EXIT_NOT_EXECUTABLE`] (126) | the command was found but cannot be executed |
//! | [`EXIT_SPAWN`] (127) | the command was not found |

use std::ffi::OsString;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::pin::Pin;
use std::process::{ExitStatus, Stdio};
use std::time::Duration;

use nix::sys::signal::{Signal, killpg, raise};
use nix::unistd::{Pid, getpgrp};
use tokio::process::{Child, Command};
use tokio::signal::unix::{Signal as SignalStream, SignalKind, signal};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::logging::Chain;

/// `eprintln!` that cannot panic: a message to a closed or broken standard error is lost, and
/// tairlock goes on (its exit code still tells what happened).
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), "tairlock run: {}", format_args!($($arg)*));
    }};
}

pub mod job;
pub mod kinds;
pub mod legacy;
mod lifeline;
mod supervisor;
mod terminal;
mod tree;

use self::kinds::{Hold, Locker, Released};
use self::lifeline::{Monotonic, Order, Report, read_report, send_order};
use self::supervisor::this_binary;
pub use self::supervisor::{EXEC, Supervise, exec, supervise};
pub use self::terminal::block_background_stops;
use crate::exit::Exit;

/// The lock was not acquired within `--wait` ([`Exit::NotAcquired`]).
pub const EXIT_NOT_ACQUIRED: u8 = Exit::NotAcquired as u8;
/// The lease was lost while the command ran, or renewals failed and the command was stopped
/// before the lease ran out ([`Exit::LeaseLost`]).
pub const EXIT_LEASE_LOST: u8 = Exit::LeaseLost as u8;
/// The store failed ([`Exit::RunStore`]).
pub const EXIT_STORE: u8 = Exit::RunStore as u8;
/// tairlock could not set up the supervision ([`Exit::RunInternal`]).
pub const EXIT_INTERNAL: u8 = Exit::RunInternal as u8;
/// The command was found but cannot be executed ([`Exit::NotExecutable`]).
pub const EXIT_NOT_EXECUTABLE: u8 = Exit::NotExecutable as u8;
/// The command was not found ([`Exit::Spawn`]).
pub const EXIT_SPAWN: u8 = Exit::Spawn as u8;

/// The name of the hidden subcommand that runs [`supervise`].
pub const SUPERVISE: &str = "__supervise";

/// How long tairlock waits for the command's group to end after SIGKILL when the supervisor
/// itself was killed.
const KILL_WAIT: Duration = Duration::from_secs(1);

/// How often tairlock looks for a new deadline to send (more often with a short `--grace`,
/// see [`poll_for`]).
const POLL: Duration = Duration::from_millis(25);

/// How often to look for a new deadline with `grace`: a renewal that lands just before the
/// deadline less `grace` reaches the supervisor within a quarter of it.
fn poll_for(grace: Duration) -> Duration {
    POLL.min(grace / 4).max(Duration::from_millis(1))
}

/// The default `--grace`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(5);

/// The longest `--grace` a `--ttl` allows: half of it. The watchdog renews at a third of the
/// lease, so the lease in effect always has two thirds of `ttl` left when a renewal is due; with
/// the early stop at (deadline − grace), half of `ttl` leaves a sixth of it for the renewal to
/// land, or be retried, before a healthy run is stopped.
pub fn max_grace(ttl: Duration) -> Duration {
    ttl / 2
}

/// The `--grace` to use: the given one if it fits inside `ttl` (see [`max_grace`]); without
/// one, [`DEFAULT_GRACE`] capped at [`max_grace`].
///
/// # Errors
///
/// A message for the user when the given grace does not fit.
pub fn grace_for(ttl: Duration, grace: Option<Duration>) -> Result<Duration, String> {
    let max = max_grace(ttl);
    match grace {
        None => Ok(DEFAULT_GRACE.min(max)),
        Some(grace) if grace <= max => Ok(grace),
        Some(grace) => Err(format!(
            "--grace {grace:?} does not fit inside --ttl {ttl:?}: the command is stopped at the \
             lease's deadline less --grace when renewals fail, and the watchdog renews at a \
             third of --ttl, so --grace can be at most half of --ttl ({max:?})"
        )),
    }
}

/// What `run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The lock name.
    pub name: String,
    /// How long to wait for the lock (`None`: forever).
    pub wait: Option<Duration>,
    /// Grace between SIGTERM and SIGKILL when the command is stopped (see [`grace_for`]).
    pub grace: Duration,
    /// The command and its arguments.
    pub command: Vec<OsString>,
}

fn code_of(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    }
}

/// The supervisor, as `tairlock run` sees it: the process, and both directions of the lifeline.
struct Supervisor {
    /// It exits once nothing of the command's is left, with the command's status.
    child: Child,
    /// Orders to it. Closing this end (by exiting, however) kills everything of the command's.
    lifeline: UnixStream,
    /// What it reports.
    reports: mpsc::UnboundedReceiver<Report>,
}

impl Supervisor {
    /// Start the supervisor in a process group of its own, with its end of the lifeline as its
    /// standard input and ours under another descriptor (given on its command line).
    fn start(spec: &SpecEnv<'_>, grace: Duration, foreground: bool) -> std::io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        // Inheritable (no close-on-exec), so that the supervisor gets it; nothing else is
        // started meanwhile, and it is closed here right after.
        let stdin = nix::unistd::dup(0)?;
        let mut command = supervisor_command();
        command
            .arg(SUPERVISE)
            .arg(stdin.to_string())
            .arg(getpgrp().as_raw().to_string())
            .arg(grace.as_nanos().to_string());
        if foreground {
            command.arg("--foreground");
        }
        command
            .arg("--")
            .args(spec.command)
            .env("TAIRLOCK_KEY", spec.key)
            .env("TAIRLOCK_NAME", spec.name)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .process_group(0);
        match spec.fence {
            Some(fence) => command.env("TAIRLOCK_FENCE", fence.to_string()),
            None => command.env_remove("TAIRLOCK_FENCE"),
        };
        let spawned = command.spawn();
        let _ = nix::unistd::close(stdin);
        let child = spawned?;
        let mut reader = ours.try_clone()?;
        let (tx, reports) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name("lifeline".into())
            .spawn(move || {
                while let Some(report) = read_report(&mut reader) {
                    if tx.send(report).is_err() {
                        break;
                    }
                }
            })?;
        Ok(Supervisor {
            child,
            lifeline: ours,
            reports,
        })
    }

    /// Send an order. If the supervisor is gone, its exit says so.
    fn order(&mut self, order: Order) {
        let _ = send_order(&mut self.lifeline, order);
    }
}

/// This binary, to be started as the supervisor.
fn supervisor_command() -> Command {
    let mut command = Command::new(this_binary());
    command.arg0("tairlock");
    command
}

/// What the command's environment says.
struct SpecEnv<'a> {
    command: &'a [OsString],
    key: &'a str,
    name: &'a str,
    fence: Option<u64>,
}

/// Whether `signal` was ignored when tairlock started (`nohup`, a shell's background job): it
/// stays ignored, and the command inherits that. Read from `/proc` on Linux; elsewhere unknown,
/// and taken as not.
fn inherited_ignore(signal: Signal) -> bool {
    #[cfg(target_os = "linux")]
    {
        std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|status| {
                let mask = status.lines().find_map(|l| l.strip_prefix("SigIgn:"))?;
                u64::from_str_radix(mask.trim(), 16).ok()
            })
            .is_some_and(|mask| mask & (1u64 << (signal as i32 - 1)) != 0)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = signal;
        false
    }
}

/// The signals tairlock catches while the command runs.
struct Signals {
    /// Passed on to everything of the command's (absent: inherited as ignored).
    forwarded: Forwarded,
    /// SIGTSTP: stop the command, then tairlock.
    stop: Option<SignalStream>,
    /// SIGCONT: re-check the lease, then continue the command.
    cont: SignalStream,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        let catch = |signal: Signal| -> std::io::Result<Option<SignalStream>> {
            if inherited_ignore(signal) {
                return Ok(None);
            }
            signal_stream(signal).map(Some)
        };
        let mut forwarded = Vec::new();
        for sig in [
            Signal::SIGTERM,
            Signal::SIGINT,
            Signal::SIGHUP,
            Signal::SIGQUIT,
        ] {
            if let Some(stream) = catch(sig)? {
                forwarded.push((sig, stream));
            }
        }
        Ok(Signals {
            forwarded: Forwarded(forwarded),
            stop: catch(Signal::SIGTSTP)?,
            cont: signal_stream(Signal::SIGCONT)?,
        })
    }
}

/// The signals passed on to the command.
struct Forwarded(Vec<(Signal, SignalStream)>);

impl Forwarded {
    /// The next signal to pass on. Cancel safe.
    async fn next(&mut self) -> Signal {
        std::future::poll_fn(|cx| {
            for (sig, stream) in &mut self.0 {
                if stream.poll_recv(cx).is_ready() {
                    return std::task::Poll::Ready(*sig);
                }
            }
            std::task::Poll::Pending
        })
        .await
    }

    /// A signal to pass on that has already come, if any.
    fn pending(&mut self) -> Option<Signal> {
        let waker = std::task::Waker::noop();
        let mut cx = std::task::Context::from_waker(waker);
        self.0
            .iter_mut()
            .find_map(|(sig, stream)| stream.poll_recv(&mut cx).is_ready().then_some(*sig))
    }
}

fn signal_stream(signal: Signal) -> std::io::Result<SignalStream> {
    self::signal(SignalKind::from_raw(signal as i32))
}

/// The lease's deadline if it leaves at least `grace` to run in; else one renewal is asked for
/// (for the kinds that can be asked), and the deadline it brought if that one does.
async fn live_deadline<H: Hold>(guard: &H, grace: Duration) -> Option<Instant> {
    let fits = || {
        guard
            .deadline()
            .filter(|d| !guard.is_lost() && *d >= Instant::now() + grace)
    };
    if let Some(deadline) = fits() {
        return Some(deadline);
    }
    guard.renew().await;
    fits()
}

/// tairlock was continued: renew (or learn the lease is gone) before the command is. Resolves
/// with a deadline at least `grace` away, or `None` once the lease is lost; meanwhile the
/// supervisor holds the command stopped, and enforces the last deadline it was told.
async fn recheck<H: Hold>(guard: &H, grace: Duration) -> Option<Instant> {
    guard.renew().await;
    loop {
        if guard.is_lost() {
            return None;
        }
        if let Some(deadline) = guard.deadline().filter(|d| *d >= Instant::now() + grace) {
            return Some(deadline);
        }
        tokio::select! {
            () = guard.lost() => return None,
            () = tokio::time::sleep(POLL) => {}
        }
    }
}

/// Why the command is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// The lease was found lost.
    Lost,
    /// No renewal came in time: the supervisor stopped it at the deadline less `--grace`.
    Overdue,
}

/// When the last renewal landed, for what tairlock says when renewals stall.
#[derive(Debug, Clone, Copy)]
struct Renewals {
    /// The deadline the supervisor was last told.
    sent: Instant,
    /// When it was seen to move (or the lock was acquired).
    landed: Instant,
    /// tairlock was stopped since then.
    stopped: bool,
}

impl Renewals {
    /// A renewal (or the acquisition) brought `deadline`, now.
    fn landed(deadline: Instant) -> Renewals {
        Renewals {
            sent: deadline,
            landed: Instant::now(),
            stopped: false,
        }
    }

    /// For how long no renewal has been answered, to the millisecond.
    fn unanswered_for(&self) -> Duration {
        Duration::from_millis(self.landed.elapsed().as_millis() as u64)
    }

    /// Why the lease could not be renewed, in an operator's words (`had`: told afterwards).
    fn unanswered(&self, since: Duration, had: bool) -> String {
        let has = if had { "had" } else { "has" };
        if self.stopped {
            format!("tairlock itself was stopped, and no renewal {has} been answered for {since:?}")
        } else {
            format!("no renewal {has} been answered for {since:?}")
        }
    }
}

/// What `tairlock run` has seen of the command's supervision.
#[derive(Debug)]
struct Seen {
    /// Why the command is being stopped, if it is.
    stop: Option<Stop>,
    /// The command's pid (and process group), once started.
    command: Option<Pid>,
    /// The command could not be started (the supervisor exits 126 or 127).
    not_started: bool,
    /// For how long no renewal had been answered when the supervisor stopped the command.
    overdue: Duration,
    renewals: Renewals,
    fence: Option<u64>,
}

impl Seen {
    fn report(&mut self, report: Report, spec: &RunSpec) {
        match report {
            Report::Started(pid) => {
                self.command = Some(Pid::from_raw(pid));
                let (lock, fence) = (&spec.name, self.fence);
                tracing::debug!(%lock, fence, group = pid, "command started");
            }
            Report::NotStarted(_) => self.not_started = true,
            Report::Overdue => {
                if self.stop.is_none() {
                    self.stop = Some(Stop::Overdue);
                    self.overdue = self.renewals.unanswered_for();
                    say!(
                        "the lease on {} could not be renewed: {}; stopping the command (SIGTERM \
                         to everything it started) --grace ({:?}) before the lease's deadline, \
                         so that it ends inside the lease",
                        spec.name,
                        self.renewals.unanswered(self.overdue, false),
                        spec.grace
                    );
                }
            }
            Report::Killed => {
                say!("the command did not end in time; SIGKILL to everything it started");
            }
        }
    }
}

/// Run the command under the lock and return tairlock's exit code (see the [module docs](self)).
///
/// # Cancel safety
///
/// Dropping it while the command runs drops the lifeline: the supervisor kills everything of
/// the command's with SIGKILL, and the hold's drop releases the lock in the background (a
/// legacy lock, which has no owner-checked background release, runs out at its timestamp).
pub async fn run<L: Locker>(locks: &L, spec: &RunSpec) -> u8 {
    let guard = match locks.acquire(&spec.name, spec.wait).await {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            match spec.wait {
                Some(wait) if wait.is_zero() => say!(
                    "{} is held by someone else (one attempt: --wait 0)",
                    spec.name
                ),
                wait => say!(
                    "{} is held by someone else; gave up after {:?}",
                    spec.name,
                    wait.unwrap_or_default()
                ),
            }
            return EXIT_NOT_ACQUIRED;
        }
        Err(e) => {
            say!("cannot lock {}: {}", spec.name, Chain(&e));
            return EXIT_STORE;
        }
    };
    let key = guard.key().to_owned();
    // Before the command starts: a signal that comes later is passed on to it, one that came
    // before aborts the start (one that comes before this kills tairlock, by its default
    // action, and nothing starts).
    let mut signals = match Signals::install() {
        Ok(signals) => signals,
        Err(e) => {
            say!("cannot install signal handlers: {e}");
            let _ = guard.release().await;
            return EXIT_INTERNAL;
        }
    };
    let Some(deadline) = live_deadline(&guard, spec.grace).await else {
        say!(
            "the lease on {} ends within --grace ({:?}) and could not be renewed; {} was not \
             started",
            spec.name,
            spec.grace,
            spec.command[0].to_string_lossy()
        );
        let _ = guard.release().await;
        return EXIT_LEASE_LOST;
    };
    if let Some(signal) = signals.forwarded.pending() {
        say!("{signal} came before the command started; not started");
        let _ = guard.release().await;
        return 128u8.wrapping_add(signal as i32 as u8);
    }
    let env = SpecEnv {
        command: &spec.command,
        key: &key,
        name: &spec.name,
        fence: guard.fence(),
    };
    let foreground = terminal::foreground_is_ours();
    let mut supervisor = match Supervisor::start(&env, spec.grace, foreground) {
        Ok(supervisor) => supervisor,
        Err(e) => {
            say!(
                "cannot start the supervisor of {}: {e}",
                spec.command[0].to_string_lossy()
            );
            let _ = guard.release().await;
            return EXIT_INTERNAL;
        }
    };
    supervisor.order(Order::Go(Monotonic::from_instant(deadline)));

    let poll = poll_for(spec.grace);
    let mut seen = Seen {
        stop: None,
        command: None,
        not_started: false,
        overdue: Duration::ZERO,
        renewals: Renewals::landed(deadline),
        fence: env.fence,
    };
    let status = {
        let mut resume: Option<Pin<Box<dyn Future<Output = Option<Instant>> + Send + '_>>> = None;
        loop {
            tokio::select! {
                status = supervisor.child.wait() => break status,
                Some(report) = supervisor.reports.recv() => seen.report(report, spec),
                () = guard.lost(), if seen.stop.is_none() => {
                    say!(
                        "the lease on {} was lost; stopping the command (SIGTERM to everything \
                         it started)",
                        spec.name
                    );
                    seen.stop = Some(Stop::Lost);
                    supervisor.order(Order::Lost);
                }
                () = tokio::time::sleep(poll) => {
                    if let Some(deadline) = guard.deadline()
                        && deadline != seen.renewals.sent
                    {
                        seen.renewals = Renewals::landed(deadline);
                        supervisor.order(Order::Deadline(Monotonic::from_instant(deadline)));
                    }
                }
                signal = signals.forwarded.next() => {
                    supervisor.order(Order::Signal(signal as i32));
                }
                Some(()) = recv_some(&mut signals.stop) => {
                    // The command first: the supervisor stops it, then tairlock stops.
                    supervisor.order(Order::Hold);
                    let _ = raise(Signal::SIGSTOP);
                }
                Some(()) = signals.cont.recv() => {
                    seen.renewals.stopped = true;
                    resume = Some(Box::pin(recheck(&guard, spec.grace)));
                }
                live = poll_some(&mut resume) => {
                    resume = None;
                    if let Some(deadline) = live {
                        seen.renewals = Renewals::landed(deadline);
                        supervisor.order(Order::Continue(Monotonic::from_instant(deadline)));
                    }
                }
            }
        }
    };
    let code = match status {
        Ok(status) => {
            if std::os::unix::process::ExitStatusExt::signal(&status).is_some() {
                // The supervisor itself was killed: nothing enforces the lease on the command
                // any more but this, on its process group.
                supervisor_killed(seen.command).await;
            }
            code_of(status)
        }
        Err(e) => {
            say!("waiting for the supervisor failed: {e}");
            1
        }
    };
    if foreground && let (Some(command), Some(terminal)) = (seen.command, terminal::terminal()) {
        terminal::hand(&terminal, command, getpgrp());
    }
    // What it reported before it exited (the reports and its exit may be seen in any order).
    while let Ok(Some(report)) = tokio::time::timeout(KILL_WAIT, supervisor.reports.recv()).await {
        seen.report(report, spec);
    }
    // Nothing of the command's is left: the lifeline has nothing left to guard.
    drop(supervisor);
    tracing::debug!(lock = %spec.name, code, "command exited");

    if seen.not_started {
        let _ = guard.release().await;
        return code;
    }
    if seen.stop == Some(Stop::Overdue) {
        let left = guard
            .deadline()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
            .unwrap_or_default();
        let left = Duration::from_millis(left.as_millis() as u64);
        let ended = if left.is_zero() {
            "it was killed at the lease's deadline".to_owned()
        } else {
            format!("it ended {left:?} before the lease's deadline")
        };
        say!(
            "the command was stopped early because {}; {ended}, so no other holder overlapped \
             it. If the store is only slow to answer, retry with a longer --ttl (renewals get \
             more time to land) or a shorter --grace (the command is stopped later)",
            seen.renewals.unanswered(seen.overdue, true)
        );
    }
    if seen.stop.is_some() || guard.is_lost() {
        if seen.stop.is_none() {
            say!("the lease on {} was lost while the command ran", spec.name);
        }
        let _ = guard.release().await;
        return EXIT_LEASE_LOST;
    }
    match guard.release().await {
        Released::Released => code,
        Released::Gone(what) => {
            say!(
                "the lease on {} was lost while the command ran: the release found the lock \
                 {what} (the command exited with {code})",
                spec.name
            );
            EXIT_LEASE_LOST
        }
        Released::Failed(e) => {
            say!(
                "releasing {} failed ({e}); its lease will expire",
                spec.name
            );
            code
        }
    }
}

/// The supervisor was killed (someone sent it SIGKILL): SIGKILL to the command's process group
/// if it is still there (its members keep its id from being reused), and a word about it.
async fn supervisor_killed(command: Option<Pid>) {
    let Some(group) = command.filter(|group| tree::group_alive(*group)) else {
        return;
    };
    say!("the supervisor was killed; SIGKILL to the command's process group");
    let _ = killpg(group, Signal::SIGKILL);
    let until = Instant::now() + KILL_WAIT;
    while tree::group_alive(group) && Instant::now() < until {
        tokio::time::sleep(POLL).await;
    }
}

async fn recv_some(stream: &mut Option<SignalStream>) -> Option<()> {
    match stream {
        Some(stream) => stream.recv().await,
        None => std::future::pending().await,
    }
}

async fn poll_some<F: Future + Unpin>(future: &mut Option<F>) -> F::Output {
    match future {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_grace_fits_inside_half_of_the_ttl() {
        let ms = Duration::from_millis;
        assert_eq!(grace_for(ms(1000), Some(ms(500))), Ok(ms(500)));
        assert!(grace_for(ms(1000), Some(ms(501))).is_err());
        assert!(grace_for(ms(3000), Some(ms(3000))).is_err());
        // Without --grace: 5 s, capped at half of the ttl.
        assert_eq!(grace_for(Duration::from_secs(30), None), Ok(DEFAULT_GRACE));
        assert_eq!(grace_for(ms(1000), None), Ok(ms(500)));
        let message = grace_for(ms(1000), Some(ms(600))).unwrap_err();
        assert!(
            message.contains("at most half of --ttl (500ms)"),
            "{message}"
        );
    }
}
