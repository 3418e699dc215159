//! One contending client: its store handle, its clock, and the scenario's hand on its pauses.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tairlock::clock::SharedClock;
use tairlock::store::intercept::{Answer, Command, Hook, Intercept, Run};
use tairlock::{Reply, Script, Store};
use tairlock_legacy::watch::{Read, TxOp, WatchHook};

use super::audit::{LeaseAt, ServerEnd};
use super::scenario::{Action, Plan};
use super::sim::Timer;
use super::trial::Trial;

/// Why an algorithm step stopped early.
#[derive(Debug)]
pub enum Interrupt {
    /// The scenario crashed the client at a pause point: it sends nothing more.
    Crashed,
    /// The store failed.
    Store(tairlock::Error),
}

impl From<tairlock::Error> for Interrupt {
    fn from(err: tairlock::Error) -> Self {
        Interrupt::Store(err)
    }
}

/// The result of an algorithm step.
pub type Step<T> = Result<T, Interrupt>;

/// A client of the race. Algorithms get everything they may use from here.
pub struct Client<S: Store> {
    id: usize,
    store: RaceStore<S>,
    clock: SharedClock,
    plan: Arc<Plan>,
    trial: Arc<Trial>,
    rng: Arc<parking_lot::Mutex<StdRng>>,
    tokens: AtomicU64,
    /// Set when the scenario crashed the client at a pause of its [`paused_store`]: the
    /// engine treats the error it returned as the crash.
    ///
    /// [`paused_store`]: Client::paused_store
    crashed: Arc<AtomicBool>,
    /// What the algorithm keeps for this client during the trial ([`Client::keep`]), by type.
    kept: parking_lot::Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>,
    /// The scenario's reply outage on this client, shared with its store's hook.
    outage: Arc<Outage>,
}

/// A client's reply outage (`reply-outages`): while it lasts, each command the client sends
/// while acquiring is applied, and its reply dropped.
#[derive(Debug, Default)]
pub(crate) struct Outage {
    /// Whether the client is inside an algorithm's acquire step.
    acquiring: AtomicBool,
    /// When the current or last outage ends, and when the next one may begin (race time);
    /// `None` while nothing is scheduled (every scenario but `reply-outages`).
    times: parking_lot::Mutex<Option<OutageTimes>>,
}

#[derive(Debug, Clone, Copy)]
struct OutageTimes {
    until: Duration,
    next: Duration,
}

impl Outage {
    /// Whether a reply the client receives at `now` is dropped.
    fn drops(&self, now: Duration) -> bool {
        self.acquiring.load(Ordering::Relaxed) && self.times.lock().is_some_and(|t| now < t.until)
    }
}

impl<S: Store> fmt::Debug for Client<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl<S: Store> Client<S> {
    pub(crate) fn new(
        id: usize,
        store: S,
        clock: SharedClock,
        plan: Arc<Plan>,
        trial: Arc<Trial>,
        seed: u64,
        audit: Audit,
    ) -> Self {
        let outage = Arc::new(Outage::default());
        let mut rng = StdRng::seed_from_u64(seed);
        if let Some(first) = plan.next_outage(&mut rng, true) {
            *outage.times.lock() = Some(OutageTimes {
                until: Duration::ZERO,
                next: plan.timer.now() + first,
            });
        }
        Client {
            id,
            store: Intercept::new(
                store.clone(),
                RaceHook {
                    inner: store,
                    client: id,
                    trial: trial.clone(),
                    audit,
                    latency: plan.latency,
                    timer: plan.timer.clone(),
                    rng: parking_lot::Mutex::new(StdRng::seed_from_u64(!seed)),
                    watch_pool: parking_lot::Mutex::default(),
                    reads: parking_lot::Mutex::default(),
                    outage: outage.clone(),
                },
            ),
            clock,
            plan,
            trial,
            rng: Arc::new(parking_lot::Mutex::new(rng)),
            tokens: AtomicU64::new(0),
            crashed: Arc::default(),
            outage,
            kept: parking_lot::Mutex::default(),
        }
    }

