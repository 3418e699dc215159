//! The fair mode's two scripts: [`FAIR_LOCK`] and [`FAIR_UNLOCK`], native bodies mirroring the
//! Lua line for line.

use std::time::Duration;

use super::format::{LEASE_PREFIX, format_lease, not_a_lease, read_fence};
use crate::script::{
    CommandError, CommandResult, Db, Reply, Script, int_arg, now_us, string_or_none,
};

/// Take the lock if free and nobody live is queued ahead, else queue. Lua: `fair_lock.lua`.
pub static FAIR_LOCK: Script = Script::new(
    "fair_lock",
    concat!(include_str!("prelude.lua"), include_str!("fair_lock.lua")),
    lock,
);

/// Release (or leave the queue) and grant to the next waiter. Lua: `fair_unlock.lua`.
pub static FAIR_UNLOCK: Script = Script::new(
    "fair_unlock",
    concat!(include_str!("prelude.lua"), include_str!("fair_unlock.lua")),
    unlock,
);

/// `TYPE` must be `none` or `want`.
fn check(db: &mut Db, key: &str, want: &str, what: &str) -> CommandResult<()> {
    match db.key_type(key) {
        "none" => Ok(()),
        t if t == want => Ok(()),
        other => Err(CommandError::new(
            "WRONGTYPE",
            format!("{what} key holds a {other}"),
        )),
    }
}

/// Whether anybody is queued: the queue's keys exist (`EXISTS queue waiters > 0`).
fn anybody_queued(db: &mut Db, keys: &[String]) -> bool {
    db.exists(&keys[2]) || db.exists(&keys[3])
}

/// Check the types of the keys a script touches — the lock's, the fence's with `fence`, the
/// queue's with `queued` — then read the last fencing token (0 without `fence`).
fn check_all(db: &mut Db, keys: &[String], fence: bool, queued: bool) -> CommandResult<u64> {
    string_or_none(db, &keys[0], "lock")?;
    if fence {
        string_or_none(db, &keys[1], "fence")?;
    }
    if queued {
        check(db, &keys[2], "zset", "queue")?;
        check(db, &keys[3], "hash", "waiters")?;
    }
    if !fence {
        return Ok(0);
    }
    Ok(read_fence(db, &keys[1])?.unwrap_or(0))
}

/// A waiter's entry: (lease end ms, lease ms, wake channel).
fn entry(raw: &[u8]) -> Option<(u64, u64, String)> {
    let text = std::str::from_utf8(raw).ok()?;
    let mut parts = text.splitn(3, ':');
    let ends = parts.next()?.parse().ok()?;
    let wl = parts.next()?.parse().ok()?;
    Some((ends, wl, parts.next()?.to_owned()))
}

fn head(db: &mut Db, queue: &str) -> CommandResult<Option<Vec<u8>>> {
    Ok(db
        .zrange_by_score(queue, f64::NEG_INFINITY, f64::INFINITY)?
        .into_iter()
        .next()
        .map(|(member, _)| member))
}

fn leave(db: &mut Db, keys: &[String], who: &[u8]) -> CommandResult<()> {
    db.zrem(&keys[2], who)?;
    db.hdel(&keys[3], who)?;
    Ok(())
}

/// The fencing token of a lease value (`tl1:<expiry>:<fence>:<nonce>`).
fn fence_of(lease: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(lease).ok()?;
    text.strip_prefix(LEASE_PREFIX)?
        .split(':')
        .nth(1)?
        .parse()
        .ok()
}

