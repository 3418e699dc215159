//! Release notifications: one subscription per client, local waiters coalesced per channel.
//!
//! Releasing scripts announce on the lock's channel (`<prefix>{name}:released`, in the lock's
//! hash slot). A [`Notifier`] is shared by everything that uses one store handle; a message wakes
//! the local watchers of its channel, and the lock kinds make sure only one of them (the head of
//! the key's local queue) talks to the server, so N local waiters cost O(1) commands per handoff.
//! A message's payload is kept for the watchers to read ([`Watch::messages_after`], the latest
//! [`KEPT_MESSAGES`] per channel): the fair mode's grant announcement hands the lock over with
//! it (see [`fair`](crate::fair)); every other payload only means "released".
//!
//! | store | announced with | heard through |
//! |---|---|---|
//! | [`MemoryStore`](crate::MemoryStore) | in process | the store's own hub |
//! | [`RedisStore`](crate::RedisStore) | `PUBLISH` | one dedicated connection, `SUBSCRIBE` |
//! | [`ClusterStore`](crate::ClusterStore), Redis 7.0+ | `SPUBLISH` (to the key's shard only) | `SSUBSCRIBE` on the master of each channel's slot, following slot moves (below) |
//! | [`ClusterStore`](crate::ClusterStore), older servers | `PUBLISH` (broadcast to every node) | one connection to a seed node |
//!
//! Which one a store uses is its [`Store::pubsub`](crate::Store::pubsub); the releasing scripts
//! take the matching command as an argument, so publisher and subscriber always agree.
//!
//! # When a waiter subscribes, and for how long it waits for it
//!
//! - Only once its first attempt found the lock busy: an uncontended acquire sends no
//!   `SUBSCRIBE` (and makes no pub/sub connection). A channel still subscribed from a recent wait
//!   (it lingers 3 s after its last watcher) is joined for free before the first attempt.
//! - Subscriptions are asked for in the background ([`Notifier::register`]); nothing holds a
//!   lock across a round trip. A waiter waits for the acknowledgement at most until its own
//!   deadline and at most [`SUBSCRIBE_LIMIT`] (so a `lock()` too), then tries again at once (a
//!   release before the acknowledgement went unheard) and polls — jittered, never past the
//!   holder's remaining time — until the subscription comes through. A pub/sub connection the
//!   network stalls therefore costs a waiter at most that limit, and nobody else anything.
//! - A pub/sub connection that drops, or does not answer a round trip or a keep-alive `PING`
//!   within the store's response timeout, is made again, and every channel registered by then
//!   (those registered during the reconnection included) is subscribed again.
//!
//! # A user without channel permissions
//!
//! Redis 7 gives a new ACL user no channels (`acl-pubsub-default resetchannels`). The releasing
//! scripts announce with `redis.pcall` and ignore a refusal, so a release never fails on its
//! announcement. A refused `SUBSCRIBE` (`NOPERM`) sets [`Notifier::notifications_denied`] (the
//! one warning: no error reaches a waiter, and no refused command is sent per attempt — the
//! client asks again at most once a minute), and waiters poll. The deployment guide
//! (`docs/deployment.md`) lists the ACL rules a lock user needs.
//!
//! # Sharded pub/sub on a cluster
//!
//! The sharded subscriber is one dedicated cluster connection speaking RESP3, which sends each
//! `SSUBSCRIBE` to the master of the channel's slot and follows the cluster:
//!
//! | event | what the server does | what the subscriber does |
//! |---|---|---|
//! | a message | `smessage` push | wake the channel's local watchers |
//! | the channel's slot moves to another master | the old master drops the subscription with an `sunsubscribe` push | subscribe again (routed to the new owner, following `MOVED`), then wake the watchers once, since a release during the move went unheard |
//! | a node connection drops (a crash, a failover) | nothing reaches the client | wake every watcher now, then subscribe every watched channel again until it succeeds (a no-op where the subscription survived; on the promoted replica after a failover, routed there once the connection learns the new slot map) and wake each channel's watchers once more |
//! | the last watcher left, 3 s ago | | `SUNSUBSCRIBE` (the confirmation is ignored: the channel is no longer registered) |
//!
//! While a slot is being migrated, a release that runs on the importing node (after `ASK`)
//! announces there, where nobody is subscribed yet: that message is lost, and its waiters fall
//! back to retrying at the end of the holder's lease, as for any lost notification.
//!
//! Notifications are hints, never the only way out of a wait: a lost message (a dropped
//! connection, a slot in the middle of a migration, a lock that expired instead of being
//! released) costs at most the holder's remaining time, after which waiters retry anyway.

