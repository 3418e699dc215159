//! `tairlock run`'s flags turned into a job: which lock kind they name (the expire lock, a
//! reader/writer lock's side, a semaphore's permit, a token lock, or a legacy key whose kind is
//! picked from what the server supports), and the job that holds it on the connected store
//! while [`run`](crate::run::run) supervises the command.

use std::process::ExitCode;
use std::time::Duration;

use tairlock::Keyspace;
use tairlock_legacy::WatchStore;

use crate::exit::{Exit, usage};
use crate::flags::keyspace_of;
use crate::run;
use crate::run_args::{ExecArgs, LegacyKindArg, PreferenceArg, RunArgs, SuperviseArgs, UnitArg};
use crate::target::StoreJob;

/// What `tairlock run` holds, from its flags.
enum RunKind {
    Expire {
        keyspace: Keyspace,
        fair: bool,
    },
    Rw {
        keyspace: Keyspace,
        side: run::kinds::Side,
        preference: tairlock_rwlock::Preference,
        fair: bool,
    },
    Legacy {
        unit: tairlock_legacy::Unit,
        kind: LegacyKindArg,
    },
    /// A [`tairlock::TokenLock`] on KEY exactly as named.
    Token,
    Permits {
        keyspace: Keyspace,
        limit: u32,
        fair: bool,
    },
}

/// `tairlock run`'s work on a connected store.
struct RunJob {
    kind: RunKind,
    ttl: Duration,
    spec: run::RunSpec,
}

impl StoreJob for RunJob {
    type Output = u8;

    async fn run<S: WatchStore>(self, store: S) -> tairlock::Result<u8> {
        let RunJob { kind, ttl, spec } = self;
        Ok(match kind {
            RunKind::Expire { keyspace, fair } => {
                let options = tairlock::Options::default()
                    .keyspace(keyspace)
                    .watchdog_lease(ttl)
                    .fair(fair);
                run::run(&tairlock::ExpireLock::with_options(store, options), &spec).await
            }
            RunKind::Rw {
                keyspace,
                side,
                preference,
                fair,
            } => {
                let options = tairlock_rwlock::Options::default()
                    .keyspace(keyspace)
                    .watchdog_lease(ttl)
                    .fair(fair)
                    .preference(preference);
                let locker = run::kinds::RwLocker {
                    locks: tairlock_rwlock::RwLock::with_options(store, options),
                    side,
                };
                run::run(&locker, &spec).await
            }
            RunKind::Permits {
                keyspace,
                limit,
                fair,
            } => {
                let options = tairlock::SemaphoreOptions::default()
                    .keyspace(keyspace)
                    .watchdog_lease(ttl)
                    .fair(fair);
                let locker = run::kinds::Permits {
                    semaphore: tairlock::Semaphore::with_options(store, limit, options),
                    permits: 1,
                };
                run::run(&locker, &spec).await
            }
            RunKind::Token => {
                let options = tairlock::TokenOptions::default().watchdog_lease(ttl);
                run::run(&tairlock::TokenLock::with_options(store, options), &spec).await
            }
            RunKind::Legacy { unit, kind } => {
                let options = tairlock_legacy::Options::default()
                    .unit(unit)
                    .acquire_timeout(spec.wait.filter(|w| !w.is_zero()));
                let lock = match legacy_lock(store, options, kind).await {
                    Ok(lock) => lock,
                    Err(e) => {
                        say!("{e}");
                        return Ok(run::EXIT_STORE);
                    }
                };
                let locker = run::legacy::LegacyLocker::new(lock, ttl);
                if locker.strategy() == tairlock_legacy::Strategy::GetSet {
                    say!(
                        "the getset kind cannot renew its lock: {} is stopped at --ttl ({ttl:?}) \
                         less --grace ({:?}) if it still runs",
                        spec.command[0].to_string_lossy(),
                        spec.grace
                    );
                }
                run::run(&locker, &spec).await
            }
        })
    }
}

/// The legacy lock `--legacy-kind` asks for, if the server supports it.
async fn legacy_lock<S: WatchStore>(
    store: S,
    options: tairlock_legacy::Options,
    kind: LegacyKindArg,
) -> tairlock::Result<tairlock_legacy::LegacyLock<S>> {
    use tairlock_legacy::{LegacyLock, Strategy, probe};
    let mut caps = probe(&store).await?;
    let strategy = match kind {
        LegacyKindArg::Auto => caps.strongest(),
        LegacyKindArg::Getset => Strategy::GetSet,
        LegacyKindArg::Scripted => {
            if caps.strongest() != Strategy::Scripted {
                return Err(tairlock::Error::new(
                    tairlock::ErrorKind::InvalidInput,
                    "--legacy-kind scripted: this server cannot run the scripts (no Lua, or a \
                     script may not write after TIME: Redis before 5)",
                ));
            }
            Strategy::Scripted
        }
        LegacyKindArg::Watch => {
            caps.scripting = false;
            match caps.strongest() {
                watch @ Strategy::Watch(_) => watch,
                _ => {
                    return Err(tairlock::Error::new(
                        tairlock::ErrorKind::InvalidInput,
                        "--legacy-kind watch: this server refuses WATCH",
                    ));
                }
            }
        }
    };
    Ok(LegacyLock::with_strategy(store, options, strategy))
}

