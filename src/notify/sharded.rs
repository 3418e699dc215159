//! Sharded pub/sub on a Redis Cluster (Redis 7.0+): `SSUBSCRIBE` where each channel's slot lives.
//!
//! A release script runs on the master of its lock's slot and announces with `SPUBLISH` on the
//! lock's channel, which carries the lock's hash tag and so lives in the same slot. The message
//! goes to that shard only (its master and replicas), not to every node as a classic `PUBLISH`
//! does: notification traffic grows with the shard, not with the cluster.
//!
//! The subscriber is one dedicated cluster connection speaking RESP3 (the `redis` crate's cluster
//! client delivers pushes only there). It holds one connection per master that serves a watched
//! channel, and sends each `SSUBSCRIBE` to the master of that channel's slot.
//!
//! One task owns it, on the store's runtime (started again by the next registration if it is
//! gone): it makes the cluster connection (and makes it again when a probe finds it dead), reads
//! its pushes, and carries out the subscription changes listed in its [`Inbox`] — each channel
//! listed once however often it is asked for, so a cluster that cannot be reached costs one
//! entry per watched channel, never one per request. Callers never wait on a round trip, only,
//! within their own patience, for their channel's state to change.
//!
//! How it follows slot moves and reconnections: the table in the [parent module](super). On top
//! of it, a connection that a network device stopped forwarding (no reset, so the cluster client
//! never learns it is gone) would lose its shard's messages for good: every 5 response timeouts
//! without another answered round trip, while anything is registered, every master is sent a
//! `PING`; one that does not answer within the response timeout makes the task drop the whole
//! cluster connection, wake every watcher, connect again and subscribe every watched channel
//! again.

use std::collections::HashSet;
use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use parking_lot::Mutex;
use redis::cluster::{ClusterClient, ClusterClientBuilder};
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{MultipleNodeRoutingInfo, ResponsePolicy, RoutingInfo};
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use super::{Channel, Denial, Hub, Inbox, Lingering, SUBSCRIBE_BATCH, Sub, Timeouts, failed};
use crate::error::Result;

/// The sharded subscriber: the handle of its task. See the [module docs](self).
pub(super) struct ShardedSubscriber {
    inbox: Arc<Inbox>,
    /// What a (re)started task is made of.
    parts: Task,
    task: Mutex<tokio::task::AbortHandle>,
}

impl Drop for ShardedSubscriber {
    fn drop(&mut self) {
        self.task.lock().abort();
    }
}

impl ShardedSubscriber {
    /// Build the client from `builder` (RESP3 and the push channel are set here) and start a
    /// task on `runtime` (the store's) that connects (retrying with back-off) and then serves.
    /// Returns at once.
    pub(super) fn start(
        builder: ClusterClientBuilder,
        hub: Arc<Hub>,
        denial: Arc<Denial>,
        timeouts: Timeouts,
        runtime: Option<tokio::runtime::Handle>,
    ) -> Result<Self> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<PushInfo>();
        let client = builder
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()?;
        let inbox = Arc::new(Inbox::default());
        let parts = Task {
            client,
            pushes: Arc::new(tokio::sync::Mutex::new(rx)),
            hub,
            denial,
            timeouts,
            inbox: inbox.clone(),
            runtime,
        };
        let task = Mutex::new(parts.spawn(false));
        Ok(ShardedSubscriber { inbox, parts, task })
    }

    /// List `channel` for the task (its state is [`Sub::Pending`] already); it is marked
    /// subscribed once the server confirmed.
    pub(super) fn request(&self, channel: &str) {
        self.revive();
        self.inbox.push(channel);
    }

    /// Start the task again if it is gone (its runtime shut down).
    pub(super) fn revive(&self) {
        let mut task = self.task.lock();
        if task.is_finished() {
            *task = self.parts.spawn(true);
        }
    }

    /// The last watcher of `channel` left: after [`LINGER`](super::LINGER) unwatched, the task
    /// sends `SUNSUBSCRIBE`.
    pub(super) fn unsubscribe_later(&self, channel: &str) {
        self.inbox.push(channel);
    }

    /// How many channels wait for the task.
    pub(super) fn backlog(&self) -> usize {
        self.inbox.len()
    }
}

/// The subscriber's task.
#[derive(Clone)]
struct Task {
    client: ClusterClient,
    /// The pushes of every connection the client makes; the running task holds the lock.
    pushes: Arc<tokio::sync::Mutex<UnboundedReceiver<PushInfo>>>,
    hub: Arc<Hub>,
    denial: Arc<Denial>,
    timeouts: Timeouts,
    inbox: Arc<Inbox>,
    runtime: Option<tokio::runtime::Handle>,
}

