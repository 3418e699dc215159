//! `tairlock unlock --force KEY`: delete a lock whoever holds it, for every kind — the expire
//! lock, a reader/writer lock (its writer, every live reader, a waiting writer's intent and the
//! fair writers' queue), a semaphore (every holder's permits), a legacy `SETNX`/`GETSET` key,
//! and a token lock of redis-py, node redlock and the like. A key that holds anything but one of
//! our locks (a user's data)
//! is refused, and nothing is deleted.
//!
//! | kind | how | refused when |
//! |---|---|---|
//! | expire lock | one script ([`ExpireLock::force_unlock`]) | the key is not a string, or not a `tl1:` lease |
//! | reader/writer lock | one atomic snapshot ([`RwLock::inspect`]), then each hold it saw released by its own compare-and-delete step (the intent, each place in the fair writers' queue, the writer, each reader), each announcing the release to waiters; a hold taken after the snapshot is left alone: a writer whose fencing token is above the last one the snapshot saw issued (also one that holds the lock under the nonce of an intent or a place the snapshot saw), and a reader the snapshot did not list | any of the lock's keys holds somebody else's data |
//! | semaphore | one snapshot ([`Semaphore::inspect`]), then each holder it saw given back by its nonce ([`Semaphore::force_release`]), each announcing the release to waiters; a holder admitted after the snapshot is left alone | a key of the semaphore holds somebody else's data |
//! | legacy key | `WATCH`, `GET`, then `MULTI`/`DEL`/`EXEC` (no script: legacy servers may have none); repeated if the key changed in between | the key is not a string holding a bare integer timestamp |
//! | token lock (`--token`: redis-py, node redlock, redis-semaphore, a `TokenLock`) | one snapshot of the token, then the compare-and-delete of that token ([`TokenLock::force_unlock`]); looked at again if another token took the key in between | the key holds another type than a string (any string is somebody's token to this format: name only keys that are locks) |
//!
//! Repeating a forced unlock is safe in the sense that it never deletes user data; it may of
//! course delete the lock of a holder that arrived in between, which is what "force" means.
//! `--if-value VALUE` (an expire lock's lease, a legacy key's timestamp or a token lock's token,
//! as `tairlock inspect` or `tairlock scan --stuck` showed it) narrows that to exactly the
//! holding that was looked at (a token lock's by the compare-and-delete of that token):
//! the expire lock is released by compare-and-delete of that lease ([`ExpireLock::expire_unlock`]),
//! the legacy key deleted only if it still holds that timestamp (checked under the `WATCH`), and a
//! lock taken or renewed in between is refused (exit 5) and left alone.
//!
//! The command itself, [`command`], takes the flags ([`UnlockArgs`]), picks the kind (`--legacy`,
//! `--token`, `--rw`, `--sem`, a key named with a reader/writer or semaphore suffix, or
//! detected) and prints the report.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use tairlock::{
    ErrorKind, ExpireLock, Keyspace, Lease, Options, Reply, Semaphore, SemaphoreOptions, Store,
    TokenLock, Unlock,
};
use tairlock_legacy::WatchStore;
use tairlock_legacy::watch::{Read, TxOp, WatchConnection};
use tairlock_legacy::wire::parse_value;
use tairlock_rwlock::RwLock;

use crate::exit::{Exit, usage};
use crate::flags::{KeyArgs, keyspace_of};
use crate::target::StoreJob;
use crate::{rw_inspect, sem_inspect};

/// How many times a legacy unlock retries after the key changed under its `WATCH`.
const WATCH_ATTEMPTS: usize = 8;

/// Which kind of lock to unlock.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kind {
    /// The expire lock, `<prefix>{name}`.
    Expire,
    /// A reader/writer lock, `<prefix>{name}:w`, `:r`, `:wi`, and its fair writers' queue,
    /// `:wq`, `:ww`.
    Rw,
    /// A semaphore, `<prefix>{name}:sem` and its other keys.
    Sem,
    /// A legacy key, exactly as named.
    Legacy,
    /// A token lock (redis-py, node redlock, redis-semaphore, a `TokenLock`), exactly as named.
    Token,
}

