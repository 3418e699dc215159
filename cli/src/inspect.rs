//! `tairlock inspect KEY`: which kind of lock the key names (forced by `--rw` or `--sem`, named
//! by the key's suffix, or detected), and its report from [`admin`] (the expire lock),
//! [`rw_inspect`] or [`sem_inspect`].

use std::process::ExitCode;

use clap::Args;
use tairlock::Keyspace;
use tairlock_legacy::WatchStore;

use crate::exit::{Exit, usage};
use crate::flags::{KeyArgs, keyspace_of};
use crate::target::StoreJob;
use crate::{admin, rw_inspect, sem_inspect};

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
}

/// Print `value` as pretty JSON.
fn print_json(value: &impl serde::Serialize) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("serialise")
    );
}

/// `tairlock inspect`: a reader/writer lock when forced, named by a suffix, or detected; else
/// the expire lock.
struct InspectJob {
    keyspace: Keyspace,
    name: String,
    rw: bool,
    sem: bool,
    json: bool,
}

impl StoreJob for InspectJob {
    type Output = ();

    async fn run<S: WatchStore>(self, store: S) -> tairlock::Result<()> {
        if self.sem || (!self.rw && sem_inspect::detect(&store, &self.keyspace, &self.name).await?)
        {
            let report = sem_inspect::inspect(store, self.keyspace, &self.name).await?;
            if self.json {
                print_json(&report);
            } else {
                print!("{}", report.text());
            }
            return Ok(());
        }
        if self.rw || rw_inspect::detect(&store, &self.keyspace, &self.name).await? {
            let locks = tairlock_rwlock::RwLock::with_options(
                store,
                tairlock_rwlock::Options::default().keyspace(self.keyspace),
            );
            let report = rw_inspect::inspect(&locks, &self.name).await?;
            if self.json {
                print_json(&report);
            } else {
                print!("{}", report.text());
            }
            return Ok(());
        }
        let locks = tairlock::ExpireLock::with_options(
            store,
            tairlock::Options::default().keyspace(self.keyspace),
        );
        let report = admin::inspect(&locks, &self.name).await?;
        if self.json {
            print_json(&report);
        } else {
            print!("{}", report.text());
        }
        Ok(())
    }
}

/// Run `tairlock inspect`: the report (or JSON) on stdout.
pub fn command(args: InspectArgs) -> ExitCode {
    let InspectArgs { key, rw, sem } = args;
    let target = match key.target() {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    let named_sem = sem_inspect::split_key(&key.key);
    let sem = sem || named_sem.is_some();
    let (prefix, name, named_rw) = match named_sem {
        Some((prefix, name)) => (prefix, name, false),
        None => rw_inspect::split_key(&key.key, &key.prefix),
    };
    let keyspace = match keyspace_of(prefix, &name) {
        Ok(keyspace) => keyspace,
        Err(e) => return usage(e),
    };
    let job = InspectJob {
        keyspace,
        name,
        rw: rw || named_rw,
        sem,
        json: key.json,
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    match rt.block_on(target.on(job)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tairlock: {e}");
            Exit::Store.into()
        }
    }
}