/// Run `tairlock run`: check the flags, hold the lock they name and run the command under it.
/// Exits with the command's status, or one of the codes in [the table](crate::run).
pub fn command(args: RunArgs) -> ExitCode {
    let target = match args.conn.target(
        Some(&args.redis),
        &args.cluster,
        args.pubsub,
        &[("--cluster", !args.cluster.is_empty())],
    ) {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    // A token or legacy key is used exactly as named: only an empty one is no key.
    if (args.token || args.legacy) && args.key.is_empty() {
        return usage("the lock key is empty");
    }
    let (kind, name) = if args.token {
        (RunKind::Token, args.key.clone())
    } else if args.legacy {
        let unit = match args.unit {
            UnitArg::S => tairlock_legacy::Unit::Seconds,
            UnitArg::Ms => tairlock_legacy::Unit::Millis,
        };
        let kind = RunKind::Legacy {
            unit,
            kind: args.legacy_kind,
        };
        (kind, args.key.clone())
    } else {
        let (prefix, name) = split_key(&args.key, &args.prefix);
        let keyspace = match keyspace_of(prefix, &name) {
            Ok(keyspace) => keyspace,
            Err(e) => return usage(e),
        };
        let side = match (args.read, args.write) {
            (true, _) => Some(run::kinds::Side::Read),
            (_, true) => Some(run::kinds::Side::Write),
            _ => None,
        };
        let kind = match (side, args.permits) {
            (_, Some(0)) => return usage("--permits must be at least 1"),
            (_, Some(limit)) => RunKind::Permits {
                keyspace,
                limit,
                fair: args.fair,
            },
            (Some(side), None) => RunKind::Rw {
                keyspace,
                side,
                preference: match args.preference {
                    PreferenceArg::Writer => tairlock_rwlock::Preference::Writer,
                    PreferenceArg::Reader => tairlock_rwlock::Preference::Reader,
                },
                fair: args.fair,
            },
            (None, None) => RunKind::Expire {
                keyspace,
                fair: args.fair,
            },
        };
        (kind, name)
    };
    if args.ttl < Duration::from_millis(30) {
        return usage("--ttl must be at least 30ms (it is renewed at a third of its length)");
    }
    let grace = match run::grace_for(args.ttl, args.grace) {
        Ok(grace) => grace,
        Err(e) => return usage(e),
    };
    // Before the runtime starts its threads, so that they all inherit the mask.
    if let Err(e) = run::block_background_stops() {
        say!("cannot block SIGTTOU: {e}");
        return Exit::RunInternal.into();
    }
    let job = RunJob {
        kind,
        ttl: args.ttl,
        spec: run::RunSpec {
            name,
            wait: args.wait,
            grace,
            command: args.command,
        },
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let code = rt.block_on(target.on(job)).unwrap_or_else(|e| {
        say!("{e}");
        run::EXIT_STORE
    });
    ExitCode::from(code)
}

/// Run the hidden `tairlock __supervise` mode (see [`supervise`](crate::run::supervise)).
pub fn supervise(args: SuperviseArgs) -> ExitCode {
    ExitCode::from(run::supervise(&run::Supervise {
        stdin: args.stdin,
        home: nix::unistd::Pid::from_raw(args.home),
        grace: Duration::from_nanos(args.grace_ns),
        foreground: args.foreground,
        command: &args.command,
    }))
}

/// Run the hidden `tairlock __exec` mode (see [`exec`](crate::run::exec)).
pub fn exec(args: ExecArgs) -> ExitCode {
    ExitCode::from(run::exec(
        args.foreground.map(nix::unistd::Pid::from_raw),
        &args.command,
    ))
}

/// Split `prefix{name}` into (prefix, name); a bare name keeps the given prefix.
fn split_key(key: &str, default_prefix: &str) -> (String, String) {
    if let (Some(open), true) = (key.find('{'), key.ends_with('}')) {
        return (
            key[..open].to_owned(),
            key[open + 1..key.len() - 1].to_owned(),
        );
    }
    (default_prefix.to_owned(), key.to_owned())
}
