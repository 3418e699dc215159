//! The deadline audit for tests against a real server: an [`Intercept`] hook on a client's
//! store that, at every grant or renewal the server answers, reads where that lease stands on
//! the server (on a connection of its own, started right after the reply, in the background so
//! that the client's call is not slowed) and keeps the latest end it can bound from above, by
//! lease. A test then holds each guard's local deadline against it: [`DeadlineAudit::check`].
//! The read and its bound are the race's ([`tairlock_testing::race::audit`]): the lease ends no
//! later than the read's receive time + (its end − `TIME`), both read in one script.
//!
//! Until the read of the latest answer for a lease is back, nothing is known of that lease (a
//! reader's lease keeps its nonce across renewals: an older read must not stand for a newer
//! deadline). A lease held as a value that is gone when read tells nothing either: a renewal
//! that the server applied but whose answer is still on its way replaces the value (the lease
//! goes on under the new one); a reader's lease is renewed in place, so a reader gone when read
//! had ended by then.
//!
//! Scripts it audits, by name, with where their lease is: the expire lock's `expire_lock` and
//! `renew` (and the RwLock writer's, which are the core's `renew` on the writer key),
//! `rw_write_acquire`, `rw_fair_write_acquire`, `rw_read_acquire`, `rw_read_renew`,
//! `legacy_acquire` and `legacy_renew`. Only element 0 (the outcome) and, for string leases,
//! element 1 (the lease) of a reply are read, so a reply that also carries the lease's remaining
//! time reads the same.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tairlock::store::intercept::{Answer, Command, Hook, Intercept, Run};
use tairlock::{RedisStore, Reply};
use tairlock_testing::race::audit::{self, LeaseAt, ServerEnd};
use tairlock_testing::race::sim::Timer;
use tokio::time::Instant;

/// A client store whose grants and renewals are audited.
pub type Audited = Intercept<RedisStore, DeadlineAudit>;

/// What the audit knows of one lease: the latest end it bounded, and when it read it.
#[derive(Debug, Clone, Copy)]
pub struct Bound {
    /// The lease ends no later than this (`None`: nothing is known yet, or the read failed).
    pub ends_by: Option<Instant>,
    /// The lease was gone when read.
    pub gone: bool,
    /// Whether the read came back (answered or failed); until then nothing is known.
    pub read: bool,
    /// When the read came back.
    pub read_at: Instant,
    /// The answer it stands for: only the latest answer's read is kept.
    seq: u64,
}

/// A late deadline: a guard's local deadline later than its lease's end on the server.
#[derive(Debug, Clone)]
pub struct Late {
    /// The lease (its value, or a reader's nonce).
    pub lease: String,
    /// By how much the deadline passes the end.
    pub by: Duration,
    /// What the audit read.
    pub bound: Bound,
    /// The grant's attempts under its nonce that got no answer before it, and when the first
    /// of them was sent (a repeated acquire finds the lease the first one made).
    pub unanswered: Option<(u64, Instant)>,
}

impl std::fmt::Display for Late {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:?} later than its lease's end on the server (lease {}, {}read {:?} ago",
            self.by,
            self.lease,
            if self.bound.gone { "gone when " } else { "" },
            self.bound.read_at.elapsed()
        )?;
        if let Some((n, first)) = self.unanswered {
            write!(
                f,
                "; granted after {n} unanswered attempt(s) under its nonce, the first sent {:?} \
                 ago",
                first.elapsed()
            )?;
        }
        f.write_str(")")
    }
}

/// The hook; see the [module docs](self). Cheap to clone (shared state).
#[derive(Debug, Clone)]
pub struct DeadlineAudit {
    direct: RedisStore,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    bounds: HashMap<String, Bound>,
    /// Answers audited so far (each read is numbered by its answer).
    seq: u64,
    /// The nonce of the last reader the server admitted through this store (a read guard does
    /// not tell its nonce).
    last_reader: Option<String>,
    /// Acquire attempts that got no answer, by nonce: how many, and when the first was sent.
    unanswered: HashMap<String, (u64, Instant)>,
    /// Grants and renewals audited, reads that failed.
    audited: u64,
    unread: u64,
}

impl DeadlineAudit {
    /// An audit reading leases on `direct` (a connection that bypasses any fault proxy).
    pub fn new(direct: RedisStore) -> Self {
        DeadlineAudit {
            direct,
            state: Arc::default(),
        }
    }

    /// `store` with this audit around it.
    pub fn wrap(&self, store: RedisStore) -> Audited {
        Intercept::new(store, self.clone())
    }

    /// The nonce of the last reader the server admitted through an audited store, taken.
    pub fn take_last_reader(&self) -> Option<String> {
        self.lock().last_reader.take()
    }

    /// What the audit knows of `lease` now (its value, or a reader's nonce).
    pub fn bound(&self, lease: &str) -> Option<Bound> {
        self.lock().bounds.get(lease).copied()
    }

