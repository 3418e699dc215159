//! Capability detection: probe a server and pick the strongest lock it supports.
//!
//! | probe | how | tells |
//! |---|---|---|
//! | scripting | run [`scripts::PROBE`](crate::scripts::PROBE) (`EVALSHA`, `SCRIPT LOAD` on `NOSCRIPT`) | Lua works: `EVAL`/`EVALSHA`/`SCRIPT` exist and are allowed |
//! | a write after `TIME` in a script | run [`scripts::PROBE_WRITE`](crate::scripts::PROBE_WRITE): `TIME`, then `SET … PX` and `DEL` of a scratch key | the acquire script can run: a server that replicates scripts verbatim (Redis before 5) refuses a write after a non-deterministic command |
//! | `WATCH` | `WATCH` and `UNWATCH` on a dedicated connection | optimistic transactions work |
//! | version | `INFO server` (`redis_version`), when allowed | `SET … PX`/`XX` (2.6.12) for the [`Modern`](Profile::Modern) WATCH profile |
//! | `TIME` | `TIME` | server time for the [`Modern`](Profile::Modern) profile (2.6) |
//!
//! Strategy, strongest first: [`ScriptedLock`] if scripts run and may write after `TIME`, else
//! [`WatchLock`] if `WATCH` works (Modern when the server is ≥ 2.6.12 — or its version is hidden — and has `TIME`,
//! Classic otherwise), else [`GetSetLock`]. Probing commands rather than trusting the version
//! matters: a 7.x server started with `--rename-command EVAL ""` (and `EVALSHA`, `SCRIPT`,
//! `FUNCTION`, `FCALL`) reports a version with scripting yet cannot run a script.
//!
//! The write-after-`TIME` probe decides when it answers either way; a refusal for another reason
//! (an ACL without the scratch key, `OOM`, a read-only replica) leaves it to the version: Redis 5
//! and later replicate script effects by default, so the scripts run there.
//!
//! | scripts run | write after `TIME` | `WATCH` works | picks |
//! |---|---|---|---|
//! | yes | yes | any | [`ScriptedLock`] |
//! | yes | no (Redis < 5) | yes | [`WatchLock`] |
//! | yes | no | no | [`GetSetLock`] |
//! | no | — | yes | [`WatchLock`] |
//! | no | — | no | [`GetSetLock`] |
//!
//! Every client of one server sees the same answer, so clients that detect pick the same kind.
//! Clients that share keys must agree on the [`Unit`](crate::Unit) as well.

use std::time::Duration;

use tairlock::{ErrorKind, Result};

use crate::getset::GetSetLock;
use crate::options::{Holding, Options, Release, Renew, TryAcquire};
use crate::scripted::ScriptedLock;
use crate::scripts::{PROBE, PROBE_WRITE};
use crate::watch::{Profile, WatchConnection, WatchLock, WatchStore};

/// What a server supports, as probed by [`probe`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Lua scripts run.
    pub scripting: bool,
    /// A script may write after reading `TIME` (effects replication: Redis 5 and later, or
    /// the embedded store), as the acquire and renew scripts do.
    pub script_writes_after_time: bool,
    /// `WATCH`/`UNWATCH` work.
    pub watch: bool,
    /// `TIME` works (Redis ≥ 2.6).
    pub time: bool,
    /// `redis_version`, when `INFO` answered (`None` on the embedded store).
    pub version: Option<String>,
}

/// The kind of lock [`Capabilities::strongest`] picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// [`ScriptedLock`]: the server runs scripts.
    Scripted,
    /// [`WatchLock`] with this profile: no scripts, but `WATCH`.
    Watch(Profile),
    /// [`GetSetLock`]: neither.
    GetSet,
}

impl Strategy {
    /// `scripted`, `watch` or `getset`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Scripted => "scripted",
            Strategy::Watch(_) => "watch",
            Strategy::GetSet => "getset",
        }
    }
}

impl Capabilities {
    /// The strongest strategy: Scripted > Watch > GetSet (the table in the
    /// [module docs](self)).
    pub fn strongest(&self) -> Strategy {
        if self.scripting && self.script_writes_after_time {
            Strategy::Scripted
        } else if self.watch {
            let modern = self.time
                && self
                    .version
                    .as_deref()
                    .and_then(parse_version)
                    .is_none_or(|v| v >= (2, 6, 12));
            Strategy::Watch(if modern {
                Profile::Modern
            } else {
                Profile::Classic
            })
        } else {
            Strategy::GetSet
        }
    }
}

