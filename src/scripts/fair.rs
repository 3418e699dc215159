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

fn check_all(db: &mut Db, keys: &[String]) -> CommandResult<u64> {
    string_or_none(db, &keys[0], "lock")?;
    string_or_none(db, &keys[1], "fence")?;
    check(db, &keys[2], "zset", "queue")?;
    check(db, &keys[3], "hash", "waiters")?;
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
    let last = check_all(db, keys)?;
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
        leave(db, keys, nonce.as_bytes())?;
        let pttl = db.pttl(&keys[0]);
        Ok(Reply::Array(vec![
            Reply::Int(1),
            Reply::data(lease),
            Reply::Int(pttl),
        ]))
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
    while let Some(head) = head(db, &keys[2])? {
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
    // Nobody queued and no grant pending: the fence, the queue and the grant record are neither
    // checked nor read (as the script).
    let queued =
        db.exists(&keys[2]) || db.exists(&keys[3]) || keys.get(4).is_some_and(|k| db.exists(k));
    string_or_none(db, &keys[0], "lock")?;
    if queued {
        string_or_none(db, &keys[1], "fence")?;
        check(db, &keys[2], "zset", "queue")?;
        check(db, &keys[3], "hash", "waiters")?;
    }
    let grants = keys.get(4).filter(|_| queued);
    let grant_type = match grants {
        Some(key) => string_or_none(db, key, "grant")?,
        None => "none",
    };
    let last = if queued {
        read_fence(db, &keys[1])?.unwrap_or(0)
    } else {
        0
    };
    let cur = db.get(&keys[0])?;
    if cur
        .as_ref()
        .is_some_and(|c| !c.starts_with(LEASE_PREFIX.as_bytes()))
    {
        return Err(not_a_lease());
    }
    if let Some(key) = grants.filter(|_| grant_type == "string") {
        grant_record(db, key)?;
    }
    let now = now_us(db);
    let now_ms = now / 1000;
    let pair = |a, b| Ok(Reply::Array(vec![Reply::Int(a), Reply::Int(b)]));
    let ours = if args[1] == "nonce" {
        let was_first = cur.is_none()
            && first_live(db, keys, now_ms)?.is_some_and(|(head, _, _)| head == args[0].as_bytes());
        leave(db, keys, args[0].as_bytes())?;
        if was_first && let Some((_, _, channel)) = first_live(db, keys, now_ms)? {
            db.publish(&channel);
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
    if let Some(key) = grants.filter(|_| grant_type == "string") {
        db.del(key);
    }
    let retention = int_arg(args, 2)? as u64;
    if let Some((head, wl, channel)) = first_live(db, keys, now_ms)? {
        leave(db, keys, &head)?;
        let fence = (last + 1).max(now);
        let nonce = String::from_utf8_lossy(&head);
        let lease = format_lease(now_ms + wl, fence, &nonce);
        db.set(&keys[0], lease.clone(), Some(Duration::from_millis(wl)));
        db.set(
            &keys[1],
            fence.to_string(),
            Some(Duration::from_millis(wl + retention)),
        );
        if let Some(key) = grants {
            db.set(
                key,
                format!("{nonce}:{channel}"),
                Some(Duration::from_millis(wl)),
            );
        }
        db.publish_message(&channel, &grant_message(wl, &lease));
        return pair(1, 1);
    }
    db.publish(&args[3]);
    pair(1, 0)
}

/// The first live waiter (nonce, waiter lease, wake channel); waiters whose place lapsed are
/// dropped on the way.
fn first_live(
    db: &mut Db,
    keys: &[String],
    now_ms: u64,
) -> CommandResult<Option<(Vec<u8>, u64, String)>> {
    while let Some(head) = head(db, &keys[2])? {
        if let Some((ends, wl, channel)) = db.hget(&keys[3], &head)?.and_then(|raw| entry(&raw))
            && ends > now_ms
        {
            return Ok(Some((head, wl, channel)));
        }
        leave(db, keys, &head)?;
    }
    Ok(None)
}

/// A grant record (`<nonce>:<wake channel>`, see [`FAIR_UNLOCK`]) at `key`, a string: its nonce
/// and channel, or NOTLOCK when it is not one.
pub(crate) fn grant_record(db: &mut Db, key: &str) -> CommandResult<(String, String)> {
    let raw = db.get(key)?.unwrap_or_default();
    let text = String::from_utf8_lossy(&raw);
    match text.split_once(':') {
        Some((nonce, channel))
            if !nonce.is_empty() && nonce.bytes().all(|b| b.is_ascii_hexdigit()) =>
        {
            Ok((nonce.to_owned(), channel.to_owned()))
        }
        _ => Err(CommandError::new(
            "NOTLOCK",
            "grant key holds a value that is not a grant record",
        )),
    }
}
