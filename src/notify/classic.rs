//! Classic pub/sub: one dedicated connection, `SUBSCRIBE`/`UNSUBSCRIBE`, messages from `PUBLISH`.
//!
//! On one server this is the whole story. On a cluster, a classic `PUBLISH` is broadcast over the
//! cluster bus to every node, so one connection to any node hears every lock's releases: simple,
//! but every release costs every node a message (see [`sharded`](super::sharded) for the
//! alternative on Redis 7.0+).
//!
//! One task owns the connection: it makes it (and makes it again when it drops or stops
//! answering), feeds the hub with its messages and carries out the subscription changes asked
//! for. Callers only list a channel in the task's [`Inbox`] and wait, within their own patience,
//! for its state to change: nobody holds a lock across a round trip, and a stalled connection
//! holds up nobody longer than they chose to wait. The inbox lists each channel once however
//! often it is asked for, and the task reads what the channel needs from the hub when it gets to
//! it, so a connection that cannot be made (`maxclients`, a sentinel that names nobody) costs one
//! entry per channel someone watches, never one per request.
//!
//! The task runs on the store's runtime (not on whichever runtime first needed it, which may
//! shut down first); if it is gone anyway, the next registration notices and starts it again,
//! as after a lost connection.
//!
//! | event | what the task does |
//! |---|---|
//! | a channel's first watcher | `SUBSCRIBE` it (unless already subscribed) with the other channels asked for meanwhile (at most [`SUBSCRIBE_BATCH`] per command), then mark it subscribed; on the first connection (made for that first watcher) nobody is woken |
//! | the last watcher left | keep it subscribed; once nobody has watched it for 3 s, `UNSUBSCRIBE` it |
//! | no round trip for 5 response timeouts while anything is registered | `PING`: a connection that a network device stopped forwarding (no reset) would otherwise go unnoticed, and with it every release. Only a real round trip (a `SUBSCRIBE`, `UNSUBSCRIBE` or `PING` answered) counts, never a request that needed none |
//! | the connection drops, or a round trip takes longer than the response timeout | mark every channel pending and wake every watcher (anything may have been released meanwhile), forget the channels nobody watches, connect again with back-off, `SUBSCRIBE` every watched channel (those registered during the reconnection included) in batches of [`SUBSCRIBE_BATCH`], mark them subscribed and wake them again |
//! | the connection cannot be made | channels whose last watcher leaves are forgotten at once; the watched ones wait, pending, for the next connection |
//! | `NOPERM` (the user may not subscribe) | mark the channels failed and record the refusal ([`Notifier::notifications_denied`](super::Notifier::notifications_denied)); waiters poll |

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::{Channel, Denial, Hub, Inbox, Lingering, SUBSCRIBE_BATCH, Sub, Timeouts, failed};

/// How often a connection with registered channels is checked with a `PING` when no other
/// round trip was made: five response timeouts (10 s with the default 2 s), within 1–15 s.
pub(super) fn keepalive(timeouts: &Timeouts) -> Duration {
    (timeouts.response * 5).clamp(Duration::from_secs(1), Duration::from_secs(15))
}

/// The handle of the connection's task. See the [module docs](self).
pub(super) struct ClassicSubscriber {
    inbox: Arc<Inbox>,
    /// What a (re)started task is made of.
    parts: Task,
    task: Mutex<tokio::task::AbortHandle>,
}

impl Drop for ClassicSubscriber {
    fn drop(&mut self) {
        self.task.lock().abort();
    }
}

