//! A gated store: the test decides, command by command, whose command runs next.
//!
//! Every client gets its own handle, [`Gate::client`], wrapping one shared store. Each command a
//! client sends (each [`Store`] method, each script, and on a
//! [`WatchStore`](tairlock_legacy::WatchStore) each `WATCH`
//! pipeline, `UNWATCH` and `MULTI`/`EXEC`) first waits at the gate until the test lets exactly
//! that command of exactly that client through with [`Gate::step`], which returns only once the
//! command has completed. So the test drives an exact interleaving, e.g. a row of a step table
//! in `reference/semantics.md`:
//!
//! ```
//! use std::time::Duration;
//! use tairlock::MemoryStore;
//! use tairlock_legacy::{GetSetLock, TryAcquire};
//! use tairlock_testing::gated::Gate;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let (gate, store) = (Gate::new(), MemoryStore::new());
//! let c1 = GetSetLock::new(gate.client("C1", store.clone()));
//! let c2 = GetSetLock::new(gate.client("C2", store.clone()));
//! let lease = Duration::from_secs(10);
//! let t1 = tokio::spawn(async move { c1.try_acquire("k", lease).await });
//! let t2 = tokio::spawn(async move { c2.try_acquire("k", lease).await });
//! gate.step("C2", "SETNX").await; // C2's SETNX runs now, and has finished
//! gate.step("C1", "SETNX").await; // then C1's
//! gate.step("C1", "GET").await; // C1 reads C2's live lock: busy
//! assert!(matches!(gate.join(t2).await.unwrap(), TryAcquire::Acquired(_)));
//! assert!(matches!(gate.join(t1).await.unwrap(), TryAcquire::Busy { .. }));
//! # });
//! ```
//!
//! A step panics (with what every client is waiting on) when the client sends a different
//! command or none within five seconds, so a schedule that no longer matches the algorithm
//! fails loudly instead of hanging. [`Gate::open`] lets a client run ungated (setup, cleanup);
//! [`Gate::finish`] lets a client's task run to its end.
//!
//! Command names: `GET`, `SETNX`, `SET NX PX`, `SET`, `GETSET`, `GETDEL`, `DEL`, `INCR`, `DECR`,
//! `EXPIRE`, `PEXPIRE`, `PTTL`, `TYPE`, `TIME`, `EVAL <script name>`, `EVAL+WAIT <script name>`,
//! and on a connection `WATCH` (the watch plus its reads, one round trip), `UNWATCH`, `EXEC`
//! ([`Command::name`]). Reading the server's version is not gated. A gated client is an
//! [`Intercept`] store whose hook is the gate: it keeps the inner store's release notifications,
//! pub/sub flavour and runtime.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::Store;
use tairlock::store::intercept::{Command, Hook, Intercept, Run};
use tairlock_legacy::watch::{InterceptConnection, WatchHook};
use tokio::sync::oneshot;

/// How long a step waits for the client to send its command.
const STEP_TIMEOUT: Duration = Duration::from_secs(5);

struct Waiting {
    command: String,
    go: oneshot::Sender<oneshot::Sender<()>>,
}

#[derive(Default)]
struct State {
    waiting: HashMap<String, Waiting>,
    open: HashSet<String>,
    log: Vec<(String, String)>,
}

/// The gate shared by every client of one test. See the [module docs](self).
#[derive(Clone, Default)]
pub struct Gate {
    state: Arc<Mutex<State>>,
}

impl fmt::Debug for Gate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.state.lock();
        f.debug_struct("Gate")
            .field("waiting", &waiting_list(&state))
            .field("open", &state.open)
            .finish()
    }
}

fn waiting_list(state: &State) -> Vec<String> {
    let mut list: Vec<_> = state
        .waiting
        .iter()
        .map(|(c, w)| format!("{c}: {}", w.command))
        .collect();
    list.sort();
    list
}

impl Gate {
    /// A gate with no clients.
    pub fn new() -> Self {
        Gate::default()
    }

    /// The handle of client `name` on `store`: every command it sends waits at this gate.
    pub fn client<S: Store>(&self, name: &str, store: S) -> Gated<S> {
        Intercept::new(
            store,
            GateHook {
                gate: self.clone(),
                name: Arc::from(name),
            },
        )
    }

