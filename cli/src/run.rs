//! `tairlock run KEY -- CMD ARGS…`: run a command while holding a lock, like `flock(1)`.
//!
//! The lock is held with the watchdog on (renewed at a third of `--ttl`). It is one of the kinds
//! in [`kinds`]: the expire lock (plain, or `--fair`), a reader/writer lock's read or write side
//! (`--read`, `--write`), or a legacy `SETNX`/`GETSET` key ([`legacy`], `--legacy`); the
//! supervision below is the same for all of them. The command gets `TAIRLOCK_KEY` (the key the
//! hold lives in), `TAIRLOCK_NAME` and, when the kind issues one, `TAIRLOCK_FENCE` (the fencing
//! token: pass it along with every write, so a resource can reject a holder that was paused past
//! its lease; readers and the `getset` legacy kind get none).
//!
//! # The command's process group
//!
//! The command runs in a process group of its own, and tairlock treats the group as the command:
//!
//! - When the lease is lost, the whole group gets SIGTERM, then SIGKILL after `--grace`; a shell's
//!   background jobs and a build tool's workers stop with it.
//! - **Early stop.** When renewals keep failing, the group gets SIGTERM at the lease's local
//!   deadline less `--grace` (and SIGKILL at the deadline), so that the command and its grace
//!   period end inside the lease, before another holder can start. `--grace` must therefore fit
//!   inside `--ttl` with room for a renewal to land: at most [half of it](max_grace), since the
//!   watchdog renews at a third.
//! - SIGTERM, SIGINT and SIGHUP sent to tairlock are passed on to the group.
//! - tairlock releases the lock only once no process of the group is left (or, when stopping
//!   it, once SIGKILL has ended it): background jobs that outlive the command keep the lock
//!   held, as they keep an `flock(1)` lock held.
//! - If tairlock has a terminal's foreground, the command's group gets it while it runs (so an
//!   interactive command reads the terminal and Ctrl-C reaches it, once: tairlock itself is not
//!   in the foreground group), and tairlock takes it back at the end. Ctrl-Z stops tairlock's
//!   job along with the command, and continuing the job continues both. Not in a pipeline
//!   (`tairlock run … | less`): the foreground stays with the pipeline's group, so that `less`
//!   keeps reading the terminal; the command runs in the background of the terminal then, and
//!   Ctrl-C reaches it through tairlock.
//! - **Lifeline.** The command is started by a small supervisor (the same binary, in a hidden
//!   mode: see [`supervise`]) that holds one end of a pipe whose other end only tairlock holds.
//!   When tairlock dies, even by SIGKILL (`kill -9`, the OOM killer), the pipe reports end of
//!   file and the supervisor kills the group with SIGKILL at once: a command never runs on after
//!   its lock's watchdog is gone.
//!
//! Platforms: the design needs only POSIX process groups and pipes. On Linux the supervisor is
//! started through `/proc/self/exe` (so a binary replaced while tairlock runs is not a problem)
//! and is the subreaper of the command's orphans; elsewhere it is started through
//! [`std::env::current_exe`], and orphans are reaped by the system's init process, which every
//! other Unix does promptly. Windows is not supported.
//!
//! | exit code | meaning |
//! |---|---|
//! | the command's | it ran and exited (128 + N if a signal N ended it) |
//! | [`EXIT_NOT_ACQUIRED`] (75) | the lock was not acquired within `--wait` |
//! | [`EXIT_LEASE_LOST`] (76) | the lease was lost while the command ran (it was stopped, or the release found the lease gone or someone else holding it), or renewals failed and it was stopped before the lease ran out |
//! | [`EXIT_STORE`] (69) | the store could not be reached or refused the lock (e.g. the key holds other data) |
//! | [`EXIT_SPAWN`] (127) | the command could not be started |

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::process::ExitStatus;
use std::time::Duration;

use nix::fcntl::{FcntlArg, FdFlag, OFlag, fcntl};
use nix::sys::signal::{Signal, killpg};
use nix::unistd::{Pid, getpgrp, pipe2};
use tokio::process::{Child, Command};
use tokio::signal::unix::{Signal as SignalStream, SignalKind, signal};
use tokio::time::Instant;

use crate::logging::Chain;

pub mod job;
pub mod kinds;
pub mod legacy;
mod supervisor;
mod terminal;

use self::kinds::{Hold, Locker, Released};
pub use self::supervisor::supervise;
use self::supervisor::{GO, group_alive};
use self::terminal::Foreground;
pub use self::terminal::block_background_stops;
use crate::exit::Exit;

/// The lock was not acquired within `--wait` ([`Exit::NotAcquired`]).
pub const EXIT_NOT_ACQUIRED: u8 = Exit::NotAcquired as u8;
/// The lease was lost while the command ran, or renewals failed and the command was stopped
/// before the lease ran out ([`Exit::LeaseLost`]).
pub const EXIT_LEASE_LOST: u8 = Exit::LeaseLost as u8;
/// The store failed ([`Exit::RunStore`]).
pub const EXIT_STORE: u8 = Exit::RunStore as u8;
/// The command could not be started ([`Exit::Spawn`]).
pub const EXIT_SPAWN: u8 = Exit::Spawn as u8;

