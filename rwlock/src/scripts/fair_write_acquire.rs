use std::time::Duration;

use tairlock::script::{CommandError, CommandResult, Db, Reply, Script, int_arg, now_us};
use tairlock::scripts::{format_lease, read_fence};

use super::db::{ends_with_nonce, intent, reap, typed, waiter_entry, writer_lease};

/// A fair writer's attempt: take the write lock when it is free for writing and nobody live is
/// queued ahead, else queue (or refresh this writer's place); confirm a grant. Lua:
/// `fair_write_acquire.lua`.
pub static FAIR_WRITE_ACQUIRE: Script = Script::new(
    "rw_fair_write_acquire",
    concat!(
        include_str!("prelude.lua"),
        include_str!("fair_write_acquire.lua")
    ),
    native,
);

/// The script's state, as the Lua's locals.
struct Run<'a> {
    keys: &'a [String],
    args: &'a [String],
    intent: Option<Vec<u8>>,
    fair_intent: bool,
    intent_ms: i64,
    wl: u64,
    now_us: u64,
    now: u64,
}

impl Run<'_> {
    fn nonce(&self) -> &str {
        &self.args[0]
    }

    fn leave(&self, db: &mut Db, who: &[u8]) -> CommandResult<()> {
        db.zrem(&self.keys[4], who)?;
        db.hdel(&self.keys[5], who)?;
        Ok(())
    }

    fn queue(&self, db: &mut Db) -> CommandResult<()> {
        if self.args[6] != "1" {
            return Ok(());
        }
        let nonce = self.nonce().as_bytes();
        if db.zscore(&self.keys[4], nonce)?.is_none() {
            db.zadd(&self.keys[4], self.now_us as f64, nonce)?;
        }
        let entry = format!("{}:{}:{}", self.now + self.wl, self.wl, self.args[5]);
        db.hset(&self.keys[5], nonce, entry)?;
        for key in &self.keys[4..6] {
            if db.pttl(key) < self.wl as i64 {
                db.pexpire(key, Duration::from_millis(self.wl));
            }
        }
        Ok(())
    }

    /// The first live queued writer and its place's end; dead ones are dropped (with their
    /// intent).
    fn head(&mut self, db: &mut Db) -> CommandResult<Option<(Vec<u8>, u64)>> {
        loop {
            let Some((first, _)) = db
                .zrange_by_score(&self.keys[4], f64::NEG_INFINITY, f64::INFINITY)?
                .into_iter()
                .next()
            else {
                return Ok(None);
            };
            let ends = db
                .hget(&self.keys[5], &first)?
                .and_then(|raw| waiter_entry(&raw));
            if let Some((ends, _, _)) = ends
                && ends > self.now
            {
                return Ok(Some((first, ends)));
            }
            self.leave(db, &first)?;
            if self.intent.as_deref() == Some(&first[..]) {
                db.del(&self.keys[2]);
                self.intent = None;
                self.fair_intent = false;
            }
        }
    }

    fn raise_intent(&mut self, db: &mut Db, against_readers: bool) -> CommandResult<()> {
        if self.args[6] != "1"
            || self.intent_ms <= 0
            || (self.intent.is_some() && !self.fair_intent)
        {
            return Ok(());
        }
        let Some((first, _)) = self.head(db)? else {
            return Ok(());
        };
        let ms = Duration::from_millis(self.intent_ms as u64);
        db.set(&self.keys[2], first, Some(ms));
        if self.intent.is_none()
            && against_readers
            && let Some(channel) = self.args.get(7)
        {
            db.publish(channel);
        }
        Ok(())
    }

    fn take(&mut self, db: &mut Db, fence: u64) -> CommandResult<Reply> {
        let ttl = int_arg(self.args, 1)? as u64;
        let retention = int_arg(self.args, 3)? as u64;
        let lease = format_lease(self.now + ttl, fence, self.nonce());
        db.set(
            &self.keys[0],
            lease.clone(),
            Some(Duration::from_millis(ttl)),
        );
        db.set(
            &self.keys[3],
            fence.to_string(),
            Some(Duration::from_millis(ttl + retention)),
        );
        self.leave(db, self.nonce().as_bytes())?;
        if self.intent.as_deref() == Some(self.nonce().as_bytes()) || self.fair_intent {
            match self.head(db)? {
                Some((first, _)) if self.intent_ms > 0 => {
                    let ms = Duration::from_millis(self.intent_ms as u64);
                    db.set(&self.keys[2], first, Some(ms));
                }
                _ => {
                    db.del(&self.keys[2]);
                }
            }
        }
        Ok(Reply::Array(vec![
            Reply::Int(1),
            Reply::data(lease),
            Reply::Int(db.pttl(&self.keys[0])),
        ]))
    }
}