pub(crate) mod classic;
#[cfg(feature = "cluster")]
mod sharded;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::{Error, ErrorKind, Result};

/// Where one channel's subscription stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Sub {
    /// Nobody asked yet.
    Idle,
    /// A SUBSCRIBE is on its way (or the connection is being made again, after which every
    /// registered channel is subscribed again).
    Pending,
    /// The server acknowledged it: messages are delivered.
    Subscribed,
    /// The last request failed; the next watcher that needs it asks again.
    Failed(ErrorKind, Arc<str>),
}

/// How many of a channel's latest message payloads are kept for its watchers to read
/// ([`Watch::messages_after`]); older ones are dropped (a watcher that needed one then falls back
/// on its next attempt, as for a lost message).
pub const KEPT_MESSAGES: usize = 8;

/// Local watchers of one channel.
#[derive(Debug)]
pub(crate) struct Channel {
    notify: Notify,
    watchers: Mutex<usize>,
    /// The latest payloads, each with its sequence number (1, 2, ... per channel registration),
    /// and the last sequence number given out.
    messages: Mutex<Messages>,
    /// The subscription's state, set by the backend. Every watcher that needs messages waits
    /// for [`Sub::Subscribed`], not only the first: a later watcher that went ahead while the
    /// first one's SUBSCRIBE was still in flight would otherwise wait on messages nobody
    /// delivers yet, and a release in that window would cost the holder's whole remaining lease.
    state: tokio::sync::watch::Sender<Sub>,
}

impl Default for Channel {
    fn default() -> Self {
        Channel {
            notify: Notify::new(),
            watchers: Mutex::new(0),
            messages: Mutex::default(),
            state: tokio::sync::watch::Sender::new(Sub::Idle),
        }
    }
}

/// The latest payloads delivered on one channel.
#[derive(Debug, Default)]
struct Messages {
    last: u64,
    kept: std::collections::VecDeque<(u64, Arc<str>)>,
}

impl Channel {
    /// Keep `payload` as the channel's next message.
    fn keep(&self, payload: &str) {
        let mut m = self.messages.lock();
        m.last += 1;
        let seq = m.last;
        if m.kept.len() == KEPT_MESSAGES {
            m.kept.pop_front();
        }
        m.kept.push_back((seq, payload.into()));
    }

    /// Take the job of subscribing: true (and now [`Sub::Pending`]) if nobody had it.
    fn claim(&self) -> bool {
        self.state.send_if_modified(|s| {
            let free = matches!(s, Sub::Idle | Sub::Failed(..));
            if free {
                *s = Sub::Pending;
            }
            free
        })
    }

    fn set(&self, state: Sub) {
        self.state.send_replace(state);
    }

    fn state(&self) -> Sub {
        self.state.borrow().clone()
    }

    /// The state once no request is in flight.
    async fn settled(&self) -> Sub {
        let mut rx = self.state.subscribe();
        // The sender lives as long as `self`: `wait_for` cannot fail.
        match rx.wait_for(|s| *s != Sub::Pending).await {
            Ok(s) => s.clone(),
            Err(_) => self.state(),
        }
    }
}

/// channel name → its local watchers.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    channels: Mutex<HashMap<String, Arc<Channel>>>,
}

