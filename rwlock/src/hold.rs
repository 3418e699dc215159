//! One hold on the server (a reader's lease or the writer's lease) and the watchdog that renews
//! it, as the core's guards do for the expire lock.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tairlock::guard::{Liveness, Renewal};
use tairlock::observe::{self, ReleaseOutcome};
use tairlock::{Error, ErrorKind, Lease, Result, Store, Unlock};
use tokio::time::Instant;

use crate::leases::Leases;
use crate::types::Release;

/// What this hold presents to the server.
#[derive(Debug, Clone)]
pub(crate) enum Credential {
    /// A reader: its nonce in the readers set.
    Read(String),
    /// The writer: its lease in the writer key.
    Write(Lease),
}

pub(crate) struct Hold<S: Store> {
    rw: Leases<S>,
    name: String,
    ttl: Duration,
    cred: Mutex<Credential>,
    /// The reader nonce of a downgrade whose outcome is unknown (no answer, or its caller went
    /// away): the server may hold either the write lease or that reader, so a release gives
    /// back both.
    downgrading: Mutex<Option<String>>,
    /// The deadline of the credential in effect; its renewing lock is also held by a downgrade,
    /// so a release never races a credential that is about to change.
    live: Liveness,
}

impl<S: Store> Hold<S> {
    /// A hold on `name` with `cred` until `deadline`, renewed by a watchdog every `ttl / 3`, up
    /// to `max_hold` from now if set (`Options::max_hold`).
    pub(crate) fn start(
        rw: Leases<S>,
        name: &str,
        cred: Credential,
        ttl: Duration,
        deadline: Instant,
    ) -> Arc<Self> {
        let observed = match &cred {
            Credential::Read(_) => observe::Hold::new("read", name, None),
            Credential::Write(lease) => observe::Hold::new("write", name, Some(lease.fence())),
        };
        let hold = Arc::new(Hold {
            rw,
            name: name.to_owned(),
            ttl,
            cred: Mutex::new(cred),
            downgrading: Mutex::new(None),
            live: Liveness::new(Some(deadline)).observed(observed),
        });
        if let Some(max_hold) = hold.rw.options().max_hold {
            hold.live.renew_until(Instant::now() + max_hold);
        }
        let handle = tairlock::blocking::spawn_handle(hold.rw.store().runtime())
            .spawn(watchdog(hold.clone()))
            .abort_handle();
        hold.live.set_watchdog(handle);
        hold
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn leases(&self) -> &Leases<S> {
        &self.rw
    }

    pub(crate) fn credential(&self) -> Credential {
        self.cred.lock().clone()
    }

    pub(crate) fn is_write(&self) -> bool {
        matches!(*self.cred.lock(), Credential::Write(_))
    }

    /// The local deadline of the credential in effect (moved by every renewal).
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.live.deadline()
    }

    /// Lost: a renewal found the lease gone, or its local deadline passed without a renewal.
    pub(crate) fn is_lost(&self) -> bool {
        self.live.is_lost()
    }

    /// Resolves when the hold is lost.
    pub(crate) async fn lost(&self) {
        self.live.lost().await;
    }

    /// One renewal asking for `ttl`, with the renewal lock held: the pending one if its reply
    /// was lost (same nonce, length and first send), else a new one.
    async fn renew_once(&self, ttl: Duration) -> Result<Renewal> {
        let attempt = self.live.renewal_attempt(ttl);
        let outcome = match self.credential() {
            // A reader's renewal is keyed by its own nonce: a repeat simply renews again.
            Credential::Read(nonce) => self
                .rw
                .read_renew_as(&self.name, &nonce, attempt.ttl, attempt.sent)
                .await
                .map(|renewed| renewed.map(|r| (None, r.deadline()))),
            Credential::Write(lease) => self
                .rw
                .write_renew_as(
                    &self.name,
                    &lease,
                    attempt.ttl,
                    attempt.nonce.clone(),
                    attempt.sent,
                )
                .await
                .map(|renewed| renewed.map(|w| (Some(w.lease().clone()), w.deadline()))),
        };
        self.live.renewal_outcome(&outcome);
        Ok(match outcome? {
            Some((write, deadline)) => {
                if let Some(lease) = write {
                    *self.cred.lock() = Credential::Write(lease);
                }
                // Dated from the first send of this renewal, for the time its answer reports
                // the lease has left; a reply that lands after the old deadline marks the hold
                // lost for good.
                self.live.renewed(Some(deadline))
            }
            None => Renewal::Lost,
        })
    }

