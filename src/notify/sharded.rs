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
use tokio::sync::watch;

use super::{Denial, Hub, LINGER, Sub, failed};
use crate::error::Result;

/// The sharded subscriber. See the [module docs](self).
///
/// Every (un)subscribe runs in a task of its own on the multiplexed cluster connection (whose
/// response timeout bounds it): callers never wait on a round trip, only, within their own
/// patience, for their channel's state to change. Nothing orders an `SUNSUBSCRIBE` after the
/// linger against the `SSUBSCRIBE` of a channel registered again meanwhile; instead the
/// unsubscribing task looks again once the server answered and, if the channel is wanted
/// again, subscribes it again and wakes its watchers (a release in between went unheard).
pub(super) struct ShardedSubscriber {
    /// The cluster connection, once the background task has made it.
    con: watch::Receiver<Option<ClusterConnection>>,
    hub: Arc<Hub>,
    denial: Arc<Denial>,
    reader: tokio::task::AbortHandle,
}

impl Drop for ShardedSubscriber {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

/// The connection once made; waits (in a background task, never for a caller) until it is.
async fn connection(
    mut con: watch::Receiver<Option<ClusterConnection>>,
) -> Option<ClusterConnection> {
    con.wait_for(Option::is_some)
        .await
        .ok()
        .and_then(|c| c.clone())
}

impl ShardedSubscriber {
    /// Build the client from `builder` (RESP3 and the push channel are set here) and start a
    /// task that connects (retrying with back-off) and then reads. Returns at once.
    pub(super) fn start(
        builder: ClusterClientBuilder,
        hub: Arc<Hub>,
        denial: Arc<Denial>,
    ) -> Result<Self> {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel::<PushInfo>();
        let client = builder
            .use_protocol(ProtocolVersion::RESP3)
            .push_sender(tx)
            .build()?;
        let (con_tx, con) = watch::channel(None);
        let (task_hub, task_denial) = (hub.clone(), denial.clone());
        let reader = tokio::spawn(async move {
            let mut delay = Duration::from_millis(50);
            let con = loop {
                match client.get_async_connection().await {
                    Ok(con) => break con,
                    Err(_) => {
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                }
            };
            con_tx.send_replace(Some(con.clone()));
            read(rx, task_hub, con, task_denial).await;
        })
        .abort_handle();
        Ok(ShardedSubscriber {
            con,
            hub,
            denial,
            reader,
        })
    }

    /// `SSUBSCRIBE channel` on the master of its slot, in the background; the channel is
    /// marked subscribed once confirmed.
    pub(super) fn request(&self, channel: &str) {
        let (con, hub, denial) = (self.con.clone(), self.hub.clone(), self.denial.clone());
        let channel = channel.to_owned();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            // No runtime to run it on: the next watcher asks again.
            if let Some(ch) = hub.get(&channel) {
                ch.set(Sub::Failed(
                    crate::ErrorKind::InvalidInput,
                    "a subscription needs a tokio runtime".into(),
                ));
            }
            return;
        };
        handle.spawn(async move {
            let Some(mut con) = connection(con).await else {
                return;
            };
            let Some(ch) = hub.get(&channel) else {
                return;
            };
            match con.ssubscribe(&channel).await {
                Ok(()) => {
                    denial.granted();
                    ch.set(Sub::Subscribed);
                }
                Err(e) => ch.set(failed(e, &denial)),
            }
        });
    }

    /// After [`LINGER`], `SUNSUBSCRIBE` `channel` unless a watcher has come back.
    pub(super) fn unsubscribe_later(&self, channel: &str, hub: Arc<Hub>) {
        let channel = channel.to_owned();
        let Ok(handle) = tokio::runtime::Handle::try_current() else {
            hub.forget_if_unwatched(&channel);
            return;
        };
        let (con, denial) = (self.con.clone(), self.denial.clone());
        handle.spawn(async move {
            tokio::time::sleep(LINGER).await;
            let subscribed = hub
                .get(&channel)
                .is_some_and(|ch| ch.state() == Sub::Subscribed);
            // Never subscribed (refused, or failed): nothing to take back.
            if !hub.forget_if_unwatched(&channel) || !subscribed {
                return;
            }
            let Some(mut con) = connection(con).await else {
                return;
            };
            let _ = con.sunsubscribe(&channel).await;
            // Registered again while the SUNSUBSCRIBE was on its way: it may have overtaken the
            // new SSUBSCRIBE.
            if let Some(ch) = hub.get(&channel) {
                ch.set(Sub::Pending);
                follow(vec![channel], hub, con, denial).await;
            }
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

/// The payload of an `smessage` push (`[channel, payload]`); empty if it has none.
fn payload_of(push: &PushInfo) -> String {
    match push.data.get(1) {
        Some(Value::BulkString(bytes)) => String::from_utf8_lossy(bytes).into_owned(),
        Some(Value::SimpleString(s)) => s.clone(),
        _ => String::new(),
    }
}

/// Feed the hub from the cluster connection's pushes. See the table in the
/// [parent module](super).
async fn read(
    mut pushes: UnboundedReceiver<PushInfo>,
    hub: Arc<Hub>,
    con: ClusterConnection,
    denial: Arc<Denial>,
) {
    while let Some(push) = pushes.recv().await {
        match push.kind {
            PushKind::SMessage => {
                if let Some(channel) = channel_of(&push) {
                    hub.deliver_message(&channel, &payload_of(&push));
                }
            }
            PushKind::SUnsubscribe => {
                if let Some(channel) = channel_of(&push)
                    && let Some(ch) = hub.get(&channel)
                    && ch.state() == Sub::Subscribed
                {
                    // Still wanted, so the server dropped it: the slot moved.
                    ch.set(Sub::Pending);
                    tokio::spawn(follow(
                        vec![channel],
                        hub.clone(),
                        con.clone(),
                        denial.clone(),
                    ));
                }
            }
            PushKind::Disconnection => {
                // A node connection dropped: anything may have been released meanwhile, and if
                // the node is gone for good its slots move to a promoted replica, which has
                // none of our subscriptions. Subscribe every watched channel again (a no-op on
                // the nodes that still have them) until each succeeds.
                let names = hub
                    .all()
                    .into_iter()
                    .filter(|(_, ch)| matches!(ch.state(), Sub::Pending | Sub::Subscribed))
                    .map(|(name, ch)| {
                        ch.set(Sub::Pending);
                        name
                    })
                    .collect();
                hub.wake_all();
                tokio::spawn(follow(names, hub.clone(), con.clone(), denial.clone()));
            }
            _ => {}
        }
    }
}

/// Subscribe each of `channels` again (the first attempts may meet a dead node or the old
/// owner's `MOVED` while the connection learns the new slot map), then wake its watchers once:
/// a release while the subscription was down went unheard.
async fn follow(channels: Vec<String>, hub: Arc<Hub>, con: ClusterConnection, denial: Arc<Denial>) {
    for channel in channels {
        let mut delay = Duration::from_millis(10);
        loop {
            let Some(ch) = hub.get(&channel) else {
                break;
            };
            let mut con = con.clone();
            match con.ssubscribe(&channel).await {
                Ok(()) => {
                    denial.granted();
                    ch.set(Sub::Subscribed);
                    hub.deliver(&channel);
                    break;
                }
                Err(e) if super::is_denial(&e) => {
                    ch.set(failed(e, &denial));
                    break;
                }
                Err(_) => {}
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(1));
        }
    }
}
