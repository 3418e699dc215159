//! Release notifications: one subscription per client, local waiters coalesced per channel.
//!
//! Releasing scripts announce on the lock's channel (`<prefix>{name}:released`, in the lock's
//! hash slot). A [`Notifier`] is shared by everything that uses one store handle; a message wakes
//! the local watchers of its channel, and the lock kinds make sure only one of them (the head of
//! the key's local queue) talks to the server, so N local waiters cost O(1) commands per handoff.
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

mod classic;
mod sharded;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::Result;

/// Local watchers of one channel.
#[derive(Debug, Default)]
pub(crate) struct Channel {
    notify: Notify,
    watchers: Mutex<usize>,
    /// Set once the server has acknowledged the SUBSCRIBE (Redis only). Every watcher waits for
    /// it, not only the first: a later watcher that returned while the first one's SUBSCRIBE
    /// was still in flight could otherwise start waiting before messages are delivered, and a
    /// release in that window would cost the holder's whole remaining lease.
    subscribed: tokio::sync::OnceCell<()>,
}

/// channel name → its local watchers.
#[derive(Debug, Default)]
pub(crate) struct Hub {
    channels: Mutex<HashMap<String, Arc<Channel>>>,
}

impl Hub {
    /// Wake every local watcher of `channel`.
    pub(crate) fn deliver(&self, channel: &str) {
        let found = self.channels.lock().get(channel).cloned();
        if let Some(ch) = found {
            ch.notify.notify_waiters();
        }
    }

    fn wake_all(&self) {
        let all: Vec<_> = self.channels.lock().values().cloned().collect();
        for ch in all {
            ch.notify.notify_waiters();
        }
    }

    /// Register a watcher; true if it is the channel's first.
    fn join(&self, channel: &str) -> (Arc<Channel>, bool) {
        let mut channels = self.channels.lock();
        let ch = channels.entry(channel.to_owned()).or_default().clone();
        let mut n = ch.watchers.lock();
        *n += 1;
        let first = *n == 1;
        drop(n);
        (ch, first)
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

    fn names(&self) -> Vec<String> {
        self.channels.lock().keys().cloned().collect()
    }

    /// Whether `channel` is registered (watched, or lingering after its last watcher).
    fn contains(&self, channel: &str) -> bool {
        self.channels.lock().contains_key(channel)
    }
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
    backend: Backend,
}

/// Where subscriptions go.
enum Backend {
    /// The embedded store delivers into the hub itself.
    InProcess,
    Classic(classic::ClassicSubscriber),
    Sharded(sharded::ShardedSubscriber),
}

impl Backend {
    fn name(&self) -> &'static str {
        match self {
            Backend::InProcess => "memory",
            Backend::Classic(_) => "classic",
            Backend::Sharded(_) => "sharded",
        }
    }

    /// Subscribe `channel`, returning once the server acknowledged it.
    async fn subscribe(&self, channel: &str) -> Result<()> {
        match self {
            Backend::InProcess => Ok(()),
            Backend::Classic(c) => c.subscribe(channel).await,
            Backend::Sharded(s) => s.subscribe(channel).await,
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
            Backend::Sharded(s) => s.unsubscribe_later(channel, hub),
        }
    }
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field("backend", &self.inner.backend.name())
            .finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier fed in process by the embedded store through `hub`.
    pub(crate) fn in_process(hub: Arc<Hub>) -> Self {
        Notifier {
            inner: Arc::new(Inner {
                hub,
                backend: Backend::InProcess,
            }),
        }
    }

    /// A notifier with one dedicated classic pub/sub connection to the server of `client`.
    pub(crate) async fn redis(client: redis::Client) -> Result<Self> {
        let hub = Arc::new(Hub::default());
        let subscriber = classic::ClassicSubscriber::start(client, hub.clone()).await?;
        Ok(Notifier {
            inner: Arc::new(Inner {
                hub,
                backend: Backend::Classic(subscriber),
            }),
        })
    }

    /// A notifier with sharded subscriptions through a dedicated cluster connection built by
    /// `client` (which must speak RESP3; see [`sharded`]).
    pub(crate) async fn sharded(client: redis::cluster::ClusterClientBuilder) -> Result<Self> {
        let hub = Arc::new(Hub::default());
        let subscriber = sharded::ShardedSubscriber::start(client, hub.clone()).await?;
        Ok(Notifier {
            inner: Arc::new(Inner {
                hub,
                backend: Backend::Sharded(subscriber),
            }),
        })
    }

    /// How this notifier hears releases ([`PubSub::Classic`] for the embedded store, whose
    /// deliveries do not depend on the command).
    pub fn pubsub(&self) -> PubSub {
        match self.inner.backend {
            Backend::Sharded(_) => PubSub::Sharded,
            _ => PubSub::Classic,
        }
    }

    /// Start watching `channel`: messages published on it from now on wake [`Watch::notified`].
    /// The first local watcher of a channel subscribes (one round trip, acknowledged before
    /// this returns); later ones cost nothing, but also return only once that acknowledgement
    /// is in (if the first one's SUBSCRIBE failed or was cancelled, the next one retries it).
    ///
    /// # Errors
    ///
    /// The subscription failed (connection). Waiters then fall back to timed retries.
    pub async fn watch(&self, channel: &str) -> Result<Watch> {
        let (ch, _first) = self.inner.hub.join(channel);
        let watch = Watch {
            channel: ch.clone(),
            name: channel.to_owned(),
            notifier: self.clone(),
        };
        ch.subscribed
            .get_or_try_init(|| self.inner.backend.subscribe(channel))
            .await?;
        Ok(watch)
    }
}

/// How a waiting loop starts listening: `store`'s notifier watching `channel`, or `None` when the
/// store has no notifier, the subscription failed, or `deadline` came first (connecting the
/// notifier and the acknowledged `SUBSCRIBE` are bounded by it, so a `try_lock_for` never
/// overruns its timeout waiting for them). Without a watch, the waiter polls.
///
/// # Cancel safety
///
/// Cancel safe: a subscription cut short is retried by the channel's next watcher.
pub async fn watch_release<S: crate::Store>(
    store: &S,
    channel: &str,
    deadline: Option<tokio::time::Instant>,
) -> Option<Watch> {
    let watch = async {
        match store.notifier().await {
            Some(n) => n.watch(channel).await.ok(),
            None => None,
        }
    };
    match deadline {
        Some(deadline) => tokio::time::timeout_at(deadline, watch)
            .await
            .ok()
            .flatten(),
        None => watch.await,
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
            .finish()
    }
}

impl Watch {
    /// A future that completes on the next message. Create it (and pin and
    /// [`enable`](tokio::sync::futures::Notified::enable) it) *before* the attempt whose failure
    /// makes you wait, so a release between the attempt and the wait is not missed.
    pub fn notified(&self) -> tokio::sync::futures::Notified<'_> {
        self.channel.notify.notified()
    }

    /// Wait for a message or `timeout`, whichever comes first; true if a message came.
    pub async fn wait(&self, timeout: Duration) -> bool {
        tokio::time::timeout(timeout, self.notified()).await.is_ok()
    }
}

/// How long a channel stays subscribed after its last local watcher left, so that a client
/// locking the same name again soon (the common case) pays no SUBSCRIBE: an uncontended
/// `lock()` is then one round trip.
const LINGER: Duration = Duration::from_secs(3);

impl Drop for Watch {
    fn drop(&mut self) {
        let backend = &self.notifier.inner.backend;
        if self.notifier.inner.hub.leave(&self.name, backend.lingers()) {
            backend.unsubscribe_later(&self.name, self.notifier.inner.hub.clone());
        }
    }
}