/// The name of the hidden subcommand that runs [`supervise`].
pub const SUPERVISE: &str = "__supervise";

/// How long tairlock waits for the group to end after SIGKILL before it releases anyway.
const KILL_WAIT: Duration = Duration::from_secs(1);

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
    pub command: Vec<String>,
}

fn code_of(status: ExitStatus) -> u8 {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) => code as u8,
        (None, Some(sig)) => 128u8.wrapping_add(sig as u8),
        _ => 1,
    }
}

/// The command's process group, as started under a supervisor.
struct Group {
    /// The supervisor: it exits once the group is gone.
    supervisor: Child,
    /// The group's id (the supervisor's pid: it led the group before handing it over).
    id: Pid,
    /// The write end of the lifeline: closing it (by exiting, however) kills the group.
    lifeline: File,
}

impl Group {
    /// Start the supervisor, give its group the terminal if tairlock has it, then let it start
    /// the command.
    fn start(spec: &SpecEnv<'_>) -> std::io::Result<(Group, Option<Foreground>)> {
        // Both ends close on exec; the supervisor's end is made inheritable just for its spawn
        // (nothing else is spawned meanwhile).
        let (read, write) = pipe2(OFlag::O_CLOEXEC)?;
        fcntl(read.as_raw_fd(), FcntlArg::F_SETFD(FdFlag::empty()))?;
        let mut command = supervisor_command();
        command
            .arg(SUPERVISE)
            .arg(read.as_raw_fd().to_string())
            .arg(getpgrp().as_raw().to_string())
            .arg("--")
            .args(spec.command)
            .env("TAIRLOCK_KEY", spec.key)
            .env("TAIRLOCK_NAME", spec.name)
            .process_group(0);
        match spec.fence {
            Some(fence) => command.env("TAIRLOCK_FENCE", fence.to_string()),
            None => command.env_remove("TAIRLOCK_FENCE"),
        };
        let supervisor = command.spawn()?;
        drop(read);
        let id = supervisor
            .id()
            .map(|pid| Pid::from_raw(pid as i32))
            .ok_or_else(|| std::io::Error::other("the supervisor exited at once"))?;
        let mut group = Group {
            supervisor,
            id,
            lifeline: File::from(write),
        };
        let foreground = Foreground::hand_to(id);
        if let Err(e) = group.lifeline.write_all(&[GO]) {
            // The supervisor is gone; it started nothing.
            if let Some(foreground) = foreground {
                foreground.restore();
            }
            return Err(e);
        }
        Ok((group, foreground))
    }

    fn signal(&self, sig: Signal) {
        let _ = killpg(self.id, sig);
    }
}

/// This binary, to be started as the supervisor.
fn supervisor_command() -> Command {
    #[cfg(target_os = "linux")]
    let mut command = Command::new("/proc/self/exe");
    #[cfg(not(target_os = "linux"))]
    let mut command = Command::new(std::env::current_exe().unwrap_or_else(|_| "tairlock".into()));
    command.arg0("tairlock");
    command
}

/// What the command's environment says.
struct SpecEnv<'a> {
    command: &'a [String],
    key: &'a str,
    name: &'a str,
    fence: Option<u64>,
}

/// Resolves when the lease's local deadline is within `grace` and no renewal has moved it: the
/// renewals are failing, and the command must stop now to end inside the lease.
async fn renewals_overdue<H: Hold>(guard: &H, grace: Duration) {
    loop {
        let Some(deadline) = guard.deadline() else {
            return std::future::pending().await;
        };
        tokio::time::sleep_until(deadline.checked_sub(grace).unwrap_or(deadline)).await;
        if guard.deadline() == Some(deadline) {
            return;
        }
    }
}

/// Why the group is being stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Lost,
    Overdue,
}

/// The forwarded signals' streams.
struct Forward {
    term: SignalStream,
    int: SignalStream,
    hup: SignalStream,
}