fn lock(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let queued = anybody_queued(db, keys);
    let last = check_all(db, keys, true, queued)?;
    let ttl = int_arg(args, 0)? as u64;
    let nonce = &args[1];
    let retention = int_arg(args, 2)? as u64;
    let wl = int_arg(args, 3)? as u64;
    let now = now_us(db);
    let now_ms = now / 1000;
    let queue = |db: &mut Db| -> CommandResult<()> {
        if args[5] != "1" {
            return Ok(());
        }
        if db.zscore(&keys[2], nonce.as_bytes())?.is_none() {
            db.zadd(&keys[2], now as f64, nonce.as_bytes())?;
        }
        let value = format!("{}:{wl}:{}", now_ms + wl, args[4]);
        db.hset(&keys[3], nonce.as_bytes(), value)?;
        for key in &keys[2..4] {
            if db.pttl(key) < wl as i64 {
                db.pexpire(key, Duration::from_millis(wl));
            }
        }
        Ok(())
    };
    let take = |db: &mut Db, fence: u64| -> CommandResult<Reply> {
        let lease = format_lease(now_ms + ttl, fence, nonce);
        db.set(&keys[0], lease.clone(), Some(Duration::from_millis(ttl)));
        db.set(
            &keys[1],
            fence.to_string(),
            Some(Duration::from_millis(ttl + retention)),
        );
        if queued {
            leave(db, keys, nonce.as_bytes())?;
        }
        Ok(Reply::Array(vec![Reply::Int(1), Reply::data(lease)]))
    };
    if let Some(cur) = db.get(&keys[0])? {
        if !cur.starts_with(LEASE_PREFIX.as_bytes()) {
            return Err(not_a_lease());
        }
        if cur.ends_with(format!(":{nonce}").as_bytes()) {
            let fence = fence_of(&cur).ok_or_else(not_a_lease)?;
            return take(db, fence);
        }
        queue(db)?;
        let pttl = db.pttl(&keys[0]);
        return Ok(Reply::Array(vec![
            Reply::Int(0),
            Reply::Int(pttl),
            Reply::Int(last.max(now) as i64),
        ]));
    }
    while queued && let Some(head) = head(db, &keys[2])? {
        if head == nonce.as_bytes() {
            break;
        }
        let ends = db.hget(&keys[3], &head)?.and_then(|raw| entry(&raw));
        if let Some((ends, _, _)) = ends
            && ends > now_ms
        {
            queue(db)?;
            return Ok(Reply::Array(vec![
                Reply::Int(0),
                Reply::Int((ends - now_ms) as i64),
                Reply::Int(last.max(now) as i64),
            ]));
        }
        leave(db, keys, &head)?;
    }
    take(db, (last + 1).max(now))
}

/// The announcement of a grant of `wl` ms as `lease`: `granted:<wl>:<lease>`.
pub(crate) fn grant_message(wl: u64, lease: &str) -> String {
    format!("granted:{wl}:{lease}")
}

fn unlock(db: &mut Db, keys: &[String], args: &[String]) -> CommandResult<Reply> {
    let queued = anybody_queued(db, keys);
    let last = check_all(db, keys, queued, queued)?;
    let cur = db.get(&keys[0])?;
    if cur
        .as_ref()
        .is_some_and(|c| !c.starts_with(LEASE_PREFIX.as_bytes()))
    {
        return Err(not_a_lease());
    }
    let pair = |a, b| Ok(Reply::Array(vec![Reply::Int(a), Reply::Int(b)]));
    let ours = if args[1] == "nonce" {
        if queued {
            leave(db, keys, args[0].as_bytes())?;
        }
        let mine = format!(":{}", args[0]);
        cur.as_ref().is_some_and(|c| c.ends_with(mine.as_bytes()))
    } else {
        cur.as_deref() == Some(args[0].as_bytes())
    };
    if cur.is_none() {
        return pair(-1, 0);
    }
    if !ours {
        return pair(0, 0);
    }
    db.del(&keys[0]);
    let now = if queued { now_us(db) } else { 0 };
    let now_ms = now / 1000;
    let retention = int_arg(args, 2)? as u64;
    while queued && let Some(head) = head(db, &keys[2])? {
        let info = db.hget(&keys[3], &head)?.and_then(|raw| entry(&raw));
        leave(db, keys, &head)?;
        if let Some((ends, wl, channel)) = info
            && ends > now_ms
        {
            let fence = (last + 1).max(now);
            let nonce = String::from_utf8_lossy(&head);
            let lease = format_lease(now_ms + wl, fence, &nonce);
            db.set(&keys[0], lease.clone(), Some(Duration::from_millis(wl)));
            db.set(
                &keys[1],
                fence.to_string(),
                Some(Duration::from_millis(wl + retention)),
            );
            db.publish_message(&channel, &grant_message(wl, &lease));
            return pair(1, 1);
        }
    }
    db.publish(&args[3]);
    pair(1, 0)
}