    /// Let `client`'s next command through, which must be `command`, and wait until it has
    /// completed.
    ///
    /// # Panics
    ///
    /// When the client sends another command, or none within five seconds.
    #[track_caller]
    pub fn step<'a>(&'a self, client: &'a str, command: &'a str) -> impl Future<Output = ()> + 'a {
        let caller = std::panic::Location::caller();
        async move {
            let sent = self.wait_for(client, caller).await;
            if sent.command != command {
                let others = waiting_list(&self.state.lock());
                panic!(
                    "{caller}: {client} sent {} but the schedule expects {command}; also waiting \
                     at the gate: {others:?}",
                    sent.command
                );
            }
            self.let_through(sent).await;
        }
    }

    /// Let `client`'s commands through, each of them, until one named `command` has completed.
    ///
    /// # Panics
    ///
    /// When the client stops sending commands for five seconds before that.
    #[track_caller]
    pub fn through<'a>(
        &'a self,
        client: &'a str,
        command: &'a str,
    ) -> impl Future<Output = ()> + 'a {
        let caller = std::panic::Location::caller();
        async move {
            loop {
                let sent = self.wait_for(client, caller).await;
                let last = sent.command == command;
                self.let_through(sent).await;
                if last {
                    return;
                }
            }
        }
    }

    /// Let `task` (a task of `client`) run to its end, letting each of its commands through.
    pub async fn finish<T>(&self, client: &str, task: tokio::task::JoinHandle<T>) -> T {
        while !task.is_finished() {
            let sent = self.state.lock().waiting.remove(client);
            match sent {
                Some(sent) => self.let_through(sent).await,
                None => tokio::time::sleep(Duration::from_millis(1)).await,
            }
        }
        task.await.expect("the gated task panicked")
    }

    /// The result of a client's task, which must finish within five seconds: a task still
    /// waiting at the gate (the algorithm sent a command the schedule does not let through)
    /// fails the test instead of hanging it.
    #[track_caller]
    pub fn join<T: 'static>(
        &self,
        task: tokio::task::JoinHandle<T>,
    ) -> impl Future<Output = T> + '_ {
        let caller = std::panic::Location::caller();
        async move {
            match tokio::time::timeout(STEP_TIMEOUT, task).await {
                Ok(out) => out.expect("the gated task panicked"),
                Err(_) => panic!(
                    "{caller}: the task did not finish within {STEP_TIMEOUT:?}; waiting at the \
                     gate: {:?}",
                    waiting_list(&self.state.lock())
                ),
            }
        }
    }

    /// Let every command of `client` through without waiting for the test, from now on.
    pub fn open(&self, client: &str) {
        let mut state = self.state.lock();
        state.open.insert(client.to_owned());
        if let Some(w) = state.waiting.remove(client) {
            let (done, _) = oneshot::channel();
            let _ = w.go.send(done);
        }
    }

    /// What each client is waiting at the gate to send now, as `client: command`, sorted.
    pub fn waiting(&self) -> Vec<String> {
        waiting_list(&self.state.lock())
    }

    /// Every gated command that has run so far, as (client, command), in order.
    pub fn log(&self) -> Vec<(String, String)> {
        self.state.lock().log.clone()
    }

    /// The gated commands `client` has run so far, in order.
    pub fn commands_of(&self, client: &str) -> Vec<String> {
        self.state
            .lock()
            .log
            .iter()
            .filter(|(c, _)| c == client)
            .map(|(_, cmd)| cmd.clone())
            .collect()
    }

    async fn wait_for(&self, client: &str, caller: &std::panic::Location<'_>) -> Waiting {
        let deadline = tokio::time::Instant::now() + STEP_TIMEOUT;
        loop {
            {
                let mut state = self.state.lock();
                if let Some(w) = state.waiting.remove(client) {
                    return w;
                }
                if tokio::time::Instant::now() >= deadline {
                    panic!(
                        "{caller}: {client} sent no command within {STEP_TIMEOUT:?}; waiting at the \
                         gate: {:?}",
                        waiting_list(&state)
                    );
                }
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    async fn let_through(&self, sent: Waiting) {
        let (done_tx, done_rx) = oneshot::channel();
        if sent.go.send(done_tx).is_err() {
            return; // The client's future was dropped while it waited.
        }
        let _ = done_rx.await;
    }

    /// Run `fut` as `client`'s command `command` once the test lets it through.
    async fn pass<T>(&self, client: &str, command: String, fut: impl Future<Output = T>) -> T {
        let done = {
            let mut state = self.state.lock();
            if state.open.contains(client) {
                None
            } else {
                let (go, rx) = oneshot::channel();
                let previous = state.waiting.insert(
                    client.to_owned(),
                    Waiting {
                        command: command.clone(),
                        go,
                    },
                );
                assert!(
                    previous.is_none(),
                    "{client} sent {command} while another of its commands was waiting"
                );
                Some(rx)
            }
        };
        let done = match done {
            Some(rx) => Some(rx.await.expect("the gate was dropped")),
            None => None,
        };
        let out = fut.await;
        self.state.lock().log.push((client.to_owned(), command));
        if let Some(done) = done {
            let _ = done.send(());
        }
        out
    }
}

/// What a gated client does around each command: wait at the [`Gate`] until the test lets it
/// through.
#[derive(Debug)]
pub struct GateHook {
    gate: Gate,
    name: Arc<str>,
}

impl GateHook {
    /// The client's name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl Hook for GateHook {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        match command {
            // Reading the server's version changes nothing: not gated.
            Command::ServerVersion => run,
            _ => Box::pin(self.gate.pass(&self.name, command.name(), run)),
        }
    }
}

/// `WATCH`, `UNWATCH` and `EXEC` of a gated client's connections wait at the gate as
/// [`Command::Watch`], [`Command::Unwatch`] and [`Command::Exec`].
impl WatchHook for GateHook {}

/// One client's handle on a gated store: an [`Intercept`] store whose hook waits at the gate.
/// See the [module docs](self).
pub type Gated<S> = Intercept<S, GateHook>;

/// A gated `WATCH` connection.
pub type GatedConnection<C> = InterceptConnection<C, GateHook>;