impl Hub {
    /// Wake every local watcher of `channel`, without a message for them to read (a wake-up the
    /// subscriber makes itself: a subscription made again, a lost connection).
    pub(crate) fn deliver(&self, channel: &str) {
        if let Some(ch) = self.get(channel) {
            ch.notify.notify_waiters();
        }
    }

    /// A message `payload` came on `channel`: keep it for the watchers to read
    /// ([`Watch::messages_after`]), then wake them.
    pub(crate) fn deliver_message(&self, channel: &str, payload: &str) {
        if let Some(ch) = self.get(channel) {
            ch.keep(payload);
            ch.notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        for (_, ch) in self.all() {
            ch.notify.notify_waiters();
        }
    }

    /// Register a watcher.
    fn join(&self, channel: &str) -> Arc<Channel> {
        let mut channels = self.channels.lock();
        let ch = channels.entry(channel.to_owned()).or_default().clone();
        *ch.watchers.lock() += 1;
        ch
    }

    /// Register a watcher of `channel` if it is registered already and in `state`.
    fn join_existing(&self, channel: &str, state: &Sub) -> Option<Arc<Channel>> {
        let channels = self.channels.lock();
        let ch = channels.get(channel).filter(|ch| ch.state() == *state)?;
        *ch.watchers.lock() += 1;
        Some(ch.clone())
    }

    /// Unregister a watcher; true if it was the channel's last. With `linger`, an unwatched
    /// channel stays registered (and subscribed) until [`Hub::forget_if_unwatched`] removes it.
    fn leave(&self, channel: &str, linger: bool) -> bool {
        let mut channels = self.channels.lock();
        let Some(ch) = channels.get(channel).cloned() else {
            return false;
        };
        let mut n = ch.watchers.lock();
        *n -= 1;
        if *n == 0 {
            drop(n);
            if !linger {
                channels.remove(channel);
            }
            return true;
        }
        false
    }

    /// Remove `channel` if nobody watches it any more; true if removed.
    fn forget_if_unwatched(&self, channel: &str) -> bool {
        let mut channels = self.channels.lock();
        let unwatched = channels
            .get(channel)
            .is_some_and(|ch| *ch.watchers.lock() == 0);
        if unwatched {
            channels.remove(channel);
        }
        unwatched
    }

    fn get(&self, channel: &str) -> Option<Arc<Channel>> {
        self.channels.lock().get(channel).cloned()
    }

    /// Every registered channel (watched, or lingering after its last watcher).
    fn all(&self) -> Vec<(String, Arc<Channel>)> {
        self.channels
            .lock()
            .iter()
            .map(|(name, ch)| (name.clone(), ch.clone()))
            .collect()
    }
}

/// Whether the server refuses this client subscriptions (an ACL user without channel
/// permissions), shared by a notifier and its backend's tasks.
#[derive(Debug, Default)]
pub(crate) struct Denial {
    denied: AtomicBool,
    /// When the last refusal came; subscriptions are not asked for again before
    /// [`DENIED_RETRY`] has passed.
    at: Mutex<Option<tokio::time::Instant>>,
}

/// How long a refused client stops asking for subscriptions (then it asks once more, in case
/// an administrator granted the channels meanwhile).
const DENIED_RETRY: Duration = Duration::from_secs(60);

impl Denial {
    fn refused(&self) {
        self.denied.store(true, Ordering::Relaxed);
        *self.at.lock() = Some(tokio::time::Instant::now());
    }

    fn granted(&self) {
        if self.denied.swap(false, Ordering::Relaxed) {
            *self.at.lock() = None;
        }
    }

