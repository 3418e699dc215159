//! The embedded store: a keyspace ([`Db`], Redis's data model and commands, from the scripting
//! vocabulary) behind one mutex, an injectable clock, and the hub that delivers its release
//! notifications in process.
//!
//! Shaped like mini-redis's `Db`: a cheap-to-clone handle around one shared state, and one mutex
//! around the keyspace, held for exactly one command or one script. That is Redis's own unit of
//! atomicity, so a native body run under the lock is as atomic as its Lua twin run by the server.
//! Nothing here is a mock: it is a product feature (tests and the `race` simulation run on it,
//! and so can applications that need locks between tasks of one process), and it is held to the
//! same contract as [`RedisStore`](super::RedisStore) by the shared conformance and differential
//! tests.

use std::sync::Arc;
use std::time::Duration;

/// The keyspace and its types, defined with the scripting vocabulary ([`crate::script`]) and
/// re-exported here where the embedded store's users have always found them.
pub use crate::script::{Change, CommandError, CommandResult, Db};

use super::{Store, Ttl};
use crate::clock::{SharedClock, SystemClock};
use crate::error::Result;
use crate::notify::{Hub, Notifier};
use crate::script::{Reply, Script};
use crate::sync::Mutex;

/// The embedded store. See the [module docs](self).
#[derive(Clone, Debug)]
pub struct MemoryStore {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    db: Mutex<Db>,
    clock: SharedClock,
    hub: Arc<Hub>,
    /// Told of every string write, replacement and deletion, after each step (see `on_change`).
    on_change: std::sync::OnceLock<ChangeObserver>,
    /// Loom models only: run at the end of every atomic step, inside it (see `observe`).
    #[cfg(tairlock_loom)]
    observer: std::sync::OnceLock<Observer>,
}

struct ChangeObserver(Box<dyn Fn(&Change) + Send + Sync>);

impl std::fmt::Debug for ChangeObserver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChangeObserver")
    }
}

#[cfg(tairlock_loom)]
struct Observer(Box<dyn Fn(&mut Db) + Send + Sync>);

#[cfg(tairlock_loom)]
impl std::fmt::Debug for Observer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observer")
    }
}

impl Default for MemoryStore {
    fn default() -> Self {
        MemoryStore::new()
    }
}

impl MemoryStore {
    /// A store on the system clock.
    pub fn new() -> Self {
        MemoryStore::with_clock(Arc::new(SystemClock))
    }

    /// A store on `clock` (a [`VirtualClock`](crate::clock::VirtualClock) in tests).
    pub fn with_clock(clock: SharedClock) -> Self {
        MemoryStore {
            shared: Arc::new(Shared {
                db: Mutex::new(Db::new()),
                clock,
                hub: Arc::new(Hub::default()),
                on_change: std::sync::OnceLock::new(),
                #[cfg(tairlock_loom)]
                observer: std::sync::OnceLock::new(),
            }),
        }
    }

    /// The store's clock.
    pub fn clock(&self) -> &SharedClock {
        &self.shared.clock
    }

    /// Run `f` on the keyspace as one atomic step, with time frozen at the clock's now.
    pub fn atomically<T>(&self, f: impl FnOnce(&mut Db) -> T) -> T {
        let (out, published, changes) = {
            let mut db = self.shared.db.lock();
            // The clock is read inside the step, so steps see time in the order they run.
            db.set_time(self.shared.clock.now());
            let out = f(&mut db);
            #[cfg(tairlock_loom)]
            if let Some(observer) = self.shared.observer.get() {
                (observer.0)(&mut db);
            }
            (out, db.take_outbox(), db.take_changes())
        };
        if let Some(observer) = self.shared.on_change.get() {
            for change in &changes {
                (observer.0)(change);
            }
        }
        for (channel, message) in published {
            match message {
                Some(message) => self.shared.hub.deliver_message(&channel, &message),
                None => self.shared.hub.deliver(&channel),
            }
        }
        out
    }