    /// Before a release or a downgrade: if a renewal's reply was lost, repeat it once (same
    /// nonce) to learn the lease in effect, so that what is presented next matches. Call with
    /// the renewal lock held.
    async fn settle_pending(&self) {
        if let Some(pending) = self.live.pending_renewal() {
            let _ = self.renew_once(pending.ttl).await;
        }
    }

    /// Stop renewing and give the lease back (and the reader of a downgrade whose outcome is
    /// unknown); `background` for a dropped guard's release, which nobody waits for.
    pub(crate) async fn release(&self, background: bool) -> Result<Release> {
        self.live.stop_watchdog().await;
        {
            let _in_flight = self.live.renewing().await;
            self.settle_pending().await;
        }
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
                let unlock = if self.rw.options().fair {
                    self.rw.fair_write_release(&self.name, &lease).await
                } else {
                    self.rw.write_release(&self.name, &lease).await
                };
                unlock.map(|unlock| match unlock {
                    Unlock::Released => Release::Released,
                    _ => Release::Lost,
                })
            }
        };
        let downgrading = self.downgrading.lock().take();
        let outcome = match downgrading {
            None => outcome,
            Some(nonce) => {
                let reader = self.rw.read_release(&self.name, &nonce).await;
                match (outcome, reader) {
                    (Ok(Release::Released), _) | (_, Ok(true)) => Ok(Release::Released),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                    (Ok(release), Ok(false)) => Ok(release),
                }
            }
        };
        self.live.mark_lost();
        self.live.released(
            match &outcome {
                Ok(Release::Lost) => ReleaseOutcome::NotHeld,
                Ok(_) => ReleaseOutcome::Released,
                Err(e) => ReleaseOutcome::Failed(e),
            },
            background,
        );
        outcome
    }

    /// Turn the write lease into a read lease, atomically on the server.
    pub(crate) async fn downgrade(&self) -> Result<()> {
        let _in_flight = self.live.renewing().await;
        self.settle_pending().await;
        let Credential::Write(lease) = self.credential() else {
            return Err(Error::new(
                ErrorKind::InvalidInput,
                format!("cannot downgrade {}: this hold is a read lock", self.name),
            ));
        };
        // Never past `Options::max_hold`: the read lease ends with the bound too.
        let ttl = self
            .live
            .capped_ttl(self.ttl)
            .unwrap_or(Duration::from_millis(1));
        let nonce = tairlock::new_nonce();
        // Until the answer settles it, the server may hold the write lease or the new reader;
        // if this future is dropped or gets no answer, the release gives back both.
        *self.downgrading.lock() = Some(nonce.clone());
        let outcome = self
            .rw
            .downgrade_lease(&self.name, &lease, &nonce, ttl)
            .await;
        if !matches!(&outcome, Err(e) if e.is_unanswered()) {
            *self.downgrading.lock() = None;
        }
        match outcome? {
            Some(read) => {
                *self.cred.lock() = Credential::Read(nonce);
                self.live.set_deadline(Some(read.deadline()));
                Ok(())
            }
            None => {
                self.live.mark_lost();
                Err(Error::new(
                    ErrorKind::LeaseLost,
                    format!("cannot downgrade {}: the write lease is gone", self.name),
                ))
            }
        }
    }
}

async fn watchdog<S: Store>(hold: Arc<Hold<S>>) {
    let hold = &hold;
    hold.live
        .watchdog(hold.ttl / 3, || async move {
            // Past `Options::max_hold`, renew no more; before it, never past it.
            let Some(ttl) = hold.live.capped_ttl(hold.ttl) else {
                return Renewal::Stop;
            };
            // No answer: repeated with the same nonce until one comes or the deadline passes.
            hold.renew_once(ttl).await.unwrap_or(Renewal::Retry)
        })
        .await;
}