/// What the task keeps while a connection serves.
#[derive(Default)]
struct Serving {
    lingering: Lingering,
    /// Channels whose watchers are woken once subscribed again: a release while their
    /// subscription was down (a lost node connection, a slot that moved) went unheard.
    follow: HashSet<String>,
    /// Channels whose `SSUBSCRIBE` failed (a dead node, the old owner of a slot that moved,
    /// while the connection learns the new slot map): listed again at `retry_at`.
    retry: HashSet<String>,
    retry_at: Option<Instant>,
    retry_delay: Duration,
}

/// The first pause before failed subscriptions are asked for again; it doubles up to 1 s.
const RETRY_FIRST: Duration = Duration::from_millis(10);

impl Task {
    /// Spawn a copy of the task on the store's runtime (or, when that one is gone, on the
    /// caller's, else tairlock's own). `revived`: a previous task is gone, and its connection.
    fn spawn(&self, revived: bool) -> tokio::task::AbortHandle {
        let task = crate::blocking::spawn_handle(self.runtime.clone())
            .spawn(self.clone().run(revived))
            .abort_handle();
        if !task.is_finished() || self.runtime.is_none() {
            return task;
        }
        crate::blocking::spawn_handle(None)
            .spawn(self.clone().run(revived))
            .abort_handle()
    }

    async fn run(self, revived: bool) {
        let mut pushes = self.pushes.clone().lock_owned().await;
        let mut delay = Duration::from_millis(50);
        let mut reconnecting = revived;
        if revived {
            self.lost();
        }
        loop {
            let Some(con) = self.offline(self.connect()).await else {
                self.offline(tokio::time::sleep(delay)).await;
                delay = (delay * 2).min(Duration::from_secs(2));
                continue;
            };
            delay = Duration::from_millis(50);
            self.serve(con, &mut pushes, reconnecting).await;
            reconnecting = true;
            self.lost();
        }
    }

    /// The connection is gone (dropped by the caller): anything may have been released
    /// meanwhile, and every watched channel is subscribed again on the next connection.
    fn lost(&self) {
        for (_, ch) in self.hub.all() {
            ch.set(Sub::Pending);
        }
        self.hub.wake_all();
        self.hub.forget_unwatched();
    }

    /// A new cluster connection: the seeds, the slot map, a connection per node.
    async fn connect(&self) -> Option<ClusterConnection> {
        let limit = self.timeouts.connect * 2 + self.timeouts.response;
        match tokio::time::timeout(limit, self.client.get_async_connection()).await {
            Ok(Ok(con)) => Some(con),
            _ => None,
        }
    }

    /// Run `fut` while no connection serves: the channels listed meanwhile are forgotten if
    /// nobody watches them (the watched ones wait, pending, for the next connection).
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

    /// Serve `con` until a probe finds it dead.
    async fn serve(
        &self,
        con: ClusterConnection,
        pushes: &mut UnboundedReceiver<PushInfo>,
        reconnecting: bool,
    ) {
        let mut s = Serving {
            retry_delay: RETRY_FIRST,
            ..Serving::default()
        };
        // Pushes of the connection dropped before this one: its loss woke every watcher already.
        while pushes.try_recv().is_ok() {}
        // Every channel registered by now (all pending): subscribed in batches, as listed.
        self.hub.forget_unwatched();
        for (name, _) in self.hub.all() {
            if reconnecting {
                s.follow.insert(name.clone());
            }
            self.inbox.push(&name);
        }
        let every = super::classic::keepalive(&self.timeouts);
        let mut probe = Instant::now() + every;
        loop {
            let listed = self.inbox.take(SUBSCRIBE_BATCH);
            if !listed.is_empty() {
                let todo = self.hub.sort(listed, &mut s.lingering, Instant::now());
                if self.subscribe(&con, todo, &mut s).await {
                    probe = Instant::now() + every;
                }
                continue;
            }
            let linger_ends = s.lingering.next();
            let retry_at = s.retry_at;
            tokio::select! {
                push = pushes.recv() => match push {
                    Some(push) => self.on_push(push, &mut s),
                    // The client holds the sender as long as the task holds the client.
                    None => return,
                },
                () = self.inbox.listed() => {}
                () = tokio::time::sleep_until(linger_ends.unwrap_or(probe)),
                    if linger_ends.is_some() =>
                {
                    let over = self.hub.forget_lingered(s.lingering.over(Instant::now()));
                    for batch in over.chunks(SUBSCRIBE_BATCH) {
                        // The confirmation is ignored: the channels are no longer registered.
                        join_all(batch.iter().map(|name| {
                            let mut con = con.clone();
                            async move { con.sunsubscribe(name).await }
                        }))
                        .await;
                    }
                }
                () = tokio::time::sleep_until(retry_at.unwrap_or(probe)), if retry_at.is_some() => {
                    s.retry_at = None;
                    for name in std::mem::take(&mut s.retry) {
                        self.inbox.push(&name);
                    }
                }
                () = tokio::time::sleep_until(probe) => {
                    probe = Instant::now() + every;
                    if self.hub.len() == 0 {
                        continue;
                    }
                    if !self.probe(&con).await {
                        return;
                    }
                }
            }
        }
    }