    /// Wait until the audit has read `lease` since its latest grant or renewal (at most 5 s).
    pub async fn settled(&self, lease: &str) -> Option<Bound> {
        let give_up = Instant::now() + Duration::from_secs(5);
        loop {
            let bound = self.bound(lease);
            if bound.is_some_and(|b| b.read) || Instant::now() >= give_up {
                return bound;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// (grants and renewals audited, of which the read failed).
    pub fn counts(&self) -> (u64, u64) {
        let s = self.lock();
        (s.audited, s.unread)
    }

    /// Hold `deadline` (a guard's local deadline for the lease `lease`: its value, or a
    /// reader's nonce) against the latest end the audit bounded for that lease: `Some` when it
    /// is later. Nothing is known (`None`) for a lease the audit has not read.
    pub fn check(&self, lease: &str, deadline: Instant) -> Option<Late> {
        let s = self.lock();
        let bound = *s.bounds.get(lease)?;
        let ends_by = bound.ends_by?;
        // A value lease `tl1:<expiry>:<fence>:<nonce>` ends with its nonce; a reader's is one.
        let nonce = lease.rsplit(':').next().unwrap_or(lease);
        (deadline > ends_by).then(|| Late {
            lease: lease.to_owned(),
            by: deadline - ends_by,
            bound,
            unanswered: s.unanswered.get(nonce).copied(),
        })
    }

    /// An acquire attempt of script `name` got no answer: note it under its nonce.
    fn unanswered(&self, name: &str, args: &[String], sent: Instant) {
        let nonce = match name {
            "expire_lock" => args.get(1),
            "rw_read_acquire" | "rw_write_acquire" | "rw_fair_write_acquire" => args.first(),
            _ => None,
        };
        if let Some(nonce) = nonce {
            let mut s = self.lock();
            let entry = s.unanswered.entry(nonce.clone()).or_insert((0, sent));
            entry.0 += 1;
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An answer of script `name` came back: if it granted or renewed a lease, forget what
    /// was known of that lease (before the caller sees the answer) and read it again in the
    /// background.
    fn audit(&self, name: &str, keys: &[String], args: &[String], reply: &Reply) {
        let Some((id, at)) = granted(name, keys, args, reply) else {
            return;
        };
        let seq = {
            let mut s = self.lock();
            if name == "rw_read_acquire" {
                s.last_reader = Some(id.clone());
            }
            s.seq += 1;
            let seq = s.seq;
            s.bounds.insert(
                id.clone(),
                Bound {
                    ends_by: None,
                    gone: false,
                    read: false,
                    read_at: Instant::now(),
                    seq,
                },
            );
            seq
        };
        let member = matches!(at, LeaseAt::Member { .. });
        let this = self.clone();
        tokio::spawn(async move {
            let read = tokio::time::timeout(
                Duration::from_secs(2),
                audit::read(&this.direct, &Timer::tokio(), &at),
            )
            .await;
            let read_at = Instant::now();
            let (ends_by, gone, known) = match read {
                Ok(Ok(ServerEnd::By(end))) => (Some(end), false, true),
                Ok(Ok(ServerEnd::Never)) => (None, false, true),
                Ok(Ok(ServerEnd::Gone(at))) if member => (Some(at), true, true),
                Ok(Ok(ServerEnd::Gone(_))) => (None, true, true),
                _ => (None, false, false),
            };
            let mut s = this.lock();
            s.audited += 1;
            if !known {
                s.unread += 1;
            }
            if s.bounds.get(&id).is_some_and(|b| b.seq == seq) {
                s.bounds.insert(
                    id,
                    Bound {
                        ends_by,
                        gone,
                        read: true,
                        read_at,
                        seq,
                    },
                );
            }
        });
    }
}

/// The lease a grant or renewal reply of script `name` names, and where it is: `None` when the
/// reply is no grant (busy, not held) or the script grants nothing.
fn granted(
    name: &str,
    keys: &[String],
    args: &[String],
    reply: &Reply,
) -> Option<(String, LeaseAt)> {
    let items = reply.as_array()?;
    if items.first()?.as_int()? != 1 {
        return None;
    }
    let value = || items.get(1).and_then(Reply::as_str).map(str::to_owned);
    match name {
        "expire_lock"
        | "renew"
        | "rw_write_acquire"
        | "rw_fair_write_acquire"
        | "legacy_acquire"
        | "legacy_renew" => {
            let value = value()?;
            let key = keys.first()?.clone();
            Some((
                value.clone(),
                LeaseAt::Value {
                    key,
                    value: value.into_bytes(),
                },
            ))
        }
        "rw_read_acquire" | "rw_read_renew" => {
            let key = if name == "rw_read_acquire" {
                keys.get(1)?
            } else {
                keys.first()?
            };
            let nonce = args.first()?.clone();
            Some((
                nonce.clone(),
                LeaseAt::Member {
                    key: key.clone(),
                    member: nonce.into_bytes(),
                },
            ))
        }
        _ => None,
    }
}

impl Hook for DeadlineAudit {
    fn around<'a>(&'a self, command: Command<'a>, run: Run<'a>) -> Run<'a> {
        match command {
            Command::Eval { script, keys, args } => Box::pin(async move {
                let sent = Instant::now();
                let out = run.await;
                match &out {
                    Ok(Answer::Reply(reply) | Answer::Acked(reply, _)) => {
                        self.audit(script.name(), keys, args, reply);
                    }
                    Err(e) if e.is_unanswered() => self.unanswered(script.name(), args, sent),
                    _ => {}
                }
                out
            }),
            _ => run,
        }
    }
}
