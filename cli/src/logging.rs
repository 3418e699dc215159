//! `-v`, `-vv`, `-q` and `--log FILTER`: what tairlock reports on stderr while it works, through
//! a `tracing-subscriber` formatter (the core crate's events, see `tairlock::observe`).
//!
//! | flags | filter | what shows |
//! |---|---|---|
//! | (none) | `RUST_LOG`, else `warn` | warnings: a renewal that failed, a lease lost and why, a release that failed in the background, a fallback to polling |
//! | `-v` | `warn,tairlock=debug` | also each acquisition (with its fence and wait), renewal and release |
//! | `-vv` | `info,tairlock=trace` | also each refused attempt, and other crates' `info` |
//! | `-q` | `error` | no warnings |
//! | `--log FILTER` | `FILTER` | a `RUST_LOG`-style filter (`tairlock=debug,redis=info`); wins over the rest |
//!
//! Errors that end a command are not events: they go to stderr whatever the flags, with their
//! cause chain ([`Chain`]).

use std::error::Error;
use std::fmt;
use std::io::IsTerminal;

use clap::{ArgAction, Args};
use tracing_subscriber::EnvFilter;

/// The logging flags, global to every command.
#[derive(Args, Debug, Clone, Default, PartialEq, Eq)]
pub struct LogArgs {
    /// Tell what happens on stderr: -v each acquisition (with its fence), renewal, loss and
    /// release; -vv also each refused attempt.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors on stderr: no warnings.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// A RUST_LOG-style filter for stderr (e.g. `tairlock=debug,warn`); wins over -v and -q.
    /// Without it, -v/-q decide, else the RUST_LOG environment variable, else warnings only.
    #[arg(long = "log", value_name = "FILTER", global = true)]
    pub log: Option<String>,
}

impl LogArgs {
    /// The filter these flags ask for, given the `RUST_LOG` environment variable `env`.
    pub fn filter(&self, env: Option<&str>) -> String {
        if let Some(filter) = &self.log {
            return filter.clone();
        }
        match (self.quiet, self.verbose) {
            (true, _) => "error".to_owned(),
            (false, 0) => match env.map(str::trim) {
                Some(env) if !env.is_empty() => env.to_owned(),
                _ => "warn".to_owned(),
            },
            (false, 1) => "warn,tairlock=debug".to_owned(),
            (false, _) => "info,tairlock=trace".to_owned(),
        }
    }
}

/// Install the stderr subscriber for `args` (reading `RUST_LOG`).
///
/// # Errors
///
/// A malformed filter (from `--log` or `RUST_LOG`), as a message for the user: a usage error.
pub fn init(args: &LogArgs) -> Result<(), String> {
    let env = std::env::var("RUST_LOG").ok();
    let filter = args.filter(env.as_deref());
    let parsed = EnvFilter::builder()
        .parse(&filter)
        .map_err(|e| format!("bad log filter {filter:?}: {e}"))?;
    // The target (the module) matters once other crates speak too.
    let targets = args.log.is_some() || args.verbose > 1 || env.is_some();
    tracing_subscriber::fmt()
        .with_env_filter(parsed)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(targets)
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))
}

/// An error with its cause chain, for stderr: `error: cause: cause's cause`.
#[derive(Debug)]
pub struct Chain<'a>(pub &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut shown = self.0.to_string();
        let mut source = self.0.source();
        while let Some(cause) = source {
            let text = cause.to_string();
            // A message that already ends with its cause's text says nothing new.
            if !shown.ends_with(&text) {
                write!(f, ": {text}")?;
                shown = text;
            }
            source = cause.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flags(verbose: u8, quiet: bool, log: Option<&str>) -> LogArgs {
        LogArgs {
            verbose,
            quiet,
            log: log.map(str::to_owned),
        }
    }

    #[test]
    fn flags_choose_the_filter_and_log_wins() {
        assert_eq!(flags(0, false, None).filter(None), "warn");
        assert_eq!(flags(0, false, None).filter(Some(" ")), "warn");
        assert_eq!(flags(0, false, None).filter(Some("debug")), "debug");
        assert_eq!(
            flags(1, false, None).filter(Some("debug")),
            "warn,tairlock=debug"
        );
        assert_eq!(flags(2, false, None).filter(None), "info,tairlock=trace");
        assert_eq!(flags(0, true, None).filter(Some("trace")), "error");
        assert_eq!(
            flags(2, false, Some("redis=info")).filter(None),
            "redis=info"
        );
    }

    #[test]
    fn every_filter_the_flags_make_parses() {
        for args in [
            flags(0, false, None),
            flags(1, false, None),
            flags(3, false, None),
            flags(0, true, None),
        ] {
            let filter = args.filter(None);
            assert!(EnvFilter::builder().parse(&filter).is_ok(), "{filter}");
        }
    }

    #[test]
    fn the_chain_shows_each_new_cause_once() {
        #[derive(Debug)]
        struct E(&'static str, Option<Box<E>>);
        impl fmt::Display for E {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.0)
            }
        }
        impl Error for E {
            fn source(&self) -> Option<&(dyn Error + 'static)> {
                self.1.as_deref().map(|e| e as _)
            }
        }
        let inner = E("connection refused", None);
        let e = E("cannot connect", Some(Box::new(inner)));
        assert_eq!(Chain(&e).to_string(), "cannot connect: connection refused");
        let repeated = E(
            "timed out: connection refused",
            Some(Box::new(E("connection refused", None))),
        );
        assert_eq!(
            Chain(&repeated).to_string(),
            "timed out: connection refused"
        );
    }
}
