//! One contending client: its store handle, its clock, and the scenario's hand on its pauses.

use std::any::Any;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tairlock::clock::SharedClock;
use tairlock::{Reply, Script, Store, Ttl};
use tairlock_legacy::watch::{Read, TxOp, WatchConnection, WatchStore};

use super::scenario::{Action, Plan};
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
    rng: parking_lot::Mutex<StdRng>,
    tokens: AtomicU64,
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
    ) -> Self {
        Client {
            id,
            store: RaceStore {
                inner: store,
                client: id,
                trial: trial.clone(),
                latency: plan.latency,
                watch_pool: Arc::default(),
            },
            clock,
            plan,
            trial,
            rng: parking_lot::Mutex::new(StdRng::seed_from_u64(seed)),
            tokens: AtomicU64::new(0),
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
        match action {
            Action::Go => Ok(()),
            Action::Stall(d) => {
                self.trial.count_stall();
                tokio::time::sleep(d).await;
                Ok(())
            }
            Action::Crash => {
                self.trial.count_crash();
                Err(Interrupt::Crashed)
            }
        }
    }

    pub(crate) fn trial(&self) -> &Trial {
        &self.trial
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

/// The store as the race's clients see it: every command takes a simulated network round trip
/// (on the embedded store), and every `DEL` reports what it deleted, so a deletion of another
/// holder's lock is seen where it happens. `DEL` is sent as `GETDEL`, which deletes exactly as
/// `DEL` does and also returns the value.
#[derive(Clone)]
pub struct RaceStore<S> {
    inner: S,
    client: usize,
    trial: Arc<Trial>,
    latency: Option<(Duration, Duration)>,
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

impl<S: Store> RaceStore<S> {
    async fn hop(&self) {
        if let Some((low, high)) = self.latency {
            let d = if high > low {
                rand::rng().random_range(low..high)
            } else {
                low
            };
            tokio::time::sleep(d / 2).await;
        }
    }

    async fn round_trip<T>(&self, fut: impl std::future::Future<Output = T>) -> T {
        self.hop().await;
        let out = fut.await;
        self.hop().await;
        out
    }
}

impl<S: Store> Store for RaceStore<S> {
    async fn get(&self, key: &str) -> tairlock::Result<Option<Vec<u8>>> {
        self.round_trip(self.inner.get(key)).await
    }

    async fn set_nx(&self, key: &str, value: &[u8]) -> tairlock::Result<bool> {
        self.round_trip(self.inner.set_nx(key, value)).await
    }

    async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> tairlock::Result<bool> {
        self.round_trip(self.inner.set_nx_px(key, value, ttl)).await
    }

    async fn set(&self, key: &str, value: &[u8]) -> tairlock::Result<()> {
        self.round_trip(self.inner.set(key, value)).await
    }

    async fn getset(&self, key: &str, value: &[u8]) -> tairlock::Result<Option<Vec<u8>>> {
        self.round_trip(self.inner.getset(key, value)).await
    }

    async fn getdel(&self, key: &str) -> tairlock::Result<Option<Vec<u8>>> {
        let old = self.round_trip(self.inner.getdel(key)).await?;
        if let Some(v) = &old {
            self.trial.saw_deletion(self.client, v);
        }
        Ok(old)
    }

    async fn del(&self, key: &str) -> tairlock::Result<bool> {
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
        self.round_trip(self.inner.eval(script, keys, args)).await
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
            latency: self.latency,
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
    latency: Option<(Duration, Duration)>,
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
        if let Some((low, high)) = self.latency {
            let d = if high > low {
                rand::rng().random_range(low..high)
            } else {
                low
            };
            tokio::time::sleep(d / 2).await;
        }
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
        let out = self.con().watch(keys, reads).await;
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
        let out = self.con().exec(ops).await;
        self.hop().await;
        self.clean = out.is_ok();
        if let Ok(Some(replies)) = &out {
            for (op, reply) in ops.iter().zip(replies) {
                if let (TxOp::Del { key }, Reply::Int(1)) = (op, reply)
                    && let Some(value) = self.reads.get(key)
                {
                    self.trial.saw_deletion(self.client, value);
                }
            }
        }
        out
    }
}
