//! `WATCH` on the embedded store: snapshots compared inside one atomic step.

use std::time::Duration;

use tairlock::script::{CommandError, Db};
use tairlock::{MemoryStore, Reply, Result};

use super::store::{Expiry, Read, TxOp, WatchConnection, WatchStore};

impl WatchStore for MemoryStore {
    type Connection = MemoryWatch;

    async fn watch_connection(&self) -> Result<MemoryWatch> {
        Ok(MemoryWatch {
            store: self.clone(),
            watched: Vec::new(),
        })
    }

    async fn server_version(&self) -> Result<Option<String>> {
        Ok(None)
    }
}

/// A [`WatchConnection`] on a [`MemoryStore`]: `WATCH` takes snapshots, `EXEC` compares them
/// and applies the queued commands under the store's one lock. See
/// [`WatchStore`](super::WatchStore) for how this differs from a server.
#[derive(Debug)]
pub struct MemoryWatch {
    store: MemoryStore,
    watched: Vec<(String, Snapshot)>,
}

/// What `WATCH` remembers of a key: enough to see any change a lock cares about.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Snapshot {
    key_type: &'static str,
    value: Option<Vec<u8>>,
    expires_at_ms: Option<u64>,
}

fn snapshot(db: &mut Db, key: &str) -> Snapshot {
    let key_type = db.key_type(key);
    let value = if key_type == "string" {
        db.get(key).ok().flatten()
    } else {
        None
    };
    let pttl = db.pttl(key);
    let expires_at_ms = (pttl >= 0).then(|| db.now().as_millis() as u64 + pttl as u64);
    Snapshot {
        key_type,
        value,
        expires_at_ms,
    }
}

/// `TTL key`: whole seconds, rounded to the nearest as the server does.
fn ttl_secs(db: &mut Db, key: &str) -> i64 {
    match db.pttl(key) {
        ms if ms < 0 => ms,
        ms => (ms + 500) / 1000,
    }
}

fn read(db: &mut Db, read: &Read) -> Result<Reply, CommandError> {
    Ok(match read {
        Read::Get(key) => db.get(key)?.map_or(Reply::Nil, Reply::Data),
        Read::Pttl(key) => Reply::Int(db.pttl(key)),
        Read::Ttl(key) => Reply::Int(ttl_secs(db, key)),
        Read::Time => {
            let (secs, micros) = db.time();
            Reply::Array(vec![
                Reply::data(secs.to_string()),
                Reply::data(micros.to_string()),
            ])
        }
    })
}

fn apply(db: &mut Db, op: &TxOp) -> Result<Reply, CommandError> {
    let now_ms = db.now().as_millis() as u64;
    // PEXPIREAT at or before now deletes the key, as on the server.
    let ttl = |e: &Expiry| match *e {
        Expiry::Millis(ms) => Duration::from_millis(ms),
        Expiry::Seconds(s) => Duration::from_secs(s),
        Expiry::At(at) => Duration::from_millis(at.saturating_sub(now_ms)),
    };
    Ok(match op {
        TxOp::Set {
            key,
            value,
            expiry,
            xx,
        } => {
            if (*xx && matches!(expiry, Expiry::Seconds(_))) || matches!(expiry, Expiry::At(_)) {
                return Err(CommandError::new("ERR", "syntax error"));
            }
            if ttl(expiry).is_zero() {
                return Err(CommandError::new(
                    "ERR",
                    "invalid expire time in 'set' command",
                ));
            }
            if *xx && !db.exists(key) {
                Reply::Nil
            } else {
                db.set(key, value.clone(), Some(ttl(expiry)));
                Reply::Status("OK".to_owned())
            }
        }
        TxOp::Del { key } => Reply::Int(i64::from(db.del(key))),
        TxOp::Incr { key } => Reply::Int(db.incr_by(key, 1)?),
        TxOp::Expire { key, expiry } => Reply::Int(i64::from(db.pexpire(key, ttl(expiry)))),
        TxOp::Pttl { key } => Reply::Int(db.pttl(key)),
        TxOp::Ttl { key } => Reply::Int(ttl_secs(db, key)),
    })
}

impl WatchConnection for MemoryWatch {
    async fn watch(&mut self, keys: &[String], reads: &[Read]) -> Result<Vec<Reply>> {
        let (snaps, replies) = self.store.atomically(|db| {
            let snaps: Vec<_> = keys.iter().map(|k| (k.clone(), snapshot(db, k))).collect();
            let replies: Result<Vec<_>, CommandError> = reads.iter().map(|r| read(db, r)).collect();
            (snaps, replies)
        });
        self.watched = snaps;
        Ok(replies?)
    }

    async fn unwatch(&mut self) -> Result<()> {
        self.watched.clear();
        Ok(())
    }

    async fn exec(&mut self, ops: &[TxOp]) -> Result<Option<Vec<Reply>>> {
        let watched = std::mem::take(&mut self.watched);
        let outcome = self.store.atomically(|db| {
            if watched.iter().any(|(k, snap)| snapshot(db, k) != *snap) {
                return None;
            }
            // Like EXEC: every queued command runs, errors do not roll the others back.
            Some(ops.iter().map(|op| apply(db, op)).collect::<Vec<_>>())
        });
        match outcome {
            None => Ok(None),
            Some(replies) => {
                let mut out = Vec::with_capacity(replies.len());
                for reply in replies {
                    out.push(reply?);
                }
                Ok(Some(out))
            }
        }
    }
}