fn refused(blocker: &str, pttl: i64, readers: i64) -> Reply {
    Reply::Array(vec![
        Reply::Int(0),
        Reply::data(blocker),
        Reply::Int(pttl),
        Reply::Int(readers),
    ])
}

fn native(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let (w, r, wi, fence_key) = (&keys[0], &keys[1], &keys[2], &keys[3]);
    typed(db, w, "string", "writer")?;
    typed(db, r, "zset", "readers")?;
    typed(db, wi, "string", "intent")?;
    typed(db, fence_key, "string", "fence")?;
    typed(db, &keys[4], "zset", "queue")?;
    typed(db, &keys[5], "hash", "waiters")?;
    let last = read_fence(db, fence_key)?.unwrap_or(0);
    let writer = writer_lease(db, w)?;
    let intent = intent(db, wi)?;
    let fair_intent = match &intent {
        Some(i) => db.hget(&keys[5], i)?.is_some(),
        None => false,
    };
    let now_us = now_us(db);
    let mut run = Run {
        keys,
        args,
        intent,
        fair_intent,
        intent_ms: int_arg(args, 2)?,
        wl: int_arg(args, 4)? as u64,
        now_us,
        now: now_us / 1000,
    };
    if let Some(cur) = writer {
        if ends_with_nonce(&cur, run.nonce()) {
            // Lua: `^tl1:%d+:(%d+):`.
            let digits = |p: &&str| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit());
            let fence = std::str::from_utf8(&cur)
                .ok()
                .map(|v| v.split(':').collect::<Vec<_>>())
                .filter(|parts| parts.len() >= 4 && digits(&parts[1]))
                .and_then(|parts| Some(parts[2]).filter(digits))
                .and_then(|f| f.parse().ok())
                .ok_or_else(|| {
                    CommandError::new(
                        "NOTLOCK",
                        "writer key holds a value that is not a tairlock lease",
                    )
                })?;
            return run.take(db, fence);
        }
        run.queue(db)?;
        run.raise_intent(db, false)?;
        return Ok(refused("writer", db.pttl(w), 0));
    }
    reap(db, r, run.now)?;
    let readers = db.zcard(r)? as i64;
    if let Some((first, ends)) = run.head(db)?
        && first != run.nonce().as_bytes()
    {
        run.queue(db)?;
        run.raise_intent(db, readers > 0)?;
        return Ok(refused("intent", (ends - run.now) as i64, readers));
    }
    if run
        .intent
        .as_deref()
        .is_some_and(|i| i != run.nonce().as_bytes())
        && !run.fair_intent
    {
        run.queue(db)?;
        return Ok(refused("intent", db.pttl(wi), readers));
    }
    if readers == 0 {
        return run.take(db, (last + 1).max(now_us));
    }
    run.queue(db)?;
    run.raise_intent(db, true)?;
    if run.intent_ms <= 0
        && args.get(9).is_some_and(|a| a == "1")
        && let Some(channel) = args.get(7)
    {
        // Reader preference: no intent, only the hint to give back idle holds.
        db.publish(channel);
    }
    Ok(refused("readers", db.pttl(r), readers))
}