/// What `unlock --force` did: printed as text, or as JSON with `--json`.
#[derive(Debug, Clone, Serialize)]
pub struct UnlockReport {
    /// The lock name (the key itself for a legacy lock).
    pub name: String,
    /// The kind unlocked.
    pub kind: Kind,
    /// `deleted`, `not-held`, or `refused` (a key holds data that is not a lock; nothing
    /// deleted).
    pub outcome: String,
    /// The keys the lock lives in.
    pub keys: Vec<String>,
    /// Reader/writer locks: whether a writer's lease was deleted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub writer: Option<bool>,
    /// Reader/writer locks: how many live readers were removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub readers: Option<usize>,
    /// Reader/writer locks: whether a waiting writer's intent was removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub intent: Option<bool>,
    /// Reader/writer locks: how many places in the fair writers' queue were cleared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queued: Option<usize>,
    /// Semaphores: how many holders' permits were given back.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub holders: Option<usize>,
    /// Why it was refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl UnlockReport {
    fn new(name: &str, kind: Kind, keys: Vec<String>) -> Self {
        UnlockReport {
            name: name.to_owned(),
            kind,
            outcome: "not-held".to_owned(),
            keys,
            writer: None,
            readers: None,
            intent: None,
            queued: None,
            holders: None,
            reason: None,
        }
    }

    fn refused(mut self, reason: String) -> Self {
        self.outcome = "refused".to_owned();
        self.reason = Some(reason);
        self
    }

    fn deleted_if(mut self, deleted: bool) -> Self {
        if deleted {
            self.outcome = "deleted".to_owned();
        }
        self
    }

    /// The exit code: [`Exit::Refused`] for a refusal, else [`Exit::Ok`].
    pub fn exit(&self) -> Exit {
        if self.outcome == "refused" {
            Exit::Refused
        } else {
            Exit::Ok
        }
    }

    /// One human-readable line.
    pub fn text(&self) -> String {
        let what = match self.kind {
            Kind::Expire => "the lock",
            Kind::Rw => "the reader/writer lock",
            Kind::Sem => "the semaphore",
            Kind::Legacy => "the legacy lock",
            Kind::Token => "the token lock",
        };
        match self.outcome.as_str() {
            "refused" => format!(
                "refusing to delete {what} {}: {}",
                self.name,
                self.reason.as_deref().unwrap_or("not one of our locks")
            ),
            "deleted" if self.kind == Kind::Rw => format!(
                "deleted {what} {}: writer {}, {} reader(s), intent {}, {} queued writer(s)",
                self.name,
                if self.writer == Some(true) {
                    "removed"
                } else {
                    "none"
                },
                self.readers.unwrap_or(0),
                if self.intent == Some(true) {
                    "removed"
                } else {
                    "none"
                },
                self.queued.unwrap_or(0),
            ),
            "deleted" if self.kind == Kind::Sem => format!(
                "released {what} {}: {} holder(s)",
                self.name,
                self.holders.unwrap_or(0)
            ),
            "deleted" => format!("deleted {what} {}", self.name),
            _ => format!("{what} {} is not held", self.name),
        }
    }
}

/// Force-unlock the expire lock `name`.
///
/// # Errors
///
/// Store errors (a refusal is a report, not an error). When no reply came, the lock may or may
/// not have been deleted: look with `tairlock inspect` before forcing again.
///
/// # Cancel safety
///
/// One script: dropped before it was sent, nothing happened; after, it may have run.
pub async fn expire<S: Store>(
    store: S,
    keyspace: Keyspace,
    name: &str,
) -> tairlock::Result<UnlockReport> {
    let locks = ExpireLock::with_options(store, Options::default().keyspace(keyspace));
    let report = UnlockReport::new(name, Kind::Expire, vec![locks.keys(name)?.lock]);
    match locks.force_unlock(name).await {
        Ok(deleted) => Ok(report.deleted_if(deleted)),
        Err(e) if e.is_wrong_type() => Ok(report.refused(e.to_string())),
        Err(e) => Err(e),
    }
}

