//! Every exit code of `tairlock`, defined once: `tairlock --help` lists them from here, and the
//! guide's page on `tairlock run` (`docs/run.md`) repeats those of `run`.

use std::fmt::Write as _;
use std::process::ExitCode;

/// A `tairlock` exit code. `tairlock run` also exits with its command's own status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Exit {
    /// Success (`run`: the command's own status is returned instead).
    Ok = 0,
    /// `race`: a safe algorithm broke one of its zeros.
    Broken = 1,
    /// Usage error: bad flags, a combination that makes no sense, bad input; nothing was done.
    Usage = 2,
    /// `race`: a verbatim recipe showed no flaw in any scenario (the demonstration failed).
    NoFlawShown = 3,
    /// A store or I/O error (`race`, `bench`, `inspect`, `unlock`, `scan`).
    Store = 4,
    /// `unlock --force` refused a key that is not one of our locks (it holds user data), or
    /// that no longer holds the value `--if-value` names.
    Refused = 5,
    /// `scan --stuck`: it found a lock nobody can take without help.
    Stuck = 6,
    /// `run`: the store could not be reached or refused the lock (`EX_UNAVAILABLE`).
    RunStore = 69,
    /// `run`: the lock was not acquired within `--wait` (`EX_TEMPFAIL`).
    NotAcquired = 75,
    /// `run`: the lease was lost while the command ran, the release found it gone or taken, or
    /// renewals failed and the command was stopped before the lease ran out.
    LeaseLost = 76,
    /// `run`: the command could not be started.
    Spawn = 127,
}

impl Exit {
    /// Every code, in order.
    pub const ALL: [Exit; 11] = [
        Exit::Ok,
        Exit::Broken,
        Exit::Usage,
        Exit::NoFlawShown,
        Exit::Store,
        Exit::Refused,
        Exit::Stuck,
        Exit::RunStore,
        Exit::NotAcquired,
        Exit::LeaseLost,
        Exit::Spawn,
    ];

    /// The number.
    pub fn code(self) -> u8 {
        self as u8
    }

    /// Its name in `--json` output and in messages.
    pub fn name(self) -> &'static str {
        match self {
            Exit::Ok => "ok",
            Exit::Broken => "broken",
            Exit::Usage => "usage",
            Exit::NoFlawShown => "no-flaw-shown",
            Exit::Store => "store",
            Exit::Refused => "refused",
            Exit::Stuck => "stuck",
            Exit::RunStore => "run-store",
            Exit::NotAcquired => "not-acquired",
            Exit::LeaseLost => "lease-lost",
            Exit::Spawn => "spawn",
        }
    }

    /// What it means, one line.
    pub fn meaning(self) -> &'static str {
        match self {
            Exit::Ok => "success (run: the command's own status instead)",
            Exit::Broken => "race: a safe algorithm broke one of its zeros",
            Exit::Usage => "usage error: bad flags or input, or flags that make no sense together",
            Exit::NoFlawShown => "race: a verbatim recipe showed no flaw (demonstration failed)",
            Exit::Store => "store or I/O error",
            Exit::Refused => {
                "unlock --force refused a key that holds data that is not a lock, or another \
                 value than --if-value"
            }
            Exit::Stuck => "scan --stuck: found a lock nobody can take without help",
            Exit::RunStore => "run: store unreachable, or it refused the lock",
            Exit::NotAcquired => "run: lock not acquired within --wait",
            Exit::LeaseLost => "run: lease lost (command stopped, or the release found it gone)",
            Exit::Spawn => "run: the command could not be started",
        }
    }

    /// The table `tairlock --help` ends with.
    pub fn help() -> String {
        let mut out = String::from("Exit codes (run also exits with the command's own status):\n");
        for exit in Exit::ALL {
            let _ = writeln!(
                out,
                "  {:>3}  {:<14} {}",
                exit.code(),
                exit.name(),
                exit.meaning()
            );
        }
        out
    }
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit.code())
    }
}

impl From<Exit> for u8 {
    fn from(exit: Exit) -> u8 {
        exit.code()
    }
}

/// Print a usage error and return its code.
pub fn usage(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("tairlock: {message}");
    Exit::Usage.into()
}

#[cfg(test)]
mod tests {
    use super::Exit;

    #[test]
    fn codes_and_names_are_distinct() {
        for (i, a) in Exit::ALL.iter().enumerate() {
            for b in &Exit::ALL[i + 1..] {
                assert_ne!(a.code(), b.code());
                assert_ne!(a.name(), b.name());
            }
        }
    }
}
