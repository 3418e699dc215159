//! `tairlock run KEY -- CMD ARGS…`: run a command while holding a lock, like `flock(1)`.
//!
//! The lock is held with the watchdog on (renewed at a third of `--ttl`). The command gets
//! `TAIRLOCK_KEY` (the lock's Redis key), `TAIRLOCK_NAME` and `TAIRLOCK_FENCE` (the fencing
//! token: pass it along with every write, so a resource can reject a holder that was paused past
//! its lease). If the lease is lost, the command gets SIGTERM, then SIGKILL after `--grace`.
//! SIGINT and SIGTERM sent to tairlock are passed on to the command.
//!
//! | exit code | meaning |
//! |---|---|
//! | the command's | it ran and exited (128 + N if a signal N ended it) |
//! | [`EXIT_NOT_ACQUIRED`] (75) | the lock was not acquired within `--wait` |
//! | [`EXIT_LEASE_LOST`] (76) | the lease was lost while the command ran; it was stopped |
//! | [`EXIT_STORE`] (69) | the store could not be reached or refused the lock (e.g. the key holds other data) |
//! | [`EXIT_SPAWN`] (127) | the command could not be started |

use std::process::ExitStatus;
use std::time::Duration;

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use tairlock::{ExpireLock, Store};
use tokio::process::Command;
use tokio::signal::unix::{SignalKind, signal};

/// The lock was not acquired within `--wait`.
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// The lease was lost while the command ran; the command was stopped.
pub const EXIT_LEASE_LOST: u8 = 76;
/// The store failed.
pub const EXIT_STORE: u8 = 69;
/// The command could not be started.
pub const EXIT_SPAWN: u8 = 127;

/// What `run` was asked to do.
#[derive(Debug, Clone)]
pub struct RunSpec {
    /// The lock name.
    pub name: String,
    /// How long to wait for the lock (`None`: forever).
    pub wait: Option<Duration>,
    /// Grace between SIGTERM and SIGKILL when the lease is lost.
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

fn send(pid: Option<u32>, sig: Signal) {
    if let Some(pid) = pid {
        let _ = kill(Pid::from_raw(pid as i32), sig);
    }
}

/// Run the command under the lock and return tairlock's exit code.
pub async fn run<S: Store>(locks: &ExpireLock<S>, spec: &RunSpec) -> u8 {
    let acquired = match spec.wait {
        Some(wait) => locks.try_lock_for(&spec.name, wait).await,
        None => locks.lock(&spec.name).await.map(Some),
    };
    let guard = match acquired {
        Ok(Some(guard)) => guard,
        Ok(None) => {
            eprintln!(
                "tairlock run: {} is held by someone else; gave up after {:?}",
                spec.name,
                spec.wait.unwrap_or_default()
            );
            return EXIT_NOT_ACQUIRED;
        }
        Err(e) => {
            eprintln!("tairlock run: cannot lock {}: {e}", spec.name);
            return EXIT_STORE;
        }
    };
    let key = locks.keys(&spec.name).map(|k| k.lock).unwrap_or_default();
    // Install the handlers before the command starts: a SIGTERM/SIGINT arriving between the
    // spawn and the installation would otherwise kill tairlock with the default action, leaving
    // the command running unsupervised (and, once the watchdog is gone, without the lock).
    let (mut sigterm, mut sigint) = match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(t), Ok(i)) => (t, i),
        _ => {
            eprintln!("tairlock run: cannot install signal handlers");
            let _ = guard.release().await;
            return EXIT_SPAWN;
        }
    };
    let mut child = match Command::new(&spec.command[0])
        .args(&spec.command[1..])
        .env("TAIRLOCK_KEY", &key)
        .env("TAIRLOCK_NAME", &spec.name)
        .env("TAIRLOCK_FENCE", guard.fence().to_string())
        .kill_on_drop(true)
        .spawn()
    {
        Ok(child) => child,
        Err(e) => {
            eprintln!("tairlock run: cannot start {:?}: {e}", spec.command[0]);
            let _ = guard.release().await;
            return EXIT_SPAWN;
        }
    };
    let pid = child.id();
    loop {
        tokio::select! {
            status = child.wait() => {
                let code = status.map(code_of).unwrap_or(1);
                if guard.is_lost() {
                    eprintln!("tairlock run: the lease on {} was lost while the command ran", spec.name);
                    let _ = guard.release().await;
                    return EXIT_LEASE_LOST;
                }
                if let Err(e) = guard.release().await {
                    eprintln!("tairlock run: releasing {} failed ({e}); its lease will expire", spec.name);
                }
                return code;
            }
            () = guard.lost() => {
                eprintln!("tairlock run: the lease on {} was lost; stopping the command (SIGTERM)", spec.name);
                send(pid, Signal::SIGTERM);
                if tokio::time::timeout(spec.grace, child.wait()).await.is_err() {
                    eprintln!("tairlock run: the command did not stop within {:?}; SIGKILL", spec.grace);
                    let _ = child.kill().await;
                }
                let _ = guard.release().await;
                return EXIT_LEASE_LOST;
            }
            _ = sigterm.recv() => send(pid, Signal::SIGTERM),
            _ = sigint.recv() => send(pid, Signal::SIGINT),
        }
    }
}