    /// A value this client keeps for the rest of the trial: made by `make` on the first call
    /// for its type, the same (cloned) on every later one. For an algorithm whose client must
    /// use one handle from one attempt to the next (a lock handle whose wake channel must stay
    /// the same, with its subscription). It goes with the client at the end of the trial.
    pub fn keep<T: Clone + Send + Sync + 'static>(&self, make: impl FnOnce() -> T) -> T {
        self.kept
            .lock()
            .entry(TypeId::of::<T>())
            .or_insert_with(|| Box::new(make()))
            .downcast_ref::<T>()
            .expect("kept by its type")
            .clone()
    }

    /// Where the lease at `at` stands on the server now, on the local clock: read on the
    /// race's store past its simulated network and its audit ([`audit`](super::audit)).
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn read_lease(&self, at: &LeaseAt) -> tairlock::Result<ServerEnd> {
        super::audit::read(self.store.inner(), &self.plan.timer, at).await
    }

    /// [`read_lease`](Self::read_lease) on another store (an algorithm's own servers).
    ///
    /// # Errors
    ///
    /// A store error.
    pub async fn read_lease_on<T: Store>(
        &self,
        store: &T,
        at: &LeaseAt,
    ) -> tairlock::Result<ServerEnd> {
        super::audit::read(store, &self.plan.timer, at).await
    }

    /// Where the race sees what this client's commands do to lock values.
    pub(crate) fn audit(&self) -> Audit {
        self.store.hook().audit
    }

    /// Now on the race's clock, as an instant of tokio's (to the microsecond on virtual time).
    pub fn instant(&self) -> tokio::time::Instant {
        self.plan.timer.instant()
    }

    /// The client enters (`true`) or leaves an algorithm's acquire step; entering a fresh
    /// acquisition (not the repeat of an unanswered one) at or after the time of its next
    /// reply outage (`reply-outages`), the outage begins.
    pub(crate) fn acquiring(&self, on: bool, fresh: bool) {
        if on && fresh {
            let now = self.now();
            let mut times = self.outage.times.lock();
            if let Some(t) = times.as_mut()
                && now >= t.next
            {
                let (length, gap) = self.with_rng(|rng| {
                    let length = self.plan.outage_length(rng);
                    (length, self.plan.next_outage(rng, false).unwrap_or(length))
                });
                t.until = now + length;
                t.next = t.until + gap;
                self.trial.record(|r, at| r.outage(self.id, at, length));
            }
        }
        self.outage.acquiring.store(on, Ordering::Relaxed);
    }

    /// Whether the scenario crashed the client at a pause of its [`paused_store`] (without
    /// resetting it).
    ///
    /// [`paused_store`]: Client::paused_store
    pub(crate) fn crash_pending(&self) -> bool {
        self.crashed.load(Ordering::Relaxed)
    }

    /// This client's number.
    pub fn id(&self) -> usize {
        self.id
    }

    /// The store, as this client sees it.
    pub fn store(&self) -> &RaceStore<S> {
        &self.store
    }

    /// This client's clock (skewed in the clock-skew scenario).
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// A token no other client or attempt uses.
    pub fn unique_token(&self) -> String {
        format!(
            "client-{}-{}",
            self.id,
            self.tokens.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// A point between two of the algorithm's commands: the scenario may stall the client here
    /// or crash it.
    pub async fn pause(&self, point: &'static str) -> Step<()> {
        let action = self.plan.at_point(&mut self.rng.lock(), point);
        self.act(action).await
    }

    pub(crate) async fn act(&self, action: Action) -> Step<()> {
        act(&self.plan, &self.trial, self.id, action).await
    }

    /// The store with a pause point before each command: for code you cannot put
    /// [`pause`](Self::pause) calls into, such as an application's lock functions written
    /// against a plain [`Store`]. Before each command, the scenario may stall the client, or
    /// crash it: then the command and every later one of this attempt fail with an
    /// [`ErrorKind::Connection`](tairlock::ErrorKind::Connection) error, which the engine
    /// counts as the crash (whatever the algorithm returns it as, through `?`).
    pub fn paused_store(&self) -> PausedStore<S> {
        Intercept::new(
            self.store.clone(),
            PauseBeforeEach {
                plan: self.plan.clone(),
                trial: self.trial.clone(),
                rng: self.rng.clone(),
                crashed: self.crashed.clone(),
                id: self.id,
            },
        )
    }

    /// Whether the scenario crashed the client at a pause of its [`paused_store`]
    /// (resetting it).
    ///
    /// [`paused_store`]: Client::paused_store
    pub(crate) fn take_crash(&self) -> bool {
        self.crashed.swap(false, Ordering::Relaxed)
    }

    pub(crate) fn trial(&self) -> &Trial {
        &self.trial
    }

    /// Wait `d` of race time (virtual time to the microsecond on the embedded store).
    pub async fn sleep(&self, d: Duration) {
        self.plan.timer.sleep(d).await;
    }

    /// Race time since the race began.
    pub fn now(&self) -> Duration {
        self.plan.timer.now()
    }

    pub(crate) fn plan(&self) -> &Plan {
        &self.plan
    }

    pub(crate) fn with_rng<T>(&self, f: impl FnOnce(&mut StdRng) -> T) -> T {
        f(&mut self.rng.lock())
    }

    pub(crate) fn jitter(&self, low: Duration, high: Duration) -> Duration {
        if high <= low {
            return low;
        }
        self.with_rng(|rng| rng.random_range(low..high))
    }
}

async fn act(plan: &Plan, trial: &Trial, id: usize, action: Action) -> Step<()> {
    match action {
        Action::Go => Ok(()),
        Action::Stall(d) => {
            trial.count_stall();
            trial.record(|r, at| r.stall(id, at, d));
            plan.timer.sleep(d).await;
            Ok(())
        }
        Action::Crash => {
            trial.count_crash();
            Err(Interrupt::Crashed)
        }
    }
}

/// A client's store with a pause point before each command ([`Client::paused_store`]).
pub type PausedStore<S> = Intercept<RaceStore<S>, PauseBeforeEach>;

/// The hook of [`PausedStore`]: the scenario's pause point before each command.
pub struct PauseBeforeEach {
    plan: Arc<Plan>,
    trial: Arc<Trial>,
    rng: Arc<parking_lot::Mutex<StdRng>>,
    crashed: Arc<AtomicBool>,
    id: usize,
}

impl fmt::Debug for PauseBeforeEach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PauseBeforeEach").finish_non_exhaustive()
    }
}