impl Forward {
    fn install() -> std::io::Result<Forward> {
        Ok(Forward {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }
}

/// Run the command under the lock and return tairlock's exit code (see the [module docs](self)).
///
/// # Cancel safety
///
/// Dropping it while the command runs drops the lifeline's write end: the supervisor kills the
/// command's group with SIGKILL, and the hold's drop releases the lock in the background (a
/// legacy lock, which has no owner-checked background release, runs out at its timestamp).
pub async fn run<L: Locker>(locks: &L, spec: &RunSpec) -> u8 {
    let guard = match locks.acquire(&spec.name, spec.wait).await {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            match spec.wait {
                Some(wait) if wait.is_zero() => eprintln!(
                    "tairlock run: {} is held by someone else (one attempt: --wait 0)",
                    spec.name
                ),
                wait => eprintln!(
                    "tairlock run: {} is held by someone else; gave up after {:?}",
                    spec.name,
                    wait.unwrap_or_default()
                ),
            }
            return EXIT_NOT_ACQUIRED;
        }
        Err(e) => {
            eprintln!("tairlock run: cannot lock {}: {}", spec.name, Chain(&e));
            return EXIT_STORE;
        }
    };
    let key = guard.key().to_owned();
    // Install the handlers before the command starts: a SIGTERM/SIGINT arriving between the
    // spawn and the installation would otherwise kill tairlock with the default action (the
    // lifeline would then kill the command, but without a word).
    let Ok(mut forward) = Forward::install() else {
        eprintln!("tairlock run: cannot install signal handlers");
        let _ = guard.release().await;
        return EXIT_SPAWN;
    };
    let env = SpecEnv {
        command: &spec.command,
        key: &key,
        name: &spec.name,
        fence: guard.fence(),
    };
    let (mut group, foreground) = match Group::start(&env) {
        Ok(started) => started,
        Err(e) => {
            eprintln!(
                "tairlock run: cannot start the supervisor of {:?}: {e}",
                spec.command[0]
            );
            let _ = guard.release().await;
            return EXIT_SPAWN;
        }
    };
    tracing::debug!(lock = %spec.name, fence = env.fence, group = group.id.as_raw(), "command started");

    let mut stop: Option<Stop> = None;
    let mut kill_at: Option<Instant> = None;
    let code = loop {
        tokio::select! {
            status = group.supervisor.wait() => break status.map(code_of).unwrap_or(1),
            () = guard.lost(), if stop.is_none() => {
                eprintln!(
                    "tairlock run: the lease on {} was lost; stopping the command's process group (SIGTERM)",
                    spec.name
                );
                stop = Some(Stop::Lost);
                kill_at = Some(Instant::now() + spec.grace);
                group.signal(Signal::SIGTERM);
            }
            () = renewals_overdue(&guard, spec.grace), if stop.is_none() => {
                eprintln!(
                    "tairlock run: the lease on {} could not be renewed and ends within --grace ({:?}); \
                     stopping the command's process group (SIGTERM)",
                    spec.name, spec.grace
                );
                stop = Some(Stop::Overdue);
                kill_at = Some(Instant::now() + spec.grace);
                group.signal(Signal::SIGTERM);
            }
            () = sleep_until_some(kill_at) => {
                eprintln!(
                    "tairlock run: the command did not stop within {:?}; SIGKILL to its process group",
                    spec.grace
                );
                group.signal(Signal::SIGKILL);
                if tokio::time::timeout(KILL_WAIT, group.supervisor.wait()).await.is_err() {
                    eprintln!("tairlock run: the command's process group outlived SIGKILL by {KILL_WAIT:?}");
                }
                break 128 + Signal::SIGKILL as u8;
            }
            _ = forward.term.recv() => group.signal(Signal::SIGTERM),
            _ = forward.int.recv() => group.signal(Signal::SIGINT),
            _ = forward.hup.recv() => group.signal(Signal::SIGHUP),
        }
    };
    if group_alive(group.id) {
        // The supervisor died without ending the group (someone killed it): nothing else
        // will stop the group now.
        eprintln!("tairlock run: the supervisor died; SIGKILL to the command's process group");
        group.signal(Signal::SIGKILL);
        let until = Instant::now() + KILL_WAIT;
        while group_alive(group.id) && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    if let Some(foreground) = foreground {
        foreground.restore();
    }
    // The group is gone: the lifeline has nothing left to guard.
    drop(group.lifeline);
    tracing::debug!(lock = %spec.name, code, "command exited");

    if stop == Some(Stop::Overdue)
        && let Some(left) = guard
            .deadline()
            .map(|deadline| deadline.saturating_duration_since(Instant::now()))
            .filter(|left| !left.is_zero())
    {
        eprintln!(
            "tairlock run: the command's process group ended {left:?} before the lease's deadline"
        );
    }
    if stop.is_some() || guard.is_lost() {
        if stop.is_none() {
            eprintln!(
                "tairlock run: the lease on {} was lost while the command ran",
                spec.name
            );
        }
        let _ = guard.release().await;
        return EXIT_LEASE_LOST;
    }
    match guard.release().await {
        Released::Released => code,
        Released::Gone(what) => {
            eprintln!(
                "tairlock run: the lease on {} was lost while the command ran: the release found \
                 the lock {what} (the command exited with {code})",
                spec.name
            );
            EXIT_LEASE_LOST
        }
        Released::Failed(e) => {
            eprintln!(
                "tairlock run: releasing {} failed ({e}); its lease will expire",
                spec.name
            );
            code
        }
    }
}

async fn sleep_until_some(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
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
