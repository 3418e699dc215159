//! Release notifications: one subscription per client, local waiters coalesced per channel.
//!
//! Releasing scripts `PUBLISH` on the lock's channel (`<prefix>{name}:released`, in the lock's
//! hash slot). A [`Notifier`] is shared by everything that uses one store handle: on Redis it is
//! one dedicated pub/sub connection, subscribed to a channel while at least one local waiter
//! watches it; on the embedded store, messages are delivered in process. A message wakes the
//! local watchers of its channel; the lock kinds make sure only one of them (the head of the
//! key's local queue) talks to the server, so N local waiters cost O(1) commands per handoff.
//!
//! Notifications are hints, never the only way out of a wait: a lost message (a dropped
//! connection, a lock that expired instead of being released) costs at most the holder's
//! remaining time, after which waiters retry anyway.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
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

    /// Unregister a watcher; true if it was the channel's last.
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
}

/// Delivers release notifications to local waiters. Cheap to clone. See the [module docs](self).
#[derive(Clone)]
pub struct Notifier {
    inner: Arc<Inner>,
}

struct Inner {
    hub: Arc<Hub>,
    redis: Option<RedisSubscriber>,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Notifier")
            .field(
                "backend",
                &if self.inner.redis.is_some() {
                    "redis"
                } else {
                    "memory"
                },
            )
            .finish_non_exhaustive()
    }
}

impl Notifier {
    /// A notifier fed in process by the embedded store through `hub`.
    pub(crate) fn in_process(hub: Arc<Hub>) -> Self {
        Notifier {
            inner: Arc::new(Inner { hub, redis: None }),
        }
    }

    /// A notifier with one dedicated pub/sub connection to the server of `client`.
    pub(crate) async fn redis(client: redis::Client) -> Result<Self> {
        let hub = Arc::new(Hub::default());
        let subscriber = RedisSubscriber::start(client, hub.clone()).await?;
        Ok(Notifier {
            inner: Arc::new(Inner {
                hub,
                redis: Some(subscriber),
            }),
        })
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
        if let Some(redis) = &self.inner.redis {
            ch.subscribed
                .get_or_try_init(|| redis.subscribe(channel))
                .await?;
        }
        Ok(watch)
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
        let redis = self.notifier.inner.redis.as_ref();
        if self.notifier.inner.hub.leave(&self.name, redis.is_some())
            && let Some(redis) = redis
        {
            redis.unsubscribe_later(&self.name, self.notifier.inner.hub.clone());
        }
    }
}

/// One dedicated pub/sub connection: a sink for (un)subscribing and a reader task that feeds
/// the hub, reconnecting and resubscribing when the connection drops.
struct RedisSubscriber {
    sink: Arc<tokio::sync::Mutex<Option<redis::aio::PubSubSink>>>,
    reader: tokio::task::AbortHandle,
}

impl Drop for RedisSubscriber {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl RedisSubscriber {
    async fn start(client: redis::Client, hub: Arc<Hub>) -> Result<Self> {
        let (sink, stream) = client.get_async_pubsub().await?.split();
        let sink = Arc::new(tokio::sync::Mutex::new(Some(sink)));
        let reader = tokio::spawn(Self::read(client, hub, sink.clone(), stream)).abort_handle();
        Ok(RedisSubscriber { sink, reader })
    }

    async fn read(
        client: redis::Client,
        hub: Arc<Hub>,
        sink: Arc<tokio::sync::Mutex<Option<redis::aio::PubSubSink>>>,
        mut stream: redis::aio::PubSubStream,
    ) {
        loop {
            while let Some(msg) = stream.next().await {
                hub.deliver(msg.get_channel_name());
            }
            // The connection dropped: anything may have been released meanwhile.
            *sink.lock().await = None;
            hub.wake_all();
            let mut delay = Duration::from_millis(50);
            loop {
                tokio::time::sleep(delay).await;
                if let Ok(pubsub) = client.get_async_pubsub().await {
                    let (mut new_sink, new_stream) = pubsub.split();
                    let names = hub.names();
                    if names.is_empty() || new_sink.subscribe(&names).await.is_ok() {
                        *sink.lock().await = Some(new_sink);
                        stream = new_stream;
                        hub.wake_all();
                        break;
                    }
                }
                delay = (delay * 2).min(Duration::from_secs(2));
            }
        }
    }

    async fn subscribe(&self, channel: &str) -> Result<()> {
        let mut sink = self.sink.lock().await;
        match sink.as_mut() {
            Some(s) => Ok(s.subscribe(channel).await?),
            // Reconnecting: the reader resubscribes every watched channel when it is back.
            None => Ok(()),
        }
    }

    /// After [`LINGER`], unsubscribe `channel` unless a watcher has come back. The check and the
    /// removal happen under the sink's lock, so a SUBSCRIBE for a new registration of the
    /// channel is never overtaken by this UNSUBSCRIBE.
    fn unsubscribe_later(&self, channel: &str, hub: Arc<Hub>) {
        let sink = self.sink.clone();
        let channel = channel.to_owned();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime to wait on: drop the registration now (the subscription stays until
            // the connection closes; stray messages wake nobody).
            hub.forget_if_unwatched(&channel);
            return;
        };
        handle.spawn(async move {
            tokio::time::sleep(LINGER).await;
            let mut sink = sink.lock().await;
            if !hub.forget_if_unwatched(&channel) {
                return;
            }
            if let Some(s) = sink.as_mut() {
                let _ = s.unsubscribe(&channel).await;
            }
        });
    }
}