/// A `WATCH` connection's commands pause too (as [`Command::Watch`], [`Command::Unwatch`] and
/// [`Command::Exec`]).
impl WatchHook for PauseBeforeEach {}

impl Hook for PauseBeforeEach {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        Box::pin(async move {
            let crashed = |name: String| {
                tairlock::Error::new(
                    tairlock::ErrorKind::Connection,
                    format!("the race crashed this client before its {name}"),
                )
            };
            if self.crashed.load(Ordering::Relaxed) {
                return Err(crashed(command.name()));
            }
            let action = self.plan.at_point(&mut self.rng.lock(), "command");
            match act(&self.plan, &self.trial, self.id, action).await {
                Ok(()) => run.await,
                Err(_) => {
                    self.crashed.store(true, Ordering::Relaxed);
                    Err(crashed(command.name()))
                }
            }
        })
    }
}

/// Where the race sees what each client's commands did to lock values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Audit {
    /// The embedded store reports every string write, replacement and deletion it applies,
    /// with the client whose command or script made it ([`observe`]).
    Store,
    /// A server: the wrapper reads what each command replaced (`DEL` as `GETDEL`, `SET` as
    /// `GETSET`), runs each script inside an audit script that reads every key before and after
    /// it in the same atomic step, and reads what a `WATCH` transaction overwrote or deleted.
    Commands,
}

tokio::task_local! {
    /// The client whose command runs now, for the embedded store's change observer.
    static ACTOR: (usize, Arc<Trial>);
}

/// Have `store` report every change to a string value to the trial of the client whose command
/// made it ([`Audit::Store`]). Again on the same store: nothing more to do.
pub fn observe(store: &tairlock::MemoryStore) {
    let _ = store.on_change(|change| {
        let _ = ACTOR.try_with(|(client, trial)| {
            trial.saw_change(*client, change.old.as_deref(), change.new.as_deref());
        });
    });
}

/// The store as the race's clients see it: every command takes a simulated network round trip
/// (on the embedded store), and every deletion or overwrite of a lock value is seen where it
/// happens, with the client that caused it ([`Audit`]). An [`Intercept`] store with the
/// client's [`RaceHook`].
pub type RaceStore<S> = Intercept<S, RaceHook<S>>;

/// What a race client's store does around each command; see [`RaceStore`].
pub struct RaceHook<S> {
    /// The store behind the hook, for commands the audit sends in place of the client's
    /// (`GETDEL` for `DEL`, `GETSET` for `SET`, the audit script for a script).
    inner: S,
    client: usize,
    trial: Arc<Trial>,
    audit: Audit,
    latency: Option<(Duration, Duration)>,
    timer: Timer,
    /// Draws each hop's latency: seeded per client, so a seed gives one table.
    rng: parking_lot::Mutex<StdRng>,
    /// Idle `WATCH` connections of the inner store ([`WatchHook::reuse`]).
    watch_pool: parking_lot::Mutex<Vec<Box<dyn Any + Send>>>,
    /// The values the last `WATCH` of this client's connection read, by key: what a
    /// committed `EXEC` replaced.
    reads: parking_lot::Mutex<HashMap<String, Vec<u8>>>,
    /// The client's reply outage (`reply-outages`).
    outage: Arc<Outage>,
}

