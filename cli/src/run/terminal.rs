//! The terminal's foreground: whether the command's process group is to have it, handing it
//! over, and taking it back.

use std::io::IsTerminal;
use std::os::fd::{AsFd, OwnedFd};

use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{Pid, getpgrp, tcgetpgrp, tcsetpgrp};

/// Block SIGTTOU (and SIGTTIN) in the calling thread and every thread it starts afterwards.
///
/// Once the command's group has the terminal, tairlock is in the background: with SIGTTOU
/// blocked, its messages are written even if the terminal has `tostop` set, and taking the
/// foreground back succeeds instead of stopping tairlock. Call it before the runtime starts its
/// threads. A child started through `std::process::Command` starts with an empty mask.
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
/// read. Read from `/proc` on Linux. Elsewhere, a pipeline is recognised by its pipes: the
/// group is taken as shared unless standard input and output are both the terminal.
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
            pid != me
                && super::tree::stat(Pid::from_raw(pid as i32))
                    .is_some_and(|(_, _, pgid)| pgid.as_raw() == ours)
        })
    }
    #[cfg(not(target_os = "linux"))]
    {
        !(std::io::stdin().is_terminal() && std::io::stdout().is_terminal())
    }
}

/// Whether the command's group is to have the terminal's foreground: tairlock's group has it,
/// and tairlock is alone in its group. Not in a pipeline (the command then runs in the
/// background of the terminal, and Ctrl-C reaches it through tairlock), nor without a terminal.
pub(crate) fn foreground_is_ours() -> bool {
    terminal().is_some_and(|terminal| foreground_is(&terminal, getpgrp())) && !group_shared()
}

/// Whether `group` is the terminal's foreground group.
pub(crate) fn foreground_is(terminal: &OwnedFd, group: Pid) -> bool {
    tcgetpgrp(terminal) == Ok(group)
}

/// Give the terminal's foreground to `to` if `from` has it (the caller blocks SIGTTOU: a
/// background group may then set it). Returns whether it did.
pub(crate) fn hand(terminal: &OwnedFd, from: Pid, to: Pid) -> bool {
    foreground_is(terminal, from) && tcsetpgrp(terminal, to).is_ok()
}
