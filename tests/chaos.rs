//! Chaos: K clients contend on a few locks through the fault-injection proxy while a nemesis
//! injects faults, and the history is checked at the end (issue 12, item 11).
//!
//! - Clients: each with its own store (its own connections) through one [`Proxy`] in front of
//!   one `redis-server`. Each picks, at random, one of: the expire lock `exp` (a [`LockGuard`]
//!   with its watchdog), the write or a read side of the RwLock `rw` (watchdog guards), or the
//!   legacy [`ScriptedLock`] `legacy.lock` (no watchdog: held less than its lease). Each waits
//!   with a random patience, holds for a random time (watchdog holds sometimes longer than the
//!   lease), and every critical section writes to a fenced resource (one per lock: it accepts a
//!   token no lower than the highest it accepted, and refuses the rest).
//! - Nemesis: every few hundred ms one fault from the proxy (latency, dropped replies, resets,
//!   black holes, stalled new connections, an acquire-reply outage: every reply to an acquire
//!   script dropped, though the server ran it, for longer than the retries, then healed, so
//!   waiting calls repeat their attempts with the same nonce) or the server (`DEBUG SLEEP`,
//!   `CLIENT KILL TYPE normal`, `CLIENT PAUSE`), and one server restart (no persistence: every
//!   lock is erased).
//! - A monitor polls the locks' keys directly (not through the proxy) every 50 ms.
//!
//! Checked at the end, and printed as a table:
//!
//! 1. overlap: no two holds of a lock overlap (a write with anything) while each holder still
//!    believed its lease valid (the interval from its grant to its last validity check before
//!    a write). An overlap that starts after a restart erased the earlier lease is not a
//!    violation (the lease was not valid by server time); it is counted apart.
//! 2. stale writes accepted: a write the resource accepted although a hold with a higher token
//!    had been granted before it (restart-erased leases counted apart, as above).
//! 3. orphans: a hold's lease still on the server one lease (plus slack for pauses) after its
//!    holder released it or gave it up.
//! 4. patience: an acquisition that returned later than its patience plus one response timeout
//!    plus slack.
//! 5. false loss: a watchdog guard that reported its lease lost while its local deadline (of
//!    the last acknowledged grant or renewal) was still ahead and the server still held the
//!    lease: neither a definite answer nor the deadline made it lost.
//! 6. late deadlines: at every grant and renewal a client accepts, its local deadline must not
//!    be later than the end of that lease on the server. Each client's store is audited
//!    ([`support::deadline_audit`]): right after the server answers a grant or a renewal, the
//!    audit reads the lease on a direct connection and bounds its end from above on the local
//!    clock; the client holds its guard's deadline against that bound at the grant and at every
//!    check while it holds (each follows the last renewal). A restart between the read and the
//!    check excuses it (the lease was erased, not misdated).
//!
//! `TAIRLOCK_CHAOS_SECS` (default 30) and `TAIRLOCK_CHAOS_SEED` (default 12) choose the run; a
//! failure prints the seed and the event log.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use support::RedisServer;
use support::deadline_audit::{Audited, DeadlineAudit};
use support::proxy::{Proxy, Which};
use tairlock::store::redis::RedisOptions;
use tairlock::{ExpireLock, Options, RedisStore, Script};
use tairlock_legacy::{ScriptedLock, Unit};
use tairlock_rwlock::RwLock;

/// The watchdog lease of the expire lock and the RwLock, and the legacy lock's lease.
const LEASE: Duration = Duration::from_millis(2000);
const CLIENTS: usize = 6;
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);
/// Beyond patience + one response timeout: scheduling on a loaded 2-core machine.
const PATIENCE_SLACK: Duration = Duration::from_millis(1000);
/// Beyond one lease for an orphan: the longest server pause the nemesis makes, plus polling.
const ORPHAN_SLACK: Duration = Duration::from_millis(2500);
/// A guard that reports its lease lost with more than this left before its local deadline,
/// while the server still holds the lease, reported a false loss.
const FALSE_LOSS_MARGIN: Duration = Duration::from_millis(100);
/// The scripts that grant a lock, whose replies an acquire-reply outage drops.
static ACQUIRES: [&Script; 4] = [
    &tairlock::scripts::EXPIRE_LOCK,
    &tairlock_rwlock::scripts::READ_ACQUIRE,
    &tairlock_rwlock::scripts::WRITE_ACQUIRE,
    &tairlock_legacy::scripts::ACQUIRE,
];
const EXP: &str = "exp";
const RW: &str = "rw";
const LEGACY: &str = "legacy.lock";

fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// `tl1:<expiry ms>:<fence>:<nonce>`: the expiry and the fence.
fn lease_parts(value: &str) -> Option<(u64, u64)> {
    let mut parts = value.strip_prefix("tl1:")?.splitn(3, ':');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    Exp,
    RwWrite,
    RwRead,
    Legacy,
}