/// Unlock the expire lock `name` only if `lease` still holds it: compare-and-delete of exactly
/// that lease, announced to waiters like any release.
///
/// # Errors
///
/// Store errors (a lock held by another lease is a refusal, not an error).
///
/// # Cancel safety
///
/// One script, as [`expire`].
pub async fn expire_if<S: Store>(
    store: S,
    keyspace: Keyspace,
    name: &str,
    lease: &Lease,
) -> tairlock::Result<UnlockReport> {
    let locks = ExpireLock::with_options(store, Options::default().keyspace(keyspace));
    let report = UnlockReport::new(name, Kind::Expire, vec![locks.keys(name)?.lock]);
    match locks.expire_unlock(name, lease).await {
        Ok(Unlock::Released) => Ok(report.deleted_if(true)),
        Ok(Unlock::HeldByOther) => Ok(report.refused(format!(
            "another lease holds it now, not {}: it was taken or renewed since; nothing deleted",
            lease.value()
        ))),
        Ok(_) => Ok(report),
        Err(e) if e.is_wrong_type() => Ok(report.refused(e.to_string())),
        Err(e) => Err(e),
    }
}

/// Force-unlock the reader/writer lock `name`: its writer, every live reader, a waiting
/// writer's intent and every place in the fair writers' queue, as one snapshot saw them.
///
/// # Errors
///
/// Store errors; the holds released before the error stay released, and a repeat releases the
/// rest.
///
/// # Cancel safety
///
/// Each hold is released by one script: dropped midway, some holds are released and the rest
/// are not; a repeat finishes the job.
pub async fn rw<S: Store>(
    store: S,
    keyspace: Keyspace,
    name: &str,
) -> tairlock::Result<UnlockReport> {
    let locks = RwLock::with_options(
        store,
        tairlock_rwlock::Options::default().keyspace(keyspace),
    );
    let keys = locks.keys(name)?;
    let report = UnlockReport::new(
        name,
        Kind::Rw,
        vec![
            keys.writer.clone(),
            keys.readers.clone(),
            keys.intent.clone(),
            keys.queue.clone(),
            keys.waiters.clone(),
        ],
    );
    let refuse = |e: tairlock::Error, report: UnlockReport| {
        if e.is_wrong_type() {
            Ok(report.refused(e.to_string()))
        } else {
            Err(e)
        }
    };
    let (mut writer, mut readers, mut intent, mut queued) = (false, 0, false, 0);
    let seen = locks.inspect(name).await?;
    if !seen.foreign.is_empty() {
        let foreign: Vec<String> = seen
            .foreign
            .iter()
            .map(|(key, kind)| format!("{key} holds a {kind} that is not ours"))
            .collect();
        return Ok(report.refused(foreign.join("; ")));
    }
    // Every write hold the snapshot saw has a fencing token no larger than the last one issued
    // by then; one taken since has a larger one, and is left alone, even when its writer holds
    // it under the nonce of an intent or a place the snapshot saw (a fair writer that got in).
    let seen_writer = seen.writer.as_ref().map(tairlock::Lease::fence);
    let last_fence = seen.last_fence.max(seen_writer).unwrap_or(0);
    // The intent first: once the readers are gone, a waiting writer takes the lock with the
    // nonce of its intent (a writer still waiting announces its intent again).
    if let Some(waiting) = &seen.intent {
        match locks
            .write_abandon_as_of(name, &waiting.nonce, last_fence)
            .await
        {
            Ok(n) => intent |= n > 0,
            Err(e) => return refuse(e, report),
        }
    }
    // Then the fair writers' queue, last place first: each leaves as its writer would
    // (withdrawing an intent naming it); a place whose waiter lease ran out goes too.
    for place in seen.queue.iter().rev() {
        match locks
            .fair_write_leave_as_of(name, &place.nonce, last_fence)
            .await
        {
            Ok(_) => queued += 1,
            Err(e) => return refuse(e, report),
        }
    }
    // The writer's lease rotates with each renewal (its fencing token stays): one that renewed
    // between the snapshot and its release is looked at again; a writer with another token is
    // a new one.
    let mut lease = seen.writer.clone();
    for _ in 0..WATCH_ATTEMPTS {
        let Some(current) = lease.take() else { break };
        match locks.write_release(name, &current).await {
            Ok(tairlock::Unlock::Released) => writer = true,
            Ok(tairlock::Unlock::HeldByOther) => {
                lease = locks
                    .inspect(name)
                    .await?
                    .writer
                    .filter(|again| again.fence() == current.fence());
            }
            Ok(_) => {}
            Err(e) => return refuse(e, report),
        }
    }
    for reader in &seen.readers {
        match locks.read_release(name, &reader.nonce).await {
            Ok(true) => readers += 1,
            Ok(false) => {}
            Err(e) => return refuse(e, report),
        }
    }
    let mut report = report.deleted_if(writer || readers > 0 || intent || queued > 0);
    report.writer = Some(writer);
    report.readers = Some(readers);
    report.intent = Some(intent);
    report.queued = Some(queued);
    Ok(report)
}