    /// Whether to skip asking now: refused less than [`DENIED_RETRY`] ago.
    fn holds_off(&self) -> bool {
        self.denied.load(Ordering::Relaxed)
            && self.at.lock().is_some_and(|at| at.elapsed() < DENIED_RETRY)
    }
}

/// Whether `err` is the server's ACL refusal of a channel (`NOPERM`).
fn is_denial(err: &redis::RedisError) -> bool {
    err.code() == Some("NOPERM")
}

/// The state a failed (un)subscribe leaves a channel in; a refusal is recorded in `denial`.
fn failed(err: redis::RedisError, denial: &Denial) -> Sub {
    if is_denial(&err) {
        denial.refused();
    }
    let err = Error::from(err);
    Sub::Failed(err.kind(), err.message().into())
}

/// How releases are announced and heard. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PubSub {
    /// `PUBLISH`/`SUBSCRIBE`: any Redis; on a cluster every message reaches every node.
    Classic,
    /// `SPUBLISH`/`SSUBSCRIBE` (Redis 7.0+): a message stays within the shard of its channel's
    /// slot.
    Sharded,
}

impl PubSub {
    /// The command a releasing script announces with: `PUBLISH` or `SPUBLISH`.
    pub fn publish_command(self) -> &'static str {
        match self {
            PubSub::Classic => "PUBLISH",
            PubSub::Sharded => "SPUBLISH",
        }
    }
}

/// Delivers release notifications to local waiters. Cheap to clone. See the [module docs](self).
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    hub: Arc<Hub>,
    denial: Arc<Denial>,
    backend: Backend,
}

/// Where subscriptions go.
enum Backend {
    /// The embedded store delivers into the hub itself.
    InProcess,
    Classic(classic::ClassicSubscriber),
    #[cfg(feature = "cluster")]
    Sharded(sharded::ShardedSubscriber),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::InProcess => "memory",
            Backend::Classic(_) => "classic",
            #[cfg(feature = "cluster")]
            Backend::Sharded(_) => "sharded",
        }
    }

    /// Ask for `channel` to be subscribed; the backend moves `ch` out of [`Sub::Pending`] when
    /// the server answered. Never waits for the server itself.
    fn request(&self, name: &str, ch: &Arc<Channel>) {
        match self {
            Backend::InProcess => ch.set(Sub::Subscribed),
            Backend::Classic(c) => c.request(name),
            #[cfg(feature = "cluster")]
            Backend::Sharded(s) => s.request(name),
        }
    }

    /// Whether an unwatched channel lingers (stays subscribed for [`LINGER`]).
    fn lingers(&self) -> bool {
        !matches!(self, Backend::InProcess)
    }

    fn unsubscribe_later(&self, channel: &str, hub: Arc<Hub>) {
        match self {
            Backend::InProcess => {}
            Backend::Classic(c) => c.unsubscribe_later(channel, hub),
            #[cfg(feature = "cluster")]
            Backend::Sharded(s) => s.unsubscribe_later(channel, hub),
        }
    }
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field("backend", &self.inner.backend.name())
            .field("notifications_denied", &self.notifications_denied())
            .finish_non_exhaustive()
    }
}

/// How long one subscription request may take before a waiter stops waiting for it and polls
/// instead, whatever its patience (the request itself goes on in the background, and a later
/// waiter finds the channel subscribed).
pub const SUBSCRIBE_LIMIT: Duration = Duration::from_secs(2);

/// Timeouts of a notifier's own connection.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    /// For making the pub/sub connection.
    pub(crate) connect: Duration,
    /// For one (un)subscribe round trip; a connection that takes longer is made again.
    pub(crate) response: Duration,
}

impl Notifier {
    /// A notifier fed in process by the embedded store through `hub`.
    pub(crate) fn in_process(hub: Arc<Hub>) -> Self {
        Notifier {
            inner: Arc::new(Inner {
                hub,
                denial: Arc::default(),
                backend: Backend::InProcess,
            }),
        }
    }

    /// A notifier with one dedicated classic pub/sub connection to the first of `clients` that
    /// answers (the next one when it drops). Returns at once: the connection is made in the
    /// background, and the first subscription waits for it.
    pub(crate) fn redis(clients: Vec<redis::Client>, timeouts: Timeouts) -> Self {
        Notifier::classic(classic::Clients::Fixed(clients), timeouts)
    }

