//! Classic pub/sub: one dedicated connection, `SUBSCRIBE`/`UNSUBSCRIBE`, messages from `PUBLISH`.
//!
//! On one server this is the whole story. On a cluster, a classic `PUBLISH` is broadcast over the
//! cluster bus to every node, so one connection to any node hears every lock's releases: simple,
//! but every release costs every node a message (see [`sharded`](super::sharded) for the
//! alternative on Redis 7.0+).
//!
//! One task owns the connection: it makes it (and makes it again when it drops or stops
//! answering), feeds the hub with its messages and sends every (un)subscribe in the order they
//! were asked for. Callers only queue requests and wait, within their own patience, for their
//! channel's state to change: nobody holds a lock across a round trip, and a stalled connection
//! holds up nobody longer than they chose to wait.
//!
//! | event | what the task does |
//! |---|---|
//! | a channel's first watcher | `SUBSCRIBE` it (unless already subscribed), then mark it subscribed; on the first connection (made for that first watcher) nobody is woken |
//! | the last watcher left, 3 s ago | `UNSUBSCRIBE` it, unless a watcher came back meanwhile |
//! | the connection drops, or a round trip or a keep-alive `PING` (every 5 response timeouts while anything is subscribed) takes longer than the response timeout | mark every channel pending, wake every watcher (anything may have been released meanwhile), connect again with back-off, `SUBSCRIBE` every registered channel (those registered during the reconnection included), mark them subscribed and wake them again |
//! | `NOPERM` (the user may not subscribe) | mark the channels failed and record the refusal ([`Notifier::notifications_denied`](super::Notifier::notifications_denied)); waiters poll |

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

use super::{Denial, Hub, LINGER, Sub, Timeouts, failed};

/// How often an idle connection with subscriptions is checked with a `PING`: a connection that
/// a network device stopped forwarding (no reset) would otherwise go unnoticed, and with it every
/// release. Five response timeouts (10 s with the default 2 s), within 1–15 s.
fn keepalive(timeouts: &Timeouts) -> Duration {
    (timeouts.response * 5).clamp(Duration::from_secs(1), Duration::from_secs(15))
}

/// A request to the connection's task.
#[derive(Debug)]
enum Request {
    Subscribe(String),
    /// Unsubscribe if still unwatched (checked by the task, in order with the subscribes).
    Unsubscribe(String),
    /// Drop the connection and make it again (the server moved).
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    Reconnect,
}

/// The handle of the connection's task. See the [module docs](self).
pub(super) struct ClassicSubscriber {
    requests: UnboundedSender<Request>,
    task: tokio::task::AbortHandle,
}

impl Drop for ClassicSubscriber {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ClassicSubscriber {
    /// Start the task; it connects to the first of `clients` that answers.
    pub(super) fn start(
        clients: Clients,
        hub: Arc<Hub>,
        denial: Arc<Denial>,
        timeouts: Timeouts,
    ) -> Self {
        let (requests, rx) = tokio::sync::mpsc::unbounded_channel();
        let task = tokio::spawn(
            Task {
                clients,
                hub,
                denial,
                timeouts,
            }
            .run(rx),
        )
        .abort_handle();
        ClassicSubscriber { requests, task }
    }

    /// Queue a SUBSCRIBE for `channel` (its state is [`Sub::Pending`] already).
    pub(super) fn request(&self, channel: &str) {
        // The task lives as long as this handle.
        let _ = self.requests.send(Request::Subscribe(channel.to_owned()));
    }

    /// Drop the connection and make it again, as if it had been lost: every watcher is woken
    /// and every channel subscribed again (on the server the clients' source names now).
    #[cfg_attr(not(feature = "sentinel"), allow(dead_code))]
    pub(super) fn reconnect(&self) {
        let _ = self.requests.send(Request::Reconnect);
    }

    /// After [`LINGER`], unsubscribe `channel` unless a watcher has come back. The check and the
    /// UNSUBSCRIBE happen in the task, in order with the SUBSCRIBEs, so the SUBSCRIBE of a new
    /// registration of the channel is never overtaken by this UNSUBSCRIBE.
    pub(super) fn unsubscribe_later(&self, channel: &str, hub: Arc<Hub>) {
        let channel = channel.to_owned();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime to wait on: drop the registration now (the subscription stays until
            // the connection closes; stray messages wake nobody).
            hub.forget_if_unwatched(&channel);
            return;
        };
        let requests = self.requests.clone();
        handle.spawn(async move {
            tokio::time::sleep(LINGER).await;
            let _ = requests.send(Request::Unsubscribe(channel));
        });
    }
}

/// Where the task connects.
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
struct Task {
    clients: Clients,
    hub: Arc<Hub>,
    denial: Arc<Denial>,
    timeouts: Timeouts,
}

/// Why serving a connection stopped.
enum Stop {
    /// The handle was dropped: end the task.
    Closed,
    /// The connection dropped or stalled: make it again.
    Lost,
}

impl Task {
    async fn run(self, mut requests: UnboundedReceiver<Request>) {
        let mut delay = Duration::from_millis(50);
        let mut next = 0;
        // Whether a connection was served and lost: only then can a release have gone unheard
        // by a subscription (a first connection had none to miss anything with).
        let mut reconnecting = false;
        if matches!(&self.clients, Clients::Fixed(clients) if clients.is_empty()) {
            return;
        }
        loop {
            let client = match &self.clients {
                Clients::Fixed(clients) => Some(clients[next % clients.len()].clone()),
                Clients::Resolved(resolve) => resolve().await,
            };
            next += 1;
            let Some(client) = client else {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                continue;
            };
            let connected =
                tokio::time::timeout(self.timeouts.connect, client.get_async_pubsub()).await;
            let Ok(Ok(pubsub)) = connected else {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                continue;
            };
            let (mut sink, stream) = pubsub.split();
            if !self.resubscribe(&mut sink, reconnecting).await {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                continue;
            }
            delay = Duration::from_millis(50);
            match self.serve(&mut sink, stream, &mut requests).await {
                Stop::Closed => return,
                Stop::Lost => {
                    reconnecting = true;
                    // Anything may have been released meanwhile; every registered channel is
                    // subscribed again on the next connection.
                    for (_, ch) in self.hub.all() {
                        ch.set(Sub::Pending);
                    }
                    self.hub.wake_all();
                }
            }
        }
    }