/// `"7.0.15"` → `(7, 0, 15)`.
fn parse_version(v: &str) -> Option<(u32, u32, u32)> {
    let mut parts = v.trim().split('.').map(|p| p.parse::<u32>().ok());
    Some((
        parts.next()??,
        parts.next()??,
        parts.next().flatten().unwrap_or(0),
    ))
}

/// A failure that means "the server refuses this command", not "the server is unreachable".
fn refused(e: &tairlock::Error) -> bool {
    !e.is_unanswered()
}

/// Whether the server refused a script's write because it came after a non-deterministic
/// command (`TIME`): verbatim script replication, Redis before 5.
fn refused_after_time(e: &tairlock::Error) -> bool {
    let message = e.message().to_ascii_lowercase();
    message.contains("non deterministic") || message.contains("non-deterministic")
}

/// Whether a server of `version` replicates script effects by default (Redis 5+), so a script
/// may write after `TIME`; an unknown version is taken for a modern server.
fn effects_replication(version: Option<&str>) -> bool {
    version
        .and_then(parse_version)
        .is_none_or(|v| v >= (5, 0, 0))
}

/// The scratch key the write probe writes (for one second at most) and deletes.
const PROBE_KEY: &str = "tairlock-legacy:probe";

/// Probe `store`'s server; see the [module docs](self).
///
/// # Errors
///
/// Connection errors (a refused command is an answer, not an error).
pub async fn probe<S: WatchStore>(store: &S) -> Result<Capabilities> {
    let scripting = match store.eval(&PROBE, &[], &[]).await {
        Ok(reply) => reply.as_int() == Some(1),
        Err(e) if refused(&e) => false,
        Err(e) => return Err(e),
    };
    let time = match store.time().await {
        Ok(_) => true,
        Err(e) if refused(&e) => false,
        Err(e) => return Err(e),
    };
    let mut con = store.watch_connection().await?;
    let watch = match con.watch(&["tairlock-legacy:probe".to_owned()], &[]).await {
        Ok(_) => match con.unwatch().await {
            Ok(()) => true,
            Err(e) if refused(&e) => false,
            Err(e) => return Err(e),
        },
        Err(e) if refused(&e) => false,
        Err(e) => return Err(e),
    };
    let version = store.server_version().await?;
    let script_writes_after_time = scripting
        && match store.eval(&PROBE_WRITE, &[PROBE_KEY.to_owned()], &[]).await {
            Ok(reply) => reply.as_int() == Some(1),
            Err(e) if refused_after_time(&e) => false,
            // Refused for another reason (an ACL, OOM, a read-only replica): the version tells.
            Err(e) if refused(&e) => effects_replication(version.as_deref()),
            Err(e) => return Err(e),
        };
    Ok(Capabilities {
        scripting,
        script_writes_after_time,
        watch,
        time,
        version,
    })
}

/// The strongest lock a server supports, chosen by [`LegacyLock::detect`]; every operation is
/// forwarded to the kind inside.
#[derive(Debug, Clone)]
pub enum LegacyLock<S: WatchStore> {
    /// Scripts run.
    Scripted(ScriptedLock<S>),
    /// No scripts, `WATCH` works.
    Watch(WatchLock<S>),
    /// Neither.
    GetSet(GetSetLock<S>),
}

impl<S: WatchStore> LegacyLock<S> {
    /// Probe the server and build the strongest lock it supports, with `options` (the Watch
    /// profile is set from the probe).
    ///
    /// # Errors
    ///
    /// As [`probe`].
    ///
    /// # Examples
    ///
    /// ```
    /// use tairlock::MemoryStore;
    /// use tairlock_legacy::{LegacyLock, Options, Strategy};
    ///
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> tairlock::Result<()> {
    /// let lock = LegacyLock::detect(MemoryStore::new(), Options::default()).await?;
    /// assert_eq!(lock.strategy(), Strategy::Scripted);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn detect(store: S, options: Options) -> Result<Self> {
        let strategy = probe(&store).await?.strongest();
        Ok(LegacyLock::with_strategy(store, options, strategy))
    }

