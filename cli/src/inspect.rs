//! `tairlock inspect KEY`: which kind of lock the key names (forced by `--rw`, `--sem`,
//! `--legacy` or `--token`, named by the key's suffix, or detected), and its report from
//! [`admin`] (the expire lock), [`rw_inspect`], [`sem_inspect`], [`legacy_inspect`] or
//! [`token_inspect`].
//!
//! Detection, in order: a semaphore (the plain lock key absent, its holders key present), a
//! reader/writer lock (the plain lock key absent, one of its keys present), a legacy key (KEY
//! itself, exactly as given, holds a legacy timestamp and the plain lock key is absent), a
//! token lock (KEY itself holds a string of a token's shape and the plain lock key is absent),
//! else the expire lock. A KEY that is not a valid lock name (a key with braces, say) is looked
//! at only as a legacy key or a token lock.

use std::process::ExitCode;

use clap::Args;
use tairlock::Keyspace;
use tairlock_legacy::WatchStore;

use crate::exit::{Exit, usage};
use crate::flags::{KeyArgs, keyspace_of};
use crate::target::StoreJob;
use crate::{admin, legacy_inspect, rw_inspect, sem_inspect, token_inspect};

/// `tairlock inspect`'s flags.
#[derive(Args, Debug)]
pub struct InspectArgs {
    #[command(flatten)]
    key: KeyArgs,
    /// Inspect a reader/writer lock (detected automatically when its keys exist).
    #[arg(long)]
    rw: bool,
    /// Inspect a semaphore: its holders with their permits and remaining leases (detected
    /// automatically when its keys exist).
    #[arg(long, conflicts_with = "rw")]
    sem: bool,
    /// Inspect a legacy SETNX/GETSET lock: KEY exactly as the old code names it, holding a bare
    /// Unix timestamp (seconds or ms); shows the expiry it encodes by the server's clock, the
    /// key's TTL and the last fencing token (detected automatically when KEY holds one).
    #[arg(long, conflicts_with_all = ["rw", "sem", "prefix"])]
    legacy: bool,
    /// Inspect a token lock (redis-py's Lock, node redlock, redis-semaphore's mutex, redsync,
    /// tairlock's TokenLock): KEY exactly as that library names it, holding a random token with
    /// a TTL; shows the token, the TTL and the last fencing token a TokenLock issued (detected
    /// automatically when KEY holds a string of a token's shape).
    #[arg(long, conflicts_with_all = ["rw", "sem", "legacy", "prefix"])]
    token: bool,
}

/// Print `value` as pretty JSON.
fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialise")
    );
}

/// `tairlock inspect`: a kind when forced, named by a suffix, or detected; else the expire
/// lock.
struct InspectJob {
    /// The lock's keyspace and name; `None` when KEY is no valid name (only a legacy key then).
    lock: Option<(Keyspace, String)>,
    /// KEY exactly as given: a legacy lock's key.
    key: String,
    rw: bool,
    sem: bool,
    legacy: bool,
    token: bool,
    json: bool,
}

impl InspectJob {
    /// Print the token lock at KEY.
    async fn token<S: WatchStore>(&self, store: S) -> tairlock::Result<()> {
        let report = token_inspect::inspect(store, &self.key).await?;
        if self.json {
            print_json(&report);
        } else {
            print!("{}", report.text());
        }
        Ok(())
    }

    /// Print the legacy lock at KEY.
    async fn legacy<S: WatchStore>(&self, store: &S) -> tairlock::Result<()> {
        let report = legacy_inspect::inspect(store, &self.key).await?;
        if self.json {
            print_json(&report);
        } else {
            print!("{}", report.text());
        }
        Ok(())
    }
}

impl StoreJob for InspectJob {
    /// `false` when nothing was inspected: KEY is no valid lock name and holds no legacy lock.
    type Output = bool;

    async fn run<S: WatchStore>(self, store: S) -> tairlock::Result<bool> {
        if self.legacy {
            self.legacy(&store).await?;
            return Ok(true);
        }
        if self.token {
            self.token(store).await?;
            return Ok(true);
        }
        let Some((keyspace, name)) = self.lock.clone() else {
            if legacy_inspect::detect(&store, &self.key, None).await? {
                self.legacy(&store).await?;
                return Ok(true);
            }
            if token_inspect::detect(&store, &self.key).await? {
                self.token(store).await?;
                return Ok(true);
            }
            return Ok(false);
        };
        if self.sem || (!self.rw && sem_inspect::detect(&store, &keyspace, &name).await?) {
            let report = sem_inspect::inspect(store, keyspace, &name).await?;
            if self.json {
                print_json(&report);
            } else {
                print!("{}", report.text());
            }
            return Ok(true);
        }
        if self.rw || rw_inspect::detect(&store, &keyspace, &name).await? {
            let locks = tairlock_rwlock::RwLock::with_options(
                store,
                tairlock_rwlock::Options::default().keyspace(keyspace),
            );
            let report = rw_inspect::inspect(&locks, &name).await?;
            if self.json {
                print_json(&report);
            } else {
                print!("{}", report.text());
            }
            return Ok(true);
        }
        let expire_key = keyspace.key(&name, "")?;
        if !self.sem
            && !self.rw
            && legacy_inspect::detect(&store, &self.key, Some(&expire_key)).await?
        {
            self.legacy(&store).await?;
            return Ok(true);
        }
        // KEY itself holds a token while no expire lock has that name: a token lock.
        if self.key != expire_key
            && store.key_type(&expire_key).await? == "none"
            && token_inspect::detect(&store, &self.key).await?
        {
            self.token(store).await?;
            return Ok(true);
        }
        let locks = tairlock::ExpireLock::with_options(
            store,
            tairlock::Options::default().keyspace(keyspace),
        );
        let report = admin::inspect(&locks, &name).await?;
        if self.json {
            print_json(&report);
        } else {
            print!("{}", report.text());
        }
        Ok(true)
    }
}

/// Run `tairlock inspect`: the report (or JSON) on stdout.
pub fn command(args: InspectArgs) -> ExitCode {
    let InspectArgs {
        key,
        rw,
        sem,
        legacy,
        token,
    } = args;
    let target = match key.target() {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    if (legacy || token) && key.key.is_empty() {
        return usage("the lock key is empty");
    }
    let named_sem = sem_inspect::split_key(&key.key);
    let (prefix, name, named_rw) = match &named_sem {
        Some((prefix, name)) => (prefix.clone(), name.clone(), false),
        None => rw_inspect::split_key(&key.key, &key.prefix),
    };
    // A KEY that is no valid name may still be a legacy key: that is looked at, else this is
    // the error.
    let (lock, bad_name) = match keyspace_of(prefix, &name) {
        Ok(keyspace) => (Some((keyspace, name)), None),
        Err(e) if rw || sem => return usage(e),
        Err(e) => (None, Some(e)),
    };
    let job = InspectJob {
        lock,
        key: key.key.clone(),
        rw: !legacy && (rw || named_rw),
        sem: !legacy && !token && (sem || named_sem.is_some()),
        legacy,
        token,
        json: key.json,
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    match rt.block_on(target.on(job)) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => usage(format!(
            "{} (and {:?} holds no legacy lock timestamp, nor a token)",
            bad_name.unwrap_or_default(),
            key.key
        )),
        Err(e) => {
            eprintln!("tairlock: {e}");
            Exit::Store.into()
        }
    }
}