/// Force-release the semaphore `name`: give back the permits of every holder one snapshot saw,
/// each by its nonce (a holder admitted since is left alone). The holders are not told; each
/// finds its permits gone at its next renewal.
///
/// # Errors
///
/// Store errors; the holders released before the error stay released, and a repeat releases
/// the rest.
///
/// # Cancel safety
///
/// Each holder is released by one script: dropped midway, some are released and the rest are
/// not; a repeat finishes the job.
pub async fn sem<S: Store>(
    store: S,
    keyspace: Keyspace,
    name: &str,
) -> tairlock::Result<UnlockReport> {
    // Giving back by nonce counts against no limit.
    let sem = Semaphore::with_options(store, 1, SemaphoreOptions::default().keyspace(keyspace));
    let keys = sem.keys(name)?;
    let report = UnlockReport::new(
        name,
        Kind::Sem,
        vec![keys.holders, keys.holdings, keys.fence, keys.limit],
    );
    let seen = sem.inspect(name).await?;
    if seen.foreign {
        return Ok(report.refused("a key of the semaphore holds data that is not ours".into()));
    }
    let mut released = 0;
    for holder in &seen.holders {
        match sem.force_release(name, &holder.nonce).await {
            Ok(true) => released += 1,
            Ok(false) => {}
            Err(e) if e.is_wrong_type() => return Ok(report.refused(e.to_string())),
            Err(e) => return Err(e),
        }
    }
    let mut report = report.deleted_if(released > 0);
    report.holders = Some(released);
    Ok(report)
}

/// Force-unlock the token lock at `key` (exactly as named), whoever holds it: delete it by
/// compare-and-delete of the token it holds ([`TokenLock::force_unlock`]) — with `expected`,
/// only if that token is `expected`. Another holder's token taken in between is never deleted.
/// The fence key stays, so fencing tokens keep increasing.
///
/// # Errors
///
/// Store errors (a key of another type, or a token other than `expected`, is a refusal).
///
/// # Cancel safety
///
/// Each delete is one compare-and-delete: dropped midway, the key is deleted or untouched.
pub async fn token<S: Store>(
    store: S,
    key: &str,
    expected: Option<&str>,
) -> tairlock::Result<UnlockReport> {
    let locks = TokenLock::new(store);
    let report = UnlockReport::new(key, Kind::Token, vec![locks.keys(key)?.lock]);
    let outcome = match expected {
        Some(token) => locks.release(key, token).await.map(|unlock| match unlock {
            Unlock::Released => report.deleted_if(true),
            Unlock::HeldByOther => report.refused(format!(
                "another token holds it now, not {token}: it was taken since; nothing deleted"
            )),
            Unlock::NotHeld => report,
        }),
        None => locks.force_unlock(key).await.map(|d| report.deleted_if(d)),
    };
    match outcome {
        Err(e) if e.is_wrong_type() => {
            Ok(UnlockReport::new(key, Kind::Token, vec![key.to_owned()]).refused(e.to_string()))
        }
        other => other,
    }
}

/// Whether `value` reads as a legacy lock's timestamp: a Unix time, in seconds or in
/// milliseconds, from 2000 to ten years from now. A bare integer is all the format has, so
/// this is what tells a lock from a user's counter (`123` is refused; a counter that happens to
/// hold a present-day Unix time is not told apart).
pub fn plausible_timestamp(value: u64) -> bool {
    const Y2K: u64 = 946_684_800;
    const TEN_YEARS: u64 = 10 * 366 * 86_400;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let seconds = Y2K..=now + TEN_YEARS;
    let millis = Y2K * 1000..=(now + TEN_YEARS) * 1000;
    seconds.contains(&value) || millis.contains(&value)
}

