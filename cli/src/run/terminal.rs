//! Handing the terminal's foreground to the command's process group, and taking it back.

use std::io::IsTerminal;
use std::os::fd::{AsFd, OwnedFd};

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

/// Block SIGTTOU (and SIGTTIN) in the calling thread and every thread it starts afterwards.
///
/// Once the command's group has the terminal, tairlock is in the background: with SIGTTOU
/// blocked, its messages are written even if the terminal has `tostop` set, and taking the
/// foreground back succeeds instead of stopping tairlock. Call it before the runtime starts its
/// threads. A blocked signal stays blocked across `exec`: the supervisor clears the mask before
/// it starts the command.
///
/// # Errors
///
/// When the signal mask cannot be changed.
pub fn block_background_stops() -> nix::Result<()> {
    let mut set = SigSet::empty();
    set.add(Signal::SIGTTOU);
    set.add(Signal::SIGTTIN);
    set.thread_block()
}

/// The terminal whose foreground the command's group was given; [`restore`](Self::restore)
/// hands it back.
#[derive(Debug)]
pub(crate) struct Foreground {
    terminal: OwnedFd,
    ours: Pid,
    group: Pid,
}

/// A descriptor of the first of stdin, stdout and stderr that is a terminal.
pub(crate) fn terminal() -> Option<OwnedFd> {
    let fd = if std::io::stdin().is_terminal() {
        std::io::stdin().as_fd().try_clone_to_owned()
    } else if std::io::stdout().is_terminal() {
        std::io::stdout().as_fd().try_clone_to_owned()
    } else if std::io::stderr().is_terminal() {
        std::io::stderr().as_fd().try_clone_to_owned()
    } else {
        return None;
    };
    fd.ok()
}

/// Whether a process other than this one is in this process's group (e.g. `less` in
/// `tairlock run … | less`): taking the foreground from it would stop it at its next terminal
/// read. Read from `/proc` on Linux; elsewhere assumed not.
fn group_shared() -> bool {
    #[cfg(target_os = "linux")]
    {
        let (ours, me) = (getpgrp().as_raw(), std::process::id());
        let Ok(entries) = std::fs::read_dir("/proc") else {
            return false;
        };
        entries.flatten().any(|entry| {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                return false;
            };
            // Field 5 of `stat`, after the parenthesised command name.
            pid != me
                && std::fs::read_to_string(entry.path().join("stat"))
                    .ok()
                    .and_then(|stat| {
                        let (_, rest) = stat.rsplit_once(") ")?;
                        rest.split(' ').nth(2)?.parse::<i32>().ok()
                    })
                    == Some(ours)
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

impl Foreground {
    /// If tairlock's group is the foreground group of its terminal, and tairlock is alone in it,
    /// make `group` the foreground group instead; `None` when tairlock has no terminal, runs in
    /// its background, or shares its group (a pipeline: the command then runs in the
    /// background, and Ctrl-C reaches it through tairlock).
    pub(crate) fn hand_to(group: Pid) -> Option<Foreground> {
        let terminal = terminal()?;
        let ours = getpgrp();
        if tcgetpgrp(&terminal).ok()? != ours || group_shared() {
            return None;
        }
        tcsetpgrp(&terminal, group).ok()?;
        Some(Foreground {
            terminal,
            ours,
            group,
        })
    }

    /// Give the foreground back to tairlock's group (SIGTTOU is blocked, see
    /// [`block_background_stops`]) if the command's group still has it (after Ctrl-Z and `bg`,
    /// the shell has it, and keeps it).
    pub(crate) fn restore(self) {
        if tcgetpgrp(&self.terminal) == Ok(self.group) {
            let _ = tcsetpgrp(&self.terminal, self.ours);
        }
    }
}