impl<S> fmt::Debug for RaceHook<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaceHook")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl<S: Store> RaceHook<S> {
    /// One way of a simulated round trip: half of a draw in `latency`.
    async fn hop(&self) {
        if let Some((low, high)) = self.latency {
            let d = if high > low {
                self.rng.lock().random_range(low..high)
            } else {
                low
            };
            self.timer.sleep(d / 2).await;
        }
    }

    async fn round_trip<T>(&self, fut: impl std::future::Future<Output = T>) -> T {
        self.hop().await;
        let out = ACTOR.scope((self.client, self.trial.clone()), fut).await;
        self.hop().await;
        out
    }

    /// What a command replaced, on a server ([`Audit::Commands`]).
    fn saw(&self, old: Option<&[u8]>, new: Option<&[u8]>) {
        if self.audit == Audit::Commands {
            self.trial.saw_change(self.client, old, new);
        }
    }

    /// The reply of a command the store applied, unless the client's reply outage drops it:
    /// then an error without an answer, as a timed-out request gets.
    fn deliver<T>(&self, out: tairlock::Result<T>, name: &str) -> tairlock::Result<T> {
        if out.is_ok() && self.outage.drops(self.timer.now()) {
            self.trial.reply_dropped(self.client);
            return Err(tairlock::Error::new(
                tairlock::ErrorKind::Timeout,
                format!("the race dropped the reply to this acquire's {name} (reply-outages)"),
            ));
        }
        out
    }

    async fn command(&self, command: Command<'_>, run: Run<'_>) -> tairlock::Result<Answer> {
        let name = command.name();
        let out = self.command_answered(command, run).await;
        self.deliver(out, &name)
    }

    async fn command_answered(
        &self,
        command: Command<'_>,
        run: Run<'_>,
    ) -> tairlock::Result<Answer> {
        match command {
            // `GETDEL` deletes exactly as `DEL` does and also says what it deleted.
            Command::Del { key } => {
                let old = self.round_trip(self.inner.getdel(key)).await?;
                self.saw(old.as_deref(), None);
                Ok(Answer::Bool(old.is_some()))
            }
            // `GETSET` replaces exactly as `SET` does (value and TTL) and says what it replaced.
            Command::Set { key, value } if self.audit == Audit::Commands => {
                let old = self.round_trip(self.inner.getset(key, value)).await?;
                self.saw(old.as_deref(), Some(value));
                Ok(Answer::Done)
            }
            Command::Eval { script, keys, args }
                if self.audit == Audit::Commands && !keys.is_empty() =>
            {
                self.audited_eval(script, keys, args)
                    .await
                    .map(Answer::Reply)
            }
            _ => {
                let answer = self.round_trip(run).await?;
                match (command, &answer) {
                    (
                        Command::SetNx { value, .. } | Command::SetNxPx { value, .. },
                        Answer::Bool(true),
                    ) => self.saw(None, Some(value)),
                    (Command::GetSet { value, .. }, Answer::Value(old)) => {
                        self.saw(old.as_deref(), Some(value));
                    }
                    (Command::GetDel { .. }, Answer::Value(old)) => self.saw(old.as_deref(), None),
                    _ => {}
                }
                Ok(answer)
            }
        }
    }

    async fn audited_eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> tairlock::Result<Reply> {
        let reply = self
            .round_trip(self.inner.eval(audited(script), keys, args))
            .await?;
        let Reply::Array(mut items) = reply else {
            return Err(tairlock::Error::new(
                tairlock::ErrorKind::Server,
                format!("the race's audit of {} replied {reply:?}", script.name()),
            ));
        };
        if items.len() != 1 + 2 * keys.len() {
            return Err(tairlock::Error::new(
                tairlock::ErrorKind::Server,
                format!("the race's audit of {} replied {items:?}", script.name()),
            ));
        }
        let around: Vec<Reply> = items.drain(1..).collect();
        for pair in around.chunks(2) {
            let read = |r: &Reply| match r {
                Reply::Data(d) => Some(d.clone()),
                _ => None,
            };
            self.saw(read(&pair[0]).as_deref(), read(&pair[1]).as_deref());
        }
        Ok(items.pop().expect("checked length"))
    }
}

impl<S: Store> Hook for RaceHook<S> {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        match command {
            // Not a command of the race: read once, past the simulated network.
            Command::ServerVersion => run,
            _ => Box::pin(self.command(command, run)),
        }
    }
}