/// Force-unlock the legacy lock at `key` (exactly as named): delete it if it holds a legacy
/// timestamp, whoever wrote it — with `expected`, only if it holds exactly that value. The
/// fence key stays, so fencing tokens keep increasing.
///
/// # Errors
///
/// Store errors; [`ErrorKind::Server`] when the key kept changing under `WATCH`.
///
/// # Cancel safety
///
/// The delete is one `MULTI`/`EXEC`: dropped midway, the key is deleted or untouched.
pub async fn legacy<S: WatchStore>(
    store: S,
    key: &str,
    expected: Option<&str>,
) -> tairlock::Result<UnlockReport> {
    let report = UnlockReport::new(key, Kind::Legacy, vec![key.to_owned()]);
    if key.is_empty() {
        return Err(tairlock::Error::new(
            ErrorKind::InvalidInput,
            "lock key is empty",
        ));
    }
    let keys = [key.to_owned()];
    let mut con = store.watch_connection().await?;
    for _ in 0..WATCH_ATTEMPTS {
        let read = match con.watch(&keys, &[Read::Get(key.to_owned())]).await {
            Ok(replies) => replies.into_iter().next().unwrap_or(Reply::Nil),
            Err(e) if e.is_wrong_type() => {
                let _ = con.unwatch().await;
                return Ok(report.refused(format!("the key holds a non-string value ({e})")));
            }
            Err(e) => return Err(e),
        };
        let value = match read {
            Reply::Nil => {
                con.unwatch().await?;
                return Ok(report);
            }
            Reply::Data(raw) => raw,
            other => {
                con.unwatch().await?;
                return Err(tairlock::Error::new(
                    ErrorKind::Server,
                    format!("unexpected reply to GET {key}: {other:?}"),
                ));
            }
        };
        if !parse_value(&value).is_some_and(plausible_timestamp) {
            con.unwatch().await?;
            return Ok(report.refused(format!(
                "the key holds {:?}, not a legacy lock timestamp (a Unix time in seconds or \
                 milliseconds since 2000)",
                String::from_utf8_lossy(&value)
            )));
        }
        if let Some(expected) = expected
            && expected.as_bytes() != value.as_slice()
        {
            con.unwatch().await?;
            return Ok(report.refused(format!(
                "the key holds {:?} now, not {expected:?}: the lock was taken or renewed since; \
                 nothing deleted",
                String::from_utf8_lossy(&value)
            )));
        }
        if con
            .exec(&[TxOp::Del {
                key: key.to_owned(),
            }])
            .await?
            .is_some()
        {
            return Ok(report.deleted_if(true));
        }
    }
    Err(tairlock::Error::new(
        ErrorKind::Server,
        format!("{key} kept changing while it was being deleted; try again"),
    ))
}

/// `tairlock unlock`'s flags.
#[derive(Args, Debug)]
pub struct UnlockArgs {
    /// Required: this deletes someone else's lock.
    #[arg(long)]
    force: bool,
    #[command(flatten)]
    key: KeyArgs,
    /// Unlock a reader/writer lock: its writer, every live reader, a waiting writer's intent and
    /// the fair writers' queue (detected automatically when its keys exist).
    #[arg(long, conflicts_with = "legacy")]
    rw: bool,
    /// Unlock a semaphore: give back every holder's permits (detected automatically when its
    /// holders key exists and no lock key does).
    #[arg(long, conflicts_with_all = ["legacy", "rw"])]
    sem: bool,
    /// Unlock a legacy SETNX/GETSET lock: KEY exactly as the old code names it, deleted if it
    /// holds a bare timestamp.
    #[arg(long)]
    legacy: bool,
    /// Unlock a token lock (redis-py's Lock, node redlock, redis-semaphore's mutex, redsync,
    /// tairlock's TokenLock): KEY exactly as that library names it, deleted by compare-and-delete
    /// of the token it holds, whoever's it is.
    #[arg(long, conflicts_with_all = ["rw", "sem", "legacy", "prefix"])]
    token: bool,
    /// Only if the lock still holds exactly VALUE: an expire lock's lease (tl1:…), a legacy
    /// key's timestamp or a token lock's token, as `tairlock inspect` or `tairlock scan
    /// --stuck` showed it. A lock taken or renewed since holds another value and is refused
    /// (exit 5), not deleted.
    #[arg(long, value_name = "VALUE", conflicts_with = "rw")]
    if_value: Option<String>,
}