    /// Tell `observer` of every string value a command or script writes, replaces or deletes
    /// (a key's expiry is not a change: nobody caused it), in the order they happen. It runs
    /// right after the step that made the change, outside the keyspace lock, on the caller's
    /// thread and task: the caller of the command is the one who made it. For audits such as
    /// the race's count of deleted locks. One observer per store: false (and `observer` is
    /// dropped) when one is already set.
    pub fn on_change(&self, observer: impl Fn(&Change) + Send + Sync + 'static) -> bool {
        let set = self
            .shared
            .on_change
            .set(ChangeObserver(Box::new(observer)))
            .is_ok();
        self.shared.db.lock().record_changes();
        set
    }

    /// Loom models only: run `observer` at the end of every atomic step, inside it, so a model
    /// sees each step's effect in the order the steps happened. Set once per store.
    ///
    /// # Panics
    ///
    /// When an observer is already set.
    #[cfg(tairlock_loom)]
    #[doc(hidden)]
    pub fn observe(&self, observer: impl Fn(&mut Db) + Send + Sync + 'static) {
        assert!(
            self.shared
                .observer
                .set(Observer(Box::new(observer)))
                .is_ok(),
            "MemoryStore::observe: an observer is already set"
        );
    }

    fn run<T>(&self, f: impl FnOnce(&mut Db) -> CommandResult<T>) -> Result<T> {
        self.atomically(f).map_err(Into::into)
    }
}

impl Store for MemoryStore {
    fn single_shard(&self) -> bool {
        true
    }

    async fn get(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.run(|db| db.get(key))
    }

    async fn set_nx(&self, key: &str, value: &[u8]) -> Result<bool> {
        Ok(self.atomically(|db| db.set_nx(key, value, None)))
    }

    async fn set_nx_px(&self, key: &str, value: &[u8], ttl: Duration) -> Result<bool> {
        // `SET ... PX 0` is refused by the server (the TTL is sent in whole milliseconds).
        if ttl.as_millis() == 0 {
            return Err(CommandError::new("ERR", "invalid expire time in 'set' command").into());
        }
        Ok(self.atomically(|db| db.set_nx(key, value, Some(ttl))))
    }

    async fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.atomically(|db| db.set(key, value, None));
        Ok(())
    }

    async fn getset(&self, key: &str, value: &[u8]) -> Result<Option<Vec<u8>>> {
        self.run(|db| db.getset(key, value))
    }

    async fn getdel(&self, key: &str) -> Result<Option<Vec<u8>>> {
        self.run(|db| db.getdel(key))
    }

    async fn del(&self, key: &str) -> Result<bool> {
        Ok(self.atomically(|db| db.del(key)))
    }

    async fn incr(&self, key: &str) -> Result<i64> {
        self.run(|db| db.incr_by(key, 1))
    }

    async fn decr(&self, key: &str) -> Result<i64> {
        self.run(|db| db.incr_by(key, -1))
    }

    async fn expire(&self, key: &str, seconds: u64) -> Result<bool> {
        Ok(self.atomically(|db| db.pexpire(key, Duration::from_secs(seconds))))
    }

    async fn pexpire(&self, key: &str, ttl: Duration) -> Result<bool> {
        Ok(self.atomically(|db| db.pexpire(key, ttl)))
    }

    async fn pttl(&self, key: &str) -> Result<Ttl> {
        Ok(Ttl::from_pttl(self.atomically(|db| db.pttl(key))))
    }

    async fn key_type(&self, key: &str) -> Result<String> {
        Ok(self.atomically(|db| db.key_type(key)).to_owned())
    }

    async fn time(&self) -> Result<Duration> {
        Ok(self.shared.clock.now())
    }

    async fn notifier(&self) -> Option<Notifier> {
        Some(Notifier::in_process(self.shared.hub.clone()))
    }

    async fn eval(
        &self,
        script: &'static Script,
        keys: &[String],
        args: &[String],
    ) -> Result<Reply> {
        let native = script.native();
        self.run(|db| native(db, keys, args))
    }
}