    /// A notifier with one dedicated classic pub/sub connection to the server `resolve` names,
    /// asked again before every reconnection (the current master behind Sentinel).
    #[cfg(feature = "sentinel")]
    pub(crate) fn redis_resolved(resolve: classic::Resolver, timeouts: Timeouts) -> Self {
        Notifier::classic(classic::Clients::Resolved(resolve), timeouts)
    }

    fn classic(clients: classic::Clients, timeouts: Timeouts) -> Self {
        let hub = Arc::new(Hub::default());
        let denial = Arc::new(Denial::default());
        let subscriber =
            classic::ClassicSubscriber::start(clients, hub.clone(), denial.clone(), timeouts);
        Notifier {
            inner: Arc::new(Inner {
                hub,
                denial,
                backend: Backend::Classic(subscriber),
            }),
        }
    }

    /// A notifier with sharded subscriptions through a dedicated cluster connection built by
    /// `client` (which must speak RESP3; see [`sharded`]). Returns at once: the connection is
    /// made in the background, and the first subscription waits for it.
    ///
    /// # Errors
    ///
    /// The client cannot be built (bad URLs or options).
    #[cfg(feature = "cluster")]
    pub(crate) fn sharded(client: redis::cluster::ClusterClientBuilder) -> Result<Self> {
        let hub = Arc::new(Hub::default());
        let denial = Arc::new(Denial::default());
        let subscriber = sharded::ShardedSubscriber::start(client, hub.clone(), denial.clone())?;
        Ok(Notifier {
            inner: Arc::new(Inner {
                hub,
                denial,
                backend: Backend::Sharded(subscriber),
            }),
        })
    }

    /// Make the pub/sub connection again (a classic one; others are left alone): Sentinel named
    /// a new master. Every watcher is woken, as after a lost connection.
    #[cfg(feature = "sentinel")]
    pub(crate) fn reconnect(&self) {
        if let Backend::Classic(c) = &self.inner.backend {
            c.reconnect();
        }
    }

    /// How this notifier hears releases ([`PubSub::Classic`] for the embedded store, whose
    /// deliveries do not depend on the command).
    pub fn pubsub(&self) -> PubSub {
        match self.inner.backend {
            #[cfg(feature = "cluster")]
            Backend::Sharded(_) => PubSub::Sharded,
            _ => PubSub::Classic,
        }
    }

    /// Whether the server refuses this client its release channels: the user's ACL has no
    /// channel permissions (Redis 7's default for a new user is `resetchannels`; grant
    /// `&<prefix>*`, see the ACL rules of the deployment guide). Waiters then poll (jittered, never past the holder's
    /// remaining time) instead of failing, and this flag is how the refusal shows: it is set by
    /// the first refused `SUBSCRIBE` and stays set until a later one succeeds. A refused client
    /// asks again at most once a minute, so a refusal costs no command per attempt.
    pub fn notifications_denied(&self) -> bool {
        self.inner.denial.denied.load(Ordering::Relaxed)
    }

    /// Start watching `channel` without waiting for the server: messages published on it wake
    /// [`Watch::notified`] once [`Watch::is_subscribed`]. The channel's first watcher asks for
    /// the subscription; [`Watch::subscribed`] waits for it.
    pub fn register(&self, channel: &str) -> Watch {
        let ch = self.inner.hub.join(channel);
        let watch = Watch {
            channel: ch,
            name: channel.to_owned(),
            notifier: self.clone(),
        };
        self.request(&watch.channel, channel);
        watch
    }

    /// A watch of `channel` if it is subscribed already (it lingers after its last watcher
    /// left, or someone else here watches it), else `None`; never asks the server anything.
    /// For the first attempt of an acquire, which subscribes only if the lock is busy.
    pub fn watching(&self, channel: &str) -> Option<Watch> {
        let ch = self.inner.hub.join_existing(channel, &Sub::Subscribed)?;
        Some(Watch {
            channel: ch,
            name: channel.to_owned(),
            notifier: self.clone(),
        })
    }