/// `tairlock unlock --force`, on a connected store.
struct UnlockJob {
    /// `(keyspace, name)`, or `None` for a legacy key or a token lock.
    keyspace: Option<Keyspace>,
    name: String,
    rw: bool,
    /// A token lock at `name`, exactly as named.
    token: bool,
    /// `--if-value`: a legacy key's timestamp, the expire lock's lease, or a token lock's token.
    if_value: Option<String>,
    sem: bool,
}

impl StoreJob for UnlockJob {
    type Output = UnlockReport;

    async fn run<S: WatchStore>(self, store: S) -> tairlock::Result<UnlockReport> {
        if self.token {
            return token(store, &self.name, self.if_value.as_deref()).await;
        }
        let Some(keyspace) = self.keyspace else {
            return legacy(store, &self.name, self.if_value.as_deref()).await;
        };
        if let Some(lease) = self.if_value.as_deref().and_then(Lease::parse) {
            return expire_if(store, keyspace, &self.name, &lease).await;
        }
        if self.sem || (!self.rw && sem_inspect::detect(&store, &keyspace, &self.name).await?) {
            sem(store, keyspace, &self.name).await
        } else if self.rw || rw_inspect::detect(&store, &keyspace, &self.name).await? {
            rw(store, keyspace, &self.name).await
        } else {
            expire(store, keyspace, &self.name).await
        }
    }
}

/// Run `tairlock unlock --force`: the report (or JSON) on stdout, a refusal on stderr.
pub fn command(args: UnlockArgs) -> ExitCode {
    let UnlockArgs {
        force,
        key,
        rw,
        sem,
        legacy,
        token,
        if_value,
    } = args;
    if !force {
        return usage("unlock deletes a lock whoever holds it; pass --force to confirm");
    }
    let target = match key.target() {
        Ok(target) => target,
        Err(e) => return usage(e),
    };
    let job = if token {
        if key.key.is_empty() {
            return usage("the lock key is empty");
        }
        if if_value.as_deref().is_some_and(str::is_empty) {
            return usage("--if-value of a token lock is its token, as inspect shows it");
        }
        UnlockJob {
            keyspace: None,
            name: key.key.clone(),
            rw: false,
            token: true,
            if_value,
            sem: false,
        }
    } else if legacy {
        if key.key.is_empty() {
            return usage("the lock key is empty");
        }
        if if_value
            .as_deref()
            .is_some_and(|v| parse_value(v.as_bytes()).is_none())
        {
            return usage(
                "--if-value of a legacy lock is its timestamp: a decimal integer, as inspect shows it",
            );
        }
        UnlockJob {
            keyspace: None,
            name: key.key.clone(),
            rw: false,
            token: false,
            if_value,
            sem: false,
        }
    } else {
        let named_sem = sem_inspect::split_key(&key.key);
        let (prefix, name, named_rw) = match &named_sem {
            Some((prefix, name)) => (prefix.clone(), name.clone(), false),
            None => rw_inspect::split_key(&key.key, &key.prefix),
        };
        if (named_rw || rw) && if_value.is_some() {
            return usage(
                "--if-value names an expire lock's lease, a legacy timestamp or a token, not a reader/writer lock",
            );
        }
        if (named_sem.is_some() || sem) && if_value.is_some() {
            return usage(
                "--if-value names an expire lock's lease, a legacy timestamp or a token, not a semaphore",
            );
        }
        if if_value
            .as_deref()
            .is_some_and(|v| Lease::parse(v).is_none())
        {
            return usage(
                "--if-value of an expire lock is its lease (tl1:<expiry ms>:<fence>:<nonce>), as \
                 inspect shows it; for a legacy key add --legacy",
            );
        }
        match keyspace_of(prefix, &name) {
            Ok(keyspace) => UnlockJob {
                keyspace: Some(keyspace),
                name,
                rw: rw || named_rw,
                token: false,
                if_value,
                sem: sem || named_sem.is_some(),
            },
            Err(e) => return usage(e),
        }
    };
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    match rt.block_on(target.on(job)) {
        Ok(report) => {
            if key.json {
                println!(
                    "{}",
                    serde_json::to_string_pretty(&report).expect("serialise")
                );
            } else if report.exit() == Exit::Refused {
                eprintln!("tairlock: {}", report.text());
            } else {
                println!("{}", report.text());
            }
            report.exit().into()
        }
        Err(e) => {
            eprintln!("tairlock: {e}");
            Exit::Store.into()
        }
    }
}