    /// On a new connection, SUBSCRIBE every registered channel that wants it; true unless the
    /// connection failed (a refusal marks the channels failed and counts as done). After a lost
    /// connection (`reconnecting`), every watcher is woken once subscribed again: a release while
    /// the subscription was down went unheard. A first connection wakes nobody: no watcher
    /// relied on a subscription before it, and a wake is not free (a shared read hold takes any
    /// message on its intent channel for a writer's intent, and gives itself up).
    async fn resubscribe(&self, sink: &mut redis::aio::PubSubSink, reconnecting: bool) -> bool {
        let wanted: Vec<_> = self
            .hub
            .all()
            .into_iter()
            .filter(|(_, ch)| matches!(ch.state(), Sub::Pending | Sub::Subscribed))
            .collect();
        if wanted.is_empty() {
            return true;
        }
        let names: Vec<&str> = wanted.iter().map(|(name, _)| name.as_str()).collect();
        match tokio::time::timeout(self.timeouts.response, sink.subscribe(&names)).await {
            Ok(Ok(())) => {
                self.denial.granted();
                for (_, ch) in &wanted {
                    ch.set(Sub::Subscribed);
                }
                if reconnecting {
                    self.hub.wake_all();
                }
                true
            }
            Ok(Err(e)) if super::is_denial(&e) => {
                let state = failed(e, &self.denial);
                for (_, ch) in &wanted {
                    ch.set(state.clone());
                }
                true
            }
            _ => false,
        }
    }

    /// Feed the hub and carry out requests until the connection drops or stalls.
    async fn serve(
        &self,
        sink: &mut redis::aio::PubSubSink,
        mut stream: redis::aio::PubSubStream,
        requests: &mut UnboundedReceiver<Request>,
    ) -> Stop {
        let every = keepalive(&self.timeouts);
        let mut keepalive = tokio::time::Instant::now() + every;
        loop {
            tokio::select! {
                msg = stream.next() => match msg {
                    Some(msg) => self.hub.deliver_message(
                        msg.get_channel_name(),
                        &String::from_utf8_lossy(msg.get_payload_bytes()),
                    ),
                    None => return Stop::Lost,
                },
                request = requests.recv() => {
                    let ok = match request {
                        None => return Stop::Closed,
                        Some(Request::Subscribe(name)) => self.subscribe(sink, &name).await,
                        Some(Request::Unsubscribe(name)) => self.unsubscribe(sink, &name).await,
                        Some(Request::Reconnect) => false,
                    };
                    if !ok {
                        return Stop::Lost;
                    }
                    keepalive = tokio::time::Instant::now() + every;
                }
                () = tokio::time::sleep_until(keepalive) => {
                    keepalive = tokio::time::Instant::now() + every;
                    if self.hub.all().is_empty() {
                        continue;
                    }
                    let ping = sink.ping::<redis::Value>();
                    if !matches!(tokio::time::timeout(self.timeouts.response, ping).await, Ok(Ok(_))) {
                        return Stop::Lost;
                    }
                }
            }
        }
    }

    /// SUBSCRIBE `name` if it is registered and not subscribed yet; false if the connection
    /// failed or stalled.
    async fn subscribe(&self, sink: &mut redis::aio::PubSubSink, name: &str) -> bool {
        let Some(ch) = self.hub.get(name) else {
            return true;
        };
        if ch.state() == Sub::Subscribed {
            return true;
        }
        match tokio::time::timeout(self.timeouts.response, sink.subscribe(name)).await {
            Ok(Ok(())) => {
                self.denial.granted();
                ch.set(Sub::Subscribed);
                true
            }
            // The connection dropped: the channel stays pending, as every other one.
            Ok(Err(e)) if is_lost(&e) => false,
            Ok(Err(e)) => {
                ch.set(failed(e, &self.denial));
                true
            }
            // Stalled: the channel stays pending, and is subscribed on the next connection.
            Err(_) => false,
        }
    }

    /// UNSUBSCRIBE `name` if nobody watches it any more; false if the connection failed or
    /// stalled.
    async fn unsubscribe(&self, sink: &mut redis::aio::PubSubSink, name: &str) -> bool {
        let subscribed = self
            .hub
            .get(name)
            .is_some_and(|ch| ch.state() == Sub::Subscribed);
        // Never subscribed on this connection (refused, or failed): nothing to take back.
        if !self.hub.forget_if_unwatched(name) || !subscribed {
            return true;
        }
        match tokio::time::timeout(self.timeouts.response, sink.unsubscribe(name)).await {
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
