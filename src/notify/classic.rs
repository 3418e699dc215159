//! Classic pub/sub: one dedicated connection, `SUBSCRIBE`/`UNSUBSCRIBE`, messages from `PUBLISH`.
//!
//! On one server this is the whole story. On a cluster, a classic `PUBLISH` is broadcast over the
//! cluster bus to every node, so one connection to any node hears every lock's releases: simple,
//! but every release costs every node a message (see [`sharded`](super::sharded) for the
//! alternative on Redis 7.0+).

use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;

use super::{Hub, LINGER};
use crate::error::Result;

/// One dedicated pub/sub connection: a sink for (un)subscribing and a reader task that feeds
/// the hub, reconnecting and resubscribing when the connection drops.
pub(super) struct ClassicSubscriber {
    sink: Arc<tokio::sync::Mutex<Option<redis::aio::PubSubSink>>>,
    reader: tokio::task::AbortHandle,
}

impl Drop for ClassicSubscriber {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl ClassicSubscriber {
    pub(super) async fn start(client: redis::Client, hub: Arc<Hub>) -> Result<Self> {
        let (sink, stream) = client.get_async_pubsub().await?.split();
        let sink = Arc::new(tokio::sync::Mutex::new(Some(sink)));
        let reader = tokio::spawn(Self::read(client, hub, sink.clone(), stream)).abort_handle();
        Ok(ClassicSubscriber { sink, reader })
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

    pub(super) async fn subscribe(&self, channel: &str) -> Result<()> {
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
    pub(super) fn unsubscribe_later(&self, channel: &str, hub: Arc<Hub>) {
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