impl ClassicSubscriber {
    /// Start the task on `runtime` (the store's; see [`spawn_handle`]); it connects to the
    /// first of `clients` that answers.
    ///
    /// [`spawn_handle`]: crate::blocking::spawn_handle
    pub(super) fn start(
        clients: Clients,
        hub: Arc<Hub>,
        denial: Arc<Denial>,
        timeouts: Timeouts,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Self {
        let inbox = Arc::new(Inbox::default());
        let parts = Task {
            clients,
            hub,
            denial,
            timeouts,
            inbox: inbox.clone(),
            runtime,
        };
        let task = Mutex::new(parts.spawn(false));
        ClassicSubscriber { inbox, parts, task }
    }

    /// List `channel` for the task (its state is [`Sub::Pending`] already).
    pub(super) fn request(&self, channel: &str) {
        self.revive();
        self.inbox.push(channel);
    }

    /// Start the task again if it is gone (its runtime shut down): every registered channel
    /// is subscribed again and every watcher woken, as after a lost connection, rather than
    /// left pending (or subscribed on a connection nobody reads) for good.
    pub(super) fn revive(&self) {
        let mut task = self.task.lock();
        if task.is_finished() {
            *task = self.parts.spawn(true);
        }
    }

    /// Drop the connection and make it again, as if it had been lost: every watcher is woken
    /// and every channel subscribed again (on the server the clients' source names now).
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    pub(super) fn reconnect(&self) {
        self.revive();
        self.inbox.reconnect();
    }

    /// The last watcher of `channel` left: the task keeps it subscribed for [`LINGER`], then
    /// unsubscribes it unless a watcher came back. The check and the `UNSUBSCRIBE` happen in the
    /// task, in order with the `SUBSCRIBE`s, so the `SUBSCRIBE` of a new registration of the
    /// channel is never overtaken by this `UNSUBSCRIBE`.
    ///
    /// [`LINGER`]: super::LINGER
    pub(super) fn unsubscribe_later(&self, channel: &str) {
        self.inbox.push(channel);
    }

    /// How many channels wait for the task.
    pub(super) fn backlog(&self) -> usize {
        self.inbox.len()
    }
}

/// Where the task connects.
#[derive(Clone)]
pub(crate) enum Clients {
    /// These servers, in turn.
    Fixed(Vec<redis::Client>),
    /// Whichever server this names on each (re)connection (`None`: none known now, try again
    /// after the back-off): the current master behind Sentinel.
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    Resolved(Resolver),
}

/// Names the server to connect to, asked before every connection.
pub(crate) type Resolver = Arc<
    dyn Fn() -> std::pin::Pin<Box<dyn std::future::Future<Output = Option<redis::Client>> + Send>>
        + Send
        + Sync,
>;

/// The connection's task.
#[derive(Clone)]
struct Task {
    clients: Clients,
    hub: Arc<Hub>,
    denial: Arc<Denial>,
    timeouts: Timeouts,
    inbox: Arc<Inbox>,
    runtime: Option<tokio::runtime::Handle>,
}

/// The back-off between failed connections: from 50 ms, doubling up to 2 s.
struct Backoff(Duration);

impl Backoff {
    const FIRST: Duration = Duration::from_millis(50);

    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(2));
        now
    }
}

impl Task {
    /// Spawn a copy of the task on the store's runtime (or, when that one is gone, on the
    /// caller's, else tairlock's own). `revived`: a previous task is gone, and with it its
    /// connection.
    fn spawn(&self, revived: bool) -> tokio::task::AbortHandle {
        let task = crate::blocking::spawn_handle(self.runtime.clone())
            .spawn(self.clone().run(revived))
            .abort_handle();
        if !task.is_finished() || self.runtime.is_none() {
            return task;
        }
        // The store's runtime has shut down: the task was dropped as it was spawned.
        crate::blocking::spawn_handle(None)
            .spawn(self.clone().run(revived))
            .abort_handle()
    }

    async fn run(self, revived: bool) {
        if matches!(&self.clients, Clients::Fixed(clients) if clients.is_empty()) {
            return std::future::pending().await;
        }
        let mut backoff = Backoff(Backoff::FIRST);
        let mut next = 0;
        // Whether a connection was served and lost: only then can a release have gone unheard
        // by a subscription (a first connection had none to miss anything with).
        let mut reconnecting = revived;
        if revived {
            self.lost();
        }
        let mut lingering = Lingering::default();
        loop {
            let Some(pubsub) = self.offline(self.connect(&mut next)).await else {
                self.offline(tokio::time::sleep(backoff.next())).await;
                continue;
            };
            let (mut sink, stream) = pubsub.split();
            if !self.resubscribe(&mut sink, reconnecting).await {
                self.offline(tokio::time::sleep(backoff.next())).await;
                continue;
            }
            backoff = Backoff(Backoff::FIRST);
            self.serve(&mut sink, stream, &mut lingering).await;
            reconnecting = true;
            lingering.clear();
            self.lost();
        }
    }

    /// The connection is gone: anything may have been released meanwhile, and every watched
    /// channel is subscribed again on the next connection.
    fn lost(&self) {
        for (_, ch) in self.hub.all() {
            ch.set(Sub::Pending);
        }
        self.hub.wake_all();
        self.hub.forget_unwatched();
    }

    /// A new connection to the next server, within the connection timeout.
    async fn connect(&self, next: &mut usize) -> Option<redis::aio::PubSub> {
        // A new master asked for before this connection is the one resolved now.
        self.inbox.take_reconnect();
        let client = match &self.clients {
            Clients::Fixed(clients) => Some(clients[*next % clients.len()].clone()),
            Clients::Resolved(resolve) => resolve().await,
        };
        *next += 1;
        let client = client?;
        match tokio::time::timeout(self.timeouts.connect, client.get_async_pubsub()).await {
            Ok(Ok(pubsub)) => Some(pubsub),
            _ => None,
        }
    }

    /// Run `fut` while no connection serves: the channels listed meanwhile are forgotten if
    /// nobody watches them (a waiter that gave up), so that an outage costs one entry per
    /// watched channel, whatever the number of names contended during it.
    async fn offline<T>(&self, fut: impl Future<Output = T>) -> T {
        let mut fut = pin!(fut);
        loop {
            self.hub.forget_offline(self.inbox.take(usize::MAX));
            tokio::select! {
                out = &mut fut => return out,
                () = self.inbox.listed() => {}
            }
        }
    }

