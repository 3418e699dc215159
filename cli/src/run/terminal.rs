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

impl Foreground {
    /// If tairlock's group is the foreground group of its terminal, make `group` the foreground
    /// group instead; `None` when tairlock has no terminal, or runs in its background.
    pub(crate) fn hand_to(group: Pid) -> Option<Foreground> {
        let terminal = terminal()?;
        let ours = getpgrp();
        if tcgetpgrp(&terminal).ok()? != ours {
            return None;
        }
        tcsetpgrp(&terminal, group).ok()?;
        Some(Foreground { terminal, ours })
    }

    /// Give the foreground back to tairlock's group (SIGTTOU is blocked, see
    /// [`block_background_stops`]), if the command's group still has it.
    pub(crate) fn restore(self) {
        let _ = tcsetpgrp(&self.terminal, self.ours);
    }
}
