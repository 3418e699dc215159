//! Shared local read holds: one server reader entry per client and lock, joined by every local
//! reader with no round trip, lingering briefly once idle, revoked by a writer's intent.
//!
//! A [`Shared`] is one server read hold (a [`Hold`]: one nonce in the readers set, one watchdog)
//! with a [`ShareState`] count of the local readers on it, and a listener task on the lock's
//! intent channel (`<prefix>{name}:intent`, apart from the release channel so that an intent
//! wakes no waiter). The listener is armed *before* the hold's `read_acquire` is sent: any
//! message published after the server admitted us is heard. A waiting writer's `write_acquire`
//! publishes on that channel when it first raises its intent against readers; any message
//! (or the pub/sub connection dropping) revokes the hold: no more joins, released at once when
//! idle, else when its last local reader leaves. New local readers then go to the server, where
//! the writer's intent keeps them out until the writer has had its turn.
//!
//! Under [`Preference::Reader`] (the listening client's own preference) a writer's intent
//! keeps no reader out, so a message is only a hint ([`Shared::give_back_idle`]): an idle hold
//! is released at once, and a hold with readers inside stays and still takes new local readers,
//! but no longer lingers once idle. A waiting writer under reader preference raises no intent;
//! it publishes that hint on the same channel, once per wait, when first refused by live
//! readers.
//!
//! Every local reader of a hold shares its liveness: a lost hold (its renewal found it gone, or
//! its local deadline passed) is lost for all of them at once, and nobody joins it any more.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::notify::Watch;
use tairlock::{Error, ErrorKind, Result, Store};
use tokio::sync::oneshot;

use crate::hold::Hold;
use crate::options::Preference;
use crate::share_state::{Leave, ShareState};
use crate::types::Release;

/// One server read hold shared by a client's local readers of one lock.
pub(crate) struct Shared<S: Store> {
    hold: Arc<Hold<S>>,
    linger: Duration,
    state: Mutex<ShareState>,
}

/// A listener armed on the lock's intent channel, waiting to learn which hold it guards.
pub(crate) struct Armed<S: Store> {
    go: oneshot::Sender<Arc<Shared<S>>>,
}

impl<S: Store> Armed<S> {
    /// Start listening on `watch` (subscribed already): returns once a message published from
    /// now on is sure to be heard. Dropping the result ends the listener. A message revokes the
    /// hold under writer `preference`, and only gives it back when idle under reader preference.
    pub(crate) async fn arm(store: &S, watch: Watch, preference: Preference) -> Self {
        let (armed_tx, armed_rx) = oneshot::channel();
        let (go, go_rx) = oneshot::channel::<Arc<Shared<S>>>();
        tairlock::blocking::spawn_handle(store.runtime()).spawn(async move {
            let mut notified = pin!(watch.notified());
            notified.as_mut().enable();
            let _ = armed_tx.send(());
            let Ok(shared) = go_rx.await else {
                return;
            };
            tokio::select! {
                () = notified => match preference {
                    Preference::Writer => shared.revoke(),
                    Preference::Reader => shared.give_back_idle(),
                },
                // Released or lost: nothing left to revoke.
                () = shared.hold.lost() => {}
            }
        });
        let _ = armed_rx.await;
        Armed { go }
    }

    /// Guard `shared` from now on.
    pub(crate) fn start(self, shared: &Arc<Shared<S>>) {
        let _ = self.go.send(shared.clone());
    }
}

impl<S: Store> Shared<S> {
    /// A shared hold on `hold` with its first local reader in; an idle hold lingers `linger`.
    pub(crate) fn new(hold: Arc<Hold<S>>, linger: Duration) -> Arc<Self> {
        Arc::new(Shared {
            hold,
            linger,
            state: Mutex::new(ShareState::new(!linger.is_zero())),
        })
    }

    /// The server hold.
    pub(crate) fn hold(&self) -> &Arc<Hold<S>> {
        &self.hold
    }

    /// Join as one more local reader, no round trip: false when revoked, closed or lost.
    pub(crate) fn join(&self) -> bool {
        !self.hold.is_lost() && self.state.lock().join()
    }

    /// Local readers inside now.
    pub(crate) fn readers(&self) -> usize {
        self.state.lock().readers()
    }

    /// A writer wants in: nobody joins any more, and an idle hold is released now (in the
    /// background).
    pub(crate) fn revoke(self: &Arc<Self>) {
        if self.state.lock().revoke() {
            self.release_in_background();
        }
    }

    /// A writer waits, under reader preference: an idle hold is released now (in the
    /// background); one with readers inside stays open to new local readers, and is released
    /// as soon as it is idle instead of lingering.
    pub(crate) fn give_back_idle(self: &Arc<Self>) {
        if self.state.lock().give_back_idle() {
            self.release_in_background();
        }
    }

    /// Whether more local readers may join (neither revoked, closed nor lost).
    pub(crate) fn is_open(&self) -> bool {
        !self.hold.is_lost() && self.state.lock().is_open()
    }

    /// One local reader leaves; the last one releases the server hold or lets it linger. The
    /// release runs as a task of its own and completes even if the caller stops waiting.
    ///
    /// A reader that leaves while others stay, or lets the hold linger, reports
    /// [`Release::Released`] (its part is given back) or [`Release::Lost`] when the shared hold
    /// is lost; the one that releases reports the server's answer.
    pub(crate) async fn leave(self: Arc<Self>) -> Result<Release> {
        let step = self.leave_step();
        match step {
            Leave::Stay => Ok(self.local_outcome()),
            Leave::Linger(generation) => {
                self.linger_then_release(generation);
                Ok(self.local_outcome())
            }
            Leave::Release => {
                let hold = self.hold.clone();
                tairlock::blocking::spawn_handle(hold.leases().store().runtime())
                    .spawn(async move { hold.release(false).await })
                    .await
                    .unwrap_or_else(|e| {
                        Err(Error::new(
                            ErrorKind::Server,
                            format!("the release of {} did not finish: {e}", self.hold.name()),
                        ))
                    })
            }
        }
    }

    /// [`leave`](Self::leave) without waiting (never blocks).
    pub(crate) fn leave_in_background(self: Arc<Self>) {
        let step = self.leave_step();
        match step {
            Leave::Stay => {}
            Leave::Linger(generation) => self.linger_then_release(generation),
            Leave::Release => self.release_in_background(),
        }
    }

    /// One local reader leaves; a lost hold is revoked first, so its last reader gives it up
    /// instead of letting it linger.
    fn leave_step(&self) -> Leave {
        let mut state = self.state.lock();
        if self.hold.is_lost() {
            state.revoke();
        }
        state.leave()
    }

    fn local_outcome(&self) -> Release {
        if self.hold.is_lost() {
            Release::Lost
        } else {
            Release::Released
        }
    }

    fn release_in_background(&self) {
        let hold = self.hold.clone();
        tairlock::blocking::spawn_handle(hold.leases().store().runtime()).spawn(async move {
            let _ = hold.release(true).await;
        });
    }

    fn linger_then_release(self: &Arc<Self>, generation: u64) {
        let shared = self.clone();
        tairlock::blocking::spawn_handle(self.hold.leases().store().runtime()).spawn(async move {
            tokio::time::sleep(shared.linger).await;
            if shared.state.lock().linger_over(generation) {
                let _ = shared.hold.release(true).await;
            }
        });
    }
}