/// `WATCH` transactions (for `legacy-watch`): each command takes a simulated round trip, and a
/// successful `EXEC` that deletes or overwrites a key reports the value the transaction read
/// for it, so the race sees what a WATCH release deleted. Idle connections are kept per client.
impl<S: Store> WatchHook for RaceHook<S> {
    fn around_watch<'a>(&'a self, _keys: &'a [String], reads: &'a [Read], run: Run<'a>) -> Run<'a> {
        Box::pin(async move {
            let out = self.deliver(self.round_trip(run).await, "WATCH");
            let mut read = self.reads.lock();
            read.clear();
            if let Ok(Answer::Replies(replies)) = &out {
                for (r, reply) in reads.iter().zip(replies) {
                    if let (Read::Get(key), Reply::Data(value)) = (r, reply) {
                        read.insert(key.clone(), value.clone());
                    }
                }
            }
            out
        })
    }

    fn around_unwatch<'a>(&'a self, run: Run<'a>) -> Run<'a> {
        Box::pin(async move {
            self.hop().await;
            let out = run.await;
            self.hop().await;
            out
        })
    }

    fn around_exec<'a>(&'a self, ops: &'a [TxOp], run: Run<'a>) -> Run<'a> {
        Box::pin(async move {
            let out = self.round_trip(run).await;
            if self.audit == Audit::Commands
                && let Ok(Answer::Exec(Some(replies))) = &out
            {
                // The watched reads still held when EXEC ran (it did not abort): each deletion
                // or overwrite replaced exactly the value read.
                let mut reads = self.reads.lock();
                for (op, reply) in ops.iter().zip(replies) {
                    match (op, reply) {
                        (TxOp::Del { key }, Reply::Int(1)) => {
                            let old = reads.remove(key);
                            self.trial.saw_change(self.client, old.as_deref(), None);
                        }
                        (TxOp::Set { key, value, .. }, Reply::Status(_)) => {
                            let old = reads.insert(key.clone(), value.clone());
                            self.trial
                                .saw_change(self.client, old.as_deref(), Some(value));
                        }
                        _ => {}
                    }
                }
            }
            self.deliver(out, "EXEC")
        })
    }

    fn reuse(&self) -> Option<Box<dyn Any + Send>> {
        self.watch_pool.lock().pop()
    }

    fn recycle(&self, connection: Box<dyn Any + Send>) {
        self.watch_pool.lock().push(connection);
    }
}

/// `script` inside an audit script ([`Audit::Commands`]): the same body, run in the same atomic
/// step between two reads of every key (its string value, or `false`). Replies
/// `{reply, before 1, after 1, before 2, after 2, ...}`; an error reply is passed through as is
/// (every script checks key types before it writes, so an error wrote nothing).
fn audited(script: &'static Script) -> &'static Script {
    static AUDITED: std::sync::LazyLock<
        parking_lot::Mutex<HashMap<&'static str, &'static Script>>,
    > = std::sync::LazyLock::new(Default::default);
    let mut audited = AUDITED.lock();
    audited.entry(script.name()).or_insert_with(|| {
        let lua = AUDIT_LUA.replace("--BODY--", script.lua());
        let name = format!("race_audited_{}", script.name());
        Box::leak(Box::new(Script::new(
            Box::leak(name.into_boxed_str()),
            Box::leak(lua.into_boxed_str()),
            server_only,
        )))
    })
}

/// The audit script; `--BODY--` stands for the audited script's source, run as a function so
/// that its `return` is its reply.
const AUDIT_LUA: &str = r#"local function __race_read()
  local v = {}
  for i, k in ipairs(KEYS) do
    if redis.call('TYPE', k)['ok'] == 'string' then v[i] = redis.call('GET', k) else v[i] = false end
  end
  return v
end
local __race_before = __race_read()
local __race_reply = (function()
--BODY--
end)()
if type(__race_reply) == 'table' and __race_reply['err'] then return __race_reply end
if __race_reply == nil then __race_reply = false end
local __race_after = __race_read()
local __race_out = {__race_reply}
for i = 1, #KEYS do
  __race_out[2 * i] = __race_before[i]
  __race_out[2 * i + 1] = __race_after[i]
end
return __race_out
"#;

/// The native body of an audited script: audits run on servers only (the embedded store
/// reports its changes itself).
fn server_only(
    _: &mut tairlock::store::memory::Db,
    _: &[String],
    _: &[String],
) -> tairlock::store::memory::CommandResult<Reply> {
    Err(tairlock::store::memory::CommandError::new(
        "ERR",
        "the race audits scripts only on a server",
    ))
}