    /// `PING` every master within the response timeout; false if one did not answer.
    async fn probe(&self, con: &ClusterConnection) -> bool {
        let mut con = con.clone();
        let routing = RoutingInfo::MultiNode((
            MultipleNodeRoutingInfo::AllMasters,
            Some(ResponsePolicy::AllSucceeded),
        ));
        let ping = con.route_command(redis::cmd("PING"), routing);
        matches!(
            tokio::time::timeout(self.timeouts.response, ping).await,
            Ok(Ok(_))
        )
    }

    /// `SSUBSCRIBE` each of `todo` (at most [`SUBSCRIBE_BATCH`]) at once, each on the master of
    /// its slot; true if any was answered. A failed one stays pending and is asked for again
    /// after a pause (doubling up to 1 s while they keep failing); a refused one (`NOPERM`) is
    /// marked failed.
    async fn subscribe(
        &self,
        con: &ClusterConnection,
        todo: Vec<(String, Arc<Channel>)>,
        s: &mut Serving,
    ) -> bool {
        if todo.is_empty() {
            return false;
        }
        let answers = join_all(todo.iter().map(|(name, _)| {
            let mut con = con.clone();
            async move { con.ssubscribe(name).await }
        }))
        .await;
        let mut answered = false;
        let mut failures = false;
        for ((name, ch), answer) in todo.into_iter().zip(answers) {
            match answer {
                Ok(()) => {
                    answered = true;
                    self.denial.granted();
                    ch.set(Sub::Subscribed);
                    if s.follow.remove(&name) {
                        self.hub.deliver(&name);
                    }
                }
                Err(e) if super::is_denial(&e) => {
                    answered = true;
                    s.follow.remove(&name);
                    ch.set(failed(e, &self.denial));
                }
                Err(_) => {
                    failures = true;
                    s.retry.insert(name);
                }
            }
        }
        if failures {
            s.retry_at
                .get_or_insert_with(|| Instant::now() + s.retry_delay);
            s.retry_delay = (s.retry_delay * 2).min(Duration::from_secs(1));
        } else {
            s.retry_delay = RETRY_FIRST;
        }
        // Channels forgotten before they were subscribed again need no wake.
        if s.follow.len() > self.hub.len() {
            s.follow.retain(|name| self.hub.get(name).is_some());
        }
        answered
    }

    /// A push from the cluster connection. See the table in the [parent module](super).
    fn on_push(&self, push: PushInfo, s: &mut Serving) {
        match push.kind {
            PushKind::SMessage => {
                if let Some(channel) = channel_of(&push) {
                    self.hub.deliver_message(&channel, &payload_of(&push));
                }
            }
            PushKind::SUnsubscribe => {
                if let Some(channel) = channel_of(&push)
                    && let Some(ch) = self.hub.get(&channel)
                    && ch.state() == Sub::Subscribed
                {
                    // Still wanted, so the server dropped it: the slot moved.
                    ch.set(Sub::Pending);
                    s.follow.insert(channel.clone());
                    self.inbox.push(&channel);
                }
            }
            PushKind::Disconnection => {
                // A node connection dropped: anything may have been released meanwhile, and if
                // the node is gone for good its slots move to a promoted replica, which has
                // none of our subscriptions. Subscribe every watched channel again (a no-op on
                // the nodes that still have them) until each succeeds.
                for (name, ch) in self.hub.all() {
                    if matches!(ch.state(), Sub::Pending | Sub::Subscribed) {
                        ch.set(Sub::Pending);
                        s.follow.insert(name.clone());
                        self.inbox.push(&name);
                    }
                }
                self.hub.wake_all();
            }
            _ => {}
        }
    }
}

/// The channel a push is about: its first element.
fn channel_of(push: &PushInfo) -> Option<String> {
    match push.data.first()? {
        Value::BulkString(bytes) => String::from_utf8(bytes.clone()).ok(),
        Value::SimpleString(s) => Some(s.clone()),
        _ => None,
    }
}

/// The payload of an `smessage` push (`[channel, payload]`); empty if it has none.
fn payload_of(push: &PushInfo) -> String {
    match push.data.get(1) {
        Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    }
}