    /// Build the lock of `strategy`, without probing.
    pub fn with_strategy(store: S, options: Options, strategy: Strategy) -> Self {
        match strategy {
            Strategy::Scripted => LegacyLock::Scripted(ScriptedLock::with_options(store, options)),
            Strategy::Watch(profile) => {
                LegacyLock::Watch(WatchLock::with_options(store, options.profile(profile)))
            }
            Strategy::GetSet => LegacyLock::GetSet(GetSetLock::with_options(store, options)),
        }
    }

    /// The kind chosen.
    pub fn strategy(&self) -> Strategy {
        match self {
            LegacyLock::Scripted(_) => Strategy::Scripted,
            LegacyLock::Watch(l) => Strategy::Watch(l.options().profile),
            LegacyLock::GetSet(_) => Strategy::GetSet,
        }
    }

    /// The store.
    pub fn store(&self) -> &S {
        match self {
            LegacyLock::Scripted(l) => l.store(),
            LegacyLock::Watch(l) => l.store(),
            LegacyLock::GetSet(l) => l.store(),
        }
    }

    /// One attempt; see each kind's `try_acquire`.
    ///
    /// # Errors
    ///
    /// As the chosen kind's.
    ///
    /// # Cancel safety
    ///
    /// As the chosen kind's: none of them is cancel safe once its write was sent.
    pub async fn try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        match self {
            LegacyLock::Scripted(l) => l.try_acquire(key, lease).await,
            LegacyLock::Watch(l) => l.try_acquire(key, lease).await,
            LegacyLock::GetSet(l) => l.try_acquire(key, lease).await,
        }
    }

    /// Wait for the lock; see each kind's `acquire`.
    ///
    /// # Errors
    ///
    /// As the chosen kind's.
    ///
    /// # Cancel safety
    ///
    /// As [`try_acquire`](Self::try_acquire).
    pub async fn acquire(&self, key: &str, lease: Duration) -> Result<Option<Holding>> {
        match self {
            LegacyLock::Scripted(l) => l.acquire(key, lease).await,
            LegacyLock::Watch(l) => l.acquire(key, lease).await,
            LegacyLock::GetSet(l) => l.acquire(key, lease).await,
        }
    }

    /// Release; see each kind's `release` (the GetSet one deletes any live lock, F4b).
    ///
    /// # Errors
    ///
    /// As the chosen kind's.
    pub async fn release(&self, holding: &Holding) -> Result<Release> {
        match self {
            LegacyLock::Scripted(l) => l.release(holding).await,
            LegacyLock::Watch(l) => l.release(holding).await,
            LegacyLock::GetSet(l) => l.release(holding).await,
        }
    }

    /// Renew; see each kind's `renew`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidInput`] for [`GetSetLock`], which has no renewal (the original
    /// has none, and a `GETSET` cannot extend only one's own lock); otherwise as the chosen
    /// kind's.
    pub async fn renew(&self, holding: &Holding, lease: Duration) -> Result<Renew> {
        match self {
            LegacyLock::Scripted(l) => l.renew(holding, lease).await,
            LegacyLock::Watch(l) => l.renew(holding, lease).await,
            LegacyLock::GetSet(_) => Err(tairlock::Error::new(
                ErrorKind::InvalidInput,
                "GetSetLock cannot renew: the original protocol has no renewal",
            )),
        }
    }
    /// Blocking twin of [`try_acquire`](Self::try_acquire).
    ///
    /// # Errors
    ///
    /// As [`try_acquire`](Self::try_acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_try_acquire(&self, key: &str, lease: Duration) -> Result<TryAcquire> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_try_acquire",
            self.try_acquire(key, lease),
        )
    }

    /// Blocking twin of [`acquire`](Self::acquire).
    ///
    /// # Errors
    ///
    /// As [`acquire`](Self::acquire).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_acquire(&self, key: &str, lease: Duration) -> Result<Option<Holding>> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_acquire",
            self.acquire(key, lease),
        )
    }

    /// Blocking twin of [`release`](Self::release).
    ///
    /// # Errors
    ///
    /// As [`release`](Self::release).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_release(&self, holding: &Holding) -> Result<Release> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_release",
            self.release(holding),
        )
    }

    /// Blocking twin of [`renew`](Self::renew).
    ///
    /// # Errors
    ///
    /// As [`renew`](Self::renew).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_renew(&self, holding: &Holding, lease: Duration) -> Result<Renew> {
        tairlock::blocking::block_on(
            self.store().runtime(),
            "blocking_renew",
            self.renew(holding, lease),
        )
    }
}

