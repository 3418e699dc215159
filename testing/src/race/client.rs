//! One contending client: its store handle, its clock, and the scenario's hand on its pauses.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tairlock::clock::SharedClock;
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock::{Reply, Script, Store, Ttl};
use tairlock_legacy::watch::{Read, TxOp, WatchConnection, WatchStore};

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
        Client {
            id,
            store: RaceStore {
                inner: store,
                client: id,
                trial: trial.clone(),
                audit,
                latency: plan.latency,
                timer: plan.timer.clone(),
                rng: Arc::new(parking_lot::Mutex::new(StdRng::seed_from_u64(!seed))),
                watch_pool: Arc::default(),
            },
            clock,
            plan,
            trial,
            rng: Arc::new(parking_lot::Mutex::new(StdRng::seed_from_u64(seed))),
            tokens: AtomicU64::new(0),
            crashed: Arc::default(),
        }
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
        act(&self.plan, &self.trial, action).await
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

async fn act(plan: &Plan, trial: &Trial, action: Action) -> Step<()> {
    match action {
        Action::Go => Ok(()),
        Action::Stall(d) => {
            trial.count_stall();
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
}

impl fmt::Debug for PauseBeforeEach {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PauseBeforeEach").finish_non_exhaustive()
    }
}

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
            match act(&self.plan, &self.trial, action).await {
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
/// happens, with the client that caused it ([`Audit`]).
#[derive(Clone)]
pub struct RaceStore<S> {
    inner: S,
    client: usize,
    trial: Arc<Trial>,
    audit: Audit,
    latency: Option<(Duration, Duration)>,
    timer: Timer,
    /// Draws each hop's latency: seeded per client, so a seed gives one table.
    rng: Arc<parking_lot::Mutex<StdRng>>,
    /// Idle `WATCH` connections of the inner store, for [`WatchStore`]: type-erased because
    /// only `S: WatchStore` has a connection type.
    watch_pool: Arc<parking_lot::Mutex<Vec<Box<dyn Any + Send>>>>,
}

impl<S> fmt::Debug for RaceStore<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaceStore")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

/// One way of a simulated round trip: half of a draw in `latency`.
async fn hop(
    latency: Option<(Duration, Duration)>,
    timer: &Timer,
    rng: &parking_lot::Mutex<StdRng>,
) {
    if let Some((low, high)) = latency {
        let d = if high > low {
            rng.lock().random_range(low..high)
        } else {
            low
        };
        timer.sleep(d / 2).await;
    }
}

impl<S: Store> RaceStore<S> {
    async fn hop(&self) {
        hop(self.latency, &self.timer, &self.rng).await;
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
}

impl<S: Store> Store for RaceStore<S> {
    async fn get(&self, key: &str) -> tairlock::Result<Option<Vec<u8>>> {
        self.round_trip(self.inner.get(key)).await
    }

    async fn set_nx(&self, key: &str, value: &[u8]) -> tairlock::Result<bool> {
        let set = self.round_trip(self.inner.set_nx(key, value)).await?;
        if set {
            self.saw(None, Some(value));
        }
        Ok(set)
    }

    async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> tairlock::Result<bool> {
        let set = self
            .round_trip(self.inner.set_nx_px(key, value, ttl))
            .await?;
        if set {
            self.saw(None, Some(value));
        }
        Ok(set)
    }

    async fn set(&self, key: &str, value: &[u8]) -> tairlock::Result<()> {
        match self.audit {
            Audit::Store => self.round_trip(self.inner.set(key, value)).await,
            // `GETSET` replaces exactly as `SET` does (value and TTL) and says what it replaced.
            Audit::Commands => self.getset(key, value).await.map(drop),
        }
    }

    async fn getset(&self, key: &str, value: &[u8]) -> tairlock::Result<Option<Vec<u8>>> {
        let old = self.round_trip(self.inner.getset(key, value)).await?;
        self.saw(old.as_deref(), Some(value));
        Ok(old)
    }

    async fn getdel(&self, key: &str) -> tairlock::Result<Option<Vec<u8>>> {
        let old = self.round_trip(self.inner.getdel(key)).await?;
        self.saw(old.as_deref(), None);
        Ok(old)
    }

    async fn del(&self, key: &str) -> tairlock::Result<bool> {
        // `GETDEL` deletes exactly as `DEL` does and also says what it deleted.
        Ok(self.getdel(key).await?.is_some())
    }

    async fn incr(&self, key: &str) -> tairlock::Result<i64> {
        self.round_trip(self.inner.incr(key)).await
    }

    async fn decr(&self, key: &str) -> tairlock::Result<i64> {
        self.round_trip(self.inner.decr(key)).await
    }

    async fn expire(&self, key: &str, seconds: u64) -> tairlock::Result<bool> {
        self.round_trip(self.inner.expire(key, seconds)).await
    }

    async fn pexpire(&self, key: &str, ttl: Duration) -> tairlock::Result<bool> {
        self.round_trip(self.inner.pexpire(key, ttl)).await
    }

    async fn pttl(&self, key: &str) -> tairlock::Result<Ttl> {
        self.round_trip(self.inner.pttl(key)).await
    }

    async fn key_type(&self, key: &str) -> tairlock::Result<String> {
        self.round_trip(self.inner.key_type(key)).await
    }

    async fn time(&self) -> tairlock::Result<Duration> {
        self.round_trip(self.inner.time()).await
    }

    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> tairlock::Result<Reply> {
        if self.audit == Audit::Store || keys.is_empty() {
            return self.round_trip(self.inner.eval(script, keys, args)).await;
        }
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

    fn runtime(&self) -> Option<tokio::runtime::Handle> {
        self.inner.runtime()
    }

    fn pubsub(&self) -> tairlock::notify::PubSub {
        self.inner.pubsub()
    }
}

/// `WATCH` transactions through the race's wrapper (for `legacy-watch`): each command takes a
/// simulated round trip, and a successful `EXEC` that deletes a key reports the value the
/// transaction read for it, so the race sees what a WATCH release deleted.
impl<S: WatchStore> WatchStore for RaceStore<S> {
    type Connection = RaceConnection<S::Connection>;

    async fn watch_connection(&self) -> tairlock::Result<RaceConnection<S::Connection>> {
        let idle = self
            .watch_pool
            .lock()
            .pop()
            .and_then(|c| c.downcast::<S::Connection>().ok());
        let inner = match idle {
            Some(con) => *con,
            None => self.inner.watch_connection().await?,
        };
        Ok(RaceConnection {
            inner: Some(inner),
            client: self.client,
            trial: self.trial.clone(),
            audit: self.audit,
            latency: self.latency,
            timer: self.timer.clone(),
            rng: self.rng.clone(),
            pool: self.watch_pool.clone(),
            reads: HashMap::new(),
            clean: true,
        })
    }

    async fn server_version(&self) -> tairlock::Result<Option<String>> {
        self.inner.server_version().await
    }
}

/// A `WATCH` connection of a race client; see [`RaceStore`]'s [`WatchStore`] impl. Dropped
/// after a completed command (not mid-request), its inner connection goes back to the client's
/// pool; the next `watch` resets whatever it still watches.
pub struct RaceConnection<C: WatchConnection> {
    inner: Option<C>,
    client: usize,
    trial: Arc<Trial>,
    audit: Audit,
    latency: Option<(Duration, Duration)>,
    timer: Timer,
    rng: Arc<parking_lot::Mutex<StdRng>>,
    pool: Arc<parking_lot::Mutex<Vec<Box<dyn Any + Send>>>>,
    reads: HashMap<String, Vec<u8>>,
    clean: bool,
}

impl<C: WatchConnection> fmt::Debug for RaceConnection<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RaceConnection")
            .field("client", &self.client)
            .finish_non_exhaustive()
    }
}

impl<C: WatchConnection> Drop for RaceConnection<C> {
    fn drop(&mut self) {
        if let Some(con) = self.inner.take()
            && self.clean
        {
            self.pool.lock().push(Box::new(con));
        }
    }
}

impl<C: WatchConnection> RaceConnection<C> {
    async fn hop(&self) {
        hop(self.latency, &self.timer, &self.rng).await;
    }

    fn con(&mut self) -> &mut C {
        self.inner
            .as_mut()
            .expect("the connection is only taken on drop")
    }
}

impl<C: WatchConnection> WatchConnection for RaceConnection<C> {
    async fn watch(&mut self, keys: &[String], reads: &[Read]) -> tairlock::Result<Vec<Reply>> {
        self.hop().await;
        self.clean = false;
        let actor = (self.client, self.trial.clone());
        let out = ACTOR.scope(actor, self.con().watch(keys, reads)).await;
        self.hop().await;
        self.reads.clear();
        if let Ok(replies) = &out {
            self.clean = true;
            for (read, reply) in reads.iter().zip(replies) {
                if let (Read::Get(key), Reply::Data(value)) = (read, reply) {
                    self.reads.insert(key.clone(), value.clone());
                }
            }
        }
        out
    }

    async fn unwatch(&mut self) -> tairlock::Result<()> {
        self.hop().await;
        self.clean = false;
        let out = self.con().unwatch().await;
        self.hop().await;
        self.clean = out.is_ok();
        out
    }

    async fn exec(&mut self, ops: &[TxOp]) -> tairlock::Result<Option<Vec<Reply>>> {
        self.hop().await;
        self.clean = false;
        let actor = (self.client, self.trial.clone());
        let out = ACTOR.scope(actor, self.con().exec(ops)).await;
        self.hop().await;
        self.clean = out.is_ok();
        if self.audit == Audit::Commands
            && let Ok(Some(replies)) = &out
        {
            // The watched reads still held when EXEC ran (it did not abort): each deletion or
            // overwrite replaced exactly the value read.
            for (op, reply) in ops.iter().zip(replies) {
                match (op, reply) {
                    (TxOp::Del { key }, Reply::Int(1)) => {
                        let old = self.reads.remove(key);
                        self.trial.saw_change(self.client, old.as_deref(), None);
                    }
                    (TxOp::Set { key, value, .. }, Reply::Status(_)) => {
                        let old = self.reads.insert(key.clone(), value.clone());
                        self.trial
                            .saw_change(self.client, old.as_deref(), Some(value));
                    }
                    _ => {}
                }
            }
        }
        out
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
