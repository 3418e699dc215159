//! Everything the command started, as the supervisor sees it.
//!
//! On Linux the supervisor is the *child subreaper* of the command's tree: a process that loses
//! its parent is handed to the supervisor, never to init. Its descendants are therefore exactly
//! what the command started, whatever process group or session each moved to, and they are read
//! from `/proc` (each process's parent, group and state). Elsewhere only the command's process
//! group is known: a descendant that leaves it (`setsid`, a shell's job control) is out of
//! reach, and orphans are reaped by init.

use nix::errno::Errno;
#[cfg(target_os = "linux")]
use nix::sys::signal::kill;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;

/// A descendant of the supervisor.
#[cfg(target_os = "linux")]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Proc {
    pub(crate) pid: Pid,
    pub(crate) pgid: Pid,
    /// `Z`: a zombie, not yet reaped (it runs no more); `T`: stopped.
    pub(crate) state: char,
}

#[cfg(target_os = "linux")]
impl Proc {
    pub(crate) fn runs(&self) -> bool {
        self.state != 'Z' && self.state != 'X'
    }
}

/// One process's state letter, parent and group from `/proc/<pid>/stat`.
#[cfg(target_os = "linux")]
pub(crate) fn stat(pid: Pid) -> Option<(char, Pid, Pid)> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name is in parentheses and may hold anything: parse after the last one.
    let (_, rest) = text.rsplit_once(") ")?;
    let mut fields = rest.split(' ');
    let state = fields.next()?.chars().next()?;
    let ppid = fields.next()?.parse().ok()?;
    let pgid = fields.next()?.parse().ok()?;
    Some((state, Pid::from_raw(ppid), Pid::from_raw(pgid)))
}

/// Every descendant of `root` (the supervisor), zombies included, read from `/proc`. Not a
/// snapshot: a process that forks while it is read may be missed, so whoever must reach all of
/// them repeats until a pass finds none running.
#[cfg(target_os = "linux")]
pub(crate) fn descendants(root: Pid) -> Vec<Proc> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let all: Vec<(Pid, Pid, Proc)> = entries
        .flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let pid = Pid::from_raw(pid);
            let (state, ppid, pgid) = stat(pid)?;
            Some((pid, ppid, Proc { pid, pgid, state }))
        })
        .collect();
    let mut found: Vec<Proc> = Vec::new();
    let mut parents = vec![root];
    while let Some(parent) = parents.pop() {
        for (pid, ppid, proc) in &all {
            if *ppid == parent && !found.iter().any(|p| p.pid == *pid) {
                found.push(*proc);
                parents.push(*pid);
            }
        }
    }
    found
}

/// What the supervisor knows of the command's processes.
#[derive(Debug)]
pub(crate) struct Tree {
    /// The supervisor.
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    root: Pid,
    /// The command: its pid, which is also its process group's id.
    command: Pid,
    /// Whether the command itself has been reaped.
    command_reaped: bool,
}

impl Tree {
    pub(crate) fn new(root: Pid, command: Pid) -> Tree {
        Tree {
            root,
            command,
            command_reaped: false,
        }
    }

    pub(crate) fn command(&self) -> Pid {
        self.command
    }

    pub(crate) fn reaped(&mut self) {
        self.command_reaped = true;
    }

    /// Whether the command's process group may be signalled: the command is not reaped yet, or
    /// a process of ours is in the group. Its id is then that group's, not a reused one (a group
    /// id is not reused while the group exists, and the command's pid is not while unreaped).
    #[cfg(target_os = "linux")]
    fn group_is_ours(&self, procs: &[Proc]) -> bool {
        !self.command_reaped || procs.iter().any(|p| p.pgid == self.command)
    }

    /// Send `signal` to every running process of the command's: its group at once (so that a
    /// process forking meanwhile is not missed), and each descendant outside it. Returns how
    /// many processes were found running.
    #[cfg(target_os = "linux")]
    pub(crate) fn signal(&self, signal: Signal) -> usize {
        let procs = descendants(self.root);
        if self.group_is_ours(&procs) {
            let _ = killpg(self.command, signal);
        }
        let mut running = 0;
        for proc in procs.iter().filter(|p| p.runs()) {
            running += 1;
            if proc.pgid != self.command {
                let _ = kill(proc.pid, signal);
            }
        }
        running
    }

    /// Elsewhere: the command's group (while it exists: the command unreaped, or members left).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn signal(&self, signal: Signal) -> usize {
        if !self.command_reaped || group_alive(self.command) {
            let _ = killpg(self.command, signal);
            1
        } else {
            0
        }
    }

    /// Whether anything of the command's runs or waits to be reaped (elsewhere than on Linux,
    /// where the supervisor's having no child left says it).
    #[cfg(not(target_os = "linux"))]
    pub(crate) fn anything_left(&self) -> bool {
        !self.command_reaped || group_alive(self.command)
    }
}

/// Whether any process of `group` is left (zombies included: a member counts until reaped).
pub(crate) fn group_alive(group: Pid) -> bool {
    // EPERM: a member we may not signal (it changed its user) is still a member.
    !matches!(killpg(group, None), Err(Errno::ESRCH))
}