impl<S: WatchStore> LegacyLock<S> {
    /// Blocking twin of [`detect`](Self::detect).
    ///
    /// # Errors
    ///
    /// As [`detect`](Self::detect).
    ///
    /// # Panics
    ///
    /// When called from inside an async runtime.
    #[track_caller]
    pub fn blocking_detect(store: S, options: Options) -> Result<Self> {
        let runtime = store.runtime();
        tairlock::blocking::block_on(
            runtime,
            "blocking_detect",
            LegacyLock::detect(store, options),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn caps(scripting: bool, watch: bool, time: bool, version: Option<&str>) -> Capabilities {
        Capabilities {
            scripting,
            script_writes_after_time: scripting,
            watch,
            time,
            version: version.map(str::to_owned),
        }
    }

    #[test]
    fn strongest_prefers_scripts_then_watch_then_getset() {
        assert_eq!(
            caps(true, true, true, Some("7.0.15")).strongest(),
            Strategy::Scripted
        );
        assert_eq!(
            caps(false, true, true, Some("7.0.15")).strongest(),
            Strategy::Watch(Profile::Modern)
        );
        assert_eq!(
            caps(false, true, true, None).strongest(),
            Strategy::Watch(Profile::Modern)
        );
        assert_eq!(
            caps(false, true, true, Some("2.6.0")).strongest(),
            Strategy::Watch(Profile::Classic)
        );
        assert_eq!(
            caps(false, true, false, Some("2.4.18")).strongest(),
            Strategy::Watch(Profile::Classic)
        );
        assert_eq!(
            caps(false, false, false, Some("2.0.0")).strongest(),
            Strategy::GetSet
        );
    }

    /// The table in the module docs, row by row.
    #[test]
    fn a_server_that_refuses_a_write_after_time_gets_no_scripted_lock() {
        let table = [
            // (scripting, writes after TIME, watch, expected)
            (true, true, true, Strategy::Scripted),
            (true, true, false, Strategy::Scripted),
            (true, false, true, Strategy::Watch(Profile::Modern)),
            (true, false, false, Strategy::GetSet),
            (false, false, true, Strategy::Watch(Profile::Modern)),
            (false, false, false, Strategy::GetSet),
        ];
        for (scripting, writes, watch, expected) in table {
            let caps = Capabilities {
                scripting,
                script_writes_after_time: writes,
                watch,
                time: true,
                version: Some("4.0.14".to_owned()),
            };
            assert_eq!(caps.strongest(), expected, "{caps:?}");
        }
    }

    #[test]
    fn the_refusal_of_a_write_after_time_is_recognised() {
        let redis4 = tairlock::Error::new(
            ErrorKind::Server,
            "ERR Error running script (call to f_0123): @user_script:6: @user_script: 6: Write \
             commands not allowed after non deterministic commands. Call \
             redis.replicate_commands() at the start of your script in order to switch to \
             single commands replication mode.",
        );
        assert!(refused_after_time(&redis4));
        let oom = tairlock::Error::new(
            ErrorKind::Server,
            "OOM command not allowed when used memory > 'maxmemory'.",
        );
        assert!(!refused_after_time(&oom));
    }

    #[test]
    fn other_refusals_of_the_write_probe_leave_it_to_the_version() {
        assert!(effects_replication(Some("7.0.15")));
        assert!(effects_replication(Some("5.0.0")));
        assert!(!effects_replication(Some("4.0.14")));
        assert!(!effects_replication(Some("3.2.12")));
        assert!(effects_replication(None));
    }

    #[test]
    fn versions_parse_leniently() {
        assert_eq!(parse_version("7.0.15"), Some((7, 0, 15)));
        assert_eq!(parse_version("2.6"), Some((2, 6, 0)));
        assert_eq!(parse_version("x"), None);
    }
}