    /// Ask for `channel`'s subscription unless it is subscribed or on its way; false when the
    /// server refused this client subscriptions recently (nothing is asked then).
    fn request(&self, channel: &Arc<Channel>, name: &str) -> bool {
        if self.inner.denial.holds_off() {
            return false;
        }
        if channel.claim() {
            self.inner.backend.request(name, channel);
        }
        true
    }

    /// Start watching `channel` and wait until the server acknowledged the subscription:
    /// messages published on it from now on wake [`Watch::notified`]. As [`register`]
    /// followed by [`Watch::subscribed`]. Unbounded: bound it with a timeout (a stalled
    /// connection is only noticed after the store's response timeout).
    ///
    /// [`register`]: Self::register
    ///
    /// # Errors
    ///
    /// As [`Watch::subscribed`].
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the subscription goes on in the background.
    pub async fn watch(&self, channel: &str) -> Result<Watch> {
        let watch = self.register(channel);
        watch.subscribed().await?;
        Ok(watch)
    }
}

/// How a waiting loop starts listening: the notifier `notifier` makes (a store's
/// [`Store::notifier()`](crate::Store::notifier)) watching `channel`, or `None` when the
/// store has no notifier, the subscription failed or was refused, or `deadline` or
/// [`SUBSCRIBE_LIMIT`] came first (connecting the notifier and the acknowledged `SUBSCRIBE` are
/// bounded by both, so a `try_lock_for` never overruns its timeout waiting for them and a
/// stalled pub/sub connection never holds up a `lock()` for more than the limit). Without a
/// watch, the waiter polls.
///
/// # Cancel safety
///
/// Cancel safe: a subscription cut short goes on in the background.
pub async fn watch_release(
    notifier: impl Future<Output = Option<Notifier>>,
    channel: &str,
    deadline: Option<tokio::time::Instant>,
) -> Option<Watch> {
    let watch = notifier_by(notifier, deadline).await?.register(channel);
    watch.subscribed_by(deadline).await.then_some(watch)
}

/// The bound of one wait for the notifier: `deadline`, and [`SUBSCRIBE_LIMIT`] from now.
fn bound(deadline: Option<tokio::time::Instant>) -> tokio::time::Instant {
    let limit = tokio::time::Instant::now() + SUBSCRIBE_LIMIT;
    deadline.map_or(limit, |d| d.min(limit))
}

/// The notifier `notifier` makes (a store's [`Store::notifier()`](crate::Store::notifier)), or
/// `None` when there is none or it could not be made by `deadline` (or [`SUBSCRIBE_LIMIT`]).
/// It takes the future rather than the store so that this module, below the stores, names
/// nothing of them.
///
/// # Cancel safety
///
/// Cancel safe.
pub async fn notifier_by(
    notifier: impl Future<Output = Option<Notifier>>,
    deadline: Option<tokio::time::Instant>,
) -> Option<Notifier> {
    match tokio::time::timeout_at(bound(deadline), notifier).await {
        Ok(notifier) => notifier,
        Err(_) => {
            crate::observe::fallback_to_polling("*", &"the notifier did not connect in time");
            None
        }
    }
}

/// Interest in one channel. Dropping it unsubscribes when it was the channel's last watcher.
pub struct Watch {
    channel: Arc<Channel>,
    name: String,
    notifier: Notifier,
}

impl fmt::Debug for Watch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Watch")
            .field("channel", &self.name)
            .field("subscribed", &self.is_subscribed())
            .finish()
    }
}

