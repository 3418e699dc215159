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
//! How it follows slot moves and reconnections: the table in the [parent module](super).

use std::sync::Arc;
use std::time::Duration;

use redis::cluster::ClusterClientBuilder;
use redis::cluster_async::ClusterConnection;
use redis::{ProtocolVersion, PushInfo, PushKind, Value};
use tokio::sync::mpsc::UnboundedReceiver;

use super::{Hub, LINGER};
use crate::error::Result;

/// The sharded subscriber. See the [module docs](self).
pub(super) struct ShardedSubscriber {
    con: ClusterConnection,
    /// Serialises (un)subscribe commands: an `SUNSUBSCRIBE` sent after the linger never overtakes
    /// the `SSUBSCRIBE` of a channel that was registered again meanwhile.
    order: Arc<tokio::sync::Mutex<()>>,
    reader: tokio::task::AbortHandle,
}

impl Drop for ShardedSubscriber {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl ShardedSubscriber {
    /// Connect with `builder` (RESP3 and the push channel are set here) and start reading.
    pub(super) async fn start(builder: ClusterClientBuilder, hub: Arc<Hub>) -> Result<Self> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<PushInfo>();
        let client = builder
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()?;
        let con = client.get_async_connection().await?;
        let order = Arc::new(tokio::sync::Mutex::new(()));
        let reader = tokio::spawn(read(rx, hub, con.clone(), order.clone())).abort_handle();
        Ok(ShardedSubscriber { con, order, reader })
    }

    /// `SSUBSCRIBE channel` on the master of its slot; returns once confirmed.
    pub(super) async fn subscribe(&self, channel: &str) -> Result<()> {
        let _order = self.order.lock().await;
        let mut con = self.con.clone();
        con.ssubscribe(channel).await?;
        Ok(())
    }

    /// After [`LINGER`], `SUNSUBSCRIBE` `channel` unless a watcher has come back.
    pub(super) fn unsubscribe_later(&self, channel: &str, hub: Arc<Hub>) {
        let channel = channel.to_owned();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            hub.forget_if_unwatched(&channel);
            return;
        };
        let con = self.con.clone();
        let order = self.order.clone();
        handle.spawn(async move {
            tokio::time::sleep(LINGER).await;
            let _order = order.lock().await;
            if !hub.forget_if_unwatched(&channel) {
                return;
            }
            let mut con = con;
            let _ = con.sunsubscribe(&channel).await;
        });
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

/// Feed the hub from the cluster connection's pushes. See the table in the
/// [parent module](super).
async fn read(
    mut pushes: UnboundedReceiver<PushInfo>,
    hub: Arc<Hub>,
    con: ClusterConnection,
    order: Arc<tokio::sync::Mutex<()>>,
) {
    while let Some(push) = pushes.recv().await {
        match push.kind {
            PushKind::SMessage => {
                if let Some(channel) = channel_of(&push) {
                    hub.deliver(&channel);
                }
            }
            PushKind::SUnsubscribe => {
                if let Some(channel) = channel_of(&push)
                    && hub.contains(&channel)
                {
                    // Still wanted, so the server dropped it: the slot moved.
                    tokio::spawn(follow(
                        vec![channel],
                        hub.clone(),
                        con.clone(),
                        order.clone(),
                    ));
                }
            }
            PushKind::Disconnection => {
                // A node connection dropped: anything may have been released meanwhile, and if
                // the node is gone for good its slots move to a promoted replica, which has
                // none of our subscriptions. Subscribe every watched channel again (a no-op on
                // the nodes that still have them) until each succeeds.
                hub.wake_all();
                tokio::spawn(follow(hub.names(), hub.clone(), con.clone(), order.clone()));
            }
            _ => {}
        }
    }
}

/// Subscribe each of `channels` again (the first attempts may meet a dead node or the old
/// owner's `MOVED` while the connection learns the new slot map), then wake its watchers once:
/// a release while the subscription was down went unheard.
async fn follow(
    channels: Vec<String>,
    hub: Arc<Hub>,
    con: ClusterConnection,
    order: Arc<tokio::sync::Mutex<()>>,
) {
    for channel in channels {
        let mut delay = Duration::from_millis(10);
        loop {
            {
                let _order = order.lock().await;
                if !hub.contains(&channel) {
                    break;
                }
                let mut con = con.clone();
                if con.ssubscribe(&channel).await.is_ok() {
                    hub.deliver(&channel);
                    break;
                }
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
}