    /// On a new connection, forget every channel nobody watches and SUBSCRIBE the watched ones
    /// in batches of [`SUBSCRIBE_BATCH`]; true unless the connection failed (a refusal marks the
    /// channels failed and counts as done). After a lost connection (`reconnecting`), every
    /// watcher is woken once subscribed again: a release while the subscription was down went
    /// unheard. A first connection wakes nobody: no watcher relied on a subscription before it,
    /// and a wake is not free (a shared read hold takes any message on its intent channel for
    /// a writer's intent, and gives itself up).
    async fn resubscribe(&self, sink: &mut redis::aio::PubSubSink, reconnecting: bool) -> bool {
        self.hub.forget_unwatched();
        let wanted: Vec<_> = self
            .hub
            .all()
            .into_iter()
            .filter(|(_, ch)| matches!(ch.state(), Sub::Pending | Sub::Subscribed))
            .collect();
        for batch in wanted.chunks(SUBSCRIBE_BATCH) {
            if self.subscribe(sink, batch).await.is_none() {
                return false;
            }
        }
        if reconnecting {
            self.hub.wake_all();
        }
        true
    }

    /// Feed the hub and carry out the listed work until the connection drops, stalls or is to
    /// be made again.
    async fn serve(
        &self,
        sink: &mut redis::aio::PubSubSink,
        mut stream: redis::aio::PubSubStream,
        lingering: &mut Lingering,
    ) {
        let every = keepalive(&self.timeouts);
        // The PING is due `every` after the last real round trip.
        let mut probe = Instant::now() + every;
        loop {
            if self.inbox.take_reconnect() {
                return;
            }
            let listed = self.inbox.take(SUBSCRIBE_BATCH);
            if !listed.is_empty() {
                let todo = self.hub.sort(listed, lingering, Instant::now());
                if !todo.is_empty() {
                    match self.subscribe(sink, &todo).await {
                        Some(()) => probe = Instant::now() + every,
                        None => return,
                    }
                }
                continue;
            }
            let linger_ends = lingering.next();
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(msg) => self.hub.deliver_message(
                        msg.get_channel_name(),
                        &String::from_utf8_lossy(msg.get_payload_bytes()),
                    ),
                    None => return,
                },
                () = self.inbox.listed() => {}
                () = tokio::time::sleep_until(linger_ends.unwrap_or(probe)),
                    if linger_ends.is_some() =>
                {
                    let over = self.hub.forget_lingered(lingering.over(Instant::now()));
                    for batch in over.chunks(SUBSCRIBE_BATCH) {
                        if !self.unsubscribe(sink, batch).await {
                            return;
                        }
                        probe = Instant::now() + every;
                    }
                }
                () = tokio::time::sleep_until(probe) => {
                    probe = Instant::now() + every;
                    if self.hub.len() == 0 {
                        continue;
                    }
                    let ping = sink.ping::<redis::Value>();
                    if !matches!(tokio::time::timeout(self.timeouts.response, ping).await, Ok(Ok(_))) {
                        return;
                    }
                }
            }
        }
    }

    /// One SUBSCRIBE of `batch`: `Some` once answered (the channels are subscribed, or failed
    /// when refused), `None` if the connection failed or stalled (they stay pending, and are
    /// subscribed on the next connection).
    async fn subscribe(
        &self,
        sink: &mut redis::aio::PubSubSink,
        batch: &[(String, Arc<Channel>)],
    ) -> Option<()> {
        let names: Vec<&str> = batch.iter().map(|(name, _)| name.as_str()).collect();
        match tokio::time::timeout(self.timeouts.response, sink.subscribe(&names)).await {
            Ok(Ok(())) => {
                self.denial.granted();
                for (_, ch) in batch {
                    ch.set(Sub::Subscribed);
                }
                Some(())
            }
            Ok(Err(e)) if is_lost(&e) => None,
            Ok(Err(e)) => {
                let state = failed(e, &self.denial);
                for (_, ch) in batch {
                    ch.set(state.clone());
                }
                Some(())
            }
            Err(_) => None,
        }
    }

    /// One UNSUBSCRIBE of `names` (forgotten already); false if the connection failed or
    /// stalled.
    async fn unsubscribe(&self, sink: &mut redis::aio::PubSubSink, names: &[String]) -> bool {
        match tokio::time::timeout(self.timeouts.response, sink.unsubscribe(names)).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => !is_lost(&e),
            Err(_) => false,
        }
    }
}

/// Whether `err` means the connection is gone (rather than a refusal of this one command).
fn is_lost(err: &redis::RedisError) -> bool {
    err.is_io_error() || err.is_connection_dropped() || err.is_timeout()
}