impl Watch {
    /// A future that completes on the next message. Create it (and pin and
    /// [`enable`](tokio::sync::futures::Notified::enable) it) *before* the attempt whose failure
    /// makes you wait, so a release between the attempt and the wait is not missed — and rely
    /// on it only if the watch [`is_subscribed`](Self::is_subscribed) at that point.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.channel.notify.notified()
    }

    /// Where the channel's messages stand: pass it to [`messages_after`](Self::messages_after)
    /// later to read the payloads delivered since. Take it together with
    /// [`notified`](Self::notified), before the attempt whose failure makes you wait.
    pub fn cursor(&self) -> u64 {
        self.channel.messages.lock().last
    }

    /// The payloads of the messages delivered since `cursor` (from [`cursor`](Self::cursor)),
    /// oldest first: at most the latest [`KEPT_MESSAGES`]. Wake-ups without a message (the
    /// subscription made again after a lost connection) carry none.
    pub fn messages_after(&self, cursor: u64) -> Vec<Arc<str>> {
        self.channel
            .messages
            .lock()
            .kept
            .iter()
            .filter(|(seq, _)| *seq > cursor)
            .map(|(_, payload)| payload.clone())
            .collect()
    }

    /// Wait for a message or `timeout`, whichever comes first; true if a message came.
    pub async fn wait(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.notified()).await.is_ok()
    }

    /// Whether the server has acknowledged the channel's subscription (and the connection has
    /// not dropped since): messages are delivered now.
    pub fn is_subscribed(&self) -> bool {
        self.channel.state() == Sub::Subscribed
    }

    /// Wait until the channel is subscribed. Asks once more if the last request failed.
    ///
    /// # Errors
    ///
    /// The subscription failed: a connection error or timeout, or the server refused it
    /// ([`Notifier::notifications_denied`]; `NOPERM`).
    ///
    /// # Cancel safety
    ///
    /// Cancel safe: the request goes on in the background.
    pub async fn subscribed(&self) -> Result<()> {
        let mut asked = false;
        loop {
            match self.channel.state() {
                Sub::Subscribed => return Ok(()),
                Sub::Pending => {
                    self.channel.settled().await;
                }
                Sub::Idle | Sub::Failed(..) if !asked => {
                    asked = true;
                    if !self.notifier.request(&self.channel, &self.name) {
                        return Err(Error::new(
                            ErrorKind::Server,
                            format!(
                                "NOPERM the server refuses this client the channel {} (see the \
                                 ACL rules in tairlock's deployment guide)",
                                self.name
                            ),
                        ));
                    }
                }
                Sub::Failed(kind, message) => return Err(Error::new(kind, message.to_string())),
                Sub::Idle => {
                    return Err(Error::new(
                        ErrorKind::Connection,
                        format!("the subscription to {} was dropped", self.name),
                    ));
                }
            }
        }
    }

    /// [`subscribed`](Self::subscribed) bounded by `deadline` and [`SUBSCRIBE_LIMIT`] from now;
    /// true if the channel is subscribed.
    pub async fn subscribed_by(&self, deadline: Option<tokio::time::Instant>) -> bool {
        let until = bound(deadline);
        match tokio::time::timeout_at(until, self.subscribed()).await {
            Ok(Ok(())) => true,
            Ok(Err(e)) => {
                crate::observe::fallback_to_polling(&self.name, &e);
                false
            }
            Err(_) => {
                // Late past the limit (not merely past the caller's own deadline): the waiter
                // polls from here on.
                if deadline.is_none_or(|d| d > until) {
                    crate::observe::fallback_to_polling(
                        &self.name,
                        &"the subscription was not acknowledged in time",
                    );
                }
                false
            }
        }
    }
}

/// How long a channel stays subscribed after its last local watcher left, so that a client
/// waiting for the same name again soon (the common case under contention) pays no SUBSCRIBE,
/// and no second attempt: it joins the subscription before its first attempt.
const LINGER: Duration = Duration::from_secs(3);

impl Drop for Watch {
    fn drop(&mut self) {
        let backend = &self.notifier.inner.backend;
        if self.notifier.inner.hub.leave(&self.name, backend.lingers()) {
            backend.unsubscribe_later(&self.name, self.notifier.inner.hub.clone());
        }
    }
}