impl Kind {
    fn lock(self) -> &'static str {
        match self {
            Kind::Exp => EXP,
            Kind::RwWrite | Kind::RwRead => RW,
            Kind::Legacy => LEGACY,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Kind::Exp => "expire lock",
            Kind::RwWrite => "rwlock write",
            Kind::RwRead => "rwlock read",
            Kind::Legacy => "legacy scripted",
        }
    }
}

/// One hold, from grant to end.
#[derive(Debug, Clone)]
struct Hold {
    id: usize,
    client: usize,
    kind: Kind,
    /// The fencing token (`None` for a read).
    token: Option<u64>,
    /// How the monitor recognises it: the fence (expire/rw write), the reader nonce, or the
    /// legacy `value/fence`.
    mark: String,
    start: Instant,
    /// The last time the holder checked that its lease was valid (and then wrote).
    last_valid: Instant,
    /// When the holder released it or gave it up.
    ended: Option<Instant>,
    how: &'static str,
}

/// A write to a fenced resource.
#[derive(Debug, Clone)]
struct Write {
    hold: usize,
    lock: &'static str,
    token: u64,
    at: Instant,
    accepted: bool,
}

#[derive(Debug, Default)]
struct Log {
    events: Vec<(Instant, String)>,
    holds: Vec<Hold>,
    writes: Vec<Write>,
    /// (lock, max accepted token)
    resources: BTreeMap<&'static str, u64>,
    restarts: Vec<Instant>,
    faults: BTreeMap<&'static str, u64>,
    acquired: BTreeMap<Kind, u64>,
    timeouts: u64,
    errors: u64,
    patience_violations: Vec<String>,
    false_losses: Vec<String>,
    late_deadlines: Vec<String>,
    /// Monitor polls: time, lock, the marks of the holds the server holds.
    polls: Vec<(Instant, &'static str, BTreeSet<String>)>,
}

#[derive(Debug, Clone)]
struct Shared(Arc<Mutex<Log>>);

impl Shared {
    fn with<T>(&self, f: impl FnOnce(&mut Log) -> T) -> T {
        f(&mut self.0.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn event(&self, text: String) {
        self.with(|log| log.events.push((Instant::now(), text)));
    }

    fn fault(&self, kind: &'static str) {
        self.with(|log| {
            *log.faults.entry(kind).or_default() += 1;
            log.events
                .push((Instant::now(), format!("nemesis: {kind}")));
        });
    }

    fn begin(&self, client: usize, kind: Kind, token: Option<u64>, mark: String) -> usize {
        self.with(|log| {
            let id = log.holds.len();
            let now = Instant::now();
            log.holds.push(Hold {
                id,
                client,
                kind,
                token,
                mark: mark.clone(),
                start: now,
                last_valid: now,
                ended: None,
                how: "",
            });
            *log.acquired.entry(kind).or_default() += 1;
            log.events.push((
                now,
                format!(
                    "client {client}: {} granted, token {token:?}, mark {mark}",
                    kind.name()
                ),
            ));
            id
        })
    }

    /// The holder just checked its lease valid: write to the lock's fenced resource.
    fn write(&self, hold: usize) {
        self.with(|log| {
            let now = Instant::now();
            let h = &mut log.holds[hold];
            h.last_valid = now;
            let (Some(token), lock) = (h.token, h.kind.lock()) else {
                return; // a read
            };
            let max = log.resources.entry(lock).or_default();
            let accepted = token >= *max;
            if accepted {
                *max = token;
            }
            log.writes.push(Write {
                hold,
                lock,
                token,
                at: now,
                accepted,
            });
        });
    }

    fn end(&self, hold: usize, how: &'static str) {
        self.with(|log| {
            let now = Instant::now();
            let h = &mut log.holds[hold];
            h.ended = Some(now);
            h.how = how;
            let text = format!(
                "client {}: {} hold {hold} ends: {how}",
                h.client,
                h.kind.name()
            );
            log.events.push((now, text));
        });
    }
}

/// A guard of any kind, behind one interface.
enum Guard {
    Exp(tairlock::LockGuard<Audited>),
    Write(tairlock_rwlock::WriteGuard<Audited>),
    /// A read guard, and its reader's nonce (the deadline audit saw the server admit it).
    Read(tairlock_rwlock::ReadGuard<Audited>, Option<String>),
    Legacy(tairlock_legacy::Holding),
}

impl Guard {
    /// Time left before the local deadline of the last acknowledged grant or renewal, for the
    /// watchdog guards that tell it.
    fn deadline_left(&self) -> Option<Duration> {
        match self {
            Guard::Exp(g) => g.lease().remaining(),
            Guard::Write(g) => g.lease().and_then(|l| l.remaining()),
            Guard::Read(..) | Guard::Legacy(_) => None,
        }
    }

    fn valid(&self) -> bool {
        match self {
            Guard::Exp(g) => !g.is_lost(),
            Guard::Write(g) => !g.is_lost(),
            Guard::Read(g, _) => !g.is_lost(),
            Guard::Legacy(h) => tokio::time::Instant::now() < h.deadline(),
        }
    }

    /// The lease as the deadline audit knows it (its value, or a reader's nonce), and the
    /// guard's local deadline for it, read through the guards' public accessors.
    fn audited_deadline(&self) -> Option<(String, tokio::time::Instant)> {
        match self {
            Guard::Exp(g) => {
                let lease = g.lease();
                Some((lease.value().to_owned(), lease.deadline()?))
            }
            Guard::Write(g) => {
                let lease = g.lease()?;
                Some((lease.value().to_owned(), lease.deadline()?))
            }
            Guard::Read(g, nonce) => Some((nonce.clone()?, g.deadline()?)),
            Guard::Legacy(h) => Some((h.value().to_string(), h.deadline())),
        }
    }
}

struct Client {
    id: usize,
    locks: ExpireLock<Audited>,
    rw: RwLock<Audited>,
    legacy_store: Audited,
    audit: DeadlineAudit,
    /// Leases whose late deadline was reported (once each).
    late: BTreeSet<String>,
    direct: RedisStore,
    log: Shared,
    rng: StdRng,
    until: Instant,
}

impl Client {
    async fn run(mut self) {
        while Instant::now() < self.until {
            let kind = match self.rng.random_range(0..4) {
                0 => Kind::Exp,
                1 => Kind::RwWrite,
                2 => Kind::RwRead,
                _ => Kind::Legacy,
            };
            let patience = Duration::from_millis(self.rng.random_range(100..2000));
            let asked = Instant::now();
            let outcome = self.acquire(kind, patience).await;
            let took = asked.elapsed();
            if took > patience + RESPONSE_TIMEOUT + PATIENCE_SLACK {
                let text = format!(
                    "client {}: {} waited {took:?} with a patience of {patience:?} ({})",
                    self.id,
                    kind.name(),
                    match &outcome {
                        Ok(Some(_)) => "acquired".to_owned(),
                        Ok(None) => "timed out".to_owned(),
                        Err(e) => format!("error: {e}"),
                    }
                );
                self.log
                    .with(|log| log.patience_violations.push(text.clone()));
                self.log.event(text);
            }
            match outcome {
                Ok(Some(guard)) => self.hold(kind, guard).await,
                Ok(None) => self.log.with(|log| log.timeouts += 1),
                Err(e) => {
                    self.log.with(|log| log.errors += 1);
                    self.log.event(format!(
                        "client {}: {} acquire error: {e}",
                        self.id,
                        kind.name()
                    ));
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            let pause = self.rng.random_range(0..100);
            tokio::time::sleep(Duration::from_millis(pause)).await;
        }
    }

    async fn acquire(&mut self, kind: Kind, patience: Duration) -> tairlock::Result<Option<Guard>> {
        Ok(match kind {
            Kind::Exp => self
                .locks
                .try_lock_for(EXP, patience)
                .await?
                .map(Guard::Exp),
            Kind::RwWrite => self.rw.try_write_for(RW, patience).await?.map(Guard::Write),
            Kind::RwRead => {
                let _ = self.audit.take_last_reader();
                let guard = self.rw.try_read_for(RW, patience).await?;
                guard.map(|g| Guard::Read(g, self.audit.take_last_reader()))
            }
            Kind::Legacy => {
                let options = tairlock_legacy::Options::default()
                    .unit(Unit::Millis)
                    .poll_interval(Duration::from_millis(50))
                    .acquire_timeout(Some(patience));
                let locks = ScriptedLock::with_options(self.legacy_store.clone(), options);
                locks.acquire(LEGACY, LEASE).await?.map(Guard::Legacy)
            }
        })
    }

    fn mark_of(guard: &Guard) -> (Option<u64>, String) {
        match guard {
            Guard::Exp(g) => (Some(g.fence()), g.fence().to_string()),
            Guard::Write(g) => (Some(g.fence()), g.fence().to_string()),
            // A read guard does not tell its nonce: reads are checked for overlap, and for
            // orphans only at the end (every lock free once everyone stopped).
            Guard::Read(..) => (None, String::new()),
            Guard::Legacy(h) => (
                h.fence(),
                format!("{}/{}", h.value(), h.fence().unwrap_or(0)),
            ),
        }
    }

    async fn hold(&mut self, kind: Kind, guard: Guard) {
        let (token, mark) = Self::mark_of(&guard);
        let hold = self.log.begin(self.id, kind, token, mark.clone());
        let granted = guard.audited_deadline().map(|(_, d)| d);
        self.check_deadline(kind, &guard, granted, hold);
        // The first write at once: a later holder fences off an earlier one from its first write.
        self.log.write(hold);
        let longest = match guard {
            Guard::Legacy(_) => LEASE * 6 / 10,
            _ => LEASE * 2,
        };
        let hold_for = Duration::from_millis(self.rng.random_range(0..longest.as_millis() as u64));
        let until = Instant::now() + hold_for;
        let mut lost = None;
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(self.rng.random_range(20..120))).await;
            if !guard.valid() {
                lost = Some(guard.deadline_left());
                break;
            }
            self.check_deadline(kind, &guard, granted, hold);
            self.log.write(hold);
        }
        if let Some(deadline_left) = lost {
            self.log.end(hold, "reported lost");
            if let Some(left) = deadline_left
                && left > FALSE_LOSS_MARGIN
            {
                self.check_false_loss(kind, &mark, left).await;
            }
        } else {
            self.log.end(hold, "released");
        }
        let released = match guard {
            Guard::Exp(g) => g.release().await.map(|u| format!("{u:?}")),
            Guard::Write(g) => g.release().await.map(|r| format!("{r:?}")),
            Guard::Read(g, _) => g.release().await.map(|r| format!("{r:?}")),
            Guard::Legacy(h) => ScriptedLock::new(self.legacy_store.clone())
                .release(&h)
                .await
                .map(|r| format!("{r:?}")),
        };
        self.log.event(format!(
            "client {}: {} hold {hold} release: {released:?}",
            self.id,
            kind.name()
        ));
    }

    /// The deadline audit: the guard's deadline against the end of its lease on the server,
    /// as the audit bounded it at the grant or renewal that set the deadline.
    fn check_deadline(
        &mut self,
        kind: Kind,
        guard: &Guard,
        granted: Option<tokio::time::Instant>,
        hold: usize,
    ) {
        let Some((lease, deadline)) = guard.audited_deadline() else {
            return;
        };
        let at = if granted == Some(deadline) {
            "grant"
        } else {
            "last renewal"
        };
        let Some(late) = self.audit.check(&lease, deadline) else {
            return;
        };
        if !self.late.insert(lease) {
            return;
        }
        // Gone when read right after the answer: a restart in between erased it.
        let read_at = late.bound.read_at.into_std();
        let restarted = late.bound.gone
            && self.log.with(|log| {
                log.restarts
                    .iter()
                    .any(|r| *r <= read_at && *r + LEASE >= read_at)
            });
        let text = format!(
            "client {}: {} hold {hold}: its deadline of the {at} is {late}{}",
            self.id,
            kind.name(),
            if restarted {
                ", excused: a restart erased it"
            } else {
                ""
            }
        );
        if !restarted {
            self.log.with(|log| log.late_deadlines.push(text.clone()));
        }
        self.log.event(text);
    }

    /// A guard said lost before its local deadline: does the server still hold the lease? Then
    /// neither a definite answer nor the deadline made it lost.
    async fn check_false_loss(&self, kind: Kind, mark: &str, deadline_left: Duration) {
        let remaining = match remaining_on_server(&self.direct, kind, mark).await {
            Ok(remaining) => remaining,
            Err(_) => return, // cannot tell (the server is down or paused)
        };
        if let Some(left) = remaining
            && !left.is_zero()
        {
            let text = format!(
                "client {}: {} reported lost {deadline_left:?} before its local deadline, while the \
                 server held it for {left:?} more",
                self.id,
                kind.name()
            );
            self.log.with(|log| log.false_losses.push(text.clone()));
            self.log.event(text);
        }
    }
}

/// How long the server still holds the hold marked `mark` (by wall clock), if it does.
async fn remaining_on_server(
    direct: &RedisStore,
    kind: Kind,
    mark: &str,
) -> tairlock::Result<Option<Duration>> {
    let now = wall_ms();
    let left = |expiry: u64| Duration::from_millis(expiry.saturating_sub(now));
    Ok(match kind {
        Kind::Exp | Kind::RwWrite => {
            let key = if kind == Kind::Exp {
                ExpireLock::new(direct.clone()).keys(EXP)?.lock
            } else {
                RwLock::new(direct.clone()).keys(RW)?.writer
            };
            let value: Option<String> = direct.command(redis::cmd("GET").arg(&key)).await?;
            value
                .as_deref()
                .and_then(lease_parts)
                .filter(|(_, fence)| fence.to_string() == mark)
                .map(|(expiry, _)| left(expiry))
        }
        Kind::RwRead => {
            let key = RwLock::new(direct.clone()).keys(RW)?.readers;
            let score: Option<f64> = direct
                .command(redis::cmd("ZSCORE").arg(&key).arg(mark))
                .await?;
            score.map(|s| left(s as u64))
        }
        // No watchdog: a legacy hold is lost only by its own deadline.
        Kind::Legacy => None,
    })
}

/// Poll every lock's keys directly: which holds the server holds (live leases only).
async fn monitor(direct: RedisStore, log: Shared, stop: Arc<AtomicBool>) {
    let exp = ExpireLock::new(direct.clone()).keys(EXP).unwrap();
    let rw = RwLock::new(direct.clone()).keys(RW).unwrap();
    let legacy_fence = tairlock_legacy::wire::fence_key(LEGACY);
    while !stop.load(Ordering::Relaxed) {
        let now = wall_ms();
        let mut polls = Vec::new();
        let lease: tairlock::Result<Option<String>> =
            direct.command(redis::cmd("GET").arg(&exp.lock)).await;
        if let Ok(value) = lease {
            let marks = value
                .as_deref()
                .and_then(lease_parts)
                .map(|(_, fence)| fence.to_string())
                .into_iter()
                .collect();
            polls.push((Instant::now(), EXP, marks));
        }
        let writer: tairlock::Result<Option<String>> =
            direct.command(redis::cmd("GET").arg(&rw.writer)).await;
        let readers: tairlock::Result<Vec<String>> = direct
            .command(
                redis::cmd("ZRANGEBYSCORE")
                    .arg(&rw.readers)
                    .arg(now)
                    .arg("+inf"),
            )
            .await;
        if let (Ok(writer), Ok(readers)) = (writer, readers) {
            let mut marks: BTreeSet<String> = readers.into_iter().collect();
            marks.extend(
                writer
                    .as_deref()
                    .and_then(lease_parts)
                    .map(|(_, fence)| fence.to_string()),
            );
            polls.push((Instant::now(), RW, marks));
        }
        let value: tairlock::Result<Option<String>> =
            direct.command(redis::cmd("GET").arg(LEGACY)).await;
        let fence: tairlock::Result<Option<String>> =
            direct.command(redis::cmd("GET").arg(&legacy_fence)).await;
        if let (Ok(value), Ok(fence)) = (value, fence) {
            let marks = value
                .map(|v| format!("{v}/{}", fence.unwrap_or_default()))
                .into_iter()
                .collect();
            polls.push((Instant::now(), LEGACY, marks));
        }
        log.with(|log| log.polls.extend(polls));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The nemesis: a fault every few hundred ms, a restart at about half time. Runs on a thread
/// of its own (server commands block), owning the server.
fn nemesis(
    mut server: RedisServer,
    proxy: Arc<Proxy>,
    log: Shared,
    seed: u64,
    until: Instant,
    stop: Arc<AtomicBool>,
) {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x6e656d65);
    let restart_at = Instant::now() + (until - Instant::now()) / 2;
    let mut restarted = false;
    let sleep = |ms: u64| std::thread::sleep(Duration::from_millis(ms));
    let cli = |server: &RedisServer, args: &[&str]| {
        let out = server.cli(args);
        if out.starts_with("ERR") {
            panic!("nemesis: {args:?}: {out}");
        }
    };
    while Instant::now() < until {
        sleep(rng.random_range(150..600));
        if !restarted && Instant::now() >= restart_at {
            restarted = true;
            log.fault("server restart");
            let at = Instant::now();
            server.restart();
            log.with(|log| log.restarts.push(at));
            continue;
        }
        let which = match rng.random_range(0..3) {
            0 => Which::All,
            1 => Which::Data,
            _ => Which::PubSub,
        };
        match rng.random_range(0..10) {
            0 => {
                log.fault("latency");
                proxy.latency(which, Duration::from_millis(rng.random_range(20..250)));
                sleep(rng.random_range(300..1500));
                proxy.latency(which, Duration::ZERO);
            }
            1 => {
                log.fault("drop replies");
                proxy.drop_replies(which, rng.random_range(1..3));
            }
            2 => {
                log.fault("reset");
                let open: Vec<usize> = proxy
                    .connections()
                    .iter()
                    .filter(|c| c.open)
                    .map(|c| c.index)
                    .collect();
                if rng.random_bool(0.5) && !open.is_empty() {
                    proxy.reset(Which::Nth(open[rng.random_range(0..open.len())]));
                } else {
                    proxy.reset(which);
                }
            }
            3 => {
                log.fault("black hole");
                proxy.black_hole(which);
                sleep(rng.random_range(200..1200));
                proxy.heal(which);
            }
            4 => {
                log.fault("stall new connections");
                proxy.stall_new_connections(true);
                sleep(rng.random_range(200..1000));
                proxy.stall_new_connections(false);
            }
            5 => {
                log.fault("DEBUG SLEEP");
                let secs = format!("{:.2}", rng.random_range(0.1..0.8));
                cli(&server, &["DEBUG", "SLEEP", &secs]);
            }
            6 => {
                log.fault("CLIENT KILL");
                cli(&server, &["CLIENT", "KILL", "TYPE", "normal"]);
            }
            7 => {
                log.fault("CLIENT PAUSE");
                let ms = rng.random_range(100..800).to_string();
                cli(&server, &["CLIENT", "PAUSE", &ms]);
            }
            8 => {
                // The server runs every acquire; none of its replies comes back, for longer
                // than a response timeout and its repeat; then the network heals.
                log.fault("acquire reply outage");
                for script in ACQUIRES {
                    proxy.drop_replies_matching(Which::Data, script.sha1().as_bytes(), 100_000);
                }
                sleep(rng.random_range(800..2500));
                proxy.heal(Which::Data);
            }
            _ => {} // a quiet moment
        }
    }
    proxy.heal(Which::All);
    proxy.stall_new_connections(false);
    // Keep the server up for the clients' last releases and the monitor's last polls.
    while !stop.load(Ordering::Relaxed) {
        sleep(20);
    }
    drop(server);
}

/// The checks of the module docs; (table rows, violation details, informational notes).
fn check(log: &Log) -> (Vec<(&'static str, usize)>, Vec<String>, Vec<String>) {
    let mut violations = Vec::new();
    let mut notes = Vec::new();
    let restarted_between =
        |a: Instant, b: Instant| log.restarts.iter().any(|r| a <= *r && *r <= b);

    // 1. Overlaps while both believed valid.
    let mut overlaps = 0;
    for (i, a) in log.holds.iter().enumerate() {
        for b in &log.holds[i + 1..] {
            if a.kind.lock() != b.kind.lock() || (a.kind == Kind::RwRead && b.kind == Kind::RwRead)
            {
                continue;
            }
            let start = a.start.max(b.start);
            let end = a.last_valid.min(b.last_valid);
            if start >= end {
                continue;
            }
            let earlier = if a.start <= b.start { a } else { b };
            if restarted_between(earlier.start, start) {
                notes.push(format!(
                    "holds {} and {} overlap after a restart erased hold {}'s lease",
                    a.id, b.id, earlier.id
                ));
                continue;
            }
            overlaps += 1;
            violations.push(format!(
                "overlap: hold {} ({} of client {}, token {:?}) and hold {} ({} of client {}, \
                 token {:?}) both valid for {:?}",
                a.id,
                a.kind.name(),
                a.client,
                a.token,
                b.id,
                b.kind.name(),
                b.client,
                b.token,
                end - start
            ));
        }
    }

    // 2. Stale writes accepted.
    let mut stale = 0;
    let rejected = log.writes.iter().filter(|w| !w.accepted).count();
    for w in log.writes.iter().filter(|w| w.accepted) {
        let newer = log.holds.iter().find(|h| {
            h.kind.lock() == w.lock && h.token.is_some_and(|t| t > w.token) && h.start < w.at
        });
        if let Some(newer) = newer {
            let hold = &log.holds[w.hold];
            if restarted_between(hold.start, newer.start) {
                notes.push(format!(
                    "hold {} wrote with token {} after hold {} (token {:?}) was granted, its \
                     lease erased by a restart",
                    w.hold, w.token, newer.id, newer.token
                ));
                continue;
            }
            stale += 1;
            violations.push(format!(
                "stale write accepted: hold {} (token {}) after hold {} (token {:?}) was granted",
                w.hold, w.token, newer.id, newer.token
            ));
        }
    }
    notes.push(format!(
        "stale writes refused by the fenced resources: {rejected}"
    ));

    // 3. Orphans: still on the server one lease after the holder let go.
    let mut orphans = 0;
    let last_poll = log.polls.last().map(|p| p.0);
    for h in log.holds.iter().filter(|h| h.kind != Kind::RwRead) {
        let Some(ended) = h.ended else { continue };
        let due = ended + LEASE + ORPHAN_SLACK;
        if last_poll.is_none_or(|last| last < due) {
            continue; // not observed long enough
        }
        let still = log
            .polls
            .iter()
            .find(|(t, lock, _)| *t >= due && *lock == h.kind.lock())
            .is_some_and(|(_, _, marks)| marks.contains(&h.mark));
        if still {
            orphans += 1;
            violations.push(format!(
                "orphan: hold {} ({} of client {}, {}) still on the server {:?} after it ended",
                h.id,
                h.kind.name(),
                h.client,
                h.how,
                LEASE + ORPHAN_SLACK
            ));
        }
    }

    // Everyone stopped one lease (and slack) before the last polls: every lock must be free.
    let last_end = log.holds.iter().filter_map(|h| h.ended).max();
    for lock in [EXP, RW, LEGACY] {
        let last = log.polls.iter().rev().find(|(_, l, _)| *l == lock);
        if let (Some((at, _, marks)), Some(last_end)) = (last, last_end)
            && *at >= last_end + LEASE + ORPHAN_SLACK
            && !marks.is_empty()
        {
            orphans += 1;
            violations.push(format!("orphan: {lock} still held at the end by {marks:?}"));
        }
    }

    violations.extend(log.patience_violations.iter().cloned());
    violations.extend(log.false_losses.iter().cloned());
    violations.extend(log.late_deadlines.iter().cloned());
    let rows = vec![
        ("overlapping valid holds", overlaps),
        ("stale writes accepted", stale),
        ("locks held by nobody beyond one lease", orphans),
        ("waits past patience", log.patience_violations.len()),
        ("false losses", log.false_losses.len()),
        ("late deadlines", log.late_deadlines.len()),
    ];
    (rows, violations, notes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos() {
    let secs: u64 = std::env::var("TAIRLOCK_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(30);
    let seed: u64 = std::env::var("TAIRLOCK_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12);
    let server = RedisServer::start_with_args(&["--enable-debug-command", "yes"]);
    let proxy = Arc::new(Proxy::start(server.port()));
    let direct = server.store().await;
    let log = Shared(Arc::new(Mutex::new(Log::default())));
    let start = Instant::now();
    let until = start + Duration::from_secs(secs);

    let mut clients = Vec::new();
    let mut audits = Vec::new();
    for id in 0..CLIENTS {
        let mut options = RedisOptions::default();
        options.response_timeout = RESPONSE_TIMEOUT;
        options.connection_timeout = RESPONSE_TIMEOUT;
        // Each client's grants and renewals, read on a connection of its own past the proxy.
        let audit = DeadlineAudit::new(server.store().await);
        audits.push(audit.clone());
        let store = audit.wrap(proxy.store_with(options.clone()).await);
        let legacy_store = audit.wrap(proxy.store_with(options).await);
        let client = Client {
            id,
            audit,
            late: BTreeSet::new(),
            locks: ExpireLock::with_options(
                store.clone(),
                Options::default().watchdog_lease(LEASE),
            ),
            rw: RwLock::with_options(
                store,
                tairlock_rwlock::Options::default().watchdog_lease(LEASE),
            ),
            legacy_store,
            direct: direct.clone(),
            log: log.clone(),
            rng: StdRng::seed_from_u64(seed.wrapping_mul(1000).wrapping_add(id as u64)),
            until,
        };
        clients.push(tokio::spawn(client.run()));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let monitor = tokio::spawn(monitor(direct.clone(), log.clone(), stop.clone()));
    let nemesis = {
        let (proxy, log, stop) = (proxy.clone(), log.clone(), stop.clone());
        std::thread::spawn(move || nemesis(server, proxy, log, seed, until, stop))
    };
    for client in clients {
        tokio::time::timeout(Duration::from_secs(secs + 60), client)
            .await
            .expect("a client finishes")
            .expect("a client does not panic");
    }
    // One lease and the slack for the last holds to vanish, watched by the monitor.
    tokio::time::sleep(LEASE + ORPHAN_SLACK + Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    monitor.await.unwrap();
    tokio::task::spawn_blocking(move || nemesis.join())
        .await
        .unwrap()
        .expect("the nemesis does not panic");

    let log = log.with(std::mem::take);
    let (rows, violations, notes) = check(&log);
    let mut table = String::new();
    let _ = writeln!(
        table,
        "chaos: seed {seed}, {secs} s, {CLIENTS} clients, lease {LEASE:?}"
    );
    let _ = writeln!(table, "{:<42} {:>6}", "faults injected (nemesis)", "count");
    for (kind, n) in &log.faults {
        let _ = writeln!(table, "  {kind:<40} {n:>6}");
    }
    let _ = writeln!(table, "{:<42} {:>6}", "proxy fault counters", "");
    for (kind, n) in proxy.faults() {
        let _ = writeln!(table, "  {kind:<40} {n:>6}");
    }
    let _ = writeln!(table, "{:<42} {:>6}", "acquisitions", "");
    for (kind, n) in &log.acquired {
        let _ = writeln!(table, "  {:<40} {n:>6}", kind.name());
    }
    let _ = writeln!(table, "  {:<40} {:>6}", "gave up (patience)", log.timeouts);
    let _ = writeln!(table, "  {:<40} {:>6}", "acquire errors", log.errors);
    let _ = writeln!(table, "  {:<40} {:>6}", "fenced writes", log.writes.len());
    let (audited, unread) = audits
        .iter()
        .map(DeadlineAudit::counts)
        .fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    let _ = writeln!(
        table,
        "  {:<40} {:>6}",
        "grants and renewals audited", audited
    );
    let _ = writeln!(
        table,
        "  {:<40} {:>6}",
        "  of which the lease could not be read", unread
    );
    let _ = writeln!(table, "{:<42} {:>6}", "invariant", "violations");
    for (name, n) in &rows {
        let _ = writeln!(table, "  {name:<40} {n:>6}");
    }
    let _ = writeln!(table, "notes:");
    for note in notes
        .iter()
        .filter(|n| n.starts_with("stale writes refused"))
    {
        let _ = writeln!(table, "  {note}");
    }
    let restart_notes = notes
        .iter()
        .filter(|n| !n.starts_with("stale writes refused"))
        .count();
    let _ = writeln!(
        table,
        "  overlaps or writes excused because a restart erased the lease: {restart_notes}"
    );
    println!("{table}");
    assert!(
        log.acquired.values().sum::<u64>() > 0,
        "no lock was ever acquired\n{table}"
    );
    if !violations.is_empty() {
        let mut report = String::new();
        let _ = writeln!(report, "{table}\nviolations (seed {seed}):");
        for v in &violations {
            let _ = writeln!(report, "  {v}");
        }
        let _ = writeln!(report, "event log (seed {seed}):");
        for (at, text) in &log.events {
            let _ = writeln!(report, "  {:>9.3} s  {text}", (*at - start).as_secs_f64());
        }
        panic!("{report}");
    }
}

// The checks themselves: each flags a synthetic violation and passes a correct history.

/// A hold of `kind` by `client` from `start` to `end` (ms after `t0`), valid until its end.
fn hold(t0: Instant, id: usize, kind: Kind, token: Option<u64>, span: (u64, u64)) -> Hold {
    let at = |ms: u64| t0 + Duration::from_millis(ms);
    Hold {
        id,
        client: id,
        kind,
        token,
        mark: token.map_or_else(String::new, |t| t.to_string()),
        start: at(span.0),
        last_valid: at(span.1),
        ended: Some(at(span.1)),
        how: "released",
    }
}

fn write(t0: Instant, hold: usize, token: u64, ms: u64, accepted: bool) -> Write {
    Write {
        hold,
        lock: EXP,
        token,
        at: t0 + Duration::from_millis(ms),
        accepted,
    }
}

fn counts(log: &Log) -> BTreeMap<&'static str, usize> {
    check(log).0.into_iter().collect()
}

#[test]
fn the_checks_pass_a_correct_history() {
    let t0 = Instant::now();
    let log = Log {
        holds: vec![
            hold(t0, 0, Kind::Exp, Some(1), (0, 100)),
            hold(t0, 1, Kind::Exp, Some(2), (110, 200)),
            // Readers share.
            hold(t0, 2, Kind::RwRead, None, (0, 150)),
            hold(t0, 3, Kind::RwRead, None, (50, 200)),
        ],
        writes: vec![write(t0, 0, 1, 50, true), write(t0, 1, 2, 150, true)],
        ..Log::default()
    };
    assert!(counts(&log).values().all(|n| *n == 0), "{:?}", check(&log));
}

#[test]
fn the_checks_flag_overlaps_stale_writes_orphans_and_late_deadlines() {
    let t0 = Instant::now();
    let late = Duration::from_millis(1);
    let orphan_poll = LEASE + ORPHAN_SLACK + Duration::from_millis(200);
    let log = Log {
        holds: vec![
            hold(t0, 0, Kind::Exp, Some(1), (0, 100)),
            // Granted while hold 0 still believed its lease valid.
            hold(t0, 1, Kind::Exp, Some(2), (50, 200)),
            // A writer inside with a reader.
            hold(t0, 2, Kind::RwRead, None, (0, 150)),
            hold(t0, 3, Kind::RwWrite, Some(7), (100, 200)),
        ],
        // Hold 0's write with token 1 accepted after hold 1 (token 2) was granted.
        writes: vec![write(t0, 1, 2, 60, true), write(t0, 0, 1, 90, true)],
        // Hold 1's lease still on the server one lease and the slack after it ended.
        polls: vec![(
            t0 + Duration::from_millis(200) + orphan_poll,
            EXP,
            ["2".to_owned()].into(),
        )],
        late_deadlines: vec![format!("a deadline {late:?} late")],
        ..Log::default()
    };
    let counts = counts(&log);
    assert_eq!(counts["overlapping valid holds"], 2, "{counts:?}");
    assert_eq!(counts["stale writes accepted"], 1, "{counts:?}");
    assert_eq!(
        counts["locks held by nobody beyond one lease"], 2,
        "{counts:?}"
    );
    assert_eq!(counts["late deadlines"], 1, "{counts:?}");
}
