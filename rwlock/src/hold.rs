//! One hold on the server (a reader's lease or the writer's lease) and the watchdog that renews
//! it, as the core's guards do for the expire lock.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::{Error, ErrorKind, Lease, Result, Store, Unlock};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::guard::Release;
use crate::lock::RwLock;

/// What this hold presents to the server.
#[derive(Debug, Clone)]
pub(crate) enum Credential {
    /// A reader: its nonce in the readers set.
    Read(String),
    /// The writer: its lease in the writer key.
    Write(Lease),
}

pub(crate) struct Hold<S: Store> {
    rw: RwLock<S>,
    name: String,
    ttl: Duration,
    cred: Mutex<Credential>,
    deadline: Mutex<Instant>,
    lost: watch::Sender<bool>,
    /// Held by the watchdog while a renewal is in flight (and by a downgrade), so a release
    /// never races a credential that is about to change.
    renewing: tokio::sync::Mutex<()>,
    watchdog: Mutex<Option<tokio::task::AbortHandle>>,
}

impl<S: Store> Hold<S> {
    /// A hold on `name` with `cred` until `deadline`, renewed by a watchdog every `ttl / 3`.
    pub(crate) fn start(
        rw: RwLock<S>,
        name: &str,
        cred: Credential,
        ttl: Duration,
        deadline: Instant,
    ) -> Arc<Self> {
        let hold = Arc::new(Hold {
            rw,
            name: name.to_owned(),
            ttl,
            cred: Mutex::new(cred),
            deadline: Mutex::new(deadline),
            lost: watch::channel(false).0,
            renewing: tokio::sync::Mutex::new(()),
            watchdog: Mutex::new(None),
        });
        let handle = tairlock::blocking::spawn_handle(hold.rw.store().runtime())
            .spawn(watchdog(hold.clone()))
            .abort_handle();
        *hold.watchdog.lock() = Some(handle);
        hold
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn rw(&self) -> &RwLock<S> {
        &self.rw
    }

    pub(crate) fn credential(&self) -> Credential {
        self.cred.lock().clone()
    }

    pub(crate) fn is_write(&self) -> bool {
        matches!(*self.cred.lock(), Credential::Write(_))
    }

    pub(crate) fn deadline(&self) -> Instant {
        *self.deadline.lock()
    }

    fn mark_lost(&self) {
        self.lost.send_replace(true);
    }

    fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline()
    }

    /// Lost: a renewal found the lease gone, or its local deadline passed without a renewal.
    pub(crate) fn is_lost(&self) -> bool {
        *self.lost.borrow() || self.past_deadline()
    }

    /// Resolves when the hold is lost.
    pub(crate) async fn lost(&self) {
        let mut rx = self.lost.subscribe();
        loop {
            if *rx.borrow_and_update() {
                return;
            }
            let deadline = self.deadline();
            tokio::select! {
                changed = rx.changed() => if changed.is_err() { return },
                () = tokio::time::sleep_until(deadline) => {
                    // The watchdog may have renewed meanwhile (the deadline moved).
                    if self.past_deadline() {
                        self.mark_lost();
                        return;
                    }
                }
            }
        }
    }

    /// One renewal: true while the lease is still ours.
    async fn renew_once(&self) -> Result<bool> {
        match self.credential() {
            Credential::Read(nonce) => {
                match self.rw.read_renew(&self.name, &nonce, self.ttl).await? {
                    Some(lease) => {
                        *self.deadline.lock() = lease.deadline();
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
            Credential::Write(lease) => {
                match self.rw.write_renew(&self.name, &lease, self.ttl).await? {
                    Some(renewed) => {
                        *self.deadline.lock() = renewed.deadline();
                        *self.cred.lock() = Credential::Write(renewed.lease().clone());
                        Ok(true)
                    }
                    None => Ok(false),
                }
            }
        }
    }

    async fn stop_watchdog(&self) {
        let _in_flight = self.renewing.lock().await;
        if let Some(handle) = self.watchdog.lock().take() {
            handle.abort();
        }
    }

    /// Stop renewing and give the lease back.
    pub(crate) async fn release(&self) -> Result<Release> {
        self.stop_watchdog().await;
        let outcome = match self.credential() {
            Credential::Read(nonce) => {
                self.rw
                    .read_release(&self.name, &nonce)
                    .await
                    .map(|released| {
                        if released {
                            Release::Released
                        } else {
                            Release::Lost
                        }
                    })
            }
            Credential::Write(lease) => {
                self.rw
                    .write_release(&self.name, &lease)
                    .await
                    .map(|unlock| match unlock {
                        Unlock::Released => Release::Released,
                        _ => Release::Lost,
                    })
            }
        };
        self.mark_lost();
        outcome
    }

    /// Turn the write lease into a read lease, atomically on the server.
    pub(crate) async fn downgrade(&self) -> Result<()> {
        let _in_flight = self.renewing.lock().await;
        let Credential::Write(lease) = self.credential() else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("cannot downgrade {}: this hold is a read lock", self.name),
            ));
        };
        let nonce = tairlock::new_nonce();
        match self
            .rw
            .downgrade_lease(&self.name, &lease, &nonce, self.ttl)
            .await?
        {
            Some(read) => {
                *self.cred.lock() = Credential::Read(nonce);
                *self.deadline.lock() = read.deadline();
                Ok(())
            }
            None => {
                self.mark_lost();
                Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!("cannot downgrade {}: the write lease is gone", self.name),
                ))
            }
        }
    }
}

async fn watchdog<S: Store>(hold: Arc<Hold<S>>) {
    let interval = hold.ttl / 3;
    let mut wait = interval;
    loop {
        tokio::time::sleep(wait).await;
        let _in_flight = hold.renewing.lock().await;
        match hold.renew_once().await {
            Ok(true) => wait = interval,
            Ok(false) => {
                hold.mark_lost();
                return;
            }
            Err(_) => {
                if hold.past_deadline() {
                    hold.mark_lost();
                    return;
                }
                // Try again soon, well before the deadline.
                let left = hold.deadline().saturating_duration_since(Instant::now());
                wait = (left / 4).clamp(Duration::from_millis(5), interval);
            }
        }
    }
}
