//! Waiting as the library's waiting calls do, for the fair rows: a client subscribed to its wake
//! channel before each attempt attempts again as soon as a message comes there, instead of at
//! the end of a polling interval ([`Algorithm::woken`](super::Algorithm::woken)).

use std::sync::Arc;

use tairlock::Store;
use tairlock::notify::Watch;

use super::BoxFuture;
use crate::race::client::{Client, Step};

/// A client's subscription to its wake channel, and where the channel's messages stood before
/// its last attempt.
#[derive(Debug, Default)]
pub(super) struct Wake {
    watch: Option<Arc<Watch>>,
    cursor: u64,
}

impl Wake {
    /// Subscribe to `channel` (once: a client's wake channel is its lock handle's, and a trial
    /// has one lock), where the store has notifications; keep the current subscription in
    /// `wake`, and note where its messages stand: a later one may hand the lock over.
    pub(super) async fn listen<S: Store>(
        wake: &parking_lot::Mutex<Wake>,
        cx: &Client<S>,
        channel: impl FnOnce() -> tairlock::Result<String>,
    ) -> Step<()> {
        let current = wake.lock().watch.clone();
        let watch = match current {
            Some(watch) => Some(watch),
            None => match cx.store().notifier().await {
                Some(notifier) => {
                    let watch = notifier.register(&channel()?);
                    watch.subscribed_by(None).await.then(|| Arc::new(watch))
                }
                None => None,
            },
        };
        let mut wake = wake.lock();
        wake.cursor = watch.as_ref().map_or(0, |w| w.cursor());
        wake.watch = watch;
        Ok(())
    }

    /// A message after the last attempt's cursor, now or later; `None` without a subscription.
    pub(super) fn message(&self) -> Option<BoxFuture<'static, ()>> {
        let (watch, cursor) = (self.watch.clone()?, self.cursor);
        Some(Box::pin(async move {
            let notified = watch.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if watch.messages_after(cursor).is_empty() {
                notified.await;
            }
        }))
    }
}
